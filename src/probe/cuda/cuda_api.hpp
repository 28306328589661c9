// SPDX-License-Identifier: Apache-2.0
// The part of the CUDA driver API (cuda.h, libcuda.so.1) the probe's kernel runner uses, declared here so
// that joule builds without the CUDA toolkit. Values and signatures as in cuda.h (CUDA 11–12); the _v2 entry
// points are the ones cuda.h #defines the plain names to since CUDA 3.2.
#pragma once

#include <cstddef>
#include <cstdint>

namespace joule::probe::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(google-runtime-int): cuda.h's type
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
struct CUstream_st;
using CUstream = CUstream_st*;

inline constexpr CUresult kCudaSuccess = 0;  ///< CUDA_SUCCESS

/// Function pointers into the driver, resolved by CudaLibrary::open().
struct CudaApi {
  CUresult (*init)(unsigned int flags) = nullptr;                                  // cuInit
  CUresult (*driver_get_version)(int* version) = nullptr;                          // cuDriverGetVersion
  CUresult (*device_get_count)(int* count) = nullptr;                              // cuDeviceGetCount
  CUresult (*device_get)(CUdevice* device, int ordinal) = nullptr;                 // cuDeviceGet
  CUresult (*device_get_name)(char* name, int length, CUdevice device) = nullptr;  // cuDeviceGetName
  CUresult (*ctx_create)(CUcontext* context, unsigned int flags,
                         CUdevice device) = nullptr;                            // cuCtxCreate_v2
  CUresult (*ctx_destroy)(CUcontext context) = nullptr;                         // cuCtxDestroy_v2
  CUresult (*ctx_set_current)(CUcontext context) = nullptr;                     // cuCtxSetCurrent
  CUresult (*ctx_synchronize)() = nullptr;                                      // cuCtxSynchronize
  CUresult (*module_load_data)(CUmodule* module, const void* image) = nullptr;  // cuModuleLoadData
  CUresult (*module_unload)(CUmodule module) = nullptr;                         // cuModuleUnload
  CUresult (*module_get_function)(CUfunction* function, CUmodule module, const char* name) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr* pointer, size_t bytes) = nullptr;  // cuMemAlloc_v2
  CUresult (*mem_free)(CUdeviceptr pointer) = nullptr;                  // cuMemFree_v2
  CUresult (*launch_kernel)(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                            unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                            unsigned int block_z, unsigned int shared_bytes, CUstream stream, void** params,
                            void** extra) = nullptr;
  CUresult (*get_error_name)(CUresult error, const char** name) = nullptr;  // cuGetErrorName
};

}  // namespace joule::probe::cuda
