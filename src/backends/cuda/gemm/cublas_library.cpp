#include "backends/cuda/gemm/cublas_library.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace kiln::cuda {
namespace {

// The entry points the backend uses, resolved from the opened libraries.
struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
  // cublasGemmEx is also an inline overload in cublas_api.h (cudaDataType as the compute type), so
  // decltype cannot name it: the exported one's type is spelled out.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&::cublasLtCreate) lt_create = nullptr;
  decltype(&::cublasLtMatmul) lt_matmul = nullptr;
  decltype(&::cublasLtMatmulDescCreate) lt_desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) lt_desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) lt_desc_set = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) lt_layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) lt_layout_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) lt_pref_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) lt_pref_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) lt_pref_set = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) lt_heuristic = nullptr;
};

struct Loaded {
  CublasApi api;
  Status status = Status::ok();
};

// Opens a library by its file name (the soname of the major version built against): where the
// dynamic loader looks, then in the build's toolkit folder. `error`: why the first attempt failed.
void* open_library(const char* soname, std::string& error) {
  if (void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return h;
  error = dlerror();
  const std::string in_toolkit = std::string(KILN_CUDA_LIBRARY_DIR) + "/" + soname;
  if (void* h = dlopen(in_toolkit.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

Status cannot_open(const char* soname, const std::string& error) {
  return not_found(std::string("the CUDA backend cannot load ") + soname + ": " + error +
                   "; install the cuBLAS of the CUDA toolkit Kiln was built with, or add its folder to "
                   "LD_LIBRARY_PATH");
}

// fn = the library's `symbol`; `missing` keeps the first symbol that was not found.
template <typename Fn>
void resolve(void* library, const char* symbol, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (fn == nullptr && missing.empty()) missing = symbol;
}

Loaded load() {
  Loaded out;
  std::string error;
  // cuBLASLt first: cuBLAS needs it, and then finds it already open.
  void* lt = open_library(KILN_CUBLASLT_SONAME, error);
  if (lt == nullptr) {
    out.status = cannot_open(KILN_CUBLASLT_SONAME, error);
    return out;
  }
  void* blas = open_library(KILN_CUBLAS_SONAME, error);
  if (blas == nullptr) {
    out.status = cannot_open(KILN_CUBLAS_SONAME, error);
    return out;
  }
  CublasApi& a = out.api;
  std::string missing;
  resolve(blas, "cublasCreate_v2", a.create, missing);
  resolve(blas, "cublasDestroy_v2", a.destroy, missing);
  resolve(blas, "cublasSetStream_v2", a.set_stream, missing);
  resolve(blas, "cublasSetWorkspace_v2", a.set_workspace, missing);
  resolve(blas, "cublasGetStatusName", a.status_name, missing);
  resolve(blas, "cublasGetStatusString", a.status_string, missing);
  resolve(blas, "cublasGemmEx", a.gemm_ex, missing);
  resolve(lt, "cublasLtCreate", a.lt_create, missing);
  resolve(lt, "cublasLtMatmul", a.lt_matmul, missing);
  resolve(lt, "cublasLtMatmulDescCreate", a.lt_desc_create, missing);
  resolve(lt, "cublasLtMatmulDescDestroy", a.lt_desc_destroy, missing);
  resolve(lt, "cublasLtMatmulDescSetAttribute", a.lt_desc_set, missing);
  resolve(lt, "cublasLtMatrixLayoutCreate", a.lt_layout_create, missing);
  resolve(lt, "cublasLtMatrixLayoutDestroy", a.lt_layout_destroy, missing);
  resolve(lt, "cublasLtMatmulPreferenceCreate", a.lt_pref_create, missing);
  resolve(lt, "cublasLtMatmulPreferenceDestroy", a.lt_pref_destroy, missing);
  resolve(lt, "cublasLtMatmulPreferenceSetAttribute", a.lt_pref_set, missing);
  resolve(lt, "cublasLtMatmulAlgoGetHeuristic", a.lt_heuristic, missing);
  if (!missing.empty()) {
    out.status = not_found("the CUDA backend's cuBLAS has no entry point " + missing +
                           "; install the cuBLAS of the CUDA toolkit Kiln was built with");
  }
  return out;
}

const Loaded& loaded() {
  static std::once_flag once;
  static Loaded state;
  std::call_once(once, [] { state = load(); });
  return state;
}

// The entry point of `member`, or nullptr when the libraries did not load.
template <auto Member>
auto entry() {
  const Loaded& l = loaded();
  return l.status.is_ok() ? l.api.*Member : nullptr;
}

}  // namespace

Status load_cublas() { return loaded().status; }

}  // namespace kiln::cuda

// The entry points, with the signatures of cublas_api.h and cublasLt.h (the compiler checks them
// against those declarations). Each forwards to the opened library.
using kiln::cuda::CublasApi;
using kiln::cuda::entry;

#define KILN_CUBLAS_FORWARD(member, ...)                                  \
  auto fn = entry<&CublasApi::member>();                                  \
  return fn != nullptr ? fn(__VA_ARGS__) : CUBLAS_STATUS_NOT_INITIALIZED

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) { KILN_CUBLAS_FORWARD(create, handle); }

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) { KILN_CUBLAS_FORWARD(destroy, handle); }

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  KILN_CUBLAS_FORWARD(set_stream, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  KILN_CUBLAS_FORWARD(set_workspace, handle, workspace, bytes);
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  auto fn = entry<&CublasApi::status_name>();
  return fn != nullptr ? fn(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  auto fn = entry<&CublasApi::status_string>();
  return fn != nullptr ? fn(status) : "cuBLAS could not be loaded";
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb, const void* beta,
                                         void* C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  KILN_CUBLAS_FORWARD(gemm_ex, handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
                      ldc, computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) { KILN_CUBLAS_FORWARD(lt_create, handle); }

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                           cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  KILN_CUBLAS_FORWARD(lt_matmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                      workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute_type,
                                                     cudaDataType_t scale_type) {
  KILN_CUBLAS_FORWARD(lt_desc_create, desc, compute_type, scale_type);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  KILN_CUBLAS_FORWARD(lt_desc_destroy, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t bytes) {
  KILN_CUBLAS_FORWARD(lt_desc_set, desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  KILN_CUBLAS_FORWARD(lt_layout_create, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  KILN_CUBLAS_FORWARD(lt_layout_destroy, layout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  KILN_CUBLAS_FORWARD(lt_pref_create, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  KILN_CUBLAS_FORWARD(lt_pref_destroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t bytes) {
  KILN_CUBLAS_FORWARD(lt_pref_set, pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t pref, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  KILN_CUBLAS_FORWARD(lt_heuristic, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned);
}

}  // extern "C"
