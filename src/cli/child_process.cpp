// SPDX-License-Identifier: Apache-2.0
#include "child_process.hpp"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace joule::cli {

namespace {

volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_pending_signal = 0;

// Async-signal-safe: only kill() and sig_atomic_t stores.
void forward_signal(int signal_number, siginfo_t* info, void* /*context*/) {
  // si_code <= 0: sent by a process (kill, sigqueue, tkill). SI_KERNEL: from the terminal, which signals
  // the whole foreground process group, child included.
  const bool from_process = info == nullptr || info->si_code <= 0;
  if (!from_process) {
    return;
  }
  if (g_child_pid > 0) {
    ::kill(static_cast<pid_t>(g_child_pid), signal_number);
  } else {
    g_pending_signal = signal_number;
  }
}

class SignalForwarding {
 public:
  SignalForwarding() {
    struct sigaction action {};
    action.sa_sigaction = forward_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalForwarding() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    g_child_pid = 0;
    g_pending_signal = 0;
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

}  // namespace

Result<ChildExit> run_child(const std::vector<std::string>& argv) {
  if (argv.empty()) {
    return fail(ErrorCode::kInvalidArgument, "no command to run");
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);

  SignalForwarding forwarding;
  // The child must not inherit our handlers' effect: exec resets handled signals to their defaults.
  pid_t pid = 0;
  const int spawn_error = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (spawn_error != 0) {
    if (spawn_error == ENOENT) {
      return fail(ErrorCode::kNotFound, "cannot run '{}': command not found", argv[0]);
    }
    if (spawn_error == EACCES) {
      return fail(ErrorCode::kPermissionDenied, "cannot run '{}': permission denied", argv[0]);
    }
    return fail(ErrorCode::kIo, "cannot run '{}': {}", argv[0], std::strerror(spawn_error));
  }
  g_child_pid = pid;
  if (g_pending_signal != 0) {
    ::kill(pid, g_pending_signal);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return fail(ErrorCode::kIo, "waiting for '{}' failed: {}", argv[0], std::strerror(errno));
    }
  }
  if (WIFSIGNALED(status)) {
    return ChildExit{128 + WTERMSIG(status), WTERMSIG(status)};
  }
  return ChildExit{WEXITSTATUS(status), 0};
}

}  // namespace joule::cli
