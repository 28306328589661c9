// SPDX-License-Identifier: Apache-2.0
#include "joule/core/file.hpp"

#include <filesystem>

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace joule
