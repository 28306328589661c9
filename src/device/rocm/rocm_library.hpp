// SPDX-License-Identifier: Apache-2.0
// The loaded ROCm SMI library: dlopen handle, resolved function table, and the one place where ROCm SMI
// status codes become joule Errors. Private to the ROCm backend (and its tests).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "joule/core/error.hpp"

#include "device/rocm/rocm_smi_api.hpp"

namespace joule::device::rocm_detail {

/// Every function joule uses, resolved with dlsym. Optional symbols may be nullptr.
struct RocmFunctions {
#define JOULE_ROCM_DECLARE_POINTER(symbol, type, required) rocm_smi::type symbol = nullptr;
  JOULE_ROCM_SMI_FUNCTIONS(JOULE_ROCM_DECLARE_POINTER)
#undef JOULE_ROCM_DECLARE_POINTER
};

/// An initialised ROCm SMI library. Shared by every RocmGpu opened from it, so rsmi_shut_down and dlclose
/// run when the last of them goes (ROCm SMI's state is per process, not per device).
class RocmLibrary {
 public:
  /// dlopens `library`, resolves every symbol and calls rsmi_init(0).
  /// @return kLibraryMissing if the library cannot be loaded or lacks a required symbol; the mapped error
  /// of rsmi_init (kDevice for RSMI_STATUS_INIT_ERROR) if initialisation fails.
  static Result<std::shared_ptr<const RocmLibrary>> open(const std::string& library);

  ~RocmLibrary();
  RocmLibrary(const RocmLibrary&) = delete;
  RocmLibrary& operator=(const RocmLibrary&) = delete;

  const RocmFunctions& fn() const { return functions_; }
  const std::string& path() const { return path_; }

  /// The one conversion of a ROCm SMI status into an Error: "<action>: <STATUS_NAME>: <ROCm SMI's text>",
  /// with the code mapped (NOT_SUPPORTED → kNotSupported, PERMISSION → kPermissionDenied plus how to get
  /// the right, INVALID_ARGS → kInvalidArgument, INIT_ERROR → kDevice, …).
  /// @param action what failed, e.g. "cannot read the power of GPU 0 (…)".
  Error error(rocm_smi::Status status, std::string_view action) const;

  /// @return "<STATUS_NAME>: <ROCm SMI's text>", the tail of error()'s message, for messages that explain a
  /// status without being its error.
  std::string status_text(rocm_smi::Status status) const;

  /// @return an empty result for RSMI_STATUS_SUCCESS, else error(status, action).
  Result<void> check(rocm_smi::Status status, std::string_view action) const;

 private:
  RocmLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}

  void* handle_ = nullptr;
  std::string path_;
  RocmFunctions functions_;
  bool initialised_ = false;
};

/// @return the ErrorCode a ROCm SMI status maps to.
ErrorCode error_code(rocm_smi::Status status);

/// @return "GPU-" and the 16 lower-case hex digits of a ROCm SMI unique id (the form HIP_VISIBLE_DEVICES
/// accepts).
std::string format_unique_id(uint64_t unique_id);

/// Zeus's plausibility rule for AMD energy counters: with `expected_mj` = average power × interval, a
/// counter is usable iff expected_mj ≥ 0.001 and 0.1 < measured_mj / expected_mj < 10.
bool energy_counter_plausible(double measured_mj, double expected_mj);

}  // namespace joule::device::rocm_detail
