// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/batch_size_fields.hpp"

namespace joule::optimize::batch_size {

void apply(const RegistrationFields& fields, nlohmann::json& body) {
  const auto set = [&body](const char* key, const auto& value) {
    if (value) {
      body[key] = *value;
    }
  };
  set("job_id", fields.job_id);
  set("job_id_prefix", fields.job_id_prefix);
  set("batch_sizes", fields.batch_sizes);
  set("default_batch_size", fields.default_batch_size);
  set("eta_knob", fields.eta_knob);
  set("beta_knob", fields.beta_knob);
  if (fields.no_early_stop) {
    body["beta_knob"] = nullptr;
  }
  set("target_metric", fields.target_metric);
  set("higher_is_better_metric", fields.higher_is_better_metric);
  set("max_epochs", fields.max_epochs);
  set("num_pruning_rounds", fields.num_pruning_rounds);
  set("window_size", fields.window_size);
  set("mab_prior_mean", fields.mab_prior_mean);
  set("mab_prior_precision", fields.mab_prior_precision);
  set("mab_num_explorations", fields.mab_num_explorations);
  set("mab_seed", fields.mab_seed);
  set("max_power", fields.max_power);
  set("number_of_gpus", fields.number_of_gpus);
  set("gpu_model", fields.gpu_model);
}

}  // namespace joule::optimize::batch_size
