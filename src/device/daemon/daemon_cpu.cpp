// SPDX-License-Identifier: Apache-2.0
// CPU packages served by `joule daemon`: the RAPL counters only root may read since Linux 5.10, read by the
// daemon for its peers (list_cpus, cpu_energy).
#include "joule/device/daemon_cpu.hpp"

#include <limits>

#include <fmt/format.h>

#include "joule/device/daemon_client.hpp"

namespace joule::device {

namespace proto = daemon_protocol;
using nlohmann::json;

namespace {

// One energy field of a cpu_energy answer, mJ.
Result<uint64_t> cpu_energy_member(const json& result, std::string_view name) {
  const auto found = result.find(name);
  if (found == result.end() || !found->is_number_unsigned()) {
    return fail(ErrorCode::kParse, "joule daemon: the answer to 'cpu_energy' has no valid '{}'", name);
  }
  return found->get<uint64_t>();
}

// One domain's reading of a cpu_energy answer: its energy and counter resets (a daemon that does not report
// resets reports none).
Result<CpuEnergyReading> cpu_reading_member(const json& result, std::string_view energy,
                                            std::string_view resets) {
  CpuEnergyReading reading;
  reading.energy_mj = JOULE_TRY(cpu_energy_member(result, energy));
  const auto count = result.find(resets);
  if (count != result.end() && !count->is_null()) {
    if (!count->is_number_unsigned()) {
      return fail(ErrorCode::kParse, "joule daemon: the answer to 'cpu_energy' has no valid '{}'", resets);
    }
    reading.resets = count->get<uint64_t>();
  }
  const auto why = result.find("counter_reset");
  if (reading.resets > 0 && why != result.end() && why->is_string()) {
    reading.last_reset = "joule daemon: " + why->get<std::string>();
  }
  return reading;
}

Result<json> cpu_energy(DaemonClient& client, int index) {
  proto::Request request;
  request.op = proto::Op::kCpuEnergy;
  request.cpu = index;
  return client.call(std::move(request));
}

// The CPUs of a list_cpus answer.
Result<std::vector<CpuInfo>> parse_cpus(const json& result) {
  const auto cpus = result.find("cpus");
  if (cpus == result.end() || !cpus->is_array()) {
    return fail(ErrorCode::kParse, "joule daemon: the answer to 'list_cpus' has no 'cpus' array");
  }
  std::vector<CpuInfo> infos;
  for (const auto& entry : *cpus) {
    const auto index = entry.is_object() ? entry.find("index") : entry.end();
    const auto name = entry.is_object() ? entry.find("name") : entry.end();
    if (!entry.is_object() || index == entry.end() || !index->is_number_unsigned() ||
        index->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int>::max()) ||
        name == entry.end() || !name->is_string()) {
      return fail(ErrorCode::kParse,
                  "joule daemon: 'list_cpus' lists a CPU without an integer 'index' and a string 'name'");
    }
    CpuInfo info;
    info.backend = "daemon";
    info.index = static_cast<int>(index->get<uint64_t>());
    info.name = name->get<std::string>();
    const auto dram = entry.find("has_dram");
    info.has_dram = dram != entry.end() && dram->is_boolean() && dram->get<bool>();
    infos.push_back(std::move(info));
  }
  return infos;
}

}  // namespace

DaemonCpu::DaemonCpu(CpuInfo info, std::shared_ptr<DaemonClient> client)
    : Cpu(std::move(info)), client_(std::move(client)) {}

Result<uint64_t> DaemonCpu::do_package_energy_mj() {
  auto result = JOULE_TRY(cpu_energy(*client_, info().index));
  return cpu_energy_member(result, "package_energy_mj");
}

Result<CpuEnergyReading> DaemonCpu::do_package_reading() {
  auto result = JOULE_TRY(cpu_energy(*client_, info().index));
  return cpu_reading_member(result, "package_energy_mj", "package_counter_resets");
}

Result<CpuEnergyReading> DaemonCpu::do_dram_reading() {
  auto result = JOULE_TRY(cpu_energy(*client_, info().index));
  const auto dram = result.find("dram_energy_mj");
  if (dram != result.end() && dram->is_null()) {
    return fail(ErrorCode::kNotSupported, "joule daemon: {} has no DRAM energy domain on the daemon",
                label());
  }
  return cpu_reading_member(result, "dram_energy_mj", "dram_counter_resets");
}

Result<uint64_t> DaemonCpu::do_dram_energy_mj() {
  auto result = JOULE_TRY(cpu_energy(*client_, info().index));
  const auto dram = result.find("dram_energy_mj");
  if (dram != result.end() && dram->is_null()) {
    return fail(ErrorCode::kNotSupported, "joule daemon: {} has no DRAM energy domain on the daemon",
                label());
  }
  return cpu_energy_member(result, "dram_energy_mj");
}

Result<std::vector<std::unique_ptr<Cpu>>> open_daemon_cpus(const std::string& socket_path,
                                                           const DaemonClientOptions& options) {
  auto client = JOULE_TRY(DaemonClient::connect(socket_path, options));
  return open_daemon_cpus(client);
}

Result<std::vector<std::unique_ptr<Cpu>>> open_daemon_cpus(const std::shared_ptr<DaemonClient>& client) {
  proto::Request list;
  list.op = proto::Op::kListCpus;
  auto result = JOULE_TRY(client->call(list));
  auto infos = JOULE_TRY(parse_cpus(result));
  if (infos.empty()) {
    const auto reason = result.find("reason");
    return fail(ErrorCode::kNotFound, "the joule daemon at {} serves no CPU energy counters: {}",
                client->socket_path(),
                reason != result.end() && reason->is_string() ? reason->get<std::string>()
                                                              : std::string("it did not say why"));
  }
  std::vector<std::unique_ptr<Cpu>> cpus;
  cpus.reserve(infos.size());
  for (auto& info : infos) {
    cpus.push_back(std::make_unique<DaemonCpu>(std::move(info), client));
  }
  return cpus;
}

}  // namespace joule::device
