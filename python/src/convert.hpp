// SPDX-License-Identifier: Apache-2.0
// python/src/convert.hpp — the one conversion of each C++ struct that several bindings hand to Python or
// take from it: JSON (every library struct's to_json form, as dicts and lists), measurements, candidate and
// frontier powers, the optimizers' steady-state and restore settings, and watts from Python for a device
// call. Each binding file converts through these, so that the same struct reads the same in every Python
// object that returns it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>
#include <pybind11/pybind11.h>

#include "joule/core/frontier.hpp"
#include "joule/core/validate.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/steady_state.hpp"
#include "joule/optimize/power_limit.hpp"

namespace joule::python {

namespace py = pybind11;

/// @return `json` as Python objects: null → None, bool, integers → int, floats → float, strings → str,
/// arrays → list, objects → dict (keys in the JSON's order).
py::object to_python(const nlohmann::json& json);
py::object to_python(const nlohmann::ordered_json& json);

/// @return [to_python(to_json(item)), …]: the library's JSON form of each item (found by ADL in the item's
/// area), in order.
template <class Range>
py::list to_python_each(const Range& items) {
  py::list list;
  for (const auto& item : items) {
    list.append(to_python(to_json(item)));
  }
  return list;
}

/// @return the powers in W (candidate limits, highest first as given).
std::vector<double> watts(const std::vector<uint32_t>& powers_mw);

/// @return the frontier's points as (power limit, W; time, s; energy, J).
std::vector<std::tuple<double, double, double>> frontier_w(const Frontier<uint32_t>& frontier);

/// @return {device index: value(energy)} of one kind of device of a Measurement (int keys, which JSON
/// objects cannot have); by default the energy, J.
template <class Value = double measure::DeviceEnergy::*>
py::dict energies_dict(const std::vector<measure::DeviceEnergy>& energies,
                       Value value = &measure::DeviceEnergy::energy_j) {
  py::dict dict;
  for (const auto& energy : energies) {
    dict[py::int_(energy.index)] = std::invoke(value, energy);
  }
  return dict;
}

/// @return Measurement.to_dict(): name, time_s, gpu_energy_j, cpu_energy_j, dram_energy_j, estimated,
/// why_not_measurable.
py::dict measurement_dict(const measure::Measurement& measurement);

/// @return watts from Python as the mW a device call takes, checked against `rule` (core/validate).
/// @throws joule::Exception kInvalidArgument naming `name` as check_number() words it.
uint32_t power_mw_from_python(double power_w, const NumberRule& rule, const char* name);

/// @return the thermal steady-state wait a Python optimizer asked for: None or "auto" (the default for the
/// GPUs), "off", "fixed" or "steady", or a dict with `mode` and any of window_s, temperature_band_c,
/// power_band_ratio, max_wait_s, fixed_warmup_s. @throws joule::Exception kInvalidArgument naming a bad key
/// or value; py::type_error naming a value of the wrong type.
measure::SteadyStateOptions steady_state_from_python(const py::handle& spec);

/// @return the restore target called "default" or "initial". @throws joule::Exception kInvalidArgument
/// otherwise.
optimize::RestoreTarget restore_target_from_python(const std::string& restore_to);
/// @return "default" or "initial".
std::string restore_target_name(optimize::RestoreTarget restore_to);

}  // namespace joule::python
