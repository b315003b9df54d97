#include "drtrain/train/timeline.hpp"

#include <mpi.h>

#include <algorithm>
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
std::vector<double> clock_offsets(const comm::Comm& world) {
  std::vector<double> offsets(static_cast<std::size_t>(world.size()), 0.0);
  if (world.rank() != 0) {
    for (int i = 0; i < kRounds; ++i) {
      char ping = 0;
      DRT_MPI_CHECK(MPI_Recv(&ping, 1, MPI_CHAR, 0, kTag, world.get(), MPI_STATUS_IGNORE));
      const double mine = now_seconds();
      DRT_MPI_CHECK(MPI_Send(&mine, 1, MPI_DOUBLE, 0, kTag, world.get()));
    }
    return offsets;
  }
  for (int r = 1; r < world.size(); ++r) {
    double best_delay = 1e300;
    for (int i = 0; i < kRounds; ++i) {
      const char ping = 0;
      double theirs = 0.0;
      const double sent = now_seconds();
      DRT_MPI_CHECK(MPI_Send(&ping, 1, MPI_CHAR, r, kTag, world.get()));
      DRT_MPI_CHECK(MPI_Recv(&theirs, 1, MPI_DOUBLE, r, kTag, world.get(), MPI_STATUS_IGNORE));
      const double received = now_seconds();
      if (received - sent < best_delay) {
        best_delay = received - sent;
        offsets[static_cast<std::size_t>(r)] = theirs - 0.5 * (sent + received);
      }
    }
  }
  return offsets;
}

}  // namespace

void Timeline::write(const comm::Topology& topo, const std::string& path, double timeout_s, int max_nap_us) const {
  const comm::Comm& world = topo.world();
  const std::vector<double> offsets = clock_offsets(world);
  // This rank's part: its track name, then one span per line.
  std::ostringstream part;
  part.precision(17);
  part << topo.my_name() << "\n";
  for (const Span& s : spans_) part << s.name << "\t" << s.start << "\t" << s.end << "\t" << s.step << "\n";
  const std::string text = part.str();
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(world.size()));
  comm::gather(world, &length, sizeof length, lengths.data(), 0, timeout_s, max_nap_us, "the timeline's sizes");
  std::vector<int> displs(lengths.size(), 0);
  for (std::size_t r = 1; r < lengths.size(); ++r) displs[r] = displs[r - 1] + lengths[r - 1];
  std::string all(world.rank() == 0 ? static_cast<std::size_t>(displs.back() + lengths.back()) : 0, '\0');
  MPI_Request request = MPI_REQUEST_NULL;
  DRT_MPI_CHECK(MPI_Igatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(), MPI_CHAR, 0,
                             world.get(), &request));
  comm::wait_request(request, timeout_s, max_nap_us, [] { return std::string("the timeline's spans"); });
  if (world.rank() != 0) return;

  struct Event {
    std::string name;
    double start, end;
    long long step;
    int rank;
  };
  std::vector<Event> events;
  std::vector<std::string> tracks;
  double origin = 1e300;
  for (int r = 0; r < world.size(); ++r) {
    std::istringstream in(all.substr(static_cast<std::size_t>(displs[static_cast<std::size_t>(r)]),
                                     static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)])));
    std::string line;
    std::getline(in, line);
    tracks.push_back(line);
    while (std::getline(in, line)) {
      std::istringstream f(line);
      Event e{"", 0, 0, -1, r};
      std::getline(f, e.name, '\t');
      f >> e.start >> e.end >> e.step;
      e.start -= offsets[static_cast<std::size_t>(r)];
      e.end -= offsets[static_cast<std::size_t>(r)];
      origin = std::min(origin, e.start);
      events.push_back(std::move(e));
    }
  }
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (!out) throw Error(str("--timeline ", path, ": cannot open for writing"));
  std::fprintf(out, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  std::fprintf(out, "%s", JsonLine().add("name", "process_name").add("ph", "M").add("pid", 0)
                              .add_object("args", JsonLine().add("name", "drtrain")).str().c_str());
  for (int r = 0; r < world.size(); ++r) {
    std::fprintf(out, ",\n%s", JsonLine().add("name", "thread_name").add("ph", "M").add("pid", 0).add("tid", r)
                                   .add_object("args", JsonLine().add("name", tracks[static_cast<std::size_t>(r)]))
                                   .str().c_str());
    std::fprintf(out, ",\n%s", JsonLine().add("name", "thread_sort_index").add("ph", "M").add("pid", 0).add("tid", r)
                                   .add_object("args", JsonLine().add("sort_index", r)).str().c_str());
  }
  for (const Event& e : events) {
    JsonLine j;
    j.add("name", e.name).add("ph", "X").add("pid", 0).add("tid", e.rank)
        .add("ts", (e.start - origin) * 1e6).add("dur", std::max(0.0, e.end - e.start) * 1e6);
    if (e.step >= 0) j.add_object("args", JsonLine().add("step", static_cast<std::int64_t>(e.step)));
    std::fprintf(out, ",\n%s", j.str().c_str());
  }
  std::fprintf(out, "\n]}\n");
  if (std::fclose(out) != 0) throw Error(str("--timeline ", path, ": write failed"));
}

}  // namespace drt::train
