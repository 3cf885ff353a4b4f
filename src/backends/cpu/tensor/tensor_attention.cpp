// kiln.Attention: the MatMul - [Add mask] - Softmax - MatMul chain of exported attention layers,
// fused by the build (passes/fuse_attention.cpp):
//   q [..., S, D], kt [..., D, T] (keys already transposed, as the graph's MatMul read them),
//   v [..., T, Dv], mask (optional, f32, broadcast to [..., S, T], added to the scores):
//   y [..., S, Dv] = softmax(scale * q kt + mask, over T) v
// The leading dimensions broadcast as MatMul's do. With {kiln.layout = "bshd"} (the build absorbed
// the exporter's head-splitting Transposes) the operands are q [B, S, H, D], k [B, T, H, D] (not
// transposed), v [B, T, H, Dv] and y [B, S, H, Dv], the mask broadcast to [B, H, S, T]: each
// head's rows are read and written where they lie, H * D apart.
// Each (batch, head) matrix of scores exists only while its rows are normalised and multiplied by
// v; the two products run on the f32 panel kernel of the packed GEMM (gemm_packed.h), kt and v
// packed into panels per matrix. f32 only.
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593; see matmul_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <algorithm>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/matmul/matmul_kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_kernel.h"
#include "ir/packed_weight.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

// The packed-panel layout (ir/packed_weight.h) of w [k, n], its rows ldw apart: panel c row r
// holds w[r, 32c .. 32c + 31], the columns past n zero.
void pack_panels(const float* w, int64_t ldw, int64_t k, int64_t n, float* dst) {
  for (int64_t c = 0; c < ir::packed_panels(n); ++c) {
    const int64_t c0 = c * ir::kPackedPanel, cols = std::min<int64_t>(ir::kPackedPanel, n - c0);
    for (int64_t r = 0; r < k; ++r) {
      float* d = dst + (c * k + r) * ir::kPackedPanel;
      std::copy(w + r * ldw + c0, w + r * ldw + c0 + cols, d);
      std::fill(d + cols, d + ir::kPackedPanel, 0.0f);
    }
  }
}

// A 16 x 16 block of w (rows ldw apart) to the panels transposed: w[j, r] goes to
// dst[r * kPackedPanel + j]. Sixteen loads; pairs of rows interleaved (unpack ps), then quads
// (unpack pd), which leaves in r[4q + m] the 128-bit lanes l = 0..3 holding rows 4q..4q+3 of
// column 4l + {0, 2, 1, 3}[m]; two rounds of 128-bit lane shuffles then gather each column's
// four quads in row order, column kColumn[i] in r[i]; sixteen stores.
__attribute__((target("avx512f"))) void transpose_block_avx512(const float* w, int64_t ldw, float* dst) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(w + i * ldw);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    for (int h = 0; h < 2; ++h) {
      r[i + h] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + h]), _mm512_castps_pd(t[i + h + 2])));
      r[i + h + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + h]), _mm512_castps_pd(t[i + h + 2])));
    }
  }
  // t[m] = lanes 0, 2 of rows 0-3 and of rows 4-7 (r[m], r[m + 4]), t[m + 8] lanes 1, 3; t[m + 4]
  // and t[m + 12] the same of rows 8-15.
  for (int i = 0; i < 8; ++i) {
    const int a = (i / 4) * 8 + i % 4;
    t[i] = _mm512_shuffle_f32x4(r[a], r[a + 4], 0x88);
    t[i + 8] = _mm512_shuffle_f32x4(r[a], r[a + 4], 0xdd);
  }
  for (int m = 0; m < 4; ++m) {
    for (int h = 0; h < 2; ++h) {
      const __m512 lo = t[h * 8 + m], hi = t[h * 8 + m + 4];
      r[h * 8 + m] = _mm512_shuffle_f32x4(lo, hi, 0x88);
      r[h * 8 + m + 4] = _mm512_shuffle_f32x4(lo, hi, 0xdd);
    }
  }
  static constexpr int kColumn[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + kColumn[i] * ir::kPackedPanel, r[i]);
}

// The same panels of w^T [k, n] from w [n, k], its rows ldw apart (keys as they lie, [T, D]).
void pack_panels_transposed(const float* w, int64_t ldw, int64_t k, int64_t n, float* dst, Isa isa) {
  const int64_t panels = ir::packed_panels(n);
  std::fill(dst, dst + panels * k * ir::kPackedPanel, 0.0f);
  // Whole 16 x 16 blocks in registers where the CPU has AVX-512; the rest element by element.
  const int64_t n16 = isa >= Isa::kAvx512 ? n / 16 * 16 : 0, k16 = isa >= Isa::kAvx512 ? k / 16 * 16 : 0;
  for (int64_t j = 0; j < n16; j += 16) {
    float* d = dst + (j / ir::kPackedPanel) * k * ir::kPackedPanel + j % ir::kPackedPanel;
    for (int64_t r = 0; r < k16; r += 16) transpose_block_avx512(w + j * ldw + r, ldw, d + r * ir::kPackedPanel);
  }
  for (int64_t j = 0; j < n; ++j) {
    float* d = dst + (j / ir::kPackedPanel) * k * ir::kPackedPanel + j % ir::kPackedPanel;
    const float* row = w + j * ldw;
    for (int64_t r = j < n16 ? k16 : 0; r < k; ++r) d[r * ir::kPackedPanel] = row[r];
  }
}

// Where one (batch, head) matrix of an operand lies: element (i, j) of matrix p at
// base[p] + i * ld + j (for the keys in the "bshd" layout, element (d, t) of kt at
// base[p] + t * ld + d).
struct Operand {
  std::vector<int64_t> base;
  int64_t ld = 0;
};

Status attention(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &q = *in[0], &kt = *in[1], &v = *in[2];
  const Tensor* mask = in.size() > 3 ? in[3] : nullptr;
  if (q.dtype() != DType::kF32 || kt.dtype() != DType::kF32 || v.dtype() != DType::kF32 ||
      (mask != nullptr && mask->dtype() != DType::kF32)) {
    return tensor_error(n, "q, kt, v and the mask must be f32");
  }
  const bool bshd = n.attr_str("kiln.layout") == "bshd";
  int64_t S = 0, D = 0, T = 0, Dv = 0;
  Shape batch;
  Operand oq, ok, ov, oy;
  if (bshd) {
    if (q.rank() != 4 || kt.rank() != 4 || v.rank() != 4) return tensor_error(n, "q, k and v must have rank 4");
    const int64_t B = q.shape()[0], H = q.shape()[2];
    S = q.shape()[1];
    D = q.shape()[3];
    T = kt.shape()[1];
    Dv = v.shape()[3];
    if (kt.shape() != Shape{B, T, H, D} || v.shape() != Shape{B, T, H, Dv}) {
      return tensor_error(n, "q " + ir::shape_to_string(q.shape()) + ", k " + ir::shape_to_string(kt.shape()) +
                                 " and v " + ir::shape_to_string(v.shape()) + " are not [batch, positions, heads, size]"
                                 " of one batch and head count");
    }
    batch = {B, H};
    for (int64_t p = 0; p < B * H; ++p) {
      const int64_t b = p / H, h = p % H;
      oq.base.push_back((b * S * H + h) * D);
      ok.base.push_back((b * T * H + h) * D);
      ov.base.push_back((b * T * H + h) * Dv);
      oy.base.push_back((b * S * H + h) * Dv);
    }
    oq.ld = ok.ld = H * D;
    ov.ld = oy.ld = H * Dv;
  } else {
    if (q.rank() < 2 || kt.rank() < 2 || v.rank() < 2) return tensor_error(n, "q, kt and v must have rank >= 2");
    S = q.shape()[q.rank() - 2];
    D = q.shape().back();
    T = kt.shape().back();
    Dv = v.shape().back();
    if (kt.shape()[kt.rank() - 2] != D || v.shape()[v.rank() - 2] != T) {
      return tensor_error(n, "q " + ir::shape_to_string(q.shape()) + ", kt " + ir::shape_to_string(kt.shape()) +
                                 " and v " + ir::shape_to_string(v.shape()) + " do not chain");
    }
    const Shape qb(q.shape().begin(), q.shape().end() - 2), kb(kt.shape().begin(), kt.shape().end() - 2);
    const Shape vb(v.shape().begin(), v.shape().end() - 2);
    KILN_ASSIGN_OR_RETURN(batch, tensor_broadcast_shape(n, {qb, kb, vb}));
    oq.base = tensor_broadcast_offsets(qb, batch);
    ok.base = tensor_broadcast_offsets(kb, batch);
    ov.base = tensor_broadcast_offsets(vb, batch);
    for (int64_t& o : oq.base) o *= S * D;
    for (int64_t& o : ok.base) o *= D * T;
    for (int64_t& o : ov.base) o *= T * Dv;
    for (size_t p = 0; p < oq.base.size(); ++p) oy.base.push_back(static_cast<int64_t>(p) * S * Dv);
    oq.ld = D;
    ok.ld = T;
    ov.ld = oy.ld = Dv;
  }
  Shape scores_shape = batch;
  scores_shape.push_back(S);
  scores_shape.push_back(T);
  // The mask's stride along each axis of [batch..., S, T] (0 where it broadcasts): a row of
  // scores adds mask elements row_at + j * stride_t.
  std::vector<int64_t> mask_strides(scores_shape.size(), 0);
  if (mask != nullptr) {
    KILN_ASSIGN_OR_RETURN(Shape ms, tensor_broadcast_shape(n, {mask->shape(), scores_shape}));
    if (ms != scores_shape) return tensor_error(n, "the mask does not broadcast to the scores");
    const std::vector<int64_t> own = tensor_strides(mask->shape());
    const size_t lead = scores_shape.size() - mask->shape().size();
    for (size_t d = 0; d < mask->shape().size(); ++d) {
      if (mask->shape()[d] != 1) mask_strides[lead + d] = own[d];
    }
  }
  const int64_t mask_stride_s = mask_strides[scores_shape.size() - 2], mask_stride_t = mask_strides.back();
  // The mask offset of (batch matrix p, row 0).
  const auto mask_row0 = [&](int64_t p) {
    int64_t at = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      at += p % batch[d] * mask_strides[d];
      p /= batch[d];
    }
    return at;
  };
  const Shape shape = bshd ? Shape{batch[0], S, batch[1], Dv} : [&] {
    Shape s = batch;
    s.push_back(S);
    s.push_back(Dv);
    return s;
  }();
  Tensor y = Tensor::uninitialized(DType::kF32, shape);  // each (batch, head) writes its rows
  const auto scale = static_cast<float>(n.attr_float("scale", 1.0));
  const int64_t batches = static_cast<int64_t>(oq.base.size());
  if (y.numel() == 0) {
    out[0] = std::move(y);
    return Status::ok();
  }
  const Isa isa = isa_active();
  const detail::FloatPanelRowsFn rows_fn = detail::float_panel_rows_fn(isa);
  const float* qp = q.data<float>();
  const float* kp = kt.data<float>();
  const float* vp = v.data<float>();
  float* yp = y.mutable_data<float>();
  const int64_t t_panels = ir::packed_panels(T), v_panels = ir::packed_panels(Dv);
  parallel_region(true, [&] {
    std::vector<float> k_panels(static_cast<size_t>(t_panels * D * ir::kPackedPanel)),
        vt_panels(static_cast<size_t>(v_panels * T * ir::kPackedPanel)), scores(static_cast<size_t>(S * T));
#pragma omp for schedule(static)
    for (int64_t p = 0; p < batches; ++p) {
      // kt [D, T] and v [T, Dv] are the right-hand operands as they lie: their panels are runs
      // of 32 columns of their rows.
      const auto at = static_cast<size_t>(p);
      if (bshd) {
        pack_panels_transposed(kp + ok.base[at], ok.ld, D, T, k_panels.data(), isa);
      } else {
        pack_panels(kp + ok.base[at], ok.ld, D, T, k_panels.data());
      }
      pack_panels(vp + ov.base[at], ov.ld, T, Dv, vt_panels.data());
      for (int64_t c = 0; c < t_panels; ++c) {
        const int cols = static_cast<int>(std::min<int64_t>(ir::kPackedPanel, T - c * ir::kPackedPanel));
        rows_fn(qp + oq.base[at], oq.ld, S, k_panels.data() + c * D * ir::kPackedPanel, D,
                scores.data() + c * ir::kPackedPanel, T, cols, nullptr, false, {});
      }
      // Each row scaled, its mask row added where the mask runs along the keys, and normalised.
      const float* mp = mask != nullptr ? mask->data<float>() + mask_row0(p) : nullptr;
      for (int64_t i = 0; i < S; ++i) {
        float* row = scores.data() + i * T;
        const float* mr = mp != nullptr ? mp + i * mask_stride_s : nullptr;
        if (mr != nullptr && mask_stride_t != 1) {
          for (int64_t j = 0; j < T; ++j) row[j] = row[j] * scale + mr[j * mask_stride_t];
          softmax_row_f32(row, 1.0f, nullptr, row, T, isa);
        } else {
          softmax_row_f32(row, scale, mr, row, T, isa);
        }
      }
      float* yo = yp + oy.base[at];
      for (int64_t c = 0; c < v_panels; ++c) {
        const int cols = static_cast<int>(std::min<int64_t>(ir::kPackedPanel, Dv - c * ir::kPackedPanel));
        rows_fn(scores.data(), T, S, vt_panels.data() + c * T * ir::kPackedPanel, T, yo + c * ir::kPackedPanel, oy.ld,
                cols, nullptr, false, {});
      }
    }
  });
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_attention_kernels(TensorKernelTable& table) { table["kiln.Attention"] = attention; }

}  // namespace kiln::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
