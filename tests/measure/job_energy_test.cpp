// SPDX-License-Identifier: Apache-2.0
// Per-job energy on shared GPUs: Slurm cgroup parsing on a fake /proc tree, and JobEnergyLedger summing the
// per-process splits of fake sample windows into per-(job, GPU) totals that add up to the measured energy.
#include "joule/measure/job_energy.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "test_util.hpp"

namespace joule::measure {
namespace {

using device::ProcessUtilizationSample;

constexpr const char* kCgroupV2Job42 = "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n";
constexpr const char* kCgroupV1Job7 =
    "12:pids:/slurm/uid_1000/job_7/step_batch/task_0\n"
    "4:memory:/slurm/uid_1000/job_7/step_batch/task_0\n"
    "1:name=systemd:/system.slice/slurmd.service\n";
constexpr const char* kCgroupNoJob = "0::/user.slice/user-1000.slice/session-3.scope\n";

// A fake /proc with one cgroup file per process.
class FakeProc {
 public:
  void process(uint32_t pid, const std::string& cgroup) {
    dir_.write(std::to_string(pid) + "/cgroup", cgroup);
  }
  void exit(uint32_t pid) { std::filesystem::remove_all(dir_.path() + "/" + std::to_string(pid)); }
  const std::string& root() const { return dir_.path(); }

 private:
  test::TempDir dir_;
};

ProcessAttribution split(uint64_t energy_mj, const std::vector<ProcessUtilizationSample>& samples,
                         uint64_t start_us, uint64_t end_us) {
  auto attribution = attribute_energy_by_process(energy_mj, samples, start_us, end_us);
  EXPECT_TRUE(attribution) << attribution.error().message();
  return attribution.value_or(ProcessAttribution{});
}

uint64_t sum_of(const GpuJobTotals& totals) {
  return totals.jobs_mj + totals.other_mj() + totals.unattributed_mj;
}

TEST(SlurmCgroup, JobIdsOfCgroupV1AndV2AndNone) {
  EXPECT_EQ(slurm_job_from_cgroup(kCgroupV2Job42), "42");
  EXPECT_EQ(slurm_job_from_cgroup(kCgroupV1Job7), "7");
  EXPECT_EQ(slurm_job_from_cgroup(kCgroupNoJob), std::nullopt);
  EXPECT_EQ(slurm_job_from_cgroup(""), std::nullopt);
  // "job_" without digits, or a component that only starts like one, is no job.
  EXPECT_EQ(slurm_job_from_cgroup("0::/job_/job_x1/myjob_5\n"), std::nullopt);
  EXPECT_EQ(slurm_job_from_cgroup("garbage without colons\n0::/slurm/job_9"), "9");
}

TEST(SlurmCgroup, ResolverReadsTheFakeProcTreeAndSaysWhyNot) {
  FakeProc proc;
  proc.process(100, kCgroupV2Job42);
  proc.process(200, kCgroupNoJob);
  const SlurmCgroupResolver resolver(proc.root());
  EXPECT_EQ(resolver.job_of(100).value(), "42");
  EXPECT_EQ(resolver.job_of(200).value(), std::nullopt);
  JOULE_EXPECT_ERROR(resolver.job_of(300), ErrorCode::kNotFound,
                     fmt::format("process 300 is gone ({}/300/cgroup does not exist)", proc.root()));
  // A cgroup "file" that cannot be read (a folder here: the tests may run as root, who reads any mode).
  std::filesystem::create_directories(proc.root() + "/400/cgroup");
  const auto unreadable = resolver.job_of(400);
  ASSERT_FALSE(unreadable);
  EXPECT_NE(unreadable.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(unreadable.error().message().rfind("cannot tell the job of process 400: ", 0), 0u)
      << unreadable.error().message();
  EXPECT_NE(unreadable.error().message().find(proc.root() + "/400/cgroup"), std::string::npos);
}

TEST(SlurmCgroup, TheRealProcFileOfThisProcessIsRead) {
  // /proc files report size 0: the bounded reader reads them to their end (a job id when run under Slurm).
  const auto own = SlurmCgroupResolver().job_of(static_cast<uint32_t>(::getpid()));
  EXPECT_TRUE(own) << own.error().message();
}

TEST(SlurmCgroup, MalformedJobIdsAreRefusedWithTheId) {
  EXPECT_TRUE(validate_job_id("4242"));
  EXPECT_TRUE(validate_job_id("4242_7.batch-x"));
  JOULE_EXPECT_ERROR(validate_job_id(""), ErrorCode::kInvalidArgument,
                     "job id \"\" is not one: expected 1 to 64 letters, digits, '.', '_' or '-' (a Slurm "
                     "job id, e.g. 4242)");
  JOULE_EXPECT_ERROR(validate_job_id("42/../1"), ErrorCode::kInvalidArgument,
                     "job id \"42/../1\" is not one: expected 1 to 64 letters, digits, '.', '_' or '-' (a "
                     "Slurm job id, e.g. 4242)");
  EXPECT_FALSE(validate_job_id(std::string(65, '1')));
}

// Two jobs share one GPU over two 4 s windows of 1 s periods; a process in no job runs beside them.
TEST(JobEnergyLedger, TwoJobsSharingAGpuSumExactlyToItsMeasuredEnergy) {
  FakeProc proc;
  proc.process(100, kCgroupV2Job42);
  proc.process(101, kCgroupV2Job42);
  proc.process(200, kCgroupV1Job7);
  proc.process(300, kCgroupNoJob);
  const SlurmCgroupResolver resolver(proc.root());
  JobEnergyLedger ledger(resolver);
  // Window 1: job 42's two processes at 30 % and 20 %, job 7 at 25 %, pid 300 at 5 %, every period.
  std::vector<ProcessUtilizationSample> samples;
  for (uint64_t t = 1; t <= 4; ++t) {
    samples.push_back({100, t * 1'000'000, 30});
    samples.push_back({101, t * 1'000'000, 20});
    samples.push_back({200, t * 1'000'000, 25});
    samples.push_back({300, t * 1'000'000, 5});
  }
  ledger.add(0, split(100'001, samples, 0, 4'000'000), 0, 4'000'000);
  // Window 2: only job 7, at 50 % in two of four periods.
  ledger.add(0, split(40'003, {{200, 5'000'000, 50}, {200, 6'000'000, 50}}, 4'000'000, 8'000'000), 4'000'000,
             8'000'000);

  const auto totals = ledger.totals(0);
  EXPECT_EQ(totals.measured_mj, 140'004u);
  EXPECT_EQ(sum_of(totals), totals.measured_mj);  // exactly, in whole mJ
  EXPECT_EQ(totals.no_job_mj, 5'000u);

  auto job42 = ledger.read("42", false);
  ASSERT_TRUE(job42) << job42.error().message();
  ASSERT_EQ(job42->gpus.size(), 1u);
  EXPECT_EQ(job42->gpus[0].energy_mj, 30'000u + 20'000u);
  EXPECT_EQ(job42->gpus[0].gpu_energy_mj, 100'001u);  // the GPU over the job's span: window 1 only
  EXPECT_EQ(job42->gpus[0].start_us, 0u);
  EXPECT_EQ(job42->gpus[0].end_us, 4'000'000u);
  EXPECT_TRUE(job42->ended);  // not sampled in the GPU's latest window
  EXPECT_EQ(job42->method, "nvml process utilisation samples");
  auto job7 = ledger.read("7", false);
  ASSERT_TRUE(job7);
  EXPECT_EQ(job7->gpus[0].energy_mj, 25'000u + 10'000u);
  EXPECT_EQ(job7->gpus[0].gpu_energy_mj, 140'004u);
  EXPECT_FALSE(job7->ended);
  EXPECT_EQ(job42->gpus[0].energy_mj + job7->gpus[0].energy_mj, totals.jobs_mj);

  // An ended job read with forget_if_ended goes (its energy to "released"), and the sum still holds.
  ASSERT_TRUE(ledger.read("42", true));
  JOULE_EXPECT_ERROR(ledger.read("42", false), ErrorCode::kNotFound,
                     "unknown job 42: no process of it has been sampled on a GPU accounted here (it used no "
                     "shared GPU, ran before the accounting began, was read already after it ended, or "
                     "ended more than 3600 s ago)");
  EXPECT_EQ(ledger.totals(0).released_mj, 50'000u);
  EXPECT_EQ(sum_of(ledger.totals(0)), 140'004u);
  // A running job stays after a read.
  ASSERT_TRUE(ledger.read("7", true));
  EXPECT_TRUE(ledger.read("7", false));
  JOULE_EXPECT_ERROR(ledger.read("7;rm", false), ErrorCode::kInvalidArgument,
                     "job id \"7;rm\" is not one: expected 1 to 64 letters, digits, '.', '_' or '-' (a Slurm "
                     "job id, e.g. 4242)");
}

TEST(JobEnergyLedger, APidThatExitsKeepsItsJobAndOneNeverSeenIsUnknown) {
  FakeProc proc;
  proc.process(100, kCgroupV2Job42);
  const SlurmCgroupResolver resolver(proc.root());
  JobEnergyLedger ledger(resolver);
  ledger.add(0, split(1'000, {{100, 500, 100}}, 0, 1'000), 0, 1'000);
  // pid 100 exits with samples of its last period still to count; pid 500 came and went between windows.
  proc.exit(100);
  ledger.add(0, split(1'000, {{100, 1'500, 50}, {500, 1'500, 50}}, 1'000, 2'000), 1'000, 2'000);
  const auto job = ledger.read("42", false);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->gpus[0].energy_mj, 1'500u);
  const auto totals = ledger.totals(0);
  EXPECT_EQ(totals.unknown_mj, 500u);
  EXPECT_EQ(sum_of(totals), 2'000u);
  const auto error = ledger.take_resolve_error();
  ASSERT_TRUE(error);
  EXPECT_EQ(error->message(), fmt::format("process 500 is gone ({}/500/cgroup does not exist)", proc.root()));
  EXPECT_FALSE(ledger.take_resolve_error());
}

TEST(JobEnergyLedger, AnUnreadableCgroupFileCountsAsUnknownAndSaysWhy) {
  FakeProc proc;
  std::filesystem::create_directories(proc.root() + "/100/cgroup");
  const SlurmCgroupResolver resolver(proc.root());
  JobEnergyLedger ledger(resolver);
  ledger.add(3, split(800, {{100, 500, 50}}, 0, 1'000), 0, 1'000);
  EXPECT_EQ(ledger.totals(3).unknown_mj, 400u);
  EXPECT_EQ(sum_of(ledger.totals(3)), 800u);
  const auto error = ledger.take_resolve_error();
  ASSERT_TRUE(error);
  EXPECT_NE(error->message().find("cannot tell the job of process 100: "), std::string::npos);
  EXPECT_EQ(ledger.job_count(), 0u);
}

// Bounds: a cap on jobs kept, ended jobs evicted when read, after the retention time, or to make room.
TEST(JobEnergyLedger, JobsBeyondTheCapGoToOverCapUntilAnEndedJobMakesRoom) {
  FakeProc proc;
  for (uint32_t job = 1; job <= 3; ++job) {
    proc.process(job, fmt::format("0::/slurm/job_{}/step_0\n", job));
  }
  const SlurmCgroupResolver resolver(proc.root());
  JobEnergyOptions options;
  options.max_jobs = 2;
  JobEnergyLedger ledger(resolver, options);
  ledger.add(0, split(900, {{1, 100, 30}, {2, 100, 30}, {3, 100, 30}}, 0, 1'000), 0, 1'000);
  EXPECT_EQ(ledger.job_count(), 2u);
  EXPECT_EQ(ledger.totals(0).over_cap_mj, 270u);  // job 3: both places taken by running jobs
  EXPECT_FALSE(ledger.read("3", false));
  // Window 2: job 1 has ended; job 3 takes its place (job 1's energy moves to "released").
  ledger.add(0, split(900, {{2, 1'100, 30}, {3, 1'100, 30}}, 1'000, 2'000), 1'000, 2'000);
  EXPECT_EQ(ledger.job_count(), 2u);
  EXPECT_FALSE(ledger.read("1", false));
  EXPECT_EQ(ledger.read("3", false)->gpus[0].energy_mj, 270u);
  const auto totals = ledger.totals(0);
  EXPECT_EQ(totals.released_mj, 270u);
  EXPECT_EQ(sum_of(totals), 1'800u);
  EXPECT_THROW(JobEnergyLedger(resolver, JobEnergyOptions{0, 1, 1}), Exception);
  EXPECT_THROW(JobEnergyLedger(resolver, JobEnergyOptions{1, 0, 1}), Exception);
}

TEST(JobEnergyLedger, EndedJobsAreForgottenAfterTheRetentionTime) {
  FakeProc proc;
  proc.process(1, kCgroupV2Job42);
  proc.process(2, kCgroupV1Job7);
  const SlurmCgroupResolver resolver(proc.root());
  JobEnergyOptions options;
  options.retention_s = 10;
  JobEnergyLedger ledger(resolver, options);
  ledger.add(0, split(1'000, {{1, 500'000, 50}}, 0, 1'000'000), 0, 1'000'000);
  // Job 7 keeps running; job 42 has ended.
  ledger.add(0, split(1'000, {{2, 1'500'000, 50}}, 1'000'000, 2'000'000), 1'000'000, 2'000'000);
  ledger.expire(11'000'000);  // 10 s after job 42's last sample: kept
  EXPECT_EQ(ledger.job_count(), 2u);
  ledger.expire(11'000'001);
  EXPECT_EQ(ledger.job_count(), 1u);
  EXPECT_FALSE(ledger.read("42", false));
  EXPECT_EQ(ledger.totals(0).released_mj, 500u);
  EXPECT_EQ(sum_of(ledger.totals(0)), 2'000u);
  // Job 7 ended too, but was sampled in the GPU's latest window: it is running, never expired.
  ledger.expire(100'000'000);
  EXPECT_EQ(ledger.job_count(), 1u);
}

TEST(JobEnergyLedger, RememberedProcessesAreBounded) {
  FakeProc proc;
  for (uint32_t pid = 1; pid <= 5; ++pid) {
    proc.process(pid, kCgroupV2Job42);
  }
  const SlurmCgroupResolver resolver(proc.root());
  JobEnergyOptions options;
  options.max_remembered_processes = 3;
  JobEnergyLedger ledger(resolver, options);
  for (uint32_t pid = 1; pid <= 5; ++pid) {
    const uint64_t start_us = uint64_t{pid} * 1'000;
    ledger.add(0, split(100, {{pid, start_us + 500, 10}}, start_us, start_us + 1'000), start_us,
               start_us + 1'000);
    EXPECT_LE(ledger.remembered_processes(), 3u);
  }
  EXPECT_EQ(ledger.read("42", false)->gpus[0].energy_mj, 50u);
}

}  // namespace
}  // namespace joule::measure
