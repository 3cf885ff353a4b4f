// Scalar kernels: the portable fallback for every format, and the baseline the SIMD kernels are
// measured against. Each weight row is dequantised once (ir::weight_dequantize_row_at) into
// per-thread scratch and dotted with every activation row in float.
#include <algorithm>

#include "backends/cpu/matmul/matmul_kernels.h"
#include "backends/cpu/matmul/matmul_tiling.h"

namespace kiln::cpu {
namespace {

using ir::WeightFormat;

// Four partial sums so the compiler can keep several adds in flight.
float dot(const float* a, const float* b, int64_t k) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int64_t i = 0;
  for (; i + 4 <= k; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < k; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

// x: [m, k]; w: [n, k] in kFormat; y: [m, n].
template <WeightFormat kFormat>
void matmul_scalar(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n, const float* bias,
                   float* y) {
  detail::Blocking b;
  b.mb = m;
  b.nb = std::max<int64_t>(1, std::min<int64_t>(16, n));  // a multiple of a panel's 8 rows
  b.kc = k;
  detail::matmul_parallel(m, n, b, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    auto* wrow = static_cast<float*>(detail::matmul_scratch(static_cast<size_t>(k) * sizeof(float),
                                                            detail::kScratchRow));
    for (int64_t j = j0; j < j1; ++j) {
      ir::weight_dequantize_row_at(kFormat, w, n, k, j, wrow);
      const float b0 = bias != nullptr ? bias[j] : 0.0f;
      for (int64_t i = i0; i < i1; ++i) y[i * n + j] = b0 + dot(x + i * k, wrow, k);
    }
  });
}

constexpr MatmulKernel kKernels[] = {
    {"f32.scalar", WeightFormat::kF32, Isa::kScalar, matmul_scalar<WeightFormat::kF32>},
    {"f16.scalar", WeightFormat::kF16, Isa::kScalar, matmul_scalar<WeightFormat::kF16>},
    {"bf16.scalar", WeightFormat::kBF16, Isa::kScalar, matmul_scalar<WeightFormat::kBF16>},
    {"i8c.scalar", WeightFormat::kI8Channel, Isa::kScalar, matmul_scalar<WeightFormat::kI8Channel>},
    {"i8g32.scalar", WeightFormat::kI8Group32, Isa::kScalar, matmul_scalar<WeightFormat::kI8Group32>},
    {"i8g128.scalar", WeightFormat::kI8Group128, Isa::kScalar, matmul_scalar<WeightFormat::kI8Group128>},
    {"i4g32.scalar", WeightFormat::kI4Group32, Isa::kScalar, matmul_scalar<WeightFormat::kI4Group32>},
    {"i4g128.scalar", WeightFormat::kI4Group128, Isa::kScalar, matmul_scalar<WeightFormat::kI4Group128>},
    {"f16p8.scalar", WeightFormat::kF16Panel8, Isa::kScalar, matmul_scalar<WeightFormat::kF16Panel8>},
    {"bf16p8.scalar", WeightFormat::kBF16Panel8, Isa::kScalar, matmul_scalar<WeightFormat::kBF16Panel8>},
    {"i8cp8.scalar", WeightFormat::kI8ChannelPanel8, Isa::kScalar, matmul_scalar<WeightFormat::kI8ChannelPanel8>},
    {"i4g32p8.scalar", WeightFormat::kI4Group32Panel8, Isa::kScalar, matmul_scalar<WeightFormat::kI4Group32Panel8>},
    {"f8.scalar", WeightFormat::kF8E4M3, Isa::kScalar, matmul_scalar<WeightFormat::kF8E4M3>},
};

}  // namespace

std::span<const MatmulKernel> detail::matmul_kernels_scalar() { return kKernels; }

}  // namespace kiln::cpu
