// The CUDA matmul kernels `kiln build --target cuda` chooses among, by name (recorded on each
// matmul node as kernel_decode / kernel_prefill, like the CPU's). Names read
// "<format>.cuda.<algorithm>":
//   gemv        decode steps (m < 8): one warp per weight row, fp32 activations (cuda_gemv.h);
//   gemv_deep   f16/bf16: the same with twice the loads in flight per lane (8) in batch-1 steps:
//               timing picks it per shape;
//   gemv_pair   f16/bf16: two warps per weight row in batch-1 steps (twice the loads in flight
//               for the products of few rows): timing picks it per shape;
//   sgemm       f32 weights, cuBLAS SGEMM;
//   gemm_split  f16/bf16 weights, cuBLAS tensor-core GEMMs over activations split into 2-3
//               parts: fp32-accurate; listed first, so it is what an untimed build takes;
//   gemm        f16/bf16 weights, one tensor-core GEMM over activations rounded to the weights'
//               type: the fast prefill path that timing picks (cuda_gemm.h);
//   gemm_halves the same as two products over the two halves of the weight rows.
// Integer weights (i8c, i8g32, i8g128, i4g32, i4g128: the CPU's row formats, read as stored):
//   gemv        decode steps: widened in registers (cuda_gemv_quant.h);
//   gemv_q8     batch-1 steps over activations quantised to int8 in runs of 16, products by
//               dp4a (four int8 products a instruction); wider steps as gemv. Listed after gemv:
//               timing picks it;
//   sgemm       the weight widened to fp32 (exact) into scratch, then cuBLAS SGEMM on fp32
//               activations: listed first, what an untimed build takes;
//   gemm        one tensor-core product over activations rounded to fp16: up to kGemmDqMaxRows
//               rows (batched decode, short prompts) the weight widened a tile at a time in
//               registers by a kernel of Kiln's own (cuda_gemm_dq.h), which reads each weight
//               byte once; more rows (or shapes that kernel does not take) widen the whole weight
//               to fp16 into scratch (cuda_dequant.h) for cuBLAS.
// fp8 weights (f8: e4m3, one scale a weight) have gemv, sgemm and gemm as the integer formats,
//   gemv_h2     batch-1 steps over activations rounded to fp16 in runs of 16, products in half2
//               (the gemv_q8 of fp8: algorithm kGemvQ8); timing picks it;
//   gemm_fp8    one fp8 tensor-core GEMM through cuBLASLt over activations quantised to e4m3 with
//               one scale a step (cuda_gemm_fp8.h): twice the fp16 rate; timing picks it.
// Weights are stored in row formats; the panel layouts of the CPU are not read here. Plain C++: the build's kernel tuner lists them without a GPU.
#pragma once

#include <string_view>
#include <vector>

#include "ir/weight_format.h"

namespace kiln::cuda {

enum class CudaMatmulAlgo {
  kGemv,
  kGemvDeep,
  kGemvPair,
  kGemvQ8,  // batch-1 steps over reduced activations: int8 (integer weights), fp16 (fp8 weights)
  kGemmSplit,
  kGemmRounded,
  kGemmRoundedHalves,
  kDequantSgemm,  // integer weights widened to fp32
  kDequantGemm,   // integer weights widened to fp16, fp16 activations
  kGemmFp8,       // fp8 weights, e4m3 activations, cuBLASLt
};

struct CudaMatmulKernel {
  std::string_view name;
  ir::WeightFormat format;
  CudaMatmulAlgo algo;
};

// Kernels for `format` suited to products of `m` activation rows, best guess first; empty when
// the CUDA backend cannot read the format.
std::vector<const CudaMatmulKernel*> cuda_matmul_kernels(ir::WeightFormat format, int64_t m);

// The kernel called `name`, or nullptr.
const CudaMatmulKernel* cuda_matmul_kernel_find(std::string_view name);

// Whether the kernel is a matrix-vector one (gemv, gemv_deep, gemv_pair, gemv_q8), for decode-sized steps.
bool cuda_matmul_kernel_is_gemv(const CudaMatmulKernel& kernel);

// Whether the kernel rounds its activations to a 16- or 8-bit type (the fast tensor-core products).
bool cuda_matmul_kernel_rounds_activations(const CudaMatmulKernel& kernel);

// Whether `kernel` can compute a product of m rows (gemv: m < 8).
bool cuda_matmul_kernel_fits(const CudaMatmulKernel& kernel, int64_t m);

}  // namespace kiln::cuda
