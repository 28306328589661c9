// SPDX-License-Identifier: Apache-2.0
// Restoring GPU controls on destruction, at exit and on SIGINT/SIGTERM/SIGHUP.
//
// Signals: the handler does only async-signal-safe work: it writes the signal and its siginfo to a
// non-blocking pipe (one write of less than PIPE_BUF bytes, so it is atomic) and returns. A restorer
// thread, started with every signal blocked, reads the pipe, restores every registered guard and then
// lets the signal take its course (previous handler function, or the default action re-raised). The
// thread and the pipe live until the process ends (closing the pipe while a handler may still be writing
// to it would risk writing into a reused descriptor); only the handlers come and go.
#include "joule/device/settings_guard.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include "joule/core/log.hpp"

namespace joule::device {

namespace {

/// Why controls are being restored.
enum class Reason {
  kCall,    ///< restore() or destruction
  kExit,    ///< the process is exiting: no further changes
  kSignal,  ///< a signal arrived: the process may live on (a handler that returns)
};

/// A control the guard can change. Adding one means a value to record, a way to set it and a way to set it
/// back: set_one() and restore_one() below.
enum class Control {
  kPowerLimit,
  kSmClocks,
  kMemoryClocks,
};

/// One changed control of one GPU.
struct Change {
  Gpu* gpu = nullptr;
  Control control = Control::kPowerLimit;
  /// What to set back: the recorded power limit (nullopt: the default); unused for clock locks.
  std::optional<uint32_t> original;
  /// What the guard set last, if that call succeeded ({limit, 0} or {min, max}); a repeat is skipped.
  std::optional<std::array<uint32_t, 2>> applied;
};

const char* describe(Control control) {
  switch (control) {
    case Control::kPowerLimit:
      return "power limit";
    case Control::kSmClocks:
      return "SM clock lock";
    case Control::kMemoryClocks:
      return "memory clock lock";
  }
  return "control";
}

Result<void> set_one(Gpu& gpu, Control control, std::array<uint32_t, 2> value) {
  switch (control) {
    case Control::kPowerLimit:
      return gpu.set_power_limit_mw(value[0]);
    case Control::kSmClocks:
      return gpu.lock_sm_clocks(value[0], value[1]);
    case Control::kMemoryClocks:
      return gpu.lock_memory_clocks(value[0], value[1]);
  }
  return {};
}

// Clock locks cannot be read back, so the state before the first lock is taken to be unlocked.
Result<void> restore_one(const Change& change) {
  switch (change.control) {
    case Control::kPowerLimit:
      return change.original ? change.gpu->set_power_limit_mw(*change.original)
                             : change.gpu->reset_power_limit();
    case Control::kSmClocks:
      return change.gpu->reset_sm_clocks();
    case Control::kMemoryClocks:
      return change.gpu->reset_memory_clocks();
  }
  return {};
}

}  // namespace

struct SettingsGuard::State {
  explicit State(SettingsGuardOptions guard_options)
      : options(std::move(guard_options)), owner_pid(::getpid()) {}

  Result<void> apply(Gpu& gpu, Control control, std::array<uint32_t, 2> value);
  Result<void> restore(Reason reason) noexcept;

  const SettingsGuardOptions options;
  const pid_t owner_pid;
  std::mutex mutex;  // guards everything below; held during device calls
  std::vector<Change> changes;
  std::atomic<bool> signal_restored{false};
};

namespace {

// Set by the exit hook: from then on no guard changes anything.
std::atomic<bool> g_exiting{false};

}  // namespace

Result<void> SettingsGuard::State::apply(Gpu& gpu, Control control, std::array<uint32_t, 2> value) {
  if (::getpid() != owner_pid) {
    return fail(
        ErrorCode::kState,
        "{}: this process (pid {}) was forked from the one that owns the GPU settings guard (pid {}); "
        "a forked child does not change the parent's GPUs",
        options.owner, ::getpid(), owner_pid);
  }
  std::lock_guard lock(mutex);
  if (g_exiting.load()) {
    return {};
  }
  auto change = std::find_if(changes.begin(), changes.end(),
                             [&](const Change& c) { return c.gpu == &gpu && c.control == control; });
  if (change != changes.end() && change->applied == value) {
    return {};
  }
  // The first value is read before the first change; it is kept only if the change is made.
  Change first{&gpu, control, std::nullopt, std::nullopt};
  if (change == changes.end() && control == Control::kPowerLimit &&
      options.power_limit_restore == PowerLimitRestore::kRecorded) {
    auto current = gpu.power_limit_mw();
    if (current) {
      first.original = *current;
    } else {
      log().warn("{}: cannot read the power limit of {} ({}); it will be restored to the default",
                 options.owner, gpu.label(), current.error().message());
    }
  }
  auto result = set_one(gpu, control, value);
  if (change == changes.end()) {
    if (!result) {
      return result;  // refused: the control is as it was, nothing to restore
    }
    changes.push_back(first);
    change = std::prev(changes.end());
  }
  // A refused change of a control changed before leaves it to be restored, at an unknown value.
  change->applied = result ? std::optional(value) : std::nullopt;
  return result;
}

Result<void> SettingsGuard::State::restore(Reason reason) noexcept {
  try {
    if (::getpid() != owner_pid) {
      return {};  // the GPUs are the parent's
    }
    std::lock_guard lock(mutex);
    if (changes.empty()) {
      return {};
    }
    std::optional<Error> first_error;
    std::vector<Change> failed;
    for (const Change& change : changes) {
      auto result = restore_one(change);
      if (!result) {
        log().warn("{}: cannot restore the {} of {}: {}", options.owner, describe(change.control),
                   change.gpu->label(), result.error().message());
        if (!first_error) {
          first_error = result.error();
        }
        Change kept = change;
        kept.applied.reset();
        failed.push_back(kept);
      }
    }
    if (failed.size() < changes.size()) {
      static constexpr std::array<const char*, 3> kReasons = {"restore", "process exit", "signal"};
      log().info("{}: restored {} GPU setting(s) ({})", options.owner, changes.size() - failed.size(),
                 kReasons[static_cast<size_t>(reason)]);
      if (reason == Reason::kSignal) {
        signal_restored.store(true);
      }
    }
    changes = std::move(failed);
    if (first_error) {
      return tl::make_unexpected(*first_error);
    }
    return {};
  } catch (...) {
    // Nothing may escape a destructor, an exit hook or the restorer thread.
    return fail(ErrorCode::kInternal, "{}: restoring GPU settings failed unexpectedly", options.owner);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Process-wide state

namespace {

constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};

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
  std::vector<std::shared_ptr<SettingsGuard::State>> guards;
  int signal_users = 0;
  bool exit_hook_registered = false;
  std::array<bool, kSignals.size()> installed{};
  int pipe_read_fd = -1;
};

// Never destroyed: the exit hook and the restorer thread may use it during static destruction.
Registry& registry() {
  static auto* instance = new Registry;
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

// Needs the registry's mutex. Each guard skips itself in a forked child.
void restore_all(Reason reason) {
  for (const auto& guard : registry().guards) {
    [[maybe_unused]] auto ignored = guard->restore(reason);  // failures are logged
  }
}

void on_exit_hook() {
  try {
    std::lock_guard lock(registry().mutex);
    g_exiting.store(true);
    restore_all(Reason::kExit);
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
    log().warn("received signal {}; restoring the GPU settings joule changed", message.signal_number);
    restore_all(Reason::kSignal);
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
        "cannot create a pipe for signal handling: GPU settings will not be restored on "
        "SIGINT/SIGTERM/SIGHUP");
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
        "cannot start the signal restorer thread ({}): GPU settings will not be restored on "
        "SIGINT/SIGTERM/SIGHUP",
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
// SettingsGuard

SettingsGuard::SettingsGuard(SettingsGuardOptions options)
    : state_(std::make_shared<State>(std::move(options))),
      handles_signals_(state_->options.restore_on_signals) {
  Registry& state = registry();
  std::lock_guard lock(state.mutex);
  if (!state.exit_hook_registered) {
    // The logger must outlive the hook: constructing it first makes it be destroyed after the hook runs.
    log();
    state.exit_hook_registered = std::atexit(on_exit_hook) == 0;
    if (!state.exit_hook_registered) {
      log().warn("cannot register an exit hook; GPU settings are restored on destruction only");
    }
  }
  state.guards.push_back(state_);
  if (handles_signals_ && ++state.signal_users == 1) {
    install_handlers_locked(state);
  }
}

SettingsGuard::~SettingsGuard() {
  try {
    Registry& state = registry();
    std::lock_guard lock(state.mutex);
    std::erase(state.guards, state_);
    if (handles_signals_ && --state.signal_users == 0) {
      uninstall_handlers_locked(state);
    }
  } catch (...) {
  }
  [[maybe_unused]] auto ignored = state_->restore(Reason::kCall);  // failures are logged
}

Result<void> SettingsGuard::set_power_limit_mw(Gpu& gpu, uint32_t power_limit_mw) {
  return state_->apply(gpu, Control::kPowerLimit, {power_limit_mw, 0});
}

Result<void> SettingsGuard::lock_sm_clocks(Gpu& gpu, uint32_t min_mhz, uint32_t max_mhz) {
  return state_->apply(gpu, Control::kSmClocks, {min_mhz, max_mhz});
}

Result<void> SettingsGuard::lock_memory_clocks(Gpu& gpu, uint32_t min_mhz, uint32_t max_mhz) {
  return state_->apply(gpu, Control::kMemoryClocks, {min_mhz, max_mhz});
}

Result<void> SettingsGuard::restore() {
  return state_->restore(Reason::kCall);
}

bool SettingsGuard::changed() const {
  std::lock_guard lock(state_->mutex);
  return !state_->changes.empty();
}

bool SettingsGuard::consume_signal_restore() {
  return state_->signal_restored.exchange(false);
}

bool SettingsGuard::signal_handler_installed(int signal_number) {
  struct sigaction current {};
  ::sigaction(signal_number, nullptr, &current);
  return is_ours(current);
}

}  // namespace joule::device
