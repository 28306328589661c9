// SPDX-License-Identifier: Apache-2.0
// The planner's frontiers against references written by the planner before its speed-up (tests/plan/data,
// README.md there): every reference point must be matched or dominated, so that a faster planner is never a
// worse one. JOULE_PLAN_WRITE_FRONTIER_REFERENCE=1 rewrites the files from the planner under test.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "joule/core/csv.hpp"
#include "joule/plan/planner.hpp"

namespace joule::plan {
namespace {

constexpr const char* kPerseusDir = JOULE_PERSEUS_DATA_DIR;
constexpr const char* kReferenceDir = JOULE_PLAN_TEST_DATA_DIR;

// Relative tolerance of "equal" and "no worse": the references are printed with 17 digits.
constexpr double kRelativeTolerance = 1e-9;

// As bench/plan_bench.cpp's profile_for(): stage s behaves like example stage s mod 3, the heavy stage 3
// last.
Profile bench_profile(int stages) {
  const auto example = *Profile::read(std::string(kPerseusDir) + "/example_s4_m8_profile.csv");
  std::vector<std::array<std::vector<ProfileOption>, 2>> options;
  for (int stage = 0; stage < stages; ++stage) {
    const int source = stage == stages - 1 ? 3 : stage % 3;
    options.push_back(
        {example.options(source, Instruction::kForward), example.options(source, Instruction::kBackward)});
  }
  return *Profile::from_options(std::move(options));
}

// FNV-1a over the plan's clocks: a plan's fingerprint, so that equal plans can be counted without storing
// them.
uint64_t fingerprint(const FrequencyPlan& plan) {
  uint64_t hash = 14695981039346656037ULL;
  for (const uint32_t mhz : plan) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash ^= (mhz >> shift) & 0xffU;
      hash *= 1099511628211ULL;
    }
  }
  return hash;
}

struct ReferencePoint {
  double time_s = 0;
  double energy_j = 0;
  std::string plan_fnv1a;
};

struct Case {
  std::string name;  // the file: frontier_reference_<name>.csv
  int stages = 0;
  int microbatches = 0;
  bool example_profile = false;  // the example's own profile, else bench_profile(stages)
};

// For test names and failure messages.
// NOLINTNEXTLINE(readability-identifier-naming): the name GoogleTest looks for
void PrintTo(const Case& c, std::ostream* out) {
  *out << c.name;
}

// JOULE_PLAN_REFERENCE_DIR redirects reading and writing, e.g. for the large case kept out of the tree.
std::string reference_path(const Case& c) {
  const char* dir = std::getenv("JOULE_PLAN_REFERENCE_DIR");
  return std::string(dir != nullptr ? dir : kReferenceDir) + "/frontier_reference_" + c.name + ".csv";
}

Result<PlannerResult> plan(const Case& c) {
  const Profile profile = c.example_profile
                              ? *Profile::read(std::string(kPerseusDir) + "/example_s4_m8_profile.csv")
                              : bench_profile(c.stages);
  const PipelineDag dag = *build_pipeline(c.stages, c.microbatches, Schedule::k1F1B);
  PlannerOptions options;
  options.p_blocking_w = 75;
  return plan_frontier(dag, profile, options);
}

void write_reference(const Case& c, const Frontier<FrequencyPlan>& frontier) {
  std::ofstream out(reference_path(c));
  out << "time_s,energy_j,plan_fnv1a\n";
  for (const auto& point : frontier.points()) {
    out << fmt::format("{:.17g},{:.17g},{:016x}\n", point.time_s, point.energy_j, fingerprint(point.knob));
  }
}

std::vector<ReferencePoint> read_reference(const Case& c) {
  const auto table = csv::read_file(reference_path(c));
  EXPECT_TRUE(table) << table.error().message();
  std::vector<ReferencePoint> points;
  if (!table) {
    return points;
  }
  const size_t time = *table->column("time_s");
  const size_t energy = *table->column("energy_j");
  const size_t hash = *table->column("plan_fnv1a");
  for (size_t r = 0; r < table->row_count(); ++r) {
    points.push_back(
        {*table->row(r).number(time), *table->row(r).number(energy), std::string(table->row(r).text(hash))});
  }
  return points;
}

bool no_worse(double ours, double reference) {
  return ours <= reference + kRelativeTolerance * std::abs(reference);
}
bool equal(double ours, double reference) {
  return std::abs(ours - reference) <= kRelativeTolerance * std::abs(reference);
}

class PlannerReference : public testing::TestWithParam<Case> {};

TEST_P(PlannerReference, EveryReferencePointIsMatchedOrDominated) {
  const Case& c = GetParam();
  const auto result = plan(c);
  ASSERT_TRUE(result) << result.error().message();
  const auto& points = result->frontier.points();
  if (std::getenv("JOULE_PLAN_WRITE_FRONTIER_REFERENCE") != nullptr) {
    write_reference(c, result->frontier);
  }
  const auto reference = read_reference(c);
  ASSERT_FALSE(reference.empty());
  size_t equal_points = 0;
  size_t equal_plans = 0;
  size_t dominated = 0;
  for (const ReferencePoint& r : reference) {
    bool matched = false;
    bool covered = false;
    for (const auto& p : points) {
      if (equal(p.time_s, r.time_s) && equal(p.energy_j, r.energy_j)) {
        matched = true;
        equal_plans += fmt::format("{:016x}", fingerprint(p.knob)) == r.plan_fnv1a ? 1 : 0;
        break;
      }
      covered = covered || (no_worse(p.time_s, r.time_s) && no_worse(p.energy_j, r.energy_j));
    }
    equal_points += matched ? 1 : 0;
    dominated += !matched && covered ? 1 : 0;
    EXPECT_TRUE(matched || covered) << "reference point " << r.time_s << " s, " << r.energy_j
                                    << " J is neither matched nor dominated";
  }
  RecordProperty("reference_points", static_cast<int>(reference.size()));
  RecordProperty("points", static_cast<int>(points.size()));
  RecordProperty("equal_points", static_cast<int>(equal_points));
  RecordProperty("equal_plans", static_cast<int>(equal_plans));
  RecordProperty("dominated_points", static_cast<int>(dominated));
  std::cout << fmt::format(
      "{}: {} reference points, {} equal ({} with the same plan), {} dominated; {} points now\n", c.name,
      reference.size(), equal_points, equal_plans, dominated, points.size());
}

INSTANTIATE_TEST_SUITE_P(Pipelines, PlannerReference,
                         testing::Values(Case{"example_s4_m8", 4, 8, true}, Case{"s4_m32", 4, 32, false},
                                         Case{"s8_m32", 8, 32, false}),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

// 8 × 128 takes seconds: run by hand (--gtest_also_run_disabled_tests) with JOULE_PLAN_REFERENCE_DIR.
INSTANTIATE_TEST_SUITE_P(DISABLED_Large, PlannerReference, testing::Values(Case{"s8_m128", 8, 128, false}),
                         [](const testing::TestParamInfo<Case>& param_info) {
                           return param_info.param.name;
                         });

}  // namespace
}  // namespace joule::plan
