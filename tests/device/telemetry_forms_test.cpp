// SPDX-License-Identifier: Apache-2.0
// One telemetry reading as `joule power` prints it (joule/device/inventory.hpp): empty CSV cells and "-" for
// what a device does not give, never 0.
#include <gtest/gtest.h>

#include "joule/device/inventory.hpp"

namespace joule::device {
namespace {

TEST(TelemetryForms, CsvCellsAndTextColumnsLeaveMissingFieldsEmpty) {
  GpuTelemetry reading;
  reading.temperature_c = 64.84;
  reading.sm_clock_mhz = 1380;
  reading.clock_event_reasons = 0;
  reading.memory_power_mw = 12'345;
  EXPECT_EQ(telemetry_csv_cells(reading), "64.8,1380,,,,none,12.345");
  EXPECT_EQ(telemetry_csv_cells(std::nullopt), ",,,,,,");
  EXPECT_EQ(telemetry_columns_text(reading), "  64.8 C 1380 MHz   -%");
  EXPECT_EQ(telemetry_columns_text(GpuTelemetry{}), "     - C    - MHz   -%");
}

}  // namespace
}  // namespace joule::device
