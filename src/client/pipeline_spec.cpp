// SPDX-License-Identifier: Apache-2.0
#include "joule/client/pipeline_spec.hpp"

#include <cmath>

#include <fmt/format.h>

#include "joule/core/json.hpp"
#include "joule/core/validate.hpp"

namespace joule::client {

namespace {

using nlohmann::json;

constexpr size_t kMaxIdLength = 200;

tl::unexpected<Error> invalid(std::string_view field, std::string_view problem) {
  return fail(ErrorCode::kInvalidArgument, "{}: {}", field, problem);
}

}  // namespace

Result<void> validate_id(std::string_view id, std::string_view field) {
  if (id.empty() || id.size() > kMaxIdLength) {
    return invalid(field, fmt::format("must be 1 to {} characters, got {}", kMaxIdLength, id.size()));
  }
  for (const char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) {
      return invalid(field, fmt::format("'{}' may only hold letters, digits, '.', '_' and '-'", id));
    }
  }
  return {};
}

json PipelineSpec::to_json() const {
  return json{{"pipeline_id", pipeline_id ? json(*pipeline_id) : json(nullptr)},
              {"pipeline_id_prefix", pipeline_id_prefix},
              {"stages", stages},
              {"microbatches", microbatches},
              {"schedule", plan::to_string(schedule)},
              {"p_blocking_w", p_blocking_w},
              {"unit_time_s", unit_time_s}};
}

Result<PipelineSpec> PipelineSpec::from_json(const json& value) {
  if (!value.is_object()) {
    return fail(ErrorCode::kInvalidArgument, "the pipeline must be a JSON object");
  }
  PipelineSpec spec;
  const auto integer = [&](const char* key, int64_t& out, bool required) -> Result<void> {
    const auto found = value.find(key);
    if (found == value.end() || found->is_null()) {
      return required ? invalid(key, "field required") : Result<void>{};
    }
    if (!found->is_number_integer()) {
      return invalid(key, fmt::format("must be an integer, got {}", describe_json(*found)));
    }
    out = found->get<int64_t>();
    if (out < 1) {
      return invalid(key, fmt::format("must be at least 1, got {}", out));
    }
    return {};
  };
  const auto number = [&](const char* key, double& out) -> Result<void> {
    const auto found = value.find(key);
    if (found == value.end() || found->is_null()) {
      return {};
    }
    if (!found->is_number()) {
      return invalid(key, fmt::format("must be a number, got {}", describe_json(*found)));
    }
    out = found->get<double>();
    return {};
  };
  const auto text = [&](const char* key, std::optional<std::string>& out) -> Result<void> {
    const auto found = value.find(key);
    if (found == value.end() || found->is_null()) {
      return {};
    }
    if (!found->is_string()) {
      return invalid(key, fmt::format("must be a string, got {}", describe_json(*found)));
    }
    out = found->get<std::string>();
    return {};
  };
  std::optional<std::string> prefix;
  std::optional<std::string> schedule;
  for (auto step : {integer("stages", spec.stages, true), integer("microbatches", spec.microbatches, true),
                    number("p_blocking_w", spec.p_blocking_w), number("unit_time_s", spec.unit_time_s),
                    text("pipeline_id", spec.pipeline_id), text("pipeline_id_prefix", prefix),
                    text("schedule", schedule)}) {
    if (!step) {
      return tl::make_unexpected(step.error());
    }
  }
  if (prefix) {
    spec.pipeline_id_prefix = *prefix;
  }
  JOULE_TRY(validate_id(spec.pipeline_id_prefix, "pipeline_id_prefix"));
  if (spec.pipeline_id) {
    JOULE_TRY(validate_id(*spec.pipeline_id, "pipeline_id"));
    if (!spec.pipeline_id->starts_with(spec.pipeline_id_prefix)) {
      return invalid("pipeline_id", fmt::format("'{}' does not start with the prefix '{}'", *spec.pipeline_id,
                                                spec.pipeline_id_prefix));
    }
  }
  if (schedule) {
    auto parsed = plan::parse_schedule(*schedule);
    if (!parsed) {
      return invalid("schedule", parsed.error().message());
    }
    spec.schedule = *parsed;
  }
  // The same rules as the CLI's --p-blocking-w and --unit-time-s (joule/core/validate.hpp).
  if (const auto checked = check_number(spec.p_blocking_w, NumberRule::non_negative(), ""); !checked) {
    return invalid("p_blocking_w", checked.error().message());
  }
  if (const auto checked = check_number(spec.unit_time_s, NumberRule::positive(), ""); !checked) {
    return invalid("unit_time_s", checked.error().message());
  }
  return spec;
}

}  // namespace joule::client
