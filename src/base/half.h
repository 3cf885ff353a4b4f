// Scalar conversions between float and the 16- and 8-bit float formats stored in checkpoints and
// engines. fp16 is IEEE binary16; bf16 is the top half of a binary32. Both round to nearest even.
// e4m3 is the 8-bit float of OCP's FP8 (the "fn" variant: 4 exponent bits biased by 7, 3
// mantissa bits, no infinities; 0x7f and 0xff are NaN; the largest finite value is 448, the
// smallest subnormal 2^-9); float_to_e4m3 rounds to nearest even and saturates to +-448, as the
// GPU's conversion with saturation does.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

namespace kiln {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in fp16
    // Add 0.5 in the fp16 subnormal scale and let the float adder round to nearest even.
    const float magic = std::bit_cast<float>(0x3f000000u);  // 0.5
    float v = std::bit_cast<float>(abs) + magic;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(v) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  uint32_t r = abs + 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (r >> 13));
}

inline float e4m3_to_float(uint8_t b) {
  const float sign = (b & 0x80u) != 0 ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::bit_cast<float>(0x7fc00000u);  // NaN
  if (exp == 0) return sign * static_cast<float>(mant) * 0x1p-9f;            // subnormal: mant * 2^-9
  return sign * std::bit_cast<float>(static_cast<uint32_t>((exp - 7 + 127) << 23 | mant << 20));
}

inline uint8_t float_to_e4m3(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (abs >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);  // >= 448 (and inf): saturate
  if (abs < 0x3c800000u) {  // below 2^-6: subnormal (or zero) in e4m3, steps of 2^-9
    // Offset by 2^14, whose float ulp is 2^-9, the float adder rounds to nearest even at the
    // subnormal step; the low bits of the sum count the steps (8 of them make 2^-6, 0x08).
    const float v = std::bit_cast<float>(abs) + 16384.0f;
    return static_cast<uint8_t>(sign | (std::bit_cast<uint32_t>(v) - std::bit_cast<uint32_t>(16384.0f)));
  }
  // Normal: keep 3 mantissa bits, round to nearest even, rebias the exponent (127 -> 7).
  const uint32_t odd = (abs >> 20) & 1u;
  const uint32_t r = abs + 0x7ffffu + odd;
  const uint32_t e = (r >> 23) - 127 + 7;
  const uint32_t m = (r >> 20) & 7u;
  const uint32_t out = e << 3 | m;
  return static_cast<uint8_t>(sign | (out > 0x7eu ? 0x7eu : out));
}

// e4m3_to_float of every byte, for lookups in loops.
inline const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[static_cast<size_t>(b)] = e4m3_to_float(static_cast<uint8_t>(b));
    return t;
  }();
  return table;
}

}  // namespace kiln
