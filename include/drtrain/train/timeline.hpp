// Timeline: a per-rank record of what each rank did when, written as one Chrome trace
// (chrome://tracing, https://ui.perfetto.dev) with one track per rank, for --timeline FILE.
//
// Each rank records spans (name, start, end, step) on its own monotonic clock. At the end every
// rank joins write(): rank 0 estimates each rank's clock offset with ping-pongs (NTP style: the
// offset is the peer's clock minus the midpoint of rank 0's send and receive times, from the
// round trip with the smallest delay, of 8), gathers the spans and writes the merged trace on
// its own clock. On one node the offsets are ~0 (one CLOCK_MONOTONIC); across nodes they remove
// the clocks' difference up to about half a round trip. The spans' text may pass 2^31 bytes in
// all on a long run: it travels with 64-bit lengths, in pieces, never as one MPI count.
// Memory is bounded: a rank keeps its first `max_spans` spans (--timeline-max-spans, about 40
// bytes each) and counts the rest, which the trace reports as dropped; the start of a run shows
// what a step does, and a long run no longer grows without bound.
// Disabled (no --timeline), span() returns at once and nothing is stored. span() may be called
// from two threads (a worker's training loop and its exchange thread, --overlap): each has its
// own track (kMainTrack, kExchangeTrack) so that their spans may overlap in time.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "drtrain/comm/poll.hpp"
#include "drtrain/comm/topology.hpp"

namespace drt::train {

class Timeline {
 public:
  static constexpr int kMainTrack = 0, kExchangeTrack = 1;

  static constexpr std::size_t kDefaultMaxSpans = 200000;

  explicit Timeline(bool enabled, std::size_t max_spans = kDefaultMaxSpans)
      : enabled_(enabled), max_spans_(max_spans) {}
  bool enabled() const { return enabled_; }
  // A span on this rank; `name` must outlive the timeline (string literals).
  void span(const char* name, double start_s, double end_s, std::int64_t step = -1, int track = kMainTrack) {
    if (!enabled_) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (spans_.size() < max_spans_) spans_.push_back({name, start_s, end_s, step, track});
    else ++dropped_;
  }
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return spans_.size();
  }
  std::uint64_t dropped() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return dropped_;
  }

  // World rank 0's check at start-up, before any window exists, that it will be able to write
  // `path` (creates it, empty, when missing): ConfigError otherwise. Not collective.
  static void check_output(const std::string& path);

  // Collective over topo.world(); its rank 0 writes `path` (JSON). Track names: topo.my_name(),
  // and "<my_name> exchange thread" for a rank's exchange track. No span() may run meanwhile.
  // The spans travel as text of any total size (comm::gather_bytes, in messages of at most
  // `piece_bytes`; tests pass small pieces); every wait gives up after timeout_s (HangError).
  // Returns, on rank 0, the spans dropped on all ranks (0 elsewhere); the trace's metadata
  // ("drtrain_dropped_spans") says so too.
  std::uint64_t write(const comm::Topology& topo, const std::string& path, double timeout_s, int max_nap_us,
                      std::size_t piece_bytes = comm::kMaxPieceBytes) const;

 private:
  struct Span {
    const char* name;
    double start, end;
    std::int64_t step;
    int track;
  };
  bool enabled_;
  std::size_t max_spans_;
  mutable std::mutex mutex_;
  std::vector<Span> spans_;
  std::uint64_t dropped_ = 0;
};

}  // namespace drt::train
