// SPDX-License-Identifier: Apache-2.0
// card_profile_bench: Perseus's live profiling with and without a frontier card (docs/perseus-live.md,
// "Starting from a frontier card").
//
// The GPUs: pipelines whose stages run on the device layer's simulated GPU models (v100, a40, p100, rtx6000,
// generic), each stage's forward and backward one of the Zeus traces' workloads, measured at every supported
// SM clock (plan::simulated_stage_profile). The cards: data/cards/sim-*.json, made by `joule probe` on the
// same simulated models with its own compute and memory kernels, so no card is built from the profile it
// predicts. Each pipeline runs through the live scheduler twice, without and with the card, its ranks
// reporting what the true profile gives at the scheduled clocks (optionally with noise), and the plan each
// run chooses is evaluated on the TRUE full profile:
// - profiling: iterations (warm-up included) and seconds (each profiling round's slowest rank);
// - the fastest plan's energy, and the energy at a straggler's pace T' = 1.15 × the all-max-clock time
//   (blocking until T' included), card against full sweep.
// Also the A100-like example profile (data/perseus) with the generic card: a GPU the card is not for, which
// read_card would refuse; run here to show what the residual check does with it.
//
//   build/bench/card_profile_bench [--noise 0.01] [--threshold 0.01]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/plan/card_profile.hpp"
#include "joule/plan/live.hpp"
#include "joule/plan/planner.hpp"
#include "joule/plan/profile_codec.hpp"
#include "joule/plan/sim_stage_profile.hpp"
#include "joule/probe/card.hpp"

namespace {

using namespace joule;
using namespace joule::plan;

constexpr double kBlockingW = 60;
constexpr double kIdleShare = 0.25;

struct Outcome {
  int64_t iterations = 0;
  double profiling_s = 0;
  FrequencyPlan fastest;
  std::shared_ptr<const LivePlan> plan;
  std::string summary;
  bool fallback = false;
  size_t profiled_clocks = 0;
  double unit_time_s = 0;
};

LiveResult run_round(const Profile& truth, const LiveSchedule& schedule, int pp_rank, double noise,
                     std::mt19937_64& rng) {
  std::uniform_real_distribution<double> jitter(-noise, noise);
  LiveResult result;
  result.rank = schedule.rank;
  for (int iteration = 0; iteration < schedule.iterations; ++iteration) {
    double busy_s = 0;
    double busy_j = 0;
    std::map<std::string, std::vector<double>> times;
    std::map<std::string, std::vector<double>> energies;
    for (const auto& [name, mhz] : schedule.frequencies) {
      const Instruction instruction = *parse_instruction(name);
      ProfileOption option = *option_at(truth, Computation{pp_rank, instruction, 0}, mhz);
      const double time_s = option.time_s * (1 + jitter(rng));
      const double energy_j = option.energy_j * (1 + jitter(rng));
      times[name].push_back(time_s);
      energies[name].push_back(energy_j);
      busy_s += time_s;
      busy_j += energy_j;
    }
    for (auto& [name, values] : times) {
      result.time_breakdown_s[name].push_back(values);
      result.energy_breakdown_j[name].push_back(energies[name]);
    }
    result.iter_time_s.push_back(busy_s * (1 + kIdleShare));
    result.iter_energy_j.push_back(busy_j + busy_s * kIdleShare * kBlockingW);
  }
  return result;
}

Outcome run_live(const Profile& truth, int microbatches, const probe::Card* card,
                 const std::string& card_name, const LiveOptions& options, double noise) {
  const int stages = truth.stage_count();
  LiveJobInfo info;
  info.job_id = "bench";
  info.pp_degree = stages;
  info.world_size = stages;
  info.num_microbatches = microbatches;
  auto scheduler = LiveScheduler::create(info, options).value();
  if (card != nullptr) {
    if (auto used = scheduler.use_card(*card, card_name); !used) {
      std::fprintf(stderr, "%s\n", used.error().message().c_str());
      std::exit(1);
    }
  }
  Outcome outcome;
  const LivePlanProvider provider = [&](const LivePlanRequest& request) {
    auto planned = plan_live(request);
    if (planned) {
      outcome.unit_time_s = request.unit_time_s;
      outcome.plan = *planned;
    }
    return planned;
  };
  for (int rank = 0; rank < stages; ++rank) {
    if (auto registered = scheduler.register_rank({rank, 0, rank, 0, truth.frequencies_mhz()}, provider);
        !registered) {
      std::fprintf(stderr, "%s\n", registered.error().message().c_str());
      std::exit(1);
    }
  }
  std::mt19937_64 rng(12345);
  for (int guard = 0; guard < 1000 && scheduler.phase() != LivePhase::kPlanned; ++guard) {
    double round_s = 0;
    for (int rank = 0; rank < stages; ++rank) {
      const LiveSchedule schedule = scheduler.schedule(rank).value();
      LiveResult result = run_round(truth, schedule, rank, noise, rng);
      round_s = std::max(round_s, result.iter_time_s.front());
      scheduler.report(result, provider).value();
    }
    outcome.profiling_s += round_s;
  }
  if (scheduler.phase() != LivePhase::kPlanned) {
    std::fprintf(stderr, "not planned: %s\n", scheduler.failure().c_str());
    std::exit(1);
  }
  outcome.iterations = scheduler.profiling_iterations();
  outcome.fastest = scheduler.data().fastest_plan;
  outcome.summary = scheduler.state().card_summary();
  outcome.fallback = scheduler.state().card_fallback();
  outcome.profiled_clocks = scheduler.profiled_frequencies();
  return outcome;
}

struct Figures {
  double fastest_time_s = 0;
  double fastest_energy_j = 0;
  double straggler_energy_j = 0;
  double straggler_time_s = 0;
};

// The plans an outcome chose, evaluated on the true profile.
Figures evaluate_on_truth(const Outcome& outcome, const Profile& truth, const PipelineDag& dag,
                          double target_s) {
  Figures figures;
  const double p_blocking_w = outcome.plan->p_blocking_w;
  const PlanCost fastest = evaluate(dag, truth, outcome.fastest, p_blocking_w).value();
  figures.fastest_time_s = fastest.time_s;
  figures.fastest_energy_j = fastest.energy_j;
  const size_t index = select_for_target(outcome.plan->frontier, target_s, p_blocking_w, dag.stages).value();
  const PlanCost slowed =
      evaluate(dag, truth, outcome.plan->frontier.points()[index].knob, p_blocking_w).value();
  figures.straggler_time_s = slowed.time_s;
  figures.straggler_energy_j =
      slowed.energy_j + p_blocking_w * dag.stages * std::max(0.0, target_s - slowed.time_s);
  return figures;
}

struct Case {
  std::string gpu;
  std::string label;
  Profile truth;
  int microbatches;
};

// A computation as a sequence of 2 to 4 kernels, each compute-bound or memory-bound with shares of its own
// around (not at) the probe kernels' (compute {0.95, 0.9, 0.1}, memory {0.15, 0.55, 0.5}).
std::vector<SimKernelPart> kernels_for(std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0, 1);
  const auto between = [&](double low, double high) { return low + (high - low) * unit(rng); };
  std::vector<SimKernelPart> parts;
  const int count = 2 + static_cast<int>(unit(rng) * 3);
  for (int k = 0; k < count; ++k) {
    SimKernelPart part;
    if (k % 2 == 0) {  // compute-bound: GEMMs, convolutions
      part.shape = {between(0.8, 1.0), between(0.75, 1.0), between(0.05, 0.2)};
    } else {  // memory-bound: normalisations, activations, optimizer-like element-wise work
      part.shape = {between(0.05, 0.35), between(0.4, 0.7), between(0.35, 0.6)};
    }
    part.time_share = between(0.2, 1.0);
    parts.push_back(part);
  }
  return parts;
}

// A pipeline of `count` stages, the last one 15% heavier (a loss/LM-head stage), backward twice the forward.
// Kernel family: each computation a sequence of kernels (kernels_for()). Trace family: each computation one
// of the Zeus traces' workloads.
std::vector<SimStage> stages_for(int count, int seed, bool kernel_family) {
  static const std::vector<std::string> workload_keys = {"imagenet", "squad",        "librispeech",
                                                         "cifar100", "sentiment140", "movielens-1m"};
  std::mt19937_64 rng(static_cast<uint64_t>(seed) * 7919 + 17);
  std::vector<SimStage> stages;
  for (int s = 0; s < count; ++s) {
    const double forward_s = 0.012 * (1 + 0.08 * ((s + seed) % 3)) * (s == count - 1 ? 1.15 : 1.0);
    SimStage stage;
    stage.forward.workload = workload_keys[static_cast<size_t>(s + seed) % workload_keys.size()];
    stage.forward.time_at_max_clock_s = forward_s;
    stage.backward.workload = workload_keys[static_cast<size_t>(s + seed + 2) % workload_keys.size()];
    stage.backward.time_at_max_clock_s = 2 * forward_s;
    if (kernel_family) {
      stage.forward.kernels = kernels_for(rng);
      stage.backward.kernels = kernels_for(rng);
    }
    stages.push_back(stage);
  }
  return stages;
}

struct Options {
  double noise = 0;
  double threshold = LiveOptions{}.card_max_residual;
  double unit_time_s = 0;
  int probe_clocks = LiveOptions{}.card_probe_clocks;
  double lowest_ratio = LiveOptions{}.card_lowest_probe_ratio;
};

struct Tally {
  std::vector<double> iteration_ratios;
  std::vector<double> second_ratios;
  std::vector<double> energy_deltas;   // at the straggler's pace T'
  std::vector<double> fastest_deltas;  // the fastest plan
  std::vector<double> planner_deltas;  // the planner's own sensitivity at the fastest plan
  int fallbacks = 0;

  void print() {
    if (iteration_ratios.empty()) {
      return;
    }
    for (auto* values :
         {&iteration_ratios, &second_ratios, &energy_deltas, &fastest_deltas, &planner_deltas}) {
      std::sort(values->begin(), values->end());
    }
    const size_t n = iteration_ratios.size();
    std::fprintf(
        stdout,
        "%zu pipelines (%d fell back): profiling iterations %.1fx to %.1fx shorter (median %.1fx), "
        "seconds %.1fx to %.1fx (median %.1fx); energy against the full profile's plan at T' %+.2f%% to "
        "%+.2f%% (median %+.2f%%, %d over 1%%), at the fastest plan %+.2f%% to %+.2f%% (median %+.2f%%; "
        "the planner alone moves it %+.2f%% to %+.2f%%)\n",
        n, fallbacks, iteration_ratios.front(), iteration_ratios.back(), iteration_ratios[n / 2],
        second_ratios.front(), second_ratios.back(), second_ratios[n / 2], energy_deltas.front(),
        energy_deltas.back(), energy_deltas[n / 2],
        static_cast<int>(std::count_if(energy_deltas.begin(), energy_deltas.end(),
                                       [](double delta) { return delta > 1.0; })),
        fastest_deltas.front(), fastest_deltas.back(), fastest_deltas[n / 2], planner_deltas.front(),
        planner_deltas.back());
  }
};

void run_case(const std::string& gpu, const Profile& truth, int microbatches, const probe::Card& card,
              const std::string& card_name, const Options& options, Tally* tally) {
  const auto dag = build_pipeline(truth.stage_count(), microbatches, Schedule::k1F1B).value();
  const double max_clock_s =
      evaluate(dag, truth, uniform_plan(dag, truth.frequencies_mhz().front()), 0)->time_s;
  const double target_s = 1.15 * max_clock_s;
  LiveOptions live_options;
  live_options.card_max_residual = options.threshold;
  live_options.unit_time_s = options.unit_time_s;
  live_options.card_probe_clocks = options.probe_clocks;
  live_options.card_lowest_probe_ratio = options.lowest_ratio;
  const Outcome full = run_live(truth, microbatches, nullptr, "", live_options, options.noise);
  const Outcome carded = run_live(truth, microbatches, &card, card_name, live_options, options.noise);
  const Figures f = evaluate_on_truth(full, truth, dag, target_s);
  const Figures c = evaluate_on_truth(carded, truth, dag, target_s);
  // The planner's own sensitivity: the full sweep's profile planned again with a 1% larger time unit.
  LivePlanRequest again;
  again.profile_csv = profile_csv(full.plan->profile);
  again.stages = truth.stage_count();
  again.microbatches = microbatches;
  again.p_blocking_w = full.plan->p_blocking_w;
  again.unit_time_s = full.unit_time_s * 1.01;
  again.max_planning_units = LiveLimits{}.max_planning_units;
  Outcome replanned = full;
  replanned.plan = plan_live(again).value();
  replanned.fastest = replanned.plan->frontier.points().front().knob;
  const Figures r = evaluate_on_truth(replanned, truth, dag, target_s);
  const double noise_fast = 100 * (r.fastest_energy_j / f.fastest_energy_j - 1);
  const double noise_strag = 100 * (r.straggler_energy_j / f.straggler_energy_j - 1);
  // The card's fit residuals (as the scheduler computes them, here from the true profile at the same clocks).
  const auto prior = probe::KnobPrior::from_card(card, probe::CardKnob::kSmClock, card_name).value();
  CardProfileOptions card_options;
  card_options.probe_clocks =
      card_probe_count(options.probe_clocks, microbatches, LiveOptions{}.profile_samples);
  card_options.lowest_probe_ratio = options.lowest_ratio;
  const auto indices = card_probe_indices(truth.frequencies_mhz(), card_options);
  const CardProfile fitted = predict_card_profile(prior, measure_profile_at(truth, indices),
                                                  truth.frequencies_mhz(), card_options, card_name)
                                 .value();
  double time_residual = 0;
  double energy_residual = 0;
  for (const CardFit& fit : fitted.fits) {
    time_residual = std::max(time_residual, fit.check_time_error);
    energy_residual = std::max(energy_residual, fit.check_energy_error);
  }
  const double iteration_ratio =
      static_cast<double>(full.iterations) / static_cast<double>(carded.iterations);
  const double second_ratio = full.profiling_s / carded.profiling_s;
  const double de_fast = 100 * (c.fastest_energy_j / f.fastest_energy_j - 1);
  const double de_strag = 100 * (c.straggler_energy_j / f.straggler_energy_j - 1);
  if (tally != nullptr) {
    tally->iteration_ratios.push_back(iteration_ratio);
    tally->second_ratios.push_back(second_ratio);
    tally->energy_deltas.push_back(de_strag);
    tally->fastest_deltas.push_back(de_fast);
    tally->planner_deltas.push_back(noise_fast);
    tally->fallbacks += carded.fallback ? 1 : 0;
  }
  std::fprintf(
      stdout,
      "%-8s %2dx%-4d %4zu | %4lld %4lld %5.1fx | %6.2f %6.2f %5.1fx | %+6.2f%% %+6.2f%% %+6.2f%% | %+6.2f%% "
      "%+6.2f%% %+6.2f%% | %4.1f%% %4.1f%% | %s\n",
      gpu.c_str(), truth.stage_count(), microbatches, truth.frequencies_mhz().size(),
      static_cast<long long>(full.iterations), static_cast<long long>(carded.iterations), iteration_ratio,
      full.profiling_s, carded.profiling_s, second_ratio, de_fast,
      100 * (c.fastest_time_s / f.fastest_time_s - 1), noise_fast, de_strag,
      100 * (c.straggler_time_s / f.straggler_time_s - 1), noise_strag, 100 * time_residual,
      100 * energy_residual, carded.fallback ? "fallback" : "card");
  if (std::getenv("CARD_BENCH_DEBUG") != nullptr) {
    std::fprintf(
        stdout, "         full: %zu clocks, E %.3f J, unit %.6g s; card: %zu clocks, E %.3f J, unit %.6g s\n",
        full.plan->profile.frequencies_mhz().size(), f.fastest_energy_j, full.unit_time_s,
        carded.plan->profile.frequencies_mhz().size(), c.fastest_energy_j, carded.unit_time_s);
    std::fprintf(stdout, "         %s\n", carded.summary.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr,
                   "usage: card_profile_bench [--noise FRACTION] [--threshold FRACTION] [--unit-time-s S]\n");
      return 2;
    }
    const double value = std::stod(argv[i + 1]);
    if (flag == "--noise") {
      options.noise = value;
    } else if (flag == "--threshold") {
      options.threshold = value;
    } else if (flag == "--probe-clocks") {
      options.probe_clocks = static_cast<int>(value);
    } else if (flag == "--lowest-ratio") {
      options.lowest_ratio = value;
    } else if (flag == "--unit-time-s") {
      options.unit_time_s = value;
    } else {
      std::fprintf(stderr,
                   "usage: card_profile_bench [--noise FRACTION] [--threshold FRACTION] [--unit-time-s S]\n");
      return 2;
    }
  }
  const std::string cards = std::string(JOULE_SOURCE_DIR) + "/data/cards/";
  std::fprintf(
      stdout,
      "noise ±%.1f%% per measured computation, residual threshold %.1f%%, at least %d probe clocks down "
      "to %.2f of the highest, planner unit %s\n",
      100 * options.noise, 100 * options.threshold, options.probe_clocks, options.lowest_ratio,
      options.unit_time_s > 0 ? fmt::format("{} s", options.unit_time_s).c_str() : "automatic");
  const std::vector<std::pair<int, int>> shapes = {{2, 4}, {4, 8}, {4, 16}, {8, 16}, {8, 32}};
  for (const bool kernel_family : {true, false}) {
    std::fprintf(
        stdout, "\n%s\n",
        kernel_family
            ? "Stage computations made of compute- and memory-bound kernels, each with shares of its own:"
            : "Stage computations that are Zeus trace workloads:");
    std::fprintf(stdout,
                 "%-8s %-7s %4s | %4s %4s %6s | %6s %6s %6s | %7s %7s %7s | %7s %7s %7s | %5s %5s | %s\n",
                 "gpu", "S x M", "clks", "it F", "it C", "ratio", "s F", "s C", "ratio", "dE fast", "dT fast",
                 "planner", "dE T'", "dT T'", "planner", "chk t", "chk e", "path");
    Tally tally;
    for (const auto& model : device::sim::gpu_models()) {
      const auto card =
          probe::read_card(cards + "sim-" + model.key + ".json", {model.name, "sim", "sim", ""});
      if (!card) {
        std::fprintf(stdout, "%s: no card (%s)\n", model.key.c_str(), card.error().message().c_str());
        continue;
      }
      int seed = 0;
      for (const auto& [stages, microbatches] : shapes) {
        const auto truth = simulated_stage_profile(model, stages_for(stages, seed++, kernel_family));
        if (!truth) {
          std::fprintf(stdout, "%s %dx%d: %s\n", model.key.c_str(), stages, microbatches,
                       truth.error().message().c_str());
          continue;
        }
        run_case(model.key, *truth, microbatches, *card, "sim-" + model.key + ".json", options, &tally);
      }
    }
    tally.print();
  }
  // A GPU without a card of its own: the A100-like example against the generic card (not counted above).
  // Read as if the GPUs were the generic model: a real job's GPU identity would refuse it.
  const auto example =
      Profile::read(std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv");
  const auto generic =
      probe::read_card(cards + "sim-generic.json", {"Generic 400 W GPU (simulated)", "sim", "sim", ""});
  if (example && generic) {
    std::fprintf(
        stdout, "\nThe A100-like example (no card of its own) with the generic card, a GPU it is not for:\n");
    run_case("example", *example, 8, *generic, "sim-generic.json", options, nullptr);
  }
  return 0;
}
