#include "drtrain/data/token_convert.hpp"

#include <glob.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <system_error>
#include <tuple>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "drtrain/data/token_format.hpp"
#include "drtrain/data/token_writer.hpp"

namespace drt::data {

namespace {

namespace fs = std::filesystem;

// Tokens an append carries.
constexpr std::int64_t kBlockTokens = std::int64_t{1} << 20;

bool is_pattern(const std::string& text) { return text.find_first_of("*?[") != std::string::npos; }

// `path` (no pattern) as files: itself, or the files below it.
void expand_path(const std::string& path, const std::string& option, bool directories, std::vector<std::string>& out) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    throw ConfigError(str(option, " ", path, ": no such file or directory",
                          ec && ec != std::errc::no_such_file_or_directory ? " (" + ec.message() + ")" : ""));
  if (fs::is_directory(status)) {
    if (!directories)
      throw ConfigError(
          str(option, " ", path, ": is a directory; give the files, or a pattern such as '", path, "/train_*.bin'"));
    std::vector<std::string> files;
    fs::recursive_directory_iterator it(path, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    if (ec) throw ConfigError(str(option, " ", path, ": cannot list the directory: ", ec.message()));
    if (files.empty()) throw ConfigError(str(option, " ", path, ": the directory holds no files"));
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
    return;
  }
  if (!fs::is_regular_file(status)) throw ConfigError(str(option, " ", path, ": not a regular file"));
  out.push_back(path);
}

// The files of one conversion, checked, with the part of each that goes to /train.
struct Input {
  std::string path;
  std::int64_t count = 0, train = 0;  // tokens in the file, of which the first `train` go to /train
  bool test = false;                  // a test input: all its tokens go to /test
};

std::string canonical(const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(path, ec);
  return ec ? path : p.string();
}

// The inputs of one conversion, in order (training files, then test files), each file once and
// none the output.
std::vector<Input> gather_inputs(const std::vector<std::string>& train_args, const std::string& train_option,
                                 const std::vector<std::string>& test_args, const std::string& test_option, bool text,
                                 const std::string& out) {
  std::vector<Input> inputs;
  std::set<std::string> seen;
  const std::string out_path = canonical(out);
  for (const auto& [args, option, test] :
       {std::tuple<const std::vector<std::string>&, std::string, bool>{train_args, train_option, false},
        {test_args, test_option, true}}) {
    for (const std::string& path : expand_inputs(args, option, text)) {
      const std::string id = canonical(path);
      if (id == out_path || id == out_path + ".tmp")
        throw ConfigError(str(option, " ", path, ": is the output file; write OUT.h5 elsewhere"));
      if (!seen.insert(id).second)
        throw ConfigError(
            str(option, " ", path, ": given twice (",
                test ? "a test input also among the training inputs" : "listed twice among the training inputs",
                "); each file counts once"));
      Input in;
      in.path = path;
      in.test = test;
      inputs.push_back(in);
    }
  }
  return inputs;
}

// Checks every file before anything is written, and sets each one's token count and share of
// /train (the first 1 - fraction of a training file); returns the vocabulary of the files' kind.
std::int64_t count_tokens(std::vector<Input>& inputs, TokenBinKind kind, double fraction) {
  std::int64_t native = -1;
  for (Input& in : inputs) {
    const TokenBinFile f(in.path, kind);
    in.count = f.count();
    if (native >= 0 && f.default_vocab() != native)
      throw ConfigError(str(in.path, ": an llm.c shard of another tokenizer (", f.default_vocab(),
                            " tokens) than the first (", native, "); convert one tokenizer's shards at a time"));
    native = f.default_vocab();
    if (!in.test)
      in.train = fraction > 0.0
                     ? static_cast<std::int64_t>(std::floor(static_cast<double>(in.count) * (1.0 - fraction)))
                     : in.count;
  }
  return native;
}

// Copies each input's tokens to its splits (a separator before each nonempty part of a text
// file), checking each token id against the vocabulary.
void copy_tokens(TokenWriter& writer, const std::vector<Input>& inputs, TokenBinKind kind, std::int64_t vocab,
                 bool vocab_given) {
  const bool text = kind == TokenBinKind::kBytes;
  std::vector<std::uint32_t> block(static_cast<std::size_t>(kBlockTokens));
  const std::uint32_t separator = kTextDocumentSeparator;
  for (const Input& in : inputs) {
    const TokenBinFile f(in.path, kind);
    if (f.count() != in.count)
      throw ConfigError(str(in.path, ": changed while being converted (", in.count, " tokens, now ", f.count(), ")"));
    const std::int64_t train_end = in.test ? 0 : in.train;
    for (const auto& [split, begin, end] :
         {std::tuple<const char*, std::int64_t, std::int64_t>{"train", 0, train_end}, {"test", train_end, in.count}}) {
      if (begin == end) continue;
      if (text) writer.append(split, &separator, 1);
      for (std::int64_t first = begin; first < end; first += kBlockTokens) {
        const std::int64_t n = std::min(kBlockTokens, end - first);
        f.read(first, n, block.data());
        for (std::int64_t i = 0; i < n; ++i)
          if (block[static_cast<std::size_t>(i)] >= vocab)
            throw ConfigError(str(in.path, ": token ", first + i, " is ", block[static_cast<std::size_t>(i)],
                                  ", not below the vocabulary size ", vocab,
                                  vocab_given ? " (--vocab-size)" : " (the default of these files)",
                                  ": give the tokenizer's vocabulary with --vocab-size V"));
        writer.append(split, block.data(), n);
      }
    }
  }
}

void convert(TokenBinKind kind, const std::string& what, const std::vector<std::string>& train_args,
             const std::vector<std::string>& test_args, const std::string& out, const TokenConvertOptions& options) {
  const bool text = kind == TokenBinKind::kBytes;
  const std::string train_option = text ? "--text" : kind == TokenBinKind::kLlmc ? "--llmc-bin" : "--uint16-bin";
  const std::string test_option = "--test-" + train_option.substr(2);
  const double fraction = options.test_fraction;
  if (train_args.empty()) throw ConfigError(str(out, ": no training input; give ", train_option, " FILE..."));
  if (!(fraction >= 0.0 && fraction < 1.0))
    throw ConfigError(str("--test-fraction ", fraction, ": must be in (0, 1), the share of each file held out"));
  if (fraction > 0.0 && !test_args.empty())
    throw ConfigError(str("--test-fraction and ", test_option, " both make the test split: give one of them"));

  std::vector<Input> inputs = gather_inputs(train_args, train_option, test_args, test_option, text, out);
  // Check every file before writing anything; the vocabulary from the first file's kind.
  const std::int64_t native = count_tokens(inputs, kind, fraction);
  std::int64_t vocab = options.vocab_size;
  if (text && vocab != 0 && vocab != 256)
    throw ConfigError(str("--vocab-size ", vocab, ": text is byte-level, its vocabulary is 256"));
  if (vocab == 0) vocab = native;
  if (vocab <= 0)
    throw ConfigError(str(train_option, " needs --vocab-size V, the tokenizer's vocabulary (nanoGPT: meta.pkl's "
                                        "vocab_size; 50257 for GPT-2 tokens)"));

  // Split sizes: with a separator, one before each nonempty part of a file.
  const std::int64_t sep = text ? 1 : 0;
  std::int64_t train_total = 0, test_total = 0;
  for (const Input& in : inputs) {
    const std::int64_t train = in.train, test = in.count - in.train;
    if (train > 0) train_total += sep + train;
    if (test > 0) test_total += sep + test;
  }
  if (train_total == 0) throw ConfigError(str(train_option, ": the training inputs hold no tokens"));
  if (test_total == 0 && (fraction > 0.0 || !test_args.empty()))
    throw ConfigError(fraction > 0.0
                          ? str("--test-fraction ", fraction, " holds out no token of these inputs; raise it")
                          : str(test_option, ": the test inputs hold no tokens"));

  TokenWriterOptions w;
  w.vocab_size = vocab;
  w.compress_level = options.compress_level;
  w.chunk_bytes = options.chunk_bytes;
  std::size_t train_files = 0;
  for (const Input& in : inputs) train_files += in.test ? 0 : 1;
  w.source = str(what, ": ", join(train_args, " "), " (", train_files, " file(s))",
                 test_args.empty() ? "" : str("; test: ", join(test_args, " ")),
                 fraction > 0.0 ? str("; test: the last ", fraction, " of each file") : "");
  TokenWriter writer(out, w);
  writer.begin_split("train", train_total);
  if (test_total > 0) writer.begin_split("test", test_total);

  copy_tokens(writer, inputs, kind, vocab, options.vocab_size != 0);
  writer.commit();
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& args, const std::string& option,
                                       bool directories) {
  std::vector<std::string> out;
  for (const std::string& arg : args) {
    if (!is_pattern(arg)) {
      expand_path(arg, option, directories, out);
      continue;
    }
    glob_t matches{};
    // NOLINTNEXTLINE(concurrency-mt-unsafe): conversions run on one thread (drtrain-data)
    const int rc = ::glob(arg.c_str(), 0, nullptr, &matches);
    std::vector<std::string> paths;
    if (rc == 0)
      for (std::size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
    ::globfree(&matches);
    if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty()))
      throw ConfigError(str(option, " '", arg, "': the pattern matches no file"));
    if (rc != 0) throw ConfigError(str(option, " '", arg, "': cannot expand the pattern (glob error ", rc, ")"));
    std::sort(paths.begin(), paths.end());
    for (const std::string& path : paths) expand_path(path, option, directories, out);
  }
  return out;
}

void convert_text(const std::vector<std::string>& train, const std::vector<std::string>& test, const std::string& out,
                  const TokenConvertOptions& options) {
  convert(TokenBinKind::kBytes, "byte-level text, a 0 byte before each file", train, test, out, options);
}

void convert_token_files(TokenBinKind kind, const std::vector<std::string>& train, const std::vector<std::string>& test,
                         const std::string& out, const TokenConvertOptions& options) {
  DRT_ASSERT(kind != TokenBinKind::kBytes, "convert_token_files: text goes through convert_text");
  convert(kind, kind == TokenBinKind::kLlmc ? "llm.c token shards" : "raw uint16 tokens", train, test, out, options);
}

}  // namespace drt::data
