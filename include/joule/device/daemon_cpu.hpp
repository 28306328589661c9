// SPDX-License-Identifier: Apache-2.0
// joule/device/daemon_cpu.hpp — CPU packages reached through `joule daemon` (the device/daemon backend): the
// RAPL energy counters that only root may read since Linux 5.10, read by the daemon for its peers
// (docs/daemon.md). GPUs served by the daemon: joule/device/daemon_gpu.hpp.
//
//   auto cpus = joule::device::open_daemon_cpus("/run/joule/joule.sock");
//   (*cpus)[0]->package_energy_mj();
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/cpu.hpp"
#include "joule/device/daemon_client_options.hpp"

namespace joule::device {

/// A CPU package served by `joule daemon` (its RAPL counters): each reading is one cpu_energy request on a
/// shared DaemonClient. info().backend is "daemon"; index (the package index), name and has_dram are the
/// daemon's, and so are the counter resets of package_reading() and dram_reading() (none from a daemon that
/// does not report them). Errors as DaemonGpu's.
class DaemonCpu final : public Cpu {
 public:
  DaemonCpu(CpuInfo info, std::shared_ptr<DaemonClient> client);

  DaemonClient& client() const { return *client_; }

 protected:
  Result<uint64_t> do_package_energy_mj() override;
  Result<uint64_t> do_dram_energy_mj() override;
  Result<CpuEnergyReading> do_package_reading() override;
  Result<CpuEnergyReading> do_dram_reading() override;

 private:
  std::shared_ptr<DaemonClient> client_;
};

/// Connects to the daemon at `socket_path` and opens every CPU package whose energy it serves, in the
/// daemon's order (by package index). @return kNotFound if it serves none, with the daemon's reason (e.g.
/// no RAPL driver); kPermissionDenied for a peer without the read right; kInvalidArgument ("unknown op")
/// for a daemon of a release without CPU energy; else errors as DaemonClient::connect().
Result<std::vector<std::unique_ptr<Cpu>>> open_daemon_cpus(const std::string& socket_path,
                                                           const DaemonClientOptions& options = {});
/// As above, on a connection already made.
Result<std::vector<std::unique_ptr<Cpu>>> open_daemon_cpus(const std::shared_ptr<DaemonClient>& client);

}  // namespace joule::device
