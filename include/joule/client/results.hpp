// SPDX-License-Identifier: Apache-2.0
// joule/client/results.hpp — what `joule serve`'s status and planner routes answer, as typed results. The
// client parses each answer once (parse_*() below): a field that is missing or of the wrong type fails the
// call with kParse naming the route and the field ("GET /healthz: the server's health is malformed:
// schema_version: field required"). Every result also keeps the answer as sent (`document`), so that a
// caller that prints or hands on the whole answer (`joule job status --format json`, the Python API) shows
// exactly what the server sent, fields of newer servers included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/client/pipeline_spec.hpp"
#include "joule/core/error.hpp"
#include "joule/optimize/batch_size.hpp"
#include "joule/plan/pipeline.hpp"

namespace joule::client {

/// GET /healthz when the store answered (200; a 503 fails the call with the server's message).
struct Health {
  std::string status;          ///< "ok"
  std::string store;           ///< the store's description (backend and where)
  int64_t schema_version = 0;  ///< the store's schema version
  nlohmann::json document;     ///< the answer as sent
};

/// One trial of GET /jobs/{id}: the library's trial and the server's accounting of its reports.
struct JobTrial {
  optimize::batch_size::Trial trial;
  int64_t reports = 0;     ///< reports applied to the trial
  int64_t last_epoch = 0;  ///< the last epoch reported (0: none)
};

/// GET /jobs/{id}'s counts of trials (by status) and of reports.
struct JobCounts {
  int64_t trials = 0;
  int64_t dispatched = 0;  ///< running: handed out, no final report yet
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t reports = 0;
};

/// Which page of trials GET /jobs/{id} answered.
struct TrialsPage {
  int64_t limit = 0;                   ///< at most this many trials, the newest below `before`
  std::optional<int64_t> before;       ///< the trial number asked for (none: the newest)
  std::optional<int64_t> next_before;  ///< `before` of the next (older) page; none: no older trials
};

/// GET /jobs/{id} (joule): a batch-size job's stage, counts, bandit arms and a page of its trials.
struct JobStatus {
  std::string job_id;
  optimize::batch_size::Stage stage = optimize::batch_size::Stage::kPruning;
  optimize::batch_size::JobSpec spec;
  optimize::batch_size::GpuConfig gpu;
  /// The lowest cost of a converged trial (Zeus's cost: eta·J + (1 − eta)·max_power_w·s, in J); none yet.
  std::optional<double> min_cost;
  int64_t min_cost_batch_size = 0;
  int64_t exp_default_batch_size = 0;
  std::string registered;  ///< when the job was registered, ISO 8601 UTC
  JobCounts counts;
  std::vector<JobTrial> trials;  ///< the page's trials, as the server lists them
  TrialsPage trials_page;
  std::vector<optimize::batch_size::ArmState> arms;  ///< the bandit's arms (empty while pruning)
  nlohmann::json document;                           ///< the answer as sent
};

/// PUT /pipelines/{id}/profile.
struct UploadedProfile {
  std::string pipeline_id;
  int64_t profile_revision = 0;  ///< counts the changed uploads
  bool changed = false;          ///< the profile differs from the stored one (a new frontier is planned)
  int64_t stages = 0;
  std::vector<int64_t> frequencies_mhz;  ///< the profile's clocks, MHz
  nlohmann::json document;               ///< the answer as sent
};

/// One point of a pipeline's time–energy frontier, fastest first.
struct FrontierPoint {
  int64_t index = 0;    ///< its index in the frontier (PipelinePlan::index)
  double time_s = 0;    ///< predicted iteration time, s
  double energy_j = 0;  ///< predicted iteration energy, J
};

/// GET /pipelines/{id}/frontier.
struct PipelineFrontier {
  std::string pipeline_id;
  int64_t profile_revision = 0;
  double max_clock_time_s = 0;    ///< the iteration with every computation at the highest clock, s
  double max_clock_energy_j = 0;  ///< … and its energy, J
  std::vector<FrontierPoint> points;
  int64_t cuts = 0;            ///< the planner's cuts
  double planning_time_s = 0;  ///< how long planning took, s
  bool cached = false;         ///< planned before (not by this request)
  nlohmann::json document;     ///< the answer as sent
};

/// One computation of a stage's plan, in execution order.
struct PlannedComputation {
  std::string instruction;  ///< "forward" or "backward"
  int64_t microbatch = 0;
  int64_t frequency_mhz = 0;
};

/// GET /pipelines/{id}/plan and POST /pipelines/{id}/straggler: plan::plan_to_json() plus context.
struct PipelinePlan {
  std::string pipeline_id;
  int64_t profile_revision = 0;
  plan::Schedule schedule = plan::Schedule::k1F1B;
  int64_t stages = 0;
  int64_t microbatches = 0;
  double time_s = 0;                                         ///< the plan's predicted iteration time, s
  double energy_j = 0;                                       ///< the plan's predicted iteration energy, J
  std::vector<std::vector<PlannedComputation>> stages_plan;  ///< by stage, stage 0 first
  int64_t index = 0;  ///< the plan's index in the frontier (0: the fastest)
  int64_t frontier_size = 0;
  double p_blocking_w = 0;                 ///< power of a blocked GPU, W
  std::optional<double> target_time_s;     ///< the iteration time aimed at, s; none: the fastest plan
  double energy_at_target_j = 0;           ///< the iteration's energy, blocking until the target included, J
  std::optional<double> straggler_time_s;  ///< the straggler's iteration time on record, s
  nlohmann::json document;                 ///< the answer as sent
};

/// GET /pipelines/{id}.
struct PipelineStatus {
  std::string pipeline_id;
  PipelineSpec spec;
  int64_t profile_revision = 0;
  bool has_profile = false;
  bool frontier_ready = false;             ///< the frontier of the current profile is planned
  std::optional<double> straggler_time_s;  ///< the straggler's iteration time on record, s
  std::string registered;                  ///< ISO 8601 UTC
  nlohmann::json document;                 ///< the answer as sent
};

/// Each reads one answer (a JSON document). @return kParse "<field>: <problem>" if a field is missing or
/// malformed; unknown fields are ignored (and kept in `document`).
Result<Health> parse_health(const nlohmann::json& document);
Result<JobStatus> parse_job_status(const nlohmann::json& document);
Result<UploadedProfile> parse_uploaded_profile(const nlohmann::json& document);
Result<PipelineFrontier> parse_pipeline_frontier(const nlohmann::json& document);
Result<PipelinePlan> parse_pipeline_plan(const nlohmann::json& document);
Result<PipelineStatus> parse_pipeline_status(const nlohmann::json& document);

}  // namespace joule::client
