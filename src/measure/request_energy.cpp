// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/request_energy.hpp"

#include <cmath>

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
    if (name == to_string(rule))
      return rule;
  }
  return tl::unexpected(
      Error(ErrorCode::kInvalidArgument,
            fmt::format("unknown attribution rule '{}': expected tokens, work or equal", name)));
}

double RequestEnergy::energy_per_output_token_j() const {
  return output_tokens > 0 ? energy_j / static_cast<double>(output_tokens) : 0.0;
}

std::optional<double> RequestEnergy::ttft_s() const {
  if (first_token_s < 0)
    return std::nullopt;
  return first_token_s - arrival_s;
}

std::optional<double> RequestEnergy::tpot_s() const {
  if (first_token_s < 0 || output_tokens < 2)
    return std::nullopt;
  return (finish_s - first_token_s) / static_cast<double>(output_tokens - 1);
}

RequestEnergyLedger::RequestEnergyLedger(AttributionRule rule) : rule_(rule) {}

Result<void> RequestEnergyLedger::add_request(std::string_view request_id, double arrival_s) {
  if (request_id.empty())
    return tl::unexpected(Error(ErrorCode::kInvalidArgument, "a request id must not be empty"));
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
    for (const IterationWork& item : work)
      total_weight += static_cast<double>(item.prefill_tokens + item.decode_tokens);
  }
  for (size_t i = 0; i < work.size(); ++i) {
    const IterationWork& item = work[i];
    RequestEnergy& request = *scratch_[i];
    const auto tokens = static_cast<double>(item.prefill_tokens + item.decode_tokens);
    double weight = tokens;
    if (!by_tokens)
      weight = rule_ == AttributionRule::kWork ? item.work : 1.0;
    const double share_j = energy_j * weight / total_weight;
    const double prefill_part = static_cast<double>(item.prefill_tokens) / tokens;
    request.prefill_energy_j += share_j * prefill_part;
    request.decode_energy_j += share_j * (1 - prefill_part);
    request.energy_j += share_j;
    request.prompt_tokens += item.prefill_tokens;
    request.output_tokens += item.decode_tokens + (item.first_token ? 1 : 0);
    if (item.first_token && request.first_token_s < 0)
      request.first_token_s = end_s;
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

}  // namespace joule::measure
