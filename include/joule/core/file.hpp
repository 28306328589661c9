// SPDX-License-Identifier: Apache-2.0
// joule/core/file.hpp — bounded whole-file reads and atomic writes with errors that name the path.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "joule/core/error.hpp"

namespace joule {

/// The most a reader takes from one kind of file. The limits sit far above any real file of that kind, so
/// that only a wrong path (/dev/zero, a disk image, an endless pipe) meets them: it then ends in one clear
/// error instead of exhausting memory.
struct ReadLimit {
  std::string_view kind;  ///< what the file should be, for the message, e.g. "pipeline profile"
  size_t max_bytes = 0;
};

/// The environment variable that replaces every ReadLimit's max_bytes: a whole number of MiB (≥ 1).
inline constexpr std::string_view kMaxFileMibVariable = "JOULE_MAX_FILE_MIB";

/// Limits by kind of file (the real sizes they leave room for are in the comments).
namespace read_limits {
inline constexpr size_t kMib = size_t{1} << 20;
/// Anything without a kind of its own.
inline constexpr ReadLimit kDefault{"file", 256 * kMib};
/// Pipeline profiles: one row per stage, instruction and clock, about 40 bytes each; 64 stages × 2 × 200
/// clocks are 1 MB (the shipped example is 12 KB).
inline constexpr ReadLimit kPipelineProfile{"pipeline profile", 16 * kMib};
/// Zeus training and power traces (the shipped ones are 190 KB at most) and group traces (a million jobs
/// are about 60 MB).
inline constexpr ReadLimit kSimulatorTrace{"simulator trace", 256 * kMib};
/// Carbon-intensity traces: ten years of 5-minute values are about 35 MB.
inline constexpr ReadLimit kCarbonTrace{"carbon-intensity trace", 128 * kMib};
/// Hourly tariffs: 24 rows.
inline constexpr ReadLimit kTariff{"tariff", 1 * kMib};
/// JSON documents given by the user: job specs, frequency plans, stored profiles.
inline constexpr ReadLimit kJsonDocument{"JSON document", 16 * kMib};
}  // namespace read_limits

/// @return the whole content of `path`, read through one bounded reader: a regular file larger than the
/// limit is refused before reading; anything else (a pipe, a character device) is read until the limit and
/// refused past it. The file is opened without blocking, so a FIFO with no writer reads as empty instead of
/// hanging. Errors name the path: kNotFound, kPermissionDenied, kIo (a directory, a failed read), and
/// kInvalidArgument for a file over the limit ("/dev/zero: more than 16 MiB, the most joule reads from a
/// pipeline profile; …") or a malformed JOULE_MAX_FILE_MIB. JOULE_MAX_FILE_MIB, when set, replaces
/// `limit.max_bytes`.
Result<std::string> read_text_file(const std::string& path, const ReadLimit& limit);

/// read_text_file(path, read_limits::kDefault).
Result<std::string> read_text_file(const std::string& path);

/// Writes `content` to `path` atomically: into a temporary file beside it, flushed, then renamed over
/// `path`, so a reader never sees a half-written file and a failure leaves any old file in place.
Result<void> write_file_atomic(const std::string& path, std::string_view content);

/// @return an Error for a failed system call on `path`, code chosen from `errno_value`
/// (ENOENT → kNotFound, EACCES/EPERM → kPermissionDenied, else kIo), message "<what> <path>: <strerror>".
Error errno_error(int errno_value, std::string_view what, const std::string& path);

}  // namespace joule
