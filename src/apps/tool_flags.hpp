// --help and --version, answered the same way by every drtrain tool (drtrain, drtrain-ckpt,
// drtrain-data and its subcommands): wherever the flag stands on the command line, the help
// (or "TOOL VERSION") goes to stdout and the tool exits 0 before doing anything else.
#pragma once

#include <cstdio>
#include <cstring>

#include "drtrain/config.hpp"

namespace drt::apps {

// True when argv asks for --help/-h or --version and the answer was printed: main returns 0.
inline bool answer_help_or_version(int argc, char** argv, const char* tool, const char* help) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0 ||
        (i == 1 && std::strcmp(argv[i], "help") == 0)) {
      std::fputs(help, stdout);
      return true;
    }
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("%s %s\n", tool, DRT_VERSION_STRING);
      return true;
    }
  }
  return false;
}

}  // namespace drt::apps
