// SPDX-License-Identifier: Apache-2.0
#include "joule/device/daemon_gpu.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "joule/device/daemon_client.hpp"
#include "joule/device/visible_devices.hpp"

namespace joule::device {

namespace proto = daemon_protocol;
using nlohmann::json;

namespace {

constexpr int kMaxPhysicalIndex = 4095;
// How long one gpu_telemetry answer may serve later single readings (see DaemonGpu's comment).
constexpr auto kTelemetrySnapshotAge = std::chrono::milliseconds(100);

// Reads an unsigned integer field of a daemon result, with a message naming the request.
template <class T>
Result<T> member(const json& result, std::string_view name, std::string_view op) {
  const auto found = result.find(name);
  if (found == result.end() || !found->is_number_unsigned() ||
      found->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    return fail(ErrorCode::kParse, "joule daemon: the answer to '{}' has no valid '{}'", op, name);
  }
  return static_cast<T>(found->get<uint64_t>());
}

// One GPU of a list_devices answer.
struct RemoteGpu {
  int index = 0;
  int physical_index = 0;
  std::string backend;
  std::string name;
  std::string uuid;
  bool has_energy_counter = false;
};

Result<std::vector<RemoteGpu>> parse_devices(const json& result) {
  const auto gpus = result.find("gpus");
  if (gpus == result.end() || !gpus->is_array()) {
    return fail(ErrorCode::kParse, "joule daemon: the answer to 'list_devices' has no 'gpus' array");
  }
  std::vector<RemoteGpu> remote;
  for (const auto& entry : *gpus) {
    if (!entry.is_object()) {
      return fail(ErrorCode::kParse, "joule daemon: 'list_devices' lists a GPU that is not an object");
    }
    RemoteGpu gpu;
    const auto index = member<int>(entry, "index", "list_devices");
    const auto physical = member<int>(entry, "physical_index", "list_devices");
    if (!index || !physical) {
      return tl::make_unexpected(index ? physical.error() : index.error());
    }
    // A bound on physical indices keeps a confused daemon from making us allocate a huge UUID table.
    if (*physical > kMaxPhysicalIndex) {
      return fail(ErrorCode::kParse, "joule daemon: 'list_devices' lists physical GPU index {} (limit {})",
                  *physical, kMaxPhysicalIndex);
    }
    gpu.index = *index;
    gpu.physical_index = *physical;
    for (auto [field, target] :
         {std::pair{"backend", &gpu.backend}, std::pair{"name", &gpu.name}, std::pair{"uuid", &gpu.uuid}}) {
      const auto found = entry.find(field);
      if (found == entry.end() || !found->is_string()) {
        return fail(ErrorCode::kParse, "joule daemon: 'list_devices' lists a GPU without a string '{}'",
                    field);
      }
      *target = found->get<std::string>();
    }
    const auto counter = entry.find("has_energy_counter");
    gpu.has_energy_counter = counter != entry.end() && counter->is_boolean() && counter->get<bool>();
    remote.push_back(std::move(gpu));
  }
  return remote;
}

// Applies this process's visible-devices variable to the daemon's GPUs of one backend, by their physical
// indices and UUIDs. @return the selected GPUs in framework order.
Result<std::vector<const RemoteGpu*>> visible_of(const std::string& backend,
                                                 std::vector<const RemoteGpu*> gpus) {
  auto visible = JOULE_TRY(visible_devices_from_environment(backend));
  std::sort(gpus.begin(), gpus.end(),
            [](const RemoteGpu* a, const RemoteGpu* b) { return a->physical_index < b->physical_index; });
  const int last = gpus.empty() ? -1 : gpus.back()->physical_index;
  std::vector<std::string> uuids(static_cast<size_t>(last + 1));
  std::map<int, const RemoteGpu*> by_physical;
  for (const auto* gpu : gpus) {
    uuids[static_cast<size_t>(gpu->physical_index)] = gpu->uuid;
    by_physical[gpu->physical_index] = gpu;
  }
  auto order = resolve_visible_devices(visible, uuids);
  if (!order) {
    return tl::make_unexpected(order.error().with_context("GPUs of the joule daemon"));
  }
  std::vector<const RemoteGpu*> selected;
  for (const int physical : *order) {
    const auto found = by_physical.find(physical);
    if (found == by_physical.end()) {
      return fail(ErrorCode::kNotFound, "{} selects GPU {}, which the joule daemon does not serve",
                  visible.variable, physical);
    }
    selected.push_back(found->second);
  }
  return selected;
}

}  // namespace

DaemonGpu::DaemonGpu(GpuInfo info, std::shared_ptr<DaemonClient> client, int daemon_index)
    : Gpu(std::move(info)), client_(std::move(client)), daemon_index_(daemon_index) {}

namespace {

// What a daemon of an earlier release cannot do (DaemonClient::call_added()).
constexpr std::string_view kForwardMemoryClocks = "forward memory clocks";

// The clocks (MHz) listed in `field` of the answer to `op`.
Result<std::vector<uint32_t>> clock_list(const json& result, std::string_view field, std::string_view op) {
  const auto clocks = result.find(field);
  if (clocks == result.end() || !clocks->is_array()) {
    return fail(ErrorCode::kParse, "joule daemon: the answer to '{}' has no '{}' array", op, field);
  }
  std::vector<uint32_t> mhz;
  for (const auto& clock : *clocks) {
    if (!clock.is_number_unsigned() || clock.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
      return fail(ErrorCode::kParse, "joule daemon: '{}' holds a value that is not a clock", field);
    }
    mhz.push_back(static_cast<uint32_t>(clock.get<uint64_t>()));
  }
  return mhz;
}

// One request about GPU `daemon_index` that takes no other field.
Result<json> call(DaemonClient& client, int daemon_index, proto::Op op) {
  proto::Request request;
  request.op = op;
  request.gpu = daemon_index;
  return client.call(std::move(request));
}

}  // namespace

Result<uint64_t> DaemonGpu::do_energy_mj() {
  auto result = JOULE_TRY(call(*client_, daemon_index_, proto::Op::kEnergy));
  return member<uint64_t>(result, "energy_mj", "energy");
}

Result<uint32_t> DaemonGpu::do_power_mw() {
  auto result = JOULE_TRY(call(*client_, daemon_index_, proto::Op::kPower));
  return member<uint32_t>(result, "power_mw", "power");
}

Result<PowerLimitConstraints> DaemonGpu::do_power_limit_constraints() {
  auto result = JOULE_TRY(call(*client_, daemon_index_, proto::Op::kConstraints));
  const auto min_mw = member<uint32_t>(result, "min_mw", "constraints");
  const auto max_mw = member<uint32_t>(result, "max_mw", "constraints");
  const auto default_mw = member<uint32_t>(result, "default_mw", "constraints");
  for (const auto* field : {&min_mw, &max_mw, &default_mw}) {
    if (!*field) {
      return tl::make_unexpected(field->error());
    }
  }
  return PowerLimitConstraints{*min_mw, *max_mw, *default_mw};
}

Result<uint32_t> DaemonGpu::do_power_limit_mw() {
  auto result = JOULE_TRY(call(*client_, daemon_index_, proto::Op::kPowerLimit));
  return member<uint32_t>(result, "power_limit_mw", "power_limit");
}

Result<void> DaemonGpu::do_set_power_limit_mw(uint32_t power_limit_mw) {
  snapshot_.reset();  // readings after a change must show it
  proto::Request request;
  request.op = proto::Op::kSetPowerLimit;
  request.gpu = daemon_index_;
  request.power_limit_mw = power_limit_mw;
  JOULE_TRY(client_->call(std::move(request)));
  return {};
}

Result<std::vector<uint32_t>> DaemonGpu::do_supported_sm_clocks_mhz() {
  const auto result = JOULE_TRY(call(*client_, daemon_index_, proto::Op::kClocks));
  return clock_list(result, "supported_sm_clocks_mhz", "clocks");
}

Result<void> DaemonGpu::do_lock_sm_clocks(uint32_t min_mhz, uint32_t max_mhz) {
  snapshot_.reset();
  proto::Request request;
  request.op = proto::Op::kLockSmClocks;
  request.gpu = daemon_index_;
  request.min_mhz = min_mhz;
  request.max_mhz = max_mhz;
  JOULE_TRY(client_->call(std::move(request)));
  return {};
}

Result<void> DaemonGpu::do_reset_sm_clocks() {
  snapshot_.reset();
  JOULE_TRY(call(*client_, daemon_index_, proto::Op::kResetSmClocks));
  return {};
}

Result<std::vector<uint32_t>> DaemonGpu::do_supported_memory_clocks_mhz() {
  proto::Request request;
  request.op = proto::Op::kMemoryClocks;
  request.gpu = daemon_index_;
  const auto result = JOULE_TRY(client_->call_added(std::move(request), kForwardMemoryClocks));
  return clock_list(result, "supported_memory_clocks_mhz", "memory_clocks");
}

Result<void> DaemonGpu::do_lock_memory_clocks(uint32_t min_mhz, uint32_t max_mhz) {
  snapshot_.reset();
  proto::Request request;
  request.op = proto::Op::kLockMemoryClocks;
  request.gpu = daemon_index_;
  request.min_mhz = min_mhz;
  request.max_mhz = max_mhz;
  JOULE_TRY(client_->call_added(std::move(request), kForwardMemoryClocks));
  return {};
}

Result<void> DaemonGpu::do_reset_memory_clocks() {
  snapshot_.reset();
  proto::Request request;
  request.op = proto::Op::kResetMemoryClocks;
  request.gpu = daemon_index_;
  JOULE_TRY(client_->call_added(std::move(request), kForwardMemoryClocks));
  return {};
}

namespace {

// One field of the module_power answer.
Result<uint64_t> module_field(DaemonClient& client, int daemon_index, std::string_view field) {
  proto::Request request;
  request.op = proto::Op::kModulePower;
  request.gpu = daemon_index;
  const auto result = JOULE_TRY(client.call_added(std::move(request), "forward module power and energy"));
  return proto::parse_module_field(result, field);
}

}  // namespace

Result<uint32_t> DaemonGpu::do_module_power_mw() {
  const uint64_t power_mw = JOULE_TRY(module_field(*client_, daemon_index_, "module_power_mw"));
  if (power_mw > std::numeric_limits<uint32_t>::max()) {
    return fail(ErrorCode::kParse, "joule daemon: 'module_power_mw' {} is not a power in mW", power_mw);
  }
  return static_cast<uint32_t>(power_mw);
}

Result<uint64_t> DaemonGpu::do_module_energy_mj() {
  return module_field(*client_, daemon_index_, "module_energy_mj");
}

Result<double> DaemonGpu::do_set_simulated_busy(bool busy) {
  snapshot_.reset();  // its power changes now
  proto::Request request;
  request.op = proto::Op::kSimulateBusy;
  request.gpu = daemon_index_;
  request.busy = busy;
  auto result = JOULE_TRY(client_->call(std::move(request)));
  const auto slowdown = result.find("slowdown");
  if (slowdown == result.end() || !slowdown->is_number() || !(slowdown->get<double>() >= 1) ||
      !std::isfinite(slowdown->get<double>())) {
    return fail(ErrorCode::kParse, "joule daemon: the answer to 'simulate_busy' has no valid 'slowdown'");
  }
  return slowdown->get<double>();
}

Result<const GpuTelemetry*> DaemonGpu::telemetry_for(TelemetryField field) {
  const auto& fields = telemetry_fields();
  const auto position = static_cast<size_t>(std::find(fields.begin(), fields.end(), field) - fields.begin());
  const auto now = std::chrono::steady_clock::now();
  // A sweep (telemetry()) asks for the fields in order: after the first, each is answered by the same
  // request. Asked again, or late, a field gets a new reading.
  if (!snapshot_ || position < snapshot_next_field_ || now - snapshot_time_ > kTelemetrySnapshotAge) {
    snapshot_.reset();
    proto::Request request;
    request.op = proto::Op::kGpuTelemetry;
    request.gpu = daemon_index_;
    auto result = JOULE_TRY(client_->call(std::move(request)));
    snapshot_ = JOULE_TRY(proto::parse_telemetry_result(result));
    snapshot_time_ = now;
  }
  snapshot_next_field_ = position + 1;
  return &*snapshot_;
}

namespace {

// The value of one telemetry field of `reading`, or the error that left it empty.
template <class T>
Result<T> telemetry_field(Result<const GpuTelemetry*> reading, TelemetryField field,
                          const std::optional<T> GpuTelemetry::*slot) {
  if (!reading) {
    return tl::make_unexpected(reading.error());
  }
  const GpuTelemetry& telemetry = **reading;
  if (const auto& value = telemetry.*slot) {
    return *value;
  }
  const Error* why = telemetry.error(field);
  return tl::make_unexpected(why != nullptr ? *why
                                            : Error(ErrorCode::kInternal, "telemetry field without error"));
}

}  // namespace

Result<double> DaemonGpu::do_temperature_c() {
  return telemetry_field(telemetry_for(TelemetryField::kTemperature), TelemetryField::kTemperature,
                         &GpuTelemetry::temperature_c);
}

Result<uint32_t> DaemonGpu::do_sm_clock_mhz() {
  return telemetry_field(telemetry_for(TelemetryField::kSmClock), TelemetryField::kSmClock,
                         &GpuTelemetry::sm_clock_mhz);
}

Result<uint32_t> DaemonGpu::do_memory_clock_mhz() {
  return telemetry_field(telemetry_for(TelemetryField::kMemoryClock), TelemetryField::kMemoryClock,
                         &GpuTelemetry::memory_clock_mhz);
}

Result<uint32_t> DaemonGpu::do_gpu_utilization_pct() {
  return telemetry_field(telemetry_for(TelemetryField::kGpuUtilization), TelemetryField::kGpuUtilization,
                         &GpuTelemetry::gpu_utilization_pct);
}

Result<uint32_t> DaemonGpu::do_memory_utilization_pct() {
  return telemetry_field(telemetry_for(TelemetryField::kMemoryUtilization),
                         TelemetryField::kMemoryUtilization, &GpuTelemetry::memory_utilization_pct);
}

Result<uint64_t> DaemonGpu::do_clock_event_reasons() {
  return telemetry_field(telemetry_for(TelemetryField::kClockEventReasons),
                         TelemetryField::kClockEventReasons, &GpuTelemetry::clock_event_reasons);
}

Result<uint32_t> DaemonGpu::do_memory_power_mw() {
  return telemetry_field(telemetry_for(TelemetryField::kMemoryPower), TelemetryField::kMemoryPower,
                         &GpuTelemetry::memory_power_mw);
}

Result<std::vector<std::unique_ptr<Gpu>>> open_daemon_gpus(const std::string& socket_path,
                                                           const DaemonClientOptions& options) {
  auto client = JOULE_TRY(DaemonClient::connect(socket_path, options));
  return open_daemon_gpus(client);
}

Result<std::vector<std::unique_ptr<Gpu>>> open_daemon_gpus(const std::shared_ptr<DaemonClient>& client,
                                                           bool apply_visible_devices) {
  proto::Request list;
  list.op = proto::Op::kListDevices;
  auto result = JOULE_TRY((client)->call(list));
  auto remote = JOULE_TRY(parse_devices(result));
  // Group by backend in the daemon's order: each vendor has its own visible-devices variable.
  std::vector<std::string> backends;
  for (const auto& gpu : remote) {
    if (std::find(backends.begin(), backends.end(), gpu.backend) == backends.end()) {
      backends.push_back(gpu.backend);
    }
  }
  std::vector<std::unique_ptr<Gpu>> gpus;
  for (const auto& backend : backends) {
    std::vector<const RemoteGpu*> of_backend;
    for (const auto& gpu : remote) {
      if (gpu.backend == backend) {
        of_backend.push_back(&gpu);
      }
    }
    std::vector<const RemoteGpu*> selected = of_backend;
    if (apply_visible_devices) {
      auto visible = JOULE_TRY(visible_of(backend, std::move(of_backend)));
      selected = std::move(visible);
    }
    for (const auto* gpu : selected) {
      GpuInfo info;
      info.backend = "daemon";
      info.index = static_cast<int>(gpus.size());
      info.physical_index = gpu->physical_index;
      info.name = gpu->name;
      info.uuid = gpu->uuid;
      info.has_energy_counter = gpu->has_energy_counter;
      gpus.push_back(std::make_unique<DaemonGpu>(std::move(info), client, gpu->index));
    }
  }
  return gpus;
}

}  // namespace joule::device
