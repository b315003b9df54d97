#include "drtrain/core/stop_signals.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt {
namespace {

std::atomic<int> g_received{0};
std::atomic<std::uint64_t> g_counted{0};
std::atomic<std::uint64_t> g_chosen{0};  // bit s: signal s is a stop signal now
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free,
              "the signal handler needs lock-free variables");

// The mask bit of a signal (the receivable ones are all below 32).
std::uint64_t bit(int signal_number) {
  return signal_number > 0 && signal_number < 64 ? std::uint64_t{1} << signal_number : 0;
}

// Called by the receiver thread, and as the signal handler wherever a signal lands unblocked (a
// program without prepare_stop_signals(), or a thread that existed before it).
void record(int signal_number) {
  g_received.store(signal_number, std::memory_order_relaxed);
  g_counted.fetch_add(1, std::memory_order_relaxed);
}

struct Named {
  const char* name;
  int number;
};
constexpr Named kSignals[] = {{"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"INT", SIGINT},
                              {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"XCPU", SIGXCPU}, {"CONT", SIGCONT}};

sigset_t receivable() {
  sigset_t set;
  sigemptyset(&set);
  for (const Named& s : kSignals) sigaddset(&set, s.number);
  return set;
}

// The receiver thread (prepare_stop_signals): every receivable signal ends up here.
[[noreturn]] void receive_forever(sigset_t set) {
  for (;;) {
    int s = 0;
    if (sigwait(&set, &s) != 0) continue;
    if ((g_chosen.load(std::memory_order_relaxed) & bit(s)) != 0) {
      record(s);
      continue;
    }
    // Not a stop signal now: let it do what it would have done unblocked (its disposition: the
    // default ends the process for all but CONT), here, where it interrupts no computation.
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, s);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(s);  // a signal raised and unblocked is delivered before raise() returns
    pthread_sigmask(SIG_BLOCK, &one, nullptr);
  }
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<int> parse_stop_signals(const std::string& list) {
  std::vector<int> out;
  if (list.empty() || upper(list) == "NONE") return out;
  for (const std::string& raw : split_list(list, ',')) {
    std::string name = upper(raw);
    if (name.rfind("SIG", 0) == 0) name = name.substr(3);
    int number = 0;
    for (const Named& s : kSignals)
      if (name == s.name) number = s.number;
    if (name == "KILL") number = SIGKILL;
    if (name == "STOP") number = SIGSTOP;
    const bool numeric = !name.empty() && name.find_first_not_of("0123456789") == std::string::npos;
    if (number == 0 && numeric) number = std::atoi(name.c_str());
    if (number == SIGKILL || number == SIGSTOP)
      throw ConfigError(str("--stop-signals: ", raw,
                            " cannot be caught; choose among TERM, USR1, USR2, INT, HUP, "
                            "QUIT, XCPU, CONT (or none)"));
    bool known = false;
    for (const Named& s : kSignals) known = known || s.number == number;
    if (!known)
      throw ConfigError(str("--stop-signals: ", numeric ? "signal " : "unknown signal '", raw, numeric ? "" : "'",
                            numeric ? " cannot be a stop signal" : "",
                            "; choices: TERM, USR1, USR2, INT, HUP, QUIT, XCPU, CONT (by name or number), or none"));
    out.push_back(number);
  }
  return out;
}

void prepare_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = receivable();
    const int failed = pthread_sigmask(SIG_BLOCK, &set, nullptr);
    if (failed != 0) throw Error(str("cannot block the stop signals (pthread_sigmask: error ", failed, ")"));
    std::thread(receive_forever, set).detach();
  });
}

void install_stop_signals(const std::vector<int>& signals) {
  std::uint64_t chosen = 0;
  for (int s : signals) chosen |= bit(s);
  g_chosen.store(chosen);
  g_received.store(0);
  struct sigaction action {};
  action.sa_handler = record;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : signals)
    if (sigaction(s, &action, nullptr) != 0) throw Error(str("cannot install a handler for ", signal_name(s)));
  for (const Named& s : kSignals) {  // chosen before and not now: the default action again
    struct sigaction now {};
    if ((chosen & bit(s.number)) == 0 && sigaction(s.number, nullptr, &now) == 0 && now.sa_handler == record)
      signal(s.number, SIG_DFL);
  }
}

int stop_signal_received() { return g_received.load(std::memory_order_relaxed); }

void signal_self_and_wait(int signal_number) {
  const std::uint64_t before = stop_signals_counted();
  kill(getpid(), signal_number);
  for (int i = 0; i < 1000 && stop_signals_counted() == before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::uint64_t stop_signals_counted() { return g_counted.load(std::memory_order_relaxed); }

std::string signal_name(int signal_number) {
  for (const Named& s : kSignals)
    if (s.number == signal_number) return str("SIG", s.name);
  return str("signal ", signal_number);
}

}  // namespace drt
