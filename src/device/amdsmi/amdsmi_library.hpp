// SPDX-License-Identifier: Apache-2.0
// The loaded AMD SMI library: dlopen handle, resolved function table, and the one place where AMD SMI status
// codes become joule Errors. Private to the AMD SMI backend (and its tests).
#pragma once

#include <memory>
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

/// An initialised AMD SMI library. Shared by every AmdSmiGpu opened from it, so amdsmi_shut_down and dlclose
/// run when the last of them goes (AMD SMI's state is per process, and its init is reference counted).
class AmdSmiLibrary {
 public:
  /// dlopens `library`, resolves every symbol, calls amdsmi_init(AMDSMI_INIT_AMD_GPUS) and checks the
  /// library's major version.
  /// @return kLibraryMissing if the library cannot be loaded or lacks a symbol; the mapped error of
  /// amdsmi_init (kDevice for AMDSMI_STATUS_INIT_ERROR, …) if initialisation fails; kNotSupported if the
  /// library's major version is not amd_smi::kSupportedLibMajor (its structures would be misread).
  static Result<std::shared_ptr<const AmdSmiLibrary>> open(const std::string& library);

  ~AmdSmiLibrary();
  AmdSmiLibrary(const AmdSmiLibrary&) = delete;
  AmdSmiLibrary& operator=(const AmdSmiLibrary&) = delete;

  const AmdSmiFunctions& fn() const { return functions_; }
  const std::string& path() const { return path_; }

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
