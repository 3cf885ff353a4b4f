// Normalisation kernels of general graphs (f64 statistics).
//   BatchNormalization (inference): y = scale[c] * (x - mean[c]) / sqrt(var[c] + eps) + bias[c], x [N, C, ...]
//   InstanceNormalization: the same with mean / var of each (n, c) over the spatial dims.
//   LayerNormalization: x viewed as [outer, inner] at `axis`; y = (x - mean) / sqrt(var + eps) * scale + bias,
//                       scale / bias broadcast to x's trailing dims; optional outputs mean, 1/std [outer dims, 1...].
//   kiln.AddLayerNorm(a, b, scale[, bias]): LayerNormalization of a + b (Add's broadcasting), made by
//                       the build from a residual Add that only the norm reads (passes/fuse_subgraphs.cpp).
//   LRN: y = x / (bias + alpha / size * sum of x^2 over a window of channels)^beta.
//   MeanVarianceNormalization: (x - mean) / sqrt(var) over `axes` (default 0, 2, 3).

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593; see matmul_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cmath>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Shape;
using ir::Tensor;

Status batch_norm(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() < 2) return tensor_error(n, "needs [N, C, ...]");
  const int64_t C = x.shape()[1], inner = x.numel() / std::max<int64_t>(x.shape()[0] * C, 1);
  for (size_t i = 1; i < 5; ++i) {
    if (in[i]->numel() != C) return tensor_error(n, "parameter " + std::to_string(i) + " does not have C elements");
  }
  const double eps = n.attr_float("epsilon", 1e-5);
  Tensor y(x.dtype(), x.shape());
  if (x.dtype() == ir::DType::kF32) {  // y = x * s[c] + t[c], s and t in double once a channel
    const int64_t planes = x.numel() / std::max<int64_t>(inner, 1);
    const float* xp = x.data<float>();
    float* yp = y.mutable_data<float>();
    parallel_for(0, planes, x.numel() > (1 << 16), [&](int64_t pl) {
      const int64_t c = pl % C;
      const double s = ir::tensor_get_f64(*in[1], c) / std::sqrt(ir::tensor_get_f64(*in[4], c) + eps);
      const double t = ir::tensor_get_f64(*in[2], c) - ir::tensor_get_f64(*in[3], c) * s;
      const auto sf = static_cast<float>(s), tf = static_cast<float>(t);
      for (int64_t j = 0; j < inner; ++j) yp[pl * inner + j] = xp[pl * inner + j] * sf + tf;
    });
    out[0] = std::move(y);
    return Status::ok();
  }
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / inner) % C;
    const double v = (ir::tensor_get_f64(x, i) - ir::tensor_get_f64(*in[3], c)) /
                     std::sqrt(ir::tensor_get_f64(*in[4], c) + eps);
    ir::tensor_set_f64(y, i, ir::tensor_get_f64(*in[1], c) * v + ir::tensor_get_f64(*in[2], c));
  }
  out[0] = std::move(y);
  return Status::ok();
}

// The mean of `len` values and 1 / sqrt(variance + eps), in double.
template <typename T>
std::pair<double, double> run_stats(const T* p, int64_t len, double eps) {
  double mean = 0.0, var = 0.0;
  for (int64_t j = 0; j < len; ++j) mean += p[j];
  mean /= static_cast<double>(len);
  for (int64_t j = 0; j < len; ++j) var += (p[j] - mean) * (p[j] - mean);
  var /= static_cast<double>(len);
  return {mean, 1.0 / std::sqrt(var + eps)};
}

// Normalises each of `groups` contiguous runs of `len` elements; scale_at / bias_at give the
// affine parameters of element (group, j).
template <typename S, typename B>
void normalize_runs(const std::vector<double>& x, Tensor& y, int64_t groups, int64_t len, double eps, S scale_at,
                    B bias_at, std::vector<double>* means, std::vector<double>* inv_stds) {
  for (int64_t g = 0; g < groups; ++g) {
    const double* p = x.data() + g * len;
    const auto [mean, inv] = run_stats(p, len, eps);
    for (int64_t j = 0; j < len; ++j) ir::tensor_set_f64(y, g * len + j, (p[j] - mean) * inv * scale_at(g, j) + bias_at(g, j));
    if (means) means->push_back(mean);
    if (inv_stds) inv_stds->push_back(inv);
  }
}

Status instance_norm(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() < 3) return tensor_error(n, "needs [N, C, D...]");
  const int64_t C = x.shape()[1], groups = x.shape()[0] * C, len = x.numel() / std::max<int64_t>(groups, 1);
  Tensor y(x.dtype(), x.shape());
  normalize_runs(ir::tensor_to_f64(x), y, groups, len, n.attr_float("epsilon", 1e-5),
                 [&](int64_t g, int64_t) { return ir::tensor_get_f64(*in[1], g % C); },
                 [&](int64_t g, int64_t) { return ir::tensor_get_f64(*in[2], g % C); }, nullptr, nullptr);
  out[0] = std::move(y);
  return Status::ok();
}

// One row of LayerNormalization in f32: s = a + b (a when b is null) goes to y, then
// y = (s - mean) * inv_std * w (+ bias), the mean and the variance summed in double and rounded
// to float, inv_std = 1 / sqrt(var + eps) in float (the formulas of cpu::layer_norm).
void layer_norm_row_scalar(const float* a, const float* b, int64_t len, const float* w, const float* bias, float eps,
                           float* y) {
  double sum = 0.0;
  for (int64_t j = 0; j < len; ++j) {
    y[j] = b != nullptr ? a[j] + b[j] : a[j];
    sum += y[j];
  }
  const double mean_d = sum / static_cast<double>(len);
  double dev = 0.0;
  for (int64_t j = 0; j < len; ++j) dev += (y[j] - mean_d) * (y[j] - mean_d);
  const auto mean = static_cast<float>(mean_d);
  const float inv_std = 1.0f / std::sqrt(static_cast<float>(dev / static_cast<double>(len)) + eps);
  for (int64_t j = 0; j < len; ++j) {
    const float t = (y[j] - mean) * inv_std * w[j];
    y[j] = bias != nullptr ? t + bias[j] : t;
  }
}

// The upper eight lanes of v, widened to double.
__attribute__((target("avx512f"))) __m512d upper_pd(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// The same row sixteen lanes at a time: the sums in eight double lanes each half, the affine step
// rounded after each operation as the scalar row's.
__attribute__((target("avx512f"))) void layer_norm_row_avx512(const float* a, const float* b, int64_t len,
                                                               const float* w, const float* bias, float eps, float* y) {
  const int64_t body = len / 16 * 16;
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  for (int64_t j = 0; j < body; j += 16) {
    __m512 v = _mm512_loadu_ps(a + j);
    if (b != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(b + j));
    _mm512_storeu_ps(y + j, v);
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    s1 = _mm512_add_pd(s1, upper_pd(v));
  }
  double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  for (int64_t j = body; j < len; ++j) {
    y[j] = b != nullptr ? a[j] + b[j] : a[j];
    sum += y[j];
  }
  const double mean_d = sum / static_cast<double>(len);
  const __m512d md = _mm512_set1_pd(mean_d);
  __m512d d0 = _mm512_setzero_pd(), d1 = _mm512_setzero_pd();
  for (int64_t j = 0; j < body; j += 16) {
    const __m512 v = _mm512_loadu_ps(y + j);
    const __m512d lo = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), md);
    const __m512d hi = _mm512_sub_pd(upper_pd(v), md);
    d0 = _mm512_fmadd_pd(lo, lo, d0);
    d1 = _mm512_fmadd_pd(hi, hi, d1);
  }
  double dev = _mm512_reduce_add_pd(_mm512_add_pd(d0, d1));
  for (int64_t j = body; j < len; ++j) dev += (y[j] - mean_d) * (y[j] - mean_d);
  const auto mean = static_cast<float>(mean_d);
  const float inv_std = 1.0f / std::sqrt(static_cast<float>(dev / static_cast<double>(len)) + eps);
  const __m512 mv = _mm512_set1_ps(mean), iv = _mm512_set1_ps(inv_std);
  for (int64_t j = 0; j < body; j += 16) {
    __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(y + j), mv), iv), _mm512_loadu_ps(w + j));
    if (bias != nullptr) t = _mm512_add_ps(t, _mm512_loadu_ps(bias + j));
    _mm512_storeu_ps(y + j, t);
  }
  for (int64_t j = body; j < len; ++j) {
    const float t = (y[j] - mean) * inv_std * w[j];
    y[j] = bias != nullptr ? t + bias[j] : t;
  }
}

// LayerNormalization of a (+ b) over x's trailing `len` elements, f32, scale and bias of `len`
// elements (bias may be null).
void layer_norm_rows_f32(const Tensor& a, const Tensor* b, int64_t outer, int64_t len, const float* scale,
                         const float* bias, float eps, Tensor& y) {
  const float* ap = a.data<float>();
  const float* bp = b != nullptr ? b->data<float>() : nullptr;
  float* yp = y.mutable_data<float>();
  const bool wide = isa_active() >= Isa::kAvx512;
  parallel_for(0, outer, outer * len >= (int64_t{1} << 14), [&](int64_t i) {
    const float* bi = bp != nullptr ? bp + i * len : nullptr;
    if (wide) {
      layer_norm_row_avx512(ap + i * len, bi, len, scale, bias, eps, yp + i * len);
    } else {
      layer_norm_row_scalar(ap + i * len, bi, len, scale, bias, eps, yp + i * len);
    }
  });
}

Status layer_norm_of(const ir::Node& n, const Tensor& x, const Tensor* residual, const Tensor* scale,
                     const Tensor* bias, std::vector<Tensor>& out);

// a + b as Add makes it (broadcast, any dtype), then the norm.
Status add_then_layer_norm(const ir::Node& n, const Tensor& a, const Tensor& b, const Tensor* scale,
                           const Tensor* bias, std::vector<Tensor>& out) {
  ir::Node add;  // the Add kernel reads its op from the node
  add.op = "Add";
  add.name = n.name;
  add.outputs.resize(1);
  std::vector<Tensor> sum;
  KILN_RETURN_IF_ERROR(tensor_run_node(add, {&a, &b}, sum));
  return layer_norm_of(n, sum[0], nullptr, scale, bias, out);
}

// LayerNormalization of x + residual (x alone when residual is null) with n's axis and epsilon;
// a residual of x's shape, both f32, is added row by row in the norm's first pass.
Status layer_norm_of(const ir::Node& n, const Tensor& x, const Tensor* residual, const Tensor* scale,
                     const Tensor* bias, std::vector<Tensor>& out) {
  if (residual != nullptr && (x.dtype() != ir::DType::kF32 || residual->dtype() != ir::DType::kF32 ||
                              residual->shape() != x.shape())) {
    return add_then_layer_norm(n, x, *residual, scale, bias, out);
  }
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", -1), x.rank()));
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  const int64_t len = x.numel() / std::max<int64_t>(outer, 1);
  const Shape tail(x.shape().begin() + axis, x.shape().end());
  KILN_ASSIGN_OR_RETURN(Shape s, tensor_broadcast_shape(n, {scale->shape(), tail}));
  if (s != tail) return tensor_error(n, "scale does not broadcast to the normalised dims");
  const std::vector<int64_t> so = tensor_broadcast_offsets(scale->shape(), tail);
  std::vector<int64_t> bo;
  if (bias != nullptr) bo = tensor_broadcast_offsets(bias->shape(), tail);
  const double eps = n.attr_float("epsilon", 1e-5);
  // f32 with per-element scale and bias over the normalised dims, and only y wanted (inference
  // graphs): the row kernels above, a residual of x's shape added in the same pass.
  const bool plain = x.dtype() == ir::DType::kF32 && scale->dtype() == ir::DType::kF32 && scale->numel() == len &&
                     (bias == nullptr || (bias->dtype() == ir::DType::kF32 && bias->numel() == len)) && out.size() == 1;
  if (plain) {
    Tensor yf = Tensor::uninitialized(ir::DType::kF32, x.shape());
    layer_norm_rows_f32(x, residual, outer, len, scale->data<float>(), bias != nullptr ? bias->data<float>() : nullptr,
                        static_cast<float>(eps), yf);
    out[0] = std::move(yf);
    return Status::ok();
  }
  if (residual != nullptr) return add_then_layer_norm(n, x, *residual, scale, bias, out);
  Tensor y(x.dtype(), x.shape());
  std::vector<double> means, inv_stds;
  normalize_runs(ir::tensor_to_f64(x), y, outer, len, eps,
                 [&](int64_t, int64_t j) { return ir::tensor_get_f64(*scale, so[static_cast<size_t>(j)]); },
                 [&](int64_t, int64_t j) { return bias ? ir::tensor_get_f64(*bias, bo[static_cast<size_t>(j)]) : 0.0; },
                 &means, &inv_stds);
  out[0] = std::move(y);
  Shape stat_shape(x.shape().begin(), x.shape().begin() + axis);
  stat_shape.resize(x.shape().size(), 1);
  for (size_t k = 1; k < out.size(); ++k) {
    Tensor t(ir::DType::kF32, stat_shape);
    const auto& src = k == 1 ? means : inv_stds;
    for (size_t i = 0; i < src.size(); ++i) t.mutable_data<float>()[i] = static_cast<float>(src[i]);
    out[k] = std::move(t);
  }
  return Status::ok();
}

Status layer_norm(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  return layer_norm_of(n, *in[0], nullptr, in[1], in.size() > 2 ? in[2] : nullptr, out);
}

Status add_layer_norm(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  return layer_norm_of(n, *in[0], in[1], in[2], in.size() > 3 ? in[3] : nullptr, out);
}

Status lrn(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() < 3) return tensor_error(n, "needs [N, C, D...]");
  const int64_t size = n.attr_int("size", 0);
  if (size < 1) return tensor_error(n, "attribute 'size' must be positive");
  const double alpha = n.attr_float("alpha", 1e-4), beta = n.attr_float("beta", 0.75), bias = n.attr_float("bias", 1.0);
  const int64_t C = x.shape()[1], inner = x.numel() / (x.shape()[0] * C);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const std::vector<double> xv = ir::tensor_to_f64(x);
  Tensor y(x.dtype(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / inner) % C, base = i - c * inner;
    double sum = 0.0;
    for (int64_t k = std::max<int64_t>(0, c - before); k <= std::min(C - 1, c + after); ++k) {
      const double v = xv[static_cast<size_t>(base + k * inner)];
      sum += v * v;
    }
    ir::tensor_set_f64(y, i, xv[static_cast<size_t>(i)] / std::pow(bias + alpha / static_cast<double>(size) * sum, beta));
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status mvn(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (axes.empty()) axes = {0, 2, 3};
  Shape kept = x.shape();
  for (int64_t a : axes) {
    KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, a, x.rank()));
    kept[static_cast<size_t>(axis)] = 1;
  }
  const std::vector<int64_t> to = tensor_broadcast_offsets(kept, x.shape());
  const std::vector<double> xv = ir::tensor_to_f64(x);
  const int64_t groups = ir::shape_numel(kept);
  std::vector<double> sum(static_cast<size_t>(groups), 0.0), sq(static_cast<size_t>(groups), 0.0);
  const double per = static_cast<double>(x.numel()) / static_cast<double>(groups);
  for (size_t i = 0; i < xv.size(); ++i) sum[static_cast<size_t>(to[i])] += xv[i];
  for (size_t i = 0; i < xv.size(); ++i) {
    const double d = xv[i] - sum[static_cast<size_t>(to[i])] / per;
    sq[static_cast<size_t>(to[i])] += d * d;
  }
  Tensor y(x.dtype(), x.shape());
  for (size_t i = 0; i < xv.size(); ++i) {
    const auto g = static_cast<size_t>(to[i]);
    ir::tensor_set_f64(y, static_cast<int64_t>(i), (xv[i] - sum[g] / per) / (std::sqrt(sq[g] / per) + 1e-9));
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_norm_kernels(TensorKernelTable& table) {
  table["BatchNormalization"] = batch_norm;
  table["InstanceNormalization"] = instance_norm;
  table["LayerNormalization"] = layer_norm;
  table["kiln.AddLayerNorm"] = add_layer_norm;
  table["LRN"] = lrn;
  table["MeanVarianceNormalization"] = mvn;
}

}  // namespace kiln::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
