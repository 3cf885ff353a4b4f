// cuBLAS is opened when the backend first needs it; no GPU is needed to open it.
#include "backends/cuda/gemm/cublas_library.h"

#include <cublas_v2.h>
#include <gtest/gtest.h>

namespace kiln::cuda {
namespace {

TEST(CublasLibrary, OpensTheToolkitsLibraryAndForwardsToIt) {
  // The toolkit the backend was built with is installed wherever it builds and wherever it runs.
  const Status loaded = load_cublas();
  ASSERT_TRUE(loaded.is_ok()) << loaded.message();
  EXPECT_TRUE(load_cublas().is_ok());  // once; later calls give the first answer
  // Answered by the library itself, through the entry points of cublas_library.cpp.
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STRNE(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE), "cuBLAS could not be loaded");
}

}  // namespace
}  // namespace kiln::cuda
