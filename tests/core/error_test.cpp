// SPDX-License-Identifier: Apache-2.0
#include "joule/core/error.hpp"

#include <memory>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule {
namespace {

Result<int> half(int value) {
  if (value % 2 != 0) {
    return fail(ErrorCode::kInvalidArgument, "{} is odd", value);
  }
  return value / 2;
}

TEST(Error, ResultCarriesValueOrError) {
  EXPECT_EQ(*half(4), 2);
  JOULE_EXPECT_ERROR(half(3), ErrorCode::kInvalidArgument, "3 is odd");
}

TEST(Error, ValueOrThrow) {
  EXPECT_EQ(value_or_throw(half(8)), 4);
  JOULE_EXPECT_THROW_MESSAGE(value_or_throw(half(5)), ErrorCode::kInvalidArgument, "5 is odd");
  Result<void> ok;
  EXPECT_NO_THROW(value_or_throw(ok));
}

// JOULE_TRY returns the first error unchanged, evaluates its argument once, moves values out (move-only
// types included) and works for Result<void>.
Result<std::unique_ptr<int>> boxed(int value, int& calls) {
  ++calls;
  if (value < 0) {
    return fail(ErrorCode::kOutOfRange, "{} is negative", value);
  }
  return std::make_unique<int>(value);
}

Result<void> non_negative(int value) {
  if (value < 0) {
    return fail(ErrorCode::kInvalidArgument, "{} < 0", value);
  }
  return {};
}

Result<int> sum_of_boxes(int a, int b, int& calls) {
  JOULE_TRY(non_negative(a + b + 100));
  auto first = JOULE_TRY(boxed(a, calls));
  auto second = JOULE_TRY(boxed(b, calls));
  return *first + *second;
}

TEST(Error, TryPassesValuesAndReturnsTheFirstError) {
  int calls = 0;
  EXPECT_EQ(sum_of_boxes(2, 3, calls), 5);
  EXPECT_EQ(calls, 2);

  calls = 0;
  const auto failed = sum_of_boxes(-1, 3, calls);
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(failed.error().message(), "-1 is negative");
  EXPECT_EQ(calls, 1);  // the second call never happens

  calls = 0;
  const auto refused = sum_of_boxes(-200, 0, calls);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(), "-100 < 0");
  EXPECT_EQ(calls, 0);
}

TEST(Error, TryLeavesAnLvalueResultAsItIs) {
  const Result<std::string> text = std::string("kept");
  const auto copy = [&]() -> Result<size_t> { return JOULE_TRY(text).size(); }();
  EXPECT_EQ(copy, 4u);
  EXPECT_EQ(*text, "kept");
}

TEST(Error, ContextAndNames) {
  const Error error(ErrorCode::kNotFound, "no such window");
  EXPECT_EQ(error.with_context("end_window").message(), "end_window: no such window");
  EXPECT_EQ(error.with_context("x").code(), ErrorCode::kNotFound);
  EXPECT_EQ(to_string(ErrorCode::kPermissionDenied), "permission-denied");
  EXPECT_EQ(to_string(ErrorCode::kLibraryMissing), "library-missing");
}

TEST(Error, ExceptionMessageOfAnyException) {
  EXPECT_EQ(exception_message(std::make_exception_ptr(std::runtime_error("disk full"))), "disk full");
  EXPECT_EQ(exception_message(std::make_exception_ptr(Exception(ErrorCode::kIo, "gone"))), "gone");
  EXPECT_EQ(exception_message(std::make_exception_ptr(42)), "unknown exception");
}

}  // namespace
}  // namespace joule
