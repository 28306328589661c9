// SPDX-License-Identifier: Apache-2.0
#include "probe/cuda/cuda_library.hpp"

#include <cstdlib>

#include <dlfcn.h>
#include <fmt/format.h>

namespace joule::probe::cuda {

namespace {

template <class Function>
bool resolve_cuda_symbol(void* handle, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(dlsym(handle, symbol));
  return function != nullptr;
}

}  // namespace

Result<std::shared_ptr<CudaLibrary>> CudaLibrary::open(const std::string& path) {
  std::string library = path;
  if (library.empty()) {
    const char* configured = std::getenv("JOULE_CUDA_LIBRARY");
    library = configured != nullptr && *configured != '\0' ? configured : "libcuda.so.1";
  }
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    return fail(
        ErrorCode::kLibraryMissing,
        "cannot load the CUDA driver: {}. Install the NVIDIA driver, or set JOULE_CUDA_LIBRARY to the "
        "path of libcuda.so.1",
        reason != nullptr ? reason : library);
  }
  std::shared_ptr<CudaLibrary> cuda(new CudaLibrary(library, handle));
  CudaApi& api = cuda->api_;
  const char* missing = nullptr;
  const auto require = [&](const char* symbol, auto& function) {
    if (!resolve_cuda_symbol(handle, symbol, function) && missing == nullptr) {
      missing = symbol;
    }
  };
  require("cuInit", api.init);
  require("cuDriverGetVersion", api.driver_get_version);
  require("cuDeviceGetCount", api.device_get_count);
  require("cuDeviceGet", api.device_get);
  require("cuDeviceGetName", api.device_get_name);
  require("cuCtxCreate_v2", api.ctx_create);
  require("cuCtxDestroy_v2", api.ctx_destroy);
  require("cuCtxSetCurrent", api.ctx_set_current);
  require("cuCtxSynchronize", api.ctx_synchronize);
  require("cuModuleLoadData", api.module_load_data);
  require("cuModuleUnload", api.module_unload);
  require("cuModuleGetFunction", api.module_get_function);
  require("cuMemAlloc_v2", api.mem_alloc);
  require("cuMemFree_v2", api.mem_free);
  require("cuLaunchKernel", api.launch_kernel);
  require("cuGetErrorName", api.get_error_name);
  if (missing != nullptr) {
    return fail(ErrorCode::kLibraryMissing,
                "{} lacks the required symbol {}: the NVIDIA driver is probably too old for joule probe's "
                "kernels; upgrade it, or set JOULE_CUDA_LIBRARY to a newer libcuda.so.1",
                library, missing);
  }
  return cuda;
}

CudaLibrary::~CudaLibrary() {
  if (handle_ != nullptr) {
    dlclose(handle_);
  }
}

Result<void> CudaLibrary::check(CUresult result, std::string_view what) const {
  if (result == kCudaSuccess) {
    return {};
  }
  const char* name = nullptr;
  if (api_.get_error_name == nullptr || api_.get_error_name(result, &name) != kCudaSuccess ||
      name == nullptr) {
    name = "CUDA_ERROR_UNKNOWN";
  }
  constexpr CUresult kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY
  return fail(result == kOutOfMemory ? ErrorCode::kOutOfRange : ErrorCode::kDevice, "{}: {} ({})", what, name,
              result);
}

}  // namespace joule::probe::cuda
