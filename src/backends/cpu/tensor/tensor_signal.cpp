// ONNX's signal-processing tensor kernels. The window generators:
//   HannWindow:     w[n] = 0.5 - 0.5 cos(2 pi n / N)
//   HammingWindow:  w[n] = 25/46 - 21/46 cos(2 pi n / N)
//   BlackmanWindow: w[n] = 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)
// for n in [0, size), N = size when `periodic` (the default) and size - 1 when symmetric; the
// input is the scalar size, the output [size] of the node's `dtype` attribute. The transforms,
// in f64 by the definition (O(n^2) sums, no FFT), complex values as a last dimension of 2:
//   DFT:  x [batch, ..., n, ..., 1 or 2] (real or complex), [dft_length] -> the transform along
//         `axis`, the signal zero-padded or cut to dft_length; `inverse` divides by its length;
//         `onesided` keeps the first n / 2 + 1 bins of a real signal;
//   STFT: signal [batch, length, 1 or 2], frame_step, [window], [frame_length] -> [batch,
//         frames, bins, 2]: the DFT of each frame (frame_step apart) times the window;
//   MelWeightMatrix: num_mel_bins, dft_length, sample_rate, lower and upper edge (Hz) ->
//         [dft_length / 2 + 1, num_mel_bins] triangular filters between mel-spaced bin edges.
#include <cmath>
#include <complex>
#include <numbers>
#include <string>
#include <vector>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Tensor;

// The element type the translator recorded in the node's `dtype` attribute.
Expected<ir::DType> output_dtype(const ir::Node& n) {
  const auto dtype = ir::dtype_from_name(n.attr_str("dtype", "f32"));
  if (!dtype) return tensor_error(n, "unknown output dtype");
  return *dtype;
}

Status window(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  if (in[0]->numel() != 1) return tensor_error(n, "size must be a scalar");
  const int64_t size = ir::tensor_get_i64(*in[0], 0);
  if (size < 0 || size > (int64_t{1} << 32)) {
    return tensor_error(n, "size " + std::to_string(size) + " is out of range");
  }
  KILN_ASSIGN_OR_RETURN(const ir::DType dtype, output_dtype(n));
  const double N = n.attr_int("periodic", 1) != 0 ? static_cast<double>(size) : static_cast<double>(size - 1);
  double a0 = 0.5, a1 = 0.5, a2 = 0.0;
  if (n.op == "HammingWindow") {
    a0 = 25.0 / 46.0;
    a1 = 1.0 - a0;
  } else if (n.op == "BlackmanWindow") {
    a0 = 0.42;
    a2 = 0.08;
  }
  Tensor y(dtype, {size});
  for (int64_t i = 0; i < size; ++i) {
    const double t = 2.0 * std::numbers::pi * static_cast<double>(i) / N;
    ir::tensor_set_f64(y, i, a0 - a1 * std::cos(t) + a2 * std::cos(2.0 * t));
  }
  out[0] = std::move(y);
  return Status::ok();
}

using Complex = std::complex<double>;

// The transform of n complex samples (stride `step` apart in `x`) into bins [0, bins), by the sum.
void dft_line(const Complex* x, int64_t n, int64_t step, int64_t length, bool inverse, int64_t bins, Complex* y,
              int64_t y_step) {
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t k = 0; k < bins; ++k) {
    Complex acc = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      // k t mod length keeps the angle small and exact for long signals.
      const double turn = static_cast<double>((k * t) % length) / static_cast<double>(length);
      const double angle = sign * 2.0 * std::numbers::pi * turn;
      acc += x[t * step] * Complex(std::cos(angle), std::sin(angle));
    }
    y[k * y_step] = inverse ? acc / static_cast<double>(length) : acc;
  }
}

// The samples of a [..., 1 or 2] tensor as complex numbers.
std::vector<Complex> complex_values(const Tensor& t) {
  const std::vector<double> v = ir::tensor_to_f64(t);
  const int64_t parts = t.shape().back();
  std::vector<Complex> out(v.size() / static_cast<size_t>(parts));
  for (size_t i = 0; i < out.size(); ++i) out[i] = Complex(v[i * parts], parts == 2 ? v[i * parts + 1] : 0.0);
  return out;
}

Tensor complex_tensor(ir::DType dtype, ir::Shape shape, const std::vector<Complex>& values) {
  shape.push_back(2);
  Tensor y(dtype, shape);
  for (size_t i = 0; i < values.size(); ++i) {
    ir::tensor_set_f64(y, static_cast<int64_t>(2 * i), values[i].real());
    ir::tensor_set_f64(y, static_cast<int64_t>(2 * i + 1), values[i].imag());
  }
  return y;
}

Status dft(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  const int64_t r = x.rank();
  if (r < 3 || (x.shape().back() != 1 && x.shape().back() != 2)) {
    return tensor_error(n, "input must be [batch, signal dims..., 1 or 2]");
  }
  int64_t axis = n.attr_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 1 || axis > r - 2) {
    return tensor_error(n, "axis " + std::to_string(n.attr_int("axis", 1)) + " is not a signal dimension");
  }
  const bool inverse = n.attr_int("inverse", 0) != 0, onesided = n.attr_int("onesided", 0) != 0;
  if (onesided && x.shape().back() == 2) return tensor_error(n, "onesided needs a real input");
  const int64_t len = x.shape()[static_cast<size_t>(axis)];
  int64_t length = len;
  if (in.size() > 1 && in[1] != nullptr) {
    if (in[1]->numel() != 1) return tensor_error(n, "dft_length must be a scalar");
    length = ir::tensor_get_i64(*in[1], 0);
    if (length < 1) return tensor_error(n, "dft_length " + std::to_string(length) + " must be positive");
  }
  const int64_t bins = onesided ? length / 2 + 1 : length, used = std::min(len, length);
  const std::vector<Complex> xv = complex_values(x);
  // [outer, len, inner] in, [outer, bins, inner] out.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.shape()[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < r - 1; ++d) inner *= x.shape()[static_cast<size_t>(d)];
  ir::Shape shape(x.shape().begin(), x.shape().end() - 1);
  shape[static_cast<size_t>(axis)] = bins;
  std::vector<Complex> yv(static_cast<size_t>(outer * bins * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      dft_line(xv.data() + o * len * inner + i, used, inner, length, inverse, bins, yv.data() + o * bins * inner + i,
               inner);
    }
  }
  out[0] = complex_tensor(x.dtype(), shape, yv);
  return Status::ok();
}

Status stft(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& signal = *in[0];
  if (signal.rank() != 3 || (signal.shape()[2] != 1 && signal.shape()[2] != 2)) {
    return tensor_error(n, "signal must be [batch, length, 1 or 2]");
  }
  if (in[1]->numel() != 1) return tensor_error(n, "frame_step must be a scalar");
  const int64_t step = ir::tensor_get_i64(*in[1], 0);
  if (step < 1) return tensor_error(n, "frame_step " + std::to_string(step) + " must be positive");
  const Tensor* window = in.size() > 2 ? in[2] : nullptr;
  const Tensor* frame = in.size() > 3 ? in[3] : nullptr;
  if (window != nullptr && window->rank() != 1) return tensor_error(n, "window must be one-dimensional");
  if (frame != nullptr && frame->numel() != 1) return tensor_error(n, "frame_length must be a scalar");
  if (window == nullptr && frame == nullptr) return tensor_error(n, "needs a window or a frame_length");
  const int64_t length = window != nullptr ? window->shape()[0] : ir::tensor_get_i64(*frame, 0);
  if (frame != nullptr && ir::tensor_get_i64(*frame, 0) != length) {
    return tensor_error(n, "frame_length does not match the window's length " + std::to_string(length));
  }
  const int64_t batch = signal.shape()[0], total = signal.shape()[1];
  if (length < 1 || length > total) {
    return tensor_error(n, "frame length " + std::to_string(length) + " must be in [1, " + std::to_string(total) + "]");
  }
  const bool onesided = n.attr_int("onesided", 1) != 0;
  if (onesided && signal.shape()[2] == 2) return tensor_error(n, "onesided needs a real signal");
  const int64_t frames = (total - length) / step + 1, bins = onesided ? length / 2 + 1 : length;
  const std::vector<Complex> xv = complex_values(signal);
  const std::vector<double> w = window != nullptr ? ir::tensor_to_f64(*window) : std::vector<double>(length, 1.0);
  std::vector<Complex> yv(static_cast<size_t>(batch * frames * bins)), piece(static_cast<size_t>(length));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t t = 0; t < length; ++t) piece[t] = xv[b * total + f * step + t] * w[t];
      dft_line(piece.data(), length, 1, length, false, bins, yv.data() + (b * frames + f) * bins, 1);
    }
  }
  out[0] = complex_tensor(signal.dtype(), {batch, frames, bins}, yv);
  return Status::ok();
}

Status mel_weight_matrix(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  for (size_t i = 0; i < 5; ++i) {
    if (in[i]->numel() != 1) return tensor_error(n, "every input must be a scalar");
  }
  const int64_t mels = ir::tensor_get_i64(*in[0], 0), dft_length = ir::tensor_get_i64(*in[1], 0);
  const int64_t rate = ir::tensor_get_i64(*in[2], 0);
  const double lower = ir::tensor_get_f64(*in[3], 0), upper = ir::tensor_get_f64(*in[4], 0);
  if (mels < 1 || dft_length < 1 || rate < 1) {
    return tensor_error(n, "num_mel_bins, dft_length and sample_rate must be positive");
  }
  if (!(lower >= 0.0) || !(upper > lower)) return tensor_error(n, "needs 0 <= lower_edge_hertz < upper_edge_hertz");
  KILN_ASSIGN_OR_RETURN(const ir::DType dtype, output_dtype(n));
  const int64_t spectrum = dft_length / 2 + 1;
  // num_mel_bins + 2 edges, equally spaced in mel (2595 log10(1 + f / 700)) from lower to upper
  // (steps of the range over num_mel_bins + 2), each turned into the DFT bin below it.
  auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
  const double lo = mel(lower), mel_step = (mel(upper) - lo) / static_cast<double>(mels + 2);
  std::vector<int64_t> edge(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * mel_step + lo) / 2595.0) - 1.0);
    const double bin = static_cast<double>(dft_length + 1) * hz / static_cast<double>(rate);
    edge[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor(bin));
  }
  if (edge[static_cast<size_t>(mels)] >= spectrum || edge.back() > spectrum) {
    return tensor_error(n, "upper_edge_hertz lies past the spectrum of dft_length");
  }
  std::vector<double> m(static_cast<size_t>(spectrum * mels), 0.0);
  for (int64_t i = 0; i < mels; ++i) {
    const int64_t left = edge[static_cast<size_t>(i)], centre = edge[static_cast<size_t>(i) + 1];
    const int64_t right = edge[static_cast<size_t>(i) + 2];
    if (centre == left) {
      m[static_cast<size_t>(centre * mels + i)] = 1.0;
    } else {
      for (int64_t j = left; j <= centre; ++j) {
        m[static_cast<size_t>(j * mels + i)] = static_cast<double>(j - left) / static_cast<double>(centre - left);
      }
    }
    for (int64_t j = centre; j < right; ++j) {
      m[static_cast<size_t>(j * mels + i)] = static_cast<double>(right - j) / static_cast<double>(right - centre);
    }
  }
  Tensor y(dtype, {spectrum, mels});
  for (size_t i = 0; i < m.size(); ++i) ir::tensor_set_f64(y, static_cast<int64_t>(i), m[i]);
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_signal_kernels(TensorKernelTable& table) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) table[op] = window;
  table["DFT"] = dft;
  table["STFT"] = stft;
  table["MelWeightMatrix"] = mel_weight_matrix;
}

}  // namespace kiln::cpu
