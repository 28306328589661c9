// SPDX-License-Identifier: Apache-2.0
// power_limit_card_bench: the power-limit optimizer with and without the simulated GPU's frontier card
// (docs/optimize.md, "Starting from a frontier card"), on every simulated GPU model and every Zeus trace
// workload, under three policies. For each run: the steps spent before the optimizer was done (the wait
// step, then warm-up and profile windows), the limits measured, the card path, and the energy and time per
// step at each choice. Targets (issue 27): profiling ≥ 5x shorter with the card, ≤ 1% more energy per step at
// its choice. Run: build/bench/power_limit_card_bench [--verbose] (a few seconds; virtual clock).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "joule/device/sim_gpu.hpp"
#include "joule/optimize/power_limit.hpp"
#include "joule/sim/training_run.hpp"

using namespace joule;

namespace {

struct Row {
  std::string gpu, workload, policy;
  sim::JitTrainingRun plain, carded;
};

double per_step(double total, int64_t steps) {
  return total / static_cast<double>(steps);
}

}  // namespace

int main(int argc, char** argv) {
  const bool verbose = argc > 1 && std::strcmp(argv[1], "--verbose") == 0;
  constexpr int64_t kSteps = 1000;
  std::vector<Row> rows;
  for (const auto& model : device::sim::gpu_models()) {
    const std::string card = fmt::format("{}/data/cards/sim-{}.json", JOULE_SOURCE_DIR, model.key);
    for (const auto& workload : device::sim::workloads()) {
      const device::sim::Spec spec{1, &model, &workload, std::nullopt};
      const std::vector<std::pair<std::string, Policy>> policies = {{"ZeusCost(0.5)", ZeusCost{0.5, 0}},
                                                                    {"ZeusCost(0.8)", ZeusCost{0.8, 0}},
                                                                    {"MaxSlowdown(1.1)", MaxSlowdown{1.1}}};
      for (const auto& [name, policy] : policies) {
        Row row{model.key, workload.key, name, {}, {}};
        auto plain = sim::run_jit_training(spec, kSteps, {.card_path = "", .policy = policy});
        auto carded = sim::run_jit_training(spec, kSteps, {.card_path = card, .policy = policy});
        if (!plain || !carded) {
          fmt::print(stderr, "{} {}: {}\n", model.key, workload.key,
                     (!plain ? plain.error() : carded.error()).message());
          return 1;
        }
        row.plain = std::move(*plain);
        row.carded = std::move(*carded);
        rows.push_back(std::move(row));
      }
    }
  }
  fmt::print("{:8} {:13} {:16} {:>5} {:>5} {:>6} {:>5} {:>5} {:>6} {:>9} {:>8} {:>8}  {}\n", "gpu",
             "workload", "policy", "steps", "+card", "ratio", "lim", "+card", "chosen", "+card", "dE %",
             "dT %", "card path");
  int misses_energy = 0;
  int five_fold = 0;
  std::vector<double> ratios;
  for (const auto& row : rows) {
    const auto& p = row.plain;
    const auto& c = row.carded;
    const double ratio =
        static_cast<double>(p.profiled_until_step) / static_cast<double>(c.profiled_until_step);
    const double energy =
        per_step(c.at_chosen.energy_j, c.steps) / per_step(p.at_chosen.energy_j, p.steps) - 1;
    const double time = per_step(c.at_chosen.time_s, c.steps) / per_step(p.at_chosen.time_s, p.steps) - 1;
    ratios.push_back(ratio);
    misses_energy += energy > 0.01 ? 1 : 0;
    five_fold += ratio >= 5 ? 1 : 0;
    fmt::print("{:8} {:13} {:16} {:>5} {:>5} {:>5.1f}x {:>5} {:>5} {:>6g} {:>9g} {:>+8.2f} {:>+8.2f}  {}\n",
               row.gpu, row.workload, row.policy, p.profiled_until_step, c.profiled_until_step, ratio,
               p.measurements.size(), c.measurements.size(), p.chosen_mw / 1e3, c.chosen_mw / 1e3,
               energy * 100, time * 100, optimize::to_string(c.card_path_taken));
    if (verbose) {
      const auto& first = c.measurements.front();
      fmt::print("    {:.4f} s a step at {:g} W; {}\n", first.time_per_step_s(), first.power_limit_mw / 1e3,
                 c.card_reason);
    }
  }
  std::sort(ratios.begin(), ratios.end());
  fmt::print(
      "\n{} runs: profiling shorter by {:.1f}x (median), {:.1f}x to {:.1f}x, at least 5x in {}; {} run(s) "
      "over "
      "+1% energy per step\n",
      rows.size(), ratios[ratios.size() / 2], ratios.front(), ratios.back(), five_fold, misses_energy);
  for (const auto& model : device::sim::gpu_models()) {
    std::vector<double> mine;
    int fallbacks = 0;
    for (const auto& row : rows) {
      if (row.gpu == model.key) {
        mine.push_back(static_cast<double>(row.plain.profiled_until_step) /
                       static_cast<double>(row.carded.profiled_until_step));
        fallbacks += row.carded.card_path_taken == optimize::CardPath::kFallback ? 1 : 0;
      }
    }
    std::sort(mine.begin(), mine.end());
    fmt::print("  {:8} {:.1f}x to {:.1f}x (median {:.1f}x); fallback in {} of {}\n", model.key, mine.front(),
               mine.back(), mine[mine.size() / 2], fallbacks, mine.size());
  }
  return 0;
}
