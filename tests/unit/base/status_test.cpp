// Status, Expected<T> and the propagation macros of base/status.h.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace kiln {
namespace {

TEST(Status, DefaultIsOkWithNoMessage) {
  const Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_TRUE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_TRUE(Status::ok().is_ok());
}

TEST(Status, EachConstructorCarriesItsCodeAndMessage) {
  const std::vector<std::pair<Status, StatusCode>> cases = {
      {invalid_argument("m"), StatusCode::kInvalidArgument}, {not_found("m"), StatusCode::kNotFound},
      {io_error("m"), StatusCode::kIoError},                 {unimplemented("m"), StatusCode::kUnimplemented},
      {resource_exhausted("m"), StatusCode::kResourceExhausted}, {internal_error("m"), StatusCode::kInternal},
  };
  for (const auto& [s, code] : cases) {
    EXPECT_FALSE(s.is_ok());
    EXPECT_FALSE(static_cast<bool>(s));
    EXPECT_EQ(s.code(), code);
    EXPECT_EQ(s.message(), "m");
  }
}

TEST(Status, ContextChainsOutermostFirstAndKeepsTheCode) {
  const Status inner = not_found("tensor 'lm_head.weight' is missing");
  const Status outer = inner.with_context("reading model.safetensors").with_context("kiln build");
  EXPECT_EQ(outer.code(), StatusCode::kNotFound);
  EXPECT_EQ(outer.message(), "kiln build: reading model.safetensors: tensor 'lm_head.weight' is missing");
  EXPECT_EQ(inner.message(), "tensor 'lm_head.weight' is missing") << "with_context returns a copy";
}

TEST(Status, ContextLeavesOkAlone) {
  const Status s = Status::ok().with_context("reading model.safetensors");
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.message(), "");
}

TEST(Expected, HoldsAValue) {
  Expected<std::string> e = std::string("kiln");
  ASSERT_TRUE(e.has_value());
  EXPECT_TRUE(static_cast<bool>(e));
  EXPECT_EQ(*e, "kiln");
  EXPECT_EQ(e->size(), 4u);
  EXPECT_TRUE(e.status().is_ok());
  e.value() += "!";
  EXPECT_EQ(e.value(), "kiln!");
}

TEST(Expected, HoldsAnError) {
  const Expected<int> e = io_error("disk full");
  EXPECT_FALSE(e.has_value());
  EXPECT_FALSE(static_cast<bool>(e));
  EXPECT_EQ(e.status().code(), StatusCode::kIoError);
  EXPECT_EQ(e.status().message(), "disk full");
}

TEST(Expected, AnOkStatusBecomesAnInternalError) {
  // An Expected with neither a value nor an error would be a bug in the caller; it must not
  // read as success.
  const Expected<int> e = Status::ok();
  EXPECT_FALSE(e.has_value());
  EXPECT_EQ(e.status().code(), StatusCode::kInternal);
  EXPECT_FALSE(e.status().message().empty());
}

TEST(Expected, MovesAMoveOnlyValueOut) {
  Expected<std::unique_ptr<int>> e = std::make_unique<int>(7);
  ASSERT_TRUE(e);
  std::unique_ptr<int> p = std::move(e).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

// ---- the macros ----

Status step(bool ok, int& ran) {
  ++ran;
  return ok ? Status::ok() : invalid_argument("step " + std::to_string(ran) + " failed");
}

Status three_steps(bool second_ok, int& ran) {
  KILN_RETURN_IF_ERROR(step(true, ran));
  KILN_RETURN_IF_ERROR(step(second_ok, ran).with_context("second"));
  KILN_RETURN_IF_ERROR(step(true, ran));
  return Status::ok();
}

TEST(StatusMacros, ReturnIfErrorStopsAtTheFirstFailure) {
  int ran = 0;
  EXPECT_TRUE(three_steps(true, ran).is_ok());
  EXPECT_EQ(ran, 3);
  ran = 0;
  const Status s = three_steps(false, ran);
  EXPECT_EQ(ran, 2) << "the third step must not run";
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "second: step 2 failed");
}

Expected<int> parse_digit(char c) {
  if (c < '0' || c > '9') return invalid_argument(std::string("not a digit: ") + c);
  return c - '0';
}

// Two macros in one function (distinct temporaries), one declaring and one assigning.
Expected<int> two_digits(const std::string& s) {
  KILN_ASSIGN_OR_RETURN(const int tens, parse_digit(s.at(0)));
  int ones = -1;
  KILN_ASSIGN_OR_RETURN(ones, parse_digit(s.at(1)));
  return tens * 10 + ones;
}

TEST(StatusMacros, AssignOrReturnAssignsValuesAndPropagatesErrors) {
  const auto ok = two_digits("42");
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 42);
  const auto bad_first = two_digits("x2");
  ASSERT_FALSE(bad_first);
  EXPECT_EQ(bad_first.status().message(), "not a digit: x");
  const auto bad_second = two_digits("4y");
  ASSERT_FALSE(bad_second);
  EXPECT_EQ(bad_second.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_second.status().message(), "not a digit: y");
}

Status take_ownership(Expected<std::unique_ptr<int>> source, int& out) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<int> p, std::move(source));
  out = *p;
  return Status::ok();
}

TEST(StatusMacros, AssignOrReturnMovesAndReturnsIntoAStatusFunction) {
  int out = 0;
  EXPECT_TRUE(take_ownership(std::make_unique<int>(5), out).is_ok());
  EXPECT_EQ(out, 5);
  const Status s = take_ownership(Expected<std::unique_ptr<int>>(not_found("gone")), out);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(out, 5);
}

TEST(StatusMacros, CheckPassesQuietlyAndAbortsNamingTheCondition) {
  const int two = 2;
  KILN_CHECK(two == 2);
  EXPECT_DEATH(KILN_CHECK(two == 3), "internal invariant violated: two == 3");
}

}  // namespace
}  // namespace kiln
