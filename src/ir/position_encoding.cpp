#include "ir/position_encoding.h"

#include <cmath>
#include <numbers>

namespace kiln::ir {
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

// Baichuan's slopes for a power of two n, evaluated in double as the Python original does:
// start = 2^(-2^(-(log2 n - 3))), slope[i] = start * start^i.
std::vector<double> alibi_power_of_two(int64_t n) {
  const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(static_cast<double>(n)) - 3.0)));
  std::vector<double> slopes(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    slopes[static_cast<size_t>(i)] = start * std::pow(start, static_cast<double>(i));
  }
  return slopes;
}

}  // namespace

RopeParams rope_params(const Node& node) {
  RopeParams p;
  p.theta = node.attr_float("theta", 10000.0);
  p.type = node.attr_str("type", "default");
  p.factor = node.attr_float("factor", 1.0);
  p.low_freq_factor = node.attr_float("low_freq_factor", 1.0);
  p.high_freq_factor = node.attr_float("high_freq_factor", 4.0);
  p.original_max_position = node.attr_int("original_max_position", 0);
  p.max_position = node.attr_int("max_position", 0);
  return p;
}

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

std::vector<float> alibi_slopes(int64_t num_heads) {
  KILN_CHECK(num_heads > 0);
  int64_t closest = 1;
  while (closest * 2 <= num_heads) closest *= 2;
  std::vector<double> slopes = alibi_power_of_two(closest);
  if (closest < num_heads) {
    // The remaining heads take slopes that sit between the ones above: every other slope of
    // the next power of two.
    const std::vector<double> finer = alibi_power_of_two(2 * closest);
    for (int64_t i = 0; i < num_heads - closest; ++i) {
      slopes.push_back(finer[static_cast<size_t>(2 * i)]);
    }
  }
  return {slopes.begin(), slopes.end()};
}

}  // namespace kiln::ir
