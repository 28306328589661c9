// SPDX-License-Identifier: Apache-2.0
// joule/measure/job_energy.hpp — each job's estimated share of the GPUs it shares with other jobs: the
// per-process shares of process_energy.hpp, mapped to jobs by the processes' cgroups and summed per (job,
// GPU) by a long-running process (joule daemon), since the driver keeps only seconds of process samples and
// a job's prolog and epilog alone cannot compute it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/process_energy.hpp"

namespace joule::measure {

/// Tells which job a process belongs to. Slurm's cgroups are the one mapping joule ships
/// (SlurmCgroupResolver); others (a Kubernetes pod's UID from the same file) plug in here.
class JobResolver {
 public:
  virtual ~JobResolver() = default;
  /// @return the job of process `pid`, or nullopt when it belongs to none; kNotFound when the process is
  /// gone; other errors (kPermissionDenied, kIo, kInvalidArgument) say why its job cannot be read, naming
  /// the file.
  virtual Result<std::optional<std::string>> job_of(uint32_t pid) const = 0;
};

/// @return the Slurm job id in the text of a /proc/PID/cgroup file: the `job_<digits>` component of a
/// cgroup path, as slurmd makes them under cgroup v1 (`4:memory:/slurm/uid_1000/job_42/step_0/task_0`) and
/// v2 (`0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0`); nullopt when no line names a job.
std::optional<std::string> slurm_job_from_cgroup(std::string_view text);

/// Slurm jobs by cgroup: reads `<proc_root>/<pid>/cgroup` (at most 64 KiB).
class SlurmCgroupResolver final : public JobResolver {
 public:
  /// @param proc_root the proc file system ("/proc"; tests give a fake tree).
  explicit SlurmCgroupResolver(std::string proc_root = "/proc") : proc_root_(std::move(proc_root)) {}
  /// @return as JobResolver::job_of(); kNotFound when `<proc_root>/<pid>` is gone, the file's read error
  /// otherwise.
  Result<std::optional<std::string>> job_of(uint32_t pid) const override;

 private:
  std::string proc_root_;
};

/// Longest job id a request may name, characters.
inline constexpr size_t kMaxJobIdChars = 64;

/// @return kInvalidArgument unless `job` is 1 to kMaxJobIdChars characters of letters, digits, '.', '_' and
/// '-' (a Slurm job id is digits); the message quotes a printable excerpt of it.
Result<void> validate_job_id(std::string_view job);

/// Bounds of the accounting: the memory it holds does not grow with the jobs a machine has run.
struct JobEnergyOptions {
  /// Jobs with totals of their own (≥ 1). When a new job appears and all places are taken, the ended job
  /// sampled least recently is forgotten to make room; when none has ended, the new job's energy goes to
  /// "over cap" (never lost).
  size_t max_jobs = 1024;
  /// An ended job (none of its processes sampled in its GPUs' latest windows) is forgotten this long after
  /// it was last sampled, s (> 0), if nobody read it.
  double retention_s = 3600;
  /// Processes whose job is remembered for when their /proc entry is gone (a process that exited with
  /// samples still to count) (≥ 1).
  size_t max_remembered_processes = 4096;
};

/// One job's estimated energy on one GPU.
struct JobGpuEnergy {
  size_t gpu = 0;              ///< the GPU's index (its position in the tracker's list)
  uint64_t energy_mj = 0;      ///< the job's estimated share, mJ
  uint64_t gpu_energy_mj = 0;  ///< the GPU's measured energy over the same span, mJ
  uint64_t start_us = 0;       ///< the span: the start of the first window with the job's samples
  uint64_t end_us = 0;         ///< … and the end of the last one (µs since 1970)
};

/// One job's estimated energy on every GPU it was sampled on.
struct JobEnergy {
  std::string job;
  std::vector<JobGpuEnergy> gpus;  ///< by GPU index
  /// None of its processes was sampled in its GPUs' latest windows (the job has ended, or is idle).
  bool ended = false;
  std::string_view method = kProcessEnergyMethod;  ///< always an estimate
};

/// The split of one GPU's measured energy since the accounting began. The parts add up to measured_mj
/// exactly (whole mJ).
struct GpuJobTotals {
  uint64_t measured_mj = 0;      ///< the GPU's measured energy over every window accounted
  uint64_t jobs_mj = 0;          ///< the jobs kept now
  uint64_t no_job_mj = 0;        ///< processes in no job
  uint64_t unknown_mj = 0;       ///< processes whose job could not be read (exited unseen, unreadable file)
  uint64_t over_cap_mj = 0;      ///< jobs beyond max_jobs
  uint64_t released_mj = 0;      ///< jobs forgotten: read after they ended, or past retention_s
  uint64_t unattributed_mj = 0;  ///< what no process accounts for (ProcessAttribution::unattributed_mj)

  /// Everything that is not a kept job's nor unattributed.
  uint64_t other_mj() const { return no_job_mj + unknown_mj + over_cap_mj + released_mj; }
};

/// Sums per-process splits of GPU windows into per-(job, GPU) totals. Not thread-safe.
class JobEnergyLedger {
 public:
  /// @param resolver tells each process's job (it must outlive this). @throw Exception (kInvalidArgument)
  /// for options out of range.
  explicit JobEnergyLedger(const JobResolver& resolver, JobEnergyOptions options = {});

  /// Adds GPU `gpu`'s split over (start_us, end_us] (µs since 1970): each process's share goes to its job.
  void add(size_t gpu, const ProcessAttribution& window, uint64_t start_us, uint64_t end_us);
  /// Forgets the ended jobs last sampled more than retention_s before `now_us`.
  void expire(uint64_t now_us);
  /// @return job `job`'s figures; kNotFound saying the daemon has no record of it. With `forget_if_ended`,
  /// an ended job is forgotten once read (its energy moves to "released"): an epilog reads it once.
  Result<JobEnergy> read(std::string_view job, bool forget_if_ended);
  /// @return GPU `gpu`'s split (all zero for a GPU never added).
  GpuJobTotals totals(size_t gpu) const;
  /// @return how many jobs have totals now.
  size_t job_count() const { return jobs_.size(); }
  /// @return how many processes' jobs are remembered now.
  size_t remembered_processes() const { return pids_.size(); }
  /// @return the latest error reading a process's job (the window's energy of that process went to
  /// "unknown"), taken: a second call returns nullopt until another error.
  std::optional<Error> take_resolve_error() { return std::exchange(resolve_error_, std::nullopt); }

 private:
  struct PerGpu {
    uint64_t energy_mj = 0;
    uint64_t start_us = 0;         // start of the first window with its samples
    uint64_t end_us = 0;           // end of the last one
    uint64_t measured_before = 0;  // the GPU's measured total before that first window
    uint64_t measured_after = 0;   // … and after the last one
  };
  struct Job {
    std::map<size_t, PerGpu> gpus;
    uint64_t last_sampled_us = 0;
  };
  struct Pid {
    std::optional<std::string> job;
    uint64_t last_used_us = 0;
  };

  // The job of `pid` now, or why not; remembers it for when the process is gone.
  Result<std::optional<std::string>> resolve(uint32_t pid, uint64_t now_us);
  bool ended(const Job& job) const;
  void release(std::map<std::string, Job, std::less<>>::iterator job);
  // Makes room for one more job if an ended one can go. @return whether there is room.
  bool make_room();

  const JobResolver& resolver_;
  JobEnergyOptions options_;
  std::map<std::string, Job, std::less<>> jobs_;
  std::map<size_t, GpuJobTotals> gpus_;
  std::map<size_t, uint64_t> latest_end_us_;  // per GPU: the end of its latest window
  std::map<uint32_t, Pid> pids_;
  std::optional<Error> resolve_error_;
};

/// Runs the accounting on a set of GPUs: update() every few seconds (the driver keeps only seconds of
/// process samples) closes each GPU's window and adds its split; read() answers for a job. GPUs that cannot
/// report process samples (not whole NVIDIA GPUs through NVML, or without an energy counter) are left out,
/// each with the reason. Not thread-safe.
class JobEnergyTracker {
 public:
  /// @param gpus the GPUs, by index (they must outlive the tracker). @param resolver as JobEnergyLedger.
  JobEnergyTracker(std::vector<device::Gpu*> gpus, const JobResolver& resolver,
                   JobEnergyOptions options = {});

  /// Ends every supported GPU's window at `now_us` (µs since 1970), adds its split and starts the next; the
  /// first call only starts them. A window that fails is left out (so are its energy and its measured
  /// total) and that GPU's next window starts at once; the error is kept (take_errors()). Then expires ended
  /// jobs.
  void update(uint64_t now_us);
  /// @return as JobEnergyLedger::read(); a job that is not known says which GPUs are not accounted and why.
  Result<JobEnergy> read(std::string_view job, bool forget_if_ended);
  /// @return the GPUs left out, each with why (after the first update()).
  const std::vector<std::pair<size_t, std::string>>& unsupported() const { return unsupported_; }
  /// @return whether the first update() found at least one GPU to account.
  bool any_supported() const;
  /// @return the errors of the latest update()'s windows and of reading processes' jobs, taken.
  std::vector<Error> take_errors();
  const JobEnergyLedger& ledger() const { return ledger_; }

 private:
  struct Tracked {
    size_t index = 0;
    std::unique_ptr<ProcessEnergyMeter> meter;
    bool open = false;
    uint64_t start_us = 0;
  };

  std::vector<device::Gpu*> gpus_;
  JobEnergyLedger ledger_;
  std::vector<Tracked> tracked_;
  std::vector<std::pair<size_t, std::string>> unsupported_;
  std::vector<Error> errors_;
  bool probed_ = false;
};

}  // namespace joule::measure
