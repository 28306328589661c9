// SPDX-License-Identifier: Apache-2.0
#include "device/amdsmi/amdsmi_library.hpp"

#include <cctype>

#include <dlfcn.h>
#include <fmt/format.h>

#include "device/amd_counter_check.hpp"

namespace joule::device::amdsmi_detail {

namespace {

std::string amdsmi_dl_error_text() {
  const char* text = dlerror();
  return text != nullptr ? std::string(text) : std::string("unknown dlopen error");
}

}  // namespace

ErrorCode error_code(smi::Status status) {
  switch (status) {
    case smi::Status::kNotSupported:
    case smi::Status::kNotYetImplemented:
    case smi::Status::kSettingUnavailable:
      return ErrorCode::kNotSupported;
    case smi::Status::kNoPerm:
      return ErrorCode::kPermissionDenied;
    case smi::Status::kInval:
    case smi::Status::kArgPtrNull:
      return ErrorCode::kInvalidArgument;
    case smi::Status::kInputOutOfBounds:
      return ErrorCode::kOutOfRange;
    case smi::Status::kNotFound:
    case smi::Status::kFileNotFound:
    case smi::Status::kDirectoryNotFound:
      return ErrorCode::kNotFound;
    case smi::Status::kIo:
    case smi::Status::kFileError:
      return ErrorCode::kIo;
    case smi::Status::kFailLoadModule:
    case smi::Status::kFailLoadSymbol:
      return ErrorCode::kLibraryMissing;  // AMD SMI could not load a library it needs (libdrm, …)
    case smi::Status::kSuccess:           // never converted; mapping it to kInternal flags the bug
      return ErrorCode::kInternal;
    default:  // INIT_ERROR, NOT_INIT, DRIVER_NOT_LOADED, BUSY, UNKNOWN_ERROR, values newer than 26.x, …
      return ErrorCode::kDevice;
  }
}

std::string format_uuid(std::string_view amd_smi_uuid) {
  if (amd_smi_uuid.empty()) {
    return "";
  }
  std::string uuid = "GPU-";
  for (const char c : amd_smi_uuid) {
    uuid += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return uuid;
}

bool amdsmi_counter_plausible(double measured_mj, double expected_mj) {
  return amd_counter::plausible(measured_mj, expected_mj);
}

Result<std::shared_ptr<const AmdSmiLibrary>> AmdSmiLibrary::open(const std::string& library) {
  dlerror();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return fail(ErrorCode::kLibraryMissing,
                "cannot load the AMD SMI library '{}': {}. Install AMD SMI (ROCm 7's amd-smi-lib package), "
                "or set JOULE_AMD_SMI_LIBRARY to the full path of libamd_smi.so",
                library, amdsmi_dl_error_text());
  }
  // From here the destructor dlcloses; it calls amdsmi_shut_down only once amdsmi_init has succeeded.
  std::shared_ptr<AmdSmiLibrary> loaded(new AmdSmiLibrary(handle, library));
  AmdSmiFunctions& fn = loaded->functions_;
#define JOULE_AMD_SMI_RESOLVE(symbol, type)                                                                \
  fn.symbol = reinterpret_cast<smi::type>(dlsym(handle, #symbol));                                         \
  if (fn.symbol == nullptr) {                                                                              \
    return fail(ErrorCode::kLibraryMissing,                                                                \
                "the AMD SMI library '{}' has no function " #symbol                                        \
                "; it is not AMD SMI {} (ROCm 7). Install ROCm 7's AMD SMI, or set JOULE_AMD_SMI_LIBRARY " \
                "to the full path of another libamd_smi.so",                                               \
                library, smi::kSupportedLibMajor);                                                         \
  }
  JOULE_AMD_SMI_FUNCTIONS(JOULE_AMD_SMI_RESOLVE)
#undef JOULE_AMD_SMI_RESOLVE

  JOULE_TRY(loaded->check(fn.amdsmi_init(smi::kInitAmdGpus),
                          fmt::format("cannot initialise AMD SMI ('{}')", library)));
  loaded->initialised_ = true;

  // The structures joule declares are those of one major version; any other would be misread.
  smi::Version version{};
  JOULE_TRY(loaded->check(fn.amdsmi_get_lib_version(&version),
                          fmt::format("cannot read the version of the AMD SMI library '{}'", library)));
  if (version.major != smi::kSupportedLibMajor) {
    // Before 26.x, amdsmi_version_t began with the year (24 for ROCm 6.x): that is what `major` shows then.
    return fail(ErrorCode::kNotSupported,
                "the AMD SMI library '{}' is version {}.{}.{}, but joule reads only AMD SMI {}.x (ROCm 7), "
                "whose data layouts it knows; AMD GPUs are read through ROCm SMI instead",
                library, version.major, version.minor, version.release, smi::kSupportedLibMajor);
  }
  return std::shared_ptr<const AmdSmiLibrary>(std::move(loaded));
}

AmdSmiLibrary::~AmdSmiLibrary() {
  if (initialised_) {
    functions_.amdsmi_shut_down();
  }
  dlclose(handle_);
}

Error AmdSmiLibrary::error(smi::Status status, std::string_view action) const {
  const std::string_view known_name = smi::status_name(status);
  const std::string name = known_name.empty()
                               ? fmt::format("AMD SMI status {}", static_cast<uint32_t>(status))
                               : std::string(known_name);
  const char* raw_text = nullptr;
  std::string text = "unknown status";
  if (functions_.amdsmi_status_code_to_string != nullptr &&
      functions_.amdsmi_status_code_to_string(status, &raw_text) == smi::Status::kSuccess &&
      raw_text != nullptr && *raw_text != '\0') {
    text = raw_text;
  }
  std::string message = fmt::format("{}: {}: {}", action, name, text);
  if (status == smi::Status::kNoPerm) {
    // AMD SMI writes power caps and clocks to root-only files under /sys/class/drm.
    if (message.back() != '.') {
      message += '.';
    }
    message += " Changing AMD GPU settings needs root: run joule as root (e.g. with sudo)";
  }
  return Error(error_code(status), std::move(message));
}

Result<void> AmdSmiLibrary::check(smi::Status status, std::string_view action) const {
  if (status == smi::Status::kSuccess) {
    return {};
  }
  return tl::make_unexpected(error(status, action));
}

}  // namespace joule::device::amdsmi_detail
