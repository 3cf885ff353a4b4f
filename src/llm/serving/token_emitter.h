// TokenEmitter: one choice of one request, from logits rows to the events its stream receives —
// the serving loop's counterpart of Generator's loop body. Each step it samples a token
// (Sampler), turns it into text (StreamDecoder), decides whether the choice ends (StopMatcher,
// then the loop's maximum sequence length) and fills one kDelta event. It owns those three
// parts, so it holds one choice's sampling state; it borrows the tokenizer.
//
// Greedy requests without logit bias or penalties skip the Sampler's copy of the row: their
// token is the first largest logit (NaN never wins), which is what Sampler::sample returns for
// them; anything else goes through the Sampler.
//
// Structured outputs: with a grammar, each step masks the tokens the grammar refuses (its end
// tokens, EOS and stop_token_ids, only where the grammar may end) before the Sampler chooses,
// and the chosen token advances the choice's GrammarMatcher. A choice whose output is complete
// (the grammar may end and nothing may follow) ends there with kStop, without waiting for an
// EOS. On a backend that samples on its device, the mask goes with the choice's row
// (add_device_row) and the device applies it before it chooses.
//
// Also here: the prompt-logprob entry of one prompt token, from the logits row before it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "llm/generation/sampler.h"
#include "llm/generation/stop_matcher.h"
#include "llm/structured/grammar_matcher.h"
#include "llm/serving/request.h"
#include "llm/tokenizers/stream_decoder.h"

namespace kiln::llm {

class TokenEmitter {
 public:
  // `params` must have passed validate(); a seeded request passes seed + choice index here.
  // `eos_ids` are copied. A sequence whose length reaches `max_seq_len` ends with kLength.
  // `grammar`, when set, constrains the text (see above).
  TokenEmitter(const SamplingParams& params, std::span<const int32_t> prompt, const Tokenizer& tokenizer,
               bool skip_special_tokens, std::span<const int32_t> eos_ids, int64_t max_seq_len,
               std::shared_ptr<const structured::CompiledGrammar> grammar = nullptr);

  // Samples from `logits` [vocab] and fills `event` (a kDelta: its text, at most one token, and
  // the finish reason when this token ends the choice). Returns the sampled token, which the
  // caller appends to the sequence unless finished(). Errors (a row with no finite logit, a
  // token the tokenizer cannot decode) end the choice in the caller's hands.
  Expected<int32_t> step(std::span<const float> logits, RequestEvent& event);

  // Device sampling (runtime/device_sampling.h): a choice without logprobs can have its token
  // chosen by the backend. add_device_row() appends its row for this step; step_chosen() then
  // takes the token the backend returned (-1: the row had no finite logit) and does the rest of
  // step().
  bool device_capable() const { return sampler_.device_capable(); }
  void add_device_row(runtime::SamplingBatch& batch);
  Expected<int32_t> step_chosen(int32_t token, RequestEvent& event);

  bool finished() const { return finish_ != FinishReason::kNone; }
  int32_t num_generated() const { return num_generated_; }

 private:
  // mask_ for this step: what the grammar allows, and the ending tokens where it may end.
  void fill_grammar_mask();
  static Status no_token_fits(const std::string& why);
  // The rest of step() once the token is chosen.
  Expected<int32_t> emit(int32_t token, std::optional<float> logprob, std::vector<TokenLogprob> top,
                         RequestEvent& event);

  Sampler sampler_;
  StopMatcher stop_;
  StreamDecoder decoder_;
  int64_t prompt_len_;
  int64_t max_seq_len_;
  bool plain_greedy_;
  std::optional<structured::GrammarMatcher> matcher_;
  std::vector<int32_t> ending_;   // with a grammar: the tokens that end the choice
  std::vector<uint64_t> mask_;    // with a grammar: this step's allowed tokens
  bool want_logprobs_;
  int32_t top_logprobs_;
  int32_t num_generated_ = 0;
  FinishReason finish_ = FinishReason::kNone;
};

// The prompt-logprob entry of `token` given the logits row of the position before it: its
// logprob and the `top` most likely alternatives.
TokenInfo prompt_token_info(std::span<const float> logits, int32_t token, int32_t top);

}  // namespace kiln::llm
