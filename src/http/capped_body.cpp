// SPDX-License-Identifier: Apache-2.0
#include "joule/http/capped_body.hpp"

#include <charconv>
#include <cstdint>
#include <system_error>

#include <fmt/format.h>
#include <httplib.h>

#include "joule/http/errors.hpp"

namespace joule::http {

void CappedBody::attach(httplib::Request& request) {
  body_.clear();
  exceeded_ = false;
  request.response_handler = [this](const httplib::Response& head) {
    // A declared length over the cap is refused before the body; one within it is reserved at once.
    const std::string length_text = head.get_header_value("Content-Length");
    uint64_t length = 0;
    const auto [end, ec] =
        std::from_chars(length_text.data(), length_text.data() + length_text.size(), length);
    if (!length_text.empty() && ec == std::errc() && end == length_text.data() + length_text.size()) {
      if (length > max_bytes_) {
        exceeded_ = true;
        return false;
      }
      body_.reserve(static_cast<size_t>(length));
    }
    return true;
  };
  request.content_receiver = [this](const char* data, size_t size, uint64_t /*offset*/, uint64_t /*total*/) {
    if (size > max_bytes_ - body_.size()) {
      exceeded_ = true;
      return false;
    }
    body_.append(data, size);
    return true;
  };
}

std::string CappedBody::message() const {
  return fmt::format("the response is larger than {}, the most accepted", format_byte_count(max_bytes_));
}

}  // namespace joule::http
