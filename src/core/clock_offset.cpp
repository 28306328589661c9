// SPDX-License-Identifier: Apache-2.0
#include "joule/core/clock_offset.hpp"

namespace joule {

Result<ClockOffset> estimate_clock_offset(std::span<const ClockProbe> probes) {
  if (probes.empty()) {
    return fail(ErrorCode::kInvalidArgument, "no clock probe to estimate an offset from");
  }
  const ClockProbe* best = &probes.front();
  for (size_t i = 0; i < probes.size(); ++i) {
    const ClockProbe& probe = probes[i];
    if (probe.received_ns < probe.sent_ns) {
      return fail(ErrorCode::kInvalidArgument,
                  "clock probe {} was answered {} ns before it was sent: the local clock went back", i + 1,
                  probe.sent_ns - probe.received_ns);
    }
    if (probe.received_ns - probe.sent_ns < best->received_ns - best->sent_ns) {
      best = &probe;
    }
  }
  const int64_t round_trip_ns = best->received_ns - best->sent_ns;
  // In integers (a double holds an epoch in ns only to 256 ns): remote − sent − round trip / 2.
  const int64_t offset_ns = (best->remote_ns - best->sent_ns) - round_trip_ns / 2;
  ClockOffset offset;
  offset.offset_s = static_cast<double>(offset_ns) * 1e-9;
  offset.round_trip_s = static_cast<double>(round_trip_ns) * 1e-9;
  offset.uncertainty_s = offset.round_trip_s / 2;
  offset.probes = probes.size();
  return offset;
}

}  // namespace joule
