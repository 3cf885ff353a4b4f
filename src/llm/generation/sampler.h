// Sampler: chooses each next token of one sequence from the model's logits, with the knobs of
// SamplingParams. One Sampler per sequence; it owns a copy of its parameters, its random number
// generator, the token counts its penalties need and scratch buffers reused across steps. It is
// not thread-safe, but Samplers share nothing, so different sequences sample concurrently.
//
// Order of operations for one step (the order of vLLM and of transformers' logits processors):
//   1. logit bias        logit[t] += logit_bias[t]
//   2. penalties         repetition (each distinct token of prompt + generated text, once):
//                          logit > 0 ? logit / r : logit * r
//                        frequency and presence (generated tokens only, count c > 0):
//                          logit -= frequency_penalty * c + presence_penalty
//   3. temperature       0: argmax of the step-2 logits (ties -> lowest id), steps 4-6 skipped
//                        else logit / temperature
//   4. top-k             keep the k largest (ties -> lower ids first)
//   5. top-p             over the probabilities renormalised after top-k, keep the smallest
//                        most-likely-first set whose cumulative probability >= top_p
//                        (transformers' rule; at least one token is kept)
//   6. min-p             drop tokens whose probability < min_p * the largest probability
//   7. sample            one draw from the kept tokens, renormalised
//
// Non-finite logits: NaN counts as -inf, so it is never chosen. Tokens at +inf (after bias and
// penalties) share all the probability. When no token is left with a logit above -inf, sample()
// returns kInvalidArgument rather than inventing a token. A token whose probability is below
// e^-87 (about 1.6e-38) of the most likely one's counts as probability 0 (float underflow).
//
// Logprobs (params.logprobs >= 0) are those of logprobs.h: the raw model distribution before
// step 1, not the distribution that was sampled from.
//
// Device sampling (runtime/device_sampling.h): add_device_row() describes the next choice for a
// backend that samples on its device, with the next random draw, and accept() then records the
// token it returns. The device draws from the same distribution by the same steps, but may map a
// given draw to another token (it walks candidates in id order), so a seed reproduces its tokens
// on the same kind of backend. Logprobs need the logits on the host: no device row for them.
//
// Randomness: draw number n of a seeded Sampler is a pure function of (seed, n), counter-based
// (SplitMix64 output function over a Weyl sequence), so a sequence's tokens depend only on its seed
// and its own logits, never on the rest of the batch. Without a seed, the key comes from
// std::random_device once, at construction.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "llm/generation/logprobs.h"
#include "llm/generation/sampling_params.h"
#include "runtime/device_sampling.h"

namespace kiln::llm {

// The error of a row with no token left to sample.
Status no_token_to_sample();

class Sampler {
 public:
  // `params` must have passed validate(). `prompt_tokens` feed the repetition penalty (copied,
  // only when that penalty is on). Token ids outside the logits row are ignored by the penalties.
  // The sampler never treats EOS specially: ending a sequence is the StopMatcher's job.
  Sampler(SamplingParams params, std::span<const int32_t> prompt_tokens);

  struct Choice {
    int32_t token = 0;
    std::optional<float> logprob;    // set when params.logprobs >= 0
    std::vector<TokenLogprob> top;   // params.logprobs alternatives, most likely first
  };

  // logits: [vocab], not modified. Each call with temperature > 0 uses the next random draw.
  // `allowed`, when not empty, is a token mask (bit t of word t / 64; a structured-output
  // constraint): the tokens it leaves out get -inf after step 2, before anything is chosen.
  // Logprobs stay those of the raw row.
  Expected<Choice> sample(std::span<const float> logits, std::span<const uint64_t> allowed = {});

  // Whether add_device_row() can describe this sampler's choices (it has no logprobs to report).
  bool device_capable() const { return params_.logprobs < 0; }
  // Appends this step's choice to `batch` as one row (its bias and penalty lists included); a
  // temperature above 0 takes the next random draw, as sample() would. device_capable() only.
  void add_device_row(runtime::SamplingBatch& batch);

  // Records a generated token for the penalties of later steps.
  void accept(int32_t token);

  // The tokens that end a sequence (EOS, stop_token_ids): while fewer than params.min_tokens
  // tokens have been accepted, they get a logit of -inf.
  void hold_back(std::vector<int32_t> ending_tokens) {
    std::sort(ending_tokens.begin(), ending_tokens.end());
    ending_tokens.erase(std::unique(ending_tokens.begin(), ending_tokens.end()), ending_tokens.end());
    held_back_ = std::move(ending_tokens);
  }

  // Steps 1-2 of the order above, in place on logits: [vocab]. sample() applies the same steps
  // to its own copy; this is for callers that want to see the adjusted logits.
  void apply_bias_and_penalties(std::span<float> logits) const;

  const SamplingParams& params() const { return params_; }

 private:
  struct Candidate {
    float weight;  // a logit while top-k selects, then exp((logit - max) / temperature)
    int32_t token;
  };

  // Steps 3-7 with temperature > 0 over adjusted_ (overwritten), whose largest value is
  // `max_logit`, first found at `argmax`.
  int32_t sample_truncated(float max_logit, int32_t argmax);
  double next_uniform();  // [0, 1)

  SamplingParams params_;
  std::vector<int32_t> prompt_distinct_;                  // sorted; empty unless repetition penalty is on
  std::unordered_map<int32_t, int32_t> generated_counts_;  // token -> times generated
  std::vector<int32_t> held_back_;                         // see hold_back()
  int32_t accepted_ = 0;                                   // tokens accepted so far
  uint64_t rng_key_ = 0;
  uint64_t draw_counter_ = 0;

  // Scratch reused across steps, each [vocab] at most.
  std::vector<float> adjusted_;
  std::vector<Candidate> candidates_;
  std::vector<double> block_sums_;
};

}  // namespace kiln::llm
