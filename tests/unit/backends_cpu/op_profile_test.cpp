#include "backends/cpu/op_profile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace kiln::cpu {
namespace {

TEST(OpProfile, PrintsEachKindPerRunSlowestFirst) {
  OpProfile p;
  p.runs = 4;
  p.by_kind["rope"] = {0.004, 16};
  p.by_kind["matmul 2048x384"] = {0.012, 8};
  p.by_kind["attention"] = {0.008, 8};
  testing::internal::CaptureStderr();
  p.print("step", "30.0 tokens a step");
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("kiln cpu profile: 4 steps, 6.000 ms a step, 30.0 tokens a step\n"), std::string::npos) << out;
  const size_t matmul = out.find("matmul 2048x384"), attention = out.find("attention"), rope = out.find("rope");
  ASSERT_NE(rope, std::string::npos) << out;
  EXPECT_LT(matmul, attention);
  EXPECT_LT(attention, rope);
  EXPECT_NE(out.find("3.000 ms a step   50.0%     8 nodes"), std::string::npos) << out;
  EXPECT_NE(out.find("1.000 ms a step   16.7%    16 nodes"), std::string::npos) << out;
}

TEST(OpProfile, NothingRunNothingPrinted) {
  testing::internal::CaptureStderr();
  OpProfile{}.print("run");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(OpProfile, LevelFromTheEnvironment) {
  const char* saved = std::getenv("KILN_CPU_PROFILE");
  const std::string keep = saved != nullptr ? saved : "";
  unsetenv("KILN_CPU_PROFILE");
  EXPECT_EQ(profile_level_from_env(), ProfileLevel::kOff);
  setenv("KILN_CPU_PROFILE", "1", 1);
  EXPECT_EQ(profile_level_from_env(), ProfileLevel::kOps);
  setenv("KILN_CPU_PROFILE", "nodes", 1);
  EXPECT_EQ(profile_level_from_env(), ProfileLevel::kNodes);
  setenv("KILN_CPU_PROFILE", "0", 1);
  EXPECT_EQ(profile_level_from_env(), ProfileLevel::kOff);
  if (saved != nullptr) {
    setenv("KILN_CPU_PROFILE", keep.c_str(), 1);
  } else {
    unsetenv("KILN_CPU_PROFILE");
  }
}

}  // namespace
}  // namespace kiln::cpu
