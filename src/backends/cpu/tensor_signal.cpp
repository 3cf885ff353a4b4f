// Window-function tensor kernels (the generators of ONNX's signal ops):
//   HannWindow:     w[n] = 0.5 - 0.5 cos(2 pi n / N)
//   HammingWindow:  w[n] = 25/46 - 21/46 cos(2 pi n / N)
//   BlackmanWindow: w[n] = 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)
// for n in [0, size), N = size when `periodic` (the default) and size - 1 when symmetric. The
// input is the scalar size; the output is [size] of the node's `dtype` attribute.
#include <cmath>
#include <numbers>

#include "backends/cpu/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Tensor;

Status window(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  if (in[0]->numel() != 1) return tensor_error(n, "size must be a scalar");
  const int64_t size = ir::tensor_get_i64(*in[0], 0);
  if (size < 0 || size > (int64_t{1} << 32)) return tensor_error(n, "size " + std::to_string(size) + " is out of range");
  const auto dtype = ir::dtype_from_name(n.attr_str("dtype", "f32"));
  if (!dtype) return tensor_error(n, "unknown output dtype");
  const double N = n.attr_int("periodic", 1) != 0 ? static_cast<double>(size) : static_cast<double>(size - 1);
  double a0 = 0.5, a1 = 0.5, a2 = 0.0;
  if (n.op == "HammingWindow") {
    a0 = 25.0 / 46.0;
    a1 = 1.0 - a0;
  } else if (n.op == "BlackmanWindow") {
    a0 = 0.42;
    a2 = 0.08;
  }
  Tensor y(*dtype, {size});
  for (int64_t i = 0; i < size; ++i) {
    const double t = 2.0 * std::numbers::pi * static_cast<double>(i) / N;
    ir::tensor_set_f64(y, i, a0 - a1 * std::cos(t) + a2 * std::cos(2.0 * t));
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_signal_kernels(TensorKernelTable& table) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) table[op] = window;
}

}  // namespace kiln::cpu
