#include "drtrain/io/checkpoint_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "drtrain/core/error.hpp"
#include "drtrain/core/hash.hpp"
#include "drtrain/core/log.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "checkpoint_schema.hpp"

namespace drt::io {
namespace fs = std::filesystem;

std::int64_t step_of(const std::string& name) {
  const std::size_t prefix = 5, suffix = 3;  // "ckpt-", ".h5"
  if (name.size() < prefix + 8 + suffix || name.rfind("ckpt-", 0) != 0 || name.substr(name.size() - suffix) != ".h5")
    return -1;
  const std::string digits = name.substr(prefix, name.size() - prefix - suffix);
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

namespace {

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) throw Error(str("cannot open ", path, " to sync it: ", errno_text(errno)));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) throw Error(str("fsync of ", path, " failed: ", errno_text(saved)));
}

}  // namespace

std::string checkpoint_path(const std::string& dir, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%08lld.h5", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

std::string temporary_path(const std::string& dir, std::int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, ".ckpt-%08lld.h5.tmp", static_cast<long long>(step));
  return (fs::path(dir) / name).string();
}

void prepare_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir))
    throw ConfigError(str("--checkpoint-dir ", dir, ": not a directory and cannot be created",
                          ec ? ": " + ec.message() : std::string()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw ConfigError(str("--checkpoint-dir ", dir, ": not writable: ", errno_text(errno)));
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  out.reserve(found.size());
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

// ---- runs

namespace {

std::string hex64(std::uint64_t x) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(x));
  return text;
}

std::string host_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

// Run ids are what new_run_id makes; any word without blanks or '@' is accepted when read back.
bool valid_run_id(const std::string& id) {
  return !id.empty() && id.size() <= 64 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > ' ' && c != '@' && c != 0x7f; });
}

bool parse_step(const std::string& digits, std::int64_t& step) {
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  step = std::stoll(digits);
  return true;
}

std::string dir_of(const std::string& path) {
  const std::string dir = fs::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

std::string name_of(const std::string& path) { return fs::path(path).filename().string(); }

std::string trim(const std::string& text) {
  const std::size_t a = text.find_first_not_of(" \t\r"), b = text.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : text.substr(a, b - a + 1);
}

std::string run_text(const std::string& run_id) {
  return run_id.empty() ? std::string("a run without a run id (an older drtrain)") : "run " + run_id;
}

}  // namespace

std::string new_run_id() {
  std::uint64_t words[2] = {0, 0};
  try {
    std::random_device device;
    for (std::uint64_t& w : words) w = (std::uint64_t{device()} << 32) ^ device();
  } catch (const std::exception&) {
    // No entropy source: the time, the host and the process id below still tell jobs apart.
  }
  const auto now = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  std::uint64_t host = 1469598103934665603ULL;
  for (unsigned char c : host_name()) host = (host ^ c) * 1099511628211ULL;
  words[0] = splitmix64(words[0] ^ now);
  words[1] = splitmix64(words[1] ^ host ^ (static_cast<std::uint64_t>(::getpid()) << 20));
  return hex64(words[0]) + hex64(words[1]);
}

Lineage Lineage::fresh(const std::string& run_id) {
  Lineage line;
  line.entries_.push_back({run_id, -1});
  return line;
}

std::optional<Lineage> Lineage::parse(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  Lineage line;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::size_t at = words[i].find('@');
    const bool last = i + 1 == words.size();
    if (last != (at == std::string::npos)) return std::nullopt;  // ancestors carry a step, the run itself none
    Entry e;
    e.run_id = words[i].substr(0, at);
    if (!valid_run_id(e.run_id) || (!last && !parse_step(words[i].substr(at + 1), e.until))) return std::nullopt;
    line.entries_.push_back(e);
  }
  return line;
}

Lineage Lineage::child(std::int64_t step, const std::string& run_id) const {
  Lineage line = *this;
  if (!line.entries_.empty()) line.entries_.back().until = step;
  line.entries_.push_back({run_id, -1});
  if (line.entries_.size() > kMaxEntries)
    line.entries_.erase(line.entries_.begin(),
                        line.entries_.begin() + static_cast<std::ptrdiff_t>(line.entries_.size() - kMaxEntries));
  return line;
}

std::string Lineage::text() const {
  std::string out;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (i) out += ' ';
    out += entries_[i].run_id;
    if (i + 1 < entries_.size()) out += str("@", entries_[i].until);
  }
  return out;
}

const std::string& Lineage::run_id() const {
  static const std::string none;
  return entries_.empty() ? none : entries_.back().run_id;
}

bool Lineage::contains(const std::string& run_id, std::int64_t step) const {
  if (run_id.empty()) return false;
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].run_id == run_id && (i + 1 == entries_.size() || step <= entries_[i].until)) return true;
  return false;
}

StoredCheckpoint identify_checkpoint(const std::string& path, std::int64_t step) {
  StoredCheckpoint s;
  s.path = path;
  s.step = step;
  try {
    const CheckpointFile file(path);
    s.readable = true;
    s.run_id = file.meta().run_id;
  } catch (const std::exception& e) {
    s.problem = e.what();
  }
  return s;
}

std::vector<StoredCheckpoint> scan_checkpoints(const std::string& dir, const Identify& identify) {
  std::vector<StoredCheckpoint> out;
  for (const std::string& path : list_checkpoints(dir)) out.push_back(identify(path, step_of(name_of(path))));
  return out;
}

std::string describe_checkpoints(const std::vector<StoredCheckpoint>& files) {
  // Runs in the order of their newest file (files come newest first); steps ascending.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::int64_t>> steps;
  std::vector<std::string> unreadable;
  for (const StoredCheckpoint& f : files) {
    if (!f.readable) {
      std::string why = f.problem.size() > 100 ? f.problem.substr(0, 100) + "..." : f.problem;
      unreadable.push_back(str(name_of(f.path), " (", why, ")"));
      continue;
    }
    if (!steps.count(f.run_id)) order.push_back(f.run_id);
    steps[f.run_id].push_back(f.step);
  }
  std::vector<std::string> parts;
  for (const std::string& run : order) {
    std::vector<std::int64_t>& s = steps[run];
    std::sort(s.begin(), s.end());
    std::vector<std::string> text;
    text.reserve(s.size());
    for (std::int64_t x : s) text.push_back(std::to_string(x));
    parts.push_back(str(run.empty() ? std::string("files without a run id (an older drtrain)") : "run " + run,
                        s.size() == 1 ? ": step " : ": steps ", join(text, ", ")));
  }
  if (!unreadable.empty()) parts.push_back("unreadable: " + join(unreadable, ", "));
  return join(parts, "; ");
}

// ---- LATEST

std::string latest_path(const std::string& dir) { return (fs::path(dir) / "LATEST").string(); }

void write_latest(const std::string& dir, const LatestRecord& r) {
  const std::string path = latest_path(dir), temp = (fs::path(dir) / ".LATEST.tmp").string();
  const std::string text =
      str("# drtrain: the newest checkpoint published in this directory (docs/CHECKPOINT_FORMAT.md)\nfile = ", r.file,
          "\nrun_id = ", r.run_id, "\nstep = ", r.step, "\nlineage = ", r.lineage,
          "\npublished = ", r.published.empty() ? schema::utc_now() : r.published, "\n");
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(str("cannot create ", temp, ": ", errno_text(errno)));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      throw Error(str("writing ", temp, ": ", n < 0 ? errno_text(saved) : "no progress (disk full?)"));
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int saved = errno;
  if (::close(fd) != 0 || !synced) throw Error(str("writing ", temp, ": ", errno_text(synced ? errno : saved)));
  if (std::rename(temp.c_str(), path.c_str()) != 0)
    throw Error(str("cannot rename ", temp, " to ", path, ": ", errno_text(errno)));
  fsync_path(dir, true);
}

std::optional<LatestRecord> read_latest(const std::string& dir, std::string* problem) {
  const std::string path = latest_path(dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  auto bad = [&](const std::string& why) -> std::optional<LatestRecord> {
    if (problem) *problem = str(path, ": ", why);
    return std::nullopt;
  };
  std::ifstream in(path);
  if (!in) return bad("cannot be read");
  LatestRecord r;
  std::string step;
  std::map<std::string, std::string*> fields = {
      {"file", &r.file}, {"run_id", &r.run_id}, {"step", &step}, {"lineage", &r.lineage}, {"published", &r.published}};
  for (std::string line; std::getline(in, line);) {
    const std::size_t eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq));
    if (fields.count(key)) *fields[key] = trim(line.substr(eq + 1));
  }
  const std::optional<Lineage> line = Lineage::parse(r.lineage);
  if (step_of(r.file) < 0 || r.file.find('/') != std::string::npos) return bad("no checkpoint file name");
  if (!parse_step(step, r.step) || r.step != step_of(r.file)) return bad("no step, or not the file's");
  if (!valid_run_id(r.run_id) || !line || line->run_id() != r.run_id) return bad("no run id, or a bad lineage");
  return r;
}

std::vector<std::string> resume_candidates(const std::vector<StoredCheckpoint>& files,
                                           const std::optional<LatestRecord>& latest) {
  std::vector<std::string> out;
  const std::optional<Lineage> line = latest ? Lineage::parse(latest->lineage) : std::nullopt;
  for (const StoredCheckpoint& f : files)
    if (!line || name_of(f.path) == latest->file || (f.readable && line->contains(f.run_id, f.step)))
      out.push_back(f.path);
  return out;
}

void check_directory_use(const std::string& dir, const std::vector<StoredCheckpoint>& files, const Lineage& line,
                         const RunStart& start) {
  const bool fresh = start.parent.empty();
  std::vector<StoredCheckpoint> in_the_way;
  for (const StoredCheckpoint& f : files) {
    if (std::find(start.skipped.begin(), start.skipped.end(), f.path) != start.skipped.end()) continue;
    if (fresh && !start.resume) {
      in_the_way.push_back(f);  // any file: a run from scratch wants a directory of its own
      continue;
    }
    if (!f.readable || line.contains(f.run_id, f.step)) continue;
    if (fresh || f.step > start.parent_step || (f.step == start.parent_step && start.saves_parent_step))
      in_the_way.push_back(f);
  }
  if (in_the_way.empty()) return;
  const std::string held = describe_checkpoints(in_the_way);
  const std::string last =
      start.latest ? str(" (LATEST: ", start.latest->file, " of run ", start.latest->run_id, ")") : std::string();
  if (fresh && !start.resume)
    throw ConfigError(str("--checkpoint-dir ", dir, " already holds checkpoints of another run: ", held, "; newest ",
                          in_the_way.front().path, last,
                          ". A run from scratch would overwrite those of the same steps and leave a mix of two runs: "
                          "pass --resume to continue the run there, another --checkpoint-dir to keep both, or remove "
                          "those files"));
  if (fresh)
    throw ConfigError(
        str("--resume found no valid checkpoint",
            start.latest ? str(" of the line of run ", start.latest->run_id, ", which wrote last") : std::string(),
            " in --checkpoint-dir ", dir,
            start.skipped.empty() ? std::string() : str(" (passed over: ", join(start.skipped, ", "), ")"),
            ", and it holds checkpoints of other runs: ", held,
            ". A run from scratch would overwrite or mix with them: pass --resume FILE to continue one "
            "of them, another --checkpoint-dir, or remove those files"));
  throw ConfigError(
      str("--resume ", start.parent, ": this run continues ", run_text(start.parent_run_id), " from step ",
          start.parent_step, ", but --checkpoint-dir ", dir,
          " also holds checkpoints of another line after that step: ", held, last,
          ". This run's checkpoints would take their names (overwriting them) or mix with them: pass "
          "another --checkpoint-dir for this run, or remove (or move away) those files to go on from "
          "step ",
          start.parent_step, " in ", dir,
          start.latest ? ", or pass --resume without a file to continue the run that wrote last" : std::string()));
}

// ---- publishing and retention

void publish_checkpoint(const std::string& temp, const std::string& final_path, const LatestRecord& latest,
                        const Lineage& line, const Identify& identify) {
  std::error_code ec;
  if (fs::exists(final_path, ec)) {
    const StoredCheckpoint there = identify(final_path, step_of(name_of(final_path)));
    if (there.readable && !line.contains(there.run_id, there.step)) {
      fs::remove(temp, ec);
      throw Error(str("not publishing ", final_path, ": the directory already holds a checkpoint of that name, of ",
                      run_text(there.run_id),
                      ", which is not this run's line; it is left as it is (did a job write there without "
                      "drtrain's lock?)"));
    }
  }
  fsync_path(temp, false);
  write_latest(dir_of(final_path), latest);
  if (std::rename(temp.c_str(), final_path.c_str()) != 0)
    throw Error(str("cannot rename ", temp, " to ", final_path, ": ", errno_text(errno)));
  fsync_path(dir_of(final_path), true);
}

std::vector<std::string> apply_retention(const std::string& dir, int keep, const Lineage& line, bool stale_temporaries,
                                         const Identify& identify) {
  std::vector<std::string> removed;
  std::size_t kept = 0;
  for (const StoredCheckpoint& f : scan_checkpoints(dir, identify)) {
    if (!f.readable || !line.contains(f.run_id, f.step)) continue;  // another line's, or unknown
    if (kept < static_cast<std::size_t>(std::max(keep, 1))) {
      ++kept;
      continue;
    }
    std::error_code ec;
    if (fs::remove(f.path, ec)) removed.push_back(f.path);
  }
  if (!stale_temporaries) return removed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".ckpt-", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".tmp") {
      std::error_code rm;
      if (fs::remove(entry.path(), rm)) removed.push_back(entry.path().string());
    }
  }
  return removed;
}

// ---- one job per directory

DirectoryLock::DirectoryLock(const std::string& dir) {
  const std::string path = (fs::path(dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw ConfigError(str("--checkpoint-dir ", dir, ": cannot open ", path, " to lock it: ", errno_text(errno)));
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  int rc = ::fcntl(fd_, F_OFD_SETLK, &lock);
  if (rc != 0 && errno == EINVAL) rc = ::fcntl(fd_, F_SETLK, &lock);  // a kernel without OFD locks (before 3.15)
  if (rc != 0) {
    const int err = errno;
    std::string holder;
    if (err == EAGAIN || err == EACCES) {
      char text[1024] = {0};
      const ssize_t n = ::pread(fd_, text, sizeof text - 1, 0);
      std::istringstream in(std::string(text, n > 0 ? static_cast<std::size_t>(n) : 0));
      std::vector<std::string> parts;
      for (std::string line; std::getline(in, line);)
        if (const std::size_t eq = line.find('='); eq != std::string::npos)
          parts.push_back(str(trim(line.substr(0, eq)), " ", trim(line.substr(eq + 1))));
      holder = parts.empty() ? std::string("(it has not said who it is yet)") : join(parts, ", ");
    }
    ::close(fd_);
    fd_ = -1;
    if (err == EAGAIN || err == EACCES)
      throw ConfigError(str("--checkpoint-dir ", dir, " is in use by another job: its PS 0 (", holder, ") holds ", path,
                            ". Two jobs writing one directory overwrite and delete each other's checkpoints: wait "
                            "for that job to end (or stop it), or pass another --checkpoint-dir"));
    if (err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL) {
      log_warning("--checkpoint-dir ", dir, ": the file system takes no locks on ", path, " (", errno_text(err),
                  "): another job writing this directory at the same time would not be noticed");
      return;
    }
    throw ConfigError(str("--checkpoint-dir ", dir, ": cannot lock ", path, ": ", errno_text(err)));
  }
  held_ = true;
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  const std::string record =
      str("host = ", host_name(), "\npid = ", ::getpid(),
          slurm_job ? str("\nslurm_job_id = ", slurm_job) : std::string(), "\nstarted = ", schema::utc_now(), "\n");
  // The record only informs the message another job gets; failing to write it is no reason to stop.
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, record.data(), record.size(), 0) < 0)
    log_debug("writing ", path, ": ", errno_text(errno));
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace drt::io
