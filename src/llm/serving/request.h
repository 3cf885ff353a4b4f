// What a front end hands the serving loop and what it gets back. A GenerationRequest is plain
// data, already tokenised and validated by the front end (the server's protocol layer): the
// loop checks only what depends on the model and the cache (prompt length, whether it can
// ever fit). Events flow back through the request's ResponseStream (response_stream.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llm/generation/logprobs.h"
#include "llm/generation/sampling_params.h"
#include "llm/generation/stop_matcher.h"
#include "llm/structured/compiled_grammar.h"

namespace kiln::llm {

struct GenerationRequest {
  std::string request_id;        // for logs; the loop does not interpret it
  std::vector<int32_t> prompt;   // token ids as the model sees them (BOS included by the front end)
  SamplingParams params;         // passed validate() for the loop's vocabulary
  int32_t n = 1;                 // independent choices; choice i of a seeded request uses seed + i
  // Logprobs of the prompt tokens (completions' echo + logprobs, as lm-evaluation-harness scores):
  // -1 none; N >= 0: each prompt token's logprob (the first has none) and the top N alternatives.
  int32_t prompt_logprobs = -1;
  bool skip_special_tokens = true;  // in the generated text
  // How often the consumer's notifier runs (ResponseStream::push): 1 at every event; N > 1 at the
  // first token, then once N tokens have gathered, and at every choice's end and every
  // non-token event; 0 only at the request's last event (a consumer that answers once, at the end).
  int32_t notify_every = 1;
  // Structured output: when set, every choice's text follows this grammar (each choice with a
  // matcher of its own; the compiled grammar is shared and immutable but for its caches).
  std::shared_ptr<const structured::CompiledGrammar> grammar;
};

// One generated (or, for prompt logprobs, prompt) token with what the request asked to know of it.
struct TokenInfo {
  int32_t token = 0;
  std::optional<float> logprob;    // when logprobs were asked (prompt token 0: never)
  std::vector<TokenLogprob> top;   // the asked number of alternatives, most likely first
};

// Counters of one request, final in its kFinished event.
struct RequestUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;   // over all choices
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
};

// One event of one request. Events of a request arrive in order; for each choice: zero or more
// kDelta, the last of which carries its finish reason; then exactly one kFinished for the whole
// request, or one kError instead (after which nothing follows).
struct RequestEvent {
  enum class Kind { kPromptLogprobs, kDelta, kFinished, kError };
  Kind kind = Kind::kDelta;
  int32_t choice = 0;                // kDelta: which choice, in [0, n)
  std::string text;                  // kDelta: text that became final (may be empty)
  std::vector<TokenInfo> tokens;     // kDelta: tokens emitted with this text; kPromptLogprobs: the prompt's
  FinishReason finish = FinishReason::kNone;  // kDelta: set on the choice's last delta
  std::optional<std::string> stop_string;     // kDelta with kStop: the stop string that matched
  RequestUsage usage;                // kFinished
  std::string error;                 // kError: a message for the user
  // Timing, seconds since the request was submitted (kFinished): first token, queue wait.
  double first_token_s = 0;
  double queue_s = 0;
  // When the loop pushed the event (set by ResponseStream::push): inter-token gaps are the
  // engine's, however the consumer's notifications group the events.
  std::chrono::steady_clock::time_point pushed;
};

}  // namespace kiln::llm
