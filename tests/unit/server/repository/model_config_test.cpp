#include "server/repository/model_config.h"

#include <gtest/gtest.h>

namespace kiln::server {
namespace {

constexpr const char* kClassifier = R"(
name: "cls"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 48, -1 ] } ]
output [ { name: "probs" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { preferred_batch_size: [ 8, 4 ] max_queue_delay_microseconds: 500 }
instance_group [ { count: 2 kind: KIND_CPU }, { kind: KIND_CPU } ]
parameters { key: "dtype" value: { string_value: "bf16" } }
optimization { graph { level: 1 } }
)";

TEST(ModelConfig, ReadsTritonsFields) {
  auto c = model_config_parse(kClassifier, "cls");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->name, "cls");
  EXPECT_EQ(c->platform, "onnxruntime_onnx");
  EXPECT_EQ(c->max_batch_size, 8);
  ASSERT_EQ(c->inputs.size(), 1u);
  EXPECT_EQ(c->inputs[0].name, "x");
  EXPECT_EQ(c->inputs[0].dtype, ir::DType::kF32);
  EXPECT_EQ(c->inputs[0].dims, (std::vector<int64_t>{3, 48, -1}));
  ASSERT_EQ(c->outputs.size(), 1u);
  EXPECT_EQ(c->outputs[0].dims, (std::vector<int64_t>{2}));
  EXPECT_TRUE(c->dynamic_batching);
  EXPECT_EQ(c->preferred_batch_sizes, (std::vector<int64_t>{4, 8}));  // sorted
  EXPECT_EQ(c->max_queue_delay_us, 500u);
  EXPECT_EQ(c->instance_count, 3);  // 2 + an unset count (1)
  EXPECT_EQ(c->dtype, "bf16");
  // The field kiln does not read is a warning with its position, not an error.
  ASSERT_EQ(c->warnings.size(), 1u);
  EXPECT_NE(c->warnings[0].find("config.pbtxt:10:"), std::string::npos) << c->warnings[0];
  EXPECT_NE(c->warnings[0].find("optimization"), std::string::npos) << c->warnings[0];

  const nlohmann::json j = model_config_json(*c);
  EXPECT_EQ(j["max_batch_size"], 8);
  EXPECT_EQ(j["input"][0]["data_type"], "TYPE_FP32");
  EXPECT_EQ(j["dynamic_batching"]["preferred_batch_size"], nlohmann::json({4, 8}));
  EXPECT_EQ(j["instance_group"][0]["count"], 3);
}

TEST(ModelConfig, AnEmptyConfigNamesTheModelAfterItsDirectory) {
  auto c = model_config_parse("", "bert");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->name, "bert");
  EXPECT_EQ(c->max_batch_size, 0);
  EXPECT_FALSE(c->dynamic_batching);
  EXPECT_EQ(c->instance_count, 1);
  EXPECT_TRUE(c->inputs.empty());
}

// Each bad config is refused with the field at fault in the message.
TEST(ModelConfig, ErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"name: \"other\"", "name: 'other' differs from the model directory 'm'"},
      {"platform: \"tensorrt_plan\"", "platform: 'tensorrt_plan' is not served by kiln"},
      {"backend: \"python\"", "backend: 'python'"},
      {"max_batch_size: -2", "max_batch_size: must be >= 0"},
      {"input [ { data_type: TYPE_FP32 dims: [ 1 ] } ]", "input[0].name: is required"},
      {"input [ { name: \"a\" dims: [ 1 ] } ]", "input[0].data_type: is required"},
      {"input [ { name: \"a\" data_type: TYPE_STRING dims: [ 1 ] } ]", "input[0].data_type: TYPE_STRING tensors are not supported"},
      {"input [ { name: \"a\" data_type: TYPE_FP32 dims: [ 1 ] }, { name: \"b\" data_type: TYPE_FP32 dims: [ 4, -3 ] } ]",
       "input[1].dims[1]: -3 is not a size"},
      {"input [ { name: \"a\" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]", "input[0].reshape"},
      {"output [ { name: \"p\" data_type: TYPE_FP32 dims: [ 2 ] label_filename: \"l.txt\" } ]", "output[0].label_filename"},
      {"dynamic_batching { }", "dynamic_batching: needs max_batch_size > 0"},
      {"max_batch_size: 4 dynamic_batching { preferred_batch_size: [ 2, 16 ] }",
       "dynamic_batching.preferred_batch_size[1]: 16 is not in [1, max_batch_size = 4]"},
      {"instance_group [ { kind: KIND_GPU } ]", "instance_group[0].kind"},
      {"instance_group [ { count: -1 } ]", "instance_group[0].count"},
      {"version_policy { all { } }", "version_policy.all"},
      {"version_policy { specific { versions: [ 1, 2 ] } }", "version_policy.specific.versions"},
      {"default_model_filename: \"../x.onnx\"", "default_model_filename"},
      {"parameters { key: \"dtype\" value: { string_value: \"fp8\" } }", "parameters[dtype]: 'fp8'"},
      {"max_batch_size: \"eight\"", "config.pbtxt:1:17:"},  // the parser's own error, with the position
      {"input [ { name: \"a\" data_type: TYPE_FP33 dims: [ 1 ] } ]", "TYPE_FP33"},
  };
  for (const auto& [text, expected] : cases) {
    auto c = model_config_parse(text, "m");
    ASSERT_FALSE(c) << text;
    EXPECT_NE(c.status().message().find(expected), std::string::npos) << text << "\n  -> " << c.status().message();
  }
}

TEST(ModelConfig, SpecificVersionAndFileName) {
  auto c = model_config_parse("version_policy { specific { versions: [ 3 ] } } default_model_filename: \"net.onnx\"", "m");
  ASSERT_TRUE(c) << c.status().message();
  ASSERT_TRUE(c->version.has_value());
  EXPECT_EQ(*c->version, 3);
  EXPECT_EQ(c->model_filename, "net.onnx");
}

}  // namespace
}  // namespace kiln::server
