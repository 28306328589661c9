// SPDX-License-Identifier: Apache-2.0
// joule/device/daemon_protocol.hpp — the wire protocol of `joule daemon`, shared by the daemon and its
// clients (the device/daemon backend). docs/daemon.md describes it in prose.
//
// A Unix stream socket carries newline-delimited JSON, one object per line, UTF-8:
//
//   client → daemon   {"id":7,"op":"set_power_limit","gpu":0,"power_limit_mw":150000}
//   daemon → client   {"id":7,"ok":true,"result":{"gpu":0,"power_limit_mw":150000,"previous_mw":250000}}
//                     {"id":8,"ok":false,"error":{"code":"out-of-range","message":"power limit 50 W is …"}}
//                     {"event":"power","stream":1,"gpu":0,"time_ms":1767225600123,"power_mw":212500}
//                     {"event":"power","stream":2,"gpu":0,"time_ms":…,"power_mw":…,"energy_mj":81234567,"dropped":3}
//
// Every request line gets exactly one response line, in request order, echoing the request's `id` (null
// if the line was too broken to read one). Event lines (power samples of a `stream_power` subscription)
// may come between responses; no event of a stream follows the response to its `cancel_stream`.
// The first request of a connection must be `hello` with the protocol version the client speaks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"

namespace joule::device::daemon_protocol {

/// The protocol version this build speaks (the `protocol` field of hello).
inline constexpr int kVersion = 1;
/// Where `joule daemon` listens unless told otherwise, and where clients look (JOULE_DAEMON_SOCKET).
inline constexpr std::string_view kDefaultSocketPath = "/run/joule/joule.sock";
/// Longest line either side accepts, newline excluded, bytes. Longer requests are refused (and skipped).
inline constexpr size_t kMaxLineBytes = size_t{64} * 1024;
/// Deepest JSON nesting accepted in a request (requests need 2: the object and the `gpus` array). Responses
/// nest deeper (gpu_telemetry's errors: 4), well within it.
inline constexpr int kMaxDepth = 8;
/// Range of `period_ms` for stream_power, ms.
inline constexpr uint32_t kMinStreamPeriodMs = 10;
inline constexpr uint32_t kMaxStreamPeriodMs = 60'000;
inline constexpr uint32_t kDefaultStreamPeriodMs = 1'000;

/// A request's operation (the `op` field).
enum class Op {
  /// handshake: {protocol, client?, token?, holder?} → {protocol, server, lease_s, peer, rights, holder?}
  kHello,
  kWhoAmI,        ///< → {uid, gid, pid, user, rights, reason}
  kListDevices,   ///< → {gpus: [{index, physical_index, backend, name, uuid, has_energy_counter}]}
  kEnergy,        ///< {gpu} → {gpu, energy_mj}
  kPower,         ///< {gpu} → {gpu, power_mw, time_ms}
  kPowerLimit,    ///< {gpu} → {gpu, power_limit_mw}
  kConstraints,   ///< {gpu} → {gpu, min_mw, max_mw, default_mw}
  kClocks,        ///< {gpu} → {gpu, supported_sm_clocks_mhz, locked_sm_clocks_mhz: {min_mhz, max_mhz}|null}
  kStreamPower,   ///< {gpus?, period_ms?, energy?} → {stream, gpus, period_ms, energy}, then events
  kCancelStream,  ///< {stream} → {stream, dropped}: dropped, the samples skipped over its life
  kSetPowerLimit,    ///< {gpu, power_limit_mw} → {gpu, power_limit_mw, previous_mw}
  kResetPowerLimit,  ///< {gpu} → {gpu, power_limit_mw}: gives up this connection's limit
  kLockSmClocks,     ///< {gpu, min_mhz, max_mhz} → {gpu, min_mhz, max_mhz}
  kResetSmClocks,    ///< {gpu} → {gpu}: gives up this connection's clock lock
  kRenewLease,       ///< → {lease_s}
  // Added within protocol 1: a daemon of an earlier release answers them "unknown op" (invalid-argument).
  kListCpus,      ///< → {cpus: [{index, name, has_dram}], reason?}: RAPL packages; if [], reason says why
  kCpuEnergy,     ///< {cpu} → {cpu, package_energy_mj, dram_energy_mj|null}
  kGpuTelemetry,  ///< {gpu} → {gpu, <telemetry field>|null…, errors: {<field>: {code, message}}}
  kStreamCpuEnergy,  ///< {cpus?, period_ms?} → {stream, cpus, period_ms}, then cpu_energy events
  kTime,             ///< → {time_ns}: the daemon's clock (its events' time base), ns since the Unix epoch
  kSimulateBusy,     ///< {gpu, busy} → {gpu, busy, slowdown}: a simulated GPU runs its workload or idles
  /// {job} → {job, estimated, method, ended, gpus: [{gpu, uuid, energy_mj, gpu_energy_mj, start_ms, end_ms}],
  /// not_accounted: [{gpu, uuid, reason}]}: a job's estimated share of the GPUs it shared (JobEnergyAnswer)
  kJobEnergy,
  /// {gpu} → {gpu, supported_memory_clocks_mhz, locked_memory_clocks_mhz: {min_mhz, max_mhz}|null}
  kMemoryClocks,
  kLockMemoryClocks,   ///< {gpu, min_mhz, max_mhz} → {gpu, min_mhz, max_mhz}
  kResetMemoryClocks,  ///< {gpu} → {gpu}: gives up this connection's memory clock lock
};

/// @return the wire name, e.g. "set_power_limit".
std::string_view to_string(Op op);
/// @return the operation called `name`, or nullopt.
std::optional<Op> op_from_string(std::string_view name);
/// @return every operation, in declaration order.
const std::vector<Op>& all_ops();

/// What a peer may do. Control implies read.
enum class Right {
  kNone,     ///< hello and whoami only
  kRead,     ///< every read and power streaming
  kControl,  ///< also set/reset power limits, SM clocks and memory clocks
};

/// @return "none", "read" or "control".
std::string_view to_string(Right right);
/// The longest holder name, characters.
inline constexpr size_t kMaxHolderNameChars = 64;
/// @return whether `name` may name a holder: 1 to kMaxHolderNameChars letters, digits, '.', '_' or '-'.
bool valid_holder_name(std::string_view name);

/// @return the right `op` needs (kNone for hello, whoami, renew_lease and time).
Right required_right(Op op);

/// One parsed request. Fields an operation does not take keep their defaults.
struct Request {
  uint64_t id = 0;       ///< echoed in the response; 0 if absent
  Op op = Op::kHello;    ///< what to do
  int protocol = 0;      ///< hello: the version the client speaks (≥ 1)
  std::string client{};  ///< hello: free text naming the client, for logs (optional)
  /// hello over the network listener: the bearer token (docs/fleet.md); never logged or echoed. Empty: none
  /// (a Unix-socket peer is judged by its credentials, a network peer may present a client certificate).
  std::string token{};
  /// hello: the name of the holder this connection acts for (valid_holder_name()); empty: none. Settings
  /// made for a holder outlive the connection for one lease, and a later connection of the same user (or
  /// network client) that names the holder takes them over (docs/daemon.md, "Holders").
  std::string holder{};
  int gpu = -1;                                 ///< device operations: the daemon's GPU index
  int cpu = -1;                                 ///< cpu_energy: the package index (list_cpus' index)
  std::optional<std::vector<int>> gpus{};       ///< stream_power: GPU indices (nullopt: all)
  uint32_t power_limit_mw = 0;                  ///< set_power_limit, mW
  uint32_t min_mhz = 0;                         ///< lock_sm_clocks, lock_memory_clocks: MHz
  uint32_t max_mhz = 0;                         ///< lock_sm_clocks, lock_memory_clocks: MHz
  uint32_t period_ms = kDefaultStreamPeriodMs;  ///< stream_power, ms
  uint64_t stream = 0;                          ///< cancel_stream: the id stream_power returned
  bool energy = false;  ///< stream_power: each event also carries the GPU's energy counter (energy_mj)
  bool busy = false;    ///< simulate_busy: run the workload (true) or idle
  std::optional<std::vector<int>> cpus{};  ///< stream_cpu_energy: CPU package indices (nullopt: all)
  /// job_energy: the job's id (a Slurm job id); its form is checked by the daemon (measure::validate_job_id)
  std::string job{};
};

/// The outcome of parsing a request line: the request, or the error to answer with, and in both cases
/// the request's id when one could be read (so that the error response can echo it).
struct ParsedRequest {
  std::optional<uint64_t> id;
  Result<Request> request;
};

/// Parses one request line (without its newline). Strict: unknown fields, missing fields, wrong types,
/// numbers out of range, lines over kMaxLineBytes and nesting over kMaxDepth are errors whose message
/// names the field and what was expected. Codes: kParse (not a JSON object), kInvalidArgument (the rest).
/// Never throws.
ParsedRequest parse_request(std::string_view line);

/// @return `request` as one line (no newline), with only the fields its operation takes.
std::string format_request(const Request& request);

/// One response: a result object, or an error.
struct Response {
  std::optional<uint64_t> id;  ///< the request's id; nullopt for a line without a readable id
  std::optional<Error> error;  ///< set if the request failed
  nlohmann::json result = nlohmann::json::object();  ///< the operation's fields (see Op) when ok

  bool ok() const { return !error.has_value(); }
};

/// @return `response` as one line (no newline). Never throws (invalid UTF-8 is replaced).
std::string format_response(const Response& response);

/// One power sample of a stream_power subscription.
struct PowerEvent {
  uint64_t stream = 0;    ///< the subscription's id
  int gpu = 0;            ///< the daemon's GPU index
  int64_t time_ms = 0;    ///< when it was read, ms since the Unix epoch (UTC)
  uint32_t power_mw = 0;  ///< board power, mW
  /// The GPU's energy counter, mJ, when the stream asked for it (energy: true) and the GPU has one.
  std::optional<uint64_t> energy_mj;
  /// Samples of this GPU in this stream the daemon skipped since the previous event it sent (the client
  /// read too slowly: its unread output was over the daemon's bound); 0 (omitted) when none.
  uint64_t dropped = 0;
};

/// @return `event` as one line (no newline).
std::string format_event(const PowerEvent& event);

/// One reading of a CPU package's energy counters (RAPL) for a stream_cpu_energy subscription. Two readings
/// subtract to the energy between them only if their reset counts are equal (device::why_not_measurable).
struct CpuEnergyEvent {
  uint64_t stream = 0;  ///< the subscription's id
  int cpu = 0;          ///< the package index (list_cpus' index)
  int64_t time_ms = 0;  ///< when it was read, ms since the Unix epoch (UTC)
  uint64_t package_energy_mj = 0;
  uint64_t package_resets = 0;
  std::optional<uint64_t> dram_energy_mj;  ///< nullopt: the package has no DRAM domain
  std::optional<uint64_t> dram_resets;
  uint64_t dropped = 0;  ///< as PowerEvent::dropped
};

/// @return `event` as one line (no newline).
std::string format_event(const CpuEnergyEvent& event);

/// Anything the daemon sends.
using ServerMessage = std::variant<Response, PowerEvent, CpuEnergyEvent>;

/// Parses one line the daemon sent. kParse naming what is wrong; never throws.
Result<ServerMessage> parse_server_line(std::string_view line);

/// @return the name of `field` in a gpu_telemetry result: device::telemetry_field_name()'s, except memory
/// power, "memory_power_mw" (an integer in mW, as every power on the wire).
std::string_view telemetry_wire_name(TelemetryField field);

/// @return the gpu_telemetry result of GPU `gpu`: each field's value or null, and `errors` naming each null
/// field's error as {code, message}.
nlohmann::json telemetry_result(int gpu, const GpuTelemetry& telemetry);

/// Reads a gpu_telemetry result back. A field that is null keeps the daemon's error (its code and message,
/// the message prefixed with "joule daemon: "); a field left out (a daemon that does not know it) is
/// kNotSupported saying so. @return kParse for a malformed result (a value of the wrong type or range).
Result<GpuTelemetry> parse_telemetry_result(const nlohmann::json& result);

/// One job's estimated share of one GPU (a job_energy result's `gpus` entry).
struct JobGpuShare {
  int gpu = 0;                 ///< the daemon's GPU index
  std::string uuid;            ///< the GPU's UUID (how the Slurm epilog matches it to its counters)
  uint64_t energy_mj = 0;      ///< the job's estimated share, mJ
  uint64_t gpu_energy_mj = 0;  ///< the GPU's measured energy over the same span, mJ
  int64_t start_ms = 0;        ///< the span, ms since the Unix epoch
  int64_t end_ms = 0;
};

/// A GPU the daemon cannot split among jobs (a job_energy result's `not_accounted` entry).
struct GpuNotAccounted {
  int gpu = 0;
  std::string uuid;
  std::string reason;  ///< e.g. the backend reports no process samples

  bool operator==(const GpuNotAccounted&) const = default;
};

/// A job_energy result: a job's estimated energy on each GPU it shared, always an estimate.
struct JobEnergyAnswer {
  std::string job;
  std::string method;  ///< how the shares are estimated (measure::kProcessEnergyMethod)
  bool estimated = true;
  bool ended = false;  ///< none of its processes was sampled in its GPUs' latest windows
  std::vector<JobGpuShare> gpus;
  std::vector<GpuNotAccounted> not_accounted;  ///< GPUs the daemon cannot split, and why
};

/// @return the job_energy result object of `answer`.
nlohmann::json job_energy_result(const JobEnergyAnswer& answer);
/// Reads a job_energy result back. @return kParse naming the field for a malformed result.
Result<JobEnergyAnswer> parse_job_energy_result(const nlohmann::json& result);

/// @return the code called `name` (as to_string(ErrorCode) writes it), or nullopt.
std::optional<ErrorCode> error_code_from_string(std::string_view name);

}  // namespace joule::device::daemon_protocol
