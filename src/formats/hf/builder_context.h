// Shared helpers for the architecture builders (arch_*.cpp): checked weight lookup and the
// blocks every decoder-only transformer is made of.
#pragma once

#include <string>
#include <vector>

#include "formats/hf/hf_checkpoint.h"
#include "ir/graph.h"

namespace kiln::formats {

class BuilderContext {
 public:
  BuilderContext(const HfCheckpoint& checkpoint, ir::Graph& graph) : ckpt_(checkpoint), graph_(graph) {}

  const ModelConfig& config() const { return ckpt_.config(); }
  ir::Graph& graph() { return graph_; }

  // A weight value for tensor `name` of the checkpoint, which must have `shape` (error names it).
  Expected<ir::ValueId> weight(const std::string& name, const std::vector<int64_t>& shape);
  // Like weight(), but a missing tensor yields kNoValue instead of an error.
  Expected<ir::ValueId> optional_weight(const std::string& name, const std::vector<int64_t>& shape);
  bool has_tensor(const std::string& name) const { return ckpt_.find(name) != nullptr; }

  // Adds the graph inputs ids, positions, logit_rows.
  void add_inputs();
  ir::ValueId ids() const { return ids_; }
  ir::ValueId positions() const { return positions_; }
  ir::ValueId logit_rows() const { return logit_rows_; }

  // q, k, v [T, *] -> rope (when the config uses it) -> attention -> [T, heads * head_dim].
  ir::ValueId attention(const std::string& prefix, int64_t layer, ir::ValueId q, ir::ValueId k, ir::ValueId v);
  // x -> matmul(w [, bias]).
  ir::ValueId linear(const std::string& name, ir::ValueId x, ir::ValueId w, ir::ValueId bias = ir::kNoValue);
  // Final norm output -> logits for the requested rows.
  void lm_head(ir::ValueId hidden, ir::ValueId head_weight);

  // The Llama-style second half of decoder layer `layer`: x + down(silu(gate(rms(x))) * up(rms(x))),
  // reading model.layers.N.{post_attention_layernorm, mlp.gate_proj, mlp.up_proj, mlp.down_proj}.
  Expected<ir::ValueId> swiglu_mlp_block(int64_t layer, ir::ValueId x, bool bias);
  // model.norm, then logits through lm_head.weight (or the embedding when tied); Baichuan2's
  // normalised head divides each row by its norm first.
  Status rms_norm_and_head(ir::ValueId x, ir::ValueId embed, bool normalize_head);

 private:
  const HfCheckpoint& ckpt_;
  ir::Graph& graph_;
  ir::ValueId ids_ = ir::kNoValue, positions_ = ir::kNoValue, logit_rows_ = ir::kNoValue;
};

// The Llama-style decoder used by Llama, Mistral and Qwen2: pre-RMSNorm, rotary attention with
// separate q/k/v projections, SwiGLU MLP. Tensor names follow transformers' LlamaModel.
Expected<ir::Graph> build_llama_style(const HfCheckpoint& checkpoint);

}  // namespace kiln::formats
