#include "ir/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kiln::ir {
namespace {

// Owned storage starts on a cache line, whatever the size (so that a kernel's vector loads of a
// row starting there never straddle two lines); the zero-filled kind is zero.
TEST(IrTensor, OwnedStorageIsCacheLineAlignedAndZeroFilled) {
  for (int64_t n : {0, 1, 3, 17, 1000, 300000}) {
    const Tensor zero(DType::kF32, {n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(zero.data<float>()) % 64, 0u) << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(zero.data<float>()[i], 0.0f) << n << " " << i;
    const Tensor raw = Tensor::uninitialized(DType::kU8, {n, 3});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(raw.bytes()) % 64, 0u) << n;
  }
}

}  // namespace
}  // namespace kiln::ir
