// The scalar float conversions of base/half.h against references computed another way: each
// format's value from its fields with std::ldexp, and rounding to nearest even by dividing by the
// format's step at that magnitude and rounding the (exact) quotient in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "base/half.h"

namespace kiln {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// IEEE binary16 from its fields: (-1)^s * 2^(e - 15) * 1.m, subnormal 2^-14 * 0.m.
double fp16_reference(uint16_t h) {
  const double sign = (h & 0x8000u) != 0 ? -1.0 : 1.0;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 31) return mant == 0 ? sign * std::numeric_limits<double>::infinity() : std::nan("");
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// OCP e4m3fn from its fields: 2^(e - 7) * 1.m, subnormal 2^-6 * 0.m; S.1111.111 is NaN.
double e4m3_reference(uint8_t b) {
  const double sign = (b & 0x80u) != 0 ? -1.0 : 1.0;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 15 && mant == 7) return std::nan("");
  if (exp == 0) return sign * std::ldexp(mant, -9);
  return sign * std::ldexp(8 + mant, exp - 10);
}

// |f| rounded to nearest even on a grid whose step is 2^(floor(log2 |f|) - mantissa_bits), never
// finer than `min_step` (the subnormal step). The quotient |f| / step is exact in double, so
// nearbyint (round-half-even by default) rounds it the IEEE way.
double round_to_grid(float f, int mantissa_bits, double min_step) {
  const double a = std::fabs(static_cast<double>(f));
  if (a == 0.0) return 0.0;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const double step = std::max(std::ldexp(1.0, e - 1 - mantissa_bits), min_step);
  return std::nearbyint(a / step) * step;
}

// Floats spread over every exponent from 2^lo to 2^hi, both signs.
std::vector<float> spread_floats(int lo, int hi, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> exp(lo, hi);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::vector<float> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const float v = std::ldexp(mant(rng), exp(rng));
    out.push_back(i % 2 ? -v : v);
  }
  return out;
}

// ---- bf16 ----

TEST(Bf16, EveryPatternRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = bf16_to_float(bits);
    EXPECT_EQ(std::bit_cast<uint32_t>(f) >> 16, h);
    EXPECT_EQ(std::bit_cast<uint32_t>(f) & 0xffffu, 0u);
    if (std::isnan(f)) {
      // A NaN stays a NaN (made quiet); its sign survives.
      const uint16_t back = float_to_bf16(f);
      EXPECT_TRUE(std::isnan(bf16_to_float(back))) << std::hex << h;
      EXPECT_EQ(back & 0x8000u, bits & 0x8000u);
      EXPECT_NE(back & 0x40u, 0u);
    } else {
      ASSERT_EQ(float_to_bf16(f), bits) << std::hex << h;
    }
  }
}

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 1 (even mantissa) and 1 + 2^-7: it goes down.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80u);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): it goes up.
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82u);
  // Just past halfway goes up.
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81u);
  const double largest = bf16_to_float(0x7f7fu);
  for (float f : spread_floats(-133, 127, 20000, 1)) {
    double want = round_to_grid(f, 7, 0x1p-133);
    if (want > largest) want = std::numeric_limits<double>::infinity();  // rounded past the largest finite value
    const double got = bf16_to_float(float_to_bf16(f));
    ASSERT_EQ(std::fabs(got), want) << f;
    ASSERT_EQ(std::signbit(got), std::signbit(f)) << f;
  }
}

TEST(Bf16, KeepsInfinitiesZerosAndSubnormalsAndOverflowsToInfinity) {
  EXPECT_EQ(float_to_bf16(kInf), 0x7f80u);
  EXPECT_EQ(float_to_bf16(-kInf), 0xff80u);
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000u);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000u);
  // The largest float lies above the midpoint between bf16's largest finite value and 2^128.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(float_to_bf16(bf16_to_float(0x7f7fu)), 0x7f7fu);
  // The smallest float subnormal rounds to zero; bf16's smallest subnormal is kept.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(bf16_to_float(0x0001u), 0x1p-133f);
  EXPECT_EQ(float_to_bf16(0x1p-133f), 0x0001u);
}

// ---- fp16 ----

TEST(Fp16, EveryPatternDecodesAsItsFieldsSay) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const double want = fp16_reference(bits);
    const float got = fp16_to_float(bits);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
    ASSERT_EQ(std::signbit(got), (h & 0x8000u) != 0) << std::hex << h;
  }
}

TEST(Fp16, EveryPatternRoundTripsThroughFloat) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = fp16_to_float(bits);
    if (std::isnan(f)) {
      const uint16_t back = float_to_fp16(f);
      EXPECT_EQ(back & 0x7c00u, 0x7c00u);
      EXPECT_NE(back & 0x3ffu, 0u) << "a NaN must not become an infinity";
      EXPECT_EQ(back & 0x8000u, bits & 0x8000u);
      continue;
    }
    ASSERT_EQ(float_to_fp16(f), bits) << std::hex << h;
  }
}

TEST(Fp16, RoundsToNearestEvenAcrossNormalsAndSubnormals) {
  // Halfway between 1 and 1 + 2^-10 goes to 1; halfway between 1 + 2^-10 and 1 + 2^-9 goes up.
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3c00u);
  EXPECT_EQ(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02u);
  // Subnormal ties: 2^-25 (half the smallest subnormal) goes to 0, 3 * 2^-25 to 2 * 2^-24.
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000u);
  EXPECT_EQ(float_to_fp16(3 * 0x1p-25f), 0x0002u);
  EXPECT_EQ(float_to_fp16(-3 * 0x1p-25f), 0x8002u);
  // Rounding up out of the subnormals gives the smallest normal.
  EXPECT_EQ(float_to_fp16(0x1p-14f - 0x1p-26f), 0x0400u);
  for (float f : spread_floats(-26, 15, 40000, 2)) {
    double want = round_to_grid(f, 10, 0x1p-24);
    if (want > 65504.0) want = std::numeric_limits<double>::infinity();  // rounded past the largest finite value
    const float got = fp16_to_float(float_to_fp16(f));
    ASSERT_EQ(std::fabs(static_cast<double>(got)), want) << f;
    ASSERT_EQ(std::signbit(got), std::signbit(f)) << f;
  }
}

TEST(Fp16, OverflowsToInfinityAtTheRoundingMidpoint) {
  EXPECT_EQ(fp16_to_float(0x7bffu), 65504.0f);
  // 65520 lies halfway between 65504 (odd mantissa) and 2^16 (not representable): infinity.
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_fp16(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(float_to_fp16(-1e10f), 0xfc00u);
  EXPECT_EQ(float_to_fp16(kInf), 0x7c00u);
  EXPECT_EQ(float_to_fp16(-kInf), 0xfc00u);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000u);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000u);
}

// ---- e4m3 ----

TEST(E4m3, EveryByteDecodesAsItsFieldsSay) {
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    const double want = e4m3_reference(byte);
    const float got = e4m3_to_float(byte);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << b;
    }
    // The table holds the same bits.
    const float table = e4m3_values()[static_cast<size_t>(b)];
    EXPECT_TRUE(std::bit_cast<uint32_t>(table) == std::bit_cast<uint32_t>(got) ||
                (std::isnan(table) && std::isnan(got)))
        << b;
  }
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_float(0x08), 0x1p-6f);  // the smallest normal
}

TEST(E4m3, EveryByteRoundTripsThroughFloat) {
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    if (b == 0x7f || b == 0xff) continue;
    const float f = e4m3_to_float(byte);
    if (b == 0x80) {
      EXPECT_EQ(float_to_e4m3(f), 0x80u);  // -0 keeps its sign
      continue;
    }
    EXPECT_EQ(float_to_e4m3(f), byte) << b;
  }
}

TEST(E4m3, RoundsToNearestEvenAndSaturates) {
  // Halfway between 1 and 1.125 goes to 1; halfway between 1.125 and 1.25 goes up.
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38u);
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3au);
  // Subnormal ties (step 2^-9): 2^-10 goes to 0, 3 * 2^-10 to 2 * 2^-9.
  EXPECT_EQ(float_to_e4m3(0x1p-10f), 0x00u);
  EXPECT_EQ(float_to_e4m3(3 * 0x1p-10f), 0x02u);
  // Rounding up out of the subnormals: 7.5 steps of 2^-9 is a tie that goes to 8 (the smallest normal).
  EXPECT_EQ(float_to_e4m3(7.5f * 0x1p-9f), 0x08u);
  // No infinities: everything beyond 448 saturates; NaN stays NaN with its sign.
  EXPECT_EQ(float_to_e4m3(449.0f), 0x7eu);
  EXPECT_EQ(float_to_e4m3(1e30f), 0x7eu);
  EXPECT_EQ(float_to_e4m3(kInf), 0x7eu);
  EXPECT_EQ(float_to_e4m3(-kInf), 0xfeu);
  EXPECT_EQ(float_to_e4m3(std::nanf("")), 0x7fu);
  EXPECT_EQ(float_to_e4m3(-std::nanf("")), 0xffu);
  for (float f : spread_floats(-11, 9, 40000, 3)) {
    const double want = std::min(round_to_grid(f, 3, 0x1p-9), 448.0);
    const float got = e4m3_to_float(float_to_e4m3(f));
    ASSERT_EQ(std::fabs(static_cast<double>(got)), want) << f;
    if (want != 0.0) {
      ASSERT_EQ(std::signbit(got), std::signbit(f)) << f;
    }
  }
}

}  // namespace
}  // namespace kiln
