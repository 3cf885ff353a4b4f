// How the matmul kernels split work: blocks of output rows x output columns handed to OpenMP
// threads, plus per-thread scratch buffers. Shared by every kernel of every ISA; holds no SIMD
// code, so it compiles for baseline x86-64 and is included before any target pragma.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backends/cpu/parallel.h"

namespace kiln::cpu::detail {

// y[m, n] is cut into blocks of mb rows x nb columns; every block sweeps k in chunks of kc.
struct Blocking {
  int64_t mb = 1;
  int64_t nb = 1;
  int64_t kc = 1;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Block sizes for a kernel whose register tile covers `tile_m` rows x `tile_n` columns. `kc`:
// the k chunk (0 = all of k), kept a multiple of `k_granule` (the quantisation group). The chunk
// is the same for every m: a kernel that sums each chunk on its own and then adds the chunks
// gives an output row the same bits whatever other rows share the call only if the chunks are
// the same (the serving loop needs that; MatmulKernelTest.RowsDoNotDependOnTheOtherRows).
inline Blocking matmul_blocking(int64_t m, int64_t n, int64_t k, int tile_m, int tile_n, int64_t kc,
                                int64_t k_granule) {
  Blocking b;
  const int64_t threads = std::max(1, omp_get_max_threads());
  if (m <= 4) {
    // Decode: memory bound. Small column blocks so that threads finish together.
    b.nb = std::max<int64_t>(tile_n, round_up(std::min<int64_t>(32, ceil_div(n, 8 * threads)), tile_n));
    b.mb = m;
  } else {
    // Prefill: a block's weight panel (nb x kc) stays in L2 while all of the block's rows use it.
    b.nb = round_up(48, tile_n);
    b.mb = m;
    if (ceil_div(n, b.nb) < 4 * threads) b.mb = std::max<int64_t>(tile_m, round_up(ceil_div(m, 4 * threads), tile_m));
  }
  b.nb = std::max<int64_t>(1, std::min(b.nb, n));
  b.mb = std::max<int64_t>(1, b.mb);
  b.kc = kc <= 0 || kc >= k ? k : std::max(k_granule, kc / k_granule * k_granule);
  return b;
}

// Runs body(i0, i1, j0, j1) for every block of `b` covering [0, m) x [0, n), on the OpenMP
// threads, after every thread has run prologue() (which may hold an orphaned `omp for nowait`,
// e.g. quantising activations; one barrier follows it). Blocks of one column range are
// consecutive so a thread reuses the weight panel it just read.
//
// Prefill-sized blocks (m > 4) cost the same, so they are split evenly. Decode-sized calls are
// bound by memory bandwidth, which the cores do not get in equal shares on a shared machine:
// guided scheduling hands out long runs of consecutive blocks first (a few long streams to
// prefetch) and short ones at the end, so a thread that got less bandwidth does not hold the
// other at the barrier. The only barriers are the region's end and the one after a prologue
// (decode makes about a hundred calls per token); calls without a prologue skip that one.
struct NoPrologue {
  void operator()() const {}
};

template <class Prologue, class Body>
void matmul_parallel(int64_t m, int64_t n, const Blocking& b, Prologue&& prologue, Body&& body) {
  const int64_t bm = ceil_div(m, b.mb);
  const int64_t bn = ceil_div(n, b.nb);
  const int64_t tasks = bm * bn;
  parallel_region(true, [&] {
    if constexpr (!std::is_same_v<std::decay_t<Prologue>, NoPrologue>) {
      prologue();
#pragma omp barrier
    }
    const auto run = [&](int64_t t) {
      const int64_t jb = t / bm, ib = t % bm;
      const int64_t i0 = ib * b.mb, j0 = jb * b.nb;
      body(i0, std::min(m, i0 + b.mb), j0, std::min(n, j0 + b.nb));
    };
    if (m <= 4) {
#pragma omp for schedule(guided) nowait
      for (int64_t t = 0; t < tasks; ++t) run(t);
    } else {
#pragma omp for schedule(static) nowait
      for (int64_t t = 0; t < tasks; ++t) run(t);
    }
  });
}

template <class Body>
void matmul_parallel(int64_t m, int64_t n, const Blocking& b, Body&& body) {
  matmul_parallel(m, n, b, NoPrologue{}, std::forward<Body>(body));
}

// A 64-byte aligned buffer of at least `bytes`, owned by the calling thread and reused by its
// later calls with the same `slot` (grown, never shrunk). Valid until the thread's next call
// with that slot.
void* matmul_scratch(size_t bytes, int slot);

// Scratch slots, so that nested users of matmul_scratch never share a buffer.
inline constexpr int kScratchPanel = 0;       // per-thread dequantised weight panel
inline constexpr int kScratchActivations = 1;  // quantised activations (caller thread, shared)
inline constexpr int kScratchRow = 2;          // per-thread dequantised weight row (scalar)

}  // namespace kiln::cpu::detail
