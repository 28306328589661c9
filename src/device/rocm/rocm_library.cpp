// SPDX-License-Identifier: Apache-2.0
#include "device/rocm/rocm_library.hpp"

#include <cstdio>

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include "joule/core/log.hpp"

#include "device/amd_counter_check.hpp"

namespace joule::device::rocm_detail {

namespace smi = rocm_smi;

namespace {

// Runs `call` with file descriptor 2 redirected to a temporary file, and returns what was written there
// (trimmed, line breaks turned into ";"). If the redirection cannot be set up, the call runs unredirected.
template <class Call>
auto with_stderr_captured(Call&& call, std::string& captured) {
  std::fflush(stderr);
  std::FILE* sink = std::tmpfile();
  const int saved = sink != nullptr ? ::dup(STDERR_FILENO) : -1;
  if (saved < 0 || ::dup2(::fileno(sink), STDERR_FILENO) < 0) {
    if (saved >= 0) {
      ::close(saved);
    }
    if (sink != nullptr) {
      std::fclose(sink);
    }
    return call();
  }
  auto result = call();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(sink);
  char buffer[512];
  size_t n = 0;
  std::string text;
  while ((n = std::fread(buffer, 1, sizeof buffer, sink)) > 0 && text.size() < 4096) {
    text.append(buffer, n);
  }
  std::fclose(sink);
  for (char& c : text) {
    if (c == '\n') {
      c = ';';
    }
  }
  while (!text.empty() && (text.back() == ';' || text.back() == ' ')) {
    text.pop_back();
  }
  captured = text;
  return result;
}

std::string dl_error_text() {
  const char* text = dlerror();
  return text != nullptr ? std::string(text) : std::string("unknown dlopen error");
}

// ROCm SMI's status strings are inconsistent: some start with "RSMI_STATUS_…: ", some do not. Strip the
// prefix so every message has the name exactly once.
std::string_view strip_name_prefix(std::string_view text, std::string_view name) {
  if (!name.empty() && text.substr(0, name.size()) == name && text.substr(name.size(), 2) == ": ") {
    text.remove_prefix(name.size() + 2);
  }
  return text;
}

}  // namespace

ErrorCode error_code(smi::Status status) {
  switch (status) {
    case smi::Status::kNotSupported:
    case smi::Status::kNotYetImplemented:
      return ErrorCode::kNotSupported;
    case smi::Status::kPermission:
      return ErrorCode::kPermissionDenied;
    case smi::Status::kInvalidArgs:
      return ErrorCode::kInvalidArgument;
    case smi::Status::kInputOutOfBounds:
      return ErrorCode::kOutOfRange;
    case smi::Status::kNotFound:
      return ErrorCode::kNotFound;
    case smi::Status::kFileError:
      return ErrorCode::kIo;
    case smi::Status::kSuccess:  // never converted; mapping it to kInternal flags the bug
      return ErrorCode::kInternal;
    default:  // INIT_ERROR, BUSY, INTERNAL_EXCEPTION, UNKNOWN_ERROR, values newer than 5.2, …
      return ErrorCode::kDevice;
  }
}

std::string format_unique_id(uint64_t unique_id) {
  return fmt::format("GPU-{:016x}", unique_id);
}

bool energy_counter_plausible(double measured_mj, double expected_mj) {
  return amd_counter::plausible(measured_mj, expected_mj);
}

Result<std::shared_ptr<const RocmLibrary>> RocmLibrary::open(const std::string& library) {
  dlerror();
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return fail(
        ErrorCode::kLibraryMissing,
        "cannot load the ROCm SMI library '{}': {}. Install ROCm SMI (ROCm, or Debian/Ubuntu's "
        "librocm-smi64-1 package), or set JOULE_ROCM_SMI_LIBRARY to the full path of librocm_smi64.so.1",
        library, dl_error_text());
  }
  // From here the destructor dlcloses; it calls rsmi_shut_down only once rsmi_init has succeeded.
  std::shared_ptr<RocmLibrary> loaded(new RocmLibrary(handle, library));
  RocmFunctions& fn = loaded->functions_;
#define JOULE_ROCM_RESOLVE(symbol, type, required)                                                       \
  fn.symbol = reinterpret_cast<smi::type>(dlsym(handle, #symbol));                                       \
  if ((required) && fn.symbol == nullptr) {                                                              \
    return fail(                                                                                         \
        ErrorCode::kLibraryMissing,                                                                      \
        "the ROCm SMI library '{}' has no function " #symbol                                             \
        "; it is too old (joule needs ROCm SMI 5.2 or later) or not ROCm SMI. Install a newer ROCm, or " \
        "set JOULE_ROCM_SMI_LIBRARY to the full path of another librocm_smi64.so.1",                     \
        library);                                                                                        \
  }
  JOULE_ROCM_SMI_FUNCTIONS(JOULE_ROCM_RESOLVE)
#undef JOULE_ROCM_RESOLVE

  // rsmi_init writes its complaints (e.g. "Failed to open drm root directory" on machines without an AMD
  // GPU) straight to stderr; keep them out of joule's output and put them in the log and the error instead.
  std::string init_output;
  const smi::Status init_status = with_stderr_captured([&fn] { return fn.rsmi_init(0); }, init_output);
  if (!init_output.empty()) {
    log().debug("rsmi_init printed: {}", init_output);
  }
  if (auto init = loaded->check(init_status, fmt::format("cannot initialise ROCm SMI ('{}')", library));
      !init) {
    if (init_output.empty()) {
      return tl::make_unexpected(init.error());
    }
    return tl::make_unexpected(
        Error(init.error().code(), fmt::format("{} (it printed: {})", init.error().message(), init_output)));
  }
  loaded->initialised_ = true;
  return std::shared_ptr<const RocmLibrary>(std::move(loaded));
}

RocmLibrary::~RocmLibrary() {
  if (initialised_) {
    functions_.rsmi_shut_down();
  }
  dlclose(handle_);
}

std::string RocmLibrary::status_text(smi::Status status) const {
  const std::string_view known_name = smi::status_name(status);
  const std::string name = known_name.empty()
                               ? fmt::format("ROCm SMI status {}", static_cast<uint32_t>(status))
                               : std::string(known_name);
  const char* raw_text = nullptr;
  std::string text;
  if (functions_.rsmi_status_string(status, &raw_text) == smi::Status::kSuccess && raw_text != nullptr) {
    text = strip_name_prefix(raw_text, name);
  } else {
    text = "unknown status";
  }
  return fmt::format("{}: {}", name, text);
}

Error RocmLibrary::error(smi::Status status, std::string_view action) const {
  std::string message = fmt::format("{}: {}", action, status_text(status));
  if (status == smi::Status::kPermission) {
    // ROCm SMI writes power caps and clocks to root-only files under /sys/class/drm.
    if (!message.empty() && message.back() != '.') {
      message += '.';
    }
    message += " Changing AMD GPU settings needs root: run joule as root (e.g. with sudo)";
  }
  return Error(error_code(status), std::move(message));
}

Result<void> RocmLibrary::check(smi::Status status, std::string_view action) const {
  if (status == smi::Status::kSuccess) {
    return {};
  }
  return tl::make_unexpected(error(status, action));
}

}  // namespace joule::device::rocm_detail
