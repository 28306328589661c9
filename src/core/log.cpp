// SPDX-License-Identifier: Apache-2.0
#include "joule/core/log.hpp"

#include <spdlog/sinks/null_sink.h>

namespace joule {

namespace {
std::shared_ptr<spdlog::logger>& logger_slot() {
  static std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("joule", std::make_shared<spdlog::sinks::null_sink_mt>());
  return logger;
}
}  // namespace

spdlog::logger& log() {
  return *logger_slot();
}

void set_logger(std::shared_ptr<spdlog::logger> logger) {
  if (logger) {
    logger_slot() = std::move(logger);
  }
}

}  // namespace joule
