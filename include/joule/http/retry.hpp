// SPDX-License-Identifier: Apache-2.0
// joule/http/retry.hpp — retrying a request that got no answer, or a "try again" answer (502, 503, 504),
// with a doubling wait between attempts. Only a caller whose request is safe to send twice may retry it
// (joule serve's routes are, through their request id).
#pragma once

#include <chrono>
#include <functional>

#include <tl/expected.hpp>

#include "joule/http/connection.hpp"

namespace joule::http {

struct RetryPolicy {
  int attempts = 1;                             ///< attempts in all (≥ 1)
  std::chrono::milliseconds backoff{50};        ///< the wait before the second attempt, doubled each time…
  std::chrono::milliseconds max_backoff{2000};  ///< … up to this
};

/// @return whether a request that failed so may succeed if sent again: no answer came (refused, timed out,
/// cut, a TLS failure), not one over the cap (the server would send the same again).
bool retryable(const Failure& failure);

/// @return whether `status` says "try again" (502, 503, 504: a proxy without its upstream, an overloaded
/// or restarting server).
bool retryable_status(int status);

/// One attempt: its number (0 first) and whether it is the last one allowed.
using Attempt = std::function<tl::expected<Response, Failure>(int attempt, bool last)>;

/// Calls `attempt` until it gives an outcome that is not retried (a response whose status is not
/// retryable_status(), a failure that is not retryable()) or `policy.attempts` are made, waiting backoff
/// between attempts (first policy.backoff, doubled, at most policy.max_backoff).
/// @return the last outcome.
tl::expected<Response, Failure> with_retries(const RetryPolicy& policy, const Attempt& attempt);

}  // namespace joule::http
