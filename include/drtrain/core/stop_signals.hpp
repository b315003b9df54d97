// Stop signals (--stop-signals, default TERM,USR1): what a batch system sends before it ends a
// job (Slurm: SIGTERM at the time limit and at preemption, --signal=USR1@T a while before). A
// signal is only recorded; the training loop agrees with every rank to stop at a step boundary
// (train/stop_vote.hpp), the PS write a checkpoint, and every rank exits with
// kStoppedExitStatus, which job scripts read as "requeue me" (jobs/slurm_requeue.sbatch).
//
// Where a signal lands matters. oneDNN's JIT GEMM kernels (Debian's 2.6; fixed upstream only in
// 3.11, oneDNN issue #4845) point the stack pointer into a heap buffer while they run; a handler
// that runs on that thread then has its frame written into the heap and corrupts it (seen here
// as "malloc(): unaligned tcache chunk" a few steps after a SIGUSR1). So drtrain never lets a
// stop signal interrupt a computing thread: prepare_stop_signals(), first thing in main(),
// blocks them all in the main thread, which every thread started later inherits (MPI's,
// OpenMP's, oneDNN's, drtrain's), and starts one thread that receives them with sigwait().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace drt {

// EX_TEMPFAIL (sysexits.h): stopped by a signal after saving; run again with --resume.
constexpr int kStoppedExitStatus = 75;

// "TERM,USR1" (names with or without SIG, case-insensitive, or their numbers) -> signal
// numbers; "none" or "" -> none. ConfigError naming the bad entry and the choices: TERM, USR1,
// USR2, INT, HUP, QUIT, XCPU, CONT (SIGKILL and SIGSTOP cannot be caught).
std::vector<int> parse_stop_signals(const std::string& list);

// Call first thing in main(), before MPI_Init or any other thread starts: blocks every signal
// parse_stop_signals() accepts in the calling thread and starts the thread that receives them.
// That thread records a signal that install_stop_signals() chose and gives any other its usual
// effect (most end the process, as if nothing were blocked). Idempotent. A program that does not
// call it still records stop signals, with a handler on whichever thread the signal lands.
void prepare_stop_signals();

// Records any of `signals` from now on (replacing their default action) and forgets a signal
// recorded before; signals chosen by an earlier call and not now get their default action back.
// Process-wide.
void install_stop_signals(const std::vector<int>& signals);

// The last stop signal received since install_stop_signals(), 0 if none. Async-signal-safe read.
int stop_signal_received();

// Sends `signal_number` to this process (as kill or Slurm would) and waits up to a second until a
// thread has recorded it, so that it counts from this point of the program: the test faults'
// stop signal (DRT_TEST_FAULT=signal:RANK:STEP).
void signal_self_and_wait(int signal_number);

// How many stop signals were recorded since the process started (standard signals sent while
// one is pending count once). For tests.
std::uint64_t stop_signals_counted();

// "SIGTERM", "SIGUSR1", ... or "signal N".
std::string signal_name(int signal_number);

}  // namespace drt
