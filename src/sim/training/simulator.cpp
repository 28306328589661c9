// SPDX-License-Identifier: Apache-2.0
// The recurrence simulation follows the original (zeus/_legacy/simulate.py) step for step, including its
// floating-point recipes (see numeric.hpp), so that the same seed gives the same decisions and numbers.
#include "joule/sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/numeric.hpp"
#include "joule/core/rng.hpp"
#include "joule/core/strings.hpp"
#include "joule/core/units.hpp"

namespace joule::sim {

namespace {

// The trace rows of one job, indexed the ways the simulation looks them up.
struct JobRows {
  std::vector<int> feasible_batch_sizes;                      // every batch size of the workload, ascending
  std::map<int, std::vector<const TraceRow*>> by_batch_size;  // B: all rows of a batch size, trace order
  std::map<std::pair<int, double>, std::vector<const TraceRow*>> by_config;  // C: rows of (batch size, limit)
  std::map<int, double> max_power_limit_w;                                   // largest limit per batch size
  std::map<int, double> mean_energy_per_epoch_j;  // over B: the profiled first epoch
  std::map<int, double> mean_time_per_epoch_s;
  std::set<double> power_limits_w;
  bool any_reaches = false;
};

Result<JobRows> index_job(const Trace& trace, const Job& job) {
  JobRows rows;
  std::set<int> feasible;
  for (const TraceRow& row : trace.rows) {
    if (row.dataset != job.dataset || row.network != job.network || row.optimizer != job.optimizer) {
      continue;
    }
    feasible.insert(row.batch_size);
    if (row.target_metric != job.target_metric) {
      continue;
    }
    rows.by_batch_size[row.batch_size].push_back(&row);
    rows.by_config[{row.batch_size, row.power_limit_w}].push_back(&row);
    double& max_w = rows.max_power_limit_w[row.batch_size];
    max_w = std::max(max_w, row.power_limit_w);
    rows.power_limits_w.insert(row.power_limit_w);
    rows.any_reaches =
        rows.any_reaches || (!std::isnan(row.target_epoch) && row.target_epoch <= job.max_epochs);
  }
  if (rows.by_batch_size.empty()) {
    std::set<double> targets;
    for (const TraceRow& row : trace.rows) {
      if (row.dataset == job.dataset && row.network == job.network && row.optimizer == job.optimizer) {
        targets.insert(row.target_metric);
      }
    }
    // Names come from input files (a group trace's dataset column): printed as safe excerpts.
    if (targets.empty()) {
      return fail(ErrorCode::kInvalidArgument, "the {} trace has no runs of {} ({}, {})",
                  trace.gpu.empty() ? "given" : trace.gpu, printable_excerpt(job.dataset),
                  printable_excerpt(job.network), printable_excerpt(job.optimizer));
    }
    return fail(ErrorCode::kInvalidArgument,
                "the {} trace has no runs of {} ({}, {}) with target metric {} (traced targets: {})",
                trace.gpu.empty() ? "given" : trace.gpu, printable_excerpt(job.dataset),
                printable_excerpt(job.network), printable_excerpt(job.optimizer), job.target_metric,
                fmt::join(targets, ", "));
  }
  if (!rows.any_reaches) {
    return fail(ErrorCode::kInvalidArgument,
                "{} can never reach its target {} within {} epoch{}: no training run in the trace does",
                printable_excerpt(job.dataset), job.target_metric, job.max_epochs,
                job.max_epochs == 1 ? "" : "s");
  }
  rows.feasible_batch_sizes.assign(feasible.begin(), feasible.end());
  if (rows.by_batch_size.count(job.default_batch_size) == 0) {
    std::vector<int> available;
    for (const auto& [batch_size, unused] : rows.by_batch_size) {
      available.push_back(batch_size);
    }
    return fail(ErrorCode::kInvalidArgument, "batch size {} is not in the trace of {} (available: {})",
                job.default_batch_size, printable_excerpt(job.dataset), fmt::join(available, ", "));
  }
  for (const auto& [batch_size, b_rows] : rows.by_batch_size) {
    std::vector<double> energies;
    std::vector<double> times;
    for (const TraceRow* row : b_rows) {
      energies.push_back(row->energy_per_epoch_j);
      times.push_back(row->time_per_epoch_s);
    }
    rows.mean_energy_per_epoch_j[batch_size] = numeric::mean(energies);
    rows.mean_time_per_epoch_s[batch_size] = numeric::mean(times);
  }
  return rows;
}

struct RunOutcome {
  double energy_j = 0;
  double time_s = 0;
  bool reached = false;
};

// The original's _run_job: sample one training run of the configuration, stop it at the target, at
// max_epochs, or before the epoch that would pass the cost bound.
Result<RunOutcome> run_job(const JobRows& rows, const Job& job, int batch_size, double power_limit_w,
                           rng::Generator& generator, double cost_bound, double eta, bool profiled) {
  const auto config = rows.by_config.find({batch_size, power_limit_w});
  if (config == rows.by_config.end()) {
    return fail(ErrorCode::kNotFound, "no training run of {} at batch size {} and {} W",
                printable_excerpt(job.dataset), batch_size, power_limit_w);
  }
  const auto& runs = config->second;
  const TraceRow& path = *runs[static_cast<size_t>(
      generator.choice_without_replacement(static_cast<int64_t>(runs.size()), 1)[0])];
  double max_epochs = job.max_epochs;
  if (!std::isinf(cost_bound)) {
    const double cost_per_epoch = eta * path.energy_per_epoch_j +
                                  (1 - eta) * rows.max_power_limit_w.at(batch_size) * path.time_per_epoch_s;
    max_epochs =
        std::min(numeric::python_floor_div(cost_bound, cost_per_epoch), static_cast<double>(job.max_epochs));
  }
  if (max_epochs == 0) {
    return RunOutcome{};
  }
  RunOutcome outcome;
  outcome.reached = !std::isnan(path.target_epoch) && path.target_epoch <= max_epochs;
  const double epochs = outcome.reached ? path.target_epoch : max_epochs;
  if (profiled) {
    // The first epoch ran at every power limit in turn (JIT profiling): its cost is the average over them.
    outcome.energy_j = rows.mean_energy_per_epoch_j.at(batch_size) + path.energy_per_epoch_j * (epochs - 1);
    outcome.time_s = rows.mean_time_per_epoch_s.at(batch_size) + path.time_per_epoch_s * (epochs - 1);
  } else {
    outcome.energy_j = path.energy_per_epoch_j * epochs;
    outcome.time_s = path.time_per_epoch_s * epochs;
  }
  return outcome;
}

// The original's _profile_power_limit: the cost of one epoch at each limit, fed from the highest limit down.
void profile_power_limits(const JobRows& rows, const Job& job, int batch_size, double eta,
                          PowerLimitPolicy& power_limit_policy) {
  std::map<double, std::pair<std::vector<double>, std::vector<double>>> by_limit;  // → (powers, times)
  for (const TraceRow* row : rows.by_batch_size.at(batch_size)) {
    auto& [powers, times] = by_limit[row->power_limit_w];
    powers.push_back(row->average_power_w);
    times.push_back(row->time_per_epoch_s);
  }
  const double max_limit_w = rows.max_power_limit_w.at(batch_size);
  for (auto it = by_limit.rbegin(); it != by_limit.rend(); ++it) {
    const double power_w = numeric::compensated_mean(it->second.first);
    const double time_s = numeric::compensated_mean(it->second.second);
    const double epoch_cost = (eta * power_w + (1 - eta) * max_limit_w) * time_s;
    power_limit_policy.observe(job, batch_size, it->first, epoch_cost);
  }
}

FixedConfiguration expected_configuration(const std::vector<const TraceRow*>& runs, const Job& job,
                                          double eta, double max_power_w) {
  FixedConfiguration config;
  config.batch_size = runs.front()->batch_size;
  config.power_limit_w = runs.front()->power_limit_w;
  size_t reached = 0;
  for (const TraceRow* run : runs) {
    const bool reaches = !std::isnan(run->target_epoch) && run->target_epoch <= job.max_epochs;
    const double epochs = reaches ? run->target_epoch : job.max_epochs;
    reached += reaches ? 1 : 0;
    config.energy_j += run->energy_per_epoch_j * epochs;
    config.time_s += run->time_per_epoch_s * epochs;
  }
  const auto count = static_cast<double>(runs.size());
  config.energy_j /= count;
  config.time_s /= count;
  config.cost = eta * config.energy_j + (1 - eta) * max_power_w * config.time_s;
  config.reach_rate = static_cast<double>(reached) / count;
  return config;
}

// Fills in every configuration's average cost, the baseline (b0 at its highest limit) and the oracle.
void add_fixed_configurations(SimulationResult& result, const JobRows& rows, const Job& job, double eta) {
  for (const auto& [key, runs] : rows.by_config) {
    result.configurations.push_back(expected_configuration(runs, job, eta, result.max_power_w));
  }
  for (const auto& config : result.configurations) {
    if (config.batch_size == job.default_batch_size &&
        config.power_limit_w == rows.max_power_limit_w.at(job.default_batch_size)) {
      result.baseline = config;
    }
    if (config.reach_rate == 1 && (!result.oracle || config.cost < result.oracle->cost)) {
      result.oracle = config;
    }
  }
}

}  // namespace

Result<void> validate(const SimulationOptions& options) {
  if (!(options.eta >= 0 && options.eta <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "eta must be in [0, 1] (got {})", options.eta);
  }
  if (!(options.beta > 1)) {
    return fail(ErrorCode::kInvalidArgument,
                "beta must be greater than 1 (got {}); use inf to turn early stopping off", options.beta);
  }
  if (options.recurrences && *options.recurrences < 1) {
    return fail(ErrorCode::kInvalidArgument, "recurrences must be at least 1 (got {})", *options.recurrences);
  }
  if (options.max_tries < 1) {
    return fail(ErrorCode::kInvalidArgument, "max tries must be at least 1 (got {})", options.max_tries);
  }
  return {};
}

Simulator::Simulator(Trace trace, std::unique_ptr<BatchSizePolicy> batch_size_policy,
                     std::unique_ptr<PowerLimitPolicy> power_limit_policy, SimulationOptions options)
    : trace_(std::move(trace)),
      batch_size_policy_(std::move(batch_size_policy)),
      power_limit_policy_(std::move(power_limit_policy)),
      options_(options) {
  if (!batch_size_policy_ || !power_limit_policy_) {
    throw Exception(ErrorCode::kInvalidArgument, "the simulator needs a batch-size and a power-limit policy");
  }
}

Simulator zeus_simulator(Trace trace, SimulationOptions options) {
  PruningGtsPolicy::Options bso;
  bso.seed = options.seed;
  return Simulator(std::move(trace), std::make_unique<PruningGtsPolicy>(bso),
                   std::make_unique<JitPowerLimitPolicy>(), options);
}

Simulator zeus_group_simulator(Trace trace, SimulationOptions options) {
  PruningGtsPolicy::Options bso;
  bso.seed = options.seed;
  bso.concurrency = true;
  return Simulator(std::move(trace), std::make_unique<PruningGtsPolicy>(bso),
                   std::make_unique<JitPowerLimitPolicy>(), options);
}

uint32_t adler32(std::string_view text) {
  constexpr uint32_t kModulus = 65521;
  uint32_t a = 1;
  uint32_t b = 0;
  for (const char c : text) {
    a = (a + static_cast<unsigned char>(c)) % kModulus;
    b = (b + a) % kModulus;
  }
  return (b << 16) | a;
}

Result<std::vector<std::vector<GroupSubmission>>> parse_groups(std::string_view csv_text,
                                                               const std::string& source) {
  auto table = JOULE_TRY(csv::parse(csv_text, source));
  std::array<size_t, 5> columns{};
  const std::array<const char*, 5> names = {"group", "start_time", "end_time", "dataset", "runtime_ratio"};
  for (size_t i = 0; i < names.size(); ++i) {
    auto column = JOULE_TRY(table.column(names[i]));
    columns[i] = column;
  }
  std::vector<std::vector<GroupSubmission>> groups;
  std::map<std::string, size_t> group_index;
  for (size_t r = 0; r < table.row_count(); ++r) {
    const auto row = table.row(r);
    GroupSubmission submission;
    submission.group = row.text(columns[0]);
    submission.dataset = row.text(columns[3]);
    for (auto [column, target] :
         {std::pair{columns[1], &submission.start_time}, std::pair{columns[2], &submission.end_time},
          std::pair{columns[4], &submission.runtime_ratio}}) {
      auto value = JOULE_TRY(row.number(column));
      if (!std::isfinite(value)) {
        return tl::make_unexpected(row.error_at(column, "expected a finite number"));
      }
      *target = value;
    }
    if (submission.end_time < submission.start_time) {
      return tl::make_unexpected(row.error_at(columns[2], "the job ends before it starts"));
    }
    if (submission.runtime_ratio <= 0) {
      return tl::make_unexpected(row.error_at(columns[4], "the runtime ratio must be positive"));
    }
    const auto [entry, inserted] = group_index.try_emplace(submission.group, groups.size());
    if (inserted) {
      groups.emplace_back();
    }
    groups[entry->second].push_back(std::move(submission));
  }
  return groups;
}

Result<std::vector<std::vector<GroupSubmission>>> load_groups(const std::string& path) {
  auto text = JOULE_TRY(read_text_file(path, read_limits::kSimulatorTrace));
  return parse_groups(text, path);
}

// What one simulated job needs: its indexed rows, fresh copies of the policies (registered with the job),
// the trace-sampling generator, and the result being built.
struct Simulator::Session {
  JobRows rows;
  SimulationResult result;
  std::unique_ptr<BatchSizePolicy> batch_size_policy;
  std::unique_ptr<PowerLimitPolicy> power_limit_policy;
  rng::Generator generator;
};

Result<std::unique_ptr<Simulator::Session>> Simulator::start(const Job& job) const {
  JOULE_TRY(validate(options_));
  auto indexed = JOULE_TRY(index_job(trace_, job));
  // Session is an aggregate, which make_unique cannot brace-initialise.
  // NOLINTNEXTLINE(modernize-make-unique)
  auto session = std::unique_ptr<Session>(new Session{std::move(indexed),
                                                      {},
                                                      batch_size_policy_->clone(),
                                                      power_limit_policy_->clone(),
                                                      rng::Generator(options_.seed)});
  session->result.job = job;
  session->result.max_power_w = trace_.max_power_limit_w();
  JOULE_TRY(session->batch_size_policy->register_job(job, session->rows.feasible_batch_sizes));
  return session;
}

Result<SimulationResult> Simulator::simulate_group(const Job& job,
                                                   const std::vector<GroupSubmission>& submissions) const {
  auto session = JOULE_TRY(start(job));
  Session& state = *session;
  const JobRows& rows = state.rows;
  SimulationResult& result = state.result;
  BatchSizePolicy* batch_size_policy = state.batch_size_policy.get();
  PowerLimitPolicy* power_limit_policy = state.power_limit_policy.get();
  rng::Generator& generator = state.generator;
  const double eta = options_.eta;
  const double beta = options_.beta;
  double min_cost = kInfinity;
  int best_batch_size = job.default_batch_size;

  struct Running {
    double start_time;
    double end_time;
    double runtime_ratio;
    int batch_size;
    double power_limit_w;
    RunOutcome outcome;
    double cost;
  };
  std::vector<Running> running;

  auto launch = [&](double start_time, double end_time, double runtime_ratio) -> Result<void> {
    int batch_size = best_batch_size;
    std::optional<double> power_limit_w;
    bool profiled = false;
    if (running.empty()) {
      auto predicted = JOULE_TRY(batch_size_policy->predict(job));
      batch_size = predicted;
      power_limit_w = power_limit_policy->predict(job, batch_size);
      if (!power_limit_w) {
        profiled = true;
        profile_power_limits(rows, job, batch_size, eta, *power_limit_policy);
        power_limit_w = power_limit_policy->predict(job, batch_size);
      }
    } else {
      power_limit_w = power_limit_policy->predict(job, batch_size);
    }
    if (!power_limit_w) {
      return fail(ErrorCode::kState, "no power limit is known for batch size {}", batch_size);
    }
    auto outcome =
        JOULE_TRY(run_job(rows, job, batch_size, *power_limit_w, generator, beta * min_cost, eta, profiled));
    const double cost = eta * outcome.energy_j + (1 - eta) * result.max_power_w * outcome.time_s;
    running.push_back({start_time, end_time, runtime_ratio, batch_size, *power_limit_w, outcome, cost});
    return {};
  };

  // Observes every job that ended by `now`, in end order; a job that missed the target is resubmitted.
  int recurrence = 0;
  auto reap = [&](double now) -> Result<void> {
    while (true) {
      std::vector<size_t> ended;
      for (size_t i = 0; i < running.size(); ++i) {
        if (running[i].end_time <= now) {
          ended.push_back(i);
        }
      }
      if (ended.empty()) {
        return {};
      }
      std::stable_sort(ended.begin(), ended.end(),
                       [&](size_t a, size_t b) { return running[a].end_time < running[b].end_time; });
      bool resubmitted = false;
      std::vector<Running> finished;
      finished.reserve(ended.size());
      for (const size_t index : ended) {
        finished.push_back(running[index]);
      }
      for (size_t k = 0; k < finished.size() && !resubmitted; ++k) {
        const Running job_run = finished[k];
        running.erase(std::find_if(running.begin(), running.end(), [&](const Running& r) {
          return r.start_time == job_run.start_time && r.end_time == job_run.end_time &&
                 r.batch_size == job_run.batch_size;
        }));
        const RunOutcome& outcome = job_run.outcome;
        const bool never_ran = outcome.energy_j == 0 && outcome.time_s == 0 && !outcome.reached;
        // A job that could not run one epoch under the bound is learned as an expensive failure, as in the
        // single-job simulation (the original observes its zero cost here, which rewards it).
        const double observed_cost = never_ran ? 100 * beta * min_cost : job_run.cost;
        if (auto observed =
                batch_size_policy->observe(job, job_run.batch_size, observed_cost, outcome.reached);
            !observed) {
          return tl::make_unexpected(observed.error());
        }
        if (!never_ran) {
          ++recurrence;
          const double energy_j = outcome.energy_j * job_run.runtime_ratio;
          const double time_s = outcome.time_s * job_run.runtime_ratio;
          const double cost = eta * energy_j + (1 - eta) * result.max_power_w * time_s;
          result.tries.push_back({recurrence, 1, job_run.batch_size, job_run.power_limit_w, energy_j, time_s,
                                  outcome.reached, cost});
          result.optimizer.energy_j += energy_j;
          result.optimizer.time_s += time_s;
          result.optimizer.cost += cost;
        }
        if (outcome.reached) {
          if (job_run.cost < min_cost) {
            min_cost = job_run.cost;
            best_batch_size = job_run.batch_size;
          }
        } else {
          if (auto launched =
                  launch(job_run.end_time, job_run.end_time + (job_run.end_time - job_run.start_time),
                         job_run.runtime_ratio);
              !launched) {
            return launched;
          }
          resubmitted = true;
        }
      }
    }
  };

  std::vector<GroupSubmission> ordered = submissions;
  std::stable_sort(ordered.begin(), ordered.end(), [](const GroupSubmission& a, const GroupSubmission& b) {
    return a.start_time < b.start_time;
  });
  for (const GroupSubmission& submission : ordered) {
    JOULE_TRY(reap(submission.start_time));
    JOULE_TRY(launch(submission.start_time, submission.end_time, submission.runtime_ratio));
  }
  JOULE_TRY(reap(kInfinity));
  result.recurrences = recurrence;
  add_fixed_configurations(result, rows, job, eta);
  return std::move(result);
}

Result<std::vector<FixedConfiguration>> Simulator::configurations(const Job& job) const {
  auto rows = JOULE_TRY(index_job(trace_, job));
  std::vector<FixedConfiguration> configs;
  for (const auto& [key, runs] : rows.by_config) {
    configs.push_back(expected_configuration(runs, job, options_.eta, trace_.max_power_limit_w()));
  }
  return configs;
}

Result<SimulationResult> Simulator::simulate(const Job& job) const {
  auto session = JOULE_TRY(start(job));
  Session& state = *session;
  const JobRows& rows = state.rows;
  SimulationResult& result = state.result;
  BatchSizePolicy* batch_size_policy = state.batch_size_policy.get();
  PowerLimitPolicy* power_limit_policy = state.power_limit_policy.get();
  rng::Generator& generator = state.generator;
  const double eta = options_.eta;
  const double beta = options_.beta;
  result.recurrences = options_.recurrences.value_or(2 * static_cast<int>(rows.by_batch_size.size()) *
                                                     static_cast<int>(rows.power_limits_w.size()));
  add_fixed_configurations(result, rows, job, eta);
  double min_cost = kInfinity;
  for (int recurrence = 0; recurrence < result.recurrences; ++recurrence) {
    double accumulated_cost = 0;
    int attempt = 0;
    bool reached = false;
    for (int tries = 0; tries < options_.max_tries && !reached; ++tries) {
      auto batch_size = JOULE_TRY(batch_size_policy->predict(job));
      if (rows.by_batch_size.count(batch_size) == 0) {
        return fail(ErrorCode::kInvalidArgument,
                    "the batch-size policy chose {}, which has no runs in the trace", batch_size);
      }
      std::optional<double> power_limit_w = power_limit_policy->predict(job, batch_size);
      const bool profiled = !power_limit_w;
      if (profiled) {
        profile_power_limits(rows, job, batch_size, eta, *power_limit_policy);
        power_limit_w = power_limit_policy->predict(job, batch_size);
        if (!power_limit_w) {
          return fail(ErrorCode::kState,
                      "the power-limit policy chose no limit for batch size {} after profiling", batch_size);
        }
      }
      auto outcome =
          run_job(rows, job, batch_size, *power_limit_w, generator, beta * min_cost, eta, profiled);
      if (!outcome) {
        return tl::make_unexpected(outcome.error());
      }
      if (outcome->energy_j == 0 && outcome->time_s == 0 && !outcome->reached) {
        // Not even one epoch fits under the bound: the try never ran. The policy learns it as a failure.
        JOULE_TRY(batch_size_policy->observe(job, batch_size, 100 * beta * min_cost, false));
        continue;
      }
      if (!outcome->reached && recurrence == 0) {
        return fail(ErrorCode::kState,
                    "the default batch size {} did not reach the target {} in the first recurrence (try "
                    "another --b0 or a larger --max-epochs)",
                    job.default_batch_size, job.target_metric);
      }
      const double cost = eta * outcome->energy_j + (1 - eta) * result.max_power_w * outcome->time_s;
      accumulated_cost += cost;
      JOULE_TRY(batch_size_policy->observe(job, batch_size, cost, outcome->reached));
      result.tries.push_back({recurrence + 1, ++attempt, batch_size, *power_limit_w, outcome->energy_j,
                              outcome->time_s, outcome->reached, cost});
      result.optimizer.energy_j += outcome->energy_j;
      result.optimizer.time_s += outcome->time_s;
      result.optimizer.cost += cost;
      if (outcome->reached) {
        reached = true;
        // The bound is set by the cheapest whole recurrence so far, failed tries included (as the original).
        min_cost = std::min(min_cost, accumulated_cost);
      }
    }
    if (!reached) {
      return fail(ErrorCode::kState, "recurrence {} did not reach the target in {} tries", recurrence + 1,
                  options_.max_tries);
    }
  }
  return std::move(result);
}

}  // namespace joule::sim
