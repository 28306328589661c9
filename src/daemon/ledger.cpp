// SPDX-License-Identifier: Apache-2.0
#include "joule/daemon/ledger.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "joule/core/file.hpp"
#include "joule/core/log.hpp"

namespace joule::daemon {

namespace {

constexpr std::string_view kPowerSetting = "power_limit_mw";
constexpr std::string_view kClockSetting = "sm_clocks_mhz";

std::string audit_value(uint32_t power_mw) {
  return std::to_string(power_mw);
}

std::string audit_value(const std::optional<SmClockLock>& lock) {
  return lock ? fmt::format("{}-{}", lock->min_mhz, lock->max_mhz) : std::string("unlocked");
}

std::string human_value(uint32_t power_mw) {
  return device::format_watts(power_mw);
}

std::string human_value(const std::optional<SmClockLock>& lock) {
  return lock ? fmt::format("{}-{} MHz", lock->min_mhz, lock->max_mhz) : std::string("unlocked");
}

std::string_view human_setting(std::string_view setting) {
  return setting == kPowerSetting ? "power limit" : "SM clocks";
}

}  // namespace

std::string_view to_string(RestoreReason reason) {
  switch (reason) {
    case RestoreReason::kReset:
      return "reset";
    case RestoreReason::kDisconnected:
      return "disconnected";
    case RestoreReason::kLeaseExpired:
      return "lease-expired";
    case RestoreReason::kShutdown:
      return "shutdown";
    case RestoreReason::kRecovered:
      return "recovered";
  }
  return "unknown";
}

SettingsLedger::SettingsLedger(std::vector<device::Gpu*> gpus, AuditLog& audit)
    : gpus_(std::move(gpus)), audit_(audit), power_(gpus_.size()), clocks_(gpus_.size()) {}

void SettingsLedger::audit(std::string action, const Owner& owner, size_t gpu, std::string_view setting,
                           std::string old_value, std::string new_value, std::string_view reason,
                           std::string detail) {
  AuditEntry entry;
  entry.action = std::move(action);
  entry.gpu = static_cast<int>(gpu);
  entry.setting = std::string(setting);
  entry.old_value = std::move(old_value);
  entry.new_value = std::move(new_value);
  entry.connection = owner.connection;
  entry.uid = owner.uid;
  entry.pid = owner.pid;
  entry.reason = std::string(reason);
  entry.detail = std::move(detail);
  audit_.record(entry);
}

Result<void> SettingsLedger::apply(size_t gpu, PowerValue value) {
  return gpus_[gpu]->set_power_limit_mw(value);
}

Result<void> SettingsLedger::apply(size_t gpu, const ClockValue& value) {
  return value ? gpus_[gpu]->lock_sm_clocks(value->min_mhz, value->max_mhz) : gpus_[gpu]->reset_sm_clocks();
}

template <class Value>
Result<void> SettingsLedger::set(Slot<Value>& slot, const Owner& owner, size_t gpu, std::string_view setting,
                                 Value value, Value original_if_unowned) {
  const bool unowned = slot.holders.empty();
  const Value before = unowned ? original_if_unowned : slot.holders.back().value;
  if (auto applied = apply(gpu, value); !applied) {
    return applied;
  }
  if (unowned) {
    slot.original = original_if_unowned;
  }
  std::erase_if(slot.holders,
                [&owner](const Holding<Value>& h) { return h.owner.connection == owner.connection; });
  slot.holders.push_back(Holding<Value>{owner, value});
  audit("set", owner, gpu, setting, audit_value(before), audit_value(value), "request");
  if (unowned) {
    save_state();
  }
  return {};
}

template <class Value>
std::optional<std::string> SettingsLedger::release(Slot<Value>& slot, const Owner& owner, size_t gpu,
                                                   std::string_view setting, RestoreReason reason,
                                                   std::optional<Error>* error) {
  const auto found =
      std::find_if(slot.holders.begin(), slot.holders.end(),
                   [&owner](const Holding<Value>& h) { return h.owner.connection == owner.connection; });
  if (found == slot.holders.end()) {
    return std::nullopt;
  }
  const bool in_force = found + 1 == slot.holders.end();
  const Holding<Value> released = *found;
  slot.holders.erase(found);
  const std::string label = gpus_[gpu]->label();
  if (!in_force) {
    // Someone else's later value is in force: the device stays as it is.
    const Holding<Value>& top = slot.holders.back();
    audit("release", released.owner, gpu, setting, audit_value(top.value), audit_value(top.value),
          to_string(reason), fmt::format("connection {} keeps its value in force", top.owner.connection));
    return fmt::format("{} {}: {} given up ({} of connection {} stays)", label, human_setting(setting),
                       human_value(released.value), human_value(top.value), top.owner.connection);
  }
  const Value target = slot.holders.empty() ? slot.original : slot.holders.back().value;
  auto applied = apply(gpu, target);
  if (slot.holders.empty()) {
    save_state();
  }
  if (!applied) {
    audit("restore-failed", released.owner, gpu, setting, audit_value(released.value), audit_value(target),
          to_string(reason), applied.error().message());
    log().error("cannot restore {} {} to {}: {}", label, human_setting(setting), human_value(target),
                applied.error().message());
    if (error != nullptr) {
      *error = applied.error();
    }
    return fmt::format("{} {}: restoring {} failed: {}", label, human_setting(setting), human_value(target),
                       applied.error().message());
  }
  audit("restore", released.owner, gpu, setting, audit_value(released.value), audit_value(target),
        to_string(reason));
  return fmt::format("{} {} {} -> {}", label, human_setting(setting), human_value(released.value),
                     human_value(target));
}

Result<uint32_t> SettingsLedger::set_power_limit(const Owner& owner, size_t gpu, uint32_t power_limit_mw) {
  Slot<PowerValue>& slot = power_[gpu];
  uint32_t before = 0;
  if (slot.holders.empty()) {
    // The value to restore later; without it the change could not be undone, so it is not made.
    auto current = gpus_[gpu]->power_limit_mw();
    if (!current) {
      return fail(ErrorCode::kDevice,
                  "cannot read {}'s power limit before changing it (so it could not be "
                  "restored): {}",
                  gpus_[gpu]->label(), current.error().message());
    }
    before = *current;
  } else {
    before = slot.holders.back().value;
  }
  if (auto done = set(slot, owner, gpu, kPowerSetting, power_limit_mw, before); !done) {
    return tl::make_unexpected(done.error());
  }
  return before;
}

Result<uint32_t> SettingsLedger::release_power_limit(const Owner& owner, size_t gpu, RestoreReason reason) {
  std::optional<Error> error;
  release(power_[gpu], owner, gpu, kPowerSetting, reason, &error);
  if (error) {
    return tl::make_unexpected(*error);
  }
  return gpus_[gpu]->power_limit_mw();
}

Result<void> SettingsLedger::lock_sm_clocks(const Owner& owner, size_t gpu, SmClockLock lock) {
  Slot<ClockValue>& slot = clocks_[gpu];
  const ClockValue before = slot.holders.empty() ? ClockValue() : slot.holders.back().value;
  return set(slot, owner, gpu, kClockSetting, ClockValue(lock), before);
}

Result<void> SettingsLedger::release_sm_clocks(const Owner& owner, size_t gpu, RestoreReason reason) {
  std::optional<Error> error;
  release(clocks_[gpu], owner, gpu, kClockSetting, reason, &error);
  if (error) {
    return tl::make_unexpected(*error);
  }
  return {};
}

std::vector<std::string> SettingsLedger::release_all(uint64_t connection, RestoreReason reason) {
  std::vector<std::string> released;
  const auto release_from = [&](auto& slot, size_t gpu, std::string_view setting) {
    const auto found = std::find_if(slot.holders.begin(), slot.holders.end(),
                                    [connection](const auto& h) { return h.owner.connection == connection; });
    if (found == slot.holders.end()) {
      return;
    }
    const Owner owner = found->owner;
    if (auto line = release(slot, owner, gpu, setting, reason, nullptr)) {
      released.push_back(std::move(*line));
    }
  };
  for (size_t gpu = 0; gpu < gpus_.size(); ++gpu) {
    release_from(power_[gpu], gpu, kPowerSetting);
    release_from(clocks_[gpu], gpu, kClockSetting);
  }
  return released;
}

std::vector<std::string> SettingsLedger::restore_everything(RestoreReason reason) {
  std::vector<std::string> restored;
  // Straight to the original: one device write per setting, audited against the owner in force.
  const auto restore = [&](auto& slot, size_t gpu, std::string_view setting) {
    if (slot.holders.empty()) {
      return;
    }
    const auto top = slot.holders.back();
    slot.holders.clear();
    const std::string label = gpus_[gpu]->label();
    if (auto applied = apply(gpu, slot.original); !applied) {
      audit("restore-failed", top.owner, gpu, setting, audit_value(top.value), audit_value(slot.original),
            to_string(reason), applied.error().message());
      log().error("cannot restore {} {} to {}: {}", label, human_setting(setting), human_value(slot.original),
                  applied.error().message());
      restored.push_back(fmt::format("{} {}: restoring {} failed: {}", label, human_setting(setting),
                                     human_value(slot.original), applied.error().message()));
      return;
    }
    audit("restore", top.owner, gpu, setting, audit_value(top.value), audit_value(slot.original),
          to_string(reason));
    restored.push_back(fmt::format("{} {} {} -> {}", label, human_setting(setting), human_value(top.value),
                                   human_value(slot.original)));
  };
  for (size_t gpu = 0; gpu < gpus_.size(); ++gpu) {
    restore(power_[gpu], gpu, kPowerSetting);
    restore(clocks_[gpu], gpu, kClockSetting);
  }
  save_state();
  return restored;
}

void SettingsLedger::set_state_file(std::string path) {
  state_path_ = std::move(path);
}

void SettingsLedger::save_state() {
  if (state_path_.empty()) {
    return;
  }
  nlohmann::json settings = nlohmann::json::array();
  for (size_t gpu = 0; gpu < gpus_.size(); ++gpu) {
    const std::string uuid = gpus_[gpu]->info().uuid;
    if (!power_[gpu].holders.empty()) {
      settings.push_back(
          {{"gpu", gpu}, {"uuid", uuid}, {"setting", kPowerSetting}, {"original", power_[gpu].original}});
    }
    if (!clocks_[gpu].holders.empty()) {
      settings.push_back({{"gpu", gpu}, {"uuid", uuid}, {"setting", kClockSetting}, {"original", nullptr}});
    }
  }
  if (settings.empty()) {
    if (::unlink(state_path_.c_str()) != 0 && errno != ENOENT) {
      log().warn("cannot remove the daemon state file {}: {}", state_path_, std::strerror(errno));
    }
    return;
  }
  const nlohmann::json state = {{"format", "joule-daemon-state"},
                                {"version", 1},
                                {"pid", ::getpid()},
                                {"settings", std::move(settings)}};
  if (auto written = write_file_atomic(state_path_, state.dump() + "\n"); !written) {
    log().warn("cannot save the daemon state (what to restore after a daemon crash): {}",
               written.error().message());
  }
}

std::vector<std::string> SettingsLedger::recover() {
  std::vector<std::string> restored;
  if (state_path_.empty()) {
    return restored;
  }
  auto text = read_text_file(state_path_);
  if (!text) {
    if (text.error().code() != ErrorCode::kNotFound) {
      log().warn("cannot read the daemon state file: {}", text.error().message());
    }
    return restored;
  }
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& error) {
    log().error("the daemon state file {} is not JSON ({}); nothing recovered", state_path_, error.what());
    return restored;
  }
  const auto settings = state.find("settings");
  const auto pid = state.find("pid");
  const Owner previous{0, 0, pid != state.end() && pid->is_number_integer() ? pid->get<int32_t>() : 0};
  if (settings != state.end() && settings->is_array()) {
    for (const auto& entry : *settings) {
      if (!entry.is_object() || !entry.contains("uuid") || !entry["uuid"].is_string() ||
          !entry.contains("setting") || !entry["setting"].is_string()) {
        continue;
      }
      const std::string uuid = entry["uuid"].get<std::string>();
      const std::string setting = entry["setting"].get<std::string>();
      const auto gpu = std::find_if(gpus_.begin(), gpus_.end(), [&uuid](const device::Gpu* g) {
        return !uuid.empty() && g->info().uuid == uuid;
      });
      if (gpu == gpus_.end()) {
        restored.push_back(fmt::format("{} {}: GPU not served any more; not restored", uuid, setting));
        continue;
      }
      const auto index = static_cast<size_t>(gpu - gpus_.begin());
      Result<void> applied;
      std::string target;
      if (setting == kPowerSetting && entry.contains("original") && entry["original"].is_number_unsigned() &&
          entry["original"].get<uint64_t>() <= std::numeric_limits<uint32_t>::max()) {
        const auto original = static_cast<uint32_t>(entry["original"].get<uint64_t>());
        applied = apply(index, original);
        target = audit_value(original);
      } else if (setting == kClockSetting) {
        applied = apply(index, ClockValue());
        target = audit_value(ClockValue());
      } else {
        continue;
      }
      const std::string label = (*gpu)->label();
      if (!applied) {
        audit("restore-failed", previous, index, setting, "", target, to_string(RestoreReason::kRecovered),
              applied.error().message());
        restored.push_back(fmt::format("{} {}: restoring failed: {}", label, human_setting(setting),
                                       applied.error().message()));
        continue;
      }
      audit("restore", previous, index, setting, "", target, to_string(RestoreReason::kRecovered),
            "left by a daemon that stopped without restoring");
      restored.push_back(fmt::format("{} {} -> {}", label, human_setting(setting), target));
    }
  }
  save_state();  // nothing is owned: removes the file
  return restored;
}

bool SettingsLedger::owns_any(uint64_t connection) const {
  const auto owns = [connection](const auto& slots) {
    return std::any_of(slots.begin(), slots.end(), [connection](const auto& slot) {
      return std::any_of(slot.holders.begin(), slot.holders.end(),
                         [connection](const auto& h) { return h.owner.connection == connection; });
    });
  };
  return owns(power_) || owns(clocks_);
}

std::optional<SmClockLock> SettingsLedger::sm_clock_lock(size_t gpu) const {
  const auto& slot = clocks_[gpu];
  return slot.holders.empty() ? std::nullopt : slot.holders.back().value;
}

size_t SettingsLedger::owned_settings() const {
  const auto count = [](const auto& slots) {
    return static_cast<size_t>(
        std::count_if(slots.begin(), slots.end(), [](const auto& slot) { return !slot.holders.empty(); }));
  };
  return count(power_) + count(clocks_);
}

}  // namespace joule::daemon
