// SPDX-License-Identifier: Apache-2.0
// Per-job energy on shared GPUs end to end: measure::JobEnergyTracker over the fake libnvidia-ml.so.1's
// process samples, and `job_energy` through the daemon in-process (DaemonClient and raw lines), with a fake
// /proc tree mapping the processes to Slurm jobs and a virtual clock matching the fake's sample times.
#include "joule/measure/job_energy.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "joule/daemon/daemon.hpp"
#include "joule/device/daemon_client.hpp"
#include "joule/device/nvml.hpp"
#include "joule/device/sim_gpu.hpp"

#include "daemon/line_client.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using namespace std::chrono_literals;
namespace proto = device::daemon_protocol;

// Two jobs share one A100 whose counter advances 100 J a read (probe, begin, end: one 100 J window), over
// four 1 s sample periods: pid 100 (job 42) at 60 % throughout, pid 200 (job 7) at 40 % in the last two;
// pid 300 (no job) at 10 % in the first.
constexpr const char* kSharedGpu = R"(gpu0.name=NVIDIA A100-SXM4-40GB
gpu0.uuid=GPU-00000000-0000-4000-8000-0000000000a1
gpu0.architecture=ampere
gpu0.energy_step_mj=100000
gpu0.process_samples=300@1000000:10,100@1000000:60,100@2000000:60,100@3000000:60,200@3000000:40,100@4000000:60,200@4000000:40
gpu0.running_processes=100,200
)";

class JobEnergyTest : public ::testing::Test {
 public:
  JobEnergyTest() {
    ::chmod(dir.path().c_str(), 0755);
    dir.write("proc/100/cgroup", "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0\n");
    dir.write("proc/200/cgroup", "4:memory:/slurm/uid_1000/job_7/step_batch/task_0\n");
    dir.write("proc/300/cgroup", "0::/user.slice/user-1000.slice/session-3.scope\n");
  }
  ~JobEnergyTest() override { stop(); }
  JobEnergyTest(const JobEnergyTest&) = delete;
  JobEnergyTest& operator=(const JobEnergyTest&) = delete;

 protected:
  // The GPUs belong to the fixture: a daemon still running when a test's body ends (stopped by the
  // destructor) must not outlive them.
  std::vector<std::unique_ptr<device::Gpu>>& open_nvml(const std::string& config) {
    const std::string path = dir.write("nvml.conf", config);
    const ScopedEnv script("JOULE_FAKE_NVML_CONFIG", path.c_str());
    auto gpus = device::open_nvml_gpus(device::NvmlOptions{JOULE_FAKE_NVML_PATH},
                                       *device::parse_visible_devices("CUDA_VISIBLE_DEVICES", nullptr));
    if (!gpus) {
      ADD_FAILURE() << gpus.error().message();
      gpus_.clear();
      return gpus_;
    }
    gpus_ = std::move(*gpus);
    return gpus_;
  }

  void start(std::vector<device::Gpu*> served, daemon::DaemonOptions options = {}) {
    options.socket_path = dir.path() + "/run/joule.sock";
    options.audit_log = dir.path() + "/audit.log";
    options.allow_unprivileged = true;
    options.proc_root = dir.path() + "/proc";
    auto started = daemon::Daemon::start(std::move(served), clock, std::move(options));
    ASSERT_TRUE(started) << started.error().message();
    daemon = std::move(*started);
    thread = std::thread([this] { (void)daemon->run(); });
  }
  void stop() {
    if (daemon) {
      daemon->stop();
      thread.join();
      daemon.reset();
    }
  }
  std::shared_ptr<device::DaemonClient> connect() {
    auto client = device::DaemonClient::connect(dir.path() + "/run/joule.sock");
    if (!client) {
      throw std::runtime_error(client.error().message());
    }
    return *client;
  }

  TempDir dir;
  VirtualClock clock;  // virtual time 0 is 1970: the fake's sample times are µs since then
  std::vector<std::unique_ptr<device::Gpu>> gpus_;  // destroyed after the daemon
  std::unique_ptr<daemon::Daemon> daemon;
  std::thread thread;
};

TEST_F(JobEnergyTest, TrackerSplitsTheSharedGpuAmongJobsAndSaysWhichGpusItCannotSplit) {
  auto& nvml = open_nvml(kSharedGpu);
  ASSERT_EQ(nvml.size(), 1u);
  auto sim = device::sim::open_sim_gpus(*device::sim::parse_spec("1xv100"),
                                        std::shared_ptr<Clock>(std::shared_ptr<Clock>{}, &clock));
  ASSERT_TRUE(sim);
  const measure::SlurmCgroupResolver resolver(dir.path() + "/proc");
  measure::JobEnergyTracker tracker({nvml[0].get(), (*sim)[0].get()}, resolver);
  tracker.update(0);
  tracker.update(4'000'000);
  EXPECT_TRUE(tracker.take_errors().empty());
  const auto job42 = tracker.read("42", false);
  ASSERT_TRUE(job42) << job42.error().message();
  ASSERT_EQ(job42->gpus.size(), 1u);
  EXPECT_EQ(job42->gpus[0].energy_mj, 60'000u);
  EXPECT_EQ(job42->gpus[0].gpu_energy_mj, 100'000u);
  const auto job7 = tracker.read("7", false);
  ASSERT_TRUE(job7);
  EXPECT_EQ(job7->gpus[0].energy_mj, 20'000u);
  const auto totals = tracker.ledger().totals(0);
  EXPECT_EQ(totals.no_job_mj, 2'500u);
  // The shares, the processes of no job and the unattributed rest are the GPU's measured energy, exactly.
  EXPECT_EQ(totals.jobs_mj + totals.other_mj() + totals.unattributed_mj, 100'000u);
  EXPECT_EQ(totals.measured_mj, 100'000u);
  ASSERT_EQ(tracker.unsupported().size(), 1u);
  EXPECT_EQ(tracker.unsupported()[0].first, 1u);
  EXPECT_EQ(tracker.unsupported()[0].second,
            "GPU 0 (Tesla V100-PCIE-32GB (simulated)) does not report per-process utilisation (sim backend): "
            "only whole NVIDIA GPUs do, through NVML");
  JOULE_EXPECT_ERROR(tracker.read("99", false), ErrorCode::kNotFound,
                     "unknown job 99: no process of it has been sampled on a GPU accounted here (it used no "
                     "shared GPU, ran before the accounting began, was read already after it ended, or ended "
                     "more than 3600 s ago); not accounted: GPU 0 (Tesla V100-PCIE-32GB (simulated)) "
                     "does not report per-process utilisation (sim backend): only whole NVIDIA GPUs do, "
                     "through NVML");
}

TEST_F(JobEnergyTest, TheDaemonAnswersAJobsShareEndToEnd) {
  auto& nvml = open_nvml(kSharedGpu);
  ASSERT_EQ(nvml.size(), 1u);
  start({nvml[0].get()});  // its first window starts at 0
  EXPECT_EQ(
      daemon->job_energy_description(),
      "job energy of shared GPUs: 1 GPU of 1 split among jobs every 2 s (process samples, Slurm cgroups)");
  auto client = connect();
  clock.advance(4s);
  const auto answer = client->job_energy("42");  // closes the window at 4 s
  ASSERT_TRUE(answer) << answer.error().message();
  EXPECT_EQ(answer->job, "42");
  EXPECT_TRUE(answer->estimated);
  EXPECT_EQ(answer->method, "nvml process utilisation samples");
  ASSERT_EQ(answer->gpus.size(), 1u);
  EXPECT_EQ(answer->gpus[0].gpu, 0);
  EXPECT_EQ(answer->gpus[0].uuid, "GPU-00000000-0000-4000-8000-0000000000a1");
  EXPECT_EQ(answer->gpus[0].energy_mj, 60'000u);
  EXPECT_EQ(answer->gpus[0].gpu_energy_mj, 100'000u);
  EXPECT_EQ(answer->gpus[0].start_ms, 0);
  EXPECT_EQ(answer->gpus[0].end_ms, 4'000);
  EXPECT_TRUE(answer->not_accounted.empty());
  const auto other = client->job_energy("7");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->gpus[0].energy_mj, 20'000u);
  EXPECT_EQ(answer->gpus[0].energy_mj + other->gpus[0].energy_mj, 80'000u);  // the rest: no job, idle

  // Bad input: an unknown job, a malformed id, a wrong type.
  const auto unknown = client->job_energy("4242");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(unknown.error().message(),
            "joule daemon: unknown job 4242: no process of it has been sampled on a GPU accounted here (it "
            "used no shared GPU, ran before the accounting began, was read already after it ended, or ended "
            "more than 3600 s ago)");
  JOULE_EXPECT_ERROR(client->job_energy("42; rm -rf /"), ErrorCode::kInvalidArgument,
                     "joule daemon: job id \"42; rm -rf /\" is not one: expected 1 to 64 letters, digits, "
                     "'.', '_' or '-' (a Slurm job id, e.g. 4242)");
  LineClient raw(dir.path() + "/run/joule.sock");
  (void)raw.request(R"({"id":1,"op":"hello","protocol":1})");
  const auto typed = raw.request(R"({"id":2,"op":"job_energy","job":42})");
  EXPECT_EQ(typed["error"]["message"],
            "job_energy: field 'job' must be a job id, a string of at most 256 bytes (got 42)");
  const auto missing = raw.request(R"({"id":3,"op":"job_energy"})");
  EXPECT_EQ(missing["error"]["message"],
            "job_energy: missing field 'job' (a job id, a string (a Slurm job id))");
}

TEST_F(JobEnergyTest, AnEndedJobIsForgottenOnceRootReadsItButNotWhenAnotherUserDoes) {
  // Window 2 (4–8 s) has no sample: both jobs have ended.
  auto& nvml = open_nvml(kSharedGpu);
  ASSERT_EQ(nvml.size(), 1u);
  start({nvml[0].get()});
  auto client = connect();
  clock.advance(4s);
  ASSERT_TRUE(client->job_energy("7"));
  clock.advance(4s);
  // Another user reads the ended job: it stays for the epilog.
  std::thread as_nobody([&] {
    if (::syscall(SYS_setresuid, -1, 65534, -1) != 0) {
      return;  // not root: nothing to check here
    }
    auto reader = device::DaemonClient::connect(dir.path() + "/run/joule.sock");
    ASSERT_TRUE(reader) << reader.error().message();
    const auto seen = (*reader)->job_energy("42");
    ASSERT_TRUE(seen) << seen.error().message();
    EXPECT_TRUE(seen->ended);
    reader->reset();
    ASSERT_EQ(::syscall(SYS_setresuid, -1, 0, -1), 0);
  });
  as_nobody.join();
  const auto last = client->job_energy("42");  // root: the epilog's read
  ASSERT_TRUE(last) << last.error().message();
  EXPECT_TRUE(last->ended);
  EXPECT_EQ(last->gpus[0].energy_mj, 60'000u);
  EXPECT_EQ(last->gpus[0].end_ms, 4'000);
  const auto again = client->job_energy("42");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code(), ErrorCode::kNotFound);
}

TEST_F(JobEnergyTest, WithoutProcessSamplesOrWhenOffTheDaemonSaysWhy) {
  auto sim = device::sim::open_sim_gpus(*device::sim::parse_spec("1xv100"),
                                        std::shared_ptr<Clock>(std::shared_ptr<Clock>{}, &clock));
  ASSERT_TRUE(sim);
  start({(*sim)[0].get()});
  EXPECT_EQ(daemon->job_energy_description(),
            "job energy of shared GPUs: not accounted: GPU 0 (Tesla V100-PCIE-32GB (simulated)) does not "
            "report per-process utilisation (sim backend): only whole NVIDIA GPUs do, through NVML");
  JOULE_EXPECT_ERROR(connect()->job_energy("42"), ErrorCode::kNotSupported,
                     "joule daemon: no GPU of this daemon reports per-process samples, so a job's share of a "
                     "shared GPU cannot be estimated: GPU 0 (Tesla V100-PCIE-32GB (simulated)) does not "
                     "report per-process utilisation (sim backend): only whole NVIDIA GPUs do, through NVML");
  stop();
  daemon::DaemonOptions off;
  off.job_energy_period_s = 0;
  start({(*sim)[0].get()}, off);
  EXPECT_EQ(daemon->job_energy_description(), "job energy of shared GPUs: off (--job-energy-period-s 0)");
  JOULE_EXPECT_ERROR(connect()->job_energy("42"), ErrorCode::kNotSupported,
                     "joule daemon: this daemon does not account the energy of jobs on shared GPUs: it was "
                     "started with --job-energy-period-s 0");
  stop();
  daemon::DaemonOptions wrong;
  wrong.job_energy_period_s = 61;
  wrong.socket_path = dir.path() + "/run/joule.sock";
  JOULE_EXPECT_ERROR(daemon::Daemon::start({(*sim)[0].get()}, clock, wrong), ErrorCode::kInvalidArgument,
                     "--job-energy-period-s 61 must be from 0 (off) to 60 (the driver keeps only seconds of "
                     "process samples)");
}

}  // namespace
}  // namespace joule::test
