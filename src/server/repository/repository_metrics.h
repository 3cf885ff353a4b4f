// The metrics of a model-repository server, per model: what /metrics shows. Requests by
// endpoint and status (as for LLMs), and for each general model its inference requests by
// outcome, the batches it ran and their rows (so that requests / executions is the dynamic
// batcher's gain), queue, compute and end-to-end time, and whether it is ready.
// Owned by the server; every member is thread-safe (see metrics.h).
#pragma once

#include <string>
#include <string_view>

#include "server/metrics.h"

namespace kiln::server {

class RepositoryMetrics {
 public:
  RepositoryMetrics();

  void record_http(std::string_view endpoint, int status);
  // One inference request that reached a model: ok or not, its queue and end-to-end time.
  void record_request(const std::string& model, bool ok, double queue_seconds, double e2e_seconds);
  // One batch a model instance ran: its requests, rows and run time.
  void record_batch(const std::string& model, int64_t requests, int64_t rows, double seconds);
  void set_ready(const std::string& model, bool ready);
  // One finished gRPC call: its method and status code name ("OK", "INVALID_ARGUMENT", ...).
  void record_grpc(std::string_view method, std::string_view code);

  std::string render() const { return registry_.render(); }
  MetricsRegistry& registry() { return registry_; }

 private:
  MetricsRegistry registry_;
  MetricFamily& http_requests_;
  MetricFamily& grpc_requests_;
  MetricFamily& requests_;
  MetricFamily& inferences_;
  MetricFamily& executions_;
  MetricFamily& batch_rows_;
  MetricFamily& queue_;
  MetricFamily& compute_;
  MetricFamily& e2e_;
  MetricFamily& ready_;
};

}  // namespace kiln::server
