// Sample sources over data held in memory: an in-memory Dataset (Fashion-MNIST's IDX files,
// synthetic images) as a SampleSource, and a view of a source's first samples (--test-samples).
#pragma once

#include <cstdint>
#include <memory>

#include "drtrain/data/dataset.hpp"
#include "drtrain/data/sample_source.hpp"

namespace drt::data {

// Takes the dataset over; read() gives pixels / 255 (the same floats as dividing each pixel).
// Throws drt::Error when the dataset's vectors are shorter than its count and size say.
std::unique_ptr<SampleSource> make_memory_source(Dataset dataset);

// The first `count` samples of `source` (all of them when count <= 0 or >= its count).
std::unique_ptr<SampleSource> make_prefix_source(std::unique_ptr<SampleSource> source, std::int64_t count);

}  // namespace drt::data
