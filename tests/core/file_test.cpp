// SPDX-License-Identifier: Apache-2.0
#include "joule/core/file.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "test_util.hpp"

namespace joule {
namespace {

TEST(File, AtomicWriteReplacesAndLeavesNoTemporary) {
  test::TempDir dir;
  const std::string path = dir.path() + "/out.json";
  ASSERT_TRUE(write_file_atomic(path, "first"));
  ASSERT_TRUE(write_file_atomic(path, "second"));
  EXPECT_EQ(*read_text_file(path), "second");
  size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++files;
  }
  EXPECT_EQ(files, 1u);
}

TEST(File, ErrorsNameThePath) {
  JOULE_EXPECT_ERROR(read_text_file("/nonexistent/x"), ErrorCode::kNotFound,
                     "cannot open /nonexistent/x: No such file or directory");
  JOULE_EXPECT_ERROR(write_file_atomic("/nonexistent/dir/out", "x"), ErrorCode::kNotFound,
                     "/nonexistent/dir/out: the folder /nonexistent/dir does not exist (create it first)");
  test::TempDir dir;
  const auto read_dir = read_text_file(dir.path());
  ASSERT_FALSE(read_dir);
  EXPECT_EQ(read_dir.error().code(), ErrorCode::kIo);
}

TEST(File, ErrnoMapping) {
  EXPECT_EQ(errno_error(EACCES, "cannot open", "/p").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(errno_error(EPERM, "cannot open", "/p").code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(errno_error(ENOENT, "cannot open", "/p").code(), ErrorCode::kNotFound);
  EXPECT_EQ(errno_error(EIO, "cannot open", "/p").message(), "cannot open /p: Input/output error");
}

// Issue 11: reading /dev/zero as a profile, trace or tariff ended in bad_alloc. Every reader now stops at
// its kind's limit with one message naming the file, the limit and the way to raise it.
TEST(File, EndlessFileStopsAtTheLimit) {
  test::ScopedEnv no_override(std::string(kMaxFileMibVariable), nullptr);
  JOULE_EXPECT_ERROR(
      read_text_file("/dev/zero", read_limits::kPipelineProfile), ErrorCode::kInvalidArgument,
      "/dev/zero: more than 16 MiB, the most joule reads from a pipeline profile (real ones are "
      "far smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
  JOULE_EXPECT_ERROR(read_text_file("/dev/zero", ReadLimit{"tariff", 100}), ErrorCode::kInvalidArgument,
                     "/dev/zero: more than 100 bytes, the most joule reads from a tariff (real ones are far "
                     "smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
  JOULE_EXPECT_ERROR(
      read_text_file("/dev/zero"), ErrorCode::kInvalidArgument,
      "/dev/zero: more than 256 MiB, the most joule reads from a file (real ones are far smaller: "
      "is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
}

TEST(File, RegularFileOverTheLimitIsRefusedAndOneAtItIsRead) {
  test::ScopedEnv no_override(std::string(kMaxFileMibVariable), nullptr);
  test::TempDir dir;
  const std::string at_limit = dir.write("at.csv", std::string(100, 'a'));
  const std::string over = dir.write("over.csv", std::string(101, 'a'));
  const auto read = read_text_file(at_limit, ReadLimit{"tariff", 100});
  ASSERT_TRUE(read) << read.error().message();
  EXPECT_EQ(read->size(), 100u);
  JOULE_EXPECT_ERROR(read_text_file(over, ReadLimit{"tariff", 100}), ErrorCode::kInvalidArgument,
                     over +
                         ": more than 100 bytes, the most joule reads from a tariff (real ones are far "
                         "smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
  // An empty file is a file like any other (what it means is the parser's business).
  EXPECT_EQ(*read_text_file(dir.write("empty.csv", ""), ReadLimit{"tariff", 100}), "");
}

TEST(File, EnvironmentReplacesTheLimit) {
  test::TempDir dir;
  const std::string two_mib = dir.write("big.csv", std::string(2 * read_limits::kMib, 'a'));
  {
    test::ScopedEnv raised(std::string(kMaxFileMibVariable), "3");
    EXPECT_TRUE(read_text_file(two_mib, read_limits::kTariff));
  }
  {
    test::ScopedEnv lowered(std::string(kMaxFileMibVariable), "1");
    JOULE_EXPECT_ERROR(read_text_file(two_mib), ErrorCode::kInvalidArgument,
                       two_mib +
                           ": more than 1 MiB, the most joule reads from a file (real ones are far "
                           "smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
  }
  for (const char* bad : {"0", "-1", "1.5", "lots", "99999999999999999999999"}) {
    test::ScopedEnv malformed(std::string(kMaxFileMibVariable), bad);
    JOULE_EXPECT_ERROR(
        read_text_file(two_mib), ErrorCode::kInvalidArgument,
        fmt::format("JOULE_MAX_FILE_MIB must be a whole number of MiB from 1 to {}, got \"{}\"",
                    std::numeric_limits<size_t>::max() / read_limits::kMib, bad));
  }
}

// A FIFO nobody writes to used to block open() forever.
TEST(File, FifoWithoutWriterDoesNotHang) {
  test::TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto reading = std::async(std::launch::async, [&] { return read_text_file(fifo, read_limits::kTariff); });
  if (reading.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // Unblock the reader so that the test ends, then fail.
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (writer >= 0) {
      ::close(writer);
    }
    FAIL() << "read_text_file() blocked on a FIFO without a writer";
  }
  const auto content = reading.get();
  ASSERT_TRUE(content) << content.error().message();
  EXPECT_EQ(*content, "");
}

// ---- OutputFile (issue 23, item 4): no output path destroys a file or loses a measurement -----------------

size_t count_entries(const std::string& folder) {
  size_t entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(folder)) {
    ++entries;
  }
  return entries;
}

mode_t lstat_mode(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode;
}

// As root, `measure -o /dev/null` renamed a regular file over /dev/null. A character device is now written
// through: /dev/null is only looked at here; a device node of our own (root only) is written.
TEST(OutputFile, CharacterDeviceIsWrittenThroughNeverReplaced) {
  auto null = OutputFile::open("/dev/null", "-o");
  ASSERT_TRUE(null) << null.error().message();
  EXPECT_EQ(null->kind(), OutputKind::kPassThrough);
  EXPECT_TRUE(S_ISCHR(lstat_mode("/dev/null")));
  test::TempDir dir;
  const std::string node = dir.path() + "/null";
  if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "mknod needs root: " << std::strerror(errno);
  }
  ASSERT_TRUE(write_file_atomic(node, "summary"));
  EXPECT_TRUE(S_ISCHR(lstat_mode(node)));
  EXPECT_EQ(count_entries(dir.path()), 1u);  // no temporary file left beside it
}

TEST(OutputFile, FifoIsWrittenThrough) {
  test::TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto out = OutputFile::open(fifo, "--plot");
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind(), OutputKind::kPassThrough);
  // A blocking reader (read_text_file() opens without blocking and would read nothing if it came first).
  auto reader = std::async(std::launch::async, [&] {
    std::ifstream in(fifo);
    return std::string(std::istreambuf_iterator<char>(in), {});
  });
  const auto written = out->write("through the pipe");
  if (!written) {
    const int unblock = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets the reader end
    if (unblock >= 0) {
      ::close(unblock);
    }
  }
  ASSERT_TRUE(written) << written.error().message();
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(reader.get(), "through the pipe");
  EXPECT_TRUE(S_ISFIFO(lstat_mode(fifo)));
}

// The old writer opened PATH.tmp.PID with O_CREAT|O_TRUNC, following a link planted there: as root, into any
// file. The temporary name is now random and created with O_EXCL|O_NOFOLLOW; a link at the old name is
// neither followed nor touched.
TEST(OutputFile, LinkAtThePredictableTemporaryNameIsNeverFollowed) {
  test::TempDir dir;
  const std::string victim = dir.write("victim", "precious");
  const std::string path = dir.path() + "/out.json";
  const std::string planted = fmt::format("{}.tmp.{}", path, ::getpid());
  ASSERT_EQ(::symlink(victim.c_str(), planted.c_str()), 0);
  auto first = OutputFile::open(path, "-o");
  auto second = OutputFile::open(path, "-o");
  ASSERT_TRUE(first && second);
  EXPECT_EQ(count_entries(dir.path()), 4u);  // victim, the link, two temporaries under different names
  ASSERT_TRUE(first->write("result"));
  EXPECT_EQ(*read_text_file(path), "result");
  EXPECT_EQ(*read_text_file(victim), "precious");
  EXPECT_TRUE(S_ISLNK(lstat_mode(planted)));
  second = std::move(first);  // the unwritten one's temporary goes with it
  EXPECT_EQ(count_entries(dir.path()), 3u);
}

// A link is never replaced by a file: the file it points to is replaced, the link stays a link.
TEST(OutputFile, SymbolicLinkIsFollowedAndKept) {
  test::TempDir dir;
  ASSERT_EQ(::mkdir((dir.path() + "/store").c_str(), 0755), 0);
  const std::string target = dir.write("store/result.json", "old");
  const std::string link = dir.path() + "/result.json";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  ASSERT_TRUE(write_file_atomic(link, "new"));
  EXPECT_TRUE(S_ISLNK(lstat_mode(link)));
  EXPECT_EQ(*read_text_file(target), "new");
  EXPECT_EQ(count_entries(dir.path() + "/store"), 1u);
  const std::string to_device = dir.path() + "/to-null";
  ASSERT_EQ(::symlink("/dev/null", to_device.c_str()), 0);
  EXPECT_EQ(OutputFile::open(to_device)->kind(), OutputKind::kPassThrough);
  const std::string dangling = dir.path() + "/dangling";
  ASSERT_EQ(::symlink((dir.path() + "/nowhere").c_str(), dangling.c_str()), 0);
  JOULE_EXPECT_ERROR(
      OutputFile::open(dangling, "--plot"), ErrorCode::kInvalidArgument,
      "--plot " + dangling + ": is a symbolic link to a missing file; give the path of the file to write");
}

TEST(OutputFile, ReplacedFileKeepsItsPermissions) {
  test::TempDir dir;
  const std::string path = dir.write("private.json", "old");
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  ASSERT_TRUE(write_file_atomic(path, "new"));
  EXPECT_EQ(lstat_mode(path) & 0777, 0600u);
}

TEST(OutputFile, DashAndDescriptorsAreWrittenAsTheyAre) {
  auto dash = OutputFile::open("-", "-o");
  ASSERT_TRUE(dash);
  EXPECT_EQ(dash->kind(), OutputKind::kDescriptor);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  auto out = OutputFile::open(fmt::format("/dev/fd/{}", pipe_fds[1]), "-o");
  ASSERT_TRUE(out) << out.error().message();
  EXPECT_EQ(out->kind(), OutputKind::kDescriptor);
  ASSERT_TRUE(out->write("abc"));
  char buffer[8] = {};
  EXPECT_EQ(::read(pipe_fds[0], buffer, sizeof buffer), 3);
  EXPECT_EQ(std::string(buffer), "abc");
  JOULE_EXPECT_ERROR(
      OutputFile::open(fmt::format("/proc/self/fd/{}", pipe_fds[0]), "-o"), ErrorCode::kInvalidArgument,
      fmt::format("-o /proc/self/fd/{0}: descriptor {0} is not open for writing", pipe_fds[0]));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

// Paths that cannot be written are refused when opened, before any work, with one line naming the flag.
TEST(OutputFile, UnwritablePathsAreRefusedAtOnce) {
  test::TempDir dir;
  JOULE_EXPECT_ERROR(OutputFile::open(dir.path(), "--plot"), ErrorCode::kInvalidArgument,
                     "--plot " + dir.path() + ": is a directory; give the path of a file (in it, say)");
  JOULE_EXPECT_ERROR(OutputFile::open(dir.path() + "/missing/x.svg", "--plot"), ErrorCode::kNotFound,
                     "--plot " + dir.path() + "/missing/x.svg: the folder " + dir.path() +
                         "/missing does not exist (create it first)");
  const std::string file = dir.write("file", "");
  JOULE_EXPECT_ERROR(OutputFile::open(file + "/x", "-o"), ErrorCode::kNotFound,
                     "-o " + file + "/x: " + file + " is a regular file, not a folder");
  JOULE_EXPECT_ERROR(OutputFile::open(file + "/a/x", "-o"), ErrorCode::kNotFound,
                     "-o " + file + "/a/x: a part of " + file + "/a is a file, not a folder");
  JOULE_EXPECT_ERROR(OutputFile::open(dir.path() + "/", "-o"), ErrorCode::kInvalidArgument,
                     "-o " + dir.path() + "/: is a directory; give the path of a file (in it, say)");
  JOULE_EXPECT_ERROR(OutputFile::open("", "-o"), ErrorCode::kInvalidArgument,
                     "-o: the path is empty; give a file name, or - for standard output");
  // No file can be created in /proc, not even by root.
  JOULE_EXPECT_ERROR(
      OutputFile::open("/proc/joule-out.json", "--requests-out"), ErrorCode::kIo,
      "--requests-out /proc/joule-out.json: cannot create a file in /proc: its file system takes "
      "no new files");
  EXPECT_EQ(count_entries(dir.path()), 1u);
}

// A write that fails at the end names the output, leaves no temporary file, and leaves what was there.
TEST(OutputFile, FailuresAtTheEndNameTheOutput) {
  auto full = OutputFile::open("/dev/full", "-o");
  ASSERT_TRUE(full);
  JOULE_EXPECT_ERROR(full->write("x"), ErrorCode::kIo, "-o /dev/full: cannot write: No space left on device");
  test::TempDir dir;
  ASSERT_EQ(::mkdir((dir.path() + "/sub").c_str(), 0755), 0);
  auto gone = OutputFile::open(dir.path() + "/sub/out.csv", "--requests-out");
  ASSERT_TRUE(gone);
  std::filesystem::remove_all(dir.path() + "/sub");
  JOULE_EXPECT_ERROR(
      gone->write("rows"), ErrorCode::kNotFound,
      "--requests-out " + dir.path() + "/sub/out.csv: cannot replace it: No such file or directory");
  // A FIFO put at the path meanwhile is left alone, not replaced by a file.
  const std::string path = dir.path() + "/out.svg";
  auto swapped = OutputFile::open(path, "--plot");
  ASSERT_TRUE(swapped);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  JOULE_EXPECT_ERROR(swapped->write("<svg/>"), ErrorCode::kIo,
                     "--plot " + path + ": was replaced by a FIFO meanwhile; nothing was written");
  EXPECT_TRUE(S_ISFIFO(lstat_mode(path)));
  EXPECT_EQ(count_entries(dir.path()), 1u);
}

TEST(OutputFile, AppendCreatesReadsTheHeadAndAppends) {
  test::TempDir dir;
  const std::string path = dir.path() + "/history.csv";
  {
    auto history = OutputFile::open(path, "--append-csv", OutputMode::kAppend);
    ASSERT_TRUE(history) << history.error().message();
    EXPECT_EQ(history->kind(), OutputKind::kAppend);
    EXPECT_EQ(*history->read_head(10), "");
    ASSERT_TRUE(history->write("a,b\n"));
  }
  auto again = OutputFile::open(path, "--append-csv", OutputMode::kAppend);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again->read_head(2), "a,");
  ASSERT_TRUE(again->write("1,2\n"));
  EXPECT_EQ(*read_text_file(path), "a,b\n1,2\n");
  EXPECT_EQ(OutputFile::open("/dev/null", "--append-csv", OutputMode::kAppend)->kind(),
            OutputKind::kPassThrough);
  JOULE_EXPECT_ERROR(OutputFile::open(dir.path() + "/no/h.csv", "--append-csv", OutputMode::kAppend),
                     ErrorCode::kNotFound,
                     "--append-csv " + dir.path() + "/no/h.csv: the folder " + dir.path() +
                         "/no does not exist (create it first)");
}

}  // namespace
}  // namespace joule
