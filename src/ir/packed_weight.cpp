#include "ir/packed_weight.h"

namespace kiln::ir {

void pack_weight_rows(const float* wt, int64_t n, int64_t k, float* dst) {
  for (int64_t p = 0; p < packed_panels(n); ++p) {
    float* out = dst + p * k * kPackedPanel;
    for (int64_t j = 0; j < kPackedPanel; ++j) {
      const int64_t col = p * kPackedPanel + j;
      for (int64_t c = 0; c < k; ++c) out[c * kPackedPanel + j] = col < n ? wt[col * k + c] : 0.0f;
    }
  }
}

}  // namespace kiln::ir
