// Reading the integer row formats of ir/weight_format.h in CUDA kernels, straight from the
// engine's bytes: int8 per channel (i8c: k int8 values, then a float scale) and the group
// formats (i8g32, i8g128: blocks of {fp16 s; int8 q[G]}; i4g32, i4g128: blocks of
// {fp16 s; uint8 q[G/2]}, element i < G/2 the low nibble of q[i], element i + G/2 its high
// nibble, w = s * (nibble - 8)). Blocks are packed without padding, so a block's payload starts
// 2 bytes past a 4-byte boundary in every other block: the vector path reads aligned 32-bit
// words and shifts two of them together (a funnel shift) where it must.
//
// The fp8 format (f8: k e4m3 bytes, then a 16-byte tail holding the weight's one float scale) reads
// as i8c does, its bytes widened by the conversion instruction (two e4m3 to two fp16 at once).
//
// The vector path works in chunks of 16 payload bytes (16 int8 or 32 int4 weights), one block's
// scale each; the integers become floats by placing each byte under the exponent of 2^23
// (a byte permute) and subtracting, which the conversion instruction would do at a quarter of
// the rate. Scalar readers (quant_element) serve odd shapes, embeddings and dequantisation.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "ir/weight_format.h"

namespace kiln::cuda {

// Bytes [p, p + n) assembled little-endian (any alignment).
__device__ __forceinline__ uint32_t quant_bytes_le(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

__device__ __forceinline__ float quant_half_at(const uint8_t* p) {
  const auto bits = static_cast<unsigned short>(quant_bytes_le(p, 2));
  return __half2float(__ushort_as_half(bits));
}

// Two e4m3 bytes (the low 16 bits of v) as fp16 or as floats, by the conversion instruction.
__device__ __forceinline__ __half2 quant_e4m3x2_half(uint32_t v) {
  return __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v & 0xffffu), __NV_E4M3));
}
__device__ __forceinline__ float2 quant_e4m3x2(uint32_t v) { return __half22float2(quant_e4m3x2_half(v)); }

// Weight (row r, column c) of a [rows, k] weight stored in an integer or fp8 row format; plain byte
// reads, for any shape and alignment. row_bytes = weight_format_row_bytes(format, k).
__device__ __forceinline__ float quant_element(ir::WeightFormat format, const uint8_t* w, size_t row_bytes, int64_t k,
                                               int64_t r, int64_t c) {
  const uint8_t* row = w + static_cast<size_t>(r) * row_bytes;
  switch (format) {
    case ir::WeightFormat::kI8Channel:
      return __uint_as_float(quant_bytes_le(row + k, 4)) * static_cast<float>(static_cast<int8_t>(row[c]));
    case ir::WeightFormat::kI8Group32:
    case ir::WeightFormat::kI8Group128: {
      const int g = format == ir::WeightFormat::kI8Group32 ? 32 : 128;
      const uint8_t* block = row + (c / g) * (2 + g);
      return quant_half_at(block) * static_cast<float>(static_cast<int8_t>(block[2 + c % g]));
    }
    case ir::WeightFormat::kI4Group32:
    case ir::WeightFormat::kI4Group128: {
      const int g = format == ir::WeightFormat::kI4Group32 ? 32 : 128;
      const uint8_t* block = row + (c / g) * (2 + g / 2);
      const int i = static_cast<int>(c % g);
      const int byte = block[2 + (i % (g / 2))];
      const int nibble = i < g / 2 ? (byte & 15) : (byte >> 4);
      return quant_half_at(block) * static_cast<float>(nibble - 8);
    }
    case ir::WeightFormat::kF8E4M3:
      return __uint_as_float(quant_bytes_le(row + k, 4)) * quant_e4m3x2(row[c]).x;
    default:
      return 0.0f;
  }
}

// Byte j (0..3) of `word`, an unsigned value u, as the float 2^23 + u.
template <int J>
__device__ __forceinline__ float quant_magic_byte(uint32_t word) {
  return __uint_as_float(__byte_perm(word, 0x4B000000u, 0x7440u | J));
}

// Compile-time description of one integer row format for the vector path.
template <ir::WeightFormat F>
struct QuantFormat;

template <>
struct QuantFormat<ir::WeightFormat::kI8Channel> {
  static constexpr bool kInt4 = false, kChannel = true, kFp8 = false;
  static constexpr int kGroup = 0, kPayload = 0;
  static constexpr float kUnit = 1.0f;  // what the unpacked values are to be multiplied by
};
// f8: laid out as i8c (a row of bytes, then the scale), the bytes e4m3 rather than int8. The vector
// path unpacks them 2^-120 times their value (quant_unpack_word), which kUnit puts back.
template <>
struct QuantFormat<ir::WeightFormat::kF8E4M3> {
  static constexpr bool kInt4 = false, kChannel = true, kFp8 = true;
  static constexpr int kGroup = 0, kPayload = 0;
  static constexpr float kUnit = 0x1p120f;
};
template <int G, bool I4>
struct QuantGroupFormat {
  static constexpr bool kInt4 = I4, kChannel = false, kFp8 = false;
  static constexpr float kUnit = 1.0f;
  static constexpr int kGroup = G;
  static constexpr int kPayload = I4 ? G / 2 : G;  // bytes of q per block
  static constexpr int kBlockBytes = 2 + kPayload;
};
template <>
struct QuantFormat<ir::WeightFormat::kI8Group32> : QuantGroupFormat<32, false> {};
template <>
struct QuantFormat<ir::WeightFormat::kI8Group128> : QuantGroupFormat<128, false> {};
template <>
struct QuantFormat<ir::WeightFormat::kI4Group32> : QuantGroupFormat<32, true> {};
template <>
struct QuantFormat<ir::WeightFormat::kI4Group128> : QuantGroupFormat<128, true> {};

// Chunks of 16 payload bytes in a row of k weights.
template <ir::WeightFormat F>
__host__ __device__ constexpr int64_t quant_chunks_per_row(int64_t k) {
  using Q = QuantFormat<F>;
  if constexpr (Q::kChannel) {
    return k / 16;
  } else {
    return k / Q::kGroup * (Q::kPayload / 16);
  }
}

// Whether the vector path reads this shape: whole chunks, 4-byte aligned rows.
template <ir::WeightFormat F>
__host__ __device__ constexpr bool quant_vector_fits(int64_t k) {
  using Q = QuantFormat<F>;
  if constexpr (Q::kChannel) {
    return k % 16 == 0;
  } else {
    return k % Q::kGroup == 0 && (k / Q::kGroup) % 2 == 0;  // an even block count: rows start 4-aligned
  }
}

// One chunk as read from memory: its payload words, its scale, and where its weights sit in
// the row (first element of the low, and for int4 of the high, run of 16).
struct QuantChunk {
  uint32_t q[4];
  float scale;  // the block's; 1 for i8c, whose row scale the caller applies once
  int64_t e0;   // int8: elements e0 .. e0+15; int4: low nibbles e0 .. e0+15, high e0+G/2 ..
};

// Loads chunk `c` of a row (row: its first byte, 4-byte aligned).
template <ir::WeightFormat F>
__device__ __forceinline__ QuantChunk quant_load_chunk(const uint8_t* row, int64_t c) {
  using Q = QuantFormat<F>;
  QuantChunk out;
  if constexpr (Q::kChannel) {
    const auto* p = reinterpret_cast<const uint32_t*>(row + 16 * c);
#pragma unroll
    for (int i = 0; i < 4; ++i) out.q[i] = __ldg(p + i);
    out.scale = 1.0f;
    out.e0 = 16 * c;
  } else {
    constexpr int kPer = Q::kPayload / 16;  // chunks per block
    const int64_t b = c / kPer, sub = c % kPer;
    const int64_t block_at = b * Q::kBlockBytes;
    const int64_t at = block_at + 2 + 16 * sub;  // the payload bytes, 4-aligned in odd blocks
    const auto* p = reinterpret_cast<const uint32_t*>(row + (at & ~int64_t{3}));
    const unsigned shift = static_cast<unsigned>(at & 3) * 8;  // 0 or 16
    uint32_t w[5];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = __ldg(p + i);
    w[4] = shift != 0 ? __ldg(p + 4) : 0u;
#pragma unroll
    for (int i = 0; i < 4; ++i) out.q[i] = __funnelshift_r(w[i], w[i + 1], shift);
    const uint32_t sw = __ldg(reinterpret_cast<const uint32_t*>(row + (block_at & ~int64_t{3})));
    const unsigned short bits = (block_at & 3) != 0 ? static_cast<unsigned short>(sw >> 16)
                                                    : static_cast<unsigned short>(sw & 0xffffu);
    out.scale = __half2float(__ushort_as_half(bits));
    out.e0 = b * Q::kGroup + 16 * sub;
  }
  return out;
}

// Payload word t (0..3) of a chunk as weights without their scale (fp8: times 2^-120): int8 and fp8
// v[0..4) for elements e0 + 4t ..; int4 v[0..4) for e0 + 4t .. (low nibbles) and v[4..8) for
// e0 + G/2 + 4t .. (high).
// fp8: byte j of the word moved to the top, then shifted right by 4 with its sign: the sign lands
// on bit 31 (and on bits 27..30, masked off), exponent and mantissa on the float's bits 20..26. That
// float is 2^-120 times the e4m3 value, exactly, subnormals included (as float subnormals); three
// integer instructions a weight, no conversion unit. (The NaN codes read as finite values; the
// quantiser never writes them.)
template <ir::WeightFormat F>
__device__ __forceinline__ void quant_unpack_word(uint32_t q, float* v) {
  if constexpr (QuantFormat<F>::kFp8) {
    constexpr uint32_t kKeep = 0x87f00000u;
    v[0] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(q << 24) >> 4) & kKeep);
    v[1] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(q << 16) >> 4) & kKeep);
    v[2] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(q << 8) >> 4) & kKeep);
    v[3] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(q) >> 4) & kKeep);
  } else if constexpr (!QuantFormat<F>::kInt4) {
    constexpr float kBias = 8388608.0f + 128.0f;
    const uint32_t u = q ^ 0x80808080u;  // int8 q -> q + 128
    v[0] = quant_magic_byte<0>(u) - kBias;
    v[1] = quant_magic_byte<1>(u) - kBias;
    v[2] = quant_magic_byte<2>(u) - kBias;
    v[3] = quant_magic_byte<3>(u) - kBias;
  } else {
    constexpr float kBias = 8388608.0f + 8.0f;
    const uint32_t lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
    v[0] = quant_magic_byte<0>(lo) - kBias;
    v[1] = quant_magic_byte<1>(lo) - kBias;
    v[2] = quant_magic_byte<2>(lo) - kBias;
    v[3] = quant_magic_byte<3>(lo) - kBias;
    v[4] = quant_magic_byte<0>(hi) - kBias;
    v[5] = quant_magic_byte<1>(hi) - kBias;
    v[6] = quant_magic_byte<2>(hi) - kBias;
    v[7] = quant_magic_byte<3>(hi) - kBias;
  }
}

// The float row scale of an i8c or f8 row of k weights (stored after them).
__device__ __forceinline__ float quant_channel_scale(const uint8_t* row, int64_t k) {
  return (k & 3) == 0 ? __ldg(reinterpret_cast<const float*>(row + k)) : __uint_as_float(quant_bytes_le(row + k, 4));
}

}  // namespace kiln::cuda
