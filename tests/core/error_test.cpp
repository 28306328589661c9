// SPDX-License-Identifier: Apache-2.0
#include "joule/core/error.hpp"

#include <stdexcept>

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
