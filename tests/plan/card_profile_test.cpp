// SPDX-License-Identifier: Apache-2.0
// Perseus's profile from a frontier card: the clocks measured, the measured + predicted profile, the held-out
// check and its fallback, and the live scheduler with and without a card (structure only: which clocks, how
// many iterations, which path; bench/card_profile_bench measures the energy).
#include "joule/plan/card_profile.hpp"

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/plan/live.hpp"
#include "joule/plan/profile_codec.hpp"
#include "joule/plan/sim_stage_profile.hpp"
#include "joule/probe/card.hpp"

namespace joule::plan {
namespace {

const device::sim::GpuModel& v100() {
  return **device::sim::find_gpu_model("v100");
}

probe::Card v100_card() {
  auto card = probe::read_card(JOULE_CARDS_DATA_DIR "/sim-v100.json", {v100().name, "sim", "sim", ""});
  EXPECT_TRUE(card) << card.error().message();
  return *card;
}

probe::KnobPrior v100_prior() {
  return *probe::KnobPrior::from_card(v100_card(), probe::CardKnob::kSmClock, "sim-v100.json");
}

// Stages whose computations are a compute-bound and a memory-bound kernel, with shares of their own.
Profile simulated_truth(int stages) {
  std::vector<SimStage> pipeline;
  for (int s = 0; s < stages; ++s) {
    SimStage stage;
    stage.forward.time_at_max_clock_s = 0.01 * (1 + 0.1 * s);
    stage.forward.kernels = {{{0.9, 0.85, 0.12}, 0.6 + 0.05 * s}, {{0.2, 0.5, 0.45}, 0.4}};
    stage.backward.time_at_max_clock_s = 0.02 * (1 + 0.1 * s);
    stage.backward.kernels = {{{0.92, 0.9, 0.1}, 0.7}, {{0.25, 0.55, 0.5}, 0.3 + 0.05 * s}};
    pipeline.push_back(stage);
  }
  auto profile = simulated_stage_profile(v100(), pipeline);
  EXPECT_TRUE(profile) << profile.error().message();
  return *profile;
}

// `truth` with stage `stage`'s backward energy 30% higher at clock index `index`: a computation no card
// describes there.
Profile with_bump(const Profile& truth, int stage, size_t index) {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(static_cast<size_t>(truth.stage_count()));
  for (int s = 0; s < truth.stage_count(); ++s) {
    options[static_cast<size_t>(s)][0] = truth.options(s, Instruction::kForward);
    options[static_cast<size_t>(s)][1] = truth.options(s, Instruction::kBackward);
  }
  options[static_cast<size_t>(stage)][1][index].energy_j *= 1.3;
  return *Profile::from_options(std::move(options));
}

TEST(CardProfileTest, ProbesTheHighestClockAndLowerOnesDownToTheLowestRatio) {
  std::vector<uint32_t> clocks;
  for (uint32_t mhz = 1380; mhz >= 135; mhz -= 15) {
    clocks.push_back(mhz);
  }
  CardProfileOptions options;
  const auto indices = card_probe_indices(clocks, options);
  ASSERT_EQ(indices.size(), 3u);
  EXPECT_EQ(indices.front(), 0u);
  EXPECT_TRUE(std::is_sorted(indices.begin(), indices.end()));
  EXPECT_NEAR(clocks[indices.back()], 1380 * options.lowest_probe_ratio, 8);
  EXPECT_NEAR(clocks[indices[1]], 1380 * (1 + options.lowest_probe_ratio) / 2, 8);
  // Few clocks: none twice, fewer than asked.
  const std::vector<uint32_t> two = {1410, 1395};
  EXPECT_EQ(card_probe_indices(two, options), (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(card_probe_indices({}, options).empty());
  // A round of 8 microbatches with 2 samples measures 4 clocks: the card's 3 become 4; 2 a round: 4.
  EXPECT_EQ(card_probe_count(3, 8, 2), 4);
  EXPECT_EQ(card_probe_count(3, 4, 2), 4);
  EXPECT_EQ(card_probe_count(3, 1, 2), 3);
  EXPECT_EQ(card_probe_count(3, 512, 1), 64);
}

TEST(CardProfileTest, PredictsEveryClockFromAFewAndKeepsTheMeasuredOnes) {
  const Profile truth = simulated_truth(3);
  const auto& clocks = truth.frequencies_mhz();
  CardProfileOptions options;
  options.probe_clocks = 4;
  const auto indices = card_probe_indices(clocks, options);
  const auto predicted = predict_card_profile(v100_prior(), measure_profile_at(truth, indices), clocks,
                                              options, "sim-v100.json");
  ASSERT_TRUE(predicted) << predicted.error().message();
  EXPECT_TRUE(predicted->fallback_stages.empty()) << predicted->summary;
  ASSERT_TRUE(predicted->profile.has_value());
  EXPECT_EQ(predicted->fits.size(), 6u);
  // Down to where energy rises, at least to the lowest measured clock, never all 84.
  EXPECT_GT(predicted->clocks_used, indices.back());
  EXPECT_LT(predicted->clocks_used, clocks.size());
  EXPECT_EQ(predicted->profile->frequencies_mhz().size(), predicted->clocks_used);
  for (int stage = 0; stage < 3; ++stage) {
    for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
      const auto& rows = predicted->profile->options(stage, instruction);
      for (const size_t index : indices) {
        EXPECT_DOUBLE_EQ(rows[index].time_s, truth.options(stage, instruction)[index].time_s);
        EXPECT_DOUBLE_EQ(rows[index].energy_j, truth.options(stage, instruction)[index].energy_j);
      }
    }
  }
  EXPECT_NE(predicted->summary.find("sim-v100.json fits every computation"), std::string::npos)
      << predicted->summary;
}

TEST(CardProfileTest, AComputationTheCardDoesNotDescribeSendsItsStageBackToTheSweep) {
  const Profile clean = simulated_truth(3);
  CardProfileOptions options;
  options.probe_clocks = 4;
  const auto indices = card_probe_indices(clean.frequencies_mhz(), options);
  const Profile truth = with_bump(clean, 1, indices[1]);
  const auto predicted = predict_card_profile(v100_prior(), measure_profile_at(truth, indices),
                                              truth.frequencies_mhz(), options, "sim-v100.json");
  ASSERT_TRUE(predicted) << predicted.error().message();
  EXPECT_EQ(predicted->fallback_stages, std::vector<int>{1});
  EXPECT_FALSE(predicted->profile.has_value());
  const CardFit& bumped = predicted->fits[3];  // stage 1 backward
  EXPECT_FALSE(bumped.fits);
  EXPECT_GT(bumped.check_energy_error, options.max_residual);
  EXPECT_NE(predicted->summary.find("sim-v100.json does not describe stage(s) 1 (held-out error over 5.0%: "
                                    "stage 1 backward:"),
            std::string::npos)
      << predicted->summary;
  EXPECT_NE(predicted->summary.find("as without a card"), std::string::npos);
}

TEST(CardProfileTest, RefusesMeasurementsItCannotUse) {
  const Profile truth = simulated_truth(1);
  const auto& clocks = truth.frequencies_mhz();
  CardMeasurements none(1);
  auto refused = predict_card_profile(v100_prior(), none, clocks, {}, "card.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(), "stage 0 forward has no measurement");
  CardMeasurements stray = measure_profile_at(truth, std::vector<size_t>{0});
  stray[0][1].push_back({1001, 0.02, 3});
  refused = predict_card_profile(v100_prior(), stray, clocks, {}, "card.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(), "stage 0 backward: a measurement at 1001 MHz, not one of the clocks");
  CardProfileOptions bad;
  bad.probe_clocks = 1;
  refused = predict_card_profile(v100_prior(), stray, clocks, bad, "card.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(), "probe_clocks must be 2 to 64, got 1");
}

// --- the live scheduler ---------------------------------------------------------------------------------

LiveResult measure_round(const Profile& truth, const LiveSchedule& schedule, int pp_rank) {
  LiveResult result;
  result.rank = schedule.rank;
  for (int iteration = 0; iteration < schedule.iterations; ++iteration) {
    double busy_s = 0;
    double busy_j = 0;
    std::map<std::string, std::vector<double>> times;
    std::map<std::string, std::vector<double>> energies;
    for (const auto& [name, mhz] : schedule.frequencies) {
      const ProfileOption option = *option_at(truth, {pp_rank, *parse_instruction(name), 0}, mhz);
      times[name].push_back(option.time_s);
      energies[name].push_back(option.energy_j);
      busy_s += option.time_s;
      busy_j += option.energy_j;
    }
    for (auto& [name, values] : times) {
      result.time_breakdown_s[name].push_back(values);
      result.energy_breakdown_j[name].push_back(energies[name]);
    }
    result.iter_time_s.push_back(busy_s * 1.25);
    result.iter_energy_j.push_back(busy_j + busy_s * 0.25 * 60);
  }
  return result;
}

struct LiveRun {
  LiveScheduler scheduler;
  std::vector<std::vector<uint32_t>> profiling_clocks;  // per profiling round, rank 0's distinct clocks
};

LiveRun run_live(const Profile& truth, int microbatches, const probe::Card* card) {
  LiveJobInfo info;
  info.job_id = "card-job";
  info.pp_degree = truth.stage_count();
  info.world_size = truth.stage_count();
  info.num_microbatches = microbatches;
  LiveRun run{*LiveScheduler::create(info, {}), {}};
  if (card != nullptr) {
    EXPECT_TRUE(run.scheduler.use_card(*card, "sim-v100.json"));
  }
  const LivePlanProvider provider = [](const LivePlanRequest& request) { return plan_live(request); };
  for (int rank = 0; rank < truth.stage_count(); ++rank) {
    EXPECT_TRUE(run.scheduler.register_rank({rank, 0, rank, 0, truth.frequencies_mhz()}, provider));
  }
  for (int guard = 0; guard < 100 && run.scheduler.phase() != LivePhase::kPlanned; ++guard) {
    const auto first = run.scheduler.schedule(0);
    if (first && first->phase == LivePhase::kProfiling) {
      std::vector<uint32_t> clocks;
      for (const auto& entry : first->frequencies) {
        clocks.push_back(entry.second);
      }
      std::sort(clocks.rbegin(), clocks.rend());
      clocks.erase(std::unique(clocks.begin(), clocks.end()), clocks.end());
      run.profiling_clocks.push_back(clocks);
    }
    for (int rank = 0; rank < truth.stage_count(); ++rank) {
      const auto schedule = run.scheduler.schedule(rank);
      EXPECT_TRUE(schedule) << schedule.error().message();
      EXPECT_TRUE(run.scheduler.report(measure_round(truth, *schedule, rank), provider));
      // Stored and read back between reports, as joule serve does.
      run.scheduler = *LiveScheduler::parse(run.scheduler.dump());
    }
  }
  EXPECT_EQ(run.scheduler.phase(), LivePhase::kPlanned) << run.scheduler.failure();
  return run;
}

TEST(CardLiveTest, WithACardTheSweepMeasuresOnlyTheCardsClocksAndPlansOnThePrediction) {
  const Profile truth = simulated_truth(4);
  const probe::Card card = v100_card();
  const LiveRun without = run_live(truth, 8, nullptr);
  const LiveRun with = run_live(truth, 8, &card);
  const LiveState& state = with.scheduler.state();
  EXPECT_TRUE(state.card_given());
  EXPECT_FALSE(state.card_fallback());
  EXPECT_EQ(state.card_source(), "sim-v100.json");
  // 8 microbatches, 2 samples: a round measures 4 clocks, so the card's 3 become 4, in one round.
  ASSERT_EQ(state.card_clocks().size(), 4u);
  EXPECT_EQ(with.scheduler.profiled_frequencies(), 4u);
  ASSERT_EQ(with.profiling_clocks.size(), 1u);
  std::vector<uint32_t> expected;
  for (const size_t index : state.card_clocks()) {
    expected.push_back(truth.frequencies_mhz()[index]);
  }
  EXPECT_EQ(with.profiling_clocks.front(), expected);
  EXPECT_EQ(with.scheduler.profiling_iterations(), 2);  // the warm-up and one profiling round
  EXPECT_GT(without.scheduler.profiling_iterations(), 5 * with.scheduler.profiling_iterations());
  EXPECT_GT(without.scheduler.profiled_frequencies(), 10 * with.scheduler.profiled_frequencies());
  EXPECT_NE(state.card_summary().find("sim-v100.json fits every computation"), std::string::npos)
      << state.card_summary();
  // The planned profile has the predicted clocks too, and the measured ones as measured.
  const Profile planned = *Profile::parse(*with.scheduler.profile_csv(), "planned");
  EXPECT_GT(planned.frequencies_mhz().size(), 4u);
  EXPECT_EQ(planned.frequencies_mhz().front(), truth.frequencies_mhz().front());
}

TEST(CardLiveTest, WhenTheCheckFailsTheSweepGoesOnAsWithoutACard) {
  const Profile clean = simulated_truth(4);
  const probe::Card card = v100_card();
  const auto indices =
      card_probe_indices(clean.frequencies_mhz(), {.probe_clocks = card_probe_count(3, 8, 2)});
  const Profile truth = with_bump(clean, 2, indices[1]);
  const LiveRun without = run_live(truth, 8, nullptr);
  const LiveRun with = run_live(truth, 8, &card);
  const LiveState& state = with.scheduler.state();
  EXPECT_TRUE(state.card_fallback());
  EXPECT_NE(state.card_summary().find("does not describe stage(s) 2"), std::string::npos)
      << state.card_summary();
  // The card's round, then the rest from the highest down (skipping the card's clocks) until energy rises.
  ASSERT_GE(with.profiling_clocks.size(), 2u);
  for (size_t round = 1; round < with.profiling_clocks.size(); ++round) {
    for (const uint32_t mhz : with.profiling_clocks[round]) {
      for (const size_t index : state.card_clocks()) {
        EXPECT_NE(mhz, truth.frequencies_mhz()[index]);
      }
    }
  }
  EXPECT_EQ(with.profiling_clocks[1].front(), truth.frequencies_mhz()[1]);
  EXPECT_GT(with.scheduler.profiled_frequencies(), 10u);
  EXPECT_LE(with.scheduler.profiling_iterations(), without.scheduler.profiling_iterations() + 1);
  // Every clock of the planned profile was measured: its rows are the truth's.
  const Profile planned = *Profile::parse(*with.scheduler.profile_csv(), "planned");
  for (size_t i = 0; i < planned.frequencies_mhz().size(); ++i) {
    const auto found = std::find(truth.frequencies_mhz().begin(), truth.frequencies_mhz().end(),
                                 planned.frequencies_mhz()[i]);
    ASSERT_NE(found, truth.frequencies_mhz().end());
    const auto index = static_cast<size_t>(found - truth.frequencies_mhz().begin());
    EXPECT_NEAR(planned.options(2, Instruction::kBackward)[i].energy_j,
                truth.options(2, Instruction::kBackward)[index].energy_j, 1e-9);
  }
}

TEST(CardLiveTest, WithoutACardNothingChanges) {
  const Profile truth = simulated_truth(2);
  const LiveRun run = run_live(truth, 4, nullptr);
  const LiveState& state = run.scheduler.state();
  EXPECT_FALSE(state.card_given());
  EXPECT_TRUE(state.card_clocks().empty());
  EXPECT_TRUE(state.card_summary().empty());
  EXPECT_FALSE(run.scheduler.data().card_json.has_value());
  // The sweep goes down from the highest clock, 2 a round, without a gap.
  size_t next = 0;
  for (const auto& clocks : run.profiling_clocks) {
    for (const uint32_t mhz : clocks) {
      EXPECT_EQ(mhz, truth.frequencies_mhz()[next++]);
    }
  }
  EXPECT_EQ(next, run.scheduler.profiled_frequencies());
}

TEST(CardLiveTest, RefusesACardItCannotUse) {
  LiveJobInfo info;
  info.pp_degree = 1;
  info.world_size = 1;
  info.num_microbatches = 4;
  auto scheduler = *LiveScheduler::create(info, {});
  probe::Card read_only = v100_card();
  read_only.frontiers.clear();
  read_only.read_only = true;
  auto refused = scheduler.use_card(read_only, "ro.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "card: ro.json: the card has no compute kernel frontier under sm_clock (a --read-only card has no "
            "frontiers)");
  const Profile truth = simulated_truth(1);
  auto given = *LiveScheduler::create(info, {});
  ASSERT_TRUE(given.use_profile(profile_csv(truth)));
  refused = given.use_card(v100_card(), "sim-v100.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "card: the job was given a profile, so nothing is profiled: a card would not be used");
  const LivePlanProvider provider = [](const LivePlanRequest& request) { return plan_live(request); };
  ASSERT_TRUE(scheduler.register_rank({0, 0, 0, 0, truth.frequencies_mhz()}, provider));
  refused = scheduler.use_card(v100_card(), "sim-v100.json");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kState);
  EXPECT_EQ(refused.error().message(), "card: must be given before the first rank registers");
  LiveOptions options;
  options.card_probe_clocks = 1;
  auto bad = LiveScheduler::create(info, options);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message(), "card_probe_clocks: must be 2 to 64, got 1");
}

}  // namespace
}  // namespace joule::plan
