// The signal-processing kernels (tensor_signal.cpp): DFT, STFT and MelWeightMatrix against
// properties of the transforms that do not depend on how they are computed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <vector>

#include "backends/cpu/tensor/tensor_kernel.h"
#include "unit/backends_cpu/tensor_test_util.h"

namespace kiln::cpu {
namespace {

using test_util::random_f32;
using test_util::run;

ir::Tensor scalar_i64(int64_t v) {
  ir::Tensor t(ir::DType::kI64, {});
  t.mutable_data<int64_t>()[0] = v;
  return t;
}

ir::Tensor scalar_f32(float v) {
  ir::Tensor t(ir::DType::kF32, {});
  t.mutable_data<float>()[0] = v;
  return t;
}

ir::Node node(const std::string& op, std::map<std::string, ir::Attr> attrs = {}) {
  ir::Node n;
  n.op = op;
  n.name = "n";
  n.outputs.resize(1);
  n.attrs = std::move(attrs);
  return n;
}

double largest_difference(const ir::Tensor& a, const ir::Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double w = 0.0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    w = std::max(w, std::fabs(ir::tensor_get_f64(a, i) - ir::tensor_get_f64(b, i)));
  }
  return w;
}

// The inverse undoes the transform along a middle axis; a delta transforms to all ones; a real
// signal's one-sided transform is the first n / 2 + 1 bins of the full one; dft_length pads with
// zeros.
TEST(SignalKernels, DftInvertsAndMatchesKnownTransforms) {
  const ir::Tensor x = random_f32({2, 3, 5, 2}, 41);
  const ir::Tensor fwd = run(node("DFT", {{"axis", int64_t{2}}}), {&x});
  ASSERT_EQ(fwd.shape(), (ir::Shape{2, 3, 5, 2}));
  const ir::Tensor back = run(node("DFT", {{"axis", int64_t{-2}}, {"inverse", int64_t{1}}}), {&fwd});
  EXPECT_LE(largest_difference(back, x), 1e-5);

  ir::Tensor delta(ir::DType::kF32, {1, 6, 1});
  delta.mutable_data<float>()[0] = 1.0f;
  const ir::Tensor ones = run(node("DFT"), {&delta});
  ASSERT_EQ(ones.shape(), (ir::Shape{1, 6, 2}));
  for (int64_t k = 0; k < 6; ++k) {
    EXPECT_NEAR(ones.data<float>()[2 * k], 1.0f, 1e-6);
    EXPECT_NEAR(ones.data<float>()[2 * k + 1], 0.0f, 1e-6);
  }

  const ir::Tensor real = random_f32({2, 7, 1}, 42);
  const ir::Tensor full = run(node("DFT"), {&real});
  const ir::Tensor half = run(node("DFT", {{"onesided", int64_t{1}}}), {&real});
  ASSERT_EQ(half.shape(), (ir::Shape{2, 4, 2}));
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(half.data<float>()[b * 8 + i], full.data<float>()[b * 14 + i]);
  }

  const ir::Tensor eight = scalar_i64(8);
  const ir::Tensor padded_by_length = run(node("DFT"), {&real, &eight});
  ir::Tensor padded(ir::DType::kF32, {2, 8, 1});
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 7; ++t) padded.mutable_data<float>()[b * 8 + t] = real.data<float>()[b * 7 + t];
  }
  EXPECT_LE(largest_difference(padded_by_length, run(node("DFT"), {&padded})), 1e-6);

  std::vector<ir::Tensor> out;
  const Status bad = tensor_run_node(node("DFT", {{"axis", int64_t{3}}}), {&x}, out);
  EXPECT_NE(bad.message().find("not a signal dimension"), std::string::npos) << bad.message();
}

// Each STFT frame is the DFT of the windowed samples frame_step apart; a frame longer than the
// signal is an error.
TEST(SignalKernels, StftFramesAreWindowedDfts) {
  const ir::Tensor signal = random_f32({2, 40, 1}, 43), window = random_f32({12}, 44);
  const ir::Tensor step = scalar_i64(5);
  const ir::Tensor y = run(node("STFT"), {&signal, &step, &window});
  ASSERT_EQ(y.shape(), (ir::Shape{2, 6, 7, 2}));
  ir::Tensor frames(ir::DType::kF32, {12, 12, 1});  // [batch x frame, sample, 1]
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t f = 0; f < 6; ++f) {
      for (int64_t t = 0; t < 12; ++t) {
        frames.mutable_data<float>()[(b * 6 + f) * 12 + t] =
            signal.data<float>()[b * 40 + f * 5 + t] * window.data<float>()[t];
      }
    }
  }
  const ir::Tensor want = run(node("DFT", {{"onesided", int64_t{1}}}), {&frames});
  ASSERT_EQ(want.numel(), y.numel());
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(y.data<float>()[i], want.data<float>()[i], 1e-5) << i;

  const ir::Tensor long_frame = scalar_i64(41);
  std::vector<ir::Tensor> out;
  const Status bad = tensor_run_node(node("STFT"), {&signal, &step, nullptr, &long_frame}, out);
  EXPECT_NE(bad.message().find("frame length 41"), std::string::npos) << bad.message();
}

// The mel filters are triangles: every column rises to 1 and falls back, with values in [0, 1],
// and their peaks move up the spectrum; an upper edge past the spectrum is an error.
TEST(SignalKernels, MelWeightMatrixHoldsRisingTriangles) {
  const ir::Tensor mels = scalar_i64(8), length = scalar_i64(64), rate = scalar_i64(8000);
  const ir::Tensor lower = scalar_f32(0.0f), upper = scalar_f32(4000.0f);
  const ir::Node mel = node("MelWeightMatrix", {{"dtype", std::string("f32")}});
  const ir::Tensor m = run(mel, {&mels, &length, &rate, &lower, &upper});
  ASSERT_EQ(m.shape(), (ir::Shape{33, 8}));
  int64_t last_peak = -1;
  for (int64_t c = 0; c < 8; ++c) {
    int64_t peak = 0;
    for (int64_t r = 0; r < 33; ++r) {
      const float v = m.data<float>()[r * 8 + c];
      EXPECT_GE(v, 0.0f);
      EXPECT_LE(v, 1.0f);
      if (v > m.data<float>()[peak * 8 + c]) peak = r;
    }
    EXPECT_EQ(m.data<float>()[peak * 8 + c], 1.0f) << c;
    EXPECT_GT(peak, last_peak) << c;
    last_peak = peak;
  }
  const ir::Tensor too_high = scalar_f32(9000.0f);
  std::vector<ir::Tensor> out;
  const Status bad = tensor_run_node(mel, {&mels, &length, &rate, &lower, &too_high}, out);
  EXPECT_NE(bad.message().find("past the spectrum"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace kiln::cpu
