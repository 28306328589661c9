// SPDX-License-Identifier: Apache-2.0
// The just-in-time power-limit optimizer and the rank aggregator interface, which Python subclasses (the
// torch.distributed aggregator of joule.torch). The hooks run without the GIL; a Python aggregator takes it
// when C++ calls it.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/core/validate.hpp"
#include "joule/device/json_forms.hpp"
#include "joule/optimize/batch_size_gpu.hpp"
#include "joule/optimize/json_forms.hpp"
#include "joule/optimize/power_limit.hpp"
#include "joule/optimize/power_limit_card.hpp"

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

std::unique_ptr<OptimizerHandle> make_optimizer(const std::shared_ptr<MonitorHandle>& monitor,
                                                optimize::PowerLimitOptions options, py::object aggregator,
                                                const std::optional<std::string>& card) {
  if (!monitor) {
    throw Exception(ErrorCode::kInvalidArgument, "PowerLimitOptimizer needs a Monitor");
  }
  if (card && !monitor->monitor->gpus().empty()) {
    // Read against the first GPU: a card for another model or driver, or a newer schema, is refused.
    options.card = value_or_throw(optimize::read_card_for(*card, *monitor->monitor->gpus().front()));
    options.card_source = *card;
  }
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

template <void (optimize::PowerLimitOptimizer::*hook)()>
void call_hook(OptimizerHandle& self) {
  optimize::PowerLimitOptimizer& optimizer = self.get();
  py::gil_scoped_release release;
  (optimizer.*hook)();
}

void bind_rank_aggregator(py::module_& module) {
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
}

// The profile settings both optimizers take (PowerLimitOptimizer's, and ChaseOptimizer's `profile`): the
// C++ struct itself, filled by joule/power_limit.py, which checks each value's type under its public name.
void bind_power_limit_options(py::module_& module) {
  using Options = optimize::PowerLimitOptions;
  py::class_<Options>(
      module, "_PowerLimitOptions",
      "The profile settings of PowerLimitOptimizer and ChaseOptimizer (C++ PowerLimitOptions; "
      "the library checks them when an optimizer is made). Use joule.PowerLimitOptimizer.")
      .def(py::init<>())
      .def_readwrite("wait_steps", &Options::wait_steps)
      .def_readwrite("warmup_steps", &Options::warmup_steps)
      .def_readwrite("profile_steps", &Options::profile_steps)
      .def_readwrite("step_w", &Options::step_w, "The step between candidate limits, W.")
      .def_readwrite("policy", &Options::policy)
      .def_readwrite("profile_dir", &Options::profile_dir, "The profile store's folder; '' disables it.")
      .def_readwrite("job_key", &Options::job_key)
      .def_property(
          "restore_to", [](const Options& options) { return restore_target_name(options.restore_to); },
          [](Options& options, const std::string& name) {
            options.restore_to = restore_target_from_python(name);
          },
          "'default' or 'initial'.")
      .def_readwrite("restore_on_signals", &Options::restore_on_signals)
      .def_property(
          "steady_state",
          [](const Options& options) {
            const auto& mode = options.steady_state.mode;
            return mode ? std::string(measure::to_string(*mode)) : std::string("auto");
          },
          [](Options& options, const py::object& spec) {
            options.steady_state = steady_state_from_python(spec);
          },
          "Set: None, 'auto', 'off', 'fixed', 'steady' or a dict of its settings. Get: the mode ('auto': the "
          "GPUs' default).");
}

void bind_power_limit_optimizer(py::module_& module) {
  py::class_<OptimizerHandle>(module, "_PowerLimitOptimizer",
                              "The just-in-time power-limit optimizer (C++). Use joule.PowerLimitOptimizer.")
      .def(py::init(&make_optimizer), py::arg("monitor"), py::arg("options"), py::arg("aggregator"),
           py::arg("card") = py::none())
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
                             [](const OptimizerHandle& self) { return watts(self.get().candidates_mw()); })
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
      .def_property_readonly(
          "measurements",
          [](const OptimizerHandle& self) { return to_python_each(self.get().measurements()); })
      .def_property_readonly("frontier",
                             [](const OptimizerHandle& self) { return frontier_w(self.get().frontier()); })
      .def_property_readonly("policy", [](const OptimizerHandle& self) { return self.get().policy(); })
      .def_property_readonly(
          "constraints_w",
          [](const OptimizerHandle& self) { return to_python(device::to_json(self.get().constraints())); })
      .def_property_readonly("profile_path",
                             [](const OptimizerHandle& self) { return self.get().profile_path(); })
      .def_property_readonly("loaded_from_profile",
                             [](const OptimizerHandle& self) { return self.get().loaded_from_profile(); })
      .def_property_readonly(
          "card_path_taken",
          [](const OptimizerHandle& self) { return std::string(to_string(self.get().card_path_taken())); })
      .def_property_readonly("card_reason",
                             [](const OptimizerHandle& self) { return self.get().card_reason(); })
      .def_property_readonly("profiling_steps",
                             [](const OptimizerHandle& self) { return self.get().profiling_steps(); });
}

std::vector<double> power_limit_candidates_w(double min_w, double max_w, double step_w) {
  device::PowerLimitConstraints constraints;
  constraints.min_mw =
      power_mw_from_python(min_w, NumberRule::positive(), "power_limit_candidates_w(min_w=...)");
  constraints.max_mw =
      power_mw_from_python(max_w, NumberRule{.min = min_w}, "power_limit_candidates_w(max_w=...)");
  const uint32_t step_mw =
      power_mw_from_python(step_w, NumberRule{.min = 0.001}, "power_limit_candidates_w(step_w=...)");
  return watts(optimize::power_limit_candidates_mw(constraints, step_mw));
}

}  // namespace

void bind_optimize(py::module_& module) {
  bind_rank_aggregator(module);
  bind_power_limit_options(module);
  bind_power_limit_optimizer(module);
  module.def(
      "power_limit_candidates_w", &power_limit_candidates_w, py::arg("min_w"), py::arg("max_w"),
      py::arg("step_w") = 25.0,
      "The candidate power limits, W, highest first: max, max − step, … while ≥ min (and min itself).");
  module.def(
      "_batch_size_gpu_config",
      [](const std::vector<GpuRef>& gpus, std::optional<double> max_power_w) {
        std::vector<device::Gpu*> devices;
        devices.reserve(gpus.size());
        for (const GpuRef& gpu : gpus) {
          devices.push_back(gpu.gpu);
        }
        const auto config = value_or_throw([&] {
          py::gil_scoped_release release;
          return optimize::batch_size::gpu_config_of(devices, max_power_w);
        }());
        return py::make_tuple(config.max_power, config.number_of_gpus, config.gpu_model);
      },
      py::arg("gpus"), py::arg("max_power_w") = py::none(),
      "(max_power, number_of_gpus, gpu_model) of a batch-size job on `gpus` (GPU 0 first): max_power_w, or "
      "GPU 0's largest power limit in whole W × the count (optimize::batch_size::gpu_config_of).");
}

}  // namespace joule::python
