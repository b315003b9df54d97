// drtrain-plan: which PS count, placement and block size to run on N nodes, and whether the PS
// exchange beats a ring allreduce there, from the alpha-beta model of include/drtrain/plan
// (docs/PLANNER.md: the terms, the fitted constants, where it was checked and where it extrapolates).
//   drtrain-plan --params 124M --nodes 128 --gbit 25 [--lat-us 4] [--ps 8,16,32] [--json]
// Exit status: 0, or 2 for bad usage.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/plan/exchange_model.hpp"
#include "drtrain/plan/testbeds.hpp"
#include "tool_flags.hpp"

namespace po = boost::program_options;
using drt::plan::Costs;
using drt::plan::Network;
using drt::plan::Placement;
using drt::plan::Prediction;
using drt::plan::Scheme;

namespace {

struct Options {
  long long params = 0;
  int nodes = 0;
  Network net;
  Costs costs;
  std::string testbed = "cluster", ps_list, placements = "dedicated,colocated", chunks = "32,128,512,2048",
              wire = "fp32";
  double compute_ms = 0;  // one worker's forward + backward per step (ranks configurations by throughput)
  bool json = false;
  int top = 12;
};

// One configuration the planner weighs.
struct Row {
  std::string placement;
  int ps = 0;
  std::size_t chunk_kib = 0;
  Scheme scheme = Scheme::passive;
  Prediction p;
  int workers = 0;
  double ring_s = 0;      // a ring allreduce over this configuration's workers
  double throughput = 0;  // samples per second relative to a ring allreduce over all the nodes (> 1: faster)
  bool trusted = true;    // the model describes this configuration (else printed last, never recommended)
};

constexpr const char* kHelp =
    "drtrain-plan: predicted exchange time per step for PS counts, placements and block sizes on N nodes,\n"
    "against a ring allreduce over the same nodes, and the configuration to run (docs/PLANNER.md).\n"
    "usage: drtrain-plan --params N --nodes N [--gbit R] [--lat-us L] [options]\n"
    "  e.g. drtrain-plan --params 124M --nodes 128 --gbit 25 --compute-ms 300\n"
    "  --params N            parameters in the model (k, M, G suffixes; drtrain --check prints the count)\n"
    "  --nodes N             nodes in the job (one link each)\n"
    "  --gbit R              each node's link, Gbit/s per direction (default 25)\n"
    "  --lat-us L            one-way MPI latency between two nodes, us (default 4)\n"
    "  --leaf-size K         nodes per leaf switch of a two-level fat tree (default 16; 0: one switch)\n"
    "  --oversub X           leaf oversubscription (default 1: full bisection)\n"
    "  --payload-efficiency  payload bytes per wire byte (default 0.956: TCP over 1500-byte Ethernet)\n"
    "  --ps LIST             PS counts to weigh (default: 1, 2, 4, ... up to the nodes)\n"
    "  --placement LIST      dedicated (PS nodes apart), colocated (a PS besides a worker); default both\n"
    "  --chunk-kib LIST      PS block sizes, KiB (--rma-chunk-kib; default 32,128,512,2048)\n"
    "  --wire fp32|bf16      bytes per value on the wire (--wire)\n"
    "  --testbed T           cluster (default), emulated (tests/cluster on one host: nodes share its cores),\n"
    "                        smpi (SimGrid's CM02 links: no protocol overhead)\n"
    "  --rma-op-us, --ctrl-message-us, --apply-gbs, --shared-cores, --tcp-cpu-ns-per-byte,\n"
    "  --cpu-serial-fraction\n"
    "                        the model's software costs (defaults: the fit in docs/PLANNER.md)\n"
    "  --compute-ms C        one worker's forward and backward per step: configurations are ranked by\n"
    "                        throughput, workers / (C + exchange), against the ring over all the nodes (default 0)\n"
    "  --top K               rows to print, highest throughput first (default 12)\n"
    "  --json                one JSON line per configuration and a last line with the recommendation\n";

// "124M" -> 124000000: an integer with an optional k, M or G (powers of 1000, as parameter counts go).
long long parse_params(const std::string& text) {
  static const std::string suffixes = "kMG";
  const std::size_t at = text.empty() ? std::string::npos : suffixes.find(text.back());
  long long scale = 1;
  for (std::size_t i = 0; at != std::string::npos && i <= at; ++i) scale *= 1000;
  return drt::parse_count(at == std::string::npos ? text : text.substr(0, text.size() - 1), "--params") * scale;
}

Options parse(int argc, char** argv) {
  Options o;
  std::string params;
  po::options_description desc;
  // clang-format off
  desc.add_options()
      ("params", po::value<std::string>(&params)->required(), "")
      ("nodes", po::value<int>(&o.nodes)->required(), "")
      ("gbit", po::value<double>(&o.net.gbit), "")
      ("lat-us", po::value<double>(&o.net.latency_us), "")
      ("leaf-size", po::value<int>(&o.net.leaf_size)->default_value(16), "")
      ("oversub", po::value<double>(&o.net.oversub)->default_value(1.0), "")
      ("payload-efficiency", po::value<double>(&o.net.payload_efficiency), "")
      ("ps", po::value<std::string>(&o.ps_list), "")
      ("placement", po::value<std::string>(&o.placements), "")
      ("chunk-kib", po::value<std::string>(&o.chunks), "")
      ("wire", po::value<std::string>(&o.wire), "")
      ("testbed", po::value<std::string>(&o.testbed), "")
      ("rma-op-us", po::value<double>(&o.costs.rma_op_us), "")
      ("ctrl-message-us", po::value<double>(&o.costs.ctrl_message_us), "")
      ("apply-gbs", po::value<double>(&o.costs.apply_gbs), "")
      ("shared-cores", po::value<double>(&o.costs.shared_cores), "")
      ("tcp-cpu-ns-per-byte", po::value<double>(&o.costs.tcp_cpu_ns_per_byte), "")
      ("cpu-serial-fraction", po::value<double>(&o.costs.cpu_serial_fraction), "")
      ("compute-ms", po::value<double>(&o.compute_ms), "")
      ("top", po::value<int>(&o.top), "")
      ("json", po::bool_switch(&o.json), "");
  // clang-format on
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  // The testbed's constants first; anything given on the command line then wins.
  const drt::plan::Testbed bed = drt::plan::testbed(vm.count("testbed") ? vm["testbed"].as<std::string>() : "cluster");
  o.net.payload_efficiency = bed.payload_efficiency;
  o.costs = bed.costs;
  po::notify(vm);
  o.params = parse_params(params);
  if (!vm.count("gbit")) o.net.gbit = bed.default_gbit;
  if (!vm.count("lat-us")) o.net.latency_us = bed.default_latency_us;
  if (o.nodes < 2) throw drt::ConfigError(drt::str("--nodes ", o.nodes, ": a plan needs at least 2 nodes"));
  if (o.params < 1) throw drt::ConfigError("--params: at least 1 parameter");
  if (o.net.gbit <= 0 || o.net.latency_us < 0 || o.net.payload_efficiency <= 0 || o.net.payload_efficiency > 1)
    throw drt::ConfigError("--gbit must be > 0, --lat-us >= 0 and --payload-efficiency in (0, 1]");
  if (o.wire != "fp32" && o.wire != "bf16") throw drt::ConfigError("--wire is fp32 or bf16, not '" + o.wire + "'");
  return o;
}

std::vector<int> ps_counts(const Options& o) {
  std::vector<int> counts;
  if (!o.ps_list.empty()) {
    for (const auto& s : drt::split_list(o.ps_list, ','))
      counts.push_back(static_cast<int>(drt::parse_count(s, "--ps")));
    return counts;
  }
  for (int p = 1; p < o.nodes; p *= 2) counts.push_back(p);
  counts.push_back(o.nodes);  // co-located: a PS on every node
  return counts;
}

std::vector<Row> weigh(const Options& o, const Prediction& ring_all) {
  std::vector<Row> rows;
  drt::plan::Step step;
  step.floats = static_cast<std::size_t>(o.params);
  step.wire_bytes_per_value = o.wire == "bf16" ? 2.0 : 4.0;
  for (const auto& placement : drt::split_list(o.placements, ',')) {
    if (placement != "dedicated" && placement != "colocated")
      throw drt::ConfigError("--placement takes dedicated and colocated, not '" + placement + "'");
    for (int ps : ps_counts(o)) {
      if (ps < 1 || ps > o.nodes || (placement == "dedicated" && ps >= o.nodes)) continue;
      const Placement where =
          placement == "dedicated" ? Placement::dedicated(ps, o.nodes - ps) : Placement::colocated(o.nodes, ps);
      const double ring = drt::plan::predict(Scheme::allreduce, where, o.net, o.costs, step).total;
      const auto add = [&](Scheme scheme, std::size_t chunk_kib) {
        Row r{placement,           ps,   chunk_kib, scheme, drt::plan::predict(scheme, where, o.net, o.costs, step),
              where.num_workers(), ring, 0.0};
        r.throughput =
            (r.workers / (o.compute_ms * 1e-3 + r.p.total)) / (o.nodes / (o.compute_ms * 1e-3 + ring_all.total));
        rows.push_back(r);
      };
      for (const auto& c : drt::split_list(o.chunks, ',')) {
        step.chunk_bytes = static_cast<std::size_t>(drt::parse_count(c, "--chunk-kib")) * 1024;
        add(Scheme::passive, step.chunk_bytes / 1024);
      }
      add(Scheme::fence, 0);
      // Fence with co-located PS measured up to 1.8x (emulated cluster) and 3.1x (SimGrid) this
      // model (docs/PLANNER.md, "Calibration"): printed, never recommended.
      rows.back().trusted = placement == "dedicated";
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.trusted != b.trusted ? a.trusted : a.throughput > b.throughput;
  });
  // Within 1 % of the best, the model cannot tell configurations apart: recommend the simplest,
  // fewest PS, then passive (it can time out and overlap), then the block size closest to the default.
  const double good = rows.empty() ? 0.0 : 0.99 * rows.front().throughput;
  const auto simpler = [](const Row& a, const Row& b) {
    const auto off_default = [](const Row& r) {
      return r.scheme == Scheme::fence ? 1e9 : std::abs(std::log2(static_cast<double>(r.chunk_kib) / 128.0));
    };
    if (a.ps != b.ps) return a.ps < b.ps;
    if (a.scheme != b.scheme) return a.scheme == Scheme::passive;
    return off_default(a) < off_default(b);
  };
  const auto end_good =
      std::stable_partition(rows.begin(), rows.end(), [&](const Row& r) { return r.trusted && r.throughput >= good; });
  std::stable_sort(rows.begin(), end_good, simpler);
  return rows;
}

std::string describe(const Row& r) {
  std::string s = drt::str(r.scheme == Scheme::fence ? "--rma-sync fence" : "--rma-sync passive", " --num-ps ", r.ps,
                           " --ps-placement ", r.placement == "dedicated" ? "first" : "per-node");
  if (r.scheme == Scheme::passive) s += drt::str(" --rma-chunk-kib ", r.chunk_kib);
  return s;
}

void print_table(const Options& o, const std::vector<Row>& rows, const Prediction& ring) {
  std::printf(
      "drtrain-plan: %lld parameters (%s on the wire), %d nodes, %g Gbit/s, %g us, leaves of %d, oversub %g, %s\n",
      o.params, drt::human_bytes(static_cast<double>(o.params) * (o.wire == "bf16" ? 2 : 4)).c_str(), o.nodes,
      o.net.gbit, o.net.latency_us, o.net.leaf_size, o.net.oversub, o.testbed.c_str());
  std::printf("ring allreduce over the %d nodes: %.2f ms (bound: %s); compute per step %g ms\n\n", o.nodes,
              ring.total * 1e3, ring.bound.c_str(), o.compute_ms);
  std::printf("%-10s %5s %6s %6s %-8s %11s %9s %9s %11s  %s\n", "placement", "PS", "W", "KiB", "sync", "exchange ms",
              "link ms", "ring(W) ms", "throughput", "bound");
  for (std::size_t i = 0; i < rows.size() && static_cast<int>(i) < o.top; ++i) {
    const Row& r = rows[i];
    std::printf("%-10s %5d %6d %6s %-8s %11.2f %9.2f %9.2f %10.2fx  %s%s\n", r.placement.c_str(), r.ps, r.workers,
                r.scheme == Scheme::fence ? "-" : std::to_string(r.chunk_kib).c_str(), drt::plan::scheme_name(r.scheme),
                r.p.total * 1e3, r.p.link * 1e3, r.ring_s * 1e3, r.throughput, r.p.bound.c_str(),
                r.trusted ? "" : " (measured up to 3x slower: not recommended)");
  }
  std::printf("(throughput: samples/s against data parallelism with a ring allreduce over all %d nodes)\n", o.nodes);
}

void print_json(const Options& o, const std::vector<Row>& rows, const Prediction& ring) {
  for (const Row& r : rows)
    std::printf("{\"placement\":\"%s\",\"ps\":%d,\"workers\":%d,\"chunk_kib\":%zu,\"scheme\":\"%s\",\"ms\":%.4f,"
                "\"link_ms\":%.4f,\"latency_ms\":%.4f,\"software_ms\":%.4f,\"apply_ms\":%.4f,\"cpu_ms\":%.4f,"
                "\"ring_ms\":%.4f,\"throughput\":%.4f,\"bound\":\"%s\",\"trusted\":%s}\n",
                r.placement.c_str(), r.ps, r.workers, r.chunk_kib, drt::plan::scheme_name(r.scheme), r.p.total * 1e3,
                r.p.link * 1e3, r.p.latency * 1e3, r.p.software * 1e3, r.p.apply * 1e3, r.p.cpu * 1e3, r.ring_s * 1e3,
                r.throughput, r.p.bound.c_str(), r.trusted ? "true" : "false");
  std::printf("{\"nodes\":%d,\"params\":%lld,\"gbit\":%g,\"ring_ms\":%.4f,\"best\":\"%s\",\"best_ms\":%.4f,"
              "\"best_throughput\":%.4f}\n",
              o.nodes, o.params, o.net.gbit, ring.total * 1e3, describe(rows.front()).c_str(),
              rows.front().p.total * 1e3, rows.front().throughput);
}

}  // namespace

int main(int argc, char** argv) {
  if (drt::apps::answer_help_or_version(argc, argv, "drtrain-plan", kHelp)) return 0;
  try {
    const Options o = parse(argc, argv);
    drt::plan::Step step;
    step.floats = static_cast<std::size_t>(o.params);
    const Prediction ring =
        drt::plan::predict(Scheme::allreduce, Placement::colocated(o.nodes, 1), o.net, o.costs, step);
    const std::vector<Row> rows = weigh(o, ring);
    if (rows.empty()) throw drt::ConfigError("no configuration to weigh (check --ps and --placement)");
    if (o.json) {
      print_json(o, rows, ring);
      return 0;
    }
    print_table(o, rows, ring);
    const Row& best = rows.front();
    std::printf("\nrecommended: %s (exchange %.2f ms per step; %.2fx the throughput of a ring allreduce over all the "
                "nodes%s)\n",
                describe(best).c_str(), best.p.total * 1e3, best.throughput,
                best.throughput >= 1.0 ? "" : ": data parallelism with a ring allreduce would be faster here");
    for (const auto& note : drt::plan::extrapolation_notes(o.nodes, o.net, o.testbed))
      std::printf("note: %s\n", note.c_str());
    return 0;
  } catch (const po::error& e) {
    std::fprintf(stderr, "drtrain-plan: %s (drtrain-plan --help lists the options)\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drtrain-plan: %s\n", e.what());
  }
  return 2;
}
