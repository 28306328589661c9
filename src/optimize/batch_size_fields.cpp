// SPDX-License-Identifier: Apache-2.0
#include "joule/optimize/batch_size_fields.hpp"

namespace joule::optimize::batch_size {

void RegistrationFields::write_to(nlohmann::json& body) const {
  const auto set = [&body](const char* key, const auto& value) {
    if (value) {
      body[key] = *value;
    }
  };
  set("job_id", job_id);
  set("job_id_prefix", job_id_prefix);
  set("batch_sizes", batch_sizes);
  set("default_batch_size", default_batch_size);
  set("eta_knob", eta_knob);
  set("beta_knob", beta_knob);
  if (no_early_stop) {
    body["beta_knob"] = nullptr;
  }
  set("target_metric", target_metric);
  set("higher_is_better_metric", higher_is_better_metric);
  set("max_epochs", max_epochs);
  set("num_pruning_rounds", num_pruning_rounds);
  set("window_size", window_size);
  set("mab_prior_mean", mab_prior_mean);
  set("mab_prior_precision", mab_prior_precision);
  set("mab_num_explorations", mab_num_explorations);
  set("mab_seed", mab_seed);
  set("max_power", max_power);
  set("number_of_gpus", number_of_gpus);
  set("gpu_model", gpu_model);
}

}  // namespace joule::optimize::batch_size
