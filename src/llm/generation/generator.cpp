#include "llm/generation/generator.h"

#include <chrono>

#include "llm/tokenizers/stream_decoder.h"
#include "runtime/sequence_runner.h"

namespace kiln::llm {

Expected<GenerationResult> Generator::generate(std::span<const int32_t> prompt, const SamplingParams& params,
                                               std::span<const int32_t> eos_ids,
                                               const std::function<void(std::string_view)>& on_text) {
  if (prompt.empty()) return invalid_argument("the prompt has no tokens");
  KILN_RETURN_IF_ERROR(validate(params, vocab_));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  runtime::SequenceRunner runner(executor_, cache_, vocab_);
  Sampler sampler(params, prompt);
  StopMatcher stop(params, eos_ids);
  StreamDecoder detok(tokenizer_);
  GenerationResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    if (on_text) on_text(text);
  };

  // The next token after `tokens`: chosen by the backend on its device when it can, else
  // sampled here from the logits.
  const bool on_device = executor_.samples_on_device() && sampler.device_capable();
  runtime::SamplingBatch sampling;
  auto next_after = [&](std::span<const int32_t> tokens) -> Expected<int32_t> {
    if (on_device) {
      sampling.clear();
      sampler.add_device_row(sampling);
      KILN_ASSIGN_OR_RETURN(const int32_t token, runner.feed_sampled(tokens, sampling));
      if (token < 0) return no_token_to_sample();
      return token;
    }
    KILN_ASSIGN_OR_RETURN(std::vector<float> logits, runner.feed(tokens, false));
    KILN_ASSIGN_OR_RETURN(Sampler::Choice choice, sampler.sample(logits));
    return choice.token;
  };

  KILN_ASSIGN_OR_RETURN(int32_t token, next_after(prompt));
  Clock::time_point first_token;
  bool stopped_by_string = false;
  while (true) {
    if (stop.num_tokens() == 0) {
      first_token = Clock::now();
      result.time_to_first_token_s = std::chrono::duration<double>(first_token - start).count();
    }
    sampler.accept(token);
    KILN_ASSIGN_OR_RETURN(std::string piece, detok.push(token));
    StopMatcher::Step step = stop.append(token, piece);
    if (!step.stop_token) result.tokens.push_back(token);
    emit(step.text);
    if (step.finish != FinishReason::kNone) {
      result.finish = step.finish;
      stopped_by_string = step.stop_string.has_value();
      break;
    }
    if (runner.length() + 1 > executor_.max_seq_len()) {  // the engine's limit ends it like max_tokens
      result.finish = FinishReason::kLength;
      emit(std::string(stop.held_text()));
      break;
    }
    KILN_ASSIGN_OR_RETURN(token, next_after({&token, 1}));
  }
  if (!stopped_by_string) emit(detok.finish());
  const double decode_s = std::chrono::duration<double>(Clock::now() - first_token).count();
  if (result.tokens.size() > 1 && decode_s > 0) {
    result.decode_tokens_per_s = static_cast<double>(result.tokens.size() - 1) / decode_s;
  }
  return result;
}

}  // namespace kiln::llm
