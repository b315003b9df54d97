// A directory of checkpoints: file names, atomic publication, the runs that wrote them,
// retention, the choice of the file to resume from, and the lock that keeps two jobs out of one
// directory (docs/CHECKPOINT_FORMAT.md, "Files" and "Runs").
//   <dir>/ckpt-00001200.h5        a complete checkpoint after 1200 steps
//   <dir>/.ckpt-00001200.h5.tmp   being written (or left by a crash: never read, removed later)
//   <dir>/LATEST                  the newest checkpoint published here: file, run, step, time
//   <dir>/.lock                   locked (fcntl) by PS 0 of the job that writes here
// A checkpoint is written under the temporary name, flushed, fsync'ed and renamed (then the
// directory fsync'ed): a crash at any moment leaves the previous set of checkpoints intact and
// no file that looks complete but is not.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace drt::io {

// Names have at least 8 digits (more from step 10^8 on); the directory is sorted by the number.
std::string checkpoint_path(const std::string& dir, std::int64_t step);
std::string temporary_path(const std::string& dir, std::int64_t step);

// The step of a checkpoint file name ("ckpt-00001200.h5": 1200; 8 to 18 digits), -1 for any
// other name (temporary files included).
std::int64_t step_of(const std::string& file_name);

// Creates `dir` if needed; ConfigError when it cannot or it is not a writable directory.
void prepare_checkpoint_dir(const std::string& dir);

// Checkpoint files in `dir` (ckpt-<step>.h5 only), newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// ---- runs

// A fresh run id: 32 hex digits (128 bits from std::random_device, mixed with the time, the host
// and the process id).
std::string new_run_id();

// The line of runs a checkpoint continues: each ancestor run with the step of its checkpoint
// that the next run resumed from, then the run itself. Text form: "A@20 B@45 C" (C resumed B's
// checkpoint after 45 updates, B resumed A's after 20). A checkpoint is of this line when its run
// is the last one, or an ancestor and its step is at most that ancestor's step: files an
// ancestor wrote after the step the line left it at belong to another line.
class Lineage {
 public:
  struct Entry {
    std::string run_id;
    std::int64_t until = -1;  // the step the next run resumed from; -1 for the last run
  };
  // At most this many entries: older ancestors are dropped (their files then count as another
  // line's, which retention leaves alone). Keeps the attribute small (HDF5 object header).
  static constexpr std::size_t kMaxEntries = 64;

  Lineage() = default;
  static Lineage fresh(const std::string& run_id);
  // Parses the text form; std::nullopt when it is malformed.
  static std::optional<Lineage> parse(const std::string& text);
  // The line of a new run `run_id` that resumed a checkpoint of this line written at `step` (by
  // its last run). An empty (unknown) parent line gives just the new run.
  Lineage child(std::int64_t step, const std::string& run_id) const;

  std::string text() const;
  bool empty() const { return entries_.empty(); }
  const std::string& run_id() const;  // the last run's
  const std::vector<Entry>& entries() const { return entries_; }
  bool contains(const std::string& run_id, std::int64_t step) const;

 private:
  std::vector<Entry> entries_;
};

// A checkpoint file found in a directory and who wrote it, read from its metadata.
struct StoredCheckpoint {
  std::string path;
  std::int64_t step = -1;  // from the name
  bool readable = false;   // its metadata could be read
  std::string run_id;      // empty: written before run ids (an unknown run), or unreadable
  std::string problem;     // why it is unreadable
};
using Identify = std::function<StoredCheckpoint(const std::string& path, std::int64_t step)>;

// Opens the file serially and reads its metadata (no checksum): run id, or why it is unreadable.
StoredCheckpoint identify_checkpoint(const std::string& path, std::int64_t step);

// Every checkpoint file in `dir`, newest (highest step) first, with its identity.
std::vector<StoredCheckpoint> scan_checkpoints(const std::string& dir, const Identify& identify = identify_checkpoint);

// "run <id>: steps 30, 40; files without a run id (an older drtrain): step 10; unreadable: <file> (<why>)"
std::string describe_checkpoints(const std::vector<StoredCheckpoint>& files);

// ---- LATEST: the newest checkpoint published in a directory (by the run that wrote last)

struct LatestRecord {
  std::string file;  // the checkpoint's name in the directory, "ckpt-00001200.h5"
  std::string run_id;
  std::int64_t step = -1;
  std::string lineage;    // Lineage::text() of the run that published it
  std::string published;  // UTC, ISO 8601
};
std::string latest_path(const std::string& dir);
// Atomic (temporary file, fsync, rename, fsync of the directory); `published` is the time now
// when empty. Error on failure.
void write_latest(const std::string& dir, const LatestRecord& record);
// std::nullopt when there is none, or when it cannot be read or parsed (then `problem` says why).
std::optional<LatestRecord> read_latest(const std::string& dir, std::string* problem = nullptr);

// The order in which plain --resume tries the checkpoints of a directory. With a LATEST record
// (and its line readable): the checkpoints of that run's line, newest first (its file among them
// even when its metadata cannot be read); nothing else, so that a directory never continues
// another run because the last one's files are damaged. Without one (a directory of drtrain
// before LATEST, or LATEST removed): every checkpoint, newest first.
std::vector<std::string> resume_candidates(const std::vector<StoredCheckpoint>& files,
                                           const std::optional<LatestRecord>& latest);

// How a run starts in its --checkpoint-dir, for check_directory_use.
struct RunStart {
  bool resume = false;        // --resume was given (plain or with a file)
  std::string parent;         // the checkpoint resumed; empty: from scratch
  std::string parent_run_id;  // its run; empty: unknown (an older drtrain)
  std::int64_t parent_step = -1;
  bool saves_parent_step = false;    // it may write the parent's step itself (it trains no step and the
                                     // parent is not this directory's file of that step)
  std::vector<std::string> skipped;  // files --resume passed over as damaged
  std::optional<LatestRecord> latest;
};

// PS 0 at start-up: ConfigError when the run `line` (its own run last) would overwrite or mix
// with checkpoints of another line in `dir`:
//   - from scratch without --resume: any checkpoint file there;
//   - from scratch after --resume found nothing valid: any readable file it did not pass over;
//   - resumed: a readable file of another line at a step after the parent's (or at the parent's
//     step when the run may write that step), since this run's names would collide with them.
// The message names the directory, what it holds (runs, steps) and the ways out.
void check_directory_use(const std::string& dir, const std::vector<StoredCheckpoint>& files, const Lineage& line,
                         const RunStart& start);

// ---- publishing and retention (PS 0)

// Publishes a written checkpoint: refuses (Error, the temporary file removed) to replace a
// readable file of another line under the same name; fsync of `temp`; `latest` written to
// <dir>/LATEST (first: a crash before the rename leaves LATEST naming a file that is not there,
// and --resume takes the newest valid file of the same line); rename to `final_path`; fsync of
// the directory.
void publish_checkpoint(const std::string& temp, const std::string& final_path, const LatestRecord& latest,
                        const Lineage& line, const Identify& identify = identify_checkpoint);

// Deletes the checkpoints of `line` (this run's and its ancestors', Lineage::contains) but the
// `keep` newest; never another line's file, one without a run id or one whose metadata cannot be
// read. With `stale_temporaries` (the caller holds the directory's lock, so no live writer is
// left) also every temporary file. Returns the files removed.
std::vector<std::string> apply_retention(const std::string& dir, int keep, const Lineage& line, bool stale_temporaries,
                                         const Identify& identify = identify_checkpoint);

// ---- one job per directory

// PS 0's hold on a checkpoint directory for the whole job: an fcntl write lock of <dir>/.lock
// (an open-file-description lock where the kernel has them, else a POSIX record lock; over NFS
// through the lock manager), released by the kernel when the process ends, so it never goes
// stale. The file records the holder (host, pid, Slurm job, start time) for the message another
// job gets. Where the file system takes no locks (Lustre mounted without flock, NFS with
// nolock), a warning, and the job runs without it (held() false).
class DirectoryLock {
 public:
  // ConfigError naming the holder when another process holds the lock.
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

}  // namespace drt::io
