// SPDX-License-Identifier: Apache-2.0
#include "joule/daemon/metrics.hpp"

namespace joule::daemon {

DaemonMetrics::DaemonMetrics(metrics::MetricsRegistry& registry)
    : accepted_(prometheus::BuildCounter()
                    .Name("joule_daemon_connections_accepted_total")
                    .Help("Client connections the daemon accepted on its Unix socket and network listeners")
                    .Register(registry.registry())
                    .Add({})),
      open_(prometheus::BuildGauge()
                .Name("joule_daemon_connections_open")
                .Help("Client connections open now")
                .Register(registry.registry())
                .Add({})),
      requests_(prometheus::BuildCounter()
                    .Name("joule_daemon_requests_total")
                    .Help("Request lines the daemon answered")
                    .Register(registry.registry())
                    .Add({})),
      refused_(prometheus::BuildCounter()
                   .Name("joule_daemon_refused_requests_total")
                   .Help("Control requests refused for lack of the right")
                   .Register(registry.registry())
                   .Add({})),
      changes_(
          prometheus::BuildCounter()
              .Name("joule_daemon_setting_changes_total")
              .Help("GPU settings changed at a client's request, by setting (power_limit_mw, sm_clocks_mhz)")
              .Register(registry.registry())),
      restores_(prometheus::BuildCounter()
                    .Name("joule_daemon_restores_total")
                    .Help("GPU settings put back when their owner went, by setting and reason (reset, "
                          "disconnected, lease-expired, shutdown, recovered)")
                    .Register(registry.registry())),
      restore_failures_(prometheus::BuildCounter()
                            .Name("joule_daemon_restore_failures_total")
                            .Help("GPU settings the daemon failed to put back, by setting and reason")
                            .Register(registry.registry())),
      samples_sent_(prometheus::BuildCounter()
                        .Name("joule_daemon_stream_samples_total")
                        .Help("Power samples the daemon wrote to stream subscribers (one per GPU and period)")
                        .Register(registry.registry())
                        .Add({})),
      samples_dropped_(prometheus::BuildCounter()
                           .Name("joule_daemon_stream_samples_dropped_total")
                           .Help("Power samples skipped for subscribers that read too slowly (each is told "
                                 "how many in its next event)")
                           .Register(registry.registry())
                           .Add({})),
      network_refusals_(prometheus::BuildCounter()
                            .Name("joule_daemon_network_refusals_total")
                            .Help("Network peers the daemon refused, by reason (tls: a failed handshake or "
                                  "certificate; authentication: no or an unknown token or certificate name; "
                                  "handshake-timeout)")
                            .Register(registry.registry())) {}

void DaemonMetrics::connection_opened() {
  accepted_.Increment();
  open_.Increment();
}

void DaemonMetrics::connection_closed() {
  open_.Decrement();
}

void DaemonMetrics::request() {
  requests_.Increment();
}

void DaemonMetrics::stream_samples(uint64_t sent, uint64_t dropped) {
  samples_sent_.Increment(static_cast<double>(sent));
  samples_dropped_.Increment(static_cast<double>(dropped));
}

void DaemonMetrics::audited(const AuditEntry& entry) {
  if (entry.action == "set") {
    changes_.Add({{"setting", entry.setting}}).Increment();
  } else if (entry.action == "restore") {
    restores_.Add({{"setting", entry.setting}, {"reason", entry.reason}}).Increment();
  } else if (entry.action == "restore-failed") {
    restore_failures_.Add({{"setting", entry.setting}, {"reason", entry.reason}}).Increment();
  } else if (entry.action == "refused" && entry.reason == "permission") {
    refused_.Increment();
  } else if (entry.action == "refused") {
    network_refusals_.Add({{"reason", entry.reason}}).Increment();
  }
}

}  // namespace joule::daemon
