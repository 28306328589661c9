// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/process_energy.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

namespace joule::measure {

Result<ProcessAttribution> attribute_energy_by_process(
    uint64_t energy_mj, std::span<const device::ProcessUtilizationSample> samples, uint64_t start_us,
    uint64_t end_us) {
  if (end_us <= start_us) {
    return fail(ErrorCode::kInvalidArgument,
                "per-process energy: the window ends at {} µs, not after it starts at {} µs", end_us,
                start_us);
  }
  // SM percentages by time, then by process: one value per (time, process).
  std::map<uint64_t, std::map<uint32_t, uint32_t>> by_time;
  for (const auto& sample : samples) {
    if (sample.sm_pct > 100) {
      return fail(ErrorCode::kInvalidArgument,
                  "per-process energy: process {}'s SM utilisation sample at {} µs is {} %, over 100 %",
                  sample.pid, sample.time_us, sample.sm_pct);
    }
    if (sample.time_us <= start_us || sample.time_us > end_us) {
      continue;
    }
    auto [slot, inserted] = by_time[sample.time_us].emplace(sample.pid, sample.sm_pct);
    if (!inserted && slot->second != sample.sm_pct) {
      return fail(
          ErrorCode::kInvalidArgument,
          "per-process energy: process {} has two different SM utilisation samples at {} µs ({} % and "
          "{} %)",
          sample.pid, sample.time_us, slot->second, sample.sm_pct);
    }
  }
  const double window_us = static_cast<double>(end_us - start_us);
  double period_us = window_us;
  for (auto it = by_time.begin(); it != by_time.end() && std::next(it) != by_time.end(); ++it) {
    period_us = std::min(period_us, static_cast<double>(std::next(it)->first - it->first));
  }
  const double periods = std::max(static_cast<double>(by_time.size()), window_us / period_us);

  std::map<uint32_t, double> weight;  // Σ SM % per process, overlaps scaled to 100 % a period
  for (const auto& [time_us, processes] : by_time) {
    double total = 0;
    for (const auto& [pid, sm_pct] : processes) {
      total += sm_pct;
    }
    const double scale = total > 100 ? 100 / total : 1;
    for (const auto& [pid, sm_pct] : processes) {
      weight[pid] += sm_pct * scale;
    }
  }
  ProcessAttribution attribution;
  attribution.energy_mj = energy_mj;
  uint64_t given_mj = 0;
  for (const auto& [pid, total_pct] : weight) {
    const double share = std::clamp(total_pct / (100 * periods), 0.0, 1.0);
    auto share_mj = static_cast<uint64_t>(std::floor(static_cast<double>(energy_mj) * share));
    share_mj = std::min(share_mj, energy_mj - given_mj);  // never more than is left, whatever the rounding
    given_mj += share_mj;
    attribution.processes.push_back({pid, share_mj, share});
  }
  attribution.unattributed_mj = energy_mj - given_mj;
  return attribution;
}

Result<void> ProcessEnergyMeter::begin(uint64_t now_us) {
  if (!gpu_.info().has_energy_counter) {
    return fail(ErrorCode::kNotSupported,
                "per-process energy on {} needs an energy counter: its measured total is what is split",
                gpu_.label());
  }
  start_energy_mj_ = JOULE_TRY(gpu_.energy_mj());
  start_us_ = now_us;
  last_seen_us_ = now_us;
  samples_.clear();
  open_ = true;
  return {};
}

Result<void> ProcessEnergyMeter::poll() {
  if (!open_) {
    return fail(ErrorCode::kState, "per-process energy on {}: poll() outside a window", gpu_.label());
  }
  auto fresh = JOULE_TRY(device::nvml_process_utilization(gpu_, last_seen_us_));
  for (const auto& sample : fresh) {
    last_seen_us_ = std::max(last_seen_us_, sample.time_us);
    samples_.push_back(sample);
  }
  return {};
}

Result<ProcessAttribution> ProcessEnergyMeter::end(uint64_t now_us) {
  if (!open_) {
    return fail(ErrorCode::kState, "per-process energy on {}: end() outside a window", gpu_.label());
  }
  auto polled = poll();
  open_ = false;  // closed whatever the final poll gave
  JOULE_TRY(std::move(polled));
  const uint64_t end_energy_mj = JOULE_TRY(gpu_.energy_mj());
  if (end_energy_mj < start_energy_mj_) {
    return fail(ErrorCode::kDevice,
                "per-process energy on {}: the energy counter went back from {} mJ to {} mJ (the driver "
                "reloaded?); the window is not measurable",
                gpu_.label(), start_energy_mj_, end_energy_mj);
  }
  return attribute_energy_by_process(end_energy_mj - start_energy_mj_, samples_, start_us_, now_us);
}

ProcessEnergyTotals::ProcessEnergyTotals(device::Gpu& gpu, size_t max_processes)
    : meter_(gpu), gpu_(gpu), max_processes_(max_processes) {
  if (max_processes_ == 0) {
    throw Exception(ErrorCode::kInvalidArgument, "ProcessEnergyTotals: max_processes must be at least 1");
  }
}

Result<void> ProcessEnergyTotals::update(uint64_t now_us) {
  if (!started_) {
    JOULE_TRY(meter_.begin(now_us));
    started_ = true;
    return {};
  }
  auto window = meter_.end(now_us);
  if (auto restarted = meter_.begin(now_us); !restarted) {
    started_ = false;
  }
  if (!window) {
    return tl::make_unexpected(window.error());
  }
  unattributed_mj_ += window->unattributed_mj;
  std::vector<uint32_t> sampled;
  for (const auto& process : window->processes) {
    sampled.push_back(process.pid);
    auto known = std::find_if(by_pid_.begin(), by_pid_.end(),
                              [&](const auto& entry) { return entry.first == process.pid; });
    if (known != by_pid_.end()) {
      known->second += process.energy_mj;
    } else if (by_pid_.size() < max_processes_) {
      by_pid_.emplace_back(process.pid, process.energy_mj);
    } else {
      other_mj_ += process.energy_mj;
    }
  }
  // Exited processes fold into "exited", freeing their place; a process list that cannot be read keeps all.
  if (const auto running = device::nvml_compute_processes(gpu_)) {
    std::erase_if(by_pid_, [&](const auto& entry) {
      const bool gone = std::find(running->begin(), running->end(), entry.first) == running->end() &&
                        std::find(sampled.begin(), sampled.end(), entry.first) == sampled.end();
      if (gone) {
        exited_mj_ += entry.second;
      }
      return gone;
    });
  }
  return {};
}

std::vector<ProcessEnergyTotals::Total> ProcessEnergyTotals::totals() const {
  std::vector<Total> out;
  for (const auto& [pid, energy_mj] : by_pid_) {
    out.push_back({std::to_string(pid), energy_mj});
  }
  out.push_back({"other", other_mj_});
  out.push_back({"exited", exited_mj_});
  out.push_back({"unattributed", unattributed_mj_});
  return out;
}

}  // namespace joule::measure
