#include "backends/cpu/matmul/gemm_packed.h"

#include <omp.h>

#include <algorithm>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/matmul/matmul_kernels.h"
#include "backends/cpu/matmul/matmul_tiling.h"
#include "backends/cpu/tensor/tensor_epilogue.h"
#include "ir/packed_weight.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kTileRows = 12;  // a multiple of both ISAs' tile rows (12, 6)
constexpr int64_t kChunk = 256;    // column positions of k a pass over the row tiles
constexpr int64_t kBlockRows = 192;  // rows of a task at most: their chunk of x stays in L2
constexpr int64_t kGroupPanels = 8;  // panels of a task at most

// The weights a task reads after panel p0's chunk [c0, c0 + kc) of its panels [j0, j1): the next
// panel's chunk, or after the last panel the first one's next chunk (none after the last chunk).
// Its first pass would otherwise wait on memory: a chunk is 32 KiB, eight 4 KiB pages at which
// the hardware prefetchers start again.
detail::PrefetchLines next_chunk(const float* packed, int64_t k, int64_t j0, int64_t j1, int64_t p0, int64_t c0,
                                 int64_t kc) {
  constexpr int64_t kLine = detail::PrefetchLines::kLineFloats;
  if (p0 + ir::kPackedPanel < j1) {
    return {packed + (p0 / ir::kPackedPanel + 1) * k * ir::kPackedPanel + c0 * ir::kPackedPanel,
            kc * ir::kPackedPanel / kLine};
  }
  if (c0 + kc < k) {
    return {packed + (j0 / ir::kPackedPanel) * k * ir::kPackedPanel + (c0 + kc) * ir::kPackedPanel,
            std::min(kChunk, k - c0 - kc) * ir::kPackedPanel / kLine};
  }
  return {};
}

}  // namespace

namespace detail {

void float_panel_rows_portable(const float* x, int64_t ldx, int64_t rows, const float* wf, int64_t k, float* y,
                               int64_t ldy, int cols, const float* bias, bool accumulate, PrefetchLines /*prefetch*/) {
  for (int64_t i = 0; i < rows; ++i) {
    float acc[ir::kPackedPanel] = {};
    for (int j = 0; j < cols && accumulate; ++j) acc[j] = y[i * ldy + j];
    const float* xr = x + i * ldx;
    for (int64_t c = 0; c < k; ++c) {
      const float xv = xr[c];
      const float* wr = wf + c * ir::kPackedPanel;
#pragma omp simd
      for (int j = 0; j < ir::kPackedPanel; ++j) acc[j] += xv * wr[j];
    }
    for (int j = 0; j < cols; ++j) y[i * ldy + j] = bias != nullptr ? acc[j] + bias[j] : acc[j];
  }
}

FloatPanelRowsFn float_panel_rows_fn(Isa isa) {
  return isa >= Isa::kAvx512 ? float_panel_rows_avx512
         : isa >= Isa::kAvx2 ? float_panel_rows_avx2
                             : float_panel_rows_portable;
}

}  // namespace detail

void gemm_packed_f32(const float* x, int64_t m, int64_t k, const float* packed, int64_t n, const float* bias,
                     float* y, const ir::Epilogue& ep) {
  if (m == 0 || n == 0) return;
  const detail::FloatPanelRowsFn rows_fn = detail::float_panel_rows_fn(isa_active());
  // A task is a block of at most kBlockRows rows x a group of panels. Per k chunk, its rows'
  // activations (kBlockRows x kChunk, 192 KiB) stay in L2 while every panel of the group reads
  // them, and each panel's chunk (32 KiB) stays in L1 while every row tile reads it. Groups
  // shrink, then row blocks split further, until every thread has four tasks.
  const int64_t panels = ir::packed_panels(n);
  const int64_t want = 4 * static_cast<int64_t>(omp_get_max_threads());
  int64_t row_blocks = detail::ceil_div(m, kBlockRows);
  const int64_t group = std::clamp<int64_t>(row_blocks * panels / want, 1, kGroupPanels);
  const int64_t groups = detail::ceil_div(panels, group);
  row_blocks =
      std::clamp<int64_t>(std::max(row_blocks, detail::ceil_div(want, groups)), 1, detail::ceil_div(m, kTileRows));
  detail::Blocking bl;
  bl.mb = detail::round_up(detail::ceil_div(m, row_blocks), kTileRows);
  bl.nb = group * ir::kPackedPanel;
  bl.kc = k;
  detail::matmul_parallel(m, n, bl, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    // k in chunks; the accumulators go through y between chunks (exactly: each output is still
    // one chain over k in order).
    for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
      const int64_t kc = std::min(kChunk, k - c0);
      const bool last = c0 + kc == k;
      for (int64_t p0 = j0; p0 < j1; p0 += ir::kPackedPanel) {
        const int cols = static_cast<int>(std::min<int64_t>(ir::kPackedPanel, j1 - p0));
        const float* wf = packed + (p0 / ir::kPackedPanel) * k * ir::kPackedPanel + c0 * ir::kPackedPanel;
        const detail::PrefetchLines next = next_chunk(packed, k, j0, j1, p0, c0, kc);
        const int64_t tiles = detail::ceil_div(i1 - i0, kTileRows);
        for (int64_t i = i0; i < i1; i += kTileRows) {
          const int64_t rows = std::min(kTileRows, i1 - i);
          float* yt = y + i * n + p0;
          // The row tiles share out the next chunk's lines.
          rows_fn(x + i * k + c0, k, rows, wf, kc, yt, n, cols, last && bias != nullptr ? bias + p0 : nullptr, c0 > 0,
                  detail::prefetch_share(next, (i - i0) / kTileRows, tiles));
          if (last && !ep.empty()) {
            for (int64_t r = 0; r < rows; ++r) apply_epilogue_f32(ep, yt + r * n, cols);
          }
        }
      }
    }
  });
}

}  // namespace kiln::cpu
