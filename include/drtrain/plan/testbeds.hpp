// The fitted constants of the exchange model for the places it was calibrated on (a real cluster's
// defaults, the emulated cluster of tests/cluster, SimGrid's SMPI), and where a plan leaves the
// range that was measured (docs/PLANNER.md records the fit and the checks).
#pragma once

#include <string>
#include <vector>

#include "drtrain/plan/exchange_model.hpp"

namespace drt::plan {

struct Testbed {
  double payload_efficiency = 1.0;
  double default_gbit = 25.0;
  double default_latency_us = 4.0;
  Costs costs;
};

// "cluster", "emulated" or "smpi"; throws ConfigError otherwise.
Testbed testbed(const std::string& name);

// What a plan for `nodes` nodes on `net` extrapolates beyond (empty: inside the measured range).
std::vector<std::string> extrapolation_notes(int nodes, const Network& net, const std::string& testbed);

}  // namespace drt::plan
