// SPDX-License-Identifier: Apache-2.0
#include "device/levelzero/levelzero_library.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <dlfcn.h>
#include <fmt/format.h>

#include "joule/core/log.hpp"

namespace joule::device::levelzero_detail {

namespace {

std::string levelzero_dl_error_text() {
  const char* text = dlerror();
  return text != nullptr ? std::string(text) : std::string("unknown dlopen error");
}

// The hint every "cannot use this loader" message ends with.
constexpr const char* kLevelZeroInstallHint =
    "Install Intel's Level Zero loader (libze1) and GPU driver (libze-intel-gpu1, formerly "
    "intel-level-zero-gpu), or set JOULE_LEVEL_ZERO_LIBRARY to the full path of libze_loader.so.1";

}  // namespace

ErrorCode error_code(lz::ZeResult result) {
  switch (result) {
    case lz::ZeResult::kErrorUnsupportedFeature:
    case lz::ZeResult::kErrorUnsupportedVersion:
    case lz::ZeResult::kErrorUnsupportedEnumeration:
      return ErrorCode::kNotSupported;
    case lz::ZeResult::kErrorInsufficientPermissions:
      return ErrorCode::kPermissionDenied;
    case lz::ZeResult::kErrorInvalidArgument:
    case lz::ZeResult::kErrorInvalidNullHandle:
    case lz::ZeResult::kErrorInvalidNullPointer:
    case lz::ZeResult::kErrorInvalidEnumeration:
    case lz::ZeResult::kErrorInvalidSize:
    case lz::ZeResult::kErrorUnsupportedSize:
      return ErrorCode::kInvalidArgument;
    case lz::ZeResult::kErrorDependencyUnavailable:
      return ErrorCode::kLibraryMissing;  // the driver could not load something it needs
    case lz::ZeResult::kSuccess:          // never converted; mapping it to kInternal flags the bug
      return ErrorCode::kInternal;
    default:  // DEVICE_LOST, UNINITIALIZED, NOT_AVAILABLE, UNKNOWN, values joule does not know, …
      return ErrorCode::kDevice;
  }
}

std::string format_uuid(const uint8_t (&uuid)[lz::kMaxDeviceUuidSize]) {
  if (std::all_of(std::begin(uuid), std::end(uuid), [](uint8_t byte) { return byte == 0; })) {
    return "";
  }
  std::string text = "GPU-";
  for (size_t i = 0; i < lz::kMaxDeviceUuidSize; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) {
      text += '-';
    }
    text += fmt::format("{:02x}", uuid[i]);
  }
  return text;
}

Result<std::shared_ptr<const LevelZeroLibrary>> LevelZeroLibrary::open(const std::string& library) {
  dlerror();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return fail(ErrorCode::kLibraryMissing, "cannot load the Level Zero loader '{}': {}. {}", library,
                levelzero_dl_error_text(), kLevelZeroInstallHint);
  }
  std::shared_ptr<LevelZeroLibrary> loaded(new LevelZeroLibrary(handle, library));
  JOULE_TRY(loaded->resolve());
  JOULE_TRY(loaded->initialise());
  JOULE_TRY(loaded->check_api_version());
  return std::shared_ptr<const LevelZeroLibrary>(std::move(loaded));
}

Result<void> LevelZeroLibrary::resolve() {
  LevelZeroFunctions& fn = functions_;
  void* handle = handle_;
  const std::string& library = path_;
#define JOULE_LEVEL_ZERO_RESOLVE(symbol, type)                        \
  fn.symbol = reinterpret_cast<lz::type>(dlsym(handle, #symbol));     \
  if (fn.symbol == nullptr) {                                         \
    return fail(ErrorCode::kLibraryMissing,                           \
                "the Level Zero loader '{}' has no function " #symbol \
                "{}; it is not a Level Zero 1.4 or "                  \
                "newer loader. {}",                                   \
                library, missing_note, kLevelZeroInstallHint);        \
  }
  const char* missing_note = "";
  JOULE_LEVEL_ZERO_DEVICE_FUNCTIONS(JOULE_LEVEL_ZERO_RESOLVE)
  if (dlsym(handle, "zesInit") != nullptr) {
    init_ = SysmanInit::kZesInit;
    missing_note = " (it has zesInit)";
    JOULE_LEVEL_ZERO_ZES_INIT_FUNCTIONS(JOULE_LEVEL_ZERO_RESOLVE)
  } else {
    init_ = SysmanInit::kCoreInit;
    missing_note = " (nor zesInit)";
    JOULE_LEVEL_ZERO_CORE_INIT_FUNCTIONS(JOULE_LEVEL_ZERO_RESOLVE)
  }
#undef JOULE_LEVEL_ZERO_RESOLVE
  fn.zelLoaderGetVersions =
      reinterpret_cast<lz::ZelLoaderGetVersionsFn>(dlsym(handle, "zelLoaderGetVersions"));
  return {};
}

Result<void> LevelZeroLibrary::initialise() {
  if (init_ == SysmanInit::kZesInit) {
    JOULE_TRY(check(functions_.zesInit(0),
                    fmt::format("cannot initialise Level Zero Sysman (zesInit, '{}')", path_)));
  } else {
    // Before zesInit (Level Zero 1.5), Sysman came up with the core driver when ZES_ENABLE_SYSMAN=1 was in
    // the environment at zeInit. A zeInit made earlier in the process without it leaves Sysman off: every
    // Sysman call then fails with ZE_RESULT_ERROR_UNINITIALIZED, which the messages show.
    const char* previous = std::getenv("ZES_ENABLE_SYSMAN");
    if (previous == nullptr || std::strcmp(previous, "1") != 0) {
      setenv("ZES_ENABLE_SYSMAN", "1", 1);  // NOLINT(concurrency-mt-unsafe): discovery runs before threads
    }
    log().info(
        "Level Zero: the loader '{}' has no zesInit (Level Zero before 1.5): Sysman initialised through "
        "zeInit "
        "with ZES_ENABLE_SYSMAN=1",
        path_);
    constexpr uint32_t kZeInitFlagGpuOnly = 1;  // ZE_INIT_FLAG_GPU_ONLY
    JOULE_TRY(
        check(functions_.zeInit(kZeInitFlagGpuOnly),
              fmt::format("cannot initialise Level Zero (zeInit with ZES_ENABLE_SYSMAN=1, '{}')", path_)));
  }
  initialised_ = true;
  return {};
}

Result<void> LevelZeroLibrary::check_api_version() const {
  // The structures joule declares are those of API major version 1; any other would be misread.
  const auto refuse = [this](uint32_t version, std::string_view what) -> Result<void> {
    return fail(ErrorCode::kNotSupported,
                "the Level Zero {} of '{}' speaks API version {}.{}, but joule reads only Level Zero {}.x, "
                "whose data layouts it knows",
                what, path_, lz::api_major(version), lz::api_minor(version), lz::kSupportedApiMajor);
  };
  if (init_ == SysmanInit::kCoreInit) {
    const auto driver_list = JOULE_TRY(drivers());
    for (lz::DriverHandle driver : driver_list) {
      uint32_t version = 0;
      JOULE_TRY(check(functions_.zeDriverGetApiVersion(driver, &version),
                      fmt::format("cannot read the API version of a Level Zero driver ('{}')", path_)));
      if (lz::api_major(version) != lz::kSupportedApiMajor) {
        return refuse(version, "driver");
      }
    }
    return {};
  }
  // Sysman has no driver-level version call; the loader reports the API version it speaks.
  if (functions_.zelLoaderGetVersions == nullptr) {
    return {};  // a loader with zesInit but without zelLoaderGetVersions is a 1.x loader
  }
  size_t count = 0;
  if (functions_.zelLoaderGetVersions(&count, nullptr) != lz::ZeResult::kSuccess || count == 0) {
    return {};
  }
  std::vector<lz::LoaderComponentVersion> versions(std::min<size_t>(count, 64));
  count = versions.size();
  if (functions_.zelLoaderGetVersions(&count, versions.data()) != lz::ZeResult::kSuccess) {
    return {};
  }
  versions.resize(std::min(count, versions.size()));
  for (auto& component : versions) {
    component.component_name[lz::kLoaderComponentNameSize - 1] = '\0';
    if (std::string_view(component.component_name) == "loader" &&
        lz::api_major(component.spec_version) != lz::kSupportedApiMajor) {
      return refuse(component.spec_version, "loader");
    }
  }
  return {};
}

LevelZeroLibrary::~LevelZeroLibrary() {
  // Level Zero has no call that undoes zesInit/zeInit, and its drivers keep threads and state that
  // unloading the loader would pull from under them: once initialised, the loader stays loaded.
  if (!initialised_) {
    dlclose(handle_);
  }
}

Result<std::vector<lz::DriverHandle>> LevelZeroLibrary::drivers() const {
  const auto driver_get = init_ == SysmanInit::kZesInit ? functions_.zesDriverGet : functions_.zeDriverGet;
  uint32_t count = 0;
  JOULE_TRY(check(driver_get(&count, nullptr), "cannot count the Level Zero drivers"));
  std::vector<lz::DriverHandle> list(count);
  if (count > 0) {
    JOULE_TRY(check(driver_get(&count, list.data()), "cannot list the Level Zero drivers"));
    list.resize(std::min<size_t>(count, list.size()));
  }
  return list;
}

Result<std::vector<lz::DeviceHandle>> LevelZeroLibrary::devices() const {
  const auto device_get = init_ == SysmanInit::kZesInit ? functions_.zesDeviceGet : functions_.zeDeviceGet;
  const auto driver_list = JOULE_TRY(drivers());
  std::vector<lz::DeviceHandle> all;
  for (size_t d = 0; d < driver_list.size(); ++d) {
    uint32_t count = 0;
    JOULE_TRY(check(device_get(driver_list[d], &count, nullptr),
                    fmt::format("cannot count the devices of Level Zero driver {}", d)));
    std::vector<lz::DeviceHandle> list(count);
    if (count > 0) {
      JOULE_TRY(check(device_get(driver_list[d], &count, list.data()),
                      fmt::format("cannot list the devices of Level Zero driver {}", d)));
      list.resize(std::min<size_t>(count, list.size()));
    }
    all.insert(all.end(), list.begin(), list.end());
  }
  return all;
}

Error LevelZeroLibrary::error(lz::ZeResult result, std::string_view action) const {
  const std::string_view known_name = lz::result_name(result);
  const std::string name = known_name.empty()
                               ? fmt::format("Level Zero result {:#x}", static_cast<uint32_t>(result))
                               : std::string(known_name);
  std::string message = fmt::format("{}: {}", action, name);
  if (result == lz::ZeResult::kErrorInsufficientPermissions) {
    // Sysman writes power limits and frequency ranges to root-only files under /sys/class/drm.
    message += ". Changing Intel GPU settings needs root: run joule as root (e.g. with sudo)";
  } else if (result == lz::ZeResult::kErrorUninitialized && init_ == SysmanInit::kCoreInit) {
    message +=
        ". Sysman is off: set ZES_ENABLE_SYSMAN=1 before anything in the process initialises Level Zero, or "
        "install a Level Zero 1.5+ loader (zesInit)";
  }
  return Error(error_code(result), std::move(message));
}

Result<void> LevelZeroLibrary::check(lz::ZeResult result, std::string_view action) const {
  if (result == lz::ZeResult::kSuccess) {
    return {};
  }
  return tl::make_unexpected(error(result, action));
}

}  // namespace joule::device::levelzero_detail
