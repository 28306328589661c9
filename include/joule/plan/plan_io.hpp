// SPDX-License-Identifier: Apache-2.0
// joule/plan/plan_io.hpp — frequency plans as JSON, stage by stage in execution order (what a per-stage
// executor needs), with the plan's predicted iteration time and energy.
//
// Format (every key always written; readers ignore unknown keys):
//
//   {
//     "schedule": "1f1b",          // "1f1b" or "gpipe" (to_string(Schedule))
//     "stages": 4,                 // S
//     "microbatches": 8,           // M
//     "time_s": 0.740,             // predicted iteration time, s (informational; not read back)
//     "energy_j": 852.27,          // predicted iteration energy, J (informational; not read back)
//     "stages_plan": [             // one entry per stage, stage 0 first
//       {"stage": 0,
//        "computations": [         // the stage's computations in execution order (PipelineDag::stage_order)
//          {"instruction": "forward", "microbatch": 0, "frequency_mhz": 1410},
//          …]},
//       …]
//   }
#pragma once

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::plan {

/// @return the plan in the format above. @throws joule::Exception (kInvalidArgument) if the plan does not
/// have one frequency per computation of the DAG.
nlohmann::json plan_to_json(const PipelineDag& dag, const FrequencyPlan& plan, const PlanCost& predicted);

/// Reads a plan written by plan_to_json() for this DAG. Errors (kParse), each naming the JSON path (e.g.
/// `stages_plan[1].computations[4].frequency_mhz`): a value of the wrong type or shape, a missing key, a
/// schedule, stage count or microbatch count other than the DAG's, a stage entry out of order, an unknown
/// instruction, a microbatch outside [0, M), a frequency that is not a positive integer, a computation that
/// is not the next one in the stage's execution order, and a stage with too few computations (naming the
/// first missing one) or too many.
Result<FrequencyPlan> plan_from_json(const PipelineDag& dag, const nlohmann::json& json);

}  // namespace joule::plan
