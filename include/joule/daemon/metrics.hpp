// SPDX-License-Identifier: Apache-2.0
// joule/daemon/metrics.hpp — the Prometheus metrics of `joule daemon` (docs/metrics.md): connections,
// requests, setting changes and restores, next to its GPUs' metrics (metrics::GpuMetrics).
#pragma once

#include <string_view>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "joule/daemon/audit.hpp"
#include "joule/metrics/registry.hpp"

namespace joule::daemon {

/// | metric | type | labels |
/// |---|---|---|
/// | `joule_daemon_connections_accepted_total` | counter | – |
/// | `joule_daemon_connections_open` | gauge | – |
/// | `joule_daemon_requests_total` | counter | – |
/// | `joule_daemon_refused_requests_total` | counter | – |
/// | `joule_daemon_setting_changes_total` | counter | setting |
/// | `joule_daemon_restores_total` | counter | setting, reason |
/// | `joule_daemon_restore_failures_total` | counter | setting, reason |
/// | `joule_daemon_stream_samples_total` | counter | – |
/// | `joule_daemon_stream_samples_dropped_total` | counter | – |
/// | `joule_daemon_network_refusals_total` | counter | reason |
///
/// Fed by the daemon's event loop and its audit log (every audited set, restore and refusal); read by a
/// scrape on another thread. Thread-safe.
class DaemonMetrics {
 public:
  /// Registers the families in `registry` (which must outlive this object), beside the GPUs' metrics.
  explicit DaemonMetrics(metrics::MetricsRegistry& registry);

  void connection_opened();
  void connection_closed();
  void request();
  /// Counts one audit-log entry by its action ("set", "restore", "restore-failed", "refused": a request
  /// refused for lack of the right, or a network peer refused by its reason (tls, authentication,
  /// handshake-timeout); "release", a value given up while another owner's stays in force, changes nothing
  /// and is not counted).
  void audited(const AuditEntry& entry);
  /// Counts stream samples: `sent` written to subscribers, `dropped` skipped for subscribers that read too
  /// slowly (their unread output over the bound).
  void stream_samples(uint64_t sent, uint64_t dropped);

 private:
  prometheus::Counter& accepted_;
  prometheus::Gauge& open_;
  prometheus::Counter& requests_;
  prometheus::Counter& refused_;
  prometheus::Family<prometheus::Counter>& changes_;
  prometheus::Family<prometheus::Counter>& restores_;
  prometheus::Family<prometheus::Counter>& restore_failures_;
  prometheus::Counter& samples_sent_;
  prometheus::Counter& samples_dropped_;
  prometheus::Family<prometheus::Counter>& network_refusals_;
};

}  // namespace joule::daemon
