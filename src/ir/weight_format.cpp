#include "ir/weight_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
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
    {WeightFormat::kF16Panel8, "f16p8", 0},  {WeightFormat::kBF16Panel8, "bf16p8", 0},
    {WeightFormat::kI8ChannelPanel8, "i8cp8", 0}, {WeightFormat::kI4Group32Panel8, "i4g32p8", 32},
    {WeightFormat::kF8E4M3, "f8", 0},
};

struct PanelPair {
  WeightFormat base;
  WeightFormat panel;
};
constexpr PanelPair kPanels[] = {
    {WeightFormat::kF16, WeightFormat::kF16Panel8},
    {WeightFormat::kBF16, WeightFormat::kBF16Panel8},
    {WeightFormat::kI8Channel, WeightFormat::kI8ChannelPanel8},
    {WeightFormat::kI4Group32, WeightFormat::kI4Group32Panel8},
};

const FormatInfo& info(WeightFormat format) {
  for (const auto& f : kFormats) {
    if (f.format == format) return f;
  }
  KILN_CHECK(false);
}

constexpr size_t kScaleBytes = 2;  // group scales are fp16
constexpr size_t kF8TailBytes = 16;  // f8: the float scale, then zeros
constexpr float kE4m3Max = 448.0f;

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

constexpr int kPanelRows = 8;

// Byte offset, within a panel, of byte `i` of row j's base-format row (row_bytes long): the
// single definition of every panel layout (see the header).
size_t panel_offset(WeightFormat format, int64_t cols, int j, size_t i) {
  const auto uj = static_cast<size_t>(j);
  switch (format) {
    case WeightFormat::kF16Panel8: return (i / 2 * kPanelRows + uj) * 2 + i % 2;
    case WeightFormat::kBF16Panel8: {
      const size_t e = i / 2;  // element; pairs of elements share a 4-byte lane
      return (e / 2 * kPanelRows + uj) * 4 + (e % 2) * 2 + i % 2;
    }
    case WeightFormat::kI8ChannelPanel8: {
      const auto k = static_cast<size_t>(cols);
      if (i >= k) return kPanelRows * k + uj * 4 + (i - k);  // the float scale
      return (i / 4 * kPanelRows + uj) * 4 + i % 4;
    }
    // kI4Group32Panel8 regroups nibbles rather than bytes: panel_interleave and
    // panel_extract_row handle it themselves.
    default: KILN_CHECK(false);
  }
}

// i4g32p8: nibble of (row j, element e) within block b of a panel, as (byte offset, high?).
std::pair<size_t, bool> i4_panel_nibble(int j, int e) {
  const int s = e / 8, t = e % 8;
  return {static_cast<size_t>(16 + 32 * s + 4 * j + (t % 4)), t >= 4};
}

void panel_interleave(WeightFormat format, const std::byte* rows8, int64_t cols, std::byte* panel) {
  const size_t row_bytes = weight_format_row_bytes(format, cols);
  if (format == WeightFormat::kI4Group32Panel8) {
    std::memset(panel, 0, row_bytes * kPanelRows);
    for (int64_t b = 0; b < cols / 32; ++b) {
      std::byte* out = panel + static_cast<size_t>(b) * 18 * kPanelRows;
      for (int j = 0; j < kPanelRows; ++j) {
        const std::byte* in = rows8 + static_cast<size_t>(j) * row_bytes + static_cast<size_t>(b) * 18;
        std::memcpy(out + 2 * j, in, 2);
        for (int e = 0; e < 32; ++e) {
          const auto v = static_cast<uint8_t>(in[2 + e % 16]);
          const uint8_t nib = e < 16 ? (v & 0x0f) : (v >> 4);
          const auto [off, high] = i4_panel_nibble(j, e);
          out[off] |= static_cast<std::byte>(high ? nib << 4 : nib);
        }
      }
    }
    return;
  }
  for (int j = 0; j < kPanelRows; ++j) {
    for (size_t i = 0; i < row_bytes; ++i) panel[panel_offset(format, cols, j, i)] = rows8[j * row_bytes + i];
  }
}

void panel_extract_row(WeightFormat format, const std::byte* panel, int64_t cols, int j, std::byte* row) {
  const size_t row_bytes = weight_format_row_bytes(format, cols);
  if (format == WeightFormat::kI4Group32Panel8) {
    std::memset(row, 0, row_bytes);
    for (int64_t b = 0; b < cols / 32; ++b) {
      const std::byte* in = panel + static_cast<size_t>(b) * 18 * kPanelRows;
      std::byte* out = row + static_cast<size_t>(b) * 18;
      std::memcpy(out, in + 2 * j, 2);
      for (int e = 0; e < 32; ++e) {
        const auto [off, high] = i4_panel_nibble(j, e);
        const auto v = static_cast<uint8_t>(in[off]);
        const uint8_t nib = high ? (v >> 4) : (v & 0x0f);
        out[2 + e % 16] |= static_cast<std::byte>(e < 16 ? nib : nib << 4);
      }
    }
    return;
  }
  for (size_t i = 0; i < row_bytes; ++i) row[i] = panel[panel_offset(format, cols, j, i)];
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
  const WeightFormat base = weight_format_base(format);
  return base != WeightFormat::kF32 && base != WeightFormat::kF16 && base != WeightFormat::kBF16;
}

bool weight_format_is_panel(WeightFormat format) { return weight_format_base(format) != format; }

int weight_format_row_multiple(WeightFormat format) { return weight_format_is_panel(format) ? kPanelRows : 1; }

WeightFormat weight_format_base(WeightFormat format) {
  for (const auto& p : kPanels) {
    if (p.panel == format) return p.base;
  }
  return format;
}

std::optional<WeightFormat> weight_format_panel(WeightFormat format) {
  for (const auto& p : kPanels) {
    if (p.base == format) return p.panel;
  }
  return std::nullopt;
}

bool weight_format_fits(WeightFormat format, int64_t cols) {
  const int g = weight_format_group(format);
  if (format == WeightFormat::kI8ChannelPanel8 && cols % 32 != 0) return false;
  if (format == WeightFormat::kBF16Panel8 && cols % 2 != 0) return false;
  if (format == WeightFormat::kF8E4M3 && cols % 16 != 0) return false;
  return cols > 0 && (g == 0 || cols % g == 0);
}

bool weight_format_fits(WeightFormat format, int64_t rows, int64_t cols) {
  return rows >= 0 && rows % weight_format_row_multiple(format) == 0 && weight_format_fits(format, cols);
}

size_t weight_format_row_bytes(WeightFormat format, int64_t cols) {
  const auto n = static_cast<size_t>(cols);
  switch (weight_format_base(format)) {
    case WeightFormat::kF32: return n * 4;
    case WeightFormat::kF16:
    case WeightFormat::kBF16: return n * 2;
    case WeightFormat::kI8Channel: return n + sizeof(float);
    case WeightFormat::kF8E4M3: return n + kF8TailBytes;
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
    case WeightFormat::kF16Panel8:
    case WeightFormat::kBF16Panel8:
    case WeightFormat::kI8ChannelPanel8:
    case WeightFormat::kI4Group32Panel8: break;  // not a base format
  }
  KILN_CHECK(false);
}

void weight_quantize(WeightFormat format, const float* src, int64_t rows, int64_t cols, void* dst) {
  KILN_CHECK(weight_format_fits(format, rows, cols));
  if (weight_format_is_panel(format)) {
    // Quantise 8 rows in the base format, then interleave them.
    const WeightFormat base = weight_format_base(format);
    const size_t row_bytes = weight_format_row_bytes(base, cols);
    std::vector<std::byte> rows8(row_bytes * kPanelRows);
    for (int64_t p = 0; p < rows / kPanelRows; ++p) {
      weight_quantize(base, src + p * kPanelRows * cols, kPanelRows, cols, rows8.data());
      panel_interleave(format, rows8.data(), cols, static_cast<std::byte*>(dst) + p * kPanelRows * row_bytes);
    }
    return;
  }
  auto* out = static_cast<std::byte*>(dst);
  const size_t row_bytes = weight_format_row_bytes(format, cols);
  if (format == WeightFormat::kF8E4M3) {
    // One scale for the whole weight, so that an fp8 GEMM takes it as a scalar.
    const float scale = max_abs(src, rows * cols) / kE4m3Max;
    const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      std::byte* o = out + static_cast<size_t>(r) * row_bytes;
      for (int64_t i = 0; i < cols; ++i) o[i] = static_cast<std::byte>(float_to_e4m3(src[r * cols + i] * inv));
      std::memset(o + cols, 0, kF8TailBytes);
      std::memcpy(o + cols, &scale, sizeof(float));
    }
    return;
  }
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
      case WeightFormat::kF16Panel8:
      case WeightFormat::kBF16Panel8:
      case WeightFormat::kI8ChannelPanel8:
      case WeightFormat::kI4Group32Panel8:
      case WeightFormat::kF8E4M3: KILN_CHECK(false);  // handled above
    }
  }
}

void weight_dequantize_row_at(WeightFormat format, const void* data, int64_t rows, int64_t cols, int64_t r,
                              float* dst) {
  KILN_CHECK(r >= 0 && r < rows && weight_format_fits(format, rows, cols));
  const WeightFormat base = weight_format_base(format);
  const size_t row_bytes = weight_format_row_bytes(base, cols);
  const auto* p = static_cast<const std::byte*>(data);
  if (base == format) return weight_dequantize_row(format, p + static_cast<size_t>(r) * row_bytes, cols, dst);
  std::vector<std::byte> row(row_bytes);
  panel_extract_row(format, p + static_cast<size_t>(r / kPanelRows) * kPanelRows * row_bytes, cols,
                    static_cast<int>(r % kPanelRows), row.data());
  weight_dequantize_row(base, row.data(), cols, dst);
}

void weight_dequantize_row(WeightFormat format, const void* row_data, int64_t cols, float* dst) {
  KILN_CHECK(!weight_format_is_panel(format));
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
    case WeightFormat::kF8E4M3: {
      float s;
      std::memcpy(&s, p + cols, sizeof(float));
      for (int64_t i = 0; i < cols; ++i) dst[i] = s * e4m3_to_float(static_cast<uint8_t>(p[i]));
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
