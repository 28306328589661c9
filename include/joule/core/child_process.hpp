// SPDX-License-Identifier: Apache-2.0
// joule/core/child_process.hpp — runs a command as a child process, forwarding SIGINT/SIGTERM to it, and
// reports how it ended (`joule measure -- CMD`, and any C++ program that measures a command it starts).
#pragma once

#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/core/signals.hpp"

namespace joule {

struct ChildExit {
  int exit_code = 0;  ///< the child's exit status, or 128 + signal number if a signal ended it (as shells do)
  int signal = 0;     ///< the signal that ended it, 0 if it exited
};

/// The signals run_child() needs blocked (SIGINT, SIGTERM, SIGCHLD). Create before any thread starts.
class ChildSignals : public BlockedSignals {
 public:
  ChildSignals() : BlockedSignals({SIGINT, SIGTERM, SIGCHLD}) {}
};

/// Starts `argv` (searched on PATH), with the signal mask and dispositions joule had at start, and waits for
/// it. While it runs, SIGINT and SIGTERM sent to joule by another process are forwarded to the child; those a
/// terminal sends reach the child directly (same process group), so they are not sent twice.
/// @return how the child ended; kNotFound (exit 127 in shells) if the command does not exist,
/// kPermissionDenied (126) if it is not executable.
Result<ChildExit> run_child(const std::vector<std::string>& argv, ChildSignals& signals);

}  // namespace joule
