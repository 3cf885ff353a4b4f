#include "formats/hf/builder_context.h"

#include <cmath>

namespace kiln::formats {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kDynamic: return "dynamic";
    case RopeType::kLlama3: return "llama3";
  }
  return "default";
}

}  // namespace

Expected<ir::ValueId> BuilderContext::optional_weight(const std::string& name,
                                                      const std::vector<int64_t>& shape) {
  const TensorView* t = ckpt_.find(name);
  if (t == nullptr) return ir::kNoValue;
  return weight(name, shape);
}

Expected<ir::ValueId> BuilderContext::weight(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorView* t = ckpt_.find(name);
  if (t == nullptr) {
    return not_found("tensor '" + name + "' is missing from the checkpoint in " + ckpt_.dir() + " (" +
                     config().architecture_name + " with " + std::to_string(config().num_layers) +
                     " layers needs it)");
  }
  if (t->shape != shape) {
    return invalid_argument("tensor '" + name + "' has shape " + shape_str(t->shape) + " but " +
                            config().architecture_name + " with this config.json needs " + shape_str(shape));
  }
  if (t->dtype != TensorDType::kF32 && t->dtype != TensorDType::kF16 && t->dtype != TensorDType::kBF16) {
    return invalid_argument("tensor '" + name + "' is stored as an unsupported dtype; kiln reads F32, F16 and BF16");
  }
  ir::WeightEntry entry;
  entry.shape = shape;
  const HfCheckpoint* ckpt = &ckpt_;
  entry.load = [ckpt, name, shape]() { return ckpt->load(name, shape); };
  return graph_.add_weight(name, std::move(entry));
}

void BuilderContext::add_inputs() {
  ids_ = graph_.add_value("ids", ir::DType::kI32, {ir::kTokens});
  positions_ = graph_.add_value("positions", ir::DType::kI32, {ir::kTokens});
  logit_rows_ = graph_.add_value("logit_rows", ir::DType::kI32, {ir::kRows});
  graph_.inputs() = {ids_, positions_, logit_rows_};
}

ir::ValueId BuilderContext::linear(const std::string& name, ir::ValueId x, ir::ValueId w, ir::ValueId bias) {
  std::vector<ir::ValueId> inputs = {x, w};
  if (bias != ir::kNoValue) inputs.push_back(bias);
  return graph_.add_node1("matmul", name, inputs);
}

ir::ValueId BuilderContext::attention(const std::string& prefix, int64_t layer, ir::ValueId q, ir::ValueId k,
                                      ir::ValueId v) {
  const ModelConfig& c = config();
  const bool uses_rope = c.architecture != Architecture::kGpt2 && !c.alibi;
  if (uses_rope) {
    std::map<std::string, ir::Attr> rope = {
        {"head_dim", c.head_dim},
        {"rotary_dim", c.head_dim},
        {"theta", c.rope.theta},
        {"type", std::string(rope_type_name(c.rope.type))},
        {"factor", c.rope.factor},
        {"low_freq_factor", c.rope.low_freq_factor},
        {"high_freq_factor", c.rope.high_freq_factor},
        {"original_max_position", c.rope.original_max_position},
        {"max_position", c.max_position_embeddings},
    };
    auto rope_q = rope;
    rope_q["num_heads"] = c.num_heads;
    auto rope_k = rope;
    rope_k["num_heads"] = c.num_kv_heads;
    q = graph_.add_node1("rope", prefix + ".rope_q", {q, positions_}, rope_q);
    k = graph_.add_node1("rope", prefix + ".rope_k", {k, positions_}, rope_k);
  }
  return graph_.add_node1("attention", prefix + ".attn", {q, k, v},
                          {{"layer", layer},
                           {"num_heads", c.num_heads},
                           {"num_kv_heads", c.num_kv_heads},
                           {"head_dim", c.head_dim},
                           {"scale", 1.0 / std::sqrt(static_cast<double>(c.head_dim))},
                           {"sliding_window", c.sliding_window},
                           {"alibi", int64_t{c.alibi ? 1 : 0}}});
}

Expected<ir::ValueId> BuilderContext::swiglu_mlp_block(int64_t layer, ir::ValueId x, bool bias) {
  const ModelConfig& c = config();
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  const std::string p = "model.layers." + std::to_string(layer);
  const std::string n = "layers." + std::to_string(layer);
  auto optional_bias = [&](const std::string& name, int64_t size) -> Expected<ir::ValueId> {
    if (!bias) return ir::kNoValue;
    return weight(name, {size});
  };
  KILN_ASSIGN_OR_RETURN(ir::ValueId ln, weight(p + ".post_attention_layernorm.weight", {h}));
  KILN_ASSIGN_OR_RETURN(ir::ValueId wg, weight(p + ".mlp.gate_proj.weight", {inter, h}));
  KILN_ASSIGN_OR_RETURN(ir::ValueId wu, weight(p + ".mlp.up_proj.weight", {inter, h}));
  KILN_ASSIGN_OR_RETURN(ir::ValueId wd, weight(p + ".mlp.down_proj.weight", {h, inter}));
  KILN_ASSIGN_OR_RETURN(ir::ValueId bg, optional_bias(p + ".mlp.gate_proj.bias", inter));
  KILN_ASSIGN_OR_RETURN(ir::ValueId bu, optional_bias(p + ".mlp.up_proj.bias", inter));
  KILN_ASSIGN_OR_RETURN(ir::ValueId bd, optional_bias(p + ".mlp.down_proj.bias", h));
  ir::ValueId m = graph_.add_node1("rms_norm", n + ".post_attention_norm", {x, ln}, {{"eps", c.norm_eps}});
  ir::ValueId g = linear(n + ".gate_proj", m, wg, bg);
  ir::ValueId u = linear(n + ".up_proj", m, wu, bu);
  ir::ValueId s = graph_.add_node1("silu", n + ".act", {g});
  ir::ValueId gu = graph_.add_node1("mul", n + ".gate_mul", {s, u});
  ir::ValueId d = linear(n + ".down_proj", gu, wd, bd);
  return graph_.add_node1("add", n + ".mlp_residual", {x, d});
}

Status BuilderContext::rms_norm_and_head(ir::ValueId x, ir::ValueId embed, bool normalize_head) {
  const ModelConfig& c = config();
  KILN_ASSIGN_OR_RETURN(ir::ValueId norm, weight("model.norm.weight", {c.hidden_size}));
  x = graph_.add_node1("rms_norm", "final_norm", {x, norm}, {{"eps", c.norm_eps}});
  ir::ValueId head = embed;
  if (!c.tie_word_embeddings) {
    KILN_ASSIGN_OR_RETURN(head, weight("lm_head.weight", {c.vocab_size, c.hidden_size}));
  }
  if (normalize_head) head = graph_.add_node1("normalize_rows", "lm_head.normalize", {head});
  lm_head(x, head);
  return Status::ok();
}

void BuilderContext::lm_head(ir::ValueId hidden, ir::ValueId head_weight) {
  ir::ValueId rows = graph_.add_node1("gather_rows", "select_rows", {hidden, logit_rows_});
  ir::ValueId logits = graph_.add_node1("matmul", "lm_head", {rows, head_weight});
  graph_.value(logits).name = "logits";
  graph_.outputs() = {logits};
}

}  // namespace kiln::formats
