// Where a sliding window (Conv, pooling) reads: ONNX's rules for kernel_shape, pads, strides,
// dilations, auto_pad and ceil_mode, shared by the f32, int8 and pooling kernels.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::cpu {

struct Window {
  std::vector<int64_t> in, kernel, strides, dilations, pad_begin, pad_end, out;
};

// The node's integer-list attribute `key`, or `count` copies of `fallback` when it has none.
std::vector<int64_t> ints_or(const ir::Node& n, const char* key, size_t count, int64_t fallback);

// Output size and padding of a sliding window over the spatial dims `in` (Conv and pooling).
Expected<Window> window_geometry(const ir::Node& n, const ir::Shape& in, const std::vector<int64_t>& kernel, bool pool);

// For each (output position, kernel position), the input offset within a channel, or -1 in
// padding: [out positions x kernel positions].
std::vector<int64_t> conv_taps(const Window& g);

// Calls f(index vector, flat index) for every position of `dims`, in row-major order.
template <typename F>
void for_each_pos(const std::vector<int64_t>& dims, F f) {
  const int64_t n = ir::shape_numel(dims);
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(idx, i);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace kiln::cpu
