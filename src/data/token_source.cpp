#include "drtrain/data/token_source.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <utility>
#include <vector>

#include "drtrain/core/error.hpp"
#include "drtrain/core/strings.hpp"
#include "token_split.hpp"

namespace drt::data {

namespace {

// At most this many tokens a read (4 MiB of uint32); at least one window.
constexpr std::int64_t kRunTokens = std::int64_t{1} << 20;

class TokenSource final : public SampleSource {
 public:
  TokenSource(h5::TokenSplit split, int context) : split_(std::move(split)), context_(context) {
    const TokenSplitHeader& h = split_.header;
    const std::string object = "/" + h.split + "/tokens";
    if (context < 1) h5::fail(h.file, object, str("--context ", context, ": a window holds at least one token"));
    const std::int64_t windows = token_windows(h.count, context);
    if (windows < 1)
      h5::fail(h.file, object,
               str("the corpus has ", h.count, " tokens, shorter than one window of --context ", context,
                   " + 1 (T inputs and the next token as the last target): lower --context to at most ",
                   std::max<std::int64_t>(1, h.count - 1), " or give more text"));
    if (windows > std::numeric_limits<int>::max())
      h5::fail(h.file, object,
               str(h.count, " tokens make ", windows, " windows of --context ", context,
                   ", more than the 2147483647 samples an epoch counts: raise --context"));
    info_.name = str(h.file, ":/", h.split);
    info_.count = windows;
    info_.channels = 1;
    info_.height = 1;
    info_.width = context;
    info_.classes = static_cast<int>(h.vocab_size);
    info_.tokens = true;
    info_.targets = context;
    // Windows a run may hold: its tokens (windows * T + 1) at most kRunTokens, at least one.
    max_run_ = std::max<std::int64_t>(1, (kRunTokens - 1) / context);
  }
  ~TokenSource() override {
    std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
    split_.close();
  }
  TokenSource(const TokenSource&) = delete;
  TokenSource& operator=(const TokenSource&) = delete;

  const SourceInfo& info() const override { return info_; }

  void read(const std::vector<std::int64_t>& indices, float* images, std::int32_t* labels) override {
    if (indices.empty()) return;
    DRT_ASSERT(images && labels, "SampleSource::read needs image and label buffers");
    sort_request(info_, indices, "window", order_);

    std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
    const auto t = static_cast<std::size_t>(context_);
    std::size_t i = 0;
    while (i < order_.size()) {
      // A run: consecutive (or repeated) windows, at most max_run_ of them.
      const std::int64_t first = order_[i].first;
      std::size_t j = i + 1;
      while (j < order_.size() && order_[j].first - order_[j - 1].first <= 1 && order_[j].first - first < max_run_) ++j;
      const std::int64_t windows = order_[j - 1].first - first + 1;
      // Windows first..first+windows-1 cover tokens [first*T, (first+windows)*T + 1).
      const std::int64_t begin = first * context_, count = windows * context_ + 1;
      run_.resize(static_cast<std::size_t>(count));
      h5::read_tokens(split_, begin, count, run_.data());
      for (std::size_t k = i; k < j; ++k) {
        const auto [index, position] = order_[k];
        const std::uint32_t* src = run_.data() + static_cast<std::size_t>(index - first) * t;
        float* x = images + static_cast<std::size_t>(position) * t;
        std::int32_t* y = labels + static_cast<std::size_t>(position) * t;
        for (std::size_t p = 0; p < t; ++p) {
          x[p] = static_cast<float>(src[p]);
          y[p] = static_cast<std::int32_t>(src[p + 1]);
        }
      }
      i = j;
    }
  }

 private:
  h5::TokenSplit split_;
  int context_;
  SourceInfo info_;
  std::int64_t max_run_ = 1;
  std::vector<std::pair<std::int64_t, std::int64_t>> order_;  // (window, position in the request)
  std::vector<std::uint32_t> run_;                            // the tokens of a run, checked
};

}  // namespace

std::unique_ptr<SampleSource> open_token_source(const std::string& file, const std::string& split, int context,
                                                std::size_t cache_bytes) {
  std::lock_guard<std::recursive_mutex> lock(h5::hdf5_mutex());
  return std::make_unique<TokenSource>(h5::open_token_split(h5::open_data_file(file), split, cache_bytes), context);
}

TokenSources open_token_sources(const std::string& data_file, const std::string& test_file, int context, bool with_test,
                                std::size_t cache_bytes) {
  TokenSources s;
  s.train = open_token_source(data_file, "train", context, cache_bytes);
  if (!with_test) return s;
  s.test = open_token_source(test_file.empty() ? data_file : test_file, "test", context, cache_bytes);
  const SourceInfo &tr = s.train->info(), &te = s.test->info();
  if (tr.classes != te.classes)
    throw ConfigError(str(te.name, " has vocab_size ", te.classes, " but ", tr.name, " ", tr.classes,
                          "; train and test must come from one tokenizer"));
  return s;
}

}  // namespace drt::data
