// SPDX-License-Identifier: Apache-2.0
// The just-in-time power-limit optimizer and the rank aggregator interface, which Python subclasses (the
// torch.distributed aggregator of joule.torch). The hooks run without the GIL; a Python aggregator takes it
// when C++ calls it.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/core/validate.hpp"
#include "joule/optimize/power_limit.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

class PyRankAggregator : public optimize::RankAggregator {
 public:
  using optimize::RankAggregator::RankAggregator;
  int rank() const override { PYBIND11_OVERRIDE_PURE(int, optimize::RankAggregator, rank, ); }
  int world_size() const override { PYBIND11_OVERRIDE_PURE(int, optimize::RankAggregator, world_size, ); }
  std::pair<double, double> aggregate(double energy_j, double time_s) override {
    using Pair = std::pair<double, double>;
    PYBIND11_OVERRIDE_PURE(Pair, optimize::RankAggregator, aggregate, energy_j, time_s);
  }
  bool all_ranks(bool value) override { PYBIND11_OVERRIDE(bool, optimize::RankAggregator, all_ranks, value); }
};

struct OptimizerHandle {
  std::shared_ptr<MonitorHandle> monitor;
  py::object aggregator;  // the Python object behind options.aggregator, kept alive with it
  std::unique_ptr<optimize::PowerLimitOptimizer> optimizer;  // destroyed first (declared last)

  ~OptimizerHandle() {
    // The destructor restores the limits (device calls): let other Python threads run meanwhile.
    py::gil_scoped_release release;
    optimizer.reset();
  }
  optimize::PowerLimitOptimizer& get() const {
    if (!optimizer) {
      throw Exception(ErrorCode::kState, "the PowerLimitOptimizer is closed");
    }
    return *optimizer;
  }
};

}  // namespace

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

measure::SteadyStateOptions steady_state_from_python(const py::handle& spec) {
  measure::SteadyStateOptions options;
  const auto mode_from = [&options](const std::string& name) {
    if (name != "auto") {
      options.mode = naming_call(
          "steady_state", [&] { return value_or_throw(measure::steady_state_mode_from_string(name)); });
    }
  };
  if (spec.is_none()) {
    return options;
  }
  if (py::isinstance<py::str>(spec)) {
    mode_from(spec.cast<std::string>());
    return options;
  }
  if (!py::isinstance<py::dict>(spec)) {
    throw py::type_error(fmt::format(
        "steady_state=...: expected None, 'auto', 'off', 'fixed', 'steady' or a dict of its settings, got {}",
        show_value(spec)));
  }
  for (const auto& [key_object, value] : spec.cast<py::dict>()) {
    const auto key = py::str(key_object).cast<std::string>();
    const auto number = [&key, &value = value] {
      if (PyBool_Check(value.ptr()) || !(PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr()))) {
        throw py::type_error(
            fmt::format("steady_state['{}']: expected a number, got {}", key, show_value(value)));
      }
      return value.cast<double>();
    };
    if (key == "mode") {
      if (!PyUnicode_Check(value.ptr())) {
        throw py::type_error(fmt::format(
            "steady_state['mode']: expected 'auto', 'off', 'fixed' or 'steady', got {}", show_value(value)));
      }
      mode_from(value.cast<std::string>());
    } else if (key == "window_s") {
      options.window_s = number();
    } else if (key == "temperature_band_c") {
      options.temperature_band_c = number();
    } else if (key == "power_band_ratio") {
      options.power_band_ratio = number();
    } else if (key == "max_wait_s") {
      options.max_wait_s = number();
    } else if (key == "fixed_warmup_s") {
      options.fixed_warmup_s = number();
    } else {
      throw Exception(
          ErrorCode::kInvalidArgument,
          fmt::format("steady_state: unknown setting '{}' (known: mode, window_s, temperature_band_c, "
                      "power_band_ratio, max_wait_s, fixed_warmup_s)",
                      key));
    }
  }
  value_or_throw(measure::validate(options));
  return options;
}

namespace {

std::unique_ptr<OptimizerHandle> make_optimizer(const std::shared_ptr<MonitorHandle>& monitor,
                                                const Policy& policy, int wait_steps, int warmup_steps,
                                                int profile_steps, double step_w, py::object aggregator,
                                                const std::string& profile_dir, const std::string& job_key,
                                                const std::string& restore_to, bool restore_on_signals,
                                                const py::object& steady_state) {
  if (!monitor) {
    throw Exception(ErrorCode::kInvalidArgument, "PowerLimitOptimizer needs a Monitor");
  }
  optimize::PowerLimitOptions options;
  options.wait_steps = wait_steps;
  options.warmup_steps = warmup_steps;
  options.profile_steps = profile_steps;
  options.step_w = step_w;
  options.policy = policy;
  options.profile_dir = profile_dir;
  options.job_key = job_key;
  options.restore_to = restore_target_from_python(restore_to);
  options.restore_on_signals = restore_on_signals;
  options.steady_state = steady_state_from_python(steady_state);
  if (!aggregator.is_none()) {
    options.aggregator = aggregator.cast<std::shared_ptr<optimize::RankAggregator>>();
  }
  auto handle = std::make_unique<OptimizerHandle>();
  handle->monitor = monitor;
  handle->aggregator = std::move(aggregator);
  py::gil_scoped_release release;
  handle->optimizer = std::make_unique<optimize::PowerLimitOptimizer>(*monitor->monitor, std::move(options));
  return handle;
}

py::dict measurement_dict(const optimize::PowerLimitMeasurement& measurement) {
  py::dict dict;
  dict["power_limit_w"] = mw_to_w(measurement.power_limit_mw);
  dict["energy_j"] = measurement.energy_j;
  dict["time_s"] = measurement.time_s;
  dict["steps"] = measurement.steps;
  dict["energy_per_step_j"] = measurement.energy_per_step_j();
  dict["time_per_step_s"] = measurement.time_per_step_s();
  return dict;
}

template <void (optimize::PowerLimitOptimizer::*hook)()>
void call_hook(OptimizerHandle& self) {
  optimize::PowerLimitOptimizer& optimizer = self.get();
  py::gil_scoped_release release;
  (optimizer.*hook)();
}

}  // namespace

void bind_optimize(py::module_& module) {
  py::class_<optimize::RankAggregator, PyRankAggregator, std::shared_ptr<optimize::RankAggregator>>(
      module, "RankAggregator",
      "Combines one rank's profile measurement with the other ranks' so that every rank picks the same power "
      "limit. Subclass it and implement rank(), world_size() and aggregate(energy_j, time_s) -> "
      "(energy summed over ranks, J; time maximised over ranks, s); every rank calls them in the same order, "
      "so blocking collectives are fine. joule.torch.DistributedAggregator uses torch.distributed.")
      .def(py::init<>())
      .def("rank", &optimize::RankAggregator::rank, "This process's rank.")
      .def("world_size", &optimize::RankAggregator::world_size, "The number of ranks.")
      .def("aggregate", &optimize::RankAggregator::aggregate, py::arg("energy_j"), py::arg("time_s"),
           "Collective: (sum of energy_j over ranks, J; max of time_s over ranks, s).")
      .def("all_ranks", &optimize::RankAggregator::all_ranks, py::arg("value"),
           "Collective: True if value is True on every rank.");
  py::class_<optimize::SingleProcessAggregator, optimize::RankAggregator,
             std::shared_ptr<optimize::SingleProcessAggregator>>(
      module, "SingleProcessAggregator", "Rank 0 of 1: aggregate() returns its input.")
      .def(py::init<>());

  py::class_<OptimizerHandle>(module, "_PowerLimitOptimizer",
                              "The just-in-time power-limit optimizer (C++). Use joule.PowerLimitOptimizer.")
      .def(py::init(&make_optimizer), py::arg("monitor"), py::arg("policy"), py::arg("wait_steps"),
           py::arg("warmup_steps"), py::arg("profile_steps"), py::arg("step_w"), py::arg("aggregator"),
           py::arg("profile_dir"), py::arg("job_key"), py::arg("restore_to"), py::arg("restore_on_signals"),
           py::arg("steady_state") = py::none())
      .def("on_step_begin", &call_hook<&optimize::PowerLimitOptimizer::on_step_begin>)
      .def("on_step_end", &call_hook<&optimize::PowerLimitOptimizer::on_step_end>)
      .def("on_epoch_end", &call_hook<&optimize::PowerLimitOptimizer::on_epoch_end>)
      .def("close",
           [](OptimizerHandle& self) {
             py::gil_scoped_release release;
             self.optimizer.reset();
           })
      .def_property_readonly("closed", [](const OptimizerHandle& self) { return self.optimizer == nullptr; })
      .def_property_readonly(
          "state", [](const OptimizerHandle& self) { return std::string(to_string(self.get().state())); })
      .def_property_readonly("steady_state_mode",
                             [](const OptimizerHandle& self) {
                               return std::string(measure::to_string(self.get().steady_state_mode()));
                             })
      .def_property_readonly("candidates_w",
                             [](const OptimizerHandle& self) {
                               std::vector<double> candidates;
                               for (const uint32_t candidate : self.get().candidates_mw()) {
                                 candidates.push_back(mw_to_w(candidate));
                               }
                               return candidates;
                             })
      .def_property_readonly(
          "current_power_limit_w",
          [](const OptimizerHandle& self) { return mw_to_w(self.get().current_power_limit_mw()); })
      .def_property_readonly("chosen_power_limit_w",
                             [](const OptimizerHandle& self) -> std::optional<double> {
                               const auto chosen = self.get().chosen_power_limit_mw();
                               if (!chosen) {
                                 return std::nullopt;
                               }
                               return mw_to_w(*chosen);
                             })
      .def_property_readonly("measurements",
                             [](const OptimizerHandle& self) {
                               py::list list;
                               for (const auto& measurement : self.get().measurements()) {
                                 list.append(measurement_dict(measurement));
                               }
                               return list;
                             })
      .def_property_readonly("frontier",
                             [](const OptimizerHandle& self) {
                               std::vector<std::tuple<double, double, double>> points;
                               for (const auto& point : self.get().frontier().points()) {
                                 points.emplace_back(mw_to_w(point.knob), point.time_s, point.energy_j);
                               }
                               return points;
                             })
      .def_property_readonly("policy", [](const OptimizerHandle& self) { return self.get().policy(); })
      .def_property_readonly("constraints_w",
                             [](const OptimizerHandle& self) {
                               const auto& constraints = self.get().constraints();
                               py::dict dict;
                               dict["min_w"] = mw_to_w(constraints.min_mw);
                               dict["max_w"] = mw_to_w(constraints.max_mw);
                               dict["default_w"] = mw_to_w(constraints.default_mw);
                               return dict;
                             })
      .def_property_readonly("profile_path",
                             [](const OptimizerHandle& self) { return self.get().profile_path(); })
      .def_property_readonly("loaded_from_profile",
                             [](const OptimizerHandle& self) { return self.get().loaded_from_profile(); });

  module.def(
      "power_limit_candidates_w",
      [](double min_w, double max_w, double step_w) {
        value_or_throw(check_number(min_w, NumberRule::positive(), "power_limit_candidates_w(min_w=...)"));
        value_or_throw(check_number(max_w, NumberRule{.min = min_w}, "power_limit_candidates_w(max_w=...)"));
        value_or_throw(
            check_number(step_w, NumberRule{.min = 0.001}, "power_limit_candidates_w(step_w=...)"));
        device::PowerLimitConstraints constraints;
        constraints.min_mw = static_cast<uint32_t>(std::llround(w_to_mw(min_w)));
        constraints.max_mw = static_cast<uint32_t>(std::llround(w_to_mw(max_w)));
        std::vector<double> candidates;
        for (const uint32_t candidate : optimize::power_limit_candidates_mw(
                 constraints, static_cast<uint32_t>(std::llround(w_to_mw(step_w))))) {
          candidates.push_back(mw_to_w(candidate));
        }
        return candidates;
      },
      py::arg("min_w"), py::arg("max_w"), py::arg("step_w") = 25.0,
      "The candidate power limits, W, highest first: max, max − step, … while ≥ min (and min itself).");
}

}  // namespace joule::python
