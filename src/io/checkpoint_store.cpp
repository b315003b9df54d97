#include "drtrain/io/checkpoint_store.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::io {
namespace fs = std::filesystem;

std::int64_t step_of(const std::string& name) {
  const std::size_t prefix = 5, suffix = 3;  // "ckpt-", ".h5"
  if (name.size() < prefix + 8 + suffix || name.rfind("ckpt-", 0) != 0 || name.substr(name.size() - suffix) != ".h5")
    return -1;
  const std::string digits = name.substr(prefix, name.size() - prefix - suffix);
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

namespace {

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw Error(str("cannot open ", path, " to sync it: ", errno_text(errno)));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw Error(str("fsync of ", path, " failed: ", errno_text(saved)));
}

}  // namespace

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%08lld.h5", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::string temporary_path(const std::string& dir, std::int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, ".ckpt-%08lld.h5.tmp", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

void prepare_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw ConfigError(str("--checkpoint-dir ", dir, ": not a directory and cannot be created",
                          ec ? ": " + ec.message() : std::string()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw ConfigError(str("--checkpoint-dir ", dir, ": not writable: ", errno_text(errno)));
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  out.reserve(found.size());
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

void publish_checkpoint(const std::string& temp, const std::string& final_path) {
  fsync_path(temp, false);
  if (std::rename(temp.c_str(), final_path.c_str()) != 0)
    throw Error(str("cannot rename ", temp, " to ", final_path, ": ", errno_text(errno)));
  fsync_path(fs::path(final_path).parent_path().string().empty() ? "." : fs::path(final_path).parent_path().string(),
             true);
}

std::vector<std::string> apply_retention(const std::string& dir, int keep) {
  std::vector<std::string> removed;
  const std::vector<std::string> all = list_checkpoints(dir);
  for (std::size_t i = static_cast<std::size_t>(std::max(keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    if (fs::remove(all[i], ec)) removed.push_back(all[i]);
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".ckpt-", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
      std::error_code rm;
      if (fs::remove(entry.path(), rm)) removed.push_back(entry.path().string());
    }
  }
  return removed;
}

}  // namespace drt::io
