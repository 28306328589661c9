// SPDX-License-Identifier: Apache-2.0
// joule/core/error.hpp — error values, the exception type, and Result<T>.
#pragma once

#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <tl/expected.hpp>

namespace joule {

/// What kind of failure an Error describes. Entry points map these to exit codes, HTTP statuses and
/// Python exception classes.
enum class ErrorCode {
  kInvalidArgument,   ///< the caller passed a value that can never be right (bad flag, malformed text)
  kNotFound,          ///< a named thing (device index, window, file, column) does not exist
  kOutOfRange,        ///< a value is well-formed but outside what the device or model accepts
  kNotSupported,      ///< the device or backend cannot do this at all
  kPermissionDenied,  ///< the OS or driver refused: the message says how to get the right
  kLibraryMissing,    ///< a vendor library could not be loaded or lacks a needed symbol
  kParse,             ///< a file or text could not be parsed; the message names where
  kIo,                ///< an I/O call failed
  kState,             ///< the call is not valid in the object's current state (e.g. window reused)
  kDevice,            ///< the device or driver reported an unexpected failure
  kInternal,          ///< a bug in joule
};

/// @return a short lower-case name of the code, e.g. "not-supported".
std::string_view to_string(ErrorCode code);

/// An error as a value: a code and a complete, user-readable message.
class Error {
 public:
  Error(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  /// @return a copy whose message is "<context>: <message>".
  Error with_context(std::string_view context) const;

 private:
  ErrorCode code_;
  std::string message_;
};

/// The exception joule throws for misuse and fatal errors. what() is the message alone.
class Exception : public std::runtime_error {
 public:
  explicit Exception(Error error) : std::runtime_error(error.message()), error_(std::move(error)) {}
  Exception(ErrorCode code, const std::string& message) : Exception(Error(code, message)) {}

  ErrorCode code() const { return error_.code(); }
  const Error& error() const { return error_; }

 private:
  Error error_;
};

/// A value or the Error that explains why there is none (expected failures: unsupported features,
/// refused permissions, bad input).
template <class T>
using Result = tl::expected<T, Error>;

namespace detail {
// JOULE_TRY's value: the T of a Result<T> (moved out), nothing for Result<void>.
template <class T>
T&& try_value(tl::expected<T, Error>& result) {
  return *std::move(result);
}
inline void try_value(tl::expected<void, Error>& /*result*/) {}
}  // namespace detail

/// JOULE_TRY(expr): evaluates `expr`, a Result<T>; on an error, returns that error from the enclosing
/// function (which must return some Result<U>); otherwise the expression's value is the T, moved out (nothing
/// for Result<void>):
///
///     auto table = JOULE_TRY(csv::parse(text, source));  // a csv::Table, or return its error
///     JOULE_TRY(gpu.set_power_limit_mw(limit_mw));       // Result<void>: return its error, if any
///
/// The error passes through unchanged; to add context, test the result and return `fail(…)` or
/// `error.with_context(…)` by hand. `expr` is evaluated once, into a copy (an lvalue Result is left as it
/// is). Do not nest JOULE_TRY in another's argument. It is a GNU statement expression (g++ and clang), the one
/// compiler extension the project uses: C++20 has no other way to return from inside an expression.
#define JOULE_TRY(...)                                                     \
  __extension__({                                                          \
    auto joule_try_result_ = (__VA_ARGS__);                                \
    if (!joule_try_result_) {                                              \
      return ::tl::make_unexpected(std::move(joule_try_result_).error());  \
    }                                                                      \
    ::joule::detail::try_value(joule_try_result_);                         \
  })

/// Shorthand for `tl::make_unexpected(Error(code, fmt::format(...)))`.
template <class... Args>
tl::unexpected<Error> fail(ErrorCode code, fmt::format_string<Args...> format, Args&&... args) {
  return tl::make_unexpected(Error(code, fmt::format(format, std::forward<Args>(args)...)));
}

/// @return the what() of the exception `error` holds, or "unknown exception" for one that is not a
/// std::exception (for boundaries that must turn any exception into a message, e.g. an HTTP 500 body).
std::string exception_message(std::exception_ptr error);

/// @return the value of `result`, or throws joule::Exception carrying its error.
template <class T>
T value_or_throw(Result<T> result) {
  if (!result) {
    throw Exception(std::move(result.error()));
  }
  if constexpr (!std::is_void_v<T>) {
    return std::move(*result);
  }
}

}  // namespace joule
