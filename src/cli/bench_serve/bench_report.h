// The figures of one serving benchmark run, computed from the per-request records load_client
// returns: request and token throughput over the run's duration, TTFT, TPOT, ITL and end-to-end
// latency summaries (milliseconds), goodput under the given objectives, and failures grouped by
// message. Throughput and latencies count successful requests only; a request whose output length
// differs from the max_tokens it asked for succeeded but is counted in output_len_mismatch, since
// with ignore_eos it means tokens were lost or invented.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "cli/bench_serve/latency_stats.h"
#include "cli/bench_serve/load_client.h"
#include "nlohmann/json.hpp"

namespace kiln::cli::bench_serve {

struct BenchReport {
  int64_t num_prompts = 0, completed = 0, failed = 0, output_len_mismatch = 0;
  int64_t peak_in_flight = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;  // per second
  std::optional<double> goodput;  // requests per second that met every objective, when any was given
  int64_t good_requests = 0;
  LatencySummary ttft_ms, tpot_ms, itl_ms, e2el_ms;
  std::map<std::string, int64_t> errors;  // failure message -> count
};

BenchReport make_report(const LoadResult& result, const Slo& slo);

// A human-readable table, one figure a line.
std::string format_report(const BenchReport& report);

// Every figure of the report, plus per-request arrays (prompt and output tokens, TTFT, E2EL,
// errors) under "requests".
nlohmann::json report_json(const BenchReport& report, const LoadResult& result, const Slo& slo);

}  // namespace kiln::cli::bench_serve
