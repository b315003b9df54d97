// Shared by the fuzz targets: a private scratch directory (in $TMPDIR, else /dev/shm, else
// /tmp) for the files the loaders under test read, removed when the process exits normally (a
// crash leaves it; scripts/fuzz_check.sh points TMPDIR at a directory it removes itself).
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace drt::fuzz {

// The directory is created on first use and removed by the static's destructor at exit.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    std::string base = "/tmp";
    if (const char* t = std::getenv("TMPDIR"); t && *t) base = t;
    else if (access("/dev/shm", W_OK) == 0) base = "/dev/shm";
    path = base + "/drt-fuzz-XXXXXX";
    if (!mkdtemp(path.data())) {
      std::perror("drt-fuzz: mkdtemp");
      std::abort();
    }
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path;
}

// Writes `size` bytes to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_file(const std::string& name, const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(("drt-fuzz: writing " + path).c_str());
    std::abort();
  }
  return path;
}

}  // namespace drt::fuzz
