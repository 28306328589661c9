// SPDX-License-Identifier: Apache-2.0
// Waiting between attempts of a transaction that conflicted with another one: exponential with jitter, so
// two transactions that deadlocked on each other do not collide again in lockstep.
#pragma once

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

namespace joule::store {

class Backoff {
 public:
  Backoff(std::chrono::microseconds first, std::chrono::microseconds most) : next_(first), most_(most) {}

  /// Sleeps for the current delay (±50% jitter), then doubles it up to the maximum.
  void sleep() {
    thread_local std::minstd_rand random(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.5, 1.5);
    const auto delay =
        std::chrono::duration<double, std::micro>(static_cast<double>(next_.count()) * jitter(random));
    std::this_thread::sleep_for(delay);
    next_ = std::min(next_ * 2, most_);
  }

 private:
  std::chrono::microseconds next_;
  std::chrono::microseconds most_;
};

}  // namespace joule::store
