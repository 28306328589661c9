// SPDX-License-Identifier: Apache-2.0
#include "joule/plan/stage_round.hpp"

#include <array>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "joule/core/json.hpp"

namespace joule::plan {

namespace {

// Zeus's result body names its instructions in this order.
constexpr std::array<Instruction, 2> kRecordedInstructions = {Instruction::kForward, Instruction::kBackward};

size_t recorded_index(Instruction instruction) {
  return instruction == Instruction::kForward ? 0 : 1;
}

}  // namespace

void RoundRecorder::begin_iteration() {
  for (size_t index = 0; index < 2; ++index) {
    times_s_[index].clear();
    energies_j_[index].clear();
  }
}

void RoundRecorder::record(Instruction instruction, double time_s, double energy_j) {
  times_s_[recorded_index(instruction)].push_back(time_s);
  energies_j_[recorded_index(instruction)].push_back(energy_j);
}

void RoundRecorder::end_iteration(double iteration_time_s, double iteration_energy_j) {
  round_["iter_time"].push_back(iteration_time_s);
  round_["iter_energy"].push_back(iteration_energy_j);
  for (const Instruction instruction : kRecordedInstructions) {
    const std::string name(to_string(instruction));
    round_["time_breakdown"][name].push_back(times_s_[recorded_index(instruction)]);
    round_["energy_breakdown"][name].push_back(energies_j_[recorded_index(instruction)]);
  }
}

nlohmann::json RoundRecorder::take_result(int64_t rank, std::optional<int64_t> round,
                                          std::optional<bool> thermally_steady) {
  nlohmann::json result = std::exchange(round_, nlohmann::json::object());
  result["rank"] = rank;
  for (const char* list : {"iter_time", "iter_energy"}) {
    if (!result.contains(list)) {
      result[list] = nlohmann::json::array();
    }
  }
  for (const char* breakdown : {"time_breakdown", "energy_breakdown"}) {
    for (const Instruction instruction : kRecordedInstructions) {
      nlohmann::json& lists = result[breakdown][std::string(to_string(instruction))];
      if (lists.is_null()) {
        lists = nlohmann::json::array();
      }
    }
  }
  if (round) {
    result["round"] = *round;
  }
  if (thermally_steady) {
    result["thermally_steady"] = *thermally_steady;
  }
  return result;
}

Result<void> check_topology(const StageTopology& topology) {
  const std::array<std::pair<const char*, int64_t>, 3> degrees = {{{"dp_degree", topology.dp_degree},
                                                                   {"pp_degree", topology.pp_degree},
                                                                   {"tp_degree", topology.tp_degree}}};
  bool degree_too_large = false;
  for (const auto& [name, value] : degrees) {
    if (value < 1) {
      return fail(ErrorCode::kInvalidArgument, "{} must be ≥ 1, got {}", name, value);
    }
    // Degrees ≥ 1 multiply to at least each of them: one above world_size cannot fit (and would overflow).
    degree_too_large = degree_too_large || value > topology.world_size;
  }
  if (degree_too_large ||
      topology.world_size != topology.dp_degree * topology.pp_degree * topology.tp_degree) {
    return fail(ErrorCode::kInvalidArgument,
                "world_size {} is not dp_degree × pp_degree × tp_degree = {} × {} × {}", topology.world_size,
                topology.dp_degree, topology.pp_degree, topology.tp_degree);
  }
  const std::array<std::tuple<const char*, int64_t, int64_t>, 4> ranks = {{
      {"dp_rank", topology.dp_rank, topology.dp_degree},
      {"pp_rank", topology.pp_rank, topology.pp_degree},
      {"tp_rank", topology.tp_rank, topology.tp_degree},
      {"rank", topology.rank, topology.world_size},
  }};
  for (const auto& [name, value, degree] : ranks) {
    if (value < 0 || value >= degree) {
      return fail(ErrorCode::kInvalidArgument, "{} {} is not in [0, {})", name, value, degree);
    }
  }
  return {};
}

namespace {

// The value as Python's str() writes the decoded JSON (the optimizer's messages and phases were Python's).
std::string python_str(const nlohmann::json& value) {
  if (value.is_string()) {
    return value.get<std::string>();
  }
  if (value.is_null()) {
    return "None";
  }
  if (value.is_boolean()) {
    return value.get<bool>() ? "True" : "False";
  }
  return value.dump();
}

// An integer (not a float, not a bool) within [min, max].
std::optional<int64_t> integer_in(const nlohmann::json& value, int64_t min, int64_t max) {
  if (value.is_number_unsigned()) {
    const auto number = value.get<uint64_t>();
    if (number > static_cast<uint64_t>(max)) {
      return std::nullopt;
    }
    return static_cast<int64_t>(number) >= min ? std::optional(static_cast<int64_t>(number)) : std::nullopt;
  }
  if (value.is_number_integer()) {
    const auto number = value.get<int64_t>();
    return number >= min && number <= max ? std::optional(number) : std::nullopt;
  }
  return std::nullopt;
}

// Whether a decoded "rank" equals `rank` as Python's == says (1.0 and true equal 1).
bool same_rank(const nlohmann::json& value, int64_t rank) {
  if (value.is_boolean()) {
    return static_cast<int64_t>(value.get<bool>()) == rank;
  }
  if (value.is_number_float()) {
    return value.get<double>() == static_cast<double>(rank);
  }
  return integer_in(value, rank, rank).has_value();
}

constexpr size_t kQuotedScheduleBytes = 300;

}  // namespace

Result<RoundSchedule> RoundSchedule::from_json(const nlohmann::json& body, int64_t rank,
                                               std::string_view source, std::string_view quoted) {
  const auto bad = [&](const std::string& what) {
    return fail(ErrorCode::kInvalidArgument, "{}: {} (got {})", source, what,
                quoted.substr(0, kQuotedScheduleBytes));
  };
  if (!body.is_object() || !body.contains("frequencies") || !body["frequencies"].is_array()) {
    return bad("a schedule is an object with a 'frequencies' list");
  }
  if (body.contains("rank") && !same_rank(body["rank"], rank)) {
    return bad(fmt::format("the schedule is for rank {}, not this rank {}", python_str(body["rank"]), rank));
  }
  RoundSchedule schedule;
  const nlohmann::json& entries = body["frequencies"];
  for (size_t index = 0; index < entries.size(); ++index) {
    const nlohmann::json& entry = entries[index];
    std::optional<int64_t> mhz;
    Result<Instruction> instruction = fail(ErrorCode::kInvalidArgument, "not an instruction");
    if (entry.is_array() && entry.size() == 2 && entry[0].is_string()) {
      instruction = parse_instruction(entry[0].get<std::string>());
      mhz = integer_in(entry[1], 0, std::numeric_limits<uint32_t>::max());
    }
    if (!instruction || !mhz) {
      return bad(fmt::format("frequencies[{}] must be ['forward' or 'backward', MHz ≥ 0]", index));
    }
    schedule.frequencies.emplace_back(*instruction, static_cast<uint32_t>(*mhz));
  }
  if (schedule.frequencies.empty()) {
    return bad("the schedule has no instruction");
  }
  if (body.contains("iterations") && !body["iterations"].is_null()) {
    schedule.iterations = integer_in(body["iterations"], 1, std::numeric_limits<int64_t>::max());
    if (!schedule.iterations) {
      return bad("'iterations' must be a positive integer or null");
    }
  }
  if (body.contains("round")) {
    const nlohmann::json& round = body["round"];
    schedule.round = round.is_boolean() ? static_cast<int64_t>(round.get<bool>())
                                        : integer_in(round, std::numeric_limits<int64_t>::min(),
                                                     std::numeric_limits<int64_t>::max())
                                              .value_or(0);
  }
  if (body.contains("phase")) {
    schedule.phase = python_str(body["phase"]);
  }
  if (body.contains("predicted") && body["predicted"].is_object()) {
    schedule.predicted = body["predicted"];
  }
  return schedule;
}

Result<RoundSchedule> RoundSchedule::parse(std::string_view text, int64_t rank, std::string_view source) {
  auto body = parse_json(text);
  return from_json(body ? *body : nlohmann::json(), rank, source, text);
}

Result<Profile> load_profile(const std::string& path_or_csv) {
  return path_or_csv.find('\n') != std::string::npos ? Profile::parse(path_or_csv, "<profile text>")
                                                     : Profile::read(path_or_csv);
}

Result<LocalPlan> plan_stages(const StagePlanRequest& request) {
  if (request.plan_path) {
    if (request.target_time_s || request.slowdown) {
      return fail(ErrorCode::kInvalidArgument,
                  "target_time_s and slowdown choose a plan from a profile, not a plan file");
    }
    std::optional<Profile> profile;
    if (request.profile) {
      profile = JOULE_TRY(load_profile(*request.profile));
    }
    LocalPlan planned = JOULE_TRY(
        read_plan_file(*request.plan_path, profile ? &*profile : nullptr, request.options.p_blocking_w));
    if (request.stages && planned.stages != *request.stages) {
      return fail(ErrorCode::kInvalidArgument, "{} plans {} stages, but pp_degree is {}", *request.plan_path,
                  planned.stages, *request.stages);
    }
    if (request.microbatches && planned.microbatches != *request.microbatches) {
      return fail(ErrorCode::kInvalidArgument, "{} plans {} microbatches, but num_microbatches is {}",
                  *request.plan_path, planned.microbatches, *request.microbatches);
    }
    return planned;
  }
  if (!request.profile) {
    return fail(ErrorCode::kInvalidArgument,
                "server_url=None needs profile= (plan here) or plan= (a plan file)");
  }
  if (!request.microbatches) {
    return fail(ErrorCode::kInvalidArgument, "planning from a profile needs num_microbatches");
  }
  const Profile profile = JOULE_TRY(load_profile(*request.profile));
  return plan_locally(profile, *request.microbatches, request.stages.value_or(profile.stage_count()),
                      request.schedule, request.options, request.target_time_s, request.slowdown);
}

}  // namespace joule::plan
