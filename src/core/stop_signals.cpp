#include "drtrain/core/stop_signals.hpp"

#include <signal.h>

#include <atomic>
#include <cctype>
#include <cstdlib>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"

namespace drt {
namespace {

std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

void on_stop_signal(int signal_number) { g_received.store(signal_number, std::memory_order_relaxed); }

struct Named {
  const char* name;
  int number;
};
constexpr Named kSignals[] = {{"TERM", SIGTERM}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"INT", SIGINT},
                              {"HUP", SIGHUP},   {"QUIT", SIGQUIT}, {"XCPU", SIGXCPU}, {"CONT", SIGCONT}};

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
    if (number == 0 && !name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
      number = std::atoi(name.c_str());
    if (number == SIGKILL || number == SIGSTOP)
      throw ConfigError(str("--stop-signals: ", raw,
                            " cannot be caught; choose among TERM, USR1, USR2, INT, HUP, "
                            "QUIT, XCPU, CONT (or none)"));
    if (number <= 0 || number >= NSIG)
      throw ConfigError(str("--stop-signals: unknown signal '", raw,
                            "'; choices: TERM, USR1, USR2, INT, HUP, QUIT, "
                            "XCPU, CONT, a number, or none"));
    out.push_back(number);
  }
  return out;
}

void install_stop_signals(const std::vector<int>& signals) {
  g_received.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : signals)
    if (sigaction(s, &action, nullptr) != 0) throw Error(str("cannot install a handler for ", signal_name(s)));
}

int stop_signal_received() { return g_received.load(std::memory_order_relaxed); }

std::string signal_name(int signal_number) {
  for (const Named& s : kSignals)
    if (s.number == signal_number) return str("SIG", s.name);
  return str("signal ", signal_number);
}

}  // namespace drt
