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
#include "joule/optimize/carbon.hpp"
#include "joule/optimize/carbon_forecast.hpp"
#include "joule/plan/runtime.hpp"

namespace {

int g_file_fd = -1;

void append(const std::string& line) {
  const std::string text = line + "\n";
  [[maybe_unused]] const ssize_t written = ::write(g_file_fd, text.data(), text.size());
}

class FileGpu final : public joule::device::Gpu {
 public:
  FileGpu() : Gpu(make_info()) {}

 protected:
  joule::Result<uint64_t> do_energy_mj() override { return 0; }
  joule::Result<uint32_t> do_power_mw() override { return 100'000; }
  joule::Result<joule::device::PowerLimitConstraints> do_power_limit_constraints() override {
    return joule::device::PowerLimitConstraints{100'000, 300'000, 250'000};
  }
  joule::Result<uint32_t> do_power_limit_mw() override { return limit_mw_; }
  joule::Result<void> do_set_power_limit_mw(uint32_t power_limit_mw) override {
    limit_mw_ = power_limit_mw;
    append("limit " + std::to_string(power_limit_mw));
    return {};
  }
  joule::Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override {
    return std::vector<uint32_t>{1410, 1200};
  }
  joule::Result<void> do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) override {
    append("lock " + std::to_string(min_mhz) + " " + std::to_string(max_mhz));
    return {};
  }
  joule::Result<void> do_reset_sm_clocks() override {
    append("reset-clocks");
    return {};
  }

 private:
  static joule::device::GpuInfo make_info() {
    joule::device::GpuInfo info;
    info.backend = "file";
    info.name = "File GPU";
    info.has_energy_counter = true;
    return info;
  }
  uint32_t limit_mw_ = 220'000;
};

// Forks a child that runs `body` and then _exit(0)s; @return the child's wait status.
template <typename Body>
int in_child(Body body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// A forked child must leave the parent's GPU alone, however it ends.
bool fork_children(joule::device::SettingsGuard*& guard, FileGpu& gpu) {
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
  g_file_fd = ::open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (g_file_fd < 0) {
    std::perror("open");
    return 2;
  }

  // Leaked on purpose: alive in the exit hook.
  auto* gpu = new FileGpu;
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
