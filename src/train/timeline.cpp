#include "drtrain/train/timeline.hpp"

#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <sstream>

#include "drtrain/comm/mpi_check.hpp"
#include "drtrain/comm/poll.hpp"
#include "drtrain/core/clock.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/json_line.hpp"
#include "drtrain/core/strings.hpp"

namespace drt::train {
namespace {

constexpr int kRounds = 8;
constexpr int kTag = 7301;

// On rank 0: each rank's clock minus rank 0's clock. Collective over the world.
std::vector<double> clock_offsets(const comm::Comm& world, double timeout_s, int max_nap_us) {
  // Nonblocking and waited on with comm::wait_request: a rank that never answers ends the wait
  // after the hang timeout with a message instead of blocking the job (the first polls spin, so
  // a quick answer is timed without a nap in between).
  auto exchange = [&](void* buf, int count, MPI_Datatype type, int peer, bool send) {
    MPI_Request request = MPI_REQUEST_NULL;
    if (send) DRT_MPI_CHECK(MPI_Isend(buf, count, type, peer, kTag, world.get(), &request));
    else DRT_MPI_CHECK(MPI_Irecv(buf, count, type, peer, kTag, world.get(), &request));
    comm::wait_request(request, timeout_s, max_nap_us,
                       [&] { return str("the timeline's clock ping-pong with rank ", peer); });
  };
  std::vector<double> offsets(static_cast<std::size_t>(world.size()), 0.0);
  if (world.rank() != 0) {
    for (int i = 0; i < kRounds; ++i) {
      char ping = 0;
      exchange(&ping, 1, MPI_CHAR, 0, false);
      double mine = now_seconds();
      exchange(&mine, 1, MPI_DOUBLE, 0, true);
    }
    return offsets;
  }
  for (int r = 1; r < world.size(); ++r) {
    double best_delay = 1e300;
    for (int i = 0; i < kRounds; ++i) {
      char ping = 0;
      double theirs = 0.0;
      const double sent = now_seconds();
      exchange(&ping, 1, MPI_CHAR, r, true);
      exchange(&theirs, 1, MPI_DOUBLE, r, false);
      const double received = now_seconds();
      if (received - sent < best_delay) {
        best_delay = received - sent;
        offsets[static_cast<std::size_t>(r)] = theirs - 0.5 * (sent + received);
      }
    }
  }
  return offsets;
}

// Every rank's spans merged on rank 0's clock: what the trace file shows.
struct Trace {
  struct Event {
    std::string name;
    double start, end;
    long long step;
    int tid;  // the rank's track, or world size + rank for its exchange thread
  };
  explicit Trace(int ranks) : world_size(ranks), exchange_track(static_cast<std::size_t>(ranks), false) {}

  // One rank's part (a line naming its track and counting the spans it dropped, then a span a
  // line), its times moved onto rank 0's clock by the rank's `offset`.
  void add_rank(int rank, const std::string& text, double offset) {
    std::size_t at = 0;
    const auto next_line = [&](std::string& line) {
      if (at >= text.size()) return false;
      const std::size_t end = std::min(text.find('\n', at), text.size());
      line.assign(text, at, end - at);
      at = end + 1;
      return true;
    };
    std::string line;
    next_line(line);
    const std::size_t tab = line.rfind('\t');
    const std::uint64_t rank_dropped = std::stoull(line.substr(tab + 1));
    dropped += rank_dropped;
    line.resize(tab);
    tracks.push_back(rank_dropped ? str(line, " (", rank_dropped, " later spans dropped: --timeline-max-spans)")
                                  : line);
    while (next_line(line)) {
      std::istringstream f(line);
      Event e{"", 0, 0, -1, rank};
      int track = Timeline::kMainTrack;
      std::getline(f, e.name, '\t');
      f >> e.start >> e.end >> e.step >> track;
      if (track == Timeline::kExchangeTrack) {
        e.tid = world_size + rank;
        exchange_track[static_cast<std::size_t>(rank)] = true;
      }
      e.start -= offset;
      e.end -= offset;
      origin = std::min(origin, e.start);
      events.push_back(std::move(e));
    }
  }

  // Chrome's trace JSON: the process, each rank's track (its exchange thread right below its main
  // track), then every span with its step.
  void write(const std::string& path) const {
    std::FILE* out = std::fopen(path.c_str(), "w");
    if (!out) throw Error(str("--timeline ", path, ": cannot open for writing"));
    std::fprintf(out, "{\"displayTimeUnit\":\"ms\",\"otherData\":%s,\"traceEvents\":[\n",
                 JsonLine().add("drtrain_dropped_spans", static_cast<std::int64_t>(dropped)).str().c_str());
    std::fprintf(out, "%s", metadata("process_name", -1, JsonLine().add("name", "drtrain")).c_str());
    for (int r = 0; r < world_size; ++r) {
      const std::string& name = tracks[static_cast<std::size_t>(r)];
      name_track(out, r, name, 2 * r);
      if (exchange_track[static_cast<std::size_t>(r)])
        name_track(out, world_size + r, name + " exchange thread", 2 * r + 1);
    }
    for (const Event& e : events) {
      JsonLine j;
      j.add("name", e.name)
          .add("ph", "X")
          .add("pid", 0)
          .add("tid", e.tid)
          .add("ts", (e.start - origin) * 1e6)
          .add("dur", std::max(0.0, e.end - e.start) * 1e6);
      if (e.step >= 0) j.add_object("args", JsonLine().add("step", static_cast<std::int64_t>(e.step)));
      std::fprintf(out, ",\n%s", j.str().c_str());
    }
    std::fprintf(out, "\n]}\n");
    if (std::fclose(out) != 0) throw Error(str("--timeline ", path, ": write failed"));
  }

  // A metadata event ("ph":"M") of the process, or of track `tid` (>= 0).
  static std::string metadata(const char* name, int tid, const JsonLine& args) {
    JsonLine j;
    j.add("name", name).add("ph", "M").add("pid", 0);
    if (tid >= 0) j.add("tid", tid);
    return j.add_object("args", args).str();
  }

  static void name_track(std::FILE* out, int tid, const std::string& name, int sort_index) {
    std::fprintf(out, ",\n%s", metadata("thread_name", tid, JsonLine().add("name", name)).c_str());
    std::fprintf(out, ",\n%s", metadata("thread_sort_index", tid, JsonLine().add("sort_index", sort_index)).c_str());
  }

  int world_size;
  std::vector<Event> events;
  std::vector<std::string> tracks;   // per rank: its track's name
  std::vector<bool> exchange_track;  // per rank: it has an exchange-thread track
  double origin = 1e300;
  std::uint64_t dropped = 0;
};

}  // namespace

void Timeline::check_output(const std::string& path) {
  // Append mode: an existing file is left as it is until write() replaces it.
  std::FILE* out = std::fopen(path.c_str(), "a");
  if (!out) throw ConfigError(str("--timeline ", path, ": cannot open for writing: ", errno_text(errno)));
  std::fclose(out);
}

std::uint64_t Timeline::write(const comm::Topology& topo, const std::string& path, double timeout_s, int max_nap_us,
                              std::size_t piece_bytes) const {
  const comm::Comm& world = topo.world();
  const std::vector<double> offsets = clock_offsets(world, timeout_s, max_nap_us);
  // This rank's part: its track name, then one span per line.
  std::ostringstream part;
  part.precision(17);
  part << topo.my_name() << "\t" << dropped_ << "\n";
  for (const Span& s : spans_)
    part << s.name << "\t" << s.start << "\t" << s.end << "\t" << s.step << "\t" << s.track << "\n";
  // Every rank's text to rank 0, whatever its size (the total may pass 2^31 bytes on long runs).
  const std::vector<std::string> parts =
      comm::gather_bytes(world, part.str(), 0, timeout_s, max_nap_us, "the timeline's spans", piece_bytes);
  if (world.rank() != 0) return 0;
  Trace trace(world.size());
  for (int r = 0; r < world.size(); ++r)
    trace.add_rank(r, parts[static_cast<std::size_t>(r)], offsets[static_cast<std::size_t>(r)]);
  trace.write(path);
  return trace.dropped;
}

}  // namespace drt::train
