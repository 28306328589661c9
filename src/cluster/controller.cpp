// SPDX-License-Identifier: Apache-2.0
// The cluster autopilot's state machine (joule/cluster/controller.hpp): silent nodes reserved at their
// maximum, deferrable work planned over the forecast by plan_deferrable(), the rest shared by allocate().
#include "joule/cluster/controller.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>

namespace joule::cluster {

std::string to_string(const GpuRef& gpu) {
  return fmt::format("{}:{}", gpu.node, gpu.index);
}

namespace {

constexpr double kSecondsPerHour = 3600;

void check_now(double now_s) {
  if (!std::isfinite(now_s)) {
    throw Exception(ErrorCode::kInvalidArgument, fmt::format("now_s must be a finite time, got {}", now_s));
  }
}

std::string joined(const std::vector<std::string>& names) {
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

Controller::Controller(ControllerOptions options) : options_(options), next_version_(options.first_version) {
  if (!(std::isfinite(options_.node_timeout_s) && options_.node_timeout_s > 0)) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("node_timeout_s must be a positive number of seconds, got {}", options_.node_timeout_s));
  }
}

Result<void> Controller::add_job(JobSpec spec, double now_s) {
  check_now(now_s);
  if (spec.id.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a job has an empty id");
  }
  for (const Job& job : jobs_) {
    if (job.spec.id == spec.id) {
      return fail(ErrorCode::kInvalidArgument, "job '{}' is already registered", spec.id);
    }
  }
  if (spec.gpus.empty()) {
    return fail(ErrorCode::kInvalidArgument, "job '{}' names no GPU", spec.id);
  }
  std::set<GpuRef> named;
  for (const GpuRef& gpu : spec.gpus) {
    if (gpu.node.empty()) {
      return fail(ErrorCode::kInvalidArgument, "job '{}' names a GPU with an empty node name", spec.id);
    }
    if (gpu.index < 0) {
      return fail(ErrorCode::kInvalidArgument, "job '{}' names GPU {}: a GPU index must be ≥ 0", spec.id,
                  to_string(gpu));
    }
    if (!named.insert(gpu).second) {
      return fail(ErrorCode::kInvalidArgument, "job '{}' names GPU {} twice", spec.id, to_string(gpu));
    }
    if (const auto holder = holders_.find(gpu); holder != holders_.end()) {
      return fail(ErrorCode::kInvalidArgument, "job '{}' names GPU {}, which job '{}' holds", spec.id,
                  to_string(gpu), holder->second);
    }
  }
  // The job alone through allocate(): its frontier, priority and SLO floor checks and messages.
  JobDemand demand{.id = spec.id,
                   .kind = spec.kind,
                   .gpus = static_cast<int>(spec.gpus.size()),
                   .priority = spec.priority,
                   .frontier = spec.frontier,
                   .slo_floor_w = spec.slo_floor_w};
  JOULE_TRY(allocate(std::span(&demand, 1), std::numeric_limits<double>::max(), {.exact_work_limit = 0}));
  Job job;
  job.lowest_w = std::numeric_limits<double>::infinity();
  double fastest_s = std::numeric_limits<double>::infinity();
  for (const FrontierPoint& point : spec.frontier) {
    job.lowest_w = std::min(job.lowest_w, point.power_limit_w);
    job.highest_w = std::max(job.highest_w, point.power_limit_w);
    fastest_s = std::min(fastest_s, point.time_s);
  }
  // Full speed: the lowest limit at which it is fastest. Floor: the lowest limit that holds its SLO.
  job.full_speed_w = job.highest_w;
  job.floor_w = spec.slo_floor_w ? job.highest_w : job.lowest_w;
  for (const FrontierPoint& point : spec.frontier) {
    if (point.time_s <= fastest_s) {
      job.full_speed_w = std::min(job.full_speed_w, point.power_limit_w);
    }
    if (spec.slo_floor_w && point.power_limit_w >= *spec.slo_floor_w) {
      job.floor_w = std::min(job.floor_w, point.power_limit_w);
    }
  }
  if (spec.deferrable) {
    if (spec.kind != JobKind::kTraining) {
      return fail(ErrorCode::kInvalidArgument, "job '{}': only training work can be deferrable", spec.id);
    }
    // The job alone through plan_deferrable(): its deadline and remaining time checks and messages.
    const DeferrableWork work{.id = spec.id,
                              .power_w = static_cast<double>(spec.gpus.size()) * job.full_speed_w,
                              .remaining_s = spec.remaining_s,
                              .deadline_s = spec.deadline_s - now_s};
    const ForecastSlot slot{};
    JOULE_TRY(plan_deferrable(std::span(&work, 1), std::span(&slot, 1)));
  }
  for (const GpuRef& gpu : spec.gpus) {
    holders_.emplace(gpu, spec.id);
    last_heard_s_.try_emplace(gpu.node, now_s);
  }
  job.spec = std::move(spec);
  jobs_.push_back(std::move(job));
  return {};
}

Result<void> Controller::remove_job(std::string_view id) {
  const auto job = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.spec.id == id; });
  if (job == jobs_.end()) {
    return fail(ErrorCode::kNotFound, "no job '{}' is registered", id);
  }
  for (const GpuRef& gpu : job->spec.gpus) {
    holders_.erase(gpu);
  }
  jobs_.erase(job);
  return {};
}

Result<void> Controller::update_progress(std::string_view id, double remaining_s) {
  const auto job = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.spec.id == id; });
  if (job == jobs_.end()) {
    return fail(ErrorCode::kNotFound, "no job '{}' is registered", id);
  }
  if (!job->spec.deferrable) {
    return fail(ErrorCode::kInvalidArgument, "job '{}' is not deferrable: its progress is not tracked", id);
  }
  if (!(std::isfinite(remaining_s) && remaining_s >= 0)) {
    return fail(ErrorCode::kInvalidArgument, "job '{}': its remaining time must be ≥ 0 s, got {}", id,
                remaining_s);
  }
  job->spec.remaining_s = remaining_s;
  return {};
}

Result<void> Controller::set_cap(double cap_w) {
  if (!(std::isfinite(cap_w) && cap_w > 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "the cluster power cap must be a positive number of watts, got {}", cap_w);
  }
  cap_w_ = cap_w;
  return {};
}

Result<void> Controller::set_forecast(std::vector<ForecastSlot> slots, double start_s) {
  if (slots.empty()) {
    return fail(ErrorCode::kInvalidArgument, "the carbon forecast has no slot");
  }
  if (!std::isfinite(start_s)) {
    return fail(ErrorCode::kInvalidArgument, "the carbon forecast's start must be a finite time, got {}",
                start_s);
  }
  for (size_t s = 0; s < slots.size(); ++s) {
    if (!(std::isfinite(slots[s].length_s) && slots[s].length_s > 0)) {
      return fail(ErrorCode::kInvalidArgument,
                  "forecast slot {}: its length must be a positive number of s, got {}", s,
                  slots[s].length_s);
    }
    if (!(std::isfinite(slots[s].intensity_g_per_kwh) && slots[s].intensity_g_per_kwh >= 0)) {
      return fail(ErrorCode::kInvalidArgument,
                  "forecast slot {}: its carbon intensity must be a number ≥ 0 gCO2/kWh, got {}", s,
                  slots[s].intensity_g_per_kwh);
    }
    slots[s].available_w = 0;
  }
  forecast_ = std::move(slots);
  forecast_start_s_ = start_s;
  return {};
}

void Controller::clear_forecast() {
  forecast_.clear();
}

Result<void> Controller::heard_from(std::string_view node, double now_s) {
  check_now(now_s);
  if (node.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a node with an empty name cannot be heard from");
  }
  auto [at, inserted] = last_heard_s_.try_emplace(std::string(node), now_s);
  if (!inserted) {
    at->second = std::max(at->second, now_s);
  }
  return {};
}

Result<ClusterDecision> Controller::replan(double now_s) {
  check_now(now_s);
  if (!cap_w_) {
    return fail(ErrorCode::kState, "no cluster power cap is set: call set_cap() before replan()");
  }
  const double cap_w = *cap_w_;
  ClusterDecision decision;
  decision.now_s = now_s;
  decision.cap_w = cap_w;

  // 1. Silent nodes: their GPUs at their job's highest limit, off the cap.
  std::set<std::string, std::less<>> silent;
  for (const auto& [node, heard_s] : last_heard_s_) {
    if (now_s - heard_s > options_.node_timeout_s) {
      silent.insert(node);
    }
  }
  decision.silent_nodes.assign(silent.begin(), silent.end());
  struct State {
    int live_gpus = 0;
    std::vector<std::string> silent_nodes;  // of this job
    bool runs = true;
    bool at_risk = false;
    std::string deferral_reason;
  };
  std::vector<State> states(jobs_.size());
  double floors_w = 0;  // the jobs that cannot wait, at their floors (live GPUs)
  for (size_t j = 0; j < jobs_.size(); ++j) {
    const Job& job = jobs_[j];
    std::set<std::string> nodes;
    for (const GpuRef& gpu : job.spec.gpus) {
      if (silent.contains(gpu.node)) {
        decision.reserved_w += job.highest_w;
        nodes.insert(gpu.node);
      } else {
        ++states[j].live_gpus;
      }
    }
    states[j].silent_nodes.assign(nodes.begin(), nodes.end());
    if (!job.spec.deferrable) {
      floors_w += states[j].live_gpus * job.floor_w;
    }
  }

  // 2. Deferrable work over what is left of the forecast.
  std::vector<ForecastSlot> forecast;
  double slot_start_s = forecast_start_s_;
  for (const ForecastSlot& slot : forecast_) {
    const double end_s = slot_start_s + slot.length_s;
    if (end_s > now_s) {
      ForecastSlot left = slot;
      if (forecast.empty()) {
        // The slot now runs in, from now; before the forecast starts, its first slot's intensity holds.
        left.length_s = end_s - now_s;
      }
      left.available_w = std::max(0.0, cap_w - decision.reserved_w - floors_w);
      forecast.push_back(left);
    }
    slot_start_s = end_s;
  }
  std::vector<DeferrableWork> work;
  std::vector<size_t> planned;  // job index of each work item
  for (size_t j = 0; j < jobs_.size(); ++j) {
    const Job& job = jobs_[j];
    State& state = states[j];
    if (!job.spec.deferrable || state.live_gpus == 0) {
      continue;
    }
    const double until_s = job.spec.deadline_s - now_s;
    if (until_s <= 0) {
      state.at_risk = true;
      state.deferral_reason =
          fmt::format("at risk: its deadline passed {:.0f} s ago, so it runs now", -until_s);
    } else if (forecast.empty()) {
      state.deferral_reason = forecast_.empty() ? "deferrable, no carbon forecast: runs now"
                                                : "deferrable, the carbon forecast has ended: runs now";
    } else {
      work.push_back({.id = job.spec.id,
                      .power_w = state.live_gpus * job.full_speed_w,
                      .remaining_s = job.spec.remaining_s,
                      .deadline_s = until_s});
      planned.push_back(j);
    }
  }
  if (!work.empty()) {
    auto plan = plan_deferrable(work, forecast);
    if (!plan) {
      return tl::make_unexpected(plan.error().with_context("planning the deferrable jobs"));
    }
    for (size_t i = 0; i < planned.size(); ++i) {
      const DeferralDecision& planned_job = plan->jobs[i];
      State& state = states[planned[i]];
      const double until_h = work[i].deadline_s / kSecondsPerHour;
      if (planned_job.at_risk) {
        state.at_risk = true;
        state.deferral_reason = fmt::format(
            "at risk: its deadline in {:.1f} h cannot be met in cleaner hours within the forecast's spare "
            "watts, so it runs now",
            until_h);
      } else if (planned_job.runs_now) {
        state.deferral_reason = fmt::format(
            "deferrable: runs now at {:g} g/kWh, one of the slots its plan takes before its deadline in "
            "{:.1f} h",
            forecast.front().intensity_g_per_kwh, until_h);
      } else if (work[i].remaining_s <= 0) {
        state.runs = false;
        state.deferral_reason = "deferrable with no work left: paused until it is removed";
      } else {
        state.runs = false;
        double start_s = 0;
        size_t first = 0;
        while (first < forecast.size() && planned_job.run_s[first] <= 0) {
          start_s += forecast[first].length_s;
          ++first;
        }
        state.deferral_reason = fmt::format(
            "deferred: cleaner hours before its deadline in {:.1f} h (runs in {:.1f} h at {:g} g/kWh, "
            "against {:g} g/kWh now)",
            until_h, start_s / kSecondsPerHour,
            first < forecast.size() ? forecast[first].intensity_g_per_kwh : 0.0,
            forecast.front().intensity_g_per_kwh);
      }
    }
    decision.deferral = std::move(*plan);
  }

  // 3. The cap less the silent reserve and the paused GPUs, shared among the jobs that run.
  std::vector<JobDemand> demands;
  std::vector<size_t> allocated;  // job index of each demand
  for (size_t j = 0; j < jobs_.size(); ++j) {
    const Job& job = jobs_[j];
    if (states[j].live_gpus == 0) {
      continue;
    }
    if (!states[j].runs) {
      decision.paused_w += states[j].live_gpus * job.lowest_w;
      continue;
    }
    demands.push_back({.id = job.spec.id,
                       .kind = job.spec.kind,
                       .gpus = states[j].live_gpus,
                       .priority = job.spec.priority,
                       .frontier = job.spec.frontier,
                       .slo_floor_w = job.spec.slo_floor_w});
    allocated.push_back(j);
  }
  const double budget_w = cap_w - decision.reserved_w - decision.paused_w;
  const std::string taken_off =
      decision.reserved_w + decision.paused_w > 0
          ? fmt::format(
                "the cap of {:.0f} W less {:.0f} W for silent nodes ({}) and {:.0f} W for paused jobs "
                "leaves {:.0f} W",
                cap_w, decision.reserved_w, silent.empty() ? "none" : joined(decision.silent_nodes),
                decision.paused_w, budget_w)
          : std::string();
  if (budget_w < 0 || (budget_w == 0 && !demands.empty())) {
    double running_lowest_w = 0;
    for (const size_t j : allocated) {
      running_lowest_w += states[j].live_gpus * jobs_[j].lowest_w;
    }
    return fail(
        ErrorCode::kOutOfRange,
        "the cap of {:.0f} W is {:.0f} W short of the silent nodes' reserve ({:.0f} W: {}), the paused "
        "jobs' lowest limits ({:.0f} W) and the running jobs' lowest limits ({:.0f} W): no allocation "
        "holds it",
        cap_w, decision.reserved_w + decision.paused_w + running_lowest_w - cap_w, decision.reserved_w,
        silent.empty() ? "none" : joined(decision.silent_nodes), decision.paused_w, running_lowest_w);
  }
  if (!demands.empty()) {
    auto allocation =
        allocate(demands, budget_w,
                 {.degrade_slos = options_.degrade_slos, .exact_work_limit = options_.exact_work_limit});
    if (!allocation) {
      return tl::make_unexpected(taken_off.empty() ? allocation.error()
                                                   : allocation.error().with_context(taken_off));
    }
    decision.allocation = std::move(*allocation);
  } else {
    decision.allocation.cap_w = std::max(0.0, budget_w);
    decision.allocation.exact = true;
  }
  decision.degraded = decision.allocation.degraded;

  // 4. Every GPU's limit and every job's reason.
  std::vector<const JobAllocation*> share_of(jobs_.size(), nullptr);
  for (size_t i = 0; i < allocated.size(); ++i) {
    share_of[allocated[i]] = &decision.allocation.jobs[i];
  }
  for (size_t j = 0; j < jobs_.size(); ++j) {
    const Job& job = jobs_[j];
    const State& state = states[j];
    const JobAllocation* share = share_of[j];
    JobDecision out;
    out.id = job.spec.id;
    out.kind = job.spec.kind;
    out.paused = state.live_gpus > 0 && !state.runs;
    out.at_risk = state.at_risk;
    std::vector<std::string> parts;
    if (!state.deferral_reason.empty()) {
      parts.push_back(state.deferral_reason);
    }
    if (state.live_gpus == 0) {
      parts.push_back(
          fmt::format("every GPU is on a silent node ({}): counted at {:g} W each until heard from",
                      joined(state.silent_nodes), job.highest_w));
    } else if (out.paused) {
      out.power_limit_w = job.lowest_w;
      out.throughput_loss = 1;
      parts.push_back(fmt::format("paused at {:g} W", job.lowest_w));
    } else {
      out.power_limit_w = share->power_limit_w;
      out.throughput_loss = share->throughput_loss;
      const std::string lost =
          fmt::format("{:.1f}% of its throughput given up", 100 * share->throughput_loss);
      if (share->below_slo_floor) {
        parts.push_back(fmt::format("below its SLO floor of {:g} W at {:g} W (degraded: the cap is short)",
                                    *job.spec.slo_floor_w, share->power_limit_w));
      } else if (job.spec.slo_floor_w && share->power_limit_w <= job.floor_w) {
        parts.push_back(fmt::format("at its SLO floor ({:g} W)", share->power_limit_w));
      } else if (share->throughput_loss <= 1e-12) {
        parts.push_back(fmt::format("at full speed ({:g} W)", share->power_limit_w));
      } else if (share->power_limit_w <= job.lowest_w) {
        parts.push_back(fmt::format("at its lowest limit ({:g} W): {}", share->power_limit_w, lost));
      } else {
        parts.push_back(
            fmt::format("capped at {:g} W of {:g} W: {}", share->power_limit_w, job.full_speed_w, lost));
      }
    }
    if (state.live_gpus > 0 && !state.silent_nodes.empty()) {
      parts.push_back(fmt::format("{} of its GPUs on silent node(s) {} counted at {:g} W each",
                                  static_cast<int>(job.spec.gpus.size()) - state.live_gpus,
                                  joined(state.silent_nodes), job.highest_w));
    }
    out.reason = fmt::format("{}", fmt::join(parts, "; "));
    for (const GpuRef& gpu : job.spec.gpus) {
      GpuLimit limit{
          .gpu = gpu, .job_id = job.spec.id, .power_limit_w = out.power_limit_w, .paused = out.paused};
      if (silent.contains(gpu.node)) {
        limit.power_limit_w = job.highest_w;
        limit.paused = false;
        limit.silent = true;
      } else {
        decision.allocated_w += out.power_limit_w;
      }
      decision.limits.push_back(std::move(limit));
    }
    if (job.spec.deferrable && state.live_gpus > 0) {
      (state.runs ? decision.deferred_running : decision.deferred_waiting).push_back(job.spec.id);
      if (state.at_risk) {
        decision.at_risk.push_back(job.spec.id);
      }
    }
    decision.jobs.push_back(std::move(out));
  }
  std::sort(decision.limits.begin(), decision.limits.end(),
            [](const GpuLimit& a, const GpuLimit& b) { return a.gpu < b.gpu; });
  decision.version = next_version_++;
  return decision;
}

}  // namespace joule::cluster
