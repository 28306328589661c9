// SPDX-License-Identifier: Apache-2.0
// A fake libcuda.so.1 for the probe's CUDA kernel runner, loaded by path through the real loader
// (src/probe/cuda/cuda_library.cpp). One device; kernels "run" instantly. It checks what a driver would:
// the PTX defines both kernels, launches name a loaded function and pass parameters, calls happen in a
// context. FAKE_CUDA_FAIL=<symbol> makes that call fail with CUDA_ERROR_UNKNOWN (999), FAKE_CUDA_DEVICES=N
// sets the device count; built with FAKE_CUDA_OMIT_LAUNCH, cuLaunchKernel is missing (a too-old driver).
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "probe/cuda/cuda_api.hpp"

using namespace joule::probe::cuda;

namespace {

constexpr CUresult kInvalidValue = 1;
constexpr CUresult kNotInitialized = 3;
constexpr CUresult kInvalidDevice = 101;
constexpr CUresult kInvalidPtx = 218;
constexpr CUresult kInvalidContext = 201;
constexpr CUresult kUnknown = 999;

bool g_initialised = false;
CUcontext g_context = nullptr;
int g_context_storage = 0;
int g_module_storage = 0;
int g_functions[2] = {0, 0};
unsigned long long g_next_pointer = 0x10000;  // NOLINT(google-runtime-int)

bool fails(std::string_view symbol) {
  const char* configured = std::getenv("FAKE_CUDA_FAIL");
  return configured != nullptr && symbol == configured;
}

}  // namespace

#define FAKE_CUDA_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_CUDA_EXPORT CUresult cuInit(unsigned int flags) {
  if (fails("cuInit") || flags != 0) {
    return fails("cuInit") ? kUnknown : kInvalidValue;
  }
  g_initialised = true;
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuDriverGetVersion(int* version) {
  *version = 12040;
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (!g_initialised) {
    return kNotInitialized;
  }
  const char* configured = std::getenv("FAKE_CUDA_DEVICES");
  *count = configured != nullptr ? std::atoi(configured) : 1;
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? kCudaSuccess : kInvalidDevice;
}
FAKE_CUDA_EXPORT CUresult cuDeviceGetName(char* name, int length, CUdevice /*device*/) {
  std::strncpy(name, "Fake GPU", static_cast<size_t>(length));
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuCtxCreate_v2(CUcontext* context, unsigned int /*flags*/, CUdevice device) {
  if (!g_initialised || device != 0) {
    return g_initialised ? kInvalidDevice : kNotInitialized;
  }
  g_context = reinterpret_cast<CUcontext>(&g_context_storage);
  *context = g_context;
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuCtxDestroy_v2(CUcontext context) {
  if (context != g_context) {
    return kInvalidContext;
  }
  g_context = nullptr;
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuCtxSetCurrent(CUcontext context) {
  return context == g_context ? kCudaSuccess : kInvalidContext;
}
FAKE_CUDA_EXPORT CUresult cuCtxSynchronize() {
  if (fails("cuCtxSynchronize")) {
    return kUnknown;
  }
  return g_context != nullptr ? kCudaSuccess : kInvalidContext;
}
FAKE_CUDA_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  const std::string_view ptx(static_cast<const char*>(image));
  if (fails("cuModuleLoadData") || ptx.find(".entry joule_fma(") == std::string_view::npos ||
      ptx.find(".entry joule_copy(") == std::string_view::npos || ptx.rfind(".version ", 0) != 0) {
    return kInvalidPtx;
  }
  *module = reinterpret_cast<CUmodule>(&g_module_storage);
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuModuleUnload(CUmodule /*module*/) {
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (module != reinterpret_cast<CUmodule>(&g_module_storage)) {
    return kInvalidValue;
  }
  const std::string_view wanted(name);
  if (wanted != "joule_fma" && wanted != "joule_copy") {
    return 500;  // CUDA_ERROR_NOT_FOUND
  }
  *function = reinterpret_cast<CUfunction>(&g_functions[wanted == "joule_fma" ? 0 : 1]);
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* pointer, size_t bytes) {
  if (fails("cuMemAlloc_v2")) {
    return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  }
  *pointer = g_next_pointer;
  g_next_pointer += bytes;
  return kCudaSuccess;
}
FAKE_CUDA_EXPORT CUresult cuMemFree_v2(CUdeviceptr /*pointer*/) {
  return kCudaSuccess;
}
#ifndef FAKE_CUDA_OMIT_LAUNCH
FAKE_CUDA_EXPORT CUresult cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int /*grid_y*/,
                                         unsigned int /*grid_z*/, unsigned int block_x,
                                         unsigned int /*block_y*/, unsigned int /*block_z*/,
                                         unsigned int /*shared_bytes*/, CUstream /*stream*/, void** params,
                                         void** /*extra*/) {
  if (fails("cuLaunchKernel")) {
    return kUnknown;
  }
  const bool known = function == reinterpret_cast<CUfunction>(&g_functions[0]) ||
                     function == reinterpret_cast<CUfunction>(&g_functions[1]);
  if (g_context == nullptr || !known || params == nullptr || grid_x == 0 || block_x == 0 || block_x > 1024) {
    return kInvalidValue;
  }
  return kCudaSuccess;
}
#endif
FAKE_CUDA_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  switch (error) {
    case 1:
      *name = "CUDA_ERROR_INVALID_VALUE";
      return kCudaSuccess;
    case 2:
      *name = "CUDA_ERROR_OUT_OF_MEMORY";
      return kCudaSuccess;
    case 3:
      *name = "CUDA_ERROR_NOT_INITIALIZED";
      return kCudaSuccess;
    case 101:
      *name = "CUDA_ERROR_INVALID_DEVICE";
      return kCudaSuccess;
    case 201:
      *name = "CUDA_ERROR_INVALID_CONTEXT";
      return kCudaSuccess;
    case 218:
      *name = "CUDA_ERROR_INVALID_PTX";
      return kCudaSuccess;
    case 999:
      *name = "CUDA_ERROR_UNKNOWN";
      return kCudaSuccess;
    default:
      return kInvalidValue;
  }
}
