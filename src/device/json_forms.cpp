// SPDX-License-Identifier: Apache-2.0
#include "joule/device/json_forms.hpp"

#include "joule/core/units.hpp"

namespace joule::device {

nlohmann::ordered_json to_json(const BackendReport& report) {
  return {{"backend", report.backend},
          {"kind", report.kind},
          {"devices", report.devices},
          {"ok", report.ok},
          {"detail", report.detail}};
}

nlohmann::ordered_json to_json(const PowerLimitConstraints& constraints) {
  return {{"min_w", mw_to_w(constraints.min_mw)},
          {"max_w", mw_to_w(constraints.max_mw)},
          {"default_w", mw_to_w(constraints.default_mw)}};
}

nlohmann::ordered_json sim::to_json(const GpuModel& model) {
  return {{"key", model.key},
          {"name", model.name},
          {"min_power_limit_w", mw_to_w(model.min_power_limit_mw)},
          {"max_power_limit_w", mw_to_w(model.max_power_limit_mw)},
          {"has_energy_counter", model.has_energy_counter},
          {"description", model.description}};
}

}  // namespace joule::device
