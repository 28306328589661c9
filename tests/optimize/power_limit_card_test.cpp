// SPDX-License-Identifier: Apache-2.0
// The power-limit optimizer starting from a frontier card (joule/optimize/power_limit_card.hpp,
// docs/optimize.md "Starting from a frontier card"): the windows the card's figures justify, fewer limits
// measured when the card describes the workload, the fallback (and the same choice as without a card) when
// it does not, the refusals of another model's card, and ranks that agree. Structure only: no timing.
#include "joule/optimize/power_limit_card.hpp"

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/core/file.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/optimize/power_limit.hpp"

#include "captured_log.hpp"
#include "optimize/sim_training_job.hpp"
#include "test_util.hpp"

namespace joule::optimize {
namespace {


std::string shipped_card_path(std::string_view model) {
  return fmt::format("{}/data/cards/sim-{}.json", JOULE_SOURCE_DIR, model);
}

probe::Card shipped_card(std::string_view model) {
  auto text = read_text_file(shipped_card_path(model));
  EXPECT_TRUE(text) << text.error().message();
  auto card = probe::parse_card(*text, "card");
  EXPECT_TRUE(card) << card.error().message();
  return *card;
}

using Job = test::SimTrainingJob;

// A card whose compute kernel is the workload of `spec` itself (its operating point at each limit) and whose
// memory kernel never slows: the prior then describes that workload exactly.
probe::Card card_of_workload(std::string_view spec, const std::vector<uint32_t>& limits_mw) {
  probe::Card card = shipped_card("v100");
  card.frontiers.clear();
  auto clock = std::make_shared<VirtualClock>();
  auto gpus = std::move(*device::sim::open_sim_gpus(*device::sim::parse_spec(spec), clock));
  probe::FrontierCurve compute{"compute", "power_limit", "W", {}};
  probe::FrontierCurve memory{"memory", "power_limit", "W", {}};
  for (const uint32_t limit_mw : limits_mw) {
    EXPECT_TRUE(gpus[0]->set_power_limit_mw(limit_mw));
    const auto point = gpus[0]->operating_point();
    const double watts = limit_mw / 1e3;
    compute.points.push_back(
        {watts, 10, point.iteration_time_s, point.iteration_time_s * point.power_w, point.power_w, true});
    memory.points.push_back({watts, 10, 1e-3, 0.05, 50, true});
  }
  card.frontiers = {compute, memory};
  return card;
}

// A card whose kernels both slow down threefold from the top limit to the bottom one: no trace workload
// behaves so.
probe::Card misleading_card() {
  probe::Card card = shipped_card("v100");
  for (auto& curve : card.frontiers) {
    for (auto& point : curve.points) {
      const double depth = (250 - point.knob_value) / 150;  // 0 at 250 W, 1 at 100 W (power-limit curves)
      if (curve.knob == "power_limit") {
        point.time_per_iteration_s *= 1 + 2 * depth;
      }
    }
  }
  return card;
}

PowerLimitOptions options_with(std::optional<probe::Card> card, Policy policy = ZeusCost{0.5, 0}) {
  PowerLimitOptions options;
  options.restore_on_signals = false;
  options.policy = policy;
  options.card = std::move(card);
  options.card_source = options.card ? "card.json" : "";
  return options;
}

TEST(PowerLimitCard, WindowsFromTheCardsFigures) {
  const probe::Card v100 = shipped_card("v100");
  // 1 ms counter updates: 1000 of them span 1 s, 2 steps of 0.7 s (at least 3); settling in ~1.5 ms: 1 step.
  CardWindows windows = card_windows(v100, 0.7, 10, 40);
  EXPECT_EQ(windows.warmup_steps, 1);
  EXPECT_EQ(windows.profile_steps, 3);
  EXPECT_NE(windows.why.find("energy counter"), std::string::npos) << windows.why;
  EXPECT_EQ(card_windows(v100, 0.05, 10, 40).profile_steps, 20);
  EXPECT_EQ(card_windows(v100, 0.01, 10, 40).profile_steps, 40);  // never longer than without a card
  EXPECT_EQ(card_windows(v100, 0.7, 0, 40).warmup_steps, 0);      // never longer than asked
  // The P100 has no energy counter: the card bounds no shorter profile window.
  windows = card_windows(shipped_card("p100"), 0.7, 10, 40);
  EXPECT_EQ(windows.profile_steps, 40);
  EXPECT_NE(windows.why.find("no energy counter"), std::string::npos) << windows.why;
  // Without latency and settling figures the warm-up stays.
  probe::Card bare = v100;
  bare.latencies.clear();
  bare.settle.reset();
  EXPECT_EQ(card_windows(bare, 0.7, 10, 40).warmup_steps, 10);
}

TEST(PowerLimitCard, WithoutACardNothingChanges) {
  Job job("v100:imagenet");
  PowerLimitOptimizer optimizer(*job.monitor, options_with(std::nullopt));
  EXPECT_EQ(job.run_until_done(optimizer), 352);  // done at the 352nd on_step_begin()
  EXPECT_EQ(optimizer.card_path_taken(), CardPath::kNone);
  EXPECT_EQ(optimizer.card_reason(), "");
  EXPECT_EQ(optimizer.profiling_steps(), 350);
  EXPECT_EQ(optimizer.measurements().size(), 7u);
}

TEST(PowerLimitCard, ACardThatDescribesTheWorkloadMeasuresFewerLimits) {
  const std::vector<uint32_t> limits = power_limit_candidates_mw({100'000, 250'000, 250'000}, 25'000);
  Job plain_job("v100:imagenet");
  PowerLimitOptimizer plain(*plain_job.monitor, options_with(std::nullopt));
  plain_job.run_until_done(plain);

  test::CapturedLog log;
  Job job("v100:imagenet");
  PowerLimitOptimizer optimizer(*job.monitor, options_with(card_of_workload("v100:imagenet", limits)));
  EXPECT_EQ(optimizer.card_path_taken(), CardPath::kSearching);
  job.run_until_done(optimizer);
  EXPECT_EQ(optimizer.card_path_taken(), CardPath::kPredicted) << optimizer.card_reason();
  EXPECT_LT(optimizer.measurements().size(), limits.size());
  EXPECT_LE(optimizer.measurements().size(), 4u);  // the check, and limits within the 2% margin
  EXPECT_EQ(optimizer.chosen_power_limit_mw(), plain.chosen_power_limit_mw());
  EXPECT_LT(optimizer.profiling_steps() * 5, plain.profiling_steps());
  const std::string text = log.text();
  EXPECT_NE(text.find("starting from card.json"), std::string::npos) << text;
  EXPECT_NE(text.find("choosing from the card's prior"), std::string::npos) << text;
  EXPECT_NE(text.find("card path: predicted"), std::string::npos) << text;
}

TEST(PowerLimitCard, ACardForADifferentShapeFallsBackToEveryLimitAndTheSameChoice) {
  for (const Policy& policy : {Policy{ZeusCost{0.5, 0}}, Policy{MaxSlowdown{1.1}}}) {
    Job plain_job("v100:imagenet");
    PowerLimitOptimizer plain(*plain_job.monitor, options_with(std::nullopt, policy));
    plain_job.run_until_done(plain);

    test::CapturedLog log;
    Job job("v100:imagenet");
    PowerLimitOptimizer optimizer(*job.monitor, options_with(misleading_card(), policy));
    job.run_until_done(optimizer);
    EXPECT_EQ(optimizer.card_path_taken(), CardPath::kFallback) << optimizer.card_reason();
    EXPECT_NE(optimizer.card_reason().find("predicted a measured limit"), std::string::npos)
        << optimizer.card_reason();
    EXPECT_NE(log.text().find("does not describe this workload"), std::string::npos) << log.text();
    // Every limit measured, each with the figures of the run without a card, and the same choice.
    ASSERT_EQ(optimizer.measurements().size(), plain.measurements().size());
    for (const auto& measured : plain.measurements()) {
      const auto same = std::find_if(
          optimizer.measurements().begin(), optimizer.measurements().end(),
          [&](const PowerLimitMeasurement& m) { return m.power_limit_mw == measured.power_limit_mw; });
      ASSERT_NE(same, optimizer.measurements().end());
      EXPECT_NEAR(same->time_per_step_s(), measured.time_per_step_s(), 1e-9 * measured.time_per_step_s());
      EXPECT_NEAR(same->energy_per_step_j(), measured.energy_per_step_j(),
                  1e-5 * measured.energy_per_step_j());  // 1 mJ counter steps
    }
    EXPECT_EQ(optimizer.chosen_power_limit_mw(), plain.chosen_power_limit_mw());
    EXPECT_LT(optimizer.profiling_steps(), plain.profiling_steps());  // the card's windows still apply
  }
}

TEST(PowerLimitCard, TheShippedCardKeepsTheChoiceOfTheFullProfile) {
  for (const std::string_view spec : {"v100:imagenet", "a40:squad", "rtx6000:cifar100", "p100:librispeech"}) {
    const std::string model(spec.substr(0, spec.find(':')));
    Job plain_job(spec);
    PowerLimitOptimizer plain(*plain_job.monitor, options_with(std::nullopt));
    plain_job.run_until_done(plain);
    Job job(spec);
    PowerLimitOptimizer optimizer(*job.monitor, options_with(shipped_card(model)));
    job.run_until_done(optimizer);
    EXPECT_NE(optimizer.card_path_taken(), CardPath::kSearching) << spec;
    EXPECT_EQ(optimizer.chosen_power_limit_mw(), plain.chosen_power_limit_mw()) << spec;
    EXPECT_LT(optimizer.profiling_steps(), plain.profiling_steps()) << spec;
  }
}

TEST(PowerLimitCard, AnotherModelsCardIsRefusedNamingBoth) {
  Job job("a40:imagenet");
  try {
    PowerLimitOptimizer optimizer(*job.monitor, options_with(shipped_card("v100")));
    FAIL() << "no error";
  } catch (const Exception& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(error.what(),
                 "card.json is for Tesla V100-PCIE-32GB (simulated) (driver sim), not NVIDIA A40 (simulated) "
                 "(driver sim): "
                 "make a card for this device with 'joule probe'");
  }
  // The same through the file reader the CLI and Python use.
  auto card = read_card_for(shipped_card_path("v100"), *job.gpus[0]);
  ASSERT_FALSE(card);
  EXPECT_NE(card.error().message().find("is for Tesla V100-PCIE-32GB (simulated)"), std::string::npos)
      << card.error().message();
  EXPECT_NE(card.error().message().find("not NVIDIA A40 (simulated)"), std::string::npos)
      << card.error().message();
}

TEST(PowerLimitCard, NewerSchemaAndReadOnlyCardsAreRefused) {
  Job job("v100");
  test::TempDir dir;
  std::string text = *read_text_file(shipped_card_path("v100"));
  const auto at = text.find("\"schema_version\": 1");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 19, "\"schema_version\": 2");
  const std::string newer = dir.write("newer.json", text);
  auto card = read_card_for(newer, *job.gpus[0]);
  ASSERT_FALSE(card);
  EXPECT_EQ(card.error().message(),
            newer + ": card schema version 2 is newer than this joule reads (1): upgrade joule to read it");

  probe::Card read_only = shipped_card("v100");
  read_only.read_only = true;
  read_only.frontiers.clear();
  try {
    PowerLimitOptimizer optimizer(*job.monitor, options_with(read_only));
    FAIL() << "no error";
  } catch (const Exception& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(
        error.what(),
        "card.json: the card has no compute kernel frontier under power_limit (a --read-only card has "
        "no frontiers)");
  }
}

// Rank 0 of 2 whose other rank measures the same figures and holds a card of digest `other_digest` (0: the
// same as this rank's).
class MirrorAggregator final : public RankAggregator {
 public:
  explicit MirrorAggregator(double other_digest = 0) : other_digest_(other_digest) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::pair<double, double> aggregate(double energy_j, double time_s) override {
    ++calls;
    if (calls == 1 && other_digest_ != 0) {  // the card check at construction
      return {energy_j + other_digest_, std::max(time_s, other_digest_)};
    }
    return {2 * energy_j, time_s};
  }
  int calls = 0;

 private:
  double other_digest_;
};

TEST(PowerLimitCard, RanksCheckTheyHaveTheSameCard) {
  Job job("v100:imagenet");
  PowerLimitOptions options = options_with(shipped_card("v100"));
  auto same = std::make_shared<MirrorAggregator>();
  options.aggregator = same;
  {
    PowerLimitOptimizer optimizer(*job.monitor, options);
    EXPECT_EQ(same->calls, 1);  // one collective: the card check
    job.run_until_done(optimizer);
    EXPECT_NE(optimizer.card_path_taken(), CardPath::kSearching);
    // One per window: 0.7 s steps need no extension of the first window (3 steps span 1000 counter updates).
    EXPECT_EQ(same->calls, 1 + static_cast<int>(optimizer.measurements().size()));
  }
  options.aggregator = std::make_shared<MirrorAggregator>(12345);
  try {
    PowerLimitOptimizer optimizer(*job.monitor, options);
    FAIL() << "no error";
  } catch (const Exception& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(
        error.what(),
        "power-limit optimizer: the ranks were given different cards (card.json here): give every rank "
        "the same card");
  }
}

TEST(PowerLimitCard, EpochEndsAndTheProfileStore) {
  test::TempDir dir;
  PowerLimitOptions options = options_with(shipped_card("v100"));
  options.profile_dir = dir.path();
  options.job_key = "imagenet";
  Job plain_job("v100:imagenet");
  PowerLimitOptimizer plain(*plain_job.monitor, options_with(std::nullopt));
  plain_job.run_until_done(plain);
  {
    Job job("v100:imagenet");
    PowerLimitOptimizer optimizer(*job.monitor, options);
    // Epoch ends at steps 7, 36, 65, …: during the first warm-up, and later limits' windows.
    for (int i = 0; i < 1000 && optimizer.state() != PowerLimitState::kDone; ++i) {
      optimizer.on_step_begin();
      job.training->run_iterations(1);
      optimizer.on_step_end();
      if (i % 29 == 6) {
        optimizer.on_epoch_end();
      }
    }
    ASSERT_EQ(optimizer.state(), PowerLimitState::kDone);
    EXPECT_EQ(optimizer.chosen_power_limit_mw(), plain.chosen_power_limit_mw());
  }
  // The stored profile holds windows of profile_steps steps, so a second run chooses the same from it.
  Job job("v100:imagenet");
  PowerLimitOptimizer again(*job.monitor, options);
  EXPECT_TRUE(again.loaded_from_profile());
  EXPECT_EQ(again.card_path_taken(), CardPath::kNone);
  EXPECT_EQ(again.card_reason(), "the stored profile was used");
  EXPECT_EQ(again.chosen_power_limit_mw(), plain.chosen_power_limit_mw());
  for (const auto& measured : again.measurements()) {
    EXPECT_EQ(measured.steps, 40);
  }
}

TEST(PowerLimitCard, GuideChecksTheCardBeforeTrustingIt) {
  auto guide = CardGuide::make(shipped_card("v100"), "card.json");
  ASSERT_TRUE(guide);
  EXPECT_FALSE(guide->next({250'000, 225'000}, ZeusCost{0.5, 250}));  // nothing measured yet
  ASSERT_TRUE(guide->record(250'000, 0.7, 150));
  auto first = guide->next({250'000, 225'000, 200'000}, ZeusCost{0.5, 250});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->kind, CardDecision::Kind::kMeasure);  // one check at least, even if the max looks best
  EXPECT_NE(first->candidate, 0u);
  EXPECT_FALSE(guide->record(225'000, -1, 150));  // a figure the prior refuses
}

}  // namespace
}  // namespace joule::optimize
