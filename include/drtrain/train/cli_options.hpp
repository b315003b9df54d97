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

// A number option whose --help shows its default as a user writes it ("(=0.05)", not
// "(=0.050000000000000003)"): the shortest text that reads back as the same double.
po::typed_value<double>* number(double& out);

// An on/off option: "--flag" alone turns it on; "--flag false", "--flag=off", "--flag 0" (and
// true/yes/on/1) set it either way, so a job script's or an INI's setting can be overridden.
po::typed_value<bool>* on_off(bool& out);

// Drops every earlier occurrence of an option that is given again: the last value wins, as in
// most command lines ("--lr 0.1 ... --lr 0.2" trains at 0.2; a job script's own flags are
// overridden by the ones appended after them) instead of Boost's "cannot be specified more than once".
void keep_last_occurrence(po::parsed_options& parsed);

po::options_description layout_options(LayoutOptions& out);
po::options_description exchange_options(ps::ExchangeConfig& out);
po::options_description optimizer_options(optim::OptimizerConfig& out);

// A po::error's what(), safe from user text holding Boost's %placeholders% (Boost 1.74 replaces
// them until none is left, so "--epochs %value%" made what() loop for ever): every '%' in the
// error's fields becomes a full-width percent sign (U+FF05) first. Found by fuzz/fuzz_config.
std::string po_error_message(const po::error& e);

// Parses argv against `desc` without storing it: flags only; a positional argument (a stray
// word, a value missing its flag) throws ConfigError naming it; of an option given twice, the
// last value is kept (keep_last_occurrence). po::error passes through.
po::parsed_options parse_flags(int argc, char** argv, const po::options_description& desc);

// Parses argv against `desc` (parse_flags) and runs the notifiers. Unknown flags and malformed values become
// ConfigError ("... ; see --help"). Returns the variables map (e.g. to test for --help).
po::variables_map parse_command_line(int argc, char** argv, const po::options_description& desc);

}  // namespace drt::train
