#include "server/generation/server_metrics.h"

namespace kiln::server {
namespace {

// Latency buckets in seconds: from a fast decode step on a small model to a long generation.
const std::vector<double> kFastBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0};
const std::vector<double> kSlowBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0};

}  // namespace

ServerMetrics::ServerMetrics(std::string model_name)
    : model_(std::move(model_name)),
      http_requests_(registry_.counter("kiln_http_requests_total", "HTTP requests answered, by endpoint and status.",
                                       {"endpoint", "status"})),
      running_(registry_.gauge("kiln_requests_running", "Sequences holding KV cache blocks.", {"model"})),
      waiting_(registry_.gauge("kiln_requests_waiting", "Requests queued or preempted, not yet running.", {"model"})),
      kv_usage_(registry_.gauge("kiln_kv_cache_usage_ratio", "Fraction of KV cache blocks in use (0 to 1).", {"model"})),
      kv_blocks_used_(registry_.gauge("kiln_kv_cache_blocks_used", "KV cache blocks referenced by running sequences.",
                                      {"model"})),
      kv_blocks_total_(registry_.gauge("kiln_kv_cache_blocks_total", "KV cache blocks in the pool.", {"model"})),
      prefix_queries_(registry_.counter("kiln_prefix_cache_queries_total",
                                        "Prompt tokens looked up in the prefix cache.", {"model"})),
      prefix_hits_(registry_.counter("kiln_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
                                     {"model"})),
      prefix_hit_rate_(registry_.gauge("kiln_prefix_cache_hit_rate",
                                       "Prefix-cache hits over queries since start (0 when none).", {"model"})),
      preemptions_(registry_.counter("kiln_preemptions_total", "Sequences preempted for lack of KV blocks.", {"model"})),
      prompt_tokens_(registry_.counter("kiln_prompt_tokens_total",
                                       "Prompt tokens computed (prefix-cache hits excluded).", {"model"})),
      generation_tokens_(registry_.counter("kiln_generation_tokens_total", "Tokens generated.", {"model"})),
      steps_(registry_.counter("kiln_engine_steps_total", "Model steps run.", {"model"})),
      step_seconds_(registry_.counter("kiln_engine_step_seconds_total", "Time spent in model steps.", {"model"})),
      loop_seconds_(registry_.counter("kiln_engine_overhead_seconds_total",
                                      "Serving-loop time outside model steps (scheduling, sampling, detokenising).",
                                      {"model"})),
      requests_finished_(registry_.counter("kiln_requests_finished_total", "Engine requests that finished.", {"model"})),
      requests_failed_(registry_.counter("kiln_requests_failed_total",
                                         "Engine requests that ended in an error (not counting cancelled ones).", {"model"})),
      requests_cancelled_(registry_.counter("kiln_requests_cancelled_total",
                                            "Engine requests cancelled by their client (it went away).", {"model"})),
      ttft_(registry_.histogram("kiln_time_to_first_token_seconds", "Time from arrival to the first token.",
                                kSlowBuckets, {"model"})),
      itl_(registry_.histogram("kiln_inter_token_latency_seconds", "Time between successive tokens of a stream.",
                               kFastBuckets, {"model"})),
      e2e_(registry_.histogram("kiln_e2e_request_latency_seconds", "Time from arrival to the last token.",
                               kSlowBuckets, {"model"})),
      queue_(registry_.histogram("kiln_request_queue_time_seconds", "Time a request waited before its first step.",
                                 kSlowBuckets, {"model"})),
      step_(registry_.histogram("kiln_step_duration_seconds", "Duration of one engine step.", kFastBuckets,
                                {"model"})) {
  // Show every engine series from the start, so that queries find them before traffic.
  const LabelValues m = {model_};
  for (MetricFamily* f : {&ttft_, &itl_, &e2e_, &queue_, &step_}) f->touch(m);
}

void ServerMetrics::record_http(std::string_view endpoint, int status) {
  http_requests_.add({std::string(endpoint), std::to_string(status)}, 1);
}

void ServerMetrics::record_request(double e2e, double ttft, double queue) {
  e2e_.observe({model_}, e2e);
  if (ttft >= 0) ttft_.observe({model_}, ttft);
  queue_.observe({model_}, queue);
}

void ServerMetrics::record_inter_token(double seconds) { itl_.observe({model_}, seconds); }
void ServerMetrics::record_step(double seconds) { step_.observe({model_}, seconds); }

std::string ServerMetrics::render(const llm::ServingStats& s) {
  const LabelValues m = {model_};
  running_.set(m, static_cast<double>(s.running));
  waiting_.set(m, static_cast<double>(s.waiting));
  kv_blocks_used_.set(m, static_cast<double>(s.kv_blocks_used));
  kv_blocks_total_.set(m, static_cast<double>(s.kv_blocks_total));
  kv_usage_.set(m, s.kv_blocks_total > 0 ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total) : 0.0);
  prefix_queries_.set(m, static_cast<double>(s.prefix_queries));
  prefix_hits_.set(m, static_cast<double>(s.prefix_hits));
  prefix_hit_rate_.set(m, s.prefix_queries > 0 ? static_cast<double>(s.prefix_hits) / static_cast<double>(s.prefix_queries) : 0.0);
  preemptions_.set(m, static_cast<double>(s.preemptions));
  prompt_tokens_.set(m, static_cast<double>(s.prompt_tokens));
  generation_tokens_.set(m, static_cast<double>(s.generated_tokens));
  steps_.set(m, static_cast<double>(s.steps));
  step_seconds_.set(m, s.step_seconds);
  loop_seconds_.set(m, s.loop_seconds);
  requests_finished_.set(m, static_cast<double>(s.requests_finished));
  requests_failed_.set(m, static_cast<double>(s.requests_failed));
  requests_cancelled_.set(m, static_cast<double>(s.requests_cancelled));
  return registry_.render();
}

}  // namespace kiln::server
