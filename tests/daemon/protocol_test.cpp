// SPDX-License-Identifier: Apache-2.0
// The daemon's wire protocol: round trips of every request and message, and a clear error for every kind
// of bad request line.
#include <functional>

#include <gtest/gtest.h>

#include "joule/device/daemon_protocol.hpp"

#include "test_util.hpp"

namespace joule::test {
namespace {

namespace proto = device::daemon_protocol;
using nlohmann::json;

proto::Request round_trip(const proto::Request& request) {
  const std::string line = proto::format_request(request);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  auto parsed = proto::parse_request(line);
  EXPECT_TRUE(parsed.request.has_value()) << line << ": " << parsed.request.error().message();
  EXPECT_EQ(parsed.id, request.id);
  return parsed.request.value_or(proto::Request{});
}

TEST(DaemonProtocol, EveryOpRoundTrips) {
  for (const proto::Op op : proto::all_ops()) {
    proto::Request request;
    request.id = 42;
    request.op = op;
    request.protocol = 1;
    request.client = "test";
    request.gpu = 3;
    request.cpu = 5;
    request.gpus = std::vector<int>{2, 0};
    request.cpus = std::vector<int>{1, 0};
    request.power_limit_mw = 175'500;
    request.min_mhz = 900;
    request.max_mhz = 1200;
    request.period_ms = 250;
    request.busy = true;
    request.stream = 9;
    request.energy = true;
    request.job = "4242";
    const proto::Request back = round_trip(request);
    EXPECT_EQ(back.op, op) << proto::to_string(op);
    EXPECT_EQ(back.id, 42u);
    EXPECT_EQ(proto::op_from_string(proto::to_string(op)), op);
    switch (op) {
      case proto::Op::kHello:
        EXPECT_EQ(back.protocol, 1);
        EXPECT_EQ(back.client, "test");
        break;
      case proto::Op::kStreamPower:
        EXPECT_EQ(back.gpus, (std::vector<int>{2, 0}));
        EXPECT_EQ(back.period_ms, 250u);
        EXPECT_TRUE(back.energy);
        break;
      case proto::Op::kCancelStream:
        EXPECT_EQ(back.stream, 9u);
        break;
      case proto::Op::kJobEnergy:
        EXPECT_EQ(back.job, "4242");
        EXPECT_EQ(back.gpu, -1);
        break;
      case proto::Op::kSimulateBusy:
        EXPECT_EQ(back.gpu, 3);
        EXPECT_TRUE(back.busy);
        EXPECT_FALSE(back.energy);
        break;
      case proto::Op::kSetPowerLimit:
        EXPECT_EQ(back.gpu, 3);
        EXPECT_EQ(back.power_limit_mw, 175'500u);
        break;
      case proto::Op::kLockSmClocks:
        EXPECT_EQ(back.gpu, 3);
        EXPECT_EQ(back.min_mhz, 900u);
        EXPECT_EQ(back.max_mhz, 1200u);
        break;
      case proto::Op::kWhoAmI:
      case proto::Op::kListDevices:
      case proto::Op::kRenewLease:
      case proto::Op::kListCpus:
      case proto::Op::kTime:
        EXPECT_EQ(back.gpu, -1);  // not sent
        EXPECT_EQ(back.cpu, -1);
        break;
      case proto::Op::kCpuEnergy:
        EXPECT_EQ(back.cpu, 5);
        EXPECT_EQ(back.gpu, -1);
        break;
      case proto::Op::kStreamCpuEnergy:
        EXPECT_EQ(back.cpus, (std::vector<int>{1, 0}));
        EXPECT_EQ(back.period_ms, 250u);
        EXPECT_FALSE(back.gpus);
        break;
      default:
        EXPECT_EQ(back.gpu, 3);
        EXPECT_EQ(back.cpu, -1);
        break;
    }
  }
}

TEST(DaemonProtocol, OptionalFieldsTakeDefaults) {
  auto parsed = proto::parse_request(R"({"op":"stream_power"})");
  ASSERT_TRUE(parsed.request);
  EXPECT_FALSE(parsed.id);
  EXPECT_EQ(parsed.request->id, 0u);
  EXPECT_FALSE(parsed.request->gpus);
  EXPECT_EQ(parsed.request->period_ms, proto::kDefaultStreamPeriodMs);
  EXPECT_FALSE(parsed.request->energy);
  // Whitespace and a trailing CR are JSON whitespace.
  EXPECT_TRUE(proto::parse_request(" { \"op\" : \"whoami\" }\r").request);
}

TEST(DaemonProtocol, RightsOfOperations) {
  EXPECT_EQ(proto::required_right(proto::Op::kHello), proto::Right::kNone);
  EXPECT_EQ(proto::required_right(proto::Op::kWhoAmI), proto::Right::kNone);
  EXPECT_EQ(proto::required_right(proto::Op::kRenewLease), proto::Right::kNone);
  EXPECT_EQ(proto::required_right(proto::Op::kTime), proto::Right::kNone);
  for (const auto op :
       {proto::Op::kListDevices, proto::Op::kEnergy, proto::Op::kPower, proto::Op::kPowerLimit,
        proto::Op::kConstraints, proto::Op::kClocks, proto::Op::kStreamPower, proto::Op::kCancelStream,
        proto::Op::kListCpus, proto::Op::kCpuEnergy, proto::Op::kGpuTelemetry, proto::Op::kStreamCpuEnergy,
        proto::Op::kJobEnergy}) {
    EXPECT_EQ(proto::required_right(op), proto::Right::kRead) << proto::to_string(op);
  }
  for (const auto op : {proto::Op::kSetPowerLimit, proto::Op::kResetPowerLimit, proto::Op::kLockSmClocks,
                        proto::Op::kResetSmClocks, proto::Op::kSimulateBusy}) {
    EXPECT_EQ(proto::required_right(op), proto::Right::kControl) << proto::to_string(op);
  }
}

struct BadRequest {
  std::string line;
  ErrorCode code;
  std::string message;
  std::optional<uint64_t> id;
};

TEST(DaemonProtocol, BadRequestsGetClearErrors) {
  const std::string ops =
      "hello, whoami, list_devices, energy, power, power_limit, constraints, clocks, stream_power, "
      "cancel_stream, set_power_limit, reset_power_limit, lock_sm_clocks, reset_sm_clocks, renew_lease, "
      "list_cpus, cpu_energy, gpu_telemetry, stream_cpu_energy, time, simulate_busy, job_energy, "
      "memory_clocks, "
      "lock_memory_clocks, reset_memory_clocks, module_power";
  const std::vector<BadRequest> cases = {
      {"", ErrorCode::kParse,
       "request is not valid JSON (parse error at line 1, column 1: syntax error while parsing value - "
       "unexpected "
       "end of input; expected '[', '{', or a literal); send one JSON object per line",
       std::nullopt},
      {"[1]", ErrorCode::kParse, "request must be a JSON object, not an array", std::nullopt},
      {"\"power\"", ErrorCode::kParse, "request must be a JSON object, not \"power\"", std::nullopt},
      {R"({"id":1})", ErrorCode::kInvalidArgument, "request has no 'op' field (one of: " + ops + ")", 1},
      {R"({"id":2,"op":5})", ErrorCode::kInvalidArgument,
       "field 'op' must be a string (one of: " + ops + "), not 5", 2},
      {R"({"id":3,"op":"set_limit"})", ErrorCode::kInvalidArgument,
       "unknown op \"set_limit\" (known: " + ops + ")", 3},
      {R"({"op":"power"})", ErrorCode::kInvalidArgument,
       "power: missing field 'gpu' (a GPU index, an integer >= 0)", std::nullopt},
      {R"({"op":"power","gpu":-1})", ErrorCode::kInvalidArgument,
       "power: field 'gpu' must be an integer from 0 to 2147483647 (got -1)", std::nullopt},
      {R"({"op":"power","gpu":1.5})", ErrorCode::kInvalidArgument,
       "power: field 'gpu' must be an integer from 0 to 2147483647 (got 1.5)", std::nullopt},
      {R"({"op":"power","gpu":"0"})", ErrorCode::kInvalidArgument,
       "power: field 'gpu' must be an integer from 0 to 2147483647 (got \"0\")", std::nullopt},
      {R"({"op":"power","gpu":true})", ErrorCode::kInvalidArgument,
       "power: field 'gpu' must be an integer from 0 to 2147483647 (got true)", std::nullopt},
      {R"({"op":"power","gpu":0,"gpu_id":0})", ErrorCode::kInvalidArgument,
       "power: unknown field \"gpu_id\" (fields: id, op, gpu)", std::nullopt},
      {R"({"op":"set_power_limit","gpu":0,"power_limit_mw":4294967296})", ErrorCode::kInvalidArgument,
       "set_power_limit: field 'power_limit_mw' must be an integer from 0 to 4294967295 (got 4294967296)",
       std::nullopt},
      {R"({"op":"set_power_limit","gpu":0})", ErrorCode::kInvalidArgument,
       "set_power_limit: missing field 'power_limit_mw' (a power limit in mW, an integer)", std::nullopt},
      {R"({"op":"lock_sm_clocks","gpu":0,"min_mhz":900})", ErrorCode::kInvalidArgument,
       "lock_sm_clocks: missing field 'max_mhz' (a clock in MHz, an integer)", std::nullopt},
      {R"({"op":"lock_memory_clocks","gpu":0,"max_mhz":877})", ErrorCode::kInvalidArgument,
       "lock_memory_clocks: missing field 'min_mhz' (a clock in MHz, an integer)", std::nullopt},
      {R"({"op":"reset_memory_clocks","gpu":0,"min_mhz":877})", ErrorCode::kInvalidArgument,
       R"(reset_memory_clocks: unknown field "min_mhz" (fields: id, op, gpu))", std::nullopt},
      {R"({"op":"stream_power","period_ms":5})", ErrorCode::kInvalidArgument,
       "stream_power: field 'period_ms' must be an integer from 10 to 60000 (got 5)", std::nullopt},
      {R"({"op":"stream_power","gpus":[]})", ErrorCode::kInvalidArgument,
       "stream_power: field 'gpus' must be an array of 1 to 256 GPU indices, or be left out for every GPU "
       "(got an "
       "empty array)",
       std::nullopt},
      {R"({"op":"stream_cpu_energy","cpus":[]})", ErrorCode::kInvalidArgument,
       "stream_cpu_energy: field 'cpus' must be an array of 1 to 256 CPU package indices, or be left out for "
       "every CPU package (got an empty array)",
       std::nullopt},
      {R"({"op":"stream_cpu_energy","cpus":[1,1]})", ErrorCode::kInvalidArgument,
       "stream_cpu_energy: CPU package 1 is listed twice in 'cpus'", std::nullopt},
      {R"({"op":"stream_power","energy":1})", ErrorCode::kInvalidArgument,
       "stream_power: field 'energy' must be true or false (got 1)", std::nullopt},
      {R"({"op":"stream_power","gpus":[0,1,0]})", ErrorCode::kInvalidArgument,
       "stream_power: GPU 0 is listed twice in 'gpus'", std::nullopt},
      {R"({"op":"stream_power","gpus":[0,"1"]})", ErrorCode::kInvalidArgument,
       "stream_power: field 'gpus[]' must be an integer from 0 to 2147483647 (got \"1\")", std::nullopt},
      {R"({"op":"hello","protocol":0})", ErrorCode::kInvalidArgument,
       "hello: field 'protocol' must be an integer from 1 to 2147483647 (got 0)", std::nullopt},
      {R"({"op":"job_energy","job":["42"]})", ErrorCode::kInvalidArgument,
       "job_energy: field 'job' must be a job id, a string of at most 256 bytes (got an array)",
       std::nullopt},
      {R"({"op":"job_energy","job":"42","gpu":0})", ErrorCode::kInvalidArgument,
       "job_energy: unknown field \"gpu\" (fields: id, op, job)", std::nullopt},
      {R"({"op":"hello","protocol":1,"client":7})", ErrorCode::kInvalidArgument,
       "hello: field 'client' must be a string of at most 256 bytes (got 7)", std::nullopt},
      {R"({"id":20,"op":"cpu_energy"})", ErrorCode::kInvalidArgument,
       "cpu_energy: missing field 'cpu' (a CPU package index, an integer >= 0)", 20},
      {R"({"op":"cpu_energy","cpu":-1})", ErrorCode::kInvalidArgument,
       "cpu_energy: field 'cpu' must be an integer from 0 to 2147483647 (got -1)", std::nullopt},
      {R"({"op":"cpu_energy","cpu":"0"})", ErrorCode::kInvalidArgument,
       "cpu_energy: field 'cpu' must be an integer from 0 to 2147483647 (got \"0\")", std::nullopt},
      {R"({"op":"cpu_energy","cpu":0.5})", ErrorCode::kInvalidArgument,
       "cpu_energy: field 'cpu' must be an integer from 0 to 2147483647 (got 0.5)", std::nullopt},
      {R"({"op":"cpu_energy","cpu":0,"gpu":0})", ErrorCode::kInvalidArgument,
       "cpu_energy: unknown field \"gpu\" (fields: id, op, cpu)", std::nullopt},
      {R"({"op":"list_cpus","cpu":0})", ErrorCode::kInvalidArgument,
       "list_cpus: unknown field \"cpu\" (fields: id, op)", std::nullopt},
      {R"({"op":"gpu_telemetry"})", ErrorCode::kInvalidArgument,
       "gpu_telemetry: missing field 'gpu' (a GPU index, an integer >= 0)", std::nullopt},
      {R"({"op":"gpu_telemetry","gpu":null})", ErrorCode::kInvalidArgument,
       "gpu_telemetry: field 'gpu' must be an integer from 0 to 2147483647 (got null)", std::nullopt},
      {R"({"op":"gpu_telemetry","gpu":0,"fields":["temperature_c"]})", ErrorCode::kInvalidArgument,
       "gpu_telemetry: unknown field \"fields\" (fields: id, op, gpu)", std::nullopt},
      {R"({"op":"cancel_stream"})", ErrorCode::kInvalidArgument,
       "cancel_stream: missing field 'stream' (a stream id, an integer)", std::nullopt},
      {R"({"id":-1,"op":"whoami"})", ErrorCode::kInvalidArgument,
       "field 'id' must be an integer from 0 to 18446744073709551615 (got -1)", std::nullopt},
      {R"({"op":"power","gpu":[[[[[[[[[0]]]]]]]]]})", ErrorCode::kParse,
       "request is nested deeper than 8 levels", std::nullopt},
      {R"({"op":"whoami"} {"op":"whoami"})", ErrorCode::kParse,
       "request is not valid JSON (parse error at line 1, column 17: syntax error while parsing value - "
       "unexpected "
       "'{'; expected end of input); send one JSON object per line",
       std::nullopt},
  };
  for (const auto& bad : cases) {
    const auto parsed = proto::parse_request(bad.line);
    ASSERT_FALSE(parsed.request.has_value()) << bad.line;
    EXPECT_EQ(parsed.request.error().code(), bad.code) << bad.line;
    EXPECT_EQ(parsed.request.error().message(), bad.message) << bad.line;
    EXPECT_EQ(parsed.id, bad.id) << bad.line;
  }
}

TEST(DaemonProtocol, LongAndHostileLinesAreRefusedWithoutThrowing) {
  const std::string long_line =
      R"({"op":"hello","protocol":1,"client":")" + std::string(proto::kMaxLineBytes, 'x') + R"("})";
  const auto parsed = proto::parse_request(long_line);
  ASSERT_FALSE(parsed.request);
  EXPECT_EQ(parsed.request.error().message(),
            fmt::format("request line is {} bytes long; the limit is 65536 bytes", long_line.size()));
  // Deep nesting is refused before any parser sees it.
  EXPECT_FALSE(proto::parse_request(std::string(60'000, '[')).request);
  // A number no double holds is a JSON error, not an exception (found by the fuzzer).
  const auto huge = proto::parse_request(R"({"op":"power","gpu":9e99999})");
  ASSERT_FALSE(huge.request);
  EXPECT_EQ(huge.request.error().code(), ErrorCode::kParse);
  EXPECT_FALSE(proto::parse_server_line(R"({"id":1,"ok":true,"result":{"x":-1e400}})"));
  // Invalid UTF-8 inside a string is a JSON error.
  EXPECT_FALSE(proto::parse_request("{\"op\":\"\xff\xfe\"}").request);
  // A quoted value in a message is cut short.
  const auto quoted = proto::parse_request(R"({"op":")" + std::string(100, 'a') + R"("})");
  ASSERT_FALSE(quoted.request);
  // (The message lists the known operations; the 100 bytes of the value are not all in it.)
  EXPECT_EQ(quoted.request.error().message().find(std::string(100, 'a')), std::string::npos);
  EXPECT_NE(quoted.request.error().message().find(std::string(30, 'a')), std::string::npos);
}

TEST(DaemonProtocol, ResponsesAndEventsRoundTrip) {
  proto::Response ok;
  ok.id = 7;
  ok.result = {{"gpu", 0}, {"power_limit_mw", 150000}};
  const std::string ok_line = proto::format_response(ok);
  EXPECT_EQ(ok_line, R"({"id":7,"ok":true,"result":{"gpu":0,"power_limit_mw":150000}})");
  auto parsed = proto::parse_server_line(ok_line);
  ASSERT_TRUE(parsed);
  const auto& response = std::get<proto::Response>(*parsed);
  EXPECT_EQ(response.id, 7u);
  EXPECT_TRUE(response.ok());
  EXPECT_EQ(response.result["power_limit_mw"], 150000);

  proto::Response error;
  error.error = Error(ErrorCode::kOutOfRange, "power limit 50 W is outside GPU 0's range");
  const std::string error_line = proto::format_response(error);
  EXPECT_EQ(
      error_line,
      R"({"id":null,"ok":false,"error":{"code":"out-of-range","message":"power limit 50 W is outside GPU 0's range"}})");
  parsed = proto::parse_server_line(error_line);
  ASSERT_TRUE(parsed);
  const auto& failed = std::get<proto::Response>(*parsed);
  EXPECT_FALSE(failed.id);
  ASSERT_TRUE(failed.error);
  EXPECT_EQ(failed.error->code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(failed.error->message(), "power limit 50 W is outside GPU 0's range");

  proto::PowerEvent event;
  event.stream = 3;
  event.gpu = 1;
  event.time_ms = 1'767'225'600'123;
  event.power_mw = 212'500;
  const std::string event_line = proto::format_event(event);
  EXPECT_EQ(event_line, R"({"event":"power","stream":3,"gpu":1,"time_ms":1767225600123,"power_mw":212500})");
  parsed = proto::parse_server_line(event_line);
  ASSERT_TRUE(parsed);
  const auto& back = std::get<proto::PowerEvent>(*parsed);
  EXPECT_EQ(back.stream, 3u);
  EXPECT_EQ(back.gpu, 1);
  EXPECT_EQ(back.time_ms, 1'767'225'600'123);
  EXPECT_EQ(back.power_mw, 212'500u);
  EXPECT_FALSE(back.energy_mj);
  EXPECT_EQ(back.dropped, 0u);
  // The energy counter and the samples skipped before it, when there are.
  event.energy_mj = 81'234'567;
  event.dropped = 3;
  const std::string full_line = proto::format_event(event);
  EXPECT_EQ(
      full_line,
      R"({"event":"power","stream":3,"gpu":1,"time_ms":1767225600123,"power_mw":212500,"energy_mj":81234567,"dropped":3})");
  parsed = proto::parse_server_line(full_line);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(std::get<proto::PowerEvent>(*parsed).energy_mj, 81'234'567u);
  EXPECT_EQ(std::get<proto::PowerEvent>(*parsed).dropped, 3u);

  proto::CpuEnergyEvent cpu_event;
  cpu_event.stream = 4;
  cpu_event.cpu = 1;
  cpu_event.time_ms = 1'767'225'600'123;
  cpu_event.package_energy_mj = 9'000;
  const std::string cpu_line = proto::format_event(cpu_event);
  EXPECT_EQ(cpu_line,
            R"({"event":"cpu_energy","stream":4,"cpu":1,"time_ms":1767225600123,"package_energy_mj":9000,)"
            R"("package_counter_resets":0,"dram_energy_mj":null,"dram_counter_resets":null})");
  parsed = proto::parse_server_line(cpu_line);
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(std::get<proto::CpuEnergyEvent>(*parsed).package_energy_mj, 9'000u);
  EXPECT_FALSE(std::get<proto::CpuEnergyEvent>(*parsed).dram_energy_mj);
  cpu_event.dram_energy_mj = 2'000;
  cpu_event.dram_resets = 1;
  cpu_event.package_resets = 2;
  cpu_event.dropped = 5;
  parsed = proto::parse_server_line(proto::format_event(cpu_event));
  ASSERT_TRUE(parsed);
  const auto& cpu_back = std::get<proto::CpuEnergyEvent>(*parsed);
  EXPECT_EQ(cpu_back.dram_energy_mj, 2'000u);
  EXPECT_EQ(cpu_back.dram_resets, 1u);
  EXPECT_EQ(cpu_back.package_resets, 2u);
  EXPECT_EQ(cpu_back.dropped, 5u);
  EXPECT_EQ(cpu_back.stream, 4u);
  EXPECT_EQ(cpu_back.cpu, 1);

  // Every error code survives the trip.
  for (const ErrorCode code :
       {ErrorCode::kInvalidArgument, ErrorCode::kNotFound, ErrorCode::kPermissionDenied, ErrorCode::kState,
        ErrorCode::kDevice, ErrorCode::kInternal}) {
    EXPECT_EQ(proto::error_code_from_string(to_string(code)), code);
  }
  EXPECT_FALSE(proto::error_code_from_string("teapot"));
}

TEST(DaemonProtocol, ClientReadsTolerantlyButRejectsBrokenMessages) {
  // A newer daemon may add fields; an unknown error code keeps its message.
  auto parsed = proto::parse_server_line(R"({"id":1,"ok":true,"result":{},"extra":1})");
  ASSERT_TRUE(parsed);
  parsed = proto::parse_server_line(
      R"({"id":1,"ok":false,"error":{"code":"teapot","message":"short and stout"}})");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(std::get<proto::Response>(*parsed).error->code(), ErrorCode::kInternal);
  EXPECT_EQ(std::get<proto::Response>(*parsed).error->message(), "short and stout");

  const std::vector<std::pair<std::string, std::string>> broken = {
      {"nope", "daemon message is not valid JSON"},
      {R"({"id":1})", "daemon message has neither 'event' nor a boolean 'ok'"},
      {R"({"id":1,"ok":false})", "failed response has no 'error' object"},
      {R"({"id":1,"ok":false,"error":{"code":1}})",
       "response 'error' needs string fields 'code' and 'message'"},
      {R"({"id":1,"ok":true,"result":[]})", "response 'result' must be an object, not an array"},
      {R"({"id":-4,"ok":true})", "response has no non-negative integer 'id'"},
      {R"({"event":"temperature"})", "daemon sent an unknown event \"temperature\""},
      {R"({"event":"power","stream":1,"gpu":0,"time_ms":5})",
       "power event has no non-negative integer 'power_mw'"},
      {R"({"event":"power","stream":1,"gpu":0,"time_ms":5,"power_mw":5000000000})",
       "power event has a value out of range"},
      {R"({"event":"cpu_energy","stream":1,"cpu":0,"time_ms":5})",
       "cpu_energy event has no non-negative integer 'package_energy_mj'"},
      {R"({"event":"cpu_energy","stream":1,"cpu":0,"time_ms":5,"package_energy_mj":1,"package_counter_resets":0,"dram_energy_mj":-2})",
       "cpu_energy event has no non-negative integer 'dram_energy_mj'"},
      {R"({"event":"power","stream":1,"gpu":0,"time_ms":5,"power_mw":5,"dropped":-1})",
       "power event has no non-negative integer 'dropped'"},
      {R"({"event":"power","stream":1,"gpu":0,"time_ms":5,"power_mw":5,"energy_mj":"a lot"})",
       "power event has no non-negative integer 'energy_mj'"},
  };
  for (const auto& [line, message] : broken) {
    const auto result = proto::parse_server_line(line);
    ASSERT_FALSE(result) << line;
    EXPECT_EQ(result.error().code(), ErrorCode::kParse) << line;
    EXPECT_NE(result.error().message().find(message), std::string::npos)
        << line << ": " << result.error().message();
  }
}

TEST(DaemonProtocol, TelemetryResultsRoundTripWithTheirErrors) {
  device::GpuTelemetry telemetry;
  telemetry.temperature_c = 61.5;
  telemetry.sm_clock_mhz = 1380;
  telemetry.gpu_utilization_pct = 98;
  telemetry.memory_utilization_pct = 41;
  telemetry.clock_event_reasons = device::clock_event::kSwPowerCap | (uint64_t{1} << 40);
  telemetry.memory_power_mw = 31'250;
  telemetry.errors.emplace_back(
      device::TelemetryField::kMemoryClock,
      Error(ErrorCode::kNotSupported, "GPU 0 (X) does not report the memory clock"));
  const auto result = proto::telemetry_result(0, telemetry);
  EXPECT_EQ(result["gpu"], 0);
  EXPECT_EQ(result["memory_power_mw"], 31'250);
  EXPECT_TRUE(result["memory_clock_mhz"].is_null());
  EXPECT_EQ(result["errors"],
            (json{{"memory_clock_mhz",
                   {{"code", "not-supported"}, {"message", "GPU 0 (X) does not report the memory clock"}}}}));
  // Through a response line, as a client reads it.
  proto::Response response;
  response.result = result;
  const auto line = proto::parse_server_line(proto::format_response(response));
  ASSERT_TRUE(line);
  const auto back = proto::parse_telemetry_result(std::get<proto::Response>(*line).result);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->temperature_c, 61.5);
  EXPECT_EQ(back->sm_clock_mhz, 1380u);
  EXPECT_FALSE(back->memory_clock_mhz);
  EXPECT_EQ(back->gpu_utilization_pct, 98u);
  EXPECT_EQ(back->memory_utilization_pct, 41u);
  EXPECT_EQ(back->clock_event_reasons, telemetry.clock_event_reasons);
  EXPECT_EQ(back->memory_power_mw, 31'250u);
  ASSERT_EQ(back->errors.size(), 1u);
  const Error* why = back->error(device::TelemetryField::kMemoryClock);
  ASSERT_NE(why, nullptr);
  EXPECT_EQ(why->code(), ErrorCode::kNotSupported);
  EXPECT_EQ(why->message(), "joule daemon: GPU 0 (X) does not report the memory clock");

  // A field the daemon leaves out (an older release), and one null without a reason.
  json partial = result;
  partial.erase("temperature_c");
  partial["sm_clock_mhz"] = nullptr;
  const auto older = proto::parse_telemetry_result(partial);
  ASSERT_TRUE(older);
  EXPECT_EQ(older->error(device::TelemetryField::kTemperature)->message(),
            "joule daemon: the daemon does not report 'temperature_c' (a release before it was added)");
  EXPECT_EQ(older->error(device::TelemetryField::kSmClock)->message(),
            "joule daemon: the daemon sent no value for 'sm_clock_mhz' and did not say why");
  EXPECT_EQ(older->error(device::TelemetryField::kSmClock)->code(), ErrorCode::kNotSupported);
}

TEST(DaemonProtocol, MalformedTelemetryResultsAreParseErrors) {
  const json good = proto::telemetry_result(1, device::GpuTelemetry{});
  const std::vector<std::pair<std::function<void(json&)>, std::string>> broken = {
      {[](json& r) { r["temperature_c"] = "hot"; },
       "joule daemon: the answer to 'gpu_telemetry' has no valid 'temperature_c' (got \"hot\")"},
      {[](json& r) { r["sm_clock_mhz"] = -5; },
       "joule daemon: the answer to 'gpu_telemetry' has no valid 'sm_clock_mhz' (got -5)"},
      {[](json& r) { r["memory_power_mw"] = 5'000'000'000; },
       "joule daemon: the answer to 'gpu_telemetry' has no valid 'memory_power_mw' (got 5000000000)"},
      {[](json& r) { r["gpu_utilization_pct"] = 1.5; },
       "joule daemon: the answer to 'gpu_telemetry' has no valid 'gpu_utilization_pct' (got 1.5)"},
      {[](json& r) { r["errors"] = json::array(); },
       "joule daemon: the answer to 'gpu_telemetry' has an 'errors' that is not an object"},
  };
  for (const auto& [change, message] : broken) {
    json result = good;
    change(result);
    const auto parsed = proto::parse_telemetry_result(result);
    ASSERT_FALSE(parsed) << result;
    EXPECT_EQ(parsed.error().code(), ErrorCode::kParse);
    EXPECT_EQ(parsed.error().message(), message);
  }
  // Every field empty without a recorded reason still says why on the wire.
  EXPECT_EQ(good["errors"]["temperature_c"]["message"], "no valid value for 'temperature_c'");
}

TEST(DaemonProtocol, ModulePowerResultsCarryEachFieldsValueOrError) {
  const auto result = proto::module_power_result(
      2, 900'000, tl::make_unexpected(Error(ErrorCode::kPermissionDenied, "Insufficient Permissions")));
  EXPECT_EQ(result["gpu"], 2);
  EXPECT_EQ(result["module_power_mw"], 900'000);
  EXPECT_TRUE(result["module_energy_mj"].is_null());
  EXPECT_EQ(proto::parse_module_field(result, "module_power_mw").value(), 900'000u);
  const auto energy = proto::parse_module_field(result, "module_energy_mj");
  ASSERT_FALSE(energy);
  EXPECT_EQ(energy.error().code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(energy.error().message(), "joule daemon: Insufficient Permissions");
  // Malformed answers are parse errors naming the field.
  JOULE_EXPECT_ERROR(proto::parse_module_field(nlohmann::json{{"gpu", 0}}, "module_power_mw"),
                     ErrorCode::kParse,
                     "joule daemon: the answer to 'module_power' has no 'module_power_mw'");
  JOULE_EXPECT_ERROR(proto::parse_module_field(nlohmann::json{{"module_power_mw", -5}}, "module_power_mw"),
                     ErrorCode::kParse,
                     "joule daemon: the answer to 'module_power' has no valid 'module_power_mw' (got -5)");
  JOULE_EXPECT_ERROR(
      proto::parse_module_field(nlohmann::json{{"module_energy_mj", nullptr}}, "module_energy_mj"),
      ErrorCode::kNotSupported,
      "joule daemon: the daemon sent no value for 'module_energy_mj' and did not say why");
}

TEST(DaemonProtocol, FormattingNeverThrowsOnInvalidUtf8) {
  proto::Response response;
  response.error = Error(ErrorCode::kDevice, "driver said \xff\xfe");
  std::string line;
  EXPECT_NO_THROW(line = proto::format_response(response));
  EXPECT_TRUE(proto::parse_server_line(line));
  response.error.reset();
  response.result = {{"name", "GPU \xc3"}};
  EXPECT_NO_THROW(line = proto::format_response(response));
  EXPECT_TRUE(proto::parse_server_line(line));
}

TEST(DaemonProtocol, JobEnergyResultsRoundTripAndMalformedOnesAreRefused) {
  proto::JobEnergyAnswer answer;
  answer.job = "42";
  answer.method = "nvml process utilisation samples";
  answer.ended = true;
  answer.gpus.push_back({1, "GPU-1", 60'000, 100'000, 1'000, 5'000});
  answer.not_accounted.push_back({0, "GPU-0", "GPU 0 (…) does not report per-process utilisation"});
  const json result = proto::job_energy_result(answer);
  EXPECT_EQ(result["estimated"], true);
  const auto back = proto::parse_job_energy_result(result);
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->job, "42");
  EXPECT_TRUE(back->ended);
  ASSERT_EQ(back->gpus.size(), 1u);
  EXPECT_EQ(back->gpus[0].gpu, 1);
  EXPECT_EQ(back->gpus[0].uuid, "GPU-1");
  EXPECT_EQ(back->gpus[0].energy_mj, 60'000u);
  EXPECT_EQ(back->gpus[0].gpu_energy_mj, 100'000u);
  EXPECT_EQ(back->gpus[0].end_ms, 5'000);
  EXPECT_EQ(back->not_accounted, answer.not_accounted);

  json no_method = result;
  no_method.erase("method");
  JOULE_EXPECT_ERROR(proto::parse_job_energy_result(no_method), ErrorCode::kParse,
                     "job_energy result has no string 'method'");
  json over = result;
  over["gpus"][0]["energy_mj"] = 100'001;
  JOULE_EXPECT_ERROR(proto::parse_job_energy_result(over), ErrorCode::kParse,
                     "a job_energy result's gpus entry has a value out of range (a share above its GPU's "
                     "energy?)");
  json not_array = result;
  not_array["gpus"] = json::object();
  JOULE_EXPECT_ERROR(proto::parse_job_energy_result(not_array), ErrorCode::kParse,
                     "job_energy result needs arrays 'gpus' and 'not_accounted'");
}

}  // namespace
}  // namespace joule::test
