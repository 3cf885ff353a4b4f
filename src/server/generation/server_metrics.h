// The server's metrics, by name: what /metrics shows. HTTP-side families are updated by the API
// layer as requests finish; engine-side values (running and waiting requests, KV cache usage,
// prefix-cache hits, preemptions, token counters) are copied from ServingLoop::stats() at each
// scrape; step time arrives through the engine's step observer. Owned by the server; every
// member is thread-safe (see metrics.h).
#pragma once

#include "llm/serving/serving_loop.h"
#include "server/metrics.h"

namespace kiln::server {

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  // One finished HTTP request: `endpoint` is the route's name ("completions", "chat", ... or
  // "other" for unknown paths), `status` the HTTP status sent.
  void record_http(std::string_view endpoint, int status);
  // Latencies of one generation request, in seconds; ttft < 0 when no token was produced.
  void record_request(double e2e, double ttft, double queue);
  void record_inter_token(double seconds);
  void record_step(double seconds);

  // Copies the engine's counters and gauges, then renders every family.
  std::string render(const llm::ServingStats& stats);

  MetricsRegistry& registry() { return registry_; }

 private:
  std::string model_;
  MetricsRegistry registry_;
  MetricFamily& http_requests_;
  MetricFamily& running_;
  MetricFamily& waiting_;
  MetricFamily& kv_usage_;
  MetricFamily& kv_blocks_used_;
  MetricFamily& kv_blocks_total_;
  MetricFamily& prefix_queries_;
  MetricFamily& prefix_hits_;
  MetricFamily& prefix_hit_rate_;
  MetricFamily& preemptions_;
  MetricFamily& prompt_tokens_;
  MetricFamily& generation_tokens_;
  MetricFamily& steps_;
  MetricFamily& step_seconds_;
  MetricFamily& loop_seconds_;
  MetricFamily& requests_finished_;
  MetricFamily& requests_failed_;
  MetricFamily& requests_cancelled_;
  MetricFamily& ttft_;
  MetricFamily& itl_;
  MetricFamily& e2e_;
  MetricFamily& queue_;
  MetricFamily& step_;
};

}  // namespace kiln::server
