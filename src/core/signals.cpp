// SPDX-License-Identifier: Apache-2.0
#include "joule/core/signals.hpp"

#include <algorithm>
#include <cerrno>

#include <pthread.h>

namespace joule {

BlockedSignals::BlockedSignals(std::initializer_list<int> signals) {
  sigemptyset(&set_);
  for (const int signal_number : signals) {
    sigaddset(&set_, signal_number);
  }
  pthread_sigmask(SIG_BLOCK, &set_, &previous_);
}

BlockedSignals::~BlockedSignals() {
  // Discard what is still pending, so that unblocking does not deliver it with its default action.
  const timespec zero{0, 0};
  while (sigtimedwait(&set_, nullptr, &zero) > 0) {
  }
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

std::optional<siginfo_t> BlockedSignals::wait(std::optional<Nanos> timeout) {
  siginfo_t info{};
  while (true) {
    int received = 0;
    if (timeout) {
      const int64_t ns = std::max<int64_t>(timeout->count(), 0);
      const timespec limit{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      received = sigtimedwait(&set_, &info, &limit);
    } else {
      received = sigwaitinfo(&set_, &info);
    }
    if (received > 0) {
      return info;
    }
    if (errno == EAGAIN) {
      return std::nullopt;
    }
    // EINTR: another signal interrupted the wait; wait again (a timeout restarts, which only lengthens it).
  }
}

bool sent_by_process(const siginfo_t& info) {
  return info.si_code <= 0;
}

}  // namespace joule
