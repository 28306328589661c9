// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the daemon's wire protocol. Parsing any line never throws or crashes; an error always
// has a message; an accepted request or daemon message (and a gpu_telemetry or job_energy result in it)
// formats back to a line that parses to the same thing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "joule/device/daemon_protocol.hpp"

namespace {

namespace proto = joule::device::daemon_protocol;

bool same(const proto::Request& a, const proto::Request& b) {
  return a.id == b.id && a.op == b.op && a.protocol == b.protocol && a.client == b.client && a.gpu == b.gpu &&
         a.cpu == b.cpu && a.gpus == b.gpus && a.power_limit_mw == b.power_limit_mw &&
         a.min_mhz == b.min_mhz && a.max_mhz == b.max_mhz && a.period_ms == b.period_ms &&
         a.stream == b.stream;
}

void check_request(std::string_view line) {
  const auto parsed = proto::parse_request(line);
  if (!parsed.request) {
    if (parsed.request.error().message().empty()) {
      std::abort();
    }
    return;
  }
  const auto again = proto::parse_request(proto::format_request(*parsed.request));
  if (!again.request || !same(*again.request, *parsed.request)) {
    std::abort();
  }
}

void check_server_line(std::string_view line) {
  const auto parsed = proto::parse_server_line(line);
  if (!parsed) {
    if (parsed.error().message().empty()) {
      std::abort();
    }
    return;
  }
  if (const auto* response = std::get_if<proto::Response>(&*parsed)) {
    const auto again = proto::parse_server_line(proto::format_response(*response));
    if (!again || !std::holds_alternative<proto::Response>(*again) ||
        std::get<proto::Response>(*again).ok() != response->ok() ||
        std::get<proto::Response>(*again).id != response->id) {
      std::abort();
    }
    // Any result read as a job_energy answer likewise.
    if (const auto job = proto::parse_job_energy_result(response->result); !job) {
      if (job.error().message().empty()) {
        std::abort();
      }
    } else {
      const auto back = proto::parse_job_energy_result(proto::job_energy_result(*job));
      if (!back || back->job != job->job || back->gpus.size() != job->gpus.size() ||
          back->not_accounted != job->not_accounted) {
        std::abort();
      }
    }
    // Any result read as a gpu_telemetry answer: a value or an error with a message; what it reads formats
    // back to a result that reads the same.
    const auto telemetry = proto::parse_telemetry_result(response->result);
    if (!telemetry) {
      if (telemetry.error().message().empty()) {
        std::abort();
      }
      return;
    }
    const auto back = proto::parse_telemetry_result(proto::telemetry_result(0, *telemetry));
    if (!back || back->errors.size() != telemetry->errors.size() ||
        back->clock_event_reasons != telemetry->clock_event_reasons ||
        back->memory_power_mw != telemetry->memory_power_mw) {
      std::abort();
    }
    return;
  }
  const auto& event = std::get<proto::PowerEvent>(*parsed);
  const auto again = proto::parse_server_line(proto::format_event(event));
  if (!again || !std::holds_alternative<proto::PowerEvent>(*again) ||
      std::get<proto::PowerEvent>(*again).power_mw != event.power_mw) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  check_request(line);
  check_server_line(line);
  return 0;
}
