// SPDX-License-Identifier: Apache-2.0
// joule/daemon/ledger.hpp — who owns which GPU setting, what the GPU had before, and putting it back.
//
// Every power limit, SM clock lock and memory clock lock the daemon sets belongs to the connection that asked
// for it. The first time any connection changes a setting of a GPU, the ledger saves the value in force (the
// "original"); it puts it back when the last owner of that setting goes away. Between those moments
// several connections may own the same setting, as a stack:
//
// - a set pushes (or moves) the connection's value on top of the stack and applies it: the latest
//   request wins;
// - when a connection goes (closed, crashed, lease expired, or it reset its setting), its value leaves
//   the stack; if it was the one in force, the value of the next owner below is applied, or the original
//   when no owner is left.
//
// So a GPU never keeps a value whose owner is gone, and the original comes back exactly once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/daemon/audit.hpp"
#include "joule/device/gpu.hpp"

namespace joule::daemon {

/// The connection a setting belongs to, and its peer (for the audit log).
struct Owner {
  uint64_t connection = 0;
  uint32_t uid = 0;  ///< a Unix-socket peer's
  int32_t pid = 0;
  std::string client;   ///< a network peer's name
  std::string address;  ///< a network peer's address; empty: a Unix-socket peer
};

/// Why a setting leaves its owner.
enum class RestoreReason {
  kReset,         ///< the owner asked (reset_power_limit, reset_sm_clocks, reset_memory_clocks)
  kDisconnected,  ///< the connection closed: normal close, or the client died
  kLeaseExpired,  ///< no request within the lease
  kShutdown,      ///< the daemon is stopping
  kRecovered,     ///< a previous daemon died without restoring; this one did at start
};

/// @return "reset", "disconnected", "lease-expired", "shutdown" or "recovered".
std::string_view to_string(RestoreReason reason);

/// An SM clock lock, MHz.
struct SmClockLock {
  uint32_t min_mhz = 0;
  uint32_t max_mhz = 0;
  bool operator==(const SmClockLock&) const = default;
};

/// A memory clock lock, MHz (a type of its own, so that it is never applied as an SM clock lock).
struct MemoryClockLock {
  uint32_t min_mhz = 0;
  uint32_t max_mhz = 0;
  bool operator==(const MemoryClockLock&) const = default;
};

/// The settings the daemon made, by owner. Not thread-safe: the daemon's event loop is its only user.
///
/// SM and memory clocks: the Gpu interface cannot read a clock lock, so the original of a clock setting is
/// taken to be "unlocked" and restoring it resets the lock. Lock clocks of served GPUs only through the
/// daemon.
class SettingsLedger {
 public:
  /// @param gpus the daemon's GPUs (index = position); they must outlive the ledger.
  SettingsLedger(std::vector<device::Gpu*> gpus, AuditLog& audit);
  ~SettingsLedger();
  SettingsLedger(const SettingsLedger&) = delete;
  SettingsLedger& operator=(const SettingsLedger&) = delete;

  /// Sets `gpu`'s power limit for `owner`. @return the limit in force before, mW. Errors: the device's
  /// (kOutOfRange naming the valid range, …); kDevice if the limit in force cannot be read (it could not
  /// be restored). On error nothing changed.
  Result<uint32_t> set_power_limit(const Owner& owner, size_t gpu, uint32_t power_limit_mw);
  /// Gives up `connection`'s power limit on `gpu` (nothing to do if it has none).
  /// @return the limit in force afterwards, mW.
  Result<uint32_t> release_power_limit(const Owner& owner, size_t gpu, RestoreReason reason);
  /// Locks `gpu`'s SM clocks for `owner`. Errors as the device's.
  Result<void> lock_sm_clocks(const Owner& owner, size_t gpu, SmClockLock lock);
  /// Gives up `connection`'s SM clock lock on `gpu` (nothing to do if it has none).
  Result<void> release_sm_clocks(const Owner& owner, size_t gpu, RestoreReason reason);
  /// Locks `gpu`'s memory clocks for `owner`. Errors as the device's (kNotSupported where its backend
  /// cannot lock them).
  Result<void> lock_memory_clocks(const Owner& owner, size_t gpu, MemoryClockLock lock);
  /// Gives up `connection`'s memory clock lock on `gpu` (nothing to do if it has none).
  Result<void> release_memory_clocks(const Owner& owner, size_t gpu, RestoreReason reason);

  /// Gives up every setting of `connection`. Failures to restore are audited and logged, not returned.
  /// @return one line per setting given up, e.g. "GPU 0 power limit 150 W -> 250 W".
  std::vector<std::string> release_all(uint64_t connection, RestoreReason reason);
  /// Puts every GPU setting back to its original (daemon shutdown). @return as release_all().
  std::vector<std::string> restore_everything(RestoreReason reason);

  /// Keeps the originals of owned settings in the JSON file `path`, rewritten atomically whenever a setting
  /// gains its first owner or loses its last (not on every change) and removed when nothing is owned, so
  /// that a daemon that died without restoring (kill -9, a crash) can restore them when it starts again.
  /// The file is written mode 0600 through `path.tmp.PID`, created afresh (never through a link or a file
  /// already there). Empty: no file. Write failures are logged, never returned.
  /// @param folder_fd a handle on the folder of `path`, already checked (the daemon's socket folder); it is
  /// duplicated. -1: the ledger opens the folder of `path` itself.
  void set_state_file(std::string path, int folder_fd = -1);
  /// Restores what the state file of a previous daemon lists (GPUs matched by UUID), audits it with reason
  /// "recovered", and removes the file. Call before serving, with the socket's lock held.
  ///
  /// Only a file this daemon's user can have written is replayed: a regular file (not a link: never
  /// followed), owned by the process's effective uid, with one hard link, writable by no one else (mode 0600
  /// or 0644), at most 64 KiB, in the daemon's JSON format. Any other file is never replayed nor deleted: it
  /// is logged as an error (naming the file and why) and renamed to `path.untrusted.<unix seconds>` beside
  /// it for inspection (left in place, and said so, if it cannot be renamed).
  /// @return one line per setting restored or failed; nothing if there is no file or it is not trusted.
  std::vector<std::string> recover();

  /// @return one line per setting `connection` owns, in force or stacked below another owner's, e.g. "GPU 0
  /// power limit 150 W (in force)"; empty if none.
  std::vector<std::string> held_by(uint64_t connection) const;
  /// @return true if `connection` owns any setting.
  bool owns_any(uint64_t connection) const;
  /// @return the clock lock the daemon keeps in force on `gpu`, if any.
  std::optional<SmClockLock> sm_clock_lock(size_t gpu) const;
  /// @return the memory clock lock the daemon keeps in force on `gpu`, if any.
  std::optional<MemoryClockLock> memory_clock_lock(size_t gpu) const;
  /// @return how many (GPU, setting) pairs have at least one owner.
  size_t owned_settings() const;

 private:
  // One value an owner asked for. The last holding of a slot is the value in force.
  template <class Value>
  struct Holding {
    Owner owner;
    Value value;
  };
  // One setting of one GPU. `original` is meaningful while `holders` is not empty.
  template <class Value>
  struct Slot {
    Value original{};
    std::vector<Holding<Value>> holders;
  };
  using PowerValue = uint32_t;
  using ClockValue = std::optional<SmClockLock>;  // nullopt: unlocked
  using MemoryClockValue = std::optional<MemoryClockLock>;

  Result<void> apply(size_t gpu, PowerValue value);
  Result<void> apply(size_t gpu, const ClockValue& value);
  Result<void> apply(size_t gpu, const MemoryClockValue& value);
  template <class Value>
  Result<void> set(Slot<Value>& slot, const Owner& owner, size_t gpu, std::string_view setting, Value value,
                   Value original_if_unowned);
  template <class Value>
  std::optional<std::string> release(Slot<Value>& slot, const Owner& owner, size_t gpu,
                                     std::string_view setting, RestoreReason reason,
                                     std::optional<Error>* error);
  void audit(std::string action, const Owner& owner, size_t gpu, std::string_view setting,
             std::string old_value, std::string new_value, std::string_view reason, std::string detail = {});

  void save_state();
  // Logs why the state file is not replayed and moves it aside.
  void set_aside_state(const std::string& why);

  std::vector<device::Gpu*> gpus_;
  AuditLog& audit_;
  std::string state_path_;
  std::string state_name_;    // the state file's name in its folder
  int state_folder_fd_ = -1;  // owned: the state file's folder, reached only through this handle
  std::vector<Slot<PowerValue>> power_;
  std::vector<Slot<ClockValue>> clocks_;
  std::vector<Slot<MemoryClockValue>> memory_clocks_;
};

}  // namespace joule::daemon
