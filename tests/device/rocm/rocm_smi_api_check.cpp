// SPDX-License-Identifier: Apache-2.0
// Compile-time proof that src/device/rocm/rocm_smi_api.hpp matches the installed rocm_smi/rocm_smi.h:
// every function type (after mapping our enum/struct names to the real ones), every enumerator value,
// every underlying type and the layout of rsmi_frequencies_t. Built only when the header is installed.
#include <cstddef>
#include <type_traits>

#include <gtest/gtest.h>
#include <rocm_smi/rocm_smi.h>

#include "device/rocm/rocm_smi_api.hpp"

namespace {

namespace smi = joule::device::rocm_smi;

// Maps a type in our declarations to the type the real header uses in the same place.
template <class T>
struct ToReal {
  using type = T;
};
template <>
struct ToReal<smi::Status> {
  using type = rsmi_status_t;
};
template <>
struct ToReal<smi::ClkType> {
  using type = rsmi_clk_type_t;
};
template <>
struct ToReal<smi::PerfLevel> {
  using type = rsmi_dev_perf_level_t;
};
template <>
struct ToReal<smi::TempMetric> {
  using type = rsmi_temperature_metric_t;
};
template <class T>
struct ToReal<T*> {
  using type = typename ToReal<T>::type*;
};
template <>
struct ToReal<smi::Frequencies> {
  using type = rsmi_frequencies_t;
};
template <class R, class... Args>
struct ToReal<R (*)(Args...)> {
  using type = typename ToReal<R>::type (*)(typename ToReal<Args>::type...);
};

#define JOULE_CHECK_SIGNATURE(symbol, fn_type, required)                         \
  static_assert(std::is_same_v<ToReal<smi::fn_type>::type, decltype(&::symbol)>, \
                "rocm_smi_api.hpp: the type of " #symbol " differs from rocm_smi.h");
JOULE_ROCM_SMI_FUNCTIONS(JOULE_CHECK_SIGNATURE)
#undef JOULE_CHECK_SIGNATURE

// Enums are passed by value, so the underlying types (the ABI) must agree too.
static_assert(std::is_same_v<std::underlying_type_t<rsmi_status_t>, std::underlying_type_t<smi::Status>>);
static_assert(std::is_same_v<std::underlying_type_t<rsmi_clk_type_t>, std::underlying_type_t<smi::ClkType>>);
static_assert(
    std::is_same_v<std::underlying_type_t<rsmi_dev_perf_level_t>, std::underlying_type_t<smi::PerfLevel>>);
static_assert(std::is_same_v<std::underlying_type_t<rsmi_temperature_metric_t>,
                             std::underlying_type_t<smi::TempMetric>>);

#define JOULE_CHECK_VALUE(ours, theirs) \
  static_assert(static_cast<uint64_t>(ours) == static_cast<uint64_t>(theirs), #ours " != " #theirs);
JOULE_CHECK_VALUE(smi::Status::kSuccess, RSMI_STATUS_SUCCESS)
JOULE_CHECK_VALUE(smi::Status::kInvalidArgs, RSMI_STATUS_INVALID_ARGS)
JOULE_CHECK_VALUE(smi::Status::kNotSupported, RSMI_STATUS_NOT_SUPPORTED)
JOULE_CHECK_VALUE(smi::Status::kFileError, RSMI_STATUS_FILE_ERROR)
JOULE_CHECK_VALUE(smi::Status::kPermission, RSMI_STATUS_PERMISSION)
JOULE_CHECK_VALUE(smi::Status::kOutOfResources, RSMI_STATUS_OUT_OF_RESOURCES)
JOULE_CHECK_VALUE(smi::Status::kInternalException, RSMI_STATUS_INTERNAL_EXCEPTION)
JOULE_CHECK_VALUE(smi::Status::kInputOutOfBounds, RSMI_STATUS_INPUT_OUT_OF_BOUNDS)
JOULE_CHECK_VALUE(smi::Status::kInitError, RSMI_STATUS_INIT_ERROR)
JOULE_CHECK_VALUE(smi::Status::kNotYetImplemented, RSMI_STATUS_NOT_YET_IMPLEMENTED)
JOULE_CHECK_VALUE(smi::Status::kNotFound, RSMI_STATUS_NOT_FOUND)
JOULE_CHECK_VALUE(smi::Status::kInsufficientSize, RSMI_STATUS_INSUFFICIENT_SIZE)
JOULE_CHECK_VALUE(smi::Status::kInterrupt, RSMI_STATUS_INTERRUPT)
JOULE_CHECK_VALUE(smi::Status::kUnexpectedSize, RSMI_STATUS_UNEXPECTED_SIZE)
JOULE_CHECK_VALUE(smi::Status::kNoData, RSMI_STATUS_NO_DATA)
JOULE_CHECK_VALUE(smi::Status::kUnexpectedData, RSMI_STATUS_UNEXPECTED_DATA)
JOULE_CHECK_VALUE(smi::Status::kBusy, RSMI_STATUS_BUSY)
JOULE_CHECK_VALUE(smi::Status::kRefcountOverflow, RSMI_STATUS_REFCOUNT_OVERFLOW)
JOULE_CHECK_VALUE(smi::Status::kUnknownError, RSMI_STATUS_UNKNOWN_ERROR)
JOULE_CHECK_VALUE(smi::ClkType::kSys, RSMI_CLK_TYPE_SYS)
JOULE_CHECK_VALUE(smi::ClkType::kMem, RSMI_CLK_TYPE_MEM)
JOULE_CHECK_VALUE(smi::PerfLevel::kAuto, RSMI_DEV_PERF_LEVEL_AUTO)
JOULE_CHECK_VALUE(smi::PerfLevel::kManual, RSMI_DEV_PERF_LEVEL_MANUAL)
JOULE_CHECK_VALUE(smi::kMaxNumFrequencies, RSMI_MAX_NUM_FREQUENCIES)
JOULE_CHECK_VALUE(smi::TempMetric::kCurrent, RSMI_TEMP_CURRENT)
JOULE_CHECK_VALUE(smi::kTempTypeEdge, RSMI_TEMP_TYPE_EDGE)
JOULE_CHECK_VALUE(smi::kTempTypeJunction, RSMI_TEMP_TYPE_JUNCTION)
#undef JOULE_CHECK_VALUE

static_assert(sizeof(smi::Frequencies) == sizeof(rsmi_frequencies_t));
static_assert(alignof(smi::Frequencies) == alignof(rsmi_frequencies_t));
static_assert(offsetof(smi::Frequencies, num_supported) == offsetof(rsmi_frequencies_t, num_supported));
static_assert(offsetof(smi::Frequencies, current) == offsetof(rsmi_frequencies_t, current));
static_assert(offsetof(smi::Frequencies, frequency) == offsetof(rsmi_frequencies_t, frequency));

}  // namespace

// The checks above are static_asserts; this test only records in the results that they were compiled.
TEST(RocmSmiApi, MatchesInstalledHeader) {
  SUCCEED() << "rocm_smi_api.hpp agrees with rocm_smi/rocm_smi.h";
}
