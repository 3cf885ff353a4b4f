// Matrix products of general graphs.
//   MatMul: a [..., M, K] x b [..., K, N] -> [..., M, N], batch dims broadcast (1-D operands are
//           promoted as NumPy does and the added dimension dropped again).
//   Gemm:   y [M, N] = alpha * op(a) op(b) + beta * c, op = optional transpose, c broadcast to [M, N].
//   Both may carry a fused epilogue (ir/epilogue.h); MatMul then also a bias [N] as a third input.
//   A MatMul whose weight the build packed (ir/packed_weight.h) runs the packed-panel tiles
//   (gemm_packed.h); f32 only, as the pass packs f32 weights only.
//   Det:    x [..., M, M] -> y [...], by LU decomposition with partial pivoting in double.
// f32 operands run through the f32 matmul kernel of the LLM path (blocked, vectorised, threaded),
// with b transposed to the kernel's [N, K] rows when it is not already; other float operands are
// widened to f32 first. Integer operands compute in int64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/matmul/gemm_packed.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_epilogue.h"
#include "backends/cpu/tensor/tensor_kernel.h"
#include "ir/packed_weight.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

// c[M, N] = a[M, K] bt[N, K]^T (+ bias[N]), row-major and contiguous, through the f32 matmul kernel.
void gemm_f32_bt(const float* a, const float* bt, const float* bias, float* c, int64_t M, int64_t N, int64_t K) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) c[i * N + j] = bias != nullptr ? bias[j] : 0.0f;
    }
    return;
  }
  static const MatmulKernel* kernel = matmul_kernels(ir::WeightFormat::kF32, isa_active()).front();
  matmul(*kernel, a, M, K, reinterpret_cast<const std::byte*>(bt), N, bias, c);
}


std::vector<float> as_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(ir::tensor_get_f64(t, i));
  return v;
}

// a [..., K] x a weight packed by the build (ir/packed_weight.h; attribute kiln.b_packed = N).
Status matmul_packed(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &a = *in[0], &w = *in[1];
  const int64_t N = n.attr_int("kiln.b_packed", 0);
  const Shape& ws = w.shape();
  if (w.dtype() != DType::kF32 || ws.size() != 3 || ws[2] != ir::kPackedPanel || N <= 0 ||
      ws[0] != ir::packed_panels(N)) {
    return tensor_error(n, "packed weight " + ir::shape_to_string(ws) + " does not hold " + std::to_string(N) +
                               " columns");
  }
  const int64_t K = ws[1];
  if (a.dtype() != DType::kF32 || a.rank() < 1 || a.shape().back() != K) {
    return tensor_error(n, "input " + ir::shape_to_string(a.shape()) + " does not multiply a [" + std::to_string(K) +
                               ", " + std::to_string(N) + "] weight");
  }
  const Tensor* bias_t = in.size() > 2 ? in[2] : nullptr;
  if (bias_t != nullptr && (bias_t->dtype() != DType::kF32 || bias_t->numel() != N)) {
    return tensor_error(n, "fused bias must be f32 [N]");
  }
  Shape shape = a.shape();
  shape.back() = N;
  Tensor y = Tensor::uninitialized(DType::kF32, shape);  // both paths write every element
  const int64_t M = K > 0 ? a.numel() / K : 0;
  float* yp = y.numel() > 0 ? y.mutable_data<float>() : nullptr;
  if (K == 0) {
    for (int64_t i = 0; i < M * N; ++i) yp[i] = bias_t != nullptr ? bias_t->data<float>()[i % N] : 0.0f;
    apply_epilogue_f32(ir::node_epilogue(n), yp, M * N);
  } else if (M > 0) {
    gemm_packed_f32(a.data<float>(), M, K, w.data<float>(), N, bias_t != nullptr ? bias_t->data<float>() : nullptr, yp,
                    ir::node_epilogue(n));
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status matmul(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  if (n.has_attr("kiln.b_packed")) return matmul_packed(n, in, out);
  Shape as = in[0]->shape(), bs = in[1]->shape();
  if (as.empty() || bs.empty()) return tensor_error(n, "operands must have rank >= 1");
  // b stored as [N, K] by the build (passes/transpose_matmul_weights.cpp).
  const bool b_rows = n.attr_int("kiln.b_transposed", 0) != 0;
  if (b_rows) {
    if (bs.size() != 2 || in[1]->dtype() != DType::kF32) return tensor_error(n, "a transposed weight must be f32 [N, K]");
    std::swap(bs[0], bs[1]);
  }
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K) {
    return tensor_error(n, "shapes " + ir::shape_to_string(in[0]->shape()) + " and " +
                               ir::shape_to_string(in[1]->shape()) + " do not multiply");
  }
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  KILN_ASSIGN_OR_RETURN(Shape batch, tensor_broadcast_shape(n, {a_batch, b_batch}));
  const std::vector<int64_t> oa = tensor_broadcast_offsets(a_batch, batch), ob = tensor_broadcast_offsets(b_batch, batch);
  Shape shape = batch;
  if (!a_vec) shape.push_back(M);
  if (!b_vec) shape.push_back(N);
  const bool fl = ir::dtype_is_float(in[0]->dtype());
  // A fused bias (third input, [N]) and epilogue (ir/epilogue.h), on float products only.
  const Tensor* bias_t = in.size() > 2 ? in[2] : nullptr;
  if (bias_t != nullptr && (!fl || bias_t->numel() != N)) return tensor_error(n, "fused bias must be float [N]");
  const std::vector<float> bias = bias_t != nullptr ? as_f32(*bias_t) : std::vector<float>();
  const ir::Epilogue ep = ir::node_epilogue(n);
  Tensor y(in[0]->dtype(), shape);
  if (fl) {
    const bool f32 = in[0]->dtype() == DType::kF32 && in[1]->dtype() == DType::kF32;
    std::vector<float> a_wide, b_wide;
    if (!f32) {
      a_wide = as_f32(*in[0]);
      b_wide = as_f32(*in[1]);
    }
    const float* a = f32 ? in[0]->data<float>() : a_wide.data();
    const float* b = f32 ? in[1]->data<float>() : b_wide.data();
    std::vector<float> c(f32 ? 0 : static_cast<size_t>(ir::shape_numel(batch) * M * N));
    float* cp = f32 ? (y.numel() > 0 ? y.mutable_data<float>() : nullptr) : c.data();
    // b's matrices as the kernel's [N, K] rows, each transposed once (broadcast ones are shared).
    std::vector<float> bt;
    int64_t bt_of = -1;
    for (size_t p = 0; p < oa.size(); ++p) {
      if (!b_rows && ob[p] != bt_of) {
        bt.resize(static_cast<size_t>(K * N));
        transpose_f32(b + ob[p] * K * N, bt.data(), K, N);
        bt_of = ob[p];
      }
      float* cm = cp + static_cast<int64_t>(p) * M * N;
      gemm_f32_bt(a + oa[p] * M * K, b_rows ? b : bt.data(), bias_t != nullptr ? bias.data() : nullptr, cm, M, N, K);
      apply_epilogue_f32(ep, cm, M * N);
    }
    if (!f32) {
      for (size_t i = 0; i < c.size(); ++i) ir::tensor_set_f64(y, static_cast<int64_t>(i), c[i]);
    }
  } else {
    const std::vector<int64_t> a = ir::tensor_to_i64(*in[0]), b = ir::tensor_to_i64(*in[1]);
    for (size_t p = 0; p < oa.size(); ++p) {
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          int64_t s = 0;
          for (int64_t k = 0; k < K; ++k) s += a[static_cast<size_t>(oa[p] * M * K + i * K + k)] * b[static_cast<size_t>(ob[p] * K * N + k * N + j)];
          ir::tensor_set_i64(y, static_cast<int64_t>(p) * M * N + i * N + j, s);
        }
      }
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status gemm(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &a = *in[0], &b = *in[1];
  if (a.rank() != 2 || b.rank() != 2) return tensor_error(n, "A and B must be 2-D");
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const int64_t M = ta ? a.shape()[1] : a.shape()[0], K = ta ? a.shape()[0] : a.shape()[1];
  const int64_t N = tb ? b.shape()[0] : b.shape()[1];
  if ((tb ? b.shape()[1] : b.shape()[0]) != K) {
    return tensor_error(n, "A " + ir::shape_to_string(a.shape()) + " and B " + ir::shape_to_string(b.shape()) +
                               " do not multiply");
  }
  std::vector<int64_t> oc;
  if (in.size() > 2 && in[2] != nullptr) {
    KILN_ASSIGN_OR_RETURN(Shape s, tensor_broadcast_shape(n, {in[2]->shape(), {M, N}}));
    if (s != Shape{M, N}) return tensor_error(n, "C does not broadcast to [M, N]");
    oc = tensor_broadcast_offsets(in[2]->shape(), {M, N});
  }
  const bool f32 = a.dtype() == DType::kF32 && b.dtype() == DType::kF32;
  std::vector<float> a_wide, b_wide;
  if (!f32) {
    a_wide = as_f32(a);
    b_wide = as_f32(b);
  }
  const float* ap = f32 ? a.data<float>() : a_wide.data();
  const float* bp = f32 ? b.data<float>() : b_wide.data();
  // The kernel wants a as [M, K] rows and b as [N, K] rows (transB = 1, as exporters write Gemm).
  std::vector<float> at, bt;
  if (ta) {
    at.resize(static_cast<size_t>(M * K));
    transpose_f32(ap, at.data(), K, M);
    ap = at.data();
  }
  if (!tb) {
    bt.resize(static_cast<size_t>(N * K));
    transpose_f32(bp, bt.data(), K, N);
    bp = bt.data();
  }
  std::vector<float> c(static_cast<size_t>(M * N));
  gemm_f32_bt(ap, bp, nullptr, c.data(), M, N, K);
  const double alpha = n.attr_float("alpha", 1.0), beta = n.attr_float("beta", 1.0);
  const ir::Epilogue ep = ir::node_epilogue(n);
  Tensor y(a.dtype(), {M, N});
  if (y.dtype() == DType::kF32) {
    float* yp = y.numel() > 0 ? y.mutable_data<float>() : nullptr;
    const bool c_f32 = !oc.empty() && in[2]->dtype() == DType::kF32;
    for (int64_t i = 0; i < M * N; ++i) {
      double v = alpha * c[static_cast<size_t>(i)];
      if (!oc.empty()) {
        v += beta * (c_f32 ? in[2]->data<float>()[oc[static_cast<size_t>(i)]] : ir::tensor_get_f64(*in[2], oc[static_cast<size_t>(i)]));
      }
      yp[i] = static_cast<float>(ep.empty() ? v : ir::apply_epilogue(ep, v));
    }
  } else {
    for (int64_t i = 0; i < M * N; ++i) {
      double v = alpha * c[static_cast<size_t>(i)];
      if (!oc.empty()) v += beta * ir::tensor_get_f64(*in[2], oc[static_cast<size_t>(i)]);
      ir::tensor_set_f64(y, i, ir::apply_epilogue(ep, v));
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status det(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() < 2 || x.shape()[x.shape().size() - 1] != x.shape()[x.shape().size() - 2]) {
    return tensor_error(n, "input " + ir::shape_to_string(x.shape()) + " is not a stack of square matrices");
  }
  if (!ir::dtype_is_float(x.dtype())) return tensor_error(n, "input must be a float tensor");
  const int64_t M = x.shape().back();
  Tensor y(x.dtype(), Shape(x.shape().begin(), x.shape().end() - 2));
  std::vector<double> a(static_cast<size_t>(M * M));
  for (int64_t b = 0; b < y.numel(); ++b) {
    for (int64_t i = 0; i < M * M; ++i) a[static_cast<size_t>(i)] = ir::tensor_get_f64(x, b * M * M + i);
    auto at = [&](int64_t r, int64_t c) -> double& { return a[static_cast<size_t>(r * M + c)]; };
    double d = 1.0;
    for (int64_t k = 0; k < M && d != 0.0; ++k) {
      int64_t p = k;
      for (int64_t r = k + 1; r < M; ++r) {
        if (std::fabs(at(r, k)) > std::fabs(at(p, k))) p = r;
      }
      if (at(p, k) == 0.0) {
        d = 0.0;
        break;
      }
      if (p != k) {
        for (int64_t c = 0; c < M; ++c) std::swap(at(p, c), at(k, c));
        d = -d;
      }
      d *= at(k, k);
      for (int64_t r = k + 1; r < M; ++r) {
        const double f = at(r, k) / at(k, k);
        for (int64_t c = k; c < M; ++c) at(r, c) -= f * at(k, c);
      }
    }
    ir::tensor_set_f64(y, b, d);
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void transpose_f32(const float* src, float* dst, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 32;
  parallel_for(0, (rows + kBlock - 1) / kBlock, rows * cols > 65536, [&](int64_t rb) {
    const int64_t r0 = rb * kBlock;
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
      }
    }
  });
}

void register_tensor_linear_kernels(TensorKernelTable& table) {
  table["Det"] = det;
  table["MatMul"] = matmul;
  table["Gemm"] = gemm;
}

}  // namespace kiln::cpu
