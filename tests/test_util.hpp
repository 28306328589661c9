// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the unit tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "joule/core/error.hpp"
#include "joule/core/units.hpp"

namespace joule::test {

/// Not-a-number and infinity, for the tests of number checks (kInf is core's kInfinity).
inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = kInfinity;

/// A fresh directory under $TMPDIR, removed with its content on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "joule-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed");
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  /// Writes `content` to `relative` (creating parent folders). @return the full path.
  std::string write(const std::string& relative, const std::string& content) const {
    const std::filesystem::path full = std::filesystem::path(path_) / relative;
    std::filesystem::create_directories(full.parent_path());
    std::ofstream(full) << content;
    return full.string();
  }

 private:
  std::string path_;
};

/// Sets an environment variable for the lifetime of the object, then restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) {
      old_ = old;
    }
    if (value != nullptr) {
      setenv(name_.c_str(), value, 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace joule::test

/// Expects `expr` (a Result) to hold an error with exactly this message.
#define JOULE_EXPECT_ERROR(expr, expected_code, expected_message)               \
  do {                                                                          \
    const auto joule_result_ = (expr);                                          \
    ASSERT_FALSE(joule_result_.has_value()) << "expected an error from " #expr; \
    EXPECT_EQ(joule_result_.error().code(), (expected_code));                   \
    EXPECT_EQ(joule_result_.error().message(), (expected_message));             \
  } while (false)

/// Expects `statement` to throw joule::Exception with this code and message.
#define JOULE_EXPECT_THROW_MESSAGE(statement, expected_code, expected_message) \
  do {                                                                         \
    try {                                                                      \
      statement;                                                               \
      ADD_FAILURE() << "expected " #statement " to throw";                     \
    } catch (const ::joule::Exception& joule_exception_) {                     \
      EXPECT_EQ(joule_exception_.code(), (expected_code));                     \
      EXPECT_EQ(std::string(joule_exception_.what()), (expected_message));     \
    }                                                                          \
  } while (false)
