#include "server/repository/infer_protocol.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::server {
namespace {

// A model like PaddleOCR's direction classifier, smaller: x [batch, 2, 3] f32 -> probs [batch, 2],
// and an int64 input "ids" [batch, -1].
ModelConfig batched_config() {
  ModelConfig c;
  c.name = "m";
  c.max_batch_size = 4;
  c.inputs = {{"x", ir::DType::kF32, {2, 3}}, {"ids", ir::DType::kI64, {-1}}};
  c.outputs = {{"probs", ir::DType::kF32, {2}}, {"argmax", ir::DType::kI64, {1}}};
  return c;
}

std::variant<InferRequest, ApiError> parse(const std::string& body, const ModelConfig& c = batched_config()) {
  return parse_infer_request(body, std::nullopt, c);
}

TEST(InferProtocol, ParsesNestedAndFlatJsonData) {
  auto r = parse(R"({"id": "r1", "inputs": [
      {"name": "x", "shape": [1, 2, 3], "datatype": "FP32", "data": [[[1, 2, 3], [4, 5, 6.5]]]},
      {"name": "ids", "shape": [1, 2], "datatype": "INT64", "data": [7, -9007199254740993]}]})");
  ASSERT_TRUE(std::holds_alternative<InferRequest>(r)) << std::get<ApiError>(r).message;
  const InferRequest& req = std::get<InferRequest>(r);
  EXPECT_EQ(req.id, "r1");
  EXPECT_EQ(req.batch, 1);
  const ir::Tensor& x = req.inputs.at("x");
  EXPECT_EQ(x.shape(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(x.data<float>()[5], 6.5f);
  EXPECT_EQ(req.inputs.at("ids").data<int64_t>()[1], -9007199254740993LL);  // exact, beyond a double's 53 bits
  ASSERT_EQ(req.outputs.size(), 2u);  // none asked: every output, as JSON
  EXPECT_FALSE(req.outputs[0].binary);
}

TEST(InferProtocol, ReadsBinaryInputsAfterTheJsonHeader) {
  const std::string header = R"({"inputs": [
      {"name": "x", "shape": [2, 2, 3], "datatype": "FP32", "parameters": {"binary_data_size": 48}},
      {"name": "ids", "shape": [2, 1], "datatype": "INT64", "data": [1, 2]}],
      "outputs": [{"name": "argmax", "parameters": {"binary_data": true}}]})";
  std::string body = header;
  for (int i = 0; i < 12; ++i) {
    const float f = 0.5f * i;
    body.append(reinterpret_cast<const char*>(&f), 4);
  }
  auto r = parse_infer_request(body, header.size(), batched_config());
  ASSERT_TRUE(std::holds_alternative<InferRequest>(r)) << std::get<ApiError>(r).message;
  const InferRequest& req = std::get<InferRequest>(r);
  EXPECT_EQ(req.batch, 2);
  EXPECT_EQ(req.inputs.at("x").data<float>()[11], 5.5f);
  ASSERT_EQ(req.outputs.size(), 1u);
  EXPECT_EQ(req.outputs[0].name, "argmax");
  EXPECT_TRUE(req.outputs[0].binary);

  // Bytes no input claims, or too few bytes, are refused.
  auto extra = parse_infer_request(body + "xx", header.size(), batched_config());
  ASSERT_TRUE(std::holds_alternative<ApiError>(extra));
  EXPECT_NE(std::get<ApiError>(extra).message.find("2 bytes after the inputs' binary data"), std::string::npos);
  auto shortened = parse_infer_request(body.substr(0, body.size() - 4), header.size(), batched_config());
  ASSERT_TRUE(std::holds_alternative<ApiError>(shortened));
  EXPECT_NE(std::get<ApiError>(shortened).message.find("the body ends before the 48 bytes of input 'x'"), std::string::npos);
  auto beyond = parse_infer_request(body, body.size() + 1, batched_config());
  ASSERT_TRUE(std::holds_alternative<ApiError>(beyond));
}

// Every refusal is a 400 that names the input and what is wrong with it.
TEST(InferProtocol, RefusalsNameTheInput) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "'inputs' must be a non-empty array"},
      {R"({"inputs": []})", "'inputs' must be a non-empty array"},
      {R"({"inputs": [{"name": "y", "shape": [1], "datatype": "FP32", "data": [1]}]})", "model 'm' has no input 'y' (its inputs: 'x', 'ids')"},
      {R"({"inputs": [{"name": "x", "shape": [1, 2, 3], "datatype": "FP64", "data": [1,2,3,4,5,6]}]})",
       "input 'x' has datatype FP64; the model takes FP32"},
      {R"({"inputs": [{"name": "x", "shape": [1, 3, 2], "datatype": "FP32", "data": [1,2,3,4,5,6]}]})",
       "input 'x' has shape [1, 3, 2]; the model takes [-1, 2, 3]"},
      {R"({"inputs": [{"name": "x", "shape": [5, 2, 3], "datatype": "FP32", "data": []}]})",
       "input 'x' has a batch of 5; this model takes 1 to 4"},
      {R"({"inputs": [{"name": "x", "shape": [1, 2, 3], "datatype": "FP32", "data": [1,2,3]}]})",
       "input 'x' of shape [1, 2, 3] needs 6 elements; 'data' has 3"},
      {R"({"inputs": [{"name": "x", "shape": [1, 2, 3], "datatype": "FP32", "data": [1,2,3,4,5,"6"]}]})",
       "input 'x': element 5 (\"6\") is not a FP32 value"},
      {R"({"inputs": [{"name": "ids", "shape": [1, 1], "datatype": "INT64", "data": [1.5]}]})",
       "input 'ids': element 0 (1.5) is not a INT64 value"},
      {R"({"inputs": [{"name": "x", "shape": [1, 2, 3], "datatype": "FP32", "data": [1,2,3,4,5,6]},
                      {"name": "ids", "shape": [2, 1], "datatype": "INT64", "data": [1, 2]}]})",
       "input 'ids' has a batch of 2; input 'x' has 1"},
      {R"({"inputs": [{"name": "x", "shape": [1, 2, 3], "datatype": "FP32", "data": [1,2,3,4,5,6]}]})", "input 'ids' is missing"},
      {R"({"inputs": [{"name": "x", "shape": [1, 2, 3], "datatype": "FP32", "parameters": {"binary_data_size": 24}}]})",
       "no Inference-Header-Content-Length header"},
      {R"({"inputs": [{"name": "x", "shape": [1, 2, 3], "datatype": "FP32", "data": [1,2,3,4,5,6]},
                      {"name": "ids", "shape": [1, 1], "datatype": "INT64", "data": [1]}],
           "outputs": [{"name": "nope"}]})", "model 'm' has no output 'nope'"},
      {R"({"inputs": [{"name": "x", "shape": [1, 2, -3], "datatype": "FP32", "data": []}]})", "'shape' must hold sizes >= 0"},
      {R"({"inputs": [1]})", "inputs[0] must be an object"},
      {R"([1, 2])", "JSON object"},
  };
  for (const auto& [body, expected] : cases) {
    auto r = parse(body);
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    const ApiError& e = std::get<ApiError>(r);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_NE(e.message.find(expected), std::string::npos) << body << "\n  -> " << e.message;
  }
}

TEST(InferProtocol, UnbatchedModelsTakeTheirShapeExactly) {
  ModelConfig c;
  c.name = "add";
  c.inputs = {{"a", ir::DType::kF16, {2}}};
  c.outputs = {{"b", ir::DType::kF16, {2}}};
  auto ok = parse(R"({"inputs": [{"name": "a", "shape": [2], "datatype": "FP16", "data": [0.5, -2]}]})", c);
  ASSERT_TRUE(std::holds_alternative<InferRequest>(ok)) << std::get<ApiError>(ok).message;
  EXPECT_EQ(std::get<InferRequest>(ok).inputs.at("a").data<uint16_t>()[0], 0x3800);  // 0.5 in fp16
  auto batched = parse(R"({"inputs": [{"name": "a", "shape": [1, 2], "datatype": "FP16", "data": [0.5, -2]}]})", c);
  ASSERT_TRUE(std::holds_alternative<ApiError>(batched));
}

TEST(InferProtocol, ResponsesCarryJsonAndBinaryOutputs) {
  InferRequest req;
  req.id = "abc";
  req.outputs = {{"probs", false}, {"argmax", true}};
  ir::Tensor probs(ir::DType::kF32, {1, 2});
  probs.mutable_data<float>()[0] = 0.25f;
  probs.mutable_data<float>()[1] = 0.75f;
  ir::Tensor argmax(ir::DType::kI64, {1, 1});
  argmax.mutable_data<int64_t>()[0] = 1;
  TensorList outputs;
  outputs.emplace_back("argmax", std::move(argmax));
  outputs.emplace_back("probs", std::move(probs));
  HttpResponse r = infer_response(req, outputs, "m", "3");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/octet-stream");
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].first, "Inference-Header-Content-Length");
  const size_t n = std::stoul(r.headers[0].second);
  const auto j = nlohmann::json::parse(r.body.substr(0, n));
  EXPECT_EQ(j["id"], "abc");
  EXPECT_EQ(j["model_version"], "3");
  EXPECT_EQ(j["outputs"][0]["name"], "probs");  // in the order asked
  EXPECT_EQ(j["outputs"][0]["data"], nlohmann::json({0.25, 0.75}));
  EXPECT_EQ(j["outputs"][1]["parameters"]["binary_data_size"], 8);
  EXPECT_FALSE(j["outputs"][1].contains("data"));
  ASSERT_EQ(r.body.size(), n + 8);
  int64_t v = 0;
  std::memcpy(&v, r.body.data() + n, 8);
  EXPECT_EQ(v, 1);

  req.outputs = {{"probs", false}};
  HttpResponse plain = infer_response(req, outputs, "m", "3");
  EXPECT_EQ(plain.content_type, "application/json");
  EXPECT_TRUE(plain.headers.empty());
}

}  // namespace
}  // namespace kiln::server
