// The graph patterns the CUDA backend runs as one kernel, and the activations it hands over in
// 16 bits (cuda_graph_patterns.h).
#include "backends/cuda/cuda_graph_patterns.h"

#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/attention/cuda_attention.h"
#include "backends/cuda/gemm/cuda_gemm.h"
#include "backends/cuda/gemm/cuda_gemv.h"
#include "backends/cuda/layers/cuda_qkv.h"

namespace kiln::cuda {

bool fuses_with_next_norm(const ir::Graph& g, size_t i) {
  if (i + 1 >= g.nodes().size()) return false;
  const ir::Node& add = g.nodes()[i];
  const ir::Node& next = g.nodes()[i + 1];
  return add.op == "add" && next.op == "rms_norm" && next.inputs[0] == add.outputs[0] &&
         g.value(add.outputs[0]).shape == g.value(next.outputs[0]).shape;
}

bool pairs_with_next_rope(const ir::Graph& g, size_t i) {
  if (i + 1 >= g.nodes().size()) return false;
  const ir::Node& a = g.nodes()[i];
  const ir::Node& b = g.nodes()[i + 1];
  if (a.op != "rope" || b.op != "rope" || a.inputs[1] != b.inputs[1] || b.inputs[0] == a.outputs[0]) return false;
  for (const char* key : {"head_dim", "rotary_dim", "original_max_position", "max_position"}) {
    if (a.attr_int(key) != b.attr_int(key)) return false;
  }
  for (const char* key : {"theta", "factor", "low_freq_factor", "high_freq_factor"}) {
    if (a.attr_float(key) != b.attr_float(key)) return false;
  }
  return a.attr_str("type") == b.attr_str("type");
}

std::map<ir::ValueId, int> consumer_counts(const ir::Graph& g) {
  std::map<ir::ValueId, int> counts;
  for (const ir::Node& node : g.nodes()) {
    for (ir::ValueId id : node.inputs) ++counts[id];
  }
  for (ir::ValueId id : g.outputs()) ++counts[id];
  return counts;
}

bool is_matmul_silu_mul(const ir::Graph& g, size_t i, const std::map<ir::ValueId, int>& consumers) {
  if (i + 1 >= g.nodes().size()) return false;
  const ir::Node& mm = g.nodes()[i];
  const ir::Node& act = g.nodes()[i + 1];
  if (mm.op != "matmul" || act.op != "silu_mul" || act.inputs[0] != mm.outputs[0]) return false;
  const auto it = consumers.find(mm.outputs[0]);
  return it != consumers.end() && it->second == 1 && g.weight(mm.inputs[1]).rows() % 2 == 0;
}

bool arena_overlap(const ir::Graph& g, ir::ValueId a, ir::ValueId b) {
  const ir::Value& va = g.value(a);
  const ir::Value& vb = g.value(b);
  if (va.is_weight || vb.is_weight || va.arena_offset < 0 || vb.arena_offset < 0) return false;
  const int64_t wa = va.shape.size() == 2 ? va.shape[1] : 1, wb = vb.shape.size() == 2 ? vb.shape[1] : 1;
  return va.arena_offset < vb.arena_offset + wb && vb.arena_offset < va.arena_offset + wa;
}

bool is_qkv_rope_attention(const ir::Graph& g, size_t i, const std::map<ir::ValueId, int>& consumers) {
  if (i + 3 >= g.nodes().size()) return false;
  const ir::Node& split = g.nodes()[i];
  const ir::Node& rq = g.nodes()[i + 1];
  const ir::Node& rk = g.nodes()[i + 2];
  const ir::Node& attn = g.nodes()[i + 3];
  if (split.op != "split" || split.outputs.size() != 3 || rq.op != "rope" || attn.op != "attention") return false;
  if (!pairs_with_next_rope(g, i + 1)) return false;
  if (rq.inputs[0] != split.outputs[0] || rk.inputs[0] != split.outputs[1]) return false;
  if (attn.inputs.size() != 3 || attn.inputs[0] != rq.outputs[0] || attn.inputs[1] != rk.outputs[0] ||
      attn.inputs[2] != split.outputs[2]) {
    return false;
  }
  // Every part is read by one node of the four only: the fused kernel writes the rotated keys and
  // the values into the cache alone, and the queries into a buffer of its own (the memory plan
  // may place the rotated queries over the product, which the kernel still reads).
  for (ir::ValueId id : {split.outputs[0], split.outputs[1], split.outputs[2], rq.outputs[0], rk.outputs[0]}) {
    const auto it = consumers.find(id);
    if (it == consumers.end() || it->second != 1) return false;
  }
  const int64_t dim = attn.attr_int("head_dim"), heads = attn.attr_int("num_heads");
  const int64_t kv_heads = attn.attr_int("num_kv_heads");
  if (rq.attr_int("head_dim") != dim || rq.attr_int("num_heads") != heads || rk.attr_int("num_heads") != kv_heads) {
    return false;
  }
  const std::vector<int64_t> sizes = split.attr_ints("sizes");
  if (sizes != std::vector<int64_t>{heads * dim, kv_heads * dim, kv_heads * dim}) return false;
  const QkvShape shape{static_cast<int>(heads), static_cast<int>(kv_heads), static_cast<int>(dim),
                       static_cast<int>(rq.attr_int("rotary_dim"))};
  return qkv_rope_store_supported(shape);
}

Expected<const CudaMatmulKernel*> bind_matmul_kernel(const ir::Node& node, const std::string& attr,
                                                     ir::WeightFormat format, int64_t m) {
  const std::string name = node.attr_str(attr);
  const CudaMatmulKernel* k = cuda_matmul_kernel_find(name);
  if (k == nullptr && !name.empty() && name.find(".cuda.") != std::string::npos) {
    return invalid_argument("node '" + node.name + "' names matmul kernel '" + name +
                            "', which this kiln does not have; rebuild the engine with this kiln's `kiln build "
                            "--target cuda`");
  }
  if (k == nullptr || k->format != format || !cuda_matmul_kernel_fits(*k, m)) {
    const auto candidates = cuda_matmul_kernels(format, m);
    if (candidates.empty()) {
      return unimplemented("the CUDA backend has no matmul kernel for weights stored as " +
                           std::string(ir::weight_format_name(format)) + " (node '" + node.name +
                           "'); rebuild the engine with `kiln build --target cuda` (--dtype fp32, fp16, bf16, fp8, int8 or int4)");
    }
    k = candidates.front();
  }
  return k;
}

bool gate_up_in_16_bits(const ir::Graph& g, const ir::Node& node, const CudaMatmulKernel& prefill) {
  return gemm_16_out_supports(prefill) && node.inputs.size() == 2 && (g.weight(node.inputs[1]).rows() / 2) % 4 == 0;
}

bool qkv_in_16_bits(const ir::Graph& g, size_t i, const std::map<ir::ValueId, int>& consumers,
                    const CudaMatmulKernel& prefill) {
  if (i + 1 >= g.nodes().size()) return false;
  const ir::Node& mm = g.nodes()[i];
  if (mm.op != "matmul" || mm.inputs.size() != 2 || g.nodes()[i + 1].inputs[0] != mm.outputs[0]) return false;
  const auto it = consumers.find(mm.outputs[0]);
  return it != consumers.end() && it->second == 1 && is_qkv_rope_attention(g, i + 1, consumers) &&
         gemm_16_out_supports(prefill);
}

Expected<std::map<ir::ValueId, ActivationType>> handed_in_16_bits(const ir::Graph& g,
                                                                   const std::map<ir::ValueId, int>& consumers,
                                                                   bool half_precision) {
  // The one 16-bit type every reader of v takes, or kF32.
  auto readers_type = [&](ir::ValueId v) -> Expected<ActivationType> {
    std::optional<ActivationType> type;
    int reads = 0;
    for (const ir::Node& node : g.nodes()) {
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        if (node.inputs[i] != v) continue;
        ++reads;
        if (node.op != "matmul" || i != 0) return ActivationType::kF32;
        KILN_ASSIGN_OR_RETURN(const CudaMatmulKernel* prefill,
                              bind_matmul_kernel(node, "kernel_prefill", g.weight(node.inputs[1]).format, kGemvMaxRows));
        const ActivationType t = matmul_input_type(*prefill);
        if (t == ActivationType::kF32 || (type && *type != t)) return ActivationType::kF32;
        type = t;
      }
    }
    const auto it = consumers.find(v);
    if (!type || it == consumers.end() || it->second != reads) return ActivationType::kF32;  // a graph output too
    return *type;
  };
  std::map<ir::ValueId, ActivationType> out;
  auto consider = [&](ir::ValueId v, const std::vector<ir::ValueId>& inputs) -> Status {
    for (ir::ValueId in : inputs) {
      if (arena_overlap(g, v, in)) return Status::ok();
    }
    KILN_ASSIGN_OR_RETURN(const ActivationType t, readers_type(v));
    if (t != ActivationType::kF32) out[v] = t;
    return Status::ok();
  };
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& node = g.nodes()[i];
    if (fuses_with_next_norm(g, i)) {
      const ir::Node& norm = g.nodes()[++i];
      KILN_RETURN_IF_ERROR(consider(norm.outputs[0], {node.inputs[0], node.inputs[1], node.outputs[0]}));
    } else if (node.op == "rms_norm") {
      KILN_RETURN_IF_ERROR(consider(node.outputs[0], {node.inputs[0]}));
    } else if (is_matmul_silu_mul(g, i, consumers)) {
      const ir::Node& act = g.nodes()[++i];
      KILN_ASSIGN_OR_RETURN(const CudaMatmulKernel* prefill,
                            bind_matmul_kernel(node, "kernel_prefill", g.weight(node.inputs[1]).format, kGemvMaxRows));
      if (gate_up_in_16_bits(g, node, *prefill)) KILN_RETURN_IF_ERROR(consider(act.outputs[0], {}));
    } else if (node.op == "attention" && half_precision &&
               attention_16_out_supported(static_cast<int>(node.attr_int("head_dim")))) {
      std::vector<ir::ValueId> inputs;
      for (ir::ValueId in : node.inputs) {
        if (in != ir::kNoValue) inputs.push_back(in);
      }
      KILN_RETURN_IF_ERROR(consider(node.outputs[0], inputs));
    }
  }
  return out;
}

}  // namespace kiln::cuda
