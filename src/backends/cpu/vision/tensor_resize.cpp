// The Resize tensor kernel: x [d0, d1, ...] -> y [o0, o1, ...], each axis resampled on its own
// (nearest, linear and cubic interpolation are all separable), in double; an f32 resize in which
// every output element copies one input element (nearest, or whole-number ratios) is a gather.
//
// Per axis: the output length o is sizes[d], or floor(in * scales[d]); the scale is scales[d] or
// o / in. Output position i maps back to x_orig by the coordinate transformation mode (half_pixel:
// (i + 0.5) / scale - 0.5, align_corners, asymmetric, pytorch_half_pixel, tf_half_pixel_for_nn,
// tf_crop_and_resize with the roi input, outside of which the result is extrapolation_value),
// where the length the formulas use is in * scale, as in the specification's reference. The n
// taps (nearest and linear: 2, cubic: 4) are the n input positions nearest x_orig (ties to the
// lower), on the input padded with copies of its edge; `exclude_outside` zeroes the taps outside
// the input and renormalises. Each tap's weight follows from ratio = x_orig - floor(x_orig)
// (1 when x_orig is whole): nearest picks one tap by `nearest_mode`, linear weighs
// [1 - ratio, ratio], cubic uses Keys' kernel with a = cubic_coeff_a.
#include <algorithm>
#include <cmath>

#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Shape;
using ir::Tensor;

// For every output position of one axis: `taps` input indices and weights, or extrapolation.
struct AxisTable {
  int64_t in_len = 0, out_len = 0, taps = 0;
  std::vector<int64_t> index;   // [out_len, taps]
  std::vector<double> weight;   // [out_len, taps]
  std::vector<bool> outside;    // [out_len]: the result is extrapolation_value
  bool identity() const {
    if (in_len != out_len) return false;
    for (int64_t o = 0; o < out_len; ++o) {
      if (outside[static_cast<size_t>(o)]) return false;
      for (int64_t k = 0; k < taps; ++k) {
        const size_t j = static_cast<size_t>(o * taps + k);
        if (weight[j] != 0.0 && (weight[j] != 1.0 || index[j] != o)) return false;
      }
    }
    return true;
  }
};

struct ResizeMode {
  std::string mode, coord, nearest;
  double cubic_a = -0.75, extrapolation = 0.0;
  bool exclude_outside = false;
};

std::vector<double> coefficients(const ResizeMode& m, double ratio) {
  if (m.mode == "linear") return {1.0 - ratio, ratio};
  if (m.mode == "cubic") {
    const double A = m.cubic_a, r = ratio, s = 1.0 - ratio;
    return {((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A, ((A + 2) * r - (A + 3)) * r * r + 1,
            ((A + 2) * s - (A + 3)) * s * s + 1, ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A};
  }
  if (ratio == 1.0) return {0.0, 1.0};
  bool upper = ratio > 0.5;
  if (m.nearest == "round_prefer_ceil") upper = ratio >= 0.5;
  if (m.nearest == "floor") upper = false;
  if (m.nearest == "ceil") upper = true;
  return {upper ? 0.0 : 1.0, upper ? 1.0 : 0.0};
}

AxisTable axis_table(const ResizeMode& m, int64_t in_len, int64_t out_len, double scale, double roi_start,
                     double roi_end) {
  AxisTable t;
  t.in_len = in_len;
  t.out_len = out_len;
  t.taps = m.mode == "cubic" ? 4 : 2;
  t.index.assign(static_cast<size_t>(out_len * t.taps), 0);
  t.weight.assign(static_cast<size_t>(out_len * t.taps), 0.0);
  t.outside.assign(static_cast<size_t>(out_len), false);
  const double width = scale * static_cast<double>(in_len), last = static_cast<double>(in_len - 1);
  const int64_t pad = t.taps / 2;
  for (int64_t o = 0; o < out_len; ++o) {
    const double i = static_cast<double>(o);
    double x = (i + 0.5) / scale - 0.5;  // half_pixel
    if (m.coord == "align_corners") {
      x = width == 1.0 ? 0.0 : i * last / (width - 1.0);
    } else if (m.coord == "asymmetric") {
      x = i / scale;
    } else if (m.coord == "pytorch_half_pixel") {
      x = width > 1.0 ? (i + 0.5) / scale - 0.5 : 0.0;
    } else if (m.coord == "tf_half_pixel_for_nn") {
      x = (i + 0.5) / scale;
    } else if (m.coord == "tf_crop_and_resize") {
      x = width == 1.0 ? (roi_end - roi_start) * last / 2.0 : i * (roi_end - roi_start) * last / (width - 1.0);
      x += roi_start * last;
      if (x < 0.0 || x > last) {
        t.outside[static_cast<size_t>(o)] = true;
        continue;
      }
    }
    const double ratio = x == std::floor(x) ? 1.0 : x - std::floor(x);
    std::vector<double> c = coefficients(m, ratio);
    // The taps' first position on the edge-padded input [-pad, in_len + pad).
    int64_t first = static_cast<int64_t>(std::ceil(x)) - pad;
    first = std::clamp<int64_t>(first, -pad, in_len + pad - t.taps);
    double sum = 0.0;
    for (int64_t k = 0; k < t.taps; ++k) {
      const int64_t p = first + k;
      if (m.exclude_outside && (p < 0 || p >= in_len)) c[static_cast<size_t>(k)] = 0.0;
      sum += c[static_cast<size_t>(k)];
    }
    for (int64_t k = 0; k < t.taps; ++k) {
      const size_t j = static_cast<size_t>(o * t.taps + k);
      t.index[j] = std::clamp<int64_t>(first + k, 0, in_len - 1);
      t.weight[j] = m.exclude_outside && sum != 0.0 ? c[static_cast<size_t>(k)] / sum : c[static_cast<size_t>(k)];
    }
  }
  return t;
}

// Resamples axis `axis` of `x` (shape `shape`, updated) by `t`.
std::vector<double> resample(const std::vector<double>& x, Shape& shape, size_t axis, const AxisTable& t,
                             double extrapolation) {
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<double> y(static_cast<size_t>(outer * t.out_len * inner));
  for (int64_t a = 0; a < outer; ++a) {
    const double* src = x.data() + a * t.in_len * inner;
    double* dst = y.data() + a * t.out_len * inner;
    for (int64_t o = 0; o < t.out_len; ++o) {
      double* row = dst + o * inner;
      if (t.outside[static_cast<size_t>(o)]) {
        std::fill(row, row + inner, extrapolation);
        continue;
      }
      std::fill(row, row + inner, 0.0);
      for (int64_t k = 0; k < t.taps; ++k) {
        const size_t j = static_cast<size_t>(o * t.taps + k);
        const double w = t.weight[j];
        if (w == 0.0) continue;
        const double* in = src + t.index[j] * inner;
        for (int64_t e = 0; e < inner; ++e) row[e] += w * in[e];
      }
    }
  }
  shape[axis] = t.out_len;
  return y;
}

// The input index each output position copies, when every output position of the axis takes one
// input element whole (nearest, or any mode at a whole-number ratio); else empty.
std::vector<int64_t> gather_index(const AxisTable& t) {
  std::vector<int64_t> src(static_cast<size_t>(t.out_len), -1);
  for (int64_t o = 0; o < t.out_len; ++o) {
    if (t.outside[static_cast<size_t>(o)]) return {};
    for (int64_t k = 0; k < t.taps; ++k) {
      const size_t j = static_cast<size_t>(o * t.taps + k);
      if (t.weight[j] == 0.0) continue;
      if (t.weight[j] != 1.0 || src[static_cast<size_t>(o)] >= 0) return {};
      src[static_cast<size_t>(o)] = t.index[j];
    }
    if (src[static_cast<size_t>(o)] < 0) return {};
  }
  return src;
}

// y = x gathered along every axis by `src` (one index list per axis), in f32: the whole resize
// when every axis is a gather. Rows of the last axis run in parallel.
void gather_f32(const Tensor& x, const std::vector<std::vector<int64_t>>& src, Tensor& y) {
  const Shape& out = y.shape();
  const size_t rank = out.size();
  const std::vector<int64_t> xs = tensor_strides(x.shape());
  const int64_t cols = out.back(), rows = y.numel() / std::max<int64_t>(cols, 1);
  const float* xp = x.data<float>();
  float* yp = y.mutable_data<float>();
  const std::vector<int64_t>& last = src.back();
  parallel_for(0, rows, y.numel() > (1 << 16), [&](int64_t r) {
    int64_t off = 0, rest = r;
    for (size_t d = rank - 1; d-- > 0;) {
      const int64_t i = rest % out[d];
      rest /= out[d];
      off += src[d][static_cast<size_t>(i)] * xs[d];
    }
    const float* xr = xp + off;
    float* yr = yp + r * cols;
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[last[static_cast<size_t>(c)]];
  });
}

const Tensor* present(const TensorInputs& in, size_t i) {
  return i < in.size() && in[i] != nullptr && in[i]->numel() > 0 ? in[i] : nullptr;
}

Status resize(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  const size_t rank = x.shape().size();
  const Tensor *roi = present(in, 1), *scales = present(in, 2), *sizes = present(in, 3);
  if ((scales == nullptr) == (sizes == nullptr)) return tensor_error(n, "exactly one of scales and sizes must be given");
  const Tensor* given = scales != nullptr ? scales : sizes;
  if (given->numel() != static_cast<int64_t>(rank)) {
    return tensor_error(n, std::string(scales != nullptr ? "scales" : "sizes") + " has " +
                               std::to_string(given->numel()) + " entries for an input of rank " + std::to_string(rank));
  }
  ResizeMode m;
  m.mode = n.attr_str("mode", "nearest");
  m.coord = n.attr_str("coordinate_transformation_mode", "half_pixel");
  m.nearest = n.attr_str("nearest_mode", "round_prefer_floor");
  m.cubic_a = n.attr_float("cubic_coeff_a", -0.75);
  m.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
  m.extrapolation = n.attr_float("extrapolation_value", 0.0);
  if (m.coord == "tf_crop_and_resize" && (roi == nullptr || roi->numel() != 2 * static_cast<int64_t>(rank))) {
    return tensor_error(n, "tf_crop_and_resize needs a roi of 2 x rank entries");
  }
  std::vector<AxisTable> tables;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t in_len = x.shape()[d];
    double scale = 0.0;
    int64_t out_len = 0;
    if (sizes != nullptr) {
      out_len = ir::tensor_get_i64(*sizes, static_cast<int64_t>(d));
      scale = in_len > 0 ? static_cast<double>(out_len) / static_cast<double>(in_len) : 1.0;
    } else {
      scale = ir::tensor_get_f64(*scales, static_cast<int64_t>(d));
      out_len = static_cast<int64_t>(std::floor(scale * static_cast<double>(in_len)));
    }
    if (!(scale > 0.0) || out_len < 0 || out_len > (int64_t{1} << 31)) {
      return tensor_error(n, "axis " + std::to_string(d) + ": scale " + std::to_string(scale) + " or size " +
                                 std::to_string(out_len) + " is out of range");
    }
    if (in_len == 0 && out_len > 0) return tensor_error(n, "cannot resize an empty axis");
    const double start = roi != nullptr ? ir::tensor_get_f64(*roi, static_cast<int64_t>(d)) : 0.0;
    const double end = roi != nullptr ? ir::tensor_get_f64(*roi, static_cast<int64_t>(rank + d)) : 1.0;
    tables.push_back(axis_table(m, in_len, out_len, scale, start, end));
  }
  int64_t total = 1;
  for (const AxisTable& t : tables) {
    if (t.out_len != 0 && total > (int64_t{1} << 32) / t.out_len) {
      return tensor_error(n, "the output would have more than 2^32 elements");
    }
    total *= t.out_len;
  }
  Shape shape = x.shape();
  if (x.dtype() == ir::DType::kF32 && rank > 0 && total > 0) {
    std::vector<std::vector<int64_t>> src;
    for (const AxisTable& t : tables) {
      src.push_back(gather_index(t));
      if (src.back().empty()) break;
    }
    if (src.size() == rank && !src.back().empty()) {
      Shape out_shape;
      for (const AxisTable& t : tables) out_shape.push_back(t.out_len);
      Tensor y(x.dtype(), out_shape);
      gather_f32(x, src, y);
      out[0] = std::move(y);
      return Status::ok();
    }
  }
  std::vector<double> v = ir::tensor_to_f64(x);
  for (size_t d = 0; d < rank; ++d) {
    if (!tables[d].identity()) v = resample(v, shape, d, tables[d], m.extrapolation);
  }
  Tensor y(x.dtype(), shape);
  const bool round = !ir::dtype_is_float(x.dtype());
  for (size_t i = 0; i < v.size(); ++i) {
    ir::tensor_set_f64(y, static_cast<int64_t>(i), round ? std::nearbyint(v[i]) : v[i]);
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_resize_kernels(TensorKernelTable& table) { table["Resize"] = resize; }

}  // namespace kiln::cpu
