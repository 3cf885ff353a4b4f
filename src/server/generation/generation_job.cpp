#include "server/generation/generation_job.h"

namespace kiln::server {

GenerationJob::GenerationJob(GenerationPlan plan, std::unique_ptr<ResponseFormat> format,
                             std::vector<std::shared_ptr<llm::ResponseStream>> streams, ServerMetrics* metrics,
                             Clock::time_point start)
    : plan_(std::move(plan)), format_(std::move(format)), streams_(std::move(streams)), ended_(streams_.size(), false),
      metrics_(metrics), start_(start) {
  const size_t n = static_cast<size_t>(plan_.n);
  choices_.resize(streams_.size() * n);
  last_token_.resize(choices_.size());
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i].index = static_cast<int32_t>(i);
    choices_[i].request = i / n;
  }
  prompts_.resize(streams_.size());
}

GenerationJob::~GenerationJob() {
  for (size_t i = 0; i < streams_.size(); ++i) {
    streams_[i]->set_notifier(nullptr);
    if (!ended_[i]) streams_[i]->cancel();
  }
}

void GenerationJob::set_notifier(const std::function<void()>& notify) {
  for (auto& s : streams_) s->set_notifier(notify);
}

void GenerationJob::cancel() {
  for (auto& s : streams_) s->cancel();
}

GenerationJob::Output GenerationJob::poll(std::string& stream_data) {
  Output out;
  if (done_) {
    out.done = true;
    return out;
  }
  for (size_t s = 0; s < streams_.size() && !done_; ++s) {
    scratch_.clear();
    const bool ended = streams_[s]->pop_all(scratch_);
    for (auto& e : scratch_) {
      on_event(s, e, out, stream_data);
      if (done_) break;
    }
    if (ended) ended_[s] = true;
  }
  if (!done_) {
    bool all = true;
    for (bool e : ended_) all = all && e;
    if (all) {
      done_ = true;
      if (plan_.stream) {
        stream_data += format_->stream_end(plan_, usage_);
      } else {
        HttpResponse r;
        r.body = format_->complete(plan_, choices_, prompts_, usage_);
        out.response = std::move(r);
      }
    }
  }
  out.done = done_;
  return out;
}

void GenerationJob::on_event(size_t s, llm::RequestEvent& e, Output& out, std::string& stream_data) {
  switch (e.kind) {
    case llm::RequestEvent::Kind::kPromptLogprobs:
      prompts_[s].tokens = std::move(e.tokens);
      prompts_[s].received = true;
      return;
    case llm::RequestEvent::Kind::kDelta: {
      const size_t idx = s * static_cast<size_t>(plan_.n) + static_cast<size_t>(e.choice);
      if (e.choice < 0 || idx >= choices_.size()) return;
      ChoiceState& c = choices_[idx];
      if (!e.tokens.empty()) {
        // The first tokens of a choice start its clock; later ones are inter-token latency.
        if (last_token_[idx] != Clock::time_point{} && metrics_) {
          metrics_->record_inter_token(std::chrono::duration<double>(e.pushed - last_token_[idx]).count() /
                                       static_cast<double>(e.tokens.size()));
        }
        last_token_[idx] = e.pushed;
      }
      if (e.finish != llm::FinishReason::kNone) {
        c.finish = e.finish;
        c.stop_string = e.stop_string;
      }
      if (!plan_.stream) {
        c.text += e.text;
        c.tokens.insert(c.tokens.end(), e.tokens.begin(), e.tokens.end());
        return;
      }
      // A streamed choice's output goes out as it comes; it keeps none of it.
      const bool first = !c.started;
      if (e.text.empty() && e.tokens.empty() && e.finish == llm::FinishReason::kNone && !first) return;
      format_->append_stream_chunk(plan_, c, prompts_[s], e.text, e.tokens, first, stream_data);
      c.started = true;
      c.text_offset += e.text.size();
      return;
    }
    case llm::RequestEvent::Kind::kFinished:
      usage_.prompt_tokens += e.usage.prompt_tokens;
      usage_.completion_tokens += e.usage.completion_tokens;
      usage_.cached_prompt_tokens += e.usage.cached_prompt_tokens;
      if (metrics_) {
        metrics_->record_request(std::chrono::duration<double>(Clock::now() - start_).count(),
                                 e.first_token_s > 0 ? e.first_token_s : -1.0, e.queue_s);
      }
      return;
    case llm::RequestEvent::Kind::kError: {
      ended_[s] = true;
      done_ = true;
      error_ = ApiError{500, e.error.empty() ? "the request failed in the engine" : e.error, "server_error", std::nullopt,
                        std::nullopt};
      cancel();
      if (plan_.stream) {
        stream_data += format_->stream_error(*error_);
      } else {
        out.response = format_->error(*error_);
      }
      return;
    }
  }
}

void GenerationJob::describe(AccessLogEntry& entry) const {
  entry.completion_tokens = usage_.completion_tokens;
  if (usage_.prompt_tokens > 0) entry.prompt_tokens = usage_.prompt_tokens;
  if (error_) entry.error = error_->message;
}

}  // namespace kiln::server
