// Matrix products of general graphs.
//   MatMul: a [..., M, K] x b [..., K, N] -> [..., M, N], batch dims broadcast (1-D operands are
//           promoted as NumPy does and the added dimension dropped again).
//   Gemm:   y [M, N] = alpha * op(a) op(b) + beta * c, op = optional transpose, c broadcast to [M, N].
//   Det:    x [..., M, M] -> y [...], by LU decomposition with partial pivoting in double.
// Float operands compute in f32 with f64 accumulation per output row block; the inner loop runs
// over contiguous rows of b so the compiler vectorises it. Integer operands compute in int64.
#include <cmath>
#include <cstring>
#include <utility>

#include "backends/cpu/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

// c[M, N] = a[M, K] b[K, N] (row-major, contiguous), in float.
void gemm_f32(const float* a, const float* b, float* c, int64_t M, int64_t N, int64_t K) {
#pragma omp parallel for schedule(static) if (M * N * K > 32768)
  for (int64_t i = 0; i < M; ++i) {
    float* row = c + i * N;
    std::memset(row, 0, static_cast<size_t>(N) * sizeof(float));
    for (int64_t k = 0; k < K; ++k) {
      const float av = a[i * K + k];
      const float* brow = b + k * N;
      for (int64_t j = 0; j < N; ++j) row[j] += av * brow[j];
    }
  }
}

std::vector<float> as_f32(const Tensor& t) {
  if (t.dtype() == DType::kF32) return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(ir::tensor_get_f64(t, i));
  return v;
}

Status matmul(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  Shape as = in[0]->shape(), bs = in[1]->shape();
  if (as.empty() || bs.empty()) return tensor_error(n, "operands must have rank >= 1");
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
  Tensor y(in[0]->dtype(), shape);
  if (fl) {
    const std::vector<float> a = as_f32(*in[0]), b = as_f32(*in[1]);
    std::vector<float> c(static_cast<size_t>(ir::shape_numel(batch) * M * N));
    for (size_t p = 0; p < oa.size(); ++p) {
      gemm_f32(a.data() + oa[p] * M * K, b.data() + ob[p] * K * N, c.data() + static_cast<int64_t>(p) * M * N, M, N, K);
    }
    if (y.dtype() == DType::kF32) {
      if (!c.empty()) std::memcpy(y.mutable_bytes(), c.data(), c.size() * sizeof(float));
    } else {
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
  std::vector<float> av = as_f32(a), bv = as_f32(b);
  auto transposed = [](const std::vector<float>& src, int64_t rows, int64_t cols) {
    std::vector<float> dst(src.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) dst[static_cast<size_t>(c * rows + r)] = src[static_cast<size_t>(r * cols + c)];
    }
    return dst;
  };
  if (ta) av = transposed(av, K, M);
  if (tb) bv = transposed(bv, N, K);
  std::vector<float> c(static_cast<size_t>(M * N));
  gemm_f32(av.data(), bv.data(), c.data(), M, N, K);
  const double alpha = n.attr_float("alpha", 1.0), beta = n.attr_float("beta", 1.0);
  Tensor y(a.dtype(), {M, N});
  std::vector<int64_t> oc;
  if (in.size() > 2 && in[2] != nullptr) {
    KILN_ASSIGN_OR_RETURN(Shape s, tensor_broadcast_shape(n, {in[2]->shape(), {M, N}}));
    if (s != Shape{M, N}) return tensor_error(n, "C does not broadcast to [M, N]");
    oc = tensor_broadcast_offsets(in[2]->shape(), {M, N});
  }
  for (int64_t i = 0; i < M * N; ++i) {
    double v = alpha * c[static_cast<size_t>(i)];
    if (!oc.empty()) v += beta * ir::tensor_get_f64(*in[2], oc[static_cast<size_t>(i)]);
    ir::tensor_set_f64(y, i, v);
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

void register_tensor_linear_kernels(TensorKernelTable& table) {
  table["Det"] = det;
  table["MatMul"] = matmul;
  table["Gemm"] = gemm;
}

}  // namespace kiln::cpu
