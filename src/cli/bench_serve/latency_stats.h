// The statistics a serving benchmark reports: mean, median and percentiles of a latency sample,
// and goodput, the rate of requests that met every service-level objective given. Plain math on
// values the caller owns; nothing here knows about HTTP.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln::cli::bench_serve {

// The p-th percentile (0..100) of `sorted` (ascending, not empty) by linear interpolation between
// the closest ranks, as numpy.percentile does by default.
double percentile_of_sorted(const std::vector<double>& sorted, double p);

struct LatencySummary {
  int64_t count = 0;
  double mean = 0, stddev = 0, min = 0, max = 0, p50 = 0, p90 = 0, p99 = 0;  // all 0 when count == 0
};
LatencySummary summarize(std::vector<double> values);

// Objectives in milliseconds; an absent one is not checked.
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool empty() const { return !ttft_ms && !tpot_ms && !e2el_ms; }
};

// Parses `--goodput` items such as "ttft:500", "tpot:50", "e2el:2000" (milliseconds, > 0).
Expected<Slo> parse_slo(const std::vector<std::string>& items);

// A finished request's figures in milliseconds. tpot_ms is absent for one output token.
struct RequestLatency {
  double ttft_ms = 0;
  std::optional<double> tpot_ms;
  double e2el_ms = 0;
};

// Whether `r` meets every objective in `slo` (inclusive bounds). A request without a TPOT (one
// output token) meets any TPOT objective: it had no second token to be late with.
bool meets_slo(const RequestLatency& r, const Slo& slo);

}  // namespace kiln::cli::bench_serve
