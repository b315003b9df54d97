#include "publish_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::data {

io::H5Id create_temp_hdf5(const std::string& temp, const std::function<void(hid_t file)>& write_root) {
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw ConfigError(str(temp, ": cannot create: ", errno_text(errno)));
  ::close(fd);
  const hid_t id = H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) {
    std::remove(temp.c_str());
    throw ConfigError(str(temp, ": cannot create an HDF5 file: ", io::hdf5_error_stack()));
  }
  io::H5Id file(id);
  try {
    write_root(file);
  } catch (...) {
    file.reset();
    std::remove(temp.c_str());
    throw;
  }
  return file;
}

namespace {

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw ConfigError(str(path, ": cannot open to sync: ", errno_text(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && !(directory && err == EINVAL)) throw ConfigError(str(path, ": fsync failed: ", errno_text(err)));
}

}  // namespace

void publish_file(const std::string& temp, const std::string& path) {
  fsync_path(temp, false);
  if (std::rename(temp.c_str(), path.c_str()) != 0)
    throw ConfigError(str("cannot rename ", temp, " to ", path, ": ", errno_text(errno)));
  const std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_path(dir.empty() ? "." : dir, true);
}

}  // namespace drt::data
