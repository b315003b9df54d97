// Checkpoint directories: file names, the order of a directory, run ids and lines of runs,
// retention by line, the choice of --resume (LATEST), the start-up check that a run does not
// overwrite or mix with another run's files, publication, and the directory lock. The files here
// hold no HDF5: who wrote each comes from a table (the Identify hook); tests/e2e/checkpoint_files.py
// ("runs") does the same with real jobs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "drtrain/core/error.hpp"
#include "drtrain/io/checkpoint_store.hpp"

namespace fs = std::filesystem;
using namespace drt::io;

namespace {

// A fresh directory per test.
class Dir {
 public:
  explicit Dir(const std::string& name)
      : path_(fs::temp_directory_path() / ("drt-ckpt-store-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    prepare_checkpoint_dir(path_.string());
  }
  ~Dir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  std::string ckpt(std::int64_t step) const { return checkpoint_path(str(), step); }

 private:
  fs::path path_;
};

// Files named by step, each "written" by a run ("" = no run id, "?" = unreadable).
struct Fake {
  std::map<std::int64_t, std::string> runs;
  void make(const Dir& d) const {
    for (const auto& [step, run] : runs) std::ofstream(d.ckpt(step)) << run;
  }
  Identify identify() const {
    return [this](const std::string& path, std::int64_t step) {
      StoredCheckpoint s;
      s.path = path;
      s.step = step;
      const auto it = runs.find(step);
      if (it == runs.end() || it->second == "?") {
        s.problem = "not a readable HDF5 file";
        return s;
      }
      s.readable = true;
      s.run_id = it->second;
      return s;
    };
  }
};

std::set<std::int64_t> steps_in(const Dir& d) {
  std::set<std::int64_t> out;
  for (const std::string& p : list_checkpoints(d.str())) out.insert(step_of(fs::path(p).filename().string()));
  return out;
}

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const drt::ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// A: 10, 20, 30, 40; B resumed A's checkpoint after 20 updates: 25, 35, 45; U, another run: 5;
// a file without a run id: 3; an unreadable one: 1.
Fake two_lines() {
  Fake f;
  f.runs = {{10, "A"}, {20, "A"}, {30, "A"}, {40, "A"}, {25, "B"}, {35, "B"}, {45, "B"}, {5, "U"}, {3, ""}, {1, "?"}};
  return f;
}

}  // namespace

TEST(CheckpointStore, NamesParseBackToTheirStepAtAnySize) {
  for (std::int64_t step : {std::int64_t{0}, std::int64_t{1200}, std::int64_t{99999999}, std::int64_t{100000000},
                            std::int64_t{123456789012}}) {
    const std::string name = fs::path(checkpoint_path("d", step)).filename().string();
    EXPECT_EQ(step_of(name), step) << name;
  }
  EXPECT_EQ(fs::path(checkpoint_path("d", 1200)).filename(), "ckpt-00001200.h5");
  EXPECT_EQ(fs::path(checkpoint_path("d", 100000000)).filename(), "ckpt-100000000.h5");
  for (const char* other : {"ckpt-1200.h5", "ckpt-0000120x.h5", "ckpt-00001200.h5.tmp", ".ckpt-00001200.h5.tmp",
                            "ckpt-00001200.h6", "xckpt-00001200.h5", "ckpt-1234567890123456789.h5", "ckpt-.h5"})
    EXPECT_EQ(step_of(other), -1) << other;
}

TEST(CheckpointStore, ListsNewestFirstAcrossTheEightDigitBoundaryAndRetentionKeepsTheNewest) {
  const Dir dir("order");
  Fake fake;
  for (std::int64_t step : {std::int64_t{99999999}, std::int64_t{100000000}, std::int64_t{7}, std::int64_t{100000001}})
    fake.runs[step] = "A";
  fake.make(dir);
  std::ofstream(temporary_path(dir.str(), 100000002)) << "x";
  const auto all = list_checkpoints(dir.str());
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0], dir.ckpt(100000001));
  EXPECT_EQ(all[1], dir.ckpt(100000000));
  EXPECT_EQ(all[2], dir.ckpt(99999999));
  EXPECT_EQ(all[3], dir.ckpt(7));
  const auto removed = apply_retention(dir.str(), 2, Lineage::fresh("A"), true, fake.identify());
  EXPECT_EQ(removed.size(), 3u);  // steps 99999999 and 7, and the temporary file
  EXPECT_EQ(steps_in(dir), (std::set<std::int64_t>{100000000, 100000001}));
  EXPECT_FALSE(fs::exists(temporary_path(dir.str(), 100000002)));
}

TEST(CheckpointStore, RunIdsAreFreshHexWords) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = new_run_id();
    ASSERT_EQ(id.size(), 32u) << id;
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

TEST(CheckpointStore, LineagesReadBackBoundTheirAncestorsAndStaySmall) {
  const Lineage a = Lineage::fresh("A");
  const Lineage c = a.child(20, "B").child(45, "C");
  EXPECT_EQ(c.text(), "A@20 B@45 C");
  EXPECT_EQ(c.run_id(), "C");
  const auto back = Lineage::parse(c.text());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->text(), c.text());
  // An ancestor's files up to the step the line left it at; the run's own at any step.
  EXPECT_TRUE(c.contains("A", 20));
  EXPECT_FALSE(c.contains("A", 21));
  EXPECT_TRUE(c.contains("B", 45));
  EXPECT_FALSE(c.contains("B", 50));
  EXPECT_TRUE(c.contains("C", 7));
  EXPECT_TRUE(c.contains("C", 1000000));
  EXPECT_FALSE(c.contains("", 1));  // a file without a run id is never of a line
  EXPECT_FALSE(c.contains("D", 1));
  // A parent without a run id (an older drtrain): just the new run.
  EXPECT_EQ(Lineage().child(30, "R").text(), "R");
  for (const char* bad : {"A@", "A@x B", "A B", "A@20", "A@-1 B", "A@1@2 B", "@3 B"})
    EXPECT_FALSE(Lineage::parse(bad)) << bad;
  ASSERT_TRUE(Lineage::parse(""));
  EXPECT_TRUE(Lineage::parse("")->empty());
  Lineage long_line = Lineage::fresh("r0");
  for (int i = 1; i < 200; ++i) long_line = long_line.child(i, "r" + std::to_string(i));
  EXPECT_EQ(long_line.entries().size(), Lineage::kMaxEntries);
  EXPECT_EQ(long_line.run_id(), "r199");
  EXPECT_FALSE(long_line.contains("r0", 0));  // dropped: counts as another line's (never removed)
  EXPECT_TRUE(long_line.contains("r150", 151));
}

// The defect (issue 37): retention kept the --keep highest step numbers of the whole directory,
// so a run that resumed an older checkpoint lost each of its own checkpoints as soon as it was
// published, and removed other runs' files.
TEST(CheckpointStore, RetentionRemovesOnlyTheRunsLine) {
  const Dir dir("retention");
  const Fake fake = two_lines();
  fake.make(dir);
  std::ofstream(temporary_path(dir.str(), 55)) << "x";
  const Lineage b = Lineage::fresh("A").child(20, "B");
  auto removed = apply_retention(dir.str(), 2, b, false, fake.identify());
  // B's line is A's 10 and 20, then B's 25, 35, 45: the 2 newest stay. A's 30 and 40 (after the
  // step B left A at), U's file, the file without a run id and the unreadable one are not B's.
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_EQ(steps_in(dir), (std::set<std::int64_t>{1, 3, 5, 30, 35, 40, 45}));
  EXPECT_TRUE(fs::exists(temporary_path(dir.str(), 55)));  // a live writer's, for all we know
  removed = apply_retention(dir.str(), 1, b, true, fake.identify());
  EXPECT_EQ(steps_in(dir), (std::set<std::int64_t>{1, 3, 5, 30, 40, 45}));
  EXPECT_FALSE(fs::exists(temporary_path(dir.str(), 55)));  // the lock is held: stale
}

TEST(CheckpointStore, LatestRecordsReadBackAndBadOnesAreNamed) {
  const Dir dir("latest");
  std::string problem;
  EXPECT_FALSE(read_latest(dir.str(), &problem));
  EXPECT_EQ(problem, "");  // none: not a problem
  write_latest(dir.str(), {"ckpt-00000045.h5", "B", 45, "A@20 B", ""});
  const auto r = read_latest(dir.str(), &problem);
  ASSERT_TRUE(r) << problem;
  EXPECT_EQ(r->file, "ckpt-00000045.h5");
  EXPECT_EQ(r->run_id, "B");
  EXPECT_EQ(r->step, 45);
  EXPECT_EQ(r->lineage, "A@20 B");
  EXPECT_EQ(r->published.size(), 20u) << r->published;  // 2026-12-03T10:00:00Z
  for (const char* text : {"file = ckpt-00000045.h5\nrun_id = B\nstep = 44\nlineage = B\n",
                           "file = ../ckpt-00000045.h5\nrun_id = B\nstep = 45\nlineage = B\n",
                           "file = ckpt-00000045.h5\nrun_id = B\nstep = 45\nlineage = A@20 C\n", "garbage"}) {
    std::ofstream(latest_path(dir.str())) << text;
    problem.clear();
    EXPECT_FALSE(read_latest(dir.str(), &problem)) << text;
    EXPECT_NE(problem.find("LATEST"), std::string::npos) << problem;
  }
}

// The defect: plain --resume took the highest step number, whichever run had written it.
TEST(CheckpointStore, ResumeTriesTheLineOfTheRunThatWroteLast) {
  const Dir dir("choice");
  const Fake fake = two_lines();
  fake.make(dir);
  const auto files = scan_checkpoints(dir.str(), fake.identify());
  ASSERT_EQ(files.front().step, 45);
  auto names = [&](const std::vector<std::string>& paths) {
    std::vector<std::int64_t> steps;
    steps.reserve(paths.size());
    for (const auto& p : paths) steps.push_back(step_of(fs::path(p).filename().string()));
    return steps;
  };
  // B wrote last: its line, newest first; never A's 30 and 40, U's, unknown or unreadable files.
  const LatestRecord b{"ckpt-00000045.h5", "B", 45, "A@20 B", ""};
  EXPECT_EQ(names(resume_candidates(files, b)), (std::vector<std::int64_t>{45, 35, 25, 20, 10}));
  // A wrote last (B's line came first, then A went on): A's files only.
  const LatestRecord a{"ckpt-00000040.h5", "A", 40, "A", ""};
  EXPECT_EQ(names(resume_candidates(files, a)), (std::vector<std::int64_t>{40, 30, 20, 10}));
  // LATEST's own file is tried even when its metadata cannot be read (and then skipped).
  const LatestRecord u{"ckpt-00000001.h5", "U", 1, "U", ""};
  EXPECT_EQ(names(resume_candidates(files, u)), (std::vector<std::int64_t>{5, 1}));
  // No LATEST (an older drtrain's directory): every file, newest first.
  EXPECT_EQ(names(resume_candidates(files, std::nullopt)),
            (std::vector<std::int64_t>{45, 40, 35, 30, 25, 20, 10, 5, 3, 1}));
}

// The defects: a fresh run into a used directory overwrote the files of the same steps and left a
// mix of two runs; a run resumed from an older checkpoint wrote over the later ones.
TEST(CheckpointStore, StartUpRefusesRunsThatWouldOverwriteOrMixWithAnotherLine) {
  const Dir dir("use");
  const Dir empty("use-empty");
  const Fake fake = two_lines();
  fake.make(dir);
  const auto files = scan_checkpoints(dir.str(), fake.identify());
  const std::optional<LatestRecord> latest = LatestRecord{"ckpt-00000045.h5", "B", 45, "A@20 B", ""};

  // From scratch, no --resume: any checkpoint there.
  RunStart scratch;
  check_directory_use(empty.str(), {}, Lineage::fresh("C"), scratch);  // nothing there: fine
  std::string m = config_error([&] { check_directory_use(dir.str(), files, Lineage::fresh("C"), scratch); });
  for (const char* part : {"--checkpoint-dir ", "already holds checkpoints of another run", "run B: steps 25, 35, 45",
                           "run A: steps 10, 20, 30, 40", "newest ", "ckpt-00000045.h5", "pass --resume",
                           "another --checkpoint-dir", "remove those files"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  EXPECT_NE(m.find(dir.str()), std::string::npos) << m;

  // Resumed from B's newest: every other line's file is before step 45.
  RunStart resumed;
  resumed.resume = true;
  resumed.parent = dir.ckpt(45);
  resumed.parent_run_id = "B";
  resumed.parent_step = 45;
  resumed.latest = latest;
  check_directory_use(dir.str(), files, Lineage::fresh("A").child(20, "B").child(45, "C"), resumed);

  // Resumed from A's 20 (a fork): A's 30 and 40 and B's files lie after it.
  RunStart fork = resumed;
  fork.parent = dir.ckpt(20);
  fork.parent_run_id = "A";
  fork.parent_step = 20;
  m = config_error([&] { check_directory_use(dir.str(), files, Lineage::fresh("A").child(20, "D"), fork); });
  for (const char* part :
       {"--resume ", "continues run A from step 20", "run B: steps 25, 35, 45", "run A: steps 30, 40",
        "another --checkpoint-dir", "move away", "--resume without a file to continue the run that wrote last"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  EXPECT_EQ(m.find("step 5"), std::string::npos) << m;  // U's file is before the fork

  // Resumed from another directory's checkpoint after 40 updates: only B's 45 is in the way.
  RunStart elsewhere = resumed;
  elsewhere.parent = "/elsewhere/ckpt-00000040.h5";
  elsewhere.parent_run_id = "Z";
  elsewhere.parent_step = 40;
  m = config_error([&] { check_directory_use(dir.str(), files, Lineage::fresh("Z").child(40, "E"), elsewhere); });
  EXPECT_NE(m.find("run B: step 45"), std::string::npos) << m;
  EXPECT_EQ(m.find("run A"), std::string::npos) << m;
  // ... after 45: nothing in the way; at 45 itself only when the run may write that step.
  elsewhere.parent_step = 45;
  check_directory_use(dir.str(), files, Lineage::fresh("Z").child(45, "E"), elsewhere);
  elsewhere.saves_parent_step = true;
  m = config_error([&] { check_directory_use(dir.str(), files, Lineage::fresh("Z").child(45, "E"), elsewhere); });
  EXPECT_NE(m.find("run B: step 45"), std::string::npos) << m;

  // --resume found nothing valid in B's line: the other runs' files are in the way, the files it
  // passed over as damaged and the unreadable one are not.
  RunStart nothing;
  nothing.resume = true;
  nothing.latest = latest;
  nothing.skipped = {dir.ckpt(45), dir.ckpt(35), dir.ckpt(25), dir.ckpt(20), dir.ckpt(10)};
  m = config_error([&] { check_directory_use(dir.str(), files, Lineage::fresh("F"), nothing); });
  for (const char* part : {"--resume found no valid checkpoint of the line of run B", "passed over",
                           "run A: steps 30, 40", "run U: step 5", "files without a run id", "--resume FILE"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  EXPECT_EQ(m.find("unreadable"), std::string::npos) << m;
}

TEST(CheckpointStore, PublishRecordsLatestFirstAndNeverReplacesAnotherLinesFile) {
  const Dir dir("publish");
  Fake fake;
  fake.runs = {{30, "A"}};
  fake.make(dir);
  const Lineage b = Lineage::fresh("A").child(20, "B");
  std::ofstream(temporary_path(dir.str(), 25)) << "B";
  fake.runs[25] = "B";
  publish_checkpoint(temporary_path(dir.str(), 25), dir.ckpt(25), {"ckpt-00000025.h5", "B", 25, b.text(), ""}, b,
                     fake.identify());
  EXPECT_TRUE(fs::exists(dir.ckpt(25)));
  EXPECT_FALSE(fs::exists(temporary_path(dir.str(), 25)));
  ASSERT_TRUE(read_latest(dir.str()));
  EXPECT_EQ(read_latest(dir.str())->file, "ckpt-00000025.h5");
  // A's 30 is not B's: not replaced, LATEST unchanged.
  std::ofstream(temporary_path(dir.str(), 30)) << "B";
  try {
    publish_checkpoint(temporary_path(dir.str(), 30), dir.ckpt(30), {"ckpt-00000030.h5", "B", 30, b.text(), ""}, b,
                       fake.identify());
    ADD_FAILURE() << "replaced another run's checkpoint";
  } catch (const drt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("of run A, which is not this run's line"), std::string::npos) << e.what();
  }
  std::ifstream in(dir.ckpt(30));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "A");
  EXPECT_EQ(read_latest(dir.str())->file, "ckpt-00000025.h5");
}

// The defect: two jobs on one directory went unnoticed and deleted each other's checkpoints.
TEST(CheckpointStore, ASecondHolderOfTheDirectoryIsRefusedAndNamesTheFirst) {
  const Dir dir("lock");
  {
    const DirectoryLock first(dir.str());
    ASSERT_TRUE(first.held());
    // Another process (a second job's PS 0).
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      const std::string m = config_error([&] { DirectoryLock second(dir.str()); });
      const bool ok = m.find("is in use by another job") != std::string::npos &&
                      m.find("pid " + std::to_string(::getppid())) != std::string::npos &&
                      m.find("another --checkpoint-dir") != std::string::npos;
      if (!ok) std::fprintf(stderr, "the second lock said: %s\n", m.c_str());
      ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // The same process through another open file (the lock is per open file where the kernel
    // has OFD locks, so a second job in one process, as in the MPI tests, is refused too).
    const std::string m = config_error([&] { DirectoryLock again(dir.str()); });
    EXPECT_NE(m.find("is in use by another job"), std::string::npos) << m;
  }
  const DirectoryLock after(dir.str());  // released with its holder
  EXPECT_TRUE(after.held());
}
