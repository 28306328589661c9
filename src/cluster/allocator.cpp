// SPDX-License-Identifier: Apache-2.0
// The cluster power allocator (joule/cluster/allocator.hpp): frontiers reduced to their lower convex hulls,
// watts given greedily by throughput gained per watt, inference SLO floors first, then the leftover filled.
#include "joule/cluster/allocator.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace joule::cluster {

std::string_view to_string(JobKind kind) {
  return kind == JobKind::kInference ? "inference" : "training";
}

namespace {

// A GPU draws between a few watts and a kilowatt or two: a frontier outside [1 W, 5 kW] per GPU is almost
// surely in mW or kW.
constexpr double kMinPlausibleLimitW = 1;
constexpr double kMaxPlausibleLimitW = 5000;
// Measured frontiers are noisy: a point slower than a lower limit's by up to this share is dropped as noise;
// by more, the frontier is refused as taken in the wrong order or units.
constexpr double kRisingTimeTolerance = 0.10;

struct Point {
  double power_limit_w;
  double time_s;
  double cost;  // priority · gpus · (1 − t_max / t)
};

struct Prepared {
  std::vector<Point> points;  // ascending limit, strictly falling time (the Pareto points)
  size_t floor = 0;           // the lowest point the job may run at
  size_t slo_floor = 0;       // the lowest point that holds its SLO (inference), else `floor`
  std::vector<size_t> hull;   // lower convex hull of (limit, cost) from `floor` up, as indices into points
  size_t at_hull = 0;         // position in `hull` of the point allocated so far
  size_t at = 0;              // the point allocated so far
};

Result<void> check_job(const JobDemand& job, std::set<std::string>& ids) {
  if (job.id.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a job has an empty id");
  }
  if (!ids.insert(job.id).second) {
    return fail(ErrorCode::kInvalidArgument, "job '{}' is given twice", job.id);
  }
  if (job.gpus < 1) {
    return fail(ErrorCode::kInvalidArgument, "job '{}': gpus must be at least 1, got {}", job.id, job.gpus);
  }
  if (!(std::isfinite(job.priority) && job.priority > 0)) {
    return fail(ErrorCode::kInvalidArgument, "job '{}': priority must be a positive number, got {}", job.id,
                job.priority);
  }
  if (job.frontier.empty()) {
    return fail(ErrorCode::kInvalidArgument, "job '{}' has no frontier point", job.id);
  }
  for (const FrontierPoint& point : job.frontier) {
    if (!(std::isfinite(point.power_limit_w) && point.power_limit_w > 0 && std::isfinite(point.time_s) &&
          point.time_s > 0)) {
      return fail(ErrorCode::kInvalidArgument,
                  "job '{}': a frontier point has power limit {} W and time {} s; both must be positive",
                  job.id, point.power_limit_w, point.time_s);
    }
    if (point.power_limit_w < kMinPlausibleLimitW || point.power_limit_w > kMaxPlausibleLimitW) {
      return fail(ErrorCode::kInvalidArgument,
                  "job '{}': a frontier point's power limit of {} W per GPU is outside {}–{} W: is it in {}?",
                  job.id, point.power_limit_w, kMinPlausibleLimitW, kMaxPlausibleLimitW,
                  point.power_limit_w > kMaxPlausibleLimitW ? "mW" : "kW");
    }
  }
  return {};
}

Result<Prepared> prepare(const JobDemand& job) {
  std::vector<FrontierPoint> sorted = job.frontier;
  std::sort(sorted.begin(), sorted.end(), [](const FrontierPoint& a, const FrontierPoint& b) {
    return std::tie(a.power_limit_w, a.time_s) < std::tie(b.power_limit_w, b.time_s);
  });
  Prepared prepared;
  double fastest_s = sorted.front().time_s;
  for (const FrontierPoint& point : sorted) {
    if (point.time_s > fastest_s * (1 + kRisingTimeTolerance)) {
      return fail(
          ErrorCode::kInvalidArgument,
          "job '{}': its frontier is not monotone: {} s at {} W is {:.0f}% slower than {} s at a lower "
          "limit (time must not rise with the power limit; are the columns swapped?)",
          job.id, point.time_s, point.power_limit_w, (point.time_s / fastest_s - 1) * 100, fastest_s);
    }
    if (point.time_s < fastest_s || prepared.points.empty()) {
      if (!prepared.points.empty() && prepared.points.back().power_limit_w == point.power_limit_w) {
        continue;  // the same limit twice: the faster (first after sorting) stays
      }
      prepared.points.push_back({point.power_limit_w, point.time_s, 0});
      fastest_s = point.time_s;
    }
  }
  const double weight = job.priority * job.gpus;
  for (Point& point : prepared.points) {
    point.cost = weight * (1 - fastest_s / point.time_s);
  }
  if (job.slo_floor_w) {
    const double floor_w = *job.slo_floor_w;
    if (!(floor_w >= sorted.front().power_limit_w && floor_w <= sorted.back().power_limit_w)) {
      return fail(ErrorCode::kInvalidArgument,
                  "job '{}': its SLO floor of {} W is outside its frontier's {}–{} W", job.id, floor_w,
                  sorted.front().power_limit_w, sorted.back().power_limit_w);
    }
    // The lowest point at or above the floor (the points are a subset of the limits given).
    while (prepared.slo_floor + 1 < prepared.points.size() &&
           prepared.points[prepared.slo_floor].power_limit_w < floor_w) {
      ++prepared.slo_floor;
    }
  }
  return prepared;
}

// The lower convex hull of (limit, cost) from `from` up: the gain per watt falls along it.
std::vector<size_t> lower_hull(const std::vector<Point>& points, size_t from) {
  std::vector<size_t> hull;
  for (size_t i = from; i < points.size(); ++i) {
    while (hull.size() >= 2) {
      const Point& a = points[hull[hull.size() - 2]];
      const Point& b = points[hull.back()];
      const Point& c = points[i];
      // (b − a) × (c − a) > 0: a left turn, b lies below the chord a–c and stays. On the chord it stays too
      // (equal gain per watt either way, and finer steps fit a cap better); above it, it goes.
      const double left = (b.power_limit_w - a.power_limit_w) * (c.cost - a.cost);
      const double right = (b.cost - a.cost) * (c.power_limit_w - a.power_limit_w);
      // Rounding must not drop a point that is on the chord.
      if (left - right >= -1e-12 * (std::abs(left) + std::abs(right))) {
        break;
      }
      hull.pop_back();
    }
    hull.push_back(i);
  }
  return hull;
}

// The discrete optimum by dynamic programming over the jobs: after each job, the (watts, loss) states that no
// other state beats on both. @return each job's point, or nothing once `work_limit` (state, point) pairs were
// weighed.
std::optional<std::vector<size_t>> exact_points(std::span<const JobDemand> jobs,
                                                const std::vector<Prepared>& prepared, double cap_w,
                                                size_t work_limit) {
  size_t work = 0;
  struct State {
    double watts;
    double loss;
    uint32_t previous;  // index into the previous step's states
    uint32_t point;     // the job's point that led here
  };
  std::vector<std::vector<State>> steps;
  steps.push_back({{0, 0, 0, 0}});
  std::vector<State> next;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Prepared& job = prepared[j];
    const std::vector<State>& states = steps.back();
    next.clear();
    for (size_t s = 0; s < states.size(); ++s) {
      for (size_t k = job.floor; k < job.points.size(); ++k) {
        const double watts = states[s].watts + jobs[j].gpus * job.points[k].power_limit_w;
        if (watts > cap_w + 1e-9) {
          break;
        }
        next.push_back(
            {watts, states[s].loss + job.points[k].cost, static_cast<uint32_t>(s), static_cast<uint32_t>(k)});
      }
      work += job.points.size() - job.floor;
      if (work > work_limit) {
        return std::nullopt;
      }
    }
    std::sort(next.begin(), next.end(), [](const State& a, const State& b) {
      return std::tie(a.watts, a.loss) < std::tie(b.watts, b.loss);
    });
    std::vector<State> kept;
    for (const State& state : next) {
      if (kept.empty() || state.loss < kept.back().loss - 1e-12) {
        kept.push_back(state);
      }
    }
    if (kept.empty()) {
      return std::nullopt;
    }
    steps.push_back(std::move(kept));
  }
  // The least loss is the last state kept (loss falls as watts rise); ties went to fewer watts.
  std::vector<size_t> points(jobs.size());
  uint32_t at = static_cast<uint32_t>(steps.back().size() - 1);
  for (size_t j = jobs.size(); j-- > 0;) {
    const State& state = steps[j + 1][at];
    points[j] = state.point;
    at = state.previous;
  }
  return points;
}

struct Segment {
  int tier;         // 1: an inference job still below its SLO floor (served first), 0: otherwise
  double per_watt;  // cost removed per watt
  size_t job;
  bool operator<(const Segment& other) const {
    return std::tie(tier, per_watt, other.job) < std::tie(other.tier, other.per_watt, job);
  }
};

}  // namespace

Result<Allocation> allocate(std::span<const JobDemand> jobs, double cap_w, const AllocateOptions& options) {
  if (!(std::isfinite(cap_w) && cap_w > 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "the cluster power cap must be a positive number of watts, got {}", cap_w);
  }
  std::set<std::string> ids;
  std::vector<Prepared> prepared;
  prepared.reserve(jobs.size());
  for (const JobDemand& job : jobs) {
    JOULE_TRY(check_job(job, ids));
    prepared.push_back(JOULE_TRY(prepare(job)));
  }
  const auto watts_at = [&](size_t j, size_t point) {
    return jobs[j].gpus * prepared[j].points[point].power_limit_w;
  };
  double lowest_w = 0;
  double floors_w = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    lowest_w += watts_at(j, 0);
    floors_w += watts_at(j, prepared[j].slo_floor);
  }
  Allocation allocation;
  allocation.cap_w = cap_w;
  if (lowest_w > cap_w) {
    return fail(ErrorCode::kOutOfRange,
                "the cap of {:.0f} W is {:.0f} W short of every job at its lowest power limit ({:.0f} W): no "
                "allocation holds it",
                cap_w, lowest_w - cap_w, lowest_w);
  }
  const bool degraded = floors_w > cap_w;
  if (degraded && !options.degrade_slos) {
    return fail(
        ErrorCode::kOutOfRange,
        "the cap of {:.0f} W is {:.0f} W short of the inference jobs' SLO floors with every training job "
        "at its lowest limit ({:.0f} W): raise the cap, or allow degraded SLOs",
        cap_w, floors_w - cap_w, floors_w);
  }
  if (degraded) {
    allocation.degraded = fmt::format(
        "the cap of {:.0f} W is {:.0f} W short of the inference jobs' SLO floors: inference jobs run below "
        "them",
        cap_w, floors_w - cap_w);
  }
  // Everyone starts at the floor: the SLO floor when the cap allows it, else the lowest limit.
  double remaining_w = cap_w;
  // 1 for an inference job at a point below its SLO floor (degraded): served before anything else.
  const auto tier_of = [&](size_t j, size_t point) {
    return jobs[j].kind == JobKind::kInference && point < prepared[j].slo_floor ? 1 : 0;
  };
  std::priority_queue<Segment> heap;
  const auto push_next = [&](size_t j) {
    Prepared& job = prepared[j];
    if (job.at_hull + 1 >= job.hull.size()) {
      return;
    }
    const Point& from = job.points[job.hull[job.at_hull]];
    const Point& to = job.points[job.hull[job.at_hull + 1]];
    const double per_watt = (from.cost - to.cost) / (jobs[j].gpus * (to.power_limit_w - from.power_limit_w));
    heap.push({tier_of(j, job.hull[job.at_hull]), per_watt, j});
  };
  for (size_t j = 0; j < jobs.size(); ++j) {
    Prepared& job = prepared[j];
    job.floor = degraded ? 0 : job.slo_floor;
    job.hull = lower_hull(job.points, job.floor);
    job.at = job.floor;
    remaining_w -= watts_at(j, job.floor);
    push_next(j);
  }
  // Hull segments, best gain per watt first, while they fit; the first that does not bounds the gap to the
  // optimum (the continuous relaxation would take a fraction of it).
  double relaxation_extra_gain = 0;
  bool stopped = false;
  while (!heap.empty() && !stopped) {
    const Segment best = heap.top();
    heap.pop();
    Prepared& job = prepared[best.job];
    const size_t next = job.hull[job.at_hull + 1];
    const double step_w = watts_at(best.job, next) - watts_at(best.job, job.at);
    if (step_w > remaining_w + 1e-9) {
      relaxation_extra_gain = best.per_watt * std::max(remaining_w, 0.0);
      stopped = true;
      break;
    }
    remaining_w -= step_w;
    job.at = next;
    ++job.at_hull;
    push_next(best.job);
  }
  double stopped_cost = 0;
  for (const Prepared& job : prepared) {
    stopped_cost += job.points[job.at].cost;
  }
  // The leftover watts, then exchanges: one job up to a higher point, paid for by the leftover and, if need
  // be, another job down to a lower one (not below its floor), whichever lowers the loss most per watt; again
  // and again until nothing improves. Each move lowers the loss, so this ends; the pass count is bounded
  // all the same. Inference jobs below their SLO floor (degraded) are served before anything else.
  constexpr int kMaxImprovementPasses = 1000;
  struct Move {
    int tier = -1;
    double gain = 0;  // loss removed: per watt for a step into the leftover, in all for an exchange
    size_t up = 0, up_to = 0, down = 0, down_to = 0;
  };
  for (int pass = 0; stopped && pass < kMaxImprovementPasses; ++pass) {
    Move step;
    Move exchange;
    for (size_t j = 0; j < prepared.size(); ++j) {
      const Prepared& job = prepared[j];
      const int tier = tier_of(j, job.at);
      for (size_t k = job.at + 1; k < job.points.size(); ++k) {
        const double step_w = watts_at(j, k) - watts_at(j, job.at);
        const double gain = job.points[job.at].cost - job.points[k].cost;
        if (step_w <= remaining_w + 1e-9) {
          const double per_watt = gain / step_w;
          if (per_watt > 0 && std::tie(tier, per_watt) > std::tie(step.tier, step.gain)) {
            step = {tier, per_watt, j, k, 0, 0};
          }
          continue;
        }
        // Up by a neighbouring step only, paid for by another job's neighbouring step down: O(J²) per pass.
        if (k != job.at + 1) {
          break;
        }
        for (size_t i = 0; i < prepared.size(); ++i) {
          const Prepared& other = prepared[i];
          if (i == j || other.at <= other.floor || tier_of(i, other.at - 1) > tier) {
            continue;
          }
          const double freed_w = watts_at(i, other.at) - watts_at(i, other.at - 1);
          const double net_gain = gain - (other.points[other.at - 1].cost - other.points[other.at].cost);
          if (step_w <= remaining_w + freed_w + 1e-9 && net_gain > 1e-12 &&
              std::tie(tier, net_gain) > std::tie(exchange.tier, exchange.gain)) {
            exchange = {tier, net_gain, j, k, i, other.at - 1};
          }
        }
      }
    }
    const Move& move = step.tier >= 0 ? step : exchange;
    if (move.tier < 0) {
      break;
    }
    remaining_w -= watts_at(move.up, move.up_to) - watts_at(move.up, prepared[move.up].at);
    prepared[move.up].at = move.up_to;
    if (&move == &exchange) {
      remaining_w += watts_at(move.down, prepared[move.down].at) - watts_at(move.down, move.down_to);
      prepared[move.down].at = move.down_to;
    }
  }
  // The exact search, where the floors hold, the heuristic has not already met the relaxation's bound (then
  // it is optimal) and the states stay few: it replaces the heuristic's points only where it does better (it
  // never does worse when it completes).
  double heuristic_loss = 0;
  for (const Prepared& job : prepared) {
    heuristic_loss += job.points[job.at].cost;
  }
  const double lower_bound = stopped_cost - relaxation_extra_gain;
  double total_weight = 0;
  for (const JobDemand& job : jobs) {
    total_weight += job.priority * job.gpus;
  }
  if (heuristic_loss - lower_bound <= 1e-12 * std::max(1.0, heuristic_loss)) {
    allocation.exact = true;
  } else if (!degraded && options.exact_work_limit > 0 &&
             heuristic_loss - lower_bound > options.exact_search_above_share * total_weight) {
    if (auto points = exact_points(jobs, prepared, cap_w, options.exact_work_limit)) {
      double exact_loss = 0;
      for (size_t j = 0; j < jobs.size(); ++j) {
        exact_loss += prepared[j].points[(*points)[j]].cost;
      }
      if (exact_loss < heuristic_loss - 1e-12) {
        for (size_t j = 0; j < jobs.size(); ++j) {
          prepared[j].at = (*points)[j];
        }
      }
      allocation.exact = true;
    }
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Prepared& job = prepared[j];
    const Point& point = job.points[job.at];
    JobAllocation share;
    share.id = jobs[j].id;
    share.power_limit_w = point.power_limit_w;
    share.time_s = point.time_s;
    share.throughput_loss = 1 - job.points.back().time_s / point.time_s;
    share.below_slo_floor = tier_of(j, job.at) == 1;
    allocation.allocated_w += watts_at(j, job.at);
    allocation.weighted_loss += point.cost;
    allocation.jobs.push_back(std::move(share));
  }
  // The relaxation's optimum is a lower bound on the discrete one.
  allocation.gap_bound =
      allocation.exact ? 0.0
                       : std::max(0.0, allocation.weighted_loss - (stopped_cost - relaxation_extra_gain));
  return allocation;
}

}  // namespace joule::cluster
