// Register-tiled float matmul kernels, written once over a vector-traits type `V` and compiled
// once per ISA: matmul_avx2.cpp and matmul_avx512.cpp each define V inside their own namespace
// and target pragma, then include this file there. It therefore has no include guard and no
// namespace of its own, and must not be included anywhere else.
//
// V provides: F (float vector), kLanes, zero(), loadu(const float*), storeu(float*, F),
// fmadd(a, b, c) = a * b + c, mul, set1, hsum(F), load_f16(const void*), load_bf16(const void*),
// load_i8(const void*) and load_u4_lo/hi(const void*) (kLanes values widened to float; u4: the
// low/high nibbles of kLanes bytes, minus 8).
//
// Shapes: x [m, k] float, W [n, k] in a stored format, y [m, n]. A tile multiplies R rows of x
// with C rows of W: R*C vector accumulators, each weight vector loaded once and used R times,
// each activation vector used C times; horizontal sums only at the end of a k chunk.

// Element loaders for the formats the tiles read in place. `p` points at element 0 of the
// range; element offsets are in elements.
struct LoadF32 {
  static constexpr size_t kBytes = 4;
  static typename V::F load(const std::byte* p) { return V::loadu(reinterpret_cast<const float*>(p)); }
  static float load1(const std::byte* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
};
struct LoadF16 {
  static constexpr size_t kBytes = 2;
  static typename V::F load(const std::byte* p) { return V::load_f16(p); }
  static float load1(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_float(h);
  }
};
struct LoadBF16 {
  static constexpr size_t kBytes = 2;
  static typename V::F load(const std::byte* p) { return V::load_bf16(p); }
  static float load1(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bf16_to_float(h);
  }
};

// y[0:R, 0:C] (row stride ldy) = (accumulate ? y : bias or 0) + x[0:R, 0:kc] · w[0:C, 0:kc]^T,
// summed in chunks of `chunk` elements: each chunk's vector lanes and scalar tail are summed on
// their own and then added to the running value, so a call over kc elements in chunks gives the
// same bits as one call per chunk with `accumulate` set after the first.
// x: row stride ldx floats; w: row stride ldw bytes, already offset to the first element.
template <class L, int R, int C>
void float_tile(const float* x, int64_t ldx, const std::byte* w, size_t ldw, int64_t kc, int64_t chunk, float* y,
                int64_t ldy, const float* bias, bool accumulate) {
  using F = typename V::F;
  constexpr int kL = V::kLanes;
  float sum[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) sum[r][c] = accumulate ? y[r * ldy + c] : (bias != nullptr ? bias[c] : 0.0f);
  }
  for (int64_t c0 = 0; c0 < kc; c0 += chunk) {
    const int64_t end = std::min(kc, c0 + chunk);
    F acc[R][C];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) acc[r][c] = V::zero();
    int64_t i = c0;
    for (; i + kL <= end; i += kL) {
      F wv[C];
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) wv[c] = L::load(w + c * ldw + static_cast<size_t>(i) * L::kBytes);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const F xv = V::loadu(x + r * ldx + i);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) acc[r][c] = V::fmadd(xv, wv[c], acc[r][c]);
      }
    }
    float tail[R][C] = {};
    for (; i < end; ++i) {
      for (int c = 0; c < C; ++c) {
        const float wi = L::load1(w + c * ldw + static_cast<size_t>(i) * L::kBytes);
        // std::fma, not a * b + c: the compiler may contract the latter in one tile shape and
        // not in another, and a row must get the same bits in every shape.
        for (int r = 0; r < R; ++r) tail[r][c] = std::fma(x[r * ldx + i], wi, tail[r][c]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) sum[r][c] = sum[r][c] + (V::hsum(acc[r][c]) + tail[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) y[r * ldy + c] = sum[r][c];
  }
}

// float_tile for r <= R rows and c <= C columns (the edges of a block).
template <class L, int R, int C>
void float_tile_edge(int r, int c, const float* x, int64_t ldx, const std::byte* w, size_t ldw,
                     int64_t kc, int64_t chunk, float* y, int64_t ldy, const float* bias, bool accumulate) {
  if constexpr (R > 1) {
    if (r < R) return float_tile_edge<L, R - 1, C>(r, c, x, ldx, w, ldw, kc, chunk, y, ldy, bias, accumulate);
  }
  if constexpr (C > 1) {
    if (c < C) return float_tile_edge<L, R, C - 1>(r, c, x, ldx, w, ldw, kc, chunk, y, ldy, bias, accumulate);
  }
  float_tile<L, R, C>(x, ldx, w, ldw, kc, chunk, y, ldy, bias, accumulate);
}

// Rows [i0, i1) x columns [j0, j1) of y, k range [k0, k0 + kc) summed in chunks of `chunk`,
// weights read from `w` (row j of the block at w + (j - j0) * ldw, already offset to element k0)
// with loader L.
template <class L, int R, int C>
void float_block(const float* x, int64_t k, const std::byte* w, size_t ldw, int64_t k0, int64_t kc, int64_t chunk,
                 const float* bias, float* y, int64_t n, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t i = i0; i < i1; i += R) {
    const int r = static_cast<int>(std::min<int64_t>(R, i1 - i));
    for (int64_t j = j0; j < j1; j += C) {
      const int c = static_cast<int>(std::min<int64_t>(C, j1 - j));
      float_tile_edge<L, R, C>(r, c, x + i * k + k0, k, w + static_cast<size_t>(j - j0) * ldw, ldw, kc, chunk,
                               y + i * n + j, n, bias != nullptr ? bias + j : nullptr, k0 > 0);
    }
  }
}

// Float formats read in place: y = x · W^T (+ bias).
template <class L, ir::WeightFormat kFormat, int R, int C>
void matmul_float_direct(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n,
                         const float* bias, float* y) {
  const size_t row_bytes = ir::weight_format_row_bytes(kFormat, k);
  const detail::Blocking b = detail::matmul_blocking(m, n, k, R, C, 256, V::kLanes);
  detail::matmul_parallel(m, n, b, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (m <= 4) {
      // Decode-sized: each tile runs over all of k, summing it in the same chunks as below, so that
      // every weight row is read as one stream and the running sums stay in registers.
      float_block<L, R, C>(x, k, w + static_cast<size_t>(j0) * row_bytes, row_bytes, 0, k, b.kc, bias, y, n, i0, i1,
                           j0, j1);
      return;
    }
    for (int64_t k0 = 0; k0 < k; k0 += b.kc) {
      const int64_t kc = std::min(b.kc, k - k0);
      const std::byte* wb = w + static_cast<size_t>(j0) * row_bytes + static_cast<size_t>(k0) * L::kBytes;
      float_block<L, R, C>(x, k, wb, row_bytes, k0, kc, kc, bias, y, n, i0, i1, j0, j1);
    }
  });
}

// Dequantises elements [k0, k0 + kc) of one stored row (k elements in all) into out[0:kc].
// For group formats k0 and kc are multiples of the group.
template <ir::WeightFormat kFormat>
void dequant_range(const std::byte* row, int64_t k, int64_t k0, int64_t kc, float* out) {
  using F = typename V::F;
  constexpr int kL = V::kLanes;
  constexpr int kG = kFormat == ir::WeightFormat::kI8Group32 || kFormat == ir::WeightFormat::kI4Group32 ? 32
                     : kFormat == ir::WeightFormat::kI8Group128 || kFormat == ir::WeightFormat::kI4Group128
                         ? 128
                         : 0;
  if constexpr (kFormat == ir::WeightFormat::kF16 || kFormat == ir::WeightFormat::kBF16) {
    using L = std::conditional_t<kFormat == ir::WeightFormat::kF16, LoadF16, LoadBF16>;
    const std::byte* p = row + static_cast<size_t>(k0) * 2;
    int64_t i = 0;
    for (; i + kL <= kc; i += kL) V::storeu(out + i, L::load(p + 2 * i));
    for (; i < kc; ++i) out[i] = L::load1(p + 2 * i);
  } else if constexpr (kFormat == ir::WeightFormat::kI8Channel) {
    float s;
    std::memcpy(&s, row + k, sizeof(float));
    const F vs = V::set1(s);
    const auto* q = reinterpret_cast<const int8_t*>(row) + k0;
    int64_t i = 0;
    for (; i + kL <= kc; i += kL) V::storeu(out + i, V::mul(vs, V::load_i8(q + i)));
    for (; i < kc; ++i) out[i] = s * static_cast<float>(q[i]);
  } else if constexpr (kFormat == ir::WeightFormat::kF8E4M3) {
    float s;
    std::memcpy(&s, row + k, sizeof(float));
    const float* values = e4m3_values().data();
    const auto* q = reinterpret_cast<const uint8_t*>(row) + k0;
    for (int64_t i = 0; i < kc; ++i) out[i] = s * values[q[i]];
  } else if constexpr (kFormat == ir::WeightFormat::kI8Group32 || kFormat == ir::WeightFormat::kI8Group128) {
    constexpr size_t kBlock = 2 + kG;
    for (int64_t g = 0; g < kc / kG; ++g) {
      const std::byte* blk = row + static_cast<size_t>(k0 / kG + g) * kBlock;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const F vs = V::set1(fp16_to_float(h));
      float* o = out + g * kG;
#pragma GCC unroll 16
      for (int i = 0; i < kG; i += kL) V::storeu(o + i, V::mul(vs, V::load_i8(blk + 2 + i)));
    }
  } else {
    static_assert(kG > 0, "unhandled format");
    constexpr size_t kBlock = 2 + kG / 2;
    for (int64_t g = 0; g < kc / kG; ++g) {
      const std::byte* blk = row + static_cast<size_t>(k0 / kG + g) * kBlock;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const F vs = V::set1(fp16_to_float(h));
      float* o = out + g * kG;
#pragma GCC unroll 16
      for (int i = 0; i < kG / 2; i += kL) {
        V::storeu(o + i, V::mul(vs, V::load_u4_lo(blk + 2 + i)));
        V::storeu(o + kG / 2 + i, V::mul(vs, V::load_u4_hi(blk + 2 + i)));
      }
    }
  }
}

// Any format: each block's weight panel [nb, kc] is dequantised to float in per-thread scratch,
// then the float tiles run over it.
template <ir::WeightFormat kFormat, int R, int C>
void matmul_dequant_panel(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n,
                          const float* bias, float* y) {
  const size_t row_bytes = ir::weight_format_row_bytes(kFormat, k);
  const int64_t group = std::max(ir::weight_format_group(kFormat), V::kLanes);
  const detail::Blocking b = detail::matmul_blocking(m, n, k, R, C, 256, group);
  const int64_t ld = detail::round_up(b.kc, 16);  // panel row stride in floats
  detail::matmul_parallel(m, n, b, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    auto* panel = static_cast<float*>(
        detail::matmul_scratch(static_cast<size_t>(b.nb * ld) * sizeof(float), detail::kScratchPanel));
    for (int64_t k0 = 0; k0 < k; k0 += b.kc) {
      const int64_t kc = std::min(b.kc, k - k0);
      for (int64_t j = j0; j < j1; ++j) {
        dequant_range<kFormat>(w + static_cast<size_t>(j) * row_bytes, k, k0, kc, panel + (j - j0) * ld);
      }
      float_block<LoadF32, R, C>(x, k, reinterpret_cast<const std::byte*>(panel), static_cast<size_t>(ld) * 4,
                                 k0, kc, kc, bias, y, n, i0, i1, j0, j1);
    }
  });
}
