// SPDX-License-Identifier: Apache-2.0
// python/src/bindings.hpp — shared pieces of the pybind11 module joule._joule: one bind_* per area, the
// device set the Python objects share, and helpers for units and errors (conversions: convert.hpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/core/units.hpp"
#include "joule/device/discovery.hpp"
#include "joule/measure/energy_monitor.hpp"
#include "joule/measure/steady_state.hpp"

#include "convert.hpp"  // the shared conversions (constraints, measurements, steady_state, restore_to, W → mW)

namespace joule::device::sim {
class SimulatedGpu;
}  // namespace joule::device::sim

namespace joule::python {

namespace py = pybind11;

void bind_errors(py::module_& module);
void bind_devices(py::module_& module);
void bind_measure(py::module_& module);
void bind_frontier(py::module_& module);
void bind_optimize(py::module_& module);
void bind_simulate(py::module_& module);
void bind_client(py::module_& module);
void bind_pipeline(py::module_& module);
void bind_infer(py::module_& module);
void bind_slo_controller(py::module_& module);
void bind_metrics(py::module_& module);
void bind_carbon(py::module_& module);
void bind_fleet(py::module_& module);

/// The devices of one discovery, shared by every Python object made from them (Gpu, Monitor, PowerSampler,
/// PowerLimitOptimizer), so that the devices outlive all of them.
using SharedDeviceSet = std::shared_ptr<device::DeviceSet>;

/// joule.Gpu: one GPU and whatever keeps it alive (the DeviceSet it came from, or a PipelineStageDevice).
struct GpuRef {
  std::shared_ptr<const void> owner;
  device::Gpu* gpu = nullptr;
};

/// @return `seconds` as Nanos; kInvalidArgument (naming `what`) if it is not finite.
Nanos seconds_to_nanos(double seconds, const char* what);

/// Arguments of the calls made every training step, which take py::object so that a wrong type costs
/// nothing until it happens and then names the argument (the other calls get that from joule/_args.py).
/// @return make()'s result; a joule::Exception it throws comes back with the same code and its message
/// prefixed "CALL: " (for constructors whose library checks word the value but not the Python call).
template <typename Make>
auto naming_call(const char* call, Make&& make) -> decltype(make()) {
  try {
    return make();
  } catch (const Exception& error) {
    throw Exception(error.code(), std::string(call) + ": " + error.what());
  }
}

/// @return a value's type and short repr for messages, as joule._args.show() words it: "str 'a'", "int 3".
std::string show_value(const py::handle& value);
/// @return `value` as a string. @throws py::type_error "CALL(KEYWORD=...): expected a string, got int 3".
std::string string_argument(const py::handle& value, const char* call, const char* keyword);
/// @return `value` as a bool (True, False or an int). @throws py::type_error as string_argument().
bool bool_argument(const py::handle& value, const char* call, const char* keyword);

/// @return the GPUs with these framework indices (all if nullopt), as joule's errors if unknown.
std::vector<device::Gpu*> select_gpus(const device::DeviceSet& set,
                                      const std::optional<std::vector<int>>& indices);

/// A Python callable that can be called from any C++ thread (it takes the GIL) and copied or destroyed
/// without holding the GIL.
class PythonCallable {
 public:
  explicit PythonCallable(py::object function);
  /// Calls the function with no arguments, holding the GIL. A Python exception propagates as
  /// py::error_already_set.
  void operator()() const;

 private:
  std::shared_ptr<py::object> function_;
};

/// joule.Monitor: an EnergyMonitor over some devices of a set, which it keeps alive.
struct MonitorHandle {
  SharedDeviceSet set;
  std::vector<int> gpu_indices;  ///< framework indices of the monitored GPUs, in the monitor's order
  std::vector<int> cpu_indices;  ///< package indices of the monitored CPUs
  std::unique_ptr<measure::EnergyMonitor> monitor;
};

/// @return every setting made on a simulated GPU: dicts time_s, setting, value, value_min, oldest first.
py::list settings_log_list(const device::sim::SimulatedGpu& gpu);

}  // namespace joule::python
