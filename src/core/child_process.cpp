// SPDX-License-Identifier: Apache-2.0
#include "joule/core/child_process.hpp"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace joule {

Result<ChildExit> run_child(const std::vector<std::string>& argv, ChildSignals& signals) {
  if (argv.empty()) {
    return fail(ErrorCode::kInvalidArgument, "no command to run");
  }
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);

  // The child gets the mask joule started with, not the block that lets joule wait for signals.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setsigmask(&attributes, &signals.previous_mask());
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int spawn_error = ::posix_spawnp(&pid, args[0], nullptr, &attributes, args.data(), environ);
  posix_spawnattr_destroy(&attributes);
  if (spawn_error != 0) {
    if (spawn_error == ENOENT) {
      return fail(ErrorCode::kNotFound, "cannot run '{}': command not found", argv[0]);
    }
    if (spawn_error == EACCES) {
      return fail(ErrorCode::kPermissionDenied, "cannot run '{}': permission denied", argv[0]);
    }
    return fail(ErrorCode::kIo, "cannot run '{}': {}", argv[0], std::strerror(spawn_error));
  }
  while (true) {
    // SIGCHLD may have arrived before this check (it stays pending), so poll the child first.
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFSIGNALED(status)) {
        return ChildExit{128 + WTERMSIG(status), WTERMSIG(status)};
      }
      return ChildExit{WEXITSTATUS(status), 0};
    }
    if (done < 0 && errno != EINTR) {
      return fail(ErrorCode::kIo, "waiting for '{}' failed: {}", argv[0], std::strerror(errno));
    }
    const auto info = signals.wait(std::nullopt);
    if (info && info->si_signo != SIGCHLD && sent_by_process(*info)) {
      ::kill(pid, info->si_signo);
    }
  }
}

}  // namespace joule
