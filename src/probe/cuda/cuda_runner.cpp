// SPDX-License-Identifier: Apache-2.0
// The CUDA kernel runner: two hand-written PTX kernels (an FMA loop and a streaming copy) loaded with
// cuModuleLoadData and launched with cuLaunchKernel (PTX ISA 6.0, sm_50: every GPU the driver still supports
// JIT-compiles it).
#include "joule/probe/cuda_runner.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "joule/core/clock.hpp"

#include "probe/cuda/cuda_library.hpp"

namespace joule::probe {

namespace {

// The compute kernel: each thread runs `loops` × 4 dependent-pair FMAs and stores one float (so the loop is
// not dead code). The memory kernel: a grid-stride copy of `count` floats from src to dst.
constexpr const char* kProbePtx = R"(.version 6.0
.target sm_50
.address_size 64

.visible .entry joule_fma(
    .param .u64 joule_fma_out,
    .param .u32 joule_fma_loops
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<5>;
    .reg .b64 %rd<4>;

    ld.param.u64 %rd1, [joule_fma_out];
    ld.param.u32 %r1, [joule_fma_loops];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    cvt.rn.f32.u32 %f1, %r5;
    mov.f32 %f2, 0f3F7FFFFE;
    mov.f32 %f3, 0f3A83126F;
    mov.f32 %f4, %f1;
    mov.u32 %r6, 0;
FMA_LOOP:
    fma.rn.f32 %f4, %f4, %f2, %f3;
    fma.rn.f32 %f1, %f1, %f2, %f3;
    fma.rn.f32 %f4, %f4, %f2, %f3;
    fma.rn.f32 %f1, %f1, %f2, %f3;
    add.s32 %r6, %r6, 1;
    setp.lt.u32 %p1, %r6, %r1;
    @%p1 bra FMA_LOOP;
    add.f32 %f4, %f4, %f1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd3, %rd2, %rd3;
    st.global.f32 [%rd3], %f4;
    ret;
}

.visible .entry joule_copy(
    .param .u64 joule_copy_dst,
    .param .u64 joule_copy_src,
    .param .u32 joule_copy_count
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<8>;

    ld.param.u64 %rd1, [joule_copy_dst];
    ld.param.u64 %rd2, [joule_copy_src];
    ld.param.u32 %r1, [joule_copy_count];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    mov.u32 %r6, %nctaid.x;
    mul.lo.s32 %r6, %r6, %r3;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra COPY_DONE;
COPY_LOOP:
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    add.s64 %rd5, %rd1, %rd3;
    st.global.f32 [%rd5], %f1;
    add.s32 %r5, %r5, %r6;
    setp.lt.u32 %p1, %r5, %r1;
    @%p1 bra COPY_LOOP;
COPY_DONE:
    ret;
}
)";

constexpr unsigned kBlocks = 1024;
constexpr unsigned kThreads = 256;
constexpr unsigned kFmaLoops = 65536;
constexpr unsigned kCopyFloats = 64u << 20;  // 256 MiB each way

using cuda::CUdeviceptr;

class CudaRunner final : public KernelRunner {
 public:
  explicit CudaRunner(std::shared_ptr<cuda::CudaLibrary> library) : cuda_(std::move(library)) {}
  ~CudaRunner() override {
    const cuda::CudaApi& api = cuda_->api();
    if (context_ == nullptr) {
      return;
    }
    api.ctx_set_current(context_);
    for (const CUdeviceptr pointer : {out_, src_, dst_}) {
      if (pointer != 0) {
        api.mem_free(pointer);
      }
    }
    if (module_ != nullptr) {
      api.module_unload(module_);
    }
    api.ctx_destroy(context_);
  }
  CudaRunner(const CudaRunner&) = delete;
  CudaRunner& operator=(const CudaRunner&) = delete;

  Result<void> start(int ordinal) {
    const cuda::CudaApi& api = cuda_->api();
    JOULE_TRY(cuda_->check(api.init(0), "cuInit"));
    int version = 0;
    JOULE_TRY(cuda_->check(api.driver_get_version(&version), "cuDriverGetVersion"));
    driver_version_ = fmt::format("{}.{}", version / 1000, (version % 1000) / 10);
    int count = 0;
    JOULE_TRY(cuda_->check(api.device_get_count(&count), "cuDeviceGetCount"));
    if (ordinal < 0 || ordinal >= count) {
      return fail(ErrorCode::kNotFound, "CUDA has no device {} (it sees {})", ordinal, count);
    }
    cuda::CUdevice device = 0;
    JOULE_TRY(cuda_->check(api.device_get(&device, ordinal), "cuDeviceGet"));
    JOULE_TRY(cuda_->check(api.ctx_create(&context_, 0, device), "cuCtxCreate"));
    JOULE_TRY(cuda_->check(api.module_load_data(&module_, kProbePtx), "cuModuleLoadData"));
    JOULE_TRY(
        cuda_->check(api.module_get_function(&fma_, module_, "joule_fma"), "cuModuleGetFunction joule_fma"));
    JOULE_TRY(cuda_->check(api.module_get_function(&copy_, module_, "joule_copy"),
                           "cuModuleGetFunction joule_copy"));
    JOULE_TRY(cuda_->check(api.mem_alloc(&out_, size_t{kBlocks} * kThreads * sizeof(float)), "cuMemAlloc"));
    JOULE_TRY(cuda_->check(api.mem_alloc(&src_, size_t{kCopyFloats} * sizeof(float)), "cuMemAlloc"));
    JOULE_TRY(cuda_->check(api.mem_alloc(&dst_, size_t{kCopyFloats} * sizeof(float)), "cuMemAlloc"));
    return {};
  }

  std::string name() const override { return "cuda"; }
  std::string driver_version() const override { return driver_version_; }

  Result<KernelRunResult> run(Kernel kernel, int64_t iterations, double between_interval_s,
                              const std::function<bool()>& between) override {
    const cuda::CudaApi& api = cuda_->api();
    JOULE_TRY(cuda_->check(api.ctx_set_current(context_), "cuCtxSetCurrent"));
    unsigned loops = kFmaLoops;
    unsigned count = kCopyFloats;
    void* fma_params[] = {&out_, &loops};
    void* copy_params[] = {&dst_, &src_, &count};
    Clock& clock = SteadyClock::instance();
    const Nanos start = clock.now();
    Nanos last_between = start;
    KernelRunResult result;
    while (result.iterations < iterations) {
      const cuda::CUresult launched =
          kernel == Kernel::kCompute
              ? api.launch_kernel(fma_, kBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, fma_params, nullptr)
              : api.launch_kernel(copy_, kBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, copy_params, nullptr);
      JOULE_TRY(cuda_->check(launched, "cuLaunchKernel"));
      ++result.iterations;
      // Launches are asynchronous: synchronise before calling back, so that `between` sees the work done.
      if (between && to_seconds(clock.now() - last_between) >= between_interval_s) {
        JOULE_TRY(cuda_->check(api.ctx_synchronize(), "cuCtxSynchronize"));
        last_between = clock.now();
        if (!between()) {
          break;
        }
      }
    }
    JOULE_TRY(cuda_->check(api.ctx_synchronize(), "cuCtxSynchronize"));
    result.time_s = to_seconds(clock.now() - start);
    return result;
  }

 private:
  std::shared_ptr<cuda::CudaLibrary> cuda_;
  std::string driver_version_;
  cuda::CUcontext context_ = nullptr;
  cuda::CUmodule module_ = nullptr;
  cuda::CUfunction fma_ = nullptr;
  cuda::CUfunction copy_ = nullptr;
  CUdeviceptr out_ = 0;
  CUdeviceptr src_ = 0;
  CUdeviceptr dst_ = 0;
};

}  // namespace

Result<std::unique_ptr<KernelRunner>> make_cuda_runner(int ordinal, const std::string& library) {
  auto cuda = JOULE_TRY(cuda::CudaLibrary::open(library));
  auto runner = std::make_unique<CudaRunner>(std::move(cuda));
  JOULE_TRY(runner->start(ordinal));
  return std::unique_ptr<KernelRunner>(std::move(runner));
}

}  // namespace joule::probe
