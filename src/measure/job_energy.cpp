// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/job_energy.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "joule/core/file.hpp"
#include "joule/core/strings.hpp"
#include "joule/device/nvml.hpp"

namespace joule::measure {

namespace {

// A /proc/PID/cgroup file is a few hundred bytes; more is not one.
constexpr ReadLimit kCgroupFile{"cgroup file", size_t{64} * 1024};

bool is_job_id_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '_' ||
         c == '-';
}

}  // namespace

std::optional<std::string> slurm_job_from_cgroup(std::string_view text) {
  // Each line is "hierarchy-id:controllers:path"; the path is after the second ':'.
  while (!text.empty()) {
    const size_t newline = text.find('\n');
    std::string_view line = text.substr(0, newline);
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    const size_t first = line.find(':');
    const size_t second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) {
      continue;
    }
    std::string_view path = line.substr(second + 1);
    while (!path.empty()) {
      const size_t slash = path.find('/');
      const std::string_view component = path.substr(0, slash);
      path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
      constexpr std::string_view kPrefix = "job_";
      if (component.size() > kPrefix.size() && component.substr(0, kPrefix.size()) == kPrefix) {
        const std::string_view id = component.substr(kPrefix.size());
        if (id.size() <= kMaxJobIdChars &&
            std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          return std::string(id);
        }
      }
    }
  }
  return std::nullopt;
}

Result<std::optional<std::string>> SlurmCgroupResolver::job_of(uint32_t pid) const {
  const std::string path = fmt::format("{}/{}/cgroup", proc_root_, pid);
  auto text = read_text_file(path, kCgroupFile);
  if (!text) {
    if (text.error().code() == ErrorCode::kNotFound) {
      return fail(ErrorCode::kNotFound, "process {} is gone ({} does not exist)", pid, path);
    }
    return fail(text.error().code(), "cannot tell the job of process {}: {}", pid, text.error().message());
  }
  return slurm_job_from_cgroup(*text);
}

Result<void> validate_job_id(std::string_view job) {
  if (job.empty() || job.size() > kMaxJobIdChars || !std::all_of(job.begin(), job.end(), is_job_id_char)) {
    return fail(ErrorCode::kInvalidArgument,
                "job id {} is not one: expected 1 to {} letters, digits, '.', '_' or '-' (a Slurm job id, "
                "e.g. 4242)",
                quoted_excerpt(job), kMaxJobIdChars);
  }
  return {};
}

// ---- JobEnergyLedger -------------------------------------------------------------------------------------

JobEnergyLedger::JobEnergyLedger(const JobResolver& resolver, JobEnergyOptions options)
    : resolver_(resolver), options_(options) {
  if (options_.max_jobs == 0 || options_.max_remembered_processes == 0) {
    throw Exception(ErrorCode::kInvalidArgument,
                    "JobEnergyLedger: max_jobs and max_remembered_processes must be at least 1");
  }
  if (!(options_.retention_s > 0) || !std::isfinite(options_.retention_s)) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("JobEnergyLedger: retention_s {} must be above 0", options_.retention_s));
  }
}

Result<std::optional<std::string>> JobEnergyLedger::resolve(uint32_t pid, uint64_t now_us) {
  auto job = resolver_.job_of(pid);
  auto known = pids_.find(pid);
  if (job) {
    // Read afresh each window: a PID can be reused by a process of another job.
    if (known == pids_.end()) {
      if (pids_.size() >= options_.max_remembered_processes) {
        // The process used least recently goes.
        const auto oldest = std::min_element(pids_.begin(), pids_.end(), [](const auto& a, const auto& b) {
          return a.second.last_used_us < b.second.last_used_us;
        });
        pids_.erase(oldest);
      }
      known = pids_.emplace(pid, Pid{}).first;
    }
    known->second = Pid{*job, now_us};
    return job;
  }
  if (job.error().code() == ErrorCode::kNotFound && known != pids_.end()) {
    // Gone, with samples still to count: the job it was in when it was last read.
    known->second.last_used_us = now_us;
    return known->second.job;
  }
  return tl::make_unexpected(job.error());
}

void JobEnergyLedger::add(size_t gpu, const ProcessAttribution& window, uint64_t start_us, uint64_t end_us) {
  GpuJobTotals& totals = gpus_[gpu];
  const uint64_t measured_before = totals.measured_mj;
  totals.measured_mj += window.energy_mj;
  totals.unattributed_mj += window.unattributed_mj;
  latest_end_us_[gpu] = end_us;
  for (const auto& process : window.processes) {
    auto job = resolve(process.pid, end_us);
    if (!job) {
      resolve_error_ = job.error();
      totals.unknown_mj += process.energy_mj;
      continue;
    }
    if (!*job) {
      totals.no_job_mj += process.energy_mj;
      continue;
    }
    auto found = jobs_.find(**job);
    if (found == jobs_.end()) {
      if (!make_room()) {
        totals.over_cap_mj += process.energy_mj;
        continue;
      }
      found = jobs_.emplace(**job, Job{}).first;
    }
    Job& entry = found->second;
    entry.last_sampled_us = std::max(entry.last_sampled_us, end_us);
    auto [per_gpu, first] = entry.gpus.try_emplace(gpu);
    if (first) {
      per_gpu->second.start_us = start_us;
      per_gpu->second.measured_before = measured_before;
    }
    per_gpu->second.energy_mj += process.energy_mj;
    per_gpu->second.end_us = end_us;
    per_gpu->second.measured_after = totals.measured_mj;
    totals.jobs_mj += process.energy_mj;
  }
  // Processes not sampled lately are not remembered for ever.
  std::erase_if(pids_, [&](const auto& entry) {
    return static_cast<double>(end_us - std::min(end_us, entry.second.last_used_us)) >
           options_.retention_s * 1e6;
  });
}

bool JobEnergyLedger::ended(const Job& job) const {
  return std::all_of(job.gpus.begin(), job.gpus.end(), [&](const auto& entry) {
    const auto latest = latest_end_us_.find(entry.first);
    return latest != latest_end_us_.end() && latest->second > entry.second.end_us;
  });
}

void JobEnergyLedger::release(std::map<std::string, Job, std::less<>>::iterator job) {
  for (const auto& [gpu, per_gpu] : job->second.gpus) {
    GpuJobTotals& totals = gpus_[gpu];
    totals.jobs_mj -= per_gpu.energy_mj;
    totals.released_mj += per_gpu.energy_mj;
  }
  jobs_.erase(job);
}

bool JobEnergyLedger::make_room() {
  if (jobs_.size() < options_.max_jobs) {
    return true;
  }
  auto oldest = jobs_.end();
  for (auto it = jobs_.begin(); it != jobs_.end(); ++it) {
    if (ended(it->second) &&
        (oldest == jobs_.end() || it->second.last_sampled_us < oldest->second.last_sampled_us)) {
      oldest = it;
    }
  }
  if (oldest == jobs_.end()) {
    return false;
  }
  release(oldest);
  return true;
}

void JobEnergyLedger::expire(uint64_t now_us) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    const auto next = std::next(it);
    const double idle_s = static_cast<double>(now_us - std::min(now_us, it->second.last_sampled_us)) / 1e6;
    if (ended(it->second) && idle_s > options_.retention_s) {
      release(it);
    }
    it = next;
  }
}

Result<JobEnergy> JobEnergyLedger::read(std::string_view job, bool forget_if_ended) {
  JOULE_TRY(validate_job_id(job));
  const auto found = jobs_.find(job);
  if (found == jobs_.end()) {
    return fail(ErrorCode::kNotFound,
                "unknown job {}: no process of it has been sampled on a GPU accounted here (it used no "
                "shared GPU, ran before the accounting began, was read already after it ended, or ended "
                "more than {} s ago)",
                job, options_.retention_s);
  }
  JobEnergy out;
  out.job = std::string(job);
  out.ended = ended(found->second);
  for (const auto& [gpu, per_gpu] : found->second.gpus) {
    out.gpus.push_back({gpu, per_gpu.energy_mj, per_gpu.measured_after - per_gpu.measured_before,
                        per_gpu.start_us, per_gpu.end_us});
  }
  if (forget_if_ended && out.ended) {
    release(found);
  }
  return out;
}

GpuJobTotals JobEnergyLedger::totals(size_t gpu) const {
  const auto found = gpus_.find(gpu);
  return found == gpus_.end() ? GpuJobTotals{} : found->second;
}

// ---- JobEnergyTracker ------------------------------------------------------------------------------------

JobEnergyTracker::JobEnergyTracker(std::vector<device::Gpu*> gpus, const JobResolver& resolver,
                                   JobEnergyOptions options)
    : gpus_(std::move(gpus)), ledger_(resolver, options) {}

void JobEnergyTracker::update(uint64_t now_us) {
  if (!probed_) {
    probed_ = true;
    for (size_t i = 0; i < gpus_.size(); ++i) {
      device::Gpu& gpu = *gpus_[i];
      // Whether the driver reports process samples at all, before any window: the answer does not change.
      if (!gpu.info().has_energy_counter) {
        unsupported_.emplace_back(
            i, fmt::format("{} has no energy counter: per-job shares split a measured total", gpu.label()));
        continue;
      }
      if (auto samples = device::nvml_process_utilization(gpu, now_us);
          !samples && samples.error().code() == ErrorCode::kNotSupported) {
        unsupported_.emplace_back(i, samples.error().message());
        continue;
      }
      tracked_.push_back(Tracked{i, std::make_unique<ProcessEnergyMeter>(gpu), false, 0});
    }
  }
  for (auto& tracked : tracked_) {
    if (tracked.open && now_us <= tracked.start_us) {
      continue;  // no time has passed (a clock that stands still): the window stays open
    }
    if (tracked.open) {
      auto window = tracked.meter->end(now_us);
      tracked.open = false;
      if (window) {
        ledger_.add(tracked.index, *window, tracked.start_us, now_us);
      } else {
        errors_.push_back(window.error());
      }
    }
    if (auto begun = tracked.meter->begin(now_us); begun) {
      tracked.open = true;
      tracked.start_us = now_us;
    } else {
      errors_.push_back(begun.error());
    }
  }
  ledger_.expire(now_us);
  if (auto error = ledger_.take_resolve_error()) {
    errors_.push_back(std::move(*error));
  }
}

bool JobEnergyTracker::any_supported() const {
  return !tracked_.empty();
}

Result<JobEnergy> JobEnergyTracker::read(std::string_view job, bool forget_if_ended) {
  auto figures = ledger_.read(job, forget_if_ended);
  if (!figures && figures.error().code() == ErrorCode::kNotFound && !unsupported_.empty()) {
    std::vector<std::string> reasons;
    for (const auto& entry : unsupported_) {
      reasons.push_back(entry.second);  // each names its GPU
    }
    return fail(ErrorCode::kNotFound, "{}; not accounted: {}", figures.error().message(),
                fmt::join(reasons, "; "));
  }
  return figures;
}

std::vector<Error> JobEnergyTracker::take_errors() {
  return std::exchange(errors_, {});
}

}  // namespace joule::measure
