// SPDX-License-Identifier: Apache-2.0
#include "joule/device/hw_check_report.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <sys/utsname.h>

#include "joule/device/json_forms.hpp"

namespace joule::device {

std::string kernel_description() {
  utsname name{};
  if (uname(&name) != 0) {
    return "unknown";
  }
  return fmt::format("{} {} {}", name.sysname, name.release, name.machine);
}

std::string hw_check_text(const DeviceSet& devices, const std::vector<GpuCheck>& checks,
                          const HwCheckReport& report) {
  std::string out = fmt::format("joule hardware check: joule {}, {}, {}\n", report.joule_version, report.time,
                                kernel_description());
  if (!report.fallback_note.empty()) {
    out += report.fallback_note + "\n";
  }
  out += "backends:\n" + backends_text(devices);
  for (const auto& check : checks) {
    out += fmt::format("GPU {} [{}] {}\n", check.info.index, check.info.backend, check.info.name);
    for (const auto& item : check.items) {
      out += fmt::format("  {} {:<16} {}\n", to_string(item.status), item.name, item.detail);
    }
  }
  out += fmt::format("summary: {} pass, {} warn, {} fail, {} skipped; no setting was changed\n",
                     count_status(checks, CheckStatus::kPass), count_status(checks, CheckStatus::kWarn),
                     count_status(checks, CheckStatus::kFail), count_status(checks, CheckStatus::kSkip));
  return out;
}

namespace {

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

std::string hw_check_json(const DeviceSet& devices, const std::vector<GpuCheck>& checks,
                          const HwCheckReport& report) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& check : checks) {
    nlohmann::json items = nlohmann::json::array();
    for (const auto& item : check.items) {
      items.push_back({{"check", item.name}, {"status", to_string(item.status)}, {"detail", item.detail}});
    }
    gpus.push_back({{"index", check.info.index},
                    {"backend", check.info.backend},
                    {"name", check.info.name},
                    {"uuid", check.info.uuid},
                    {"watched_s", check.watched_s},
                    {"energy_reads", check.energy_reads},
                    {"power_reads", check.power_reads},
                    {"counter_energy_j", optional_json(check.counter_energy_j)},
                    {"integrated_energy_j", optional_json(check.integrated_energy_j)},
                    {"power_update_period_s", optional_json(check.power_update_period_s)},
                    {"energy_update_period_s", optional_json(check.energy_update_period_s)},
                    {"checks", std::move(items)}});
  }
  nlohmann::json out = {{"joule_version", report.joule_version},
                        {"time", report.time},
                        {"kernel", kernel_description()},
                        {"simulated_fallback", !report.fallback_note.empty()},
                        {"note", report.fallback_note},
                        {"backends", backends_json(devices)},
                        {"gpus", std::move(gpus)},
                        {"summary",
                         {{"pass", count_status(checks, CheckStatus::kPass)},
                          {"warn", count_status(checks, CheckStatus::kWarn)},
                          {"fail", count_status(checks, CheckStatus::kFail)},
                          {"skip", count_status(checks, CheckStatus::kSkip)}}},
                        {"settings_changed", false}};
  return out.dump(2) + "\n";
}

std::string backends_text(const DeviceSet& devices) {
  std::string out;
  size_t width = 7;  // the names line up whatever backends were tried ("levelzero" is the longest)
  for (const auto& report : devices.reports) {
    width = std::max(width, report.backend.size());
  }
  for (const auto& report : devices.reports) {
    out += fmt::format("  {:<{}} {}  {}\n", report.backend, width,
                       report.ok ? fmt::format("{} device{}", report.devices, report.devices == 1 ? "" : "s")
                                 : std::string("unavailable"),
                       report.detail);
  }
  return out;
}

nlohmann::json backends_json(const DeviceSet& devices) {
  nlohmann::json backends = nlohmann::json::array();
  for (const auto& report : devices.reports) {
    backends.push_back(nlohmann::json(to_json(report)));
  }
  return backends;
}

}  // namespace joule::device
