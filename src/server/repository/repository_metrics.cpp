#include "server/repository/repository_metrics.h"

namespace kiln::server {
namespace {

const std::vector<double> kLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
const std::vector<double> kRowBuckets = {1, 2, 4, 8, 16, 32, 64, 128};

}  // namespace

RepositoryMetrics::RepositoryMetrics()
    : http_requests_(registry_.counter("kiln_http_requests_total", "HTTP requests answered, by endpoint and status.",
                                       {"endpoint", "status"})),
      grpc_requests_(registry_.counter("kiln_grpc_requests_total", "gRPC calls answered, by method and status code.",
                                       {"method", "code"})),
      requests_(registry_.counter("kiln_infer_requests_total", "Inference requests that reached a model, by outcome.",
                                  {"model", "outcome"})),
      inferences_(registry_.counter("kiln_infer_inferences_total",
                                    "Inferences run: the rows of every batch (a request of batch 4 counts 4).", {"model"})),
      executions_(registry_.counter("kiln_infer_executions_total",
                                    "Model runs: one per batch, however many requests it joined.", {"model"})),
      batch_rows_(registry_.histogram("kiln_infer_batch_rows", "Rows of each batch a model ran.", kRowBuckets, {"model"})),
      queue_(registry_.histogram("kiln_infer_queue_seconds", "Time a request waited for its batch to start.",
                                 kLatencyBuckets, {"model"})),
      compute_(registry_.histogram("kiln_infer_compute_seconds", "Run time of one batch.", kLatencyBuckets, {"model"})),
      e2e_(registry_.histogram("kiln_infer_request_seconds", "Time from a request's arrival to its answer.",
                               kLatencyBuckets, {"model"})),
      ready_(registry_.gauge("kiln_model_ready", "1 when the model is loaded and serving, else 0.", {"model"})) {}

void RepositoryMetrics::record_http(std::string_view endpoint, int status) {
  http_requests_.add({std::string(endpoint), std::to_string(status)}, 1);
}

void RepositoryMetrics::record_grpc(std::string_view method, std::string_view code) {
  grpc_requests_.add({std::string(method), std::string(code)}, 1);
}

void RepositoryMetrics::record_request(const std::string& model, bool ok, double queue_seconds, double e2e_seconds) {
  requests_.add({model, ok ? "success" : "failure"}, 1);
  if (ok) queue_.observe({model}, queue_seconds);
  e2e_.observe({model}, e2e_seconds);
}

void RepositoryMetrics::record_batch(const std::string& model, int64_t requests, int64_t rows, double seconds) {
  (void)requests;
  inferences_.add({model}, static_cast<double>(rows));
  executions_.add({model}, 1);
  batch_rows_.observe({model}, static_cast<double>(rows));
  compute_.observe({model}, seconds);
}

void RepositoryMetrics::set_ready(const std::string& model, bool ready) {
  ready_.set({model}, ready ? 1 : 0);
  for (MetricFamily* f : {&inferences_, &executions_}) f->touch({model});
  for (const char* outcome : {"success", "failure"}) requests_.touch({model, outcome});
}

}  // namespace kiln::server
