// How the data-set writers (internal to data_hdf5) make a finished file visible: the file was
// written as PATH.tmp and closed; publish_file fsyncs it, renames it to PATH and fsyncs the
// directory, so that a file under the final name is always complete.
#pragma once

#include <string>

namespace drt::data {

// Throws ConfigError naming the file when a step fails.
void publish_file(const std::string& temp, const std::string& path);

}  // namespace drt::data
