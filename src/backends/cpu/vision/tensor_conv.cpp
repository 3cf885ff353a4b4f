// Convolution and pooling over any number of spatial dimensions.
//   Conv:          x [N, C, D...], w [M, C/group, k...], b [M] -> y [N, M, O...]
//   ConvTranspose: x [N, C, D...], w [C, M/group, k...], b [M] -> y [N, M, O...]
//   MaxPool / AveragePool: x [N, C, D...] -> y [N, C, O...] (+ MaxPool's flat argmax indices)
//   GlobalAveragePool / GlobalMaxPool: x [N, C, D...] -> [N, C, 1...]
//   MaxUnpool:     x [N, C, D...], MaxPool's indices, [output_shape] -> y [N, C, O...], zero but
//                  where an index puts an element of x
// O follows ONNX's rules for pads, strides, dilations, auto_pad and ceil_mode (window_geometry()).
// f32 Conv (any number of spatial dims) gathers each group's input patches (im2col, rows =
// output positions) and multiplies them with the weights through the LLM path's f32 matmul
// kernels; depthwise-like groups (fewer than 4 output channels) run a direct f32 loop instead.
// Other dtypes and the other ops use direct loops in f64, correct for every attribute combination.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/matmul/matmul.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/tensor/tensor_epilogue.h"
#include "backends/cpu/tensor/tensor_kernel.h"
#include "backends/cpu/vision/conv_gemm.h"
#include "backends/cpu/vision/conv_geometry.h"

namespace kiln::cpu {
namespace {

using ir::DType;
using ir::Shape;
using ir::Tensor;

struct ConvDims {
  int64_t N, C, M, group, in_sp, k_sp, out_sp;
};

// y [N, M, out_sp] = conv(x [N, C, in_sp], w [M, C/group, k_sp]) + bias, in f32, one matrix product
// a group over every image of the batch (conv_gemm.h): the patches come from `window` (2-D) or `taps` (taps[oi * k_sp +
// ki] is the input offset within a channel of kernel position ki at output position oi, or -1),
// or, when both are null (a 1x1 convolution at unit stride without padding), from the image itself.
void conv_f32(const float* x, const float* w, const float* bias, float* y, const ConvDims& d, const int64_t* taps,
              const ConvWindow2d* window, const ir::Epilogue& ep) {
  const int64_t cg = d.C / d.group, mg = d.M / d.group, K = cg * d.k_sp;
  for (int64_t gi = 0; gi < d.group; ++gi) {
    conv_gemm_f32(w + gi * mg * K, bias != nullptr ? bias + gi * mg : nullptr, x + gi * cg * d.in_sp, taps,
                  y + gi * mg * d.out_sp,
                  {mg, K, d.out_sp, d.k_sp, d.in_sp, window, d.N, d.C * d.in_sp, d.M * d.out_sp}, ep);
  }
}

// One (image, channel) plane. Compiled three times, for AVX-512, AVX2 and the baseline ISA;
// depthwise_2d_f32 runs the planes in parallel and picks one.
//
// At unit stride along the rows, the plane is first copied into `pad` with its padding as zeros
// (depthwise_padded_size floats), so that a run of outputs (kRun, or 16 at a row's end) sums
// every tap in registers with no bounds to check, and is stored once; kernel rows that fall on
// padding rows only are skipped, as the general loop skips them (the late layers of small
// networks have planes of two or three rows under kernels of five). Otherwise each tap adds into
// the output row in turn, over the outputs whose input lies inside the image. Both sum bias, then
// taps in order.
constexpr int64_t kRun = 32;

// The padded plane's row length and size (0 when the plane takes the general loop).
int64_t depthwise_padded_width(const Window& g) {
  const int64_t need = (g.out[1] + kRun - 1) / kRun * kRun + (g.kernel[1] - 1) * g.dilations[1];
  return std::max(need, g.pad_begin[1] + g.in[1]);
}
int64_t depthwise_padded_size(const Window& g) {
  if (g.strides[1] != 1) return 0;
  return ((g.out[0] - 1) * g.strides[0] + (g.kernel[0] - 1) * g.dilations[0] + 1) * depthwise_padded_width(g);
}

// The first `count` of kN outputs from xr (the padded row of kernel row i0, column o0; kernel rows
// row_step floats apart): bias, then the taps of kernel rows [i0, i1) in order.
template <int64_t kN>
__attribute__((always_inline)) inline void depthwise_run(const float* xr, int64_t row_step, const float* wc, float b0,
                                                        int64_t i0, int64_t i1, int64_t kw, int64_t dw, float* out,
                                                        int64_t count) {
  float acc[kN];
  for (int64_t t = 0; t < kN; ++t) acc[t] = b0;
  for (int64_t i = i0; i < i1; ++i, xr += row_step) {
    for (int64_t j = 0; j < kw; ++j) {
      const float wv = wc[i * kw + j];
      const float* xs = xr + j * dw;
      for (int64_t t = 0; t < kN; ++t) acc[t] += xs[t] * wv;
    }
  }
  std::copy(acc, acc + count, out);
}

__attribute__((always_inline)) inline void depthwise_plane(const float* xc, const float* wc, float b0, float* yc,
                                                          const Window& g, const ir::Epilogue& ep, float* pad) {
  const int64_t ih = g.in[0], iw = g.in[1], oh = g.out[0], ow = g.out[1], kh = g.kernel[0], kw = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1];
  if (sw == 1) {
    const int64_t W = depthwise_padded_width(g), H = depthwise_padded_size(g) / W;
    std::fill(pad, pad + H * W, 0.0f);
    for (int64_t pr = 0; pr < H; ++pr) {
      const int64_t row = pr - ph;
      if (row >= 0 && row < ih) std::copy(xc + row * iw, xc + row * iw + iw, pad + pr * W + pw);
    }
    for (int64_t r = 0; r < oh; ++r) {
      // Kernel rows i over input rows: 0 <= r * sh + i * dh - ph < ih.
      const int64_t top = ph - r * sh, bottom = ih - 1 + ph - r * sh;
      int64_t i0 = top > 0 ? (top + dh - 1) / dh : 0;
      int64_t i1 = bottom < 0 ? 0 : std::min(kh, bottom / dh + 1);
      if (i1 <= i0) i0 = i1 = 0;  // a row over padding alone: the bias
      const float* xr = pad + (r * sh + i0 * dh) * W;
      for (int64_t o0 = 0; o0 < ow; o0 += kRun) {
        const int64_t count = std::min(kRun, ow - o0);
        if (count > kRun / 2) {
          depthwise_run<kRun>(xr + o0, dh * W, wc, b0, i0, i1, kw, dw, yc + r * ow + o0, count);
        } else {
          depthwise_run<kRun / 2>(xr + o0, dh * W, wc, b0, i0, i1, kw, dw, yc + r * ow + o0, count);
        }
      }
    }
    apply_epilogue_f32(ep, yc, oh * ow);
    return;
  }
  for (int64_t r = 0; r < oh; ++r) {
    float* yr = yc + r * ow;
    for (int64_t o = 0; o < ow; ++o) yr[o] = b0;
    for (int64_t i = 0; i < kh; ++i) {
      const int64_t row = r * sh - ph + i * dh;
      if (row < 0 || row >= ih) continue;
      const float* xr = xc + row * iw;
      for (int64_t j = 0; j < kw; ++j) {
        // Outputs o with 0 <= o * sw - pw + j * dw < iw.
        const int64_t off = j * dw - pw;
        const int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
        const int64_t hi = iw - off <= 0 ? 0 : std::min<int64_t>(ow, (iw - off + sw - 1) / sw);
        const float wv = wc[i * kw + j];
        const float* __restrict xs = xr + off;
        float* __restrict yo = yr;
        if (sw == 1) {
#pragma omp simd
          for (int64_t o = lo; o < hi; ++o) yo[o] += xs[o] * wv;
        } else {
          for (int64_t o = lo; o < hi; ++o) yo[o] += xs[o * sw] * wv;
        }
      }
    }
  }
  apply_epilogue_f32(ep, yc, oh * ow);
}

__attribute__((target("avx512f,avx512dq,avx2,fma"))) void depthwise_plane_avx512(
    const float* xc, const float* wc, float b0, float* yc, const Window& g, const ir::Epilogue& ep, float* pad) {
  depthwise_plane(xc, wc, b0, yc, g, ep, pad);
}

__attribute__((target("avx2,fma"))) void depthwise_plane_avx2(const float* xc, const float* wc, float b0, float* yc,
                                                              const Window& g, const ir::Epilogue& ep, float* pad) {
  depthwise_plane(xc, wc, b0, yc, g, ep, pad);
}

void depthwise_plane_baseline(const float* xc, const float* wc, float b0, float* yc, const Window& g,
                              const ir::Epilogue& ep, float* pad) {
  depthwise_plane(xc, wc, b0, yc, g, ep, pad);
}

// A 2-D depthwise convolution (one input channel a group, one output channel a group) in f32:
// for each output row and kernel position, the output positions whose input column is inside the
// image form one range, so the inner loop runs over contiguous outputs (and inputs, at stride 1)
// instead of gathering through a tap table. Each output sums its taps in the same order as the
// general loop (kernel rows, then columns), after the bias.
void depthwise_2d_f32(const float* x, const float* w, const float* bias, float* y, int64_t N, int64_t C,
                      const Window& g, const ir::Epilogue& ep) {
  const Isa isa = isa_active();
  const auto plane = isa >= Isa::kAvx512 ? depthwise_plane_avx512
                     : isa >= Isa::kAvx2 ? depthwise_plane_avx2
                                         : depthwise_plane_baseline;
  const int64_t in_sp = g.in[0] * g.in[1], out_sp = g.out[0] * g.out[1], k_sp = g.kernel[0] * g.kernel[1];
  parallel_region(true, [&] {
    std::vector<float> pad(static_cast<size_t>(depthwise_padded_size(g)));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < N; ++b) {
      for (int64_t c = 0; c < C; ++c) {
        plane(x + (b * C + c) * in_sp, w + c * k_sp, bias != nullptr ? bias[c] : 0.0f, y + (b * C + c) * out_sp, g,
              ep, pad.data());
      }
    }
  });
}

// y [N, M, out_sp] = conv_transpose(x [N, C, in_sp], w [C, M/group, k_sp]) + bias, in f32: per
// (batch, group), the products of every (output channel, kernel position) with every input
// position as one matrix product (conv_gemm.h), [M/g * k_sp, C/g] x [C/g, in_sp], then each
// product added into the output position taps[input position * k_sp + kernel position] (skipped
// when -1). Threads split the output channels, so no two write one element.
void conv_transpose_f32(const float* x, const float* w, const float* bias, float* y, const ConvDims& d,
                        const std::vector<int64_t>& taps, const ir::Epilogue& ep) {
  const int64_t cg = d.C / d.group, mg = d.M / d.group, cols = mg * d.k_sp;
  std::vector<float> wt(static_cast<size_t>(cols * cg)), prod(static_cast<size_t>(cols * d.in_sp));
  for (int64_t gi = 0; gi < d.group; ++gi) {
    // wt[col, c] = w[gi * cg + c, col]: the product's [cols, C/g] rows.
    const float* wg = w + gi * cg * cols;
    transpose_f32(wg, wt.data(), cg, cols);
    for (int64_t b = 0; b < d.N; ++b) {
      conv_gemm_f32(wt.data(), nullptr, x + (b * d.C + gi * cg) * d.in_sp, nullptr, prod.data(),
                    {cols, cg, d.in_sp, 1, d.in_sp, nullptr}, ir::Epilogue{});
      float* yg = y + (b * d.M + gi * mg) * d.out_sp;
      parallel_for(0, mg, true, [&](int64_t m) {
        float* ym = yg + m * d.out_sp;
        std::fill(ym, ym + d.out_sp, bias != nullptr ? bias[gi * mg + m] : 0.0f);
        for (int64_t ki = 0; ki < d.k_sp; ++ki) {
          const float* pr = prod.data() + (m * d.k_sp + ki) * d.in_sp;
          const int64_t* t = taps.data() + ki;
          for (int64_t p = 0; p < d.in_sp; ++p) {
            const int64_t off = t[p * d.k_sp];
            if (off >= 0) ym[off] += pr[p];
          }
        }
        apply_epilogue_f32(ep, ym, d.out_sp);
      });
    }
  }
}

Status conv(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &wt = *in[1];
  if (x.rank() < 3 || wt.rank() != x.rank()) return tensor_error(n, "x and w must be [N, C, D...] and [M, C/g, k...]");
  const int64_t N = x.shape()[0], C = x.shape()[1], M = wt.shape()[0], group = n.attr_int("group", 1);
  const Shape spatial(x.shape().begin() + 2, x.shape().end());
  const std::vector<int64_t> kernel(wt.shape().begin() + 2, wt.shape().end());
  if (C % group || M % group || wt.shape()[1] != C / group) {
    return tensor_error(n, "channels " + std::to_string(C) + " / weight " + ir::shape_to_string(wt.shape()) +
                               " do not fit group " + std::to_string(group));
  }
  KILN_ASSIGN_OR_RETURN(Window g, window_geometry(n, spatial, kernel, false));
  Shape shape = {N, M};
  shape.insert(shape.end(), g.out.begin(), g.out.end());
  const Tensor* bias_in = in.size() > 2 ? in[2] : nullptr;
  const ir::Epilogue ep = ir::node_epilogue(n);
  if (spatial.size() == 2 && group == C && M == C && x.dtype() == DType::kF32 && wt.dtype() == DType::kF32 &&
      (bias_in == nullptr || (bias_in->dtype() == DType::kF32 && bias_in->numel() == M))) {
    Tensor yt = Tensor::uninitialized(DType::kF32, shape);  // the kernel writes every output
    depthwise_2d_f32(x.data<float>(), wt.data<float>(), bias_in != nullptr ? bias_in->data<float>() : nullptr,
                     yt.mutable_data<float>(), N, C, g, ep);
    out[0] = std::move(yt);
    return Status::ok();
  }
  const int64_t cg = C / group, mg = M / group, in_sp = ir::shape_numel(spatial), k_sp = ir::shape_numel(kernel);
  const int64_t out_sp = ir::shape_numel(g.out);
  const auto make_taps = [&] { return conv_taps(g); };
  const Tensor* bias_t = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() == DType::kF32 && wt.dtype() == DType::kF32 && (bias_t == nullptr || bias_t->dtype() == DType::kF32)) {
    if (bias_t != nullptr && bias_t->numel() != M) return tensor_error(n, "bias must have M entries");
    // A 1x1 convolution at unit stride without padding reads the image as it is; a 2-D one
    // gathers its patches by arithmetic; others through the tap table.
    bool identity = k_sp == 1 && g.out == spatial;
    for (size_t d = 0; d < spatial.size(); ++d) identity = identity && g.strides[d] == 1 && g.pad_begin[d] == 0;
    std::optional<ConvWindow2d> w2;
    std::vector<int64_t> taps;
    if (!identity && spatial.size() == 2) {
      w2 = ConvWindow2d{g.in[0], g.in[1], g.out[1], kernel[0], kernel[1], g.strides[0], g.strides[1],
                        g.dilations[0], g.dilations[1], g.pad_begin[0], g.pad_begin[1]};
    } else if (!identity) {
      taps = make_taps();
    }
    Tensor yt = Tensor::uninitialized(DType::kF32, shape);  // the kernel writes every output
    conv_f32(x.data<float>(), wt.data<float>(), bias_t != nullptr ? bias_t->data<float>() : nullptr,
             yt.mutable_data<float>(), {N, C, M, group, in_sp, k_sp, out_sp}, taps.empty() ? nullptr : taps.data(),
             w2 ? &*w2 : nullptr, ep);
    out[0] = std::move(yt);
    return Status::ok();
  }
  const std::vector<int64_t> taps = make_taps();
  const std::vector<double> xv = ir::tensor_to_f64(x), wv = ir::tensor_to_f64(wt);
  std::vector<double> y(static_cast<size_t>(N * M * out_sp), 0.0);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t m = 0; m < M; ++m) {
      const int64_t gi = m / mg;
      const double bias = in.size() > 2 && in[2] != nullptr ? ir::tensor_get_f64(*in[2], m) : 0.0;
      double* yo = y.data() + (b * M + m) * out_sp;
      for (int64_t oi = 0; oi < out_sp; ++oi) {
        double s = bias;
        for (int64_t c = 0; c < cg; ++c) {
          const double* xc = xv.data() + (b * C + gi * cg + c) * in_sp;
          const double* wc = wv.data() + (m * cg + c) * k_sp;
          const int64_t* t = taps.data() + oi * k_sp;
          for (int64_t ki = 0; ki < k_sp; ++ki) {
            if (t[ki] >= 0) s += xc[t[ki]] * wc[ki];
          }
        }
        yo[oi] = ir::apply_epilogue(ep, s);
      }
    }
  }
  Tensor yt(x.dtype(), shape);
  for (size_t i = 0; i < y.size(); ++i) ir::tensor_set_f64(yt, static_cast<int64_t>(i), y[i]);
  out[0] = std::move(yt);
  return Status::ok();
}

Status conv_transpose(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &wt = *in[1];
  if (x.rank() < 3 || wt.rank() != x.rank()) return tensor_error(n, "x and w must be [N, C, D...] and [C, M/g, k...]");
  const int64_t N = x.shape()[0], C = x.shape()[1], group = n.attr_int("group", 1);
  if (wt.shape()[0] != C || C % group) return tensor_error(n, "weight does not match the input channels");
  const int64_t mg = wt.shape()[1], M = mg * group, cg = C / group;
  const Shape spatial(x.shape().begin() + 2, x.shape().end());
  const size_t d = spatial.size();
  std::vector<int64_t> kernel(wt.shape().begin() + 2, wt.shape().end());
  const std::vector<int64_t> strides = ints_or(n, "strides", d, 1), dil = ints_or(n, "dilations", d, 1),
                             outpad = ints_or(n, "output_padding", d, 0), out_shape_attr = n.attr_ints("output_shape");
  std::vector<int64_t> pads = ints_or(n, "pads", 2 * d, 0);
  const std::string auto_pad = n.attr_str("auto_pad", "NOTSET");
  std::vector<int64_t> osz(d);
  for (size_t i = 0; i < d; ++i) {
    const int64_t ext = (kernel[i] - 1) * dil[i] + 1;
    const int64_t full = strides[i] * (spatial[i] - 1) + outpad[i] + ext;
    if (!out_shape_attr.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t target = !out_shape_attr.empty() ? out_shape_attr[out_shape_attr.size() - d + i] : spatial[i] * strides[i];
      const int64_t total = std::max<int64_t>(0, full - target);
      const bool upper = auto_pad != "SAME_LOWER";
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[i + d] = total - pads[i];
      osz[i] = target;
    } else {
      if (auto_pad == "VALID") pads[i] = pads[i + d] = 0;
      osz[i] = full - pads[i] - pads[i + d];
    }
  }
  Shape shape = {N, M};
  shape.insert(shape.end(), osz.begin(), osz.end());
  const int64_t in_sp = ir::shape_numel(spatial), k_sp = ir::shape_numel(kernel), out_sp = ir::shape_numel(osz);
  const std::vector<int64_t> os = tensor_strides(osz);
  const ir::Epilogue ep = ir::node_epilogue(n);
  const Tensor* bias_t = in.size() > 2 ? in[2] : nullptr;
  if (x.dtype() == DType::kF32 && wt.dtype() == DType::kF32 && (bias_t == nullptr || bias_t->dtype() == DType::kF32)) {
    if (bias_t != nullptr && bias_t->numel() != M) return tensor_error(n, "bias must have M entries");
    // For each (input position, kernel position), the output offset within a channel, or -1.
    std::vector<int64_t> taps(static_cast<size_t>(in_sp * k_sp));
    for_each_pos(spatial, [&](const std::vector<int64_t>& p, int64_t pi) {
      for_each_pos(kernel, [&](const std::vector<int64_t>& k, int64_t ki) {
        int64_t off = 0;
        for (size_t i = 0; i < d && off >= 0; ++i) {
          const int64_t q = p[i] * strides[i] + k[i] * dil[i] - pads[i];
          off = (q < 0 || q >= osz[i]) ? -1 : off + q * os[i];
        }
        taps[static_cast<size_t>(pi * k_sp + ki)] = off;
      });
    });
    Tensor yt = Tensor::uninitialized(DType::kF32, shape);  // the kernel writes every output
    conv_transpose_f32(x.data<float>(), wt.data<float>(), bias_t != nullptr ? bias_t->data<float>() : nullptr,
                       yt.mutable_data<float>(), {N, C, M, group, in_sp, k_sp, out_sp}, taps, ep);
    out[0] = std::move(yt);
    return Status::ok();
  }
  const std::vector<double> xv = ir::tensor_to_f64(x), wv = ir::tensor_to_f64(wt);
  std::vector<double> y(static_cast<size_t>(N * M * out_sp), 0.0);
  for (int64_t b = 0; b < N; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      const int64_t gi = c / cg;
      for_each_pos(spatial, [&](const std::vector<int64_t>& p, int64_t pi) {
        const double xval = xv[static_cast<size_t>((b * C + c) * in_sp + pi)];
        for_each_pos(kernel, [&](const std::vector<int64_t>& k, int64_t ki) {
          int64_t off = 0;
          for (size_t i = 0; i < d && off >= 0; ++i) {
            const int64_t q = p[i] * strides[i] + k[i] * dil[i] - pads[i];
            off = (q < 0 || q >= osz[i]) ? -1 : off + q * os[i];
          }
          if (off < 0) return;
          for (int64_t m = 0; m < mg; ++m) {
            y[static_cast<size_t>((b * M + gi * mg + m) * out_sp + off)] +=
                xval * wv[static_cast<size_t>((c * mg + m) * k_sp + ki)];
          }
        });
      });
    }
  }
  Tensor yt(x.dtype(), shape);
  for (int64_t i = 0; i < yt.numel(); ++i) {
    const int64_t m = (i / out_sp) % M;
    const double bias = in.size() > 2 && in[2] != nullptr ? ir::tensor_get_f64(*in[2], m) : 0.0;
    ir::tensor_set_f64(yt, i, ir::apply_epilogue(ep, y[static_cast<size_t>(i)] + bias));
  }
  out[0] = std::move(yt);
  return Status::ok();
}

// A 2-D MaxPool or AveragePool in f32 without the index output: the general loop below with its
// window walked by arithmetic, the same values in the same order (sums in double), the planes in
// parallel. MaxPool's outputs whose window columns all lie inside the input take each tap across
// the whole run of such outputs at once (the same order of taps, so the same results, NaN
// included).
void pool_2d_f32(const float* x, float* y, int64_t NC, const Window& g, bool is_max, bool include_pad) {
  const int64_t ih = g.in[0], iw = g.in[1], oh = g.out[0], ow = g.out[1], kh = g.kernel[0], kw = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1], peh = g.pad_end[0], pew = g.pad_end[1];
  // Outputs ox in [ox_lo, ox_hi) read only columns inside the input.
  const int64_t ox_lo = std::min<int64_t>((pw + sw - 1) / sw, ow);
  const int64_t last = iw - 1 - (kw - 1) * dw + pw;  // the largest ox * sw whose window fits
  const int64_t ox_hi = last < 0 ? ox_lo : std::clamp<int64_t>(last / sw + 1, ox_lo, ow);
  parallel_for(0, NC, NC * oh * ow * kh * kw > 65536, [&](int64_t nc) {
    const float* c = x + nc * ih * iw;
    float* yc = y + nc * oh * ow;
    auto one = [&](int64_t oy, int64_t ox) {
      double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t count = 0, padded = 0;
      for (int64_t ki = 0; ki < kh; ++ki) {
        const int64_t r = oy * sh - ph + ki * dh;
        const bool row_in = r >= 0 && r < ih, row_pad = r >= -ph && r < ih + peh;
        for (int64_t kj = 0; kj < kw; ++kj) {
          const int64_t col = ox * sw - pw + kj * dw;
          if (row_pad && col >= -pw && col < iw + pew) ++padded;
          if (!row_in || col < 0 || col >= iw) continue;
          const double v = c[r * iw + col];
          if (is_max) {
            if (v > acc || count == 0) acc = v;
          } else {
            acc += v;
          }
          ++count;
        }
      }
      yc[oy * ow + ox] = static_cast<float>(
          is_max ? acc : acc / static_cast<double>(include_pad ? padded : std::max<int64_t>(count, 1)));
    };
    for (int64_t oy = 0; oy < oh; ++oy) {
      bool any_row = false;
      for (int64_t ki = 0; ki < kh; ++ki) {
        const int64_t r = oy * sh - ph + ki * dh;
        any_row = any_row || (r >= 0 && r < ih);
      }
      if (!is_max || !any_row || ox_lo >= ox_hi) {
        for (int64_t ox = 0; ox < ow; ++ox) one(oy, ox);
        continue;
      }
      for (int64_t ox = 0; ox < ox_lo; ++ox) one(oy, ox);
      for (int64_t ox = ox_hi; ox < ow; ++ox) one(oy, ox);
      float* yr = yc + oy * ow;
      bool first = true;
      for (int64_t ki = 0; ki < kh; ++ki) {
        const int64_t r = oy * sh - ph + ki * dh;
        if (r < 0 || r >= ih) continue;
        for (int64_t kj = 0; kj < kw; ++kj) {
          const float* xr = c + r * iw + kj * dw - pw;
          if (first) {
            for (int64_t ox = ox_lo; ox < ox_hi; ++ox) yr[ox] = xr[ox * sw];
            first = false;
          } else {
            for (int64_t ox = ox_lo; ox < ox_hi; ++ox) yr[ox] = xr[ox * sw] > yr[ox] ? xr[ox * sw] : yr[ox];
          }
        }
      }
    }
  });
}

Status pool(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  if (x.rank() < 3) return tensor_error(n, "needs [N, C, D...]");
  const bool global = n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool";
  const bool is_max = n.op == "MaxPool" || n.op == "GlobalMaxPool";
  const Shape spatial(x.shape().begin() + 2, x.shape().end());
  if (global && x.dtype() == DType::kF32) {
    // One sum or maximum a channel over contiguous floats (accumulated in double, as below).
    const int64_t NC = x.shape()[0] * x.shape()[1], in_sp = ir::shape_numel(spatial);
    Shape shape = {x.shape()[0], x.shape()[1]};
    shape.insert(shape.end(), spatial.size(), 1);
    Tensor y(DType::kF32, shape);
    const float* xp = x.data<float>();
    float* yp = y.mutable_data<float>();
    parallel_for(0, NC, NC * in_sp > 65536, [&](int64_t nc) {
      const float* c = xp + nc * in_sp;
      double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
      if (is_max) {
        // The first element, then any larger one (a NaN first stays, as in the general loop).
        if (in_sp > 0) acc = c[0];
        for (int64_t i = 1; i < in_sp; ++i) acc = c[i] > acc ? c[i] : acc;
      } else {
        // In vector lanes (the sum's order differs from the general loop's only in double).
#pragma omp simd reduction(+ : acc)
        for (int64_t i = 0; i < in_sp; ++i) acc += static_cast<double>(c[i]);
      }
      yp[nc] = static_cast<float>(is_max ? acc : acc / static_cast<double>(std::max<int64_t>(in_sp, 1)));
    });
    out[0] = std::move(y);
    return Status::ok();
  }
  Window g;
  if (global) {
    g.in = spatial;
    g.kernel = spatial;
    g.strides.assign(spatial.size(), 1);
    g.dilations.assign(spatial.size(), 1);
    g.pad_begin.assign(spatial.size(), 0);
    g.pad_end.assign(spatial.size(), 0);
    g.out.assign(spatial.size(), 1);
  } else {
    const std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
    if (kernel.size() != spatial.size()) return tensor_error(n, "kernel_shape does not match the spatial dims");
    KILN_ASSIGN_OR_RETURN(g, window_geometry(n, spatial, kernel, true));
  }
  const int64_t NC = x.shape()[0] * x.shape()[1], in_sp = ir::shape_numel(spatial), out_sp = ir::shape_numel(g.out);
  Shape shape = {x.shape()[0], x.shape()[1]};
  shape.insert(shape.end(), g.out.begin(), g.out.end());
  const bool include_pad = n.attr_int("count_include_pad", 0) != 0;
  if (x.dtype() == DType::kF32 && spatial.size() == 2 && out.size() == 1) {
    Tensor y(DType::kF32, shape);
    pool_2d_f32(x.data<float>(), y.numel() > 0 ? y.mutable_data<float>() : nullptr, NC, g, is_max, include_pad);
    out[0] = std::move(y);
    return Status::ok();
  }
  Tensor y(x.dtype(), shape), idx(DType::kI64, shape);
  const std::vector<double> xv = ir::tensor_to_f64(x);
  const std::vector<int64_t> xs = tensor_strides(spatial);
  // MaxPool's indices count within [N, C, D...] in row-major order, or with the spatial dims in
  // column-major order when storage_order is 1.
  std::vector<int64_t> index_strides = xs;
  if (n.attr_int("storage_order", 0) != 0) {
    int64_t s = 1;
    for (size_t d = 0; d < spatial.size(); ++d) {
      index_strides[d] = s;
      s *= spatial[d];
    }
  }
  for (int64_t nc = 0; nc < NC; ++nc) {
    for_each_pos(g.out, [&](const std::vector<int64_t>& o, int64_t oi) {
      double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t count = 0, best = -1, padded = 0;
      for_each_pos(g.kernel, [&](const std::vector<int64_t>& k, int64_t) {
        int64_t off = 0, index_off = 0;
        bool inside = true, in_padded = true;
        for (size_t d = 0; d < o.size(); ++d) {
          const int64_t p = o[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
          if (p < 0 || p >= spatial[d]) inside = false;
          if (p < -g.pad_begin[d] || p >= spatial[d] + g.pad_end[d]) in_padded = false;
          off += p * xs[d];
          index_off += p * index_strides[d];
        }
        if (in_padded) ++padded;
        if (!inside) return;
        const double v = xv[static_cast<size_t>(nc * in_sp + off)];
        ++count;
        if (is_max) {
          if (v > acc || best < 0) {
            acc = v;
            best = nc * in_sp + index_off;
          }
        } else {
          acc += v;
        }
      });
      const int64_t dst = nc * out_sp + oi;
      if (is_max) {
        ir::tensor_set_f64(y, dst, acc);
        idx.mutable_data<int64_t>()[dst] = best;
      } else {
        ir::tensor_set_f64(y, dst, acc / static_cast<double>(include_pad ? padded : std::max<int64_t>(count, 1)));
      }
    });
  }
  out[0] = std::move(y);
  if (out.size() > 1) out[1] = std::move(idx);
  return Status::ok();
}

// MaxUnpool: x's elements go to the flat positions their indices name in [N, C, O...] with O_d =
// (D_d - 1) * stride_d - pads_d - pads_{d + r} + kernel_d (MaxPool's indices of its input), the
// rest is zero (a later element wins a position named twice). With output_shape, that result
// sits at the start of each dimension of the given shape, which pads it at the end.
Status max_unpool(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor& x = *in[0];
  const Tensor& idx = *in[1];
  if (x.rank() < 3) return tensor_error(n, "needs [N, C, D...]");
  if (idx.dtype() != DType::kI64 || idx.shape() != x.shape()) {
    return tensor_error(n, "indices must be int64 of x's shape " + ir::shape_to_string(x.shape()));
  }
  const size_t r = x.shape().size() - 2;
  const std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
  std::vector<int64_t> strides = n.attr_ints("strides"), pads = n.attr_ints("pads");
  if (kernel.size() != r) return tensor_error(n, "kernel_shape does not match the spatial dims");
  if (strides.empty()) strides.assign(r, 1);
  if (pads.empty()) pads.assign(2 * r, 0);
  if (strides.size() != r || pads.size() != 2 * r) {
    return tensor_error(n, "strides or pads do not match the spatial dims");
  }
  Shape inferred = {x.shape()[0], x.shape()[1]};
  for (size_t d = 0; d < r; ++d) {
    const int64_t o = (x.shape()[2 + d] - 1) * strides[d] - pads[d] - pads[d + r] + kernel[d];
    if (o < 0) return tensor_error(n, "the pads leave a negative output dimension");
    inferred.push_back(o);
  }
  Shape shape = inferred;
  if (in.size() > 2 && in[2] != nullptr) {
    shape = ir::tensor_to_i64(*in[2]);
    if (shape.size() != inferred.size()) return tensor_error(n, "output_shape must have x's rank");
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] < inferred[d]) {
        return tensor_error(n, "output_shape " + ir::shape_to_string(shape) + " is smaller than the unpooled " +
                                   ir::shape_to_string(inferred));
      }
    }
  }
  Tensor y(x.dtype(), shape);  // zero-filled
  const int64_t inferred_size = ir::shape_numel(inferred), elem = static_cast<int64_t>(ir::dtype_size(x.dtype()));
  const int64_t* ip = idx.data<int64_t>();
  const std::byte* xp = x.bytes();
  std::byte* yp = y.numel() > 0 ? y.mutable_bytes() : nullptr;
  for (int64_t e = 0; e < x.numel(); ++e) {
    if (ip[e] < 0 || ip[e] >= inferred_size) {
      return tensor_error(n, "index " + std::to_string(ip[e]) + " is outside the unpooled " +
                                 ir::shape_to_string(inferred));
    }
    // The same coordinates in the output's shape.
    int64_t rest = ip[e], at = 0, stride = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      at += rest % inferred[d] * stride;
      rest /= inferred[d];
      stride *= shape[d];
    }
    std::memcpy(yp + at * elem, xp + e * elem, static_cast<size_t>(elem));
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_conv_kernels(TensorKernelTable& table) {
  table["MaxUnpool"] = max_unpool;
  table["Conv"] = conv;
  table["ConvTranspose"] = conv_transpose;
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}) table[op] = pool;
}

}  // namespace kiln::cpu
