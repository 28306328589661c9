// SPDX-License-Identifier: Apache-2.0
#include "joule/http/retry.hpp"

#include <algorithm>
#include <thread>

namespace joule::http {

bool retryable(const Failure& failure) {
  return failure.kind != Failure::Kind::kTooLarge;
}

bool retryable_status(int status) {
  return status == 502 || status == 503 || status == 504;
}

tl::expected<Response, Failure> with_retries(const RetryPolicy& policy, const Attempt& attempt) {
  const int attempts = std::max(policy.attempts, 1);
  auto wait = policy.backoff;
  for (int number = 0;; ++number) {
    if (number > 0) {
      std::this_thread::sleep_for(wait);
      wait = std::min(wait * 2, policy.max_backoff);
    }
    const bool last = number + 1 >= attempts;
    auto outcome = attempt(number, last);
    const bool again = outcome ? retryable_status(outcome->status) : retryable(outcome.error());
    if (last || !again) {
      return outcome;
    }
  }
}

}  // namespace joule::http
