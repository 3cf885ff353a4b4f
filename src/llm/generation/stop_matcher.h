// StopMatcher: decides when one sequence's generation ends and which of its text may be shown to
// the user so far. Fed, token by token, with each generated token and the text that token adds
// (from an incremental detokenizer, so that pieces hold whole UTF-8 characters), it
//   - ends on EOS (unless ignore_eos) or a stop token: finish reason "stop"; the token's text is
//     not emitted;
//   - ends on a stop string, which may span any number of tokens: finish reason "stop"; the text
//     before the stop string is emitted, the stop string and anything after it are not;
//   - ends after max_tokens tokens: finish reason "length";
//   - holds back the longest tail of the text that could still grow into a stop string, and
//     releases it as soon as it cannot (or when generation ends for another reason).
// When one token completes several stop strings, the one that ends first in the text wins (the
// longest, when two end at the same place): the stop string a reader meets first. So the result
// depends only on the concatenated text, never on where the token boundaries fall. Stop strings
// are matched on UTF-8 bytes: a match of valid UTF-8 in valid UTF-8 always falls on character
// boundaries, and held-back text always starts on one.
//
// Checks in each step, first match wins: EOS, stop tokens, stop strings, max_tokens.
// One StopMatcher per sequence; it owns copies of the stop strings and ids and at most
// (longest stop string - 1) bytes of held-back text. Not thread-safe; instances share nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llm/generation/sampling_params.h"

namespace kiln::llm {

enum class FinishReason {
  kNone,    // still generating
  kStop,    // EOS, a stop token or a stop string
  kLength,  // max_tokens reached
};

// "stop", "length", or "" for kNone: the OpenAI finish_reason strings.
std::string_view finish_reason_name(FinishReason reason);

class StopMatcher {
 public:
  // `params` must have passed validate(); its stop, stop_token_ids, ignore_eos and max_tokens are
  // used. `eos_ids`: the model's end-of-sequence tokens (tokenizer and generation config).
  StopMatcher(const SamplingParams& params, std::span<const int32_t> eos_ids);

  struct Step {
    std::string text;                        // safe to show now; may be empty while text is held
    FinishReason finish = FinishReason::kNone;
    std::optional<int32_t> stop_token;       // the stop token id that ended it (not set for EOS)
    std::optional<std::string> stop_string;  // the stop string that ended it
  };

  // Records one generated token and the text it adds. Must not be called once finished().
  Step append(int32_t token, std::string_view text);

  bool finished() const { return finish_ != FinishReason::kNone; }
  FinishReason finish_reason() const { return finish_; }
  int32_t num_tokens() const { return num_tokens_; }
  // Text received but not yet emitted: always a proper prefix of some stop string.
  std::string_view held_text() const { return held_; }

 private:
  // Ends the sequence and releases held-back text into `step` (unless a stop string ended it).
  void finish(Step& step, FinishReason reason);

  std::vector<std::string> stop_strings_;
  std::vector<int32_t> stop_token_ids_;
  std::vector<int32_t> eos_ids_;  // empty when ignore_eos
  int32_t max_tokens_ = 0;
  int32_t num_tokens_ = 0;
  std::string held_;
  FinishReason finish_ = FinishReason::kNone;
};

}  // namespace kiln::llm
