// Reduction tensor kernels. A reduction over a set of axes views x as [outer..., reduced...]:
//   Reduce*:  y[o] = fold(x[o, r] for r in reduced)          y: x's shape, reduced dims 1 or dropped
//   ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum, TopK: along one axis, x seen as
//   [outer, axis, inner] with the axis' stride `inner`.

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized (GCC bug 105593; see matmul_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/simd_exp.h"
#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Tensor;

struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisView axis_view(const ir::Shape& s, int64_t axis) {
  AxisView v;
  for (int64_t i = 0; i < axis; ++i) v.outer *= s[static_cast<size_t>(i)];
  v.len = s[static_cast<size_t>(axis)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) v.inner *= s[i];
  return v;
}

Status reduce(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  const int64_t rank = x.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  const bool have_axes = in.size() > 1 && in[1] != nullptr && in[1]->numel() > 0;
  if (have_axes) {
    for (int64_t a : ir::tensor_to_i64(*in[1])) {
      KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, a, rank));
      reduced[static_cast<size_t>(axis)] = true;
    }
  } else if (n.attr_int("noop_with_empty_axes", 0) != 0) {
    out[0] = x;
    return Status::ok();
  } else {
    std::fill(reduced.begin(), reduced.end(), true);
  }
  const bool keep = n.attr_int("keepdims", 1) != 0;
  ir::Shape kept_shape, out_shape;
  for (int64_t i = 0; i < rank; ++i) {
    const auto k = static_cast<size_t>(i);
    kept_shape.push_back(reduced[k] ? 1 : x.shape()[k]);
    if (!reduced[k] || keep) out_shape.push_back(reduced[k] ? 1 : x.shape()[k]);
  }
  const std::string& op = n.op;
  const int64_t out_n = ir::shape_numel(kept_shape);
  double init = 0.0;
  if (op == "ReduceMax") init = -std::numeric_limits<double>::infinity();
  if (op == "ReduceMin") init = std::numeric_limits<double>::infinity();
  if (op == "ReduceProd") init = 1.0;
  std::vector<double> acc(static_cast<size_t>(out_n), init);
  std::vector<double> maxes;
  if (op == "ReduceLogSumExp") {
    // Subtract each group's max first so exp() cannot overflow.
    maxes.assign(static_cast<size_t>(out_n), -std::numeric_limits<double>::infinity());
  }
  const std::vector<int64_t> to_out = tensor_broadcast_offsets(kept_shape, x.shape());
  const std::vector<double> xv = ir::tensor_to_f64(x);
  if (!maxes.empty()) {
    for (size_t i = 0; i < xv.size(); ++i) maxes[static_cast<size_t>(to_out[i])] = std::max(maxes[static_cast<size_t>(to_out[i])], xv[i]);
  }
  std::vector<int64_t> count(static_cast<size_t>(out_n), 0);
  for (size_t i = 0; i < xv.size(); ++i) {
    const auto o = static_cast<size_t>(to_out[i]);
    double& a = acc[o];
    const double v = xv[i];
    ++count[o];
    if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceLogSum") a += v;
    else if (op == "ReduceMax") a = std::isnan(v) ? v : std::max(a, v);
    else if (op == "ReduceMin") a = std::isnan(v) ? v : std::min(a, v);
    else if (op == "ReduceProd") a *= v;
    else if (op == "ReduceL1") a += std::fabs(v);
    else if (op == "ReduceL2" || op == "ReduceSumSquare") a += v * v;
    else if (op == "ReduceLogSumExp") a += std::exp(v - maxes[o]);
  }
  Tensor y(x.dtype(), out_shape);
  for (int64_t o = 0; o < out_n; ++o) {
    const auto k = static_cast<size_t>(o);
    double v = acc[k];
    if (op == "ReduceMean") v = count[k] ? v / static_cast<double>(count[k]) : std::nan("");
    if (op == "ReduceL2") v = std::sqrt(v);
    if (op == "ReduceLogSum") v = std::log(v);
    if (op == "ReduceLogSumExp") v = count[k] ? std::log(v) + maxes[k] : -std::numeric_limits<double>::infinity();
    if (!ir::dtype_is_float(x.dtype()) && (op == "ReduceMax" || op == "ReduceMin") && count[k] == 0) {
      ir::tensor_set_i64(y, o, op == "ReduceMax" ? INT64_MIN : INT64_MAX);
      continue;
    }
    ir::tensor_set_f64(y, o, v);
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status arg_reduce(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", 0), x.rank()));
  const AxisView v = axis_view(x.shape(), axis);
  ir::Shape shape = x.shape();
  if (n.attr_int("keepdims", 1) != 0) shape[static_cast<size_t>(axis)] = 1;
  else shape.erase(shape.begin() + axis);
  Tensor y(DType::kI64, shape);
  const bool is_max = n.op == "ArgMax", last = n.attr_int("select_last_index", 0) != 0;
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      int64_t best = 0;
      double best_v = ir::tensor_get_f64(x, o * v.len * v.inner + i);
      for (int64_t a = 1; a < v.len; ++a) {
        const double e = ir::tensor_get_f64(x, (o * v.len + a) * v.inner + i);
        const bool better = is_max ? (last ? e >= best_v : e > best_v) : (last ? e <= best_v : e < best_v);
        if (better) {
          best = a;
          best_v = e;
        }
      }
      y.mutable_data<int64_t>()[o * v.inner + i] = best;
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

// y = exp(x - mx) over n floats; returns their sum (in double). AVX2: eight at a time through
// exp_avx2 (about 1 ulp), the tail through std::exp.
__attribute__((target("avx2,fma"))) double exp_shifted_avx2(const float* x, float* y, int64_t n, float mx) {
  const __m256 m = _mm256_set1_ps(mx);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(y + i, e);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
  double sum = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) {
    y[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx));
    sum += y[i];
  }
  return sum;
}

// The same sixteen at a time through exp_avx512 (the same bits a lane).
__attribute__((target("avx512f,avx512dq"))) double exp_shifted_avx512(const float* x, float* y, int64_t n, float mx) {
  const __m512 m = _mm512_set1_ps(mx);
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
    _mm512_storeu_ps(y + i, e);
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, _mm512_add_pd(s0, s1));
  double sum = 0.0;
  for (double l : lanes) sum += l;
  for (; i < n; ++i) {
    y[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - mx));
    sum += y[i];
  }
  return sum;
}

// y = x * scale + bias (x * scale when bias is null) over n floats, rounded after each
// operation; returns the largest y.
float scaled_max_scalar(const float* x, float scale, const float* bias, float* y, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t a = 0; a < n; ++a) {
    const float v = x[a] * scale;
    y[a] = bias != nullptr ? v + bias[a] : v;
    mx = std::max(mx, y[a]);
  }
  return mx;
}

__attribute__((target("avx2,fma"))) float scaled_max_avx2(const float* x, float scale, const float* bias, float* y,
                                                          int64_t n) {
  const __m256 f = _mm256_set1_ps(scale);
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), f);
    if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
    _mm256_storeu_ps(y + i, v);
    m = _mm256_max_ps(m, v);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float mx = scaled_max_scalar(x + i, scale, bias != nullptr ? bias + i : nullptr, y + i, n - i);
  for (float l : lanes) mx = std::max(mx, l);
  return mx;
}

__attribute__((target("avx512f"))) float scaled_max_avx512(const float* x, float scale, const float* bias, float* y,
                                                           int64_t n) {
  const __m512 f = _mm512_set1_ps(scale);
  __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), f);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
    _mm512_storeu_ps(y + i, v);
    m = _mm512_max_ps(m, v);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, m);
  float mx = scaled_max_scalar(x + i, scale, bias != nullptr ? bias + i : nullptr, y + i, n - i);
  for (float l : lanes) mx = std::max(mx, l);
  return mx;
}

// y *= f over the whole sixteens of n floats; returns how many it did.
__attribute__((target("avx512f"))) int64_t scale_avx512(float* y, int64_t n, float f) {
  const __m512 v = _mm512_set1_ps(f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), v));
  return i;
}

Status softmax(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", -1), x.rank()));
  if (x.rank() == 0) return tensor_error(n, "needs a tensor of rank >= 1");
  const AxisView v = axis_view(x.shape(), axis);
  if (n.op == "Softmax" && x.dtype() == DType::kF32 && v.inner == 1 && v.len > 0) {
    Tensor y(x.dtype(), x.shape());
    softmax_rows_f32(x.data<float>(), y.mutable_data<float>(), v.outer, v.len);
    out[0] = std::move(y);
    return Status::ok();
  }
  const std::vector<double> xv = ir::tensor_to_f64(x);
  Tensor y(x.dtype(), x.shape());
  std::vector<double> row(static_cast<size_t>(v.len));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      auto at = [&](int64_t a) { return (o * v.len + a) * v.inner + i; };
      double mx = -std::numeric_limits<double>::infinity();
      int64_t arg = 0;
      for (int64_t a = 0; a < v.len; ++a) {
        row[static_cast<size_t>(a)] = xv[static_cast<size_t>(at(a))];
        if (row[static_cast<size_t>(a)] > mx) {
          mx = row[static_cast<size_t>(a)];
          arg = a;
        }
      }
      double sum = 0.0;
      for (int64_t a = 0; a < v.len; ++a) sum += std::exp(row[static_cast<size_t>(a)] - mx);
      for (int64_t a = 0; a < v.len; ++a) {
        const double r = row[static_cast<size_t>(a)];
        double val;
        if (n.op == "Softmax") val = std::exp(r - mx) / sum;
        else if (n.op == "LogSoftmax") val = r - mx - std::log(sum);
        else val = a == arg ? 1.0 : 0.0;
        ir::tensor_set_f64(y, at(a), val);
      }
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status cum_sum(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, ir::tensor_get_i64(*in[1], 0), x.rank()));
  const AxisView v = axis_view(x.shape(), axis);
  const bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  Tensor y(x.dtype(), x.shape());
  const bool fl = ir::dtype_is_float(x.dtype());
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      double fs = 0;
      int64_t is = 0;
      for (int64_t s = 0; s < v.len; ++s) {
        const int64_t a = reverse ? v.len - 1 - s : s;
        const int64_t idx = (o * v.len + a) * v.inner + i;
        if (exclusive) {
          fl ? ir::tensor_set_f64(y, idx, fs) : ir::tensor_set_i64(y, idx, is);
        }
        if (fl) fs += ir::tensor_get_f64(x, idx);
        else is += ir::tensor_get_i64(x, idx);
        if (!exclusive) {
          fl ? ir::tensor_set_f64(y, idx, fs) : ir::tensor_set_i64(y, idx, is);
        }
      }
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status top_k(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", -1), x.rank()));
  const int64_t k = ir::tensor_get_i64(*in[1], 0);
  const AxisView v = axis_view(x.shape(), axis);
  if (k < 0 || k > v.len) return tensor_error(n, "k = " + std::to_string(k) + " is out of range");
  ir::Shape shape = x.shape();
  shape[static_cast<size_t>(axis)] = k;
  Tensor values(x.dtype(), shape), indices(DType::kI64, shape);
  const bool largest = n.attr_int("largest", 1) != 0;
  std::vector<int64_t> order(static_cast<size_t>(v.len));
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      auto at = [&](int64_t a) { return (o * v.len + a) * v.inner + i; };
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
        const double a = ir::tensor_get_f64(x, at(p)), b = ir::tensor_get_f64(x, at(q));
        return largest ? a > b : a < b;
      });
      for (int64_t j = 0; j < k; ++j) {
        const int64_t dst = (o * k + j) * v.inner + i;
        ir::tensor_set_f64(values, dst, ir::tensor_get_f64(x, at(order[static_cast<size_t>(j)])));
        indices.mutable_data<int64_t>()[dst] = order[static_cast<size_t>(j)];
      }
    }
  }
  out[0] = std::move(values);
  out[1] = std::move(indices);
  return Status::ok();
}

// NLL: x [N, C, d...] log-probabilities, t [N, d...] class indices, w [C] optional.
//   loss[n, d] = -x[n, t[n, d], d] * w[t[n, d]]  (0 where t == ignore_index)
//   reduction none: loss; sum: sum(loss); mean: sum(loss) / sum(w[t]) over the non-ignored.
Status nll_loss(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &t = *in[1];
  const Tensor* w = in.size() > 2 ? in[2] : nullptr;
  if (x.rank() < 2 || t.rank() != x.rank() - 1) return tensor_error(n, "expects input [N, C, d...] and target [N, d...]");
  const int64_t N = x.shape()[0], C = x.shape()[1], inner = x.numel() / std::max<int64_t>(N * C, 1);
  const bool has_ignore = n.has_attr("ignore_index");
  const int64_t ignore = n.attr_int("ignore_index", 0);
  std::vector<double> loss(static_cast<size_t>(N * inner));
  double total = 0.0, weight_sum = 0.0;
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t c = ir::tensor_get_i64(t, b * inner + i);
      double v = 0.0, wt = 0.0;
      if (!(has_ignore && c == ignore)) {
        if (c < 0 || c >= C) return tensor_error(n, "target " + std::to_string(c) + " is out of range");
        wt = w ? ir::tensor_get_f64(*w, c) : 1.0;
        v = -ir::tensor_get_f64(x, (b * C + c) * inner + i) * wt;
      }
      loss[static_cast<size_t>(b * inner + i)] = v;
      total += v;
      weight_sum += wt;
    }
  }
  const std::string reduction = n.attr_str("reduction", "mean");
  if (reduction == "none") {
    Tensor y(x.dtype(), t.shape());
    for (size_t i = 0; i < loss.size(); ++i) ir::tensor_set_f64(y, static_cast<int64_t>(i), loss[i]);
    out[0] = std::move(y);
    return Status::ok();
  }
  Tensor y(x.dtype(), {});
  ir::tensor_set_f64(y, 0, reduction == "sum" ? total : total / weight_sum);
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

// Softmax of one row of x * scale (+ bias) into y: the scaled (and biased) values and their
// largest, the exponentials once, one normalising scale.
void softmax_row_f32(const float* x, float scale, const float* bias, float* y, int64_t len, Isa isa) {
  const float mx = isa >= Isa::kAvx512 ? scaled_max_avx512(x, scale, bias, y, len)
                   : isa >= Isa::kAvx2 ? scaled_max_avx2(x, scale, bias, y, len)
                                       : scaled_max_scalar(x, scale, bias, y, len);
  double sum = 0.0;
  if (isa >= Isa::kAvx512 && std::isfinite(mx)) {
    sum = exp_shifted_avx512(y, y, len, mx);
  } else if (isa >= Isa::kAvx2 && std::isfinite(mx)) {
    sum = exp_shifted_avx2(y, y, len, mx);
  } else {
    for (int64_t a = 0; a < len; ++a) {
      y[a] = static_cast<float>(std::exp(static_cast<double>(y[a]) - mx));
      sum += y[a];
    }
  }
  const auto inv = static_cast<float>(1.0 / sum);
  const int64_t done = isa >= Isa::kAvx512 ? scale_avx512(y, len, inv) : 0;
  for (int64_t a = done; a < len; ++a) y[a] *= inv;
}

// Softmax of f32 rows (the axis is the last one). Rows run in parallel.
void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t len) {
  const Isa isa = isa_active();
  parallel_for(0, rows, rows * len > (1 << 15),
               [&](int64_t r) { softmax_row_f32(x + r * len, 1.0f, nullptr, y + r * len, len, isa); });
}

void register_tensor_reduce_kernels(TensorKernelTable& table) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    table[op] = reduce;
  }
  table["ArgMax"] = arg_reduce;
  table["ArgMin"] = arg_reduce;
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) table[op] = softmax;
  table["CumSum"] = cum_sum;
  table["TopK"] = top_k;
  table["NegativeLogLikelihoodLoss"] = nll_loss;
}

}  // namespace kiln::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
