// Integer convolution and matrix product (ONNX's ConvInteger, MatMulInteger, QLinearConv and
// QLinearMatMul): the u8 / i8 operands have their zero points subtracted (per tensor, or per
// output channel for the convolutions' w and per row of A / column of B for the products) and go
// through the Conv kernel in f64 and the MatMul kernel in int64; the result is i32, or for the
// QLinear ops requantised:
// rint(C * (a_scale * b_scale / y_scale)) + y_zero_point, saturated to y_zero_point's type, with
// the scale factor in f32 and the product in f64 (as ONNX's reference computes it).
#include <algorithm>
#include <cmath>
#include <utility>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Tensor;

// t - zp as `dtype`; zp is absent, a scalar, or 1-D along axis `axis` of t.
Expected<Tensor> shifted(const ir::Node& n, const Tensor& t, const Tensor* zp, int64_t axis, DType dtype) {
  Tensor y(dtype, t.shape());
  int64_t dim = 1, inner = 1;
  if (zp != nullptr && zp->numel() > 1) {
    KILN_ASSIGN_OR_RETURN(axis, tensor_axis(n, axis, t.rank()));
    dim = t.shape()[static_cast<size_t>(axis)];
    if (zp->numel() != dim) return tensor_error(n, "a zero point has " + std::to_string(zp->numel()) + " entries for " + std::to_string(dim) + " channels");
    for (size_t d = static_cast<size_t>(axis) + 1; d < t.shape().size(); ++d) inner *= t.shape()[d];
  }
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t z = zp == nullptr || zp->numel() == 0 ? 0 : ir::tensor_get_i64(*zp, zp->numel() > 1 ? (i / inner) % dim : 0);
    ir::tensor_set_i64(y, i, ir::tensor_get_i64(t, i) - z);
  }
  return y;
}

Tensor to_i32(const Tensor& t) {
  Tensor y(DType::kI32, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) ir::tensor_set_i64(y, i, ir::tensor_get_i64(t, i));
  return y;
}

const Tensor* optional(const TensorInputs& in, size_t i) { return i < in.size() ? in[i] : nullptr; }

Status conv_integer(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  KILN_ASSIGN_OR_RETURN(Tensor x, shifted(n, *in[0], optional(in, 2), 1, DType::kF64));
  KILN_ASSIGN_OR_RETURN(Tensor w, shifted(n, *in[1], optional(in, 3), 0, DType::kF64));
  std::vector<Tensor> result(1);
  KILN_RETURN_IF_ERROR(tensor_kernel("Conv")(n, {&x, &w}, result));
  out[0] = to_i32(result[0]);
  return Status::ok();
}

Status matmul_integer(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  KILN_ASSIGN_OR_RETURN(Tensor a, shifted(n, *in[0], optional(in, 2), -2, DType::kI64));
  KILN_ASSIGN_OR_RETURN(Tensor b, shifted(n, *in[1], optional(in, 3), -1, DType::kI64));
  std::vector<Tensor> result(1);
  KILN_RETURN_IF_ERROR(tensor_kernel("MatMul")(n, {&a, &b}, result));
  out[0] = to_i32(result[0]);
  return Status::ok();
}

// A scale given per tensor or one entry per `dim` (the count checked once, by scale_of): entry i
// as f32.
struct Scale {
  const Tensor* t;
  float at(int64_t i) const { return static_cast<float>(ir::tensor_get_f64(*t, t->numel() == 1 ? 0 : i)); }
};

Expected<Scale> scale_of(const ir::Node& n, const Tensor& s, int64_t dim) {
  if (s.numel() != 1 && s.numel() != dim) {
    return tensor_error(n, "a scale has " + std::to_string(s.numel()) + " entries for " + std::to_string(dim));
  }
  return Scale{&s};
}

// y_zero_point's u8 or i8 codes of `shape`: entry e, given as (value, factor) by entry(e), is
// rint(value * factor) + y_zero_point, saturated.
template <typename Entry>
Tensor requantised(const Tensor& y_zp, const ir::Shape& shape, Entry entry) {
  const double zp = static_cast<double>(ir::tensor_get_i64(y_zp, 0));
  const bool u8 = y_zp.dtype() == DType::kU8;
  const double lo = u8 ? 0.0 : -128.0, hi = u8 ? 255.0 : 127.0;
  Tensor y(y_zp.dtype(), shape);
  for (int64_t e = 0; e < y.numel(); ++e) {
    const auto [value, factor] = entry(e);
    ir::tensor_set_i64(y, e, static_cast<int64_t>(std::clamp(std::nearbyint(value * factor) + zp, lo, hi)));
  }
  return y;
}

Status check_y_zero_point(const ir::Node& n, const Tensor& y_zp) {
  if (y_zp.dtype() != DType::kU8 && y_zp.dtype() != DType::kI8) return tensor_error(n, "y_zero_point must be u8 or i8");
  return Status::ok();
}

// a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
Status qlinear_matmul(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  for (size_t i = 0; i < 8; ++i) {
    if (i >= in.size() || in[i] == nullptr) return tensor_error(n, "needs all eight inputs");
  }
  const Tensor &y_scale = *in[6], &y_zp = *in[7];
  if (y_scale.numel() != 1 || y_zp.numel() != 1) return tensor_error(n, "y_scale and y_zero_point must be scalars");
  KILN_RETURN_IF_ERROR(check_y_zero_point(n, y_zp));
  if (in[0]->rank() < 2 || in[3]->rank() < 2) return tensor_error(n, "a and b must have 2 or more dimensions");
  KILN_ASSIGN_OR_RETURN(Tensor a, shifted(n, *in[0], in[2], -2, DType::kI64));
  KILN_ASSIGN_OR_RETURN(Tensor b, shifted(n, *in[3], in[5], -1, DType::kI64));
  std::vector<Tensor> result(1);
  KILN_RETURN_IF_ERROR(tensor_kernel("MatMul")(n, {&a, &b}, result));
  const Tensor& c = result[0];
  const int64_t rows = c.shape()[c.shape().size() - 2], cols = c.shape().back();
  KILN_ASSIGN_OR_RETURN(const Scale as, scale_of(n, *in[1], rows));
  KILN_ASSIGN_OR_RETURN(const Scale bs, scale_of(n, *in[4], cols));
  const float ys = static_cast<float>(ir::tensor_get_f64(y_scale, 0));
  out[0] = requantised(y_zp, c.shape(), [&](int64_t e) {
    const float factor = as.at(e / cols % rows) * bs.at(e % cols) / ys;
    return std::pair{static_cast<double>(ir::tensor_get_i64(c, e)), factor};
  });
  return Status::ok();
}

// x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, [B]: the integer
// convolution plus B (i32, per output channel), requantised as QLinearMatMul's product is, with
// w_scale per tensor or per output channel.
Status qlinear_conv(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  for (size_t i = 0; i < 8; ++i) {
    if (i >= in.size() || in[i] == nullptr) return tensor_error(n, "needs the first eight inputs");
  }
  const Tensor &x_scale = *in[1], &y_scale = *in[6], &y_zp = *in[7];
  const Tensor* bias = optional(in, 8);
  if (x_scale.numel() != 1 || y_scale.numel() != 1 || y_zp.numel() != 1) {
    return tensor_error(n, "x_scale, y_scale and y_zero_point must be scalars");
  }
  KILN_RETURN_IF_ERROR(check_y_zero_point(n, y_zp));
  KILN_ASSIGN_OR_RETURN(Tensor x, shifted(n, *in[0], in[2], 1, DType::kF64));
  KILN_ASSIGN_OR_RETURN(Tensor w, shifted(n, *in[3], in[5], 0, DType::kF64));
  std::vector<Tensor> result(1);
  KILN_RETURN_IF_ERROR(tensor_kernel("Conv")(n, {&x, &w}, result));
  const Tensor& c = result[0];
  const int64_t channels = c.shape()[1], inner = c.numel() / std::max<int64_t>(1, c.shape()[0] * channels);
  if (bias != nullptr && bias->numel() != channels) {
    return tensor_error(n, "B has " + std::to_string(bias->numel()) + " entries for " + std::to_string(channels) +
                               " output channels");
  }
  KILN_ASSIGN_OR_RETURN(const Scale ws, scale_of(n, *in[4], channels));
  const float xs = static_cast<float>(ir::tensor_get_f64(x_scale, 0));
  const float ys = static_cast<float>(ir::tensor_get_f64(y_scale, 0));
  out[0] = requantised(y_zp, c.shape(), [&](int64_t e) {
    const int64_t m = e / inner % channels;
    const double b = bias != nullptr ? static_cast<double>(ir::tensor_get_i64(*bias, m)) : 0.0;
    return std::pair{ir::tensor_get_f64(c, e) + b, xs * ws.at(m) / ys};
  });
  return Status::ok();
}

}  // namespace

void register_tensor_integer_kernels(TensorKernelTable& table) {
  table["QLinearConv"] = qlinear_conv;
  table["QLinearMatMul"] = qlinear_matmul;
  table["ConvInteger"] = conv_integer;
  table["MatMulInteger"] = matmul_integer;
}

}  // namespace kiln::cpu
