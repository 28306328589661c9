// SPDX-License-Identifier: Apache-2.0
// joule/metrics/identity.hpp — workload identity labels (Slurm job, Kubernetes pod, or set by hand) that
// MetricsRegistry puts on every sample it renders, so that energy can be summed per job or per pod in PromQL
// (docs/operators.md).
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>

#include "joule/core/error.hpp"

namespace joule::metrics {

/// Label name → value, added to every sample. Values are never empty.
using IdentityLabels = std::map<std::string, std::string>;

/// An environment variable that names the workload, and the label it becomes.
struct IdentitySource {
  const char* variable;  ///< e.g. "SLURM_JOB_ID"
  const char* label;     ///< e.g. "slurm_job_id"
};

/// @return the variables detect_identity_labels() reads, in order: SLURM_JOB_ID → slurm_job_id,
/// SLURM_JOB_USER → slurm_user, SLURM_JOB_PARTITION → slurm_partition (set by Slurm in a job),
/// JOULE_POD_NAME → pod, JOULE_POD_NAMESPACE → namespace, JOULE_CONTAINER_NAME → container, JOULE_NODE_NAME →
/// node (set by the pod spec, from the Kubernetes downward API; `pod`, `namespace` and `container` are
/// dcgm-exporter's label names). The Kubernetes ones carry joule's prefix because plain POD_NAME or
/// CONTAINER_NAME are set by other tools and container runtimes for their own purposes, and a label on every
/// sample must not appear by accident.
std::span<const IdentitySource> identity_sources();

/// @return the labels of the identity_sources() that `environment` (variable → value) sets to a non-empty
/// value that is valid UTF-8; other variables are ignored. Never fails.
IdentityLabels detect_identity_labels(const std::map<std::string, std::string>& environment);

/// @return detect_identity_labels() of this process's environment.
IdentityLabels detect_identity_labels_from_environment();

/// @return the label names joule's exporters use themselves (gpu, uuid, name, backend, …) and those
/// Prometheus sets on every target (job, instance): an identity label may not take one.
const std::vector<std::string>& reserved_label_names();

/// Checks one identity label. @return kInvalidArgument, naming the label, if the name does not match
/// `[a-zA-Z_][a-zA-Z0-9_]*`, starts with `__` (reserved by Prometheus), is one of reserved_label_names(), or
/// if the value is empty or not valid UTF-8.
Result<void> check_identity_label(std::string_view name, std::string_view value);

/// Parses "NAME=VALUE" (split at the first '=') and checks it (check_identity_label).
/// @return kInvalidArgument quoting the text if it has no '=' or fails the check.
Result<std::pair<std::string, std::string>> parse_identity_label(std::string_view text);

/// @return `detected` with each of `manual` ("NAME=VALUE", parse_identity_label) added; a manual label
/// replaces a detected one of the same name, and a later manual label an earlier one.
/// kInvalidArgument for the first malformed manual label.
Result<IdentityLabels> merge_identity_labels(IdentityLabels detected, const std::vector<std::string>& manual);

/// Adds `labels` to every sample of `families`. A sample that already has a label of that name keeps its
/// own value (check_identity_label keeps names apart; this guards against a family added later).
void apply_identity_labels(std::vector<prometheus::MetricFamily>& families, const IdentityLabels& labels);

/// Sets the labels every MetricsRegistry without its own (MetricsRegistry::set_identity_labels) uses, for
/// the whole process: the `joule` command sets them from the environment and `--label`, the Python module
/// from the environment at import and `joule.set_metric_labels()`. Empty until set. Thread-safe.
/// Labels are not checked here: pass what merge_identity_labels() returned.
void set_default_identity_labels(IdentityLabels labels);

/// @return the labels set by set_default_identity_labels() (empty if never set).
IdentityLabels default_identity_labels();

}  // namespace joule::metrics
