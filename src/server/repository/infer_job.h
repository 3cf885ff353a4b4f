// InferJob: one KServe infer request waiting for its batch. It holds the model it was admitted
// to (so an unload cannot pull the engine from under it) and the batcher's ticket; once the
// ticket completes, poll() builds the response (each requested output as JSON data or binary)
// and records the request's latencies in the repository metrics.
// Threads: as Job (job.h).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "server/job.h"
#include "server/repository/dynamic_batcher.h"
#include "server/repository/infer_protocol.h"
#include "server/repository/model_repository.h"
#include "server/repository/repository_metrics.h"

namespace kiln::server {

class InferJob : public Job {
 public:
  using Clock = std::chrono::steady_clock;
  InferJob(std::shared_ptr<TensorModel> model, InferRequest request, std::shared_ptr<InferTicket> ticket,
           RepositoryMetrics& metrics, Clock::time_point start);
  ~InferJob() override;

  void set_notifier(const std::function<void()>& notify) override { ticket_->set_notifier(notify); }
  Output poll(std::string& stream_data) override;
  void cancel() override { ticket_->cancel(); }
  bool streaming() const override { return false; }
  void describe(AccessLogEntry& entry) const override;

 private:
  std::shared_ptr<TensorModel> model_;
  InferRequest request_;  // its inputs already handed to the batcher
  std::shared_ptr<InferTicket> ticket_;
  RepositoryMetrics& metrics_;
  Clock::time_point start_;
  bool answered_ = false;
  std::optional<std::string> error_;
};

}  // namespace kiln::server
