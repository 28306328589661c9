// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/trace.hpp"

#include <cmath>

#include <gtest/gtest.h>

#include "joule/sim/report.hpp"
#include "joule/sim/simulator.hpp"

#include "test_util.hpp"

namespace joule::sim {
namespace {

constexpr const char* kTrain =
    "dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n"
    "mnist,mlp,32,sgd,0.1,1,0.9,3\n"
    "mnist,mlp,32,sgd,0.1,2,0.9,nan\n"
    "mnist,mlp,64,sgd,0.1,1,0.9,4\n"
    "mnist,mlp,128,sgd,0.1,1,0.9,5\n";
constexpr const char* kPower =
    "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
    "mnist,mlp,32,sgd,100,10,90\n"
    "mnist,mlp,32,sgd,200,8,150\n"
    "mnist,mlp,64,sgd,100,6,95\n"
    "mnist,mlp,64,sgd,200,5,160\n"
    "mnist,mlp,256,sgd,200,2,180\n";

TEST(Trace, MergesInTheOriginalsOrder) {
  auto trace = parse_trace(kTrain, "train.csv", kPower, "power.csv");
  ASSERT_TRUE(trace) << trace.error().message();
  ASSERT_EQ(trace->rows.size(), 6u);  // 128 has no power rows; 256 has no training rows
  EXPECT_EQ(trace->rows[0].batch_size, 32);
  EXPECT_EQ(trace->rows[0].power_limit_w, 100);
  EXPECT_EQ(trace->rows[1].power_limit_w, 200);
  EXPECT_EQ(trace->rows[2].run, 2);
  EXPECT_TRUE(std::isnan(trace->rows[2].target_epoch));
  EXPECT_EQ(trace->rows[1].energy_per_epoch_j, 8.0 * 150.0);
  EXPECT_EQ(trace->max_power_limit_w(), 200);
  EXPECT_EQ(trace->largest_power_batch_size.at("mnist"), 256);
}

TEST(Trace, BadInputNamesFileLineAndColumn) {
  JOULE_EXPECT_ERROR(
      parse_trace(kTrain, "train.csv", "dataset,network,batch_size,optimizer,power_limit,average_power\n",
                  "power.csv"),
      ErrorCode::kNotFound,
      "power.csv: missing column 'time_per_epoch' (the header has: dataset, network, batch_size, "
      "optimizer, power_limit, average_power)");
  JOULE_EXPECT_ERROR(
      parse_trace(kTrain, "train.csv",
                  "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
                  "mnist,mlp,32,sgd,100,fast,90\n",
                  "power.csv"),
      ErrorCode::kParse, "power.csv:2:22: column 'time_per_epoch': expected a number, got \"fast\"");
  JOULE_EXPECT_ERROR(
      parse_trace(kTrain, "train.csv",
                  "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
                  "mnist,mlp,32,sgd,100,10,\n",
                  "power.csv"),
      ErrorCode::kParse, "power.csv:2:25: column 'average_power': expected a number, got \"\"");
  JOULE_EXPECT_ERROR(
      parse_trace(kTrain, "train.csv",
                  "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
                  "mnist,mlp,32,sgd,nan,10,90\n",
                  "power.csv"),
      ErrorCode::kParse, "power.csv:2:18: column 'power_limit': expected a finite number, got \"nan\"");
  JOULE_EXPECT_ERROR(
      parse_trace("dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n"
                  "mnist,mlp,32.5,sgd,0.1,1,0.9,3\n",
                  "train.csv", kPower, "power.csv"),
      ErrorCode::kParse, "train.csv:2:11: column 'batch_size': expected an integer, got \"32.5\"");
  JOULE_EXPECT_ERROR(
      parse_trace(kTrain, "train.csv",
                  "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n"
                  "cifar,resnet,32,sgd,100,10,90\n",
                  "power.csv"),
      ErrorCode::kInvalidArgument,
      "train.csv and power.csv have no (dataset, network, batch_size, optimizer) in common");
  JOULE_EXPECT_ERROR(load_trace("/nonexistent/train.csv", "/nonexistent/power.csv"), ErrorCode::kNotFound,
                     "cannot open /nonexistent/train.csv: No such file or directory");
}

constexpr const char* kTrainHeader =
    "dataset,network,batch_size,optimizer,learning_rate,run,target_metric,target_epoch\n";
constexpr const char* kPowerHeader =
    "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power\n";

// Issue 11: a negative batch size was accepted (and batch sizes past int wrapped around).
TEST(Trace, OutOfRangeNumbersAreRefusedWithRowAndField) {
  const auto power = [](const std::string& row) {
    return parse_trace(kTrain, "train.csv", std::string(kPowerHeader) + row + "\n", "power.csv");
  };
  const auto train = [](const std::string& row) {
    return parse_trace(std::string(kTrainHeader) + row + "\n", "train.csv", kPower, "power.csv");
  };
  JOULE_EXPECT_ERROR(power("mnist,mlp,-32,sgd,100,10,90"), ErrorCode::kParse,
                     "power.csv:2:11: column 'batch_size': expected a batch size from 1 to 2147483647, got "
                     "\"-32\"");
  JOULE_EXPECT_ERROR(power("mnist,mlp,0,sgd,100,10,90"), ErrorCode::kParse,
                     "power.csv:2:11: column 'batch_size': expected a batch size from 1 to 2147483647, got "
                     "\"0\"");
  JOULE_EXPECT_ERROR(power("mnist,mlp,4294967328,sgd,100,10,90"), ErrorCode::kParse,
                     "power.csv:2:11: column 'batch_size': expected a batch size from 1 to 2147483647, got "
                     "\"4294967328\"");
  JOULE_EXPECT_ERROR(power("mnist,mlp,32,sgd,-100,10,90"), ErrorCode::kParse,
                     "power.csv:2:18: column 'power_limit': expected a positive number, got \"-100\"");
  JOULE_EXPECT_ERROR(power("mnist,mlp,32,sgd,100,0,90"), ErrorCode::kParse,
                     "power.csv:2:22: column 'time_per_epoch': expected a positive number, got \"0\"");
  JOULE_EXPECT_ERROR(power("mnist,mlp,32,sgd,100,10,-90"), ErrorCode::kParse,
                     "power.csv:2:25: column 'average_power': expected a positive number, got \"-90\"");
  JOULE_EXPECT_ERROR(power("mnist,mlp,32,sgd,100,inf,90"), ErrorCode::kParse,
                     "power.csv:2:22: column 'time_per_epoch': expected a finite number, got \"inf\"");
  JOULE_EXPECT_ERROR(train("mnist,mlp,-32,sgd,0.1,1,0.9,3"), ErrorCode::kParse,
                     "train.csv:2:11: column 'batch_size': expected a batch size from 1 to 2147483647, got "
                     "\"-32\"");
  JOULE_EXPECT_ERROR(train("mnist,mlp,32,sgd,0.1,-1,0.9,3"), ErrorCode::kParse,
                     "train.csv:2:22: column 'run': expected a run number from 0 to 2147483647, got \"-1\"");
  JOULE_EXPECT_ERROR(train("mnist,mlp,32,sgd,0.1,1,0.9,-3"), ErrorCode::kParse,
                     "train.csv:2:28: column 'target_epoch': expected a positive number of epochs or nan "
                     "(never reached), got \"-3\"");
  JOULE_EXPECT_ERROR(train("mnist,mlp,32,sgd,0.1,1,0.9,inf"), ErrorCode::kParse,
                     "train.csv:2:28: column 'target_epoch': expected a positive number of epochs or nan "
                     "(never reached), got \"inf\"");
  JOULE_EXPECT_ERROR(train("mnist,mlp,32,sgd,0.1,1,-inf,3"), ErrorCode::kParse,
                     "train.csv:2:24: column 'target_metric': expected a finite number, got \"-inf\"");
}

// Issue 11: errors printed raw binary bytes of the trace.
TEST(Trace, BinaryFieldsArePrintedEscaped) {
  JOULE_EXPECT_ERROR(
      parse_trace(kTrain, "train.csv",
                  std::string(kPowerHeader) + std::string("mnist,mlp,32,sgd,\x00\x1b[1m\xff,10,90\n", 30),
                  "power.csv"),
      ErrorCode::kParse,
      "power.csv:2:18: column 'power_limit': expected a number, got \"\\x00\\x1b[1m\\xff\"");
}

TEST(Trace, LoadIsBounded) {
  test::ScopedEnv no_override("JOULE_MAX_FILE_MIB", nullptr);
  JOULE_EXPECT_ERROR(
      load_trace("/dev/zero", "/dev/zero"), ErrorCode::kInvalidArgument,
      "/dev/zero: more than 256 MiB, the most joule reads from a simulator trace (real ones are "
      "far smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
  test::ScopedEnv lowered("JOULE_MAX_FILE_MIB", "1");
  JOULE_EXPECT_ERROR(load_groups("/dev/zero"), ErrorCode::kInvalidArgument,
                     "/dev/zero: more than 1 MiB, the most joule reads from a simulator trace (real ones are "
                     "far smaller: is it the right file? JOULE_MAX_FILE_MIB raises the limit)");
}

TEST(Trace, BuiltInTracesAndPaperJobs) {
  auto v100 = gpu_trace("V100");
  ASSERT_TRUE(v100);
  EXPECT_EQ(v100->gpu, "v100");
  EXPECT_EQ(v100->max_power_limit_w(), 250);
  auto p100 = gpu_trace("p100");
  ASSERT_TRUE(p100);
  const auto imagenet = paper_job(*p100, "imagenet");
  ASSERT_TRUE(imagenet);
  EXPECT_EQ(imagenet->default_batch_size, 128);  // the paper's 256 does not fit a P100
  EXPECT_EQ(imagenet->max_epochs, 100);
  EXPECT_EQ(imagenet->target_metric, 0.65);
  EXPECT_EQ(paper_job(*v100, "movielens")->dataset, "movielens-1m");
  JOULE_EXPECT_ERROR(gpu_trace("h100"), ErrorCode::kNotFound,
                     "unknown GPU 'h100' (traces exist for: v100, a40, p100, rtx6000)");
  JOULE_EXPECT_ERROR(
      paper_job(*v100, "mnist"), ErrorCode::kNotFound,
      "unknown workload 'mnist' (known: cifar100, imagenet, squad, librispeech, movielens-1m, sentiment140)");
}

// Rows of one dataset: the rest are read and checked but not kept, and their largest limit still counts.
TEST(Trace, OnlyOneDatasetKeepsTheWholeTracesMaxPower) {
  const std::string train = std::string(kTrain) + "cifar,cnn,32,sgd,0.1,1,0.8,2\n";
  const std::string power = std::string(kPower) + "cifar,cnn,32,sgd,300,4,250\n";
  auto mnist = parse_trace(train, "train.csv", power, "power.csv", "mnist");
  ASSERT_TRUE(mnist) << mnist.error().message();
  EXPECT_EQ(mnist->rows.size(), 6u);
  EXPECT_EQ(mnist->left_out_max_power_limit_w, 300);
  EXPECT_EQ(mnist->max_power_limit_w(), 300);  // the cifar row's, as in the whole trace
  auto cifar = parse_trace(train, "train.csv", power, "power.csv", "cifar");
  ASSERT_TRUE(cifar);
  ASSERT_EQ(cifar->rows.size(), 1u);
  EXPECT_EQ(cifar->rows[0].dataset, "cifar");
  EXPECT_EQ(cifar->left_out_max_power_limit_w, 200);
  // A bad cell in a left-out row is still an error.
  JOULE_EXPECT_ERROR(
      parse_trace(train + "cifar,cnn,x,sgd,0.1,1,0.8,2\n", "train.csv", power, "power.csv", "mnist"),
      ErrorCode::kParse, "train.csv:7:11: column 'batch_size': expected an integer, got \"x\"");
}

// Simulating a workload on its own rows gives exactly what the whole trace gives.
TEST(Trace, WorkloadTraceSimulatesExactlyAsTheWholeTrace) {
  for (const char* gpu : {"v100", "p100"}) {
    for (const char* workload : {"cifar100", "squad", "movielens"}) {
      auto whole = gpu_trace(gpu);
      auto own = workload_trace(gpu, workload);
      ASSERT_TRUE(whole && own);
      EXPECT_EQ(own->gpu, gpu);
      EXPECT_LT(own->rows.size(), whole->rows.size());
      EXPECT_EQ(own->max_power_limit_w(), whole->max_power_limit_w());
      const Job job = *paper_job(*whole, workload);
      const auto on_whole = zeus_simulator(*whole, {}).simulate(job);
      const auto on_own = zeus_simulator(*own, {}).simulate(*paper_job(*own, workload));
      ASSERT_TRUE(on_whole && on_own);
      // Every try, total and configuration, in full (17 digits).
      EXPECT_EQ(render_simulation_json(gpu, *on_own, {}), render_simulation_json(gpu, *on_whole, {}))
          << gpu << " " << workload;
      EXPECT_EQ(render_tries_csv(*on_own), render_tries_csv(*on_whole)) << gpu << " " << workload;
    }
  }
  // Not a paper workload: the whole trace (paper_job says what is wrong).
  EXPECT_EQ(workload_trace("v100", "mnist")->rows.size(), gpu_trace("v100")->rows.size());
  JOULE_EXPECT_ERROR(workload_trace("h100", "squad"), ErrorCode::kNotFound,
                     "unknown GPU 'h100' (traces exist for: v100, a40, p100, rtx6000)");
}

TEST(Trace, TraceDirectory) {
  test::TempDir dir;
  dir.write("summary_train.csv", kTrain);
  dir.write("summary_power_mygpu.csv", kPower);
  auto trace = gpu_trace("mygpu", dir.path());
  ASSERT_TRUE(trace) << trace.error().message();
  EXPECT_EQ(trace->rows.size(), 6u);
  EXPECT_EQ(gpu_trace("other", dir.path()).error().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace joule::sim
