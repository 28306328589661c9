// SPDX-License-Identifier: Apache-2.0
// Pipeline profiles, the 1F1B/GPipe computation DAG and the time and energy of frequency plans (Perseus §1).
#include "joule/plan/pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/strings.hpp"
#include "joule/plan/profile_codec.hpp"

namespace joule::plan {

namespace {

// No real pipeline comes close; the bound keeps node ids, edge counts and CSR offsets within int.
constexpr int64_t kMaxComputations = int64_t{1} << 26;

// GPUs offer a few hundred SM clocks at most; the planner indexes a computation's options with 16 bits and
// evaluates plans in time that grows with the number of clocks.
constexpr size_t kMaxProfileFrequencies = 1024;

size_t index_of(Instruction instruction) {
  return instruction == Instruction::kForward ? 0 : 1;
}

Instruction instruction_at(size_t index) {
  return index == 0 ? Instruction::kForward : Instruction::kBackward;
}

size_t to_size(int value) {
  return static_cast<size_t>(value);
}

// --- Profile helpers --------------------------------------------------------------------------------------

// One parsed profile row, with where it came from (for messages that point at other rows).
struct ParsedRow {
  ProfileOption option;
  size_t line = 0;
};

// e.g. "41 frequencies from 810 to 1410 MHz", for messages about a missing frequency.
std::string describe_frequencies(const std::vector<uint32_t>& frequencies_mhz) {
  if (frequencies_mhz.empty()) {
    return "no frequencies";
  }
  if (frequencies_mhz.size() == 1) {
    return fmt::format("only {} MHz", frequencies_mhz.front());
  }
  return fmt::format("{} frequencies from {} to {} MHz", frequencies_mhz.size(), frequencies_mhz.back(),
                     frequencies_mhz.front());
}

bool positive_finite(double value) {
  return std::isfinite(value) && value > 0;
}

// @return why a row's time or energy is refused (the shared wording of parse() and from_options()), or
// nothing if it is plausible.
std::optional<std::string> implausible(double value, double most, std::string_view unit) {
  if (!positive_finite(value)) {
    return std::string("expected a positive finite number");
  }
  if (value > most) {
    return fmt::format("expected at most {:g} {} for one microbatch (a larger value is a unit mistake)", most,
                       unit);
  }
  return std::nullopt;
}

// --- DAG index
// ------------------------------------------------------------------------------------------------

struct DagIndex {
  std::vector<int> order;
  std::vector<int> offsets;
  std::vector<int> predecessors;
};

Result<DagIndex> compute_index(const PipelineDag& dag) {
  const size_t count = dag.computations.size();
  DagIndex index;
  std::vector<int> in_degree(count, 0);
  std::vector<int> out_offsets(count + 1, 0);
  index.offsets.assign(count + 1, 0);
  for (size_t e = 0; e < dag.edges.size(); ++e) {
    const auto [from, to] = dag.edges[e];
    if (from < 0 || to < 0 || to_size(from) >= count || to_size(to) >= count) {
      return fail(ErrorCode::kInvalidArgument,
                  "edge {} ({} -> {}) names a node outside the DAG's {} computations", e, from, to, count);
    }
    ++in_degree[to_size(to)];
    ++out_offsets[to_size(from) + 1];
    ++index.offsets[to_size(to) + 1];
  }
  for (size_t v = 0; v < count; ++v) {
    out_offsets[v + 1] += out_offsets[v];
    index.offsets[v + 1] += index.offsets[v];
  }
  std::vector<int> successors(dag.edges.size());
  index.predecessors.resize(dag.edges.size());
  {
    std::vector<int> out_fill(out_offsets.begin(), out_offsets.end() - 1);
    std::vector<int> in_fill(index.offsets.begin(), index.offsets.end() - 1);
    for (const auto& [from, to] : dag.edges) {
      successors[to_size(out_fill[to_size(from)]++)] = to;
      index.predecessors[to_size(in_fill[to_size(to)]++)] = from;
    }
  }
  // Kahn's algorithm; the order vector doubles as the FIFO queue.
  index.order.reserve(count);
  std::vector<int> remaining = in_degree;
  for (size_t v = 0; v < count; ++v) {
    if (remaining[v] == 0) {
      index.order.push_back(static_cast<int>(v));
    }
  }
  for (size_t head = 0; head < index.order.size(); ++head) {
    const size_t v = to_size(index.order[head]);
    for (int k = out_offsets[v]; k < out_offsets[v + 1]; ++k) {
      const int next = successors[to_size(k)];
      if (--remaining[to_size(next)] == 0) {
        index.order.push_back(next);
      }
    }
  }
  if (index.order.size() != count) {
    // Every unplaced node waits on an unplaced predecessor; walking back through those must revisit a node,
    // and that node lies on a cycle.
    size_t v = 0;
    while (remaining[v] == 0) {
      ++v;
    }
    std::vector<bool> seen(count, false);
    while (!seen[v]) {
      seen[v] = true;
      for (int k = index.offsets[v]; k < index.offsets[v + 1]; ++k) {
        const size_t previous = to_size(index.predecessors[to_size(k)]);
        if (remaining[previous] > 0) {
          v = previous;
          break;
        }
      }
    }
    return fail(ErrorCode::kInvalidArgument, "the DAG's edges form a cycle through {}",
                to_string(dag.computations[v]));
  }
  return index;
}

bool has_fresh_index(const PipelineDag& dag) {
  const size_t count = dag.computations.size();
  return dag.topological_order.size() == count && dag.predecessor_offsets.size() == count + 1 &&
         dag.predecessors.size() == dag.edges.size();
}

// Views of a DAG index: the DAG's own, or one computed for this call when it is missing or stale.
struct IndexRefs {
  const std::vector<int>& order;
  const std::vector<int>& offsets;
  const std::vector<int>& predecessors;
};

// @param storage holds a computed index for as long as the returned references are used.
Result<IndexRefs> index_refs(const PipelineDag& dag, std::optional<DagIndex>& storage) {
  if (has_fresh_index(dag)) {
    return IndexRefs{dag.topological_order, dag.predecessor_offsets, dag.predecessors};
  }
  auto computed = JOULE_TRY(compute_index(dag));
  storage = std::move(computed);
  return IndexRefs{storage->order, storage->offsets, storage->predecessors};
}

}  // namespace

// --- Names ------------------------------------------------------------------------------------------------

std::string_view to_string(Instruction instruction) {
  return instruction == Instruction::kForward ? "forward" : "backward";
}

Result<Instruction> parse_instruction(std::string_view text) {
  if (text == "forward") {
    return Instruction::kForward;
  }
  if (text == "backward") {
    return Instruction::kBackward;
  }
  return fail(ErrorCode::kParse, "unknown instruction {}: expected forward or backward",
              quoted_excerpt(text));
}

std::string_view to_string(Schedule schedule) {
  return schedule == Schedule::k1F1B ? "1f1b" : "gpipe";
}

Result<Schedule> parse_schedule(std::string_view text) {
  if (text == "1f1b") {
    return Schedule::k1F1B;
  }
  if (text == "gpipe") {
    return Schedule::kGPipe;
  }
  return fail(ErrorCode::kParse, "unknown schedule {}: expected 1f1b or gpipe", quoted_excerpt(text));
}

std::string to_string(const Computation& computation) {
  return fmt::format("stage {} {} of microbatch {}", computation.stage, to_string(computation.instruction),
                     computation.microbatch);
}

std::string short_label(const Computation& computation) {
  return fmt::format("{}{}", computation.instruction == Instruction::kForward ? 'F' : 'B',
                     computation.microbatch);
}

// --- Profile ----------------------------------------------------------------------------------------------

Result<Profile> Profile::parse(std::string_view csv_text, const std::string& source) {
  auto table = JOULE_TRY(csv::parse(csv_text, source));
  // joule's column names, or Perseus's and lowtime's (profile_codec.hpp).
  const ProfileColumns columns = JOULE_TRY(profile_columns(table));
  const size_t stage_column = columns.stage;
  const size_t instruction_column = columns.instruction;
  const size_t frequency_column = columns.frequency_mhz;
  const size_t time_column = columns.time_s;
  const size_t energy_column = columns.energy_j;

  // rows[stage][instruction][frequency]
  std::map<int, std::array<std::map<uint32_t, ParsedRow>, 2>> rows;
  std::map<int, size_t> first_line;  // of each stage
  for (size_t r = 0; r < table.row_count(); ++r) {
    const csv::Table::Row row = table.row(r);
    const auto stage = JOULE_TRY(row.integer(stage_column));
    if (stage < 0) {
      return tl::make_unexpected(
          row.error_at(stage_column, fmt::format("expected a non-negative integer, got {}",
                                                 quoted_excerpt(trim(row.text(stage_column))))));
    }
    if (stage > std::numeric_limits<int>::max()) {
      return tl::make_unexpected(row.error_at(
          stage_column, fmt::format("stage out of range: {}", quoted_excerpt(trim(row.text(stage_column))))));
    }
    const std::string_view instruction_text = trim(row.text(instruction_column));
    const auto instruction = parse_instruction(instruction_text);
    if (!instruction) {
      return tl::make_unexpected(row.error_at(
          instruction_column,
          fmt::format("expected forward or backward, got {}", quoted_excerpt(instruction_text))));
    }
    const auto frequency = JOULE_TRY(row.integer(frequency_column));
    if (frequency <= 0 || frequency > std::numeric_limits<uint32_t>::max()) {
      return tl::make_unexpected(
          row.error_at(frequency_column, fmt::format("expected a positive integer (MHz), got {}",
                                                     quoted_excerpt(trim(row.text(frequency_column))))));
    }
    const auto time = JOULE_TRY(row.number(time_column));
    if (const auto why = implausible(time, kMaxProfileTimeS, "s")) {
      return tl::make_unexpected(row.error_at(
          time_column, fmt::format("{}, got {}", *why, quoted_excerpt(trim(row.text(time_column))))));
    }
    const auto energy = JOULE_TRY(row.number(energy_column));
    if (const auto why = implausible(energy, kMaxProfileEnergyJ, "J")) {
      return tl::make_unexpected(row.error_at(
          energy_column, fmt::format("{}, got {}", *why, quoted_excerpt(trim(row.text(energy_column))))));
    }
    const int stage_index = static_cast<int>(stage);
    const auto frequency_mhz = static_cast<uint32_t>(frequency);
    first_line.emplace(stage_index, row.line());
    auto& slot = rows[stage_index][index_of(*instruction)];
    const auto [it, inserted] =
        slot.emplace(frequency_mhz, ParsedRow{ProfileOption{frequency_mhz, time, energy}, row.line()});
    if (!inserted) {
      return tl::make_unexpected(
          row.error_at(frequency_column,
                       fmt::format("duplicate row for stage {} {} at {} MHz (first on line {})", stage_index,
                                   to_string(*instruction), frequency_mhz, it->second.line)));
    }
  }
  if (rows.empty()) {
    return fail(ErrorCode::kParse, "{}: the profile has no rows", source);
  }

  const int last_stage = rows.rbegin()->first;
  for (int stage = 0; stage < last_stage; ++stage) {
    if (rows.find(stage) == rows.end()) {
      return fail(ErrorCode::kParse, "{}: no rows for stage {} (line {} has stage {})", source, stage,
                  first_line.at(last_stage), last_stage);
    }
  }

  // Every (stage, instruction) must have every frequency that appears anywhere. Remember one row that has
  // each frequency so that the message can point at it.
  struct Witness {
    int stage;
    Instruction instruction;
    size_t line;
  };
  std::map<uint32_t, Witness, std::greater<>> witnesses;
  for (const auto& [stage, per_instruction] : rows) {
    for (size_t i = 0; i < 2; ++i) {
      for (const auto& [frequency_mhz, parsed] : per_instruction[i]) {
        const auto [it, inserted] =
            witnesses.emplace(frequency_mhz, Witness{stage, instruction_at(i), parsed.line});
        if (!inserted && parsed.line < it->second.line) {
          it->second = Witness{stage, instruction_at(i), parsed.line};
        }
      }
    }
  }
  if (witnesses.size() > kMaxProfileFrequencies) {
    // Name the row that brought the first clock past the limit, in file order.
    std::vector<size_t> lines;
    lines.reserve(witnesses.size());
    for (const auto& [frequency_mhz, witness] : witnesses) {
      lines.push_back(witness.line);
    }
    std::nth_element(lines.begin(), lines.begin() + kMaxProfileFrequencies, lines.end());
    return fail(
        ErrorCode::kParse,
        "{}:{}: the profile has {} different clocks, more than the {} a planner accepts (GPUs offer a "
        "few hundred): is frequency_mhz in MHz?",
        source, lines[kMaxProfileFrequencies], witnesses.size(), kMaxProfileFrequencies);
  }
  for (const auto& [stage, per_instruction] : rows) {
    for (size_t i = 0; i < 2; ++i) {
      for (const auto& [frequency_mhz, witness] : witnesses) {
        if (per_instruction[i].find(frequency_mhz) == per_instruction[i].end()) {
          return fail(ErrorCode::kParse,
                      "{}: stage {} {} has no row at {} MHz (line {} has one for stage {} {})", source, stage,
                      to_string(instruction_at(i)), frequency_mhz, witness.line, witness.stage,
                      to_string(witness.instruction));
        }
      }
    }
  }

  Profile profile;
  for (const auto& [frequency_mhz, witness] : witnesses) {
    profile.frequencies_mhz_.push_back(frequency_mhz);
  }
  profile.options_.resize(rows.size());
  for (const auto& [stage, per_instruction] : rows) {
    for (size_t i = 0; i < 2; ++i) {
      auto& options = profile.options_[to_size(stage)][i];
      options.reserve(per_instruction[i].size());
      for (auto it = per_instruction[i].rbegin(); it != per_instruction[i].rend(); ++it) {
        options.push_back(it->second.option);
      }
    }
  }
  return profile;
}

Result<Profile> Profile::read(const std::string& path) {
  auto text = JOULE_TRY(read_text_file(path, read_limits::kPipelineProfile));
  return parse(text, path);
}

Result<Profile> Profile::from_options(std::vector<std::array<std::vector<ProfileOption>, 2>> options) {
  if (options.empty()) {
    return fail(ErrorCode::kInvalidArgument, "the profile has no stages");
  }
  std::map<uint32_t, std::pair<size_t, size_t>, std::greater<>>
      witnesses;  // frequency → (stage, instruction)
  for (size_t stage = 0; stage < options.size(); ++stage) {
    for (size_t i = 0; i < 2; ++i) {
      const std::string_view instruction = to_string(instruction_at(i));
      auto& list = options[stage][i];
      for (const ProfileOption& option : list) {
        if (option.frequency_mhz == 0) {
          return fail(ErrorCode::kInvalidArgument, "stage {} {}: frequency_mhz must be positive, got 0",
                      stage, instruction);
        }
        if (!positive_finite(option.time_s)) {
          return fail(ErrorCode::kInvalidArgument,
                      "stage {} {} at {} MHz: time_s must be positive and finite, got {}", stage, instruction,
                      option.frequency_mhz, option.time_s);
        }
        if (const auto why = implausible(option.time_s, kMaxProfileTimeS, "s")) {
          return fail(ErrorCode::kInvalidArgument, "stage {} {} at {} MHz: time_s: {}, got {}", stage,
                      instruction, option.frequency_mhz, *why, option.time_s);
        }
        if (!positive_finite(option.energy_j)) {
          return fail(ErrorCode::kInvalidArgument,
                      "stage {} {} at {} MHz: energy_j must be positive and finite, got {}", stage,
                      instruction, option.frequency_mhz, option.energy_j);
        }
        if (const auto why = implausible(option.energy_j, kMaxProfileEnergyJ, "J")) {
          return fail(ErrorCode::kInvalidArgument, "stage {} {} at {} MHz: energy_j: {}, got {}", stage,
                      instruction, option.frequency_mhz, *why, option.energy_j);
        }
        witnesses.emplace(option.frequency_mhz, std::pair{stage, i});
      }
      std::sort(list.begin(), list.end(), [](const ProfileOption& a, const ProfileOption& b) {
        return a.frequency_mhz > b.frequency_mhz;
      });
      for (size_t k = 1; k < list.size(); ++k) {
        if (list[k].frequency_mhz == list[k - 1].frequency_mhz) {
          return fail(ErrorCode::kInvalidArgument, "stage {} {}: two options at {} MHz", stage, instruction,
                      list[k].frequency_mhz);
        }
      }
    }
  }
  if (witnesses.empty()) {
    return fail(ErrorCode::kInvalidArgument, "the profile has no options");
  }
  if (witnesses.size() > kMaxProfileFrequencies) {
    return fail(ErrorCode::kInvalidArgument,
                "the profile has {} different clocks, more than the {} a planner accepts (GPUs offer a few "
                "hundred)",
                witnesses.size(), kMaxProfileFrequencies);
  }
  Profile profile;
  for (const auto& [frequency_mhz, witness] : witnesses) {
    profile.frequencies_mhz_.push_back(frequency_mhz);
  }
  for (size_t stage = 0; stage < options.size(); ++stage) {
    for (size_t i = 0; i < 2; ++i) {
      const auto& list = options[stage][i];
      // Both lists are sorted descending and list ⊆ frequencies, so equal sizes mean equal sets.
      if (list.size() == profile.frequencies_mhz_.size()) {
        continue;
      }
      for (size_t k = 0; k < profile.frequencies_mhz_.size(); ++k) {
        const uint32_t frequency_mhz = profile.frequencies_mhz_[k];
        if (k >= list.size() || list[k].frequency_mhz != frequency_mhz) {
          const auto [witness_stage, witness_instruction] = witnesses.at(frequency_mhz);
          return fail(ErrorCode::kInvalidArgument,
                      "stage {} {} has no option at {} MHz (stage {} {} has one)", stage,
                      to_string(instruction_at(i)), frequency_mhz, witness_stage,
                      to_string(instruction_at(witness_instruction)));
        }
      }
    }
  }
  profile.options_ = std::move(options);
  return profile;
}

const std::vector<ProfileOption>& Profile::options(int stage, Instruction instruction) const {
  if (stage < 0 || stage >= stage_count()) {
    throw Exception(ErrorCode::kOutOfRange,
                    fmt::format("the profile has no stage {} (it has {} stages)", stage, stage_count()));
  }
  return options_[to_size(stage)][index_of(instruction)];
}

// --- DAG --------------------------------------------------------------------------------------------------

int PipelineDag::node(int stage, Instruction instruction, int microbatch) const {
  if (stage < 0 || stage >= stages || microbatch < 0 || microbatch >= microbatches) {
    throw Exception(
        ErrorCode::kOutOfRange,
        fmt::format("no computation for stage {} {} of microbatch {} in a pipeline of {} stages × {} "
                    "microbatches",
                    stage, to_string(instruction), microbatch, stages, microbatches));
  }
  return stage * 2 * microbatches + (instruction == Instruction::kForward ? 0 : microbatches) + microbatch;
}

Result<PipelineDag> build_pipeline(int stages, int microbatches, Schedule schedule) {
  if (stages < 1 || microbatches < 1) {
    return fail(ErrorCode::kInvalidArgument,
                "a pipeline needs at least 1 stage and 1 microbatch, got {} stage(s) and {} microbatch(es)",
                stages, microbatches);
  }
  if (int64_t{2} * stages * microbatches > kMaxComputations) {
    return fail(ErrorCode::kInvalidArgument,
                "a pipeline of {} stages × {} microbatches has more than {} computations", stages,
                microbatches, kMaxComputations);
  }
  PipelineDag dag;
  dag.stages = stages;
  dag.microbatches = microbatches;
  dag.schedule = schedule;
  const int count = 2 * stages * microbatches;
  dag.computations.resize(to_size(count));
  for (int s = 0; s < stages; ++s) {
    for (int m = 0; m < microbatches; ++m) {
      dag.computations[to_size(dag.node(s, Instruction::kForward, m))] = {s, Instruction::kForward, m};
      dag.computations[to_size(dag.node(s, Instruction::kBackward, m))] = {s, Instruction::kBackward, m};
    }
  }

  dag.stage_order.resize(to_size(stages));
  for (int s = 0; s < stages; ++s) {
    std::vector<int>& order = dag.stage_order[to_size(s)];
    order.reserve(to_size(2 * microbatches));
    const auto forward = [&](int m) { order.push_back(dag.node(s, Instruction::kForward, m)); };
    const auto backward = [&](int m) { order.push_back(dag.node(s, Instruction::kBackward, m)); };
    if (schedule == Schedule::kGPipe) {
      for (int m = 0; m < microbatches; ++m) {
        forward(m);
      }
      for (int m = microbatches - 1; m >= 0; --m) {
        backward(m);
      }
    } else {
      // Warm-up forwards fill the pipeline below this stage; then one backward frees an activation before
      // each further forward; the cool-down drains the remaining backwards.
      const int warmup = std::min(stages - s, microbatches);
      int next_forward = 0;
      int next_backward = 0;
      while (next_forward < warmup) {
        forward(next_forward++);
      }
      while (next_forward < microbatches) {
        backward(next_backward++);
        forward(next_forward++);
      }
      while (next_backward < microbatches) {
        backward(next_backward++);
      }
    }
  }

  dag.edges.reserve(to_size(stages * (2 * microbatches - 1) + 2 * microbatches * (stages - 1)));
  for (const std::vector<int>& order : dag.stage_order) {
    for (size_t k = 1; k < order.size(); ++k) {
      dag.edges.emplace_back(order[k - 1], order[k]);
    }
  }
  for (int s = 0; s + 1 < stages; ++s) {
    for (int m = 0; m < microbatches; ++m) {
      dag.edges.emplace_back(dag.node(s, Instruction::kForward, m),
                             dag.node(s + 1, Instruction::kForward, m));
    }
  }
  for (int s = 0; s + 1 < stages; ++s) {
    for (int m = 0; m < microbatches; ++m) {
      dag.edges.emplace_back(dag.node(s + 1, Instruction::kBackward, m),
                             dag.node(s, Instruction::kBackward, m));
    }
  }

  const size_t expected_edges = to_size(stages * (2 * microbatches - 1) + 2 * microbatches * (stages - 1));
  if (dag.edges.size() != expected_edges) {
    return fail(ErrorCode::kInternal, "the {} DAG of {} stages × {} microbatches has {} edges, expected {}",
                to_string(schedule), stages, microbatches, dag.edges.size(), expected_edges);
  }
  if (auto indexed = index_dag(dag); !indexed) {
    return tl::make_unexpected(
        Error(ErrorCode::kInternal,
              fmt::format("the {} DAG of {} stages × {} microbatches: {}", to_string(schedule), stages,
                          microbatches, indexed.error().message())));
  }
  return dag;
}

Result<void> index_dag(PipelineDag& dag) {
  auto index = JOULE_TRY(compute_index(dag));
  dag.topological_order = std::move(index.order);
  dag.predecessor_offsets = std::move(index.offsets);
  dag.predecessors = std::move(index.predecessors);
  return {};
}

// --- Times and costs --------------------------------------------------------------------------------------

Timeline schedule_times(const PipelineDag& dag, const std::vector<double>& times_s) {
  const size_t count = dag.computations.size();
  if (times_s.size() != count) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("{} computation times given for a DAG of {} computations", times_s.size(), count));
  }
  std::optional<DagIndex> storage;
  const IndexRefs index = value_or_throw(index_refs(dag, storage));
  Timeline timeline;
  timeline.start_s.assign(count, 0);
  timeline.end_s.assign(count, 0);
  for (const int v : index.order) {
    const size_t node = to_size(v);
    double start_s = 0;
    for (int k = index.offsets[node]; k < index.offsets[node + 1]; ++k) {
      start_s = std::max(start_s, timeline.end_s[to_size(index.predecessors[to_size(k)])]);
    }
    timeline.start_s[node] = start_s;
    timeline.end_s[node] = start_s + times_s[node];
    timeline.time_s = std::max(timeline.time_s, timeline.end_s[node]);
  }
  return timeline;
}

Result<ProfileOption> option_at(const Profile& profile, const Computation& computation,
                                uint32_t frequency_mhz) {
  if (computation.stage < 0 || computation.stage >= profile.stage_count()) {
    return fail(ErrorCode::kNotFound,
                "the profile has no stage {} (it has {} stages), needed for {} at {} MHz", computation.stage,
                profile.stage_count(), to_string(computation), frequency_mhz);
  }
  const auto& frequencies = profile.frequencies_mhz();
  const auto it = std::lower_bound(frequencies.begin(), frequencies.end(), frequency_mhz, std::greater<>());
  if (it == frequencies.end() || *it != frequency_mhz) {
    return fail(ErrorCode::kNotFound, "the profile has no option at {} MHz for {} (it has {})", frequency_mhz,
                to_string(computation), describe_frequencies(frequencies));
  }
  return profile.options(computation.stage,
                         computation.instruction)[static_cast<size_t>(it - frequencies.begin())];
}

Result<PlanCost> evaluate(const PipelineDag& dag, const Profile& profile, const FrequencyPlan& plan,
                          double p_blocking_w) {
  const size_t count = dag.computations.size();
  if (plan.size() != count) {
    return fail(ErrorCode::kInvalidArgument, "the plan has {} frequencies but the DAG has {} computations",
                plan.size(), count);
  }
  JOULE_TRY(check_inputs(dag, profile, p_blocking_w));
  std::optional<DagIndex> storage;
  const auto index = JOULE_TRY(index_refs(dag, storage));
  const std::vector<int>& order = index.order;
  const std::vector<int>& offsets = index.offsets;
  const std::vector<int>& predecessors = index.predecessors;
  const std::vector<uint32_t>& frequencies = profile.frequencies_mhz();

  // Reused across calls: the planner evaluates thousands of plans on the same DAG.
  thread_local std::vector<double> end_s;
  end_s.resize(count);

  double time_s = 0;
  double busy_s = 0;
  double energy_j = 0;
  // Plans are mostly runs of one frequency, so remember the last lookup; and clocks usually come in even
  // steps (15 MHz on A100), so try the position that step predicts before searching.
  const uint32_t top_mhz = frequencies.front();
  const uint32_t step_mhz = frequencies.size() > 1 ? top_mhz - frequencies[1] : 0;
  uint32_t cached_frequency = 0;
  size_t cached_position = 0;
  for (const int v : order) {
    const size_t node = to_size(v);
    const uint32_t frequency_mhz = plan[node];
    if (frequency_mhz != cached_frequency || cached_frequency == 0) {
      size_t position = frequencies.size();
      if (step_mhz > 0 && frequency_mhz <= top_mhz && (top_mhz - frequency_mhz) % step_mhz == 0) {
        position = (top_mhz - frequency_mhz) / step_mhz;
      }
      if (position >= frequencies.size() || frequencies[position] != frequency_mhz) {
        position = static_cast<size_t>(
            std::lower_bound(frequencies.begin(), frequencies.end(), frequency_mhz, std::greater<>()) -
            frequencies.begin());
      }
      if (position >= frequencies.size() || frequencies[position] != frequency_mhz) {
        JOULE_TRY(option_at(profile, dag.computations[node], frequency_mhz));
        return fail(ErrorCode::kInternal, "the frequency lookup disagrees with option_at() at {} MHz",
                    frequency_mhz);
      }
      cached_frequency = frequency_mhz;
      cached_position = position;
    }
    const Computation& computation = dag.computations[node];
    const ProfileOption& option =
        profile.options(computation.stage, computation.instruction)[cached_position];
    double start_s = 0;
    for (int k = offsets[node]; k < offsets[node + 1]; ++k) {
      start_s = std::max(start_s, end_s[to_size(predecessors[to_size(k)])]);
    }
    const double finish_s = start_s + option.time_s;
    end_s[node] = finish_s;
    time_s = std::max(time_s, finish_s);
    busy_s += option.time_s;
    energy_j += option.energy_j;
  }
  return PlanCost{time_s, energy_j + p_blocking_w * (static_cast<double>(dag.stages) * time_s - busy_s)};
}

Result<void> check_inputs(const PipelineDag& dag, const Profile& profile, double p_blocking_w) {
  if (profile.stage_count() < dag.stages) {
    return fail(ErrorCode::kInvalidArgument, "the profile has {} stage{} but the pipeline has {}",
                profile.stage_count(), profile.stage_count() == 1 ? "" : "s", dag.stages);
  }
  if (!std::isfinite(p_blocking_w) || p_blocking_w < 0) {
    return fail(ErrorCode::kInvalidArgument, "the blocking power must be finite and non-negative, got {} W",
                p_blocking_w);
  }
  return {};
}

FrequencyPlan uniform_plan(const PipelineDag& dag, uint32_t frequency_mhz) {
  return FrequencyPlan(dag.computations.size(), frequency_mhz);
}

}  // namespace joule::plan
