// drt_bench_exchange: the cost of one synchronous step of the PS exchange (push, apply, pull),
// side by side with what it is measured against, in one run:
//   memcpy and a streaming a += b (one rank, the others asleep) -> the memory floor
//     floor = (5W + 4) * G / rate(a += b): per worker, the push reads G and the sum is read and
//     written (3G), the pull reads and writes G (2G); the PS reads the sum and the parameters,
//     writes the parameters and zeroes the sum (4G)
//   MPI_Allreduce of G bytes among the workers: what an allreduce trainer moves per step
//   with --link-gbit R (ranks on several nodes, each node's link R Gbit/s per direction): the
//     link floor, the busiest node's bytes in or out per step / R, from where the ranks and
//     shards are (a worker sends its gradient to and gets its parameters from the PS on other
//     nodes; a PS receives and sends its shard to every worker on another node); and the
//     ring allreduce's floor, 2 G (W-1) / W per worker node / R
//   the drtrain exchange, for each sync scheme and gradient push (--schemes):
//     passive (accumulate), ordered (passive + --grad-push ordered), fence (accumulate),
//     passive-det and fence-det (--deterministic: per-worker slots), passive-bf16
//     (--wire bf16: half the bytes; the link floor stays the float32 one, so their ratio to it
//     shows the saving); not by default: passive-clip, passive-det-clip, fence-clip (--grad-clip:
//     each PS applies a step once all its blocks are in and the PS have shared the norm; a
//     maximum never reached, so the result stays exact)
// Each exchange is validated (exact result of one SGD step) before it is timed, except in an SMPI
// build with memory folded (DRT_SMPI_FOLD=1, core/smpi_folding.hpp: every rank's buffers share
// pages, so their values mean nothing; the JSON line says "folded":true). A timing is the
// slowest worker's time for one step, after a worker barrier; the table shows the median over
// --iters steps. Ends with one JSON line.
//
//   mpiexec -n 3 build/bin/drt_bench_exchange --num-ps 1 --sizes-mib 64,256
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/mpi_session.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/core/aligned_buffer.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/smpi_folding.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/kernels/rules.hpp"
#include "drtrain/plan/exchange_model.hpp"
#include "drtrain/ps/server.hpp"
#include "drtrain/ps/worker_exchange.hpp"
#include "drtrain/train/cli_options.hpp"

namespace drt {
namespace {

namespace po = boost::program_options;

struct Scheme {
  std::string name;
  ps::RmaSync sync;
  ps::GradPush push;
  ps::Wire wire = ps::Wire::kFp32;
  // --grad-clip of the PS' optimizer: a maximum no norm reaches, so that the step's result is
  // still exact (coefficient 1) while the PS run the clipping protocol (every block in, the
  // norm's shares gathered, then the applies).
  double grad_clip = 0.0;
};

struct Options {
  train::LayoutOptions layout;
  ps::ExchangeConfig exchange;
  std::vector<std::size_t> sizes_mib{1, 4, 16, 64, 256};
  std::vector<Scheme> schemes;
  int iters = 10;
  int warmup = 2;
  bool phases = false;
  bool spinning_bystanders = false;
  double link_gbit = 0.0;  // > 0: report the link-bandwidth floor
};

const std::vector<Scheme>& all_schemes() {
  using ps::GradPush, ps::RmaSync;
  static const std::vector<Scheme> schemes = {
      {"passive", RmaSync::kPassive, GradPush::kAccumulate},
      {"ordered", RmaSync::kPassive, GradPush::kOrdered},
      {"fence", RmaSync::kFence, GradPush::kAccumulate},
      {"passive-det", RmaSync::kPassive, GradPush::kSlots},
      {"fence-det", RmaSync::kFence, GradPush::kSlots},
      {"passive-bf16", RmaSync::kPassive, GradPush::kSlots, ps::Wire::kBf16},
      {"passive-clip", RmaSync::kPassive, GradPush::kAccumulate, ps::Wire::kFp32, 1e30},
      {"passive-det-clip", RmaSync::kPassive, GradPush::kSlots, ps::Wire::kFp32, 1e30},
      {"fence-clip", RmaSync::kFence, GradPush::kAccumulate, ps::Wire::kFp32, 1e30}};
  return schemes;
}

std::optional<Options> parse(int argc, char** argv, bool print) {
  Options o;
  std::string sizes = "1,4,16,64,256", schemes = "passive,ordered,fence,passive-det,fence-det,passive-bf16";
  po::options_description bench("Benchmark");
  // One option a line: clang-format would run the chained calls together.
  // clang-format off
  bench.add_options()("help", "show this help")
      ("sizes-mib", po::value<std::string>(&sizes)->default_value(sizes), "gradient sizes, MiB, comma-separated")
      ("schemes", po::value<std::string>(&schemes)->default_value(schemes), "exchange variants to time")
      ("iters", po::value<int>(&o.iters)->default_value(o.iters), "timed steps per measurement")
      ("warmup", po::value<int>(&o.warmup)->default_value(o.warmup), "untimed steps first")
      ("phases", po::bool_switch(&o.phases), "print where each scheme's step time goes")
      ("link-gbit", po::value<double>(&o.link_gbit)->default_value(0.0),
       "each node's link bandwidth per direction, Gbit/s: report the link floor (multi-node runs)")
      ("spinning-bystanders", po::bool_switch(&o.spinning_bystanders),
       "during the allreduce, PS ranks wait in a spinning MPI_Barrier instead of sleeping (shows how "
       "idle ranks that spin slow the allreduce down on an oversubscribed node; not a fair baseline)");
  // clang-format on
  po::options_description all("drt_bench_exchange: time the PS exchange against memcpy and MPI_Allreduce");
  all.add(bench).add(train::layout_options(o.layout)).add(train::exchange_options(o.exchange));
  const auto vm = train::parse_command_line(argc, argv, all);
  if (vm.count("help")) {
    if (print) std::cout << all << "\n";
    return std::nullopt;
  }
  o.sizes_mib.clear();
  for (const auto& s : split_list(sizes, ',')) {
    const auto mib = static_cast<std::size_t>(parse_count(s, "--sizes-mib"));
    if (mib == 0) throw ConfigError("--sizes-mib: sizes must be at least 1 MiB");
    o.sizes_mib.push_back(mib);
  }
  for (const auto& name : split_list(schemes, ',')) {
    const auto& known = all_schemes();
    auto it = std::find_if(known.begin(), known.end(), [&](const Scheme& s) { return s.name == name; });
    if (it == known.end())
      throw ConfigError(str("unknown --schemes entry '", name,
                            "'; choices: passive, ordered, fence, passive-det, fence-det, passive-bf16"));
    o.schemes.push_back(*it);
  }
  if (o.iters < 1 || o.warmup < 0) throw ConfigError("--iters must be >= 1 and --warmup >= 0");
  o.exchange.validate();
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `body` on the ranks of `comm` iters times after a barrier, returning the median of the
// per-iteration maximum over those ranks.
template <typename Body>
double time_steps(const comm::Comm& comm, int warmup, int iters, Body body) {
  for (int i = 0; i < warmup; ++i) body();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    comm.barrier();
    const double t0 = now_seconds();
    body();
    double dt = now_seconds() - t0;
    DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, comm.get()));
    times.push_back(dt);
  }
  return median(times);
}

struct MemoryRates {
  double memcpy_s = 0.0;  // one memcpy of G bytes
  double add_s = 0.0;     // one a += b over G bytes
};

MemoryRates measure_memory(std::size_t floats, int iters) {
  AlignedBuffer<float> a(floats), b(floats);
  for (std::size_t i = 0; i < floats; ++i) b[i] = static_cast<float>(i % 7);
  std::vector<double> copy, add;
  for (int i = 0; i < iters + 1; ++i) {
    double t0 = now_seconds();
    std::memcpy(a.data(), b.data(), floats * sizeof(float));
    copy.push_back(now_seconds() - t0);
    t0 = now_seconds();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    for (std::size_t k = 0; k < floats; ++k) pa[k] += pb[k];
    add.push_back(now_seconds() - t0);
  }
  if (a[floats - 1] < 0) std::printf("impossible\n");  // keep the loops
  copy.erase(copy.begin());
  add.erase(add.begin());
  return {median(copy), median(add)};
}

// True in an SMPI build run with DRT_SMPI_FOLD=1: the buffers' values are shared by all ranks.
bool memory_folded() {
#if DRT_SMPI
  return smpi::folding();
#else
  return false;
#endif
}

// Plain SGD with learning rate 1: the step that the floor counts, and exact to validate.
optim::OptimizerConfig plain_sgd() {
  optim::OptimizerConfig sgd;
  sgd.lr = 1.0;
  sgd.momentum = 0.0;
  return sgd;
}

// The exact parameters after one SGD step (lr 1) from zero, with gradient (w + 1) * (1 + i % 5)
// on worker w: the sum W(W+1)/2 * k is an integer, scaled by 1/W as the PS does.
float expected_after_one_step(int workers, std::size_t i) {
  const int triangle = workers * (workers + 1) / 2;  // exact: W(W+1) is even
  const float sum = static_cast<float>(triangle * static_cast<int>(1 + i % 5));
  return 0.0f - 1.0f * (sum * (1.0f / static_cast<float>(workers)));
}

// Validates, then times one scheme. Returns the median step time (workers), 0 on PS ranks.
double run_scheme(const comm::Topology& topo, const Options& o, const Scheme& scheme, std::size_t floats) {
  ps::ExchangeConfig config = o.exchange;
  config.sync = scheme.sync;
  config.push = scheme.push;  // the scheme decides, whatever --grad-push/--deterministic/--wire said
  config.deterministic = false;
  config.wire = scheme.wire;
  const ps::ShardPlan plan = ps::ShardPlan::balanced(floats, topo.num_ps());
  if (topo.is_ps()) {
    optim::OptimizerConfig sgd = plain_sgd();
    sgd.grad_clip = scheme.grad_clip;
    ps::ParameterServer server(topo, plan, config, sgd);
    server.start();
    const double cpu0 = process_cpu_seconds();
    const auto steps = static_cast<double>(server.serve());
    const double cpu = process_cpu_seconds() - cpu0;
    if (o.phases) {
      const ps::ServerStats& st = server.stats();
      std::fprintf(stderr,
                   "    %-11s %3zu MiB %s: wait %.2f ms, apply %.2f ms, publish %.2f ms, cpu %.2f ms per step\n",
                   scheme.name.c_str(), floats / 262144, topo.my_name().c_str(), 1e3 * st.wait_s / steps,
                   1e3 * st.apply_s / steps, 1e3 * st.publish_s / steps, 1e3 * cpu / steps);
    }
    return 0.0;
  }
  ps::WorkerExchange exchange(topo, plan, config);
  AlignedBuffer<float> params(floats), grad(floats);
  const int me = topo.role_index();
  for (std::size_t i = 0; i < floats; ++i) grad[i] = static_cast<float>((me + 1) * static_cast<int>(1 + i % 5));
  exchange.start(params.data());
  exchange.pull_all(params.data());
  exchange.step(grad.data(), params.data());
  std::size_t bad = floats;
  for (std::size_t i = 0; i < floats && bad == floats && !memory_folded(); ++i)
    if (params[i] !=
        (scheme.wire == ps::Wire::kBf16
             ? kernels::bf16_bits_to_float(kernels::float_to_bf16_bits(expected_after_one_step(topo.num_workers(), i)))
             : expected_after_one_step(topo.num_workers(), i)))
      bad = i;
  int ok = bad == floats;
  DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, topo.role_comm().get()));
  if (!ok) {
    exchange.finish();
    throw Error(str("validation of ", scheme.name, " failed", bad < floats ? str(" at element ", bad) : std::string()));
  }
  exchange.take_times();
  const double cpu0 = process_cpu_seconds();
  const double t = time_steps(topo.role_comm(), o.warmup, o.iters, [&] { exchange.step(grad.data(), params.data()); });
  const ps::ExchangeTimes times = exchange.take_times();
  const double cpu = process_cpu_seconds() - cpu0;
  exchange.finish();
  if (o.phases) {
    const int steps = o.warmup + o.iters;
    std::fprintf(stderr, "    %-11s %3zu MiB %s: push %.2f ms, wait %.2f ms, pull %.2f ms, cpu %.2f ms per step\n",
                 scheme.name.c_str(), floats / 262144, topo.my_name().c_str(), 1e3 * times.push_s / steps,
                 1e3 * times.wait_s / steps, 1e3 * times.pull_s / steps, 1e3 * cpu / o.iters);
  }
  return t;
}

// The busiest node's link time for one exchange step of `floats` parameters at `gbit` Gbit/s per
// direction (plan::link_floor_s, the planner's link term): per node, bytes out = its workers'
// pushes to PS elsewhere + its PS' shards to workers elsewhere; bytes in is the mirror image.
double link_floor_ms(const comm::Topology& topo, std::size_t floats, double gbit) {
  std::vector<int> node(static_cast<std::size_t>(topo.world_size()));
  int mine = topo.node_index();
  DRT_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, node.data(), 1, MPI_INT, topo.world().get()));
  plan::Placement where;
  where.nodes = topo.num_nodes();
  for (int p : topo.ps_world_ranks()) where.ps_node.push_back(node[static_cast<std::size_t>(p)]);
  for (int w : topo.worker_world_ranks()) where.worker_node.push_back(node[static_cast<std::size_t>(w)]);
  return plan::link_floor_s(where, floats, gbit) * 1e3;
}

struct Row {
  std::size_t mib = 0;
  double memcpy_ms = 0, add_gbs = 0, floor_ms = 0, allreduce_ms = 0;
  double link_floor_ms = 0, allreduce_link_floor_ms = 0;  // --link-gbit
  std::map<std::string, double> exchange_ms;
};

Row measure_size(const comm::Topology& topo, const Options& o, std::size_t mib) {
  const std::size_t floats = mib * (std::size_t{1} << 20) / sizeof(float);
  const double bytes = static_cast<double>(floats * sizeof(float));
  const auto& world = topo.world();
  const double timeout = o.exchange.hang_timeout_s;
  const int nap = o.exchange.max_nap_us;
  Row row;
  row.mib = mib;
  // Memory rates on world rank 0 while every other rank sleeps.
  MemoryRates rates;
  if (world.rank() == 0) rates = measure_memory(floats, o.iters);
  comm::sleepy_barrier(world, timeout, nap, "the memory measurement");
  DRT_MPI_CHECK(MPI_Bcast(&rates, 2, MPI_DOUBLE, 0, world.get()));
  row.memcpy_ms = rates.memcpy_s * 1e3;
  row.add_gbs = 3.0 * bytes / rates.add_s / 1e9;
  row.floor_ms = (5.0 * topo.num_workers() + 4.0) * bytes / (row.add_gbs * 1e9) * 1e3;
  if (o.link_gbit > 0) {
    const double w = topo.num_workers();
    row.link_floor_ms = link_floor_ms(topo, floats, o.link_gbit);
    row.allreduce_link_floor_ms = 2.0 * bytes * (w - 1.0) / w * 8.0 / (o.link_gbit * 1e9) * 1e3;
  }
  // MPI_Allreduce among the workers; the PS ranks sleep.
  if (topo.is_worker()) {
    AlignedBuffer<float> buf(floats);
    row.allreduce_ms = 1e3 * time_steps(topo.role_comm(), o.warmup, o.iters, [&] {
                         DRT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(floats), MPI_FLOAT,
                                                     MPI_SUM, topo.role_comm().get()));
                       });
  }
  if (o.spinning_bystanders) world.barrier();
  else comm::sleepy_barrier(world, timeout, nap, "the allreduce measurement");
  for (const Scheme& s : o.schemes) row.exchange_ms[s.name] = 1e3 * run_scheme(topo, o, s, floats);
  return row;
}

void print_rows(const std::vector<Row>& rows, const Options& o, const comm::Topology& topo) {
  std::printf("\n%8s %10s %9s %10s %13s", "size", "memcpy", "a+=b", "floor", "allreduce");
  for (const auto& s : o.schemes) std::printf(" %12s", s.name.c_str());
  std::printf("   exchange/allreduce, exchange/floor\n");
  std::printf("%8s %10s %9s %10s %13s", "MiB", "ms", "GB/s", "ms", "ms (W ranks)");
  for (std::size_t i = 0; i < o.schemes.size(); ++i) std::printf(" %12s", "ms");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("%8zu %10.2f %9.2f %10.2f %13.2f", r.mib, r.memcpy_ms, r.add_gbs, r.floor_ms, r.allreduce_ms);
    for (const auto& s : o.schemes) std::printf(" %12.2f", r.exchange_ms.at(s.name));
    std::printf("  ");
    for (const auto& s : o.schemes)
      std::printf(" %s %.2f/%.2f", s.name.c_str(), r.exchange_ms.at(s.name) / r.allreduce_ms,
                  r.exchange_ms.at(s.name) / r.floor_ms);
    std::printf("\n");
  }
  if (o.link_gbit > 0) {
    std::printf("\nlinks at %g Gbit/s per node and direction:\n%8s %14s %14s %13s", o.link_gbit, "MiB", "link floor ms",
                "ring floor ms", "allreduce");
    for (const auto& s : o.schemes) std::printf(" %22s", (s.name + " /allred /floor").c_str());
    std::printf("\n");
    for (const Row& r : rows) {
      std::printf("%8zu %14.1f %14.1f %10.1f ms", r.mib, r.link_floor_ms, r.allreduce_link_floor_ms, r.allreduce_ms);
      for (const auto& s : o.schemes)
        std::printf("   %8.1f %5.2f %5.2f", r.exchange_ms.at(s.name), r.exchange_ms.at(s.name) / r.allreduce_ms,
                    r.exchange_ms.at(s.name) / r.link_floor_ms);
      std::printf("\n");
    }
  }
  std::string json =
      str("{\"bench\":\"exchange\",\"ps\":", topo.num_ps(), ",\"workers\":", topo.num_workers(),
          ",\"nodes\":", topo.num_nodes(), ",\"iters\":", o.iters, ",\"folded\":", memory_folded() ? "true" : "false",
          ",\"chunk_kib\":", o.exchange.chunk_bytes_for(topo.num_nodes()) / 1024, ",\"rows\":[");
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const Row& r = rows[k];
    json += str(k ? "," : "", "{\"mib\":", r.mib, ",\"memcpy_ms\":", r.memcpy_ms, ",\"add_gbs\":", r.add_gbs,
                ",\"floor_ms\":", r.floor_ms, ",\"allreduce_ms\":", r.allreduce_ms);
    if (o.link_gbit > 0)
      json += str(",\"link_gbit\":", o.link_gbit, ",\"link_floor_ms\":", r.link_floor_ms,
                  ",\"allreduce_link_floor_ms\":", r.allreduce_link_floor_ms);
    for (const char* what : {"exchange_ms", "vs_allreduce", "vs_floor"}) {
      json += str(",\"", what, "\":{");
      bool first = true;
      for (const auto& s : o.schemes) {
        const double ms = r.exchange_ms.at(s.name);
        const double v = std::string(what) == "exchange_ms"    ? ms
                         : std::string(what) == "vs_allreduce" ? ms / r.allreduce_ms
                                                               : ms / r.floor_ms;
        json += str(first ? "" : ",", "\"", s.name, "\":", v);
        first = false;
      }
      json += "}";
    }
    json += "}";
  }
  std::printf("%s]}\n", json.c_str());
  std::fflush(stdout);
}

int bench_main(comm::MpiSession& session, int argc, char** argv) {
  const auto options = parse(argc, argv, session.world_rank() == 0);
  if (!options) return 0;
  const Options& o = *options;
  const comm::Topology topo = comm::Topology::create(o.layout.num_ps, o.layout.placement);
  if (topo.world_rank() == 0) {
    std::printf("drt_bench_exchange: %s\n%s; %d timed steps after %d warm-up\n", topo.describe().c_str(),
                o.exchange.describe(topo.num_nodes()).c_str(), o.iters, o.warmup);
    if (memory_folded())
      std::printf("memory folded (DRT_SMPI_FOLD=1): buffers of %zu KiB or more share pages; results not checked\n",
                  smpi::kFoldMinBytes >> 10);
    const std::size_t largest = *std::max_element(o.sizes_mib.begin(), o.sizes_mib.end()) << 18;
    std::printf("at %zu MiB, plain SGD: %s\n", largest >> 18,
                ps::describe_ps_memory(ps::ShardPlan::balanced(largest, topo.num_ps()), topo.num_workers(), o.exchange,
                                       plain_sgd())
                    .c_str());
  }
  std::vector<Row> rows;
  for (std::size_t mib : o.sizes_mib) {
    Row row = measure_size(topo, o, mib);
    // Worker-side figures to world rank 0 (the table's printer).
    const int chief = topo.worker_world_ranks().front();
    std::vector<double> values{row.allreduce_ms};
    for (const auto& s : o.schemes) values.push_back(row.exchange_ms[s.name]);
    if (topo.world_rank() == chief && chief != 0)
      DRT_MPI_CHECK(MPI_Send(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, 0, 0, MPI_COMM_WORLD));
    if (topo.world_rank() == 0 && chief != 0)
      DRT_MPI_CHECK(MPI_Recv(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, chief, 0, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE));
    row.allreduce_ms = values[0];
    for (std::size_t k = 0; k < o.schemes.size(); ++k) row.exchange_ms[o.schemes[k].name] = values[k + 1];
    rows.push_back(row);
    if (topo.world_rank() == 0) std::fprintf(stderr, "  measured %zu MiB\n", mib);
  }
  if (topo.world_rank() == 0) print_rows(rows, o, topo);
  return 0;
}

}  // namespace
}  // namespace drt

int main(int argc, char** argv) { return drt::comm::run_mpi_main(argc, argv, "drt_bench_exchange", drt::bench_main); }
