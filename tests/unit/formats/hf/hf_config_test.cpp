#include "formats/hf/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "unit/formats/formats_test_util.h"

namespace kiln::formats {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

ModelConfig parse_ok(const std::string& text) {
  Expected<ModelConfig> c = parse_model_config(json::parse(text));
  EXPECT_TRUE(c.has_value()) << c.status().message();
  return c.has_value() ? *c : ModelConfig{};
}

std::string config_error(const json& config) {
  Expected<ModelConfig> c = parse_model_config(config);
  EXPECT_FALSE(c.has_value());
  return c.has_value() ? std::string() : c.status().message();
}

// meta-llama/Llama-2-7b-hf, transformers 4.x.
constexpr const char* kLlama2 = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false,
  "torch_dtype": "float16", "transformers_version": "4.31.0.dev0", "use_cache": true,
  "vocab_size": 32000})";

// meta-llama/Llama-3.1-8B-Instruct, transformers 4.x.
constexpr const char* kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256})";

// The same model as transformers 5.x writes it.
constexpr const char* kLlama31V5 = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 128000,
  "dtype": "bfloat16", "eos_token_id": 128009, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_theta": 500000.0,
                      "rope_type": "llama3"},
  "tie_word_embeddings": false, "transformers_version": "5.0.0", "vocab_size": 128256})";

// mistralai/Mistral-7B-v0.1.
constexpr const char* kMistral = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

// Qwen/Qwen2-7B-Instruct.
constexpr const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": 3584, "initializer_range": 0.02,
  "intermediate_size": 18944, "max_position_embeddings": 32768, "max_window_layers": 28,
  "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28,
  "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 131072, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.41.2", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 152064})";

// Qwen/Qwen2.5-0.5B as transformers 5.x writes it.
constexpr const char* kQwen2V5 = R"({
  "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "dtype": "bfloat16",
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
  "layer_types": ["full_attention", "full_attention"], "max_position_embeddings": 32768,
  "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
  "num_hidden_layers": 2, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": null,
  "tie_word_embeddings": true, "use_sliding_window": false, "vocab_size": 151936})";

// openai-community/gpt2.
constexpr const char* kGpt2 = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
  "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
  "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null,
  "summary_first_dropout": 0.1, "summary_proj_to_labels": true, "summary_type": "cls_index",
  "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true,
  "max_length": 50}}, "vocab_size": 50257})";

// baichuan-inc/Baichuan-7B (RoPE).
constexpr const char* kBaichuan7B = R"({
  "architectures": ["BaiChuanForCausalLM"], "auto_map": {"AutoConfig": "configuration_baichuan.BaiChuanConfig",
  "AutoModelForCausalLM": "modeling_baichuan.BaiChuanForCausalLM"}, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "baichuan",
  "num_attention_heads": 32, "num_hidden_layers": 32, "pad_token_id": 0, "rms_norm_eps": 1e-06,
  "tie_word_embeddings": false, "torch_dtype": "float32", "transformers_version": "4.29.1",
  "use_cache": true, "vocab_size": 64000})";

// baichuan-inc/Baichuan-13B-Chat (ALiBi).
constexpr const char* kBaichuan13B = R"({
  "architectures": ["BaichuanForCausalLM"], "auto_map": {"AutoConfig": "configuration_baichuan.BaichuanConfig",
  "AutoModelForCausalLM": "modeling_baichuan.BaichuanForCausalLM"}, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
  "intermediate_size": 13696, "model_max_length": 4096, "model_type": "baichuan",
  "num_attention_heads": 40, "num_hidden_layers": 40, "pad_token_id": 0, "rms_norm_eps": 1e-06,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.29.2",
  "use_cache": true, "vocab_size": 64000})";

// baichuan-inc/Baichuan2-7B-Chat (RoPE, NormHead).
constexpr const char* kBaichuan2_7B = R"({
  "architectures": ["BaichuanForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_max_length": 4096,
  "model_type": "baichuan", "num_attention_heads": 32, "num_hidden_layers": 32, "pad_token_id": 0,
  "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.29.2", "use_cache": true, "vocab_size": 125696, "z_loss_weight": 0})";

// baichuan-inc/Baichuan2-13B-Chat (ALiBi, NormHead).
constexpr const char* kBaichuan2_13B = R"({
  "architectures": ["BaichuanForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "gradient_checkpointing": false, "hidden_act": "silu", "hidden_size": 5120,
  "initializer_range": 0.02, "intermediate_size": 13696, "model_max_length": 4096,
  "model_type": "baichuan", "num_attention_heads": 40, "num_hidden_layers": 40, "pad_token_id": 0,
  "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.29.2", "use_cache": true, "vocab_size": 125696})";

TEST(HfConfigTest, Llama2) {
  const ModelConfig c = parse_ok(kLlama2);
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 11008);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_EQ(c.rope.original_max_position, 4096);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.source_dtype, "float16");
  EXPECT_FALSE(c.alibi);
  EXPECT_FALSE(c.normalized_lm_head);
  EXPECT_EQ(c.raw.at("pretraining_tp"), 1);
}

TEST(HfConfigTest, Llama31RopeScalingIn4xAnd5xStyle) {
  for (const char* text : {kLlama31, kLlama31V5}) {
    const ModelConfig c = parse_ok(text);
    EXPECT_EQ(c.num_kv_heads, 8);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.max_position_embeddings, 131072);
    EXPECT_DOUBLE_EQ(c.rope.theta, 500000);
    EXPECT_EQ(c.rope.type, RopeType::kLlama3);
    EXPECT_DOUBLE_EQ(c.rope.factor, 8);
    EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1);
    EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4);
    EXPECT_EQ(c.rope.original_max_position, 8192);
    EXPECT_EQ(c.source_dtype, "bfloat16");
  }
}

TEST(HfConfigTest, LlamaBiasesAndOlderRopeScalingSpelling) {
  json c = json::parse(kLlama2);
  c["attention_bias"] = true;
  c["mlp_bias"] = true;
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  Expected<ModelConfig> m = parse_model_config(c);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_TRUE(m->attention_bias);
  EXPECT_TRUE(m->mlp_bias);
  EXPECT_EQ(m->rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(m->rope.factor, 4);

  c["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  m = parse_model_config(c);
  ASSERT_TRUE(m.has_value()) << m.status().message();
  EXPECT_EQ(m->rope.type, RopeType::kDynamic);
  EXPECT_EQ(m->rope.original_max_position, 4096);
}

TEST(HfConfigTest, DefaultsForKvHeadsHeadDimAndContext) {
  json c = json::parse(kLlama2);
  c.erase("num_key_value_heads");
  c.erase("max_position_embeddings");
  c.erase("rms_norm_eps");
  c.erase("torch_dtype");
  const ModelConfig m = parse_ok(c.dump());
  EXPECT_EQ(m.num_kv_heads, 32);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-6);
  EXPECT_EQ(m.source_dtype, "");
}

TEST(HfConfigTest, ExplicitHeadDimNeedNotDivideHidden) {
  // mistralai/Mistral-Nemo-Base-2407: 5120 / 32 heads, head_dim 128.
  json c = json::parse(kMistral);
  c["hidden_size"] = 5120;
  c["head_dim"] = 128;
  c["sliding_window"] = nullptr;
  const ModelConfig m = parse_ok(c.dump());
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.sliding_window, 0);
}

TEST(HfConfigTest, Mistral) {
  const ModelConfig c = parse_ok(kMistral);
  EXPECT_EQ(c.architecture, Architecture::kMistral);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FALSE(c.attention_bias);
}

TEST(HfConfigTest, Qwen2In4xAnd5xStyle) {
  const ModelConfig c = parse_ok(kQwen2);
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.sliding_window, 0) << "use_sliding_window is false";
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_FALSE(c.tie_word_embeddings);

  const ModelConfig v5 = parse_ok(kQwen2V5);
  EXPECT_EQ(v5.head_dim, 64);
  EXPECT_TRUE(v5.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(v5.rope.theta, 1e6);
  EXPECT_EQ(v5.rope.type, RopeType::kDefault);
  EXPECT_EQ(v5.source_dtype, "bfloat16");
  EXPECT_EQ(v5.sliding_window, 0);
}

TEST(HfConfigTest, Qwen2SlidingWindowOnlyWhenEveryLayerUsesIt) {
  json c = json::parse(kQwen2);
  c["use_sliding_window"] = true;
  c["sliding_window"] = 4096;
  c["max_window_layers"] = 0;
  EXPECT_EQ(parse_ok(c.dump()).sliding_window, 4096);
  c["max_window_layers"] = 28;
  EXPECT_EQ(parse_ok(c.dump()).sliding_window, 0);
  c["max_window_layers"] = 14;
  EXPECT_THAT(config_error(c), HasSubstr("14 of 28 layers"));

  json v5 = json::parse(kQwen2V5);
  v5["use_sliding_window"] = true;
  v5["sliding_window"] = 1024;
  v5["layer_types"] = {"sliding_attention", "sliding_attention"};
  EXPECT_EQ(parse_ok(v5.dump()).sliding_window, 1024);
  v5["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_THAT(config_error(v5), HasSubstr("mixing"));
}

TEST(HfConfigTest, Gpt2) {
  const ModelConfig c = parse_ok(kGpt2);
  EXPECT_EQ(c.architecture, Architecture::kGpt2);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_layers, 12);
  EXPECT_EQ(c.num_heads, 12);
  EXPECT_EQ(c.num_kv_heads, 12);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_EQ(c.hidden_act, "gelu_new");
  EXPECT_EQ(c.source_dtype, "");

  json with_inner = json::parse(kGpt2);
  with_inner["n_inner"] = 1000;
  with_inner["activation_function"] = "gelu_pytorch_tanh";
  with_inner["dtype"] = "float32";
  const ModelConfig m = parse_ok(with_inner.dump());
  EXPECT_EQ(m.intermediate_size, 1000);
  EXPECT_EQ(m.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(m.source_dtype, "float32");
}

TEST(HfConfigTest, Gpt2RejectsUnsupportedVariants) {
  for (const char* key : {"scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"}) {
    json c = json::parse(kGpt2);
    c[key] = true;
    EXPECT_THAT(config_error(c), HasSubstr(key));
    c[key] = false;
    EXPECT_TRUE(parse_model_config(c).has_value());
  }
  json c = json::parse(kGpt2);
  c["activation_function"] = "relu";
  EXPECT_THAT(config_error(c), HasSubstr("'activation_function' = \"relu\""));
  c = json::parse(kGpt2);
  c["scale_attn_weights"] = false;
  EXPECT_THAT(config_error(c), HasSubstr("scale_attn_weights"));
  c = json::parse(kGpt2);
  c["n_head"] = 7;
  EXPECT_THAT(config_error(c), HasSubstr("does not divide 'n_embd'"));
}

TEST(HfConfigTest, BaichuanVariants) {
  const ModelConfig b7 = parse_ok(kBaichuan7B);
  EXPECT_EQ(b7.architecture, Architecture::kBaichuan);
  EXPECT_EQ(b7.architecture_name, "BaiChuanForCausalLM");
  EXPECT_FALSE(b7.alibi);
  EXPECT_FALSE(b7.normalized_lm_head);
  EXPECT_EQ(b7.max_position_embeddings, 4096);
  EXPECT_EQ(b7.num_kv_heads, 32);
  EXPECT_DOUBLE_EQ(b7.rope.theta, 10000);

  const ModelConfig b13 = parse_ok(kBaichuan13B);
  EXPECT_TRUE(b13.alibi);
  EXPECT_FALSE(b13.normalized_lm_head);
  EXPECT_EQ(b13.max_position_embeddings, 4096);
  EXPECT_EQ(b13.head_dim, 128);

  const ModelConfig b2_7 = parse_ok(kBaichuan2_7B);
  EXPECT_FALSE(b2_7.alibi);
  EXPECT_TRUE(b2_7.normalized_lm_head);

  const ModelConfig b2_13 = parse_ok(kBaichuan2_13B);
  EXPECT_TRUE(b2_13.alibi);
  EXPECT_TRUE(b2_13.normalized_lm_head);
  EXPECT_EQ(b2_13.vocab_size, 125696);
  EXPECT_EQ(b2_13.intermediate_size, 13696);
  EXPECT_FALSE(b2_13.attention_bias);

  json neither = json::parse(kBaichuan13B);
  neither.erase("model_max_length");
  EXPECT_THAT(config_error(neither), HasSubstr("model_max_length"));
  json gqa = json::parse(kBaichuan13B);
  gqa["num_key_value_heads"] = 8;
  EXPECT_THAT(config_error(gqa), HasSubstr("W_pack"));
}

TEST(HfConfigTest, ArchitectureSelection) {
  json c = json::parse(kLlama2);
  c["architectures"] = {"FalconForCausalLM"};
  const std::string m = config_error(c);
  EXPECT_THAT(m, HasSubstr("'FalconForCausalLM' is not supported"));
  for (const std::string& name : supported_architectures()) EXPECT_THAT(m, HasSubstr(name));

  c.erase("architectures");
  EXPECT_EQ(parse_ok(c.dump()).architecture, Architecture::kLlama) << "falls back to model_type";
  c.erase("model_type");
  EXPECT_THAT(config_error(c), HasSubstr("architectures"));
  c["architectures"] = json::array();
  EXPECT_THAT(config_error(c), HasSubstr("'architectures'"));
  EXPECT_THAT(config_error(json::array()), HasSubstr("not a JSON object"));
}

TEST(HfConfigTest, RejectsUnsupportedRope) {
  json c = json::parse(kLlama31);
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  EXPECT_THAT(config_error(c), HasSubstr("'rope_scaling.rope_type' = \"yarn\" is not supported"));

  json v5 = json::parse(kLlama31V5);
  v5["rope_parameters"]["rope_type"] = "longrope";
  EXPECT_THAT(config_error(v5), HasSubstr("'rope_parameters.rope_type' = \"longrope\""));

  c = json::parse(kLlama31);
  c["rope_scaling"].erase("factor");
  EXPECT_THAT(config_error(c), HasSubstr("'rope_scaling.factor'"));
  c = json::parse(kLlama31);
  c["rope_scaling"].erase("original_max_position_embeddings");
  EXPECT_THAT(config_error(c), HasSubstr("original_max_position_embeddings"));
  c = json::parse(kLlama31);
  c["rope_scaling"]["high_freq_factor"] = 0.5;
  EXPECT_THAT(config_error(c), HasSubstr("high_freq_factor"));
  c = json::parse(kLlama2);
  c["rope_theta"] = -1;
  EXPECT_THAT(config_error(c), HasSubstr("'rope_theta' must be positive"));
  c = json::parse(kLlama2);
  c["partial_rotary_factor"] = 0.5;
  EXPECT_THAT(config_error(c), HasSubstr("partial_rotary_factor"));
  c = json::parse(kLlama2);
  c["head_dim"] = 127;
  EXPECT_THAT(config_error(c), HasSubstr("odd"));
}

TEST(HfConfigTest, RejectsBadSizesAndValues) {
  struct Case {
    const char* key;
    json value;
    const char* expected;
  } cases[] = {
      {"hidden_size", 0, "'hidden_size' must be positive, got 0"},
      {"num_hidden_layers", -2, "'num_hidden_layers' must be positive"},
      {"vocab_size", "32000", "'vocab_size' must be an integer"},
      {"intermediate_size", 11008.5, "'intermediate_size' must be an integer"},
      {"hidden_size", int64_t{1} << 40, "larger than any supported model"},
      {"num_attention_heads", 30, "'num_attention_heads' = 30 does not divide 'hidden_size' = 4096"},
      {"num_key_value_heads", 5, "'num_key_value_heads' = 5 does not divide"},
      {"hidden_act", "gelu", "'hidden_act' = \"gelu\" is not supported for LlamaForCausalLM"},
      {"torch_dtype", "float8_e4m3fn", "'torch_dtype' = \"float8_e4m3fn\""},
      {"tie_word_embeddings", "yes", "'tie_word_embeddings' must be true or false"},
      {"rms_norm_eps", 0, "'rms_norm_eps' must be positive"},
      {"rope_scaling", 3, "'rope_scaling' must be a JSON object"},
  };
  for (const Case& k : cases) {
    json c = json::parse(kLlama2);
    c[k.key] = k.value;
    EXPECT_THAT(config_error(c), HasSubstr(k.expected)) << k.key;
  }
  json missing = json::parse(kLlama2);
  missing.erase("intermediate_size");
  EXPECT_THAT(config_error(missing), HasSubstr("missing required key 'intermediate_size'"));

  json quantized = json::parse(kLlama2);
  quantized["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  EXPECT_THAT(config_error(quantized), HasSubstr("pre-quantized"));

  json integral_float = json::parse(kLlama2);
  integral_float["hidden_size"] = 4096.0;
  EXPECT_EQ(parse_ok(integral_float.dump()).hidden_size, 4096);
}

TEST(HfConfigTest, LoadFromFileNamesThePath) {
  testing::TempDir dir;
  testing::write_file(dir.file("config.json"), kMistral);
  Expected<ModelConfig> ok = load_model_config(dir.file("config.json"));
  ASSERT_TRUE(ok.has_value()) << ok.status().message();
  EXPECT_EQ(ok->sliding_window, 4096);

  testing::write_file(dir.file("bad.json"), "{\"architectures\": [");
  Expected<ModelConfig> bad = load_model_config(dir.file("bad.json"));
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.status().message(), HasSubstr(dir.file("bad.json") + ": not valid JSON"));

  json c = json::parse(kMistral);
  c["hidden_size"] = -1;
  testing::write_file(dir.file("neg.json"), c.dump());
  Expected<ModelConfig> neg = load_model_config(dir.file("neg.json"));
  ASSERT_FALSE(neg.has_value());
  EXPECT_EQ(neg.status().message(), dir.file("neg.json") + ": 'hidden_size' must be positive, got -1");

  EXPECT_EQ(load_model_config(dir.file("absent.json")).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kiln::formats
