// The drtrain command line and INI files: defaults, overrides (the command line wins over
// --config), --print-config round trips, and clear errors naming the flag or file.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/stop_signals.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/train/train_config.hpp"

namespace drt::train {
namespace {

std::optional<TrainConfig> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "drtrain");
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_config(static_cast<int>(argv.size()), argv.data(), false);
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string write_file(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TrainConfig, DefaultsAndFlags) {
  const TrainConfig d = *parse({});
  EXPECT_EQ(d.model, "mlp");
  EXPECT_EQ(d.batch_size, 128);
  EXPECT_EQ(d.layout.num_ps, 1);
  const TrainConfig c = *parse({"--model", "cnn", "--lr", "0.1", "--optimizer", "adamw", "--towers", "2",
                                "--lr-schedule", "cosine", "--warmup-steps", "10", "--deterministic"});
  EXPECT_EQ(c.model, "cnn");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.1);
  EXPECT_EQ(c.optimizer.kind, optim::OptimizerKind::kAdamW);
  EXPECT_EQ(c.towers, 2);
  EXPECT_EQ(c.optimizer.schedule.kind, optim::LrScheduleKind::kCosine);
  EXPECT_TRUE(c.exchange.per_worker_slots());
  EXPECT_EQ(d.exchange.wire, ps::Wire::kFp32);
  EXPECT_EQ(d.exchange.wire_bytes(), 4u);
  const TrainConfig w = *parse({"--wire", "bf16"});
  EXPECT_EQ(w.exchange.wire, ps::Wire::kBf16);
  EXPECT_EQ(w.exchange.wire_bytes(), 2u);
  EXPECT_TRUE(w.exchange.per_worker_slots());  // MPI has no bf16 sum: slots summed on the PS
  EXPECT_FALSE(d.overlap);
  const TrainConfig o = *parse({"--overlap", "true", "--bucket-kib", "256"});
  EXPECT_TRUE(o.overlap);
  EXPECT_EQ(o.bucket_kib, 256u);
}

// --checkpoint-start: off by default, needs a directory, and survives --print-config.
TEST(TrainConfig, CheckpointStart) {
  EXPECT_FALSE(parse({})->checkpoint_start);
  const TrainConfig c = *parse({"--checkpoint-dir", "/tmp/drt_ckpt_start", "--checkpoint-start", "true"});
  EXPECT_TRUE(c.checkpoint_start);
  const TrainConfig back = *parse({"--config", write_file("drt_checkpoint_start.ini", c.to_ini())});
  EXPECT_TRUE(back.checkpoint_start);
  EXPECT_EQ(error_of({"--checkpoint-start", "true"}), "--checkpoint-start needs --checkpoint-dir DIR");
}

TEST(TrainConfig, ConfigFileAndCommandLineWins) {
  const std::string file = write_file("drt_cfg.ini", "model = cnn\nlr = 0.2\nepochs = 7\nnesterov = true\n");
  const TrainConfig c = *parse({"--config", file, "--lr", "0.3"});
  EXPECT_EQ(c.model, "cnn");
  EXPECT_EQ(c.epochs, 7);
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.3);  // the command line wins
}

TEST(TrainConfig, PrintConfigRoundTrips) {
  const TrainConfig c = *parse({"--model", "mlp:784-64-10", "--batch-size", "96", "--optimizer", "adam", "--beta2",
                                "0.99", "--rma-sync", "fence", "--seed", "42", "--eval", "false", "--overlap", "true"});
  const std::string file = write_file("drt_roundtrip.ini", c.to_ini());
  const TrainConfig back = *parse({"--config", file});
  EXPECT_EQ(back.to_ini(), c.to_ini());
  EXPECT_EQ(back.model, "mlp:784-64-10");
  EXPECT_FALSE(back.eval);
  EXPECT_TRUE(back.overlap);
}

TEST(TrainConfig, ErrorsNameTheProblem) {
  EXPECT_NE(error_of({"--optimizer", "lbfgs"}).find("choices: sgd, adam, adamw"), std::string::npos);
  EXPECT_NE(error_of({"--lr-schedule", "exp"}).find("choices: constant, step, cosine"), std::string::npos);
  EXPECT_NE(error_of({"--dataset", "cifar"}).find("choices: fashion-mnist, synthetic"), std::string::npos);
  EXPECT_NE(error_of({"--bucket-kib", "0"}).find("--bucket-kib must be at least 1"), std::string::npos);
  EXPECT_NE(error_of({"--test-samples", "-1"}).find("--test-samples must be >= 0"), std::string::npos);
  EXPECT_NE(error_of({"--model", "resnet"}).find("resnet20"), std::string::npos);
  EXPECT_NE(error_of({"--wire", "fp8"}).find("choices: fp32, bf16"), std::string::npos);
  EXPECT_NE(error_of({"--wire", "bf16", "--grad-push", "ordered"}).find("drop --grad-push ordered"), std::string::npos);
  EXPECT_NE(error_of({"--wire", "bf16", "--rma-sync", "fence"}).find("use --rma-sync passive"), std::string::npos);
  EXPECT_NE(error_of({"--epochs", "0"}).find("--epochs must be at least 1"), std::string::npos);
  EXPECT_NE(error_of({"--lr", "abc"}).find("--lr"), std::string::npos);
  EXPECT_NE(error_of({"--config", "/nonexistent/x.ini"}).find("/nonexistent/x.ini: cannot open"), std::string::npos);
  EXPECT_NE(error_of({"--stop-signals", "TERM,KILL"}).find("KILL cannot be caught"), std::string::npos);
  EXPECT_NE(error_of({"--stop-signals", "TERM,FOO"}).find("unknown signal 'FOO'"), std::string::npos);
  EXPECT_NE(error_of({"--stop-signals", "11"}).find("signal 11 cannot be a stop signal"), std::string::npos);
  EXPECT_EQ(parse_stop_signals("sigterm, USR1,12"), (std::vector<int>{SIGTERM, SIGUSR1, 12}));
  EXPECT_TRUE(parse_stop_signals("none").empty());
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  // A stray word or a value without its flag is an error, not silently ignored.
  EXPECT_NE(error_of({"--epochs", "2", "foo"}).find("unexpected argument 'foo'"), std::string::npos);
  EXPECT_NE(error_of({"cnn", "--epochs", "2"}).find("unexpected argument 'cnn'"), std::string::npos);
  const std::string bad = write_file("drt_bad.ini", "modle = cnn\n");
  const std::string message = error_of({"--config", bad});
  EXPECT_NE(message.find("modle"), std::string::npos) << message;
  EXPECT_NE(message.find(bad), std::string::npos) << message;
}

// --peak-tflops: off by default, survives --print-config, refuses what is not a peak.
TEST(TrainConfig, PeakTflops) {
  EXPECT_EQ(parse({})->peak_tflops, 0.0);
  const TrainConfig c = *parse({"--peak-tflops", "989"});
  EXPECT_EQ(c.peak_tflops, 989.0);
  const TrainConfig back = *parse({"--config", write_file("drt_peak.ini", c.to_ini())});
  EXPECT_EQ(back.peak_tflops, 989.0);
  EXPECT_NE(c.to_ini().find("peak-tflops = 989\n"), std::string::npos);
  for (const char* bad : {"-1", "nan", "inf"})
    EXPECT_NE(error_of({"--peak-tflops", bad}).find("--peak-tflops must be a finite number >= 0"), std::string::npos)
        << bad;
}

// --decay-rule, --grad-clip and --cosine-steps: defaults, the round trip through --print-config,
// and the errors (each names the flag and what to do).
TEST(TrainConfig, DecayRuleGradClipAndCosineSteps) {
  const TrainConfig d = *parse({});
  EXPECT_EQ(d.optimizer.decay_rule, DecayRule::kMatrices);
  EXPECT_EQ(d.optimizer.grad_clip, 0.0);
  EXPECT_EQ(d.optimizer.schedule.total_steps, 0);  // the run's total steps
  const TrainConfig c = *parse({"--optimizer", "adamw", "--weight-decay", "0.1", "--decay-rule", "all", "--grad-clip",
                                "1.5", "--lr-schedule", "cosine", "--warmup-steps", "20", "--cosine-steps", "500",
                                "--min-lr", "6e-5", "--sync-mode", "backup:1"});
  EXPECT_EQ(c.optimizer.decay_rule, DecayRule::kAll);
  EXPECT_EQ(c.optimizer.grad_clip, 1.5);
  EXPECT_EQ(c.optimizer.schedule.total_steps, 500);
  const TrainConfig back = *parse({"--config", write_file("drt_clip.ini", c.to_ini())});
  EXPECT_EQ(back.to_ini(), c.to_ini());
  EXPECT_EQ(back.optimizer.decay_rule, DecayRule::kAll);
  EXPECT_EQ(back.optimizer.grad_clip, 1.5);
  EXPECT_EQ(back.optimizer.schedule.total_steps, 500);
  EXPECT_NE(c.to_ini().find("decay-rule = all\n"), std::string::npos);
  EXPECT_NE(c.optimizer.describe().find("--decay-rule all"), std::string::npos);
  EXPECT_NE(c.optimizer.describe().find("grad_clip=1.5"), std::string::npos);

  EXPECT_NE(error_of({"--decay-rule", "matrix"}).find("unknown --decay-rule 'matrix'; choices: matrices, all"),
            std::string::npos);
  EXPECT_NE(error_of({"--grad-clip", "-1"}).find("--grad-clip must be >= 0"), std::string::npos);
  for (const char* mode : {"ssp:2", "async"}) {
    const std::string m = error_of({"--grad-clip", "1", "--sync-mode", mode});
    EXPECT_NE(m.find("--grad-clip 1 needs --sync-mode sync or backup:B"), std::string::npos) << m;
    EXPECT_NE(m.find("applied on its own as it arrives"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(parse({"--grad-clip", "1", "--sync-mode", "backup:0", "--wire", "bf16"}));
  EXPECT_NO_THROW(parse({"--grad-clip", "1", "--rma-sync", "fence", "--deterministic"}));
  const std::string m = error_of({"--lr-schedule", "cosine", "--warmup-steps", "50", "--cosine-steps", "50"});
  EXPECT_NE(m.find("decay length above --warmup-steps (50)"), std::string::npos) << m;
  EXPECT_NE(m.find("--cosine-steps"), std::string::npos) << m;
  EXPECT_NE(error_of({"--cosine-steps", "-3"}).find("--cosine-steps must be >= 0"), std::string::npos);
}

// --sync-mode: the forms, their round trip through --print-config, and the combinations that
// cannot work (each error says why); --straggler and --eval-every.
TEST(TrainConfig, SyncModesAndStragglers) {
  const TrainConfig d = *parse({});
  EXPECT_EQ(d.exchange.mode.kind, ps::SyncKind::kSync);
  EXPECT_FALSE(d.exchange.per_worker_slots());
  const TrainConfig b = *parse({"--sync-mode", "backup:2", "--straggler", "3:2.5", "--eval-every", "100"});
  EXPECT_EQ(b.exchange.mode.kind, ps::SyncKind::kBackup);
  EXPECT_EQ(b.exchange.mode.bound, 2);
  EXPECT_TRUE(b.exchange.per_worker_slots());  // the relaxed modes push into per-worker slots
  EXPECT_EQ(b.parse_straggler().worker, 3);
  EXPECT_DOUBLE_EQ(b.parse_straggler().factor, 2.5);
  EXPECT_EQ(b.eval_every, 100);
  EXPECT_EQ(d.parse_straggler().worker, -1);
  for (const char* mode : {"sync", "backup:0", "backup:1", "ssp:3", "async"})
    EXPECT_EQ(ps::to_string(ps::parse_sync_mode(mode)), mode);
  const std::string file = write_file("drt_sync_mode.ini", b.to_ini());
  const TrainConfig back = *parse({"--config", file});
  EXPECT_EQ(back.exchange.mode, b.exchange.mode);
  EXPECT_EQ(back.straggler, "3:2.5");
  EXPECT_EQ(back.to_ini(), b.to_ini());
  for (const char* bad : {"ssp:0", "ssp", "backup:", "backup:x", "asynch", "ssp:-1", "backup:1:2"})
    EXPECT_NE(error_of({"--sync-mode", bad}).find("use sync, backup:B"), std::string::npos) << bad;
  EXPECT_NE(error_of({"--sync-mode", "async", "--deterministic"}).find("no run can be repeated bitwise"),
            std::string::npos);
  EXPECT_NE(error_of({"--sync-mode", "ssp:2", "--rma-sync", "fence"}).find("needs --rma-sync passive"),
            std::string::npos);
  EXPECT_NE(error_of({"--sync-mode", "backup:1", "--grad-push", "ordered"}).find("per-worker slots"),
            std::string::npos);
  for (const char* bad : {"3", "3:0.5", "x:3", "3:fast", ":3"})
    EXPECT_NE(error_of({"--straggler", bad}).find("use WORKER:FACTOR"), std::string::npos) << bad;
  EXPECT_NE(error_of({"--eval-every", "-5"}).find("--eval-every must be >= 0"), std::string::npos);
  ps::ExchangeConfig x;
  x.mode = ps::parse_sync_mode("backup:3");
  EXPECT_NO_THROW(x.validate_for(4));
  try {
    x.validate_for(3);
    ADD_FAILURE() << "backup:3 with 3 workers accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("B must be below the number of workers (3)"), std::string::npos);
  }
}

// --lookahead: auto by default, off, or a fixed number of updates; it round-trips through
// --print-config, and a fixed k where it cannot apply is an error that says why.
TEST(TrainConfig, Lookahead) {
  const TrainConfig d = *parse({});
  EXPECT_EQ(d.exchange.lookahead.kind, ps::Lookahead::Kind::kAuto);
  const TrainConfig a = *parse({"--sync-mode", "async", "--momentum", "0.9", "--lookahead", "1.5"});
  EXPECT_EQ(a.exchange.lookahead.kind, ps::Lookahead::Kind::kFixed);
  EXPECT_DOUBLE_EQ(a.exchange.lookahead.k, 1.5);
  EXPECT_TRUE(a.exchange.lookahead_active(true, 1));  // a fixed k applies even to one worker
  const TrainConfig back = *parse({"--config", write_file("drt_lookahead.ini", a.to_ini())});
  EXPECT_EQ(back.exchange.lookahead, a.exchange.lookahead);
  EXPECT_EQ(parse({"--sync-mode", "ssp:2", "--lookahead", "off"})->exchange.lookahead.kind, ps::Lookahead::Kind::kOff);
  EXPECT_FALSE(parse({"--sync-mode", "ssp:2", "--lookahead", "off"})->exchange.lookahead_active(true, 4));
  for (const char* bad : {"0", "-1", "x", "2x", "", "nan", "inf", "1e9"})
    EXPECT_NE(error_of({"--sync-mode", "async", "--lookahead", bad}).find("use auto (updates ahead"), std::string::npos)
        << bad;
  EXPECT_NE(error_of({"--lookahead", "2"}).find("is for --sync-mode ssp:S and async"), std::string::npos);
  EXPECT_NE(error_of({"--sync-mode", "backup:1", "--lookahead", "2"}).find("is for --sync-mode ssp:S and async"),
            std::string::npos);
  EXPECT_NE(error_of({"--sync-mode", "async", "--lookahead", "2", "--optimizer", "adam"}).find("needs --optimizer sgd"),
            std::string::npos);
  EXPECT_NE(error_of({"--sync-mode", "async", "--lookahead", "2", "--momentum", "0"}).find("--momentum above 0"),
            std::string::npos);
  // auto and off are accepted with any mode and optimizer (auto is the default everywhere).
  EXPECT_NO_THROW(parse({"--sync-mode", "async", "--optimizer", "adam", "--lookahead", "auto"}));
  EXPECT_NO_THROW(parse({"--lookahead", "off"}));
}

TEST(TrainConfig, HelpVersionAndPrintConfigStop) {
  EXPECT_FALSE(parse({"--help"}).has_value());
  EXPECT_FALSE(parse({"--version"}).has_value());
  EXPECT_FALSE(parse({"--print-config"}).has_value());
}

// Issue 34, item 1: an option given again overrides the earlier value (a job script's own flags,
// then the user's), on the command line and within an INI; the command line still wins over --config.
TEST(TrainConfig, LastValueWins) {
  const TrainConfig c = *parse({"--lr", "0.1", "--num-ps", "2", "--lr", "0.2", "--checkpoint-dir", "/tmp/a",
                                "--checkpoint-dir", "/tmp/b", "--num-ps", "1"});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.2);
  EXPECT_EQ(c.layout.num_ps, 1);
  EXPECT_EQ(c.checkpoint_dir, "/tmp/b");
  const std::string file = write_file("drt_twice.ini", "epochs = 3\nepochs = 5\nlr = 0.3\n");
  const TrainConfig f = *parse({"--config", file});
  EXPECT_EQ(f.epochs, 5);
  EXPECT_DOUBLE_EQ(f.optimizer.lr, 0.3);
  EXPECT_DOUBLE_EQ(parse({"--config", file, "--lr", "0.4", "--lr", "0.5"})->optimizer.lr, 0.5);
}

// Item 2: every on/off option takes true/false (yes/no, on/off, 1/0) as a separate word or after
// '=', and alone means true; so an INI's "deterministic = true" can be switched off.
TEST(TrainConfig, OnOffOptionsCanBeSwitchedOff) {
  EXPECT_TRUE(parse({"--deterministic"})->exchange.deterministic);
  EXPECT_FALSE(parse({"--deterministic", "false"})->exchange.deterministic);
  EXPECT_FALSE(parse({"--deterministic=false"})->exchange.deterministic);
  EXPECT_FALSE(parse({"--deterministic", "--deterministic", "off"})->exchange.deterministic);
  EXPECT_TRUE(parse({"--nesterov", "yes"})->optimizer.nesterov);
  EXPECT_FALSE(parse({"--nesterov", "0"})->optimizer.nesterov);
  EXPECT_TRUE(parse({"--overlap"})->overlap);
  EXPECT_FALSE(parse({"--eval", "false"})->eval);
  EXPECT_TRUE(parse({"--eval"})->eval);
  const std::string ini = write_file("drt_det.ini", "deterministic = true\nnesterov = true\n");
  EXPECT_TRUE(parse({"--config", ini})->exchange.deterministic);
  const TrainConfig off = *parse({"--config", ini, "--deterministic", "false", "--grad-push", "accumulate"});
  EXPECT_FALSE(off.exchange.deterministic);
  EXPECT_EQ(off.exchange.grad_push(), ps::GradPush::kAccumulate);
  EXPECT_TRUE(off.optimizer.nesterov);
  EXPECT_NE(error_of({"--deterministic", "maybe"}).find("--deterministic"), std::string::npos);
}

// Item 2: options that contradict each other are an error naming both and where each was set,
// instead of one being silently ignored; --print-config shows the push in effect.
TEST(TrainConfig, ContradictionsNameBothAndWhereEachCameFrom) {
  const std::string ini = write_file("drt_det_only.ini", "deterministic = true\n");
  std::string m = error_of({"--config", ini, "--grad-push", "accumulate"});
  EXPECT_NE(m.find("--grad-push accumulate (the command line) contradicts --deterministic (--config " + ini + ")"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("--deterministic false"), std::string::npos) << m;
  m = error_of({"--wire", "bf16", "--grad-push", "accumulate"});
  EXPECT_NE(m.find("contradicts --wire bf16 (the command line)"), std::string::npos) << m;
  m = error_of({"--sync-mode", "async", "--grad-push", "accumulate"});
  EXPECT_NE(m.find("contradicts --sync-mode async"), std::string::npos) << m;
  // Any other error about options set in an INI says which of them came from the file.
  const std::string ranges = write_file("drt_fence.ini", "rma-sync = fence\n");
  m = error_of({"--config", ranges, "--grad-push", "ordered"});
  EXPECT_NE(m.find("--grad-push ordered needs --rma-sync passive"), std::string::npos) << m;
  EXPECT_NE(m.find("(--rma-sync: from --config " + ranges + ")"), std::string::npos) << m;
  // Saying the same thing twice is no contradiction.
  EXPECT_NO_THROW(parse({"--deterministic", "--grad-push", "slots"}));
  const TrainConfig d = *parse({"--config", ini});
  EXPECT_NE(d.to_ini().find("grad-push = slots\n"), std::string::npos);
  const TrainConfig back = *parse({"--config", write_file("drt_det_back.ini", d.to_ini())});
  EXPECT_EQ(back.to_ini(), d.to_ini());
}

// Item 3: --help shows defaults as a user writes them.
TEST(TrainConfig, HelpShowsDefaultsAsWritten) {
  std::vector<std::string> args{"drtrain", "--help"};
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (auto& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStdout();
  parse_train_config(static_cast<int>(argv.size()), argv.data(), true);
  const std::string help = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(help.find("--lr arg (=0.05)"), std::string::npos) << help;
  EXPECT_NE(help.find("--eps arg (=1e-8)"), std::string::npos) << help;
  EXPECT_NE(help.find("--hang-timeout arg (=300)"), std::string::npos) << help;
  EXPECT_NE(help.find("--deterministic [=arg(=true)] (=false)"), std::string::npos) << help;
  EXPECT_EQ(help.find("000000000"), std::string::npos) << help;  // no 0.050000000000000003
  EXPECT_NE(help.find("--check"), std::string::npos) << help;
  EXPECT_NE(help.find("--dry-run"), std::string::npos) << help;
}

TEST(Strings, ShortestReadsBackTheSameDouble) {
  EXPECT_EQ(shortest(0.05), "0.05");
  EXPECT_EQ(shortest(300.0), "300");
  EXPECT_EQ(shortest(1e-8), "1e-8");
  EXPECT_EQ(shortest(0.999), "0.999");
  EXPECT_EQ(shortest(-2.5), "-2.5");
  EXPECT_EQ(shortest(1e20), "1e20");
  for (double v : {0.1, 1.0 / 3.0, 6.02214076e23, 5e-324, 0.30000000000000004})
    EXPECT_EQ(std::strtod(shortest(v).c_str(), nullptr), v) << shortest(v);
}

TEST(Strings, SplitExactKeepsEmptyPieces) {
  EXPECT_EQ(split_exact("a; ; b", "; "), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split_exact("x\ny\n", "\n"), (std::vector<std::string>{"x", "y", ""}));
  EXPECT_EQ(split_exact("", ";"), (std::vector<std::string>{""}));
}

// --check and --dry-run set the check mode; a run is not a check.
TEST(TrainConfig, CheckAndDryRun) {
  EXPECT_FALSE(parse({})->check);
  EXPECT_TRUE(parse({"--check"})->check);
  EXPECT_TRUE(parse({"--dry-run", "--model", "cnn"})->check);
}

// Found by fuzz/fuzz_config: Boost.Program_options fills its messages by replacing %name%
// placeholders until none is left, so user text holding its own placeholder made the error
// message loop forever (a hang with a growing string). The text is still shown, its '%' as the
// full-width U+FF05.
TEST(TrainConfig, PlaceholdersInUserTextDoNotHangErrors) {
  const std::string pct = "\xEF\xBC\x85";
  std::string m = error_of({"--epochs", "%value%"});
  EXPECT_NE(m.find("--epochs"), std::string::npos) << m;
  EXPECT_NE(m.find(pct + "value" + pct), std::string::npos) << m;
  m = error_of({"-%canonical_option%-dataset"});
  EXPECT_NE(m.find("canonical_option"), std::string::npos) << m;
  m = error_of({"--%option%", "1"});
  EXPECT_NE(m.find(pct + "option" + pct), std::string::npos) << m;
  m = error_of({"--config", write_file("drt_pct_key.ini", "%original_token% = 1\n")});
  EXPECT_NE(m.find("original_token"), std::string::npos) << m;
  m = error_of({"--config", write_file("drt_pct_value.ini", "epochs = %value%%prefix%\n")});
  EXPECT_NE(m.find("epochs"), std::string::npos) << m;
  // A '%' in a value that is fine stays as it is.
  EXPECT_EQ(parse({"--metrics", "run%value%.jsonl"})->metrics, "run%value%.jsonl");
}

}  // namespace
}  // namespace drt::train
