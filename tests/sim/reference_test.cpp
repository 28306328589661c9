// SPDX-License-Identifier: Apache-2.0
// The simulator against the original Zeus simulator's own output: every try of the six paper workloads on
// V100 (seed 1, η 0.5, β 2), produced by Zeus 0.16.0's run_single.py on the same traces.
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "joule/core/csv.hpp"
#include "joule/sim/simulator.hpp"

namespace joule::sim {
namespace {

struct ReferenceTry {
  int recurrence;
  int attempt;
  int batch_size;
  double power_limit_w;
  double energy_j;
  double time_s;
  bool reached;
  double cost;
};

std::map<std::string, std::vector<ReferenceTry>> load_reference() {
  const auto path =
      std::filesystem::path(__FILE__).parent_path() / "data" / "zeus_sim_reference_v100_seed1.csv";
  const auto table = csv::read_file(path.string());
  EXPECT_TRUE(table) << table.error().message();
  std::map<std::string, std::vector<ReferenceTry>> reference;
  const auto column = [&](const char* name) { return *table->column(name); };
  for (size_t r = 0; r < table->row_count(); ++r) {
    const auto row = table->row(r);
    reference[std::string(row.text(column("workload")))].push_back(
        {static_cast<int>(*row.integer(column("recurrence"))), static_cast<int>(*row.integer(column("try"))),
         static_cast<int>(*row.integer(column("batch_size"))), *row.number(column("power_limit_w")),
         *row.number(column("energy_j")), *row.number(column("time_s")),
         row.text(column("reached")) == "true", *row.number(column("cost"))});
  }
  return reference;
}

double relative_error(double a, double b) {
  return a == b ? 0.0 : std::abs(a - b) / std::max(std::abs(a), std::abs(b));
}

TEST(SimulatorReference, ReproducesTheOriginalOnV100Seed1) {
  const auto reference = load_reference();
  ASSERT_EQ(reference.size(), 6u);
  auto trace = gpu_trace("v100");
  ASSERT_TRUE(trace) << trace.error().message();
  SimulationOptions options;
  options.seed = 1;
  options.eta = 0.5;
  options.beta = 2.0;
  const Simulator simulator = zeus_simulator(*trace, options);
  for (const auto& [workload, expected] : reference) {
    SCOPED_TRACE(workload);
    const auto job = paper_job(*trace, workload);
    ASSERT_TRUE(job) << job.error().message();
    const auto result = simulator.simulate(*job);
    ASSERT_TRUE(result) << result.error().message();
    ASSERT_EQ(result->tries.size(), expected.size());
    double worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const Try& got = result->tries[i];
      const ReferenceTry& want = expected[i];
      ASSERT_EQ(got.recurrence, want.recurrence) << "try " << i;
      ASSERT_EQ(got.attempt, want.attempt) << "try " << i;
      ASSERT_EQ(got.batch_size, want.batch_size) << "try " << i;
      ASSERT_EQ(got.power_limit_w, want.power_limit_w) << "try " << i;
      ASSERT_EQ(got.reached, want.reached) << "try " << i;
      worst = std::max({worst, relative_error(got.energy_j, want.energy_j),
                        relative_error(got.time_s, want.time_s), relative_error(got.cost, want.cost)});
      // Bit for bit: the traces are parsed as pandas parses them, and every sum and mean follows numpy's
      // and pandas' order (the issue allows 1e-9; exactness guards the arithmetic against regressions).
      EXPECT_EQ(got.energy_j, want.energy_j) << "try " << i;
      EXPECT_EQ(got.time_s, want.time_s) << "try " << i;
      EXPECT_EQ(got.cost, want.cost) << "try " << i;
    }
    RecordProperty(workload + "_worst_relative_error", fmt::format("{:.3g}", worst));
  }
}

}  // namespace
}  // namespace joule::sim
