// SPDX-License-Identifier: Apache-2.0
// The batch-size optimizer against Zeus's server semantics: spec validation, arm fits, a full job lifecycle
// driven by a synthetic oracle (with a JSON round trip after every call), and seeded decision sequences
// checked against a numpy implementation of Zeus's server logic.
#include "joule/optimize/batch_size.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "optimize/batch_size_internal.hpp"
#include "test_util.hpp"

namespace joule::optimize::batch_size {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using joule::test::kInf;
constexpr int64_t kStartNs = 1'700'000'000'000'000'000;

JobSpec make_spec() {
  JobSpec spec;
  spec.job_id = "job-1";
  spec.job_id_prefix = "job";
  spec.batch_sizes = {8, 16, 32, 64, 128};
  spec.default_batch_size = 32;
  spec.max_epochs = 10;
  spec.mab_num_explorations = 3;
  return spec;
}

GpuConfig make_gpu() {
  return GpuConfig{300.0, 1, "NVIDIA A40"};
}

// ---- Validation
// --------------------------------------------------------------------------------------------

TEST(BatchSizeSpec, DefaultsAreZeus) {
  const JobSpec spec;
  EXPECT_FALSE(spec.job_id);
  EXPECT_EQ(spec.eta_knob, 0.5);
  EXPECT_EQ(spec.beta_knob, 2.0);
  EXPECT_EQ(spec.target_metric, 0.5);
  EXPECT_TRUE(spec.higher_is_better_metric);
  EXPECT_EQ(spec.max_epochs, 100);
  EXPECT_EQ(spec.num_pruning_rounds, 2);
  EXPECT_EQ(spec.window_size, 0);
  EXPECT_EQ(spec.mab_prior_mean, 0.0);
  EXPECT_EQ(spec.mab_prior_precision, 0.0);
  EXPECT_EQ(spec.mab_num_explorations, 2);
  EXPECT_FALSE(spec.mab_seed);
  EXPECT_TRUE(validate(make_spec()));
  EXPECT_TRUE(validate(make_gpu()));
}

TEST(BatchSizeSpec, EachRuleHasItsMessage) {
  const auto check = [](auto mutate, const std::string& message) {
    JobSpec spec = make_spec();
    mutate(spec);
    JOULE_EXPECT_ERROR(validate(spec), ErrorCode::kInvalidArgument, message);
  };
  check([](JobSpec& s) { s.batch_sizes.clear(); }, "batch_sizes: Batch Sizes = [] is empty");
  check(
      [](JobSpec& s) {
        s.batch_sizes = {0, 32};
      },
      "batch_sizes: batch size 0 is not positive: batch sizes must be > 0");
  check(
      [](JobSpec& s) {
        s.batch_sizes = {32, 16, 32};
      },
      "batch_sizes: batch size 32 is listed twice: batch sizes must be distinct");
  check([](JobSpec& s) { s.default_batch_size = 0; },
        "default_batch_size: ensure this value is greater than 0");
  check([](JobSpec& s) { s.eta_knob = 1.5; }, "eta_knob: eta_knob should be in range [0,1]");
  check([](JobSpec& s) { s.eta_knob = -0.1; }, "eta_knob: eta_knob should be in range [0,1]");
  check([](JobSpec& s) { s.eta_knob = std::nan(""); }, "eta_knob: eta_knob should be in range [0,1]");
  check([](JobSpec& s) { s.beta_knob = -1.0; },
        "beta_knob: Invalid beta_knob(-1.0). To disable early stop, set beta_knob = None to disable or "
        "positive "
        "value.");
  check(
      [](JobSpec& s) { s.beta_knob = 0.0; },
      "beta_knob: Invalid beta_knob(0.0). To disable early stop, set beta_knob = None to disable or positive "
      "value.");
  check([](JobSpec& s) { s.target_metric = kInf; }, "target_metric: must be a finite number");
  check([](JobSpec& s) { s.max_epochs = 0; }, "max_epochs: ensure this value is greater than 0");
  check([](JobSpec& s) { s.num_pruning_rounds = -1; },
        "num_pruning_rounds: ensure this value is greater than or equal to 0");
  check([](JobSpec& s) { s.num_pruning_rounds = 0; },
        "num_pruning_rounds: must be at least 1: with 0 rounds no batch size is ever explored, so no MAB arm "
        "can "
        "be fitted (Zeus's server accepts 0 and then fails on the first prediction)");
  check([](JobSpec& s) { s.window_size = -1; },
        "window_size: ensure this value is greater than or equal to 0");
  check([](JobSpec& s) { s.mab_prior_mean = std::nan(""); }, "mab_prior_mean: must be a finite number");
  check([](JobSpec& s) { s.mab_prior_precision = -1; },
        "mab_prior_precision: ensure this value is greater than or equal to 0");
  check([](JobSpec& s) { s.mab_num_explorations = -1; },
        "mab_num_explorations: ensure this value is greater than or equal to 0");
  check([](JobSpec& s) { s.default_batch_size = 24; },
        "default_batch_size: Default BS(24) not in batch_sizes([8, 16, 32, 64, 128]).");
  check([](JobSpec& s) { s.job_id = "other-1"; }, "job_id: Job_id(other-1) does not start with prefix(job).");

  // No beta (early stopping off), no job id, and unsorted batch sizes are fine.
  JobSpec spec = make_spec();
  spec.beta_knob.reset();
  spec.job_id.reset();
  spec.batch_sizes = {128, 8, 32};
  EXPECT_TRUE(validate(spec));

  const auto check_gpu = [](auto mutate, const std::string& message) {
    GpuConfig gpu = make_gpu();
    mutate(gpu);
    JOULE_EXPECT_ERROR(validate(gpu), ErrorCode::kInvalidArgument, message);
  };
  check_gpu([](GpuConfig& g) { g.max_power = 0; }, "max_power: ensure this value is greater than 0");
  check_gpu([](GpuConfig& g) { g.number_of_gpus = 0; },
            "number_of_gpus: ensure this value is greater than 0");
  check_gpu([](GpuConfig& g) { g.gpu_model.clear(); }, "gpu_model: Invalid gpu_model(). Shouldn't be empty.");
}

TEST(BatchSizeSpec, CreateSortsGeneratesIdAndValidates) {
  JobSpec spec = make_spec();
  spec.job_id.reset();
  spec.batch_sizes = {64, 8, 128, 32, 16};
  const BatchSizeJob job = value_or_throw(BatchSizeJob::create(spec, make_gpu(), 42));
  EXPECT_THAT(job.spec().batch_sizes, ElementsAre(8, 16, 32, 64, 128));
  EXPECT_EQ(job.job_id(), generate_job_id("job", 42));
  EXPECT_THAT(job.job_id(), ::testing::MatchesRegex("job-[0-9a-f]{8}"));
  EXPECT_NE(generate_job_id("job", 42), generate_job_id("job", 43));
  EXPECT_EQ(job.stage(), Stage::kPruning);
  EXPECT_FALSE(job.min_cost());
  EXPECT_EQ(job.min_cost_batch_size(), 32);
  EXPECT_EQ(job.exp_default_batch_size(), 32);
  EXPECT_TRUE(job.trials().empty());
  EXPECT_TRUE(job.arms().empty());

  spec.eta_knob = 2;
  JOULE_EXPECT_ERROR(BatchSizeJob::create(spec, make_gpu(), 1), ErrorCode::kInvalidArgument,
                     "eta_knob: eta_knob should be in range [0,1]");
  GpuConfig gpu = make_gpu();
  gpu.number_of_gpus = -2;
  JOULE_EXPECT_ERROR(BatchSizeJob::create(make_spec(), gpu, 1), ErrorCode::kInvalidArgument,
                     "number_of_gpus: ensure this value is greater than 0");
  // The random_device overload works too.
  EXPECT_TRUE(BatchSizeJob::create(make_spec(), make_gpu()));
}

TEST(BatchSizeSpec, ReRegistrationNeedsTheSameConfig) {
  const BatchSizeJob job = value_or_throw(BatchSizeJob::create(make_spec(), make_gpu(), 1));
  JobSpec same = make_spec();
  same.batch_sizes = {128, 64, 32, 16, 8};  // compared sorted
  EXPECT_TRUE(job.check_same_config(same, make_gpu()));
  JobSpec other = make_spec();
  other.window_size = 3;
  JOULE_EXPECT_ERROR(
      job.check_same_config(other, make_gpu()), ErrorCode::kState,
      "JobSpec doesn't match with existing jobSpec. Use a new job_id for different configuration");
  GpuConfig gpu = make_gpu();
  gpu.max_power = 250;
  EXPECT_FALSE(job.check_same_config(make_spec(), gpu));
}

// ---- Numbers
// -----------------------------------------------------------------------------------------------

TEST(BatchSizeNumbers, PythonFloatRepr) {
  using detail::python_float_repr;
  EXPECT_EQ(python_float_repr(2.0), "2.0");
  EXPECT_EQ(python_float_repr(-1.0), "-1.0");
  EXPECT_EQ(python_float_repr(0.0), "0.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(27270.000000000004), "27270.000000000004");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(0.00001), "1e-05");
  EXPECT_EQ(python_float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float_repr(1.2345e20), "1.2345e+20");
  EXPECT_EQ(python_float_repr(kInf), "inf");
  EXPECT_EQ(python_float_repr(-kInf), "-inf");
  EXPECT_EQ(python_float_repr(std::nan("")), "nan");
  EXPECT_EQ(detail::python_int_list({8, 16}), "[8, 16]");
  EXPECT_EQ(detail::python_int_list({}), "[]");
  EXPECT_EQ(detail::python_str_repr("job-1"), "'job-1'");
  EXPECT_EQ(detail::python_str_repr("it's"), "\"it's\"");
}

TEST(BatchSizeNumbers, TrialIdDescribeIsZeusRepr) {
  EXPECT_EQ((TrialId{"job-1", 32, 3}.describe()), "job_id='job-1' batch_size=32 trial_number=3");
  EXPECT_EQ((TrialId{"it's", 8, 1}.describe()), "job_id=\"it's\" batch_size=8 trial_number=1");
}

TEST(BatchSizeNumbers, ArmFitsMatchHandComputedPosteriors) {
  // Two rewards: mean −15, variance 25 ⇒ ρ = 0.04, τ = 0 + 2·0.04, μ = 0.04·(−30)/0.08.
  ArmState arm = value_or_throw(fit_arm(16, std::vector<double>{-10, -20}, 0, 0));
  EXPECT_EQ(arm.batch_size, 16);
  EXPECT_EQ(arm.num_observations, 2);
  EXPECT_DOUBLE_EQ(arm.reward_precision, 0.04);
  EXPECT_DOUBLE_EQ(arm.param_precision, 0.08);
  EXPECT_DOUBLE_EQ(arm.param_mean, -15);
  // With a prior N(−5, 1/0.02): τ = 0.02 + 0.08 = 0.1, μ = (0.02·(−5) + 0.04·(−30))/0.1 = −13.
  arm = value_or_throw(fit_arm(16, std::vector<double>{-10, -20}, -5, 0.02));
  EXPECT_DOUBLE_EQ(arm.param_precision, 0.1);
  EXPECT_DOUBLE_EQ(arm.param_mean, -13);
  // Three rewards −1, −2, −3: variance 2/3 ⇒ ρ = 1.5, τ = 4.5, μ = 1.5·(−6)/4.5 = −2.
  arm = value_or_throw(fit_arm(32, std::vector<double>{-1, -2, -3}, 0, 0));
  EXPECT_DOUBLE_EQ(arm.reward_precision, 1.5);
  EXPECT_DOUBLE_EQ(arm.param_precision, 4.5);
  EXPECT_DOUBLE_EQ(arm.param_mean, -2);
  // One reward, or equal rewards: zero variance ⇒ infinite precisions, the mean is the reward, the prior
  // is ignored.
  arm = value_or_throw(fit_arm(64, std::vector<double>{-7}, 100, 5));
  EXPECT_EQ(arm.reward_precision, kInf);
  EXPECT_EQ(arm.param_precision, kInf);
  EXPECT_EQ(arm.param_mean, -7);
  arm = value_or_throw(fit_arm(64, std::vector<double>{-3, -3}, 0, 0));
  EXPECT_EQ(arm.param_precision, kInf);
  EXPECT_EQ(arm.param_mean, -3);
  EXPECT_EQ(arm.num_observations, 2);
  JOULE_EXPECT_ERROR(fit_arm(8, std::vector<double>{}, 0, 0), ErrorCode::kInvalidArgument,
                     "No rewards to fit the arm of batch size 8.");
}

TEST(BatchSizeNumbers, ZeusCost) {
  EXPECT_EQ(zeus_cost(1000, 10, 0.5, 300), 0.5 * 1000 + 0.5 * 300 * 10);
  EXPECT_EQ(zeus_cost(1000, 10, 1.0, 300), 1000);
  EXPECT_EQ(zeus_cost(1000, 10, 0.0, 300), 3000);
}

// ---- The oracle and the driver
// -------------------------------------------------------------------------------

// A training run of one batch size: its time per epoch, power, and the epoch at which it reaches the target
// (never if unset). Time per epoch is scaled by 1 + 0.01·(trial number mod 5), so repeated runs differ.
struct Workload {
  double time_per_epoch_s = 0;
  double power_w = 0;
  std::optional<int64_t> epochs_to_converge;
};

std::map<int64_t, Workload> make_oracle(bool close_arms = false) {
  // cost per epoch = 0.5·E + 0.5·300·T = 225·time per epoch. 8 never converges (stops at max_epochs = 10);
  // 128 is so slow that it crosses β·min_cost before converging.
  std::map<int64_t, Workload> oracle{
      {8, {9.0, 150.0, std::nullopt}}, {16, {10.0, 150.0, 5}},   {32, {12.0, 150.0, 6}},
      {64, {15.0, 150.0, 6}},          {128, {40.0, 150.0, 10}},
  };
  if (close_arms) {
    oracle[32] = {10.0, 150.0, 5};
  }
  return oracle;
}

double jitter(int64_t trial_number) {
  return 1.0 + 0.01 * static_cast<double>(trial_number % 5);
}

// Drives a job like Zeus's client does, optionally replacing the job by its JSON round trip after every call
// (serialise to text, parse, restore: the restored job must equal the original and continue identically).
class Driver {
 public:
  Driver(BatchSizeJob job, std::map<int64_t, Workload> oracle, bool round_trip)
      : job_(std::move(job)), oracle_(std::move(oracle)), round_trip_(round_trip) {}

  BatchSizeJob& job() { return *job_; }
  int64_t now() const { return now_ns_; }

  TrialId next() {
    now_ns_ += 1'000'000'000;
    TrialId id = value_or_throw(job_->next_trial(now_ns_));
    after_call();
    const Trial& trial = job_->trials().back();
    decisions_.push_back(std::string(trial.type == TrialType::kExploration  ? "E"
                                     : trial.type == TrialType::kConcurrent ? "C"
                                                                            : "M") +
                         std::to_string(trial.batch_size));
    return id;
  }

  TrainingResult result_after(const TrialId& id, int64_t epoch) const {
    const Workload& w = oracle_.at(id.batch_size);
    const double time_s = w.time_per_epoch_s * jitter(id.trial_number) * static_cast<double>(epoch);
    const bool reached = w.epochs_to_converge && epoch >= *w.epochs_to_converge;
    return TrainingResult{id.job_id,           id.batch_size, id.trial_number, time_s, time_s * w.power_w,
                          reached ? 0.9 : 0.1, epoch};
  }

  // Reports epoch after epoch until the optimizer says stop. @return the last response and its epoch.
  std::pair<ReportResponse, int64_t> train(const TrialId& id) {
    for (int64_t epoch = 1;; ++epoch) {
      now_ns_ += 1'000'000'000;
      ReportResponse response = value_or_throw(job_->report(result_after(id, epoch), now_ns_));
      after_call();
      if (response.stop_train) {
        return {response, epoch};
      }
      if (epoch > 1000) {
        throw std::runtime_error("training never stopped");
      }
    }
  }

  void end(const TrialId& id) {
    now_ns_ += 1'000'000'000;
    value_or_throw(job_->end_trial(id, now_ns_));
    after_call();
  }

  const std::vector<std::string>& decisions() const { return decisions_; }

 private:
  void after_call() {
    if (!round_trip_) {
      return;
    }
    const std::string text = job_->to_json().dump();
    BatchSizeJob restored = value_or_throw(BatchSizeJob::from_json(nlohmann::json::parse(text)));
    EXPECT_TRUE(restored == *job_);
    EXPECT_EQ(restored.to_json().dump(), text);
    // The state without its history round-trips too, and with the trials makes the same job again.
    const std::string state_text = job_->state().to_json().dump();
    JobState state = value_or_throw(JobState::from_json(nlohmann::json::parse(state_text)));
    EXPECT_TRUE(state == job_->state());
    EXPECT_EQ(state.to_json().dump(), state_text);
    EXPECT_TRUE(value_or_throw(BatchSizeJob::assemble(state, job_->trials())) == *job_);
    job_ = std::move(restored);
  }

  std::optional<BatchSizeJob> job_;
  std::map<int64_t, Workload> oracle_;
  bool round_trip_;
  int64_t now_ns_ = kStartNs;
  std::vector<std::string> decisions_;
};

// Runs `count` trials one after the other (no concurrency), each trained to its end.
std::vector<std::string> run_sequential(Driver& driver, int count) {
  for (int i = 0; i < count; ++i) {
    driver.train(driver.next());
  }
  return driver.decisions();
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char c : text) {
    if (c == ' ') {
      words.push_back(word);
      word.clear();
    } else {
      word.push_back(c);
    }
  }
  words.push_back(word);
  return words;
}

// ---- Lifecycle -------------------------------------------------------------------------------------------

class BatchSizeLifecycle : public ::testing::TestWithParam<bool> {};

TEST_P(BatchSizeLifecycle, PruningWalkStopsAndSwitchesToMab) {
  JobSpec spec = make_spec();
  spec.mab_seed = 7;
  Driver driver(value_or_throw(BatchSizeJob::create(spec, make_gpu(), 0)), make_oracle(), GetParam());
  const double per_epoch = 225.0;  // cost of one epoch per second of epoch time

  // Round 1 from the default 32: DOWN 32, 16, 8 (8 does not converge: DOWN stops), then UP 64, 128 (128
  // crosses the cost bound).
  TrialId id = driver.next();
  EXPECT_EQ(id, (TrialId{"job-1", 32, 1}));
  EXPECT_EQ(driver.job().trials()[0].start_unix_ns, driver.now());
  auto [response, epochs] = driver.train(id);
  EXPECT_EQ(response, (ReportResponse{true, true, "Train succeeded"}));
  EXPECT_EQ(epochs, 6);
  const TrainingResult last = driver.result_after(id, 6);
  EXPECT_EQ(driver.job().min_cost(), driver.job().cost(last.energy_j, last.time_s));
  EXPECT_EQ(driver.job().min_cost_batch_size(), 32);

  id = driver.next();
  EXPECT_EQ(id.batch_size, 16);
  std::tie(response, epochs) = driver.train(id);
  EXPECT_TRUE(response.converged);
  EXPECT_EQ(driver.job().min_cost_batch_size(), 16);
  EXPECT_NEAR(*driver.job().min_cost(), per_epoch * 10.2 * 5, 1e-6);

  id = driver.next();
  EXPECT_EQ(id.batch_size, 8);
  std::tie(response, epochs) = driver.train(id);
  EXPECT_EQ(response, (ReportResponse{true, false, "Train failed to converge within max_epoch(10)"}));
  EXPECT_EQ(epochs, 10);
  const Trial& failed_to_converge = driver.job().trials()[2];
  EXPECT_EQ(failed_to_converge.status, TrialStatus::kSucceeded);  // Zeus: Succeeded even when not converged
  EXPECT_EQ(failed_to_converge.converged, false);
  EXPECT_EQ(failed_to_converge.end_unix_ns, driver.now());

  id = driver.next();
  EXPECT_EQ(id.batch_size, 64);
  EXPECT_TRUE(driver.train(id).first.converged);

  id = driver.next();
  EXPECT_EQ(id.batch_size, 128);
  std::tie(response, epochs) = driver.train(id);
  EXPECT_TRUE(response.stop_train);
  EXPECT_FALSE(response.converged);
  // The bound is checked after each epoch: epoch 3 (27000) is the first above 2·11475 and is paid for.
  EXPECT_EQ(epochs, 3);
  EXPECT_EQ(response.message,
            "Batch Size(128) exceeded the cost upper bound: current cost(27000.0) > "
            "beta_knob(2.0)*min_cost(11475.0)");
  EXPECT_EQ(driver.job().trials()[4].time_s, 120.0);

  // Round 2 from the cheapest converged batch size, 16, over the survivors 16, 32, 64.
  EXPECT_EQ(driver.next().batch_size, 16);
  EXPECT_EQ(driver.job().exp_default_batch_size(), 16);
  driver.train(TrialId{"job-1", 16, 6});
  EXPECT_EQ(driver.next().batch_size, 32);
  driver.train(TrialId{"job-1", 32, 7});
  EXPECT_EQ(driver.next().batch_size, 64);
  driver.train(TrialId{"job-1", 64, 8});
  EXPECT_EQ(driver.job().stage(), Stage::kPruning);

  // The next call builds the MAB from the survivors' explorations.
  id = driver.next();
  EXPECT_EQ(driver.job().stage(), Stage::kMab);
  EXPECT_EQ(driver.job().trials().back().type, TrialType::kMab);
  ASSERT_EQ(driver.job().arms().size(), 3U);
  const auto reward = [&](size_t index) {
    const Trial& t = driver.job().trials()[index];
    return -driver.job().cost(*t.energy_j, *t.time_s);
  };
  EXPECT_EQ(driver.job().arms()[0], value_or_throw(fit_arm(16, std::vector{reward(1), reward(5)}, 0, 0)));
  EXPECT_EQ(driver.job().arms()[1], value_or_throw(fit_arm(32, std::vector{reward(0), reward(6)}, 0, 0)));
  EXPECT_EQ(driver.job().arms()[2], value_or_throw(fit_arm(64, std::vector{reward(3), reward(7)}, 0, 0)));
  driver.train(id);

  run_sequential(driver, 21);
  // Exploration: every arm pulled once more (mab_num_explorations = 3) in a random order, then exploitation
  // settles on the cheapest batch size. The whole sequence equals numpy's run of Zeus's logic (see below).
  EXPECT_EQ(
      driver.decisions(),
      split("E32 E16 E8 E64 E128 E16 E32 E64 M16 M32 M64 M16 M16 M16 M16 M16 M16 M16 M16 M16 M16 M16 M16 "
            "M16 M16 M16 M16 M16 M16 M16"));
  EXPECT_EQ(driver.job().arms()[0].num_observations, 22);
}

INSTANTIATE_TEST_SUITE_P(RoundTrip, BatchSizeLifecycle, ::testing::Values(false, true),
                         [](const auto& param_info) {
                           return param_info.param ? "JsonAfterEveryCall" : "InMemory";
                         });

TEST(BatchSizeJobTest, ConcurrentTrialsWhileAnExplorationRuns) {
  Driver driver(value_or_throw(BatchSizeJob::create(make_spec(), make_gpu(), 3)), make_oracle(), true);
  const TrialId first = driver.next();
  EXPECT_EQ(first.batch_size, 32);
  // Exploration 32 is Dispatched: new workers get Concurrent trials with the best batch size so far, which
  // before any result is the default.
  const TrialId concurrent = driver.next();
  EXPECT_EQ(concurrent, (TrialId{"job-1", 32, 2}));
  EXPECT_EQ(driver.job().trials()[1].type, TrialType::kConcurrent);
  EXPECT_EQ(driver.next().trial_number, 3);
  EXPECT_EQ(driver.job().trials()[2].type, TrialType::kConcurrent);

  // A Concurrent result counts for min_cost but not for the walk, which still waits for exploration 1.
  driver.train(concurrent);
  EXPECT_TRUE(driver.job().min_cost());
  EXPECT_EQ(driver.next().batch_size, 32);
  EXPECT_EQ(driver.job().trials().back().type, TrialType::kConcurrent);

  driver.train(first);
  const TrialId second = driver.next();
  EXPECT_EQ(second.batch_size, 16);
  EXPECT_EQ(driver.job().trials().back().type, TrialType::kExploration);
  EXPECT_EQ(driver.next().batch_size, driver.job().min_cost_batch_size());
  EXPECT_EQ(driver.job().trials().back().type, TrialType::kConcurrent);
  EXPECT_EQ(driver.decisions(), split("E32 C32 C32 C32 E16 C32"));
}

TEST(BatchSizeJobTest, FailedTrialsAreRetried) {
  Driver driver(value_or_throw(BatchSizeJob::create(make_spec(), make_gpu(), 3)), make_oracle(), true);
  const TrialId first = driver.next();
  driver.end(first);  // the client crashed
  EXPECT_EQ(driver.job().trials()[0].status, TrialStatus::kFailed);
  EXPECT_EQ(driver.job().trials()[0].end_unix_ns, driver.now());
  EXPECT_FALSE(driver.job().trials()[0].converged);
  const TrialId retry = driver.next();
  EXPECT_EQ(retry, (TrialId{"job-1", 32, 2}));
  EXPECT_EQ(driver.job().trials()[1].type, TrialType::kExploration);

  // A mid-training failure: the partial epochs leave no result.
  EXPECT_FALSE(driver.job().report(driver.result_after(retry, 1), driver.now())->stop_train);
  driver.end(retry);
  EXPECT_FALSE(driver.job().trials()[1].time_s);
  EXPECT_FALSE(driver.job().min_cost());
  EXPECT_EQ(driver.next().batch_size, 32);

  // Ending a trial that already has its result changes nothing; a report on a Failed trial is refused.
  driver.train(TrialId{"job-1", 32, 3});
  const std::string before = driver.job().to_json().dump();
  driver.end(TrialId{"job-1", 32, 3});
  EXPECT_EQ(driver.job().to_json().dump(), before);
  JOULE_EXPECT_ERROR(
      driver.job().report(driver.result_after(first, 1), driver.now()), ErrorCode::kState,
      "Trial(1) already ended as Failed (its client ended it without a result), so it takes no "
      "more reports.");
}

TEST(BatchSizeJobTest, UnknownTrialsAndBadReports) {
  BatchSizeJob job = value_or_throw(BatchSizeJob::create(make_spec(), make_gpu(), 3));
  JOULE_EXPECT_ERROR(job.end_trial(TrialId{"job-1", 32, 1}, kStartNs), ErrorCode::kNotFound,
                     "Could not find the trial: job_id='job-1' batch_size=32 trial_number=1");
  const TrialId id = value_or_throw(job.next_trial(kStartNs));
  JOULE_EXPECT_ERROR(job.end_trial(TrialId{"job-1", 16, 1}, kStartNs), ErrorCode::kNotFound,
                     "Could not find the trial: job_id='job-1' batch_size=16 trial_number=1");
  JOULE_EXPECT_ERROR(job.end_trial(TrialId{"job-2", 32, 1}, kStartNs), ErrorCode::kNotFound,
                     "Could not find the trial: job_id='job-2' batch_size=32 trial_number=1");
  JOULE_EXPECT_ERROR(
      job.report(TrainingResult{"job-1", 32, 0, 1.5, 2, 0.1, 1}, kStartNs), ErrorCode::kNotFound,
      "Unknown trial job_id='job-1' batch_size=32 trial_number=0 time=1.5 energy=2.0 metric=0.1 "
      "current_epoch=1");
  JOULE_EXPECT_ERROR(job.report(TrainingResult{"job-1", 32, 1, -1, 2, 0.1, 1}, kStartNs),
                     ErrorCode::kInvalidArgument,
                     "time: -1.0 s is not a valid cumulative training time (finite, >= 0)");
  JOULE_EXPECT_ERROR(job.report(TrainingResult{"job-1", 32, 1, 1, kInf, 0.1, 1}, kStartNs),
                     ErrorCode::kInvalidArgument,
                     "energy: inf J is not a valid cumulative training energy (finite, >= 0)");
  JOULE_EXPECT_ERROR(job.report(TrainingResult{"job-1", 32, 1, 1, 1, std::nan(""), 1}, kStartNs),
                     ErrorCode::kInvalidArgument, "metric: must be a finite number, got nan");
  EXPECT_EQ(job.trials()[0].status, TrialStatus::kDispatched);

  // Keep training, then stop; duplicate and late reports get the stored outcome.
  EXPECT_EQ(value_or_throw(job.report(TrainingResult{"job-1", 32, 1, 10, 1000, 0.1, 1}, kStartNs + 5)),
            (ReportResponse{false, false, "Stop condition not met, keep training"}));
  EXPECT_EQ(job.trials()[0].status, TrialStatus::kDispatched);
  EXPECT_EQ(value_or_throw(job.report(TrainingResult{"job-1", 32, 1, 20, 2000, 0.7, 2}, kStartNs + 9)),
            (ReportResponse{true, true, "Train succeeded"}));
  EXPECT_EQ(job.trials()[0].time_s, 20);
  EXPECT_EQ(job.trials()[0].energy_j, 2000);
  EXPECT_EQ(job.trials()[0].end_unix_ns, kStartNs + 9);
  EXPECT_EQ(job.min_cost(), 0.5 * 2000 + 0.5 * 300 * 20);
  EXPECT_EQ(value_or_throw(job.report(TrainingResult{"job-1", 32, 1, 99, 9999, 0.0, 3}, kStartNs + 10)),
            (ReportResponse{true, true, "Result for this trial(1) is already reported."}));
  EXPECT_EQ(job.trials()[0].time_s, 20);
  (void)id;
}

TEST(BatchSizeJobTest, LowerIsBetterMetricAndNoEarlyStop) {
  JobSpec spec = make_spec();
  spec.higher_is_better_metric = false;
  spec.target_metric = 0.2;
  spec.beta_knob.reset();
  BatchSizeJob job = value_or_throw(BatchSizeJob::create(spec, make_gpu(), 3));
  value_or_throw(job.next_trial(kStartNs));
  EXPECT_FALSE(value_or_throw(job.report(TrainingResult{"job-1", 32, 1, 1, 1, 0.5, 1}, kStartNs)).stop_train);
  EXPECT_TRUE(value_or_throw(job.report(TrainingResult{"job-1", 32, 1, 2, 2, 0.2, 2}, kStartNs)).converged);
  // Without beta_knob a run is never stopped for its cost, however expensive.
  value_or_throw(job.next_trial(kStartNs));
  EXPECT_FALSE(
      value_or_throw(job.report(TrainingResult{"job-1", 16, 2, 1e6, 1e9, 0.9, 9}, kStartNs)).stop_train);
  EXPECT_EQ(value_or_throw(job.report(TrainingResult{"job-1", 16, 2, 2e6, 2e9, 0.9, 10}, kStartNs)),
            (ReportResponse{true, false, "Train failed to converge within max_epoch(10)"}));
}

TEST(BatchSizeJobTest, UnconvergedTrialsCountForMinCostAsInZeus) {
  BatchSizeJob job = value_or_throw(BatchSizeJob::create(make_spec(), make_gpu(), 3));
  value_or_throw(job.next_trial(kStartNs));
  value_or_throw(job.report(TrainingResult{"job-1", 32, 1, 100, 10000, 0.9, 5}, kStartNs));
  value_or_throw(job.next_trial(kStartNs));  // 16
  // 16 stops at max_epochs without converging, yet more cheaply than 32's converged run: it becomes min_cost.
  const auto response =
      value_or_throw(job.report(TrainingResult{"job-1", 16, 2, 10, 1000, 0.1, 10}, kStartNs));
  EXPECT_FALSE(response.converged);
  EXPECT_EQ(job.min_cost(), 0.5 * 1000 + 0.5 * 300 * 10);
  EXPECT_EQ(job.min_cost_batch_size(), 16);
}

TEST(BatchSizeJobTest, NoConvergedBatchSizeIsAnError) {
  Driver driver(value_or_throw(BatchSizeJob::create(make_spec(), make_gpu(), 3)),
                std::map<int64_t, Workload>{{8, {1, 100, std::nullopt}},
                                            {16, {1, 100, std::nullopt}},
                                            {32, {1, 100, std::nullopt}},
                                            {64, {1, 100, std::nullopt}},
                                            {128, {1, 100, std::nullopt}}},
                false);
  driver.train(driver.next());  // 32 fails: DOWN stops at once
  driver.train(driver.next());  // 64 fails: UP stops
  EXPECT_EQ(driver.decisions(), split("E32 E64"));
  const std::string before = driver.job().to_json().dump();
  JOULE_EXPECT_ERROR(
      driver.job().next_trial(kStartNs), ErrorCode::kState,
      "No converged batch sizes has observed: no batch size converged in pruning round 1 of 2. "
      "Reconfigure batch_sizes and re-launch the job.");
  EXPECT_EQ(driver.job().to_json().dump(), before);  // a failed call changes nothing
}

TEST(BatchSizeJobTest, OneRoundAndSingleObservationArms) {
  JobSpec spec = make_spec();
  spec.num_pruning_rounds = 1;
  spec.mab_num_explorations = 0;
  spec.mab_seed = 1;
  Driver driver(value_or_throw(BatchSizeJob::create(spec, make_gpu(), 3)), make_oracle(), true);
  run_sequential(driver, 8);
  // One observation per arm: infinite precision, so sampling returns each arm's reward and the cheapest
  // batch size (16) wins every time.
  ASSERT_EQ(driver.job().arms().size(), 3U);
  EXPECT_EQ(driver.decisions(), split("E32 E16 E8 E64 E128 M16 M16 M16"));
  const nlohmann::json state = driver.job().to_json();
  EXPECT_EQ(state["arms"][1]["param_precision"], "inf");  // 32 still has one observation
  EXPECT_EQ(state["arms"][1]["reward_precision"], "inf");
}

// ---- MAB stage and numpy agreement
// --------------------------------------------------------------------------

// Expected outputs come from a numpy 1.24 implementation of Zeus's server logic (spec B.3) driven by the same
// oracle: default_rng(seed); rng.choice(arms, len(arms), replace=False) for the exploration order;
// rng.normal(mean, sqrt(1/precision)) per arm; np.var / np.sum for the fits.
struct SeededCase {
  uint64_t seed;
  int64_t window_size;
  bool close_arms;
  std::string decisions;
  std::vector<ArmState> arms;
  double min_cost;
  int64_t min_cost_batch_size;
  std::string rng_state;
  std::string rng_inc;
  uint32_t uinteger;
};

void PrintTo(const SeededCase& c, std::ostream* out) {
  *out << "seed " << c.seed << ", window " << c.window_size << (c.close_arms ? ", close arms" : "");
}

class BatchSizeSeeded : public ::testing::TestWithParam<SeededCase> {};

TEST_P(BatchSizeSeeded, DecisionsEqualNumpys) {
  const SeededCase& c = GetParam();
  JobSpec spec = make_spec();
  spec.mab_seed = c.seed;
  spec.window_size = c.window_size;
  for (const bool round_trip : {false, true}) {
    Driver driver(value_or_throw(BatchSizeJob::create(spec, make_gpu(), 99)), make_oracle(c.close_arms),
                  round_trip);
    EXPECT_EQ(run_sequential(driver, 30), split(c.decisions));
    EXPECT_EQ(driver.job().arms(), c.arms);
    EXPECT_EQ(driver.job().min_cost(), c.min_cost);
    EXPECT_EQ(driver.job().min_cost_batch_size(), c.min_cost_batch_size);
    const nlohmann::json state = driver.job().to_json();
    EXPECT_EQ(state["rng"]["state"]["state"], c.rng_state);
    EXPECT_EQ(state["rng"]["state"]["inc"], c.rng_inc);
    EXPECT_EQ(state["rng"]["uinteger"], c.uinteger);
    EXPECT_EQ(state["rng"]["has_uint32"], 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Numpy, BatchSizeSeeded,
    ::testing::Values(
        SeededCase{
            7,
            0,
            false,
            "E32 E16 E8 E64 E128 E16 E32 E64 M16 M32 M64 M16 M16 M16 M16 M16 M16 M16 M16 M16 M16 M16 M16 M16 "
            "M16 M16 M16 M16 M16 M16",
            {{16, -11485.227272727272, 0.0008727421750934892, 3.9670098867885875e-05, 22},
             {32, -16362.0, 0.00017146776406035664, 5.7155921353452216e-05, 3},
             {64, -20790.0, 4.703115814226877e-05, 1.567705271408959e-05, 3}},
            11250.0,
            16,
            "161444368899207216342585987960403325885",
            "261136684632268670825940853076396136793",
            1598523573},
        // Close arms: Thompson sampling alternates between 16 and 32.
        SeededCase{
            7,
            0,
            true,
            "E32 E16 E8 E64 E128 E32 E16 E64 M16 M32 M64 M32 M32 M32 M32 M32 M32 M32 M32 M32 M32 M32 M32 M16 "
            "M32 M32 M32 M32 M32 M32",
            {{16, -11587.5, 0.0003160493827160494, 7.901234567901235e-05, 4},
             {32, -11448.214285714286, 0.0008752791068580542, 4.167995746943115e-05, 21},
             {64, -20790.0, 4.703115814226877e-05, 1.567705271408959e-05, 3}},
            11250.0,
            32,
            "161444368899207216342585987960403325885",
            "261136684632268670825940853076396136793",
            1598523573},
        SeededCase{
            11,
            0,
            true,
            "E32 E16 E8 E64 E128 E32 E16 E64 M32 M16 M64 M16 M16 M32 M16 M16 M16 M16 M16 M16 M16 M32 M16 M16 "
            "M32 M16 M32 M32 M32 M16",
            {{16, -11446.875, 0.0006974882928905918, 4.3593018305661987e-05, 16},
             {32, -11512.5, 0.00035555555555555557, 3.950617283950617e-05, 9},
             {64, -20790.0, 4.703115814226877e-05, 1.567705271408959e-05, 3}},
            11250.0,
            16,
            "277759454445587821578537618463892079444",
            "7937318808080196428804369945471644491",
            643107674},
        // window_size 2 < mab_num_explorations 3: every arm stays under-observed, so the MAB explores forever
        // in random orders (Zeus's behaviour), and each arm is fitted on its last two results.
        SeededCase{
            7,
            2,
            false,
            "E32 E16 E8 E64 E128 E16 E32 E64 M16 M32 M64 M16 M32 M64 M32 M16 M16 M16 M32 M32 M64 M16 M16 M64 "
            "M32 M32 M64 M64 M16 M16",
            {{16, -11475.0, 3.950617283950617e-05, 1.9753086419753087e-05, 2},
             {32, -16280.999999999998, 0.00030483158055174517, 0.00015241579027587258, 2},
             {64, -20756.25, 0.0001950922115531239, 9.754610577656195e-05, 2}},
            11250.0,
            16,
            "82285759162571978556850962608437878412",
            "261136684632268670825940853076396136793",
            3638482602}),
    [](const auto& param_info) {
      const SeededCase& c = param_info.param;
      return "Seed" + std::to_string(c.seed) + "Window" + std::to_string(c.window_size) +
             (c.close_arms ? "CloseArms" : "");
    });

TEST(BatchSizeMab, WindowKeepsTheLastResults) {
  JobSpec spec = make_spec();
  spec.window_size = 3;
  spec.mab_num_explorations = 0;
  spec.mab_seed = 5;
  Driver driver(value_or_throw(BatchSizeJob::create(spec, make_gpu(), 3)), make_oracle(), false);
  run_sequential(driver, 20);
  const BatchSizeJob& job = driver.job();
  for (const ArmState& arm : job.arms()) {
    // The arm equals a fit on its last three Succeeded results, in Zeus's order (oldest first once the
    // window is full).
    std::vector<double> rewards;
    for (const Trial& trial : job.trials()) {
      if (trial.batch_size == arm.batch_size && trial.status == TrialStatus::kSucceeded) {
        rewards.push_back(-job.cost(*trial.energy_j, *trial.time_s));
      }
    }
    if (rewards.size() > 3) {
      rewards.erase(rewards.begin(), rewards.end() - 3);
    }
    EXPECT_EQ(arm.num_observations, static_cast<int64_t>(std::min<size_t>(rewards.size(), 3)));
    if (rewards.size() == 3) {
      EXPECT_EQ(arm, value_or_throw(fit_arm(arm.batch_size, rewards, 0, 0)));
    }
  }
  EXPECT_EQ(job.arms()[0].num_observations, 3);
}

TEST(BatchSizeMab, SameSeedSameSequenceAndUnseededJobsPersistTheirStream) {
  JobSpec spec = make_spec();
  spec.mab_seed = 2024;
  const auto run = [](const JobSpec& s, uint64_t entropy) {
    Driver driver(value_or_throw(BatchSizeJob::create(s, make_gpu(), entropy)), make_oracle(true), false);
    return run_sequential(driver, 25);
  };
  // A seeded job ignores the entropy.
  EXPECT_EQ(run(spec, 1), run(spec, 2));
  // Unseeded: the stream comes from the entropy, once, and is persisted, so equal entropy replays equally.
  spec.mab_seed.reset();
  EXPECT_EQ(run(spec, 77), run(spec, 77));
  EXPECT_NE(run(spec, 77), run(spec, 78));
}

TEST(BatchSizeMab, LateReportOfAPruningTrialIsRecordedAndRefitsItsArm) {
  JobSpec spec = make_spec();
  spec.mab_seed = 3;
  Driver driver(value_or_throw(BatchSizeJob::create(spec, make_gpu(), 3)), make_oracle(), true);
  // Pruning with one Concurrent trial that is still running when the MAB starts.
  const TrialId first = driver.next();
  const TrialId concurrent = driver.next();
  EXPECT_EQ(driver.job().trials()[1].type, TrialType::kConcurrent);
  driver.train(first);
  run_sequential(driver, 7);
  driver.train(driver.next());
  ASSERT_EQ(driver.job().stage(), Stage::kMab);
  const ArmState before = driver.job().arms()[1];  // 32
  ASSERT_EQ(before.batch_size, 32);
  // Zeus would refuse this report (its arm update requires a MAB trial); joule records it and refits.
  const auto [response, epochs] = driver.train(concurrent);
  EXPECT_TRUE(response.converged);
  EXPECT_EQ(driver.job().trials()[1].status, TrialStatus::kSucceeded);
  EXPECT_EQ(driver.job().arms()[1].num_observations, before.num_observations + 1);
  (void)epochs;
}

TEST(BatchSizeJobTest, ClockOverloadsUseWallTime) {
  VirtualClock clock(kStartNs);
  BatchSizeJob job = value_or_throw(BatchSizeJob::create(make_spec(), make_gpu(), 3));
  const TrialId id = value_or_throw(job.next_trial(clock));
  EXPECT_EQ(job.trials()[0].start_unix_ns, kStartNs);
  clock.advance(Nanos(5'000'000'000));
  value_or_throw(job.report(TrainingResult{"job-1", 32, 1, 5, 500, 0.9, 1}, clock));
  EXPECT_EQ(job.trials()[0].end_unix_ns, kStartNs + 5'000'000'000);
  value_or_throw(job.next_trial(clock));
  clock.advance(Nanos(1));
  value_or_throw(job.end_trial(TrialId{"job-1", 16, 2}, clock));
  EXPECT_EQ(job.trials()[1].end_unix_ns, kStartNs + 5'000'000'001);
  // An end time before the start is clamped to the start.
  value_or_throw(job.next_trial(kStartNs + 10));
  value_or_throw(job.end_trial(TrialId{"job-1", 16, 3}, kStartNs));
  EXPECT_EQ(job.trials()[2].end_unix_ns, kStartNs + 10);
  (void)id;
}

// ---- JobState and TrialLog: the history out of memory ---------------------------------------------------

// A MemoryTrialLog that counts what the decisions ask of it.
class CountingLog final : public TrialLog {
 public:
  Result<std::optional<Trial>> find(int64_t trial_number) override {
    ++finds;
    return log.find(trial_number);
  }
  Result<std::vector<Trial>> succeeded(int64_t batch_size, size_t limit) override {
    ++succeeded_reads;
    limits.push_back(limit);
    return log.succeeded(batch_size, limit);
  }
  Result<void> save(const Trial& trial) override {
    ++saves;
    return log.save(trial);
  }
  MemoryTrialLog log;
  int finds = 0;
  int succeeded_reads = 0;
  int saves = 0;
  std::vector<size_t> limits;
};

TEST(JobStateTest, EachCallReadsOnlyWhatItsDecisionNeeds) {
  for (const int64_t window : {int64_t{0}, int64_t{3}}) {
    JobSpec spec = make_spec();
    spec.window_size = window;
    JobState state = value_or_throw(JobState::create(spec, make_gpu(), 7));
    BatchSizeJob reference = value_or_throw(BatchSizeJob::create(spec, make_gpu(), 7));
    CountingLog log;
    const auto oracle = make_oracle();
    int64_t now = kStartNs;
    for (int round = 0; round < 40; ++round) {
      log.finds = log.succeeded_reads = log.saves = 0;
      const TrialId trial = value_or_throw(state.next_trial(log, ++now));
      EXPECT_EQ(trial, value_or_throw(reference.next_trial(now)));
      EXPECT_EQ(log.finds + log.succeeded_reads, 0) << "next_trial reads no trial";
      EXPECT_EQ(log.saves, 1);
      const Workload& w = oracle.at(trial.batch_size);
      for (int64_t epoch = 1;; ++epoch) {
        log.finds = log.succeeded_reads = log.saves = 0;
        log.limits.clear();
        const double time_s = w.time_per_epoch_s * static_cast<double>(epoch);
        const bool reached = w.epochs_to_converge && epoch >= *w.epochs_to_converge;
        const TrainingResult result{trial.job_id, trial.batch_size,   trial.trial_number,
                                    time_s,       time_s * w.power_w, reached ? 0.9 : 0.1,
                                    epoch};
        const ReportResponse response = value_or_throw(state.report(log, result, ++now));
        EXPECT_EQ(response, value_or_throw(reference.report(result, now)));
        EXPECT_EQ(log.finds, 1) << "a report reads its own trial";
        EXPECT_LE(log.succeeded_reads, 1);
        for (const size_t limit : log.limits) {
          EXPECT_EQ(limit, static_cast<size_t>(window)) << "the refit reads at most window_size results";
        }
        if (response.stop_train) {
          EXPECT_EQ(log.saves, 1);
          break;
        }
        EXPECT_EQ(log.saves, 0) << "keep training changes no trial";
      }
    }
    EXPECT_EQ(state.stage(), Stage::kMab);
    EXPECT_TRUE(state == reference.state());
    EXPECT_EQ(log.log.trials(), reference.trials());
    EXPECT_EQ(state.trial_count(), 40);
    EXPECT_EQ(state.dispatched_count(), 0);
    EXPECT_EQ(state.succeeded_count(), 40);
    EXPECT_LE(state.explorations().size(), static_cast<size_t>(spec.num_pruning_rounds * 5));
  }
}

TEST(JobStateTest, ACallThatFailsLeavesStateAndLogUnchanged) {
  JobState state = value_or_throw(JobState::create(make_spec(), make_gpu(), 7));
  MemoryTrialLog log;
  const TrialId trial = value_or_throw(state.next_trial(log, kStartNs));
  const JobState before = state;
  const std::vector<Trial> trials = log.trials();
  const auto refused = [&](TrainingResult result, const std::string& message) {
    const auto response = state.report(log, result, kStartNs + 1);
    ASSERT_FALSE(response.has_value());
    EXPECT_EQ(response.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(response.error().message(), message);
    EXPECT_TRUE(state == before);
    EXPECT_EQ(log.trials(), trials);
  };
  const TrainingResult good{trial.job_id, trial.batch_size, trial.trial_number, 10, 1000, 0.1, 1};
  TrainingResult bad = good;
  bad.current_epoch = -1;
  refused(bad, "current_epoch: ensure this value is greater than or equal to 0");
  bad = good;
  bad.time_s = 2e9;
  refused(bad, "time: ensure this value is less than or equal to 1e+09 (s, about 31.7 years)");
  bad = good;
  bad.energy_j = 1e16;
  refused(bad, "energy: ensure this value is less than or equal to 1e+15 (J, 278 GWh)");
  EXPECT_TRUE(state.report(log, good, kStartNs + 1).has_value());
}

TEST(JobStateTest, MalformedStateIsRejectedWithItsPath) {
  BatchSizeJob job = value_or_throw(BatchSizeJob::create(make_spec(), make_gpu(), 7));
  value_or_throw(job.next_trial(kStartNs));                             // an Exploration, running
  const TrialId second = value_or_throw(job.next_trial(kStartNs + 1));  // Concurrent with it
  value_or_throw(job.end_trial(second, kStartNs + 2));                  // Failed
  const nlohmann::json good = job.state().to_json();
  ASSERT_EQ(good["explorations"].size(), 1U);
  ASSERT_TRUE(JobState::from_json(good).has_value());
  const auto refused = [&](const std::function<void(nlohmann::json&)>& change, const std::string& message) {
    nlohmann::json state = good;
    change(state);
    const auto parsed = JobState::from_json(state);
    ASSERT_FALSE(parsed.has_value()) << message;
    EXPECT_EQ(parsed.error().code(), ErrorCode::kParse);
    EXPECT_EQ(parsed.error().message(), message);
  };
  refused([](nlohmann::json& s) { s["format"] = "joule.optimize.batch_size.job"; },
          "format: expected \"joule.optimize.batch_size.job_state\", got \"joule.optimize.batch_size.job\"");
  refused([](nlohmann::json& s) { s["version"] = 2; },
          "version: job state version 2 is not supported (this build reads version 1)");
  refused([](nlohmann::json& s) { s["counts"]["failed"] = 0; },
          "counts: dispatched 1 + succeeded 0 + failed 0 must be the 2 trials, none negative");
  refused([](nlohmann::json& s) { s["counts"]["dispatched"] = -1; },
          "counts: dispatched -1 + succeeded 0 + failed 1 must be the 2 trials, none negative");
  refused([](nlohmann::json& s) { s["explorations"][0]["type"] = "Concurrent"; },
          "explorations[0]: explorations holds the Exploration trials that did not fail");
  refused([](nlohmann::json& s) { s["explorations"][0]["trial_number"] = 9; },
          "explorations[0].trial_number: 9 is out of order or beyond the 2 trials");
  refused([](nlohmann::json& s) { s.erase("counts"); }, "counts: field required");
  // A state and a history that disagree are not assembled into a job.
  const auto mismatched = BatchSizeJob::assemble(job.state(), {job.trials().front()});
  ASSERT_EQ(job.trials().size(), 2U);
  ASSERT_FALSE(mismatched.has_value());
  EXPECT_EQ(
      mismatched.error().message(),
      "the 1 trials do not match the job state's counts and explorations (trials 2, dispatched 1, succeeded "
      "0, failed 1, 1 explorations)");
}

}  // namespace
}  // namespace joule::optimize::batch_size

/* The numpy reference behind BatchSizeSeeded: Zeus's server logic (spec B.3) written from the spec, driven by
   the same oracle as the tests above, run sequentially for 30 trials. It prints the decisions, the final arms
   (batch size, param_mean, param_precision, reward_precision, num_observations), min_cost, its batch size and
   the generator state.

# usage: python3 batch_size_reference.py SEED WINDOW_SIZE [close]   (numpy 1.24)
import sys
import numpy as np

seed, window = int(sys.argv[1]), int(sys.argv[2])
# batch size: (s per epoch, epochs to reach the target)
W = {8: (9.0, None), 16: (10.0, 5), 32: (12.0, 6), 64: (15.0, 6), 128: (40.0, 10)}
if len(sys.argv) > 3:
    W[32] = (10.0, 5)
power, eta, max_power, beta, target = 150.0, 0.5, 300.0, 2.0, 0.5
max_epochs, rounds, n_explore = 10, 2, 3
bss, default = [8, 16, 32, 64, 128], 32
rng = np.random.default_rng(seed)
trials, arms, state = [], {}, dict(stage="Pruning", min_cost=None, min_bs=default)

def cost(e, t):
    return eta * e + (1 - eta) * max_power * t

def fit(rewards):
    r = np.array(rewards)
    v = np.var(r)
    rp = np.inf if v == 0.0 else np.reciprocal(v)
    if rp == np.inf:
        return (r.mean(), np.inf, rp, len(r))
    p = 0.0 + len(r) * rp
    return ((0.0 * 0.0 + rp * r.sum()) / p, p, rp, len(r))

def walk():
    exps = {}
    for t in trials:
        if t["type"] == "E" and t["status"] != "F":
            exps.setdefault(t["bs"], []).append(t)
    b, d = list(bss), default
    for r in range(rounds):
        good, mc, mb = [], float("inf"), 0
        b.sort()
        i = b.index(d)
        for direction in [sorted(b[: i + 1], reverse=True), sorted(b[i + 1 :])]:
            for bs in direction:
                if len(exps.get(bs, [])) <= r:
                    return ("E", bs)
                t = exps[bs][r]  # (no Dispatched trials: the runs here are sequential)
                if not t["converged"]:
                    break
                good.append(bs)
                if cost(t["energy"], t["time"]) < mc:
                    mc, mb = cost(t["energy"], t["time"]), bs
        d, b = mb, good
    return ("S", sorted(b), exps)

def next_trial():
    if state["stage"] == "Pruning":
        w = walk()
        if w[0] == "E":
            typ, bs = "E", w[1]
        else:
            for bs in w[1]:
                arms[bs] = fit([-cost(t["energy"], t["time"]) for t in w[2][bs]])
            state["stage"] = "MAB"
    if state["stage"] == "MAB":
        typ, bs = "M", None
        for a in rng.choice(np.array(list(arms)), len(arms), replace=False):
            if arms[int(a)][3] < n_explore:
                bs = int(a)
                break
        if bs is None:
            samples = {a: rng.normal(arms[a][0], np.sqrt(np.reciprocal(arms[a][1]))) for a in arms}
            bs = max(samples, key=samples.get)
    trials.append(dict(n=len(trials) + 1, bs=bs, type=typ, status="D"))
    return trials[-1]

def train(t):
    tpe, need = W[t["bs"]]
    tpe *= 1.0 + 0.01 * (t["n"] % 5)
    for epoch in range(1, 1000):
        time = tpe * epoch
        energy = time * power
        ub = beta * state["min_cost"] if state["min_cost"] is not None else np.inf
        c = cost(energy, time)
        converged = (1.0 if need is not None and epoch >= need else 0.0) >= target
        if ub >= c and epoch < max_epochs and not converged:
            continue
        if state["stage"] == "MAB" and t["type"] == "M":
            hist = [x for x in reversed(trials) if x["bs"] == t["bs"] and x["status"] == "S"]
            if window > 0:
                hist = hist[:window]
            if window > 0 and len(hist) >= window:
                hist.pop()
                hist.reverse()
            arms[t["bs"]] = fit([-cost(x["energy"], x["time"]) for x in hist] + [-c])
        t.update(status="S", time=time, energy=energy, converged=converged and ub >= c)
        if state["min_cost"] is None or state["min_cost"] > c:
            state["min_cost"], state["min_bs"] = c, t["bs"]
        return

decisions = []
for _ in range(30):
    t = next_trial()
    train(t)
    decisions.append(t["type"] + str(t["bs"]))
print(" ".join(decisions))
for bs, a in arms.items():
    print(bs, repr(float(a[0])), repr(float(a[1])), repr(float(a[2])), a[3])
print(repr(state["min_cost"]), state["min_bs"], rng.bit_generator.state)
*/
