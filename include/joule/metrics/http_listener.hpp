// SPDX-License-Identifier: Apache-2.0
// joule/metrics/http_listener.hpp — the one HTTP/1.1 listener of the project (Boost.Beast on Asio), behind
// `joule serve` and every /metrics endpoint. Connections are served asynchronously by a few I/O threads, so
// an idle or slow connection costs a socket and a buffer, never a thread; handlers run on a separate worker
// pool. Every request is bounded: header bytes and fields (431), target length (414), body size (413, per
// route if asked), time to send the header and the body (the connection is closed), time to read the
// response, and the number of open connections. docs/serve.md ("Limits and slow clients") explains the
// choices and their measurements.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/host_port.hpp"

namespace joule::metrics {

/// One request, as the listener read it.
struct HttpRequest {
  std::string method;                        ///< as sent, e.g. "GET" (HEAD is given to handlers as GET)
  std::string target;                        ///< the raw request target, e.g. "/jobs/batch_size?job_id=a%20b"
  std::string path;                          ///< the target's path, percent-decoded: "/jobs/batch_size"
  std::map<std::string, std::string> query;  ///< decoded query parameters (the last of a repeated name)
  std::vector<std::pair<std::string, std::string>> headers;  ///< as sent, in order
  std::string body;
  std::string peer;  ///< the client's address, e.g. "127.0.0.1" or "::1" (no port); "" if unknown

  /// @return the value of the first header called `name` (compared case-insensitively), "" if none.
  std::string header(std::string_view name) const;
};

/// One response.
struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "text/plain; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;  ///< extra headers
};

/// Answers one request. Runs on a worker thread; may block (a database, planning). An exception becomes a
/// 500 whose body error_body() makes from its message.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

/// How an asynchronous handler answers its request, now or later, from any thread: a request that waits for
/// something (a long poll) then holds no thread, only its connection. While no answer is given, the listener
/// watches the connection: a client that closes it cancels the request (on_cancel), and its answer, if one
/// still comes, goes nowhere. Copies refer to the same request.
class HttpResponder {
 public:
  struct State;
  explicit HttpResponder(std::shared_ptr<State> state);

  /// Sends `response`. Only the first call of all copies counts; later ones (and calls after the client went
  /// away or the listener stopped) do nothing. Thread-safe; never blocks on the network.
  void respond(HttpResponse response) const;
  /// @return true once the client closed its connection before an answer was given.
  bool cancelled() const;
  /// Calls `callback` once, on an I/O thread, when the client closes its connection before an answer was
  /// given (at once, on this thread, if it already has). Keep the callback short and non-blocking; it must
  /// not call respond() of the same request while holding a lock that respond() callers also take.
  void on_cancel(std::function<void()> callback) const;

 private:
  std::shared_ptr<State> state_;
};

/// Answers one request asynchronously: runs on a worker thread and answers through `responder`, before it
/// returns or later. An exception thrown before an answer becomes a 500.
using AsyncHttpHandler = std::function<void(const HttpRequest&, HttpResponder responder)>;

/// What a listener does and refuses; the defaults suit `joule serve` on a loopback or cluster network.
struct HttpListenerOptions {
  std::string host = "127.0.0.1";  ///< a name or an address; "0.0.0.0" or "::" for every interface
  int port = 0;                    ///< 0: any free port (see HttpListener::port())
  std::string name = "http";       ///< in log lines, e.g. "joule serve"
  size_t worker_threads = 16;      ///< handlers running at once
  size_t io_threads = 1;           ///< threads reading and writing sockets (cheap work: one suffices)
  /// Open connections at most; one more is closed as soon as it is accepted. The listener raises the
  /// process's open-file limit to fit (up to the hard limit).
  size_t max_connections = 4096;
  size_t max_header_bytes = size_t{16} * 1024;  ///< request line and header fields together; 431 beyond
  size_t max_header_fields = 100;               ///< header fields; 431 beyond
  size_t max_target_bytes = size_t{8} * 1024;   ///< the request target (path and query); 414 beyond
  size_t max_body_bytes = size_t{64} * 1024;  ///< 413 beyond, unless body_limit says otherwise for the route
  /// The largest body a request to (method, decoded path) may carry, checked before any of it is read
  /// (nullptr: max_body_bytes for every route).
  std::function<size_t(std::string_view method, std::string_view path)> body_limit;
  /// A keep-alive connection with no byte of a next request for this long is closed.
  std::chrono::milliseconds idle_timeout{5000};
  /// From the first byte of a request to the end of its header; then the connection is closed. The defence
  /// against clients that send a byte now and then to hold a connection.
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{
      30000};  ///< to receive the whole body; then the connection is closed
  std::chrono::milliseconds write_timeout{30000};  ///< for the client to take the whole response
  /// Requests read and waiting for a worker; one more is answered 503 at once.
  size_t max_queued_requests = 4096;
  /// Makes the body of the listener's own error responses (400, 413, 414, 431, 500, 503) from the status
  /// and a one-line message. nullptr: the message as text/plain.
  std::function<HttpResponse(int status, std::string_view message)> error_body;
};

/// Counters since start (monotonic, thread-safe to read).
struct HttpListenerStats {
  uint64_t connections_accepted = 0;
  uint64_t connections_refused = 0;  ///< over max_connections
  uint64_t connections_open = 0;
  uint64_t requests = 0;   ///< handed to the handler
  uint64_t refused = 0;    ///< answered by the listener itself with a 4xx/5xx (limits, timeouts, bad syntax)
  uint64_t timeouts = 0;   ///< connections closed for being too slow (idle ones not counted)
  uint64_t waiting = 0;    ///< requests whose handler returned without answering yet (asynchronous ones)
  uint64_t cancelled = 0;  ///< asynchronous requests whose client went away before the answer
};

/// The one HOST:PORT parser of the project (joule/core/host_port.hpp).
using joule::parse_host_port;

/// @return `text` with %XX sequences decoded (and '+' as a space if `plus_is_space`); a '%' not followed
/// by two hex digits is kept as it is.
std::string percent_decode(std::string_view text, bool plus_is_space);

/// An HTTP/1.1 server on one address, serving until stop() or destruction.
class HttpListener {
 public:
  /// Binds and starts serving; returns once connections are accepted.
  /// @return kInvalidArgument for bad options, kIo "cannot listen on HOST:PORT: <why>" if the address cannot
  /// be resolved or bound (callers add their context, e.g. the flag).
  static Result<std::unique_ptr<HttpListener>> start(HttpListenerOptions options, HttpHandler handler);
  /// The same with an asynchronous handler. Every responder must have answered, or been dropped, before the
  /// listener is destroyed: a later respond() is ignored.
  static Result<std::unique_ptr<HttpListener>> start(HttpListenerOptions options, AsyncHttpHandler handler);
  ~HttpListener();  ///< stops
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  /// @return the bound port (the chosen one when the options said 0).
  int port() const;
  const std::string& host() const;
  /// Stops accepting, closes idle connections, lets requests in flight finish (their responses go out, then
  /// the connection closes; at most `grace`, which also bounds asynchronous requests still waiting for
  /// their answer: answer them first), and joins every thread. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  HttpListenerStats stats() const;

  struct Impl;

 private:
  explicit HttpListener(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace joule::metrics
