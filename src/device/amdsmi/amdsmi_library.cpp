// SPDX-License-Identifier: Apache-2.0
#include "device/amdsmi/amdsmi_library.hpp"

#include <cctype>
#include <limits>
#include <type_traits>

#include <dlfcn.h>
#include <fmt/format.h>

#include "device/amd_counter_check.hpp"

namespace joule::device::amdsmi_detail {

namespace {

std::string amdsmi_dl_error_text() {
  const char* text = dlerror();
  return text != nullptr ? std::string(text) : std::string("unknown dlopen error");
}

// What AMD SMI puts in a member the board does not report (UINT32_MAX; some 26.x releases UINT64_MAX in
// socket_power).
std::optional<uint64_t> amdsmi_reported(uint64_t value) {
  if (value == std::numeric_limits<uint32_t>::max() || value == std::numeric_limits<uint64_t>::max()) {
    return std::nullopt;
  }
  return value;
}

// Reads amdsmi_power_info_t in the layout `Info` and converts it: the one place the layouts differ.
template <class Info>
smi::Status amdsmi_read_power(const AmdSmiFunctions& fn, smi::ProcessorHandle handle, AmdSmiPower& out) {
  Info info{};
  const smi::Status status = fn.amdsmi_get_power_info(handle, &info);
  out.current_socket_w = amdsmi_reported(info.current_socket_power);
  out.average_socket_w = amdsmi_reported(info.average_socket_power);
  if constexpr (std::is_same_v<Info, smi::PowerInfoV26>) {
    out.socket_w = amdsmi_reported(info.socket_power);  // 25.x's is µW and filled only on a host: ignored
  }
  return status;
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

std::string AmdSmiAbi::description() const {
  return fmt::format("AMD SMI {} ({} ABI)", version, lib_major == smi::kLibMajor26 ? "ROCm 7" : "ROCm 6.x");
}

Result<AmdSmiAbi> choose_abi(const smi::Version& version, const std::string& library) {
  const uint32_t first = version.word[0];
  AmdSmiAbi abi;
  abi.lib_major = first;
  if (first == smi::kLibMajor24) {
    // 24.x: year.major.minor.release; the year is the ABI's number. Caps were in W until 24.5.2.
    const uint32_t major = version.word[1];
    const uint32_t minor = version.word[2];
    abi.version = fmt::format("{}.{}.{}", first, major, minor);
    abi.power_caps_in_w = major < 5 || (major == 5 && minor < 2);
    return abi;
  }
  abi.version = fmt::format("{}.{}.{}", first, version.word[1], version.word[2]);
  if (first == smi::kLibMajor25 || first == smi::kLibMajor26) {
    return abi;
  }
  // 23.x (ROCm 6.0 and older) and anything newer than joule: their structures would be misread.
  return fail(
      ErrorCode::kNotSupported,
      "the AMD SMI library '{}' is version {}, but joule reads only AMD SMI {}.x and {}.x (ROCm 6.1 to "
      "6.4) and {}.x (ROCm 7), whose data layouts it knows; AMD GPUs are read through ROCm SMI instead",
      library, abi.version, smi::kLibMajor24, smi::kLibMajor25, smi::kLibMajor26);
}

Result<AmdSmiPower> AmdSmiLibrary::power_info(smi::ProcessorHandle handle, std::string_view action) const {
  AmdSmiPower power;
  smi::Status status = smi::Status::kSuccess;
  switch (abi_.lib_major) {
    case smi::kLibMajor24:
      status = amdsmi_read_power<smi::PowerInfoV24>(functions_, handle, power);
      break;
    case smi::kLibMajor25:
      status = amdsmi_read_power<smi::PowerInfoV25>(functions_, handle, power);
      break;
    default:
      status = amdsmi_read_power<smi::PowerInfoV26>(functions_, handle, power);
      break;
  }
  JOULE_TRY(check(status, action));
  return power;
}

Result<AmdSmiPowerCaps> AmdSmiLibrary::power_cap_info(smi::ProcessorHandle handle, uint32_t sensor,
                                                      std::string_view action) const {
  smi::PowerCapInfo info{};
  JOULE_TRY(check(functions_.amdsmi_get_power_cap_info(handle, sensor, &info), action));
  const uint64_t to_uw = abi_.power_caps_in_w ? 1'000'000 : 1;
  return AmdSmiPowerCaps{info.power_cap * to_uw, info.default_power_cap * to_uw, info.min_power_cap * to_uw,
                         info.max_power_cap * to_uw};
}

Result<std::shared_ptr<const AmdSmiLibrary>> AmdSmiLibrary::open(const std::string& library) {
  dlerror();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return fail(ErrorCode::kLibraryMissing,
                "cannot load the AMD SMI library '{}': {}. Install AMD SMI (the amd-smi-lib package of ROCm "
                "6.1 or later), or set JOULE_AMD_SMI_LIBRARY to the full path of libamd_smi.so",
                library, amdsmi_dl_error_text());
  }
  // From here the destructor dlcloses; it calls amdsmi_shut_down only once amdsmi_init has succeeded.
  std::shared_ptr<AmdSmiLibrary> loaded(new AmdSmiLibrary(handle, library));
  AmdSmiFunctions& fn = loaded->functions_;
#define JOULE_AMD_SMI_RESOLVE(symbol, type)                                                          \
  fn.symbol = reinterpret_cast<smi::type>(dlsym(handle, #symbol));                                   \
  if (fn.symbol == nullptr) {                                                                        \
    return fail(ErrorCode::kLibraryMissing,                                                          \
                "the AMD SMI library '{}' has no function " #symbol                                  \
                "; it is not AMD SMI 24.x to 26.x (ROCm 6.1 to 7). Install the AMD SMI of ROCm 6.1 " \
                "or later, or set JOULE_AMD_SMI_LIBRARY to the full path of another libamd_smi.so",  \
                library);                                                                            \
  }
  JOULE_AMD_SMI_FUNCTIONS(JOULE_AMD_SMI_RESOLVE)
#undef JOULE_AMD_SMI_RESOLVE

  JOULE_TRY(loaded->check(fn.amdsmi_init(smi::kInitAmdGpus),
                          fmt::format("cannot initialise AMD SMI ('{}')", library)));
  loaded->initialised_ = true;

  // The structures differ between major versions: choose the layouts the library speaks, or refuse.
  smi::Version version{};
  JOULE_TRY(loaded->check(fn.amdsmi_get_lib_version(&version),
                          fmt::format("cannot read the version of the AMD SMI library '{}'", library)));
  loaded->abi_ = JOULE_TRY(choose_abi(version, library));
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
