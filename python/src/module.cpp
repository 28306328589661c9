// SPDX-License-Identifier: Apache-2.0
// The pybind11 module joule._joule. The Python package `joule` (python/joule/) re-exports it with Pythonic
// wrappers; docs/python.md documents the API.
#include <cmath>

#include <fmt/format.h>

#include "joule/core/duration.hpp"

#include "bindings.hpp"

namespace joule::python {

Nanos seconds_to_nanos(double seconds, const char* what) {
  return value_or_throw(joule::seconds_to_nanos(seconds, what));
}

std::string show_value(const py::handle& value) {
  // joule._args.show() words the value as every other argument error does ("str 'a'").
  return py::module_::import("joule._args").attr("show")(value).cast<std::string>();
}

namespace {

[[noreturn]] void throw_argument_type_error(const py::handle& value, const char* call, const char* keyword,
                                            const char* expected) {
  throw py::type_error(
      fmt::format("{}({}=...): expected {}, got {}", call, keyword, expected, show_value(value)));
}

}  // namespace

std::string string_argument(const py::handle& value, const char* call, const char* keyword) {
  if (!PyUnicode_Check(value.ptr())) {
    throw_argument_type_error(value, call, keyword, "a string");
  }
  return value.cast<std::string>();
}

bool bool_argument(const py::handle& value, const char* call, const char* keyword) {
  if (!PyBool_Check(value.ptr()) && !PyLong_Check(value.ptr())) {
    throw_argument_type_error(value, call, keyword, "True or False");
  }
  return PyObject_IsTrue(value.ptr()) == 1;
}

std::vector<device::Gpu*> select_gpus(const device::DeviceSet& set,
                                      const std::optional<std::vector<int>>& indices) {
  return value_or_throw(set.select_gpus(indices));
}

PythonCallable::PythonCallable(py::object function)
    : function_(new py::object(std::move(function)), [](py::object* object) {
        py::gil_scoped_acquire gil;
        delete object;
      }) {}

void PythonCallable::operator()() const {
  py::gil_scoped_acquire gil;
  (*function_)();
}

}  // namespace joule::python

PYBIND11_MODULE(_joule, module) {
  namespace jp = joule::python;
  module.doc() =
      "joule's native core: devices, energy windows, power sampling, the power-limit optimizer, "
      "frontiers and policies, the Zeus simulator, the batch-size client, the pipeline (Perseus) runtime and "
      "LLM serving energy (attribution, the serving model, the SLO clock controller). "
      "Use the package "
      "`joule`, which wraps this module.";
  jp::bind_errors(module);
  jp::bind_devices(module);
  jp::bind_measure(module);
  jp::bind_frontier(module);
  jp::bind_optimize(module);
  jp::bind_simulate(module);
  jp::bind_client(module);
  jp::bind_pipeline(module);
  jp::bind_infer(module);
  jp::bind_slo_controller(module);
  jp::bind_metrics(module);
  jp::bind_carbon(module);
  jp::bind_fleet(module);
}
