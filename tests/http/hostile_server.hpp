// SPDX-License-Identifier: Apache-2.0
// A loopback TCP server that answers HTTP requests with whatever bytes a test hands it, at whatever pace:
// endless bodies, trickled headers, bytes that are not HTTP. Each connection runs `handler` on a thread of
// its own; stopping the server (its destructor) wakes every handler at once (send() and pause() return
// false), so no test waits for an attack to end.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace joule::test {

class HostileServer {
 public:
  /// One accepted connection, as the handler sees it.
  class Peer {
   public:
    /// Reads one request: up to the blank line after its headers, then Content-Length bytes of body.
    /// @return false if the client closed the connection (or the server is stopping) first.
    bool read_request() {
      request_.clear();
      std::string data;
      char chunk[4096];
      size_t header_end = std::string::npos;
      size_t wanted = 0;
      while (true) {
        if (header_end == std::string::npos) {
          header_end = data.find("\r\n\r\n");
          if (header_end != std::string::npos) {
            header_end += 4;
            wanted = header_end + content_length(data.substr(0, header_end));
          }
        }
        if (header_end != std::string::npos && data.size() >= wanted) {
          request_ = data.substr(0, wanted);
          return true;
        }
        const ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
        if (got <= 0) {
          return false;
        }
        data.append(chunk, static_cast<size_t>(got));
      }
    }
    /// Reads whatever the client sends first (one recv), for answers that do not wait for a whole request.
    bool read_some() {
      char chunk[4096];
      const ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
      return got > 0;
    }
    /// @return the request read last: request line, headers and body.
    const std::string& request() const { return request_; }
    /// @return the request line's method and path, e.g. "POST /v1/completions".
    std::string target() const {
      const size_t end = request_.find(" HTTP/");
      return end == std::string::npos ? std::string() : request_.substr(0, end);
    }
    /// Sends all of `bytes`. @return false if the client is gone or the server is stopping.
    bool send(std::string_view bytes) {
      while (!bytes.empty()) {
        if (server_.stopping_) {
          return false;
        }
        const ssize_t sent = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (sent <= 0) {
          return false;
        }
        bytes.remove_prefix(static_cast<size_t>(sent));
      }
      return true;
    }
    /// Waits `interval` (less if the server stops). @return false if the server is stopping.
    bool pause(std::chrono::milliseconds interval) {
      std::unique_lock lock(server_.mutex_);
      return !server_.wake_.wait_for(lock, interval, [this] { return server_.stopping_.load(); });
    }

   private:
    friend class HostileServer;
    Peer(HostileServer& server, int fd) : server_(server), fd_(fd) {}
    static size_t content_length(const std::string& head) {
      std::string lower;
      for (const char c : head) {
        lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
      }
      const size_t at = lower.find("\r\ncontent-length:");
      return at == std::string::npos ? 0 : std::stoul(head.substr(at + 17));
    }
    HostileServer& server_;
    int fd_;
    std::string request_;
  };
  using Handler = std::function<void(Peer&)>;

  explicit HostileServer(Handler handler) : handler_(std::move(handler)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
        ::listen(listener_, 64) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      throw std::runtime_error("HostileServer: cannot listen on loopback");
    }
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~HostileServer() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
      for (const int fd : connections_) {
        ::shutdown(fd, SHUT_RDWR);
      }
    }
    wake_.notify_all();
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    for (auto& thread : handlers_) {
      thread.join();
    }
    for (const int fd : connections_) {
      ::close(fd);
    }
    ::close(listener_);
  }
  HostileServer(const HostileServer&) = delete;
  HostileServer& operator=(const HostileServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  /// @return how many connections were accepted so far.
  int connections() const {
    std::lock_guard lock(mutex_);
    return static_cast<int>(connections_.size());
  }

 private:
  void accept_loop() {
    while (true) {
      const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      std::lock_guard lock(mutex_);
      if (fd < 0 || stopping_) {
        if (fd >= 0) {
          ::close(fd);
        }
        return;
      }
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      connections_.push_back(fd);
      handlers_.emplace_back([this, fd] {
        Peer peer(*this, fd);
        handler_(peer);
        // Closing is left to the destructor (an fd number must not be reused while it is listed); the
        // client sees the end of the answer by shutting down our side.
        ::shutdown(fd, SHUT_WR);
      });
    }
  }

  Handler handler_;
  int listener_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
  std::vector<int> connections_;
  std::vector<std::thread> handlers_;
};

}  // namespace joule::test
