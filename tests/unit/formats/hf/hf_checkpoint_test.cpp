#include "formats/hf/hf_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "formats/safetensors_writer.h"
#include "unit/formats/formats_test_util.h"

namespace kiln::formats {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;
using testing::TempDir;
using testing::write_file;

constexpr const char* kConfig = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 8, "intermediate_size": 16,
  "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 4, "torch_dtype": "float32"})";

std::vector<float> iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// Writes a safetensors file of F32 tensors filled with start, start + 1, ...
void write_tensors(const std::string& path, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
                   TensorDType dtype = TensorDType::kF32) {
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorBytes> list;
  float start = 0;
  for (const auto& [name, shape] : tensors) {
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    if (dtype == TensorDType::kI32) {
      storage.emplace_back(n * 4, std::byte{1});
    } else {
      storage.push_back(floats_to_tensor_bytes(iota(n, start), dtype));
    }
    start += 100;
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    list.push_back({{tensors[i].first, dtype, tensors[i].second}, storage[i]});
  }
  ASSERT_TRUE(write_safetensors(path, list).is_ok());
}

TEST(HfCheckpointTest, OpensSingleFileCheckpoint) {
  TempDir dir;
  write_file(dir.file("config.json"), kConfig);
  write_tensors(dir.file("model.safetensors"),
                {{"model.embed_tokens.weight", {4, 8}}, {"model.norm.weight", {8}}});
  write_file(dir.file("tokenizer.json"), "{\"model\": {}}");
  write_file(dir.file("merges.txt"), std::string("a b\n\0c d\n", 10));
  write_file(dir.file("README.md"), "not copied");

  Expected<HfCheckpoint> ckpt = HfCheckpoint::open(dir.str());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
  EXPECT_EQ(ckpt->dir(), dir.str());
  EXPECT_EQ(ckpt->config().hidden_size, 8);
  EXPECT_EQ(ckpt->tensor_names(),
            (std::vector<std::string>{"model.embed_tokens.weight", "model.norm.weight"}));
  EXPECT_EQ(ckpt->shard_paths(), std::vector<std::string>{dir.file("model.safetensors")});
  ASSERT_NE(ckpt->find("model.norm.weight"), nullptr);
  EXPECT_EQ(ckpt->find("lm_head.weight"), nullptr);

  Expected<std::vector<float>> norm = ckpt->load("model.norm.weight", {8});
  ASSERT_TRUE(norm.has_value()) << norm.status().message();
  EXPECT_EQ(*norm, iota(8, 100));

  Expected<std::vector<float>> wrong = ckpt->load("model.embed_tokens.weight", {8, 4});
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("'model.embed_tokens.weight' has shape [4, 8]"));
  EXPECT_THAT(wrong.status().message(), HasSubstr("[8, 4]"));

  Expected<std::vector<float>> missing = ckpt->load("lm_head.weight", {4, 8});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'lm_head.weight'"));

  const std::map<std::string, std::string> aux = ckpt->auxiliary_files();
  EXPECT_EQ(aux.size(), 2u);
  EXPECT_EQ(aux.at("tokenizer.json"), "{\"model\": {}}");
  EXPECT_EQ(aux.at("merges.txt"), std::string("a b\n\0c d\n", 10));

  // Views stay valid when the checkpoint moves.
  const TensorView* before = ckpt->find("model.norm.weight");
  HfCheckpoint moved = std::move(ckpt).value();
  EXPECT_EQ(moved.find("model.norm.weight"), before);
  EXPECT_EQ(moved.load("model.norm.weight", {8}).value(), iota(8, 100));
}

TEST(HfCheckpointTest, LoadRejectsNonFloatDType) {
  TempDir dir;
  write_file(dir.file("config.json"), kConfig);
  write_tensors(dir.file("model.safetensors"), {{"ids", {3}}}, TensorDType::kI32);
  Expected<HfCheckpoint> ckpt = HfCheckpoint::open(dir.str());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
  Expected<std::vector<float>> ids = ckpt->load("ids", {3});
  ASSERT_FALSE(ids.has_value());
  EXPECT_THAT(ids.status().message(), HasSubstr("'ids' has dtype I32"));
}

TEST(HfCheckpointTest, OpensShardedCheckpoint) {
  TempDir dir;
  write_file(dir.file("config.json"), kConfig);
  write_tensors(dir.file("model-00001-of-00002.safetensors"), {{"a", {2}}, {"b", {3}}});
  write_tensors(dir.file("model-00002-of-00002.safetensors"), {{"c", {4}}, {"unlisted", {1}}});
  const json index = {{"metadata", {{"total_size", 36}}},
                      {"weight_map",
                       {{"a", "model-00001-of-00002.safetensors"},
                        {"b", "model-00001-of-00002.safetensors"},
                        {"c", "model-00002-of-00002.safetensors"}}}};
  write_file(dir.file("model.safetensors.index.json"), index.dump());

  Expected<HfCheckpoint> ckpt = HfCheckpoint::open(dir.str());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
  EXPECT_EQ(ckpt->tensor_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ckpt->shard_paths().size(), 2u);
  EXPECT_EQ(ckpt->load("b", {3}).value(), iota(3, 100));
  EXPECT_EQ(ckpt->load("c", {4}).value(), iota(4, 0));
  EXPECT_EQ(ckpt->find("unlisted"), nullptr) << "the index is authoritative";
}

TEST(HfCheckpointTest, ShardedErrors) {
  TempDir dir;
  write_file(dir.file("config.json"), kConfig);
  write_tensors(dir.file("model-00001-of-00002.safetensors"), {{"a", {2}}});

  auto open_with_index = [&](const json& weight_map) {
    write_file(dir.file("model.safetensors.index.json"), json{{"weight_map", weight_map}}.dump());
    return HfCheckpoint::open(dir.str()).status();
  };

  Status s = open_with_index({{"a", "model-00001-of-00002.safetensors"},
                              {"b", "model-00002-of-00002.safetensors"}});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("missing"));

  s = open_with_index({{"a", "model-00001-of-00002.safetensors"},
                       {"ghost", "model-00001-of-00002.safetensors"}});
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("'ghost'"));
  EXPECT_THAT(s.message(), HasSubstr("does not contain it"));

  s = open_with_index({{"a", "../model-00001-of-00002.safetensors"}});
  EXPECT_THAT(s.message(), HasSubstr("not a file name in the directory"));
  s = open_with_index({{"a", 3}});
  EXPECT_THAT(s.message(), HasSubstr("not a file name"));
  s = open_with_index(json::object());
  EXPECT_THAT(s.message(), HasSubstr("weight_map"));
  write_file(dir.file("model.safetensors.index.json"), "{");
  EXPECT_THAT(HfCheckpoint::open(dir.str()).status().message(), HasSubstr("not a valid JSON object"));

  // A corrupt shard reports the shard's path.
  write_file(dir.file("model-00002-of-00002.safetensors"), "garbage");
  s = open_with_index({{"b", "model-00002-of-00002.safetensors"}});
  EXPECT_THAT(s.message(), HasSubstr(dir.file("model-00002-of-00002.safetensors")));
}

TEST(HfCheckpointTest, FallsBackToAllSafetensorsFiles) {
  TempDir dir;
  write_file(dir.file("config.json"), kConfig);
  write_tensors(dir.file("part-a.safetensors"), {{"a", {2}}});
  write_tensors(dir.file("part-b.safetensors"), {{"b", {2}}});
  Expected<HfCheckpoint> ckpt = HfCheckpoint::open(dir.str());
  ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
  EXPECT_EQ(ckpt->tensor_names(), (std::vector<std::string>{"a", "b"}));

  write_tensors(dir.file("part-c.safetensors"), {{"a", {2}}});
  Status s = HfCheckpoint::open(dir.str()).status();
  EXPECT_THAT(s.message(), HasSubstr("'a' appears in two files"));
}

TEST(HfCheckpointTest, DirectoryErrors) {
  TempDir dir;
  EXPECT_EQ(HfCheckpoint::open(dir.file("nope")).status().code(), StatusCode::kNotFound);

  Status s = HfCheckpoint::open(dir.str()).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no config.json"));

  write_file(dir.file("config.json"), kConfig);
  s = HfCheckpoint::open(dir.str()).status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no model.safetensors"));

  write_file(dir.file("pytorch_model.bin"), "PK");
  s = HfCheckpoint::open(dir.str()).status();
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("PyTorch checkpoint (pytorch_model.bin)"));
  EXPECT_THAT(s.message(), HasSubstr("safe_serialization=True"));

  write_file(dir.file("config.json"), R"({"architectures": ["GPTJForCausalLM"]})");
  s = HfCheckpoint::open(dir.str()).status();
  EXPECT_THAT(s.message(), HasSubstr(dir.file("config.json")));
  EXPECT_THAT(s.message(), HasSubstr("GPTJForCausalLM"));
}

}  // namespace
}  // namespace kiln::formats
