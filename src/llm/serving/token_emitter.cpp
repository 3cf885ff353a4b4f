#include "llm/serving/token_emitter.h"

#include <limits>
#include <span>

namespace kiln::llm {
namespace {

// The first index of the largest value, or -1 when none is above -inf; NaN never wins. Sixteen
// lanes keep their own best (the first in the lane), merged by value and then by lowest index,
// so that the loop vectorises: greedy decoding scans the whole vocabulary for every token.
int32_t first_argmax(std::span<const float> x) {
  constexpr size_t kLanes = 16;
  float best[kLanes];
  int32_t at[kLanes];
  for (size_t l = 0; l < kLanes; ++l) {
    best[l] = -std::numeric_limits<float>::infinity();
    at[l] = -1;
  }
  const size_t body = x.size() / kLanes * kLanes;
  for (size_t i = 0; i < body; i += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) {
      const float v = x[i + l];
      const bool better = v > best[l];  // NaN compares false
      best[l] = better ? v : best[l];
      at[l] = better ? static_cast<int32_t>(i + l) : at[l];
    }
  }
  float b = -std::numeric_limits<float>::infinity();
  int32_t token = -1;
  for (size_t l = 0; l < kLanes; ++l) {
    if (at[l] >= 0 && (best[l] > b || (best[l] == b && at[l] < token))) {
      b = best[l];
      token = at[l];
    }
  }
  for (size_t i = body; i < x.size(); ++i) {
    if (x[i] > b) {
      b = x[i];
      token = static_cast<int32_t>(i);
    }
  }
  return token;
}

}  // namespace

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
    token = first_argmax(logits);
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
  return emit(token, logprob, std::move(top), event);
}

Expected<int32_t> TokenEmitter::step_chosen(int32_t token, RequestEvent& event) {
  KILN_CHECK(!finished());
  if (token < 0) return no_token_to_sample();
  sampler_.accept(token);
  return emit(token, std::nullopt, {}, event);
}

Expected<int32_t> TokenEmitter::emit(int32_t token, std::optional<float> logprob, std::vector<TokenLogprob> top,
                                     RequestEvent& event) {
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
