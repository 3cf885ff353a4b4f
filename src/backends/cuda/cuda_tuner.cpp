#include "backends/cuda/cuda_tuner.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <vector>

#include "backends/cuda/cuda_check.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/gemm/cublas_library.h"
#include "backends/cuda/gemm/cuda_gemm.h"
#include "backends/cuda/gemm/cuda_gemv.h"

namespace kiln::cuda {
namespace {

constexpr size_t kCublasWorkspace = size_t{32} << 20;
constexpr size_t kRotateBytes = size_t{256} << 20;

// Uniform values in [-1, 1) from a xorshift generator: timing needs realistic bit patterns, not
// a distribution, and generating a 7B model's largest matrix this way takes a fraction of a second.
void fill_random(std::vector<float>& v, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<float>(static_cast<double>(s >> 40) / static_cast<double>(1ull << 23) - 1.0);
  }
}

struct DeviceBytes {
  void* ptr = nullptr;
  size_t bytes = 0;
  ~DeviceBytes() { cudaFree(ptr); }
  Status reserve(size_t n) {
    if (n <= bytes) return Status::ok();
    cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
    KILN_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, n));
    bytes = n;
    return Status::ok();
  }
};

}  // namespace

struct CudaKernelTuner::Gpu {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  DeviceBytes workspace, weights, x, y, scratch;
  std::tuple<ir::WeightFormat, int64_t, int64_t> weights_key{ir::WeightFormat::kF32, 0, 0};
  size_t copies = 1, copy_stride = 0;
  cudaEvent_t start = nullptr, stop = nullptr;

  ~Gpu() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (cublas != nullptr) cublasDestroy(cublas);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  Status init() {
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    KILN_RETURN_IF_ERROR(load_cublas());
    KILN_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas));
    KILN_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas, stream));
    KILN_RETURN_IF_ERROR(workspace.reserve(kCublasWorkspace));
    KILN_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(cublas, workspace.ptr, workspace.bytes));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
    KILN_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
    return Status::ok();
  }

  // Median seconds of `kernel` at [m, k] x [n, k]^T.
  Expected<double> time(const CudaMatmulKernel& kernel, int64_t m, int64_t n, int64_t k) {
    const auto key = std::make_tuple(kernel.format, n, k);
    if (weights_key != key) {
      std::vector<float> w(static_cast<size_t>(n * k));
      fill_random(w, static_cast<uint64_t>(n * 31 + k));
      std::vector<std::byte> packed(static_cast<size_t>(n) * ir::weight_format_row_bytes(kernel.format, k));
      ir::weight_quantize(kernel.format, w.data(), n, k, packed.data());
      // Enough copies that rotating through them streams from memory, not from the 50 MB L2,
      // as a model's layers do.
      copies = std::clamp<size_t>(kRotateBytes / packed.size() + 1, 1, 32);
      copy_stride = (packed.size() + 255) / 256 * 256;
      KILN_RETURN_IF_ERROR(weights.reserve(copy_stride * copies));
      for (size_t c = 0; c < copies; ++c) {
        KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(static_cast<std::byte*>(weights.ptr) + c * copy_stride, packed.data(),
                                             packed.size(), cudaMemcpyHostToDevice));
      }
      weights_key = key;
    }
    std::vector<float> xs(static_cast<size_t>(m * k));
    fill_random(xs, 7);
    KILN_RETURN_IF_ERROR(x.reserve(xs.size() * sizeof(float)));
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(x.ptr, xs.data(), xs.size() * sizeof(float), cudaMemcpyHostToDevice));
    KILN_RETURN_IF_ERROR(y.reserve(static_cast<size_t>(m * n) * sizeof(float)));
    KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());  // the copies ran on the legacy stream
    KILN_RETURN_IF_ERROR(scratch.reserve(std::max<size_t>(1, matmul_scratch_bytes(kernel, m, n, k))));
    size_t next = 0;
    auto run = [&] {
      const void* w = static_cast<const std::byte*>(weights.ptr) + (next++ % copies) * copy_stride;
      return launch_matmul(kernel, cublas, static_cast<const float*>(x.ptr), m, k, w, n, nullptr,
                           static_cast<float*>(y.ptr), scratch.ptr, stream);
    };
    for (int i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(run());
    std::vector<double> times;
    for (int i = 0; i < 11; ++i) {
      KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
      KILN_RETURN_IF_ERROR(run());
      KILN_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
      KILN_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      float ms = 0.0f;
      KILN_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
      times.push_back(static_cast<double>(ms) * 1e-3);
    }
    std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
    return times[times.size() / 2];
  }
};

Expected<std::unique_ptr<CudaKernelTuner>> CudaKernelTuner::create(bool time_on_gpu) {
  std::unique_ptr<CudaKernelTuner> t(new CudaKernelTuner());
  if (!time_on_gpu) return t;
  KILN_ASSIGN_OR_RETURN(CudaDeviceInfo device, cuda_device_info(0));
  KILN_RETURN_IF_ERROR(cuda_device_supported(device));
  KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(device.index));
  t->device_name_ = device.name;
  t->gpu_ = std::make_unique<Gpu>();
  KILN_RETURN_IF_ERROR(t->gpu_->init());
  return t;
}

CudaKernelTuner::~CudaKernelTuner() = default;

std::string CudaKernelTuner::target() const { return kCudaTarget; }

std::vector<std::string> CudaKernelTuner::matmul_candidates(ir::WeightFormat format) const {
  std::vector<std::string> names = matmul_candidates_for(format, 1);
  for (auto& n : matmul_candidates_for(format, kGemvMaxRows)) names.push_back(n);
  return names;
}

std::vector<std::string> CudaKernelTuner::matmul_candidates_for(ir::WeightFormat format, int64_t m) const {
  std::vector<std::string> names;
  for (const CudaMatmulKernel* k : cuda_matmul_kernels(format, m)) names.emplace_back(k->name);
  return names;
}

double CudaKernelTuner::time_matmul(const std::string& kernel, ir::WeightFormat format, int64_t m, int64_t n,
                                    int64_t k) {
  const CudaMatmulKernel* kern = cuda_matmul_kernel_find(kernel);
  if (gpu_ == nullptr || kern == nullptr || kern->format != format || !cuda_matmul_kernel_fits(*kern, m)) return 1e30;
  auto t = gpu_->time(*kern, m, n, k);
  if (!t) {
    std::fprintf(stderr, "note: timing %s failed: %s\n", kernel.c_str(), t.status().message().c_str());
    return 1e30;
  }
  return *t;
}

}  // namespace kiln::cuda
