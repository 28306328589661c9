// SPDX-License-Identifier: Apache-2.0
// Runs a program as a child process and captures its exit code, stdout and stderr.
#pragma once

#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace joule::test {

struct ProcessResult {
  int exit_code = -1;  ///< exit status, or 128 + signal
  std::string out;
  std::string err;
};

/// A running child whose stdout and stderr go to files, so that nothing blocks on full pipes.
class Process {
 public:
  /// @param env variables to set (value) or unset (nullopt-like: empty map value "\x01unset").
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {}) {
    char out_template[] = "/tmp/joule-it-out-XXXXXX";
    char err_template[] = "/tmp/joule-it-err-XXXXXX";
    out_fd_ = mkstemp(out_template);
    err_fd_ = mkstemp(err_template);
    out_path_ = out_template;
    err_path_ = err_template;
    std::vector<std::string> environment;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = entry.substr(0, entry.find('='));
      if (env.count(name) == 0) {
        environment.push_back(entry);
      }
    }
    for (const auto& [name, value] : env) {
      if (value != kUnset) {
        environment.push_back(name + "=" + value);
      }
    }
    std::vector<char*> args;
    for (const auto& arg : argv) {
      args.push_back(const_cast<char*>(arg.c_str()));
    }
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& entry : environment) {
      envp.push_back(entry.data());
    }
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out_fd_, 1);
    posix_spawn_file_actions_adddup2(&actions, err_fd_, 2);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    // A process group of its own, so that signals the test sends reach only this child.
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    if (posix_spawn(&pid_, args[0], &actions, &attributes, args.data(), envp.data()) != 0) {
      throw std::runtime_error("cannot start " + argv[0]);
    }
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  ~Process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    ::close(out_fd_);
    ::close(err_fd_);
    ::unlink(out_path_.c_str());
    ::unlink(err_path_.c_str());
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int signal_number) const { ::kill(pid_, signal_number); }

  /// Waits for the child to end and collects its output.
  ProcessResult wait() {
    ProcessResult result;
    int status = 0;
    if (pid_ > 0) {
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = 0;
      result.exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    }
    result.out = read_all(out_path_);
    result.err = read_all(err_path_);
    return result;
  }

  /// @return the child's stdout and stderr so far.
  std::string out_so_far() const { return read_all(out_path_); }
  std::string err_so_far() const { return read_all(err_path_); }

  /// @return true once the child has a child process of its own (e.g. `joule measure` started its
  /// command), waiting at most `timeout`.
  bool wait_for_grandchild(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::string children =
        "/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children";
    while (std::chrono::steady_clock::now() < deadline) {
      if (!read_all(children).empty()) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  /// @return true once the child has written something to stdout, waiting at most `timeout`.
  bool wait_for_output(std::chrono::milliseconds timeout) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!out_so_far().empty()) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  static constexpr const char* kUnset = "\x01unset";

 private:
  static std::string read_all(const std::string& path) {
    std::string content;
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      return content;
    }
    char buffer[4096];
    ssize_t n = 0;
    while ((n = ::read(fd, buffer, sizeof buffer)) > 0) {
      content.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    return content;
  }

  pid_t pid_ = 0;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_path_;
  std::string err_path_;
};

/// Runs `argv` to completion.
inline ProcessResult run(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env = {}) {
  Process process(argv, env);
  return process.wait();
}

}  // namespace joule::test
