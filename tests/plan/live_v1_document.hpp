// SPDX-License-Identifier: Apache-2.0
// Documents of the live scheduler as joule stored them before the state was split (format version 1: the
// whole scheduler in one document, ranks with their clocks and pending reports inside), written field by
// field as that version's dump() did: what the tests of the conversion start from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/plan/live.hpp"

namespace joule::plan {

/// A version 1 document of `info` (ranks i at dp i / pp, pp i % pp, all listing `clocks`) in `phase` at
/// `round`, with `pending` reports (version_1_result()); without the warm-up fields of later version 1s if
/// `with_warmup_fields` is false.
inline nlohmann::json version_1_document(const LiveJobInfo& info, const std::vector<uint32_t>& clocks,
                                         const std::string& phase, int64_t round,
                                         const std::vector<nlohmann::json>& pending,
                                         bool with_warmup_fields) {
  using nlohmann::json;
  const LiveOptions defaults;
  json options = {{"profile_samples", defaults.profile_samples},
                  {"profile_stop_energy_rise", defaults.profile_stop_energy_rise},
                  {"profile_patience", defaults.profile_patience},
                  {"planned_round_iterations", defaults.planned_round_iterations},
                  {"default_p_blocking_w", defaults.default_p_blocking_w},
                  {"unit_time_s", defaults.unit_time_s},
                  {"straggler_enter", defaults.straggler_enter},
                  {"straggler_exit", defaults.straggler_exit},
                  {"straggler_retarget", defaults.straggler_retarget},
                  {"straggler_confirm_rounds", defaults.straggler_confirm_rounds}};
  json ranks = json::array();
  for (int rank = 0; rank < info.world_size; ++rank) {
    ranks.push_back({{"rank", rank},
                     {"dp_rank", rank / info.pp_degree},
                     {"pp_rank", rank % info.pp_degree},
                     {"tp_rank", 0},
                     {"available_frequencies", clocks}});
  }
  json samples = json::array();
  for (int stage = 0; stage < info.pp_degree; ++stage) {
    json per_instruction = json::array();
    for (int instruction = 0; instruction < 2; ++instruction) {
      json per_clock = json::array();
      for (size_t f = 0; f < clocks.size(); ++f) {
        per_clock.push_back({0.0, 0.0, 0});
      }
      per_instruction.push_back(per_clock);
    }
    samples.push_back(per_instruction);
  }
  json document = {{"format", "joule.plan.live"},
                   {"version", 1},
                   {"info",
                    {{"job_id", info.job_id},
                     {"pp_degree", info.pp_degree},
                     {"dp_degree", info.dp_degree},
                     {"tp_degree", info.tp_degree},
                     {"world_size", info.world_size},
                     {"job_metadata", ""},
                     {"num_microbatches", info.num_microbatches},
                     {"schedule", "1f1b"}}},
                   {"options", options},
                   {"phase", phase},
                   {"round", round},
                   {"ranks", ranks},
                   {"frequencies_mhz", clocks},
                   {"sweep_next", 0},
                   {"round_frequencies", 0},
                   {"samples", samples},
                   {"idle_energy_j", 0.0},
                   {"idle_time_s", 0.0},
                   {"busy_time_s", 0.0},
                   {"given_profile", nullptr},
                   {"profile", nullptr},
                   {"p_blocking_w", 0.0},
                   {"unit_time_s", 0.0},
                   {"profiling_iterations", 0},
                   {"assignments", json::array()},
                   {"fastest", nullptr},
                   {"slowed", json::array()},
                   {"straggler_time_s", nullptr},
                   {"enter_streak", 0},
                   {"exit_streak", 0},
                   {"retarget_streak", 0},
                   {"pending", pending}};
  if (with_warmup_fields) {
    document["options"]["max_warmup_rounds"] = defaults.max_warmup_rounds;
    document["warmup_rounds"] = 0;
    document["unsteady_ranks"] = json::array();
    document["warmup_gave_up"] = false;
  }
  return document;
}

inline nlohmann::json version_1_result(const LiveResult& result) {
  nlohmann::json value = {{"rank", result.rank},
                          {"iter_time", result.iter_time_s},
                          {"iter_energy", result.iter_energy_j},
                          {"time_breakdown", result.time_breakdown_s},
                          {"energy_breakdown", result.energy_breakdown_j}};
  if (result.thermally_steady) {
    value["thermally_steady"] = *result.thermally_steady;
  }
  return value;
}

}  // namespace joule::plan
