// SPDX-License-Identifier: Apache-2.0
// joule/probe/cuda_runner.hpp — the probe's kernels on an NVIDIA GPU through the CUDA driver API, loaded at
// run time (libcuda.so.1; no CUDA toolkit at build time), the kernels embedded in joule as PTX text.
#pragma once

#include <memory>
#include <string>

#include "joule/core/error.hpp"
#include "joule/probe/kernel_runner.hpp"

namespace joule::probe {

/// Opens the CUDA driver (`library`, default: JOULE_CUDA_LIBRARY, else libcuda.so.1), makes a context on
/// the device of CUDA ordinal `ordinal` (the framework index: CUDA applies CUDA_VISIBLE_DEVICES as joule
/// does), loads the two PTX kernels and allocates their buffers (2 × 256 MiB for the copy). Runs are timed on
/// the steady clock around launches and cuCtxSynchronize. Errors: kLibraryMissing (the library or a symbol,
/// named), kNotFound (no such ordinal), and the driver's errors by name ("cuModuleLoadData:
/// CUDA_ERROR_INVALID_PTX (218)").
Result<std::unique_ptr<KernelRunner>> make_cuda_runner(int ordinal, const std::string& library = {});

}  // namespace joule::probe
