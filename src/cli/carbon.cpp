// SPDX-License-Identifier: Apache-2.0
// `joule carbon`: carbon intensity (live providers or a trace), forecaster evaluation, and the Chase replay.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/carbon/country.hpp"
#include "joule/carbon/intensity_report.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/optimize/chase_forecast.hpp"
#include "joule/optimize/forecast_comparison.hpp"
#include "joule/sim/carbon_replay.hpp"

#include "common.hpp"
#include "usage.hpp"

namespace joule::cli {

namespace {

// ---- replay ----------------------------------------------------------------------------------------------

struct ReplayFlags {
  std::string trace;
  std::string gpu = "v100";
  std::string workload = "imagenet";
  std::optional<int> batch_size;
  int gpu_count = 1;
  double eta = 0.5;
  std::optional<double> zeus_eta;
  std::optional<double> epochs;
  std::optional<int64_t> iterations;
  double period_min = 30;
  double max_intensity = 750;
  bool max_intensity_from_trace = false;
  double step_w = 5;
  std::string forecaster = "ridge";
  size_t training_samples = 48;
  std::string start;
  Format format = Format::kText;
  std::string plot;
};

int run_replay(const ReplayFlags& flags) {
  if (flags.epochs && flags.iterations) {
    throw Exception(ErrorCode::kInvalidArgument, "carbon replay: give --epochs or --iterations, not both");
  }
  // Checked before the replay runs.
  std::optional<OutputFile> plot = open_output(flags.plot, "--plot");
  const auto trace = value_or_throw(carbon::CarbonTrace::read_file(flags.trace));
  optimize::CarbonReplayOptions options;
  options.gpu = flags.gpu;
  options.workload = flags.workload;
  options.gpu_count = flags.gpu_count;
  options.step_w = flags.step_w;
  options.forecaster = flags.forecaster;
  options.training_samples = flags.training_samples;
  options.chase.eta = flags.eta;
  options.chase.period_s = static_cast<int64_t>(std::llround(flags.period_min * 60));
  options.chase.max_intensity_g_per_kwh = flags.max_intensity;
  if (flags.max_intensity_from_trace) {
    double highest = 0;
    for (const auto& p : trace.points()) {
      highest = std::max(highest, p.intensity_g_per_kwh);
    }
    options.chase.max_intensity_g_per_kwh = highest;
  }
  if (!flags.start.empty()) {
    options.start_unix_s = value_or_throw(carbon::parse_utc_time(flags.start));
  }
  // Unknown names are usage errors (exit 2), checked before the work is worked out.
  name_or_throw(device::sim::find_gpu_model(flags.gpu));
  name_or_throw(device::sim::find_workload(flags.workload));
  const sim::CarbonReplayWork work = value_or_throw(
      sim::replay_work(flags.gpu, flags.workload, flags.batch_size, flags.epochs, flags.iterations));
  options.batch_size = work.batch_size;
  options.work_iterations = work.work_iterations;
  options.zeus_eta = flags.zeus_eta;
  const auto result = value_or_throw(optimize::replay_carbon(trace, options));
  const sim::ReplaySettings settings{.epochs = work.epochs,
                                     .eta = flags.eta,
                                     .zeus_eta = flags.zeus_eta.value_or(flags.eta),
                                     .period_min = flags.period_min,
                                     .max_intensity_g_per_kwh = flags.max_intensity,
                                     .forecaster = flags.forecaster};
  switch (flags.format) {
    case Format::kJson:
      std::cout << sim::render_replay_json(result, settings);
      break;
    case Format::kCsv:
      std::cout << sim::render_replay_csv(result);
      break;
    case Format::kText:
      std::cout << sim::render_replay_text(result, settings);
      break;
  }
  if (plot) {
    if (!write_or_report(*plot, sim::replay_plot_svg(result), false)) {
      return kExitFailure;
    }
    if (flags.format == Format::kText) {
      std::cout << fmt::format("plot written to {}\n", flags.plot);
    }
  }
  return 0;
}

// ---- forecast --------------------------------------------------------------------------------------------

struct ForecastFlags {
  std::string trace;
  std::string forecaster = "all";
  size_t training_samples = 48;
  int horizon = 1;
  size_t refit_every = 0;
  Format format = Format::kText;
};

int run_forecast(const ForecastFlags& flags) {
  const auto trace = value_or_throw(carbon::CarbonTrace::read_file(flags.trace));
  const optimize::ForecastEvaluationOptions options{flags.training_samples, flags.horizon, flags.refit_every};
  const std::vector<optimize::ForecastEvaluation> evaluations =
      value_or_throw(optimize::compare_forecasters(flags.forecaster, trace, options));
  const double naive_mape = optimize::naive_mape_percent(evaluations);
  switch (flags.format) {
    case Format::kJson: {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& e : evaluations) {
        list.push_back(
            {{"name", e.name},
             {"mape_percent", e.mape_percent},
             {"mae_g_per_kwh", e.mae_g_per_kwh},
             {"predictions", e.predictions},
             {"improvement_over_naive_percent", optimize::improvement_over_naive_percent(e, naive_mape)}});
      }
      nlohmann::json out = {{"trace", trace.source()},
                            {"period_s", trace.period_s()},
                            {"training_samples", flags.training_samples},
                            {"horizon_steps", flags.horizon},
                            {"refit_every", flags.refit_every},
                            {"forecasters", list}};
      std::cout << out.dump(2) << "\n";
      break;
    }
    case Format::kCsv:
      std::cout << "forecaster,mape_percent,mae_g_per_kwh,predictions\n";
      for (const auto& e : evaluations) {
        std::cout << fmt::format("{},{:.6f},{:.6f},{}\n", e.name, e.mape_percent, e.mae_g_per_kwh,
                                 e.predictions);
      }
      break;
    case Format::kText:
      std::cout << fmt::format("{}: {} points every {} s; trained on the first {}{}, {} step(s) ahead\n",
                               trace.source(), trace.points().size(), trace.period_s(),
                               flags.training_samples,
                               flags.refit_every > 0 ? fmt::format(" (refit every {})", flags.refit_every)
                                                     : std::string(" (once)"),
                               flags.horizon);
      std::cout << fmt::format("{:<10} {:>10} {:>14} {:>12} {:>14}\n", "model", "MAPE (%)", "MAE (g/kWh)",
                               "predictions", "vs naive (%)");
      for (const auto& e : evaluations) {
        std::cout << fmt::format(
            "{:<10} {:>10.3f} {:>14.2f} {:>12} {:>+14.1f}\n", e.name, e.mape_percent, e.mae_g_per_kwh,
            e.predictions, naive_mape > 0 ? -optimize::improvement_over_naive_percent(e, naive_mape) : 0.0);
      }
      break;
  }
  return 0;
}

// ---- intensity -------------------------------------------------------------------------------------------

struct IntensityFlags {
  std::string trace;
  std::string zone;
  std::string country;
  std::string provider;
  std::string at;
  double history_h = 0;
  double forecast_h = 0;
  Format format = Format::kText;
};

int run_intensity(const IntensityFlags& flags) {
  carbon::CarbonSourceOptions source;
  source.trace_path = flags.trace;
  source.zone = flags.zone;
  source.provider = flags.provider;
  // Without a trace or a zone (no API key needed), or with --country: a country's yearly average, said
  // plainly on stderr (stdout stays data), with how the country was chosen.
  if (!flags.country.empty() || (flags.trace.empty() && flags.zone.empty())) {
    if (!flags.trace.empty() || !flags.zone.empty()) {
      throw Exception(ErrorCode::kInvalidArgument,
                      "carbon intensity: give one of --trace, --zone and --country (--country picks a "
                      "country's yearly average)");
    }
    const auto choice = resolve_country(flags.country);
    std::cerr << "joule: " << choice.describe() << "\n";
    source.country = choice.country.iso3;
  }
  // A trace replays on a clock set to --at (default: its last period); live providers use the real time.
  std::unique_ptr<VirtualClock> virtual_clock;
  const Clock* clock = &SteadyClock::instance();
  if (!flags.trace.empty()) {
    const auto trace = value_or_throw(carbon::CarbonTrace::read_file(flags.trace));
    const int64_t at = flags.at.empty() ? trace.points().back().time_unix_s
                                        : value_or_throw(carbon::parse_utc_time(flags.at));
    virtual_clock = std::make_unique<VirtualClock>(at * 1'000'000'000);
    clock = virtual_clock.get();
    if (flags.at.empty()) {
      // Not now: a trace is history. Say which time stands in for "now", on stderr (stdout stays data).
      std::cerr << fmt::format(
          "joule: carbon intensity: no --at given, so the time is the trace's last period, {} (the trace "
          "covers "
          "{} to {}); give --at TIME for another\n",
          carbon::format_utc_time(at), carbon::format_utc_time(trace.points().front().time_unix_s),
          carbon::format_utc_time(at));
    }
  } else if (!flags.at.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "carbon intensity: --at needs --trace");
  }
  auto signal = value_or_throw(carbon::make_carbon_signal(source, *clock));
  const carbon::IntensityReading reading = value_or_throw(
      carbon::read_intensity(*signal, *clock, flags.history_h * 3600, flags.forecast_h * 3600));
  switch (flags.format) {
    case Format::kJson:
      std::cout << carbon::render_intensity_json(reading);
      break;
    case Format::kCsv:
      std::cout << carbon::render_intensity_csv(reading);
      break;
    case Format::kText:
      std::cout << carbon::render_intensity_text(reading);
      break;
  }
  return 0;
}

// ---- countries -------------------------------------------------------------------------------------------

int run_countries(Format format) {
  const auto& table = carbon::CountryTable::builtin();
  switch (format) {
    case Format::kJson:
      std::cout << carbon::render_countries_json(table);
      break;
    case Format::kCsv:
      std::cout << carbon::render_countries_csv(table);
      break;
    case Format::kText:
      std::cout << carbon::render_countries_text(table);
      break;
  }
  return 0;
}

void add_replay_command(CLI::App& command, int& exit_code) {
  auto replay = std::make_shared<ReplayFlags>();
  auto* replay_command = command.add_subcommand(
      "replay",
      "Replay a training run on simulated GPUs under a carbon trace: max power limit, Zeus and Chase");
  replay_command
      ->add_option("--trace", replay->trace, "Carbon trace CSV (timestamp,carbon_intensity_g_per_kwh)")
      ->option_text("FILE")
      ->required();
  replay_command->add_option("--gpu", replay->gpu, "Simulated GPU model (default v100)")->option_text("G");
  replay_command->add_option("--workload", replay->workload, "Zeus-trace workload (default imagenet)")
      ->option_text("W");
  replay_command->add_option("--batch-size", replay->batch_size, "Batch size (default: the paper's b0)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("B");
  replay_command->add_option("--gpus", replay->gpu_count, "Data-parallel GPUs (default 1)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  replay_command
      ->add_option("--eta", replay->eta, "Chase's weight of energy at the maximum intensity (default 0.5)")
      ->check(number(NumberRule::between(0, 1)))
      ->option_text("E");
  replay_command->add_option("--zeus-eta", replay->zeus_eta, "Zeus's eta (default: --eta)")
      ->check(number(NumberRule::between(0, 1)))
      ->option_text("E");
  replay_command
      ->add_option("--epochs", replay->epochs, "Work in epochs (default: epochs to the target metric)")
      ->check(number(NumberRule::positive()))
      ->option_text("N");
  replay_command->add_option("--iterations", replay->iterations, "Work in iterations")
      ->check(number(NumberRule::positive()))
      ->option_text("N");
  replay_command
      ->add_option("--period-min", replay->period_min, "Chase's decision period, minutes (default 30)")
      ->check(number(quantity::period_min()))
      ->option_text("M");
  replay_command
      ->add_option("--max-intensity", replay->max_intensity, "Normalising intensity, g/kWh (default 750)")
      ->check(number(above_zero(quantity::carbon_intensity_g_per_kwh())))
      ->option_text("G");
  replay_command->add_flag("--max-intensity-from-trace", replay->max_intensity_from_trace,
                           "Use the trace's maximum as the normalising intensity");
  replay_command->add_option("--step-w", replay->step_w, "Candidate power-limit spacing, W (default 5)")
      ->check(number(above_zero(quantity::power_w())))
      ->option_text("W");
  replay_command
      ->add_option("--forecaster", replay->forecaster,
                   "ridge, svr or last (default ridge: it measures better than svr, see docs/carbon.md)")
      ->option_text("NAME");
  replay_command
      ->add_option("--training-samples", replay->training_samples,
                   "Forecaster training window before the start, periods (default 48)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  replay_command
      ->add_option("--start", replay->start, "Start time, ISO-8601 UTC (default: trace start + window)")
      ->option_text("TIME");
  add_format_option(*replay_command, replay->format, {Format::kText, Format::kJson, Format::kCsv});
  replay_command->add_option("--plot", replay->plot, "Write an SVG of the intensity and the chosen limits")
      ->option_text("FILE.svg");
  set_examples(*replay_command, {"joule carbon replay --trace data/carbon/synthetic_us_solar_14d.csv --gpu "
                                 "v100 --workload imagenet --plot replay.svg"});
  replay_command->callback([&exit_code, replay] { exit_code = run_replay(*replay); });
}

void add_forecast_command(CLI::App& command, int& exit_code) {
  auto forecast = std::make_shared<ForecastFlags>();
  auto* forecast_command = command.add_subcommand(
      "forecast", "Evaluate carbon-intensity forecasters on a trace (MAPE against the naive last value)");
  forecast_command->add_option("--trace", forecast->trace, "Carbon trace CSV")
      ->option_text("FILE")
      ->required();
  forecast_command->add_option("--forecaster", forecast->forecaster, "svr, ridge, last or all (default all)")
      ->option_text("NAME");
  forecast_command
      ->add_option("--training-samples", forecast->training_samples, "Fit on the first N points (default 48)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("N");
  forecast_command
      ->add_option("--horizon", forecast->horizon, "Steps ahead, fed back recursively (default 1)")
      ->check(number(NumberRule::positive_integer()))
      ->option_text("H");
  forecast_command
      ->add_option("--refit-every", forecast->refit_every, "Refit every N predictions (default 0: once)")
      ->check(number(NumberRule::non_negative_integer()))
      ->option_text("N");
  add_format_option(*forecast_command, forecast->format, {Format::kText, Format::kJson, Format::kCsv});
  set_examples(*forecast_command, {"joule carbon forecast --trace data/carbon/synthetic_us_solar_14d.csv "
                                   "--forecaster ridge --horizon 4"});
  forecast_command->callback([&exit_code, forecast] { exit_code = run_forecast(*forecast); });
}

void add_intensity_command(CLI::App& command, int& exit_code) {
  auto intensity = std::make_shared<IntensityFlags>();
  auto* intensity_command = command.add_subcommand(
      "intensity",
      "Print the carbon intensity from a provider (--zone), a trace (--trace, --at) or a country's yearly "
      "average (--country; the default, inferred from the timezone or locale)");
  intensity_command->add_option("--trace", intensity->trace, "Carbon trace CSV")->option_text("FILE");
  intensity_command
      ->add_option("--at", intensity->at, "Time in the trace, ISO-8601 UTC (default: its last period)")
      ->option_text("TIME");
  intensity_command->add_option("--zone", intensity->zone, "Zone or region of a live provider")
      ->option_text("Z");
  intensity_command
      ->add_option(
          "--country", intensity->country,
          "A country's yearly average: ISO 3166-1 code (DEU or DE), or auto to infer it from the timezone "
          "or locale (the default without --trace and --zone; `joule carbon countries` lists them)")
      ->option_text("CODE|auto");
  intensity_command
      ->add_option("--carbon-provider,--provider", intensity->provider,
                   "electricitymaps, watttime or uk (default: JOULE_CARBON_PROVIDER, else electricitymaps); "
                   "the same flag as measure's and power's")
      ->option_text("P");
  intensity_command->add_option("--history-hours", intensity->history_h, "Also print the last H hours")
      ->check(number(duration_rule(true, 3600)))
      ->option_text("H");
  intensity_command
      ->add_option("--forecast-hours", intensity->forecast_h, "Also print the forecast of H hours")
      ->check(number(duration_rule(true, 3600)))
      ->option_text("H");
  add_format_option(*intensity_command, intensity->format, {Format::kText, Format::kJson, Format::kCsv});
  set_examples(*intensity_command,
               {"joule carbon intensity --country auto",
                "joule carbon intensity --zone GB --carbon-provider uk --forecast-hours 6 --format json"});
  intensity_command->callback([&exit_code, intensity] { exit_code = run_intensity(*intensity); });
}

void add_countries_command(CLI::App& command, int& exit_code) {
  auto countries = std::make_shared<Format>(Format::kText);
  auto* countries_command = command.add_subcommand(
      "countries", "List the countries whose yearly average intensity `--country` can choose");
  add_format_option(*countries_command, *countries, {Format::kText, Format::kJson, Format::kCsv});
  set_examples(*countries_command, {"joule carbon countries --format csv"});
  countries_command->callback([&exit_code, countries] { exit_code = run_countries(*countries); });
}

}  // namespace

void add_carbon_command(CLI::App& app, const GlobalOptions& /*global*/, int& exit_code) {
  auto* command =
      app.add_subcommand("carbon", "Carbon intensity, its forecast, and Chase's carbon-aware power limits");
  command->require_subcommand(1);
  set_examples(
      *command,
      {"joule carbon intensity --country auto",
       "joule carbon replay --trace data/carbon/synthetic_us_solar_14d.csv --gpu v100 --workload imagenet"});
  add_replay_command(*command, exit_code);
  add_forecast_command(*command, exit_code);
  add_intensity_command(*command, exit_code);
  add_countries_command(*command, exit_code);
}

}  // namespace joule::cli
