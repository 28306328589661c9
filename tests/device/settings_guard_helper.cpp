// SPDX-License-Identifier: Apache-2.0
// A child process for the restore tests of every controller: it changes a GPU that appends every setting
// it is given to a file (so the parent sees the device's history after the child is gone), then ends in
// the way ACTION names.
//
//   settings_guard_helper FILE CONTROLLER ACTION
//   CONTROLLER: guard      a SettingsGuard sets the limit to 200 W and locks the SM clock to 1200 MHz
//               chase      a ChaseController ticks once at a dirty grid (the limit goes below 220 W)
//               frequency  a FrequencyController locks the SM clock to 1200 MHz for a forward
//   ACTION:     wait        print "ready", wait for a signal (default dispositions)
//               raise-term  raise SIGTERM itself
//               exit        std::exit(0) with the controller alive
//               fork        (guard only) three forked children try to change the GPU, destroy their copy of
//                           the guard, exit and die of SIGTERM; then the parent exits with the guard alive
//
// The GPU starts at 220 W (default 250 W, range 100–300 W), unlocked. File lines: "limit <mW>",
// "lock <min> <max>", "reset-clocks", and the helper's own notes. Exit codes: 0 done, 2 bad usage, 3 the
// signal did not end the process, 4 a check failed.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "joule/device/settings_guard.hpp"
#include "joule/optimize/chase.hpp"
#include "joule/optimize/chase_forecast.hpp"
#include "joule/plan/runtime.hpp"

#include "file_gpu.hpp"

namespace {

// Set in the forked children only (each is single-threaded, and the flag is read there only).
bool g_in_forked_child = false;

}  // namespace

// LeakSanitizer's exit check (ASan builds) asks this first. A forked child of this two-threaded process must
// skip it: the other thread may have held the sanitizer allocator's lock at fork(), and the check, which
// takes every allocator lock, would wait for it forever (seen once in `make test-asan`). The parent is
// checked.
extern "C" int __lsan_is_turned_off() {  // NOLINT(bugprone-reserved-identifier,readability-identifier-naming)
  return g_in_forked_child ? 1 : 0;
}

namespace {

joule::test::FileGpu* g_gpu = nullptr;  // leaked on purpose: alive in the exit hook

void append(const std::string& line) {
  g_gpu->append(line);
}

// Forks a child that runs `body` and then _exit(0)s; @return the child's wait status.
template <typename Body>
int in_child(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    g_in_forked_child = true;
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// A forked child must leave the parent's GPU alone, however it ends.
bool fork_children(joule::device::SettingsGuard*& guard, joule::test::FileGpu& gpu) {
  const int refused = in_child([&] {
    const auto result = guard->set_power_limit_mw(gpu, 150'000);
    append(!result && result.error().code() == joule::ErrorCode::kState ? "child: change refused"
                                                                        : "child: change made");
    delete guard;  // its restore must do nothing here
  });
  const int exited = in_child([] { std::exit(0); });  // the exit hook must do nothing here
  const int killed = in_child([] {
    ::raise(SIGTERM);
    std::this_thread::sleep_for(std::chrono::seconds(5));
  });
  return WIFEXITED(refused) && WEXITSTATUS(refused) == 0 && WIFEXITED(exited) && WEXITSTATUS(exited) == 0 &&
         WIFSIGNALED(killed) && WTERMSIG(killed) == SIGTERM;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s FILE guard|chase|frequency wait|raise-term|exit|fork\n", argv[0]);
    return 2;
  }
  const std::string controller = argv[2];
  const std::string action = argv[3];
  const int file_fd = ::open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (file_fd < 0) {
    std::perror("open");
    return 2;
  }

  // Leaked on purpose: alive in the exit hook.
  auto* gpu = new joule::test::FileGpu(file_fd, {.power_limit_mw = 220'000,
                                                 .limit_prefix = "limit ",
                                                 .supported_sm_clocks_mhz = {1410, 1200},
                                                 .write_clock_changes = true});
  g_gpu = gpu;
  if (controller == "guard") {
    auto* guard = new joule::device::SettingsGuard({.owner = "helper"});
    if (!guard->set_power_limit_mw(*gpu, 200'000) || !guard->lock_sm_clocks(*gpu, 1200, 1200)) {
      return 4;
    }
    if (action == "fork") {
      if (!fork_children(guard, *gpu)) {
        append("children: unexpected end");
        return 4;
      }
      append("children done");
      std::exit(0);
    }
  } else if (controller == "chase") {
    auto* forecaster = new joule::optimize::LastValueForecaster;
    auto frontier = joule::Frontier<uint32_t>::from_points(
        {{250'000, 0.70, 154.0}, {200'000, 0.74, 137.0}, {150'000, 0.83, 120.0}});
    auto* chase = new joule::optimize::ChaseController(frontier, {gpu}, *forecaster, {.eta = 0.9});
    const auto decision = chase->tick(1'700'000'000, 700, 1800);
    if (!decision || decision->power_limit_mw >= 220'000) {
      return 4;
    }
  } else if (controller == "frequency") {
    using joule::plan::Instruction;
    auto created = joule::plan::FrequencyController::create(
        *gpu, {{Instruction::kForward, 0, 1200}, {Instruction::kBackward, 0, 1200}});
    if (!created) {
      return 4;
    }
    auto* frequency = new joule::plan::FrequencyController(std::move(*created));
    if (!frequency->begin(Instruction::kForward, 0)) {
      return 4;
    }
  } else {
    return 2;
  }

  if (action == "exit") {
    std::exit(0);
  }
  if (action == "raise-term") {
    ::raise(SIGTERM);
  } else if (action == "wait") {
    std::printf("ready\n");
    std::fflush(stdout);
  } else {
    return 2;
  }
  std::this_thread::sleep_for(std::chrono::seconds(20));
  return 3;
}
