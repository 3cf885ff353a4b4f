// Random-weight Hugging Face checkpoints with the exact shapes and tensor names of real models,
// so the whole build and run path (and its speed) can be exercised without downloading weights.
//
// A checkpoint is config.json plus model.safetensors, or, when the weights exceed the shard size,
// model-0000K-of-0000N.safetensors shards and model.safetensors.index.json, as save_pretrained
// writes them. Values: linear weights, biases and embeddings are approximately normal with mean 0
// and std 0.02 (the sum of four uniforms, Irwin-Hall, bounded at +-3.5 std); norm weights are 1
// and norm biases 0. Each tensor's values depend only on (seed, tensor name), not on sharding; a
// float16/bfloat16 checkpoint holds the float32 one's values rounded to nearest even. Data is
// generated and written in 1M-element chunks: memory use does not grow with the model.
//
// Presets (real published shapes):
//   tinyllama-1.1b   LlamaForCausalLM, 22 layers, hidden 2048, 32 heads / 4 kv, vocab 32000
//   llama-2-7b       LlamaForCausalLM, 32 layers, hidden 4096, 32 heads, vocab 32000
//   llama-3-8b       LlamaForCausalLM, 32 layers, hidden 4096, 32 heads / 8 kv, vocab 128256,
//                    rope_theta 500000, no rope scaling
//   qwen2-7b         Qwen2ForCausalLM, 28 layers, hidden 3584, 28 heads / 4 kv, vocab 152064,
//                    q/k/v biases
//   baichuan2-13b    BaichuanForCausalLM, 40 layers, hidden 5120, 40 heads, vocab 125696,
//                    fused W_pack, ALiBi, normalised lm_head
// and a few MB each, for tests: tiny-llama, tiny-mistral (sliding window), tiny-qwen2,
// tiny-baichuan (ALiBi + normalised lm_head), tiny-gpt2 (tensor names with the "transformer."
// prefix that save_pretrained writes for GPT2LMHeadModel, tied lm_head).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "formats/safetensors_writer.h"

namespace kiln::formats {

inline constexpr uint64_t kDefaultMaxShardBytes = 2'000'000'000;

std::vector<std::string> random_checkpoint_presets();

// The config.json a preset writes. dtype: "float32", "float16" or "bfloat16".
Expected<nlohmann::json> random_checkpoint_config(const std::string& preset, const std::string& dtype);

// The tensors a preset writes, in file order, without writing anything.
Expected<std::vector<TensorSpec>> random_checkpoint_tensors(const std::string& preset,
                                                            const std::string& dtype);

// Writes the checkpoint into out_dir (created if needed; files of the same names are replaced).
// A shard holds at most max_shard_bytes of tensor data unless a single tensor is larger.
Status write_random_checkpoint(const std::string& preset, const std::string& out_dir,
                               const std::string& dtype, uint64_t seed,
                               uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace kiln::formats
