// Scalar conversions between float and the 16-bit float formats stored in checkpoints and
// engines. fp16 is IEEE binary16; bf16 is the top half of a binary32. Both round to nearest even.
#pragma once

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

}  // namespace kiln
