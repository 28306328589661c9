// SPDX-License-Identifier: Apache-2.0
#include "joule/core/file.hpp"

#include <chrono>
#include <filesystem>
#include <future>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
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
  JOULE_EXPECT_ERROR(
      write_file_atomic("/nonexistent/dir/out", "x"), ErrorCode::kNotFound,
      fmt::format("cannot create /nonexistent/dir/out.tmp.{}: No such file or directory", getpid()));
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

}  // namespace
}  // namespace joule
