// comm::gather_bytes (64-bit lengths, the bytes in point-to-point pieces) and Timeline::write on
// top of it, under real mpiexec: every rank's bytes reach the root intact for every root and
// piece size, empty parts included; a rank whose bytes never come is named in a HangError, the
// root's receives are withdrawn and the next gather is intact; the trace holds every rank's spans
// when they travel in 7-byte pieces. The case that motivated the pieces, more than 2^31 bytes, is
// DISABLED_MoreThan2GiB (about 5 GB of memory; run it by hand with
// --gtest_also_run_disabled_tests).
// Run as: mpiexec -n 3 test_gather_bytes
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "drtrain/comm/comm.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/topology.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/train/timeline.hpp"
#include "support/mpi_test.hpp"

namespace drt::comm {
namespace {

using drt::testing::all_ranks;

constexpr double kTimeout = 60.0;
constexpr int kMaxNapUs = 100;

char byte_at(int rank, std::size_t i) { return static_cast<char>((i * 31 + static_cast<std::size_t>(rank) * 7) % 251); }

// Rank r's bytes: `length` bytes that depend on the rank and the position (zero bytes included).
std::string pattern(int rank, std::size_t length) {
  std::string s(length, '\0');
  for (std::size_t i = 0; i < length; ++i) s[i] = byte_at(rank, i);
  return s;
}

// Empty, exactly one piece, and several pieces with a short last one.
std::size_t length_of(int rank, std::size_t piece) {
  const std::size_t unit = std::min<std::size_t>(piece, 100);
  switch (rank % 3) {
    case 0: return 0;
    case 1: return unit;
    default: return 3 * unit + 1;
  }
}

TEST(GatherBytes, EveryRankArrivesIntactForEveryRootAndPieceSize) {
  const Comm world = Comm::world();
  for (std::size_t piece : {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{100}, kMaxPieceBytes}) {
    for (int root = 0; root < world.size(); ++root) {
      const std::vector<std::string> parts = gather_bytes(world, pattern(world.rank(), length_of(world.rank(), piece)),
                                                          root, kTimeout, kMaxNapUs, "the test's bytes", piece);
      bool ok = true;
      std::string detail;
      if (world.rank() == root) {
        ok = parts.size() == static_cast<std::size_t>(world.size());
        for (int r = 0; ok && r < world.size(); ++r)
          if (parts[static_cast<std::size_t>(r)] != pattern(r, length_of(r, piece))) {
            ok = false;
            detail = str("rank ", r, "'s ", parts[static_cast<std::size_t>(r)].size(), " bytes differ");
          }
      } else {
        ok = parts.empty();
      }
      ASSERT_TRUE(all_ranks(ok, str("pieces of ", piece, " bytes, root ", root, ": ", detail)));
    }
  }
}

TEST(GatherBytes, RejectsPiecesThatDoNotFitOneMessage) {
  const Comm world = Comm::world();
  EXPECT_THROW(gather_bytes(world, "x", 0, kTimeout, kMaxNapUs, "x", 0), Error);
  EXPECT_THROW(gather_bytes(world, "x", 0, kTimeout, kMaxNapUs, "x", static_cast<std::size_t>(INT_MAX) + 1), Error);
}

TEST(GatherBytes, NamesTheRankWhoseBytesNeverComeAndRecovers) {
  const Comm world = Comm::world();
  const int silent = world.size() - 1;
  std::string message;
  if (world.rank() == silent) {
    // Announces 10 bytes (it joins the gather of the sizes) but never sends them.
    const std::int64_t length = 10;
    gather(world, &length, sizeof length, nullptr, 0, kTimeout, kMaxNapUs, "the test's bytes (their sizes)");
  } else {
    try {
      // 2 s without progress: the root waits that long for the silent rank, and the other ranks'
      // bytes must have come by then (0.5 s left a loaded machine little room).
      gather_bytes(world, pattern(world.rank(), 5), 0, 2.0, kMaxNapUs, "the test's bytes", 2);
    } catch (const HangError& e) {
      message = e.what();
    }
  }
  const std::string expected = str("s for the test's bytes from rank ", silent, "; a peer rank is dead");
  const bool named = world.rank() == 0 ? message.find(expected) != std::string::npos : message.empty();
  ASSERT_TRUE(all_ranks(named, str("got '", message, "', expected '...", expected, "...'")));
  // The withdrawn receive must not swallow the bytes of the next gather.
  const std::vector<std::string> parts =
      gather_bytes(world, pattern(world.rank(), 10), 0, kTimeout, kMaxNapUs, "the test's bytes", 2);
  bool ok = true;
  if (world.rank() == 0)
    for (int r = 0; r < world.size(); ++r) ok = ok && parts[static_cast<std::size_t>(r)] == pattern(r, 10);
  EXPECT_TRUE(all_ranks(ok, "the gather after the hang lost or mixed bytes"));
}

// More than 2^31 bytes in all, and one rank alone above INT_MAX (3 pieces of 1 GiB).
TEST(GatherBytes, DISABLED_MoreThan2GiB) {
  const Comm world = Comm::world();
  const auto length = [](int rank) -> std::size_t {
    return rank == 1 ? (std::size_t{1} << 31) + 5 : rank == 0 ? 3 : std::size_t{1} << 20;
  };
  const std::vector<std::string> parts =
      gather_bytes(world, pattern(world.rank(), length(world.rank())), 0, kTimeout, kMaxNapUs, "the test's bytes");
  bool ok = true;
  if (world.rank() == 0)
    for (int r = 0; r < world.size(); ++r) {
      const std::string& part = parts[static_cast<std::size_t>(r)];
      ok = ok && part.size() == length(r);
      for (std::size_t i = 0; ok && i < part.size(); ++i) ok = part[i] == byte_at(r, i);
    }
  EXPECT_TRUE(all_ranks(ok, "bytes lost or mixed"));
}

}  // namespace
}  // namespace drt::comm

namespace drt::train {
namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The file's text; the file is removed.
std::string take_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  return text.str();
}

TEST(Timeline, HoldsEveryRanksSpansWhenTheyTravelInSmallPieces) {
  const comm::Topology topo = comm::Topology::create(1, comm::Placement::kFirst);
  Timeline timeline(true);
  const auto spans_of = [](int rank) { return 3 + 5 * rank; };
  for (int i = 0; i < spans_of(topo.world_rank()); ++i) timeline.span("step", i, i + 0.5, i);
  const std::string path = ::testing::TempDir() + str("drt_timeline_", getpid(), ".json");
  timeline.write(topo, path, 60.0, 100, 7);
  bool ok = true;
  std::string detail;
  if (topo.world_rank() == 0) {
    const std::string trace = take_file(path);
    std::size_t expected = 0;
    for (int r = 0; r < topo.world_size(); ++r) expected += static_cast<std::size_t>(spans_of(r));
    const std::size_t spans = count(trace, "\"ph\":\"X\"");
    ok = spans == expected && count(trace, "\"name\":\"thread_name\"") == static_cast<std::size_t>(topo.world_size());
    detail = str(spans, " spans, expected ", expected);
    for (int w = 0; w < topo.num_workers(); ++w) ok = ok && count(trace, "\"" + topo.worker_name(w) + "\"") == 1;
    ok = ok && count(trace, "\"" + topo.ps_name(0) + "\"") == 1;
  }
  EXPECT_TRUE(drt::testing::all_ranks(ok, detail));
}

// --timeline-max-spans: each rank keeps its first spans, counts the rest, and the trace (and the
// value write() returns on rank 0) says how many were dropped in all.
TEST(Timeline, KeepsTheFirstSpansAndCountsTheRest) {
  const comm::Topology topo = comm::Topology::create(1, comm::Placement::kFirst);
  const std::size_t cap = 4;
  Timeline timeline(true, cap);
  const int mine = 2 + 3 * topo.world_rank();  // rank 0 under the cap, the others over it
  for (int i = 0; i < mine; ++i) timeline.span("step", i, i + 0.5, i);
  const std::size_t kept = std::min<std::size_t>(static_cast<std::size_t>(mine), cap);
  bool ok = timeline.size() == kept && timeline.dropped() == static_cast<std::size_t>(mine) - kept;
  const std::string path = ::testing::TempDir() + str("drt_timeline_cap_", getpid(), ".json");
  const std::uint64_t dropped = timeline.write(topo, path, 60.0, 100);
  std::string detail = str("rank ", topo.world_rank(), ": kept ", timeline.size(), ", dropped ", timeline.dropped());
  if (topo.world_rank() == 0) {
    const std::string trace = take_file(path);
    std::size_t expected_spans = 0, expected_dropped = 0;
    for (int r = 0; r < topo.world_size(); ++r) {
      const std::size_t n = 2 + 3 * static_cast<std::size_t>(r);
      expected_spans += std::min(n, cap);
      expected_dropped += n - std::min(n, cap);
    }
    ok = ok && count(trace, "\"ph\":\"X\"") == expected_spans && dropped == expected_dropped &&
         count(trace, str("\"drtrain_dropped_spans\":", expected_dropped)) == 1 &&
         (expected_dropped == 0 || count(trace, "later spans dropped") > 0);
    detail += str("; trace: ", count(trace, "\"ph\":\"X\""), " spans (expected ", expected_spans, "), dropped ",
                  dropped, " (expected ", expected_dropped, ")");
  } else {
    ok = ok && dropped == 0;
  }
  EXPECT_TRUE(drt::testing::all_ranks(ok, detail));
}

}  // namespace
}  // namespace drt::train
