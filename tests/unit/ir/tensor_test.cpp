#include "ir/tensor.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

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

// A weight entry serves a tensor's elements: f32 as floats through load, any other dtype as its
// raw bytes through load_bytes.
TEST(IrTensor, WeightEntryServesTheElements) {
  Tensor f(DType::kF32, {2, 3});
  for (int64_t i = 0; i < f.numel(); ++i) tensor_set_f64(f, i, 0.5 * static_cast<double>(i));
  const WeightEntry fe = weight_entry_from_tensor(f);
  EXPECT_EQ(fe.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(fe.dtype, DType::kF32);
  ASSERT_TRUE(fe.load);
  EXPECT_FALSE(fe.load_bytes);
  const Expected<std::vector<float>> floats = fe.load();
  ASSERT_TRUE(floats.has_value());
  EXPECT_EQ(*floats, (std::vector<float>{0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f}));

  Tensor n(DType::kI64, {3});
  for (int64_t i = 0; i < n.numel(); ++i) tensor_set_i64(n, i, -7 * i);
  const WeightEntry ne = weight_entry_from_tensor(n);
  EXPECT_EQ(ne.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(ne.dtype, DType::kI64);
  EXPECT_FALSE(ne.load);
  ASSERT_TRUE(ne.load_bytes);
  const Expected<std::vector<std::byte>> bytes = ne.load_bytes();
  ASSERT_TRUE(bytes.has_value());
  ASSERT_EQ(bytes->size(), n.byte_size());
  EXPECT_EQ(std::memcmp(bytes->data(), n.bytes(), n.byte_size()), 0);
}

}  // namespace
}  // namespace kiln::ir
