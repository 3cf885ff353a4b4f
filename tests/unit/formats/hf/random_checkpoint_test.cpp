#include "formats/hf/random_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/half.h"
#include "formats/hf/hf_checkpoint.h"
#include "unit/formats/formats_test_util.h"

namespace kiln::formats {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using testing::TempDir;

HfCheckpoint open_ok(const std::string& dir) {
  Expected<HfCheckpoint> ckpt = HfCheckpoint::open(dir);
  EXPECT_TRUE(ckpt.has_value()) << ckpt.status().message();
  return std::move(ckpt).value();
}

std::vector<float> load_ok(const HfCheckpoint& ckpt, const std::string& name) {
  const TensorView* t = ckpt.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  Expected<std::vector<float>> v = ckpt.load(name, t->shape);
  EXPECT_TRUE(v.has_value()) << v.status().message();
  return v.has_value() ? *v : std::vector<float>{};
}

TEST(RandomCheckpointTest, PresetsHaveThePublishedParameterCounts) {
  const std::map<std::string, uint64_t> expected = {
      {"tinyllama-1.1b", 1'100'048'384ull}, {"llama-2-7b", 6'738'415'616ull},
      {"llama-3-8b", 8'030'261'248ull},     {"qwen2-7b", 7'615'616'512ull},
      {"baichuan2-13b", 13'896'668'160ull},
  };
  for (const auto& [preset, params] : expected) {
    EXPECT_THAT(random_checkpoint_presets(), Contains(preset));
    Expected<std::vector<TensorSpec>> specs = random_checkpoint_tensors(preset, "bfloat16");
    ASSERT_TRUE(specs.has_value()) << specs.status().message();
    uint64_t total = 0;
    for (const TensorSpec& s : *specs) total += tensor_spec_bytes(s) / 2;
    EXPECT_EQ(total, params) << preset;
  }
}

TEST(RandomCheckpointTest, PresetsUseHuggingFaceNamesAndShapes) {
  auto shapes = [](const std::string& preset) {
    std::map<std::string, std::vector<int64_t>> out;
    const std::vector<TensorSpec> specs = random_checkpoint_tensors(preset, "float32").value();
    for (const TensorSpec& s : specs) out[s.name] = s.shape;
    return out;
  };
  auto qwen = shapes("qwen2-7b");
  EXPECT_EQ(qwen.at("model.embed_tokens.weight"), (std::vector<int64_t>{152064, 3584}));
  EXPECT_EQ(qwen.at("model.layers.27.self_attn.k_proj.weight"), (std::vector<int64_t>{512, 3584}));
  EXPECT_EQ(qwen.at("model.layers.0.self_attn.q_proj.bias"), (std::vector<int64_t>{3584}));
  EXPECT_EQ(qwen.at("model.layers.0.self_attn.v_proj.bias"), (std::vector<int64_t>{512}));
  EXPECT_EQ(qwen.count("model.layers.0.self_attn.o_proj.bias"), 0u);
  EXPECT_EQ(qwen.at("model.layers.3.mlp.down_proj.weight"), (std::vector<int64_t>{3584, 18944}));
  EXPECT_EQ(qwen.at("lm_head.weight"), (std::vector<int64_t>{152064, 3584}));

  auto baichuan = shapes("baichuan2-13b");
  EXPECT_EQ(baichuan.at("model.layers.39.self_attn.W_pack.weight"), (std::vector<int64_t>{15360, 5120}));
  EXPECT_EQ(baichuan.count("model.layers.0.self_attn.q_proj.weight"), 0u);
  EXPECT_EQ(baichuan.at("model.layers.0.mlp.gate_proj.weight"), (std::vector<int64_t>{13696, 5120}));

  auto llama3 = shapes("llama-3-8b");
  EXPECT_EQ(llama3.at("model.layers.31.self_attn.k_proj.weight"), (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(llama3.count("model.layers.32.input_layernorm.weight"), 0u);

  auto gpt2 = shapes("tiny-gpt2");
  EXPECT_EQ(gpt2.at("transformer.h.1.attn.c_attn.weight"), (std::vector<int64_t>{128, 384}));
  EXPECT_EQ(gpt2.at("transformer.h.1.mlp.c_fc.weight"), (std::vector<int64_t>{128, 512}));
  EXPECT_EQ(gpt2.at("transformer.wpe.weight"), (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(gpt2.count("lm_head.weight"), 0u) << "tied";
}

TEST(RandomCheckpointTest, PresetConfigsParse) {
  for (const std::string& preset : random_checkpoint_presets()) {
    Expected<nlohmann::json> config = random_checkpoint_config(preset, "float16");
    ASSERT_TRUE(config.has_value()) << preset;
    Expected<ModelConfig> parsed = parse_model_config(*config);
    ASSERT_TRUE(parsed.has_value()) << preset << ": " << parsed.status().message();
    EXPECT_EQ(parsed->source_dtype, "float16");
  }
  const ModelConfig llama3 = parse_model_config(*random_checkpoint_config("llama-3-8b", "bfloat16")).value();
  EXPECT_DOUBLE_EQ(llama3.rope.theta, 500000);
  EXPECT_EQ(llama3.rope.type, RopeType::kDefault);
  const ModelConfig baichuan = parse_model_config(*random_checkpoint_config("baichuan2-13b", "bfloat16")).value();
  EXPECT_TRUE(baichuan.alibi);
  EXPECT_TRUE(baichuan.normalized_lm_head);
}

TEST(RandomCheckpointTest, TinyLlamaRoundTrip) {
  TempDir dir;
  ASSERT_TRUE(write_random_checkpoint("tiny-llama", dir.str(), "float32", 42).is_ok());
  EXPECT_TRUE(std::filesystem::exists(dir.file("model.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("model.safetensors.index.json")));
  const HfCheckpoint ckpt = open_ok(dir.str());
  const ModelConfig& c = ckpt.config();
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.source_dtype, "float32");

  // Every tensor the preset declares is there with its shape, and nothing else.
  const std::vector<TensorSpec> specs = random_checkpoint_tensors("tiny-llama", "float32").value();
  EXPECT_EQ(ckpt.tensor_names().size(), specs.size());
  for (const TensorSpec& s : specs) {
    const TensorView* t = ckpt.find(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->shape, s.shape) << s.name;
    EXPECT_EQ(t->dtype, TensorDType::kF32);
  }
  const int64_t h = c.hidden_size, kv = c.num_kv_heads * c.head_dim;
  EXPECT_TRUE(ckpt.load("model.layers.1.self_attn.v_proj.weight", {kv, h}).has_value());

  const std::vector<float> norm = load_ok(ckpt, "model.layers.0.input_layernorm.weight");
  EXPECT_TRUE(std::all_of(norm.begin(), norm.end(), [](float x) { return x == 1.0f; }));

  const std::vector<float> embed = load_ok(ckpt, "model.embed_tokens.weight");
  double sum = 0, sq = 0;
  float max_abs = 0;
  for (float x : embed) {
    sum += x;
    sq += static_cast<double>(x) * x;
    max_abs = std::max(max_abs, std::fabs(x));
  }
  const double n = static_cast<double>(embed.size());
  const double mean = sum / n, stddev = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 5e-4);
  EXPECT_NEAR(stddev, 0.02, 5e-4);
  EXPECT_LE(max_abs, 0.02f * 3.47f);
  EXPECT_GT(max_abs, 0.02f * 2.5f);

  // Distinct tensors get distinct streams.
  const std::vector<float> q = load_ok(ckpt, "model.layers.0.self_attn.q_proj.weight");
  const std::vector<float> k = load_ok(ckpt, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_NE(std::vector<float>(q.begin(), q.begin() + 64), std::vector<float>(k.begin(), k.begin() + 64));
}

TEST(RandomCheckpointTest, SameSeedSameBytesOtherSeedOtherValues) {
  TempDir a, b, c;
  ASSERT_TRUE(write_random_checkpoint("tiny-qwen2", a.str(), "bfloat16", 7).is_ok());
  ASSERT_TRUE(write_random_checkpoint("tiny-qwen2", b.str(), "bfloat16", 7).is_ok());
  ASSERT_TRUE(write_random_checkpoint("tiny-qwen2", c.str(), "bfloat16", 8).is_ok());
  const std::string bytes_a = testing::read_file(a.file("model.safetensors"));
  EXPECT_EQ(bytes_a, testing::read_file(b.file("model.safetensors")));
  EXPECT_NE(bytes_a, testing::read_file(c.file("model.safetensors")));
  EXPECT_EQ(testing::read_file(a.file("config.json")), testing::read_file(b.file("config.json")));
}

TEST(RandomCheckpointTest, HalfPrecisionIsTheRoundedFloat32Checkpoint) {
  TempDir f32, f16, bf16;
  ASSERT_TRUE(write_random_checkpoint("tiny-baichuan", f32.str(), "float32", 3).is_ok());
  ASSERT_TRUE(write_random_checkpoint("tiny-baichuan", f16.str(), "float16", 3).is_ok());
  ASSERT_TRUE(write_random_checkpoint("tiny-baichuan", bf16.str(), "bfloat16", 3).is_ok());
  const HfCheckpoint c32 = open_ok(f32.str()), c16 = open_ok(f16.str()), cb16 = open_ok(bf16.str());
  EXPECT_TRUE(c16.config().alibi);
  EXPECT_TRUE(c16.config().normalized_lm_head);
  EXPECT_EQ(c16.find("model.layers.0.self_attn.W_pack.weight")->dtype, TensorDType::kF16);
  EXPECT_EQ(cb16.find("model.layers.0.self_attn.W_pack.weight")->dtype, TensorDType::kBF16);
  for (const char* name : {"model.layers.1.self_attn.W_pack.weight", "lm_head.weight"}) {
    const std::vector<float> x = load_ok(c32, name);
    const std::vector<float> h = load_ok(c16, name);
    const std::vector<float> b = load_ok(cb16, name);
    ASSERT_EQ(x.size(), h.size());
    ASSERT_EQ(x.size(), b.size());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(h[i], fp16_to_float(float_to_fp16(x[i]))) << name << " " << i;
      ASSERT_EQ(b[i], bf16_to_float(float_to_bf16(x[i]))) << name << " " << i;
    }
  }
}

TEST(RandomCheckpointTest, ShardingKeepsValuesAndWritesAnIndex) {
  TempDir whole, sharded;
  ASSERT_TRUE(write_random_checkpoint("tiny-gpt2", whole.str(), "float16", 11).is_ok());
  ASSERT_TRUE(write_random_checkpoint("tiny-gpt2", sharded.str(), "float16", 11, 300'000).is_ok());
  ASSERT_TRUE(std::filesystem::exists(sharded.file("model.safetensors.index.json")));
  EXPECT_FALSE(std::filesystem::exists(sharded.file("model.safetensors")));

  const HfCheckpoint a = open_ok(whole.str());
  const HfCheckpoint b = open_ok(sharded.str());
  EXPECT_EQ(a.shard_paths().size(), 1u);
  const size_t shards = b.shard_paths().size();
  EXPECT_GE(shards, 2u);
  EXPECT_THAT(b.shard_paths().front(),
              HasSubstr("model-00001-of-0000" + std::to_string(shards) + ".safetensors"));
  EXPECT_EQ(a.tensor_names(), b.tensor_names());
  for (const std::string& name : a.tensor_names()) {
    const TensorView* ta = a.find(name);
    const TensorView* tb = b.find(name);
    ASSERT_EQ(ta->shape, tb->shape) << name;
    ASSERT_TRUE(std::equal(ta->data.begin(), ta->data.end(), tb->data.begin(), tb->data.end())) << name;
  }

  const nlohmann::json index =
      nlohmann::json::parse(testing::read_file(sharded.file("model.safetensors.index.json")));
  uint64_t total = 0;
  for (const std::string& name : b.tensor_names()) total += b.find(name)->data.size();
  EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
  EXPECT_EQ(index.at("weight_map").size(), b.tensor_names().size());
  // No shard exceeds the limit unless it holds a single larger tensor (the 1024x128 fp16 wte).
  for (const std::string& path : b.shard_paths()) {
    Expected<SafetensorsFile> f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.has_value());
    uint64_t bytes = 0;
    for (const TensorView& t : f->tensors()) bytes += t.data.size();
    EXPECT_TRUE(bytes <= 300'000 || f->tensors().size() == 1) << path;
  }
  EXPECT_TRUE(b.config().tie_word_embeddings);
  EXPECT_EQ(b.find("transformer.h.0.ln_1.bias")->dtype, TensorDType::kF16);
}

TEST(RandomCheckpointTest, RejectsUnknownPresetAndDType) {
  TempDir dir;
  Status s = write_random_checkpoint("llama-9000", dir.str(), "float32", 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("llama-9000"));
  EXPECT_THAT(s.message(), HasSubstr("tiny-llama"));
  s = write_random_checkpoint("tiny-llama", dir.str(), "int8", 1);
  EXPECT_THAT(s.message(), HasSubstr("'int8'"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("config.json")));
}

}  // namespace
}  // namespace kiln::formats
