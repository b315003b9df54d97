// Stop signals never interrupt computation (core/stop_signals.hpp): oneDNN's JIT GEMM kernels
// point the stack pointer into the heap, so a handler that ran on the computing thread would
// corrupt it. Each test runs in a fresh process (a death test, "threadsafe" style: the binary
// re-executed), because prepare_stop_signals() must come before any other thread starts.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/config.hpp"
#include "drtrain/core/stop_signals.hpp"

namespace drt {
namespace {

// The shape of the CNN's first fully connected layer at a batch of 64, the GEMM the crash was
// seen in; GEMMs until enough() (checked between them). Returns false if any product differs
// from the first (the kernels are deterministic).
template <typename Enough>
bool gemms_agree(backend::Backend& cpu, const Enough& enough, long* gemms) {
  const int m = 64, n = 512, k = 3136;
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.02f - 0.12f;
  std::vector<float> first(static_cast<std::size_t>(m) * n), c(first.size());
  cpu.gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, first.data());
  for (*gemms = 1; !enough(); ++*gemms) {
    cpu.gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data());
    if (c != first) return false;
  }
  return true;
}

// The child: SIGUSR1 sent to the process every 20 us while the main thread runs oneDNN GEMMs, for
// at least 1 s and until 100 signals were recorded (a loaded machine may give the storm thread
// little time; 60 s is a hang guard). Exits 0 when every product was right and the signals were
// recorded, 1 otherwise; without the receiver thread it dies of the heap corruption within a
// second or two.
[[noreturn]] void gemms_under_a_signal_storm() {
  prepare_stop_signals();
  install_stop_signals({SIGUSR1});
  const auto cpu = backend::make_cpu_backend(backend::CpuConv::kAuto, backend::CpuGemm::kOneDnn);
  std::atomic<bool> done{false};
  std::atomic<long> sent{0};
  std::thread storm([&] {
    while (!done.load()) {
      kill(getpid(), SIGUSR1);
      sent.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
  long gemms = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto enough = [&] {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return (elapsed >= 1.0 && stop_signals_counted() >= 100) || elapsed >= 60.0;
  };
  const bool agree = gemms_agree(*cpu, enough, &gemms);
  done.store(true);
  storm.join();
  const auto counted = stop_signals_counted();
  std::fprintf(stderr, "%ld GEMMs, %s; %ld signals sent, %llu recorded, last %d\n", gemms,
               agree ? "all equal" : "PRODUCTS DIFFER", sent.load(), static_cast<unsigned long long>(counted),
               stop_signal_received());
  std::_Exit(agree && counted >= 100 && stop_signal_received() == SIGUSR1 ? 0 : 1);
}

TEST(StopSignals, AStormOfStopSignalsDuringOneDnnGemmsLeavesTheHeapAndTheProductsIntact) {
  if (!DRT_HAVE_ONEDNN) GTEST_SKIP() << "built without oneDNN (the kernels that need this)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(gemms_under_a_signal_storm(), ::testing::ExitedWithCode(0), "GEMMs, all equal; [0-9]+ signals sent");
}

// The child of the next two tests: installs each set of stop signals in turn, sends `signal` to
// the process, and exits 0 if it is still alive 5 s later.
[[noreturn]] void install_then_send(const std::vector<std::vector<int>>& installs, int signal) {
  prepare_stop_signals();
  for (const std::vector<int>& signals : installs) install_stop_signals(signals);
  kill(getpid(), signal);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  std::_Exit(0);
}

// A receivable signal that is not a stop signal of this run keeps its usual effect: USR2's
// default action ends the process, as it would were it not blocked.
TEST(StopSignals, OtherSignalsKeepTheirDefaultAction) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(install_then_send({{SIGUSR1}}, SIGUSR2), ::testing::KilledBySignal(SIGUSR2), "");
}

// A signal chosen by an earlier install and not by the latest one gets its default action back.
TEST(StopSignals, ReinstallingRestoresTheDefaultOfSignalsNoLongerChosen) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(install_then_send({{SIGUSR1, SIGTERM}, {SIGUSR1}}, SIGTERM), ::testing::KilledBySignal(SIGTERM), "");
}

// A stop signal is recorded, not fatal, and install forgets one recorded before.
TEST(StopSignals, AStopSignalIsRecordedAndForgottenOnInstall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        prepare_stop_signals();
        install_stop_signals({SIGTERM, SIGUSR1});
        kill(getpid(), SIGTERM);
        for (int i = 0; i < 500 && stop_signal_received() == 0; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        const bool recorded = stop_signal_received() == SIGTERM;
        install_stop_signals({SIGTERM, SIGUSR1});
        std::_Exit(recorded && stop_signal_received() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace drt
