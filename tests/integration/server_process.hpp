// SPDX-License-Identifier: Apache-2.0
// Runs `build/joule serve` as a child process on a free loopback port, for the integration tests.
#pragma once

#include <chrono>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "integration/run_process.hpp"

namespace joule::test {

/// Runs `argv` to completion, but kills it after `timeout` (a server that should have refused to start must
/// not hang the test). @return its result (exit code 128 + SIGKILL if it was killed).
inline ProcessResult run_bounded(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  Process process(argv);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string stat_path = "/proc/" + std::to_string(process.pid()) + "/stat";
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat(stat_path);
    std::string pid;
    std::string name;
    std::string state;
    if (!(stat >> pid >> name >> state) || state == "Z") {
      return process.wait();  // exited (a zombie until waited for)
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  process.signal(SIGKILL);
  return process.wait();
}

class ServeProcess {
 public:
  /// Starts `joule serve --db DB --listen 127.0.0.1:PORT` (PORT 0: any free port) and waits until it
  /// listens. @throws std::runtime_error with its stderr if it does not start.
  explicit ServeProcess(const std::string& db, int port = 0, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {JOULE_BINARY, "serve",    "--db",
                                     db,           "--listen", "127.0.0.1:" + std::to_string(port)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process_ = std::make_unique<Process>(argv);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    static const std::regex kListening(R"(listening on http://127\.0\.0\.1:(\d+))");
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch match;
      const std::string out = process_->out_so_far();
      if (std::regex_search(out, match, kListening)) {
        port_ = std::stoi(match[1].str());
        return;
      }
      int status = 0;
      if (::waitpid(process_->pid(), &status, WNOHANG) == process_->pid()) {
        throw std::runtime_error("joule serve exited: " + process_->err_so_far());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("joule serve did not start: " + process_->err_so_far());
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  Process& process() { return *process_; }

  /// Sends `signal_number` and waits for the process to end.
  ProcessResult stop(int signal_number = SIGTERM) {
    process_->signal(signal_number);
    return process_->wait();
  }

 private:
  std::unique_ptr<Process> process_;
  int port_ = 0;
};

}  // namespace joule::test
