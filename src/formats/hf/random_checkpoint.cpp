#include "formats/hf/random_checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>

#include "formats/hf/hf_config.h"
#include "formats/safetensors_writer.h"

namespace kiln::formats {
namespace {

using nlohmann::json;

constexpr float kWeightStd = 0.02f;

// Fields shared by the Llama-family presets.
json llama_like(const char* architecture, const char* model_type, int64_t vocab, int64_t hidden,
                int64_t intermediate, int64_t layers, int64_t heads, int64_t kv_heads,
                int64_t max_positions, double eps, double rope_theta) {
  return json{{"architectures", {architecture}},
              {"model_type", model_type},
              {"vocab_size", vocab},
              {"hidden_size", hidden},
              {"intermediate_size", intermediate},
              {"num_hidden_layers", layers},
              {"num_attention_heads", heads},
              {"num_key_value_heads", kv_heads},
              {"max_position_embeddings", max_positions},
              {"rms_norm_eps", eps},
              {"rope_theta", rope_theta},
              {"rope_scaling", nullptr},
              {"hidden_act", "silu"},
              {"initializer_range", 0.02},
              {"tie_word_embeddings", false},
              {"attention_dropout", 0.0},
              {"use_cache", true},
              {"bos_token_id", 1},
              {"eos_token_id", 2}};
}

json baichuan_like(int64_t vocab, int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads) {
  // ALiBi variant: "model_max_length" and no "max_position_embeddings" (see hf_config.h).
  return json{{"architectures", {"BaichuanForCausalLM"}},
              {"model_type", "baichuan"},
              {"vocab_size", vocab},
              {"hidden_size", hidden},
              {"intermediate_size", intermediate},
              {"num_hidden_layers", layers},
              {"num_attention_heads", heads},
              {"model_max_length", 4096},
              {"rms_norm_eps", 1e-6},
              {"hidden_act", "silu"},
              {"initializer_range", 0.02},
              {"tie_word_embeddings", false},
              {"use_cache", true},
              {"pad_token_id", 0},
              {"bos_token_id", 1},
              {"eos_token_id", 2}};
}

Expected<json> preset_config(const std::string& preset) {
  if (preset == "tinyllama-1.1b") {
    return llama_like("LlamaForCausalLM", "llama", 32000, 2048, 5632, 22, 32, 4, 2048, 1e-5, 10000.0);
  }
  if (preset == "llama-2-7b") {
    return llama_like("LlamaForCausalLM", "llama", 32000, 4096, 11008, 32, 32, 32, 4096, 1e-5, 10000.0);
  }
  if (preset == "llama-3-8b") {
    json c = llama_like("LlamaForCausalLM", "llama", 128256, 4096, 14336, 32, 32, 8, 8192, 1e-5, 500000.0);
    c["bos_token_id"] = 128000;
    c["eos_token_id"] = 128001;
    return c;
  }
  if (preset == "qwen2-7b") {
    json c = llama_like("Qwen2ForCausalLM", "qwen2", 152064, 3584, 18944, 28, 28, 4, 131072, 1e-6, 1000000.0);
    c["use_sliding_window"] = false;
    c["sliding_window"] = 131072;
    c["max_window_layers"] = 28;
    c["bos_token_id"] = 151643;
    c["eos_token_id"] = 151643;
    return c;
  }
  if (preset == "baichuan2-13b") return baichuan_like(125696, 5120, 13696, 40, 40);
  if (preset == "tiny-llama") {
    return llama_like("LlamaForCausalLM", "llama", 1024, 128, 352, 2, 4, 2, 512, 1e-5, 10000.0);
  }
  if (preset == "tiny-mistral") {
    json c = llama_like("MistralForCausalLM", "mistral", 1024, 128, 352, 2, 4, 2, 512, 1e-5, 10000.0);
    c["sliding_window"] = 64;
    return c;
  }
  if (preset == "tiny-qwen2") {
    json c = llama_like("Qwen2ForCausalLM", "qwen2", 1024, 128, 352, 2, 4, 2, 512, 1e-6, 1000000.0);
    c["use_sliding_window"] = false;
    c["tie_word_embeddings"] = true;
    return c;
  }
  if (preset == "tiny-baichuan") {
    json c = baichuan_like(1024, 128, 352, 2, 4);
    c["z_loss_weight"] = 0;  // marks Baichuan2: normalised lm_head
    return c;
  }
  if (preset == "tiny-gpt2") {
    return json{{"architectures", {"GPT2LMHeadModel"}},
                {"model_type", "gpt2"},
                {"vocab_size", 1024},
                {"n_embd", 128},
                {"n_layer", 2},
                {"n_head", 4},
                {"n_positions", 256},
                {"n_ctx", 256},
                {"n_inner", nullptr},
                {"activation_function", "gelu_new"},
                {"layer_norm_epsilon", 1e-5},
                {"initializer_range", 0.02},
                {"scale_attn_weights", true},
                {"use_cache", true},
                {"bos_token_id", 1023},
                {"eos_token_id", 1023}};
  }
  std::string names;
  for (const std::string& p : random_checkpoint_presets()) names += (names.empty() ? "" : ", ") + p;
  return invalid_argument("unknown random checkpoint preset '" + preset + "'; presets: " + names);
}

enum class Fill { kRandom, kOnes, kZeros };

struct PlannedTensor {
  TensorSpec spec;
  Fill fill = Fill::kRandom;
};

// Tensors in the order save_pretrained writes them (module order), with Hugging Face names.
std::vector<PlannedTensor> plan_tensors(const ModelConfig& c, TensorDType dtype) {
  std::vector<PlannedTensor> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, Fill fill = Fill::kRandom) {
    out.push_back({TensorSpec{std::move(name), dtype, std::move(shape)}, fill});
  };
  const int64_t h = c.hidden_size, inter = c.intermediate_size, v = c.vocab_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;

  if (c.architecture == Architecture::kGpt2) {
    add("transformer.wte.weight", {v, h});
    add("transformer.wpe.weight", {c.max_position_embeddings, h});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      // GPT-2 stores its projections as Conv1D: weight [in, out].
      add(p + "ln_1.weight", {h}, Fill::kOnes);
      add(p + "ln_1.bias", {h}, Fill::kZeros);
      add(p + "attn.c_attn.weight", {h, 3 * h});
      add(p + "attn.c_attn.bias", {3 * h});
      add(p + "attn.c_proj.weight", {h, h});
      add(p + "attn.c_proj.bias", {h});
      add(p + "ln_2.weight", {h}, Fill::kOnes);
      add(p + "ln_2.bias", {h}, Fill::kZeros);
      add(p + "mlp.c_fc.weight", {h, inter});
      add(p + "mlp.c_fc.bias", {inter});
      add(p + "mlp.c_proj.weight", {inter, h});
      add(p + "mlp.c_proj.bias", {h});
    }
    add("transformer.ln_f.weight", {h}, Fill::kOnes);
    add("transformer.ln_f.bias", {h}, Fill::kZeros);
    if (!c.tie_word_embeddings) add("lm_head.weight", {v, h});
    return out;
  }

  add("model.embed_tokens.weight", {v, h});
  const bool qkv_bias = c.attention_bias;
  const bool o_bias = c.attention_bias && c.architecture == Architecture::kLlama;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {h}, Fill::kOnes);
    if (c.architecture == Architecture::kBaichuan) {
      add(p + "self_attn.W_pack.weight", {3 * h, h});
    } else {
      add(p + "self_attn.q_proj.weight", {q, h});
      if (qkv_bias) add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.weight", {kv, h});
      if (qkv_bias) add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.weight", {kv, h});
      if (qkv_bias) add(p + "self_attn.v_proj.bias", {kv});
    }
    add(p + "self_attn.o_proj.weight", {h, q});
    if (o_bias) add(p + "self_attn.o_proj.bias", {h});
    add(p + "post_attention_layernorm.weight", {h}, Fill::kOnes);
    add(p + "mlp.gate_proj.weight", {inter, h});
    if (c.mlp_bias) add(p + "mlp.gate_proj.bias", {inter});
    add(p + "mlp.up_proj.weight", {inter, h});
    if (c.mlp_bias) add(p + "mlp.up_proj.bias", {inter});
    add(p + "mlp.down_proj.weight", {h, inter});
    if (c.mlp_bias) add(p + "mlp.down_proj.bias", {h});
  }
  add("model.norm.weight", {h}, Fill::kOnes);
  if (!c.tie_word_embeddings) add("lm_head.weight", {v, h});
  return out;
}

uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t tensor_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return splitmix64(seed ^ splitmix64(h));
}

// Element i of a tensor: splitmix64 on a counter gives 64 random bits; the sum of their four
// 16-bit lanes has mean 4 * 32767.5 and variance 4 * (65536^2 - 1) / 12.
void fill_random(uint64_t key, uint64_t first, std::span<float> out) {
  constexpr float kMean = 4 * 32767.5f;
  const float scale = kWeightStd / std::sqrt(4.0f * (65536.0f * 65536.0f - 1.0f) / 12.0f);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t r = splitmix64(key + (first + i + 1) * 0x9e3779b97f4a7c15ull);
    const uint32_t sum = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                         static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    out[i] = (static_cast<float>(sum) - kMean) * scale;
  }
}

Status write_shard(const std::string& path, const std::vector<PlannedTensor>& tensors, size_t begin,
                   size_t end, uint64_t seed) {
  std::vector<TensorSpec> specs;
  for (size_t i = begin; i < end; ++i) specs.push_back(tensors[i].spec);
  KILN_ASSIGN_OR_RETURN(SafetensorsWriter writer,
                        SafetensorsWriter::create(path, std::move(specs), {{"format", "pt"}}));
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<float> values;
  std::vector<std::byte> bytes;
  for (size_t t = begin; t < end; ++t) {
    const PlannedTensor& planned = tensors[t];
    const uint64_t numel = tensor_spec_bytes(planned.spec) / tensor_dtype_size(planned.spec.dtype);
    const uint64_t key = tensor_key(seed, planned.spec.name);
    for (uint64_t done = 0; done < numel;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, numel - done));
      values.resize(n);
      switch (planned.fill) {
        case Fill::kRandom: fill_random(key, done, values); break;
        case Fill::kOnes: std::fill(values.begin(), values.end(), 1.0f); break;
        case Fill::kZeros: std::fill(values.begin(), values.end(), 0.0f); break;
      }
      bytes.resize(n * tensor_dtype_size(planned.spec.dtype));
      floats_to_tensor_bytes(values, planned.spec.dtype, bytes.data());
      KILN_RETURN_IF_ERROR(writer.append(bytes));
      done += n;
    }
  }
  return writer.finish();
}

// dtype was validated by random_checkpoint_config.
TensorDType tensor_dtype_for(const std::string& dtype) {
  return dtype == "float32" ? TensorDType::kF32 : dtype == "float16" ? TensorDType::kF16 : TensorDType::kBF16;
}

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return io_error("cannot write " + path.string() + ": " + std::strerror(errno));
  return Status::ok();
}

}  // namespace

std::vector<std::string> random_checkpoint_presets() {
  return {"tinyllama-1.1b", "llama-2-7b",   "llama-3-8b", "qwen2-7b",      "baichuan2-13b",
          "tiny-llama",     "tiny-mistral", "tiny-qwen2", "tiny-baichuan", "tiny-gpt2"};
}

Expected<nlohmann::json> random_checkpoint_config(const std::string& preset, const std::string& dtype) {
  if (dtype != "float32" && dtype != "float16" && dtype != "bfloat16") {
    return invalid_argument("random checkpoint dtype '" + dtype +
                            "' is not supported; use float32, float16 or bfloat16");
  }
  KILN_ASSIGN_OR_RETURN(json config, preset_config(preset));
  config["torch_dtype"] = dtype;
  config["transformers_version"] = "4.44.0";
  return config;
}

Expected<std::vector<TensorSpec>> random_checkpoint_tensors(const std::string& preset,
                                                            const std::string& dtype) {
  KILN_ASSIGN_OR_RETURN(json config, random_checkpoint_config(preset, dtype));
  KILN_ASSIGN_OR_RETURN(ModelConfig model, parse_model_config(config));
  std::vector<TensorSpec> specs;
  for (PlannedTensor& t : plan_tensors(model, tensor_dtype_for(dtype))) specs.push_back(std::move(t.spec));
  return specs;
}

Status write_random_checkpoint(const std::string& preset, const std::string& out_dir,
                               const std::string& dtype, uint64_t seed, uint64_t max_shard_bytes) {
  KILN_ASSIGN_OR_RETURN(json config, random_checkpoint_config(preset, dtype));
  KILN_ASSIGN_OR_RETURN(ModelConfig model, parse_model_config(config));
  const std::vector<PlannedTensor> tensors = plan_tensors(model, tensor_dtype_for(dtype));

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error("cannot create directory " + out_dir + ": " + ec.message());
  const fs::path dir(out_dir);
  KILN_RETURN_IF_ERROR(write_text(dir / "config.json", config.dump(2) + "\n"));

  // Greedy split in module order: a shard closes before the tensor that would overflow it.
  std::vector<size_t> starts = {0};
  uint64_t shard_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t bytes = tensor_spec_bytes(tensors[i].spec);
    if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      starts.push_back(i);
      shard_bytes = 0;
    }
    shard_bytes += bytes;
    total_bytes += bytes;
  }
  starts.push_back(tensors.size());
  const size_t num_shards = starts.size() - 1;

  if (num_shards == 1) {
    return write_shard((dir / "model.safetensors").string(), tensors, 0, tensors.size(), seed);
  }
  json weight_map = json::object();
  for (size_t s = 0; s < num_shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, num_shards);
    KILN_RETURN_IF_ERROR(write_shard((dir / name).string(), tensors, starts[s], starts[s + 1], seed));
    for (size_t t = starts[s]; t < starts[s + 1]; ++t) weight_map[tensors[t].spec.name] = name;
  }
  const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  return write_text(dir / "model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace kiln::formats
