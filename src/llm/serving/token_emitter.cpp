#include "llm/serving/token_emitter.h"

#include <limits>

namespace kiln::llm {

TokenEmitter::TokenEmitter(const SamplingParams& params, std::span<const int32_t> prompt, const Tokenizer& tokenizer,
                           bool skip_special_tokens, std::span<const int32_t> eos_ids, int64_t max_seq_len)
    : sampler_(params, prompt),
      stop_(params, eos_ids),
      decoder_(tokenizer, skip_special_tokens),
      prompt_len_(static_cast<int64_t>(prompt.size())),
      max_seq_len_(max_seq_len),
      plain_greedy_(params.temperature == 0.0f && params.logit_bias.empty() && params.repetition_penalty == 1.0f &&
                    params.presence_penalty == 0.0f && params.frequency_penalty == 0.0f),
      want_logprobs_(params.logprobs >= 0),
      top_logprobs_(params.logprobs) {}

Expected<int32_t> TokenEmitter::step(std::span<const float> logits, RequestEvent& event) {
  KILN_CHECK(!finished());
  int32_t token = -1;
  std::optional<float> logprob;
  std::vector<TokenLogprob> top;
  if (plain_greedy_) {
    float best = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < logits.size(); ++i) {
      if (logits[i] > best) {  // NaN compares false, so it never wins
        best = logits[i];
        token = static_cast<int32_t>(i);
      }
    }
    if (token >= 0 && want_logprobs_) {
      const LogSoftmaxNorm norm = log_softmax_norm(logits);
      logprob = logprob_of(logits, norm, token);
      top = top_logprobs(logits, norm, top_logprobs_);
    }
  }
  if (token < 0) {  // sampling, or a row without a finite logit (the Sampler says so)
    KILN_ASSIGN_OR_RETURN(Sampler::Choice choice, sampler_.sample(logits));
    sampler_.accept(choice.token);
    token = choice.token;
    logprob = choice.logprob;
    top = std::move(choice.top);
  }
  ++num_generated_;
  KILN_ASSIGN_OR_RETURN(std::string piece, decoder_.push(token));
  StopMatcher::Step s = stop_.append(token, piece);

  event.kind = RequestEvent::Kind::kDelta;
  event.text = std::move(s.text);
  event.tokens.clear();
  if (!s.stop_token) event.tokens.push_back(TokenInfo{token, logprob, std::move(top)});
  event.finish = s.finish;
  event.stop_string = std::move(s.stop_string);
  if (event.finish == FinishReason::kNone && prompt_len_ + num_generated_ > max_seq_len_) {
    // The engine's limit ends it like max_tokens: the sampled token has no position to run at.
    event.finish = FinishReason::kLength;
    event.text += stop_.held_text();
  }
  if (event.finish != FinishReason::kNone) {
    finish_ = event.finish;
    if (!event.stop_string) event.text += decoder_.finish();
  }
  return token;
}

TokenInfo prompt_token_info(std::span<const float> logits, int32_t token, int32_t top) {
  const LogSoftmaxNorm norm = log_softmax_norm(logits);
  TokenInfo info;
  info.token = token;
  info.logprob = logprob_of(logits, norm, token);
  info.top = top_logprobs(logits, norm, top);
  return info;
}

}  // namespace kiln::llm
