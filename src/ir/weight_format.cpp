#include "ir/weight_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/half.h"

namespace kiln::ir {
namespace {

struct FormatInfo {
  WeightFormat format;
  std::string_view name;
  int group;
};

constexpr FormatInfo kFormats[] = {
    {WeightFormat::kF32, "f32", 0},          {WeightFormat::kF16, "f16", 0},
    {WeightFormat::kBF16, "bf16", 0},        {WeightFormat::kI8Channel, "i8c", 0},
    {WeightFormat::kI8Group32, "i8g32", 32}, {WeightFormat::kI8Group128, "i8g128", 128},
    {WeightFormat::kI4Group32, "i4g32", 32}, {WeightFormat::kI4Group128, "i4g128", 128},
};

const FormatInfo& info(WeightFormat format) {
  for (const auto& f : kFormats) {
    if (f.format == format) return f;
  }
  KILN_CHECK(false);
}

constexpr size_t kScaleBytes = 2;  // group scales are fp16

bool is_int4(WeightFormat f) { return f == WeightFormat::kI4Group32 || f == WeightFormat::kI4Group128; }

float max_abs(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Symmetric quantisation of n values to [-qmax, qmax]; returns the scale. With round_fp16 the
// scale is first rounded to fp16, as the group formats store it.
float quantize_block(const float* x, int64_t n, int qmax, int8_t* q, bool round_fp16) {
  const float amax = max_abs(x, n);
  float scale = amax / static_cast<float>(qmax);
  if (round_fp16) scale = fp16_to_float(float_to_fp16(scale));
  const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::nearbyint(x[i] * inv);
    q[i] = static_cast<int8_t>(std::clamp(v, static_cast<float>(-qmax), static_cast<float>(qmax)));
  }
  return scale;
}

}  // namespace

std::string_view weight_format_name(WeightFormat format) { return info(format).name; }

std::optional<WeightFormat> weight_format_from_name(std::string_view name) {
  for (const auto& f : kFormats) {
    if (f.name == name) return f.format;
  }
  return std::nullopt;
}

int weight_format_group(WeightFormat format) { return info(format).group; }

bool weight_format_is_quantized(WeightFormat format) {
  return format != WeightFormat::kF32 && format != WeightFormat::kF16 &&
         format != WeightFormat::kBF16;
}

bool weight_format_fits(WeightFormat format, int64_t cols) {
  const int g = weight_format_group(format);
  return cols > 0 && (g == 0 || cols % g == 0);
}

size_t weight_format_row_bytes(WeightFormat format, int64_t cols) {
  const auto n = static_cast<size_t>(cols);
  switch (format) {
    case WeightFormat::kF32: return n * 4;
    case WeightFormat::kF16:
    case WeightFormat::kBF16: return n * 2;
    case WeightFormat::kI8Channel: return n + sizeof(float);
    case WeightFormat::kI8Group32:
    case WeightFormat::kI8Group128: {
      const size_t g = static_cast<size_t>(weight_format_group(format));
      return n / g * (kScaleBytes + g);
    }
    case WeightFormat::kI4Group32:
    case WeightFormat::kI4Group128: {
      const size_t g = static_cast<size_t>(weight_format_group(format));
      return n / g * (kScaleBytes + g / 2);
    }
  }
  KILN_CHECK(false);
}

void weight_quantize(WeightFormat format, const float* src, int64_t rows, int64_t cols, void* dst) {
  KILN_CHECK(weight_format_fits(format, cols));
  auto* out = static_cast<std::byte*>(dst);
  const size_t row_bytes = weight_format_row_bytes(format, cols);
  const int g = weight_format_group(format);
  std::vector<int8_t> q(static_cast<size_t>(std::max<int64_t>(cols, 1)));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * cols;
    std::byte* o = out + static_cast<size_t>(r) * row_bytes;
    switch (format) {
      case WeightFormat::kF32: std::memcpy(o, x, static_cast<size_t>(cols) * 4); break;
      case WeightFormat::kF16:
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t h = float_to_fp16(x[i]);
          std::memcpy(o + i * 2, &h, 2);
        }
        break;
      case WeightFormat::kBF16:
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t h = float_to_bf16(x[i]);
          std::memcpy(o + i * 2, &h, 2);
        }
        break;
      case WeightFormat::kI8Channel: {
        const float s = quantize_block(x, cols, 127, q.data(), false);
        std::memcpy(o, q.data(), static_cast<size_t>(cols));
        std::memcpy(o + cols, &s, sizeof(float));
        break;
      }
      case WeightFormat::kI8Group32:
      case WeightFormat::kI8Group128:
        for (int64_t b = 0; b < cols / g; ++b) {
          const float s = quantize_block(x + b * g, g, 127, q.data(), true);
          std::byte* blk = o + static_cast<size_t>(b) * (kScaleBytes + static_cast<size_t>(g));
          const uint16_t sh = float_to_fp16(s);
          std::memcpy(blk, &sh, kScaleBytes);
          std::memcpy(blk + kScaleBytes, q.data(), static_cast<size_t>(g));
        }
        break;
      case WeightFormat::kI4Group32:
      case WeightFormat::kI4Group128:
        for (int64_t b = 0; b < cols / g; ++b) {
          const float s = quantize_block(x + b * g, g, 7, q.data(), true);
          std::byte* blk = o + static_cast<size_t>(b) * (kScaleBytes + static_cast<size_t>(g / 2));
          const uint16_t sh = float_to_fp16(s);
          std::memcpy(blk, &sh, kScaleBytes);
          for (int i = 0; i < g / 2; ++i) {
            const auto lo = static_cast<uint8_t>(q[i] + 8);
            const auto hi = static_cast<uint8_t>(q[i + g / 2] + 8);
            blk[kScaleBytes + static_cast<size_t>(i)] = static_cast<std::byte>(lo | (hi << 4));
          }
        }
        break;
    }
  }
}

void weight_dequantize_row(WeightFormat format, const void* row_data, int64_t cols, float* dst) {
  const auto* p = static_cast<const std::byte*>(row_data);
  const int g = weight_format_group(format);
  switch (format) {
    case WeightFormat::kF32: std::memcpy(dst, p, static_cast<size_t>(cols) * 4); return;
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      for (int64_t i = 0; i < cols; ++i) {
        uint16_t h;
        std::memcpy(&h, p + i * 2, 2);
        dst[i] = format == WeightFormat::kF16 ? fp16_to_float(h) : bf16_to_float(h);
      }
      return;
    case WeightFormat::kI8Channel: {
      float s;
      std::memcpy(&s, p + cols, sizeof(float));
      for (int64_t i = 0; i < cols; ++i) dst[i] = s * static_cast<float>(static_cast<int8_t>(p[i]));
      return;
    }
    default: break;
  }
  const size_t payload = is_int4(format) ? static_cast<size_t>(g / 2) : static_cast<size_t>(g);
  for (int64_t b = 0; b < cols / g; ++b) {
    const std::byte* blk = p + static_cast<size_t>(b) * (kScaleBytes + payload);
    uint16_t sh;
    std::memcpy(&sh, blk, kScaleBytes);
    const float s = fp16_to_float(sh);
    const std::byte* q = blk + kScaleBytes;
    float* o = dst + b * g;
    if (is_int4(format)) {
      for (int i = 0; i < g / 2; ++i) {
        const auto v = static_cast<uint8_t>(q[i]);
        o[i] = s * static_cast<float>((v & 0x0f) - 8);
        o[i + g / 2] = s * static_cast<float>((v >> 4) - 8);
      }
    } else {
      for (int i = 0; i < g; ++i) o[i] = s * static_cast<float>(static_cast<int8_t>(q[i]));
    }
  }
}

}  // namespace kiln::ir
