// SPDX-License-Identifier: Apache-2.0
#include "joule/core/error.hpp"

namespace joule {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "invalid-argument";
    case ErrorCode::kNotFound:
      return "not-found";
    case ErrorCode::kOutOfRange:
      return "out-of-range";
    case ErrorCode::kNotSupported:
      return "not-supported";
    case ErrorCode::kPermissionDenied:
      return "permission-denied";
    case ErrorCode::kLibraryMissing:
      return "library-missing";
    case ErrorCode::kParse:
      return "parse";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kState:
      return "state";
    case ErrorCode::kDevice:
      return "device";
    case ErrorCode::kInternal:
      return "internal";
  }
  return "unknown";
}

std::string exception_message(std::exception_ptr error) {
  try {
    std::rethrow_exception(std::move(error));
  } catch (const std::exception& exception) {
    return exception.what();
  } catch (...) {
    return "unknown exception";
  }
}

Error Error::with_context(std::string_view context) const {
  return Error(code_, fmt::format("{}: {}", context, message_));
}

}  // namespace joule
