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

/// Where an output path leads, decided once by OutputFile::open(), before the work whose result it will hold.
enum class OutputKind {
  /// "-" (standard output), /dev/stdout, /dev/stderr, /dev/fd/N or /proc/self/fd/N: written to that open
  /// descriptor as it is (a file the shell opened with `>` is written at its offset, never replaced).
  kDescriptor,
  /// An existing character device or FIFO (/dev/null, a terminal, a named pipe), reached directly or through
  /// symbolic links: opened without O_CREAT or O_TRUNC and written through. Never replaced.
  kPassThrough,
  /// A regular file, or a new name in an existing folder: written into a temporary file beside it, then
  /// renamed over it, so that a reader never sees half a file and a failure leaves any old file in place.
  /// A symbolic link to a regular file is followed: the file it points to is replaced, the link stays.
  kReplace,
  /// OutputMode::kAppend on a regular file or a new name: appended to with one write(2) (O_APPEND).
  kAppend,
};

/// How an output is written: replaced whole (every output but histories), or appended to.
enum class OutputMode { kReplace, kAppend };

/// One output of a command or a library call, checked when opened and written once at the end.
///
/// open() decides what the path is before any work starts, so that a path that cannot be written costs no
/// run: a directory, a missing folder, a path under a file (/etc/passwd/x), a folder where no file can be
/// created (permissions, a read-only file system, /proc), a block device, a socket, a dangling symbolic link
/// or a closed descriptor are refused at once. For kReplace, open() creates the temporary file already (in
/// the target's folder, under a random name `.NAME.XXXXXXXXXXXXXXXX.tmp`, with O_CREAT|O_EXCL|O_NOFOLLOW: a
/// link planted at any name is never followed), which proves the folder writable; it is removed if the
/// OutputFile is destroyed unwritten. A device node or a link is never replaced by a regular file.
class OutputFile {
 public:
  /// Opens `path` for writing as described above. `flag` names the option in messages ("--plot"); empty for
  /// library callers. Errors (one line: "FLAG PATH: what is wrong; the fix"): kInvalidArgument (a
  /// directory, a block device or socket, a dangling link, a descriptor not open for writing, an empty
  /// path), kNotFound (the folder does not exist, or a part of the path is not a folder), kPermissionDenied
  /// and kIo (no file can be created in the folder: the system's reason).
  static Result<OutputFile> open(const std::string& path, std::string_view flag = {},
                                 OutputMode mode = OutputMode::kReplace);

  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;
  /// Closes what is open; removes the temporary file of an unwritten kReplace output.
  ~OutputFile();

  /// Writes `content` whole: to the descriptor, through the device, appended (one write(2)), or into the
  /// temporary file, flushed (fsync) and renamed over the path. kReplace and kPassThrough outputs are
  /// written once; kDescriptor and kAppend ones may be written again. Errors name the flag and the path:
  /// kIo "--plot out.svg: cannot write: No space left on device", "… cannot replace: …" (the folder was
  /// removed meanwhile), "… was replaced by a directory meanwhile; nothing was written"; any old file is
  /// left in place.
  Result<void> write(std::string_view content);

  /// @return the first `max_bytes` bytes of a kAppend output that is a regular file (its header, say), ""
  /// for any other output. kIo if the file cannot be read.
  Result<std::string> read_head(size_t max_bytes) const;

  OutputKind kind() const { return kind_; }
  /// The path as given.
  const std::string& path() const { return path_; }
  /// "FLAG PATH", or the path alone without a flag: how messages name this output.
  std::string describe() const;

 private:
  OutputFile() = default;
  void release() noexcept;

  std::string path_;
  std::string flag_;
  OutputKind kind_ = OutputKind::kReplace;
  int fd_ = -1;              ///< kDescriptor: the descriptor (not owned); kReplace: the temporary; kAppend
  int folder_fd_ = -1;       ///< kReplace: the target's folder (O_PATH), for renameat
  std::string target_name_;  ///< kReplace: the name in that folder (the link's target's, for a link)
  std::string temporary_name_;
  bool written_ = false;
};

/// Writes `content` to `path` as OutputFile::open(path) and write() do: a regular file or new name is
/// replaced atomically (temporary file beside it, flushed, renamed over it); a character device or FIFO is
/// written through; "-" is standard output. Errors as theirs, naming the path.
Result<void> write_file_atomic(const std::string& path, std::string_view content);

/// @return an Error for a failed system call on `path`, code chosen from `errno_value`
/// (ENOENT → kNotFound, EACCES/EPERM → kPermissionDenied, else kIo), message "<what> <path>: <strerror>".
Error errno_error(int errno_value, std::string_view what, const std::string& path);

}  // namespace joule
