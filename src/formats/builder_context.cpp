#include "formats/builder_context.h"

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

void BuilderContext::lm_head(ir::ValueId hidden, ir::ValueId head_weight) {
  ir::ValueId rows = graph_.add_node1("gather_rows", "select_rows", {hidden, logit_rows_});
  ir::ValueId logits = graph_.add_node1("matmul", "lm_head", {rows, head_weight});
  graph_.value(logits).name = "logits";
  graph_.outputs() = {logits};
}

}  // namespace kiln::formats
