// SPDX-License-Identifier: Apache-2.0
// joule/core/file.hpp — whole-file reads and atomic writes with errors that name the path.
#pragma once

#include <string>
#include <string_view>

#include "joule/core/error.hpp"

namespace joule {

/// @return the whole content of `path`, or an error naming the path: kNotFound, kPermissionDenied, kIo.
Result<std::string> read_text_file(const std::string& path);

/// Writes `content` to `path` atomically: into a temporary file beside it, flushed, then renamed over
/// `path`, so a reader never sees a half-written file and a failure leaves any old file in place.
Result<void> write_file_atomic(const std::string& path, std::string_view content);

/// @return an Error for a failed system call on `path`, code chosen from `errno_value`
/// (ENOENT → kNotFound, EACCES/EPERM → kPermissionDenied, else kIo), message "<what> <path>: <strerror>".
Error errno_error(int errno_value, std::string_view what, const std::string& path);

}  // namespace joule
