// SPDX-License-Identifier: Apache-2.0
// Frontier cards as JSON: written field by field as docs/cards.md lists them, read back through the
// bounded JSON reader with every error naming the card and the field.
#include "joule/probe/card.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/core/file.hpp"
#include "joule/core/json.hpp"
#include "joule/core/json_fields.hpp"
#include "joule/core/strings.hpp"
#include "joule/device/gpu.hpp"

namespace joule::probe {

namespace {

template <class T>
nlohmann::json or_null(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json ranges_json(const DeviceRanges& ranges) {
  return {{"power_limit_min_w", or_null(ranges.power_limit_min_w)},
          {"power_limit_max_w", or_null(ranges.power_limit_max_w)},
          {"power_limit_default_w", or_null(ranges.power_limit_default_w)},
          {"sm_clock_min_mhz", or_null(ranges.sm_clock_min_mhz)},
          {"sm_clock_max_mhz", or_null(ranges.sm_clock_max_mhz)},
          {"sm_clock_count", or_null(ranges.sm_clock_count)},
          {"memory_clock_mhz", or_null(ranges.memory_clock_mhz)},
          {"temperature_c", or_null(ranges.temperature_c)}};
}

nlohmann::json counter_json(const CounterFigures& counter) {
  return {{"has_energy_counter", counter.has_energy_counter},
          {"window_s", counter.window_s},
          {"poll_interval_s", counter.poll_interval_s},
          {"polls", counter.polls},
          {"steps", counter.steps},
          {"update_period_s", or_null(counter.update_period_s)},
          {"counter_energy_j", or_null(counter.counter_energy_j)},
          {"integrated_power_energy_j", counter.integrated_power_energy_j},
          {"error_pct", or_null(counter.error_pct)},
          {"under_load", counter.under_load}};
}

nlohmann::json settle_json(const std::optional<SettleFigures>& settle) {
  if (!settle) {
    return nullptr;
  }
  return {{"from_power_limit_w", settle->from_power_limit_w},
          {"to_power_limit_w", settle->to_power_limit_w},
          {"power_before_w", settle->power_before_w},
          {"power_after_w", settle->power_after_w},
          {"sample_interval_s", settle->sample_interval_s},
          {"window_s", settle->window_s},
          {"time_constant_s", or_null(settle->time_constant_s)},
          {"settled_within_s", settle->settled_within_s}};
}

nlohmann::json frontiers_json(const std::vector<FrontierCurve>& curves) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& curve : curves) {
    nlohmann::json points = nlohmann::json::array();
    for (const auto& row : curve.points) {
      points.push_back({{"knob_value", row.knob_value},
                        {"iterations", row.iterations},
                        {"time_per_iteration_s", row.time_per_iteration_s},
                        {"energy_per_iteration_j", row.energy_per_iteration_j},
                        {"average_power_w", row.average_power_w},
                        {"pareto", row.pareto}});
    }
    out.push_back({{"kernel", curve.kernel}, {"knob", curve.knob}, {"unit", curve.unit}, {"points", points}});
  }
  return out;
}

// --- reading -------------------------------------------------------------------------------------------

// Every field error is kParse and names the path inside the card; parse_card() prefixes the source.
constexpr ErrorCode kCardError = ErrorCode::kParse;

template <class T>
std::optional<T> optional_number(const JsonFields& fields, std::string_view key) {
  const nlohmann::json* value = fields.optional(key);
  if (value == nullptr) {
    if (fields.find(key) == nullptr) {
      fields.require(key);  // throws "field required": null is allowed, absence is not
    }
    return std::nullopt;
  }
  const double number = fields.to_number(*value, fields.where(key));
  if (!std::isfinite(number)) {
    throw_json_field_error(kCardError, fields.where(key), "value is not a finite number");
  }
  if constexpr (std::is_same_v<T, uint32_t>) {
    if (number < 0 || number > 4'294'967'295.0 || number != std::floor(number)) {
      throw_json_field_error(kCardError, fields.where(key), "value is not a whole number in [0, 4294967295]");
    }
    return static_cast<uint32_t>(number);
  } else {
    return number;
  }
}

double finite_number(const JsonFields& fields, std::string_view key) {
  const double number = fields.number(key);
  if (!std::isfinite(number)) {
    throw_json_field_error(kCardError, fields.where(key), "value is not a finite number");
  }
  return number;
}

double non_negative(const JsonFields& fields, std::string_view key) {
  const double number = finite_number(fields, key);
  if (number < 0) {
    throw_json_field_error(kCardError, fields.where(key), fmt::format("must be ≥ 0, got {}", number));
  }
  return number;
}

const nlohmann::json& array_field(const JsonFields& fields, std::string_view key) {
  const nlohmann::json& value = fields.require(key);
  if (!value.is_array()) {
    throw_json_field_error(kCardError, fields.where(key), "value is not a valid list");
  }
  return value;
}

DeviceIdentity read_device(const JsonFields& card) {
  const JsonFields fields(card.require("device"), card.where("device"), kCardError);
  return {fields.string("model"), fields.string("backend"), fields.string("driver_version"),
          fields.string("uuid")};
}

DeviceRanges read_ranges(const JsonFields& card) {
  const JsonFields fields(card.require("ranges"), card.where("ranges"), kCardError);
  DeviceRanges ranges;
  ranges.power_limit_min_w = optional_number<double>(fields, "power_limit_min_w");
  ranges.power_limit_max_w = optional_number<double>(fields, "power_limit_max_w");
  ranges.power_limit_default_w = optional_number<double>(fields, "power_limit_default_w");
  ranges.sm_clock_min_mhz = optional_number<uint32_t>(fields, "sm_clock_min_mhz");
  ranges.sm_clock_max_mhz = optional_number<uint32_t>(fields, "sm_clock_max_mhz");
  ranges.sm_clock_count = optional_number<uint32_t>(fields, "sm_clock_count");
  ranges.memory_clock_mhz = optional_number<uint32_t>(fields, "memory_clock_mhz");
  ranges.temperature_c = optional_number<double>(fields, "temperature_c");
  return ranges;
}

CounterFigures read_counter(const JsonFields& card) {
  const JsonFields fields(card.require("counter"), card.where("counter"), kCardError);
  CounterFigures counter;
  counter.has_energy_counter = fields.boolean("has_energy_counter");
  counter.window_s = non_negative(fields, "window_s");
  counter.poll_interval_s = non_negative(fields, "poll_interval_s");
  counter.polls = fields.integer("polls");
  counter.steps = fields.integer("steps");
  counter.update_period_s = optional_number<double>(fields, "update_period_s");
  counter.counter_energy_j = optional_number<double>(fields, "counter_energy_j");
  counter.integrated_power_energy_j = finite_number(fields, "integrated_power_energy_j");
  counter.error_pct = optional_number<double>(fields, "error_pct");
  counter.under_load = fields.boolean("under_load");
  return counter;
}

std::vector<LatencyFigures> read_latencies(const JsonFields& card) {
  std::vector<LatencyFigures> out;
  const nlohmann::json& list = array_field(card, "latencies");
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonFields fields(list[i], fmt::format("{}[{}]", card.where("latencies"), i), kCardError);
    const int64_t tries = fields.integer("tries");
    if (tries < 1 || tries > 1'000'000) {
      throw_json_field_error(kCardError, fields.where("tries"),
                             fmt::format("must be in [1, 1000000], got {}", tries));
    }
    out.push_back({fields.string("control"), static_cast<int>(tries), non_negative(fields, "median_s"),
                   non_negative(fields, "p99_s"), non_negative(fields, "max_s")});
  }
  return out;
}

std::optional<SettleFigures> read_settle(const JsonFields& card) {
  if (card.optional("settle") == nullptr) {
    card.require("settle");
    return std::nullopt;
  }
  const JsonFields fields(card.require("settle"), card.where("settle"), kCardError);
  SettleFigures settle;
  settle.from_power_limit_w = non_negative(fields, "from_power_limit_w");
  settle.to_power_limit_w = non_negative(fields, "to_power_limit_w");
  settle.power_before_w = finite_number(fields, "power_before_w");
  settle.power_after_w = finite_number(fields, "power_after_w");
  settle.sample_interval_s = non_negative(fields, "sample_interval_s");
  settle.window_s = non_negative(fields, "window_s");
  settle.time_constant_s = optional_number<double>(fields, "time_constant_s");
  settle.settled_within_s = non_negative(fields, "settled_within_s");
  return settle;
}

std::vector<FrontierCurve> read_frontiers(const JsonFields& card) {
  std::vector<FrontierCurve> out;
  const nlohmann::json& list = array_field(card, "frontiers");
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonFields fields(list[i], fmt::format("{}[{}]", card.where("frontiers"), i), kCardError);
    FrontierCurve curve{fields.string("kernel"), fields.string("knob"), fields.string("unit"), {}};
    const nlohmann::json& points = array_field(fields, "points");
    for (size_t j = 0; j < points.size(); ++j) {
      const JsonFields row(points[j], fmt::format("{}[{}]", fields.where("points"), j), kCardError);
      const int64_t iterations = row.integer("iterations");
      if (iterations < 1) {
        throw_json_field_error(kCardError, row.where("iterations"),
                               fmt::format("must be ≥ 1, got {}", iterations));
      }
      curve.points.push_back({finite_number(row, "knob_value"), iterations,
                              non_negative(row, "time_per_iteration_s"),
                              non_negative(row, "energy_per_iteration_j"),
                              non_negative(row, "average_power_w"), row.boolean("pareto")});
    }
    out.push_back(std::move(curve));
  }
  return out;
}

std::vector<Skipped> read_skipped(const JsonFields& card) {
  std::vector<Skipped> out;
  const nlohmann::json& list = array_field(card, "skipped");
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonFields fields(list[i], fmt::format("{}[{}]", card.where("skipped"), i), kCardError);
    out.push_back({fields.string("what"), fields.string("why")});
  }
  return out;
}

// "line L, column C" of a byte offset, for a syntax error.
std::string line_and_column(std::string_view text, size_t byte) {
  byte = std::min(byte, text.size());
  const std::string_view before = text.substr(0, byte);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t last_newline = before.rfind('\n');
  const size_t column = last_newline == std::string_view::npos ? byte + 1 : byte - last_newline;
  return fmt::format("line {}, column {}", line, column);
}

std::string describe_device(const std::string& model, const std::string& driver) {
  return driver.empty()
             ? printable_excerpt(model, 120)
             : fmt::format("{} (driver {})", printable_excerpt(model, 120), printable_excerpt(driver, 60));
}

}  // namespace

nlohmann::json card_to_json(const Card& card) {
  nlohmann::json latencies = nlohmann::json::array();
  for (const auto& latency : card.latencies) {
    latencies.push_back({{"control", latency.control},
                         {"tries", latency.tries},
                         {"median_s", latency.median_s},
                         {"p99_s", latency.p99_s},
                         {"max_s", latency.max_s}});
  }
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& entry : card.skipped) {
    skipped.push_back({{"what", entry.what}, {"why", entry.why}});
  }
  return {{"schema_version", card.schema_version},
          {"joule_version", card.joule_version},
          {"created_utc", card.created_utc},
          {"read_only", card.read_only},
          {"quick", card.quick},
          {"device",
           {{"model", card.device.model},
            {"backend", card.device.backend},
            {"driver_version", card.device.driver_version},
            {"uuid", card.device.uuid}}},
          {"kernel_runner", card.kernel_runner},
          {"ranges", ranges_json(card.ranges)},
          {"counter", counter_json(card.counter)},
          {"latencies", latencies},
          {"settle", settle_json(card.settle)},
          {"frontiers", frontiers_json(card.frontiers)},
          {"skipped", skipped}};
}

std::string render_card(const Card& card) {
  return card_to_json(card).dump(2) + "\n";
}

Result<Card> parse_card(std::string_view text, std::string_view source) {
  auto parsed = parse_json(text);
  if (!parsed) {
    const JsonError& error = parsed.error();
    if (error.kind == JsonError::Kind::kSyntax) {
      return fail(ErrorCode::kParse, "{}: {}: not a card: {}", source, line_and_column(text, error.byte),
                  describe_json_error(error, text));
    }
    return fail(ErrorCode::kParse, "{}: not a card: it {}", source, describe_json_error(error, text));
  }
  const nlohmann::json& json = *parsed;
  auto card = catch_json_fields<Card>([&]() -> Card {
    const JsonFields fields(json, "", kCardError);
    Card out;
    const int64_t version = fields.integer("schema_version");
    if (version > kCardSchemaVersion) {
      throw Exception(kCardError, fmt::format("card schema version {} is newer than this joule reads ({}): "
                                              "upgrade joule to read it",
                                              version, kCardSchemaVersion));
    }
    if (version < 1) {
      throw_json_field_error(kCardError, "schema_version", fmt::format("must be ≥ 1, got {}", version));
    }
    out.schema_version = static_cast<int>(version);
    out.joule_version = fields.string("joule_version");
    out.created_utc = fields.string("created_utc");
    out.read_only = fields.boolean("read_only");
    out.quick = fields.boolean("quick");
    out.device = read_device(fields);
    out.kernel_runner = fields.string("kernel_runner");
    out.ranges = read_ranges(fields);
    out.counter = read_counter(fields);
    out.latencies = read_latencies(fields);
    out.settle = read_settle(fields);
    out.frontiers = read_frontiers(fields);
    out.skipped = read_skipped(fields);
    return out;
  });
  if (!card) {
    return fail(ErrorCode::kParse, "{}: {}", source, card.error().message());
  }
  return card;
}

Result<void> check_card_for(const Card& card, const DeviceIdentity& device, std::string_view source) {
  const bool same_model = card.device.model == device.model;
  const bool same_driver = card.device.driver_version.empty() || device.driver_version.empty() ||
                           card.device.driver_version == device.driver_version;
  if (!same_model || !same_driver) {
    return fail(ErrorCode::kInvalidArgument,
                "{} is for {}, not {}: make a card for this device with 'joule probe'", source,
                describe_device(card.device.model, card.device.driver_version),
                describe_device(device.model, device.driver_version));
  }
  return {};
}

Result<Card> read_card(const std::string& path, const DeviceIdentity& device) {
  static constexpr ReadLimit kCardLimit{"frontier card", 16 * read_limits::kMib};
  const std::string text = JOULE_TRY(read_text_file(path, kCardLimit));
  Card card = JOULE_TRY(parse_card(text, path));
  JOULE_TRY(check_card_for(card, device, path));
  return card;
}

DeviceIdentity card_identity_of(const device::GpuInfo& gpu) {
  return {gpu.name, gpu.backend, gpu.backend == "sim" ? "sim" : "", gpu.uuid};
}

}  // namespace joule::probe
