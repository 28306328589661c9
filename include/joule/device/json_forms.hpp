// SPDX-License-Identifier: Apache-2.0
// joule/device/json_forms.hpp — the JSON form of a backend's discovery report, of a GPU's power-limit
// range and of a simulated GPU model: the one form the Python binding hands out as dicts. Keys keep the order
// written here.
#pragma once

#include <nlohmann/json.hpp>

#include "joule/device/discovery.hpp"
#include "joule/device/gpu.hpp"
#include "joule/device/sim_gpu.hpp"

namespace joule::device {

/// @return {"backend", "kind", "devices", "ok", "detail"}.
nlohmann::ordered_json to_json(const BackendReport& report);

/// @return {"min_w", "max_w", "default_w"}: the power-limit range and default, W.
nlohmann::ordered_json to_json(const PowerLimitConstraints& constraints);

namespace sim {

/// @return {"key", "name", "min_power_limit_w", "max_power_limit_w", "has_energy_counter", "description"}.
nlohmann::ordered_json to_json(const GpuModel& model);

}  // namespace sim

}  // namespace joule::device
