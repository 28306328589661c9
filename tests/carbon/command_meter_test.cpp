// SPDX-License-Identifier: Apache-2.0
// Runs of a command measured by carbon::CommandMeter (joule/carbon/command_meter.hpp): the exit status, the
// carbon of the run when a source is given, and a command that cannot start.
#include "joule/carbon/command_meter.hpp"

#include <gtest/gtest.h>

namespace joule::carbon {
namespace {

TEST(CommandMeter, MeasuresEachRunAndItsCarbonWhenASourceIsGiven) {
  SteadyClock clock;
  CommandMeterOptions options;
  options.carbon = CarbonSourceOptions{};
  options.carbon->intensity_g_per_kwh = 400;
  auto meter = CommandMeter::open({}, {}, clock, std::move(options)).value();
  ChildSignals signals;
  const CommandRun ok = meter->run({"true"}, signals).value();
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.command, std::vector<std::string>{"true"});
  EXPECT_GE(ok.wall_time_s, 0);
  EXPECT_TRUE(ok.devices.empty());
  ASSERT_TRUE(ok.carbon.has_value());
  EXPECT_FALSE(ok.price.has_value());
  EXPECT_EQ(meter->run({"sh", "-c", "exit 3"}, signals).value().exit_code, 3);
  const auto missing = meter->run({"joule-no-such-command"}, signals);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message(), "cannot run 'joule-no-such-command': command not found");
}

TEST(CommandMeter, NoSourceMeasuresNoCarbon) {
  SteadyClock clock;
  auto meter = CommandMeter::open({}, {}, clock, {}).value();
  ChildSignals signals;
  const CommandRun run = meter->run({"true"}, signals).value();
  EXPECT_FALSE(run.carbon.has_value());
  meter->stop();
}

}  // namespace
}  // namespace joule::carbon
