// drtrain-ckpt: inspect drtrain checkpoints (docs/CHECKPOINT_FORMAT.md).
//   drtrain-ckpt info FILE            metadata and tensors with shapes
//   drtrain-ckpt stats FILE           per tensor: L2 norm, min, max, mean, NaN and Inf counts
//   drtrain-ckpt diff A B [--rtol R]  per tensor max |a-b| and max |a-b|/|b|; exit 1 past R (default 0)
//   drtrain-ckpt verify FILE          structure and content checksum; exit 1 if bad
//   drtrain-ckpt export FILE OUT      plain HDF5 with torch state_dict names (fc1.weight, ...)
//   drtrain-ckpt sample FILE [...]    text from a language model's checkpoint (kHelp below)
// Exit status: 0 fine, 1 a check failed, 2 bad usage, an unreadable file or a model that cannot sample.
#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "drtrain/backend/backend.hpp"
#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/io/checkpoint.hpp"
#include "drtrain/nn/generate.hpp"
#include "drtrain/nn/model_graph.hpp"
#include "tool_flags.hpp"

namespace {

using drt::io::CheckpointFile;

const char* const kHelp =
    "usage: drtrain-ckpt COMMAND ...   (docs/CHECKPOINT_FORMAT.md)\n"
    "  info FILE                 metadata, the run and its lineage, tensors with shapes\n"
    "  stats FILE                per tensor: L2 norm, min, max, mean, NaN and Inf counts\n"
    "  diff A B [--rtol R]       per tensor max |a-b| and max |a-b|/|b|; exit 1 past R (default 0)\n"
    "  verify FILE               structure and content checksum; exit 1 if bad\n"
    "  export FILE OUT           the parameters (and state) as a plain HDF5 torch state_dict\n"
    "  sample FILE [options]     generate text from a language model's checkpoint, on the CPU:\n"
    "      --prompt TEXT         byte-level models (vocabulary 256) only: the text's bytes, after a 0 byte\n"
    "                            (the document separator drtrain-data convert --text puts before each file)\n"
    "      --prompt-tokens 1,2,3 token ids, as they are (any vocabulary)\n"
    "                            neither, or an empty one: start from token 0 alone (byte-level: a new document)\n"
    "      --length N            tokens to generate (default 256)\n"
    "      --temperature T       softmax temperature (default 1; 0: greedy, the most likely token)\n"
    "      --top-k K             draw among the K most likely tokens only (default 0: all)\n"
    "      --seed S              the draws' seed (default 1): mt19937_64, the same draws on any machine\n"
    "      --context T           tokens the model sees (default: the position table's rows)\n"
    "      --model M             the model (a preset, gpt:L-H-D, a model file) instead of the definition the\n"
    "                            checkpoint stores; needed for files without one\n"
    "    The network is rebuilt from the checkpoint's model_definition and run in evaluation mode (no\n"
    "    dropout). Each new token costs one forward pass of the last min(tokens so far, T) tokens, padded\n"
    "    to a power of two (at most T; no KV cache): about 2 x parameters x window FLOP, for gpt2 at\n"
    "    T = 1024 about 0.3 TFLOP a token, seconds on a CPU. Byte-level models print the prompt and the\n"
    "    new bytes as they are (a 0 byte as a newline), then a newline; other vocabularies print the\n"
    "    token ids separated by spaces. Timing goes to stderr.\n"
    "Exit status: 0 fine, 1 a check failed, 2 bad usage, an unreadable file or a model that cannot sample.\n";

int usage(const char* why) {
  std::fprintf(stderr,
               "drtrain-ckpt: %s\nusage: drtrain-ckpt info FILE | stats FILE | diff A B [--rtol R] | verify FILE | "
               "export FILE OUT | sample FILE [--prompt TEXT | --prompt-tokens 1,2,3] [--length N] [--temperature T] "
               "[--top-k K] [--seed S] [--context T] [--model M]   (drtrain-ckpt --help)\n",
               why);
  return 2;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> parts;
  parts.reserve(shape.size());
  for (auto d : shape) parts.push_back(std::to_string(d));
  return "[" + drt::join(parts, ", ") + "]";
}

// Where the data cursor stands, in 1-based words: at an epoch's end (a 15-epoch run's last
// checkpoint is "15 done", not "epoch 16, step 1"), or within one.
std::string epoch_text(std::int64_t epoch, std::int64_t step_in_epoch) {
  if (step_in_epoch == 0)
    return epoch == 0 ? std::string("1, before its first step")
                      : drt::str(epoch, " done (a resumed run starts epoch ", epoch + 1, ")");
  return drt::str(epoch + 1, ", after its step ", step_in_epoch, " (a resumed run goes on at step ", step_in_epoch + 1,
                  " of it)");
}

int info(const CheckpointFile& f) {
  const auto& m = f.meta();
  std::printf("format_version   %lld\ndrtrain_version  %s\ncreated          %s\nstep             %lld\n"
              "epoch            %s\nsamples_seen     %lld\nglobal_batch     %lld\n"
              "model            %s\noptimizer        %s\nlayout           %lld PS, %lld workers, %lld towers\n"
              "seed             %llu\nchecksum         %016llx\n",
              static_cast<long long>(m.format_version), m.drtrain_version.c_str(), m.created.c_str(),
              static_cast<long long>(m.step), epoch_text(m.epoch, m.step_in_epoch).c_str(),
              static_cast<long long>(m.samples_seen), static_cast<long long>(m.global_batch), m.model.c_str(),
              m.optimizer_config.c_str(), static_cast<long long>(m.num_ps), static_cast<long long>(m.num_workers),
              static_cast<long long>(m.towers), static_cast<unsigned long long>(m.seed),
              static_cast<unsigned long long>(m.checksum));
  // Which run wrote it (docs/CHECKPOINT_FORMAT.md, "Runs").
  const std::string parent =
      m.parent_step < 0 ? std::string("none (a run from scratch)")
      : m.parent_run_id.empty()
          ? drt::str("a checkpoint without a run id, after ", m.parent_step, " updates")
          : drt::str("run ", m.parent_run_id, ", its checkpoint after ", m.parent_step, " updates");
  if (m.run_id.empty()) std::printf("run_id           none (written before run ids: an unknown run)\n");
  else
    std::printf("run_id           %s\nparent           %s\nlineage          %s\n", m.run_id.c_str(), parent.c_str(),
                m.lineage.c_str());
  std::vector<std::string> b;
  for (auto x : m.shard_boundaries) b.push_back(std::to_string(x));
  std::printf("shard_boundaries %s\ntensors:\n", drt::join(b, " ").c_str());
  for (const std::string& d : f.datasets()) {
    const auto t = f.read(d);
    std::printf("  %-40s %-16s %zu\n", d.c_str(), shape_text(t.shape).c_str(), t.values.size());
  }
  return 0;
}

int stats(const CheckpointFile& f) {
  std::printf("%-40s %12s %12s %12s %12s %6s %6s\n", "tensor", "l2 norm", "min", "max", "mean", "nan", "inf");
  for (const std::string& d : f.datasets()) {
    const auto t = f.read(d);
    double sum = 0, sq = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    std::size_t nan = 0, inf = 0, finite = 0;
    for (float v : t.values) {
      if (std::isnan(v)) ++nan;
      else if (std::isinf(v)) ++inf;
      else {
        ++finite, sum += v, sq += double(v) * v;
        lo = std::min<double>(lo, v), hi = std::max<double>(hi, v);
      }
    }
    std::printf("%-40s %12.6g %12.6g %12.6g %12.6g %6zu %6zu\n", d.c_str(), std::sqrt(sq), lo, hi,
                finite ? sum / static_cast<double>(finite) : 0.0, nan, inf);
  }
  return 0;
}

int diff(const CheckpointFile& a, const CheckpointFile& b, double rtol) {
  const auto names_a = a.datasets(), names_b = b.datasets();
  if (names_a != names_b) {
    std::vector<std::string> sa = names_a, sb = names_b, only_a, only_b;
    std::sort(sa.begin(), sa.end());
    std::sort(sb.begin(), sb.end());
    std::set_difference(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(only_a));
    std::set_difference(sb.begin(), sb.end(), sa.begin(), sa.end(), std::back_inserter(only_b));
    std::printf("the files hold different tensors: only in A: %s; only in B: %s\n",
                only_a.empty() ? "none" : drt::join(only_a, " ").c_str(),
                only_b.empty() ? "none" : drt::join(only_b, " ").c_str());
    return 1;
  }
  bool over = false, identical = true;
  char row[512];
  std::snprintf(row, sizeof row, "%-40s %14s %14s\n", "tensor", "max |a-b|", "max rel");
  std::string table = row;
  for (const std::string& d : names_a) {
    const auto x = a.read(d), y = b.read(d);
    if (x.shape != y.shape) {
      std::snprintf(row, sizeof row, "%-40s shapes differ: %s vs %s\n", d.c_str(), shape_text(x.shape).c_str(),
                    shape_text(y.shape).c_str());
      table += row;
      over = true, identical = false;
      continue;
    }
    double max_abs = 0, max_rel = 0;
    for (std::size_t i = 0; i < x.values.size(); ++i) {
      const double diff = std::abs(double(x.values[i]) - y.values[i]);
      const double rel = diff == 0 ? 0.0 : diff / std::max(std::abs(double(y.values[i])), 1e-30);
      if (std::isnan(diff) && !(std::isnan(x.values[i]) && std::isnan(y.values[i]))) max_abs = max_rel = INFINITY;
      max_abs = std::max(max_abs, diff), max_rel = std::max(max_rel, rel);
    }
    identical = identical && max_abs == 0 &&
                std::memcmp(x.values.data(), y.values.data(), x.values.size() * sizeof(float)) == 0;
    std::snprintf(row, sizeof row, "%-40s %14.6g %14.6g\n", d.c_str(), max_abs, max_rel);
    table += row;
    over = over || max_rel > rtol;
  }
  if (identical) {  // one line: nothing to tabulate
    std::printf("identical: all %zu tensors bitwise equal\n", names_a.size());
    return 0;
  }
  std::fputs(table.c_str(), stdout);
  std::printf(over ? "differences beyond --rtol %g\n" : "within --rtol %g\n", rtol);
  return over ? 1 : 0;
}

int verify(const CheckpointFile& f) {
  const auto params = f.datasets();
  std::map<std::string, std::vector<std::int64_t>> shapes;
  for (const auto& d : params)
    if (d.rfind("/params/", 0) == 0) shapes[d.substr(8)] = f.read(d).shape;
  if (shapes.empty()) throw drt::io::CheckpointError("no tensors under /params");
  for (const auto& slot : f.slot_names()) {
    const std::string group = "/optimizer/" + slot + "/";
    for (const auto& [name, shape] : shapes) {
      const std::string path = group + name;
      if (std::find(params.begin(), params.end(), path) == params.end() || f.read(path).shape != shape)
        throw drt::io::CheckpointError(drt::str(path, " is missing or has another shape than /params/", name));
    }
    for (const auto& d : params)  // and the other way round
      if (d.rfind(group, 0) == 0 && !shapes.count(d.substr(group.size())))
        throw drt::io::CheckpointError("/params/" + d.substr(group.size()) + " is missing (" + d + " exists)");
  }
  f.verify();
  std::printf("ok: %zu tensors, %zu optimizer slot(s), step %lld, checksum matches\n", shapes.size(),
              f.slot_names().size(), static_cast<long long>(f.meta().step));
  return 0;
}

// A linear layer tied to an embedding (`tie=NODE`, nanoGPT's lm_head) has no tensor of its own in
// a checkpoint, but PyTorch's state_dict holds the shared tensor under both names: the export
// hard-links NAME.weight to NODE.weight (one copy), so load_state_dict(strict=True) finds both.
// Returns (alias, shared tensor) pairs; none for files from before the definition was stored.
std::vector<std::pair<std::string, std::string>> tied_weights(const CheckpointFile& f, const std::string& source) {
  std::vector<std::pair<std::string, std::string>> ties;
  const std::string& definition = f.meta().model_definition;
  if (definition.empty()) return ties;
  const auto graph = drt::nn::ModelGraph::parse(definition, source + " (model_definition)");
  for (const auto& node : graph.nodes()) {
    const auto tie = node.options.find("tie");
    if (tie != node.options.end()) ties.emplace_back(node.name + ".weight", tie->second + ".weight");
  }
  return ties;
}

int export_state_dict(const CheckpointFile& f, const std::string& source, const std::string& out) {
  const auto ties = tied_weights(f, source);
  const hid_t file = H5Fcreate(out.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw drt::Error("cannot create " + out);
  // A state_dict holds parameters and state (batch norm's running statistics) by name.
  for (const std::string& d : f.datasets()) {
    const bool param = d.rfind("/params/", 0) == 0, state = d.rfind("/state/", 0) == 0;
    if (!param && !state) continue;
    const auto t = f.read(d);
    std::vector<hsize_t> dims(t.shape.begin(), t.shape.end());
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const std::string name = d.substr(param ? 8 : 7);
    const hid_t dset = H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const herr_t rc = dset < 0 ? -1 : H5Dwrite(dset, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.values.data());
    if (dset >= 0) H5Dclose(dset);
    H5Sclose(space);
    if (rc < 0) {
      H5Fclose(file);
      throw drt::Error(drt::str("cannot write ", d, " to ", out));
    }
  }
  for (const auto& [alias, shared] : ties)
    if (H5Lexists(file, alias.c_str(), H5P_DEFAULT) <= 0 &&
        (H5Lexists(file, shared.c_str(), H5P_DEFAULT) <= 0 ||
         H5Lcreate_hard(file, shared.c_str(), file, alias.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0)) {
      H5Fclose(file);
      throw drt::Error(drt::str("cannot link ", alias, " to the tensor it is tied to, ", shared, ", in ", out));
    }
  const std::string model = f.meta().model;
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, model.size());
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, "model", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, type, model.data());
  H5Aclose(attr);
  H5Sclose(scalar);
  H5Tclose(type);
  H5Fclose(file);
  std::printf(
      "wrote %s: the parameters as torch state_dict entries (load: {k: torch.from_numpy(f[k][()]) for k in f})%s\n",
      out.c_str(), ties.empty() ? "" : "; tied weights appear under both names");
  return 0;
}

// ---- sample (nn/generate.hpp)

constexpr int kByteVocab = 256;  // drtrain-data convert --text: byte-level, 0 separates documents

long long parse_integer(const std::string& text, const std::string& flag) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v < std::numeric_limits<int>::min() ||
      v > std::numeric_limits<int>::max())
    throw drt::ConfigError(drt::str(flag, " '", text, "' is not a whole number"));
  return v;
}

struct SampleArgs {
  std::string file;
  bool text_prompt = false, token_prompt = false;
  std::string prompt;         // --prompt (bytes)
  std::string prompt_tokens;  // --prompt-tokens
  int length = 256;
  double temperature = 1.0;
  int top_k = 0;
  std::uint64_t seed = 1;
  int context = 0;  // 0: the position table's rows
  std::string model;
};

SampleArgs parse_sample(int argc, char** argv) {
  SampleArgs a;
  a.file = argv[2];
  for (int i = 3; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw drt::ConfigError(drt::str(flag, " needs a value (drtrain-ckpt --help)"));
    const std::string value = argv[i + 1];
    if (flag == "--prompt") a.text_prompt = true, a.prompt = value;
    else if (flag == "--prompt-tokens") a.token_prompt = true, a.prompt_tokens = value;
    else if (flag == "--length") {
      a.length = static_cast<int>(parse_integer(value, flag));
      if (a.length < 0) throw drt::ConfigError(drt::str("--length ", a.length, " must be >= 0 (tokens to generate)"));
    } else if (flag == "--temperature") {
      errno = 0;
      char* end = nullptr;
      a.temperature = std::strtod(value.c_str(), &end);
      if (value.empty() || errno != 0 || *end != '\0')
        throw drt::ConfigError(drt::str("--temperature '", value, "' is not a number"));
      if (!(a.temperature >= 0.0) || !std::isfinite(a.temperature))
        throw drt::ConfigError(drt::str("--temperature ", value,
                                        " must be a finite number >= 0 (0: greedy, the most likely token; 1: the "
                                        "model's distribution)"));
    } else if (flag == "--top-k") {
      a.top_k = static_cast<int>(parse_integer(value, flag));
      if (a.top_k < 0)
        throw drt::ConfigError(drt::str("--top-k ", a.top_k, " must be >= 0 (0: every token; K: the K most likely)"));
    } else if (flag == "--seed") {
      a.seed = static_cast<std::uint64_t>(drt::parse_count(value, "--seed"));
    } else if (flag == "--context") {
      a.context = static_cast<int>(parse_integer(value, flag));
      if (a.context < 1)
        throw drt::ConfigError(
            drt::str("--context ", a.context, " must be at least 1 (leave it out for the position table's rows)"));
    } else if (flag == "--model") {
      a.model = value;
    } else {
      throw drt::ConfigError(drt::str("sample has no option '", flag, "' (drtrain-ckpt --help lists them)"));
    }
  }
  if (a.text_prompt && a.token_prompt) throw drt::ConfigError("pass --prompt or --prompt-tokens, not both");
  return a;
}

// The prompt's tokens; empty: start from token 0 (byte-level: the separator, a new document).
// implicit: the first token is that 0 or the one before --prompt's bytes, which is not printed.
std::vector<int> prompt_tokens(const SampleArgs& a, int vocab, bool& implicit) {
  std::vector<int> tokens;
  implicit = true;
  if (a.text_prompt) {
    if (vocab != kByteVocab)
      throw drt::ConfigError(drt::str("--prompt TEXT is byte-level text, for models with a vocabulary of 256 "
                                      "(drtrain-data convert --text); this model's vocabulary is ",
                                      vocab, ": pass token ids with --prompt-tokens 1,2,3"));
    tokens.push_back(0);  // a document starts after a 0 byte, as in the converted corpora
    for (unsigned char c : a.prompt) tokens.push_back(c);
    return tokens;
  }
  for (const std::string& item : drt::split_list(a.prompt_tokens, ',')) {
    errno = 0;
    char* end = nullptr;
    const long long t = std::strtoll(item.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || t < 0)
      throw drt::ConfigError(drt::str("--prompt-tokens: '", item, "' is not a token id (a whole number >= 0)"));
    if (t >= vocab)
      throw drt::ConfigError(drt::str("--prompt-tokens: token ", t, " is not below the model's vocabulary size ", vocab,
                                      ": pass ids in 0..", vocab - 1));
    tokens.push_back(static_cast<int>(t));
  }
  implicit = tokens.empty();
  if (tokens.empty()) tokens.push_back(0);
  return tokens;
}

int sample(int argc, char** argv) {
  const SampleArgs a = parse_sample(argc, argv);
  std::map<std::string, CheckpointFile::Tensor> tensors;  // "/params/x", "/state/y"
  drt::nn::ModelGraph graph;
  try {
    const CheckpointFile f(a.file);
    f.verify();  // a damaged file fails here rather than generating garbage
    if (!a.model.empty()) {
      graph = drt::nn::ModelGraph::load(a.model);
    } else if (f.meta().model_definition.empty()) {
      throw drt::ConfigError(drt::str(
          a.file,
          " stores no model definition (written by a drtrain before model files, or a definition over 32 KiB): "
          "pass the model it was trained with, --model ",
          f.meta().model.empty() ? std::string("M") : f.meta().model));
    } else {
      graph = drt::nn::ModelGraph::parse(f.meta().model_definition, a.file + " (model_definition)");
    }
    for (const std::string& d : f.datasets())
      if (d.rfind("/params/", 0) == 0 || d.rfind("/state/", 0) == 0) tensors.emplace(d, f.read(d));
  } catch (const drt::io::CheckpointError& e) {
    throw drt::Error(drt::str(a.file, ": ", e.what()));
  }
  const auto shape_of = [&](const std::string& name) {
    for (const char* group : {"/params/", "/state/"}) {
      const auto it = tensors.find(group + name);
      if (it != tensors.end()) return it->second.shape;
    }
    return std::vector<std::int64_t>{};
  };
  auto device = drt::backend::make_cpu_backend();
  drt::nn::LanguageModel lm(graph, shape_of, a.context, *device);
  bool implicit = false;
  const std::vector<int> prompt = prompt_tokens(a, lm.vocab(), implicit);
  drt::nn::TokenSampler sampler(a.temperature, a.top_k, a.seed);

  std::vector<float> flat(lm.layout().total());
  for (const drt::TensorSpec& t : lm.layout().tensors()) {
    const std::string path = (t.state ? "/state/" : "/params/") + t.name;
    const auto it = tensors.find(path);
    if (it == tensors.end())
      throw drt::ConfigError(drt::str(a.file, " holds no ", path, ", which its model needs (", shape_text(t.shape),
                                      "): the file and the model definition do not match"));
    if (it->second.shape != t.shape)
      throw drt::ConfigError(drt::str(a.file, ": ", path, " has the shape ", shape_text(it->second.shape),
                                      " but the model needs ", shape_text(t.shape)));
    std::copy(it->second.values.begin(), it->second.values.end(), flat.begin() + static_cast<std::ptrdiff_t>(t.offset));
    tensors.erase(it);
  }
  for (const auto& [path, tensor] : tensors)
    std::fprintf(stderr, "drtrain-ckpt: warning: %s's %s is not a tensor of the model; unused\n", a.file.c_str(),
                 path.c_str());
  tensors.clear();
  lm.set_params(flat);
  flat = {};

  // Byte-level: raw bytes (the separator as a newline), else token ids separated by spaces; the
  // implicit start token is not printed.
  const bool bytes = lm.vocab() == kByteVocab;
  bool first = true;
  const auto print = [&](int t) {
    if (bytes) std::fputc(t == 0 ? '\n' : t, stdout);
    else std::printf(first ? "%d" : " %d", t);
    first = false;
    std::fflush(stdout);
  };
  for (std::size_t i = implicit ? 1 : 0; i < prompt.size(); ++i) print(prompt[i]);
  std::vector<int> tokens = prompt;
  const auto start = std::chrono::steady_clock::now();
  lm.generate(tokens, a.length, sampler, print);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fprintf(stderr,
               "drtrain-ckpt: sampled %d tokens in %.2f s (%.1f ms each; vocabulary %d, context %d, temperature %g, "
               "top-k %d, seed %llu)\n",
               a.length, seconds, a.length ? 1e3 * seconds / a.length : 0.0, lm.vocab(), lm.context(), a.temperature,
               a.top_k, static_cast<unsigned long long>(a.seed));
  return 0;
}

// Runs fn, naming `path` in the CheckpointError or ConfigError it throws (the messages name datasets, not the
// file; diff has two files and export two paths, so main cannot tell which one is meant).
template <class Fn>
auto naming(const char* path, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const drt::io::CheckpointError& e) {
    throw drt::io::CheckpointError(drt::str(path, ": ", e.what()));
  } catch (const drt::ConfigError& e) {  // a format version this drtrain does not read
    throw drt::ConfigError(drt::str(path, ": ", e.what()));
  }
}

int run(int argc, char** argv) {
  if (drt::apps::answer_help_or_version(argc, argv, "drtrain-ckpt", kHelp)) return 0;
  if (argc < 3) return usage("missing arguments");
  const std::string command = argv[1];
  if (command == "sample") return sample(argc, argv);
  if (command == "diff") {
    if (argc != 4 && !(argc == 6 && std::strcmp(argv[4], "--rtol") == 0)) return usage("diff takes A B [--rtol R]");
    const double rtol = argc == 6 ? std::atof(argv[5]) : 0.0;
    const CheckpointFile a = naming(argv[2], [&] { return CheckpointFile(argv[2]); });
    const CheckpointFile b = naming(argv[3], [&] { return CheckpointFile(argv[3]); });
    return diff(a, b, rtol);
  }
  if (command == "export") {
    if (argc != 4) return usage("export takes FILE OUT");
    return naming(argv[2], [&] { return export_state_dict(CheckpointFile(argv[2]), argv[2], argv[3]); });
  }
  if (argc != 3) return usage(("too many arguments for " + command).c_str());
  if (command == "info") return naming(argv[2], [&] { return info(CheckpointFile(argv[2])); });
  if (command == "stats") return naming(argv[2], [&] { return stats(CheckpointFile(argv[2])); });
  if (command == "verify") return naming(argv[2], [&] { return verify(CheckpointFile(argv[2])); });
  return usage(("unknown command '" + command + "'").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const drt::io::CheckpointError& e) {  // named by run()'s naming(); sample names its own
    std::fprintf(stderr, "drtrain-ckpt: %s\n", e.what());
    return argc > 1 && std::strcmp(argv[1], "verify") == 0 ? 1 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "drtrain-ckpt: %s\n", e.what());
    return 2;
  }
}
