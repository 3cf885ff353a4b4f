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

  KILN_ASSIGN_OR_RETURN(std::vector<float> logits, runner.feed(prompt, false));
  Clock::time_point first_token;
  bool stopped_by_string = false;
  while (true) {
    KILN_ASSIGN_OR_RETURN(Sampler::Choice choice, sampler.sample(logits));
    if (stop.num_tokens() == 0) {
      first_token = Clock::now();
      result.time_to_first_token_s = std::chrono::duration<double>(first_token - start).count();
    }
    sampler.accept(choice.token);
    KILN_ASSIGN_OR_RETURN(std::string piece, detok.push(choice.token));
    StopMatcher::Step step = stop.append(choice.token, piece);
    if (!step.stop_token) result.tokens.push_back(choice.token);
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
    KILN_ASSIGN_OR_RETURN(logits, runner.feed({&choice.token, 1}, false));
  }
  if (!stopped_by_string) emit(detok.finish());
  const double decode_s = std::chrono::duration<double>(Clock::now() - first_token).count();
  if (result.tokens.size() > 1 && decode_s > 0) {
    result.decode_tokens_per_s = static_cast<double>(result.tokens.size() - 1) / decode_s;
  }
  return result;
}

}  // namespace kiln::llm
