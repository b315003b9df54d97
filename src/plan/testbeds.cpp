// The exchange model's constants per testbed, fitted as docs/PLANNER.md describes (the
// calibration points are in bench/calibration/, and ctest's plan.calibration checks them).
#include "drtrain/plan/testbeds.hpp"

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::plan {
namespace {

// TCP over Ethernet with a 1500-byte MTU: 1448 payload bytes (timestamps on) per 1514-byte frame.
constexpr double kTcpEfficiency = 1448.0 / 1514.0;

// Software costs (docs/PLANNER.md, "Constants"): the RMA call's cost fitted to SimGrid's fence at
// 4-256 KiB blocks; the apply rate from the bench's a += b; the control word's cost assumed.
Costs fitted_software() {
  Costs c;
  c.rma_op_us = 4.0;
  c.ctrl_message_us = 0.5;
  c.apply_gbs = 6.0;
  c.fence_rounds = 3;
  return c;
}

}  // namespace

Testbed testbed(const std::string& name) {
  Testbed t;
  t.costs = fitted_software();
  if (name == "cluster") {
    t.payload_efficiency = kTcpEfficiency;
  } else if (name == "emulated") {  // tests/cluster/emulated_cluster.sh: bridge, tc tbf, 2 shared vCPUs
    t.payload_efficiency = kTcpEfficiency;
    t.default_gbit = 1.0;
    t.default_latency_us = 10.0;
    t.costs.shared_cores = 2.0;
    t.costs.tcp_cpu_ns_per_byte = 1.2;
    t.costs.cpu_serial_fraction = 0.5;
  } else if (name == "smpi") {  // CM02 links: the payload is the wire; no control-word cost
    t.payload_efficiency = 1.0;
    t.costs.ctrl_message_us = 0.0;
    t.costs.rma_blocking = true;
  } else {
    throw ConfigError(str("--testbed '", name, "': choose cluster, emulated or smpi"));
  }
  return t;
}

std::vector<std::string> extrapolation_notes(int nodes, const Network& net, const std::string& testbed) {
  std::vector<std::string> notes;
  if (nodes > 256)
    notes.push_back(str(nodes,
                        " nodes: beyond the 256 where SimGrid confirmed the model (at 512 its fence was 1.2x the "
                        "model); the model extrapolates (docs/PLANNER.md)"));
  if (net.gbit > 25.0 || net.gbit < 0.1)
    notes.push_back(str(net.gbit, " Gbit/s: outside the 0.1-25 Gbit/s the model was checked at"));
  if (testbed == "cluster")
    notes.push_back("the software costs (--rma-op-us, --ctrl-message-us, --apply-gbs) were fitted on these 2-vCPU "
                    "VMs under SimGrid and Open MPI over TCP; a cluster's may differ (docs/PLANNER.md)");
  return notes;
}

}  // namespace drt::plan
