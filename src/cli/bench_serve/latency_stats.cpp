#include "cli/bench_serve/latency_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace kiln::cli::bench_serve {

double percentile_of_sorted(const std::vector<double>& sorted, double p) {
  KILN_CHECK(!sorted.empty());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

LatencySummary summarize(std::vector<double> values) {
  LatencySummary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = static_cast<int64_t>(values.size());
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double sq = 0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.stddev = std::sqrt(sq / n);
  s.min = values.front();
  s.max = values.back();
  s.p50 = percentile_of_sorted(values, 50);
  s.p90 = percentile_of_sorted(values, 90);
  s.p99 = percentile_of_sorted(values, 99);
  return s;
}

Expected<Slo> parse_slo(const std::vector<std::string>& items) {
  Slo slo;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    std::optional<double>* target = name == "ttft" ? &slo.ttft_ms
                                    : name == "tpot" ? &slo.tpot_ms
                                    : name == "e2el" ? &slo.e2el_ms
                                                     : nullptr;
    if (colon == std::string::npos || target == nullptr) {
      return invalid_argument("--goodput: '" + item + "' is not ttft:MS, tpot:MS or e2el:MS");
    }
    const std::string number = item.substr(colon + 1);
    double ms = 0;
    try {
      size_t used = 0;
      ms = std::stod(number, &used);
      if (used != number.size()) throw std::invalid_argument(number);
    } catch (const std::exception&) {
      return invalid_argument("--goodput: '" + number + "' in '" + item + "' is not a number of milliseconds");
    }
    if (!(ms > 0) || std::isinf(ms)) return invalid_argument("--goodput: " + name + " must be > 0 milliseconds");
    if (target->has_value()) return invalid_argument("--goodput: " + name + " given twice");
    *target = ms;
  }
  return slo;
}

bool meets_slo(const RequestLatency& r, const Slo& slo) {
  if (slo.ttft_ms && r.ttft_ms > *slo.ttft_ms) return false;
  if (slo.tpot_ms && r.tpot_ms && *r.tpot_ms > *slo.tpot_ms) return false;
  if (slo.e2el_ms && r.e2el_ms > *slo.e2el_ms) return false;
  return true;
}

}  // namespace kiln::cli::bench_serve
