// Fuzz target: drt::train::parse_train_config, the command line and the --config INI file
// (Boost.Program_options, the notifiers of cli_options.cpp, TrainConfig::validate, to_ini).
//
// Input (text; fuzz/README.md): argv tokens, one per line (a NUL also ends a token), optionally
// followed by a line "%%" and an INI file, which is written to a scratch file and passed as
// `--config FILE` after the tokens. Tokens that would name another --config file ("--co...")
// are rejected, so that the fuzzer never reads arbitrary files (/dev/zero, a FIFO).
// Expected: a TrainConfig or nullopt (--help, --version, --print-config), or drt::ConfigError /
// drt::Error. A configuration that parses must also survive its own round trip: to_ini()
// loaded back with --config gives a valid configuration with the same to_ini() (unless a text
// value holds what the INI format cannot carry: '#', a line break, blanks at either end).
// Anything else (another exception, a sanitizer report, a failed round trip) is a finding.
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/train/train_config.hpp"
#include "fuzz_util.hpp"

namespace {

std::optional<drt::train::TrainConfig> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "drtrain");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return drt::train::parse_train_config(static_cast<int>(args.size()), argv.data(), false);
}

bool representable(const std::string& v) {
  if (v.find_first_of("#\n\r") != std::string::npos) return false;
  return v.empty() ||
         (!std::isspace(static_cast<unsigned char>(v.front())) && !std::isspace(static_cast<unsigned char>(v.back())));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string cli = input, ini;
  bool has_ini = false;
  if (input.compare(0, 3, "%%\n") == 0) {
    cli.clear(), ini = input.substr(3), has_ini = true;
  } else if (const auto at = input.find("\n%%\n"); at != std::string::npos) {
    cli = input.substr(0, at), ini = input.substr(at + 4), has_ini = true;
  }
  std::vector<std::string> args;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= cli.size(); ++i)
    if (i == cli.size() || cli[i] == '\n' || cli[i] == '\0') {
      if (i > start || i < cli.size()) args.push_back(cli.substr(start, i - start));
      start = i + 1;
    }
  for (const auto& a : args)
    if (a.compare(0, 4, "--co") == 0) return -1;  // --config (or a prefix Boost would guess)
  if (has_ini) {
    const std::string path =
        drt::fuzz::write_file("config.ini", reinterpret_cast<const std::uint8_t*>(ini.data()), ini.size());
    args.push_back("--config");
    args.push_back(path);
  }

  std::optional<drt::train::TrainConfig> c;
  try {
    c = parse(args);
  } catch (const drt::Error&) {
    return 0;  // ConfigError (or another drt::Error): the documented failure
  }
  if (!c) return 0;
  // Values the INI format cannot carry (Boost cuts a line at '#' and trims blanks; a newline ends
  // the line) make no round trip: a known limitation of --print-config (fuzz/README.md).
  for (const std::string* v : {&c->model, &c->dataset, &c->data_dir, &c->device, &c->metrics, &c->timeline,
                               &c->stop_signals, &c->checkpoint_dir, &c->resume})
    if (!representable(*v)) return 0;
  // The round trip: what --print-config prints, --config must load back unchanged.
  const std::string text = c->to_ini();
  const std::string path =
      drt::fuzz::write_file("roundtrip.ini", reinterpret_cast<const std::uint8_t*>(text.data()), text.size());
  std::optional<drt::train::TrainConfig> again;
  try {
    again = parse({"--config", path});
  } catch (const drt::Error& e) {
    std::fprintf(stderr, "fuzz_config: the resolved configuration does not load back: %s\n--- to_ini():\n%s\n",
                 e.what(), text.c_str());
    std::abort();
  }
  if (!again || again->to_ini() != text) {
    std::fprintf(stderr, "fuzz_config: to_ini() changes over a round trip\n--- first:\n%s\n--- second:\n%s\n",
                 text.c_str(), again ? again->to_ini().c_str() : "(nullopt)");
    std::abort();
  }
  return 0;
}
