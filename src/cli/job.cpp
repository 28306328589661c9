// SPDX-License-Identifier: Apache-2.0
// `joule job`: a client of `joule serve`'s (or Zeus's) batch-size optimizer for scripts: register a job, ask
// for the next trial's batch size, report epochs, end trials, show and delete jobs.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/client/client.hpp"
#include "joule/client/json_forms.hpp"
#include "joule/core/file.hpp"
#include "joule/optimize/batch_size_fields.hpp"
#include "joule/optimize/batch_size_gpu.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

namespace bso = optimize::batch_size;
using nlohmann::json;

constexpr const char* kDefaultServer = "http://127.0.0.1:7787";

struct JobFlags {
  std::string server;
  Format format = Format::kText;
  std::optional<std::string> request_id;
  double timeout_s = 120;
  int attempts = 8;
  std::string job_id;

  // register: the --job-spec file, and the fields given on top of it (--job-id is job_id above)
  std::string job_spec;
  bso::RegistrationFields fields;
  bool lower_is_better = false;

  // report / end
  int64_t trial = 0;
  int64_t batch_size = 0;
  double time_s = 0;
  double energy_j = 0;
  double metric = 0;
  int64_t epoch = 0;
};

client::Client connect(const JobFlags& flags) {
  std::string url = flags.server;
  if (url.empty()) {
    const char* from_environment = std::getenv("JOULE_SERVER");
    url = from_environment != nullptr && *from_environment != '\0' ? from_environment : kDefaultServer;
  }
  client::ClientOptions options;
  options.attempts = flags.attempts;
  options.request_id = flags.request_id;
  options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(from_seconds(flags.timeout_s));
  return value_or_throw(client::Client::connect(url, options));
}

void print_json(const json& value) {
  std::cout << value.dump(2) << "\n";
}

// The register body: the --job-spec file (Zeus's JobSpec, optionally with the GpuConfig fields), with the
// flags given on top.
json register_body(const JobFlags& flags) {
  json body = json::object();
  if (!flags.job_spec.empty()) {
    const std::string text = value_or_throw(read_text_file(flags.job_spec));
    body = json::parse(text, nullptr, false);
    if (!body.is_object()) {
      throw Exception(ErrorCode::kInvalidArgument,
                      fmt::format("job register: {} is not a JSON object (Zeus's JobSpec)", flags.job_spec));
    }
  }
  bso::RegistrationFields fields = flags.fields;
  if (!flags.job_id.empty()) {
    fields.job_id = flags.job_id;
  }
  if (flags.lower_is_better) {
    fields.higher_is_better_metric = false;
  }
  fields.write_to(body);
  return body;
}

// Zeus's client sends the GPUs the job runs on from its monitor; so does this command when the flags and the
// job spec leave them out, by optimize::batch_size::gpu_config_of's rule (Zeus's BatchSizeOptimizer's).
void fill_gpu_config_from_devices(json& body, const GlobalOptions& global) {
  const bool has_power = body.contains("max_power");
  const bool has_count = body.contains("number_of_gpus");
  const bool has_model = body.contains("gpu_model");
  if (has_power && has_count && has_model) {
    return;
  }
  std::vector<std::string> missing;
  for (const auto& [present, flag] :
       {std::pair{has_power, "--max-power-w"}, std::pair{has_count, "--number-of-gpus"},
        std::pair{has_model, "--gpu-model"}}) {
    if (!present) {
      missing.emplace_back(flag);
    }
  }
  const device::DeviceSet devices = open_devices(global, true, false);
  if (devices.gpus.empty()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("job register: a job is registered with the GPUs it runs on: give {} (or the "
                                "job spec's max_power, number_of_gpus, gpu_model), or run this on the job's "
                                "machine; no GPU was found here ({}), and --sim v100 gives a simulated one",
                                fmt::join(missing, ", "), devices.why_no_gpus()));
  }
  std::vector<device::Gpu*> gpus;
  for (const auto& gpu : devices.gpus) {
    gpus.push_back(gpu.get());
  }
  // A max_power of the body stays as it is (checked by GpuConfig::from_json): GPU 0's limits are read only
  // without one, so the placeholder given here is never used.
  const bso::GpuConfig found =
      value_or_throw(bso::gpu_config_of(gpus, has_power ? std::optional<double>(0.0) : std::nullopt));
  if (!has_count) {
    body["number_of_gpus"] = found.number_of_gpus;
  }
  if (!has_model) {
    body["gpu_model"] = found.gpu_model;
  }
  if (!has_power) {
    body["max_power"] = found.max_power;
  }
  std::cerr << fmt::format(
      "joule: job register: {} from this machine's GPUs: max_power {} W, {} GPU(s), {}\n",
      fmt::join(missing, ", "), body["max_power"].dump(), body["number_of_gpus"].dump(),
      body["gpu_model"].get<std::string>());
}

int run_register(const JobFlags& flags, const GlobalOptions& global) {
  json body = register_body(flags);
  fill_gpu_config_from_devices(body, global);
  // Checked here first, with the server's own rules and words, so a typo costs no round trip.
  const bso::JobSpec spec = value_or_throw(bso::JobSpec::from_json(body));
  const bso::GpuConfig gpu = value_or_throw(bso::GpuConfig::from_json(body));
  client::Client client = connect(flags);
  const client::RegisteredJob job = value_or_throw(client.register_job(spec, gpu));
  if (flags.format == Format::kJson) {
    print_json(client::to_json(job));
  } else {
    std::cout << fmt::format("job {} {}\n", *job.spec.job_id,
                             job.created ? "registered" : "was already registered with this configuration");
  }
  return 0;
}

void require_job_id(const JobFlags& flags, std::string_view command) {
  if (flags.job_id.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, fmt::format("job {}: --job-id is required", command));
  }
}

int run_next(const JobFlags& flags) {
  require_job_id(flags, "next");
  client::Client client = connect(flags);
  const bso::TrialId trial = value_or_throw(client.next_batch_size(flags.job_id));
  if (flags.format == Format::kJson) {
    print_json(trial.to_json());
  } else {
    std::cout << fmt::format("trial {} of job {}: batch size {}\n", trial.trial_number, trial.job_id,
                             trial.batch_size);
  }
  return 0;
}

int run_report(const JobFlags& flags) {
  require_job_id(flags, "report");
  bso::TrainingResult result;
  result.job_id = flags.job_id;
  result.trial_number = flags.trial;
  result.batch_size = flags.batch_size;
  result.time_s = flags.time_s;
  result.energy_j = flags.energy_j;
  result.metric = flags.metric;
  result.current_epoch = flags.epoch;
  client::Client client = connect(flags);
  const bso::ReportResponse response = value_or_throw(client.report(result));
  if (flags.format == Format::kJson) {
    print_json(response.to_json());
  } else if (!response.stop_train) {
    std::cout << fmt::format("keep training: {}\n", response.message);
  } else {
    std::cout << fmt::format("stop training ({}): {}\n", response.converged ? "converged" : "not converged",
                             response.message);
  }
  return 0;
}

int run_end(const JobFlags& flags) {
  require_job_id(flags, "end");
  client::Client client = connect(flags);
  const bso::TrialId trial{flags.job_id, flags.batch_size, flags.trial};
  value_or_throw(client.end_trial(trial));
  if (flags.format == Format::kJson) {
    json out = trial.to_json();
    out["ended"] = true;
    print_json(out);
  } else {
    std::cout << fmt::format("trial {} of job {} ended\n", trial.trial_number, trial.job_id);
  }
  return 0;
}

// An arm's mean reward as the server's JSON writes it: a number, or "inf", "-inf", "nan" quoted.
std::string mean_reward_text(double mean) {
  if (std::isfinite(mean)) {
    return json(mean).dump();
  }
  return json(std::isnan(mean) ? "nan" : (mean > 0 ? "inf" : "-inf")).dump();
}

int run_status(const JobFlags& flags) {
  require_job_id(flags, "status");
  client::Client client = connect(flags);
  const client::JobStatus status = value_or_throw(client.job_status(flags.job_id));
  if (flags.format == Format::kJson) {
    print_json(status.document);
    return 0;
  }
  const client::JobCounts& counts = status.counts;
  std::cout << fmt::format("job {}: stage {}, {} trials ({} running, {} succeeded, {} failed), {} reports\n",
                           flags.job_id, bso::to_string(status.stage), counts.trials, counts.dispatched,
                           counts.succeeded, counts.failed, counts.reports);
  if (status.min_cost) {
    std::cout << fmt::format("  min cost {:.6g} J at batch size {}\n", *status.min_cost,
                             status.min_cost_batch_size);
  }
  for (const auto& arm : status.arms) {
    // The mean as the server wrote it (JSON's shortest round-trip form).
    std::cout << fmt::format("  arm {}: mean reward {}, {} observations\n", arm.batch_size,
                             mean_reward_text(arm.param_mean), arm.num_observations);
  }
  return 0;
}

int run_delete(const JobFlags& flags) {
  require_job_id(flags, "delete");
  client::Client client = connect(flags);
  value_or_throw(client.delete_job(flags.job_id));
  if (flags.format == Format::kJson) {
    print_json({{"job_id", flags.job_id}, {"deleted", true}});
  } else {
    std::cout << fmt::format("job {} deleted\n", flags.job_id);
  }
  return 0;
}

// Flags every `joule job` subcommand takes.
void add_common(CLI::App& command, JobFlags& flags) {
  command
      .add_option("--server", flags.server,
                  fmt::format("Server URL(s), comma-separated (default $JOULE_SERVER or {})", kDefaultServer))
      ->option_text("URL");
  command
      .add_option("--request-id", flags.request_id,
                  "Request id: running the same command again with it is not applied twice")
      ->option_text("ID");
  command.add_option("--timeout-s", flags.timeout_s, "Per-attempt timeout (default 120)")
      ->check(number(duration_rule()))
      ->option_text("S");
  command
      .add_option("--attempts", flags.attempts,
                  "Attempts per request when the server cannot be reached (default 8; retries are safe)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  add_format_option(command, flags.format, {Format::kText, Format::kJson});
}

void add_trial_flags(CLI::App& command, JobFlags& flags) {
  command.add_option("--job-id", flags.job_id, "Job id")->option_text("ID")->required();
  command.add_option("--trial", flags.trial, "Trial number")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N")
      ->required();
  command.add_option("--batch-size", flags.batch_size, "The trial's batch size")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("B")
      ->required();
}

// `joule job register`: Zeus's JobSpec and GpuConfig, field by field or from a file.
void add_register_command(CLI::App& job, const std::shared_ptr<JobFlags>& flags, const GlobalOptions& global,
                          int& exit_code) {
  bso::RegistrationFields& fields = flags->fields;
  auto* registration = job.add_subcommand("register", "Register a job (Zeus's JobSpec and GpuConfig)");
  add_common(*registration, *flags);
  registration
      ->add_option("--job-spec", flags->job_spec, "Zeus's JobSpec as JSON (flags override its fields)")
      ->option_text("FILE.json");
  registration->add_option("--job-id", flags->job_id, "Job id (default: <prefix>-<8 hex> from the server)")
      ->option_text("ID");
  registration->add_option("--prefix", fields.job_id_prefix, "job_id_prefix")->option_text("PREFIX");
  registration->add_option("--batch-sizes", fields.batch_sizes, "Batch sizes to choose from")
      ->delimiter(',')
      ->option_text("B,B,…");
  registration->add_option("--default-batch-size", fields.default_batch_size, "The first batch size tried")
      ->option_text("B");
  registration->add_option("--eta-knob", fields.eta_knob, "Weight of energy in the cost, [0, 1] (0.5)")
      ->check(number(NumberRule::any_finite()))
      ->option_text("ETA");
  registration->add_option("--beta-knob", fields.beta_knob, "Stop runs costing more than BETA x min cost (2)")
      ->option_text("BETA");
  registration->add_flag("--no-early-stop", fields.no_early_stop,
                         "Never stop a run for its cost (beta_knob null)");
  registration->add_option("--target-metric", fields.target_metric, "Metric that counts as converged (0.5)")
      ->check(number(NumberRule::any_finite()))
      ->option_text("M");
  registration->add_flag("--lower-is-better", flags->lower_is_better, "Converged when metric <= target");
  registration->add_option("--max-epochs", fields.max_epochs, "Epochs before a run stops unconverged (100)")
      ->option_text("N");
  registration->add_option("--num-pruning-rounds", fields.num_pruning_rounds, "Pruning rounds (2)")
      ->option_text("N");
  registration->add_option("--window-size", fields.window_size, "Results per arm the bandit uses (0: all)")
      ->option_text("N");
  registration->add_option("--mab-prior-mean", fields.mab_prior_mean, "Bandit prior mean (0)")
      ->check(number(NumberRule::any_finite()))
      ->option_text("X");
  registration->add_option("--mab-prior-precision", fields.mab_prior_precision, "Bandit prior precision (0)")
      ->check(number(NumberRule::any_finite()))
      ->option_text("X");
  registration->add_option("--mab-num-explorations", fields.mab_num_explorations, "Pulls per arm first (2)")
      ->option_text("N");
  registration->add_option("--mab-seed", fields.mab_seed, "Seed: decisions equal Zeus's for the same history")
      ->option_text("SEED");
  registration
      ->add_option("--max-power-w", fields.max_power,
                   "Max power limit of GPU 0 x number of GPUs, W (default: from this machine's GPUs)")
      ->check(number(above_zero(quantity::power_w())))
      ->option_text("W");
  registration
      ->add_option("--number-of-gpus", fields.number_of_gpus, "GPUs of the job (default: this machine's)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  registration
      ->add_option("--gpu-model", fields.gpu_model, "GPU model, e.g. \"NVIDIA A40\" (default: GPU 0's)")
      ->option_text("NAME");
  set_examples(*registration,
               {"joule job register --prefix mnist --batch-sizes 32,64,128 --default-batch-size 64",
                "joule job register --job-spec spec.json"});
  registration->callback([&exit_code, &global, flags] { exit_code = run_register(*flags, global); });
}

}  // namespace

void add_job_command(CLI::App& app, const GlobalOptions& global, int& exit_code) {
  auto flags = std::make_shared<JobFlags>();
  auto* job = app.add_subcommand("job", "Talk to a batch-size optimizer server (joule serve, or Zeus's)");
  job->require_subcommand(1);

  set_examples(*job, {"joule job register --prefix mnist --batch-sizes 32,64,128 --default-batch-size 64",
                      "joule job next --job-id mnist-8d1f69b4"});
  add_register_command(*job, flags, global, exit_code);

  auto* next = job->add_subcommand("next", "Get the next trial's batch size");
  add_common(*next, *flags);
  next->add_option("--job-id", flags->job_id, "Job id")->option_text("ID")->required();
  set_examples(*next, {"joule job next --job-id mnist-8d1f69b4"});
  next->callback([&exit_code, flags] { exit_code = run_next(*flags); });

  auto* report = job->add_subcommand("report", "Report an epoch's cumulative time, energy and metric");
  add_common(*report, *flags);
  add_trial_flags(*report, *flags);
  report->add_option("--time-s", flags->time_s, "Training time of the trial so far, s")
      ->check(number(duration_rule(true)))
      ->option_text("T")
      ->required();
  report->add_option("--energy-j", flags->energy_j, "Training energy of the trial so far, J")
      ->check(number(quantity::energy_j()))
      ->option_text("E")
      ->required();
  report->add_option("--metric", flags->metric, "Validation metric after this epoch")
      ->check(number(NumberRule::any_finite()))
      ->option_text("M")
      ->required();
  report->add_option("--epoch", flags->epoch, "Epochs done so far")
      ->check(number(NumberRule::non_negative_integer()))
      ->option_text("N")
      ->required();
  set_examples(*report, {"joule job report --job-id mnist-8d1f69b4 --trial 1 --batch-size 64 --time-s 120.5 "
                         "--energy-j 30000 --metric 0.31 --epoch 1"});
  report->callback([&exit_code, flags] { exit_code = run_report(*flags); });

  auto* end = job->add_subcommand("end", "End a trial (a trial without a final report becomes Failed)");
  add_common(*end, *flags);
  add_trial_flags(*end, *flags);
  set_examples(*end, {"joule job end --job-id mnist-8d1f69b4 --trial 1 --batch-size 64"});
  end->callback([&exit_code, flags] { exit_code = run_end(*flags); });

  auto* status = job->add_subcommand("status", "Show a job: stage, trials, reports, bandit arms");
  add_common(*status, *flags);
  status->add_option("--job-id", flags->job_id, "Job id")->option_text("ID")->required();
  set_examples(*status, {"joule job status --job-id mnist-8d1f69b4 --format json"});
  status->callback([&exit_code, flags] { exit_code = run_status(*flags); });

  auto* erase = job->add_subcommand("delete", "Delete a job and its history");
  add_common(*erase, *flags);
  erase->add_option("--job-id", flags->job_id, "Job id")->option_text("ID")->required();
  set_examples(*erase, {"joule job delete --job-id mnist-8d1f69b4"});
  erase->callback([&exit_code, flags] { exit_code = run_delete(*flags); });
}

}  // namespace joule::cli
