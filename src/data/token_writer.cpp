#include "drtrain/data/token_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/hdf5_format.hpp"
#include "drtrain/data/token_format.hpp"
#include "hdf5_split.hpp"
#include "publish_file.hpp"

namespace drt::data {

using io::H5Id;

struct TokenWriter::Impl {
  struct Split {
    std::string name;
    std::int64_t count = 0, written = 0;
    H5Id group, tokens;
  };

  std::string path, temp;
  TokenWriterOptions options;
  std::int64_t chunk = 1;  // tokens per chunk
  H5Id file;
  std::vector<Split> splits;
  std::vector<unsigned char> buffer;  // an append in the stored type
  bool committed = false;

  [[noreturn]] void fail(const std::string& object, const std::string& problem) const {
    h5::fail(temp, object, problem);
  }
  Split& find(const std::string& name) {
    for (Split& s : splits)
      if (s.name == name) return s;
    throw Error(str("TokenWriter: the split ", name, " was not begun"));
  }
  void close_checked() {
    for (Split& s : splits)
      for (H5Id* id : {&s.tokens, &s.group}) {
        const hid_t raw = id->release();
        if (raw >= 0 && H5Oclose(raw) < 0) fail("/" + s.name, str("cannot close: ", io::hdf5_error_stack()));
      }
    const hid_t raw = file.release();
    if (raw >= 0 && H5Fclose(raw) < 0) fail("", str("cannot close (is the disk full?): ", io::hdf5_error_stack()));
  }
};

TokenWriter::TokenWriter(const std::string& path, const TokenWriterOptions& options) : impl_(std::make_unique<Impl>()) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  io::quiet_hdf5_errors();
  Impl& w = *impl_;
  w.path = path;
  w.temp = path + ".tmp";
  w.options = options;
  if (options.vocab_size < 1 || options.vocab_size > kMaxVocabulary)
    throw ConfigError(str(path, ": the vocabulary size must be in 1..", kMaxVocabulary,
                          " (token ids reach the model as float32, exact below 2^24), got ", options.vocab_size));
  if (options.compress_level < 0 || options.compress_level > 9)
    throw ConfigError(str(path, ": the gzip level must be in 0..9 (0: no compression), got ", options.compress_level));
  if (options.chunk_bytes < 1) throw ConfigError(str(path, ": the chunk size must be at least 1 byte"));
  w.chunk = std::max<std::int64_t>(1, static_cast<std::int64_t>(options.chunk_bytes / token_bytes(options.vocab_size)));

  w.file = create_temp_hdf5(w.temp, [&](hid_t file) {
    io::write_attribute(file, "drtrain_dataset", kDataFormatVersion);
    io::write_attribute(file, "vocab_size", options.vocab_size);
    if (!options.source.empty()) io::write_attribute(file, "source", options.source);
  });
}

TokenWriter::~TokenWriter() {
  if (!impl_ || impl_->committed) return;
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  impl_->splits.clear();
  impl_->file.reset();
  std::remove(impl_->temp.c_str());
}

const std::string& TokenWriter::path() const { return impl_->path; }

std::int64_t TokenWriter::chunk_tokens() const { return impl_->chunk; }

void TokenWriter::begin_split(const std::string& split, std::int64_t count) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  Impl& w = *impl_;
  DRT_ASSERT(!w.committed, "TokenWriter: begin_split after commit");
  if (split != "train" && split != "test")
    throw ConfigError(str(w.path, ": no split '", split, "': a data set's splits are train and test"));
  for (const auto& s : w.splits)
    if (s.name == split) throw ConfigError(str(w.path, ": the split ", split, " was begun already"));
  if (count < 1) throw ConfigError(str(w.path, ": /", split, ": ", count, " tokens; a stream holds at least one"));

  Impl::Split s;
  s.name = split;
  s.count = count;
  const auto n = static_cast<hsize_t>(count), k = static_cast<hsize_t>(std::min(w.chunk, count));
  s.group = H5Id(DRT_H5_CHECK(H5Gcreate2(w.file, split.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              "creating group /" + split));
  H5Id space(DRT_H5_CHECK(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  H5Id dcpl(DRT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"));
  DRT_H5_CHECK(H5Pset_chunk(dcpl, 1, &k), "H5Pset_chunk");
  if (w.options.compress_level > 0)
    DRT_H5_CHECK(H5Pset_deflate(dcpl, static_cast<unsigned>(w.options.compress_level)), "H5Pset_deflate");
  DRT_H5_CHECK(H5Pset_fletcher32(dcpl), "H5Pset_fletcher32");  // after gzip: checks the bytes on disk
  DRT_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  // Room for a few chunks, so that a chunk filled by several appends is written once.
  const std::size_t bytes = token_bytes(w.options.vocab_size);
  H5Id dapl(DRT_H5_CHECK(H5Pcreate(H5P_DATASET_ACCESS), "H5Pcreate"));
  DRT_H5_CHECK(H5Pset_chunk_cache(dapl, 521, std::max<std::size_t>(std::size_t{1} << 20, 4 * bytes * k), 1.0),
               "H5Pset_chunk_cache");
  const hid_t type = bytes == 1 ? H5T_STD_U8LE : bytes == 2 ? H5T_STD_U16LE : H5T_STD_U32LE;
  s.tokens = H5Id(DRT_H5_CHECK(H5Dcreate2(s.group, "tokens", type, space, H5P_DEFAULT, dcpl, dapl),
                               "creating /" + split + "/tokens"));
  w.splits.push_back(std::move(s));
}

void TokenWriter::append(const std::string& split, const std::uint32_t* tokens, std::int64_t count) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  Impl& w = *impl_;
  DRT_ASSERT(!w.committed, "TokenWriter: append after commit");
  Impl::Split& s = w.find(split);
  if (count <= 0) return;
  const std::string object = "/" + s.name + "/tokens";
  if (s.written + count > s.count)
    w.fail(object,
           str("appending ", count, " tokens to the ", s.written, " written would exceed the ", s.count, " announced"));
  const std::int64_t vocab = w.options.vocab_size;
  const std::size_t bytes = token_bytes(vocab);
  w.buffer.resize(static_cast<std::size_t>(count) * bytes);
  for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
    const std::uint32_t t = tokens[i];
    if (t >= vocab)
      w.fail(object, str("token ", s.written + static_cast<std::int64_t>(i), " is ", t,
                         ", not below the vocabulary size ", vocab, "; pass the right vocabulary size"));
    if (bytes == 1) w.buffer[i] = static_cast<unsigned char>(t);
    else if (bytes == 2) {
      const auto v = static_cast<std::uint16_t>(t);
      std::copy_n(reinterpret_cast<const unsigned char*>(&v), 2, w.buffer.data() + 2 * i);
    } else {
      std::copy_n(reinterpret_cast<const unsigned char*>(&t), 4, w.buffer.data() + 4 * i);
    }
  }
  H5Id space(DRT_H5_CHECK(H5Dget_space(s.tokens), "H5Dget_space"));
  const auto start = static_cast<hsize_t>(s.written), n = static_cast<hsize_t>(count);
  DRT_H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &n, nullptr), "H5Sselect_hyperslab");
  H5Id memory(DRT_H5_CHECK(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  const hid_t type = bytes == 1 ? H5T_NATIVE_UINT8 : bytes == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_UINT32;
  if (H5Dwrite(s.tokens, type, memory, space, H5P_DEFAULT, w.buffer.data()) < 0)
    w.fail(object, str("cannot write tokens ", s.written, "..", s.written + count - 1, ": ", io::hdf5_error_stack(),
                       "; is the disk full?"));
  s.written += count;
}

void TokenWriter::commit() {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  Impl& w = *impl_;
  DRT_ASSERT(!w.committed, "TokenWriter: commit twice");
  if (w.splits.empty()) throw ConfigError(str(w.path, ": no split was written; a data set needs train or test"));
  for (const auto& s : w.splits)
    if (s.written != s.count)
      w.fail("/" + s.name + "/tokens",
             str("holds ", s.written, " of its ", s.count, " tokens; append them all before commit()"));
  w.close_checked();
  publish_file(w.temp, w.path);
  w.committed = true;
}

}  // namespace drt::data
