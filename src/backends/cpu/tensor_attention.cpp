// kiln.Attention: the MatMul - [Add mask] - Softmax - MatMul chain of exported attention layers,
// fused by the build (passes/fuse_attention.cpp):
//   q [..., S, D], kt [..., D, T] (keys already transposed, as the graph's MatMul read them),
//   v [..., T, Dv], mask (optional, f32, broadcast to [..., S, T], added to the scores):
//   y [..., S, Dv] = softmax(scale * q kt + mask, over T) v
// The leading dimensions broadcast as MatMul's do. Each (batch, head) matrix of scores exists only
// while its rows are normalised and multiplied by v; the two products run on the f32 panel
// kernel of the packed GEMM (gemm_packed.h), kt and v packed into panels per matrix. f32 only.
#include <algorithm>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/matmul_kernels.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor_kernel.h"
#include "ir/packed_weight.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

// The packed-panel layout (ir/packed_weight.h) of w [k, n], row-major: panel c row r holds
// w[r, 32c .. 32c + 31], the columns past n zero.
void pack_panels(const float* w, int64_t k, int64_t n, float* dst) {
  for (int64_t c = 0; c < ir::packed_panels(n); ++c) {
    const int64_t c0 = c * ir::kPackedPanel, cols = std::min<int64_t>(ir::kPackedPanel, n - c0);
    for (int64_t r = 0; r < k; ++r) {
      float* d = dst + (c * k + r) * ir::kPackedPanel;
      std::copy(w + r * n + c0, w + r * n + c0 + cols, d);
      std::fill(d + cols, d + ir::kPackedPanel, 0.0f);
    }
  }
}

Status attention(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &q = *in[0], &kt = *in[1], &v = *in[2];
  const Tensor* mask = in.size() > 3 ? in[3] : nullptr;
  if (q.dtype() != DType::kF32 || kt.dtype() != DType::kF32 || v.dtype() != DType::kF32 ||
      (mask != nullptr && mask->dtype() != DType::kF32)) {
    return tensor_error(n, "q, kt, v and the mask must be f32");
  }
  if (q.rank() < 2 || kt.rank() < 2 || v.rank() < 2) return tensor_error(n, "q, kt and v must have rank >= 2");
  const int64_t S = q.shape()[q.rank() - 2], D = q.shape().back(), T = kt.shape().back(), Dv = v.shape().back();
  if (kt.shape()[kt.rank() - 2] != D || v.shape()[v.rank() - 2] != T) {
    return tensor_error(n, "q " + ir::shape_to_string(q.shape()) + ", kt " + ir::shape_to_string(kt.shape()) +
                               " and v " + ir::shape_to_string(v.shape()) + " do not chain");
  }
  const Shape qb(q.shape().begin(), q.shape().end() - 2), kb(kt.shape().begin(), kt.shape().end() - 2);
  const Shape vb(v.shape().begin(), v.shape().end() - 2);
  KILN_ASSIGN_OR_RETURN(Shape batch, tensor_broadcast_shape(n, {qb, kb, vb}));
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
  const std::vector<int64_t> oq = tensor_broadcast_offsets(qb, batch), ok = tensor_broadcast_offsets(kb, batch);
  const std::vector<int64_t> ov = tensor_broadcast_offsets(vb, batch);
  Shape shape = batch;
  shape.push_back(S);
  shape.push_back(Dv);
  Tensor y = Tensor::uninitialized(DType::kF32, shape);  // each (batch, head) writes its rows
  const auto scale = static_cast<float>(n.attr_float("scale", 1.0));
  const int64_t batches = static_cast<int64_t>(oq.size());
  if (y.numel() == 0) {
    out[0] = std::move(y);
    return Status::ok();
  }
  const detail::FloatPanelRowsFn rows_fn = detail::float_panel_rows_fn(isa_active());
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
      pack_panels(kp + ok[static_cast<size_t>(p)] * D * T, D, T, k_panels.data());
      pack_panels(vp + ov[static_cast<size_t>(p)] * T * Dv, T, Dv, vt_panels.data());
      for (int64_t c = 0; c < t_panels; ++c) {
        const int cols = static_cast<int>(std::min<int64_t>(ir::kPackedPanel, T - c * ir::kPackedPanel));
        rows_fn(qp + oq[static_cast<size_t>(p)] * S * D, D, S, k_panels.data() + c * D * ir::kPackedPanel, D,
                scores.data() + c * ir::kPackedPanel, T, cols, nullptr, false, {});
      }
      if (mask != nullptr) {
        const float* mp = mask->data<float>() + mask_row0(p);
        for (int64_t i = 0; i < S; ++i) {
          float* row = scores.data() + i * T;
          const float* mr = mp + i * mask_stride_s;
          if (mask_stride_t == 1) {
#pragma omp simd
            for (int64_t j = 0; j < T; ++j) row[j] = row[j] * scale + mr[j];
          } else {
            for (int64_t j = 0; j < T; ++j) row[j] = row[j] * scale + mr[j * mask_stride_t];
          }
        }
      } else {
#pragma omp simd
        for (int64_t i = 0; i < S * T; ++i) scores[static_cast<size_t>(i)] *= scale;
      }
      softmax_rows_f32(scores.data(), scores.data(), S, T);
      float* yo = yp + p * S * Dv;
      for (int64_t c = 0; c < v_panels; ++c) {
        const int cols = static_cast<int>(std::min<int64_t>(ir::kPackedPanel, Dv - c * ir::kPackedPanel));
        rows_fn(scores.data(), T, S, vt_panels.data() + c * T * ir::kPackedPanel, T, yo + c * ir::kPackedPanel, Dv,
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
