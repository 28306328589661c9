// SPDX-License-Identifier: Apache-2.0
// The policies (ZeusCost, CarbonCost, Deadline, MaxSlowdown, MinEnergy, MinTime) and the two frontier
// primitives joule.Frontier is built on: pareto_indices and select_index.
#include "joule/core/frontier.hpp"

#include <pybind11/stl.h>

#include "joule/core/validate.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

template <class T>
std::string describe_one(const T& policy) {
  return describe(Policy{policy});
}

}  // namespace

void bind_frontier(py::module_& module) {
  py::class_<ZeusCost>(module, "ZeusCost",
                       "Zeus's cost eta·E + (1 − eta)·max_power_w·T, J. Picks the point of least cost. "
                       "max_power_w = 0 lets the power-limit optimizer derive it.")
      .def(py::init([](double eta, double max_power_w) {
             // Checked as given (validate() later also wants the derived max power > 0).
             value_or_throw(check_number(eta, NumberRule::between(0, 1), "ZeusCost(eta=...)"));
             value_or_throw(
                 check_number(max_power_w, NumberRule::non_negative(), "ZeusCost(max_power_w=...)"));
             return ZeusCost{eta, max_power_w};
           }),
           py::arg("eta") = 0.5, py::arg("max_power_w") = 0.0)
      .def_readwrite("eta", &ZeusCost::eta, "Weight of energy in [0, 1].")
      .def_readwrite("max_power_w", &ZeusCost::max_power_w, "Power that converts time into energy, W.")
      .def("cost", &ZeusCost::cost, py::arg("energy_j"), py::arg("time_s"), "The cost, J.")
      .def("__repr__", &describe_one<ZeusCost>);
  py::class_<CarbonCost>(module, "CarbonCost",
                         "Chase's cost: eta·(I/I_max)·E + (1 − eta)·max_power_w·T with I the forecast carbon "
                         "intensity (gCO2e/kWh) clamped to I_max.")
      .def(py::init([](double eta, double intensity_g_per_kwh, double max_intensity_g_per_kwh,
                       double max_power_w) {
             value_or_throw(check_number(eta, NumberRule::between(0, 1), "CarbonCost(eta=...)"));
             value_or_throw(check_number(intensity_g_per_kwh, NumberRule::non_negative(),
                                         "CarbonCost(intensity_g_per_kwh=...)"));
             value_or_throw(check_number(max_intensity_g_per_kwh, NumberRule::positive(),
                                         "CarbonCost(max_intensity_g_per_kwh=...)"));
             value_or_throw(
                 check_number(max_power_w, NumberRule::non_negative(), "CarbonCost(max_power_w=...)"));
             return CarbonCost{eta, intensity_g_per_kwh, max_intensity_g_per_kwh, max_power_w};
           }),
           py::arg("eta") = 0.5, py::arg("intensity_g_per_kwh") = 0.0,
           py::arg("max_intensity_g_per_kwh") = 750.0, py::arg("max_power_w") = 0.0)
      .def_readwrite("eta", &CarbonCost::eta)
      .def_readwrite("intensity_g_per_kwh", &CarbonCost::intensity_g_per_kwh)
      .def_readwrite("max_intensity_g_per_kwh", &CarbonCost::max_intensity_g_per_kwh)
      .def_readwrite("max_power_w", &CarbonCost::max_power_w)
      .def("cost", &CarbonCost::cost, py::arg("energy_j"), py::arg("time_s"), "The cost, J.")
      .def("effective_eta", &CarbonCost::effective_eta, "The eta of the ZeusCost that picks the same point.")
      .def("__repr__", &describe_one<CarbonCost>);
  py::class_<Deadline>(module, "Deadline", "The least-energy point whose time is at most time_s.")
      .def(py::init([](double time_s) {
             value_or_throw(check_number(time_s, NumberRule::non_negative(), "Deadline(time_s=...)"));
             return Deadline{time_s};
           }),
           py::arg("time_s"))
      .def_readwrite("time_s", &Deadline::time_s)
      .def("__repr__", &describe_one<Deadline>);
  py::class_<MaxSlowdown>(module, "MaxSlowdown",
                          "The least-energy point whose time is at most factor × the fastest point's time.")
      .def(py::init([](double factor) {
             value_or_throw(check_number(factor, NumberRule{.min = 1}, "MaxSlowdown(factor=...)"));
             return MaxSlowdown{factor};
           }),
           py::arg("factor"))
      .def_readwrite("factor", &MaxSlowdown::factor)
      .def("__repr__", &describe_one<MaxSlowdown>);
  py::class_<MinEnergy>(module, "MinEnergy", "The least-energy point.")
      .def(py::init<>())
      .def("__repr__", &describe_one<MinEnergy>);
  py::class_<MinTime>(module, "MinTime", "The fastest point.")
      .def(py::init<>())
      .def("__repr__", &describe_one<MinTime>);

  module.def(
      "describe", [](const Policy& policy) { return describe(policy); }, py::arg("policy"),
      "A one-line description of a policy.");
  module.def(
      "validate_policy", [](const Policy& policy) { value_or_throw(validate(policy)); }, py::arg("policy"),
      "Raises InvalidArgumentError (naming the parameter) if the policy's parameters are invalid.");
  module.def("pareto_indices", &pareto_indices, py::arg("times_s"), py::arg("energies_j"),
             "Positions of the Pareto-optimal (time, energy) pairs, sorted by time.");
  module.def(
      "select_index",
      [](const std::vector<double>& times_s, const std::vector<double>& energies_j, const Policy& policy) {
        if (times_s.size() != energies_j.size()) {
          throw Exception(ErrorCode::kInvalidArgument, "times_s and energies_j differ in length");
        }
        return value_or_throw(select_index(times_s, energies_j, policy));
      },
      py::arg("times_s"), py::arg("energies_j"), py::arg("policy"),
      "The index of the point `policy` picks among points given fastest first.");
}

}  // namespace joule::python
