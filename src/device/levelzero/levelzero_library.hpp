// SPDX-License-Identifier: Apache-2.0
// The loaded Level Zero loader: dlopen handle, resolved function table, Sysman initialisation, the API
// version check, and the one place where ze_result_t codes become joule Errors. Private to the Level Zero
// backend (and its tests).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"

#include "device/levelzero/levelzero_api.hpp"

namespace joule::device::levelzero_detail {

namespace lz = level_zero;  // shared by the backend's .cpp files (one declaration: unity builds)

/// Every function joule uses, resolved with dlsym. Of the two initialisation sets only the one in use is
/// set; zelLoaderGetVersions may be null.
struct LevelZeroFunctions {
#define JOULE_LEVEL_ZERO_DECLARE_POINTER(symbol, type) lz::type symbol = nullptr;
  JOULE_LEVEL_ZERO_DEVICE_FUNCTIONS(JOULE_LEVEL_ZERO_DECLARE_POINTER)
  JOULE_LEVEL_ZERO_ZES_INIT_FUNCTIONS(JOULE_LEVEL_ZERO_DECLARE_POINTER)
  JOULE_LEVEL_ZERO_CORE_INIT_FUNCTIONS(JOULE_LEVEL_ZERO_DECLARE_POINTER)
  JOULE_LEVEL_ZERO_OPTIONAL_FUNCTIONS(JOULE_LEVEL_ZERO_DECLARE_POINTER)
#undef JOULE_LEVEL_ZERO_DECLARE_POINTER
};

/// How Sysman was initialised.
enum class SysmanInit {
  kZesInit,   ///< zesInit(0): Level Zero 1.5 and newer
  kCoreInit,  ///< ZES_ENABLE_SYSMAN=1 and zeInit: loaders without zesInit
};

/// An initialised Level Zero loader, shared by every LevelZeroGpu opened from it.
class LevelZeroLibrary {
 public:
  /// dlopens `library`, resolves every symbol, initialises Sysman (zesInit(0); without zesInit, sets
  /// ZES_ENABLE_SYSMAN=1 and calls zeInit, and logs that it did) and checks the API major version.
  /// @return kLibraryMissing if the library cannot be loaded or lacks a symbol (named); the mapped error of
  /// the initialisation; kNotSupported if the API major version is not level_zero::kSupportedApiMajor.
  static Result<std::shared_ptr<const LevelZeroLibrary>> open(const std::string& library);

  ~LevelZeroLibrary();
  LevelZeroLibrary(const LevelZeroLibrary&) = delete;
  LevelZeroLibrary& operator=(const LevelZeroLibrary&) = delete;

  const LevelZeroFunctions& fn() const { return functions_; }
  const std::string& path() const { return path_; }
  SysmanInit init() const { return init_; }

  /// Every Sysman device of every driver, in the loader's order (drivers, then devices).
  /// @return the mapped error of zesDriverGet/zesDeviceGet (or their core counterparts).
  Result<std::vector<lz::DeviceHandle>> devices() const;

  /// The one conversion of a ze_result_t into an Error: "<action>: <ZE_RESULT_NAME>", with the code mapped
  /// (ERROR_UNSUPPORTED_FEATURE → kNotSupported, ERROR_INSUFFICIENT_PERMISSIONS → kPermissionDenied plus
  /// how to get the right, ERROR_INVALID_ARGUMENT → kInvalidArgument, …); an unknown code is shown as
  /// "Level Zero result 0x…".
  Error error(lz::ZeResult result, std::string_view action) const;

  /// @return an empty result for ZE_RESULT_SUCCESS, else error(result, action).
  Result<void> check(lz::ZeResult result, std::string_view action) const;

 private:
  LevelZeroLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}

  Result<void> resolve();
  Result<void> initialise();
  Result<void> check_api_version() const;
  Result<std::vector<lz::DriverHandle>> drivers() const;

  void* handle_ = nullptr;
  std::string path_;
  LevelZeroFunctions functions_;
  SysmanInit init_ = SysmanInit::kZesInit;
  bool initialised_ = false;
};

/// @return the ErrorCode a ze_result_t maps to.
ErrorCode error_code(lz::ZeResult result);

/// @return a Level Zero device UUID as joule shows it: "GPU-" and the 16 bytes as a lower-case
/// 8-4-4-4-12 UUID (the form CUDA_VISIBLE_DEVICES-style lists use); "" for an all-zero UUID.
std::string format_uuid(const uint8_t (&uuid)[lz::kMaxDeviceUuidSize]);

}  // namespace joule::device::levelzero_detail
