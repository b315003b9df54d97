// Timeline: a per-rank record of what each rank did when, written as one Chrome trace
// (chrome://tracing, https://ui.perfetto.dev) with one track per rank, for --timeline FILE.
//
// Each rank records spans (name, start, end, step) on its own monotonic clock. At the end every
// rank joins write(): rank 0 estimates each rank's clock offset with ping-pongs (NTP style: the
// offset is the peer's clock minus the midpoint of rank 0's send and receive times, from the
// round trip with the smallest delay, of 8), gathers the spans and writes the merged trace on
// its own clock. On one node the offsets are ~0 (one CLOCK_MONOTONIC); across nodes they remove
// the clocks' difference up to about half a round trip.
// Disabled (no --timeline), span() returns at once and nothing is stored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drtrain/comm/topology.hpp"

namespace drt::train {

class Timeline {
 public:
  explicit Timeline(bool enabled) : enabled_(enabled) {}
  bool enabled() const { return enabled_; }
  // A span on this rank; `name` must outlive the timeline (string literals).
  void span(const char* name, double start_s, double end_s, std::int64_t step = -1) {
    if (enabled_) spans_.push_back({name, start_s, end_s, step});
  }
  std::size_t size() const { return spans_.size(); }

  // Collective over MPI_COMM_WORLD; rank 0 writes `path` (JSON). Track names: topo.my_name().
  void write(const comm::Topology& topo, const std::string& path, double timeout_s, int max_nap_us) const;

 private:
  struct Span {
    const char* name;
    double start, end;
    std::int64_t step;
  };
  bool enabled_;
  std::vector<Span> spans_;
};

}  // namespace drt::train
