#include "llm/generation/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "llm/generation/token_order.h"

namespace kiln::llm {
namespace {

constexpr uint64_t kWeylStep = 0x9e3779b97f4a7c15ULL;  // 2^64 / golden ratio, odd
// Plain sampling draws by walking per-block sums, then one block.
constexpr size_t kDrawBlock = 512;
// Top-k keeps a heap of the best k up to this k, and partitions the whole row above it.
constexpr size_t kTopKHeapLimit = 1024;

// SplitMix64's output function: a bijection on 64 bits whose outputs over a Weyl sequence pass
// BigCrush, so mix64(key + n * kWeylStep) is a counter-based generator.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Status no_token_to_sample() {
  return invalid_argument("no token can be sampled: every logit is -inf or NaN after logit bias and penalties "
                          "(the model produced no finite logit)");
}

Sampler::Sampler(SamplingParams params, std::span<const int32_t> prompt_tokens) : params_(std::move(params)) {
  if (params_.repetition_penalty != 1.0f) {
    prompt_distinct_.assign(prompt_tokens.begin(), prompt_tokens.end());
    std::sort(prompt_distinct_.begin(), prompt_distinct_.end());
    prompt_distinct_.erase(std::unique(prompt_distinct_.begin(), prompt_distinct_.end()), prompt_distinct_.end());
  }
  if (params_.seed) {
    rng_key_ = mix64(*params_.seed);
  } else {
    std::random_device device;
    rng_key_ = (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
  }
}

void Sampler::accept(int32_t token) {
  ++generated_counts_[token];
  ++accepted_;
}

void Sampler::add_device_row(runtime::SamplingBatch& batch) {
  KILN_CHECK(device_capable());
  runtime::RowSampling& row = batch.add_row();
  row.temperature = params_.temperature;
  row.top_k = params_.top_k;
  row.top_p = params_.top_p;
  row.min_p = params_.min_p;
  row.repetition_penalty = params_.repetition_penalty;
  row.presence_penalty = params_.presence_penalty;
  row.frequency_penalty = params_.frequency_penalty;
  // The device adds each listed bias once, so a token appears in the list at most once: a held
  // back token's -inf takes the place of its logit bias.
  const bool holding = accepted_ < params_.min_tokens;
  const auto held = [&](int32_t token) {
    return holding && std::find(held_back_.begin(), held_back_.end(), token) != held_back_.end();
  };
  for (const auto& [token, bias] : params_.logit_bias) {
    batch.bias_tokens.push_back(token);
    batch.bias_values.push_back(held(token) ? -kInf : bias);
    ++row.bias_count;
  }
  if (holding) {
    for (int32_t token : held_back_) {
      if (params_.logit_bias.contains(token)) continue;
      batch.bias_tokens.push_back(token);
      batch.bias_values.push_back(-kInf);
      ++row.bias_count;
    }
  }
  const auto add_penalty = [&](int32_t token, int32_t count) {
    batch.penalty_tokens.push_back(token);
    batch.penalty_counts.push_back(count);
    ++row.penalty_count;
  };
  if (params_.repetition_penalty != 1.0f) {
    for (int32_t token : prompt_distinct_) {
      const auto it = generated_counts_.find(token);
      add_penalty(token, it == generated_counts_.end() ? 0 : it->second);
    }
    for (const auto& [token, count] : generated_counts_) {
      if (!std::binary_search(prompt_distinct_.begin(), prompt_distinct_.end(), token)) add_penalty(token, count);
    }
  } else if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    for (const auto& [token, count] : generated_counts_) add_penalty(token, count);
  }
  if (params_.temperature > 0.0f) row.uniform = next_uniform();
}

double Sampler::next_uniform() {
  ++draw_counter_;
  const uint64_t bits = mix64(rng_key_ + draw_counter_ * kWeylStep);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;  // 53 random bits -> [0, 1)
}

void Sampler::apply_bias_and_penalties(std::span<float> logits) const {
  const auto in_row = [&](int32_t token) { return token >= 0 && static_cast<size_t>(token) < logits.size(); };
  for (const auto& [token, bias] : params_.logit_bias) {
    if (in_row(token)) logits[static_cast<size_t>(token)] += bias;
  }
  if (accepted_ < params_.min_tokens) {
    for (int32_t token : held_back_) {
      if (in_row(token)) logits[static_cast<size_t>(token)] = -kInf;
    }
  }

  const float r = params_.repetition_penalty;
  if (r != 1.0f) {
    // Dividing a positive logit and multiplying a negative one both make the token less likely.
    auto penalise = [&](int32_t token) {
      float& logit = logits[static_cast<size_t>(token)];
      logit = logit > 0.0f ? logit / r : logit * r;
    };
    for (int32_t token : prompt_distinct_) {
      if (in_row(token)) penalise(token);
    }
    for (const auto& [token, count] : generated_counts_) {
      if (in_row(token) && !std::binary_search(prompt_distinct_.begin(), prompt_distinct_.end(), token)) {
        penalise(token);
      }
    }
  }

  if (params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f) {
    for (const auto& [token, count] : generated_counts_) {
      if (in_row(token)) {
        logits[static_cast<size_t>(token)] -=
            params_.frequency_penalty * static_cast<float>(count) + params_.presence_penalty;
      }
    }
  }
}

Expected<Sampler::Choice> Sampler::sample(std::span<const float> logits, std::span<const uint64_t> allowed) {
  if (logits.empty()) return invalid_argument("cannot sample from an empty logits row");
  const size_t vocab = logits.size();
  adjusted_.resize(vocab);
  for (size_t i = 0; i < vocab; ++i) adjusted_[i] = std::isnan(logits[i]) ? -kInf : logits[i];
  apply_bias_and_penalties(adjusted_);
  if (!allowed.empty()) {
    for (size_t w = 0; w * 64 < vocab; ++w) {
      const uint64_t bits = w < allowed.size() ? allowed[w] : 0;
      if (bits == ~uint64_t{0}) continue;
      const size_t end = std::min(vocab, w * 64 + 64);
      for (size_t i = w * 64; i < end; ++i) {
        if (!(bits >> (i - w * 64) & 1)) adjusted_[i] = -kInf;
      }
    }
  }

  // The first largest value, so greedy ties go to the lowest id.
  const size_t argmax = static_cast<size_t>(std::max_element(adjusted_.begin(), adjusted_.end()) - adjusted_.begin());
  const float max_logit = adjusted_[argmax];
  if (max_logit == -kInf) {
    return no_token_to_sample();
  }

  Choice choice;
  choice.token = params_.temperature == 0.0f ? static_cast<int32_t>(argmax)
                                             : sample_truncated(max_logit, static_cast<int32_t>(argmax));
  if (params_.logprobs >= 0) {
    const LogSoftmaxNorm norm = log_softmax_norm(logits);
    choice.logprob = logprob_of(logits, norm, choice.token);
    choice.top = top_logprobs(logits, norm, params_.logprobs);
  }
  return choice;
}

int32_t Sampler::sample_truncated(float max_logit, int32_t argmax) {
  const size_t vocab = adjusted_.size();
  if (max_logit == kInf) {
    // Tokens at +inf share all the probability: as logits 0 against -inf, the usual path applies.
    for (float& v : adjusted_) v = v == kInf ? 0.0f : -kInf;
    max_logit = 0.0f;
  }
  // Step 3. A temperature so small that 1/T overflows still scales a zero difference to zero.
  const float scale = std::min(1.0f / params_.temperature, std::numeric_limits<float>::max());
  const size_t k = static_cast<size_t>(params_.top_k);
  const bool top_k = k > 0 && k < vocab;
  const bool top_p = params_.top_p < 1.0f;
  const bool min_p = params_.min_p > 0.0f;

  if (!top_k && !top_p && !min_p) {
    // Plain sampling: weights [vocab] in place, per-block sums so the draw walks blocks first.
    block_sums_.clear();
    for (size_t start = 0; start < vocab; start += kDrawBlock) {
      const std::span<float> block = std::span<float>(adjusted_).subspan(start, std::min(kDrawBlock, vocab - start));
      block_sums_.push_back(softmax_numerators(block, max_logit, scale, block));
    }
    double total = 0.0;
    for (double block_sum : block_sums_) total += block_sum;
    const double u = next_uniform() * total;
    double cumulative = 0.0;
    for (size_t b = 0; b < block_sums_.size(); ++b) {
      if (!(u < cumulative + block_sums_[b])) {
        cumulative += block_sums_[b];
        continue;
      }
      // The sum inside the block may round differently from block_sums_[b]: if u is not reached,
      // the block's last positive weight is the answer.
      const size_t begin = b * kDrawBlock;
      const size_t end = std::min(begin + kDrawBlock, vocab);
      size_t last_positive = begin;
      for (size_t i = begin; i < end; ++i) {
        if (adjusted_[i] <= 0.0f) continue;
        cumulative += adjusted_[i];
        last_positive = i;
        if (u < cumulative) return static_cast<int32_t>(i);
      }
      return static_cast<int32_t>(last_positive);
    }
    return argmax;  // only when rounding left u at the very top of the range
  }

  // Steps 4-6 build candidates_: (softmax numerator, token), most likely one at weight 1.
  const auto by_likelihood = [](const Candidate& a, const Candidate& b) {
    return more_likely(a.weight, a.token, b.weight, b.token);
  };
  double total = 0.0;  // the mass top-p measures against: all of it after top-k
  candidates_.clear();
  if (top_k) {
    // Step 4. Candidates hold logits while selecting. A small k keeps a heap whose front is the
    // least likely kept token; a large k partitions the whole row.
    if (k <= kTopKHeapLimit) {
      for (size_t i = 0; i < vocab; ++i) {
        const Candidate c{adjusted_[i], static_cast<int32_t>(i)};
        if (c.weight == -kInf) continue;
        if (candidates_.size() < k) {
          candidates_.push_back(c);
          std::push_heap(candidates_.begin(), candidates_.end(), by_likelihood);
        } else if (by_likelihood(c, candidates_.front())) {
          std::pop_heap(candidates_.begin(), candidates_.end(), by_likelihood);
          candidates_.back() = c;
          std::push_heap(candidates_.begin(), candidates_.end(), by_likelihood);
        }
      }
    } else {
      candidates_.resize(vocab);
      for (size_t i = 0; i < vocab; ++i) candidates_[i] = {adjusted_[i], static_cast<int32_t>(i)};
      std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k),
                       candidates_.end(), by_likelihood);
      candidates_.resize(k);
      std::erase_if(candidates_, [](const Candidate& c) { return c.weight == -kInf; });
    }
    for (Candidate& c : candidates_) {
      float w = c.weight;
      softmax_numerators(std::span<const float>(&w, 1), max_logit, scale, std::span<float>(&c.weight, 1));
      total += c.weight;
    }
    // Step 6 (see below for why before step 5).
    if (min_p) std::erase_if(candidates_, [&](const Candidate& c) { return c.weight < params_.min_p; });
  } else {
    total = softmax_numerators(adjusted_, max_logit, scale, adjusted_);
    // Only tokens that top-p or min-p could keep become candidates. For top-p: the tokens lighter
    // than eps = (1 - top_p) * total / vocab weigh less than (1 - top_p) * total all together, so
    // the heavier ones alone reach top_p of the mass, and the nucleus lies among them. (The 0.999
    // leaves room for rounding in `total`.) Step 6, min-p, is applied here too.
    float threshold = std::numeric_limits<float>::min();  // excludes zero weights
    if (top_p) {
      const double eps = 0.999 * (1.0 - static_cast<double>(params_.top_p)) * total / static_cast<double>(vocab);
      threshold = std::max(threshold, static_cast<float>(eps));
    }
    if (min_p) threshold = std::max(threshold, params_.min_p);
    for (size_t i = 0; i < vocab; ++i) {
      if (adjusted_[i] >= threshold) candidates_.push_back({adjusted_[i], static_cast<int32_t>(i)});
    }
  }
  // min-p runs before top-p on purpose: min-p removes a least-likely tail and top-p keeps a
  // most-likely head, so the tokens both keep are the same in either order, as long as top-p
  // measures against the mass after top-k (`total`).

  // Step 5, top-p: find the first position j, in most-likely-first order, whose cumulative weight
  // reaches top_p of the mass, without sorting: bisect with nth_element, each round partitioning
  // only the range that holds j (about 2 * n comparisons in all, whatever the nucleus size). After
  // it, candidates_[0, j] are the j + 1 most likely candidates, in no particular order.
  size_t kept = candidates_.size();  // when min-p left less than top_p of the mass, all of it
  if (top_p) {
    const double target = static_cast<double>(params_.top_p) * total;
    double remaining = 0.0;
    for (const Candidate& c : candidates_) remaining += c.weight;
    if (remaining >= target) {
      size_t lo = 0;
      size_t hi = candidates_.size();
      double before = 0.0;  // weight of candidates_[0, lo), all more likely than [lo, hi)
      while (hi - lo > 1) {
        const size_t mid = lo + (hi - lo) / 2;
        std::nth_element(candidates_.begin() + static_cast<std::ptrdiff_t>(lo),
                         candidates_.begin() + static_cast<std::ptrdiff_t>(mid),
                         candidates_.begin() + static_cast<std::ptrdiff_t>(hi), by_likelihood);
        double upper = 0.0;
        for (size_t i = lo; i < mid; ++i) upper += candidates_[i].weight;
        if (before + upper >= target) {
          hi = mid;
        } else {
          before += upper;
          lo = mid;
        }
      }
      // [lo, hi) always holds exactly the candidates ranked lo .. hi - 1; now it is just j.
      kept = lo + 1;
    }
  }

  // Step 7: one draw over the kept weights, in their current (deterministic) order.
  double kept_total = 0.0;
  for (size_t i = 0; i < kept; ++i) kept_total += candidates_[i].weight;
  const double u = next_uniform() * kept_total;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += candidates_[i].weight;
    if (u < cumulative) return candidates_[i].token;
  }
  return argmax;  // only when rounding left u at the very top of the range
}

}  // namespace kiln::llm
