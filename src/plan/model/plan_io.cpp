// SPDX-License-Identifier: Apache-2.0
// Frequency plans as JSON (format in joule/plan/plan_io.hpp).
#include "joule/plan/plan_io.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace joule::plan {

namespace {

using nlohmann::json;

// Reading throws this internally; plan_from_json() turns it into a Result.
[[noreturn]] void bad(const std::string& path, std::string_view what) {
  throw Exception(ErrorCode::kParse, fmt::format("{}: {}", path.empty() ? "plan JSON" : path, what));
}

std::string_view type_name(const json& value) {
  if (value.is_number_integer()) {
    return "an integer";
  }
  if (value.is_number()) {
    return "a number";
  }
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "another value";
  }
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

const json& require(const json& object, const std::string& path, std::string_view key) {
  const auto it = object.find(key);
  if (it == object.end()) {
    bad(path, fmt::format("missing key \"{}\"", key));
  }
  return *it;
}

void expect_object(const json& value, const std::string& path) {
  if (!value.is_object()) {
    bad(path, fmt::format("expected an object, got {}", type_name(value)));
  }
}

const json& require_array(const json& object, const std::string& path, std::string_view key) {
  const json& value = require(object, path, key);
  if (!value.is_array()) {
    bad(join(path, key), fmt::format("expected an array, got {}", type_name(value)));
  }
  return value;
}

std::string require_string(const json& object, const std::string& path, std::string_view key) {
  const json& value = require(object, path, key);
  if (!value.is_string()) {
    bad(join(path, key), fmt::format("expected a string, got {}", type_name(value)));
  }
  return value.get<std::string>();
}

int64_t require_integer(const json& object, const std::string& path, std::string_view key) {
  const json& value = require(object, path, key);
  if (value.is_number_unsigned()) {
    const auto number = value.get<uint64_t>();
    if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      bad(join(path, key), fmt::format("integer out of range: {}", number));
    }
    return static_cast<int64_t>(number);
  }
  if (!value.is_number_integer()) {
    bad(join(path, key), fmt::format("expected an integer, got {}", type_name(value)));
  }
  return value.get<int64_t>();
}

std::string describe(Instruction instruction, int microbatch) {
  return fmt::format("{} of microbatch {}", to_string(instruction), microbatch);
}

FrequencyPlan read_plan(const PipelineDag& dag, const json& root) {
  expect_object(root, "");
  const std::string schedule_text = require_string(root, "", "schedule");
  const auto schedule = parse_schedule(schedule_text);
  if (!schedule) {
    bad("schedule", schedule.error().message());
  }
  if (*schedule != dag.schedule) {
    bad("schedule", fmt::format("the plan is for a {} schedule, the pipeline runs {}", to_string(*schedule),
                                to_string(dag.schedule)));
  }
  const int64_t stages = require_integer(root, "", "stages");
  if (stages != dag.stages) {
    bad("stages", fmt::format("the plan has {} stages, the pipeline has {}", stages, dag.stages));
  }
  const int64_t microbatches = require_integer(root, "", "microbatches");
  if (microbatches != dag.microbatches) {
    bad("microbatches",
        fmt::format("the plan has {} microbatches, the pipeline has {}", microbatches, dag.microbatches));
  }
  const json& stage_plans = require_array(root, "", "stages_plan");
  if (stage_plans.size() != static_cast<size_t>(dag.stages)) {
    bad("stages_plan",
        fmt::format("{} entries, expected {} (one per stage)", stage_plans.size(), dag.stages));
  }

  FrequencyPlan plan(dag.computations.size(), 0);
  for (size_t s = 0; s < stage_plans.size(); ++s) {
    const std::string stage_path = fmt::format("stages_plan[{}]", s);
    const json& stage_plan = stage_plans[s];
    expect_object(stage_plan, stage_path);
    const int64_t stage = require_integer(stage_plan, stage_path, "stage");
    if (stage != static_cast<int64_t>(s)) {
      bad(join(stage_path, "stage"), fmt::format("expected {} (stages in order), got {}", s, stage));
    }
    const json& computations = require_array(stage_plan, stage_path, "computations");
    const std::vector<int>& order = dag.stage_order[s];
    const size_t checked = std::min(computations.size(), order.size());
    for (size_t k = 0; k < checked; ++k) {
      const std::string path = fmt::format("{}.computations[{}]", stage_path, k);
      const json& item = computations[k];
      expect_object(item, path);
      const auto instruction = parse_instruction(require_string(item, path, "instruction"));
      if (!instruction) {
        bad(join(path, "instruction"), instruction.error().message());
      }
      const int64_t microbatch = require_integer(item, path, "microbatch");
      if (microbatch < 0 || microbatch >= dag.microbatches) {
        bad(join(path, "microbatch"),
            fmt::format("expected an integer in [0, {}), got {}", dag.microbatches, microbatch));
      }
      const json& frequency = require(item, path, "frequency_mhz");
      if (!frequency.is_number_integer() || frequency.get<int64_t>() <= 0 ||
          frequency.get<int64_t>() > std::numeric_limits<uint32_t>::max()) {
        bad(join(path, "frequency_mhz"),
            fmt::format("expected a positive integer (MHz), got {}", frequency.dump()));
      }
      const auto node = static_cast<size_t>(order[k]);
      const Computation& expected = dag.computations[node];
      if (expected.instruction != *instruction || expected.microbatch != microbatch) {
        bad(path, fmt::format("expected {} (next in the {} order), got {}",
                              describe(expected.instruction, expected.microbatch), to_string(dag.schedule),
                              describe(*instruction, static_cast<int>(microbatch))));
      }
      plan[node] = static_cast<uint32_t>(frequency.get<int64_t>());
    }
    if (computations.size() < order.size()) {
      const Computation& missing = dag.computations[static_cast<size_t>(order[computations.size()])];
      bad(join(stage_path, "computations"),
          fmt::format("{} computations, expected {}; the first missing is {}", computations.size(),
                      order.size(), describe(missing.instruction, missing.microbatch)));
    }
    if (computations.size() > order.size()) {
      bad(join(stage_path, "computations"),
          fmt::format("{} computations, expected {}", computations.size(), order.size()));
    }
  }
  return plan;
}

}  // namespace

nlohmann::json plan_to_json(const PipelineDag& dag, const FrequencyPlan& plan, const PlanCost& predicted) {
  if (plan.size() != dag.computations.size()) {
    throw Exception(ErrorCode::kInvalidArgument,
                    fmt::format("the plan has {} frequencies but the DAG has {} computations", plan.size(),
                                dag.computations.size()));
  }
  json stage_plans = json::array();
  for (size_t s = 0; s < dag.stage_order.size(); ++s) {
    json computations = json::array();
    for (const int node : dag.stage_order[s]) {
      const Computation& computation = dag.computations[static_cast<size_t>(node)];
      computations.push_back({{"instruction", to_string(computation.instruction)},
                              {"microbatch", computation.microbatch},
                              {"frequency_mhz", plan[static_cast<size_t>(node)]}});
    }
    stage_plans.push_back({{"stage", s}, {"computations", std::move(computations)}});
  }
  return {{"schedule", to_string(dag.schedule)}, {"stages", dag.stages},
          {"microbatches", dag.microbatches},    {"time_s", predicted.time_s},
          {"energy_j", predicted.energy_j},      {"stages_plan", std::move(stage_plans)}};
}

Result<FrequencyPlan> plan_from_json(const PipelineDag& dag, const nlohmann::json& document) {
  try {
    return read_plan(dag, document);
  } catch (const Exception& error) {
    return tl::make_unexpected(error.error());
  }
}

}  // namespace joule::plan
