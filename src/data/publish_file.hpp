// The life of a file the data-set writers (internal to data_hdf5: images and token streams)
// make: create_temp_hdf5 creates PATH.tmp with the root attributes; the writer fills and closes
// it; publish_file fsyncs it, renames it to PATH and fsyncs the directory, so that a file under
// the final name is always complete.
#pragma once

#include <hdf5.h>

#include <functional>
#include <string>

#include "io/hdf5.hpp"

namespace drt::data {

// Creates (truncates) `temp` as an HDF5 file and writes its root attributes with `write_root`;
// on any failure removes it and throws (ConfigError naming the file for what the system refuses).
io::H5Id create_temp_hdf5(const std::string& temp, const std::function<void(hid_t file)>& write_root);

// Throws ConfigError naming the file when a step fails.
void publish_file(const std::string& temp, const std::string& path);

}  // namespace drt::data
