// ModelConfig: the parts of a Hugging Face config.json that the LLM graph builders need, parsed
// and validated once, with every architecture's defaults and key spellings resolved here so the
// builders never look at raw JSON.
//
// Both generations of the config format are read:
//   transformers 4.x: "rope_theta", "rope_scaling": {"type"|"rope_type", "factor", ...}, "torch_dtype"
//   transformers 5.x: "rope_parameters": {"rope_theta", "rope_type", "factor", ...}, "dtype"
//
// Architecture rules (from the reference implementations' configuration classes):
//   Llama / Mistral / Qwen2: hidden_act must be "silu"; num_key_value_heads defaults to
//     num_attention_heads; head_dim defaults to hidden_size / num_attention_heads.
//     attention_bias: Llama reads "attention_bias" (biases on q, k, v and o); Qwen2 always has
//     q/k/v biases and no o bias; Mistral and Baichuan have none. mlp_bias: Llama "mlp_bias".
//     sliding_window: Mistral "sliding_window" (null = none); Qwen2 only when "use_sliding_window"
//     is true and every layer uses it (max_window_layers == 0, or "layer_types" all sliding); a
//     model mixing full and sliding layers is rejected.
//   GPT-2: n_embd, n_layer, n_head, n_positions, n_inner (null = 4 * n_embd), vocab_size,
//     activation_function ("gelu_new" or "gelu_pytorch_tanh"), layer_norm_epsilon. Always has
//     biases on attention and MLP; embeddings tied unless "tie_word_embeddings": false.
//     scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, add_cross_attention = true and
//     scale_attn_weights = false are rejected.
//   Baichuan (architectures "BaichuanForCausalLM", or "BaiChuanForCausalLM" for Baichuan-7B):
//     - position encoding: the RoPE models (Baichuan-7B, Baichuan2-7B) have
//       "max_position_embeddings"; the ALiBi models (Baichuan-13B, Baichuan2-13B) have only
//       "model_max_length" -> alibi = true, and max_position_embeddings = model_max_length.
//     - Baichuan2 normalises each lm_head row before the product (NormHead). Baichuan2 configs
//       carry "z_loss_weight" (Baichuan2-7B) and all Baichuan2 models have vocab_size 125696,
//       while Baichuan 1 has 64000 -> normalized_lm_head = has z_loss_weight || vocab == 125696.
//     - q/k/v are one fused W_pack weight, so num_key_value_heads must equal num_attention_heads.
// Rejected everywhere, with the key and value named: unknown architectures (the message lists the
// supported ones), rope types other than default/linear/dynamic/llama3, partial rotary
// embeddings, pre-quantized checkpoints (quantization_config), non-positive or absurd sizes,
// num_attention_heads not dividing hidden_size (when head_dim is not given), num_key_value_heads
// not dividing num_attention_heads, odd head_dim with RoPE, and unknown source dtypes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kiln::formats {

enum class Architecture { kLlama, kMistral, kQwen2, kGpt2, kBaichuan };
enum class RopeType { kDefault, kLinear, kDynamic, kLlama3 };

std::string_view to_string(Architecture architecture);  // "llama", "mistral", ...
std::string_view to_string(RopeType type);              // "default", "linear", ...
// The `architectures[0]` values this parser accepts, e.g. "LlamaForCausalLM".
std::vector<std::string> supported_architectures();

struct RopeConfig {
  double theta = 10000;
  RopeType type = RopeType::kDefault;
  double factor = 1;  // linear / dynamic / llama3
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  // The context length the model was trained with: rope's own
  // "original_max_position_embeddings" if given, else max_position_embeddings (0 for GPT-2 and
  // ALiBi models, which have no RoPE).
  int64_t original_max_position = 0;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // architectures[0], e.g. "LlamaForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double norm_eps = 1e-6;  // rms_norm_eps, or layer_norm_epsilon for GPT-2
  RopeConfig rope;
  bool tie_word_embeddings = false;  // default per architecture: GPT-2 true, others false
  bool attention_bias = false;       // see the architecture rules above for which projections
  bool mlp_bias = false;
  int64_t sliding_window = 0;  // 0 = full attention
  std::string hidden_act;      // "silu", "gelu_new", "gelu_pytorch_tanh"
  std::string source_dtype;    // "float32" / "float16" / "bfloat16" from torch_dtype or dtype; "" if absent
  bool alibi = false;               // Baichuan 13B: ALiBi instead of RoPE
  bool normalized_lm_head = false;  // Baichuan2: lm_head rows are L2-normalised
  nlohmann::json raw;               // the whole config.json
};

// Validates and resolves a parsed config.json. Errors name the offending key and value.
Expected<ModelConfig> parse_model_config(const nlohmann::json& config);

// Reads and parses a config.json file; errors are prefixed with its path.
Expected<ModelConfig> load_model_config(const std::string& path);

}  // namespace kiln::formats
