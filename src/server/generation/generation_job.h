// GenerationJob: one generation endpoint call in flight. It owns the GenerationPlan, the
// ResponseFormat of its API and the ResponseStreams of its engine requests (one per prompt),
// gathers their events into choices, and turns them into what the connection sends: SSE text as
// it arrives when streaming, or the whole response when every stream has ended. It records
// latencies (time to first token, inter-token, end-to-end, queue) in the server's metrics.
//
// Threads: set_notifier() registers a callback that the loop thread calls when events arrive;
// poll() and everything else run on the connection's event loop only; cancel() may run anywhere.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llm/serving/request_queue.h"
#include "server/generation/generation_plan.h"
#include "server/http_message.h"
#include "server/job.h"
#include "server/generation/response_format.h"
#include "server/generation/server_metrics.h"

namespace kiln::server {

class GenerationJob : public Job {
 public:
  using Clock = std::chrono::steady_clock;
  GenerationJob(GenerationPlan plan, std::unique_ptr<ResponseFormat> format,
                std::vector<std::shared_ptr<llm::ResponseStream>> streams, ServerMetrics* metrics, Clock::time_point start);
  ~GenerationJob();  // cancels streams that have not ended and drops the notifiers

  // Output::done: every stream has ended (or one failed).
  void set_notifier(const std::function<void()>& notify) override;
  Output poll(std::string& stream_data) override;
  void cancel() override;
  bool streaming() const override { return plan_.stream; }
  void describe(AccessLogEntry& entry) const override;

  const GenerationPlan& plan() const { return plan_; }
  const llm::RequestUsage& usage() const { return usage_; }
  const std::optional<ApiError>& error() const { return error_; }

 private:
  void on_event(size_t stream, llm::RequestEvent& e, Output& out, std::string& stream_data);

  GenerationPlan plan_;
  std::unique_ptr<ResponseFormat> format_;
  std::vector<std::shared_ptr<llm::ResponseStream>> streams_;
  std::vector<bool> ended_;
  ServerMetrics* metrics_;
  Clock::time_point start_;
  std::vector<ChoiceState> choices_;
  std::vector<PromptState> prompts_;
  std::vector<Clock::time_point> last_token_;  // per choice: when its last tokens came (unset before the first)
  llm::RequestUsage usage_;
  std::optional<ApiError> error_;
  bool done_ = false;
  std::vector<llm::RequestEvent> scratch_;
};

}  // namespace kiln::server
