// SPDX-License-Identifier: Apache-2.0
#include "joule/plan/profile_codec.hpp"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/core/json.hpp"
#include "joule/core/strings.hpp"

namespace joule::plan {

using nlohmann::json;

namespace {

/// @return the position of the column called `name` or `alias` (nullopt for no alias), or kParse when the
/// header has neither or both.
Result<size_t> profile_column(const csv::Table& table, std::string_view name,
                              std::optional<std::string_view> alias) {
  const auto own = table.column(name);
  if (!alias) {
    if (!own) {
      // A profile without one of its columns is malformed text, whatever the CSV layer calls it.
      return fail(ErrorCode::kParse, "{}", own.error().message());
    }
    return *own;
  }
  const auto theirs = table.column(*alias);
  if (own && theirs) {
    return fail(
        ErrorCode::kParse,
        "{}: the header has both '{}' and '{}' (Perseus's and lowtime's name for it): keep one column",
        table.source(), name, *alias);
  }
  if (own) {
    return *own;
  }
  if (theirs) {
    return *theirs;
  }
  std::vector<std::string> shown;  // the header is input: print it safely
  shown.reserve(table.header().size());
  for (const auto& field : table.header()) {
    shown.push_back(printable_excerpt(field));
  }
  return fail(ErrorCode::kParse,
              "{}: missing column '{}' (Perseus and lowtime call it '{}'; the header has: {})",
              table.source(), name, *alias, fmt::join(shown, ", "));
}

}  // namespace

Result<ProfileColumns> profile_columns(const csv::Table& table) {
  ProfileColumns columns;
  columns.stage = JOULE_TRY(profile_column(table, "stage", std::nullopt));
  columns.instruction = JOULE_TRY(profile_column(table, "instruction", std::nullopt));
  columns.frequency_mhz = JOULE_TRY(profile_column(table, "frequency_mhz", "frequency"));
  columns.time_s = JOULE_TRY(profile_column(table, "time_s", "time"));
  columns.energy_j = JOULE_TRY(profile_column(table, "energy_j", "energy"));

  // Merak-Zeus's profiler writes one row per rank: with data or tensor parallelism a stage has several
  // ranks, each with its own measurements of the same (instruction, frequency). A plan gives a stage one
  // profile, so the file must keep one rank per stage; say so before the rows look like duplicates.
  const auto rank_column = table.column("rank");
  if (!rank_column) {
    return columns;
  }
  struct FirstRank {
    int64_t rank;
    size_t line;
  };
  std::map<int64_t, FirstRank> first_rank;  // by stage
  for (size_t r = 0; r < table.row_count(); ++r) {
    const csv::Table::Row row = table.row(r);
    const auto stage = row.integer(columns.stage);
    if (!stage) {
      continue;  // Profile::parse() names a malformed stage
    }
    const int64_t rank = JOULE_TRY(row.integer(*rank_column));
    const auto [it, inserted] = first_rank.emplace(*stage, FirstRank{rank, row.line()});
    if (!inserted && it->second.rank != rank) {
      return tl::make_unexpected(row.error_at(
          *rank_column,
          fmt::format("stage {} has rows of rank {} and of rank {} (line {}): a plan gives each stage one "
                      "profile, so keep the rows of one rank per stage (e.g. those with dp_rank 0 and "
                      "tp_rank 0)",
                      *stage, rank, it->second.rank, it->second.line)));
    }
  }
  return columns;
}

std::string profile_csv(const Profile& profile) {
  std::ostringstream out;
  csv::write_row(out, {"stage", "instruction", "frequency_mhz", "time_s", "energy_j"});
  for (int stage = 0; stage < profile.stage_count(); ++stage) {
    for (const auto instruction : {Instruction::kForward, Instruction::kBackward}) {
      for (const auto& option : profile.options(stage, instruction)) {
        csv::write_row(out, {std::to_string(stage), std::string(to_string(instruction)),
                             std::to_string(option.frequency_mhz), csv::format_exact(option.time_s),
                             csv::format_exact(option.energy_j)});
      }
    }
  }
  return out.str();
}

Result<Profile> profile_from_rows(const json& rows, int64_t stages) {
  std::vector<std::array<std::vector<ProfileOption>, 2>> options(static_cast<size_t>(stages));
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& row = rows[i];
    const std::string at = fmt::format("rows[{}]", i);
    if (!row.is_object()) {
      return fail(ErrorCode::kInvalidArgument, "{}: must be an object, got {}", at, describe_json(row));
    }
    const auto field = [&](const char* key) -> Result<const json*> {
      const auto found = row.find(key);
      if (found == row.end()) {
        return fail(ErrorCode::kInvalidArgument, "{}.{}: field required", at, key);
      }
      return &*found;
    };
    auto stage = field("stage");
    auto instruction = field("instruction");
    auto frequency = field("frequency_mhz");
    auto time = field("time_s");
    auto energy = field("energy_j");
    for (const auto* value : {&stage, &instruction, &frequency, &time, &energy}) {
      if (!*value) {
        return tl::make_unexpected(value->error());
      }
    }
    if (!(*stage)->is_number_integer() || (*stage)->get<int64_t>() < 0 ||
        (*stage)->get<int64_t>() >= stages) {
      return fail(ErrorCode::kInvalidArgument, "{}.stage: must be an integer in [0, {}), got {}", at, stages,
                  describe_json(**stage));
    }
    if (!(*instruction)->is_string()) {
      return fail(ErrorCode::kInvalidArgument, "{}.instruction: must be \"forward\" or \"backward\", got {}",
                  at, describe_json(**instruction));
    }
    auto parsed_instruction = parse_instruction((*instruction)->get<std::string>());
    if (!parsed_instruction) {
      return fail(ErrorCode::kInvalidArgument, "{}.instruction: {}", at,
                  parsed_instruction.error().message());
    }
    if (!(*frequency)->is_number_integer() || (*frequency)->get<int64_t>() <= 0 ||
        (*frequency)->get<int64_t>() > int64_t{UINT32_MAX}) {
      return fail(ErrorCode::kInvalidArgument, "{}.frequency_mhz: must be a positive integer, got {}", at,
                  describe_json(**frequency));
    }
    for (const auto& [key, value] : {std::pair{"time_s", *time}, std::pair{"energy_j", *energy}}) {
      if (!value->is_number()) {
        return fail(ErrorCode::kInvalidArgument, "{}.{}: must be a number, got {}", at, key,
                    describe_json(*value));
      }
    }
    const size_t slot = *parsed_instruction == Instruction::kForward ? 0 : 1;
    options[static_cast<size_t>((*stage)->get<int64_t>())][slot].push_back(
        {static_cast<uint32_t>((*frequency)->get<int64_t>()), (*time)->get<double>(),
         (*energy)->get<double>()});
  }
  return Profile::from_options(std::move(options));
}

Result<Profile> parse_profile_upload(std::string_view body, std::string_view content_type, int64_t stages) {
  const std::string_view trimmed = trim(body);
  const bool is_json = starts_with_ignoring_case(content_type, "application/json") ||
                       (content_type.empty() && (trimmed.starts_with('{') || trimmed.starts_with('[')));
  if (!is_json) {
    return Profile::parse(body, "profile");
  }
  auto document = parse_json(body);
  if (!document) {
    const JsonError& error = document.error();
    return fail(ErrorCode::kInvalidArgument, "profile: {}{}",
                error.kind == JsonError::Kind::kNumberOutOfRange ? "" : "malformed JSON: ", error.message);
  }
  json& parsed = *document;
  if (parsed.is_object() && parsed.contains("csv")) {
    if (!parsed["csv"].is_string()) {
      return fail(ErrorCode::kInvalidArgument, "csv: must be a string of CSV text");
    }
    return Profile::parse(parsed["csv"].get<std::string>(), "profile");
  }
  const json* rows = parsed.is_array() ? &parsed : nullptr;
  if (parsed.is_object() && parsed.contains("rows")) {
    rows = &parsed["rows"];
  }
  if (rows == nullptr || !rows->is_array()) {
    return fail(
        ErrorCode::kInvalidArgument,
        "profile: expected CSV text, or JSON {{\"csv\": \"…\"}}, {{\"rows\": [...]}} or an array of rows");
  }
  return profile_from_rows(*rows, stages);
}

}  // namespace joule::plan
