// SPDX-License-Identifier: Apache-2.0
// The tests' side of a fake vendor library (tests/fakes/rocm, tests/fakes/amdsmi): writes its key=value
// configuration with a call log, points the fake at it through its environment variable, and reads back
// the calls the backend made.
#pragma once

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "test_util.hpp"

namespace joule::test {

class FakeLibraryConfig {
 public:
  /// @param env_var the variable the fake reads its configuration path from (JOULE_FAKE_ROCM_CONFIG, …).
  /// @param file_name the configuration file's name in a temporary folder.
  FakeLibraryConfig(std::string env_var, std::string file_name)
      : env_var_(std::move(env_var)), file_name_(std::move(file_name)) {}

  /// Writes the configuration ("log=<call log>" and `text`) and points the fake at it until destruction.
  void configure(const std::string& text) {
    log_path_ = dir_.path() + "/calls.log";
    config_path_ = dir_.write(file_name_, "log=" + log_path_ + "\n" + text);
    env_.emplace(env_var_, config_path_.c_str());
  }

  /// The fake's call log, one call per line.
  std::vector<std::string> calls() const {
    std::vector<std::string> lines;
    std::ifstream file(log_path_);
    for (std::string line; std::getline(file, line);) {
      lines.push_back(line);
    }
    return lines;
  }

  /// @return whether the call log has this line.
  bool called(const std::string& line) const {
    const auto lines = calls();
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  }

  const TempDir& dir() const { return dir_; }
  const std::string& config_path() const { return config_path_; }
  const std::string& log_path() const { return log_path_; }

 private:
  std::string env_var_;
  std::string file_name_;
  TempDir dir_;
  std::string config_path_;
  std::string log_path_;
  std::optional<ScopedEnv> env_;
};

/// @return the value of `result`, or (after an ADD_FAILURE with its error) a default T.
template <class T>
T value_or_add_failure(Result<T> result) {
  if (!result) {
    ADD_FAILURE() << result.error().message();
    return T{};
  }
  return std::move(*result);
}

}  // namespace joule::test
