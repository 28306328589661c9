// SPDX-License-Identifier: Apache-2.0
// joule/fleet/json_forms.hpp — a fleet window's JSON form, shared by `joule measure --nodes --format json`
// and the Python module (joule.FleetMonitor).
#pragma once

#include <nlohmann/json.hpp>

#include "joule/fleet/fleet_monitor.hpp"

namespace joule::fleet {

/// @return {name, wall_time_s, alignment_error_s, complete, total_energy_j, nodes: [{node, complete, error,
/// energy_j, clock_offset_s, clock_offset_uncertainty_s, devices: [{kind, index, energy_j, source,
/// not_measurable}]}], warnings}; NaN figures are null.
nlohmann::ordered_json to_json(const FleetMeasurement& measurement);

}  // namespace joule::fleet
