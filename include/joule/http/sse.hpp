// SPDX-License-Identifier: Apache-2.0
// joule/http/sse.hpp — server-sent events (the text/event-stream framing of the HTML standard, as
// OpenAI-compatible servers stream completions): bytes in, each event's data out, every line and event
// bounded so that a server cannot make the reader buffer without end.
//
//   http::SseParser parser;
//   connection.request("POST", path, body, "application/json", {}, limits, [&](std::string_view piece) {
//     return parser.feed(piece, on_event).has_value();
//   });
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "joule/core/error.hpp"

namespace joule::http {

/// The largest event SseParser accepts by default: far above one streamed completion chunk (~300 bytes; a
/// final usage chunk with llama.cpp's timings ~1 KiB), small enough that hundreds of streams parsing at once
/// (a parsed JSON value takes ~20 times its text) stay within a few hundred MB.
inline constexpr size_t kDefaultMaxEventBytes = size_t{64} << 10;

/// Reads server-sent events incrementally. Lines end in LF, CRLF or CR (a CR at the end of one piece and an
/// LF at the start of the next are one line end); a blank line ends an event. Only `data` fields are kept:
/// "data:" with at most one space after the colon, several data lines joined by LF; comments (":" lines),
/// `event`, `id` and `retry` fields and events without data are skipped. Not thread-safe.
class SseParser {
 public:
  /// Called with each complete event's data; its error stops the parse and is returned by feed()/finish().
  using OnEvent = std::function<Result<void>(std::string_view data)>;

  explicit SseParser(size_t max_event_bytes = kDefaultMaxEventBytes);

  /// Parses `bytes`, the next piece of the stream, calling `on_event` for each event it completes.
  /// @return kOutOfRange "a server-sent event is larger than <N>, the most accepted" when a line or an event
  /// (its data so far and the line being read) outgrows max_event_bytes, before it is buffered; or
  /// on_event's error. After an error the parser accepts nothing more (the same error again).
  Result<void> feed(std::string_view bytes, const OnEvent& on_event);

  /// The end of the stream: an event whose data lines were not followed by a blank line is delivered (a
  /// server that closes right after its last line), a partial line without its end is taken as a line.
  Result<void> finish(const OnEvent& on_event);

  /// @return bytes held: the current line and the current event's data (at most max_event_bytes).
  size_t buffered_bytes() const { return line_.size() + data_.size(); }

 private:
  Result<void> end_line(const OnEvent& on_event);
  Result<void> dispatch(const OnEvent& on_event);
  Result<void> too_large();

  size_t max_event_bytes_;
  std::string line_;  // the line being read, without its end
  std::string data_;  // the event's data lines so far, joined by LF
  bool has_data_ = false;
  bool after_cr_ = false;  // the last byte was a CR: an LF next is part of the same line end
  std::optional<Error> failed_;
};

}  // namespace joule::http
