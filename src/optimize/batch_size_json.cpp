// SPDX-License-Identifier: Apache-2.0
// JSON for the batch-size optimizer: Zeus's wire objects (field names as Zeus's pydantic models) and the
// complete job state (docs/batch_size.md, "State format").
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "joule/core/json_fields.hpp"
#include "joule/optimize/batch_size.hpp"

#include "optimize/batch_size_internal.hpp"

namespace joule::optimize::batch_size {

namespace {

using nlohmann::json;

constexpr std::string_view kStateFormat = "joule.optimize.batch_size.job";

// Zeus's wire objects are read with pydantic's wording (joule/core/json_fields.hpp).
using Reader = JsonFields;

[[noreturn]] void bad(ErrorCode code, const std::string& where, std::string_view message) {
  throw_json_field_error(code, where, message);
}

template <class T, class Parse>
Result<T> catching(Parse&& parse) {
  return catch_json_fields<T>(std::forward<Parse>(parse));
}

// Non-finite doubles (an arm's infinite precision) as strings: JSON has no number for them, and nlohmann
// would otherwise write null.
json encode_double(double value) {
  if (std::isfinite(value)) {
    return value;
  }
  if (std::isnan(value)) {
    return "nan";
  }
  return value > 0 ? "inf" : "-inf";
}

double decode_double(const Reader& reader, std::string_view key) {
  const json& value = reader.require(key);
  if (value.is_string()) {
    const auto text = value.get<std::string>();
    if (text == "inf") {
      return std::numeric_limits<double>::infinity();
    }
    if (text == "-inf") {
      return -std::numeric_limits<double>::infinity();
    }
    if (text == "nan") {
      return std::numeric_limits<double>::quiet_NaN();
    }
    bad(reader.code(), reader.where(key),
        fmt::format("expected a number or \"inf\", \"-inf\", \"nan\", got \"{}\"", text));
  }
  return reader.to_number(value, reader.where(key));
}

std::string u128_to_string(rng::Uint128 value) {
  if (value == 0) {
    return "0";
  }
  std::string digits;
  while (value != 0) {
    digits.push_back(static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  }
  std::reverse(digits.begin(), digits.end());
  return digits;
}

rng::Uint128 u128_from_string(const Reader& reader, const json& value, const std::string& at) {
  const std::string text = reader.to_string_value(value, at);
  if (text.empty() || text.size() > 39) {
    bad(reader.code(), at, fmt::format("\"{}\" is not a 128-bit unsigned decimal integer", text));
  }
  rng::Uint128 result = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') {
      bad(reader.code(), at, fmt::format("\"{}\" is not a 128-bit unsigned decimal integer", text));
    }
    const rng::Uint128 digit = static_cast<rng::Uint128>(c - '0');
    const rng::Uint128 max = ~rng::Uint128{0};
    if (result > (max - digit) / 10) {
      bad(reader.code(), at, fmt::format("\"{}\" is not a 128-bit unsigned decimal integer", text));
    }
    result = result * 10 + digit;
  }
  return result;
}

rng::Uint128 join128(uint64_t high, uint64_t low) {
  return (static_cast<rng::Uint128>(high) << 64) | low;
}

template <class Enum, size_t N>
Enum parse_enum(const Reader& reader, std::string_view key, const std::array<Enum, N>& values) {
  const std::string text = reader.string(key);
  std::string names;
  for (const Enum value : values) {
    if (text == to_string(value)) {
      return value;
    }
    names += names.empty() ? "" : ", ";
    names += to_string(value);
  }
  bad(reader.code(), reader.where(key), fmt::format("expected one of {}, got \"{}\"", names, text));
}

JobSpec parse_spec(const json& value, const std::string& path, ErrorCode code) {
  const Reader reader(value, path, code);
  JobSpec spec;
  if (const json* job_id = reader.optional("job_id")) {
    spec.job_id = reader.to_string_value(*job_id, reader.where("job_id"));
  }
  spec.job_id_prefix = reader.string("job_id_prefix");
  const json& batch_sizes = reader.require("batch_sizes");
  if (!batch_sizes.is_array()) {
    bad(code, reader.where("batch_sizes"),
        batch_sizes.is_null() ? "none is not an allowed value" : "value is not a valid list");
  }
  for (size_t i = 0; i < batch_sizes.size(); ++i) {
    spec.batch_sizes.push_back(
        reader.to_integer(batch_sizes[i], fmt::format("{}[{}]", reader.where("batch_sizes"), i)));
  }
  std::sort(spec.batch_sizes.begin(), spec.batch_sizes.end());  // Zeus's validator sorts them
  spec.default_batch_size = reader.integer("default_batch_size");
  // Optional fields: absent means the default; null is allowed only where Zeus's type is Optional.
  if (reader.find("eta_knob")) {
    spec.eta_knob = reader.number("eta_knob");
  }
  if (const json* beta = reader.find("beta_knob")) {
    spec.beta_knob =
        beta->is_null() ? std::nullopt : std::optional(reader.to_number(*beta, reader.where("beta_knob")));
  }
  if (reader.find("target_metric")) {
    spec.target_metric = reader.number("target_metric");
  }
  if (reader.find("higher_is_better_metric")) {
    spec.higher_is_better_metric = reader.boolean("higher_is_better_metric");
  }
  if (reader.find("max_epochs")) {
    spec.max_epochs = reader.integer("max_epochs");
  }
  if (reader.find("num_pruning_rounds")) {
    spec.num_pruning_rounds = reader.integer("num_pruning_rounds");
  }
  if (reader.find("window_size")) {
    spec.window_size = reader.integer("window_size");
  }
  if (reader.find("mab_prior_mean")) {
    spec.mab_prior_mean = reader.number("mab_prior_mean");
  }
  if (reader.find("mab_prior_precision")) {
    spec.mab_prior_precision = reader.number("mab_prior_precision");
  }
  if (reader.find("mab_num_explorations")) {
    spec.mab_num_explorations = reader.integer("mab_num_explorations");
  }
  if (const json* seed = reader.optional("mab_seed")) {
    const std::string at = reader.where("mab_seed");
    if (seed->is_number_unsigned()) {
      spec.mab_seed = seed->get<uint64_t>();
    } else if (seed->is_number_integer()) {
      if (seed->get<int64_t>() < 0) {
        // numpy rejects negative seeds too ("expected non-negative integer").
        bad(code, at, "ensure this value is greater than or equal to 0");
      }
      spec.mab_seed = static_cast<uint64_t>(seed->get<int64_t>());
    } else {
      bad(code, at, "value is not a valid integer");
    }
  }
  if (auto valid = validate(spec); !valid) {
    bad(code, path, valid.error().message());
  }
  return spec;
}

GpuConfig parse_gpu(const json& value, const std::string& path, ErrorCode code) {
  const Reader reader(value, path, code);
  GpuConfig gpu;
  gpu.max_power = reader.number("max_power");
  gpu.number_of_gpus = reader.integer("number_of_gpus");
  gpu.gpu_model = reader.string("gpu_model");
  if (auto valid = validate(gpu); !valid) {
    bad(code, path, valid.error().message());
  }
  return gpu;
}

}  // namespace

// ---- Wire objects ---------------------------------------------------------------------------------------

json JobSpec::to_json() const {
  return json{
      {"job_id", job_id ? json(*job_id) : json(nullptr)},
      {"job_id_prefix", job_id_prefix},
      {"batch_sizes", batch_sizes},
      {"default_batch_size", default_batch_size},
      {"eta_knob", eta_knob},
      {"beta_knob", beta_knob ? json(*beta_knob) : json(nullptr)},
      {"target_metric", target_metric},
      {"higher_is_better_metric", higher_is_better_metric},
      {"max_epochs", max_epochs},
      {"num_pruning_rounds", num_pruning_rounds},
      {"window_size", window_size},
      {"mab_prior_mean", mab_prior_mean},
      {"mab_prior_precision", mab_prior_precision},
      {"mab_num_explorations", mab_num_explorations},
      {"mab_seed", mab_seed ? json(*mab_seed) : json(nullptr)},
  };
}

Result<JobSpec> JobSpec::from_json(const json& value) {
  return catching<JobSpec>([&] { return parse_spec(value, "", ErrorCode::kInvalidArgument); });
}

json GpuConfig::to_json() const {
  return json{{"max_power", max_power}, {"number_of_gpus", number_of_gpus}, {"gpu_model", gpu_model}};
}

Result<GpuConfig> GpuConfig::from_json(const json& value) {
  return catching<GpuConfig>([&] { return parse_gpu(value, "", ErrorCode::kInvalidArgument); });
}

json TrialId::to_json() const {
  return json{{"job_id", job_id}, {"batch_size", batch_size}, {"trial_number", trial_number}};
}

// A job id from a request: at most kMaxJobIdLength characters (Zeus's column), so that no message echoes
// more.
std::string wire_job_id(const Reader& reader) {
  std::string job_id = reader.string("job_id");
  if (job_id.size() > kMaxJobIdLength) {
    bad(reader.code(), "job_id", fmt::format("ensure this value has at most {} characters", kMaxJobIdLength));
  }
  return job_id;
}

Result<TrialId> TrialId::from_json(const json& value) {
  return catching<TrialId>([&] {
    const Reader reader(value, "", ErrorCode::kInvalidArgument);
    std::string job_id = wire_job_id(reader);
    return TrialId{std::move(job_id), reader.integer("batch_size"), reader.integer("trial_number")};
  });
}

json TrainingResult::to_json() const {
  return json{
      {"job_id", job_id},   {"batch_size", batch_size}, {"trial_number", trial_number},  {"time", time_s},
      {"energy", energy_j}, {"metric", metric},         {"current_epoch", current_epoch}};
}

Result<TrainingResult> TrainingResult::from_json(const json& value) {
  return catching<TrainingResult>([&] {
    const Reader reader(value, "", ErrorCode::kInvalidArgument);
    TrainingResult result;
    result.job_id = wire_job_id(reader);
    result.batch_size = reader.integer("batch_size");
    result.trial_number = reader.integer("trial_number");
    result.time_s = reader.number("time");
    result.energy_j = reader.number("energy");
    result.metric = reader.number("metric");
    result.current_epoch = reader.integer("current_epoch");
    return result;
  });
}

json ReportResponse::to_json() const {
  return json{{"stop_train", stop_train}, {"converged", converged}, {"message", message}};
}

Result<ReportResponse> ReportResponse::from_json(const json& value) {
  return catching<ReportResponse>([&] {
    const Reader reader(value, "", ErrorCode::kInvalidArgument);
    return ReportResponse{reader.boolean("stop_train"), reader.boolean("converged"),
                          reader.string("message")};
  });
}

// ---- Job state ------------------------------------------------------------------------------------------

namespace {

constexpr std::string_view kJobStateFormat = "joule.optimize.batch_size.job_state";

Trial parse_trial(const json& value, const std::vector<int64_t>& batch_sizes, const std::string& at) {
  constexpr ErrorCode kCode = ErrorCode::kParse;
  const Reader reader(value, at, kCode);
  Trial trial;
  trial.trial_number = reader.integer("trial_number");
  if (trial.trial_number < 1) {
    bad(kCode, reader.where("trial_number"), fmt::format("must be >= 1, got {}", trial.trial_number));
  }
  trial.batch_size = reader.integer("batch_size");
  if (!std::binary_search(batch_sizes.begin(), batch_sizes.end(), trial.batch_size)) {
    bad(kCode, reader.where("batch_size"),
        fmt::format("batch size {} is not one of the job's batch sizes {}", trial.batch_size,
                    detail::python_int_list(batch_sizes)));
  }
  trial.type = parse_enum(reader, "type",
                          std::array{TrialType::kExploration, TrialType::kConcurrent, TrialType::kMab});
  trial.status = parse_enum(
      reader, "status", std::array{TrialStatus::kDispatched, TrialStatus::kSucceeded, TrialStatus::kFailed});
  trial.start_unix_ns = reader.integer("start_timestamp_unix_ns");
  if (const json* end = reader.optional("end_timestamp_unix_ns")) {
    trial.end_unix_ns = reader.to_integer(*end, reader.where("end_timestamp_unix_ns"));
    if (*trial.end_unix_ns < trial.start_unix_ns) {
      bad(kCode, reader.where("end_timestamp_unix_ns"),
          fmt::format("{} is before the start {}", *trial.end_unix_ns, trial.start_unix_ns));
    }
  }
  if (const json* time = reader.optional("time")) {
    trial.time_s = reader.to_number(*time, reader.where("time"));
    if (!(std::isfinite(*trial.time_s) && *trial.time_s >= 0)) {
      bad(kCode, reader.where("time"), "must be a finite number >= 0");
    }
  }
  if (const json* energy = reader.optional("energy")) {
    trial.energy_j = reader.to_number(*energy, reader.where("energy"));
    if (!(std::isfinite(*trial.energy_j) && *trial.energy_j >= 0)) {
      bad(kCode, reader.where("energy"), "must be a finite number >= 0");
    }
  }
  if (const json* converged = reader.optional("converged")) {
    trial.converged = reader.to_boolean(*converged, reader.where("converged"));
  }
  const bool has_result = trial.time_s || trial.energy_j || trial.converged;
  const bool full_result = trial.time_s && trial.energy_j && trial.converged;
  if (trial.status == TrialStatus::kSucceeded) {
    if (!full_result || !trial.end_unix_ns) {
      bad(kCode, at, "a Succeeded trial needs time, energy, converged and end_timestamp_unix_ns");
    }
  } else {
    if (has_result) {
      bad(kCode, at, fmt::format("a {} trial has no time, energy or converged", to_string(trial.status)));
    }
    if ((trial.status == TrialStatus::kFailed) != trial.end_unix_ns.has_value()) {
      bad(kCode, at, "end_timestamp_unix_ns must be set exactly when the trial is not Dispatched");
    }
  }
  return trial;
}

json rng_to_json(const rng::Pcg64::State& state) {
  // numpy's `bit_generator.state` layout, with the 128-bit integers as decimal strings.
  return json{
      {"bit_generator", "PCG64"},
      {"state",
       {{"state", u128_to_string(join128(state.state_high, state.state_low))},
        {"inc", u128_to_string(join128(state.increment_high, state.increment_low))}}},
      {"has_uint32", state.has_uint32 ? 1 : 0},
      {"uinteger", state.uinteger},
  };
}

rng::Pcg64::State parse_rng(const Reader& top) {
  constexpr ErrorCode kCode = ErrorCode::kParse;
  const Reader generator(top.require("rng"), "rng", kCode);
  if (const std::string name = generator.string("bit_generator"); name != "PCG64") {
    bad(kCode, "rng.bit_generator", fmt::format("expected \"PCG64\", got \"{}\"", name));
  }
  const Reader words(generator.require("state"), "rng.state", kCode);
  const rng::Uint128 lcg_state = u128_from_string(words, words.require("state"), "rng.state.state");
  const rng::Uint128 increment = u128_from_string(words, words.require("inc"), "rng.state.inc");
  if ((increment & 1) == 0) {
    bad(kCode, "rng.state.inc", "PCG64's increment must be odd");
  }
  rng::Pcg64::State rng_state;
  rng_state.state_high = static_cast<uint64_t>(lcg_state >> 64);
  rng_state.state_low = static_cast<uint64_t>(lcg_state);
  rng_state.increment_high = static_cast<uint64_t>(increment >> 64);
  rng_state.increment_low = static_cast<uint64_t>(increment);
  const json& has_uint32 = generator.require("has_uint32");
  if (has_uint32.is_boolean()) {
    rng_state.has_uint32 = has_uint32.get<bool>();
  } else {
    const int64_t flag = generator.to_integer(has_uint32, "rng.has_uint32");
    if (flag != 0 && flag != 1) {
      bad(kCode, "rng.has_uint32", fmt::format("expected 0 or 1, got {}", flag));
    }
    rng_state.has_uint32 = flag == 1;
  }
  const int64_t uinteger = generator.integer("uinteger");
  if (uinteger < 0 || uinteger > static_cast<int64_t>(UINT32_MAX)) {
    bad(kCode, "rng.uinteger", fmt::format("{} is not a 32-bit unsigned integer", uinteger));
  }
  rng_state.uinteger = static_cast<uint32_t>(uinteger);
  return rng_state;
}

json arms_to_json(const std::vector<ArmState>& arms) {
  json out = json::array();
  for (const ArmState& arm : arms) {
    out.push_back(json{
        {"batch_size", arm.batch_size},
        {"param_mean", encode_double(arm.param_mean)},
        {"param_precision", encode_double(arm.param_precision)},
        {"reward_precision", encode_double(arm.reward_precision)},
        {"num_observations", arm.num_observations},
    });
  }
  return out;
}

std::vector<ArmState> parse_arms(const Reader& top, const std::vector<int64_t>& batch_sizes, Stage stage) {
  constexpr ErrorCode kCode = ErrorCode::kParse;
  const json& arms = top.require("arms");
  if (!arms.is_array()) {
    bad(kCode, "arms", "value is not a valid list");
  }
  std::vector<ArmState> out;
  for (size_t i = 0; i < arms.size(); ++i) {
    const Reader reader(arms[i], fmt::format("arms[{}]", i), kCode);
    ArmState arm;
    arm.batch_size = reader.integer("batch_size");
    if (!std::binary_search(batch_sizes.begin(), batch_sizes.end(), arm.batch_size)) {
      bad(kCode, reader.where("batch_size"),
          fmt::format("batch size {} is not one of the job's batch sizes {}", arm.batch_size,
                      detail::python_int_list(batch_sizes)));
    }
    if (!out.empty() && arm.batch_size <= out.back().batch_size) {
      bad(kCode, reader.where("batch_size"), "arms must be sorted by batch size, each batch size once");
    }
    arm.param_mean = decode_double(reader, "param_mean");
    arm.param_precision = decode_double(reader, "param_precision");
    arm.reward_precision = decode_double(reader, "reward_precision");
    arm.num_observations = reader.integer("num_observations");
    if (std::isnan(arm.param_mean)) {
      bad(kCode, reader.where("param_mean"), "must be a number");
    }
    if (!(arm.param_precision > 0)) {
      bad(kCode, reader.where("param_precision"), "must be > 0 (or \"inf\")");
    }
    if (!(arm.reward_precision > 0)) {
      bad(kCode, reader.where("reward_precision"), "must be > 0 (or \"inf\")");
    }
    if (arm.num_observations < 1) {
      bad(kCode, reader.where("num_observations"), "must be >= 1 (arms are fitted on at least one result)");
    }
    out.push_back(arm);
  }
  if (stage == Stage::kPruning && !out.empty()) {
    bad(kCode, "arms", "must be empty in the Pruning stage");
  }
  if (stage == Stage::kMab && out.empty()) {
    bad(kCode, "arms", "must not be empty in the MAB stage");
  }
  return out;
}

// The fields both formats share: the state up to its trials (format and version checked by the caller).
struct CommonState {
  JobSpec spec;
  GpuConfig gpu;
  rng::Pcg64::State rng;
  Stage stage = Stage::kPruning;
  std::optional<double> min_cost;
  int64_t min_cost_batch_size = 0;
  int64_t exp_default_batch_size = 0;
};

CommonState parse_common(const Reader& top) {
  constexpr ErrorCode kCode = ErrorCode::kParse;
  CommonState out;
  out.spec = parse_spec(top.require("spec"), "spec", kCode);
  if (!out.spec.job_id) {
    bad(kCode, "spec.job_id", "a stored job must have a job id");
  }
  out.gpu = parse_gpu(top.require("gpu"), "gpu", kCode);
  const std::vector<int64_t>& batch_sizes = out.spec.batch_sizes;  // sorted
  const auto check_batch_size = [&](int64_t batch_size, const std::string& at) {
    if (!std::binary_search(batch_sizes.begin(), batch_sizes.end(), batch_size)) {
      bad(kCode, at,
          fmt::format("batch size {} is not one of the job's batch sizes {}", batch_size,
                      detail::python_int_list(batch_sizes)));
    }
  };
  out.rng = parse_rng(top);
  out.stage = parse_enum(top, "stage", std::array{Stage::kPruning, Stage::kMab});
  if (const json* min_cost = top.optional("min_cost")) {
    const double value = top.to_number(*min_cost, "min_cost");
    if (!(std::isfinite(value) && value >= 0)) {
      bad(kCode, "min_cost", "must be a finite number >= 0");
    }
    out.min_cost = value;
  }
  out.min_cost_batch_size = top.integer("min_cost_batch_size");
  check_batch_size(out.min_cost_batch_size, "min_cost_batch_size");
  out.exp_default_batch_size = top.integer("exp_default_batch_size");
  check_batch_size(out.exp_default_batch_size, "exp_default_batch_size");
  return out;
}

void check_default_until_success(const CommonState& common) {
  if (!common.min_cost && common.min_cost_batch_size != common.spec.default_batch_size) {
    bad(ErrorCode::kParse, "min_cost_batch_size", "must be the default batch size until a trial succeeded");
  }
}

void check_trial_against_arms(const Trial& trial, Stage stage, const std::vector<ArmState>& arms,
                              const std::string& at) {
  constexpr ErrorCode kCode = ErrorCode::kParse;
  if (trial.type == TrialType::kMab && stage != Stage::kMab) {
    bad(kCode, at, "a MAB trial in a job still in the Pruning stage");
  }
  if (trial.type == TrialType::kMab && std::none_of(arms.begin(), arms.end(), [&](const ArmState& arm) {
        return arm.batch_size == trial.batch_size;
      })) {
    bad(kCode, at + ".batch_size",
        fmt::format("MAB trial with batch size {}, which is not an arm", trial.batch_size));
  }
}

}  // namespace

json Trial::to_json() const {
  return json{
      {"trial_number", trial_number},
      {"batch_size", batch_size},
      {"type", to_string(type)},
      {"status", to_string(status)},
      {"start_timestamp_unix_ns", start_unix_ns},
      {"end_timestamp_unix_ns", end_unix_ns ? json(*end_unix_ns) : json(nullptr)},
      {"time", time_s ? json(*time_s) : json(nullptr)},
      {"energy", energy_j ? json(*energy_j) : json(nullptr)},
      {"converged", converged ? json(*converged) : json(nullptr)},
  };
}

Result<Trial> Trial::from_json(const json& value, const std::vector<int64_t>& batch_sizes,
                               std::string_view where) {
  return catching<Trial>([&] { return parse_trial(value, batch_sizes, std::string(where)); });
}

json JobState::to_json() const {
  json explorations = json::array();
  for (const Trial& trial : explorations_) {
    explorations.push_back(trial.to_json());
  }
  return json{
      {"format", kJobStateFormat},
      {"version", kStateVersion},
      {"spec", spec_.to_json()},
      {"gpu", gpu_.to_json()},
      {"stage", to_string(stage_)},
      {"min_cost", min_cost_ ? json(*min_cost_) : json(nullptr)},
      {"min_cost_batch_size", min_cost_batch_size_},
      {"exp_default_batch_size", exp_default_batch_size_},
      {"counts",
       {{"trials", trial_count_},
        {"dispatched", dispatched_count_},
        {"succeeded", succeeded_count_},
        {"failed", failed_count_}}},
      {"explorations", std::move(explorations)},
      {"arms", arms_to_json(arms_)},
      {"rng", rng_to_json(rng_state())},
  };
}

Result<JobState> JobState::from_json(const json& state) {
  return catching<JobState>([&]() -> JobState {
    constexpr ErrorCode kCode = ErrorCode::kParse;
    const Reader top(state, "", kCode);
    if (const std::string format = top.string("format"); format != kJobStateFormat) {
      bad(kCode, "format", fmt::format("expected \"{}\", got \"{}\"", kJobStateFormat, format));
    }
    if (const int64_t version = top.integer("version"); version != kStateVersion) {
      bad(kCode, "version",
          fmt::format("job state version {} is not supported (this build reads version {})", version,
                      kStateVersion));
    }
    CommonState common = parse_common(top);
    check_default_until_success(common);
    JobState job(common.spec, common.gpu, common.rng);
    job.stage_ = common.stage;
    job.min_cost_ = common.min_cost;
    job.min_cost_batch_size_ = common.min_cost_batch_size;
    job.exp_default_batch_size_ = common.exp_default_batch_size;
    job.arms_ = parse_arms(top, job.spec_.batch_sizes, job.stage_);

    const Reader counts(top.require("counts"), "counts", kCode);
    job.trial_count_ = counts.integer("trials");
    job.dispatched_count_ = counts.integer("dispatched");
    job.succeeded_count_ = counts.integer("succeeded");
    job.failed_count_ = counts.integer("failed");
    if (job.trial_count_ < 0 || job.dispatched_count_ < 0 || job.succeeded_count_ < 0 ||
        job.failed_count_ < 0 ||
        job.dispatched_count_ + job.succeeded_count_ + job.failed_count_ != job.trial_count_) {
      bad(kCode, "counts",
          fmt::format("dispatched {} + succeeded {} + failed {} must be the {} trials, none negative",
                      job.dispatched_count_, job.succeeded_count_, job.failed_count_, job.trial_count_));
    }
    if (job.succeeded_count_ > 0 && !job.min_cost_) {
      bad(kCode, "min_cost", "must be set once a trial succeeded");
    }
    const json& explorations = top.require("explorations");
    if (!explorations.is_array()) {
      bad(kCode, "explorations", "value is not a valid list");
    }
    for (size_t i = 0; i < explorations.size(); ++i) {
      const std::string at = fmt::format("explorations[{}]", i);
      Trial trial = parse_trial(explorations[i], job.spec_.batch_sizes, at);
      if (trial.type != TrialType::kExploration || trial.status == TrialStatus::kFailed) {
        bad(kCode, at, "explorations holds the Exploration trials that did not fail");
      }
      check_trial_against_arms(trial, job.stage_, job.arms_, at);
      if (trial.trial_number > job.trial_count_ ||
          (!job.explorations_.empty() && trial.trial_number <= job.explorations_.back().trial_number)) {
        bad(kCode, at + ".trial_number",
            fmt::format("{} is out of order or beyond the {} trials", trial.trial_number, job.trial_count_));
      }
      job.explorations_.push_back(trial);
    }
    return job;
  });
}

json BatchSizeJob::to_json() const {
  json trials = json::array();
  for (const Trial& trial : log_.trials()) {
    trials.push_back(trial.to_json());
  }
  const JobState& state = state_;
  return json{
      {"format", kStateFormat},
      {"version", kStateVersion},
      {"spec", state.spec().to_json()},
      {"gpu", state.gpu().to_json()},
      {"stage", to_string(state.stage())},
      {"min_cost", state.min_cost() ? json(*state.min_cost()) : json(nullptr)},
      {"min_cost_batch_size", state.min_cost_batch_size()},
      {"exp_default_batch_size", state.exp_default_batch_size()},
      {"trials", std::move(trials)},
      {"arms", arms_to_json(state.arms())},
      {"rng", rng_to_json(state.rng_state())},
  };
}

Result<BatchSizeJob> BatchSizeJob::assemble(JobState state, std::vector<Trial> trials) {
  JobState derived = state;
  derived.trial_count_ = static_cast<int64_t>(trials.size());
  derived.dispatched_count_ = 0;
  derived.succeeded_count_ = 0;
  derived.failed_count_ = 0;
  derived.explorations_.clear();
  for (size_t i = 0; i < trials.size(); ++i) {
    const Trial& trial = trials[i];
    if (trial.trial_number != static_cast<int64_t>(i) + 1) {
      return fail(ErrorCode::kParse, "trials[{}].trial_number: expected {}, got {}", i, i + 1,
                  trial.trial_number);
    }
    derived.dispatched_count_ += trial.status == TrialStatus::kDispatched ? 1 : 0;
    derived.succeeded_count_ += trial.status == TrialStatus::kSucceeded ? 1 : 0;
    derived.failed_count_ += trial.status == TrialStatus::kFailed ? 1 : 0;
    if (trial.type == TrialType::kExploration && trial.status != TrialStatus::kFailed) {
      derived.explorations_.push_back(trial);
    }
  }
  if (!(derived == state)) {
    return fail(
        ErrorCode::kParse,
        "the {} trials do not match the job state's counts and explorations (trials {}, dispatched {}, "
        "succeeded {}, failed {}, {} explorations)",
        trials.size(), state.trial_count(), state.dispatched_count(), state.succeeded_count(),
        state.failed_count(), state.explorations().size());
  }
  return BatchSizeJob(std::move(state), MemoryTrialLog(std::move(trials)));
}

Result<BatchSizeJob> BatchSizeJob::from_json(const json& state) {
  return catching<BatchSizeJob>([&]() -> BatchSizeJob {
    constexpr ErrorCode kCode = ErrorCode::kParse;
    const Reader top(state, "", kCode);
    if (const std::string format = top.string("format"); format != kStateFormat) {
      bad(kCode, "format", fmt::format("expected \"{}\", got \"{}\"", kStateFormat, format));
    }
    if (const int64_t version = top.integer("version"); version != kStateVersion) {
      bad(kCode, "version",
          fmt::format("state version {} is not supported (this build reads version {})", version,
                      kStateVersion));
    }
    CommonState common = parse_common(top);
    JobState job(common.spec, common.gpu, common.rng);
    job.stage_ = common.stage;
    job.min_cost_ = common.min_cost;
    job.min_cost_batch_size_ = common.min_cost_batch_size;
    job.exp_default_batch_size_ = common.exp_default_batch_size;

    const json& trials_json = top.require("trials");
    if (!trials_json.is_array()) {
      bad(kCode, "trials", "value is not a valid list");
    }
    std::vector<Trial> trials;
    for (size_t i = 0; i < trials_json.size(); ++i) {
      const std::string at = fmt::format("trials[{}]", i);
      Trial trial = parse_trial(trials_json[i], job.spec_.batch_sizes, at);
      if (trial.trial_number != static_cast<int64_t>(i) + 1) {
        bad(kCode, at + ".trial_number",
            fmt::format("expected {} (trials are stored in order, numbered from 1), got {}", i + 1,
                        trial.trial_number));
      }
      if (trial.type == TrialType::kMab && job.stage_ != Stage::kMab) {
        bad(kCode, at, "a MAB trial in a job still in the Pruning stage");
      }
      ++job.trial_count_;
      job.dispatched_count_ += trial.status == TrialStatus::kDispatched ? 1 : 0;
      job.succeeded_count_ += trial.status == TrialStatus::kSucceeded ? 1 : 0;
      job.failed_count_ += trial.status == TrialStatus::kFailed ? 1 : 0;
      if (trial.type == TrialType::kExploration && trial.status != TrialStatus::kFailed) {
        job.explorations_.push_back(trial);
      }
      trials.push_back(trial);
    }
    job.arms_ = parse_arms(top, job.spec_.batch_sizes, job.stage_);
    for (const Trial& trial : trials) {
      check_trial_against_arms(trial, job.stage_, job.arms_,
                               fmt::format("trials[{}]", trial.trial_number - 1));
    }

    // min_cost is the lowest cost of any Succeeded trial, and min_cost_batch_size one trial's with that cost.
    std::optional<double> lowest;
    for (const Trial& trial : trials) {
      if (trial.status == TrialStatus::kSucceeded) {
        const double cost = job.cost(*trial.energy_j, *trial.time_s);
        lowest = lowest ? std::min(*lowest, cost) : cost;
      }
    }
    if (lowest != job.min_cost_) {
      bad(kCode, "min_cost",
          fmt::format("{} is not the lowest cost of the Succeeded trials ({})",
                      job.min_cost_ ? detail::python_float_repr(*job.min_cost_) : "null",
                      lowest ? detail::python_float_repr(*lowest) : "null: there are none"));
    }
    if (lowest && std::none_of(trials.begin(), trials.end(), [&](const Trial& trial) {
          return trial.status == TrialStatus::kSucceeded && trial.batch_size == job.min_cost_batch_size_ &&
                 job.cost(*trial.energy_j, *trial.time_s) == *lowest;
        })) {
      bad(kCode, "min_cost_batch_size",
          fmt::format("no Succeeded trial with batch size {} has the min_cost {}", job.min_cost_batch_size_,
                      detail::python_float_repr(*lowest)));
    }
    check_default_until_success(common);
    return BatchSizeJob(std::move(job), MemoryTrialLog(std::move(trials)));
  });
}

}  // namespace joule::optimize::batch_size
