// SPDX-License-Identifier: Apache-2.0
// One connection to `joule daemon`'s Unix socket speaking its line protocol by hand (one JSON object per
// line), for the daemon tests and daemon_client_helper: to send what DaemonClient never would, or to be a
// client without the library. Header-only, without gtest: the helper is a program of its own.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

namespace joule::test {

class LineClient {
 public:
  /// Connects to the socket at `path`; reads wait at most `receive_timeout` (0: no limit).
  /// @throws std::runtime_error ("cannot connect to PATH: why") if nothing accepts there.
  explicit LineClient(const std::string& path,
                      std::chrono::seconds receive_timeout = std::chrono::seconds(5)) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      const std::string why = std::strerror(errno);
      close();
      throw std::runtime_error("cannot connect to " + path + ": " + why);
    }
    if (receive_timeout.count() > 0) {
      const timeval limit{static_cast<time_t>(receive_timeout.count()), 0};
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    }
  }
  ~LineClient() { close(); }
  LineClient(const LineClient&) = delete;
  LineClient& operator=(const LineClient&) = delete;

  /// Sends `bytes` as they are. @return false if the connection failed before all were sent.
  bool send_all(const std::string& bytes) const {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        return false;
      }
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  /// Reads the next line (without its newline) into `line`. @return false if the peer closed the connection
  /// or did not answer in time.
  bool try_read_line(std::string& line) {
    while (true) {
      if (const size_t newline = buffer_.find('\n'); newline != std::string::npos) {
        line = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return true;
      }
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) {
        return false;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  /// @return the next line. @throws std::runtime_error if the daemon closed the connection or did not answer.
  std::string read_line() {
    std::string line;
    if (!try_read_line(line)) {
      throw std::runtime_error("the daemon closed the connection or did not answer");
    }
    return line;
  }

  /// Sends one line and returns the response (as JSON), skipping events.
  /// @throws std::runtime_error if sending fails or no response comes.
  nlohmann::json request(const std::string& line) {
    if (!send_all(line + "\n")) {
      throw std::runtime_error("send failed");
    }
    while (true) {
      auto next = nlohmann::json::parse(read_line());
      if (!next.contains("event")) {
        return next;
      }
    }
  }

  void close() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }

 private:
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace joule::test
