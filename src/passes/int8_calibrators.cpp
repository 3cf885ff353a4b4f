#include "passes/int8_calibrators.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::passes {

std::optional<Calibrator> calibrator_from_name(const std::string& name) {
  if (name == "entropy") return Calibrator::kEntropy;
  if (name == "minmax") return Calibrator::kMinMax;
  if (name == "percentile") return Calibrator::kPercentile;
  return std::nullopt;
}

const char* calibrator_name(Calibrator c) {
  switch (c) {
    case Calibrator::kEntropy: return "entropy";
    case Calibrator::kMinMax: return "minmax";
    case Calibrator::kPercentile: return "percentile";
  }
  return "?";
}

void ActivationHistogram::observe_range(const float* x, int64_t n) {
  double hi = max_abs_, lo = min_;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) continue;
    hi = std::max(hi, static_cast<double>(std::fabs(x[i])));
    lo = std::min(lo, static_cast<double>(x[i]));
  }
  max_abs_ = hi;
  min_ = lo;
}

void ActivationHistogram::observe(const float* x, int64_t n) {
  if (max_abs_ <= 0.0) return;
  const double per_bin = kBins / max_abs_;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i]) || x[i] == 0.0f) continue;
    const double b = std::fabs(x[i]) * per_bin;
    ++bins_[static_cast<size_t>(std::min<double>(b, kBins - 1))];
  }
}

namespace {

// KL(P || Q) for the first `edge` bins of `h` with the tail folded into the last of them (P),
// against the same bins merged into `levels` groups, each group's count spread evenly over the
// group's bins that were not empty (Q).
double divergence(const std::vector<uint64_t>& h, int edge, int levels, uint64_t tail) {
  std::vector<double> p(h.begin(), h.begin() + edge), q(static_cast<size_t>(edge), 0.0);
  p[static_cast<size_t>(edge - 1)] += static_cast<double>(tail);
  for (int g = 0; g < levels; ++g) {
    const int lo = static_cast<int>(static_cast<int64_t>(g) * edge / levels);
    const int hi = static_cast<int>(static_cast<int64_t>(g + 1) * edge / levels);
    double total = 0.0;
    int used = 0;
    for (int b = lo; b < hi; ++b) {
      total += static_cast<double>(h[static_cast<size_t>(b)]);
      used += h[static_cast<size_t>(b)] != 0;
    }
    if (used == 0) continue;
    for (int b = lo; b < hi; ++b) {
      if (h[static_cast<size_t>(b)] != 0) q[static_cast<size_t>(b)] = total / used;
    }
  }
  double sp = 0.0, sq = 0.0;
  for (int b = 0; b < edge; ++b) {
    sp += p[static_cast<size_t>(b)];
    sq += q[static_cast<size_t>(b)];
  }
  if (sp <= 0.0) return 0.0;
  // A bin P has and Q lacks (the folded tail can make one) costs as if Q held a tiny share.
  const double floor_q = 1e-12;
  double kl = 0.0;
  for (int b = 0; b < edge; ++b) {
    const double pb = p[static_cast<size_t>(b)] / sp;
    if (pb <= 0.0) continue;
    const double qb = sq > 0.0 ? std::max(q[static_cast<size_t>(b)] / sq, floor_q) : floor_q;
    kl += pb * std::log(pb / qb);
  }
  return kl;
}

}  // namespace

double calibrate_threshold(const ActivationHistogram& h, Calibrator c, int levels, double percentile) {
  const double max_abs = h.max_abs();
  if (max_abs <= 0.0) return 1.0;  // never anything but zero: any scale represents it
  const std::vector<uint64_t>& bins = h.bins();
  const int n = ActivationHistogram::kBins;
  switch (c) {
    case Calibrator::kMinMax:
      return max_abs;
    case Calibrator::kPercentile: {
      uint64_t total = 0;
      for (uint64_t b : bins) total += b;
      const double want = std::clamp(percentile, 0.0, 100.0) / 100.0 * static_cast<double>(total);
      uint64_t seen = 0;
      for (int b = 0; b < n; ++b) {
        seen += bins[static_cast<size_t>(b)];
        if (static_cast<double>(seen) >= want) return (b + 1) * h.bin_width();
      }
      return max_abs;
    }
    case Calibrator::kEntropy: {
      const int first = std::min(n, levels + 1);
      uint64_t tail = 0;
      for (int b = first; b < n; ++b) tail += bins[static_cast<size_t>(b)];
      double best = std::numeric_limits<double>::infinity();
      int best_edge = n;
      for (int edge = first; edge <= n; ++edge) {
        const double kl = divergence(bins, edge, levels + 1, tail);
        if (kl < best) {
          best = kl;
          best_edge = edge;
        }
        if (edge < n) tail -= bins[static_cast<size_t>(edge)];
      }
      return best_edge * h.bin_width();
    }
  }
  return max_abs;
}

}  // namespace kiln::passes
