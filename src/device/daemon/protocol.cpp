// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "joule/core/json.hpp"
#include "joule/device/daemon_protocol.hpp"

namespace joule::device::daemon_protocol {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr size_t kMaxClientNameBytes = 256;
// Longer than any token a token file may hold (daemon::TokenTable::kMaxTokenChars).
constexpr size_t kMaxTokenBytes = 512;
constexpr size_t kMaxStreamGpus = 256;
// Far above a job id's 64 characters (measure::kMaxJobIdChars), so that the daemon's message can say why.
constexpr size_t kMaxJobBytes = 256;
constexpr size_t kMaxQuotedBytes = 40;

struct OpName {
  Op op;
  std::string_view name;
};

constexpr std::array kOpNames = {
    OpName{Op::kHello, "hello"},
    OpName{Op::kWhoAmI, "whoami"},
    OpName{Op::kListDevices, "list_devices"},
    OpName{Op::kEnergy, "energy"},
    OpName{Op::kPower, "power"},
    OpName{Op::kPowerLimit, "power_limit"},
    OpName{Op::kConstraints, "constraints"},
    OpName{Op::kClocks, "clocks"},
    OpName{Op::kStreamPower, "stream_power"},
    OpName{Op::kCancelStream, "cancel_stream"},
    OpName{Op::kSetPowerLimit, "set_power_limit"},
    OpName{Op::kResetPowerLimit, "reset_power_limit"},
    OpName{Op::kLockSmClocks, "lock_sm_clocks"},
    OpName{Op::kResetSmClocks, "reset_sm_clocks"},
    OpName{Op::kRenewLease, "renew_lease"},
    OpName{Op::kListCpus, "list_cpus"},
    OpName{Op::kCpuEnergy, "cpu_energy"},
    OpName{Op::kGpuTelemetry, "gpu_telemetry"},
    OpName{Op::kStreamCpuEnergy, "stream_cpu_energy"},
    OpName{Op::kTime, "time"},
    OpName{Op::kSimulateBusy, "simulate_busy"},
    OpName{Op::kJobEnergy, "job_energy"},
    OpName{Op::kMemoryClocks, "memory_clocks"},
    OpName{Op::kLockMemoryClocks, "lock_memory_clocks"},
    OpName{Op::kResetMemoryClocks, "reset_memory_clocks"},
};

// How a request field is read and what it means.
enum class Kind {
  kProtocol,
  kClient,
  kGpu,
  kGpuList,
  kPowerMw,
  kClockMhz,
  kPeriodMs,
  kStream,
  kCpu,
  kFlag,
  kCpuList,
  kToken,
  kJob,
  kHolder
};

struct Field {
  std::string_view name;
  Kind kind;
  bool required;
};

std::vector<Field> fields_of(Op op) {
  switch (op) {
    case Op::kHello:
      return {{"protocol", Kind::kProtocol, true},
              {"client", Kind::kClient, false},
              {"token", Kind::kToken, false},
              {"holder", Kind::kHolder, false}};
    case Op::kWhoAmI:
    case Op::kListDevices:
    case Op::kRenewLease:
    case Op::kListCpus:
    case Op::kTime:
      return {};
    case Op::kCpuEnergy:
      return {{"cpu", Kind::kCpu, true}};
    case Op::kEnergy:
    case Op::kPower:
    case Op::kPowerLimit:
    case Op::kConstraints:
    case Op::kClocks:
    case Op::kResetPowerLimit:
    case Op::kResetSmClocks:
    case Op::kGpuTelemetry:
    case Op::kMemoryClocks:
    case Op::kResetMemoryClocks:
      return {{"gpu", Kind::kGpu, true}};
    case Op::kStreamPower:
      return {{"gpus", Kind::kGpuList, false},
              {"period_ms", Kind::kPeriodMs, false},
              {"energy", Kind::kFlag, false}};
    case Op::kStreamCpuEnergy:
      return {{"cpus", Kind::kCpuList, false}, {"period_ms", Kind::kPeriodMs, false}};
    case Op::kCancelStream:
      return {{"stream", Kind::kStream, true}};
    case Op::kSetPowerLimit:
      return {{"gpu", Kind::kGpu, true}, {"power_limit_mw", Kind::kPowerMw, true}};
    case Op::kLockSmClocks:
    case Op::kLockMemoryClocks:
      return {
          {"gpu", Kind::kGpu, true}, {"min_mhz", Kind::kClockMhz, true}, {"max_mhz", Kind::kClockMhz, true}};
    case Op::kSimulateBusy:
      return {{"gpu", Kind::kGpu, true}, {"busy", Kind::kFlag, true}};
    case Op::kJobEnergy:
      return {{"job", Kind::kJob, true}};
  }
  return {};
}

std::string_view what_kind(Kind kind) {
  switch (kind) {
    case Kind::kProtocol:
      return "the protocol version, an integer >= 1";
    case Kind::kClient:
      return "a string naming the client";
    case Kind::kToken:
      return "the bearer token, a string";
    case Kind::kHolder:
      return "a holder name, 1 to 64 letters, digits, '.', '_' or '-'";
    case Kind::kGpu:
      return "a GPU index, an integer >= 0";
    case Kind::kGpuList:
      return "an array of GPU indices";
    case Kind::kPowerMw:
      return "a power limit in mW, an integer";
    case Kind::kClockMhz:
      return "a clock in MHz, an integer";
    case Kind::kPeriodMs:
      return "a period in ms, an integer";
    case Kind::kStream:
      return "a stream id, an integer";
    case Kind::kCpu:
      return "a CPU package index, an integer >= 0";
    case Kind::kFlag:
      return "true or false";
    case Kind::kCpuList:
      return "an array of CPU package indices";
    case Kind::kJob:
      return "a job id, a string (a Slurm job id)";
  }
  return "";
}

// A short rendering of a value the client sent, for messages. Containers are named, not dumped: a
// nested value could be large.
std::string describe(const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::null:
      return "null";
    case json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      const std::string shown = text.size() > kMaxQuotedBytes ? text.substr(0, kMaxQuotedBytes) + "…" : text;
      return json(shown).dump(-1, ' ', false, json::error_handler_t::replace);
    }
    default:
      return value.dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

// Reads an integer in [0, max]; floats, negatives, booleans and strings are refused.
Result<uint64_t> read_unsigned(const json& value, std::string_view context, std::string_view field,
                               uint64_t min, uint64_t max) {
  if (value.is_number_unsigned()) {
    const auto number = value.get<uint64_t>();
    if (number >= min && number <= max) {
      return number;
    }
  } else if (value.is_number_integer()) {
    const auto number = value.get<int64_t>();
    if (number >= 0 && static_cast<uint64_t>(number) >= min && static_cast<uint64_t>(number) <= max) {
      return static_cast<uint64_t>(number);
    }
  }
  return fail(ErrorCode::kInvalidArgument, "{}field '{}' must be an integer from {} to {} (got {})", context,
              field, min, max, describe(value));
}

std::string context_of(std::string_view op) {
  return op.empty() ? std::string() : fmt::format("{}: ", op);
}

// job_energy's job: only the type and size here; the daemon checks the id's form (measure::validate_job_id).
Result<void> read_job(const json& value, const std::string& context, Request& request) {
  if (!value.is_string() || value.get_ref<const std::string&>().size() > kMaxJobBytes) {
    return fail(ErrorCode::kInvalidArgument,
                "{}field 'job' must be a job id, a string of at most {} bytes (got {})", context,
                kMaxJobBytes, describe(value));
  }
  request.job = value.get<std::string>();
  return {};
}

Result<void> read_field(const Field& field, const json& value, Request& request) {
  const std::string context = context_of(to_string(request.op));
  constexpr uint64_t kIntMax = static_cast<uint64_t>(std::numeric_limits<int>::max());
  constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();
  switch (field.kind) {
    case Kind::kProtocol: {
      auto number = JOULE_TRY(read_unsigned(value, context, field.name, 1, kIntMax));
      request.protocol = static_cast<int>(number);
      return {};
    }
    case Kind::kClient:
      if (!value.is_string() || value.get_ref<const std::string&>().size() > kMaxClientNameBytes) {
        return fail(ErrorCode::kInvalidArgument,
                    "{}field 'client' must be a string of at most {} bytes (got {})", context,
                    kMaxClientNameBytes, describe(value));
      }
      request.client = value.get<std::string>();
      return {};
    case Kind::kToken:
      // The value is never shown: a token sent by mistake to the wrong field or daemon must not reach a log.
      if (!value.is_string() || value.get_ref<const std::string&>().size() > kMaxTokenBytes) {
        return fail(ErrorCode::kInvalidArgument,
                    "{}field 'token' must be a string of at most {} bytes (got a {} value{})", context,
                    kMaxTokenBytes, value.type_name(),
                    value.is_string()
                        ? fmt::format(" of {} bytes", value.get_ref<const std::string&>().size())
                        : std::string());
      }
      request.token = value.get<std::string>();
      return {};
    case Kind::kHolder:
      if (!value.is_string() || !valid_holder_name(value.get_ref<const std::string&>())) {
        return fail(ErrorCode::kInvalidArgument,
                    "{}field 'holder' must be a name of 1 to {} letters, digits, '.', '_' or '-' (got {})",
                    context, kMaxHolderNameChars, describe(value));
      }
      request.holder = value.get<std::string>();
      return {};
    case Kind::kJob:
      return read_job(value, context, request);
    case Kind::kGpu: {
      auto number = JOULE_TRY(read_unsigned(value, context, field.name, 0, kIntMax));
      request.gpu = static_cast<int>(number);
      return {};
    }
    case Kind::kCpu: {
      auto number = JOULE_TRY(read_unsigned(value, context, field.name, 0, kIntMax));
      request.cpu = static_cast<int>(number);
      return {};
    }
    case Kind::kGpuList:
    case Kind::kCpuList: {
      // The same rules for both lists: 1 to 256 distinct indices.
      const bool gpu_list = field.kind == Kind::kGpuList;
      const std::string_view noun = gpu_list ? "GPU" : "CPU package";
      if (!value.is_array() || value.empty() || value.size() > kMaxStreamGpus) {
        return fail(
            ErrorCode::kInvalidArgument,
            "{}field '{}' must be an array of 1 to {} {} indices, or be left out for every {} (got {})",
            context, field.name, kMaxStreamGpus, noun, noun,
            value.is_array() ? "an empty array" : describe(value));
      }
      std::vector<int> indices;
      for (const auto& element : value) {
        auto number = JOULE_TRY(read_unsigned(element, context, gpu_list ? "gpus[]" : "cpus[]", 0, kIntMax));
        const int index = static_cast<int>(number);
        if (std::find(indices.begin(), indices.end(), index) != indices.end()) {
          return fail(ErrorCode::kInvalidArgument, "{}{} {} is listed twice in '{}'", context, noun, index,
                      field.name);
        }
        indices.push_back(index);
      }
      (gpu_list ? request.gpus : request.cpus) = std::move(indices);
      return {};
    }
    case Kind::kPowerMw:
    case Kind::kClockMhz: {
      auto number = JOULE_TRY(read_unsigned(value, context, field.name, 0, kU32Max));
      const auto narrowed = static_cast<uint32_t>(number);
      if (field.name == "power_limit_mw") {
        request.power_limit_mw = narrowed;
      } else if (field.name == "min_mhz") {
        request.min_mhz = narrowed;
      } else {
        request.max_mhz = narrowed;
      }
      return {};
    }
    case Kind::kPeriodMs: {
      auto number =
          JOULE_TRY(read_unsigned(value, context, field.name, kMinStreamPeriodMs, kMaxStreamPeriodMs));
      request.period_ms = static_cast<uint32_t>(number);
      return {};
    }
    case Kind::kStream: {
      auto number =
          JOULE_TRY(read_unsigned(value, context, field.name, 0, std::numeric_limits<uint64_t>::max()));
      request.stream = number;
      return {};
    }
    case Kind::kFlag:
      if (!value.is_boolean()) {
        return fail(ErrorCode::kInvalidArgument, "{}field '{}' must be true or false (got {})", context,
                    field.name, describe(value));
      }
      (field.name == "busy" ? request.busy : request.energy) = value.get<bool>();
      return {};
  }
  return {};
}

// Parses a line into a JSON object, or says why it is not one. The project's bounded parser refuses a line
// nested deeper than kMaxDepth while parsing it, so no recursive code ever meets a deep value.
Result<json> parse_object(std::string_view line, std::string_view what) {
  if (line.size() > kMaxLineBytes) {
    return fail(ErrorCode::kInvalidArgument, "{} line is {} bytes long; the limit is {} bytes", what,
                line.size(), kMaxLineBytes);
  }
  auto parsed = parse_json(line, kMaxDepth);
  if (!parsed) {
    switch (parsed.error().kind) {
      case JsonError::Kind::kTooDeep:
        return fail(ErrorCode::kParse, "{} is nested deeper than {} levels", what, kMaxDepth);
      case JsonError::Kind::kNumberOutOfRange:
        return fail(ErrorCode::kParse, "{}: {}", what, parsed.error().message);
      case JsonError::Kind::kSyntax:
        break;
    }
    return fail(ErrorCode::kParse, "{} is not valid JSON ({}); send one JSON object per line", what,
                parsed.error().message);
  }
  if (!parsed->is_object()) {
    return fail(ErrorCode::kParse, "{} must be a JSON object, not {}", what, describe(*parsed));
  }
  return std::move(*parsed);
}

std::string join_fields(Op op) {
  std::vector<std::string_view> names = {"id", "op"};
  for (const auto& field : fields_of(op)) {
    names.push_back(field.name);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string op_names() {
  std::vector<std::string_view> names;
  names.reserve(std::size(kOpNames));
  for (const auto& entry : kOpNames) {
    names.push_back(entry.name);
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

Result<Request> parse_fields(const json& object, Request request) {
  const auto op_field = object.find("op");
  if (op_field == object.end()) {
    return fail(ErrorCode::kInvalidArgument, "request has no 'op' field (one of: {})", op_names());
  }
  if (!op_field->is_string()) {
    return fail(ErrorCode::kInvalidArgument, "field 'op' must be a string (one of: {}), not {}", op_names(),
                describe(*op_field));
  }
  const auto op = op_from_string(op_field->get_ref<const std::string&>());
  if (!op) {
    return fail(ErrorCode::kInvalidArgument, "unknown op {} (known: {})", describe(*op_field), op_names());
  }
  request.op = *op;
  const auto fields = fields_of(*op);
  for (const auto& item : object.items()) {
    const std::string& key = item.key();  // a named reference: clang before 16 cannot capture bindings
    if (key == "id" || key == "op") {
      continue;
    }
    const bool known =
        std::any_of(fields.begin(), fields.end(), [&key](const Field& f) { return f.name == key; });
    if (!known) {
      return fail(ErrorCode::kInvalidArgument, "{}: unknown field {} (fields: {})", to_string(*op),
                  describe(json(key)), join_fields(*op));
    }
  }
  for (const auto& field : fields) {
    const auto found = object.find(field.name);
    if (found == object.end()) {
      if (field.required) {
        return fail(ErrorCode::kInvalidArgument, "{}: missing field '{}' ({})", to_string(*op), field.name,
                    what_kind(field.kind));
      }
      continue;
    }
    JOULE_TRY(read_field(field, *found, request));
  }
  return request;
}

std::string dump(const ordered_json& value) {
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

// Client-side readers: tolerant of fields they do not know (a newer daemon may add some).
Result<uint64_t> unsigned_member(const json& object, std::string_view name, std::string_view what) {
  const auto found = object.find(name);
  if (found == object.end() || !found->is_number_unsigned()) {
    if (found != object.end() && found->is_number_integer() && found->get<int64_t>() >= 0) {
      return found->get<uint64_t>();
    }
    return fail(ErrorCode::kParse, "{} has no non-negative integer '{}'", what, name);
  }
  return found->get<uint64_t>();
}

}  // namespace

std::string_view to_string(Op op) {
  for (const auto& entry : kOpNames) {
    if (entry.op == op) {
      return entry.name;
    }
  }
  return "unknown";
}

std::optional<Op> op_from_string(std::string_view name) {
  for (const auto& entry : kOpNames) {
    if (entry.name == name) {
      return entry.op;
    }
  }
  return std::nullopt;
}

const std::vector<Op>& all_ops() {
  static const std::vector<Op> ops_in_order = [] {
    std::vector<Op> ops;
    ops.reserve(std::size(kOpNames));
    for (const auto& entry : kOpNames) {
      ops.push_back(entry.op);
    }
    return ops;
  }();
  return ops_in_order;
}

std::string_view to_string(Right right) {
  switch (right) {
    case Right::kNone:
      return "none";
    case Right::kRead:
      return "read";
    case Right::kControl:
      return "control";
  }
  return "none";
}

bool valid_holder_name(std::string_view name) {
  return !name.empty() && name.size() <= kMaxHolderNameChars &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '_' || c == '-';
         });
}

Right required_right(Op op) {
  switch (op) {
    case Op::kHello:
    case Op::kWhoAmI:
    case Op::kRenewLease:
    case Op::kTime:
      return Right::kNone;
    case Op::kListDevices:
    case Op::kListCpus:
    case Op::kCpuEnergy:
    case Op::kGpuTelemetry:
    case Op::kEnergy:
    case Op::kPower:
    case Op::kPowerLimit:
    case Op::kConstraints:
    case Op::kClocks:
    case Op::kStreamPower:
    case Op::kStreamCpuEnergy:
    case Op::kCancelStream:
    case Op::kJobEnergy:
    case Op::kMemoryClocks:
      return Right::kRead;
    case Op::kSetPowerLimit:
    case Op::kResetPowerLimit:
    case Op::kLockSmClocks:
    case Op::kResetSmClocks:
    case Op::kLockMemoryClocks:
    case Op::kResetMemoryClocks:
    case Op::kSimulateBusy:
      return Right::kControl;
  }
  return Right::kControl;
}

ParsedRequest parse_request(std::string_view line) {
  ParsedRequest parsed{std::nullopt, Request{}};
  auto object = parse_object(line, "request");
  if (!object) {
    parsed.request = tl::make_unexpected(object.error());
    return parsed;
  }
  Request request;
  if (const auto id = object->find("id"); id != object->end()) {
    auto number = read_unsigned(*id, "", "id", 0, std::numeric_limits<uint64_t>::max());
    if (!number) {
      parsed.request = tl::make_unexpected(number.error());
      return parsed;
    }
    request.id = *number;
    parsed.id = *number;
  }
  parsed.request = parse_fields(*object, std::move(request));
  return parsed;
}

std::string format_request(const Request& request) {
  ordered_json line;
  line["id"] = request.id;
  line["op"] = to_string(request.op);
  for (const auto& field : fields_of(request.op)) {
    switch (field.kind) {
      case Kind::kProtocol:
        line["protocol"] = request.protocol;
        break;
      case Kind::kClient:
        if (!request.client.empty()) {
          line["client"] = request.client;
        }
        break;
      case Kind::kHolder:
        if (!request.holder.empty()) {
          line["holder"] = request.holder;
        }
        break;
      case Kind::kToken:
        if (!request.token.empty()) {
          line["token"] = request.token;
        }
        break;
      case Kind::kGpu:
        line["gpu"] = request.gpu;
        break;
      case Kind::kCpu:
        line["cpu"] = request.cpu;
        break;
      case Kind::kGpuList:
        if (request.gpus) {
          line["gpus"] = *request.gpus;
        }
        break;
      case Kind::kPowerMw:
        line["power_limit_mw"] = request.power_limit_mw;
        break;
      case Kind::kClockMhz:
        line[std::string(field.name)] = field.name == "min_mhz" ? request.min_mhz : request.max_mhz;
        break;
      case Kind::kPeriodMs:
        line["period_ms"] = request.period_ms;
        break;
      case Kind::kStream:
        line["stream"] = request.stream;
        break;
      case Kind::kFlag:
        if (field.name == "busy") {
          line["busy"] = request.busy;
        } else if (request.energy) {
          line["energy"] = true;
        }
        break;
      case Kind::kCpuList:
        if (request.cpus) {
          line["cpus"] = *request.cpus;
        }
        break;
      case Kind::kJob:
        line["job"] = request.job;
        break;
    }
  }
  return dump(line);
}

std::string format_response(const Response& response) {
  const std::string id = response.id ? std::to_string(*response.id) : std::string("null");
  if (response.error) {
    ordered_json error;
    error["code"] = to_string(response.error->code());
    error["message"] = response.error->message();
    return fmt::format(R"({{"id":{},"ok":false,"error":{}}})", id, dump(error));
  }
  return fmt::format(R"({{"id":{},"ok":true,"result":{}}})", id,
                     response.result.dump(-1, ' ', false, json::error_handler_t::replace));
}

std::string format_event(const PowerEvent& event) {
  ordered_json line;
  line["event"] = "power";
  line["stream"] = event.stream;
  line["gpu"] = event.gpu;
  line["time_ms"] = event.time_ms;
  line["power_mw"] = event.power_mw;
  if (event.energy_mj) {
    line["energy_mj"] = *event.energy_mj;
  }
  if (event.dropped > 0) {
    line["dropped"] = event.dropped;
  }
  return dump(line);
}

std::string format_event(const CpuEnergyEvent& event) {
  ordered_json line;
  line["event"] = "cpu_energy";
  line["stream"] = event.stream;
  line["cpu"] = event.cpu;
  line["time_ms"] = event.time_ms;
  line["package_energy_mj"] = event.package_energy_mj;
  line["package_counter_resets"] = event.package_resets;
  line["dram_energy_mj"] = event.dram_energy_mj ? json(*event.dram_energy_mj) : json(nullptr);
  line["dram_counter_resets"] = event.dram_resets ? json(*event.dram_resets) : json(nullptr);
  if (event.dropped > 0) {
    line["dropped"] = event.dropped;
  }
  return dump(line);
}

namespace {

Result<ServerMessage> parse_cpu_energy_event(const json& object) {
  CpuEnergyEvent event;
  constexpr std::string_view kWhat = "cpu_energy event";
  auto stream = JOULE_TRY(unsigned_member(object, "stream", kWhat));
  auto cpu = JOULE_TRY(unsigned_member(object, "cpu", kWhat));
  auto time_ms = JOULE_TRY(unsigned_member(object, "time_ms", kWhat));
  auto package = JOULE_TRY(unsigned_member(object, "package_energy_mj", kWhat));
  auto package_resets = JOULE_TRY(unsigned_member(object, "package_counter_resets", kWhat));
  if (cpu > static_cast<uint64_t>(std::numeric_limits<int>::max()) ||
      time_ms > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return fail(ErrorCode::kParse, "cpu_energy event has a value out of range");
  }
  event.stream = stream;
  event.cpu = static_cast<int>(cpu);
  event.time_ms = static_cast<int64_t>(time_ms);
  event.package_energy_mj = package;
  event.package_resets = package_resets;
  // null when the package has no DRAM domain.
  for (const auto& [name, target] : {std::pair{"dram_energy_mj", &event.dram_energy_mj},
                                     std::pair{"dram_counter_resets", &event.dram_resets}}) {
    if (const auto found = object.find(name); found != object.end() && !found->is_null()) {
      auto number = JOULE_TRY(unsigned_member(object, name, kWhat));
      *target = number;
    }
  }
  if (object.contains("dropped")) {
    auto dropped = JOULE_TRY(unsigned_member(object, "dropped", kWhat));
    event.dropped = dropped;
  }
  return ServerMessage(event);
}

}  // namespace

Result<ServerMessage> parse_server_line(std::string_view line) {
  auto object = parse_object(line, "daemon message");
  if (!object) {
    return tl::make_unexpected(Error(ErrorCode::kParse, object.error().message()));
  }
  if (const auto event = object->find("event"); event != object->end()) {
    if (event->is_string() && event->get_ref<const std::string&>() == "cpu_energy") {
      return parse_cpu_energy_event(*object);
    }
    if (!event->is_string() || event->get_ref<const std::string&>() != "power") {
      return fail(ErrorCode::kParse, "daemon sent an unknown event {}", describe(*event));
    }
    PowerEvent power;
    const auto stream = unsigned_member(*object, "stream", "power event");
    const auto gpu = unsigned_member(*object, "gpu", "power event");
    const auto time_ms = unsigned_member(*object, "time_ms", "power event");
    const auto power_mw = unsigned_member(*object, "power_mw", "power event");
    for (const auto* field : {&stream, &gpu, &time_ms, &power_mw}) {
      if (!*field) {
        return tl::make_unexpected(field->error());
      }
    }
    if (*gpu > static_cast<uint64_t>(std::numeric_limits<int>::max()) ||
        *time_ms > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        *power_mw > std::numeric_limits<uint32_t>::max()) {
      return fail(ErrorCode::kParse, "power event has a value out of range");
    }
    power.stream = *stream;
    power.gpu = static_cast<int>(*gpu);
    power.time_ms = static_cast<int64_t>(*time_ms);
    power.power_mw = static_cast<uint32_t>(*power_mw);
    // Added within protocol 1: absent from a daemon of an earlier release.
    if (object->contains("energy_mj")) {
      auto energy_mj = JOULE_TRY(unsigned_member(*object, "energy_mj", "power event"));
      power.energy_mj = energy_mj;
    }
    if (object->contains("dropped")) {
      auto dropped = JOULE_TRY(unsigned_member(*object, "dropped", "power event"));
      power.dropped = dropped;
    }
    return ServerMessage(power);
  }
  const auto ok = object->find("ok");
  if (ok == object->end() || !ok->is_boolean()) {
    return fail(ErrorCode::kParse, "daemon message has neither 'event' nor a boolean 'ok'");
  }
  Response response;
  if (const auto id = object->find("id"); id != object->end() && !id->is_null()) {
    auto number = JOULE_TRY(unsigned_member(*object, "id", "response"));
    response.id = number;
  }
  if (ok->get<bool>()) {
    if (const auto result = object->find("result"); result != object->end()) {
      if (!result->is_object()) {
        return fail(ErrorCode::kParse, "response 'result' must be an object, not {}", describe(*result));
      }
      response.result = *result;
    }
    return ServerMessage(std::move(response));
  }
  const auto error = object->find("error");
  if (error == object->end() || !error->is_object()) {
    return fail(ErrorCode::kParse, "failed response has no 'error' object");
  }
  const auto code = error->find("code");
  const auto message = error->find("message");
  if (code == error->end() || !code->is_string() || message == error->end() || !message->is_string()) {
    return fail(ErrorCode::kParse, "response 'error' needs string fields 'code' and 'message'");
  }
  // A code this build does not know (a newer daemon) keeps its message; the kind becomes kInternal.
  const auto known = error_code_from_string(code->get_ref<const std::string&>());
  response.error = Error(known.value_or(ErrorCode::kInternal), message->get<std::string>());
  return ServerMessage(std::move(response));
}

std::string_view telemetry_wire_name(TelemetryField field) {
  return field == TelemetryField::kMemoryPower ? std::string_view("memory_power_mw")
                                               : telemetry_field_name(field);
}

namespace {

// The value of `field` in `telemetry` as JSON, or nullopt if it holds none.
std::optional<json> wire_telemetry_value(const GpuTelemetry& telemetry, TelemetryField field) {
  const auto as_json = [](const auto& value) -> std::optional<json> {
    if (!value) {
      return std::nullopt;
    }
    return json(*value);
  };
  switch (field) {
    case TelemetryField::kTemperature:
      // NaN or infinity would be written as null without an error: say why instead.
      if (telemetry.temperature_c && !std::isfinite(*telemetry.temperature_c)) {
        return std::nullopt;
      }
      return as_json(telemetry.temperature_c);
    case TelemetryField::kSmClock:
      return as_json(telemetry.sm_clock_mhz);
    case TelemetryField::kMemoryClock:
      return as_json(telemetry.memory_clock_mhz);
    case TelemetryField::kGpuUtilization:
      return as_json(telemetry.gpu_utilization_pct);
    case TelemetryField::kMemoryUtilization:
      return as_json(telemetry.memory_utilization_pct);
    case TelemetryField::kClockEventReasons:
      return as_json(telemetry.clock_event_reasons);
    case TelemetryField::kMemoryPower:
      return as_json(telemetry.memory_power_mw);
  }
  return std::nullopt;
}

// Stores `value` (a number from the daemon) into `field` of `telemetry`. @return false if it is not a valid
// value of that field (wrong type or out of range).
bool store_wire_telemetry_value(GpuTelemetry& telemetry, TelemetryField field, const json& value) {
  if (field == TelemetryField::kTemperature) {
    if (!value.is_number()) {
      return false;
    }
    telemetry.temperature_c = value.get<double>();
    return std::isfinite(*telemetry.temperature_c);
  }
  if (!value.is_number_unsigned()) {
    return false;
  }
  const auto number = value.get<uint64_t>();
  if (field == TelemetryField::kClockEventReasons) {
    telemetry.clock_event_reasons = number;
    return true;
  }
  if (number > std::numeric_limits<uint32_t>::max()) {
    return false;
  }
  const auto narrowed = static_cast<uint32_t>(number);
  switch (field) {
    case TelemetryField::kSmClock:
      telemetry.sm_clock_mhz = narrowed;
      return true;
    case TelemetryField::kMemoryClock:
      telemetry.memory_clock_mhz = narrowed;
      return true;
    case TelemetryField::kGpuUtilization:
      telemetry.gpu_utilization_pct = narrowed;
      return true;
    case TelemetryField::kMemoryUtilization:
      telemetry.memory_utilization_pct = narrowed;
      return true;
    case TelemetryField::kMemoryPower:
      telemetry.memory_power_mw = narrowed;
      return true;
    default:
      return false;
  }
}

// Why a telemetry field of a gpu_telemetry result is empty: the daemon's error, if it sent a readable one.
Error wire_telemetry_error(const json& result, std::string_view name, bool listed) {
  if (!listed) {
    return Error(
        ErrorCode::kNotSupported,
        fmt::format("joule daemon: the daemon does not report '{}' (a release before it was added)", name));
  }
  const auto errors = result.find("errors");
  if (errors != result.end() && errors->is_object()) {
    const auto entry = errors->find(name);
    if (entry != errors->end() && entry->is_object()) {
      const auto code = entry->find("code");
      const auto message = entry->find("message");
      if (code != entry->end() && code->is_string() && message != entry->end() && message->is_string()) {
        const auto known = error_code_from_string(code->get_ref<const std::string&>());
        return Error(known.value_or(ErrorCode::kInternal), message->get<std::string>())
            .with_context("joule daemon");
      }
    }
  }
  return Error(ErrorCode::kNotSupported,
               fmt::format("joule daemon: the daemon sent no value for '{}' and did not say why", name));
}

}  // namespace

json telemetry_result(int gpu, const GpuTelemetry& telemetry) {
  json result = {{"gpu", gpu}};
  json errors = json::object();
  for (const TelemetryField field : telemetry_fields()) {
    const std::string name(telemetry_wire_name(field));
    auto value = wire_telemetry_value(telemetry, field);
    if (value) {
      result[name] = std::move(*value);
      continue;
    }
    result[name] = nullptr;
    const Error* why = telemetry.error(field);
    const Error fallback(ErrorCode::kDevice, fmt::format("no valid value for '{}'", name));
    const Error& error = why != nullptr ? *why : fallback;
    errors[name] = {{"code", to_string(error.code())}, {"message", error.message()}};
  }
  result["errors"] = std::move(errors);
  return result;
}

Result<GpuTelemetry> parse_telemetry_result(const json& result) {
  if (const auto errors = result.find("errors"); errors != result.end() && !errors->is_object()) {
    return fail(ErrorCode::kParse,
                "joule daemon: the answer to 'gpu_telemetry' has an 'errors' that is not "
                "an object");
  }
  GpuTelemetry telemetry;
  for (const TelemetryField field : telemetry_fields()) {
    const std::string_view name = telemetry_wire_name(field);
    const auto found = result.find(name);
    if (found == result.end() || found->is_null()) {
      telemetry.errors.emplace_back(field, wire_telemetry_error(result, name, found != result.end()));
      continue;
    }
    if (!store_wire_telemetry_value(telemetry, field, *found)) {
      return fail(ErrorCode::kParse, "joule daemon: the answer to 'gpu_telemetry' has no valid '{}' (got {})",
                  name, describe(*found));
    }
  }
  return telemetry;
}

json job_energy_result(const JobEnergyAnswer& answer) {
  json gpus = json::array();
  for (const auto& share : answer.gpus) {
    gpus.push_back({{"gpu", share.gpu},
                    {"uuid", share.uuid},
                    {"energy_mj", share.energy_mj},
                    {"gpu_energy_mj", share.gpu_energy_mj},
                    {"start_ms", share.start_ms},
                    {"end_ms", share.end_ms}});
  }
  json not_accounted = json::array();
  for (const auto& gpu : answer.not_accounted) {
    not_accounted.push_back({{"gpu", gpu.gpu}, {"uuid", gpu.uuid}, {"reason", gpu.reason}});
  }
  return {{"job", answer.job},       {"estimated", answer.estimated},
          {"method", answer.method}, {"ended", answer.ended},
          {"gpus", std::move(gpus)}, {"not_accounted", std::move(not_accounted)}};
}

namespace {

Result<std::string> string_member(const json& object, std::string_view name, std::string_view what) {
  const auto found = object.find(name);
  if (found == object.end() || !found->is_string()) {
    return fail(ErrorCode::kParse, "{} has no string '{}'", what, name);
  }
  return found->get<std::string>();
}

Result<int> index_member(const json& object, std::string_view what) {
  const auto gpu = JOULE_TRY(unsigned_member(object, "gpu", what));
  if (gpu > static_cast<uint64_t>(std::numeric_limits<int>::max())) {
    return fail(ErrorCode::kParse, "{} has a GPU index out of range", what);
  }
  return static_cast<int>(gpu);
}

Result<JobGpuShare> parse_job_share(const json& entry) {
  constexpr std::string_view kWhat = "a job_energy result's gpus entry";
  if (!entry.is_object()) {
    return fail(ErrorCode::kParse, "{} is {}, not an object", kWhat, describe(entry));
  }
  JobGpuShare share;
  share.gpu = JOULE_TRY(index_member(entry, kWhat));
  share.uuid = JOULE_TRY(string_member(entry, "uuid", kWhat));
  share.energy_mj = JOULE_TRY(unsigned_member(entry, "energy_mj", kWhat));
  share.gpu_energy_mj = JOULE_TRY(unsigned_member(entry, "gpu_energy_mj", kWhat));
  const auto start_ms = JOULE_TRY(unsigned_member(entry, "start_ms", kWhat));
  const auto end_ms = JOULE_TRY(unsigned_member(entry, "end_ms", kWhat));
  constexpr auto kMaxMs = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (start_ms > kMaxMs || end_ms > kMaxMs || share.energy_mj > share.gpu_energy_mj) {
    return fail(ErrorCode::kParse, "{} has a value out of range (a share above its GPU's energy?)", kWhat);
  }
  share.start_ms = static_cast<int64_t>(start_ms);
  share.end_ms = static_cast<int64_t>(end_ms);
  return share;
}

}  // namespace

Result<JobEnergyAnswer> parse_job_energy_result(const json& result) {
  constexpr std::string_view kWhat = "job_energy result";
  JobEnergyAnswer answer;
  answer.job = JOULE_TRY(string_member(result, "job", kWhat));
  answer.method = JOULE_TRY(string_member(result, "method", kWhat));
  for (const auto& [name, target] :
       {std::pair{"estimated", &answer.estimated}, std::pair{"ended", &answer.ended}}) {
    const auto found = result.find(name);
    if (found == result.end() || !found->is_boolean()) {
      return fail(ErrorCode::kParse, "{} has no boolean '{}'", kWhat, name);
    }
    *target = found->get<bool>();
  }
  const auto gpus = result.find("gpus");
  const auto not_accounted = result.find("not_accounted");
  if (gpus == result.end() || !gpus->is_array() || not_accounted == result.end() ||
      !not_accounted->is_array()) {
    return fail(ErrorCode::kParse, "{} needs arrays 'gpus' and 'not_accounted'", kWhat);
  }
  for (const auto& entry : *gpus) {
    answer.gpus.push_back(JOULE_TRY(parse_job_share(entry)));
  }
  for (const auto& entry : *not_accounted) {
    constexpr std::string_view kEntry = "a job_energy result's not_accounted entry";
    if (!entry.is_object()) {
      return fail(ErrorCode::kParse, "{} is {}, not an object", kEntry, describe(entry));
    }
    GpuNotAccounted gpu;
    gpu.gpu = JOULE_TRY(index_member(entry, kEntry));
    gpu.uuid = JOULE_TRY(string_member(entry, "uuid", kEntry));
    gpu.reason = JOULE_TRY(string_member(entry, "reason", kEntry));
    answer.not_accounted.push_back(std::move(gpu));
  }
  return answer;
}

std::optional<ErrorCode> error_code_from_string(std::string_view name) {
  for (const ErrorCode code :
       {ErrorCode::kInvalidArgument, ErrorCode::kNotFound, ErrorCode::kOutOfRange, ErrorCode::kNotSupported,
        ErrorCode::kPermissionDenied, ErrorCode::kLibraryMissing, ErrorCode::kParse, ErrorCode::kIo,
        ErrorCode::kState, ErrorCode::kDevice, ErrorCode::kInternal}) {
    if (to_string(code) == name) {
      return code;
    }
  }
  return std::nullopt;
}

}  // namespace joule::device::daemon_protocol
