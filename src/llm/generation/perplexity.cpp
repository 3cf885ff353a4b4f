#include "llm/generation/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/sequence_runner.h"

namespace kiln::llm {
namespace {

// -log softmax(row)[target], in double.
double negative_log_prob(std::span<const float> row, int32_t target) {
  const float max = *std::max_element(row.begin(), row.end());
  double sum = 0.0;
  for (float v : row) sum += std::exp(static_cast<double>(v) - max);
  return std::log(sum) - (static_cast<double>(row[static_cast<size_t>(target)]) - max);
}

}  // namespace

double PerplexityResult::perplexity() const {
  return tokens_scored > 0 ? std::exp(nll_sum / static_cast<double>(tokens_scored)) : 0.0;
}

Expected<PerplexityResult> perplexity(runtime::Executor& executor, runtime::KvCache& cache, int64_t vocab_size,
                                      std::span<const int32_t> tokens, int64_t window, std::optional<int32_t> bos) {
  if (window < 2) return invalid_argument("the perplexity window must be at least 2 tokens");
  if (tokens.size() < 2) return invalid_argument("the text has fewer than 2 tokens");
  const auto chunk = static_cast<size_t>(bos ? window - 1 : window);
  PerplexityResult result;
  runtime::SequenceRunner runner(executor, cache, vocab_size);
  std::vector<int32_t> input;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const auto piece = tokens.subspan(begin, std::min(chunk, tokens.size() - begin));
    input.clear();
    if (bos) input.push_back(*bos);
    input.insert(input.end(), piece.begin(), piece.end());
    if (input.size() < 2) break;  // a lone trailing token without BOS has nothing to be scored from
    runner.reset();
    KILN_ASSIGN_OR_RETURN(std::vector<float> logits, runner.feed(input, true));
    // Row i predicts input[i + 1].
    for (size_t i = 0; i + 1 < input.size(); ++i) {
      std::span<const float> row(logits.data() + i * static_cast<size_t>(vocab_size), static_cast<size_t>(vocab_size));
      result.nll_sum += negative_log_prob(row, input[i + 1]);
      ++result.tokens_scored;
    }
    ++result.windows;
  }
  return result;
}

}  // namespace kiln::llm
