#include "drtrain/io/checkpoint_writer.hpp"

#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <thread>

#include "drtrain/comm/liveness.hpp"
#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/progress.hpp"
#include "drtrain/comm/watchdog.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/core/test_faults.hpp"
#include "checkpoint_schema.hpp"
#include "hdf5.hpp"

// write_parts stores native floats into H5T_IEEE_F32LE datasets byte for byte.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint_writer assumes a little-endian host");

namespace drt::io {
namespace {

constexpr std::size_t kWritePiece = std::size_t{1} << 20;  // bytes per pwrite

// H5Fclose with its result checked (the metadata is written out here).
void close_file(H5Id& file, const std::string& path) {
  if (H5Fclose(file.release()) < 0) throw Error(str("closing ", path, ": ", hdf5_error_stack()));
}

// PS 0: the file with every group, every dataset allocated and the metadata but the checksum;
// returns each dataset's byte offset, in schema::dataset_paths order.
std::vector<std::uint64_t> create_file(const std::string& path, const CheckpointMeta& meta, const ParamLayout& layout,
                                       const std::vector<std::string>& slot_names) {
  // Datasets of 4 KiB or more start on a 4 KiB boundary, so that most of every PS's part is whole
  // blocks (direct I/O: PartFile below).
  H5Id fapl(DRT_H5_CHECK(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
  DRT_H5_CHECK(H5Pset_alignment(fapl, 4096, 4096), "H5Pset_alignment");
  const hid_t raw = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (raw < 0) throw Error(str("creating ", path, ": ", hdf5_error_stack()));
  std::vector<std::uint64_t> offsets;
  {
    H5Id file(raw);
    // Groups track creation order, so h5ls and drtrain-ckpt list tensors in model order.
    H5Id gcpl(DRT_H5_CHECK(H5Pcreate(H5P_GROUP_CREATE), "H5Pcreate"));
    DRT_H5_CHECK(H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED),
                 "H5Pset_link_creation_order");
    auto make_group = [&](const std::string& name) {
      H5Id(DRT_H5_CHECK(H5Gcreate2(file, name.c_str(), H5P_DEFAULT, gcpl, H5P_DEFAULT), "creating " + name));
    };
    make_group(schema::kParams);
    if (!layout.state_ranges().empty()) make_group(schema::kState);
    make_group(schema::kOptimizer);
    for (const auto& slot : slot_names) make_group(std::string(schema::kOptimizer) + "/" + slot);
    // Contiguous and allocated now, so that each dataset is one byte range whose offset HDF5
    // can tell; never filled, since every byte is written by some PS.
    H5Id dcpl(DRT_H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"));
    DRT_H5_CHECK(H5Pset_layout(dcpl, H5D_CONTIGUOUS), "H5Pset_layout");
    DRT_H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time");
    DRT_H5_CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
    for (const schema::Dataset& ds : schema::datasets(layout, slot_names)) {
      const std::vector<hsize_t> d = schema::dims(ds.tensor->shape);
      H5Id space(DRT_H5_CHECK(H5Screate_simple(static_cast<int>(d.size()), d.data(), nullptr), "H5Screate_simple"));
      H5Id dset(DRT_H5_CHECK(H5Dcreate2(file, ds.path.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                             "creating " + ds.path));
      const haddr_t at = H5Dget_offset(dset);
      if (at == HADDR_UNDEF) throw Error(str("creating ", path, ": HDF5 allocated no space for ", ds.path));
      offsets.push_back(static_cast<std::uint64_t>(at));
    }
    schema::write_meta(file, meta);
    close_file(file, path);
  }
  return offsets;
}

void write_fully(int fd, const char* data, std::size_t bytes, std::uint64_t at, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, data, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(str("writing ", path, ": ", n < 0 ? errno_text(errno) : "no progress (disk full?)"));
    data += n, bytes -= static_cast<std::size_t>(n), at += static_cast<std::uint64_t>(n);
  }
}

// One PS's descriptors of the file: through the page cache, and with O_DIRECT where the file
// system takes it (-1 where it does not, e.g. tmpfs). Direct I/O sends whole blocks from an
// aligned buffer straight to the disk: no copy into the page cache and no reclaim of it later.
// Measured on a 2-core VM whose cores training kept busy: the buffered path cost the writer
// thread 0.6-0.8 s of kernel CPU per 281 MiB save; docs/PERFORMANCE.md, "Checkpoints", has the figures.
class PartFile {
 public:
  explicit PartFile(const std::string& path) : path_(path) {
    buffered_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (buffered_ < 0) throw Error(str("opening ", path, " to write this PS's part: ", errno_text(errno)));
    direct_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_DIRECT);
    if (direct_ >= 0) {
      bounce_ = static_cast<char*>(std::aligned_alloc(kBlock, kWritePiece));
      if (!bounce_) throw std::bad_alloc();
    }
  }
  ~PartFile() {
    std::free(bounce_);
    if (direct_ >= 0) ::close(direct_);
    if (buffered_ >= 0) ::close(buffered_);
  }
  PartFile(const PartFile&) = delete;
  PartFile& operator=(const PartFile&) = delete;

  // Writes `bytes` at file offset `at` in pieces of at most kWritePiece, calling after_piece(n)
  // with the bytes of each: the blocks that lie wholly inside the range directly, the unaligned
  // head and tail through the page cache.
  template <typename AfterPiece>
  void write(const char* data, std::size_t bytes, std::uint64_t at, AfterPiece after_piece) {
    const std::uint64_t end = at + bytes;
    std::uint64_t a0 = (at + kBlock - 1) / kBlock * kBlock, a1 = end / kBlock * kBlock;
    if (direct_ < 0 || a0 >= a1) a0 = a1 = end;  // all through the page cache
    buffered(data, a0 - at, at, after_piece);
    for (std::uint64_t x = a0; x < a1;) {
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kWritePiece, a1 - x));
      std::memcpy(bounce_, data + (x - at), n);
      const ssize_t done = ::pwrite(direct_, bounce_, n, static_cast<off_t>(x));
      if (done < 0 && errno == EINTR) continue;
      if (done < 0 && errno == EINVAL && x == a0) {  // the file system opened it but takes no direct writes
        ::close(direct_);
        direct_ = -1;
        buffered(data + (x - at), static_cast<std::size_t>(end - x), x, after_piece);
        return;
      }
      if (done <= 0)
        throw Error(str("writing ", path_, ": ", done < 0 ? errno_text(errno) : "no progress (disk full?)"));
      x += static_cast<std::uint64_t>(done);
      after_piece(static_cast<std::size_t>(done));
    }
    buffered(data + (a1 - at), static_cast<std::size_t>(end - a1), a1, after_piece);
  }

  // Every byte written reaches the disk, the file's metadata too; then the descriptors close.
  void sync_and_close() {
    if (::fsync(buffered_) != 0) throw Error(str("fsync of ", path_, ": ", errno_text(errno)));
    const int fd = buffered_;
    buffered_ = -1;
    if (::close(fd) != 0) throw Error(str("closing ", path_, ": ", errno_text(errno)));
  }

 private:
  static constexpr std::size_t kBlock = 4096;  // O_DIRECT alignment of offsets, sizes and memory

  template <typename AfterPiece>
  void buffered(const char* data, std::size_t bytes, std::uint64_t at, AfterPiece& after_piece) {
    for (std::size_t a = 0; a < bytes; a += kWritePiece) {
      const std::size_t n = std::min(kWritePiece, bytes - a);
      write_fully(buffered_, data + a, n, at + a, path_);
      after_piece(n);
    }
  }

  std::string path_;
  int buffered_ = -1, direct_ = -1;
  char* bounce_ = nullptr;
};

}  // namespace

CheckpointParts create_checkpoint(const comm::Comm& ps, const std::string& path, CheckpointMeta meta,
                                  const ParamLayout& layout, const std::vector<std::string>& slot_names,
                                  const std::vector<ShardSpan>& spans) {
  quiet_hdf5_errors();
  const std::size_t datasets = schema::datasets(layout, slot_names).size();
  std::vector<std::uint64_t> offsets(datasets, 0);
  std::exception_ptr error;
  if (ps.rank() == 0) {
    try {
      meta.created = schema::utc_now();
      offsets = create_file(path, meta, layout, slot_names);
    } catch (...) {
      error = std::current_exception();
    }
  }
  schema::agree(ps, error);
  // NOLINTNEXTLINE(mpi-type-mismatch): the buffer is std::uint64_t (unsigned long here), whose MPI type is MPI_UINT64_T
  comm::patient_bcast(ps, offsets.data(), static_cast<int>(datasets), MPI_UINT64_T, 0,
                      "the checkpoint file's dataset offsets from PS 0");
  CheckpointParts out;
  out.path = path;
  schema::for_each_part(
      layout, slot_names, spans,
      [&](std::size_t index, const schema::Dataset& ds, std::size_t lo, std::size_t hi, std::size_t local) {
        out.parts.push_back({ds.path, ds.array, local, lo, hi - lo, offsets[index] + lo * sizeof(float)});
      });
  return out;
}

std::uint64_t write_parts(const CheckpointParts& parts, const ShardView& shard,
                          const std::function<void(std::size_t)>& after_piece) {
  PartFile file(parts.path);
  std::uint64_t sum = 0;
  std::size_t written = 0;
  for (const CheckpointParts::Part& p : parts.parts) {
    const float* data = (p.array == 0 ? shard.params : shard.slots[p.array - 1]) + p.shard_offset;
    sum += checksum_part(p.dataset, p.first, data, p.count);
    file.write(reinterpret_cast<const char*>(data), p.count * sizeof(float), p.file_offset, [&](std::size_t n) {
      written += n;
      if (after_piece) after_piece(written);
    });
  }
  file.sync_and_close();
  return sum;
}

void complete_checkpoint(const std::string& path, std::uint64_t checksum) {
  quiet_hdf5_errors();
  const hid_t raw = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (raw < 0) throw Error(str("opening ", path, " to complete it: ", hdf5_error_stack()));
  H5Id file(raw);
  schema::write_completion(file, checksum);
  close_file(file, path);
}

void write_checkpoint(const comm::Comm& ps, const std::string& path, const CheckpointMeta& meta,
                      const ParamLayout& layout, const std::vector<std::string>& slot_names, const ShardView& shard,
                      const std::function<void()>& after_data) {
  const CheckpointParts parts = create_checkpoint(ps, path, meta, layout, slot_names, shard.spans);
  std::exception_ptr error;
  std::uint64_t sum = 0;
  try {
    // A turn of MPI progress after every piece: the workers keep pushing the next step towards
    // this PS while it writes, and on some RMA paths their flushes need this rank in MPI.
    // The pieces are progress too: for this rank's watchdog, and for the peers that wait for it
    // (the workers for the next step, the other PS in the collectives below): comm/liveness.hpp.
    // Test-only (core/test_faults.hpp): a slow disk that still makes progress.
    const bool slow = test_fault("checkpoint-slow-pieces");
    sum = write_parts(parts, shard, [slow](std::size_t) {
      if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comm::progress();
      comm::Watchdog::beat("checkpoint");
      comm::Liveness::note_progress();
    });
  } catch (...) {
    error = std::current_exception();
  }
  schema::agree(ps, error);
  if (after_data) after_data();
  comm::patient_allreduce(ps, &sum, 1, MPI_UINT64_T, MPI_SUM, "every PS's checksum term of the checkpoint");
  if (ps.rank() == 0) {
    try {
      complete_checkpoint(path, sum);
    } catch (...) {
      error = std::current_exception();
    }
  }
  schema::agree(ps, error);
}

}  // namespace drt::io
