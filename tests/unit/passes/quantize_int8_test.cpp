// passes/quantize_int8.cpp: with calibration samples, each Conv or transposed MatMul with a
// constant f32 weight becomes kiln.QConv / kiln.QMatMul: int8 weight codes with one scale per
// output channel, and the input's scale and zero point from the calibrator. The graph runs on
// the samples through a small evaluator defined here; minmax calibration makes the input's
// threshold its largest |x|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>

#include "passes/pass.h"
#include "unit/passes/pass_test_util.h"

namespace kiln::passes {
namespace {

using namespace test_util;  // NOLINT

// Runs Relu on f32 tensors and gives every other node one zero output of shape [1]: enough for
// calibration, which records only the products' inputs.
class CalibrationEvaluator : public NodeEvaluator {
 public:
  bool can_evaluate(const std::string&) const override { return true; }
  Expected<std::vector<ir::Tensor>> evaluate(const ir::Node& node, const std::vector<const ir::Tensor*>& in) override {
    ++calls;
    if (node.op != "Relu") return std::vector<ir::Tensor>{ir::Tensor(DType::kF32, {1})};
    ir::Tensor out(DType::kF32, in[0]->shape());
    for (int64_t i = 0; i < out.numel(); ++i) out.mutable_data<float>()[i] = std::max(0.0f, in[0]->data<float>()[i]);
    return std::vector<ir::Tensor>{out};
  }
  int calls = 0;
};

ir::Tensor f32_tensor(std::vector<int64_t> shape, std::vector<float> values) {
  ir::Tensor t(DType::kF32, std::move(shape));
  std::copy(values.begin(), values.end(), t.mutable_data<float>());
  return t;
}

std::vector<int8_t> load_i8(const Graph& g, ValueId id) {
  const ir::WeightEntry& w = g.weight(id);
  EXPECT_EQ(w.dtype, DType::kI8);
  auto bytes = w.load_bytes();
  EXPECT_TRUE(bytes) << bytes.status().message();
  std::vector<int8_t> out;
  if (bytes) {
    for (std::byte b : *bytes) out.push_back(static_cast<int8_t>(b));
  }
  return out;
}

// x [1, 4] -> MatMul with W^T [3, 4] (rows = output channels, as transpose_matmul_weights leaves it)
// and a bias; and Relu(x) -> a second MatMul, whose input is never negative.
struct Int8Graph {
  TensorGraphBuilder b;
  ValueId x, relu, bias, out1, out2;
};

Int8Graph int8_graph() {
  Int8Graph q;
  TensorGraphBuilder& b = q.b;
  q.x = b.input("x", {1, 4});
  // Row maxima 4, 8 and 0 (an all-zero row keeps scale 1); no code lies on a rounding tie.
  const ValueId w = b.g.add_weight("w1", f32_weight({3, 4}, {1, -1.5f, 0.5f, 4, 8, 3, -8, 0.1f, 0, 0, 0, 0}));
  q.bias = b.constant({3}, {0.5f, 0.25f, 0});
  q.out1 = b.node("MatMul", {q.x, w, q.bias},
                  {{"kiln.b_transposed", int64_t{1}}, {"kiln.activation", std::string("Relu")}});
  q.relu = b.node("Relu", {q.x});
  q.out2 = b.node("MatMul", {q.relu, b.g.add_weight("w2", f32_weight({2, 4}, {1, 1, 1, 1, -2, 2, -2, 2}))},
                  {{"kiln.b_transposed", int64_t{1}}});
  b.output(q.out1);
  b.output(q.out2);
  return q;
}

TEST(QuantizeInt8, ProductsBecomeInt8WithPerChannelScalesAndCalibratedInputs) {
  Int8Graph q = int8_graph();
  Int8Calibration calib;
  calib.calibrator = Calibrator::kMinMax;
  calib.samples.resize(2);
  calib.samples[0]["x"] = f32_tensor({1, 4}, {0.5f, -3, 1, 2});
  calib.samples[1]["x"] = f32_tensor({1, 4}, {-1, 2.5f, 0, 1});
  CalibrationEvaluator ev;
  PassContext ctx;
  ctx.int8 = &calib;
  ctx.evaluator = &ev;
  std::vector<std::string> notes;
  ctx.log = [&](const std::string& m) { notes.push_back(m); };
  ASSERT_TRUE(run_quantize_int8(q.b.g, ctx));
  const Graph& g = q.b.g;
  EXPECT_TRUE(ir::verify(g)) << ir::verify(g).message();
  EXPECT_EQ(ev.calls, 2 * 3) << "minmax: one run over each sample";

  ASSERT_EQ(g.nodes().size(), 3u);
  const ir::Node& m1 = g.nodes()[0];
  EXPECT_EQ(m1.op, "kiln.QMatMul");
  EXPECT_EQ(m1.outputs, std::vector<ValueId>{q.out1});
  ASSERT_EQ(m1.inputs.size(), 4u);
  EXPECT_EQ(m1.inputs[0], q.x);
  EXPECT_EQ(g.value(m1.inputs[1]).name, "w1.i8");
  EXPECT_EQ(g.value(m1.inputs[2]).name, "w1.i8_scale");
  EXPECT_EQ(m1.inputs[3], q.bias) << "the bias stays f32";
  EXPECT_FALSE(m1.has_attr("kiln.b_transposed"));
  EXPECT_EQ(m1.attr_str("kiln.activation"), "Relu") << "the epilogue stays";
  // x took values of both signs, largest |x| 3: 127 levels each side of zero point 128.
  EXPECT_DOUBLE_EQ(m1.attr_float("kiln.x_scale"), 3.0 / 127);
  EXPECT_EQ(m1.attr_int("kiln.x_zero_point", -1), 128);
  // Weight scales max |row| / 127; codes round(w / scale).
  EXPECT_EQ(g.weight(m1.inputs[2]).shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(load_f32(g, m1.inputs[2]), (std::vector<float>{4.0f / 127, 8.0f / 127, 1.0f}));
  EXPECT_EQ(g.weight(m1.inputs[1]).shape, (std::vector<int64_t>{3, 4}));
  // Row 0, scale 4/127: 1 -> 31.75, -1.5 -> -47.625, 0.5 -> 15.875, 4 -> 127; row 1, scale
  // 8/127: 8 -> 127, 3 -> 47.625, -8 -> -127, 0.1 -> 1.5875; row 2 all zero.
  EXPECT_EQ(load_i8(g, m1.inputs[1]), (std::vector<int8_t>{32, -48, 16, 127, 127, 48, -127, 2, 0, 0, 0, 0}));

  const ir::Node& m2 = g.nodes()[2];
  EXPECT_EQ(m2.op, "kiln.QMatMul");
  EXPECT_EQ(m2.inputs.size(), 3u);
  // Relu(x) is never negative, largest 2.5: all 255 codes from zero point 0.
  EXPECT_DOUBLE_EQ(m2.attr_float("kiln.x_scale"), 2.5 / 255);
  EXPECT_EQ(m2.attr_int("kiln.x_zero_point", -1), 0);
  EXPECT_EQ(load_i8(g, m2.inputs[1]), (std::vector<int8_t>{127, 127, 127, 127, -127, 127, -127, 127}));

  EXPECT_EQ(g.weights().count("w1"), 0u) << "the f32 weights are pruned";
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("2 of 2"), std::string::npos) << notes[0];
}

TEST(QuantizeInt8, WithoutCalibrationNothingChanges) {
  Int8Graph q = int8_graph();
  const std::string before = snapshot(q.b.g);
  ASSERT_TRUE(run_quantize_int8(q.b.g, {}));
  EXPECT_EQ(snapshot(q.b.g), before);
}

TEST(QuantizeInt8, LeavesProductsThatAreNotCandidates) {
  TensorGraphBuilder b;
  const ValueId x = b.input("x", {1, 2, 4, 4});
  // A depthwise Conv (one input channel per group), a MatMul whose weight is not transposed, and
  // a MatMul of two activations.
  const ValueId dw_w = b.constant({2, 1, 3, 3}, std::vector<float>(18, 0.5f));
  const ValueId dw = b.node("Conv", {x, dw_w}, {{"group", int64_t{2}}});
  const ValueId y = b.input("y", {4, 3});
  const ValueId mm = b.node("MatMul", {dw, b.constant({4, 3}, std::vector<float>(12, 1.0f))});
  b.output(b.node("MatMul", {mm, y}));
  Int8Calibration calib;
  calib.samples.resize(1);
  calib.samples[0]["x"] = ir::Tensor(DType::kF32, {1, 2, 4, 4});
  calib.samples[0]["y"] = ir::Tensor(DType::kF32, {4, 3});
  CalibrationEvaluator ev;
  PassContext ctx;
  ctx.int8 = &calib;
  ctx.evaluator = &ev;
  std::vector<std::string> notes;
  ctx.log = [&](const std::string& m) { notes.push_back(m); };
  const std::string before = snapshot(b.g);
  ASSERT_TRUE(run_quantize_int8(b.g, ctx));
  EXPECT_EQ(snapshot(b.g), before);
  EXPECT_EQ(ev.calls, 0) << "nothing to calibrate: the graph is not run";
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("no Conv or MatMul"), std::string::npos) << notes[0];
}

TEST(QuantizeInt8, RefusesWhatItCannotCalibrate) {
  Int8Calibration calib;
  CalibrationEvaluator ev;
  PassContext ctx;
  ctx.int8 = &calib;
  ctx.evaluator = &ev;
  {  // an LLM graph
    Graph g = decoder_like();
    calib.samples.push_back({});
    const Status s = run_quantize_int8(g, ctx);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("ONNX"), std::string::npos) << s.message();
  }
  {  // no samples
    calib.samples.clear();
    Int8Graph q = int8_graph();
    EXPECT_EQ(run_quantize_int8(q.b.g, ctx).code(), StatusCode::kInvalidArgument);
  }
  {  // a sample without the graph's input, named in the message
    std::map<std::string, ir::Tensor> sample;
    sample["not_x"] = f32_tensor({1, 4}, {1, 2, 3, 4});
    sample["other"] = f32_tensor({1}, {0});
    calib.samples = {sample};
    Int8Graph q = int8_graph();
    const Status s = run_quantize_int8(q.b.g, ctx);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("no input 'x'"), std::string::npos) << s.message();
  }
  {  // a sample of the wrong dtype
    std::map<std::string, ir::Tensor> sample;
    sample["x"] = ir::Tensor(DType::kI32, {1, 4});
    calib.samples = {sample};
    Int8Graph q = int8_graph();
    const Status s = run_quantize_int8(q.b.g, ctx);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("i32"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace kiln::passes
