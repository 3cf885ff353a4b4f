#include "llm/generation/logprobs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "base/status.h"
#include "llm/generation/token_order.h"

namespace kiln::llm {
namespace {

// NaN sorts as -inf, so a broken logit never outranks a real one.
float clean(float logit) { return std::isnan(logit) ? -kInf : logit; }

// exp(x) for x <= 0: x = n * ln2 + r with |r| <= ln2 / 2 (ln2 split in two so n * ln2 is exact),
// exp(r) by its degree-7 Taylor polynomial (truncation error < 6e-9), 2^n through the exponent bits.
inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  // Selects as bit masks, not branches, so that the loops over this function vectorise.
  const uint32_t keep = 0u - static_cast<uint32_t>(x >= -87.0f);  // all ones, or 0 (also for NaN)
  const float xr = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & keep);  // 0 where not kept
  const float n = (xr * kLog2e + kRound) - kRound;
  const float r = (xr - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_to_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);  // n in [-126, 0]
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p * two_to_n) & keep);
}

}  // namespace

double softmax_numerators(std::span<const float> in, float shift, float scale, std::span<float> out) {
  KILN_CHECK(in.size() == out.size());
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) out[i] = exp_nonpositive((in[i] - shift) * scale);
  // Independent partial sums per lane: one running sum would be a single dependency chain, which
  // the compiler may not reorder for floating point.
  constexpr size_t kLanes = 8;
  double lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lanes[j] += static_cast<double>(out[i + j]);
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += static_cast<double>(out[i]);
  for (double lane : lanes) sum += lane;
  return sum;
}

LogSoftmaxNorm log_softmax_norm(std::span<const float> logits) {
  LogSoftmaxNorm norm;
  float max = -kInf;
  for (float v : logits) max = std::max(max, clean(v));
  norm.max = max;
  if (max == kInf) {
    size_t count = 0;
    for (float v : logits) count += v == kInf ? 1 : 0;
    norm.log_sum = std::log(static_cast<double>(count));
    return norm;
  }
  if (max == -kInf) {
    norm.log_sum = std::numeric_limits<double>::quiet_NaN();
    return norm;
  }
  constexpr size_t kChunk = 512;
  float numerators[kChunk];
  double sum = 0.0;
  for (size_t start = 0; start < logits.size(); start += kChunk) {
    const size_t n = std::min(kChunk, logits.size() - start);
    sum += softmax_numerators(logits.subspan(start, n), max, 1.0f, std::span<float>(numerators, n));
  }
  norm.log_sum = std::log(sum);
  return norm;
}

float logprob_of(std::span<const float> logits, const LogSoftmaxNorm& norm, int32_t token) {
  KILN_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size());
  const float v = clean(logits[static_cast<size_t>(token)]);
  if (norm.max == -kInf) return std::numeric_limits<float>::quiet_NaN();
  if (norm.max == kInf) return v == kInf ? static_cast<float>(-norm.log_sum) : -kInf;
  return static_cast<float>(static_cast<double>(v) - norm.max - norm.log_sum);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, const LogSoftmaxNorm& norm, int32_t n) {
  const size_t want = std::min(static_cast<size_t>(std::max<int32_t>(n, 0)), logits.size());
  std::vector<TokenLogprob> best;  // a min-heap on "more likely": best.front() is the weakest kept
  if (want == 0) return best;
  best.reserve(want + 1);
  auto weaker_on_top = [](const TokenLogprob& a, const TokenLogprob& b) {
    return more_likely(a.logprob, a.token, b.logprob, b.token);
  };
  // The heap holds cleaned raw logits; they become logprobs at the end.
  for (size_t i = 0; i < logits.size(); ++i) {
    const TokenLogprob candidate{static_cast<int32_t>(i), clean(logits[i])};
    if (best.size() < want) {
      best.push_back(candidate);
      std::push_heap(best.begin(), best.end(), weaker_on_top);
    } else if (more_likely(candidate.logprob, candidate.token, best.front().logprob, best.front().token)) {
      std::pop_heap(best.begin(), best.end(), weaker_on_top);
      best.back() = candidate;
      std::push_heap(best.begin(), best.end(), weaker_on_top);
    }
  }
  std::sort(best.begin(), best.end(), weaker_on_top);
  for (TokenLogprob& entry : best) entry.logprob = logprob_of(logits, norm, entry.token);
  return best;
}

}  // namespace kiln::llm
