// SPDX-License-Identifier: Apache-2.0
// joule.DeviceSet, joule.Gpu, joule.Cpu and discovery. Device calls run without the GIL (a real driver call
// can take milliseconds).
#include <chrono>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/core/validate.hpp"
#include "joule/device/json_forms.hpp"
#include "joule/device/sim_gpu.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

struct CpuRef {
  SharedDeviceSet set;
  device::Cpu* cpu = nullptr;
};

template <class T>
T call_device(Result<T> (device::Gpu::*method)(), device::Gpu& gpu) {
  Result<T> result = [&] {
    py::gil_scoped_release release;
    return (gpu.*method)();
  }();
  return value_or_throw(std::move(result));
}

VirtualClock& virtual_clock_of(const device::DeviceSet& set) {
  auto* clock = dynamic_cast<VirtualClock*>(set.clock.get());
  if (clock == nullptr) {
    throw Exception(ErrorCode::kState,
                    "the devices run on the real (steady) clock; only a virtual clock can be advanced "
                    "(joule.devices(sim=..., virtual_clock=True))");
  }
  return *clock;
}

std::vector<device::sim::SimulatedGpu*> simulated_gpus(const device::DeviceSet& set) {
  std::vector<device::sim::SimulatedGpu*> gpus;
  for (const auto& gpu : set.gpus) {
    auto* simulated = dynamic_cast<device::sim::SimulatedGpu*>(gpu.get());
    if (simulated == nullptr) {
      throw Exception(
          ErrorCode::kNotSupported,
          fmt::format("{} is not simulated; simulated training needs joule.devices(sim=...)", gpu->label()));
    }
    gpus.push_back(simulated);
  }
  if (gpus.empty()) {
    throw Exception(ErrorCode::kNotFound, "simulated training needs GPUs: " + set.why_no_gpus());
  }
  return gpus;
}

SharedDeviceSet discover(const std::optional<std::string>& sim, bool virtual_clock, bool gpus, bool cpus,
                         const std::optional<std::string>& powercap_root,
                         const std::optional<std::string>& nvml_library,
                         const std::optional<std::string>& rocm_library,
                         const std::optional<std::string>& daemon_socket,
                         const std::optional<std::string>& amd_smi_library,
                         const std::optional<std::string>& level_zero_library,
                         const std::optional<std::string>& jetson_sysfs_root) {
  device::DiscoveryOptions options = value_or_throw(device::DiscoveryOptions::from_environment());
  // Each argument given overrides its environment variable.
  options.sim_spec = sim ? sim : options.sim_spec;
  options.daemon_socket = daemon_socket ? daemon_socket : options.daemon_socket;
  options.powercap_root = powercap_root.value_or(options.powercap_root);
  options.nvml_library = nvml_library.value_or(options.nvml_library);
  options.rocm_library = rocm_library.value_or(options.rocm_library);
  options.amd_smi_library = amd_smi_library.value_or(options.amd_smi_library);
  options.level_zero_library = level_zero_library.value_or(options.level_zero_library);
  options.jetson_sysfs_root = jetson_sysfs_root ? jetson_sysfs_root : options.jetson_sysfs_root;
  options.gpus = gpus;
  options.cpus = cpus;
  if (virtual_clock) {
    if (!options.sim_spec) {
      throw Exception(ErrorCode::kInvalidArgument,
                      "virtual_clock=True needs simulated GPUs (sim='v100:imagenet' or JOULE_SIM)");
    }
    const auto unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    options.clock = std::make_shared<VirtualClock>(unix_ns);
  }
  Result<device::DeviceSet> found = [&] {
    py::gil_scoped_release release;
    return device::discover(options);
  }();
  return std::make_shared<device::DeviceSet>(value_or_throw(std::move(found)));
}

void bind_gpu(py::module_& module) {
  py::class_<GpuRef>(module, "Gpu", "One GPU of a DeviceSet. Powers in W, energies in J, clocks in MHz.")
      .def_property_readonly(
          "index", [](const GpuRef& ref) { return ref.gpu->info().index; },
          "Framework index (position after CUDA_VISIBLE_DEVICES).")
      .def_property_readonly(
          "physical_index", [](const GpuRef& ref) { return ref.gpu->info().physical_index; },
          "The vendor library's own index.")
      .def_property_readonly("name", [](const GpuRef& ref) { return ref.gpu->info().name; })
      .def_property_readonly("uuid", [](const GpuRef& ref) { return ref.gpu->info().uuid; })
      .def_property_readonly(
          "backend", [](const GpuRef& ref) { return ref.gpu->info().backend; },
          "'nvml', 'levelzero', 'amdsmi', 'rocm', 'jetson', 'sim' or 'daemon'.")
      .def_property_readonly(
          "has_energy_counter", [](const GpuRef& ref) { return ref.gpu->info().has_energy_counter; },
          "False if energy must be estimated from power samples.")
      .def_property_readonly("label", [](const GpuRef& ref) { return ref.gpu->label(); })
      .def(
          "energy_j",
          [](const GpuRef& ref) {
            return mj_to_j(static_cast<double>(call_device(&device::Gpu::energy_mj, *ref.gpu)));
          },
          "Cumulative energy counter, J (since an arbitrary origin).")
      .def(
          "power_w", [](const GpuRef& ref) { return mw_to_w(call_device(&device::Gpu::power_mw, *ref.gpu)); },
          "Current board power, W.")
      .def(
          "power_limit_w",
          [](const GpuRef& ref) { return mw_to_w(call_device(&device::Gpu::power_limit_mw, *ref.gpu)); },
          "The power limit in force, W.")
      .def(
          "power_limit_constraints_w",
          [](const GpuRef& ref) {
            return to_python(device::to_json(call_device(&device::Gpu::power_limit_constraints, *ref.gpu)));
          },
          "{'min_w', 'max_w', 'default_w'}: the power-limit range and default, W.")
      .def(
          "set_power_limit_w",
          [](const GpuRef& ref, double power_limit_w) {
            const uint32_t power_limit_mw = power_mw_from_python(power_limit_w, quantity::power_w(),
                                                                 "Gpu.set_power_limit_w(power_limit_w=...)");
            Result<void> result = [&] {
              py::gil_scoped_release release;
              return ref.gpu->set_power_limit_mw(power_limit_mw);
            }();
            value_or_throw(std::move(result));
          },
          py::arg("power_limit_w"), "Sets the power limit, W. OutOfRangeError outside the constraints.")
      .def(
          "reset_power_limit",
          [](const GpuRef& ref) {
            Result<void> result = [&] {
              py::gil_scoped_release release;
              return ref.gpu->reset_power_limit();
            }();
            value_or_throw(std::move(result));
          },
          "Sets the power limit back to the board's default.")
      .def(
          "supported_sm_clocks_mhz",
          [](const GpuRef& ref) { return call_device(&device::Gpu::supported_sm_clocks_mhz, *ref.gpu); },
          "SM clocks the GPU supports, MHz, highest first.")
      .def(
          "lock_sm_clocks_mhz",
          [](const GpuRef& ref, uint32_t min_mhz, uint32_t max_mhz) {
            Result<void> result = [&] {
              py::gil_scoped_release release;
              return ref.gpu->lock_sm_clocks(min_mhz, max_mhz);
            }();
            value_or_throw(std::move(result));
          },
          py::arg("min_mhz"), py::arg("max_mhz"), "Locks the SM clock into [min_mhz, max_mhz].")
      .def(
          "reset_sm_clocks",
          [](const GpuRef& ref) {
            Result<void> result = [&] {
              py::gil_scoped_release release;
              return ref.gpu->reset_sm_clocks();
            }();
            value_or_throw(std::move(result));
          },
          "Removes an SM clock lock.")
      .def(
          "set_simulated_busy",
          [](const GpuRef& ref, bool busy) {
            Result<double> result = [&] {
              py::gil_scoped_release release;
              return ref.gpu->set_simulated_busy(busy);
            }();
            return value_or_throw(std::move(result));
          },
          py::arg("busy"),
          "Simulated GPUs only (this process's or a joule daemon's): run the workload (busy) or idle. "
          "Returns the slowdown of the workload under the settings in force (>= 1: its time per iteration "
          "over the time at the largest power limit without a clock lock). NotSupportedError for a real GPU.")
      .def("__repr__", [](const GpuRef& ref) {
        return fmt::format("<joule.Gpu {} backend={} energy_counter={}>", ref.gpu->label(),
                           ref.gpu->info().backend, ref.gpu->info().has_energy_counter ? "True" : "False");
      });
}

void bind_cpu(py::module_& module) {
  py::class_<CpuRef>(module, "Cpu", "One CPU package (RAPL). Energies in J.")
      .def_property_readonly(
          "index", [](const CpuRef& ref) { return ref.cpu->info().index; },
          "Package index (the N of intel-rapl:N).")
      .def_property_readonly("name", [](const CpuRef& ref) { return ref.cpu->info().name; })
      .def_property_readonly("backend", [](const CpuRef& ref) { return ref.cpu->info().backend; })
      .def_property_readonly("has_dram", [](const CpuRef& ref) { return ref.cpu->info().has_dram; })
      .def_property_readonly("label", [](const CpuRef& ref) { return ref.cpu->label(); })
      .def(
          "package_energy_j",
          [](const CpuRef& ref) {
            Result<uint64_t> result = [&] {
              py::gil_scoped_release release;
              return ref.cpu->package_energy_mj();
            }();
            return mj_to_j(static_cast<double>(value_or_throw(std::move(result))));
          },
          "Cumulative package energy, J.")
      .def(
          "dram_energy_j",
          [](const CpuRef& ref) {
            Result<uint64_t> result = [&] {
              py::gil_scoped_release release;
              return ref.cpu->dram_energy_mj();
            }();
            return mj_to_j(static_cast<double>(value_or_throw(std::move(result))));
          },
          "Cumulative DRAM energy, J. NotSupportedError without a DRAM domain.")
      .def("__repr__", [](const CpuRef& ref) {
        return fmt::format("<joule.Cpu {} dram={}>", ref.cpu->label(),
                           ref.cpu->info().has_dram ? "True" : "False");
      });
}

void bind_device_set(py::module_& module) {
  py::class_<device::DeviceSet, SharedDeviceSet>(
      module, "DeviceSet",
      "Every GPU and CPU one discovery found, and the clock they run on. Made by joule.devices().")
      .def_property_readonly(
          "gpus",
          [](const SharedDeviceSet& set) {
            std::vector<GpuRef> gpus;
            for (const auto& gpu : set->gpus) {
              gpus.push_back({set, gpu.get()});
            }
            return gpus;
          },
          "The GPUs, in framework order (gpus[i].index == i).")
      .def_property_readonly(
          "cpus",
          [](const SharedDeviceSet& set) {
            std::vector<CpuRef> cpus;
            for (const auto& cpu : set->cpus) {
              cpus.push_back({set, cpu.get()});
            }
            return cpus;
          },
          "The CPU packages, by package index.")
      .def_property_readonly(
          "reports", [](const device::DeviceSet& set) { return to_python_each(set.reports); },
          "One dict per backend tried: backend, kind ('gpu'/'cpu'), devices, ok, detail.")
      .def_property_readonly(
          "is_virtual", [](const device::DeviceSet& set) { return set.clock->is_virtual(); },
          "True if the devices run on a virtual clock (time moves only when advanced).")
      .def("why_no_gpus", &device::DeviceSet::why_no_gpus, "Why no GPU was found, from the reports.")
      .def("why_no_cpus", &device::DeviceSet::why_no_cpus, "Why no CPU counter was found.")
      .def(
          "now_s", [](const device::DeviceSet& set) { return to_seconds(set.clock->now()); },
          "The devices' clock, s since its epoch (the time base of PowerSampler timelines).")
      .def(
          "to_unix_s",
          [](const device::DeviceSet& set, double time_s) {
            return static_cast<double>(set.clock->to_unix_ns(seconds_to_nanos(time_s, "time_s"))) / 1e9;
          },
          py::arg("time_s"), "Converts a time of the devices' clock (s) into Unix time (s).")
      .def(
          "advance",
          [](const device::DeviceSet& set, double seconds) {
            virtual_clock_of(set).advance(seconds_to_nanos(seconds, "seconds"));
          },
          py::arg("seconds"), "Moves a virtual clock forward. StateError on the real clock.")
      .def(
          "iteration_time_s",
          [](const device::DeviceSet& set) {
            device::sim::TrainingJob job(simulated_gpus(set), virtual_clock_of(set));
            return job.iteration_time_s();
          },
          "Simulated GPUs on a virtual clock: the time of one training iteration at the current settings, s.")
      .def(
          "run_iterations",
          [](const device::DeviceSet& set, int64_t iterations) {
            value_or_throw(check_number(static_cast<double>(iterations), NumberRule::non_negative_integer(),
                                        "iterations"));
            device::sim::TrainingJob job(simulated_gpus(set), virtual_clock_of(set));
            return to_seconds(job.run_iterations(iterations));
          },
          py::arg("iterations") = 1,
          "Simulated GPUs on a virtual clock: runs `iterations` data-parallel training iterations by "
          "advancing the clock (each takes the slowest GPU's time at its power limit). Returns the time "
          "they took, s.")
      .def("__repr__", [](const device::DeviceSet& set) {
        return fmt::format("<joule.DeviceSet {} GPU(s), {} CPU(s), {} clock>", set.gpus.size(),
                           set.cpus.size(), set.clock->is_virtual() ? "virtual" : "steady");
      });
}

}  // namespace

void bind_devices(py::module_& module) {
  bind_gpu(module);
  bind_cpu(module);
  bind_device_set(module);
  module.def("_discover", &discover, py::arg("sim") = py::none(), py::arg("virtual_clock") = false,
             py::arg("gpus") = true, py::arg("cpus") = true, py::arg("powercap_root") = py::none(),
             py::arg("nvml_library") = py::none(), py::arg("rocm_library") = py::none(),
             py::arg("daemon_socket") = py::none(), py::arg("amd_smi_library") = py::none(),
             py::arg("level_zero_library") = py::none(), py::arg("jetson_sysfs_root") = py::none(),
             "Discovers devices: JOULE_* environment variables, overridden by the arguments.");
  module.def(
      "_sim_models", [] { return to_python_each(device::sim::gpu_models()); }, "The simulated GPU models.");
}

}  // namespace joule::python
