// SPDX-License-Identifier: Apache-2.0
// joule.Monitor (energy windows), joule.Measurement and joule.PowerSampler. Device reads and the sampler's
// thread run without the GIL; the sync callback takes it when C++ calls it.
#include <algorithm>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/core/duration.hpp"
#include "joule/core/validate.hpp"
#include "joule/measure/gpu_power_sampler.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

std::string energies_text(const std::vector<measure::DeviceEnergy>& energies) {
  std::vector<std::string> parts;
  parts.reserve(energies.size());
  for (const auto& energy : energies) {
    parts.push_back(energy.measurable() ? fmt::format("{}: {:.6g}{}", energy.index, energy.energy_j,
                                                      energy.estimated() ? "~" : "")
                                        : fmt::format("{}: not measurable", energy.index));
  }
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

std::shared_ptr<MonitorHandle> make_monitor(const SharedDeviceSet& set,
                                            const std::optional<std::vector<int>>& gpus,
                                            const std::optional<std::vector<int>>& cpus, py::object sync,
                                            bool approx_instant_energy, double polling_period_s) {
  if (!set) {
    throw Exception(ErrorCode::kInvalidArgument, "Monitor needs a DeviceSet (joule.devices())");
  }
  value_or_throw(check_number(polling_period_s, NumberRule::positive(), "polling_period_s"));
  auto handle = std::make_shared<MonitorHandle>();
  handle->set = set;
  std::vector<device::Gpu*> selected_gpus = select_gpus(*set, gpus);
  std::vector<device::Cpu*> selected_cpus = value_or_throw(set->select_cpus(cpus));
  for (const auto* gpu : selected_gpus) {
    handle->gpu_indices.push_back(gpu->info().index);
  }
  for (const auto* cpu : selected_cpus) {
    handle->cpu_indices.push_back(cpu->info().index);
  }
  measure::MonitorOptions options;
  if (!sync.is_none()) {
    if (!PyCallable_Check(sync.ptr())) {
      throw Exception(ErrorCode::kInvalidArgument, "sync must be None or a callable taking no arguments");
    }
    options.sync = PythonCallable(std::move(sync));
  }
  options.approx_instant_energy = approx_instant_energy;
  options.polling_period = seconds_to_nanos(polling_period_s, "polling_period_s");
  py::gil_scoped_release release;
  handle->monitor = std::make_unique<measure::EnergyMonitor>(
      std::move(selected_gpus), std::move(selected_cpus), *set->clock, std::move(options));
  return handle;
}

/// joule.PowerSampler: a GpuPowerSampler over some GPUs of a set, which it keeps alive.
struct SamplerHandle {
  SharedDeviceSet set;
  std::unique_ptr<measure::GpuPowerSampler> gpus;
  measure::PowerSampler& sampler() const { return gpus->sampler(); }
  size_t channel(int gpu_index) const { return value_or_throw(gpus->channel(gpu_index)); }
};

std::shared_ptr<SamplerHandle> make_sampler(const SharedDeviceSet& set,
                                            const std::optional<std::vector<int>>& gpus, double period_s,
                                            size_t max_points) {
  if (!set) {
    throw Exception(ErrorCode::kInvalidArgument, "PowerSampler needs a DeviceSet (joule.devices())");
  }
  value_or_throw(check_number(period_s, NumberRule::positive(), "period_s"));
  auto handle = std::make_shared<SamplerHandle>();
  handle->set = set;
  std::vector<device::Gpu*> selected = select_gpus(*set, gpus);
  if (selected.empty()) {
    throw Exception(ErrorCode::kNotFound, "PowerSampler has no GPU to sample: " + set->why_no_gpus());
  }
  handle->gpus = std::make_unique<measure::GpuPowerSampler>(
      selected, *set->clock, seconds_to_nanos(period_s, "period_s"), max_points);
  return handle;
}

std::optional<Nanos> optional_nanos(const std::optional<double>& seconds, const char* what) {
  if (!seconds) {
    return std::nullopt;
  }
  return seconds_to_nanos(*seconds, what);
}

void bind_measurement(py::module_& module) {
  py::class_<measure::Measurement>(
      module, "Measurement",
      "What one window measured: time in s, energies in J per device index. A figure is estimated (not read "
      "from an energy counter) when the GPU has no counter or the window was shorter than its update "
      "interval with approx_instant_energy. A figure is NaN when it is not measurable (a RAPL counter was "
      "reset inside the window): see measurable and why_not_measurable; the totals are then NaN too.")
      .def_readonly("name", &measure::Measurement::name, "The window's name.")
      .def_readonly("time_s", &measure::Measurement::time_s, "Elapsed time, s.")
      .def_property_readonly(
          "gpu_energy_j", [](const measure::Measurement& m) { return energies_dict(m.gpu_energy); },
          "{GPU index: energy, J}, one per monitored GPU.")
      .def_property_readonly(
          "cpu_energy_j", [](const measure::Measurement& m) { return energies_dict(m.cpu_energy); },
          "{CPU package index: package energy, J}; empty when no CPU is monitored.")
      .def_property_readonly(
          "dram_energy_j", [](const measure::Measurement& m) { return energies_dict(m.dram_energy); },
          "{CPU package index: DRAM energy, J}, for packages with a DRAM domain.")
      .def_property_readonly(
          "gpu_estimated",
          [](const measure::Measurement& m) {
            return energies_dict(m.gpu_energy, &measure::DeviceEnergy::estimated);
          },
          "{GPU index: True if its energy is estimated from power rather than read from a counter}.")
      .def_property_readonly(
          "gpu_energy_source",
          [](const measure::Measurement& m) {
            return energies_dict(m.gpu_energy, [](const auto& energy) {
              return std::string(measure::to_string(energy.source));
            });
          },
          "{GPU index: 'counter', 'power-samples', 'instant-power' or 'mig-slice-share'}.")
      .def_property_readonly("estimated", &measure::Measurement::estimated,
                             "True if any figure is estimated.")
      .def_property_readonly("measurable", &measure::Measurement::measurable,
                             "True if every figure is measurable (none is NaN).")
      .def_property_readonly("why_not_measurable", &measure::Measurement::why_not_measurable,
                             "Why some figures are NaN ('CPU 0: not measurable: the energy counter was reset "
                             "once between the readings (…)'; several joined by '; '), or None.")
      .def_property_readonly(
          "total_gpu_energy_j", &measure::Measurement::total_gpu_energy_j,
          "Sum of the GPU energies, J (Zeus's total_energy); NaN if one is not measurable.")
      .def_property_readonly("total_energy_j", &measure::Measurement::total_energy_j,
                             "GPU + CPU package + DRAM energy, J; NaN if one is not measurable.")
      .def(
          "to_dict", [](const measure::Measurement& m) { return measurement_dict(m); },
          "The measurement as plain Python data.")
      .def(
          "__eq__",
          [](const measure::Measurement& a, const measure::Measurement& b) {
            auto same = [](const std::vector<measure::DeviceEnergy>& x,
                           const std::vector<measure::DeviceEnergy>& y) {
              return std::equal(
                  x.begin(), x.end(), y.begin(), y.end(), [](const auto& left, const auto& right) {
                    // Not measurable (NaN) equals not measurable for the same reason.
                    return left.index == right.index && left.source == right.source &&
                           left.not_measurable == right.not_measurable &&
                           (left.energy_j == right.energy_j || (!left.measurable() && !right.measurable()));
                  });
            };
            return a.name == b.name && a.time_s == b.time_s && same(a.gpu_energy, b.gpu_energy) &&
                   same(a.cpu_energy, b.cpu_energy) && same(a.dram_energy, b.dram_energy);
          },
          py::is_operator())
      .def("__repr__", [](const measure::Measurement& m) {
        return fmt::format(
            "Measurement(name='{}', time_s={:.6g}, gpu_energy_j={}, cpu_energy_j={}, "
            "dram_energy_j={}, estimated={})",
            m.name, m.time_s, energies_text(m.gpu_energy), energies_text(m.cpu_energy),
            energies_text(m.dram_energy), m.estimated() ? "True" : "False");
      });
}

void bind_monitor(py::module_& module) {
  py::class_<MonitorHandle, std::shared_ptr<MonitorHandle>>(
      module, "_Monitor", "Energy windows over a DeviceSet's GPUs and CPUs. Use joule.Monitor.")
      .def(py::init(&make_monitor), py::arg("devices"), py::arg("gpus") = py::none(),
           py::arg("cpus") = py::none(), py::arg("sync") = py::none(),
           py::arg("approx_instant_energy") = false, py::arg("polling_period_s") = 0.1)
      .def(
          "begin_window",
          [](MonitorHandle& self, const py::object& name_object, const py::object& sync_object,
             const py::object& restart_object) {
            const std::string name = string_argument(name_object, "Monitor.begin_window", "name");
            const bool sync = bool_argument(sync_object, "Monitor.begin_window", "sync");
            const bool restart = bool_argument(restart_object, "Monitor.begin_window", "restart");
            py::gil_scoped_release release;
            if (restart && self.monitor->is_open(name)) {
              self.monitor->cancel_window(name);
            }
            self.monitor->begin_window(name, sync);
          },
          py::arg("name"), py::arg("sync") = true, py::arg("restart") = false,
          "Opens window `name` now (after calling the sync callback if sync). StateError if a window of that "
          "name is open, unless restart=True (which discards the open one).")
      .def(
          "end_window",
          [](MonitorHandle& self, const py::object& name_object, const py::object& sync_object) {
            const std::string name = string_argument(name_object, "Monitor.end_window", "name");
            const bool sync = bool_argument(sync_object, "Monitor.end_window", "sync");
            py::gil_scoped_release release;
            return self.monitor->end_window(name, sync);
          },
          py::arg("name"), py::arg("sync") = true,
          "Closes window `name` and returns its Measurement. NotFoundError if no such window is open.")
      .def(
          "cancel_window",
          [](MonitorHandle& self, const py::object& name) {
            self.monitor->cancel_window(string_argument(name, "Monitor.cancel_window", "name"));
          },
          py::arg("name"), "Discards window `name` without reading any device. NotFoundError if not open.")
      .def(
          "is_open",
          [](const MonitorHandle& self, const py::object& name) {
            return self.monitor->is_open(string_argument(name, "Monitor.is_open", "name"));
          },
          py::arg("name"), "True if a window called `name` is open.")
      .def(
          "open_windows", [](const MonitorHandle& self) { return self.monitor->open_windows(); },
          "The names of the open windows, sorted.")
      .def(
          "reset_windows",
          [](MonitorHandle& self) {
            for (const auto& name : self.monitor->open_windows()) {
              if (self.monitor->is_open(name)) {
                self.monitor->cancel_window(name);
              }
            }
          },
          "Discards every open window.")
      .def_readonly("gpu_indices", &MonitorHandle::gpu_indices, "Framework indices of the monitored GPUs.")
      .def_readonly("cpu_indices", &MonitorHandle::cpu_indices, "Package indices of the monitored CPUs.")
      .def_readonly("devices", &MonitorHandle::set, "The DeviceSet the monitored devices belong to.")
      .def_property_readonly(
          "polled_gpu_indices",
          [](const MonitorHandle& self) {
            std::vector<int> polled;
            for (const auto* gpu : self.monitor->gpus()) {
              if (!gpu->info().has_energy_counter) {
                polled.push_back(gpu->info().index);
              }
            }
            return polled;
          },
          "GPUs without an energy counter, whose energy is integrated from polled power.");
}

using SamplerClass = py::class_<SamplerHandle, std::shared_ptr<SamplerHandle>>;

// PowerSampler's readings: timelines, latest and peak powers, energies.
void define_sampler_readings(SamplerClass& sampler) {
  sampler
      .def(
          "timeline",
          [](const SamplerHandle& self, int gpu, std::optional<double> start_s, std::optional<double> end_s) {
            const size_t channel = self.channel(gpu);
            const auto samples = self.sampler().timeline(channel, optional_nanos(start_s, "start_s"),
                                                         optional_nanos(end_s, "end_s"));
            std::vector<std::pair<double, double>> points;
            points.reserve(samples.size());
            for (const auto& sample : samples) {
              points.emplace_back(to_seconds(sample.time), mw_to_w(sample.power_mw));
            }
            return points;
          },
          py::arg("gpu") = 0, py::arg("start_s") = py::none(), py::arg("end_s") = py::none(),
          "The change-only power timeline of GPU `gpu` as [(time_s, power_w)], within [start_s, end_s] if "
          "given.")
      .def(
          "latest_w",
          [](const SamplerHandle& self, int gpu) -> std::optional<double> {
            const auto sample = self.sampler().latest(self.channel(gpu));
            if (!sample) {
              return std::nullopt;
            }
            return mw_to_w(sample->power_mw);
          },
          py::arg("gpu") = 0, "The latest power reading of GPU `gpu`, W (None before the first).")
      .def(
          "energy",
          [](const SamplerHandle& self, double start_s, double end_s) {
            const Nanos start = seconds_to_nanos(start_s, "start_s");
            const Nanos end = seconds_to_nanos(end_s, "end_s");
            py::dict energies;
            for (const auto& [index, energy_j] : value_or_throw(self.gpus->energy_j(start, end))) {
              energies[py::int_(index)] = energy_j;
            }
            return energies;
          },
          py::arg("start_s"), py::arg("end_s"),
          "{GPU index: energy over [start_s, end_s], J}: the trapezoid integral of the timeline. "
          "NotFoundError before the first reading; InvalidArgumentError if end_s < start_s.")
      .def(
          "peak_w",
          [](const SamplerHandle& self, int gpu, double start_s, double end_s) -> std::optional<double> {
            const auto peak = self.sampler().peak_mw(self.channel(gpu), seconds_to_nanos(start_s, "start_s"),
                                                     seconds_to_nanos(end_s, "end_s"));
            if (!peak) {
              return std::nullopt;
            }
            return mw_to_w(*peak);
          },
          py::arg("gpu"), py::arg("start_s"), py::arg("end_s"),
          "The highest reading of GPU `gpu` within [start_s, end_s], W (None if none).");
}

void bind_power_sampler(py::module_& module) {
  SamplerClass sampler(
      module, "PowerSampler",
      "Polls GPU power on a C++ background thread (which never touches Python) and keeps a change-only "
      "timeline per GPU. Times are s on the devices' clock (DeviceSet.now_s()), powers W, energies J.");
  sampler
      .def(py::init(&make_sampler), py::arg("devices"), py::arg("gpus") = py::none(),
           py::arg("period_s") = 0.1, py::arg("max_points") = 0,
           "devices: a DeviceSet; gpus: framework indices (all if None); period_s: time between polls, s; "
           "max_points: bound on stored timeline points per GPU (0 = unbounded).")
      .def(
          "start",
          [](SamplerHandle& self) {
            py::gil_scoped_release release;
            self.sampler().start();
          },
          "Starts the background thread (first poll immediately). StateError if running.")
      .def(
          "stop",
          [](SamplerHandle& self) {
            py::gil_scoped_release release;
            self.sampler().stop();
          },
          "Stops the background thread and waits for it.")
      .def_property_readonly("running", [](const SamplerHandle& self) { return self.sampler().running(); })
      .def(
          "sample_now",
          [](SamplerHandle& self) {
            py::gil_scoped_release release;
            self.sampler().sample_now();
          },
          "Reads every GPU now, on the calling thread.")
      .def(
          "sample_for",
          [](SamplerHandle& self, double duration_s) {
            const Nanos duration =
                value_or_throw(joule::seconds_to_nanos(duration_s, "duration_s", duration_rule(true)));
            py::gil_scoped_release release;
            self.gpus->sample_for(duration);
          },
          py::arg("duration_s"),
          "Samples for duration_s seconds and returns, without holding the GIL (other Python threads run "
          "meanwhile). Starts and stops the thread if it was not running. On a virtual clock it samples, "
          "advances the clock and samples again.")
      .def_property_readonly("gpu_indices",
                             [](const SamplerHandle& self) { return self.gpus->gpu_indices(); })
      .def_property_readonly("period_s",
                             [](const SamplerHandle& self) { return to_seconds(self.sampler().period()); })
      .def(
          "now_s", [](const SamplerHandle& self) { return to_seconds(self.set->clock->now()); },
          "The sampler's clock, s.")
      .def_property_readonly(
          "reads", [](const SamplerHandle& self) { return self.sampler().reads(); },
          "Reads made so far (successful, empty or failed).")
      .def_property_readonly("failed_reads",
                             [](const SamplerHandle& self) { return self.sampler().failed_reads(); })
      .def_readonly("devices", &SamplerHandle::set)
      .def("__enter__",
           [](const std::shared_ptr<SamplerHandle>& self) {
             {
               py::gil_scoped_release release;
               self->sampler().start();
             }
             return self;
           })
      .def("__exit__", [](SamplerHandle& self, const py::args&) {
        py::gil_scoped_release release;
        self.sampler().stop();
      });
  define_sampler_readings(sampler);
}

}  // namespace

void bind_measure(py::module_& module) {
  bind_measurement(module);
  bind_monitor(module);
  bind_power_sampler(module);
}

}  // namespace joule::python
