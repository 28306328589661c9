// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/json_forms.hpp"

#include "joule/core/units.hpp"

namespace joule::optimize {

nlohmann::ordered_json to_json(const PowerLimitMeasurement& measurement) {
  return {{"power_limit_w", mw_to_w(measurement.power_limit_mw)},
          {"energy_j", measurement.energy_j},
          {"time_s", measurement.time_s},
          {"steps", measurement.steps},
          {"energy_per_step_j", measurement.energy_per_step_j()},
          {"time_per_step_s", measurement.time_per_step_s()}};
}

nlohmann::ordered_json to_json(const ChaseDecision& decision) {
  return {{"time_unix_s", decision.time_unix_s},
          {"previous_g_per_kwh", decision.previous_g_per_kwh},
          {"forecast_g_per_kwh", decision.forecast_g_per_kwh},
          {"effective_eta", decision.effective_eta},
          {"power_limit_w", mw_to_w(decision.power_limit_mw)}};
}

const char* knob_json_key(KnobKind kind) {
  return kind == KnobKind::kSmClockMhz ? "clock_mhz" : "power_limit_w";
}

nlohmann::ordered_json to_json(const ServingSlo& slo) {
  return {{"ttft_s", slo.ttft_s}, {"tpot_s", slo.tpot_s}, {"attainment", slo.attainment}};
}

nlohmann::ordered_json to_json(const KnobModel& model) {
  return {{knob_json_key(model.knob.kind), model.knob.value},
          {"samples", model.samples},
          {"predicted_time_s", model.predicted_time_s},
          {"predicted_power_w", model.predicted_power_w},
          {"measured", model.measured}};
}

}  // namespace joule::optimize
