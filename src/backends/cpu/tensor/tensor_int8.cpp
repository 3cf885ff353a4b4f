// The int8 ops a calibrated build makes (passes/quantize_int8.cpp):
//   kiln.QConv:   x [N, C, D...] f32, w [M, C/group, k...] i8, w_scale [M] f32, bias [M] f32
//                 (optional) -> y [N, M, O...] f32, Conv's attributes
//   kiln.QMatMul: x [..., K] f32, w [N, K] i8, w_scale [N] f32, bias [N] f32 (optional)
//                 -> y [..., N] f32
// Both quantise x to bytes with the node's calibrated kiln.x_scale and kiln.x_zero_point
// (u = clamp(round(x / x_scale) + zero_point, 0, 255)), multiply them with the weights'
// int8 codes in int32 (qgemm_u8s8.h), and scale the sums back by x_scale * w_scale[m] before
// the bias and the fused epilogue: y = epilogue(x_scale * w_scale[m] * sum (u - zp) * w + bias).
#include <algorithm>
#include <optional>
#include <vector>

#include <emmintrin.h>
#include <omp.h>

#include "backends/cpu/matmul/qgemm_u8s8.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_epilogue.h"
#include "backends/cpu/tensor/tensor_kernel.h"
#include "backends/cpu/vision/conv_geometry.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

struct Quantized {
  std::vector<uint8_t> u;
  int zero_point = 0;
};

Expected<Quantized> quantize_input(const ir::Node& n, const Tensor& x) {
  const double scale = n.attr_float("kiln.x_scale", 0.0);
  const int64_t zp = n.attr_int("kiln.x_zero_point", 0);
  if (!(scale > 0.0)) return tensor_error(n, "kiln.x_scale must be positive");
  if (zp < 0 || zp > 255) return tensor_error(n, "kiln.x_zero_point must be in [0, 255]");
  if (x.dtype() != DType::kF32) return tensor_error(n, "x must be f32");
  Quantized q;
  q.zero_point = static_cast<int>(zp);
  q.u.resize(static_cast<size_t>(x.numel()));
  quantize_u8(x.data<float>(), x.numel(), static_cast<float>(scale), q.zero_point, q.u.data());
  return q;
}

// Per-row scales x_scale * w_scale[m], the bias and the weights' row sums, checked against M.
struct RowTerms {
  std::vector<float> scale, bias;
  std::vector<int32_t> w_sum;
};

Expected<RowTerms> row_terms(const ir::Node& n, const TensorInputs& in, int64_t M, int64_t K) {
  const Tensor &w = *in[1], &ws = *in[2];
  const Tensor* b = in.size() > 3 ? in[3] : nullptr;
  if (w.dtype() != DType::kI8) return tensor_error(n, "w must be i8");
  if (ws.dtype() != DType::kF32 || ws.numel() != M) return tensor_error(n, "w_scale must be f32 [" + std::to_string(M) + "]");
  if (b != nullptr && (b->dtype() != DType::kF32 || b->numel() != M)) return tensor_error(n, "bias must be f32 [" + std::to_string(M) + "]");
  RowTerms t;
  const float xs = static_cast<float>(n.attr_float("kiln.x_scale", 0.0));
  t.scale.resize(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) t.scale[static_cast<size_t>(m)] = xs * ws.data<float>()[m];
  if (b != nullptr) t.bias.assign(b->data<float>(), b->data<float>() + M);
  t.w_sum = qgemm_row_sums(w.data<int8_t>(), M, K);
  return t;
}

QGemmWeights gemm_weights(const Tensor& w, const RowTerms& t, int64_t m0, int64_t M, int64_t K, int zp) {
  QGemmWeights q;
  q.w = w.data<int8_t>() + m0 * K;
  q.M = M;
  q.K = K;
  q.w_sum = t.w_sum.data() + m0;
  q.scale = t.scale.data() + m0;
  q.bias = t.bias.empty() ? nullptr : t.bias.data() + m0;
  q.zero_point = zp;
  return q;
}

// Rows of output channels a task takes: all of them, unless there are too few position tiles
// to keep every thread busy.
int64_t rows_per_task(int64_t M, int64_t tiles) {
  const int64_t want = 4 * static_cast<int64_t>(omp_get_max_threads());
  if (tiles >= want) return M;
  const int64_t chunks = std::min<int64_t>((want + tiles - 1) / tiles, (M + 15) / 16);
  const int64_t rows = (M + chunks - 1) / std::max<int64_t>(chunks, 1);
  return std::max<int64_t>(4, (rows + 3) / 4 * 4);
}

struct ConvPlan {
  int64_t N, C, M, group, in_sp, k_sp, out_sp;
  std::optional<Window> window2d;  // 2-D: gather by arithmetic
  std::vector<int64_t> taps;       // other non-identity convolutions
};

// Interleaves rows[k][0..kQTile) (k < K; rows past K read as zeros) into the packed tile layout
// [k / 4][kQTile][4], four rows of 16 positions at a time with SSE2 byte and word unpacks.
void interleave_rows(const uint8_t* const* rows, int64_t K, uint8_t* packed) {
  static const uint8_t kZeros[kQTile] = {};
  for (int64_t k = 0; k < K; k += 4) {
    const uint8_t* r[4];
    for (int j = 0; j < 4; ++j) r[j] = k + j < K ? rows[k + j] : kZeros;
    uint8_t* dst = packed + (k >> 2) * kQTile * 4;
    for (int p = 0; p < kQTile; p += 16) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[0] + p));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[1] + p));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[2] + p));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[3] + p));
      const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
      const __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
      __m128i* out = reinterpret_cast<__m128i*>(dst + p * 4);
      _mm_storeu_si128(out + 0, _mm_unpacklo_epi16(ab_lo, cd_lo));
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(ab_lo, cd_lo));
      _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(ab_hi, cd_hi));
      _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
  }
}

// Packs positions [p0, p0 + npos) of the patches of the group's channels of u (K = channels x
// kernel positions), through `rows` ([K][kQTile] bytes of scratch) unless a 1x1 convolution's
// full tile can be read from the image itself.
void gather_conv_tile(const ConvPlan& pl, const uint8_t* u, int zp, int64_t p0, int npos, int64_t K, uint8_t* rows,
                      std::vector<const uint8_t*>& row_ptrs, uint8_t* packed) {
  row_ptrs.resize(static_cast<size_t>(K));
  const uint8_t fill = static_cast<uint8_t>(zp);
  if (pl.window2d) {
    const Window& g = *pl.window2d;
    const int64_t ih = g.in[0], iw = g.in[1], ow = g.out[1], kw = g.kernel[1];
    int64_t oy[kQTile], ox[kQTile];
    for (int p = 0; p < npos; ++p) {
      oy[p] = (p0 + p) / ow * g.strides[0] - g.pad_begin[0];
      ox[p] = (p0 + p) % ow * g.strides[1] - g.pad_begin[1];
    }
    for (int64_t k = 0; k < K; ++k) {
      const int64_t c = k / pl.k_sp, ki = k % pl.k_sp;
      const int64_t dy = ki / kw * g.dilations[0], dx = ki % kw * g.dilations[1];
      const uint8_t* plane = u + c * pl.in_sp;
      uint8_t* row = rows + k * kQTile;
      for (int p = 0; p < npos; ++p) {
        const int64_t y = oy[p] + dy, x = ox[p] + dx;
        row[p] = (y >= 0 && y < ih && x >= 0 && x < iw) ? plane[y * iw + x] : fill;
      }
      row_ptrs[static_cast<size_t>(k)] = row;
    }
  } else if (!pl.taps.empty()) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t c = k / pl.k_sp, ki = k % pl.k_sp;
      const uint8_t* plane = u + c * pl.in_sp;
      uint8_t* row = rows + k * kQTile;
      for (int p = 0; p < npos; ++p) {
        const int64_t t = pl.taps[static_cast<size_t>((p0 + p) * pl.k_sp + ki)];
        row[p] = t >= 0 ? plane[t] : fill;
      }
      row_ptrs[static_cast<size_t>(k)] = row;
    }
  } else {
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t* src = u + k * pl.in_sp + p0;
      if (npos == kQTile) {
        row_ptrs[static_cast<size_t>(k)] = src;
      } else {
        std::copy(src, src + npos, rows + k * kQTile);
        row_ptrs[static_cast<size_t>(k)] = rows + k * kQTile;
      }
    }
  }
  interleave_rows(row_ptrs.data(), K, packed);
}

Status qconv(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &w = *in[1];
  if (x.rank() < 3 || w.rank() != x.rank()) return tensor_error(n, "x and w must be [N, C, D...] and [M, C/g, k...]");
  ConvPlan pl;
  pl.N = x.shape()[0];
  pl.C = x.shape()[1];
  pl.M = w.shape()[0];
  pl.group = n.attr_int("group", 1);
  const Shape spatial(x.shape().begin() + 2, x.shape().end());
  const std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  if (pl.group <= 0 || pl.C % pl.group || pl.M % pl.group || w.shape()[1] != pl.C / pl.group) {
    return tensor_error(n, "channels " + std::to_string(pl.C) + " / weight " + ir::shape_to_string(w.shape()) +
                               " do not fit group " + std::to_string(pl.group));
  }
  KILN_ASSIGN_OR_RETURN(Window g, window_geometry(n, spatial, kernel, false));
  pl.in_sp = ir::shape_numel(spatial);
  pl.k_sp = ir::shape_numel(kernel);
  pl.out_sp = ir::shape_numel(g.out);
  const int64_t cg = pl.C / pl.group, mg = pl.M / pl.group, K = cg * pl.k_sp;
  bool identity = pl.k_sp == 1 && g.out == spatial;
  for (size_t d = 0; d < spatial.size(); ++d) identity = identity && g.strides[d] == 1 && g.pad_begin[d] == 0;
  if (!identity && spatial.size() == 2) {
    pl.window2d = g;
  } else if (!identity) {
    pl.taps = conv_taps(g);
  }
  KILN_ASSIGN_OR_RETURN(RowTerms terms, row_terms(n, in, pl.M, K));
  KILN_ASSIGN_OR_RETURN(Quantized q, quantize_input(n, x));
  Shape shape = {pl.N, pl.M};
  shape.insert(shape.end(), g.out.begin(), g.out.end());
  Tensor y(DType::kF32, shape);
  float* yd = y.mutable_data<float>();
  const ir::Epilogue ep = ir::node_epilogue(n);
  const int64_t tiles = (pl.out_sp + kQTile - 1) / kQTile, images = pl.N * pl.group;
  const int64_t chunk = rows_per_task(mg, tiles * images), chunks = (mg + chunk - 1) / chunk;
  const int64_t tasks = images * tiles * chunks;
  parallel_region(true, [&] {
    std::vector<uint8_t> packed(static_cast<size_t>(qgemm_pack_bytes(K)), 0);
    std::vector<uint8_t> rows(static_cast<size_t>(K * kQTile), 0);
    std::vector<const uint8_t*> row_ptrs;
    float tile[4 * kQTile];
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t image = t / (tiles * chunks), ti = t / chunks % tiles, ci = t % chunks;
      const int64_t b = image / pl.group, gi = image % pl.group;
      const int64_t p0 = ti * kQTile;
      const int npos = static_cast<int>(std::min<int64_t>(kQTile, pl.out_sp - p0));
      gather_conv_tile(pl, q.u.data() + (b * pl.C + gi * cg) * pl.in_sp, q.zero_point, p0, npos, K, rows.data(),
                       row_ptrs, packed.data());
      const QGemmWeights qw = gemm_weights(w, terms, gi * mg, mg, K, q.zero_point);
      const int64_t m_end = std::min(mg, (ci + 1) * chunk);
      for (int64_t m = ci * chunk; m < m_end; m += 4) {
        const int mr = static_cast<int>(std::min<int64_t>(4, m_end - m));
        qgemm_tile(qw, packed.data(), npos, m, mr, tile);
        for (int r = 0; r < mr; ++r) {
          float* dst = yd + (b * pl.M + gi * mg + m + r) * pl.out_sp + p0;
          std::copy(tile + r * kQTile, tile + r * kQTile + npos, dst);
          apply_epilogue_f32(ep, dst, npos);
        }
      }
    }
  });
  out[0] = std::move(y);
  return Status::ok();
}

Status qmatmul(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &w = *in[1];
  if (x.rank() < 1 || w.rank() != 2) return tensor_error(n, "x and w must be [..., K] and [N, K]");
  const int64_t K = w.shape()[1], N = w.shape()[0];
  if (x.shape().back() != K) {
    return tensor_error(n, "shapes " + ir::shape_to_string(x.shape()) + " and " + ir::shape_to_string(w.shape()) +
                               " (transposed) do not multiply");
  }
  const int64_t R = K > 0 ? x.numel() / K : 0;
  KILN_ASSIGN_OR_RETURN(RowTerms terms, row_terms(n, in, N, K));
  KILN_ASSIGN_OR_RETURN(Quantized q, quantize_input(n, x));
  Shape shape = x.shape();
  shape.back() = N;
  Tensor y(DType::kF32, shape);
  float* yd = y.mutable_data<float>();
  const ir::Epilogue ep = ir::node_epilogue(n);
  const QGemmWeights qw = gemm_weights(w, terms, 0, N, K, q.zero_point);
  const int64_t tiles = (R + kQTile - 1) / kQTile;
  const int64_t chunk = rows_per_task(N, tiles), chunks = (N + chunk - 1) / chunk;
  const int64_t k4n = (K + 3) / 4;
  parallel_region(true, [&] {
    std::vector<uint8_t> packed(static_cast<size_t>(qgemm_pack_bytes(K)), 0);
    float tile[4 * kQTile];
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tiles * chunks; ++t) {
      const int64_t ti = t / chunks, ci = t % chunks, r0 = ti * kQTile;
      const int npos = static_cast<int>(std::min<int64_t>(kQTile, R - r0));
      // Row r's bytes k = 4 k4 .. 4 k4 + 3 are the tile's word (k4, p): a 4-byte transpose.
      for (int p = 0; p < npos; ++p) {
        const uint8_t* row = q.u.data() + (r0 + p) * K;
        for (int64_t k4 = 0; k4 < k4n; ++k4) {
          uint8_t* dst = packed.data() + k4 * kQTile * 4 + p * 4;
          const int64_t k = 4 * k4, left = std::min<int64_t>(4, K - k);
          for (int64_t j = 0; j < left; ++j) dst[j] = row[k + j];
        }
      }
      const int64_t m_end = std::min(N, (ci + 1) * chunk);
      for (int64_t m = ci * chunk; m < m_end; m += 4) {
        const int rows = static_cast<int>(std::min<int64_t>(4, m_end - m));
        qgemm_tile(qw, packed.data(), npos, m, rows, tile);
        for (int r = 0; r < rows; ++r) apply_epilogue_f32(ep, tile + r * kQTile, npos);
        for (int p = 0; p < npos; ++p) {
          float* dst = yd + (r0 + p) * N + m;
          for (int r = 0; r < rows; ++r) dst[r] = tile[r * kQTile + p];
        }
      }
    }
  });
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_int8_kernels(TensorKernelTable& table) {
  table["kiln.QConv"] = qconv;
  table["kiln.QMatMul"] = qmatmul;
}

}  // namespace kiln::cpu
