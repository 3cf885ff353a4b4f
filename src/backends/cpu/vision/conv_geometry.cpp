#include "backends/cpu/vision/conv_geometry.h"

#include <algorithm>
#include <string>

#include "backends/cpu/tensor/tensor_kernel.h"

namespace kiln::cpu {

std::vector<int64_t> ints_or(const ir::Node& n, const char* key, size_t count, int64_t fallback) {
  std::vector<int64_t> v = n.attr_ints(key);
  if (v.empty()) v.assign(count, fallback);
  return v;
}

// Output size and padding of a sliding window over the spatial dims `in` (Conv and pooling).
Expected<Window> window_geometry(const ir::Node& n, const ir::Shape& in, const std::vector<int64_t>& kernel, bool pool) {
  const size_t d = in.size();
  Window w;
  w.in = in;
  w.kernel = kernel;
  w.strides = ints_or(n, "strides", d, 1);
  w.dilations = ints_or(n, "dilations", d, 1);
  std::vector<int64_t> pads = ints_or(n, "pads", 2 * d, 0);
  if (w.kernel.size() != d || w.strides.size() != d || w.dilations.size() != d || pads.size() != 2 * d) {
    return tensor_error(n, "kernel_shape, strides, dilations or pads do not match the " + std::to_string(d) + " spatial dims");
  }
  const std::string auto_pad = n.attr_str("auto_pad", "NOTSET");
  const bool ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  for (size_t i = 0; i < d; ++i) {
    const int64_t ext = (w.kernel[i] - 1) * w.dilations[i] + 1, s = w.strides[i];
    int64_t pb = pads[i], pe = pads[i + d], o;
    if (auto_pad == "VALID") {
      pb = pe = 0;
      o = (in[i] - ext) / s + 1;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (in[i] + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (o - 1) * s + ext - in[i]);
      pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else {
      const int64_t span = in[i] + pb + pe - ext;
      o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
      if (pool && ceil_mode && (o - 1) * s >= in[i] + pb) --o;
    }
    if (o < 0) return tensor_error(n, "the window is larger than the padded input");
    w.pad_begin.push_back(pb);
    w.pad_end.push_back(pe);
    w.out.push_back(o);
  }
  return w;
}

std::vector<int64_t> conv_taps(const Window& g) {
  const std::vector<int64_t> xs = tensor_strides(g.in);
  const int64_t k_sp = ir::shape_numel(g.kernel);
  std::vector<int64_t> taps(static_cast<size_t>(ir::shape_numel(g.out) * k_sp));
  for_each_pos(g.out, [&](const std::vector<int64_t>& o, int64_t oi) {
    for_each_pos(g.kernel, [&](const std::vector<int64_t>& k, int64_t ki) {
      int64_t off = 0;
      for (size_t d = 0; d < o.size() && off >= 0; ++d) {
        const int64_t p = o[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
        off = (p < 0 || p >= g.in[d]) ? -1 : off + p * xs[d];
      }
      taps[static_cast<size_t>(oi * k_sp + ki)] = off;
    });
  });
  return taps;
}

}  // namespace kiln::cpu
