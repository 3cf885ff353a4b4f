#include "backends/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "backends/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// fp32 pow as PyTorch computes it for a float tensor; the double evaluation rounded once gives the
// correctly rounded result, which is what a good libm powf returns too.
float pow_f32(float base, float exponent) {
  return static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}

// transformers' default rope: inv_freq[j] = 1 / base ** (float(2j) / dim), every step in fp32
// (an int64 arange converted to float, divided by dim, raised, then inverted).
std::vector<float> default_inv_freq(float base, int64_t dim) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int64_t j = 0; j < dim / 2; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(dim);
    inv[static_cast<size_t>(j)] = 1.0f / pow_f32(base, exponent);
  }
  return inv;
}

// Llama 3.1 frequency smoothing. The wavelength of frequency j is 2*pi / inv_freq[j] (PyTorch
// evaluates scalar / tensor as reciprocal(tensor) * scalar, so do we). Wavelengths shorter than
// original_max / high_freq_factor keep their frequency; longer than original_max /
// low_freq_factor are divided by `factor`; in between, the frequency is blended
//   s = (original_max / wavelen - low) / (high - low),  f = (1 - s) * f / factor + s * f.
void apply_llama3(const RopeParams& p, std::vector<float>& inv) {
  const auto factor = static_cast<float>(p.factor);
  const auto low = static_cast<float>(p.low_freq_factor);
  const auto old_len = static_cast<float>(p.original_max_position);
  const auto low_freq_wavelen =
      static_cast<float>(static_cast<double>(p.original_max_position) / p.low_freq_factor);
  const auto high_freq_wavelen =
      static_cast<float>(static_cast<double>(p.original_max_position) / p.high_freq_factor);
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const auto band = static_cast<float>(p.high_freq_factor - p.low_freq_factor);
  for (float& f : inv) {
    const float wavelen = (1.0f / f) * two_pi;
    float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = ((1.0f / wavelen) * old_len - low) / band;
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
}

// Dynamic NTK: past max_position the base grows to
//   base * ((factor * seq_len / max_position) - (factor - 1)) ** (dim / (dim - 2)).
// At run time HF passes seq_len as an int64 tensor, which makes every step of this fp32.
float dynamic_ntk_base(const RopeParams& p, int64_t dim, int64_t seq_len) {
  const float scaled = static_cast<float>(p.factor) * static_cast<float>(seq_len) /
                           static_cast<float>(p.max_position) -
                       static_cast<float>(p.factor - 1.0);
  // A tensor ** Python-float exponent runs std::pow(float, double) in PyTorch's kernel.
  const double exponent = static_cast<double>(dim) / static_cast<double>(dim - 2);
  const auto grown = static_cast<float>(std::pow(static_cast<double>(scaled), exponent));
  return static_cast<float>(p.theta) * grown;
}

}  // namespace

Status rope_params_validate(const RopeParams& p, int64_t rotary_dim) {
  if (rotary_dim <= 0 || rotary_dim % 2 != 0) {
    return invalid_argument("rotary dimension must be a positive even number, got " +
                            std::to_string(rotary_dim));
  }
  if (!(p.theta > 0.0) || !std::isfinite(p.theta)) {
    return invalid_argument("rope_theta must be a positive number, got " + std::to_string(p.theta));
  }
  if (p.type == "default") return Status::ok();
  if (p.type != "linear" && p.type != "dynamic" && p.type != "llama3") {
    return unimplemented("rope type '" + p.type +
                         "' is not supported (supported: default, linear, dynamic, llama3)");
  }
  if (!(p.factor > 0.0) || !std::isfinite(p.factor)) {
    return invalid_argument("rope_scaling.factor must be a positive number, got " +
                            std::to_string(p.factor));
  }
  if (p.type == "dynamic") {
    if (rotary_dim < 4) {
      return invalid_argument("dynamic rope needs a rotary dimension of at least 4, got " +
                              std::to_string(rotary_dim));
    }
    if (p.max_position <= 0) {
      return invalid_argument("dynamic rope needs max_position_embeddings > 0, got " +
                              std::to_string(p.max_position));
    }
  }
  if (p.type == "llama3") {
    if (!(p.low_freq_factor > 0.0) || !(p.high_freq_factor > p.low_freq_factor)) {
      return invalid_argument(
          "llama3 rope needs 0 < low_freq_factor < high_freq_factor, got low_freq_factor " +
          std::to_string(p.low_freq_factor) + " and high_freq_factor " +
          std::to_string(p.high_freq_factor));
    }
    if (p.original_max_position <= 0) {
      return invalid_argument("llama3 rope needs original_max_position_embeddings > 0, got " +
                              std::to_string(p.original_max_position));
    }
  }
  return Status::ok();
}

std::vector<float> rope_inv_freq(const RopeParams& p, int64_t rotary_dim, int64_t seq_len) {
  KILN_CHECK(rope_params_validate(p, rotary_dim).is_ok());
  if (p.type == "dynamic" && seq_len > p.max_position) {
    return default_inv_freq(dynamic_ntk_base(p, rotary_dim, seq_len), rotary_dim);
  }
  std::vector<float> inv = default_inv_freq(static_cast<float>(p.theta), rotary_dim);
  if (p.type == "linear") {
    const auto factor = static_cast<float>(p.factor);
    for (float& f : inv) f /= factor;
  } else if (p.type == "llama3") {
    apply_llama3(p, inv);
  }
  return inv;
}

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
