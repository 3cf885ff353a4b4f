// SamplingParams: everything a request says about how its next tokens are chosen and when its
// generation ends. A request's parameters are plain values, copied into the Sampler and the
// StopMatcher of its sequence; nothing here holds a reference to anything else.
//
// Parameters arrive from outside (request bodies, generation_config.json), so they are checked
// once, by validate(), before a sequence starts; Sampler and StopMatcher assume valid parameters.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kiln::llm {

// The most top alternatives a request may ask for per token (OpenAI's and vLLM's default limit).
inline constexpr int32_t kMaxLogprobs = 20;
// Logit bias values are limited as OpenAI limits them: -100 bans a token, +100 forces it.
inline constexpr float kMaxLogitBias = 100.0f;

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, ties -> lowest id)
  int32_t top_k = 0;                // 0 = off; larger than the vocabulary = off
  float top_p = 1.0f;               // in (0, 1]; 1 = off
  float min_p = 0.0f;               // in [0, 1]; 0 = off; relative to the top probability
  float repetition_penalty = 1.0f;  // > 0; HF/CTRL style over prompt + generated tokens; 1 = off
  float presence_penalty = 0.0f;    // in [-2, 2]; OpenAI style, over generated tokens
  float frequency_penalty = 0.0f;   // in [-2, 2]; OpenAI style, over generated tokens
  std::map<int32_t, float> logit_bias;  // token id -> value in [-100, 100], added to its logit
  std::optional<uint64_t> seed;     // same seed -> same tokens, whatever else is in the batch
  int32_t max_tokens = 16;          // >= 1 generated tokens, then finish reason "length"
  std::vector<std::string> stop;    // stop strings, UTF-8, non-empty; may span token boundaries
  std::vector<int32_t> stop_token_ids;  // tokens that end generation like EOS (not emitted)
  bool ignore_eos = false;          // keep generating past the model's EOS tokens
  int32_t min_tokens = 0;           // in [0, max_tokens]: EOS and stop_token_ids cannot be sampled before this many
  int32_t logprobs = -1;            // -1 = none; N in [0, 20]: chosen token's logprob + top N
};

// Checks every field against its range and `vocab_size` (token ids in logit_bias and
// stop_token_ids). Returns the first problem as kInvalidArgument with the field's name, the bad
// value and the accepted range.
Status validate(const SamplingParams& params, int64_t vocab_size);

// What a model directory's generation_config.json says about generation.
struct GenerationDefaults {
  SamplingParams params;               // request defaults; fields the file lacks keep their defaults
  std::vector<int32_t> eos_token_ids;  // empty when the file names none
};

// Reads generation_config.json: temperature, top_k, top_p, min_p, repetition_penalty,
// max_new_tokens (-> max_tokens) and eos_token_id (an integer or a list). Keys that are absent or
// null keep SamplingParams' defaults; other keys are ignored. `"do_sample": false` makes the
// default greedy (temperature 0), as transformers' generate() does; when do_sample is true or
// absent, the sampling values are the defaults, as OpenAI-style servers use them. A key of the
// wrong type or a malformed file is kInvalidArgument naming the key. The values are not
// range-checked here: call validate() on the request that uses them.
Expected<GenerationDefaults> generation_defaults_from_json(std::string_view generation_config_json);

}  // namespace kiln::llm
