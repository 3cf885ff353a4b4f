// The RoiAlign tensor kernel: x [N, C, H, W], rois [R, 4] of (x1, y1, x2, y2) in the input's
// coordinates times 1 / spatial_scale, batch_indices [R] -> y [R, C, output_height,
// output_width], in f64. Each output bin of a region averages (mode avg) or takes the largest of
// (mode max) a grid of bilinear samples: sampling_ratio x sampling_ratio of them, or with 0 as
// many as the bin is pixels tall and wide (rounded up). coordinate_transformation_mode half_pixel
// shifts the region by half a pixel; output_half_pixel (opset 10's behaviour) does not, and
// makes a region at least one pixel wide and tall. A sample more than a pixel outside the image
// reads as 0; one inside that margin is clamped to the edge. As in the operator's reference,
// mode max keeps the largest of the four weighted neighbours of each sample. A region's samples
// are listed before its channels read them, so a region whose grid would pass kMaxRegionSamples
// (an adaptive grid over a huge region, say), or whose corners are not finite, is an error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {
namespace {

using ir::Tensor;

constexpr double kMaxRegionSamples = 1 << 22;  // 256 MiB of Bilinear

std::string whole_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

// The four neighbours of a sample at (y, x) and their weights; all weights 0 outside the image.
struct Bilinear {
  int64_t at[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Bilinear bilinear(double y, double x, int64_t h, int64_t w) {
  Bilinear b;
  if (y < -1.0 || y > static_cast<double>(h) || x < -1.0 || x > static_cast<double>(w)) return b;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  auto y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x);
  int64_t y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= h - 1) {
    y0 = y1 = h - 1;
    y = static_cast<double>(y0);
  }
  if (x0 >= w - 1) {
    x0 = x1 = w - 1;
    x = static_cast<double>(x0);
  }
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0);
  const double hy = 1.0 - ly, hx = 1.0 - lx;
  b.at[0] = y0 * w + x0;
  b.at[1] = y0 * w + x1;
  b.at[2] = y1 * w + x0;
  b.at[3] = y1 * w + x1;
  b.w[0] = hy * hx;
  b.w[1] = hy * lx;
  b.w[2] = ly * hx;
  b.w[3] = ly * lx;
  return b;
}

Status roi_align(const ir::Node& n, const TensorInputs& in, std::vector<Tensor>& out) {
  const Tensor &x = *in[0], &rois = *in[1], &batch = *in[2];
  if (x.rank() != 4) return tensor_error(n, "x must be [N, C, H, W]");
  if (rois.rank() != 2 || rois.shape()[1] != 4) return tensor_error(n, "rois must be [num_rois, 4]");
  const int64_t R = rois.shape()[0];
  if (batch.rank() != 1 || batch.shape()[0] != R) {
    return tensor_error(n, "batch_indices must be [" + std::to_string(R) + "], one a region");
  }
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  const int64_t oh = n.attr_int("output_height", 1), ow = n.attr_int("output_width", 1);
  const int64_t ratio = n.attr_int("sampling_ratio", 0);
  const double scale = n.attr_float("spatial_scale", 1.0);
  const bool half_pixel = n.attr_str("coordinate_transformation_mode", "half_pixel") == "half_pixel";
  const bool max_mode = n.attr_str("mode", "avg") == "max";
  const std::vector<double> xv = ir::tensor_to_f64(x), rv = ir::tensor_to_f64(rois);
  const std::vector<int64_t> bi = ir::tensor_to_i64(batch);
  Tensor y(x.dtype(), {R, C, oh, ow});
  const double offset = half_pixel ? 0.5 : 0.0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t b = bi[static_cast<size_t>(r)];
    if (b < 0 || b >= N) {
      return tensor_error(n, "batch index " + std::to_string(b) + " of region " + std::to_string(r) +
                                 " is outside x's batch of " + std::to_string(N));
    }
    const double* roi = rv.data() + r * 4;
    if (!std::all_of(roi, roi + 4, [](double v) { return std::isfinite(v); })) {
      return tensor_error(n, "region " + std::to_string(r) + " has a corner that is not a finite number");
    }
    const double x1 = roi[0] * scale - offset, y1 = roi[1] * scale - offset;
    double rw = roi[2] * scale - offset - x1, rh = roi[3] * scale - offset - y1;
    if (!half_pixel) {
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    const double bin_h = rh / static_cast<double>(oh), bin_w = rw / static_cast<double>(ow);
    // A reversed region (half_pixel keeps its negative size) takes no samples: its bins read 0.
    const double grid_h = ratio > 0 ? static_cast<double>(ratio) : std::max(std::ceil(bin_h), 0.0);
    const double grid_w = ratio > 0 ? static_cast<double>(ratio) : std::max(std::ceil(bin_w), 0.0);
    if (grid_h * grid_w * static_cast<double>(oh * ow) > kMaxRegionSamples) {
      return tensor_error(n, "region " + std::to_string(r) + " needs " + whole_number(grid_h) + " x " +
                                 whole_number(grid_w) + " samples in each of its " + std::to_string(oh * ow) +
                                 " bins, more than the " + whole_number(kMaxRegionSamples) +
                                 " a region can take");
    }
    const auto gh = static_cast<int64_t>(grid_h), gw = static_cast<int64_t>(grid_w);
    const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
    // The samples of every bin, shared by the channels.
    std::vector<Bilinear> samples;
    samples.reserve(static_cast<size_t>(oh * ow * gh * gw));
    for (int64_t ph = 0; ph < oh; ++ph) {
      for (int64_t pw = 0; pw < ow; ++pw) {
        for (int64_t iy = 0; iy < gh; ++iy) {
          const double sy = y1 + static_cast<double>(ph) * bin_h +
                            (static_cast<double>(iy) + 0.5) * bin_h / static_cast<double>(gh);
          for (int64_t ix = 0; ix < gw; ++ix) {
            const double sx = x1 + static_cast<double>(pw) * bin_w +
                              (static_cast<double>(ix) + 0.5) * bin_w / static_cast<double>(gw);
            samples.push_back(bilinear(sy, sx, H, W));
          }
        }
      }
    }
    const size_t per_bin = static_cast<size_t>(gh * gw);
    for (int64_t c = 0; c < C; ++c) {
      const double* img = xv.data() + (b * C + c) * H * W;
      for (int64_t bin = 0; bin < oh * ow; ++bin) {
        double v = 0.0;
        for (size_t s = 0; s < per_bin; ++s) {
          const Bilinear& p = samples[static_cast<size_t>(bin) * per_bin + s];
          if (max_mode) {
            double m = p.w[0] * img[p.at[0]];
            for (int k = 1; k < 4; ++k) m = std::max(m, p.w[k] * img[p.at[k]]);
            v = s == 0 ? m : std::max(v, m);
          } else {
            for (int k = 0; k < 4; ++k) v += p.w[k] * img[p.at[k]];
          }
        }
        ir::tensor_set_f64(y, (r * C + c) * oh * ow + bin, max_mode ? v : v / count);
      }
    }
  }
  out[0] = std::move(y);
  return Status::ok();
}

}  // namespace

void register_tensor_roi_align_kernels(TensorKernelTable& table) { table["RoiAlign"] = roi_align; }

}  // namespace kiln::cpu
