// SPDX-License-Identifier: Apache-2.0
// joule/measure/json_forms.hpp — the JSON form of the request-energy ledger's records (one request, the
// totals): the one form the Python binding hands out as dicts. Keys keep the order written here.
#pragma once

#include <nlohmann/json.hpp>

#include "joule/measure/request_energy.hpp"

namespace joule::measure {

/// @return {"request_id", "arrival_s", "first_token_s" (null without a token), "finish_s", "prompt_tokens",
/// "output_tokens", "energy_j", "prefill_energy_j", "decode_energy_j", "energy_per_output_token_j",
/// "ttft_s", "tpot_s" (null when RequestEnergy says nullopt)}. Times in s, energies in J.
nlohmann::ordered_json to_json(const RequestEnergy& request);

/// @return {"energy_j", "attributed_energy_j", "idle_energy_j", "iterations", "prefill_tokens",
/// "decode_tokens"}.
nlohmann::ordered_json to_json(const LedgerTotals& totals);

}  // namespace joule::measure
