// SPDX-License-Identifier: Apache-2.0
// joule/core/host_port.hpp — the one HOST:PORT parser of the project (listeners: `joule serve --listen`,
// `--serve`, `--metrics`, `joule daemon --listen`; and the daemon's network nodes that clients name).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "joule/core/error.hpp"

namespace joule {

/// @return (host, port) of "HOST:PORT", "[V6]:PORT" or ":PORT" (host 0.0.0.0); port 0 means any free port.
/// An IPv6 address must be in brackets. kInvalidArgument naming `what` and the text otherwise (its examples
/// use `example_port`).
Result<std::pair<std::string, int>> parse_host_port(std::string_view text, std::string_view what,
                                                    int example_port = 9400);

}  // namespace joule
