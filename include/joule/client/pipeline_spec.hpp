// SPDX-License-Identifier: Apache-2.0
// joule/client/pipeline_spec.hpp — what a client registers with the service's pipeline planner routes
// (`POST /pipelines`): the pipeline's shape and the planner's knobs. docs/serve.md describes the routes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::client {

/// A pipeline-parallel training job whose GPU frequencies the service plans (Perseus).
struct PipelineSpec {
  std::optional<std::string> pipeline_id;       ///< must start with the prefix; unset: "<prefix>-<8 hex>"
  std::string pipeline_id_prefix = "pipeline";  ///< letters, digits, '.', '_', '-'
  int64_t stages = 0;                           ///< S ≥ 1
  int64_t microbatches = 0;                     ///< M ≥ 1
  plan::Schedule schedule = plan::Schedule::k1F1B;
  double p_blocking_w = 70;   ///< power of a GPU blocked on a neighbour, W (finite, ≥ 0)
  double unit_time_s = 1e-3;  ///< the planner's time unit (finite, > 0)

  bool operator==(const PipelineSpec&) const = default;

  /// @return {"pipeline_id", "pipeline_id_prefix", "stages", "microbatches", "schedule" ("1f1b" | "gpipe"),
  /// "p_blocking_w", "unit_time_s"} (an unset id is null).
  nlohmann::json to_json() const;
  /// Parses and validates (defaults as above; stages and microbatches are required; unknown keys are
  /// ignored). @return kInvalidArgument "<field>: <problem>".
  static Result<PipelineSpec> from_json(const nlohmann::json& json);
};

/// @return kInvalidArgument unless `id` is 1–200 characters of letters, digits, '.', '_', '-' (ids appear
/// in URL paths). `field` names it in the message.
Result<void> validate_id(std::string_view id, std::string_view field);

}  // namespace joule::client
