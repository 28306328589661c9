// SPDX-License-Identifier: Apache-2.0
// joule/optimize/json_forms.hpp — the JSON form of the power-limit optimizers' records (one profiled limit,
// one Chase decision, a serving SLO and the SLO controller's model of one knob level): the one form the
// Python binding hands out as dicts. Keys keep the order written here.
#pragma once

#include <nlohmann/json.hpp>

#include "joule/optimize/chase.hpp"
#include "joule/optimize/inference_slo.hpp"
#include "joule/optimize/power_limit.hpp"

namespace joule::optimize {

/// @return {"power_limit_w", "energy_j", "time_s", "steps", "energy_per_step_j", "time_per_step_s"}: one
/// profiled power limit (W, J, s).
nlohmann::ordered_json to_json(const PowerLimitMeasurement& measurement);

/// @return {"time_unix_s", "previous_g_per_kwh", "forecast_g_per_kwh", "effective_eta", "power_limit_w"}.
nlohmann::ordered_json to_json(const ChaseDecision& decision);

/// @return the name of a knob value in JSON and in the Python binding's keywords: "clock_mhz" (SM clock,
/// MHz) or "power_limit_w" (W).
const char* knob_json_key(KnobKind kind);

/// @return {"ttft_s", "tpot_s", "attainment"}.
nlohmann::ordered_json to_json(const ServingSlo& slo);

/// @return {knob_json_key(kind): the level, "samples", "predicted_time_s", "predicted_power_w" (the replica,
/// busy), "measured"}.
nlohmann::ordered_json to_json(const KnobModel& model);

}  // namespace joule::optimize
