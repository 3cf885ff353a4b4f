#include "server/repository/grpc_protocol.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::server {
namespace {

ModelConfig config() {
  ModelConfig c;
  c.name = "m";
  c.max_batch_size = 4;
  c.inputs = {{"x", ir::DType::kF32, {3}}, {"k", ir::DType::kI8, {1}}};
  c.outputs = {{"y", ir::DType::kF32, {3}}};
  return c;
}

TEST(GrpcProtocol, ReadsRawAndTypedContents) {
  inference::ModelInferRequest r;
  r.set_id("q");
  auto* x = r.add_inputs();
  x->set_name("x");
  x->set_datatype("FP32");
  x->add_shape(2);
  x->add_shape(3);
  for (float f : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) x->mutable_contents()->add_fp32_contents(f);
  auto* k = r.add_inputs();
  k->set_name("k");
  k->set_datatype("INT8");
  k->add_shape(2);
  k->add_shape(1);
  k->mutable_contents()->add_int_contents(-128);
  k->mutable_contents()->add_int_contents(127);
  auto typed = infer_request_from_grpc(r, config());
  ASSERT_TRUE(std::holds_alternative<InferRequest>(typed)) << std::get<ApiError>(typed).message;
  const InferRequest& req = std::get<InferRequest>(typed);
  EXPECT_EQ(req.batch, 2);
  EXPECT_EQ(req.id, "q");
  EXPECT_EQ(req.inputs.at("x").data<float>()[5], 6.f);
  EXPECT_EQ(req.inputs.at("k").data<int8_t>()[0], -128);
  ASSERT_EQ(req.outputs.size(), 1u);

  k->mutable_contents()->set_int_contents(1, 128);  // out of INT8's range
  auto range = infer_request_from_grpc(r, config());
  ASSERT_TRUE(std::holds_alternative<ApiError>(range));
  EXPECT_NE(std::get<ApiError>(range).message.find("int_contents[1] = 128 is out of range"), std::string::npos);

  // Raw contents: one entry per input, each exactly the tensor's bytes.
  inference::ModelInferRequest raw;
  for (const char* name : {"x", "k"}) {
    auto* in = raw.add_inputs();
    in->set_name(name);
    in->set_datatype(std::string(name) == "x" ? "FP32" : "INT8");
    in->add_shape(1);
    in->add_shape(std::string(name) == "x" ? 3 : 1);
  }
  const float xs[3] = {0.5f, 1.5f, 2.5f};
  raw.add_raw_input_contents(std::string(reinterpret_cast<const char*>(xs), sizeof xs));
  raw.add_raw_input_contents(std::string(1, '\x07'));
  auto ok = infer_request_from_grpc(raw, config());
  ASSERT_TRUE(std::holds_alternative<InferRequest>(ok)) << std::get<ApiError>(ok).message;
  EXPECT_EQ(std::get<InferRequest>(ok).inputs.at("x").data<float>()[2], 2.5f);
  EXPECT_EQ(std::get<InferRequest>(ok).inputs.at("k").data<int8_t>()[0], 7);

  raw.set_raw_input_contents(1, "");
  auto short_raw = infer_request_from_grpc(raw, config());
  ASSERT_TRUE(std::holds_alternative<ApiError>(short_raw));
  EXPECT_NE(std::get<ApiError>(short_raw).message.find("input 'k' is 1 bytes; raw_input_contents[1] has 0"), std::string::npos);
  raw.mutable_raw_input_contents()->RemoveLast();
  auto missing_raw = infer_request_from_grpc(raw, config());
  ASSERT_TRUE(std::holds_alternative<ApiError>(missing_raw));
  EXPECT_NE(std::get<ApiError>(missing_raw).message.find("raw_input_contents has 1 entries for 2 inputs"), std::string::npos);
}

TEST(GrpcProtocol, ResponsesAndConfigs) {
  TensorModel model;
  model.name = "m";
  model.version = "2";
  model.config = config();
  model.config.dynamic_batching = true;
  model.config.preferred_batch_sizes = {2, 4};
  model.config.max_queue_delay_us = 100;
  InferRequest req;
  req.id = "r";
  req.outputs = {{"y", true}};
  ir::Tensor y(ir::DType::kF32, {1, 3});
  for (int i = 0; i < 3; ++i) y.mutable_data<float>()[i] = static_cast<float>(i) + 0.25f;
  TensorList outputs;
  outputs.emplace_back("y", std::move(y));
  inference::ModelInferResponse resp;
  infer_response_to_grpc(req, outputs, model, resp);
  EXPECT_EQ(resp.model_version(), "2");
  EXPECT_EQ(resp.id(), "r");
  ASSERT_EQ(resp.outputs_size(), 1);
  EXPECT_EQ(resp.outputs(0).datatype(), "FP32");
  ASSERT_EQ(resp.raw_output_contents_size(), 1);
  float back[3];
  ASSERT_EQ(resp.raw_output_contents(0).size(), sizeof back);
  std::memcpy(back, resp.raw_output_contents(0).data(), sizeof back);
  EXPECT_EQ(back[2], 2.25f);

  inference::ModelMetadataResponse meta;
  model_metadata_to_grpc(model, meta);
  ASSERT_EQ(meta.inputs_size(), 2);
  EXPECT_EQ(meta.inputs(0).shape_size(), 2);  // -1 (the batch) and 3
  EXPECT_EQ(meta.inputs(0).shape(0), -1);
  EXPECT_EQ(meta.inputs(1).datatype(), "INT8");

  kiln::repository::ModelConfig proto;
  model_config_to_grpc(model.config, proto);
  EXPECT_EQ(proto.max_batch_size(), 4);
  EXPECT_EQ(proto.input(1).data_type(), kiln::repository::TYPE_INT8);
  EXPECT_EQ(proto.dynamic_batching().preferred_batch_size_size(), 2);
  EXPECT_EQ(proto.dynamic_batching().max_queue_delay_microseconds(), 100u);
  EXPECT_EQ(proto.instance_group(0).kind(), kiln::repository::ModelInstanceGroup::KIND_CPU);
}

}  // namespace
}  // namespace kiln::server
