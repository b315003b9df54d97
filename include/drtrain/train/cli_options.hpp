// Command-line option groups shared by drtrain's programs (Boost.Program_options). Each group
// writes straight into the typed configuration; enumerated values are parsed by notifiers and
// a bad choice throws ConfigError listing the choices. Defaults live in the config structs.
#pragma once

#include <boost/program_options.hpp>

#include "drtrain/comm/topology.hpp"
#include "drtrain/optim/optimizer.hpp"
#include "drtrain/ps/exchange_config.hpp"

namespace drt::train {

namespace po = boost::program_options;

struct LayoutOptions {
  int num_ps = 1;
  comm::Placement placement = comm::Placement::kFirst;
  int expect_ranks = 0;  // > 0: the world must have exactly this many ranks
};

po::options_description layout_options(LayoutOptions& out);
po::options_description exchange_options(ps::ExchangeConfig& out);
po::options_description optimizer_options(optim::OptimizerConfig& out);

// A po::error's what(), safe from user text holding Boost's %placeholders% (Boost 1.74 replaces
// them until none is left, so "--epochs %value%" made what() loop for ever): every '%' in the
// error's fields becomes a full-width percent sign (U+FF05) first. Found by fuzz/fuzz_config.
std::string po_error_message(const po::error& e);

// Parses argv against `desc` without storing it: flags only; a positional argument (a stray
// word, a value missing its flag) throws ConfigError naming it. po::error passes through.
po::parsed_options parse_flags(int argc, char** argv, const po::options_description& desc);

// Parses argv against `desc` (parse_flags) and runs the notifiers. Unknown flags and malformed values become
// ConfigError ("... ; see --help"). Returns the variables map (e.g. to test for --help).
po::variables_map parse_command_line(int argc, char** argv, const po::options_description& desc);

}  // namespace drt::train
