// ApiService: everything the server answers, apart from the transport. Given one HTTP request it
// routes it, checks the API key, parses and validates the body through the protocol of its
// endpoint, and either answers at once (models, tokenize, health, metrics, the playground's
// files, every refusal) or submits the requests to the serving loop and hands back a
// GenerationJob that the transport drives until its streams end. When an exchange ends, finish() counts it in /metrics and writes
// its access log line.
//
// Owns nothing but its readiness flag: the model, the serving loop, the metrics and the config
// outlive it. handle() and finish() are called from every network thread at once; they share only
// thread-safe state (the loop's submit, metrics, the readiness flag).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "llm/serving/serving_loop.h"
#include "server/access_log.h"
#include "server/generation/generation_job.h"
#include "server/http_message.h"
#include "server/router.h"
#include "server/generation/served_model.h"
#include "server/service.h"
#include "server/server_config.h"
#include "server/generation/server_metrics.h"

namespace kiln::server {

class ApiService : public Service {
 public:
  ApiService(const ServedModel& model, llm::ServingLoop& loop, ServerMetrics& metrics, const ServerConfig& config)
      : model_(model), loop_(loop), metrics_(metrics), config_(config) {}

  Reply handle(const HttpRequest& request, const std::string& request_id, std::string remote) override;
  // Records a finished exchange (status sent, duration) in metrics and the access log.
  void finish(AccessLogEntry& entry, const Job* job) override;

  // Readiness: false while starting and once shutdown begins (then generation requests get 503).
  void set_ready(bool ready) { ready_.store(ready); }
  bool ready() const { return ready_.load(); }

 private:
  Reply submit(GenerationPlan plan, std::unique_ptr<ResponseFormat> format, Reply reply);

  const ServedModel& model_;
  llm::ServingLoop& loop_;
  ServerMetrics& metrics_;
  const ServerConfig& config_;
  std::atomic<bool> ready_{false};
};

}  // namespace kiln::server
