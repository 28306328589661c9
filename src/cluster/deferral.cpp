// SPDX-License-Identifier: Apache-2.0
// Deferrable work in the cleanest hours before its deadline (joule/cluster/deferral.hpp).
#include "joule/cluster/deferral.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "joule/core/units.hpp"

namespace joule::cluster {

namespace {

Result<void> check(std::span<const DeferrableWork> work, std::span<const ForecastSlot> forecast) {
  if (forecast.empty()) {
    return fail(ErrorCode::kInvalidArgument, "the carbon forecast has no slot");
  }
  for (size_t s = 0; s < forecast.size(); ++s) {
    const ForecastSlot& slot = forecast[s];
    if (!(std::isfinite(slot.length_s) && slot.length_s > 0) ||
        !(std::isfinite(slot.intensity_g_per_kwh) && slot.intensity_g_per_kwh >= 0) ||
        !(std::isfinite(slot.available_w) && slot.available_w >= 0)) {
      return fail(
          ErrorCode::kInvalidArgument,
          "forecast slot {}: length {} s, intensity {} g/kWh and available power {} W must be positive, "
          "non-negative and non-negative",
          s, slot.length_s, slot.intensity_g_per_kwh, slot.available_w);
    }
  }
  for (const DeferrableWork& job : work) {
    if (!(std::isfinite(job.power_w) && job.power_w > 0)) {
      return fail(ErrorCode::kInvalidArgument,
                  "job '{}': its power must be a positive number of watts, got {}", job.id, job.power_w);
    }
    if (!(std::isfinite(job.remaining_s) && job.remaining_s >= 0)) {
      return fail(ErrorCode::kInvalidArgument, "job '{}': its remaining time must be ≥ 0 s, got {}", job.id,
                  job.remaining_s);
    }
    if (!std::isfinite(job.deadline_s)) {
      return fail(ErrorCode::kInvalidArgument, "job '{}': its deadline is not a number", job.id);
    }
    if (job.deadline_s <= 0) {
      return fail(ErrorCode::kInvalidArgument,
                  "job '{}': its deadline passed {:g} s ago: give a later one, or run it as non-deferrable",
                  job.id, -job.deadline_s);
    }
  }
  return {};
}

// Running time `job` may still get in slot `s`: the slot's length less what it already has there, and the
// watt-seconds left (jobs that do not fit together take turns within the slot).
double room_s(const DeferrableWork& job, const ForecastSlot& slot, double budget_ws, double already_s) {
  if (job.power_w > slot.available_w) {
    return 0;
  }
  return std::max(0.0, std::min(slot.length_s - already_s, budget_ws / job.power_w));
}

struct Schedule {
  std::vector<std::vector<double>> run_s;  // [job][slot]
  std::vector<bool> at_risk;
};

// Gives each job, in order, running time in `slot_order(job)`'s slots, within `before_s` (the job's
// deadline; infinity for no limit).
Schedule schedule(std::span<const DeferrableWork> work, std::span<const ForecastSlot> forecast,
                  const std::vector<size_t>& order, bool cleanest_first) {
  Schedule out;
  out.run_s.assign(work.size(), std::vector<double>(forecast.size(), 0));
  out.at_risk.assign(work.size(), false);
  std::vector<double> budget_ws(forecast.size());
  std::vector<double> slot_start_s(forecast.size());
  double start_s = 0;
  for (size_t s = 0; s < forecast.size(); ++s) {
    budget_ws[s] = forecast[s].available_w * forecast[s].length_s;
    slot_start_s[s] = start_s;
    start_s += forecast[s].length_s;
  }
  std::vector<size_t> by_intensity(forecast.size());
  std::iota(by_intensity.begin(), by_intensity.end(), size_t{0});
  std::stable_sort(by_intensity.begin(), by_intensity.end(), [&](size_t a, size_t b) {
    return forecast[a].intensity_g_per_kwh < forecast[b].intensity_g_per_kwh;
  });
  std::vector<size_t> in_time(forecast.size());
  std::iota(in_time.begin(), in_time.end(), size_t{0});
  const auto give = [&](size_t j, size_t s, double needed_s, double until_s) {
    // Only the part of the slot before `until_s` counts.
    const double usable_s = std::min(forecast[s].length_s, until_s - slot_start_s[s]);
    if (usable_s <= 0) {
      return 0.0;
    }
    const double granted = std::min(
        {needed_s, room_s(work[j], forecast[s], budget_ws[s], out.run_s[j][s]), usable_s - out.run_s[j][s]});
    if (granted <= 0) {
      return 0.0;
    }
    out.run_s[j][s] += granted;
    budget_ws[s] -= granted * work[j].power_w;
    return granted;
  };
  for (const size_t j : order) {
    double needed_s = work[j].remaining_s;
    const std::vector<size_t>& slots = cleanest_first ? by_intensity : in_time;
    const double until_s = cleanest_first ? work[j].deadline_s : start_s;
    for (const size_t s : slots) {
      if (needed_s <= 1e-9) {
        break;
      }
      needed_s -= give(j, s, needed_s, until_s);
    }
    if (needed_s > 1e-9 && cleanest_first) {
      // Not enough before the deadline: at risk, and every slot from now on that has room.
      out.at_risk[j] = true;
      for (size_t s = 0; s < forecast.size() && needed_s > 1e-9; ++s) {
        needed_s -= give(j, s, needed_s, start_s);
      }
    }
    if (needed_s > 1e-9) {
      out.at_risk[j] = true;
    }
  }
  return out;
}

}  // namespace

Result<DeferralPlan> plan_deferrable(std::span<const DeferrableWork> work,
                                     std::span<const ForecastSlot> forecast) {
  JOULE_TRY(check(work, forecast));
  std::vector<size_t> order(work.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return work[a].deadline_s < work[b].deadline_s; });
  const Schedule cleanest = schedule(work, forecast, order, true);
  const Schedule soonest = schedule(work, forecast, order, false);
  const auto carbon_g = [&](const DeferrableWork& job, const std::vector<double>& run_s) {
    double grams = 0;
    for (size_t s = 0; s < forecast.size(); ++s) {
      grams += run_s[s] * job.power_w / kJoulesPerKwh * forecast[s].intensity_g_per_kwh;
    }
    return grams;
  };
  DeferralPlan plan;
  for (size_t j = 0; j < work.size(); ++j) {
    DeferralDecision decision;
    decision.id = work[j].id;
    decision.run_s = cleanest.run_s[j];
    decision.runs_now = decision.run_s.front() > 0;
    decision.at_risk = cleanest.at_risk[j];
    double slot_start_s = 0;
    for (size_t s = 0; s < forecast.size(); ++s) {
      if (decision.run_s[s] > 0) {
        decision.finish_s = slot_start_s + decision.run_s[s];
      }
      slot_start_s += forecast[s].length_s;
    }
    decision.carbon_g = carbon_g(work[j], decision.run_s);
    plan.carbon_g += decision.carbon_g;
    plan.carbon_as_soon_as_possible_g += carbon_g(work[j], soonest.run_s[j]);
    plan.jobs.push_back(std::move(decision));
  }
  return plan;
}

}  // namespace joule::cluster
