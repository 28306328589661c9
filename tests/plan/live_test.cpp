// SPDX-License-Identifier: Apache-2.0
// The live scheduler: registration, the clock sweep and the profile it measures, the plan, stragglers with
// hysteresis, the stored state, and every refused input.
#include "joule/plan/live.hpp"

#include <cmath>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/plan/planner.hpp"
#include "joule/plan/profile_codec.hpp"

#include "plan/live_v1_document.hpp"

namespace joule::plan {
namespace {

constexpr double kBlockingW = 60;  // what the "GPUs" draw while they wait

Profile example_profile() {
  return *Profile::read(JOULE_PERSEUS_DATA_DIR "/example_s4_m8_profile.csv");
}

std::vector<uint32_t> a100_clocks() {
  std::vector<uint32_t> clocks;
  for (uint32_t mhz = 1410; mhz >= 210; mhz -= 15) {
    clocks.push_back(mhz);
  }
  return clocks;
}

LiveJobInfo job(int pp, int dp, int microbatches) {
  LiveJobInfo info;
  info.job_id = "test-job";
  info.pp_degree = pp;
  info.dp_degree = dp;
  info.tp_degree = 1;
  info.world_size = pp * dp;
  info.num_microbatches = microbatches;
  return info;
}

// A rank that runs its schedule exactly as the profile says (clocks below the profile's lowest behave like
// it, as the simulated GPUs do), waits `idle_share` of its busy time on its neighbours at kBlockingW, and is
// `slowdown` times slower than the profile.
LiveResult run_round(const Profile& truth, const LiveSchedule& schedule, int pp_rank, double slowdown = 1,
                     double idle_share = 0.25) {
  LiveResult result;
  result.rank = schedule.rank;
  for (int iteration = 0; iteration < schedule.iterations; ++iteration) {
    double busy_s = 0;
    double busy_j = 0;
    std::map<std::string, std::vector<double>> times;
    std::map<std::string, std::vector<double>> energies;
    for (const auto& [name, mhz] : schedule.frequencies) {
      const Instruction instruction = *parse_instruction(name);
      const auto& options = truth.options(pp_rank, instruction);
      ProfileOption option = options.back();
      for (const ProfileOption& candidate : options) {
        if (candidate.frequency_mhz <= mhz) {
          option = candidate;
          break;
        }
      }
      times[name].push_back(option.time_s * slowdown);
      energies[name].push_back(option.energy_j * slowdown);
      busy_s += option.time_s * slowdown;
      busy_j += option.energy_j * slowdown;
    }
    for (auto& [name, values] : times) {
      result.time_breakdown_s[name].push_back(values);
      result.energy_breakdown_j[name].push_back(energies[name]);
    }
    result.iter_time_s.push_back(busy_s * (1 + idle_share));
    result.iter_energy_j.push_back(busy_j + busy_s * idle_share * kBlockingW);
  }
  return result;
}

class LiveTest : public ::testing::Test {
 protected:
  // Counts planner calls so that tests can check the provider is used only when needed.
  LivePlanProvider provider = [this](const LivePlanRequest& request) {
    ++plans;
    return plan_live(request);
  };
  int plans = 0;

  LiveScheduler registered(int pp, int dp, int microbatches, LiveOptions options = {}) {
    auto scheduler = LiveScheduler::create(job(pp, dp, microbatches), options);
    EXPECT_TRUE(scheduler) << scheduler.error().message();
    for (int rank = 0; rank < pp * dp; ++rank) {
      const auto registered =
          scheduler->register_rank({rank, rank / pp, rank % pp, 0, a100_clocks()}, provider);
      EXPECT_TRUE(registered) << registered.error().message();
    }
    return std::move(*scheduler);
  }

  // Runs rounds until planned; every state is stored and parsed back between rounds, as the server does.
  void run_until_planned(LiveScheduler& scheduler, const Profile& truth) {
    const int pp = scheduler.info().pp_degree;
    for (int guard = 0; guard < 200 && scheduler.phase() != LivePhase::kPlanned; ++guard) {
      for (int rank = 0; rank < scheduler.info().world_size; ++rank) {
        const auto schedule = scheduler.schedule(rank);
        ASSERT_TRUE(schedule) << schedule.error().message();
        const auto reported = scheduler.report(run_round(truth, *schedule, rank % pp), provider);
        ASSERT_TRUE(reported) << reported.error().message();
        auto parsed = LiveScheduler::parse(scheduler.dump());
        ASSERT_TRUE(parsed) << parsed.error().message();
        scheduler = std::move(*parsed);
      }
    }
    ASSERT_EQ(scheduler.phase(), LivePhase::kPlanned);
  }
};

TEST_F(LiveTest, SweepsDownUntilEnergyRisesAndMeasuresTheProfileExactly) {
  const Profile truth = example_profile();
  LiveScheduler scheduler = registered(4, 1, 8);
  EXPECT_EQ(scheduler.phase(), LivePhase::kWarmup);
  ASSERT_EQ(scheduler.frequencies_mhz().size(), a100_clocks().size());
  // Warm-up: every computation at the highest clock, one iteration.
  const auto warmup = *scheduler.schedule(0);
  EXPECT_EQ(warmup.iterations, 1);
  ASSERT_EQ(warmup.frequencies.size(), 16u);
  for (const auto& [name, mhz] : warmup.frequencies) {
    EXPECT_EQ(mhz, 1410u);
  }
  EXPECT_EQ(warmup.frequencies.front().first, "forward");
  run_until_planned(scheduler, truth);
  EXPECT_EQ(plans, 1);
  // 8 microbatches, 2 samples each: 4 clocks per iteration. The example's energy bottoms out near 960 MHz
  // and rises 2% above it three clocks further down on every stage, so the sweep stops long before the
  // profile's 810 MHz and far before the GPU's 210 MHz.
  const size_t profiled = scheduler.profiled_frequencies();
  EXPECT_GE(profiled, 30u);
  EXPECT_LE(profiled, 41u);
  EXPECT_EQ(scheduler.profiling_iterations(), 1 + static_cast<int64_t>((profiled + 3) / 4));
  const Profile measured = *Profile::parse(*scheduler.profile_csv(), "measured");
  ASSERT_EQ(measured.frequencies_mhz().size(), profiled);
  for (int stage = 0; stage < 4; ++stage) {
    for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
      for (size_t f = 0; f < profiled; ++f) {
        EXPECT_NEAR(measured.options(stage, instruction)[f].time_s,
                    truth.options(stage, instruction)[f].time_s, 1e-9);
        EXPECT_NEAR(measured.options(stage, instruction)[f].energy_j,
                    truth.options(stage, instruction)[f].energy_j, 1e-6);
      }
    }
  }
  // The blocking power is measured from the time and energy outside computations.
  EXPECT_NEAR(scheduler.p_blocking_w(), kBlockingW, 1e-6);
  // The plan: the fastest point, no slower than all-max clocks and cheaper.
  const auto planned = *scheduler.schedule(2);
  EXPECT_EQ(planned.phase, LivePhase::kPlanned);
  EXPECT_EQ(planned.iterations, 2);
  ASSERT_TRUE(planned.predicted);
  EXPECT_LE(planned.predicted->iteration_time_s, planned.predicted->max_clock_time_s * (1 + 1e-9));
  EXPECT_LT(planned.predicted->iteration_energy_j, planned.predicted->max_clock_energy_j);
  bool slowed_some = false;
  for (const auto& [name, mhz] : planned.frequencies) {
    slowed_some = slowed_some || mhz < 1410;
  }
  EXPECT_TRUE(slowed_some);
}

TEST_F(LiveTest, ProfilingRoundsGiveEachClockTheSamplesAsked) {
  LiveOptions options;
  options.profile_samples = 4;
  LiveScheduler scheduler = registered(2, 1, 8, options);
  const Profile truth = example_profile();
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(0), 0), provider));
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(1), 1), provider));
  EXPECT_EQ(scheduler.phase(), LivePhase::kProfiling);
  const auto round = *scheduler.schedule(0);
  std::map<uint32_t, int> forwards;
  for (const auto& [name, mhz] : round.frequencies) {
    forwards[mhz] += name == "forward" ? 1 : 0;
  }
  EXPECT_EQ(forwards, (std::map<uint32_t, int>{{1410, 4}, {1395, 4}}));
}

TEST_F(LiveTest, AGivenProfileSkipsProfiling) {
  auto scheduler = *LiveScheduler::create(job(4, 1, 8), {});
  ASSERT_TRUE(scheduler.use_profile(profile_csv(example_profile())));
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(scheduler.register_rank({rank, 0, rank, 0, a100_clocks()}, provider));
  }
  EXPECT_EQ(scheduler.phase(), LivePhase::kPlanned);
  EXPECT_EQ(scheduler.round(), 0);
  EXPECT_TRUE(scheduler.schedule(0)->predicted);
}

TEST_F(LiveTest, AGivenProfileNeedingAnUnsupportedClockIsRefused) {
  auto scheduler = *LiveScheduler::create(job(4, 1, 8), {});
  ASSERT_TRUE(scheduler.use_profile(profile_csv(example_profile())));
  std::vector<uint32_t> clocks = a100_clocks();
  clocks.erase(std::find(clocks.begin(), clocks.end(), 900u));
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(scheduler.register_rank({rank, 0, rank, 0, a100_clocks()}, provider));
  }
  const auto refused = scheduler.register_rank({3, 0, 3, 0, clocks}, provider);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(refused.error().message(),
            "available_frequencies: the job's profile plans 900 MHz, which rank 3's GPU does not support");
  EXPECT_EQ(scheduler.missing_ranks(), std::vector<int>{3});
  EXPECT_EQ(scheduler.phase(), LivePhase::kRegistering);
}

TEST_F(LiveTest, RefusesBadJobsRanksAndResultsNamingTheField) {
  LiveJobInfo bad = job(4, 2, 8);
  bad.world_size = 6;
  EXPECT_EQ(LiveScheduler::create(bad, {}).error().message(),
            "world_size: must equal pp_degree × dp_degree × tp_degree = 4 × 2 × 1 = 8, got 6");
  bad = job(4, 1, 0);
  EXPECT_EQ(LiveScheduler::create(bad, {}).error().message(),
            "num_microbatches: ensure this value is greater than or equal to 1");
  LiveOptions options;
  options.straggler_exit = 0.1;
  EXPECT_NE(LiveScheduler::create(job(4, 1, 8), options).error().message().find("straggler_exit:"),
            std::string::npos);

  auto scheduler = *LiveScheduler::create(job(2, 1, 4), {});
  EXPECT_EQ(scheduler.schedule(0).error().message(),
            "rank: job test-job is waiting for 2 of 2 ranks to register (missing: 0, 1)");
  EXPECT_EQ(scheduler.register_rank({0, 0, 0, 0, {}}, provider).error().message(),
            "available_frequencies: the GPU lists no SM clock (the scheduler needs at least one)");
  EXPECT_EQ(scheduler.register_rank({0, 0, 0, 0, {1410, 0}}, provider).error().message(),
            "available_frequencies[1]: must be 1 to 100000 MHz, got 0");
  EXPECT_EQ(scheduler.register_rank({0, 0, 0, 0, {1410, 1410}}, provider).error().message(),
            "available_frequencies[1]: 1410 MHz is listed twice");
  EXPECT_EQ(scheduler.register_rank({2, 0, 0, 0, {1410}}, provider).error().message(),
            "rank: must be 0 to 1 (world_size 2), got 2");
  EXPECT_EQ(scheduler.register_rank({0, 0, 2, 0, {1410}}, provider).error().message(),
            "pp_rank: must be 0 to 1 (the job's degree is 2), got 2");
  ASSERT_TRUE(scheduler.register_rank({0, 0, 0, 0, {1410, 1395}}, provider));
  EXPECT_EQ(scheduler.register_rank({0, 0, 1, 0, {1410}}, provider).error().message(),
            "rank: rank 0 is already registered");
  EXPECT_EQ(scheduler.register_rank({1, 0, 0, 0, {1410}}, provider).error().message(),
            "rank: rank 1 claims dp_rank 0, pp_rank 0, tp_rank 0, which rank 0 already has");
  EXPECT_EQ(scheduler.register_rank({1, 0, 1, 0, {1200}}, provider).error().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(scheduler.schedule(0).error().message(),
            "rank: job test-job is waiting for 1 of 2 ranks to register (missing: 1)");
  ASSERT_TRUE(scheduler.register_rank({1, 0, 1, 0, {1395, 1410}}, provider));
  EXPECT_EQ(scheduler.frequencies_mhz(), (std::vector<uint32_t>{1410, 1395}));

  const Profile truth = example_profile();
  const std::string before = scheduler.dump();
  EXPECT_EQ(scheduler.schedule(7).error().message(),
            "rank: rank 7 is not part of job test-job (world_size 2)");
  LiveResult result = run_round(truth, *scheduler.schedule(0), 0);
  result.rank = 9;
  EXPECT_EQ(scheduler.report(result, provider).error().code(), ErrorCode::kNotFound);
  result = run_round(truth, *scheduler.schedule(0), 0);
  result.iter_time_s.push_back(1);
  EXPECT_EQ(scheduler.report(result, provider).error().message(),
            "iter_time: round 0 ran 1 iteration of its schedule, but the result lists 2 values");
  result = run_round(truth, *scheduler.schedule(0), 0);
  result.time_breakdown_s["jump"] = {{1.0}};
  EXPECT_EQ(
      scheduler.report(result, provider).error().message(),
      "time_breakdown.jump: unknown instruction 'jump': the schedule of rank 0 has only backward, forward");
  result = run_round(truth, *scheduler.schedule(0), 0);
  result.energy_breakdown_j["forward"][0].pop_back();
  EXPECT_EQ(scheduler.report(result, provider).error().message(),
            "energy_breakdown.forward[0]: the schedule runs 4 forward computations per iteration, the result "
            "lists 3");
  result = run_round(truth, *scheduler.schedule(0), 0);
  result.time_breakdown_s["backward"][0][2] = NAN;
  EXPECT_EQ(scheduler.report(result, provider).error().message(),
            "time_breakdown.backward[0][2]: must be a finite positive number, got nan");
  result = run_round(truth, *scheduler.schedule(0), 0);
  result.iter_energy_j[0] = -1;
  EXPECT_EQ(scheduler.report(result, provider).error().message(),
            "iter_energy[0]: must be a finite non-negative number, got -1");
  EXPECT_EQ(scheduler.dump(), before);  // nothing refused changed anything
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(0), 0), provider));
  EXPECT_EQ(scheduler.report(run_round(truth, *scheduler.schedule(0), 0), provider).error().message(),
            "rank: rank 0 already reported round 0; it gets the next schedule once every rank has reported");
  EXPECT_TRUE(scheduler.has_reported(0));
  EXPECT_FALSE(scheduler.has_reported(1));
  // Profiling needs the breakdowns.
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(1), 1), provider));
  result = run_round(truth, *scheduler.schedule(0), 0);
  result.energy_breakdown_j.clear();
  EXPECT_EQ(scheduler.report(result, provider).error().message(),
            "energy_breakdown.backward: field required while profiling (the energy of every backward is what "
            "the sweep measures)");
}

// Two pipelines; pipeline 1 turns straggler, noisy, then recovers.
TEST_F(LiveTest, StragglersAreFollowedWithHysteresisAndWithoutFlapping) {
  const Profile truth = example_profile();
  LiveScheduler scheduler = registered(4, 2, 8);
  run_until_planned(scheduler, truth);
  const double fastest_s = scheduler.schedule(0)->predicted->iteration_time_s;
  std::mt19937 random(7);
  std::uniform_real_distribution<double> noise(-0.015, 0.015);
  // One round: every rank reports; the pipeline times follow `slowdown[dp]`, each iteration noisy.
  const auto round = [&](std::array<double, 2> slowdown) {
    for (int rank = 0; rank < 8; ++rank) {
      const auto schedule = *scheduler.schedule(rank);
      const int dp = rank / 4;
      LiveResult result = run_round(truth, schedule, rank % 4, 1, 0.0);
      // A planned rank reports its pipeline's time (the critical path), as a real stage sees it.
      for (double& time_s : result.iter_time_s) {
        time_s = schedule.predicted->compute_time_s * slowdown[static_cast<size_t>(dp)] * (1 + noise(random));
      }
      ASSERT_TRUE(scheduler.report(result, provider));
    }
    scheduler = *LiveScheduler::parse(scheduler.dump());
  };
  // Noise alone (±1.5%) never enters straggler mode.
  for (int i = 0; i < 20; ++i) {
    round({1.0, 1.0});
    ASSERT_FALSE(scheduler.straggler_time_s()) << "round " << i;
  }
  // Pipeline 1 is 20% slower: one round is not enough (confirmation), the second is.
  round({1.0, 1.2});
  EXPECT_FALSE(scheduler.straggler_time_s());
  round({1.0, 1.2});
  ASSERT_TRUE(scheduler.straggler_time_s());
  EXPECT_NEAR(*scheduler.straggler_time_s() / fastest_s, 1.2, 0.03);
  EXPECT_EQ(scheduler.slowed_pipelines(), (std::vector<bool>{true, false}));
  const auto slowed = *scheduler.schedule(0);
  EXPECT_NEAR(slowed.predicted->iteration_time_s, *scheduler.straggler_time_s(), 1e-12);
  EXPECT_NE(slowed.frequencies, scheduler.schedule(4)->frequencies);  // the straggler keeps the fastest plan
  // Cheaper than the fastest plan waiting for the straggler.
  const double fastest_j = scheduler.schedule(4)->predicted->iteration_energy_j;
  EXPECT_LT(slowed.predicted->iteration_energy_j,
            fastest_j + scheduler.p_blocking_w() * 4 * (*scheduler.straggler_time_s() - fastest_s));
  EXPECT_LE(slowed.predicted->compute_time_s, *scheduler.straggler_time_s());
  // Staying slow with noise: T' does not move.
  const double target_s = *scheduler.straggler_time_s();
  for (int i = 0; i < 20; ++i) {
    round({1.0, 1.2});
    ASSERT_EQ(scheduler.straggler_time_s(), target_s) << "round " << i;
  }
  // Recovery: one round is not enough, the second ends straggler mode.
  round({1.0, 1.0});
  EXPECT_TRUE(scheduler.straggler_time_s());
  round({1.0, 1.0});
  EXPECT_FALSE(scheduler.straggler_time_s());
  EXPECT_EQ(scheduler.slowed_pipelines(), (std::vector<bool>{false, false}));
  EXPECT_EQ(scheduler.schedule(0)->frequencies, scheduler.schedule(4)->frequencies);
  // Asked for the frontier only when what a pipeline runs changed: planning, entering and leaving.
  EXPECT_EQ(plans, 3);
}

TEST_F(LiveTest, OnePipelineIsNeverSlowedDown) {
  const Profile truth = example_profile();
  LiveScheduler scheduler = registered(4, 1, 8);
  run_until_planned(scheduler, truth);
  for (int i = 0; i < 4; ++i) {
    for (int rank = 0; rank < 4; ++rank) {
      LiveResult result = run_round(truth, *scheduler.schedule(rank), rank, 1.5);
      ASSERT_TRUE(scheduler.report(result, provider));
    }
  }
  EXPECT_FALSE(scheduler.straggler_time_s());
}

// Thermal warm-up: a rank reporting thermally_steady = false keeps the job at the highest clock.
TEST_F(LiveTest, WarmupRepeatsUntilEveryRankIsThermallySteady) {
  const Profile truth = example_profile();
  LiveScheduler scheduler = registered(2, 1, 4);
  // One warm-up round; rank 0 says `steady`, rank 1 says nothing (a Zeus client): counts as steady.
  const auto warm_round = [&](std::optional<bool> rank0, std::optional<bool> rank1) {
    for (int rank = 0; rank < 2; ++rank) {
      const auto schedule = *scheduler.schedule(rank);
      ASSERT_EQ(schedule.phase, LivePhase::kWarmup);
      for (const auto& [name, mhz] : schedule.frequencies) {
        ASSERT_EQ(mhz, 1410u);
      }
      LiveResult result = run_round(truth, schedule, rank);
      result.thermally_steady = rank == 0 ? rank0 : rank1;
      ASSERT_TRUE(scheduler.report(result, provider));
      // Stored and parsed back after every report: a pending `false` must survive.
      auto parsed = LiveScheduler::parse(scheduler.dump());
      ASSERT_TRUE(parsed) << parsed.error().message();
      scheduler = std::move(*parsed);
    }
  };
  warm_round(false, std::nullopt);
  EXPECT_EQ(scheduler.phase(), LivePhase::kWarmup);
  EXPECT_EQ(scheduler.round(), 1);
  EXPECT_EQ(scheduler.warmup_rounds(), 1);
  EXPECT_EQ(scheduler.unsteady_ranks(), std::vector<int>{0});
  warm_round(true, false);
  EXPECT_EQ(scheduler.phase(), LivePhase::kWarmup);
  EXPECT_EQ(scheduler.unsteady_ranks(), std::vector<int>{1});
  warm_round(true, std::nullopt);
  EXPECT_EQ(scheduler.phase(), LivePhase::kProfiling);
  EXPECT_EQ(scheduler.warmup_rounds(), 3);
  EXPECT_TRUE(scheduler.unsteady_ranks().empty());
  EXPECT_FALSE(scheduler.warmup_gave_up());
  // Outside warm-up the field is ignored.
  LiveResult result = run_round(truth, *scheduler.schedule(0), 0);
  result.thermally_steady = false;
  ASSERT_TRUE(scheduler.report(result, provider));
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(1), 1), provider));
  EXPECT_EQ(scheduler.phase(), LivePhase::kProfiling);
  run_until_planned(scheduler, truth);
  // Every round so far, warm-up ones included, was one iteration before the plan.
  EXPECT_EQ(scheduler.profiling_iterations(), scheduler.round());
}

TEST_F(LiveTest, WarmupWithoutTheFieldIsOneRound) {
  LiveScheduler scheduler = registered(2, 1, 4);
  const Profile truth = example_profile();
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(0), 0), provider));
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(1), 1), provider));
  EXPECT_EQ(scheduler.phase(), LivePhase::kProfiling);
  EXPECT_EQ(scheduler.warmup_rounds(), 1);
}

TEST_F(LiveTest, WarmupGivesUpAfterMaxWarmupRounds) {
  LiveOptions options;
  options.max_warmup_rounds = 3;
  LiveScheduler scheduler = registered(1, 2, 4, options);
  const Profile truth = example_profile();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(scheduler.phase(), LivePhase::kWarmup) << "round " << i;
    for (int rank = 0; rank < 2; ++rank) {
      LiveResult result = run_round(truth, *scheduler.schedule(rank), 0);
      result.thermally_steady = rank == 1 ? std::optional<bool>(false) : std::nullopt;
      ASSERT_TRUE(scheduler.report(result, provider));
    }
    scheduler = *LiveScheduler::parse(scheduler.dump());
  }
  EXPECT_EQ(scheduler.phase(), LivePhase::kProfiling);
  EXPECT_EQ(scheduler.warmup_rounds(), 3);
  EXPECT_TRUE(scheduler.warmup_gave_up());
  EXPECT_EQ(scheduler.unsteady_ranks(), std::vector<int>{1});
  EXPECT_EQ(scheduler.options().max_warmup_rounds, 3);

  LiveOptions bad;
  bad.max_warmup_rounds = 0;
  EXPECT_EQ(LiveScheduler::create(job(1, 1, 4), bad).error().message(),
            "max_warmup_rounds: must be 1 to 1000000 (1: one warm-up round, no thermal wait), got 0");
}

TEST_F(LiveTest, StatesStoredBeforeTheThermalWarmupStillParse) {
  LiveScheduler scheduler = registered(2, 1, 4);
  LiveResult result = run_round(example_profile(), *scheduler.schedule(0), 0);
  // Written by a joule before the warm-up fields existed, with rank 0's report pending.
  nlohmann::json document =
      version_1_document(job(2, 1, 4), a100_clocks(), "warmup", 0, {version_1_result(result)}, false);
  auto parsed = LiveScheduler::parse(document.dump());
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(parsed->options().max_warmup_rounds, LiveOptions{}.max_warmup_rounds);
  EXPECT_EQ(parsed->warmup_rounds(), 0);
  EXPECT_FALSE(parsed->warmup_gave_up());
  EXPECT_TRUE(parsed->has_reported(0));
  // The old pending report counts as steady: the round ends the warm-up.
  ASSERT_TRUE(parsed->report(run_round(example_profile(), *parsed->schedule(1), 1), provider));
  EXPECT_EQ(parsed->phase(), LivePhase::kProfiling);
  // A pending `false` of a version 1 document survives; a pending value of the wrong type does not parse.
  result.thermally_steady = false;
  document = version_1_document(job(2, 1, 4), a100_clocks(), "warmup", 0, {version_1_result(result)}, true);
  parsed = LiveScheduler::parse(document.dump());
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(parsed->reports().front().result.thermally_steady, std::optional<bool>(false));
  document["pending"][0]["thermally_steady"] = "no";
  EXPECT_EQ(LiveScheduler::parse(document.dump()).error().code(), ErrorCode::kParse);
}

TEST_F(LiveTest, AVersion1JobRunsOnToItsPlanInTheSplitState) {
  // A job stored by an earlier joule mid-warm-up goes on where it was, and is stored in version 2 after.
  auto parsed =
      LiveScheduler::parse(version_1_document(job(4, 1, 8), a100_clocks(), "warmup", 3, {}, true).dump());
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(parsed->round(), 3);
  EXPECT_EQ(parsed->missing_ranks(), std::vector<int>{});
  LiveScheduler scheduler = std::move(*parsed);
  run_until_planned(scheduler, example_profile());
  EXPECT_EQ(nlohmann::json::parse(scheduler.dump())["version"], 2);
}

TEST_F(LiveTest, ARepeatedOrLateResultIsRefusedByItsRoundNumber) {
  const Profile truth = example_profile();
  LiveScheduler scheduler = registered(2, 1, 4);
  LiveResult first = run_round(truth, *scheduler.schedule(0), 0);
  first.round = 0;
  ASSERT_TRUE(scheduler.report(first, provider));
  EXPECT_EQ(scheduler.report(first, provider).error().message(),
            "rank: rank 0 already reported round 0; it gets the next schedule once every rank has reported");
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(1), 1), provider));
  ASSERT_EQ(scheduler.round(), 1);
  // The same result delivered again after its round ended (a client's retry): refused, not applied to
  // round 1.
  const std::string before = scheduler.dump();
  const auto late = scheduler.report(first, provider);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code(), ErrorCode::kState);
  EXPECT_EQ(late.error().message(),
            "round: rank 0 reported round 0, but job test-job is at round 1 (a repeated or late result; "
            "GET /schedule/test-job?rank=0 gives the current round)");
  first.round = 7;
  EXPECT_EQ(scheduler.report(first, provider).error().code(), ErrorCode::kState);
  EXPECT_EQ(scheduler.dump(), before);
  EXPECT_FALSE(scheduler.has_reported(0));
}

TEST_F(LiveTest, ImplausibleMeasurementsAreRefusedNamingTheRankAndFieldAndTheRoundGoesOn) {
  const Profile truth = example_profile();
  LiveScheduler scheduler = registered(2, 1, 4);
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(0), 0), provider));
  const std::string before = scheduler.dump();
  LiveResult result = run_round(truth, *scheduler.schedule(1), 1);
  result.time_breakdown_s["forward"][0][1] = 1e300;
  EXPECT_EQ(
      scheduler.report(result, provider).error().message(),
      "time_breakdown.forward[0][1]: rank 1 reported 1e+300 s, more than the 86400 s any computation "
      "comes near (a unit mistake, or a broken measurement); the result is refused and the round goes on "
      "without it");
  result = run_round(truth, *scheduler.schedule(1), 1);
  result.iter_time_s[0] = 1e9;
  EXPECT_EQ(scheduler.report(result, provider).error().message(),
            "iter_time[0]: rank 1 reported 1e+09 s, more than the 86400 s any iteration comes near (a unit "
            "mistake, or a broken measurement); the result is refused and the round goes on without it");
  result = run_round(truth, *scheduler.schedule(1), 1);
  result.energy_breakdown_j["backward"][0][0] = 2e9;
  EXPECT_EQ(scheduler.report(result, provider).error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(scheduler.dump(), before);
  // The rank measures again: its round completes, and the profile holds no implausible value.
  ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(1), 1), provider));
  EXPECT_EQ(scheduler.round(), 1);
}

TEST_F(LiveTest, AReportSpoiltInTheStoreMakesTheRoundRunAgain) {
  const Profile truth = example_profile();
  LiveScheduler whole = registered(2, 1, 4);
  ASSERT_TRUE(whole.report(run_round(truth, *whole.schedule(0), 0), provider));
  ASSERT_TRUE(whole.report(run_round(truth, *whole.schedule(1), 1), provider));
  ASSERT_EQ(whole.phase(), LivePhase::kProfiling);
  LiveState state = whole.state();
  LiveData data = whole.data();
  const auto ranks = whole.ranks();
  std::vector<LiveReport> reports;
  for (const auto& rank : ranks) {
    reports.push_back({rank, state.round(), run_round(truth, *state.schedule(rank, data), rank.pp_rank)});
    ASSERT_EQ(state.count_report(), rank.rank == 1);
  }
  reports[1].result.energy_breakdown_j.erase("forward");  // what check_result() would have refused
  const size_t profiled = state.profiled_frequencies();
  ASSERT_TRUE(state.complete_round(reports, data));
  EXPECT_EQ(
      state.rerun_reason(),
      "energy_breakdown.forward: field required while profiling (the energy of every forward is what the "
      "sweep measures)");
  EXPECT_EQ(state.round(), 2);
  EXPECT_EQ(state.reported(), 0);
  EXPECT_EQ(state.profiled_frequencies(), profiled);  // the same clocks again
  EXPECT_EQ(state.phase(), LivePhase::kProfiling);
}

TEST_F(LiveTest, RegistrationsBeyondTheLimitsAreRefusedNamingTheField) {
  LiveLimits limits;
  limits.max_frequencies_per_rank = 4;
  limits.max_world_size = 8;
  auto scheduler = *LiveScheduler::create(job(2, 1, 4), {}, limits);
  EXPECT_EQ(scheduler.register_rank({0, 0, 0, 0, {1410, 1395, 1380, 1365, 1350}}, provider).error().message(),
            "available_frequencies: 5 clocks, more than the 4 a rank may list (GPUs offer a few hundred at "
            "most)");
  EXPECT_EQ(LiveScheduler::create(job(4, 4, 4), {}, limits).error().message(),
            "world_size: 16 ranks, more than the 8 one job may have");
  // 9,990 clocks per rank on the default limits: refused before anything is stored.
  std::vector<uint32_t> many(9990);
  for (size_t i = 0; i < many.size(); ++i) {
    many[i] = static_cast<uint32_t>(10 + i);
  }
  auto defaults = *LiveScheduler::create(job(2, 1, 4), {});
  EXPECT_EQ(
      defaults.register_rank({0, 0, 0, 0, many}, provider).error().message(),
      "available_frequencies: 9990 clocks, more than the 512 a rank may list (GPUs offer a few hundred at "
      "most)");
  // A job whose profile could outgrow what a job may keep.
  limits = LiveLimits{};
  limits.max_data_bytes = 100'000;
  const auto refused = LiveScheduler::create(job(8, 1, 4), {}, limits);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "pp_degree: 8 stages with up to 512 clocks each may need 1509248 bytes of profile, more than the "
            "100000 a job may keep");
  LiveLimits bad;
  bad.max_frequencies_per_rank = 0;
  EXPECT_EQ(LiveScheduler::create(job(1, 1, 4), {}, bad).error().message(),
            "max_frequencies_per_rank: must be 1 to 4096, got 0");
}

TEST_F(LiveTest, TheStateEveryRequestReadsStaysSmallForAJobOf4096Ranks) {
  // 8 stages × 512 data-parallel pipelines: the state stays kilobytes while ranks register and report.
  const int pp = 8;
  const int dp = 512;
  LiveState state = *LiveState::create(job(pp, dp, 4), {});
  LiveData data;
  size_t largest = 0;
  const std::vector<uint32_t> clocks = a100_clocks();
  for (int rank = 0; rank < pp * dp; ++rank) {
    const LiveRankInfo info{rank, rank / pp, rank % pp, 0, clocks};
    ASSERT_TRUE(state.check_registration(info));
    state.add_rank(info, data);
    if (rank % 512 == 0) {
      largest = std::max(largest, state.dump().size());
    }
  }
  ASSERT_EQ(state.phase(), LivePhase::kWarmup);
  const Profile truth = example_profile();
  std::vector<LiveReport> reports;
  for (int rank = 0; rank < pp * dp; ++rank) {
    const LiveRankPosition position{rank, rank / pp, rank % pp, 0};
    LiveResult result = run_round(truth, *state.schedule(position, data), std::min(rank % pp, 3));
    ASSERT_TRUE(state.check_result(result, position));
    reports.push_back({position, state.round(), std::move(result)});
    state.count_report();
  }
  largest = std::max(largest, state.dump().size());
  ASSERT_TRUE(state.complete_round(reports, data));
  EXPECT_EQ(state.phase(), LivePhase::kProfiling);
  largest = std::max(largest, state.dump().size());
  EXPECT_LT(largest, size_t{4096} + static_cast<size_t>(dp));
  auto parsed = LiveState::parse(state.dump());
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(parsed->dump(), state.dump());
  EXPECT_TRUE(state.check_data(data));
  // The data grows with stages and clocks, not ranks.
  EXPECT_LT(data.dump().size(), size_t{64} * 1024);
}

TEST_F(LiveTest, AFailedPlanRunsEveryComputationAtTheHighestClock) {
  const Profile truth = example_profile();
  LiveScheduler scheduler = registered(2, 1, 4);
  const LivePlanProvider failing = [](const LivePlanRequest&) -> Result<std::shared_ptr<const LivePlan>> {
    return fail(ErrorCode::kInvalidArgument, "planning: too much work");
  };
  for (int guard = 0; guard < 100 && scheduler.phase() != LivePhase::kFailed; ++guard) {
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(rank), rank), failing));
    }
  }
  ASSERT_EQ(scheduler.phase(), LivePhase::kFailed);
  EXPECT_EQ(scheduler.failure(), "planning: too much work");
  const int64_t round = scheduler.round();
  const auto schedule = *scheduler.schedule(0);
  EXPECT_EQ(schedule.phase, LivePhase::kFailed);
  EXPECT_EQ(schedule.iterations, 2);
  for (const auto& [name, mhz] : schedule.frequencies) {
    EXPECT_EQ(mhz, 1410u);
  }
  // Training goes on: rounds still complete.
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(scheduler.report(run_round(truth, *scheduler.schedule(rank), rank), provider));
  }
  EXPECT_EQ(scheduler.round(), round + 1);
  scheduler = *LiveScheduler::parse(scheduler.dump());
  EXPECT_EQ(scheduler.failure(), "planning: too much work");
}

TEST_F(LiveTest, AStragglerTargetThatCannotBePlannedKeepsTheFastestPlan) {
  const Profile truth = example_profile();
  LiveOptions options;
  options.straggler_confirm_rounds = 1;
  LiveScheduler scheduler = registered(4, 2, 8, options);
  run_until_planned(scheduler, truth);
  const LivePlanProvider failing = [](const LivePlanRequest&) -> Result<std::shared_ptr<const LivePlan>> {
    return fail(ErrorCode::kInternal, "no frontier");
  };
  for (int rank = 0; rank < 8; ++rank) {
    const auto schedule = *scheduler.schedule(rank);
    LiveResult result = run_round(truth, schedule, rank % 4, 1, 0.0);
    for (double& time_s : result.iter_time_s) {
      time_s = schedule.predicted->compute_time_s * (rank >= 4 ? 1.3 : 1.0);
    }
    ASSERT_TRUE(scheduler.report(result, failing));
  }
  EXPECT_EQ(scheduler.phase(), LivePhase::kPlanned);
  EXPECT_EQ(scheduler.failure(), "no frontier");
  EXPECT_FALSE(scheduler.straggler_time_s());
  EXPECT_EQ(scheduler.schedule(0)->frequencies, scheduler.schedule(4)->frequencies);
}

TEST_F(LiveTest, PlanningWorkIsBoundedBeforeAnythingIsPlanned) {
  LivePlanRequest request;
  request.profile_csv = profile_csv(example_profile());
  request.stages = 4;
  request.microbatches = 8;
  request.p_blocking_w = kBlockingW;
  request.unit_time_s = 0.001;
  request.max_planning_work = 1000;
  const auto refused = plan_live(request);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      refused.error().message(),
      "planning: 64 computations × 1216 time units of 0.001 s is 7.78e+04, more than the 1e+03 the live "
      "planner may walk (a larger unit_time_s plans it)");
  request.max_planning_work = 0;
  EXPECT_TRUE(plan_live(request));
}

TEST_F(LiveTest, TheStoredPartsRoundTripAndCorruptOnesAreRefused) {
  const Profile truth = example_profile();
  LiveScheduler scheduler = registered(4, 2, 8);
  run_until_planned(scheduler, truth);
  const LiveState& state = scheduler.state();
  EXPECT_EQ(LiveState::parse(state.dump())->dump(), state.dump());
  EXPECT_EQ(*LiveData::parse(scheduler.data().dump()), scheduler.data());
  LiveResult result = run_round(truth, *scheduler.schedule(0), 0);
  result.round = scheduler.round();
  const LiveReport report{{0, 0, 0, 0}, scheduler.round(), result};
  const auto parsed = LiveReport::parse(report.dump());
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->dump(), report.dump());
  EXPECT_EQ(parsed->result.round, result.round);
  // Corrupt states: counts outside the job, a planned job without its plan; data of another job.
  nlohmann::json document = nlohmann::json::parse(state.dump());
  document["registered"] = 99;
  EXPECT_EQ(LiveState::parse(document.dump()).error().message(),
            "the registered ranks do not match the phase");
  document = nlohmann::json::parse(state.dump());
  document["fastest"] = nullptr;
  EXPECT_EQ(LiveState::parse(document.dump()).error().message(), "a planned job without its plan");
  LiveData other = scheduler.data();
  other.fastest_plan.pop_back();
  EXPECT_EQ(state.check_data(other).error().message(),
            "the stored data of job test-job does not match its state: plans for another pipeline");
  other = scheduler.data();
  other.version += 1;
  EXPECT_EQ(state.check_data(other).error().code(), ErrorCode::kParse);
  EXPECT_EQ(LiveData::parse("{}").error().message(), "not a version 1 joule.plan.live_data document");
}

TEST_F(LiveTest, ParseRefusesForeignAndCorruptDocuments) {
  EXPECT_EQ(LiveScheduler::parse("{}").error().message(), "not a version 1 or 2 joule.plan.live document");
  EXPECT_EQ(LiveScheduler::parse("nope").error().code(), ErrorCode::kParse);
  std::string text = registered(2, 1, 4).dump();
  text.replace(text.find("\"warmup\""), 8, "\"dancing\"");
  EXPECT_EQ(LiveScheduler::parse(text).error().message(), "unknown phase 'dancing'");
}

}  // namespace
}  // namespace joule::plan
