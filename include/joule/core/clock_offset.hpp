// SPDX-License-Identifier: Apache-2.0
// joule/core/clock_offset.hpp — how far another machine's clock is from this one's, from request/response
// timestamps, as NTP estimates it: the remote clock read between a request leaving and its answer arriving
// was, at best, read at the midpoint; the round trip bounds the error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "joule/core/error.hpp"

namespace joule {

/// One exchange with a remote clock: this machine's clock when the request left and when the answer
/// arrived, and the remote clock's reading it carried; ns since the Unix epoch, all three.
struct ClockProbe {
  int64_t sent_ns = 0;
  int64_t remote_ns = 0;
  int64_t received_ns = 0;
};

/// The remote clock's offset from this one.
struct ClockOffset {
  double offset_s = 0;       ///< remote − local, s
  double uncertainty_s = 0;  ///< the true offset lies within offset_s ± this: half the round trip used, s
  double round_trip_s = 0;   ///< of the probe used, s
  size_t probes = 0;         ///< how many probes were taken
};

/// NTP's clock filter: of `probes`, the one with the shortest round trip (the least queueing, so the
/// tightest bound) gives offset = remote − (sent + received) / 2 ± round trip / 2.
/// @return kInvalidArgument for no probe, or a probe answered before it was sent (a local clock that went
/// back: its round trip means nothing).
Result<ClockOffset> estimate_clock_offset(std::span<const ClockProbe> probes);

}  // namespace joule
