#include "llm/serving/token_emitter.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <span>

namespace kiln::llm {
namespace {

// Merges the lanes' bests, then scans x[body:], whose ids are larger than any lane's.
int32_t merge_lanes_then_tail(const float* best, const int32_t* at, size_t lanes, std::span<const float> x,
                              size_t body) {
  float b = -std::numeric_limits<float>::infinity();
  int32_t token = -1;
  for (size_t l = 0; l < lanes; ++l) {
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

int32_t first_argmax_portable(std::span<const float> x) {
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
  return merge_lanes_then_tail(best, at, kLanes, x, body);
}

// 64 lanes in four vectors, so that four compare-and-blend chains run at once.
__attribute__((target("avx512f"))) int32_t first_argmax_avx512(std::span<const float> x) {
  constexpr size_t kVectors = 4, kLanes = 16 * kVectors;
  __m512 best[kVectors];
  __m512i at[kVectors], index[kVectors];
  for (size_t a = 0; a < kVectors; ++a) {
    best[a] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    at[a] = _mm512_set1_epi32(-1);
    index[a] = _mm512_add_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                _mm512_set1_epi32(static_cast<int>(16 * a)));
  }
  const __m512i step = _mm512_set1_epi32(static_cast<int>(kLanes));
  const size_t body = x.size() / kLanes * kLanes;
  for (size_t i = 0; i < body; i += kLanes) {
    for (size_t a = 0; a < kVectors; ++a) {
      const __m512 v = _mm512_loadu_ps(x.data() + i + 16 * a);
      const __mmask16 better = _mm512_cmp_ps_mask(v, best[a], _CMP_GT_OQ);  // NaN compares false
      best[a] = _mm512_mask_mov_ps(best[a], better, v);
      at[a] = _mm512_mask_mov_epi32(at[a], better, index[a]);
      index[a] = _mm512_add_epi32(index[a], step);
    }
  }
  alignas(64) float lane_best[kLanes];
  alignas(64) int32_t lane_at[kLanes];
  for (size_t a = 0; a < kVectors; ++a) {
    _mm512_store_ps(lane_best + 16 * a, best[a]);
    _mm512_store_si512(lane_at + 16 * a, at[a]);
  }
  return merge_lanes_then_tail(lane_best, lane_at, kLanes, x, body);
}

// The first index of the largest value, or -1 when none is above -inf; NaN never wins. Lanes
// keep their own best (the first in the lane) and are merged by value and then by lowest index,
// which gives that answer however the values are dealt to lanes: greedy decoding scans the whole
// vocabulary for every token. AVX-512 is taken when the CPU has it, whatever the CPU backend's
// ISA override says (llm/ does not depend on backends/): both paths give the same token.
int32_t first_argmax(std::span<const float> x) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  return avx512 ? first_argmax_avx512(x) : first_argmax_portable(x);
}

}  // namespace

TokenEmitter::TokenEmitter(const SamplingParams& params, std::span<const int32_t> prompt, const Tokenizer& tokenizer,
                           bool skip_special_tokens, std::span<const int32_t> eos_ids, int64_t max_seq_len,
                           std::shared_ptr<const structured::CompiledGrammar> grammar)
    : sampler_(params, prompt),
      stop_(params, eos_ids),
      decoder_(tokenizer, skip_special_tokens),
      prompt_len_(static_cast<int64_t>(prompt.size())),
      max_seq_len_(max_seq_len),
      plain_greedy_(params.temperature == 0.0f && params.logit_bias.empty() && params.repetition_penalty == 1.0f &&
                    params.presence_penalty == 0.0f && params.frequency_penalty == 0.0f && params.min_tokens == 0),
      want_logprobs_(params.logprobs >= 0),
      top_logprobs_(params.logprobs) {
  if (params.min_tokens > 0) {
    std::vector<int32_t> ending(params.stop_token_ids);
    if (!params.ignore_eos) ending.insert(ending.end(), eos_ids.begin(), eos_ids.end());
    sampler_.hold_back(std::move(ending));
  }
  if (grammar) {
    ending_ = params.stop_token_ids;
    if (!params.ignore_eos) ending_.insert(ending_.end(), eos_ids.begin(), eos_ids.end());
    mask_.assign(grammar->vocabulary().mask_words(), 0);
    matcher_.emplace(std::move(grammar));
    plain_greedy_ = false;
  }
}

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
  if (matcher_) fill_grammar_mask();
  if (token < 0) {  // sampling, or a row without a finite logit (the Sampler says so)
    auto sampled = sampler_.sample(logits, mask_);
    if (!sampled && matcher_) return no_token_fits(sampled.status().message());
    KILN_ASSIGN_OR_RETURN(Sampler::Choice choice, std::move(sampled));
    sampler_.accept(choice.token);
    token = choice.token;
    logprob = choice.logprob;
    top = std::move(choice.top);
  }
  return emit(token, logprob, std::move(top), event);
}

void TokenEmitter::fill_grammar_mask() {
  matcher_->fill_mask(mask_);
  if (matcher_->can_end()) {
    for (int32_t t : ending_) {
      if (t >= 0 && static_cast<size_t>(t) < mask_.size() * 64) mask_[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
    }
  }
}

Status TokenEmitter::no_token_fits(const std::string& why) {
  return invalid_argument("no token can continue the structured output here (the constraint allows none of the tokens "
                          "the model can produce)" + (why.empty() ? std::string() : ": " + why));
}

void TokenEmitter::add_device_row(runtime::SamplingBatch& batch) {
  sampler_.add_device_row(batch);
  if (!matcher_) return;
  fill_grammar_mask();
  batch.set_mask(batch.rows.back(), mask_);
}

Expected<int32_t> TokenEmitter::step_chosen(int32_t token, RequestEvent& event) {
  KILN_CHECK(!finished());
  if (token < 0 && matcher_) return no_token_fits({});
  if (token < 0) return no_token_to_sample();
  sampler_.accept(token);
  return emit(token, std::nullopt, {}, event);
}

Expected<int32_t> TokenEmitter::emit(int32_t token, std::optional<float> logprob, std::vector<TokenLogprob> top,
                                     RequestEvent& event) {
  if (matcher_ && std::find(ending_.begin(), ending_.end(), token) == ending_.end() && !matcher_->accept_token(token)) {
    return internal_error("the token " + std::to_string(token) + " was chosen against the structured-output constraint");
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
  if (event.finish == FinishReason::kNone && matcher_ && matcher_->is_complete()) {
    // The structured output is whole and nothing may follow: the choice ends as at its EOS.
    event.finish = FinishReason::kStop;
    event.text += stop_.held_text();
  } else if (event.finish == FinishReason::kNone && prompt_len_ + num_generated_ > max_seq_len_) {
    // The loop's limit ends it like max_tokens: the sampled token has no position to run at.
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
