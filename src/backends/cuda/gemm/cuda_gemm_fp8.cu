#include "backends/cuda/gemm/cuda_gemm_fp8.h"

#include <cublasLt.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_launch.cuh"
#include "backends/cuda/layers/cuda_elementwise.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kE4m3Max = 448.0f;
constexpr size_t kAlign = 256;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr size_t kScaleBytes = kAlign;  // max|x| as bits; s_x 16 bytes in (cuBLASLt needs its scales 16-byte aligned)

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Grid-stride kernels take at most this many blocks: 16 deep on each of an H200's 132 multiprocessors.
constexpr int64_t kMaxBlocks = 132 * 16;

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

// max|x| over n values into *amax_bits (a non-negative float's bits order as unsigned integers;
// *amax_bits starts at 0).
__global__ void amax_kernel(const float* x, int64_t n, unsigned* amax_bits) {
  kernel_prologue();
  float m = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    m = fmaxf(m, fabsf(x[i]));
  }
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  __shared__ float warps[kThreads / 32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, warps[w]);
    atomicMax(amax_bits, __float_as_uint(m));
  }
}

// q = e4m3(x / s_x), saturating; block 0 also writes s_x (1 for an all-zero x).
__global__ void quantize_e4m3_kernel(const float* x, int64_t n, const unsigned* amax_bits, uint8_t* q,
                                     float* scale) {
  kernel_prologue();
  const float amax = __uint_as_float(*amax_bits);
  const float inv = amax > 0.0f ? kE4m3Max / amax : 0.0f;
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
  const int64_t pairs = n / 2;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < pairs; i += int64_t{gridDim.x} * kThreads) {
    const float2 v = reinterpret_cast<const float2*>(x)[i];
    const __nv_fp8x2_storage_t p = __nv_cvt_float2_to_fp8x2(make_float2(v.x * inv, v.y * inv), __NV_SATFINITE, __NV_E4M3);
    reinterpret_cast<__nv_fp8x2_storage_t*>(q)[i] = p;
  }
  if (n % 2 != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    q[n - 1] = __nv_cvt_float_to_fp8(x[n - 1] * inv, __NV_SATFINITE, __NV_E4M3);
  }
}

// The process's cuBLASLt handle and, per product shape, the algorithm its heuristic chose.
struct LtState {
  std::mutex mu;
  cublasLtHandle_t handle = nullptr;
  Status created{cublas_status(cublasLtCreate(&handle), "cublasLtCreate")};
  std::map<std::tuple<int64_t, int64_t, int64_t>, cublasLtMatmulAlgo_t> algos;
};

LtState& lt_state() {
  static LtState* state = new LtState();  // lives as long as the process, as cuBLASLt's own state does
  return *state;
}

// Owners of cuBLASLt's descriptors for one call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  ~Descriptors() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

template <typename T>
Status set_op(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& value, const char* what) {
  return cublas_status(cublasLtMatmulDescSetAttribute(op, attr, &value, sizeof(value)), what);
}

}  // namespace

bool gemm_fp8_fits(int64_t n, int64_t k) { return n % 16 == 0 && k > 0 && k % 16 == 0; }

size_t gemm_fp8_scratch_bytes(int64_t m, int64_t k) {
  return align_up(static_cast<size_t>(m * k)) + kScaleBytes + kWorkspaceBytes;
}

Status launch_gemm_fp8(const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias, float* y,
                       void* scratch, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return Status::ok();
  if (!gemm_fp8_fits(n, k)) {
    return invalid_argument("fp8 products need n and k multiples of 16, not " + std::to_string(n) + " and " +
                            std::to_string(k));
  }
  auto* xq = static_cast<uint8_t*>(scratch);
  auto* scales = static_cast<std::byte*>(scratch) + align_up(static_cast<size_t>(m * k));
  auto* amax_bits = reinterpret_cast<unsigned*>(scales);
  auto* x_scale = reinterpret_cast<float*>(scales + 16);
  void* workspace = scales + kScaleBytes;
  // Each row's tail begins with the weight's scale: row 0's (16-byte aligned, as k is) serves cuBLASLt.
  const auto* w_scale = reinterpret_cast<const float*>(static_cast<const uint8_t*>(w) + k);

  KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(amax_bits, 0, sizeof(unsigned), stream));
  const int64_t count = m * k;
  launch(amax_kernel, blocks_for(count), kThreads, 0, stream, x, count, amax_bits);
  KILN_CUDA_RETURN_IF_LAUNCH_FAILED("activation max");
  launch(quantize_e4m3_kernel, blocks_for((count + 1) / 2), kThreads, 0, stream, x, count,
         static_cast<const unsigned*>(amax_bits), xq, x_scale);
  KILN_CUDA_RETURN_IF_LAUNCH_FAILED("activation quantisation");

  LtState& lt = lt_state();
  KILN_RETURN_IF_ERROR(lt.created);
  // Column-major view, as cuBLAS sees it: y^T [n, m] = (W^T [k, n])^T · x_q^T [k, m], the weight's
  // rows k + 16 bytes apart (its tail). fp8 products take A transposed and B not ("TN").
  Descriptors desc;
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  KILN_RETURN_IF_ERROR(set_op(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, transa, "fp8 transa"));
  KILN_RETURN_IF_ERROR(set_op(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, transb, "fp8 transb"));
  KILN_RETURN_IF_ERROR(set_op(desc.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, w_scale, "fp8 weight scale"));
  KILN_RETURN_IF_ERROR(
      set_op(desc.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const float*>(x_scale), "fp8 activation scale"));
  const auto un = static_cast<uint64_t>(n), um = static_cast<uint64_t>(m), uk = static_cast<uint64_t>(k);
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&desc.a, CUDA_R_8F_E4M3, uk, un, k + 16));
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&desc.b, CUDA_R_8F_E4M3, uk, um, k));
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&desc.d, CUDA_R_32F, un, um, n));

  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(lt.mu);
    const auto key = std::make_tuple(m, n, k);
    auto it = lt.algos.find(key);
    if (it == lt.algos.end()) {
      KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&desc.pref));
      const size_t workspace_bytes = kWorkspaceBytes;
      KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
          desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes)));
      cublasLtMatmulHeuristicResult_t found{};
      int count_found = 0;
      KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(lt.handle, desc.op, desc.a, desc.b, desc.d, desc.d,
                                                                  desc.pref, 1, &found, &count_found));
      if (count_found == 0) {
        return unimplemented("cuBLASLt has no fp8 product for " + std::to_string(m) + "x" + std::to_string(k) +
                             " by " + std::to_string(n) + "x" + std::to_string(k));
      }
      it = lt.algos.emplace(key, found.algo).first;
    }
    algo = it->second;
  }
  const float one = 1.0f, zero = 0.0f;
  KILN_CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(lt.handle, desc.op, &one, w, desc.a, xq, desc.b, &zero, y, desc.d, y,
                                             desc.d, &algo, workspace, kWorkspaceBytes, stream));
  if (bias != nullptr) {
    launch_add_bias(y, m, n, bias, stream);
    KILN_CUDA_RETURN_IF_LAUNCH_FAILED("bias add");
  }
  return Status::ok();
}

}  // namespace kiln::cuda
