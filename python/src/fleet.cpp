// SPDX-License-Identifier: Apache-2.0
// joule._joule._FleetMonitor: one energy window over several nodes' daemons (joule/fleet), for
// joule.FleetMonitor (joule/fleet.py checks the arguments). Network waits run without the GIL.
#include <pybind11/stl.h>

#include "joule/fleet/fleet_monitor.hpp"
#include "joule/fleet/json_forms.hpp"

#include "bindings.hpp"

namespace joule::python {

void bind_fleet(py::module_& module) {
  py::class_<fleet::FleetMonitor>(module, "_FleetMonitor")
      .def(py::init([](const std::string& nodes, size_t clock_probes, double timeout_s, const std::string& ca,
                       const std::string& certificate, const std::string& key, const std::string& token_file,
                       bool plain_tcp) {
             auto parsed = value_or_throw(fleet::parse_nodes(nodes));
             fleet::FleetOptions options;
             options.clock_probes = clock_probes;
             options.timeout = from_seconds(timeout_s);
             options.connection.tls_ca_file = ca;
             options.connection.tls_certificate_file = certificate;
             options.connection.tls_private_key_file = key;
             options.connection.token_file = token_file;
             options.connection.plain_tcp = plain_tcp;
             py::gil_scoped_release release;
             return value_or_throw(fleet::FleetMonitor::connect(std::move(parsed), options));
           }),
           py::arg("nodes"), py::arg("clock_probes"), py::arg("timeout_s"), py::arg("ca"),
           py::arg("certificate"), py::arg("key"), py::arg("token_file"), py::arg("plain_tcp"))
      .def("begin_window",
           [](fleet::FleetMonitor& self, const std::string& name) {
             py::gil_scoped_release release;
             value_or_throw(self.begin_window(name));
           })
      .def("end_window",
           [](fleet::FleetMonitor& self, const std::string& name) {
             fleet::FleetMeasurement measurement;
             {
               py::gil_scoped_release release;
               measurement = value_or_throw(self.end_window(name));
             }
             return to_python(fleet::to_json(measurement));
           })
      .def("cancel_window", [](fleet::FleetMonitor& self,
                               const std::string& name) { value_or_throw(self.cancel_window(name)); })
      .def_property_readonly("nodes", &fleet::FleetMonitor::node_names);
}

}  // namespace joule::python
