// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/simulator.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::sim {
namespace {

constexpr const char* kTrain =
    "dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n"
    "mnist,mlp,32,sgd,0.1,1,0.9,3\n"
    "mnist,mlp,32,sgd,0.1,2,0.9,4\n"
    "mnist,mlp,64,sgd,0.1,1,0.9,4\n"
    "mnist,mlp,64,sgd,0.1,2,0.9,4\n"
    "mnist,mlp,128,sgd,0.1,1,0.9,nan\n"
    "mnist,mlp,128,sgd,0.1,2,0.9,9\n"
    "mnist,mlp,32,sgd,0.1,1,0.99,nan\n";
constexpr const char* kPower =
    "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
    "mnist,mlp,32,sgd,100,10,90\n"
    "mnist,mlp,32,sgd,200,8,150\n"
    "mnist,mlp,64,sgd,100,6,95\n"
    "mnist,mlp,64,sgd,200,5,160\n"
    "mnist,mlp,128,sgd,100,4,99\n"
    "mnist,mlp,128,sgd,200,3,170\n";

Trace small_trace() {
  return *parse_trace(kTrain, "train.csv", kPower, "power.csv");
}

Job small_job() {
  return Job{"mnist", "mlp", "sgd", 0.9, 10, 64};
}

TEST(Simulator, OptionValidation) {
  SimulationOptions options;
  options.eta = 1.5;
  JOULE_EXPECT_ERROR(validate(options), ErrorCode::kInvalidArgument, "eta must be in [0, 1] (got 1.5)");
  options.eta = 0.5;
  options.beta = 1.0;
  JOULE_EXPECT_ERROR(validate(options), ErrorCode::kInvalidArgument,
                     "beta must be greater than 1 (got 1); use inf to turn early stopping off");
  options.beta = std::nan("");
  EXPECT_FALSE(validate(options));
  options.beta = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(validate(options));
  options.recurrences = 0;
  JOULE_EXPECT_ERROR(validate(options), ErrorCode::kInvalidArgument,
                     "recurrences must be at least 1 (got 0)");
  options.recurrences = 3;
  options.eta = -0.1;
  const Simulator simulator = zeus_simulator(small_trace(), options);
  EXPECT_EQ(simulator.simulate(small_job()).error().message(), "eta must be in [0, 1] (got -0.1)");
}

TEST(Simulator, JobErrors) {
  const Simulator simulator = zeus_simulator(small_trace(), SimulationOptions{});
  Job job = small_job();
  job.default_batch_size = 48;
  JOULE_EXPECT_ERROR(simulator.simulate(job), ErrorCode::kInvalidArgument,
                     "batch size 48 is not in the trace of mnist (available: 32, 64, 128)");
  job = small_job();
  job.target_metric = 0.99;
  JOULE_EXPECT_ERROR(
      simulator.simulate(job), ErrorCode::kInvalidArgument,
      "mnist can never reach its target 0.99 within 10 epochs: no training run in the trace does");
  job = small_job();
  job.target_metric = 0.5;
  JOULE_EXPECT_ERROR(
      simulator.simulate(job), ErrorCode::kInvalidArgument,
      "the given trace has no runs of mnist (mlp, sgd) with target metric 0.5 (traced targets: 0.9, 0.99)");
  job = small_job();
  job.default_batch_size = 128;  // run 1 never reaches: the first recurrence can fail
  job.max_epochs = 8;            // and run 2 needs 9 epochs
  JOULE_EXPECT_ERROR(
      simulator.simulate(job), ErrorCode::kState,
      "the default batch size 128 did not reach the target 0.9 in the first recurrence (try another "
      "--b0 or a larger --max-epochs)");
}

TEST(Simulator, RunsAndAccountsEveryTry) {
  SimulationOptions options;
  options.recurrences = 12;
  const Simulator simulator = zeus_simulator(small_trace(), options);
  const auto result = simulator.simulate(small_job());
  ASSERT_TRUE(result) << result.error().message();
  EXPECT_EQ(result->recurrences, 12);
  EXPECT_EQ(result->max_power_w, 200);
  Totals sum;
  int last_recurrence = 0;
  for (const Try& t : result->tries) {
    sum.energy_j += t.energy_j;
    sum.time_s += t.time_s;
    sum.cost += t.cost;
    EXPECT_DOUBLE_EQ(t.cost, 0.5 * t.energy_j + 0.5 * 200 * t.time_s);
    EXPECT_GE(t.recurrence, last_recurrence);
    last_recurrence = t.recurrence;
  }
  EXPECT_EQ(last_recurrence, 12);
  EXPECT_DOUBLE_EQ(sum.cost, result->optimizer.cost);
  EXPECT_DOUBLE_EQ(sum.energy_j, result->optimizer.energy_j);
  // The first try is b0, JIT-profiled. Epoch costs: 100 W (0.5·95 + 0.5·200)·6 = 885 beats 200 W
  // (0.5·160 + 0.5·200)·5 = 900, so 100 W is chosen; the first epoch costs the average over all four rows
  // of batch size 64 (both limits, both runs), the other three epochs the 100 W run's.
  const Try& first = result->tries.front();
  EXPECT_EQ(first.batch_size, 64);
  EXPECT_EQ(first.power_limit_w, 100);
  EXPECT_TRUE(first.reached);
  EXPECT_DOUBLE_EQ(first.time_s, 5.5 + 6 * 3);
  EXPECT_DOUBLE_EQ(first.energy_j, 685 + 570 * 3);
}

TEST(Simulator, SameSeedSameDecisionsOtherSeedOtherPaths) {
  SimulationOptions options;
  options.recurrences = 20;
  const auto a = zeus_simulator(small_trace(), options).simulate(small_job());
  const auto b = zeus_simulator(small_trace(), options).simulate(small_job());
  ASSERT_TRUE(a && b);
  ASSERT_EQ(a->tries.size(), b->tries.size());
  for (size_t i = 0; i < a->tries.size(); ++i) {
    EXPECT_EQ(a->tries[i].batch_size, b->tries[i].batch_size);
    EXPECT_EQ(a->tries[i].energy_j, b->tries[i].energy_j);
  }
}

TEST(Simulator, BaselineAndOracle) {
  const Simulator simulator = zeus_simulator(small_trace(), SimulationOptions{});
  const auto result = simulator.simulate(small_job());
  ASSERT_TRUE(result);
  EXPECT_EQ(result->configurations.size(), 6u);
  // Baseline: b0 = 64 at its highest limit, 200 W: both runs need 4 epochs of 5 s at 160 W.
  EXPECT_EQ(result->baseline.batch_size, 64);
  EXPECT_EQ(result->baseline.power_limit_w, 200);
  EXPECT_DOUBLE_EQ(result->baseline.time_s, 20);
  EXPECT_DOUBLE_EQ(result->baseline.energy_j, 3200);
  EXPECT_EQ(result->baseline.reach_rate, 1);
  ASSERT_TRUE(result->oracle);
  for (const auto& config : result->configurations) {
    if (config.reach_rate == 1) {
      EXPECT_LE(result->oracle->cost, config.cost);
    }
  }
  EXPECT_NE(result->oracle->batch_size, 128);  // 128 misses the target in one run
}

TEST(Simulator, BetaInfinityNeverStopsEarly) {
  SimulationOptions options;
  options.beta = std::numeric_limits<double>::infinity();
  options.recurrences = 15;
  const auto result = zeus_simulator(small_trace(), options).simulate(small_job());
  ASSERT_TRUE(result);
  for (const Try& t : result->tries) {
    if (!t.reached) {
      // Without a cost bound, a failed try runs all max_epochs epochs.
      EXPECT_EQ(t.batch_size, 128);
    }
  }
}

// A policy of one's own: always the same batch size.
class FixedBatchSize final : public BatchSizePolicy {
 public:
  explicit FixedBatchSize(int batch_size) : batch_size_(batch_size) {}
  Result<void> register_job(const Job&, const std::vector<int>&) override { return {}; }
  Result<int> predict(const Job&) override { return batch_size_; }
  Result<void> observe(const Job&, int, double, bool) override {
    ++observed_;
    return {};
  }
  std::unique_ptr<BatchSizePolicy> clone() const override { return std::make_unique<FixedBatchSize>(*this); }
  std::string name() const override { return "fixed"; }

 private:
  int batch_size_;
  int observed_ = 0;
};

TEST(Simulator, PoliciesArePluggable) {
  SimulationOptions options;
  options.recurrences = 5;
  const Simulator simulator(small_trace(), std::make_unique<FixedBatchSize>(32),
                            std::make_unique<JitPowerLimitPolicy>(), options);
  const auto result = simulator.simulate(small_job());
  ASSERT_TRUE(result) << result.error().message();
  ASSERT_EQ(result->tries.size(), 5u);
  for (const Try& t : result->tries) {
    EXPECT_EQ(t.batch_size, 32);
    EXPECT_TRUE(t.reached);
  }
  const Simulator bad(small_trace(), std::make_unique<FixedBatchSize>(48),
                      std::make_unique<JitPowerLimitPolicy>(), options);
  JOULE_EXPECT_ERROR(bad.simulate(small_job()), ErrorCode::kInvalidArgument,
                     "the batch-size policy chose 48, which has no runs in the trace");
}

}  // namespace
}  // namespace joule::sim

namespace joule::sim {
namespace {

TEST(GroupSimulation, ParsesGroupFilesWithClearErrors) {
  const auto groups = parse_groups(
      "group,start_time,end_time,dataset,runtime_ratio\n"
      "7,0,100,mnist,1.0\n"
      "9,5,50,mnist,0.5\n"
      "7,10,200,mnist,2\n",
      "groups.csv");
  ASSERT_TRUE(groups) << groups.error().message();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0].size(), 2u);
  EXPECT_EQ((*groups)[0][1].end_time, 200);
  EXPECT_EQ((*groups)[1][0].runtime_ratio, 0.5);
  JOULE_EXPECT_ERROR(
      parse_groups("group,start_time,dataset,runtime_ratio\n", "g.csv"), ErrorCode::kNotFound,
      "g.csv: missing column 'end_time' (the header has: group, start_time, dataset, runtime_ratio)");
  JOULE_EXPECT_ERROR(
      parse_groups("group,start_time,end_time,dataset,runtime_ratio\n1,10,5,mnist,1\n", "g.csv"),
      ErrorCode::kParse, "g.csv:2:6: column 'end_time': the job ends before it starts");
  JOULE_EXPECT_ERROR(
      parse_groups("group,start_time,end_time,dataset,runtime_ratio\n1,0,5,mnist,0\n", "g.csv"),
      ErrorCode::kParse, "g.csv:2:13: column 'runtime_ratio': the runtime ratio must be positive");
  JOULE_EXPECT_ERROR(
      parse_groups("group,start_time,end_time,dataset,runtime_ratio\n1,x,5,mnist,1\n", "g.csv"),
      ErrorCode::kParse, "g.csv:2:3: column 'start_time': expected a number, got \"x\"");
}

TEST(GroupSimulation, Adler32MatchesZlib) {
  EXPECT_EQ(adler32(""), 1u);
  EXPECT_EQ(adler32("Wikipedia"), 0x11E60398u);
  EXPECT_EQ(adler32("12345"), 0x02F80100u);
}

TEST(GroupSimulation, ConcurrentRecurrencesAllFinish) {
  std::string csv = "group,start_time,end_time,dataset,runtime_ratio\n";
  // Overlapping submissions: several run at once, so some use the best batch size so far.
  for (int i = 0; i < 30; ++i) {
    csv += fmt::format("g,{},{},mnist,{}\n", i * 10, i * 10 + 25, 1 + (i % 3) * 0.5);
  }
  const auto groups = parse_groups(csv, "groups.csv");
  ASSERT_TRUE(groups);
  SimulationOptions options;
  options.seed = adler32("g");
  const Simulator simulator = zeus_group_simulator(small_trace(), options);
  const auto result = simulator.simulate_group(small_job(), groups->front());
  ASSERT_TRUE(result) << result.error().message();
  int reached = 0;
  for (const Try& t : result->tries) {
    reached += t.reached ? 1 : 0;
  }
  EXPECT_EQ(reached, 30);  // every submission eventually reaches the target (failures are resubmitted)
  EXPECT_EQ(result->recurrences, static_cast<int>(result->tries.size()));
  EXPECT_GT(result->optimizer.cost, 0);
  const auto again = simulator.simulate_group(small_job(), groups->front());
  ASSERT_TRUE(again);
  ASSERT_EQ(again->tries.size(), result->tries.size());
  for (size_t i = 0; i < again->tries.size(); ++i) {
    EXPECT_EQ(again->tries[i].batch_size, result->tries[i].batch_size);
    EXPECT_EQ(again->tries[i].energy_j, result->tries[i].energy_j);
  }
}

}  // namespace
}  // namespace joule::sim
