// SPDX-License-Identifier: Apache-2.0
// The HTTP/1.1 listener: Boost.Beast's parser and serializer on Asio. Each connection is a Session living on
// its own strand; it waits for a request, reads the header under a deadline, checks the limits, reads the
// body under a deadline, hands the request to the worker pool and writes the response back on its strand.
// No thread ever waits on a client, so slow or idle clients cannot take the service from others.
#include "joule/metrics/http_listener.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <sys/resource.h>

#include "joule/core/log.hpp"
#include "joule/core/strings.hpp"

namespace joule::metrics {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// How long a closing connection keeps reading (and discarding) what the client still sends, so that the
// error response it was given is not destroyed by a reset; and how much it reads at most.
constexpr auto kLingerTime = std::chrono::seconds(1);
constexpr size_t kLingerBytes = size_t{1} << 20;
// Accept errors (out of file descriptors) are retried after this pause instead of spinning.
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);
// File descriptors kept beyond max_connections for the store, logs and the like.
constexpr rlim_t kSpareDescriptors = 256;

void split_target(std::string_view target, HttpRequest& request) {
  const auto question = target.find('?');
  request.path = percent_decode(target.substr(0, question), false);
  if (question == std::string_view::npos) {
    return;
  }
  std::string_view query = target.substr(question + 1);
  if (const auto hash = query.find('#'); hash != std::string_view::npos) {
    query = query.substr(0, hash);
  }
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) {
      continue;
    }
    const auto equals = pair.find('=');
    std::string name = percent_decode(pair.substr(0, equals), true);
    std::string value =
        equals == std::string_view::npos ? std::string() : percent_decode(pair.substr(equals + 1), true);
    request.query.insert_or_assign(std::move(name), std::move(value));
  }
}

HttpResponse default_error_body(int status, std::string_view message) {
  HttpResponse response;
  response.status = status;
  response.body = fmt::format("{}\n", message);
  return response;
}

// A malformed request (Beast's parse errors), as opposed to the client going away.
bool is_syntax_error(const beast::error_code& error) {
  return error.category() == http::make_error_code(http::error::bad_method).category() &&
         error != http::error::end_of_stream && error != http::error::partial_message &&
         error != http::error::need_more && error != http::error::header_limit &&
         error != http::error::body_limit;
}

std::string seconds_text(std::chrono::milliseconds duration) {
  return fmt::format("{:g} s", std::chrono::duration<double>(duration).count());
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && starts_with_ignoring_case(key, name)) {
      return value;
    }
  }
  return {};
}

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      const int high = hex_digit_value(text[i + 1]);
      const int low = hex_digit_value(text[i + 2]);
      if (high >= 0 && low >= 0) {
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

class Session;

// What responders reach the listener through: closed (under its mutex) before the listener's I/O context
// goes, so that a late respond() never posts to a destroyed context.
struct ListenerGate {
  std::mutex mutex;
  bool open = true;
};

struct HttpResponder::State {
  std::mutex mutex;
  bool answered = false;
  bool cancelled = false;
  std::function<void()> on_cancel;
  std::weak_ptr<Session> session;
  std::shared_ptr<ListenerGate> gate;
  // The listener's count of requests in the workers (max_queued_requests), and whether this request is still
  // in it: it leaves when answered or when its handler returns, whichever is first. Before the answer is
  // sent, so that a client's next request never finds its previous one still counted (a spurious 503).
  std::atomic<size_t>* queued = nullptr;
  std::atomic<bool> holds_place{false};

  // Only while the listener lives (its gate open, or on a worker thread).
  void release_place() {
    if (queued != nullptr && holds_place.exchange(false)) {
      queued->fetch_sub(1);
    }
  }

  // On the session's strand, when the client went away before the answer. @return false if an answer was
  // already given (it is on its way: nothing to cancel).
  bool cancel() {
    std::function<void()> callback;
    {
      std::lock_guard lock(mutex);
      if (answered || cancelled) {
        return false;
      }
      cancelled = true;
      callback = std::move(on_cancel);
    }
    if (callback) {
      try {
        callback();
      } catch (...) {
        log().error("http: a cancellation callback threw: {}", exception_message(std::current_exception()));
      }
    }
    return true;
  }
};

struct HttpListener::Impl {
  explicit Impl(HttpListenerOptions listener_options, AsyncHttpHandler request_handler)
      : options(std::move(listener_options)), handler(std::move(request_handler)) {
    if (!options.error_body) {
      options.error_body = default_error_body;
    }
  }
  ~Impl() {
    std::lock_guard lock(gate->mutex);
    gate->open = false;
  }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  HttpListenerOptions options;
  AsyncHttpHandler handler;
  std::shared_ptr<ListenerGate> gate = std::make_shared<ListenerGate>();
  std::string host;
  int port = 0;

  // Declared before the I/O context so that they outlive the sessions its destruction releases.
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> connections_refused{0};
  std::atomic<uint64_t> open{0};
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> timeouts{0};
  std::atomic<uint64_t> waiting{0};
  std::atomic<uint64_t> cancelled{0};
  std::atomic<size_t> queued{0};
  std::mutex sessions_mutex;
  std::condition_variable sessions_ended;
  std::map<const Session*, std::weak_ptr<Session>> sessions;
  std::chrono::steady_clock::time_point last_accept_warning;

  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  std::unique_ptr<asio::thread_pool> workers;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> keep_running;
  std::vector<std::thread> io_threads;
  std::atomic<bool> stopped{false};

  void accept();
  void on_accept(const beast::error_code& error, tcp::socket socket);
  void stop(std::chrono::milliseconds grace);
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpListener::Impl& owner) : stream_(std::move(socket)), owner_(owner) {
    beast::error_code error;
    const auto endpoint = stream_.socket().remote_endpoint(error);
    if (!error) {
      peer_ = endpoint.address().to_string();
    }
  }

  ~Session() {
    {
      std::lock_guard lock(owner_.sessions_mutex);
      owner_.sessions.erase(this);
      --owner_.open;
    }
    owner_.sessions_ended.notify_all();
  }

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void start() {
    {
      std::lock_guard lock(owner_.sessions_mutex);
      owner_.sessions.emplace(this, weak_from_this());
    }
    wait_for_request();
  }

  // On the session's strand, when the listener stops: a connection between requests closes now, one with a
  // request in a handler closes after its response.
  void on_stop() {
    if (!busy_) {
      close_now();
    }
  }

  beast::tcp_stream::executor_type executor() { return stream_.get_executor(); }

  // On the strand: an asynchronous handler's answer.
  void on_answer(HttpResponse response) {
    stop_waiting();
    if (watching_) {
      // The watch read is outstanding: cancel it; its completion writes the answer.
      pending_answer_ = std::move(response);
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
      return;
    }
    write(std::move(response));
  }

 private:
  const HttpListenerOptions& options() const { return owner_.options; }

  void wait_for_request() {
    if (owner_.stopping) {
      close_now();
      return;
    }
    busy_ = false;
    if (buffer_.size() > 0) {
      read_header();  // a pipelined request is already here
      return;
    }
    stream_.expires_after(options().idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](const beast::error_code& error, size_t bytes) {
                              self->buffer_.commit(bytes);
                              if (error) {
                                self->close_now();  // idle too long, or the client went away
                                return;
                              }
                              self->read_header();
                            });
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(
        static_cast<std::uint32_t>(std::min<size_t>(options().max_header_bytes, UINT32_MAX)));
    // Set per route once the header says which route. Not boost::none: Boost 1.74 compares the Content-Length
    // with the optional itself, and every length exceeds an empty one.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    stream_.expires_after(options().header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](const beast::error_code& error, size_t /*bytes*/) {
                              self->on_header(error);
                            });
  }

  void on_header(const beast::error_code& error) {
    if (error) {
      if (error == beast::error::timeout) {
        // The stream closed the socket at the deadline: nothing can be answered (a 408 would go nowhere).
        ++owner_.timeouts;
        log().debug("{}: closed a connection whose request header took over {}", options().name,
                    seconds_text(options().header_timeout));
        close_now();
      } else if (error == http::error::header_limit) {
        refuse(431,
               fmt::format("the request line and header fields exceed {} bytes", options().max_header_bytes));
      } else if (is_syntax_error(error)) {
        refuse(400, fmt::format("malformed HTTP request: {}", error.message()));
      } else {
        log().debug("{}: reading a request header: {}", options().name, error.message());
        close_now();  // end of stream, reset: nobody to answer
      }
      return;
    }
    const auto& message = parser_->get();
    const auto fields = static_cast<size_t>(std::distance(message.begin(), message.end()));
    if (fields > options().max_header_fields) {
      refuse(431, fmt::format("the request has {} header fields; at most {} are accepted", fields,
                              options().max_header_fields));
      return;
    }
    if (message.target().size() > options().max_target_bytes) {
      refuse(414, fmt::format("the request target is {} bytes long; at most {} are accepted",
                              message.target().size(), options().max_target_bytes));
      return;
    }
    request_ = HttpRequest();
    head_ = message.method() == http::verb::head;
    request_.method = head_ ? "GET" : std::string(message.method_string());
    request_.target = std::string(message.target());
    split_target(request_.target, request_);
    request_.headers.reserve(fields);
    for (const auto& field : message) {
      request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    const size_t limit = options().body_limit ? options().body_limit(request_.method, request_.path)
                                              : options().max_body_bytes;
    if (const auto length = parser_->content_length(); length && *length > limit) {
      refuse(413, fmt::format("the request body is {} bytes; {} {} takes at most {}", *length,
                              request_.method, printable_path(), limit));
      return;
    }
    parser_->body_limit(limit);
    body_limit_ = limit;
    if (parser_->is_done()) {
      dispatch();
      return;
    }
    if (beast::iequals(message[http::field::expect], "100-continue")) {
      auto interim =
          std::make_shared<http::response<http::empty_body>>(http::status::continue_, message.version());
      stream_.expires_after(options().write_timeout);
      http::async_write(stream_, *interim,
                        [self = shared_from_this(), interim](const beast::error_code& write_error, size_t) {
                          if (write_error) {
                            self->close_now();
                            return;
                          }
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(options().body_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](const beast::error_code& error, size_t /*bytes*/) {
                       self->on_body(error);
                     });
  }

  void on_body(const beast::error_code& error) {
    if (!error) {
      dispatch();
      return;
    }
    if (error == beast::error::timeout) {
      ++owner_.timeouts;
      log().debug("{}: closed a connection whose request body took over {}", options().name,
                  seconds_text(options().body_timeout));
      close_now();
    } else if (error == http::error::body_limit) {
      refuse(413, fmt::format("the request body exceeds {} bytes, the most {} {} takes", body_limit_,
                              request_.method, printable_path()));
    } else if (is_syntax_error(error)) {
      refuse(400, fmt::format("malformed HTTP request body: {}", error.message()));
    } else {
      log().debug("{}: reading a request body: {}", options().name, error.message());
      close_now();
    }
  }

  void dispatch() {
    keep_alive_ = parser_->keep_alive();
    version_ = parser_->get().version();
    request_.body = std::move(parser_->get().body());
    parser_.reset();
    if (owner_.queued.load() >= options().max_queued_requests) {
      refuse(503,
             fmt::format("{} is busy: {} requests are waiting; retry later", options().name,
                         options().max_queued_requests),
             false);
      return;
    }
    ++owner_.queued;
    ++owner_.requests;
    busy_ = true;
    request_.peer = peer_;
    answer_ = std::make_shared<HttpResponder::State>();
    answer_->session = weak_from_this();
    answer_->gate = owner_.gate;
    answer_->queued = &owner_.queued;
    answer_->holds_place = true;
    asio::post(*owner_.workers, [self = shared_from_this(), state = answer_] {
      const HttpResponder responder(state);
      try {
        self->owner_.handler(self->request_, responder);
      } catch (...) {
        const std::string what = exception_message(std::current_exception());
        log().error("{}: {} {}: unexpected exception: {}", self->options().name, self->request_.method,
                    self->request_.path, what);
        responder.respond(self->options().error_body(500, "internal error: " + what));
      }
      state->release_place();
      asio::post(self->executor(), [self, state] { self->after_handler(*state); });
    });
  }

  // On the strand, once the handler returned: if it has not answered, the request waits without a thread,
  // and the connection is watched so that a client that goes away cancels it.
  void after_handler(HttpResponder::State& state) {
    {
      std::lock_guard lock(state.mutex);
      if (state.answered || state.cancelled) {
        return;
      }
    }
    waiting_ = true;
    ++owner_.waiting;
    watch_client();
  }

  void watch_client() {
    watching_ = true;
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](const beast::error_code& error, size_t bytes) {
                              self->watching_ = false;
                              self->buffer_.commit(bytes);
                              if (self->pending_answer_) {
                                HttpResponse answer = std::move(*self->pending_answer_);
                                self->pending_answer_.reset();
                                self->write(std::move(answer));
                                return;
                              }
                              if (error) {
                                // The client closed the connection (or reset it) while its request waited.
                                self->stop_waiting();
                                if (self->answer_ && self->answer_->cancel()) {
                                  ++self->owner_.cancelled;
                                }
                                self->close_now();
                                return;
                              }
                              // A pipelined next request: keep it for after the answer, and watch on while
                              // there is room for it.
                              if (self->buffer_.size() < self->options().max_header_bytes) {
                                self->watch_client();
                              }
                            });
  }

  void stop_waiting() {
    if (waiting_) {
      waiting_ = false;
      --owner_.waiting;
    }
  }

  // Answers with the listener's own error; the connection closes after it unless `close` is false.
  void refuse(int status, const std::string& message, bool close = true) {
    ++owner_.refused;
    log().debug("{}: {} {}", options().name, status, message);
    close_after_ = close_after_ || close;
    if (!parser_ || !parser_->is_header_done()) {
      version_ = 11;
    } else {
      version_ = parser_->get().version();
    }
    write(options().error_body(status, message));
  }

  void write(HttpResponse response) {
    auto out = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(response.status),
                                                                   version_ == 10 ? 10 : 11);
    out->set(http::field::server, "joule");
    out->set(http::field::content_type, response.content_type);
    for (const auto& [name, value] : response.headers) {
      out->set(name, value);
    }
    out->body() = std::move(response.body);
    out->prepare_payload();
    if (head_) {
      out->body().clear();  // Content-Length still says what GET would send
    }
    busy_ = true;
    const bool keep = keep_alive_ && !close_after_ && !owner_.stopping;
    out->keep_alive(keep);
    stream_.expires_after(options().write_timeout);
    http::async_write(
        stream_, *out,
        [self = shared_from_this(), out, keep](const beast::error_code& error, size_t /*bytes*/) {
          if (error) {
            self->close_now();
          } else if (!keep) {
            self->linger_close();
          } else {
            self->head_ = false;
            self->wait_for_request();
          }
        });
  }

  // Closes after the response: stop sending, then read and drop what the client still sends for a moment,
  // so the response reaches a client that is still writing (a close with unread data would reset it).
  void linger_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    drain();
  }

  void drain() {
    if (drained_ >= kLingerBytes) {
      close_now();
      return;
    }
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](const beast::error_code& error, size_t bytes) {
                              self->drained_ += bytes;
                              if (error) {
                                self->close_now();
                                return;
                              }
                              self->drain();
                            });
  }

  void close_now() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

  std::string printable_path() const {
    return request_.path.size() > 80 ? request_.path.substr(0, 80) + "…" : request_.path;
  }

  beast::tcp_stream stream_;
  HttpListener::Impl& owner_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  unsigned version_ = 11;
  bool head_ = false;
  bool keep_alive_ = true;
  bool close_after_ = false;
  bool busy_ = false;  // a request is in a handler or its response is being written
  size_t drained_ = 0;
  size_t body_limit_ = 0;
  std::array<char, 16384> scratch_{};
  std::string peer_;
  std::shared_ptr<HttpResponder::State> answer_;  // of the request in its handler or waiting
  bool waiting_ = false;                          // the handler returned without answering
  bool watching_ = false;                         // a read watches the connection while it waits
  std::optional<HttpResponse> pending_answer_;    // arrived while the watch read was outstanding
};

HttpResponder::HttpResponder(std::shared_ptr<State> state) : state_(std::move(state)) {}

void HttpResponder::respond(HttpResponse response) const {
  {
    std::lock_guard lock(state_->mutex);
    if (state_->answered || state_->cancelled) {
      return;
    }
    state_->answered = true;
    state_->on_cancel = nullptr;
  }
  std::lock_guard gate(state_->gate->mutex);
  if (!state_->gate->open) {
    return;
  }
  state_->release_place();
  if (auto session = state_->session.lock()) {
    asio::post(session->executor(), [session, response = std::move(response)]() mutable {
      session->on_answer(std::move(response));
    });
  }
}

bool HttpResponder::cancelled() const {
  std::lock_guard lock(state_->mutex);
  return state_->cancelled;
}

void HttpResponder::on_cancel(std::function<void()> callback) const {
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->cancelled) {
      if (!state_->answered) {
        state_->on_cancel = std::move(callback);
      }
      return;
    }
  }
  callback();
}

void HttpListener::Impl::accept() {
  acceptor.async_accept(asio::make_strand(io), [this](const beast::error_code& error, tcp::socket socket) {
    on_accept(error, std::move(socket));
  });
}

void HttpListener::Impl::on_accept(const beast::error_code& error, tcp::socket socket) {
  if (stopping || error == asio::error::operation_aborted) {
    return;
  }
  if (error) {
    // Out of file descriptors (EMFILE/ENFILE) or a connection reset before accept: pause, then go on.
    const auto now = std::chrono::steady_clock::now();
    if (now - last_accept_warning > std::chrono::seconds(10)) {
      last_accept_warning = now;
      log().warn("{}: accepting a connection failed: {}", options.name, error.message());
    }
    accept_retry.expires_after(kAcceptRetry);
    accept_retry.async_wait([this](const beast::error_code& wait_error) {
      if (!wait_error && !stopping) {
        accept();
      }
    });
    return;
  }
  if (open.load() >= options.max_connections) {
    ++connections_refused;
    beast::error_code ignored;
    socket.close(ignored);
  } else {
    ++accepted;
    ++open;
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    std::make_shared<Session>(std::move(socket), *this)->start();
  }
  accept();
}

void HttpListener::Impl::stop(std::chrono::milliseconds grace) {
  if (stopped.exchange(true)) {
    return;
  }
  stopping = true;
  asio::post(io, [this] {
    beast::error_code ignored;
    acceptor.close(ignored);
    accept_retry.cancel();
  });
  // Collected under the lock, told and released outside it: the last reference to a session can be one of
  // these (its handlers may finish on an I/O thread meanwhile), and ~Session takes the same lock.
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(sessions_mutex);
    live.reserve(sessions.size());
    for (const auto& [key, weak] : sessions) {
      if (auto session = weak.lock()) {
        live.push_back(std::move(session));
      }
    }
  }
  for (const auto& session : live) {
    asio::post(session->executor(), [session] { session->on_stop(); });
  }
  live.clear();
  {
    std::unique_lock lock(sessions_mutex);
    sessions_ended.wait_for(lock, grace, [this] { return sessions.empty(); });
  }
  keep_running.reset();
  io.stop();
  for (auto& thread : io_threads) {
    thread.join();
  }
  io_threads.clear();
  workers->join();
}

HttpListener::HttpListener(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpListener::~HttpListener() {
  stop();
}

int HttpListener::port() const {
  return impl_->port;
}

const std::string& HttpListener::host() const {
  return impl_->host;
}

void HttpListener::stop(std::chrono::milliseconds grace) {
  impl_->stop(grace);
}

HttpListenerStats HttpListener::stats() const {
  HttpListenerStats stats;
  stats.connections_accepted = impl_->accepted;
  stats.connections_refused = impl_->connections_refused;
  stats.connections_open = impl_->open;
  stats.requests = impl_->requests;
  stats.refused = impl_->refused;
  stats.timeouts = impl_->timeouts;
  stats.waiting = impl_->waiting;
  stats.cancelled = impl_->cancelled;
  return stats;
}

Result<std::unique_ptr<HttpListener>> HttpListener::start(HttpListenerOptions options, HttpHandler handler) {
  if (!handler) {
    return fail(ErrorCode::kInvalidArgument, "the HTTP listener needs a request handler");
  }
  return start(std::move(options),
               [handler = std::move(handler)](const HttpRequest& request, const HttpResponder& responder) {
                 responder.respond(handler(request));
               });
}

Result<std::unique_ptr<HttpListener>> HttpListener::start(HttpListenerOptions options,
                                                          AsyncHttpHandler handler) {
  if (options.worker_threads == 0 || options.io_threads == 0) {
    return fail(ErrorCode::kInvalidArgument,
                "the HTTP listener needs at least one worker and one I/O thread");
  }
  if (options.max_connections == 0) {
    return fail(ErrorCode::kInvalidArgument, "the HTTP listener needs max_connections >= 1");
  }
  if (!handler) {
    return fail(ErrorCode::kInvalidArgument, "the HTTP listener needs a request handler");
  }
  // Every connection is a file descriptor: make room for max_connections of them if the hard limit allows.
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    const rlim_t wanted = static_cast<rlim_t>(options.max_connections) + kSpareDescriptors;
    if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < wanted) {
      const rlim_t raised = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
      if (raised > limit.rlim_cur) {
        limit.rlim_cur = raised;
        ::setrlimit(RLIMIT_NOFILE, &limit);
      }
    }
  }

  auto impl = std::shared_ptr<Impl>(new Impl(std::move(options), std::move(handler)));
  const HttpListenerOptions& opts = impl->options;
  beast::error_code error;
  tcp::resolver resolver(impl->io);
  const auto endpoints = resolver.resolve(opts.host, std::to_string(opts.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, error);
  if (error || endpoints.empty()) {
    return fail(ErrorCode::kIo, "cannot listen on {}: cannot resolve the address: {}", opts.host,
                error ? error.message() : "no address");
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  impl->acceptor.open(endpoint.protocol(), error);
  if (!error) {
    // SO_REUSEADDR (a quick restart on the same port) and not SO_REUSEPORT (which would let a second server
    // share the port silently).
    impl->acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  }
  if (!error) {
    impl->acceptor.bind(endpoint, error);
  }
  if (!error) {
    impl->acceptor.listen(asio::socket_base::max_listen_connections, error);
  }
  if (error) {
    return fail(ErrorCode::kIo, "cannot listen on {}:{}: {}", opts.host, opts.port, error.message());
  }
  impl->host = opts.host;
  impl->port = impl->acceptor.local_endpoint().port();
  impl->workers = std::make_unique<asio::thread_pool>(opts.worker_threads);
  impl->keep_running.emplace(impl->io.get_executor());
  impl->accept();
  for (size_t i = 0; i < opts.io_threads; ++i) {
    impl->io_threads.emplace_back([raw = impl.get()] { raw->io.run(); });
  }
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(impl)));
}

}  // namespace joule::metrics
