// SnapshotWriter: the background write of a PS's part of a checkpoint writes the state as it was
// at start(), whatever the caller does to the live buffers afterwards; its checksum term is the
// one of that state; failures come back from take(). No MPI: the file here is a plain file of the
// right size (io::write_parts only pwrites at the offsets it is given).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "drtrain/train/snapshot_writer.hpp"

namespace drt::train {
namespace {

constexpr std::size_t kElements = 300000;  // more than one 1 MiB piece per array

struct Files {
  std::string path;
  explicit Files(const std::string& dir = "/tmp")
      : path(dir + "/drt_snapshot_writer_" + std::to_string(::getpid()) + ".bin") {
    const std::string zeros(2 * kElements * 4 + 64, '\0');
    std::ofstream(path, std::ios::binary).write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
  }
  ~Files() { std::remove(path.c_str()); }
};

// Two "datasets" (the parameters and one slot), each one contiguous range of the file.
io::CheckpointParts parts_for(const std::string& path) {
  io::CheckpointParts p;
  p.path = path;
  p.parts.push_back({"/params/w", 0, 0, 0, kElements, 64});
  p.parts.push_back({"/optimizer/m/w", 1, 0, 0, kElements, 64 + kElements * 4});
  return p;
}

std::vector<float> read_floats(const std::string& path, std::size_t at, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(at));
  std::vector<float> out(n);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n * 4));
  return out;
}

// On a file system that takes O_DIRECT (the blocks inside each range go direct, the unaligned
// head and tail through the page cache: the offsets here are not block-aligned) and on tmpfs,
// which refuses it (everything through the page cache).
class SnapshotWriterOn : public testing::TestWithParam<const char*> {};

TEST_P(SnapshotWriterOn, WritesTheStateAtStartWhileTheCallerChangesIt) {
  if (::access(GetParam(), W_OK) != 0) GTEST_SKIP() << GetParam() << " is not writable here";
  Files f(GetParam());
  std::vector<float> params(kElements), slot(kElements);
  std::iota(params.begin(), params.end(), 1.0f);
  std::iota(slot.begin(), slot.end(), -5.0f);
  const std::vector<float> params0 = params, slot0 = slot;
  const std::uint64_t expected = io::checksum_part("/params/w", 0, params0.data(), kElements) +
                                 io::checksum_part("/optimizer/m/w", 0, slot0.data(), kElements);
  SnapshotWriter writer;
  SnapshotWriter::Faults faults;
  faults.delay_s = 0.2;  // the thread writes only after the changes below
  writer.start(parts_for(f.path), io::ShardView::range(0, kElements, params.data(), {slot.data()}), faults);
  EXPECT_TRUE(writer.running());
  for (std::size_t i = 0; i < kElements; ++i) params[i] = -params[i], slot[i] *= 2.0f;  // the next apply
  const std::size_t progress_before = writer.progress();
  EXPECT_EQ(writer.take(), expected);
  // start() reset the count and every piece written adds to it. (Not "grew during take()": on a
  // loaded machine the write may be over before this thread reads it, delay or not.)
  EXPECT_GT(writer.progress(), 0u);
  EXPECT_GE(writer.progress(), progress_before);
  EXPECT_FALSE(writer.running());
  EXPECT_EQ(read_floats(f.path, 64, kElements), params0);
  EXPECT_EQ(read_floats(f.path, 64 + kElements * 4, kElements), slot0);
  EXPECT_EQ(writer.snapshot_bytes(), 2 * kElements * 4);
  // Again, with the buffers kept from the first save: now the changed state.
  writer.start(parts_for(f.path), io::ShardView::range(0, kElements, params.data(), {slot.data()}), {});
  while (!writer.finished()) std::this_thread::yield();
  EXPECT_EQ(writer.take(), io::checksum_part("/params/w", 0, params.data(), kElements) +
                               io::checksum_part("/optimizer/m/w", 0, slot.data(), kElements));
  EXPECT_EQ(read_floats(f.path, 64, kElements), params);
}

INSTANTIATE_TEST_SUITE_P(Dirs, SnapshotWriterOn, testing::Values("/tmp", "/dev/shm"));

TEST(SnapshotWriter, ErrorsComeBackFromTake) {
  std::vector<float> params(16, 1.0f);
  io::CheckpointParts p;
  p.path = "/nonexistent-dir/x.h5";
  p.parts.push_back({"/params/w", 0, 0, 0, 16, 0});
  SnapshotWriter writer;
  writer.start(std::move(p), io::ShardView::range(0, 16, params.data()), {});
  try {
    writer.take();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.h5"), std::string::npos) << e.what();
  }
  SnapshotWriter::Faults full;  // a full disk
  full.fail = true;
  Files f;
  io::CheckpointParts q;
  q.path = f.path;
  q.parts.push_back({"/params/w", 0, 0, 0, 16, 0});
  writer.start(std::move(q), io::ShardView::range(0, 16, params.data()), full);
  EXPECT_THROW(writer.take(), Error);
}

}  // namespace
}  // namespace drt::train
