// How the CUDA backend reads an engine's graph: the runs of nodes it launches as one kernel, the
// matmul kernel each product binds, and the activations a producer hands to the products in
// 16 bits instead of fp32 (cuda_activation_type.h). Plain functions of the graph; CudaBackend
// (cuda_backend.cpp) binds its launches from them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "backends/cuda/cuda_activation_type.h"
#include "backends/cuda/gemm/cuda_matmul.h"
#include "base/status.h"
#include "ir/graph.h"

namespace kiln::cuda {

// Whether node i is an add whose output the next node, an RMSNorm, normalises.
bool fuses_with_next_norm(const ir::Graph& g, size_t i);

// Whether node i and the next are ropes of the same positions and frequencies on two different
// tensors (the queries and keys of one layer).
bool pairs_with_next_rope(const ir::Graph& g, size_t i);

// How many nodes read each value.
std::map<ir::ValueId, int> consumer_counts(const ir::Graph& g);

// Whether node i is a matmul whose only reader is the next node, a silu_mul: the pair runs as
// one launch_gemv_silu_mul in decode-sized steps.
bool is_matmul_silu_mul(const ir::Graph& g, size_t i, const std::map<ir::ValueId, int>& consumers);

// Whether two activations' arena buffers overlap (the plan places values whose lifetimes do
// not overlap in the same space).
bool arena_overlap(const ir::Graph& g, ir::ValueId a, ir::ValueId b);

// Whether node i is the split of a fused q/k/v product whose query and key parts only the next
// two nodes, a rope pair, read, followed by the attention that takes the rotated q and k and the
// split's v: the four run as one launch_qkv_rope_store and the attention without its cache store.
bool is_qkv_rope_attention(const ir::Graph& g, size_t i, const std::map<ir::ValueId, int>& consumers);

// The matmul kernel that `node` names in attribute `attr` (kernel_decode or kernel_prefill) for
// steps of m rows; the first candidate that fits when it names none, or one of another format or
// row range; an error when it names a CUDA kernel this build lacks.
Expected<const CudaMatmulKernel*> bind_matmul_kernel(const ir::Node& node, const std::string& attr,
                                                     ir::WeightFormat format, int64_t m);

// Whether the product of matmul `node` writes its gate/up output in 16 bits for SwiGLU to widen
// (steps of kGemvMaxRows rows or more): a rounded f16 / bf16 prefill kernel, no bias, and a width
// that SwiGLU's four-column kernel takes.
bool gate_up_in_16_bits(const ir::Graph& g, const ir::Node& node, const CudaMatmulKernel& prefill);

// Whether node i is a matmul whose only reader is the next node, the split that
// is_qkv_rope_attention fuses, and whose prefill kernel can write its product in the weights'
// 16-bit type (gemm_16_out_supports; no bias). Steps of kGemvMaxRows rows or more over a bf16
// KV cache then hand q/k/v over in 16 bits: the cache rounds k and v to bf16 and the tensor-core
// attention rounds q to its operand type anyway.
bool qkv_in_16_bits(const ir::Graph& g, size_t i, const std::map<ir::ValueId, int>& consumers,
                    const CudaMatmulKernel& prefill);

// The activations that their producer hands to its readers in 16 bits (cuda_activation_type.h),
// with the type: the output of an RMSNorm (alone or after a residual add) that overlaps none of
// the norm's inputs, of SwiGLU after a 16-bit gate/up product, or of attention in a
// half-precision engine (its split and tensor-core kernels; attention_16_out_supported) that
// overlaps none of its inputs, when every reader is a matmul
// whose prefill kernel rounds its input to that one type. In steps of kGemvMaxRows rows or more
// the producer writes the value in that type and the products read it as it is, with no rounding
// pass between; smaller steps keep fp32 for the GEMVs. The rounding is the one the products'
// own conversion would do, so the results are the same bits.
Expected<std::map<ir::ValueId, ActivationType>> handed_in_16_bits(const ir::Graph& g,
                                                                   const std::map<ir::ValueId, int>& consumers,
                                                                   bool half_precision);

}  // namespace kiln::cuda
