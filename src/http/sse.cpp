// SPDX-License-Identifier: Apache-2.0
#include "joule/http/sse.hpp"

#include <utility>

#include <fmt/format.h>

#include "joule/http/errors.hpp"

namespace joule::http {

SseParser::SseParser(size_t max_event_bytes) : max_event_bytes_(max_event_bytes) {}

Result<void> SseParser::too_large() {
  failed_ =
      Error(ErrorCode::kOutOfRange, fmt::format("a server-sent event is larger than {}, the most accepted",
                                                format_byte_count(max_event_bytes_)));
  line_.clear();
  data_.clear();
  return tl::unexpected(*failed_);
}

Result<void> SseParser::feed(std::string_view bytes, const OnEvent& on_event) {
  if (failed_) {
    return tl::unexpected(*failed_);
  }
  while (!bytes.empty()) {
    if (after_cr_ && bytes.front() == '\n') {
      bytes.remove_prefix(1);
    }
    after_cr_ = false;
    const size_t end = bytes.find_first_of("\r\n");
    const std::string_view part = bytes.substr(0, end);
    // Checked before the bytes are held: a line without end never grows past the bound.
    if (part.size() > max_event_bytes_ - buffered_bytes()) {
      return too_large();
    }
    line_.append(part);
    if (end == std::string_view::npos) {
      return {};
    }
    after_cr_ = bytes[end] == '\r';
    bytes.remove_prefix(end + 1);
    if (auto done = end_line(on_event); !done) {
      failed_ = done.error();
      return done;
    }
  }
  return {};
}

Result<void> SseParser::finish(const OnEvent& on_event) {
  if (failed_) {
    return tl::unexpected(*failed_);
  }
  if (!line_.empty()) {
    JOULE_TRY(end_line(on_event));
  }
  return dispatch(on_event);
}

Result<void> SseParser::end_line(const OnEvent& on_event) {
  const std::string line = std::exchange(line_, {});
  if (line.empty()) {
    return dispatch(on_event);
  }
  if (line.front() == ':') {
    return {};  // a comment (servers send them to keep a connection alive)
  }
  const size_t colon = line.find(':');
  const std::string_view field = std::string_view(line).substr(0, colon);
  if (field != "data") {
    return {};  // event, id, retry, or a field no one defined
  }
  std::string_view value;
  if (colon != std::string::npos) {
    value = std::string_view(line).substr(colon + 1);
    if (!value.empty() && value.front() == ' ') {
      value.remove_prefix(1);
    }
  }
  if (has_data_) {
    if (value.size() + 1 > max_event_bytes_ - data_.size()) {
      return too_large();
    }
    data_ += '\n';
  }
  data_.append(value);
  has_data_ = true;
  return {};
}

Result<void> SseParser::dispatch(const OnEvent& on_event) {
  if (!has_data_) {
    return {};
  }
  const std::string data = std::exchange(data_, {});
  has_data_ = false;
  return on_event(data);
}

}  // namespace joule::http
