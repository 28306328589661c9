// SPDX-License-Identifier: Apache-2.0
// Captures joule::log() for one test.
#pragma once

#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "joule/core/log.hpp"

namespace joule::test {

/// Routes joule::log() into a string, debug level and up, one line per message formatted by `pattern`
/// (spdlog's syntax; "%l: %v" gives "warning: text"). Install it before any thread that logs starts and
/// stop those threads before it goes: the logger is not replaced while others log. On destruction, logs go
/// nowhere again.
class CapturedLog {
 public:
  explicit CapturedLog(const std::string& pattern = "%l: %v") {
    auto logger =
        std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_));
    logger->set_pattern(pattern);
    logger->set_level(spdlog::level::debug);
    set_logger(std::move(logger));
  }
  ~CapturedLog() {
    set_logger(std::make_shared<spdlog::logger>("joule", std::make_shared<spdlog::sinks::null_sink_mt>()));
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  /// @return what was logged so far.
  std::string text() {
    log().flush();
    return stream_.str();
  }

 private:
  std::ostringstream stream_;
};

}  // namespace joule::test
