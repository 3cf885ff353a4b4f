// Linear quantisation tensor kernels (ONNX's QuantizeLinear family), u8 or i8 codes:
//   QuantizeLinear:        y = saturate(round_half_even(x / scale) + zero_point)
//   DequantizeLinear:      y = (x - zero_point) * scale
//   DynamicQuantizeLinear: scale = (max(0, max x) - min(0, min x)) / 255,
//                          zero_point = saturate(round(-min(0, min x) / scale)), y as above (u8).
// scale and zero_point are scalars (per tensor) or 1-D along `axis` (per channel); an absent
// zero_point is 0 and makes QuantizeLinear produce u8. The division and the scale run in f32, as
// the specification's reference does, so that ties round the same way.
#include <algorithm>
#include <cmath>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Tensor;

// For each element of `x`, the index into a per-tensor or per-`axis` parameter of `count` entries.
Expected<std::vector<int64_t>> channel_of(const ir::Node& n, const Tensor& x, int64_t count) {
  std::vector<int64_t> ch(static_cast<size_t>(x.numel()), 0);
  if (count == 1) return ch;
  KILN_ASSIGN_OR_RETURN(int64_t axis, tensor_axis(n, n.attr_int("axis", 1), x.rank()));
  const int64_t dim = x.shape()[static_cast<size_t>(axis)];
  if (dim != count) {
    return tensor_error(n, "scale has " + std::to_string(count) + " entries for axis " + std::to_string(axis) +
                               " of size " + std::to_string(dim));
  }
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  for (int64_t i = 0; i < x.numel(); ++i) ch[static_cast<size_t>(i)] = (i / inner) % dim;
  return ch;
}

Status check_params(const ir::Node& n, const Tensor& scale, const Tensor* zp) {
  if (scale.rank() > 1) return tensor_error(n, "scale must be a scalar or 1-D");
  if (zp != nullptr && zp->numel() != scale.numel()) return tensor_error(n, "zero_point and scale differ in size");
  if (zp != nullptr && zp->dtype() != DType::kU8 && zp->dtype() != DType::kI8 && zp->dtype() != DType::kI32) {
    return tensor_error(n, "zero_point must be u8, i8 or i32");
  }
  return Status::ok();
}

double saturate(double v, DType dtype) {
  return dtype == DType::kI8 ? std::clamp(v, -128.0, 127.0) : std::clamp(v, 0.0, 255.0);
}

Status quantize(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &scale = *in[1];
  const Tensor* zp = in.size() > 2 ? in[2] : nullptr;
  KILN_RETURN_IF_ERROR(check_params(n, scale, zp));
  const DType dtype = zp != nullptr ? zp->dtype() : DType::kU8;
  if (dtype == DType::kI32) return tensor_error(n, "i32 codes are not supported");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ch, channel_of(n, x, scale.numel()));
  Tensor y(dtype, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = ch[static_cast<size_t>(i)];
    const float q = static_cast<float>(ir::tensor_get_f64(x, i)) / static_cast<float>(ir::tensor_get_f64(scale, c));
    const double z = zp != nullptr ? static_cast<double>(ir::tensor_get_i64(*zp, c)) : 0.0;
    ir::tensor_set_f64(y, i, saturate(std::nearbyint(static_cast<double>(q)) + z, dtype));
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status dequantize(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &scale = *in[1];
  const Tensor* zp = in.size() > 2 ? in[2] : nullptr;
  KILN_RETURN_IF_ERROR(check_params(n, scale, zp));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ch, channel_of(n, x, scale.numel()));
  Tensor y(scale.dtype(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = ch[static_cast<size_t>(i)];
    const int64_t z = zp != nullptr ? ir::tensor_get_i64(*zp, c) : 0;
    const float v = static_cast<float>(ir::tensor_get_i64(x, i) - z) * static_cast<float>(ir::tensor_get_f64(scale, c));
    ir::tensor_set_f64(y, i, v);
  }
  out[0] = std::move(y);
  return Status::ok();
}

Status dynamic_quantize(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.dtype() != DType::kF32) return tensor_error(n, "input must be f32");
  const float* p = x.data<float>();
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < x.numel(); ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
  }
  const float scale = (hi - lo) / 255.0f;
  const double zp = scale > 0.0f ? saturate(std::nearbyint(static_cast<double>(-lo / scale)), DType::kU8) : 0.0;
  Tensor y(DType::kU8, x.shape()), s(DType::kF32, {}), z(DType::kU8, {});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double q = scale > 0.0f ? std::nearbyint(static_cast<double>(p[i] / scale)) : 0.0;
    ir::tensor_set_f64(y, i, saturate(q + zp, DType::kU8));
  }
  ir::tensor_set_f64(s, 0, scale);
  ir::tensor_set_f64(z, 0, zp);
  out[0] = std::move(y);
  out[1] = std::move(s);
  out[2] = std::move(z);
  return Status::ok();
}

}  // namespace

void register_tensor_quantize_kernels(TensorKernelTable& table) {
  table["QuantizeLinear"] = quantize;
  table["DequantizeLinear"] = dequantize;
  table["DynamicQuantizeLinear"] = dynamic_quantize;
}

}  // namespace kiln::cpu
