// SPDX-License-Identifier: Apache-2.0
// The CUDA driver library loaded at run time: the one place that turns a CUresult into an Error.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "joule/core/error.hpp"

#include "probe/cuda/cuda_api.hpp"

namespace joule::probe::cuda {

class CudaLibrary {
 public:
  /// Loads `path` (default: JOULE_CUDA_LIBRARY, else libcuda.so.1) and resolves every symbol of CudaApi.
  /// kLibraryMissing naming the library or the missing symbol.
  static Result<std::shared_ptr<CudaLibrary>> open(const std::string& path = {});
  ~CudaLibrary();
  CudaLibrary(const CudaLibrary&) = delete;
  CudaLibrary& operator=(const CudaLibrary&) = delete;

  const CudaApi& api() const { return api_; }
  /// @return success, or kDevice "<what>: <CUDA_ERROR_NAME> (<code>)" (kOutOfRange for out of memory).
  Result<void> check(CUresult result, std::string_view what) const;

 private:
  CudaLibrary(std::string path, void* handle) : path_(std::move(path)), handle_(handle) {}
  std::string path_;
  void* handle_;
  CudaApi api_;
};

}  // namespace joule::probe::cuda
