// SPDX-License-Identifier: Apache-2.0
// The daemon's ledger: the per-connection form of the device layer's restore contract
// (joule/device/settings_guard.hpp). A SettingsGuard restores what one controller changed when the
// controller stops, in its own process; the ledger restores what one connection changed when the
// connection closes, so also when the client process dies of SIGKILL, which no in-process guard survives.
#include "joule/daemon/ledger.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>

#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/core/log.hpp"

#include "safe_files.hpp"

namespace joule::daemon {

namespace {

constexpr std::string_view kPowerSetting = "power_limit_mw";
constexpr std::string_view kClockSetting = "sm_clocks_mhz";
constexpr std::string_view kMemoryClockSetting = "memory_clocks_mhz";
constexpr std::string_view kStateFormat = "joule-daemon-state";
constexpr int kStateVersion = 1;
// Far above what the daemon writes (a few hundred bytes per GPU): a bigger file is not its own.
constexpr off_t kMaxStateBytes = off_t{64} * 1024;

std::string audit_value(uint32_t power_mw) {
  return std::to_string(power_mw);
}

std::string audit_value(const std::optional<SmClockLock>& lock) {
  return lock ? fmt::format("{}-{}", lock->min_mhz, lock->max_mhz) : std::string("unlocked");
}

std::string audit_value(const std::optional<MemoryClockLock>& lock) {
  return lock ? fmt::format("{}-{}", lock->min_mhz, lock->max_mhz) : std::string("unlocked");
}

std::string human_value(uint32_t power_mw) {
  return device::format_watts(power_mw);
}

std::string human_value(const std::optional<SmClockLock>& lock) {
  return lock ? fmt::format("{}-{} MHz", lock->min_mhz, lock->max_mhz) : std::string("unlocked");
}

std::string human_value(const std::optional<MemoryClockLock>& lock) {
  return lock ? fmt::format("{}-{} MHz", lock->min_mhz, lock->max_mhz) : std::string("unlocked");
}

std::string_view human_setting(std::string_view setting) {
  return setting == kPowerSetting ? "power limit" : setting == kClockSetting ? "SM clocks" : "memory clocks";
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
    : gpus_(std::move(gpus)),
      audit_(audit),
      power_(gpus_.size()),
      clocks_(gpus_.size()),
      memory_clocks_(gpus_.size()) {}

SettingsLedger::~SettingsLedger() {
  if (state_folder_fd_ >= 0) {
    ::close(state_folder_fd_);
  }
}

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
  entry.client = owner.client;
  entry.address = owner.address;
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

Result<void> SettingsLedger::apply(size_t gpu, const MemoryClockValue& value) {
  return value ? gpus_[gpu]->lock_memory_clocks(value->min_mhz, value->max_mhz)
               : gpus_[gpu]->reset_memory_clocks();
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
  JOULE_TRY(set(slot, owner, gpu, kPowerSetting, power_limit_mw, before));
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

Result<void> SettingsLedger::lock_memory_clocks(const Owner& owner, size_t gpu, MemoryClockLock lock) {
  Slot<MemoryClockValue>& slot = memory_clocks_[gpu];
  const MemoryClockValue before = slot.holders.empty() ? MemoryClockValue() : slot.holders.back().value;
  return set(slot, owner, gpu, kMemoryClockSetting, MemoryClockValue(lock), before);
}

Result<void> SettingsLedger::release_memory_clocks(const Owner& owner, size_t gpu, RestoreReason reason) {
  std::optional<Error> error;
  release(memory_clocks_[gpu], owner, gpu, kMemoryClockSetting, reason, &error);
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
    release_from(memory_clocks_[gpu], gpu, kMemoryClockSetting);
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
    restore(memory_clocks_[gpu], gpu, kMemoryClockSetting);
  }
  save_state();
  return restored;
}

void SettingsLedger::set_state_file(std::string path, int folder_fd) {
  if (state_folder_fd_ >= 0) {
    ::close(state_folder_fd_);
    state_folder_fd_ = -1;
  }
  state_path_ = std::move(path);
  if (state_path_.empty()) {
    return;
  }
  const std::filesystem::path as_path(state_path_);
  state_name_ = as_path.filename().string();
  if (folder_fd >= 0) {
    state_folder_fd_ = ::fcntl(folder_fd, F_DUPFD_CLOEXEC, 0);
  } else {
    const std::string folder = as_path.has_parent_path() ? as_path.parent_path().string() : std::string(".");
    state_folder_fd_ = ::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  }
  if (state_folder_fd_ < 0) {
    log().warn(
        "cannot open the folder of the daemon state file {}: {}; a daemon crash could not be recovered",
        state_path_, std::strerror(errno));
  }
}

void SettingsLedger::save_state() {
  if (state_path_.empty() || state_folder_fd_ < 0) {
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
    if (!memory_clocks_[gpu].holders.empty()) {
      settings.push_back(
          {{"gpu", gpu}, {"uuid", uuid}, {"setting", kMemoryClockSetting}, {"original", nullptr}});
    }
  }
  if (settings.empty()) {
    // unlinkat removes the name itself: a link planted there is removed, its target untouched.
    if (::unlinkat(state_folder_fd_, state_name_.c_str(), 0) != 0 && errno != ENOENT) {
      log().warn("cannot remove the daemon state file {}: {}", state_path_, std::strerror(errno));
    }
    return;
  }
  const nlohmann::json state = {{"format", kStateFormat},
                                {"version", kStateVersion},
                                {"pid", ::getpid()},
                                {"settings", std::move(settings)}};
  if (auto written = write_file_atomic_at(state_folder_fd_, state_name_, state.dump() + "\n", state_path_);
      !written) {
    log().warn("cannot save the daemon state (what to restore after a daemon crash): {}",
               written.error().message());
  }
}

void SettingsLedger::set_aside_state(const std::string& why) {
  // Renamed, not deleted: the file is evidence of an attack (or of a bug) for the administrator, and a
  // name that is not the state file's is never replayed. RENAME_NOREPLACE keeps earlier evidence too.
  const auto seconds = static_cast<long long>(std::time(nullptr));
  std::string suffix = fmt::format(".untrusted.{}", seconds);
  int renamed = -1;
  for (int attempt = 1; attempt <= 100; ++attempt) {
    renamed = ::renameat2(state_folder_fd_, state_name_.c_str(), state_folder_fd_,
                          (state_name_ + suffix).c_str(), RENAME_NOREPLACE);
    if (renamed == 0 || errno != EEXIST) {
      break;
    }
    suffix = fmt::format(".untrusted.{}.{}", seconds, attempt);
  }
  if (renamed == 0) {
    log().error(
        "not replaying the daemon state file {}: {}; nothing was restored from it; it was moved to {}{} "
        "for inspection",
        state_path_, why, state_path_, suffix);
  } else {
    log().error(
        "not replaying the daemon state file {}: {}; nothing was restored from it; it is left in place "
        "(cannot move it aside: {})",
        state_path_, why, std::strerror(errno));
  }
}

std::vector<std::string> SettingsLedger::recover() {
  std::vector<std::string> restored;
  if (state_path_.empty() || state_folder_fd_ < 0) {
    return restored;
  }
  // O_NOFOLLOW: a link is refused, not followed; O_NONBLOCK: a FIFO planted there cannot hang the start.
  const UniqueFd file(
      ::openat(state_folder_fd_, state_name_.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!file.valid()) {
    if (errno == ELOOP) {
      set_aside_state("it is a symbolic link (never followed)");
    } else if (errno != ENOENT) {
      log().warn("cannot read the daemon state file {}: {}", state_path_, std::strerror(errno));
    }
    return restored;
  }
  struct stat info {};
  if (::fstat(file.get(), &info) != 0) {
    log().warn("cannot inspect the daemon state file {}: {}", state_path_, std::strerror(errno));
    return restored;
  }
  if (const auto why = why_not_own_file(info, ::geteuid())) {
    set_aside_state(*why);
    return restored;
  }
  if (info.st_size > kMaxStateBytes) {
    set_aside_state(fmt::format("it has {} bytes, more than the daemon ever writes", info.st_size));
    return restored;
  }
  std::string text;
  char chunk[4096];
  while (text.size() <= static_cast<size_t>(kMaxStateBytes)) {
    const ssize_t n = ::read(file.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      log().warn("cannot read the daemon state file {}: {}", state_path_, std::strerror(errno));
      return restored;
    }
    if (n == 0) {
      break;
    }
    text.append(chunk, static_cast<size_t>(n));
  }
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    set_aside_state(fmt::format("it is not JSON ({})", error.what()));
    return restored;
  }
  const auto format = state.is_object() ? state.find("format") : state.end();
  const auto version = state.is_object() ? state.find("version") : state.end();
  if (!state.is_object() || format == state.end() || !format->is_string() ||
      format->get<std::string>() != kStateFormat || version == state.end() || *version != kStateVersion) {
    set_aside_state(
        fmt::format(R"(it is not a state file of this daemon (expected "format":"{}","version":{}))",
                    kStateFormat, kStateVersion));
    return restored;
  }
  const auto settings = state.find("settings");
  const auto pid = state.find("pid");
  Owner previous;
  previous.pid = pid != state.end() && pid->is_number_integer() ? pid->get<int32_t>() : 0;
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
      } else if (setting == kMemoryClockSetting) {
        applied = apply(index, MemoryClockValue());
        target = audit_value(MemoryClockValue());
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

std::vector<std::string> SettingsLedger::held_by(uint64_t connection) const {
  std::vector<std::string> held;
  const auto describe = [&](const auto& slot, size_t gpu, std::string_view setting) {
    for (size_t i = 0; i < slot.holders.size(); ++i) {
      if (slot.holders[i].owner.connection == connection) {
        held.push_back(fmt::format("{} {} {} ({})", gpus_[gpu]->label(), human_setting(setting),
                                   human_value(slot.holders[i].value),
                                   i + 1 == slot.holders.size() ? "in force" : "below another owner's"));
      }
    }
  };
  for (size_t gpu = 0; gpu < gpus_.size(); ++gpu) {
    describe(power_[gpu], gpu, kPowerSetting);
    describe(clocks_[gpu], gpu, kClockSetting);
    describe(memory_clocks_[gpu], gpu, kMemoryClockSetting);
  }
  return held;
}

bool SettingsLedger::owns_any(uint64_t connection) const {
  const auto owns = [connection](const auto& slots) {
    return std::any_of(slots.begin(), slots.end(), [connection](const auto& slot) {
      return std::any_of(slot.holders.begin(), slot.holders.end(),
                         [connection](const auto& h) { return h.owner.connection == connection; });
    });
  };
  return owns(power_) || owns(clocks_) || owns(memory_clocks_);
}

std::optional<SmClockLock> SettingsLedger::sm_clock_lock(size_t gpu) const {
  const auto& slot = clocks_[gpu];
  return slot.holders.empty() ? std::nullopt : slot.holders.back().value;
}

std::optional<MemoryClockLock> SettingsLedger::memory_clock_lock(size_t gpu) const {
  const auto& slot = memory_clocks_[gpu];
  return slot.holders.empty() ? std::nullopt : slot.holders.back().value;
}

size_t SettingsLedger::owned_settings() const {
  const auto count = [](const auto& slots) {
    return static_cast<size_t>(
        std::count_if(slots.begin(), slots.end(), [](const auto& slot) { return !slot.holders.empty(); }));
  };
  return count(power_) + count(clocks_) + count(memory_clocks_);
}

}  // namespace joule::daemon
