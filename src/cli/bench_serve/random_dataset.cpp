#include "cli/bench_serve/random_dataset.h"

#include <cmath>
#include <random>
#include <string>

namespace kiln::cli::bench_serve {
namespace {

// Lengths within `ratio` of `len`, never below 1.
std::uniform_int_distribution<int64_t> length_range(int64_t len, double ratio) {
  const auto lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - ratio)));
  const auto hi = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + ratio)));
  return std::uniform_int_distribution<int64_t>(std::max<int64_t>(1, lo), std::max<int64_t>(1, hi));
}

}  // namespace

Expected<std::vector<BenchPrompt>> random_dataset(const RandomSpec& spec, const llm::Tokenizer& tokenizer) {
  if (spec.num_prompts < 1) return invalid_argument("--num-prompts must be >= 1");
  if (spec.input_len < 1) return invalid_argument("--random-input-len must be >= 1");
  if (spec.output_len < 1) return invalid_argument("--random-output-len must be >= 1");
  if (!(spec.range_ratio >= 0 && spec.range_ratio < 1)) {
    return invalid_argument("--random-range-ratio must be in [0, 1), got " + std::to_string(spec.range_ratio));
  }
  std::vector<int32_t> vocab;
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(static_cast<int32_t>(id))) vocab.push_back(static_cast<int32_t>(id));
  }
  if (vocab.empty()) return invalid_argument("the tokenizer has no ordinary tokens to draw prompts from");

  std::mt19937_64 rng(spec.seed);
  auto input_len = length_range(spec.input_len, spec.range_ratio);
  auto output_len = length_range(spec.output_len, spec.range_ratio);
  std::uniform_int_distribution<size_t> pick(0, vocab.size() - 1);
  std::vector<BenchPrompt> prompts(static_cast<size_t>(spec.num_prompts));
  for (BenchPrompt& p : prompts) {
    const int64_t n = input_len(rng);
    p.output_len = output_len(rng);
    p.ids.resize(static_cast<size_t>(n));
    for (int32_t& id : p.ids) id = vocab[pick(rng)];
    p.prompt_tokens = n;
    if (spec.as_text) {
      KILN_ASSIGN_OR_RETURN(p.text, tokenizer.decode(p.ids, /*skip_special_tokens=*/true));
      KILN_ASSIGN_OR_RETURN(std::vector<int32_t> again, tokenizer.encode(p.text, /*add_special_tokens=*/false));
      p.prompt_tokens = static_cast<int64_t>(again.size());
      p.ids.clear();
      if (p.text.empty()) p.text = " ";
    }
  }
  return prompts;
}

}  // namespace kiln::cli::bench_serve
