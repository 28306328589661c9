// SPDX-License-Identifier: Apache-2.0
#include "joule/measure/json_forms.hpp"

namespace joule::measure {

namespace {

nlohmann::ordered_json optional_seconds_json(const std::optional<double>& value_s) {
  return value_s ? nlohmann::ordered_json(*value_s) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json to_json(const RequestEnergy& request) {
  return {{"request_id", request.request_id},
          {"arrival_s", request.arrival_s},
          {"first_token_s", request.first_token_s < 0 ? nlohmann::ordered_json(nullptr)
                                                      : nlohmann::ordered_json(request.first_token_s)},
          {"finish_s", request.finish_s},
          {"prompt_tokens", request.prompt_tokens},
          {"output_tokens", request.output_tokens},
          {"energy_j", request.energy_j},
          {"prefill_energy_j", request.prefill_energy_j},
          {"decode_energy_j", request.decode_energy_j},
          {"energy_per_output_token_j", request.energy_per_output_token_j()},
          {"ttft_s", optional_seconds_json(request.ttft_s())},
          {"tpot_s", optional_seconds_json(request.tpot_s())}};
}

nlohmann::ordered_json to_json(const LedgerTotals& totals) {
  return {{"energy_j", totals.energy_j},
          {"attributed_energy_j", totals.attributed_energy_j},
          {"idle_energy_j", totals.idle_energy_j},
          {"iterations", totals.iterations},
          {"prefill_tokens", totals.prefill_tokens},
          {"decode_tokens", totals.decode_tokens}};
}

}  // namespace joule::measure
