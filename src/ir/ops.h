// The op set of the Kiln IR and each op's shape rule. Builders emit these ops, passes rewrite
// them, backends implement them. Two families share the registry:
//   - LLM ops (below), over [tokens, C] activations; shapes use kTokens / kRows;
//   - general tensor ops (tensor_ops.h), named and defined as the ONNX operator of the same name
//     at its latest opset, emitted by the ONNX importer.
//
//   embedding   (ids:i32[T], table:W[V,H])              -> [T,H]
//   matmul      (x:[M,K], w:W[N,K] [, bias:W[N]])       -> [M,N]     attrs: kernel (chosen at build)
//   rms_norm    (x:[M,H], w:W[H])                       -> [M,H]     attrs: eps
//   layer_norm  (x:[M,H], w:W[H], b:W[H])               -> [M,H]     attrs: eps
//   add, mul    (a:[M,H], b:[M,H])                      -> [M,H]
//   silu, gelu_tanh (x:[M,H])                           -> [M,H]
//   silu_mul    (x:[M,2I])                              -> [M,I]     silu(x[:, :I]) * x[:, I:]
//   split       (x:[M,C])                               -> [M,s0], [M,s1], ...   attrs: sizes
//   rope        (x:[T,n*d], positions:i32[T])           -> [T,n*d]   attrs: num_heads, head_dim,
//               rotary_dim, theta, type (default|linear|dynamic|llama3), factor,
//               low_freq_factor, high_freq_factor, original_max_position, max_position
//               Rotation is the "rotate half" form: pairs (i, i + rotary_dim/2) of each head.
//   attention   (q:[T,H*d], k:[T,G*d], v:[T,G*d])       -> [T,H*d]   attrs: layer, num_heads,
//               num_kv_heads, head_dim, scale, sliding_window (0 = none), alibi (0|1)
//               Appends k, v of the step to the layer's paged KV cache, then attends causally
//               over each sequence's cached and new tokens.
//   gather_rows (x:[T,C], rows:i32[R])                  -> [R,C]
//   transpose   (w:W[A,B])                              -> W[B,A]   build-time only (folded)
//   normalize_rows (w:W[A,B])                           -> W[A,B]   build-time only: each row / ||row||
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"

namespace kiln::ir {

enum class OpFamily : uint8_t { kLlm, kTensor };

struct OpInfo {
  std::string name;
  bool build_time_only = false;  // must be folded away before an engine is written
  OpFamily family = OpFamily::kLlm;
  // Tensor ops: accepted input and output counts (an empty optional input counts).
  int min_inputs = 0, max_inputs = 0, min_outputs = 1, max_outputs = 1;
};

const OpInfo* op_info(const std::string& name);  // nullptr for an unknown op

// Output shapes of `node`, given its input values' shapes, or an error naming the node.
Expected<std::vector<std::vector<int64_t>>> infer_shapes(const Graph& graph, const Node& node);

}  // namespace kiln::ir
