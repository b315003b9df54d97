// Stop signals (--stop-signals, default TERM,USR1): what a batch system sends before it ends a
// job (Slurm: SIGTERM at the time limit and at preemption, --signal=USR1@T a while before). The
// handler only records the signal; the training loop agrees with every rank to stop at a step
// boundary (train/stop_vote.hpp), the PS write a checkpoint, and every rank exits with
// kStoppedExitStatus, which job scripts read as "requeue me" (jobs/slurm_requeue.sbatch).
#pragma once

#include <string>
#include <vector>

namespace drt {

// EX_TEMPFAIL (sysexits.h): stopped by a signal after saving; run again with --resume.
constexpr int kStoppedExitStatus = 75;

// "TERM,USR1" (names with or without SIG, case-insensitive, or numbers) -> signal numbers;
// "none" or "" -> none. ConfigError naming the bad entry and the choices; SIGKILL and SIGSTOP
// cannot be caught and are refused.
std::vector<int> parse_stop_signals(const std::string& list);

// Records any of `signals` from now on (replacing their default action) and forgets a signal
// recorded before. Process-wide.
void install_stop_signals(const std::vector<int>& signals);

// The last stop signal received since install_stop_signals(), 0 if none. Async-signal-safe read.
int stop_signal_received();

// "SIGTERM", "SIGUSR1", ... or "signal N".
std::string signal_name(int signal_number);

}  // namespace drt
