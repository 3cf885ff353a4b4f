#include "formats/hf/hf_config.h"

#include "base/mapped_file.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

namespace kiln::formats {
namespace {

using nlohmann::json;

// Sizes beyond these are not real models; rejecting them keeps every later byte count far from
// int64 overflow.
constexpr int64_t kMaxDim = int64_t{1} << 24;
constexpr int64_t kMaxPositions = int64_t{1} << 30;

struct ArchitectureName {
  const char* name;
  const char* model_type;
  Architecture architecture;
};

constexpr ArchitectureName kArchitectures[] = {
    {"LlamaForCausalLM", "llama", Architecture::kLlama},
    {"MistralForCausalLM", "mistral", Architecture::kMistral},
    {"Qwen2ForCausalLM", "qwen2", Architecture::kQwen2},
    {"GPT2LMHeadModel", "gpt2", Architecture::kGpt2},
    {"BaichuanForCausalLM", "baichuan", Architecture::kBaichuan},
    {"BaiChuanForCausalLM", "baichuan", Architecture::kBaichuan},
};

std::string list_supported() {
  std::string s;
  for (const ArchitectureName& a : kArchitectures) {
    if (!s.empty()) s += ", ";
    s += a.name;
  }
  return s;
}

// Typed access to one JSON object (the config, or a nested rope object) with error messages that
// name the key as the user wrote it ("rope_scaling.factor").
class Fields {
 public:
  Fields(const json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  // Present and not null.
  bool has(const char* key) const {
    auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  const json* get(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string name(const char* key) const { return "'" + prefix_ + key + "'"; }

  Status missing(const char* key) const {
    return invalid_argument("config.json: missing required key " + name(key));
  }
  Status bad(const char* key, const std::string& expected) const {
    const json* v = get(key);
    return invalid_argument("config.json: " + name(key) + " must be " + expected + ", got " +
                            (v != nullptr ? v->dump() : std::string("null")));
  }

  // An integer (an integral float such as 4096.0 is accepted too); `fallback` when absent.
  Status read_int(const char* key, int64_t& out, std::optional<int64_t> fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      if (!fallback) return missing(key);
      out = *fallback;
      return Status::ok();
    }
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t{1} << 62) {
        return bad(key, "a reasonable integer");
      }
      out = v->get<int64_t>();
      return Status::ok();
    }
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 4.0e18) {
        out = static_cast<int64_t>(d);
        return Status::ok();
      }
    }
    return bad(key, "an integer");
  }

  // A positive integer no larger than `max`.
  Status read_size(const char* key, int64_t& out, std::optional<int64_t> fallback,
                   int64_t max = kMaxDim) const {
    KILN_RETURN_IF_ERROR(read_int(key, out, fallback));
    if (out <= 0) {
      return invalid_argument("config.json: " + name(key) + " must be positive, got " +
                              std::to_string(out));
    }
    if (out > max) {
      return invalid_argument("config.json: " + name(key) + " = " + std::to_string(out) +
                              " is larger than any supported model (limit " + std::to_string(max) +
                              ")");
    }
    return Status::ok();
  }

  Status read_double(const char* key, double& out, std::optional<double> fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      if (!fallback) return missing(key);
      out = *fallback;
      return Status::ok();
    }
    if (!v->is_number() || !std::isfinite(v->get<double>())) return bad(key, "a number");
    out = v->get<double>();
    return Status::ok();
  }

  Status read_positive_double(const char* key, double& out, std::optional<double> fallback) const {
    KILN_RETURN_IF_ERROR(read_double(key, out, fallback));
    if (!(out > 0)) return bad(key, "positive");
    return Status::ok();
  }

  Status read_bool(const char* key, bool& out, bool fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      out = fallback;
      return Status::ok();
    }
    if (!v->is_boolean()) return bad(key, "true or false");
    out = v->get<bool>();
    return Status::ok();
  }

  Status read_string(const char* key, std::string& out, std::optional<std::string> fallback) const {
    const json* v = get(key);
    if (v == nullptr) {
      if (!fallback) return missing(key);
      out = *fallback;
      return Status::ok();
    }
    if (!v->is_string()) return bad(key, "a string");
    out = v->get<std::string>();
    return Status::ok();
  }

 private:
  const json& object_;
  std::string prefix_;
};

Expected<Architecture> pick_architecture(const Fields& f, std::string& name) {
  if (const json* archs = f.get("architectures")) {
    if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
      return f.bad("architectures", "a non-empty list of class names");
    }
    name = (*archs)[0].get<std::string>();
    for (const ArchitectureName& a : kArchitectures) {
      if (name == a.name) return a.architecture;
    }
    return unimplemented("config.json: architecture '" + name +
                         "' is not supported; supported: " + list_supported());
  }
  // Some hand-written configs omit "architectures"; model_type then identifies the family.
  std::string model_type;
  if (!f.has("model_type")) {
    return invalid_argument("config.json: has neither 'architectures' nor 'model_type'; "
                            "expected e.g. \"architectures\": [\"LlamaForCausalLM\"]");
  }
  KILN_RETURN_IF_ERROR(f.read_string("model_type", model_type, std::nullopt));
  for (const ArchitectureName& a : kArchitectures) {
    if (model_type == a.model_type) {
      name = a.name;
      return a.architecture;
    }
  }
  return unimplemented("config.json: model_type '" + model_type +
                       "' is not supported; supported architectures: " + list_supported());
}

Status parse_source_dtype(const Fields& f, ModelConfig& c) {
  const char* key = f.has("dtype") ? "dtype" : "torch_dtype";
  KILN_RETURN_IF_ERROR(f.read_string(key, c.source_dtype, std::string()));
  if (c.source_dtype.empty() || c.source_dtype == "float32" || c.source_dtype == "float16" ||
      c.source_dtype == "bfloat16") {
    return Status::ok();
  }
  return unimplemented("config.json: '" + std::string(key) + "' = \"" + c.source_dtype +
                       "\" is not supported; expected float32, float16 or bfloat16");
}

Status reject_partial_rotary(const Fields& f) {
  double partial = 1.0;
  KILN_RETURN_IF_ERROR(f.read_double("partial_rotary_factor", partial, 1.0));
  if (partial != 1.0) {
    return unimplemented("config.json: " + f.name("partial_rotary_factor") + " = " +
                         std::to_string(partial) + " is not supported (only full rotary embeddings)");
  }
  return Status::ok();
}

// RoPE: 4.x "rope_theta" + "rope_scaling", or 5.x "rope_parameters".
Status parse_rope(const Fields& top, ModelConfig& c) {
  RopeConfig& rope = c.rope;
  KILN_RETURN_IF_ERROR(reject_partial_rotary(top));
  KILN_RETURN_IF_ERROR(top.read_positive_double("rope_theta", rope.theta, 10000.0));

  const char* scaling_key = top.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json* scaling = top.get(scaling_key);
  rope.original_max_position = c.max_position_embeddings;
  if (scaling == nullptr) return Status::ok();
  if (!scaling->is_object()) return top.bad(scaling_key, "a JSON object");
  Fields s(*scaling, std::string(scaling_key) + ".");
  KILN_RETURN_IF_ERROR(reject_partial_rotary(s));
  KILN_RETURN_IF_ERROR(s.read_positive_double("rope_theta", rope.theta, rope.theta));

  std::string type;
  const char* type_key = s.has("rope_type") ? "rope_type" : "type";
  KILN_RETURN_IF_ERROR(s.read_string(type_key, type, std::string("default")));
  if (type == "default") {
    rope.type = RopeType::kDefault;
    return Status::ok();
  }
  if (type == "linear") {
    rope.type = RopeType::kLinear;
  } else if (type == "dynamic") {
    rope.type = RopeType::kDynamic;
  } else if (type == "llama3") {
    rope.type = RopeType::kLlama3;
  } else {
    return unimplemented("config.json: " + s.name(type_key) + " = \"" + type +
                         "\" is not supported; supported: default, linear, dynamic, llama3");
  }
  KILN_RETURN_IF_ERROR(s.read_positive_double("factor", rope.factor, std::nullopt));
  if (rope.type == RopeType::kLlama3) {
    KILN_RETURN_IF_ERROR(s.read_positive_double("low_freq_factor", rope.low_freq_factor, std::nullopt));
    KILN_RETURN_IF_ERROR(s.read_positive_double("high_freq_factor", rope.high_freq_factor, std::nullopt));
    if (!(rope.high_freq_factor > rope.low_freq_factor)) {
      return invalid_argument("config.json: " + s.name("high_freq_factor") +
                              " must be larger than " + s.name("low_freq_factor"));
    }
    KILN_RETURN_IF_ERROR(s.read_size("original_max_position_embeddings", rope.original_max_position,
                                     std::nullopt, kMaxPositions));
  } else {
    KILN_RETURN_IF_ERROR(s.read_size("original_max_position_embeddings", rope.original_max_position,
                                     c.max_position_embeddings, kMaxPositions));
  }
  return Status::ok();
}

Status parse_llama_family(const Fields& f, ModelConfig& c) {
  const Architecture arch = c.architecture;
  KILN_RETURN_IF_ERROR(f.read_size("vocab_size", c.vocab_size, std::nullopt));
  KILN_RETURN_IF_ERROR(f.read_size("hidden_size", c.hidden_size, std::nullopt));
  KILN_RETURN_IF_ERROR(f.read_size("intermediate_size", c.intermediate_size, std::nullopt));
  KILN_RETURN_IF_ERROR(f.read_size("num_hidden_layers", c.num_layers, std::nullopt));
  KILN_RETURN_IF_ERROR(f.read_size("num_attention_heads", c.num_heads, std::nullopt));
  KILN_RETURN_IF_ERROR(f.read_size("num_key_value_heads", c.num_kv_heads, c.num_heads));
  // head_dim may be given explicitly (Mistral-Nemo: 5120 / 32 heads, head_dim 128); only the
  // default needs num_attention_heads to divide hidden_size.
  if (!f.has("head_dim") && c.hidden_size % c.num_heads != 0) {
    return invalid_argument("config.json: 'num_attention_heads' = " + std::to_string(c.num_heads) +
                            " does not divide 'hidden_size' = " + std::to_string(c.hidden_size));
  }
  KILN_RETURN_IF_ERROR(f.read_size("head_dim", c.head_dim, c.hidden_size / c.num_heads));
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument("config.json: 'num_key_value_heads' = " + std::to_string(c.num_kv_heads) +
                            " does not divide 'num_attention_heads' = " + std::to_string(c.num_heads));
  }
  KILN_RETURN_IF_ERROR(f.read_positive_double("rms_norm_eps", c.norm_eps, 1e-6));
  KILN_RETURN_IF_ERROR(f.read_bool("tie_word_embeddings", c.tie_word_embeddings, false));

  KILN_RETURN_IF_ERROR(f.read_string("hidden_act", c.hidden_act, std::string("silu")));
  if (c.hidden_act != "silu") {
    return unimplemented("config.json: 'hidden_act' = \"" + c.hidden_act + "\" is not supported for " +
                         c.architecture_name + "; only \"silu\"");
  }

  // Context length. Defaults are those of the transformers configuration classes.
  if (arch == Architecture::kBaichuan) {
    if (f.has("max_position_embeddings")) {
      KILN_RETURN_IF_ERROR(f.read_size("max_position_embeddings", c.max_position_embeddings,
                                       std::nullopt, kMaxPositions));
    } else if (f.has("model_max_length")) {
      c.alibi = true;
      KILN_RETURN_IF_ERROR(f.read_size("model_max_length", c.max_position_embeddings, std::nullopt,
                                       kMaxPositions));
    } else {
      return invalid_argument(
          "config.json: a Baichuan config needs 'max_position_embeddings' (7B, RoPE) or "
          "'model_max_length' (13B, ALiBi); it has neither");
    }
    if (c.num_kv_heads != c.num_heads) {
      return unimplemented("config.json: 'num_key_value_heads' = " + std::to_string(c.num_kv_heads) +
                           " differs from 'num_attention_heads'; Baichuan's fused W_pack needs them equal");
    }
    c.normalized_lm_head = f.has("z_loss_weight") || c.vocab_size == 125696;
  } else {
    const int64_t fallback = arch == Architecture::kLlama     ? 2048
                             : arch == Architecture::kQwen2 ? 32768
                                                            : 4096 * 32;
    KILN_RETURN_IF_ERROR(f.read_size("max_position_embeddings", c.max_position_embeddings, fallback,
                                     kMaxPositions));
  }

  if (!c.alibi) {
    KILN_RETURN_IF_ERROR(parse_rope(f, c));
    if (c.head_dim % 2 != 0) {
      return invalid_argument("config.json: head_dim = " + std::to_string(c.head_dim) +
                              " is odd; rotary embeddings need an even head_dim");
    }
  }

  switch (arch) {
    case Architecture::kLlama:
      KILN_RETURN_IF_ERROR(f.read_bool("attention_bias", c.attention_bias, false));
      KILN_RETURN_IF_ERROR(f.read_bool("mlp_bias", c.mlp_bias, false));
      break;
    case Architecture::kMistral:
      if (f.has("sliding_window")) {
        KILN_RETURN_IF_ERROR(f.read_size("sliding_window", c.sliding_window, std::nullopt, kMaxPositions));
      }
      break;
    case Architecture::kQwen2: {
      c.attention_bias = true;
      bool use_sliding = false;
      KILN_RETURN_IF_ERROR(f.read_bool("use_sliding_window", use_sliding, false));
      if (!use_sliding || !f.has("sliding_window")) break;
      int64_t window = 0;
      KILN_RETURN_IF_ERROR(f.read_size("sliding_window", window, std::nullopt, kMaxPositions));
      int64_t sliding_layers = 0;
      if (const json* types = f.get("layer_types")) {
        if (!types->is_array()) return f.bad("layer_types", "a list");
        for (const json& t : *types) {
          if (t == "sliding_attention") ++sliding_layers;
        }
      } else {
        int64_t max_window_layers = 0;
        KILN_RETURN_IF_ERROR(f.read_int("max_window_layers", max_window_layers, 28));
        if (max_window_layers < 0) return f.bad("max_window_layers", "non-negative");
        sliding_layers = std::max<int64_t>(0, c.num_layers - max_window_layers);
      }
      if (sliding_layers == c.num_layers) {
        c.sliding_window = window;
      } else if (sliding_layers != 0) {
        return unimplemented("config.json: 'use_sliding_window' is true for " +
                             std::to_string(sliding_layers) + " of " + std::to_string(c.num_layers) +
                             " layers; models mixing sliding-window and full attention are not supported");
      }
      break;
    }
    case Architecture::kBaichuan:
    case Architecture::kGpt2:
      break;
  }
  return Status::ok();
}

Status parse_gpt2(const Fields& f, ModelConfig& c) {
  KILN_RETURN_IF_ERROR(f.read_size("vocab_size", c.vocab_size, 50257));
  KILN_RETURN_IF_ERROR(f.read_size("n_embd", c.hidden_size, 768));
  KILN_RETURN_IF_ERROR(f.read_size("n_layer", c.num_layers, 12));
  KILN_RETURN_IF_ERROR(f.read_size("n_head", c.num_heads, 12));
  KILN_RETURN_IF_ERROR(f.read_size("n_positions", c.max_position_embeddings, 1024, kMaxPositions));
  KILN_RETURN_IF_ERROR(f.read_size("n_inner", c.intermediate_size, 4 * c.hidden_size));
  if (c.hidden_size % c.num_heads != 0) {
    return invalid_argument("config.json: 'n_head' = " + std::to_string(c.num_heads) +
                            " does not divide 'n_embd' = " + std::to_string(c.hidden_size));
  }
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden_size / c.num_heads;
  KILN_RETURN_IF_ERROR(f.read_positive_double("layer_norm_epsilon", c.norm_eps, 1e-5));
  KILN_RETURN_IF_ERROR(f.read_bool("tie_word_embeddings", c.tie_word_embeddings, true));
  KILN_RETURN_IF_ERROR(f.read_string("activation_function", c.hidden_act, std::string("gelu_new")));
  if (c.hidden_act != "gelu_new" && c.hidden_act != "gelu_pytorch_tanh") {
    return unimplemented("config.json: 'activation_function' = \"" + c.hidden_act +
                         "\" is not supported for GPT-2; expected gelu_new or gelu_pytorch_tanh");
  }
  c.attention_bias = true;
  c.mlp_bias = true;

  struct Flag {
    const char* key;
    bool unsupported_value;
    const char* why;
  };
  constexpr Flag kFlags[] = {
      {"scale_attn_by_inverse_layer_idx", true, "per-layer attention scaling"},
      {"reorder_and_upcast_attn", true, "reordered, upcast attention"},
      {"add_cross_attention", true, "cross-attention (encoder-decoder use)"},
      {"scale_attn_weights", false, "unscaled attention"},
  };
  for (const Flag& flag : kFlags) {
    bool value = !flag.unsupported_value;
    KILN_RETURN_IF_ERROR(f.read_bool(flag.key, value, !flag.unsupported_value));
    if (value == flag.unsupported_value) {
      return unimplemented("config.json: '" + std::string(flag.key) + "' = " +
                           (value ? "true" : "false") + " is not supported (" + flag.why + ")");
    }
  }
  return Status::ok();
}

}  // namespace

std::string_view to_string(Architecture architecture) {
  switch (architecture) {
    case Architecture::kLlama: return "llama";
    case Architecture::kMistral: return "mistral";
    case Architecture::kQwen2: return "qwen2";
    case Architecture::kGpt2: return "gpt2";
    case Architecture::kBaichuan: return "baichuan";
  }
  return "unknown";
}

std::string_view to_string(RopeType type) {
  switch (type) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kDynamic: return "dynamic";
    case RopeType::kLlama3: return "llama3";
  }
  return "unknown";
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> names;
  for (const ArchitectureName& a : kArchitectures) names.emplace_back(a.name);
  return names;
}

Expected<ModelConfig> parse_model_config(const nlohmann::json& config) {
  if (!config.is_object()) return invalid_argument("config.json: top level is not a JSON object");
  Fields f(config, "");
  ModelConfig c;
  KILN_ASSIGN_OR_RETURN(c.architecture, pick_architecture(f, c.architecture_name));

  if (const json* q = f.get("quantization_config")) {
    std::string method = q->is_object() && q->contains("quant_method") ? (*q)["quant_method"].dump() : "?";
    return unimplemented("config.json: pre-quantized checkpoints are not supported (quantization_config "
                         "quant_method " + method + "); use the original float checkpoint, Kiln "
                         "quantizes at build time");
  }
  KILN_RETURN_IF_ERROR(parse_source_dtype(f, c));
  if (c.architecture == Architecture::kGpt2) {
    KILN_RETURN_IF_ERROR(parse_gpt2(f, c));
  } else {
    KILN_RETURN_IF_ERROR(parse_llama_family(f, c));
  }
  c.raw = config;
  return c;
}

Expected<ModelConfig> load_model_config(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  json config = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) {
    return invalid_argument(path + ": not valid JSON");
  }
  Expected<ModelConfig> parsed = parse_model_config(config);
  if (!parsed) {
    // Messages name "config.json"; say which one.
    std::string message = parsed.status().message();
    const std::string generic = "config.json: ";
    if (message.rfind(generic, 0) == 0) message.erase(0, generic.size());
    return Status(parsed.status().code(), path + ": " + message);
  }
  return parsed;
}

}  // namespace kiln::formats
