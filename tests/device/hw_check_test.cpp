// SPDX-License-Identifier: Apache-2.0
#include "joule/device/hw_check.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"

#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::device {
namespace {

using ::testing::NiceMock;
using ::testing::Return;

const CheckItem& item(const GpuCheck& check, std::string_view name) {
  for (const auto& one : check.items) {
    if (one.name == name) {
      return one;
    }
  }
  throw std::runtime_error("no check " + std::string(name));
}

TEST(HwCheck, ASimulatedGpuPassesAndNothingIsChanged) {
  auto clock = std::make_shared<VirtualClock>();
  auto gpus = std::move(*sim::open_sim_gpus(*sim::parse_spec("2xa40"), clock));
  HwCheckOptions options;
  options.duration_s = 2;
  const auto checks = check_gpus({gpus[0].get(), gpus[1].get()}, *clock, options);
  ASSERT_EQ(checks.size(), 2u);
  const GpuCheck& check = checks[1];
  EXPECT_EQ(check.info.index, 1);
  EXPECT_NEAR(check.watched_s, 2.0, 0.01);
  EXPECT_EQ(check.power_reads, 400);  // every 5 ms
  EXPECT_EQ(item(check, "energy counter").status, CheckStatus::kPass);
  EXPECT_EQ(item(check, "energy vs power").status, CheckStatus::kPass);
  EXPECT_NEAR(*check.counter_energy_j, *check.integrated_energy_j, 0.01 * *check.counter_energy_j);
  // Constant simulated power: no change to time.
  EXPECT_EQ(item(check, "power updates").status, CheckStatus::kSkip);
  EXPECT_EQ(item(check, "power limit").detail, "300 W (range 100 W to 300 W, default 300 W)");
  EXPECT_EQ(item(check, "SM clocks").status, CheckStatus::kPass);
  EXPECT_EQ(item(check, "telemetry").detail,
            "temperature_c, sm_clock_mhz, memory_clock_mhz, gpu_utilization_pct, memory_utilization_pct, "
            "clock_event_reasons, memory_power_w");
  EXPECT_EQ(count_status(checks, CheckStatus::kFail), 0);
  EXPECT_TRUE(gpus[0]->settings_log().empty());  // read-only
}

// A GPU whose power reading updates every 100 ms, whose counter runs 20% fast, and then goes backwards.
class SteppingGpu final : public Gpu {
 public:
  SteppingGpu(Clock& clock, double counter_scale, bool backwards)
      : Gpu([] {
          GpuInfo info;
          info.backend = "test";
          info.name = "Stepping GPU";
          info.has_energy_counter = true;
          return info;
        }()),
        clock_(clock),
        counter_scale_(counter_scale),
        backwards_(backwards) {}

 protected:
  double power_w() const {
    const auto tick = to_seconds(clock_.now()) / 0.1;
    return static_cast<int64_t>(tick) % 2 == 0 ? 100.0 : 150.0;  // alternating every 100 ms
  }
  Result<uint64_t> do_energy_mj() override {
    const double t = to_seconds(clock_.now());
    if (backwards_ && t > 0.5) {
      return uint64_t{1};
    }
    return static_cast<uint64_t>(125.0 * t * 1e3 * counter_scale_);  // the mean power, integrated
  }
  Result<uint32_t> do_power_mw() override { return static_cast<uint32_t>(power_w() * 1e3); }
  Result<PowerLimitConstraints> do_power_limit_constraints() override {
    return fail(ErrorCode::kNotSupported, "no limits on GPU 0");
  }
  Result<uint32_t> do_power_limit_mw() override { return 150'000u; }
  Result<void> do_set_power_limit_mw(uint32_t) override { throw std::logic_error("the check set a limit"); }
  Result<std::vector<uint32_t>> do_supported_sm_clocks_mhz() override { return std::vector<uint32_t>{}; }
  Result<void> do_lock_sm_clocks(uint32_t, uint32_t) override { throw std::logic_error("the check locked"); }
  Result<void> do_reset_sm_clocks() override { throw std::logic_error("the check reset clocks"); }

 private:
  Clock& clock_;
  double counter_scale_;
  bool backwards_;
};

TEST(HwCheck, UpdatePeriodsToleranceAndFailures) {
  VirtualClock clock;
  SteppingGpu good(clock, 1.0, false);
  SteppingGpu fast(clock, 1.2, false);
  SteppingGpu broken(clock, 1.0, true);
  HwCheckOptions options;
  options.duration_s = 2;
  const auto checks = check_gpus({&good, &fast, &broken}, clock, options);
  EXPECT_NEAR(*checks[0].power_update_period_s, 0.1, 0.006);
  EXPECT_EQ(item(checks[0], "power updates").detail, "every 100 ms (median interval between changes)");
  EXPECT_EQ(item(checks[0], "energy vs power").status, CheckStatus::kPass);
  EXPECT_EQ(item(checks[1], "energy vs power").status, CheckStatus::kFail);
  EXPECT_NE(item(checks[1], "energy vs power").detail.find("% apart (tolerance 5%)"), std::string::npos);
  EXPECT_EQ(item(checks[2], "energy counter").status, CheckStatus::kFail);
  EXPECT_NE(item(checks[2], "energy counter").detail.find("went backwards from"), std::string::npos);
  EXPECT_EQ(item(checks[0], "power limit").detail, "no limits on GPU 0");
  EXPECT_EQ(item(checks[0], "SM clocks").detail, "the driver lists no supported clock");
  EXPECT_EQ(
      item(checks[0], "telemetry").detail,
      "nothing readable; not supported: temperature_c, sm_clock_mhz, memory_clock_mhz, gpu_utilization_pct, "
      "memory_utilization_pct, clock_event_reasons, memory_power_w");
}

TEST(HwCheck, BadOptionsAreRefused) {
  HwCheckOptions options;
  options.duration_s = 0;
  JOULE_EXPECT_ERROR(validate(options), ErrorCode::kInvalidArgument,
                     "hardware check: the duration must be a finite number of seconds > 0, got 0");
  options = {};
  options.poll_period_s = 20;
  JOULE_EXPECT_ERROR(validate(options), ErrorCode::kInvalidArgument,
                     "hardware check: the poll period must be > 0 and at most the duration (10 s), got 20 s");
}

}  // namespace
}  // namespace joule::device
