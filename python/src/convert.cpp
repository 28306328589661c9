// SPDX-License-Identifier: Apache-2.0
// The shared conversions of python/src/convert.hpp.
#include "convert.hpp"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "bindings.hpp"

namespace joule::python {

namespace {

template <class Json>
py::object json_to_python(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return py::none();
    case nlohmann::json::value_t::boolean:
      return py::bool_(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(json.template get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(json.template get<double>());
    case nlohmann::json::value_t::string:
      return py::str(json.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      py::list list;
      for (const auto& item : json) {
        list.append(json_to_python(item));
      }
      return list;
    }
    case nlohmann::json::value_t::object: {
      py::dict dict;
      for (const auto& [key, value] : json.items()) {
        dict[py::str(key)] = json_to_python(value);
      }
      return dict;
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  throw Exception(ErrorCode::kInternal, "to_python: JSON binary values have no Python form");
}

}  // namespace

py::object to_python(const nlohmann::json& json) {
  return json_to_python(json);
}

py::object to_python(const nlohmann::ordered_json& json) {
  return json_to_python(json);
}

std::vector<double> watts(const std::vector<uint32_t>& powers_mw) {
  std::vector<double> powers_w;
  powers_w.reserve(powers_mw.size());
  for (const uint32_t power_mw : powers_mw) {
    powers_w.push_back(mw_to_w(power_mw));
  }
  return powers_w;
}

std::vector<std::tuple<double, double, double>> frontier_w(const Frontier<uint32_t>& frontier) {
  std::vector<std::tuple<double, double, double>> points;
  points.reserve(frontier.points().size());
  for (const auto& point : frontier.points()) {
    points.emplace_back(mw_to_w(point.knob), point.time_s, point.energy_j);
  }
  return points;
}

py::dict measurement_dict(const measure::Measurement& measurement) {
  py::dict dict;
  dict["name"] = measurement.name;
  dict["time_s"] = measurement.time_s;
  dict["gpu_energy_j"] = energies_dict(measurement.gpu_energy);
  dict["cpu_energy_j"] = energies_dict(measurement.cpu_energy);
  dict["dram_energy_j"] = energies_dict(measurement.dram_energy);
  dict["estimated"] = measurement.estimated();
  dict["why_not_measurable"] = measurement.why_not_measurable();
  return dict;
}

uint32_t power_mw_from_python(double power_w, const NumberRule& rule, const char* name) {
  return value_or_throw(round_w_to_mw(power_w, rule, name));
}

optimize::RestoreTarget restore_target_from_python(const std::string& restore_to) {
  if (restore_to == "default") {
    return optimize::RestoreTarget::kDefault;
  }
  if (restore_to == "initial") {
    return optimize::RestoreTarget::kInitial;
  }
  throw Exception(ErrorCode::kInvalidArgument,
                  fmt::format("restore_to must be 'default' or 'initial' (got '{}')", restore_to));
}

std::string restore_target_name(optimize::RestoreTarget restore_to) {
  return restore_to == optimize::RestoreTarget::kInitial ? "initial" : "default";
}

namespace {

// One setting of a steady_state dict, a number. @throws py::type_error naming the key.
double steady_state_number(const std::string& key, const py::handle& value) {
  if (PyBool_Check(value.ptr()) || !(PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr()))) {
    throw py::type_error(
        fmt::format("steady_state['{}']: expected a number, got {}", key, show_value(value)));
  }
  return value.cast<double>();
}

void set_steady_state_mode(measure::SteadyStateOptions& options, const std::string& name) {
  if (name != "auto") {
    options.mode = naming_call("steady_state",
                               [&] { return value_or_throw(measure::steady_state_mode_from_string(name)); });
  }
}

void set_steady_state_setting(measure::SteadyStateOptions& options, const std::string& key,
                              const py::handle& value) {
  if (key == "mode") {
    if (!PyUnicode_Check(value.ptr())) {
      throw py::type_error(fmt::format(
          "steady_state['mode']: expected 'auto', 'off', 'fixed' or 'steady', got {}", show_value(value)));
    }
    set_steady_state_mode(options, value.cast<std::string>());
  } else if (key == "window_s") {
    options.window_s = steady_state_number(key, value);
  } else if (key == "temperature_band_c") {
    options.temperature_band_c = steady_state_number(key, value);
  } else if (key == "power_band_ratio") {
    options.power_band_ratio = steady_state_number(key, value);
  } else if (key == "max_wait_s") {
    options.max_wait_s = steady_state_number(key, value);
  } else if (key == "fixed_warmup_s") {
    options.fixed_warmup_s = steady_state_number(key, value);
  } else {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("steady_state: unknown setting '{}' (known: mode, window_s, temperature_band_c, "
                    "power_band_ratio, max_wait_s, fixed_warmup_s)",
                    key));
  }
}

}  // namespace

measure::SteadyStateOptions steady_state_from_python(const py::handle& spec) {
  measure::SteadyStateOptions options;
  if (spec.is_none()) {
    return options;
  }
  if (py::isinstance<py::str>(spec)) {
    set_steady_state_mode(options, spec.cast<std::string>());
    return options;
  }
  if (!py::isinstance<py::dict>(spec)) {
    throw py::type_error(fmt::format(
        "steady_state=...: expected None, 'auto', 'off', 'fixed', 'steady' or a dict of its settings, got {}",
        show_value(spec)));
  }
  for (const auto& [key, value] : spec.cast<py::dict>()) {
    set_steady_state_setting(options, py::str(key).cast<std::string>(), value);
  }
  value_or_throw(measure::validate(options));
  return options;
}

}  // namespace joule::python
