// SPDX-License-Identifier: Apache-2.0
// python/src/convert.hpp — the one conversion of each C++ struct that several bindings hand to Python or
// take from it: power-limit constraints, measurements, candidate and frontier powers, the optimizers'
// steady-state and restore settings, and watts from Python for a device call. Each binding file converts
// through these, so that the same struct reads the same in every Python object that returns it.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <pybind11/pybind11.h>

#include "joule/core/frontier.hpp"
#include "joule/core/validate.hpp"
#include "joule/device/gpu.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/steady_state.hpp"
#include "joule/optimize/power_limit.hpp"

namespace joule::python {

namespace py = pybind11;

/// @return {"min_w", "max_w", "default_w"}: a GPU's power-limit range and default, W.
py::dict constraints_dict(const device::PowerLimitConstraints& constraints);

/// @return {"power_limit_w", "energy_j", "time_s", "steps", "energy_per_step_j", "time_per_step_s"}: one
/// profiled power limit (W, J, s) of a PowerLimitOptimizer or of Chase's profile.
py::dict power_limit_measurement_dict(const optimize::PowerLimitMeasurement& measurement);

/// @return the powers in W (candidate limits, highest first as given).
std::vector<double> watts(const std::vector<uint32_t>& powers_mw);

/// @return the frontier's points as (power limit, W; time, s; energy, J).
std::vector<std::tuple<double, double, double>> frontier_w(const Frontier<uint32_t>& frontier);

/// @return {device index: energy, J} of one kind of device of a Measurement.
py::dict energies_dict(const std::vector<measure::DeviceEnergy>& energies);

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
