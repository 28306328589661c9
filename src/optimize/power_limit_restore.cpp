// SPDX-License-Identifier: Apache-2.0
// Restoring power limits on destruction, at exit and on SIGINT/SIGTERM.
//
// Signals: the handler does only async-signal-safe work: it writes the signal and its siginfo to a
// non-blocking pipe (one write of less than PIPE_BUF bytes, so it is atomic) and returns. A restorer
// thread, started with every signal blocked, reads the pipe, restores every registered controller and
// then lets the signal take its course (previous handler function, or the default action re-raised).
// The thread and the pipe live until the process ends (closing the pipe while a handler may still be
// writing to it would risk writing into a reused descriptor); only the handlers come and go.
#include "power_limit_restore.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <thread>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "joule/core/log.hpp"

namespace joule::optimize::detail {

// ---------------------------------------------------------------------------------------------------------
// LimitController

LimitController::LimitController(std::vector<device::Gpu*> gpus,
                                 std::vector<std::optional<uint32_t>> restore_mw)
    : gpus_(std::move(gpus)), restore_mw_(std::move(restore_mw)), owner_pid_(::getpid()) {}

Result<void> LimitController::apply(uint32_t power_limit_mw) {
  std::lock_guard lock(mutex_);
  if (closed_ || applied_mw_ == power_limit_mw) {
    return {};
  }
  std::optional<Error> first_error;
  for (device::Gpu* gpu : gpus_) {
    auto result = gpu->set_power_limit_mw(power_limit_mw);
    if (!result && !first_error) {
      first_error = result.error();
    }
  }
  // Even a partial failure may have changed some GPUs: they must be restored.
  changed_ = true;
  if (first_error) {
    applied_mw_.reset();
    return tl::make_unexpected(*first_error);
  }
  applied_mw_ = power_limit_mw;
  return {};
}

void LimitController::restore(RestoreReason reason) noexcept {
  try {
    std::lock_guard lock(mutex_);
    if (reason != RestoreReason::kSignal) {
      closed_ = true;
    }
    if (!changed_) {
      return;
    }
    for (size_t i = 0; i < gpus_.size(); ++i) {
      auto result =
          restore_mw_[i] ? gpus_[i]->set_power_limit_mw(*restore_mw_[i]) : gpus_[i]->reset_power_limit();
      if (!result) {
        log().warn("power-limit optimizer: cannot restore the power limit of {}: {}", gpus_[i]->label(),
                   result.error().message());
      }
    }
    changed_ = false;
    applied_mw_.reset();
    if (reason == RestoreReason::kSignal) {
      external_restore_.store(true);
    }
    static constexpr std::array<const char*, 3> kReasons = {"optimizer destroyed", "process exit", "signal"};
    log().info("power-limit optimizer: restored the power limit of {} GPU(s) ({})", gpus_.size(),
               kReasons[static_cast<size_t>(reason)]);
  } catch (...) {
    // Nothing may escape a destructor, an exit hook or the restorer thread.
  }
}

// ---------------------------------------------------------------------------------------------------------
// Process-wide state

namespace {

constexpr std::array<int, 2> kSignals = {SIGINT, SIGTERM};

struct SignalMessage {
  int signal_number = 0;
  siginfo_t info{};
};
static_assert(sizeof(SignalMessage) <= PIPE_BUF, "a message must be written atomically");

// Read by the handler, so lock-free atomics or data written before the handler is installed.
std::atomic<int> g_pipe_write_fd{-1};
std::atomic<pid_t> g_restorer_pid{0};  // the process whose restorer thread reads the pipe
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free);
// Dispositions before ours; written (under the registry's mutex) before our handler is installed.
std::array<struct sigaction, kSignals.size()> g_previous{};

struct Registry {
  std::mutex mutex;  // guards everything below; held while restoring, so GPUs cannot vanish meanwhile
  std::vector<std::shared_ptr<LimitController>> controllers;
  int signal_users = 0;
  bool exit_hook_registered = false;
  std::array<bool, kSignals.size()> installed{};
  int pipe_read_fd = -1;
};

// Never destroyed: the exit hook and the restorer thread may use it during static destruction.
Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

size_t signal_slot(int signal_number) {
  return static_cast<size_t>(std::find(kSignals.begin(), kSignals.end(), signal_number) - kSignals.begin());
}

bool is_ours(const struct sigaction& action);

// Lets the signal do what it would have done without us. Used by the restorer thread (context = null) and
// by the handler itself in a forked child; only async-signal-safe calls.
void forward(int signal_number, siginfo_t* info, void* context, const struct sigaction& previous) {
  if ((previous.sa_flags & SA_SIGINFO) != 0) {
    if (previous.sa_sigaction != nullptr && !is_ours(previous)) {
      previous.sa_sigaction(signal_number, info, context);
    }
    return;
  }
  if (previous.sa_handler == SIG_IGN) {
    return;
  }
  if (previous.sa_handler == SIG_DFL) {
    // Die of the signal as the process would have: default disposition back, then deliver it to this
    // thread (where it was blocked).
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    ::sigaction(signal_number, &default_action, nullptr);
    sigset_t only;
    sigemptyset(&only);
    sigaddset(&only, signal_number);
    ::raise(signal_number);
    ::pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
    // Only reached if the default action does not end the process.
    ::pthread_sigmask(SIG_BLOCK, &only, nullptr);
    return;
  }
  previous.sa_handler(signal_number);
}

void on_signal(int signal_number, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const int fd = g_pipe_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0 && ::getpid() == g_restorer_pid.load(std::memory_order_relaxed)) {
    SignalMessage message;
    message.signal_number = signal_number;
    if (info != nullptr) {
      message.info = *info;
    }
    // If the pipe is full, restores are already pending; dropping this one loses nothing but the
    // forwarding of a repeated signal.
    [[maybe_unused]] const ssize_t written = ::write(fd, &message, sizeof message);
  } else {
    // A forked child (no restorer thread here; the GPUs are the parent's business).
    const size_t slot = signal_slot(signal_number);
    if (slot < kSignals.size()) {
      forward(signal_number, info, context, g_previous[slot]);
    }
  }
  errno = saved_errno;
}

bool is_ours(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) != 0 && action.sa_sigaction == &on_signal;
}

void restore_all(RestoreReason reason) {
  const pid_t self = ::getpid();
  for (const auto& controller : registry().controllers) {
    if (controller->owner_pid() == self) {
      controller->restore(reason);
    }
  }
}

void on_exit_hook() {
  try {
    std::lock_guard lock(registry().mutex);
    restore_all(RestoreReason::kExit);
  } catch (...) {
  }
}

void handle_signal(const SignalMessage& message) {
  struct sigaction previous {};
  {
    std::lock_guard lock(registry().mutex);
    const size_t slot = signal_slot(message.signal_number);
    if (slot >= kSignals.size()) {
      return;
    }
    previous = g_previous[slot];
    log().warn("power-limit optimizer: received signal {}; restoring power limits", message.signal_number);
    restore_all(RestoreReason::kSignal);
  }
  // Outside the lock: the previous handler may call exit(), which runs the exit hook.
  siginfo_t info = message.info;
  forward(message.signal_number, &info, nullptr, previous);
}

void restorer_loop(int read_fd) {
  while (true) {
    SignalMessage message;
    size_t received = 0;
    auto* bytes = reinterpret_cast<char*>(&message);
    while (received < sizeof message) {
      const ssize_t n = ::read(read_fd, bytes + received, sizeof message - received);
      if (n > 0) {
        received += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        return;  // the pipe broke; nothing more to do
      }
    }
    try {
      handle_signal(message);
    } catch (...) {
    }
  }
}

// Starts the pipe and the restorer thread for this process if needed. Needs the registry's mutex.
bool ensure_restorer_locked(Registry& state) {
  if (g_restorer_pid.load() == ::getpid()) {
    return true;
  }
  // First use, or a forked child that inherited the state but not the thread: a pipe of its own.
  std::array<int, 2> fds{};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
    log().warn(
        "power-limit optimizer: cannot create a pipe for signal handling: power limits will not be "
        "restored on SIGINT/SIGTERM");
    return false;
  }
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  // The thread starts with every signal blocked, so no handler ever runs in it and a re-raised signal is
  // delivered to it only when it unblocks that one signal.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    std::thread(restorer_loop, fds[0]).detach();
  } catch (const std::exception& error) {
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::close(fds[0]);
    ::close(fds[1]);
    log().warn(
        "power-limit optimizer: cannot start the signal restorer thread ({}): power limits will not be "
        "restored on SIGINT/SIGTERM",
        error.what());
    return false;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  state.pipe_read_fd = fds[0];
  g_pipe_write_fd.store(fds[1]);
  g_restorer_pid.store(::getpid());
  return true;
}

void install_handlers_locked(Registry& state) {
  if (!ensure_restorer_locked(state)) {
    return;
  }
  for (size_t slot = 0; slot < kSignals.size(); ++slot) {
    struct sigaction current {};
    ::sigaction(kSignals[slot], nullptr, &current);
    if (is_ours(current)) {
      state.installed[slot] = true;
      continue;
    }
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_IGN) {
      continue;  // an ignored signal does not end the process: nothing to restore for it
    }
    g_previous[slot] = current;
    struct sigaction ours {};
    ours.sa_sigaction = &on_signal;
    sigemptyset(&ours.sa_mask);
    // SA_RESTART: system calls the signal interrupts resume, as they would have if the signal had not
    // been caught by us.
    ours.sa_flags = SA_SIGINFO | SA_RESTART;
    if (::sigaction(kSignals[slot], &ours, nullptr) == 0) {
      state.installed[slot] = true;
    }
  }
}

void uninstall_handlers_locked(Registry& state) {
  for (size_t slot = 0; slot < kSignals.size(); ++slot) {
    if (!state.installed[slot]) {
      continue;
    }
    state.installed[slot] = false;
    struct sigaction current {};
    ::sigaction(kSignals[slot], nullptr, &current);
    // Someone who installed a handler after us keeps it.
    if (is_ours(current)) {
      ::sigaction(kSignals[slot], &g_previous[slot], nullptr);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// RestoreRegistration

RestoreRegistration::RestoreRegistration(std::shared_ptr<LimitController> controller, bool handle_signals)
    : controller_(std::move(controller)), handle_signals_(handle_signals) {
  Registry& state = registry();
  std::lock_guard lock(state.mutex);
  if (!state.exit_hook_registered) {
    // The logger must outlive the hook: constructing it first makes it be destroyed after the hook runs.
    log();
    state.exit_hook_registered = std::atexit(on_exit_hook) == 0;
    if (!state.exit_hook_registered) {
      log().warn("power-limit optimizer: cannot register an exit hook; limits are restored on destruction");
    }
  }
  state.controllers.push_back(controller_);
  if (handle_signals_ && ++state.signal_users == 1) {
    install_handlers_locked(state);
  }
}

RestoreRegistration::~RestoreRegistration() {
  try {
    Registry& state = registry();
    std::lock_guard lock(state.mutex);
    std::erase(state.controllers, controller_);
    if (handle_signals_ && --state.signal_users == 0) {
      uninstall_handlers_locked(state);
    }
  } catch (...) {
  }
}

bool signal_handler_installed(int signal_number) {
  struct sigaction current {};
  ::sigaction(signal_number, nullptr, &current);
  return is_ours(current);
}

}  // namespace joule::optimize::detail
