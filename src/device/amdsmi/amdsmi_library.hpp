// SPDX-License-Identifier: Apache-2.0
// The loaded AMD SMI library: dlopen handle, resolved function table, the ABI chosen from its version, and
// the one place where AMD SMI status codes become joule Errors and the structures whose layout depends on
// the ABI become one internal form. Private to the AMD SMI backend (and its tests).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "joule/core/error.hpp"

#include "device/amdsmi/amdsmi_api.hpp"

namespace joule::device::amdsmi_detail {

namespace smi = amd_smi;  // shared by the backend's .cpp files (one declaration: unity builds)

/// Every function joule uses, resolved with dlsym.
struct AmdSmiFunctions {
#define JOULE_AMD_SMI_DECLARE_POINTER(symbol, type) amd_smi::type symbol = nullptr;
  JOULE_AMD_SMI_FUNCTIONS(JOULE_AMD_SMI_DECLARE_POINTER)
#undef JOULE_AMD_SMI_DECLARE_POINTER
};

/// The AMD SMI ABI a library speaks, chosen from amdsmi_get_lib_version (see amdsmi_api.hpp).
struct AmdSmiAbi {
  uint32_t lib_major = 0;        ///< 24, 25 or 26: which structure layouts to use
  std::string version;           ///< the library's version, e.g. "24.6.3"
  bool power_caps_in_w = false;  ///< amdsmi_get_power_cap_info reports W (24.x before 24.5.2), not µW

  /// @return e.g. "AMD SMI 24.6.3 (ROCm 6.x ABI)": what discovery reports.
  std::string description() const;
};

/// @return the ABI of a library whose amdsmi_get_lib_version filled `version`; kNotSupported naming the
/// version found and the ones joule reads if its major version is unknown. `library` names it in messages.
Result<AmdSmiAbi> choose_abi(const amd_smi::Version& version, const std::string& library);

/// amdsmi_power_info_t of any ABI: the board's powers in W, nullopt for a member it does not report.
struct AmdSmiPower {
  std::optional<uint64_t> current_socket_w;  ///< instantaneous (MI300 and newer)
  std::optional<uint64_t> average_socket_w;  ///< averaged (Navi, MI200 and older)
  std::optional<uint64_t> socket_w;          ///< 26.x only
};

/// amdsmi_power_cap_info_t of any ABI, in µW.
struct AmdSmiPowerCaps {
  uint64_t cap_uw = 0;
  uint64_t default_uw = 0;
  uint64_t min_uw = 0;
  uint64_t max_uw = 0;
};

/// An initialised AMD SMI library. Shared by every AmdSmiGpu opened from it, so amdsmi_shut_down and dlclose
/// run when the last of them goes (AMD SMI's state is per process, and its init is reference counted).
class AmdSmiLibrary {
 public:
  /// dlopens `library`, resolves every symbol, calls amdsmi_init(AMDSMI_INIT_AMD_GPUS) and chooses the ABI
  /// from the library's version (choose_abi).
  /// @return kLibraryMissing if the library cannot be loaded or lacks a symbol; the mapped error of
  /// amdsmi_init (kDevice for AMDSMI_STATUS_INIT_ERROR, …) if initialisation fails; kNotSupported if the
  /// library's major version is not one whose structures joule knows (24, 25, 26).
  static Result<std::shared_ptr<const AmdSmiLibrary>> open(const std::string& library);

  ~AmdSmiLibrary();
  AmdSmiLibrary(const AmdSmiLibrary&) = delete;
  AmdSmiLibrary& operator=(const AmdSmiLibrary&) = delete;

  const AmdSmiFunctions& fn() const { return functions_; }
  const std::string& path() const { return path_; }
  const AmdSmiAbi& abi() const { return abi_; }

  /// amdsmi_get_power_info in the library's ABI, converted. @return check()'s error with `action`.
  Result<AmdSmiPower> power_info(amd_smi::ProcessorHandle handle, std::string_view action) const;

  /// amdsmi_get_power_cap_info in the library's ABI, in µW. @return check()'s error with `action`.
  Result<AmdSmiPowerCaps> power_cap_info(amd_smi::ProcessorHandle handle, uint32_t sensor,
                                         std::string_view action) const;

  /// The one conversion of an AMD SMI status into an Error: "<action>: <STATUS_NAME>: <AMD SMI's text>",
  /// with the code mapped (NOT_SUPPORTED → kNotSupported, NO_PERM → kPermissionDenied plus how to get the
  /// right, INVAL → kInvalidArgument, INPUT_OUT_OF_BOUNDS → kOutOfRange, INIT_ERROR → kDevice, …).
  /// @param action what failed, e.g. "cannot read the power of GPU 0 (…)".
  Error error(amd_smi::Status status, std::string_view action) const;

  /// @return an empty result for AMDSMI_STATUS_SUCCESS, else error(status, action).
  Result<void> check(amd_smi::Status status, std::string_view action) const;

 private:
  AmdSmiLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}

  void* handle_ = nullptr;
  std::string path_;
  AmdSmiFunctions functions_;
  AmdSmiAbi abi_;
  bool initialised_ = false;
};

/// @return the ErrorCode an AMD SMI status maps to.
ErrorCode error_code(amd_smi::Status status);

/// @return AMD SMI's UUID as joule shows it: "GPU-" and the UUID in lower case (the "GPU-…" form that
/// HIP_VISIBLE_DEVICES entries use); "" for an empty UUID.
std::string format_uuid(std::string_view amd_smi_uuid);

/// Zeus's plausibility rule for AMD energy counters (the same as the ROCm SMI backend's): with `expected_mj`
/// = average power × interval, a counter is usable iff expected_mj ≥ 0.001 and 0.1 < measured_mj /
/// expected_mj < 10.
bool amdsmi_counter_plausible(double measured_mj, double expected_mj);

}  // namespace joule::device::amdsmi_detail
