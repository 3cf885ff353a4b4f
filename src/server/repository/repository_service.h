// RepositoryService: what `kiln serve --model-repository DIR` answers, apart from the transport.
// KServe v2 over the models of a ModelRepository: health and server metadata, model metadata,
// config and readiness, POST /v2/models/{m}[/versions/{v}]/infer (admitted to the model's
// dynamic batcher and answered through an InferJob), Triton's repository extension (index, load,
// unload; a load compiles on a thread of its own and answers when the model is ready or has
// failed), and /metrics. LLM endpoints (OpenAI, generate) are refused with a pointer to
// `kiln serve ENGINE`.
//
// Owns the threads of the loads it started (joined in the destructor); the repository, the
// metrics and the config outlive it. handle() and finish() run on every network thread at once.
#pragma once

#include <atomic>
#include <future>
#include <mutex>
#include <vector>

#include "server/repository/model_repository.h"
#include "server/repository/repository_metrics.h"
#include "server/server_config.h"
#include "server/service.h"

namespace kiln::server {

class RepositoryService : public Service {
 public:
  RepositoryService(ModelRepository& repository, RepositoryMetrics& metrics, const ServerConfig& config)
      : repository_(repository), metrics_(metrics), config_(config) {}
  ~RepositoryService() override;

  Reply handle(const HttpRequest& request, const std::string& request_id, std::string remote) override;
  void finish(AccessLogEntry& entry, const Job* job) override;

  void set_ready(bool ready) { ready_.store(ready); }
  bool ready() const { return ready_.load(); }

 private:
  Reply infer(const HttpRequest& request, const std::string& model, const std::string& version, Reply reply);

  ModelRepository& repository_;
  RepositoryMetrics& metrics_;
  const ServerConfig& config_;
  std::atomic<bool> ready_{false};
  std::mutex loads_mu_;
  std::vector<std::future<void>> loads_;
};

}  // namespace kiln::server
