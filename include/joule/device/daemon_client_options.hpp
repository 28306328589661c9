// SPDX-License-Identifier: Apache-2.0
// joule/device/daemon_client_options.hpp — how a connection to `joule daemon` behaves (DaemonClient,
// open_daemon_gpus(), open_daemon_cpus()). A header of its own so that DaemonGpu and DaemonCpu need neither
// joule/device/daemon_client.hpp nor nlohmann-json.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "joule/core/units.hpp"

namespace joule::device {

class DaemonClient;  // joule/device/daemon_client.hpp: the connection and its JSON wire protocol

/// How a DaemonClient talks to the daemon.
struct DaemonClientOptions {
  /// Sent in hello, shown in the daemon's log.
  std::string client_name = "joule";
  /// How long a request may wait for its response before the connection is given up, and how long
  /// connecting may take.
  Nanos timeout = std::chrono::seconds(10);
  /// Renew the lease on a background thread every lease/3, so that settings stay while this client lives
  /// even when it sends no request for a while. Without it the caller must send a request (any) before
  /// the lease runs out, or the daemon restores this connection's settings.
  bool renew_lease = true;
  /// The holder this client acts for (hello's `holder`; daemon_protocol::valid_holder_name()); empty:
  /// none, and the daemon restores this connection's settings as soon as it closes. With a holder they
  /// stay for one lease after the connection closes, and the next client of the same user that names the
  /// holder takes them over: a service that fails over to another process keeps its settings in force.
  std::string holder;
  /// Stream events kept while nobody reads them, per kind (power, CPU energy); beyond this the oldest go,
  /// counted in the next event of their stream and device (PowerEvent::dropped).
  size_t max_queued_events = 4096;

  // A daemon on the network (DaemonClient::connect("HOST:PORT"), `joule daemon --listen`; docs/fleet.md).
  // Each of these left empty is taken from its environment variable when set (in brackets).

  /// The authority of the daemon's certificate, PEM ($JOULE_DAEMON_CA; neither: the system's authorities).
  std::string tls_ca_file;
  /// This client's certificate and key, PEM, for mutual TLS ($JOULE_DAEMON_CERT, $JOULE_DAEMON_KEY).
  std::string tls_certificate_file;
  std::string tls_private_key_file;
  /// The bearer token itself; never logged.
  std::string token;
  /// A file holding the bearer token (its first word), not readable by other users
  /// ($JOULE_DAEMON_TOKEN_FILE); read at connect when `token` is empty.
  std::string token_file;
  /// Plain TCP instead of TLS, for a daemon started with --allow-plain-loopback (loopback addresses only).
  bool plain_tcp = false;
};

}  // namespace joule::device
