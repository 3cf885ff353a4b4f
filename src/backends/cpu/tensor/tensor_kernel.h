// CPU kernels of the general tensor ops (ir/tensor_ops.h), one family per file (tensor_*.cpp).
// A kernel reads the node's attributes and its input tensors, whose concrete shapes it checks
// (errors name the node), and returns freshly made output tensors: it never writes its inputs.
// Absent optional inputs are nullptr. Float math runs in double and is rounded to the output's
// dtype; integer math runs in int64.
//
// Ownership: inputs belong to the caller for the length of the call; outputs belong to the
// caller afterwards (they may share storage with an input, as Reshape's does).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "base/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::cpu {

using TensorInputs = std::vector<const ir::Tensor*>;
using TensorKernel = Status (*)(const ir::Node& node, const TensorInputs& in, std::vector<ir::Tensor>& out);
using TensorKernelTable = std::map<std::string, TensorKernel>;

// The kernel for tensor op `op`, or nullptr.
TensorKernel tensor_kernel(const std::string& op);

// Runs `node` on `in`; the outputs replace `out`.
Status tensor_run_node(const ir::Node& node, const TensorInputs& in, std::vector<ir::Tensor>& out);

// Shared helpers of the kernel files.
Status tensor_error(const ir::Node& node, const std::string& what);
// Axis `axis` (negative counts from the back) of a rank-`rank` tensor, or an error.
Expected<int64_t> tensor_axis(const ir::Node& node, int64_t axis, int64_t rank);
// Row-major strides of `shape`.
std::vector<int64_t> tensor_strides(const ir::Shape& shape);
// NumPy broadcasting of `shapes`, or an error naming the node.
Expected<ir::Shape> tensor_broadcast_shape(const ir::Node& node, const std::vector<ir::Shape>& shapes);
// For each element of `out_shape`, the offset of the broadcast element of `in_shape`.
std::vector<int64_t> tensor_broadcast_offsets(const ir::Shape& in_shape, const ir::Shape& out_shape);
// dst[cols, rows] = src[rows, cols]^T, in cache blocks (tensor_linear.cpp).
void transpose_f32(const float* src, float* dst, int64_t rows, int64_t cols);
// Softmax of each of `rows` rows of `len` floats (y may be x) (tensor_reduce.cpp).
void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t len);
// Softmax of one row of `len` floats x * scale + bias (bias may be null; y may be x) on the
// kernels of `isa` (tensor_reduce.cpp).
void softmax_row_f32(const float* x, float scale, const float* bias, float* y, int64_t len, Isa isa);

void register_tensor_elementwise_kernels(TensorKernelTable& table);
void register_tensor_reduce_kernels(TensorKernelTable& table);
void register_tensor_layout_kernels(TensorKernelTable& table);
void register_tensor_linear_kernels(TensorKernelTable& table);
void register_tensor_conv_kernels(TensorKernelTable& table);
void register_tensor_norm_kernels(TensorKernelTable& table);
void register_tensor_scatter_kernels(TensorKernelTable& table);
void register_tensor_signal_kernels(TensorKernelTable& table);
void register_tensor_quantize_kernels(TensorKernelTable& table);
void register_tensor_resize_kernels(TensorKernelTable& table);
void register_tensor_einsum_kernels(TensorKernelTable& table);
void register_tensor_grid_sample_kernels(TensorKernelTable& table);
void register_tensor_roi_align_kernels(TensorKernelTable& table);
void register_tensor_tfidf_kernels(TensorKernelTable& table);
void register_tensor_nms_kernels(TensorKernelTable& table);
void register_tensor_integer_kernels(TensorKernelTable& table);
void register_tensor_attention_kernels(TensorKernelTable& table);
void register_tensor_int8_kernels(TensorKernelTable& table);
void register_tensor_recurrent_kernels(TensorKernelTable& table);
void register_tensor_control_kernels(TensorKernelTable& table);

}  // namespace kiln::cpu
