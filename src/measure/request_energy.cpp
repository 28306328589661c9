// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/request_energy.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace joule::measure {

std::string_view to_string(AttributionRule rule) {
  switch (rule) {
    case AttributionRule::kTokens:
      return "tokens";
    case AttributionRule::kWork:
      return "work";
    case AttributionRule::kEqual:
      return "equal";
  }
  return "tokens";
}

Result<AttributionRule> parse_attribution_rule(std::string_view name) {
  for (const AttributionRule rule :
       {AttributionRule::kTokens, AttributionRule::kWork, AttributionRule::kEqual}) {
    if (name == to_string(rule)) {
      return rule;
    }
  }
  return tl::unexpected(
      Error(ErrorCode::kInvalidArgument,
            fmt::format("unknown attribution rule '{}': expected tokens, work or equal", name)));
}

double RequestEnergy::energy_per_output_token_j() const {
  return output_tokens > 0 ? energy_j / static_cast<double>(output_tokens) : 0.0;
}

std::optional<double> RequestEnergy::ttft_s() const {
  if (first_token_s < 0) {
    return std::nullopt;
  }
  return first_token_s - arrival_s;
}

std::optional<double> RequestEnergy::tpot_s() const {
  if (first_token_s < 0 || output_tokens < 2) {
    return std::nullopt;
  }
  return (finish_s - first_token_s) / static_cast<double>(output_tokens - 1);
}

PhaseEnergy split_by_tokens(double energy_j, int64_t prefill_tokens, int64_t decode_tokens) {
  const auto tokens = static_cast<double>(prefill_tokens + decode_tokens);
  if (tokens <= 0) {
    return {0, energy_j};
  }
  const double prefill_part = static_cast<double>(prefill_tokens) / tokens;
  return {energy_j * prefill_part, energy_j * (1 - prefill_part)};
}

RequestEnergy to_request_energy(const FinishedRequest& request, std::string request_id) {
  RequestEnergy energy;
  energy.request_id = std::move(request_id);
  energy.arrival_s = request.arrival_s;
  energy.first_token_s = request.first_token_s.value_or(-1);
  energy.finish_s = request.finish_s;
  energy.prompt_tokens = request.prompt_tokens;
  energy.output_tokens = request.output_tokens;
  energy.energy_j = request.energy_j;
  const PhaseEnergy phases = request.phases.value_or(
      split_by_tokens(request.energy_j, request.prompt_tokens, request.output_tokens));
  energy.prefill_energy_j = phases.prefill_j;
  energy.decode_energy_j = phases.decode_j;
  return energy;
}

RequestEnergyLedger::RequestEnergyLedger(AttributionRule rule) : rule_(rule) {}

Result<void> RequestEnergyLedger::add_request(std::string_view request_id, double arrival_s) {
  if (request_id.empty()) {
    return tl::unexpected(Error(ErrorCode::kInvalidArgument, "a request id must not be empty"));
  }
  if (!std::isfinite(arrival_s)) {
    return tl::unexpected(
        Error(ErrorCode::kInvalidArgument,
              fmt::format("request '{}': arrival_s must be finite, got {}", request_id, arrival_s)));
  }
  if (requests_.find(request_id) != requests_.end()) {
    return tl::unexpected(Error(
        ErrorCode::kState, fmt::format("request '{}' is already tracked (finish it first)", request_id)));
  }
  RequestEnergy request;
  request.request_id = std::string(request_id);
  request.arrival_s = arrival_s;
  request.finish_s = arrival_s;
  requests_.emplace(request.request_id, std::move(request));
  return {};
}

namespace {

Error bad_iteration(std::string what) {
  return Error(ErrorCode::kInvalidArgument, "iteration not recorded: " + std::move(what));
}

}  // namespace

Result<void> RequestEnergyLedger::record_iteration(double start_s, double end_s, double energy_j,
                                                   std::span<const IterationWork> work) {
  if (!std::isfinite(start_s) || !std::isfinite(end_s) || end_s < start_s) {
    return tl::unexpected(bad_iteration(
        fmt::format("start_s and end_s must be finite with end_s >= start_s, got [{}, {}]", start_s, end_s)));
  }
  if (!std::isfinite(energy_j) || energy_j < 0) {
    return tl::unexpected(bad_iteration(fmt::format("energy_j must be finite and >= 0, got {}", energy_j)));
  }
  // Validate everything before changing anything, so that a bad call records nothing.
  scratch_.clear();
  double total_weight = 0;
  for (const IterationWork& item : work) {
    if (item.prefill_tokens < 0 || item.decode_tokens < 0) {
      return tl::unexpected(
          bad_iteration(fmt::format("request '{}': token counts must be >= 0, got prefill {} decode {}",
                                    item.request_id, item.prefill_tokens, item.decode_tokens)));
    }
    if (item.prefill_tokens == 0 && item.decode_tokens == 0) {
      return tl::unexpected(bad_iteration(
          fmt::format("request '{}' processed no token (leave it out of the iteration)", item.request_id)));
    }
    if (rule_ == AttributionRule::kWork && (!std::isfinite(item.work) || item.work < 0)) {
      return tl::unexpected(bad_iteration(
          fmt::format("request '{}': work must be finite and >= 0, got {}", item.request_id, item.work)));
    }
    const auto found = requests_.find(item.request_id);
    if (found == requests_.end()) {
      return tl::unexpected(
          Error(ErrorCode::kNotFound,
                fmt::format("iteration not recorded: request '{}' was never added (add_request first)",
                            item.request_id)));
    }
    for (const RequestEnergy* seen : scratch_) {
      if (seen == &found->second) {
        return tl::unexpected(bad_iteration(fmt::format("request '{}' is listed twice", item.request_id)));
      }
    }
    scratch_.push_back(&found->second);
    switch (rule_) {
      case AttributionRule::kTokens:
        total_weight += static_cast<double>(item.prefill_tokens + item.decode_tokens);
        break;
      case AttributionRule::kWork:
        total_weight += item.work;
        break;
      case AttributionRule::kEqual:
        total_weight += 1;
        break;
    }
  }
  totals_.energy_j += energy_j;
  ++totals_.iterations;
  if (work.empty()) {
    totals_.idle_energy_j += energy_j;
    return {};
  }
  // kWork with all-zero work: fall back to tokens rather than dividing by zero.
  const bool by_tokens =
      rule_ == AttributionRule::kTokens || (rule_ == AttributionRule::kWork && total_weight <= 0);
  if (by_tokens && rule_ == AttributionRule::kWork) {
    total_weight = 0;
    for (const IterationWork& item : work) {
      total_weight += static_cast<double>(item.prefill_tokens + item.decode_tokens);
    }
  }
  for (size_t i = 0; i < work.size(); ++i) {
    const IterationWork& item = work[i];
    RequestEnergy& request = *scratch_[i];
    const auto tokens = static_cast<double>(item.prefill_tokens + item.decode_tokens);
    double weight = tokens;
    if (!by_tokens) {
      weight = rule_ == AttributionRule::kWork ? item.work : 1.0;
    }
    const double share_j = energy_j * weight / total_weight;
    const PhaseEnergy phases = split_by_tokens(share_j, item.prefill_tokens, item.decode_tokens);
    request.prefill_energy_j += phases.prefill_j;
    request.decode_energy_j += phases.decode_j;
    request.energy_j += share_j;
    request.prompt_tokens += item.prefill_tokens;
    request.output_tokens += item.decode_tokens + (item.first_token ? 1 : 0);
    if (item.first_token && request.first_token_s < 0) {
      request.first_token_s = end_s;
    }
    request.finish_s = end_s;
    totals_.attributed_energy_j += share_j;
    totals_.prefill_tokens += item.prefill_tokens;
    totals_.decode_tokens += item.decode_tokens;
  }
  return {};
}

Result<void> RequestEnergyLedger::record_idle(double energy_j) {
  if (!std::isfinite(energy_j) || energy_j < 0) {
    return tl::unexpected(Error(ErrorCode::kInvalidArgument,
                                fmt::format("idle energy_j must be finite and >= 0, got {}", energy_j)));
  }
  totals_.energy_j += energy_j;
  totals_.idle_energy_j += energy_j;
  return {};
}

Result<RequestEnergy> RequestEnergyLedger::finish_request(std::string_view request_id) {
  const auto found = requests_.find(request_id);
  if (found == requests_.end()) {
    return tl::unexpected(
        Error(ErrorCode::kNotFound, fmt::format("request '{}' is not tracked", request_id)));
  }
  RequestEnergy request = std::move(found->second);
  requests_.erase(found);
  return request;
}

const RequestEnergy* RequestEnergyLedger::find(std::string_view request_id) const {
  const auto found = requests_.find(request_id);
  return found == requests_.end() ? nullptr : &found->second;
}

namespace {

// The checks attribute_energy_over_time() and attribute_energy_by_work() make of their intervals.
Result<void> check_energy_intervals(std::span<const EnergyInterval> intervals) {
  for (size_t i = 0; i < intervals.size(); ++i) {
    const EnergyInterval& interval = intervals[i];
    if (!std::isfinite(interval.start_s) || !std::isfinite(interval.end_s) ||
        !std::isfinite(interval.energy_j)) {
      return fail(ErrorCode::kInvalidArgument, "energy interval {}: times and energy must be finite", i);
    }
    if (interval.end_s < interval.start_s) {
      return fail(ErrorCode::kInvalidArgument, "energy interval {}: ends at {} s, before it starts at {} s",
                  i, interval.end_s, interval.start_s);
    }
    if (interval.energy_j < 0) {
      return fail(ErrorCode::kInvalidArgument, "energy interval {}: negative energy {} J", i,
                  interval.energy_j);
    }
    if (interval.end_s == interval.start_s && interval.energy_j > 0) {
      return fail(ErrorCode::kInvalidArgument, "energy interval {}: {} J over no time", i, interval.energy_j);
    }
    if (i > 0 && interval.start_s < intervals[i - 1].end_s) {
      return fail(
          ErrorCode::kInvalidArgument,
          "energy interval {}: starts at {} s, before the previous one ends ({} s): intervals must be "
          "sorted and not overlap",
          i, interval.start_s, intervals[i - 1].end_s);
    }
  }
  return {};
}

Result<void> check_flight(size_t r, double start_s, double end_s) {
  if (!std::isfinite(start_s) || !std::isfinite(end_s)) {
    return fail(ErrorCode::kInvalidArgument, "request {}: times must be finite", r);
  }
  if (end_s < start_s) {
    return fail(ErrorCode::kInvalidArgument, "request {}: ends at {} s, before it starts at {} s", r, end_s,
                start_s);
  }
  return {};
}

}  // namespace

Result<TimelineAttribution> attribute_energy_over_time(std::span<const EnergyInterval> intervals,
                                                       std::span<const FlightInterval> requests) {
  JOULE_TRY(check_energy_intervals(intervals));
  for (size_t r = 0; r < requests.size(); ++r) {
    JOULE_TRY(check_flight(r, requests[r].start_s, requests[r].end_s));
  }

  TimelineAttribution result;
  result.request_energy_j.assign(requests.size(), 0.0);
  for (const EnergyInterval& interval : intervals) {
    result.energy_j += interval.energy_j;
  }
  if (intervals.empty()) {
    return result;
  }

  // Every request in flight gets the same share at every instant, so one running sum does: `share` is the
  // energy a request in flight since the beginning would have got; a request's energy is the sum's growth
  // between its start and its end.
  struct Event {
    double time_s;
    size_t request;
    bool start;
  };
  std::vector<Event> events;
  events.reserve(2 * requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    events.push_back({requests[r].start_s, r, true});
    events.push_back({requests[r].end_s, r, false});
  }
  // At equal times, starts first: a request of no duration then gets nothing, never a negative count.
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.time_s != b.time_s ? a.time_s < b.time_s : a.start && !b.start;
  });

  double share = 0;
  int64_t in_flight = 0;
  size_t next = 0;  // the first interval that may still hold time after `now`
  double now = intervals.front().start_s;
  if (!events.empty()) {
    now = std::min(now, events.front().time_s);
  }
  // Moves `now` to `to`, charging the energy of the intervals' time in between.
  const auto advance = [&](double to) {
    while (now < to && next < intervals.size()) {
      const EnergyInterval& interval = intervals[next];
      if (interval.end_s <= now) {
        ++next;
        continue;
      }
      if (now < interval.start_s) {  // a gap (or before the first interval): no energy known
        now = std::min(to, interval.start_s);
        continue;
      }
      const double until = std::min(to, interval.end_s);
      const double energy_j = interval.energy_j * (until - now) / (interval.end_s - interval.start_s);
      if (in_flight > 0) {
        share += energy_j / static_cast<double>(in_flight);
        result.attributed_energy_j += energy_j;
      } else {
        result.idle_energy_j += energy_j;
      }
      now = until;
    }
    now = std::max(now, to);
  };
  std::vector<double> share_at_start(requests.size(), 0.0);
  for (const Event& event : events) {
    advance(event.time_s);
    if (event.start) {
      share_at_start[event.request] = share;
      ++in_flight;
    } else {
      result.request_energy_j[event.request] = share - share_at_start[event.request];
      --in_flight;
    }
  }
  advance(intervals.back().end_s);
  return result;
}

Result<void> check_work_weights(const WorkWeights& weights) {
  if (!std::isfinite(weights.prefill_token) || !std::isfinite(weights.decode_token) ||
      weights.prefill_token < 0 || weights.decode_token < 0 ||
      (weights.prefill_token == 0 && weights.decode_token == 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "work weights must be finite numbers >= 0, not both 0; got {} per prefill token and {} per "
                "decode token",
                weights.prefill_token, weights.decode_token);
  }
  return {};
}

double split_by_work(double energy_j, std::span<const TokenWork> work, const WorkWeights& weights,
                     std::span<double> shares_j) {
  if (work.size() != shares_j.size()) {
    throw std::invalid_argument("split_by_work: work and shares_j differ in size");
  }
  double total = 0;
  for (const TokenWork& item : work) {
    total += weights.prefill_token * item.prefill_tokens + weights.decode_token * item.decode_tokens;
  }
  for (size_t i = 0; i < work.size(); ++i) {
    const double weight =
        weights.prefill_token * work[i].prefill_tokens + weights.decode_token * work[i].decode_tokens;
    shares_j[i] = total > 0 ? energy_j * weight / total : 0.0;
  }
  return total > 0 ? energy_j : 0.0;
}

namespace {

// Checks one request of attribute_energy_by_work().
Result<void> check_request_work(size_t r, const RequestWork& request) {
  JOULE_TRY(check_flight(r, request.start_s, request.end_s));
  const auto bad_count = [](double count) { return !std::isfinite(count) || count < 0; };
  if (bad_count(request.prefill_tokens) || bad_count(request.decode_tokens)) {
    return fail(ErrorCode::kInvalidArgument,
                "request {}: token counts must be finite and >= 0, got prefill {} decode {}", r,
                request.prefill_tokens, request.decode_tokens);
  }
  const auto inside = [&](double time_s) {
    return std::isfinite(time_s) && time_s >= request.start_s && time_s <= request.end_s;
  };
  if (request.first_token_s && !inside(*request.first_token_s)) {
    return fail(ErrorCode::kInvalidArgument, "request {}: first token at {} s, outside its flight [{}, {}] s",
                r, *request.first_token_s, request.start_s, request.end_s);
  }
  for (const TokenArrival& arrival : request.arrivals) {
    if (!inside(arrival.time_s) || bad_count(arrival.tokens)) {
      return fail(ErrorCode::kInvalidArgument,
                  "request {}: {} tokens arriving at {} s: the count must be finite and >= 0, the time "
                  "within its flight [{}, {}] s",
                  r, arrival.tokens, arrival.time_s, request.start_s, request.end_s);
    }
  }
  return {};
}

// One request's weighted work in one interval.
struct WorkPiece {
  size_t interval;
  size_t request;
  double weight;
};

// Places each request's weighted work in the intervals.
class WorkPlacer {
 public:
  explicit WorkPlacer(std::span<const EnergyInterval> intervals) : intervals_(intervals) {}

  // `weight` at the instant `time_s`.
  void at(size_t request, double time_s, double weight) {
    if (weight <= 0) {
      return;
    }
    // The last interval starting at or before time_s, if time_s is within it.
    const auto after = std::upper_bound(intervals_.begin(), intervals_.end(), time_s,
                                        [](double t, const EnergyInterval& i) { return t < i.start_s; });
    if (after == intervals_.begin()) {
      return;
    }
    const auto index = static_cast<size_t>(after - intervals_.begin()) - 1;
    if (time_s <= intervals_[index].end_s) {
      pieces_.push_back({index, request, weight});
    }
  }

  // `weight` spread evenly over [from_s, to_s] (an instant if to_s <= from_s).
  void spread(size_t request, double from_s, double to_s, double weight) {
    if (weight <= 0) {
      return;
    }
    if (to_s <= from_s) {
      at(request, from_s, weight);
      return;
    }
    // The first interval ending after from_s, then every one starting before to_s.
    auto it = std::partition_point(intervals_.begin(), intervals_.end(),
                                   [from_s](const EnergyInterval& i) { return i.end_s <= from_s; });
    for (; it != intervals_.end() && it->start_s < to_s; ++it) {
      const double overlap_s = std::min(to_s, it->end_s) - std::max(from_s, it->start_s);
      if (overlap_s > 0) {
        pieces_.push_back(
            {static_cast<size_t>(it - intervals_.begin()), request, weight * overlap_s / (to_s - from_s)});
      }
    }
  }

  std::vector<WorkPiece>& pieces() { return pieces_; }

 private:
  std::span<const EnergyInterval> intervals_;
  std::vector<WorkPiece> pieces_;
};

// @return, per interval, the time within it during which at least one request was in flight, s.
std::vector<double> busy_time_s(std::span<const EnergyInterval> intervals,
                                std::span<const RequestWork> requests) {
  std::vector<std::pair<double, double>> flights;
  flights.reserve(requests.size());
  for (const RequestWork& request : requests) {
    if (request.end_s > request.start_s) {
      flights.emplace_back(request.start_s, request.end_s);
    }
  }
  std::sort(flights.begin(), flights.end());
  std::vector<std::pair<double, double>> merged;  // their union, disjoint and sorted
  for (const auto& flight : flights) {
    if (!merged.empty() && flight.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, flight.second);
    } else {
      merged.push_back(flight);
    }
  }
  std::vector<double> busy(intervals.size(), 0.0);
  size_t m = 0;
  for (size_t i = 0; i < intervals.size(); ++i) {
    while (m < merged.size() && merged[m].second <= intervals[i].start_s) {
      ++m;
    }
    for (size_t k = m; k < merged.size() && merged[k].first < intervals[i].end_s; ++k) {
      busy[i] +=
          std::min(merged[k].second, intervals[i].end_s) - std::max(merged[k].first, intervals[i].start_s);
    }
  }
  return busy;
}

}  // namespace

Result<TimelineAttribution> attribute_energy_by_work(std::span<const EnergyInterval> intervals,
                                                     std::span<const RequestWork> requests,
                                                     const WorkWeights& weights) {
  JOULE_TRY(check_energy_intervals(intervals));
  JOULE_TRY(check_work_weights(weights));
  for (size_t r = 0; r < requests.size(); ++r) {
    JOULE_TRY(check_request_work(r, requests[r]));
  }
  WorkPlacer placer(intervals);
  for (size_t r = 0; r < requests.size(); ++r) {
    const RequestWork& request = requests[r];
    const double prefill = weights.prefill_token * request.prefill_tokens;
    const double decode_from_s = request.first_token_s.value_or(request.start_s);
    placer.spread(r, request.start_s, request.first_token_s.value_or(request.end_s), prefill);
    if (request.arrivals.empty()) {
      placer.spread(r, decode_from_s, request.end_s, weights.decode_token * request.decode_tokens);
    }
    for (const TokenArrival& arrival : request.arrivals) {
      placer.at(r, arrival.time_s, weights.decode_token * arrival.tokens);
    }
  }
  std::vector<WorkPiece>& pieces = placer.pieces();
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const WorkPiece& a, const WorkPiece& b) { return a.interval < b.interval; });
  std::vector<double> total_weight(intervals.size(), 0.0);
  for (const WorkPiece& piece : pieces) {
    total_weight[piece.interval] += piece.weight;
  }
  const std::vector<double> busy_s = busy_time_s(intervals, requests);

  // Intervals without work are left to the equal rule; those with work are split here.
  std::vector<EnergyInterval> without_work(intervals.begin(), intervals.end());
  TimelineAttribution result;
  result.request_energy_j.assign(requests.size(), 0.0);
  std::vector<double> in_flight_j(intervals.size(), 0.0);
  for (size_t i = 0; i < intervals.size(); ++i) {
    if (total_weight[i] <= 0) {
      continue;
    }
    const EnergyInterval& interval = intervals[i];
    const double length_s = interval.end_s - interval.start_s;
    const double busy_share = length_s > 0 ? std::clamp(busy_s[i] / length_s, 0.0, 1.0) : 0.0;
    in_flight_j[i] = interval.energy_j * busy_share;
    result.idle_energy_j += interval.energy_j - in_flight_j[i];
    without_work[i].energy_j = 0;
  }
  for (const WorkPiece& piece : pieces) {
    const double share_j = in_flight_j[piece.interval] * piece.weight / total_weight[piece.interval];
    result.request_energy_j[piece.request] += share_j;
    result.attributed_energy_j += share_j;
  }
  std::vector<FlightInterval> flights;
  flights.reserve(requests.size());
  for (const RequestWork& request : requests) {
    flights.push_back({request.start_s, request.end_s});
  }
  const TimelineAttribution equal = JOULE_TRY(attribute_energy_over_time(without_work, flights));
  for (size_t r = 0; r < requests.size(); ++r) {
    result.request_energy_j[r] += equal.request_energy_j[r];
  }
  result.attributed_energy_j += equal.attributed_energy_j;
  result.idle_energy_j += equal.idle_energy_j;
  for (const EnergyInterval& interval : intervals) {
    result.energy_j += interval.energy_j;
  }
  return result;
}

}  // namespace joule::measure
