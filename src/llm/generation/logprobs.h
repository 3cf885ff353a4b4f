// Log-probabilities reported to users: the log_softmax of the model's raw logits, before logit
// bias, penalties, temperature and truncation (what vLLM returns by default and what OpenAI's
// API reports). They describe the model, not the sampling knobs of one request.
//
// Non-finite logits: NaN counts as -inf (probability 0, logprob -inf). When some logits are +inf,
// those tokens share all the probability equally. When every logit is -inf or NaN there is no
// distribution and every logprob is NaN.
//
// Pure functions over caller-owned spans; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kiln::llm {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// The normaliser of a row of logits: lets logprob_of() answer any token in O(1).
struct LogSoftmaxNorm {
  float max = 0.0f;      // the largest logit (NaN ignored); +inf or -inf in the special cases above
  double log_sum = 0.0;  // log(sum_i exp(logit_i - max)), or log(count of +inf logits) when max is +inf
};

// logits: [vocab]. One pass with exp over the row.
LogSoftmaxNorm log_softmax_norm(std::span<const float> logits);

// log_softmax(logits)[token]; token must be in [0, logits.size()).
float logprob_of(std::span<const float> logits, const LogSoftmaxNorm& norm, int32_t token);

// The softmax numerators under both logprobs and sampling: out[i] = exp((in[i] - shift) * scale)
// for in, out: [n] (they may be the same array). Arguments must make (in[i] - shift) * scale <= 0;
// where it is below -87 (float underflow), -inf or NaN, out[i] is exactly 0. Relative error below
// 1e-6; written without library calls so that the compiler vectorises it. Returns the sum of out
// (accumulated in double).
double softmax_numerators(std::span<const float> in, float shift, float scale, std::span<float> out);

// The n most likely tokens, most likely first; equal logits in ascending id order. Returns
// min(n, logits.size()) entries. O(vocab * log n).
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, const LogSoftmaxNorm& norm, int32_t n);

}  // namespace kiln::llm
