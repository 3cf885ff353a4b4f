#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {

TensorKernel tensor_kernel(const std::string& op) {
  static const TensorKernelTable table = [] {
    TensorKernelTable t;
    register_tensor_elementwise_kernels(t);
    register_tensor_reduce_kernels(t);
    register_tensor_layout_kernels(t);
    register_tensor_linear_kernels(t);
    register_tensor_conv_kernels(t);
    register_tensor_norm_kernels(t);
    register_tensor_scatter_kernels(t);
    register_tensor_signal_kernels(t);
    register_tensor_quantize_kernels(t);
    register_tensor_resize_kernels(t);
    register_tensor_einsum_kernels(t);
    register_tensor_grid_sample_kernels(t);
    register_tensor_roi_align_kernels(t);
    register_tensor_tfidf_kernels(t);
    register_tensor_nms_kernels(t);
    register_tensor_integer_kernels(t);
    register_tensor_attention_kernels(t);
    register_tensor_int8_kernels(t);
    register_tensor_recurrent_kernels(t);
    register_tensor_control_kernels(t);
    return t;
  }();
  auto it = table.find(op);
  return it == table.end() ? nullptr : it->second;
}

Status tensor_run_node(const ir::Node& node, const TensorInputs& in, std::vector<ir::Tensor>& out) {
  TensorKernel kernel = tensor_kernel(node.op);
  if (kernel == nullptr) return tensor_error(node, "no CPU kernel");
  out.assign(node.outputs.size(), ir::Tensor());
  return kernel(node, in, out);
}

Status tensor_error(const ir::Node& node, const std::string& what) {
  return invalid_argument("node '" + node.name + "' (" + node.op + "): " + what);
}

Expected<int64_t> tensor_axis(const ir::Node& node, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= std::max<int64_t>(rank, 1)) {
    return tensor_error(node, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> tensor_strides(const ir::Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

Expected<ir::Shape> tensor_broadcast_shape(const ir::Node& node, const std::vector<ir::Shape>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  ir::Shape out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      const int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string list;
      for (const auto& x : shapes) list += (list.empty() ? "" : " and ") + ir::shape_to_string(x);
      return tensor_error(node, "shapes " + list + " do not broadcast");
    }
  }
  return out;
}

std::vector<int64_t> tensor_broadcast_offsets(const ir::Shape& in_shape, const ir::Shape& out_shape) {
  const size_t rank = out_shape.size();
  std::vector<int64_t> in_strides(rank, 0);
  const std::vector<int64_t> s = tensor_strides(in_shape);
  for (size_t i = 0; i < in_shape.size(); ++i) {
    const size_t o = rank - in_shape.size() + i;
    in_strides[o] = in_shape[i] == 1 ? 0 : s[i];
  }
  const int64_t n = ir::shape_numel(out_shape);
  std::vector<int64_t> offsets(static_cast<size_t>(n));
  std::vector<int64_t> idx(rank, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    offsets[static_cast<size_t>(i)] = off;
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < out_shape[d]) {
        off += in_strides[d];
        break;
      }
      off -= in_strides[d] * (out_shape[d] - 1);
      idx[d] = 0;
    }
  }
  return offsets;
}

}  // namespace kiln::cpu
