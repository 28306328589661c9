// SPDX-License-Identifier: Apache-2.0
// joule/core/log.hpp — the library's one logger. Silent by default; hosts (the CLI, Python) install sinks.
#pragma once

#include <memory>

#include <spdlog/logger.h>

namespace joule {

/// @return the logger every joule component writes to. Its default sink discards everything, so the
/// library never prints unless the embedding program asks it to. Thread-safe.
spdlog::logger& log();

/// Replaces the library logger (e.g. with one that writes to stderr). Not thread-safe against concurrent
/// logging: call it at start-up.
void set_logger(std::shared_ptr<spdlog::logger> logger);

}  // namespace joule
