// SPDX-License-Identifier: Apache-2.0
#include "joule/core/host_port.hpp"

#include <charconv>

namespace joule {

Result<std::pair<std::string, int>> parse_host_port(std::string_view text, std::string_view what,
                                                    int example_port) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return fail(ErrorCode::kInvalidArgument,
                "{} '{}' is not HOST:PORT (e.g. 127.0.0.1:{}, or :0 for any port)", what, text, example_port);
  }
  std::string host(text.substr(0, colon));
  const std::string_view port_text = text.substr(colon + 1);
  int port = -1;
  const auto [end, error] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() || port < 0 ||
      port > 65535) {
    return fail(ErrorCode::kInvalidArgument, "{} '{}': port '{}' is not a number in [0, 65535]", what, text,
                port_text);
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return fail(ErrorCode::kInvalidArgument, "{} '{}': write an IPv6 host in brackets, e.g. [::1]:{}", what,
                text, example_port);
  }
  if (host.empty()) {
    host = "0.0.0.0";
  }
  return std::pair{host, port};
}

}  // namespace joule
