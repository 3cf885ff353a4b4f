// kiln.Select, the end of an If imported flat (ir/tensor_ops.h): cond, then outputs..., else
// outputs... -> the taken branch's values (sharing their storage).
#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

Status select(const ir::Node& n, const TensorInputs& in, std::vector<ir::Tensor>& out) {
  const size_t count = out.size();
  if (in.size() != 1 + 2 * count || in[0] == nullptr) return tensor_error(n, "expected a condition and two values an output");
  const ir::Tensor& cond = *in[0];
  if (cond.dtype() != ir::DType::kBool || cond.numel() != 1) return tensor_error(n, "the condition must be one bool");
  const bool then = ir::tensor_get_i64(cond, 0) != 0;
  for (size_t k = 0; k < count; ++k) {
    const ir::Tensor* v = in[1 + (then ? 0 : count) + k];
    if (v == nullptr || !v->defined()) {
      return tensor_error(n, std::string(then ? "then" : "else") + " branch output " + std::to_string(k) + " was not made");
    }
    out[k] = *v;
  }
  return Status::ok();
}

}  // namespace

void register_tensor_control_kernels(TensorKernelTable& table) { table["kiln.Select"] = select; }

}  // namespace kiln::cpu
