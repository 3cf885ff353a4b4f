#include "server/repository/infer_job.h"

#include "server/api_error.h"

namespace kiln::server {

InferJob::InferJob(std::shared_ptr<TensorModel> model, InferRequest request, std::shared_ptr<InferTicket> ticket,
                   RepositoryMetrics& metrics, Clock::time_point start)
    : model_(std::move(model)), request_(std::move(request)), ticket_(std::move(ticket)), metrics_(metrics), start_(start) {}

InferJob::~InferJob() {
  ticket_->cancel();
  ticket_->set_notifier(nullptr);
}

Job::Output InferJob::poll(std::string& /*stream_data*/) {
  Output out;
  if (answered_ || !ticket_->done()) return out;
  answered_ = true;
  out.done = true;
  const double e2e = std::chrono::duration<double>(Clock::now() - start_).count();
  metrics_.record_request(model_->name, ticket_->status.is_ok(), ticket_->queue_seconds, e2e);
  if (!ticket_->status) {
    error_ = ticket_->status.message();
    const int status = ticket_->status.code() == StatusCode::kInvalidArgument ? 400 : 500;
    out.response = kserve_error_response({status, *error_, "server_error", std::nullopt, std::nullopt});
    return out;
  }
  out.response = infer_response(request_, ticket_->outputs, model_->name, model_->version);
  return out;
}

void InferJob::describe(AccessLogEntry& entry) const {
  if (error_) entry.error = *error_;
}

}  // namespace kiln::server
