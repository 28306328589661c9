// SPDX-License-Identifier: Apache-2.0
// The fields of a batch-size job's registration (Zeus's JobSpec and GpuConfig) that a caller gives one by
// one, each unset unless given, and how they go on top of a registration body (e.g. a JobSpec file):
// `joule job register`'s flags. JobSpec::from_json and GpuConfig::from_json then check the whole body.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace joule::optimize::batch_size {

/// Registration fields, each written only if set. Names and units as JobSpec's and GpuConfig's.
struct RegistrationFields {
  std::optional<std::string> job_id;
  std::optional<std::string> job_id_prefix;
  std::optional<std::vector<int64_t>> batch_sizes;
  std::optional<int64_t> default_batch_size;
  std::optional<double> eta_knob;
  std::optional<double> beta_knob;
  bool no_early_stop = false;  ///< beta_knob null: never stop a run for its cost (wins over beta_knob)
  std::optional<double> target_metric;
  std::optional<bool> higher_is_better_metric;
  std::optional<int64_t> max_epochs;
  std::optional<int64_t> num_pruning_rounds;
  std::optional<int64_t> window_size;
  std::optional<double> mab_prior_mean;
  std::optional<double> mab_prior_precision;
  std::optional<int64_t> mab_num_explorations;
  std::optional<uint64_t> mab_seed;
  std::optional<double> max_power;  ///< W
  std::optional<int64_t> number_of_gpus;
  std::optional<std::string> gpu_model;

  /// Writes the set fields into `body` under Zeus's JSON names (JobSpec's and GpuConfig's), over what `body`
  /// holds; the rest of `body` stays. Nothing is validated here. `body` must be a JSON object (or null, which
  /// becomes one).
  void write_to(nlohmann::json& body) const;
};

}  // namespace joule::optimize::batch_size
