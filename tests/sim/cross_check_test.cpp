// SPDX-License-Identifier: Apache-2.0
// The simulator against an independent Python re-implementation of the original Zeus simulator
// (tests/sim/reference_sim.py: real pandas/numpy arithmetic and randomness, reproducing the original's V100
// output exactly), over every GPU, several seeds, η and β. The fixture data/cross_check.csv has one row per
// simulation run: the whole sequence of decisions (batch size : power limit : reached) and the energy, time
// and cost summed over all tries. Regenerate it with tests/sim/make_cross_check.py.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "joule/core/csv.hpp"
#include "joule/sim/simulator.hpp"

namespace joule::sim {
namespace {

struct CrossCheckRun {
  std::string gpu;
  std::string workload;
  uint64_t seed = 0;
  double eta = 0;
  double beta = 0;
  int tries = 0;          ///< -1: the original fails
  std::string decisions;  ///< "bs:pl:r;…", or "error:<kind>"
  double energy_j = 0;
  double time_s = 0;
  double cost = 0;
};

std::vector<CrossCheckRun> load_fixture() {
  const auto path = std::filesystem::path(__FILE__).parent_path() / "data/cross_check.csv";
  const auto table = csv::read_file(path.string());
  EXPECT_TRUE(table) << table.error().message();
  std::vector<CrossCheckRun> runs;
  if (!table) {
    return runs;
  }
  const auto column = [&](const char* name) { return *table->column(name); };
  const auto number = [](std::string_view text) { return std::strtod(std::string(text).c_str(), nullptr); };
  for (size_t r = 0; r < table->row_count(); ++r) {
    const auto row = table->row(r);
    CrossCheckRun run;
    run.gpu = std::string(row.text(column("gpu")));
    run.workload = std::string(row.text(column("workload")));
    run.seed = static_cast<uint64_t>(*row.integer(column("seed")));
    run.eta = number(row.text(column("eta")));
    run.beta = number(row.text(column("beta")));  // "inf" for no early stopping
    run.tries = static_cast<int>(*row.integer(column("tries")));
    run.decisions = std::string(row.text(column("decisions")));
    if (run.tries >= 0) {
      run.energy_j = number(row.text(column("energy_j")));
      run.time_s = number(row.text(column("time_s")));
      run.cost = number(row.text(column("cost")));
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

std::string decisions_of(const std::vector<Try>& tries) {
  std::string text;
  for (const Try& t : tries) {
    if (!text.empty()) {
      text += ';';
    }
    const double pl = t.power_limit_w;
    text += pl == std::floor(pl)
                ? fmt::format("{}:{}:{}", t.batch_size, static_cast<long long>(pl), t.reached ? 1 : 0)
                : fmt::format("{}:{}:{}", t.batch_size, pl, t.reached ? 1 : 0);
  }
  return text;
}

double relative_error(double a, double b) {
  return a == b ? 0.0 : std::abs(a - b) / std::max(std::abs(a), std::abs(b));
}

/// How each failure of the Python oracle (reference_sim.SimError kinds) shows in the C++ simulator: the
/// error codes it may fail with.
std::vector<ErrorCode> expected_codes(const std::string& kind) {
  static const std::map<std::string, std::vector<ErrorCode>> codes = {
      // "the default batch size … did not reach the target … in the first recurrence"; kInvalidArgument when
      // the C++ rejects the job up front because no training run reaches the target within max_epochs.
      {"default_not_converged", {ErrorCode::kState, ErrorCode::kInvalidArgument}},
      {"not_reached_in_20_tries",
       {ErrorCode::kState}},  // "recurrence N did not reach the target in 20 tries"
      {"no_surviving_batch_size",
       {ErrorCode::kState}},  // "pruning left no batch size that reaches the target"
      {"default_not_in_batch_sizes", {ErrorCode::kInvalidArgument}},  // "batch size … is not in the trace …"
      {"no_job_rows", {ErrorCode::kInvalidArgument}},                 // "the … trace has no runs of …"
  };
  const auto it = codes.find(kind);
  EXPECT_NE(it, codes.end()) << "unknown error kind " << kind;
  return it == codes.end() ? std::vector<ErrorCode>{} : it->second;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(separator, start), text.size());
    items.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

/// Simulates one fixture run and compares it; updates `worst` with the largest relative error of the sums.
void check_run(const CrossCheckRun& run, const Trace& trace, double& worst) {
  SimulationOptions options;
  options.eta = run.eta;
  options.beta = run.beta;
  options.seed = run.seed;
  const auto job = paper_job(trace, run.workload);
  ASSERT_TRUE(job) << job.error().message();
  const auto result = zeus_simulator(trace, options).simulate(*job);
  if (run.tries < 0) {
    ASSERT_FALSE(result) << "the original fails with " << run.decisions;
    const std::string kind = run.decisions.substr(run.decisions.find(':') + 1);
    const std::vector<ErrorCode> codes = expected_codes(kind);
    EXPECT_NE(std::find(codes.begin(), codes.end(), result.error().code()), codes.end())
        << kind << " but the C++ fails with " << to_string(result.error().code()) << ": "
        << result.error().message();
    return;
  }
  ASSERT_TRUE(result) << result.error().message();
  const std::vector<std::string> got = split(decisions_of(result->tries), ';');
  const std::vector<std::string> want = split(run.decisions, ';');
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const Try& t = result->tries[i];
    ASSERT_EQ(got[i], want[i]) << "first different decision: try " << i + 1 << " of " << want.size()
                               << " (recurrence " << t.recurrence << ", attempt " << t.attempt << ")";
  }
  ASSERT_EQ(got.size(), want.size()) << "number of tries";
  ASSERT_EQ(static_cast<int>(result->tries.size()), run.tries);
  double energy = 0;
  double time = 0;
  double cost = 0;
  for (const Try& t : result->tries) {
    energy += t.energy_j;
    time += t.time_s;
    cost += t.cost;
  }
  // Exact: both sides parse the traces as pandas does and add the tries in the same order.
  EXPECT_EQ(energy, run.energy_j);
  EXPECT_EQ(time, run.time_s);
  EXPECT_EQ(cost, run.cost);
  worst = std::max({worst, relative_error(energy, run.energy_j), relative_error(time, run.time_s),
                    relative_error(cost, run.cost)});
}

TEST(SimulatorCrossCheck, MatchesThePythonReimplementationOnEveryGpuSeedEtaAndBeta) {
  const auto runs = load_fixture();
  // The default grid (120 runs) and the edge cases of make_cross_check.py --edge (β 1.01 and 1.1, where a
  // one-ULP parsing difference flips a decision, and runs that fail).
  ASSERT_EQ(runs.size(), 168u);
  std::map<std::string, Trace> traces;
  double worst = 0;
  for (const CrossCheckRun& run : runs) {
    SCOPED_TRACE(
        fmt::format("{} {} seed {} eta {} beta {}", run.gpu, run.workload, run.seed, run.eta, run.beta));
    if (traces.count(run.gpu) == 0) {
      auto trace = gpu_trace(run.gpu);
      ASSERT_TRUE(trace) << trace.error().message();
      traces.emplace(run.gpu, std::move(*trace));
    }
    check_run(run, traces.at(run.gpu), worst);
  }
  RecordProperty("worst_relative_error", fmt::format("{:.3g}", worst));
}

}  // namespace
}  // namespace joule::sim
