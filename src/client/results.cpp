// SPDX-License-Identifier: Apache-2.0
// The typed answers of joule serve's status and planner routes, read field by field (JsonFields: every error
// names the field's path).
#include "joule/client/results.hpp"

#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "joule/core/json_fields.hpp"

namespace joule::client {

namespace bso = optimize::batch_size;
using nlohmann::json;

namespace {

constexpr ErrorCode kCode = ErrorCode::kParse;

const json& require_array(const JsonFields& fields, std::string_view key) {
  const json& value = fields.require(key);
  if (!value.is_array()) {
    throw_json_field_error(kCode, fields.where(key), "value is not a valid list");
  }
  return value;
}

std::optional<int64_t> optional_integer(const JsonFields& fields, std::string_view key) {
  const json* value = fields.optional(key);
  return value == nullptr ? std::nullopt : std::optional(fields.to_integer(*value, fields.where(key)));
}

std::optional<double> optional_number(const JsonFields& fields, std::string_view key) {
  const json* value = fields.optional(key);
  return value == nullptr ? std::nullopt : std::optional(fields.to_number(*value, fields.where(key)));
}

// A library result read from a field (its errors name the field).
template <class T>
T library_value(Result<T> value, const std::string& where) {
  if (!value) {
    throw_json_field_error(kCode, where, value.error().message());
  }
  return std::move(*value);
}

// A double the batch-size state writes as a number, or as "inf", "-inf", "nan" (JSON has none of those).
double state_double(const JsonFields& fields, std::string_view key) {
  const json& value = fields.require(key);
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    if (text == "inf" || text == "-inf") {
      return text == "inf" ? std::numeric_limits<double>::infinity()
                           : -std::numeric_limits<double>::infinity();
    }
    if (text == "nan") {
      return std::numeric_limits<double>::quiet_NaN();
    }
  }
  return fields.to_number(value, fields.where(key));
}

bso::Stage parse_stage(const JsonFields& fields) {
  const std::string stage = fields.string("stage");
  for (const bso::Stage candidate : {bso::Stage::kPruning, bso::Stage::kMab}) {
    if (stage == bso::to_string(candidate)) {
      return candidate;
    }
  }
  throw_json_field_error(kCode, fields.where("stage"), fmt::format("unknown stage '{}'", stage));
}

std::vector<bso::ArmState> parse_arms(const JsonFields& fields) {
  const json& arms = require_array(fields, "arms");
  std::vector<bso::ArmState> out;
  out.reserve(arms.size());
  for (size_t i = 0; i < arms.size(); ++i) {
    const JsonFields arm(arms[i], fmt::format("arms[{}]", i), kCode);
    out.push_back({arm.integer("batch_size"), state_double(arm, "param_mean"),
                   state_double(arm, "param_precision"), state_double(arm, "reward_precision"),
                   arm.integer("num_observations")});
  }
  return out;
}

std::vector<JobTrial> parse_trials(const JsonFields& fields, const std::vector<int64_t>& batch_sizes) {
  const json& trials = require_array(fields, "trials");
  std::vector<JobTrial> out;
  out.reserve(trials.size());
  for (size_t i = 0; i < trials.size(); ++i) {
    const std::string at = fmt::format("trials[{}]", i);
    const JsonFields trial(trials[i], at, kCode);
    out.push_back({library_value(bso::Trial::from_json(trials[i], batch_sizes, at), ""),
                   trial.integer("reports"), trial.integer("last_epoch")});
  }
  return out;
}

JobStatus job_status_of(const json& document) {
  const JsonFields fields(document, "", kCode);
  JobStatus status;
  status.job_id = fields.string("job_id");
  status.stage = parse_stage(fields);
  status.spec = library_value(bso::JobSpec::from_json(fields.require("spec")), "spec");
  status.gpu = library_value(bso::GpuConfig::from_json(fields.require("gpu")), "gpu");
  status.min_cost = optional_number(fields, "min_cost");
  status.min_cost_batch_size = fields.integer("min_cost_batch_size");
  status.exp_default_batch_size = fields.integer("exp_default_batch_size");
  status.registered = fields.string("registered");
  const JsonFields counts(fields.require("counts"), "counts", kCode);
  status.counts = {counts.integer("trials"), counts.integer("dispatched"), counts.integer("succeeded"),
                   counts.integer("failed"), counts.integer("reports")};
  status.trials = parse_trials(fields, status.spec.batch_sizes);
  const JsonFields page(fields.require("trials_page"), "trials_page", kCode);
  status.trials_page = {page.integer("limit"), optional_integer(page, "before"),
                        optional_integer(page, "next_before")};
  status.arms = parse_arms(fields);
  status.document = document;
  return status;
}

UploadedProfile uploaded_profile_of(const json& document) {
  const JsonFields fields(document, "", kCode);
  UploadedProfile uploaded;
  uploaded.pipeline_id = fields.string("pipeline_id");
  uploaded.profile_revision = fields.integer("profile_revision");
  uploaded.changed = fields.boolean("changed");
  uploaded.stages = fields.integer("stages");
  const json& clocks = require_array(fields, "frequencies_mhz");
  for (size_t i = 0; i < clocks.size(); ++i) {
    uploaded.frequencies_mhz.push_back(fields.to_integer(clocks[i], fmt::format("frequencies_mhz[{}]", i)));
  }
  uploaded.document = document;
  return uploaded;
}

PipelineFrontier pipeline_frontier_of(const json& document) {
  const JsonFields fields(document, "", kCode);
  PipelineFrontier frontier;
  frontier.pipeline_id = fields.string("pipeline_id");
  frontier.profile_revision = fields.integer("profile_revision");
  const JsonFields max_clock(fields.require("max_clock"), "max_clock", kCode);
  frontier.max_clock_time_s = max_clock.number("time_s");
  frontier.max_clock_energy_j = max_clock.number("energy_j");
  const json& points = require_array(fields, "points");
  for (size_t i = 0; i < points.size(); ++i) {
    const JsonFields point(points[i], fmt::format("points[{}]", i), kCode);
    frontier.points.push_back({point.integer("index"), point.number("time_s"), point.number("energy_j")});
  }
  frontier.cuts = fields.integer("cuts");
  frontier.planning_time_s = fields.number("planning_time_s");
  frontier.cached = fields.boolean("cached");
  frontier.document = document;
  return frontier;
}

std::vector<std::vector<PlannedComputation>> stages_plan_of(const JsonFields& fields) {
  const json& stages = require_array(fields, "stages_plan");
  std::vector<std::vector<PlannedComputation>> out;
  for (size_t s = 0; s < stages.size(); ++s) {
    const std::string at = fmt::format("stages_plan[{}]", s);
    const JsonFields stage(stages[s], at, kCode);
    if (stage.integer("stage") != static_cast<int64_t>(s)) {
      throw_json_field_error(kCode, stage.where("stage"), fmt::format("must be {} (stages in order)", s));
    }
    const json& computations = require_array(stage, "computations");
    auto& planned = out.emplace_back();
    for (size_t c = 0; c < computations.size(); ++c) {
      const JsonFields computation(computations[c], fmt::format("{}.computations[{}]", at, c), kCode);
      planned.push_back({computation.string("instruction"), computation.integer("microbatch"),
                         computation.integer("frequency_mhz")});
    }
  }
  return out;
}

PipelinePlan pipeline_plan_of(const json& document) {
  const JsonFields fields(document, "", kCode);
  PipelinePlan plan;
  plan.pipeline_id = fields.string("pipeline_id");
  plan.profile_revision = fields.integer("profile_revision");
  plan.schedule = library_value(plan::parse_schedule(fields.string("schedule")), "schedule");
  plan.stages = fields.integer("stages");
  plan.microbatches = fields.integer("microbatches");
  plan.time_s = fields.number("time_s");
  plan.energy_j = fields.number("energy_j");
  plan.stages_plan = stages_plan_of(fields);
  plan.index = fields.integer("index");
  plan.frontier_size = fields.integer("frontier_size");
  plan.p_blocking_w = fields.number("p_blocking_w");
  plan.target_time_s = optional_number(fields, "target_time_s");
  plan.energy_at_target_j = fields.number("energy_at_target_j");
  plan.straggler_time_s = optional_number(fields, "straggler_time_s");
  plan.document = document;
  return plan;
}

PipelineStatus pipeline_status_of(const json& document) {
  const JsonFields fields(document, "", kCode);
  PipelineStatus status;
  status.pipeline_id = fields.string("pipeline_id");
  status.spec = library_value(PipelineSpec::from_json(fields.require("spec")), "spec");
  status.profile_revision = fields.integer("profile_revision");
  status.has_profile = fields.boolean("has_profile");
  status.frontier_ready = fields.boolean("frontier_ready");
  status.straggler_time_s = optional_number(fields, "straggler_time_s");
  status.registered = fields.string("registered");
  status.document = document;
  return status;
}

}  // namespace

Result<Health> parse_health(const json& document) {
  return catch_json_fields<Health>([&] {
    const JsonFields fields(document, "", kCode);
    return Health{fields.string("status"), fields.string("store"), fields.integer("schema_version"),
                  document};
  });
}

Result<JobStatus> parse_job_status(const json& document) {
  return catch_json_fields<JobStatus>([&] { return job_status_of(document); });
}

Result<UploadedProfile> parse_uploaded_profile(const json& document) {
  return catch_json_fields<UploadedProfile>([&] { return uploaded_profile_of(document); });
}

Result<PipelineFrontier> parse_pipeline_frontier(const json& document) {
  return catch_json_fields<PipelineFrontier>([&] { return pipeline_frontier_of(document); });
}

Result<PipelinePlan> parse_pipeline_plan(const json& document) {
  return catch_json_fields<PipelinePlan>([&] { return pipeline_plan_of(document); });
}

Result<PipelineStatus> parse_pipeline_status(const json& document) {
  return catch_json_fields<PipelineStatus>([&] { return pipeline_status_of(document); });
}

}  // namespace joule::client
