// SPDX-License-Identifier: Apache-2.0
// joule.set_metric_labels / joule.metric_labels: the workload identity labels every metric rendered in this
// process carries (joule.InferenceMetrics; docs/operators.md).
#include <map>
#include <string>

#include <pybind11/stl.h>

#include "joule/metrics/identity.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace metrics_binding_detail {

metrics::IdentityLabels set_metric_labels(const std::optional<std::map<std::string, std::string>>& labels,
                                          bool detect) {
  metrics::IdentityLabels merged =
      detect ? metrics::detect_identity_labels_from_environment() : metrics::IdentityLabels{};
  if (labels) {
    // Checked one by one (a dict key may hold '=', which NAME=VALUE parsing would split).
    for (const auto& [name, value] : *labels) {
      value_or_throw(metrics::check_identity_label(name, value));
    }
    for (const auto& [name, value] : *labels) {
      merged[name] = value;
    }
  }
  metrics::set_default_identity_labels(merged);
  return merged;
}

}  // namespace metrics_binding_detail

void bind_metrics(py::module_& module) {
  // As the `joule` command does: a process in a Slurm job or a Kubernetes pod labels its metrics from the
  // start.
  metrics::set_default_identity_labels(metrics::detect_identity_labels_from_environment());
  module.def("set_metric_labels", &metrics_binding_detail::set_metric_labels, py::arg("labels") = py::none(),
             py::arg("detect") = true,
             "Set the labels added to every sample of every metric this process renders "
             "(joule.InferenceMetrics): those detected from the environment (SLURM_JOB_ID, POD_NAME, ...; "
             "detect=False: none), with `labels` over them. Raises InvalidArgumentError for a bad name or an "
             "empty value. Returns the labels now in force.");
  module.def("metric_labels", &metrics::default_identity_labels,
             "The labels added to every metric sample (set_metric_labels; detected from the environment at "
             "import).");
}

}  // namespace joule::python
