// SPDX-License-Identifier: Apache-2.0
// The forms of simulation and replay results (sim/report.hpp, sim/carbon_replay.hpp) and the JIT training run
// (sim/training_run.hpp).
#include "joule/sim/report.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/sim/carbon_replay.hpp"
#include "joule/sim/training_run.hpp"

#include "test_util.hpp"

namespace joule::sim {
namespace {

// Two recurrences of a made-up job: Zeus tried 32@100W (stopped) then 64@200W.
SimulationResult report_result() {
  SimulationResult result;
  result.job = Job{"mnist", "mlp", "sgd", 0.9, 10, 64};
  result.recurrences = 2;
  result.max_power_w = 200;
  result.tries = {{1, 1, 32, 100, 1000, 10, false, 1500},
                  {1, 2, 64, 200, 2000, 5, true, 1500},
                  {2, 1, 64, 200, 2000, 5, true, 1500}};
  result.optimizer = {5000, 20, 4500};
  result.baseline = {64, 200, 2000, 5, 1500, 1};
  result.oracle = FixedConfiguration{128, 100, 1000, 8, 1300, 1};
  result.configurations = {result.baseline, *result.oracle, {32, 100, 1000, 10, 1500, 0.5}};
  return result;
}

TEST(SimulationReport, ComparesZeusWithTheBaselineAndOracleOverAllRecurrences) {
  const Comparison comparison = compare(report_result());
  EXPECT_DOUBLE_EQ(comparison.baseline.energy_j, 4000);
  EXPECT_DOUBLE_EQ(comparison.baseline.time_s, 10);
  ASSERT_TRUE(comparison.oracle.has_value());
  EXPECT_DOUBLE_EQ(comparison.oracle->cost, 2600);
  EXPECT_DOUBLE_EQ(saving(5000, 4000), -0.25);
  EXPECT_DOUBLE_EQ(saving(1, 0), 0);
}

TEST(SimulationReport, TextJsonAndCsvCarryEveryTry) {
  const SimulationResult result = report_result();
  SimulationOptions options;
  options.beta = std::numeric_limits<double>::infinity();
  const std::string text = render_simulation_text("v100", result, options);
  EXPECT_NE(text.find("Zeus simulation: mnist (mlp, sgd) on v100"), std::string::npos) << text;
  EXPECT_NE(text.find("beta inf"), std::string::npos) << text;
  EXPECT_NE(text.find("32@100W x -> 64@200W"), std::string::npos) << text;
  EXPECT_NE(text.find("oracle 128@100W"), std::string::npos) << text;
  const auto json = nlohmann::json::parse(render_simulation_json("v100", result, options));
  EXPECT_TRUE(json["options"]["beta"].is_null());
  EXPECT_EQ(json["tries"].size(), 3U);
  EXPECT_DOUBLE_EQ(json["savings"]["vs_baseline"]["energy"].get<double>(), -0.25);
  EXPECT_EQ(render_tries_csv(result),
            "recurrence,try,batch_size,power_limit_w,energy_j,time_s,reached,cost\n"
            "1,1,32,100,1000,10,false,1500\n"
            "1,2,64,200,2000,5,true,1500\n"
            "2,1,64,200,2000,5,true,1500\n");
}

TEST(SimulationReport, SavingsTableInThreeForms) {
  const std::vector<SavingsRow> rows = {{"v100", "mnist", report_result()}};
  const SimulationOptions options;
  EXPECT_EQ(render_savings_csv(rows),
            "gpu,workload,recurrences,energy_saved,time_saved,cost_saved,oracle_cost_saved\n"
            "v100,mnist,2,-0.25,-1,-0.5,0.1333333333333333\n");
  const auto json = nlohmann::json::parse(render_savings_json(rows, options));
  EXPECT_EQ(json["beta"], 2.0);
  ASSERT_EQ(json["rows"].size(), 1U);
  EXPECT_EQ(json["rows"][0]["workload"], "mnist");
  const std::string text = render_savings_text(rows, options);
  EXPECT_NE(text.find("-25.0%"), std::string::npos) << text;
  EXPECT_NE(text.find("(negative = more than the baseline)"), std::string::npos) << text;
}

TEST(SimulationReport, PlotMarksBaselineOracleAndTries) {
  const std::string svg = simulation_plot_svg("v100", report_result());
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("baseline 64@200W"), std::string::npos);
  EXPECT_NE(svg.find("oracle 128@100W"), std::string::npos);
  EXPECT_NE(svg.find("tried 2 times"), std::string::npos);
  EXPECT_NE(svg.find("configurations (sometimes miss)"), std::string::npos);
}

optimize::CarbonReplayResult replay_result() {
  optimize::CarbonReplayResult result;
  result.gpu_name = "Tesla V100";
  result.workload = "imagenet";
  result.batch_size = 256;
  result.work_iterations = 100;
  result.start_unix_s = 1'717'200'000;
  result.trace_source = "t.csv";
  result.zeus_power_limit_mw = 200'000;
  result.max_power_w = 250;
  for (const auto& [name, carbon_g, limit_w] :
       {std::tuple{"max_power_limit", 100.0, 250.0}, {"zeus", 90.0, 200.0}, {"chase", 80.0, 175.0}}) {
    optimize::StrategyResult s{name, carbon_g, carbon_g * 1000, 3600, {}};
    s.timeline = {{0, result.start_unix_s, 400, 410, limit_w},
                  {1800, result.start_unix_s + 1800, 300, 310, limit_w}};
    result.strategies.push_back(s);
  }
  return result;
}

TEST(CarbonReplayReport, ComparesChaseWithTheOtherStrategies) {
  const auto result = replay_result();
  EXPECT_EQ(replay_strategy(result, "zeus").carbon_g, 90.0);
  EXPECT_THROW(replay_strategy(result, "none"), Exception);
  const ReplaySettings settings{.epochs = 2,
                                .eta = 0.5,
                                .zeus_eta = 0.4,
                                .period_min = 30,
                                .max_intensity_g_per_kwh = 750,
                                .forecaster = "ridge"};
  const std::string text = render_replay_text(result, settings);
  EXPECT_NE(text.find("chase vs max_power_limit: carbon -20.0%"), std::string::npos) << text;
  const auto json = nlohmann::json::parse(render_replay_json(result, settings));
  EXPECT_DOUBLE_EQ(json["savings"]["chase_vs_zeus"]["carbon_saving_percent"].get<double>(), 100.0 / 9);
  EXPECT_EQ(json["chase_decisions"].size(), 2U);
  EXPECT_DOUBLE_EQ(json["strategies"][2]["mean_power_limit_w"].get<double>(), 175.0);
  EXPECT_EQ(json["zeus_eta"], 0.4);
  EXPECT_EQ(render_replay_csv(result).substr(0, 31), "strategy,carbon_g,energy_j,time");
  const std::string svg = replay_plot_svg(result);
  EXPECT_NE(svg.find("forecast (Chase)"), std::string::npos);
}

TEST(CarbonReplayWork, IterationsEpochsOrTheTraceTarget) {
  const CarbonReplayWork given =
      value_or_throw(replay_work("v100", "imagenet", std::nullopt, std::nullopt, 5005));
  EXPECT_EQ(given.work_iterations, 5005);
  EXPECT_GT(given.batch_size, 0);
  const CarbonReplayWork epochs = value_or_throw(replay_work("v100", "imagenet", 256, 1.0, std::nullopt));
  EXPECT_EQ(epochs.work_iterations, 5005);  // ⌈1,281,167 / 256⌉
  const CarbonReplayWork target =
      value_or_throw(replay_work("v100", "imagenet", 256, std::nullopt, std::nullopt));
  EXPECT_EQ(target.epochs, value_or_throw(epochs_to_target("v100", "imagenet", 256)));
  EXPECT_GT(target.epochs, 0);
  JOULE_EXPECT_ERROR(replay_work("v100", "imagenet", 256, -1.0, std::nullopt), ErrorCode::kInvalidArgument,
                     "carbon replay: --epochs must be positive, got -1");
  EXPECT_EQ(replay_work("nosuch", "imagenet", std::nullopt, 1.0, std::nullopt).error().code(),
            ErrorCode::kNotFound);
}

TEST(JitTrainingRun, ProfilesChoosesAndComparesWithTheMaximum) {
  const auto spec = value_or_throw(device::sim::parse_spec("v100:imagenet"));
  const JitTrainingRun run = value_or_throw(run_jit_training(spec, 400));
  EXPECT_EQ(run.steps, 400);
  EXPECT_GT(run.profiled_until_step, 0);
  EXPECT_FALSE(run.measurements.empty());
  EXPECT_EQ(run.candidates_mw.front(), run.max_mw);
  EXPECT_GT(run.chosen_mw, 0U);
  EXPECT_LE(run.chosen_mw, run.max_mw);
  EXPECT_LE(run.at_chosen.energy_j, run.at_max.energy_j);
  EXPECT_GT(run.with_zeus.time_s, 0);
  EXPECT_FALSE(run.workload.empty());
  // Its forms: the story names the chosen limit and the steps; the plot marks the chosen and the maximum.
  const std::string text = jit_run_text(run, spec);
  EXPECT_EQ(text.rfind("joule demo, part 1: the JIT power-limit optimizer on 1 simulated v100 GPU (", 0), 0U)
      << text;
  EXPECT_NE(text.find(fmt::format("   <- chosen\n")), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("400 iterations at {:g} W", run.chosen_mw / 1e3)), std::string::npos)
      << text;
  const nlohmann::json json = jit_run_json(run);
  EXPECT_EQ(json["profile"].size(), run.measurements.size());
  EXPECT_EQ(json["chosen_power_limit_w"], run.chosen_mw / 1e3);
  EXPECT_EQ(json["at_max_power_limit"]["energy_j"], run.at_max.energy_j);
  const std::string svg = jit_run_plot_svg(run, spec);
  EXPECT_NE(svg.find(fmt::format("chosen {:g} W", run.chosen_mw / 1e3)), std::string::npos);
  EXPECT_NE(svg.find(fmt::format("max {:g} W", run.max_mw / 1e3)), std::string::npos);
}

}  // namespace
}  // namespace joule::sim
