// Matrix multiply against stored weights, the op that dominates LLM inference time:
//
//   y[m, n] = x[m, k] · W[n, k]^T (+ bias[n])
//
// x and y are row-major float with row strides k and n; W is n rows of k elements stored in
// `format` exactly as ir/weight_format.h lays them out (read in place from the mmap'd engine).
// The caller owns x, w, bias and y; kernels only read x, w and bias and only write y (y must not
// alias x). Kernels keep no state between calls except per-thread scratch buffers that they
// grow on demand.
//
// Several kernels ("candidates") exist per format: one per ISA and, where two strategies make
// sense, one per strategy. `kiln build` times the candidates on the build machine and records the
// winner's name in the engine; the runtime finds it again with matmul_kernel_find(). Names read
// "<format>.<isa>.<strategy>", e.g. "i4g32.avx2.q8dot":
//   scalar   plain C++ reference (dequantise a weight row, dot in float).
//   RxC      register-tiled float dot products (R activation rows x C weight rows per tile),
//            weights converted to float on the fly.
//   dq.RxC   each block of weight rows is first dequantised to a float panel (kept in cache),
//            then the float tiles run over it: good when m is large.
//   q8dot    activations are quantised to int8 per block of 32 (one float scale per block) and
//            multiplied with integer dot products; adds activation rounding error (see
//            quantize_activations.h) but moves 4x fewer bytes through the core.
//   panel    for the panel formats ("p8", ir/weight_format.h): each vector holds 8 output
//            columns, so there are no horizontal sums and one scale vector serves 8 outputs;
//            float panels use broadcast-FMA tiles, integer panels the q8dot arithmetic (AVX-512:
//            VNNI dot products, bit-identical to AVX2's).
//   dot      bf16 dot products (AVX512_BF16) over bf16p8 weights and activations rounded to
//            bf16: twice the multiply rate of float FMAs, at most 2^-8 relative added error.
// Every kernel parallelises with OpenMP over blocks of output columns (and rows when m is
// large), using the thread count set by omp_set_num_threads().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "ir/weight_format.h"

namespace kiln::cpu {

// x: [m, k]; w: [n, k] in the kernel's format; bias: [n] or nullptr; y: [m, n].
using MatmulFn = void (*)(const float* x, int64_t m, int64_t k, const std::byte* w, int64_t n,
                          const float* bias, float* y);

struct MatmulKernel {
  std::string_view name;
  ir::WeightFormat format;
  Isa isa;  // lowest ISA the kernel needs
  MatmulFn fn;
};

// All kernels for `format` that can run with `isa` (including lower-ISA ones), best guess first.
// Pointers are to static storage and stay valid for the process lifetime.
std::vector<const MatmulKernel*> matmul_kernels(ir::WeightFormat format, Isa isa);

// Every registered kernel, of every ISA (for listings and tests).
std::vector<const MatmulKernel*> matmul_kernels_all();

// The kernel called `name`, or nullptr if there is none. The caller checks kernel->isa against
// isa_active() before running it (an engine tuned on an AVX-512 machine may be loaded on an
// AVX2 one).
const MatmulKernel* matmul_kernel_find(std::string_view name);

// Every kernel gives an output row the same bits whatever other rows share the call. Kernels of
// one results class also give the same bits as each other: the panel kernels of one format on
// every ISA (one FMA chain over k per output, or the same integer dot products), and the
// register-tile kernels of one format and ISA whatever their tile shape or whether they read the
// weights in place or dequantised (same vectors, same k chunks, same sums). Names the class:
// "bf16p8.panel", "f32.avx512.tiles", "i4g32.avx2.q8dot"; any other kernel is a class of its own.
std::string matmul_results_class(const MatmulKernel& kernel);

// Runs `kernel`. Preconditions (internal invariants, checked): m, n >= 0, k > 0,
// ir::weight_format_fits(kernel.format, n, k) and kernel.isa <= isa_detect().
void matmul(const MatmulKernel& kernel, const float* x, int64_t m, int64_t k, const std::byte* w,
            int64_t n, const float* bias, float* y);

}  // namespace kiln::cpu
