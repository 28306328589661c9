// SPDX-License-Identifier: Apache-2.0
// A child process for power_limit_test: an optimizer on a GPU that appends every limit it is given to a
// file, lowered to 200 W (default 250 W), then ended in the way the mode names.
//
//   power_limit_signal_helper FILE MODE
//   MODE: wait     print "ready", wait for a signal (default dispositions)
//         raise-term  raise SIGTERM itself
//         handler  a SIGINT handler of its own is installed first; print "ready", wait for SIGINT, then go on
//                  training for one step and end normally
//         exit     call std::exit(0) with the optimizer still alive
// Exit codes: 0 done, 2 bad usage, 3 the signal did not end the process, 4 a check failed.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "joule/core/clock.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/optimize/power_limit.hpp"

#include "file_gpu.hpp"

namespace {

// Atomic, not volatile sig_atomic_t: joule calls a previous handler from its restorer thread.
std::atomic<int> g_handler_called{0};

joule::test::FileGpu* g_gpu = nullptr;  // leaked on purpose: alive in the exit hook

void append(const char* line) {
  g_gpu->append(line);
}

void on_sigint(int) {
  append("handler");
  g_handler_called = 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s FILE wait|raise-term|handler|exit\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[2];
  const int file_fd = ::open(argv[1], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (file_fd < 0) {
    std::perror("open");
    return 2;
  }
  if (mode == "handler") {
    struct sigaction action {};
    action.sa_handler = &on_sigint;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, nullptr);
  }

  auto* gpu = new joule::test::FileGpu(file_fd, {});
  g_gpu = gpu;
  joule::VirtualClock clock;
  auto* monitor = new joule::measure::EnergyMonitor({gpu}, {}, clock);
  joule::optimize::PowerLimitOptions options;
  options.wait_steps = 0;
  options.warmup_steps = 1;
  options.profile_steps = 1;
  options.step_w = 50;  // 300, 250, 200, 150, 100 W
  auto* optimizer = new joule::optimize::PowerLimitOptimizer(*monitor, options);
  for (int step = 0; step < 5; ++step) {
    optimizer->on_step_begin();
    clock.advance(std::chrono::milliseconds(100));
    optimizer->on_step_end();
  }
  if (optimizer->current_power_limit_mw() != 200'000) {
    std::fprintf(stderr, "expected 200 W, at %u mW\n", optimizer->current_power_limit_mw());
    return 4;
  }

  if (mode == "exit") {
    std::exit(0);
  }
  if (mode == "raise-term") {
    ::raise(SIGTERM);
  } else {
    std::printf("ready\n");
    std::fflush(stdout);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline && g_handler_called == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (mode != "handler") {
    return 3;
  }
  if (g_handler_called == 0) {
    return 3;
  }
  // The job goes on: the optimizer re-measures the interrupted limit (max first, then 200 W again).
  optimizer->on_step_begin();
  delete optimizer;
  struct sigaction current {};
  ::sigaction(SIGINT, nullptr, &current);
  if (current.sa_handler != &on_sigint) {
    std::fprintf(stderr, "the previous SIGINT disposition was not put back\n");
    return 4;
  }
  delete monitor;
  delete gpu;
  return 0;
}
