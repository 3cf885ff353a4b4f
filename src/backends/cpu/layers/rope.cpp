#include "backends/cpu/layers/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/parallel.h"
#include "base/status.h"

namespace kiln::cpu {
namespace {

// cos_sin = [cos half | sin half] of pos * inv_freq[j]. The fp32 angle is what HF feeds to
// cos/sin; the double evaluation then rounds the exact cosine of that angle once.
void angles(int32_t position, const float* inv_freq, int64_t half, float* cos_sin) {
  const auto pos = static_cast<float>(position);
  for (int64_t j = 0; j < half; ++j) {
    const auto angle = static_cast<double>(pos * inv_freq[j]);
    cos_sin[j] = static_cast<float>(std::cos(angle));
    cos_sin[half + j] = static_cast<float>(std::sin(angle));
  }
}

// One token's heads: x: [rotary_dim] = [x1 | x2] per head; out = [x1*cos - x2*sin | x2*cos + x1*sin].
void rotate_row(const float* x, int64_t num_heads, int64_t head_dim, int64_t rotary_dim, const float* cos_sin,
                float* y) {
  const int64_t half = rotary_dim / 2;
  const float* cos_v = cos_sin;
  const float* sin_v = cos_sin + half;
  for (int64_t h = 0; h < num_heads; ++h) {
    const float* in = x + h * head_dim;
    float* out = y + h * head_dim;
    for (int64_t j = 0; j < half; ++j) {
      const float x1 = in[j];
      const float x2 = in[j + half];
      out[j] = x1 * cos_v[j] - x2 * sin_v[j];
      out[j + half] = x2 * cos_v[j] + x1 * sin_v[j];
    }
    if (out != in) {
      for (int64_t j = rotary_dim; j < head_dim; ++j) out[j] = in[j];
    }
  }
}

// Rows worth a parallel region.
bool rope_in_parallel(int64_t t, int64_t row_size) { return t * row_size >= (int64_t{1} << 14); }

}  // namespace

void rope(const float* x, int64_t t, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
          const int32_t* positions, const float* inv_freq, float* y) {
  KILN_CHECK(rotary_dim % 2 == 0 && rotary_dim <= head_dim);
  const int64_t row_size = num_heads * head_dim;
  parallel_region(rope_in_parallel(t, row_size), [&] {
    std::vector<float> cos_sin(static_cast<size_t>(rotary_dim));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < t; ++i) {
      angles(positions[i], inv_freq, rotary_dim / 2, cos_sin.data());
      rotate_row(x + i * row_size, num_heads, head_dim, rotary_dim, cos_sin.data(), y + i * row_size);
    }
  });
}

void RopeTable::grow(int64_t positions) {
  const int64_t have = this->positions();
  if (positions <= have) return;
  const int64_t want = std::max(positions, 2 * have);
  const auto half = static_cast<int64_t>(inv_freq_.size());
  cos_sin_.resize(static_cast<size_t>(want * 2 * half));
  parallel_for(have, want, want - have >= 256, [&](int64_t p) {
    angles(static_cast<int32_t>(p), inv_freq_.data(), half, cos_sin_.data() + p * 2 * half);
  });
}

void rope(const float* x, int64_t t, int64_t num_heads, int64_t head_dim, const int32_t* positions,
          RopeTable& table, float* y) {
  const int64_t rotary_dim = table.rotary_dim();
  KILN_CHECK(rotary_dim <= head_dim);
  int32_t last = 0;
  for (int64_t i = 0; i < t; ++i) {
    KILN_CHECK(positions[i] >= 0);
    last = std::max(last, positions[i]);
  }
  table.grow(int64_t{last} + 1);
  const int64_t row_size = num_heads * head_dim;
  parallel_for(0, t, rope_in_parallel(t, row_size), [&](int64_t i) {
    rotate_row(x + i * row_size, num_heads, head_dim, rotary_dim, table.row(positions[i]), y + i * row_size);
  });
}

}  // namespace kiln::cpu
