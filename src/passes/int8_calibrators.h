// How int8 calibration turns what an activation tensor held over the calibration inputs into
// the threshold T of its quantisation, x -> clamp(round(x * levels / T), ...): values beyond T
// saturate, values below it keep T / levels resolution.
//   minmax      T = the largest |x| seen: nothing saturates.
//   percentile  T = the given percentile of |x| (99.99 by default): the rare largest values
//               saturate so that the rest keep more resolution.
//   entropy     T minimises the Kullback-Leibler divergence between the histogram of |x| and
//               that histogram quantised to `levels` steps over [0, T] (the method TensorRT's
//               entropy calibrator describes): the threshold that loses least information.
// The statistics are a histogram of |x| over [0, max |x|] in kBins bins, filled after the maximum
// is known (calibration runs the inputs twice). Exact zeros (a ReLU's, padding's) are left out:
// every scale represents them exactly, and as a spike in the first bin they would pull the
// entropy calibrator's threshold far down.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln::passes {

enum class Calibrator { kEntropy, kMinMax, kPercentile };

std::optional<Calibrator> calibrator_from_name(const std::string& name);  // "entropy", "minmax", "percentile"
const char* calibrator_name(Calibrator c);

class ActivationHistogram {
 public:
  static constexpr int kBins = 2048;

  // First pass: the range.
  void observe_range(const float* x, int64_t n);
  // Second pass: the histogram of the nonzero |x| over [0, max_abs()]; values outside count in
  // the last bin.
  void observe(const float* x, int64_t n);

  double max_abs() const { return max_abs_; }
  bool non_negative() const { return min_ >= 0.0; }
  const std::vector<uint64_t>& bins() const { return bins_; }
  double bin_width() const { return max_abs_ / kBins; }

 private:
  double max_abs_ = 0.0, min_ = 0.0;
  std::vector<uint64_t> bins_ = std::vector<uint64_t>(kBins, 0);
};

// The threshold T for a tensor quantised to `levels` steps on each side of zero (127 for a
// signed tensor, 255 for one that is never negative). percentile is in (0, 100].
double calibrate_threshold(const ActivationHistogram& h, Calibrator c, int levels, double percentile = 99.99);

}  // namespace kiln::passes
