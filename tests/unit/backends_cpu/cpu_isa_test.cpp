#include "backends/cpu/cpu_isa.h"

#include <gtest/gtest.h>

namespace kiln::cpu {
namespace {

TEST(CpuIsa, NamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    const auto back = isa_from_name(isa_name(isa));
    ASSERT_TRUE(back.has_value()) << isa_name(isa);
    EXPECT_EQ(*back, isa);
  }
  EXPECT_EQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_FALSE(isa_from_name("AVX2").has_value());
  EXPECT_FALSE(isa_from_name("sse4").has_value());
  EXPECT_FALSE(isa_from_name("").has_value());
}

TEST(CpuIsa, DetectIsStableAndActiveNeverExceedsIt) {
  EXPECT_EQ(isa_detect(), isa_detect());
  EXPECT_LE(isa_active(), isa_detect());
}

TEST(CpuIsa, OverrideLowersAndResets) {
  const Isa before = isa_active();
  ASSERT_TRUE(isa_override(Isa::kScalar).is_ok());
  EXPECT_EQ(isa_active(), Isa::kScalar);
  ASSERT_TRUE(isa_override(isa_detect()).is_ok());
  EXPECT_EQ(isa_active(), isa_detect());
  ASSERT_TRUE(isa_override(std::nullopt).is_ok());
  EXPECT_EQ(isa_active(), before);
}

TEST(CpuIsa, OverrideRefusesWhatTheCpuLacks) {
  if (isa_detect() == Isa::kAvx512Bf16) GTEST_SKIP() << "this CPU has every ISA Kiln knows";
  const Isa before = isa_active();
  const Isa beyond = static_cast<Isa>(static_cast<int>(isa_detect()) + 1);
  const Status s = isa_override(beyond);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(isa_name(beyond)), std::string::npos) << s.message();
  EXPECT_EQ(isa_active(), before) << "a refused override changes nothing";
}

#if defined(__x86_64__)
TEST(CpuIsa, DetectMatchesCompilerBuiltins) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vnni");
  // The builtins check the CPU only; isa_detect() also needs the OS to save the registers, so it
  // may be lower, never higher.
  if (!avx2) {
    EXPECT_EQ(isa_detect(), Isa::kScalar);
  }
  if (!avx512) {
    EXPECT_LE(isa_detect(), Isa::kAvx2);
  }
  if (!avx512 || !__builtin_cpu_supports("avx512bf16")) {
    EXPECT_LE(isa_detect(), Isa::kAvx512);
  }
  if (avx2) {
    EXPECT_GE(isa_detect(), Isa::kAvx2) << "a CPU with AVX2 under a 64-bit OS that saves YMM";
  }
}
#endif

}  // namespace
}  // namespace kiln::cpu
