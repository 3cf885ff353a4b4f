// Integer convolution and matrix product (ONNX's ConvInteger and MatMulInteger): the u8 / i8
// operands have their zero points subtracted (per tensor, or per output channel for ConvInteger's
// w and per row of A / column of B for MatMulInteger) and go through the Conv kernel in f64 and
// the MatMul kernel in int64; the result is i32.
#include "backends/cpu/tensor_kernel.h"

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

}  // namespace

void register_tensor_integer_kernels(TensorKernelTable& table) {
  table["ConvInteger"] = conv_integer;
  table["MatMulInteger"] = matmul_integer;
}

}  // namespace kiln::cpu
