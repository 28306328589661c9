// SPDX-License-Identifier: Apache-2.0
// Request handling: one request line of one connection in, one response line out.
#include <algorithm>
#include <exception>

#include <fmt/format.h>

#include "joule/core/log.hpp"

#include "server.hpp"

namespace joule::daemon {

namespace proto = device::daemon_protocol;
using nlohmann::json;

namespace {

proto::Response error_response(std::optional<uint64_t> id, Error error) {
  proto::Response response;
  response.id = id;
  response.error = std::move(error);
  return response;
}

bool takes_gpu(proto::Op op) {
  switch (op) {
    case proto::Op::kEnergy:
    case proto::Op::kPower:
    case proto::Op::kPowerLimit:
    case proto::Op::kConstraints:
    case proto::Op::kClocks:
    case proto::Op::kSetPowerLimit:
    case proto::Op::kResetPowerLimit:
    case proto::Op::kLockSmClocks:
    case proto::Op::kResetSmClocks:
    case proto::Op::kGpuTelemetry:
    case proto::Op::kSimulateBusy:
    case proto::Op::kMemoryClocks:
    case proto::Op::kLockMemoryClocks:
    case proto::Op::kResetMemoryClocks:
      return true;
    default:
      return false;
  }
}

// cpu_energy: both counters of package `index`, read at once so that they belong together.
proto::Response cpu_energy_response(const std::vector<device::Cpu*>& cpus, const std::string& no_cpus_reason,
                                    int index) {
  proto::Response response;
  if (cpus.empty()) {
    response.error = Error(
        ErrorCode::kNotFound,
        fmt::format("unknown CPU {}: the daemon serves no CPU energy counters: {}", index,
                    no_cpus_reason.empty() ? std::string("it was started without them") : no_cpus_reason));
    return response;
  }
  const auto found = std::find_if(cpus.begin(), cpus.end(),
                                  [index](const device::Cpu* cpu) { return cpu->info().index == index; });
  if (found == cpus.end()) {
    std::vector<int> known;
    known.reserve(cpus.size());
    for (const auto* cpu : cpus) {
      known.push_back(cpu->info().index);
    }
    response.error =
        Error(ErrorCode::kNotFound, fmt::format("unknown CPU {}: the daemon serves CPU package{} {}", index,
                                                known.size() == 1 ? "" : "s", fmt::join(known, ", ")));
    return response;
  }
  device::Cpu& cpu = **found;
  const auto package = cpu.package_reading();
  if (!package) {
    response.error = package.error();
    return response;
  }
  json dram_mj = nullptr;
  json dram_resets = nullptr;
  std::string last_reset = package->last_reset;
  if (cpu.info().has_dram) {
    const auto dram = cpu.dram_reading();
    if (!dram) {
      response.error = dram.error();
      return response;
    }
    dram_mj = dram->energy_mj;
    dram_resets = dram->resets;
    if (last_reset.empty()) {
      last_reset = dram->last_reset;
    }
  }
  // The counts of resets let a peer tell whether two readings a job apart subtract
  // (device::why_not_measurable).
  response.result = {{"cpu", index},
                     {"package_energy_mj", package->energy_mj},
                     {"dram_energy_mj", dram_mj},
                     {"package_counter_resets", package->resets},
                     {"dram_counter_resets", dram_resets},
                     {"counter_reset", last_reset.empty() ? json(nullptr) : json(last_reset)}};
  return response;
}

// The result of a Result<T>, or the error response.
template <class T>
bool failed(const Result<T>& result, proto::Response& response) {
  if (result) {
    return false;
  }
  response.error = result.error();
  return true;
}

}  // namespace

json Server::peer_json(const Connection& connection) const {
  if (connection.remote) {
    return json{{"address", connection.address}, {"client", connection.client}};
  }
  return json{{"uid", connection.peer.uid}, {"gid", connection.peer.gid}, {"pid", connection.peer.pid}};
}

std::optional<std::string> Server::authenticate_by_token(Connection& connection, const std::string& token) {
  std::string why;
  if (token.empty()) {
    why =
        security_.tokens
            ? "the daemon's network listener needs a bearer token: send hello with \"token\" (joule: "
              "--token-file FILE or $JOULE_DAEMON_TOKEN_FILE)" +
                  std::string(security_.tls && security_.tls->asks_client_certificate()
                                  ? ", or connect with a client certificate of the daemon's client authority"
                                  : "")
            : "the daemon's network listener takes only client certificates of its client authority "
              "(--tls-client-ca), and this connection presented none";
  } else if (const auto entry = security_.tokens ? security_.tokens->find(token) : std::nullopt) {
    if (const auto over = authenticate(connection, *entry, "token")) {
      why = *over;
    } else {
      return std::nullopt;
    }
  } else {
    // Never the token itself: it may be a real token of another daemon.
    why = fmt::format(
        "the token presented ({} characters) is not in the daemon's token file: check the client's "
        "token file against the daemon's (tokens are never printed)",
        token.size());
  }
  log().warn("connection {} ({}): refused: {}", connection.id, peer_text(connection), why);
  audit_refusal(connection, "authentication", why);
  return why;
}

json Server::rights_json(const Connection& connection) const {
  const Right right = connection.grant.right;
  return json{{"read", right >= Right::kRead}, {"control", right >= Right::kControl}};
}

std::string Server::handle_line(Connection& connection, std::string_view line) {
  // Any request, even a bad one, shows the client is alive: it renews the lease (its holder's too).
  connection.lease_deadline = std::chrono::steady_clock::now() + lease_;
  if (Holder* holder = holder_of(connection)) {
    holder->lease_deadline = connection.lease_deadline;
  }
  std::optional<uint64_t> id;
  proto::Response response;
  try {
    auto parsed = proto::parse_request(line);
    id = parsed.id;
    response =
        parsed.request ? handle(connection, *parsed.request) : error_response(id, parsed.request.error());
  } catch (const std::exception& error) {
    // A bug must cost one request, never the daemon (which would strand every setting it holds).
    log().error("connection {}: internal error: {}", connection.id, error.what());
    response =
        error_response(id, Error(ErrorCode::kInternal, fmt::format("internal error: {}", error.what())));
  }
  response.id = id;
  // Any other answer ends a run of refusals (serve_one closes the connection after too long a run).
  if (!response.ok() && response.error->code() == ErrorCode::kPermissionDenied) {
    ++connection.refusals_in_a_row;
  } else {
    connection.refusals_in_a_row = 0;
  }
  return proto::format_response(response);
}

proto::Response Server::handle(Connection& connection, const proto::Request& request) {
  proto::Response response;
  if (connection.lease_notice) {
    response.error = Error(ErrorCode::kState, *connection.lease_notice);
    connection.lease_notice.reset();
    return response;
  }
  if (request.op == proto::Op::kHello) {
    if (connection.greeted) {
      response.error = Error(ErrorCode::kState, "hello was already sent on this connection");
      return response;
    }
    if (request.protocol != proto::kVersion) {
      response.error =
          Error(ErrorCode::kNotSupported,
                fmt::format("this joule daemon speaks protocol version {}; the client speaks {}: "
                            "use a joule of the same release as the daemon",
                            proto::kVersion, request.protocol));
      return response;
    }
    if (connection.remote && connection.client.empty()) {
      // A network peer has no credentials: its token says who it is (a certificate would have, already).
      if (const auto why = authenticate_by_token(connection, request.token)) {
        response.error = Error(ErrorCode::kPermissionDenied, *why);
        connection.close_after_answer = true;
        return response;
      }
    }
    connection.greeted = true;
    connection.client_name = request.client;
    json holder = nullptr;
    if (!request.holder.empty()) {
      holder = take_holder(connection, request.holder);
    }
    log().info("connection {}: hello from {} ({})", connection.id,
               request.client.empty() ? std::string("a client") : request.client, peer_text(connection));
    response.result = {{"protocol", proto::kVersion},
                       {"server", "joule-daemon"},
                       {"lease_s", options_.lease_s},
                       {"peer", peer_json(connection)},
                       {"user", connection.grant.user},
                       {"right", proto::to_string(connection.grant.right)},
                       {"rights", rights_json(connection)},
                       {"reason", connection.grant.reason},
                       {"gpus", gpus_.size()},
                       {"cpus", options_.cpus.size()}};
    if (!holder.is_null()) {
      response.result["holder"] = std::move(holder);
    }
    return response;
  }
  if (!connection.greeted) {
    response.error =
        Error(ErrorCode::kState,
              fmt::format(R"(send hello first, e.g. {{"op":"hello","protocol":{}}})", proto::kVersion));
    return response;
  }
  const Right needed = proto::required_right(request.op);
  if (needed == Right::kControl && !connection.holder_key.empty() && holder_of(connection) == nullptr) {
    // Another connection took the holder over: this one's settings would no longer be the holder's, and two
    // processes acting for one holder (a deposed leader and the new one) must not both set.
    const auto found = holders_.find(connection.holder_key);
    response.error =
        Error(ErrorCode::kState,
              found != holders_.end() && found->second.connection != 0
                  ? fmt::format("this connection no longer acts for holder '{}': connection {} took it over; "
                                "it may not change settings",
                                found->second.name, found->second.connection)
                  : fmt::format("this connection no longer acts for its holder; it may not change settings"));
    return response;
  }
  if (connection.grant.right < needed) {
    const std::string message =
        connection.remote
            ? fmt::format(
                  "permission denied: {} needs the {} right; {} has {} ({}): a token or certificate "
                  "line of scope control (or admin) in the daemon's token file grants it",
                  proto::to_string(request.op), proto::to_string(needed), connection.grant.user,
                  proto::to_string(connection.grant.right), connection.grant.reason)
            : AccessPolicy::refusal(connection.grant, proto::to_string(request.op), needed);
    if (needed == Right::kControl) {
      AuditEntry entry;
      entry.action = "refused";
      entry.gpu = request.gpu;
      const bool power = request.op == proto::Op::kSetPowerLimit || request.op == proto::Op::kResetPowerLimit;
      const bool memory =
          request.op == proto::Op::kLockMemoryClocks || request.op == proto::Op::kResetMemoryClocks;
      entry.setting = power ? "power_limit_mw" : memory ? "memory_clocks_mhz" : "sm_clocks_mhz";
      switch (request.op) {
        case proto::Op::kSetPowerLimit:
          entry.new_value = std::to_string(request.power_limit_mw);
          break;
        case proto::Op::kLockSmClocks:
        case proto::Op::kLockMemoryClocks:
          entry.new_value = fmt::format("{}-{}", request.min_mhz, request.max_mhz);
          break;
        default:
          entry.new_value = "reset";
          break;
      }
      entry.connection = connection.id;
      entry.uid = connection.peer.uid;
      entry.pid = connection.peer.pid;
      entry.client = connection.client;
      entry.address = connection.address;
      entry.reason = "permission";
      entry.detail = message;
      audit_->record(entry);
    }
    response.error = Error(ErrorCode::kPermissionDenied, message);
    return response;
  }
  if (takes_gpu(request.op) && (request.gpu < 0 || static_cast<size_t>(request.gpu) >= gpus_.size())) {
    response.error =
        Error(ErrorCode::kNotFound,
              gpus_.empty()
                  ? fmt::format("unknown GPU {}: the daemon serves no GPU", request.gpu)
                  : fmt::format("unknown GPU {}: the daemon serves {} GPU{} (indices 0 to {})", request.gpu,
                                gpus_.size(), gpus_.size() == 1 ? "" : "s", gpus_.size() - 1));
    return response;
  }
  switch (request.op) {
    case proto::Op::kWhoAmI:
      response.result = peer_json(connection);
      response.result.update(json{{"user", connection.grant.user},
                                  {"right", proto::to_string(connection.grant.right)},
                                  {"rights", rights_json(connection)},
                                  {"reason", connection.grant.reason}});
      return response;
    case proto::Op::kRenewLease:
      response.result = {{"lease_s", options_.lease_s}};
      return response;
    case proto::Op::kTime:
      // What a client needs to estimate the offset of this daemon's clock from its own (NTP's way).
      response.result = {{"time_ns", clock_.to_unix_ns(clock_.now())}};
      return response;
    case proto::Op::kListDevices: {
      json gpus = json::array();
      for (size_t i = 0; i < gpus_.size(); ++i) {
        const auto& info = gpus_[i]->info();
        gpus.push_back({{"index", i},
                        {"physical_index", info.physical_index},
                        {"backend", info.backend},
                        {"name", info.name},
                        {"uuid", info.uuid},
                        {"has_energy_counter", info.has_energy_counter}});
      }
      response.result = {{"gpus", std::move(gpus)}};
      return response;
    }
    case proto::Op::kListCpus: {
      json cpus = json::array();
      for (const auto* cpu : options_.cpus) {
        const auto& info = cpu->info();
        cpus.push_back({{"index", info.index}, {"name", info.name}, {"has_dram", info.has_dram}});
      }
      response.result = {{"cpus", std::move(cpus)}};
      if (options_.cpus.empty()) {
        response.result["reason"] = options_.no_cpus_reason.empty()
                                        ? std::string("the daemon was started without CPU energy counters")
                                        : options_.no_cpus_reason;
      }
      return response;
    }
    case proto::Op::kCpuEnergy:
      return cpu_energy_response(options_.cpus, options_.no_cpus_reason, request.cpu);
    case proto::Op::kJobEnergy:
      return job_energy_response(connection, request.job);
    case proto::Op::kStreamPower: {
      if (connection.streams.size() >= options_.max_streams_per_connection) {
        response.error =
            Error(ErrorCode::kState, fmt::format("this connection already has {} power streams (the "
                                                 "limit); cancel one first",
                                                 connection.streams.size()));
        return response;
      }
      Stream stream;
      if (request.gpus) {
        for (const int gpu : *request.gpus) {
          if (static_cast<size_t>(gpu) >= gpus_.size()) {
            response.error =
                Error(ErrorCode::kNotFound, fmt::format("stream_power: unknown GPU {}: the daemon serves "
                                                        "{} GPUs",
                                                        gpu, gpus_.size()));
            return response;
          }
        }
        stream.gpus = *request.gpus;
      } else {
        for (size_t i = 0; i < gpus_.size(); ++i) {
          stream.gpus.push_back(static_cast<int>(i));
        }
      }
      stream.id = next_stream_id_++;
      stream.period = std::chrono::milliseconds(request.period_ms);
      stream.next = std::chrono::steady_clock::now();  // the first samples follow the response at once
      stream.energy = request.energy;
      stream.dropped.assign(stream.gpus.size(), 0);
      response.result = {{"stream", stream.id},
                         {"gpus", stream.gpus},
                         {"period_ms", request.period_ms},
                         {"energy", request.energy}};
      connection.streams.push_back(std::move(stream));
      return response;
    }
    case proto::Op::kStreamCpuEnergy: {
      if (connection.streams.size() >= options_.max_streams_per_connection) {
        response.error = Error(ErrorCode::kState, fmt::format("this connection already has {} streams (the "
                                                              "limit); cancel one first",
                                                              connection.streams.size()));
        return response;
      }
      if (options_.cpus.empty()) {
        response.error =
            Error(ErrorCode::kNotFound,
                  fmt::format("stream_cpu_energy: the daemon serves no CPU energy counters: {}",
                              options_.no_cpus_reason.empty() ? std::string("it was started without them")
                                                              : options_.no_cpus_reason));
        return response;
      }
      Stream stream;
      std::vector<int> indices;
      for (size_t position = 0; position < options_.cpus.size(); ++position) {
        const int index = options_.cpus[position]->info().index;
        if (!request.cpus ||
            std::find(request.cpus->begin(), request.cpus->end(), index) != request.cpus->end()) {
          stream.cpus.push_back(position);
          indices.push_back(index);
        }
      }
      if (request.cpus && indices.size() != request.cpus->size()) {
        std::vector<int> known;
        for (const auto* cpu : options_.cpus) {
          known.push_back(cpu->info().index);
        }
        for (const int asked : *request.cpus) {
          if (std::find(indices.begin(), indices.end(), asked) == indices.end()) {
            response.error = Error(ErrorCode::kNotFound,
                                   fmt::format("stream_cpu_energy: unknown CPU {}: the daemon serves CPU "
                                               "package{} {}",
                                               asked, known.size() == 1 ? "" : "s", fmt::join(known, ", ")));
            return response;
          }
        }
      }
      stream.id = next_stream_id_++;
      stream.period = std::chrono::milliseconds(request.period_ms);
      stream.next = std::chrono::steady_clock::now();
      stream.dropped.assign(stream.cpus.size(), 0);
      response.result = {{"stream", stream.id}, {"cpus", indices}, {"period_ms", request.period_ms}};
      connection.streams.push_back(std::move(stream));
      return response;
    }
    case proto::Op::kCancelStream: {
      const auto found = std::find_if(connection.streams.begin(), connection.streams.end(),
                                      [&request](const Stream& s) { return s.id == request.stream; });
      if (found == connection.streams.end()) {
        std::vector<uint64_t> ids;
        for (const auto& stream : connection.streams) {
          ids.push_back(stream.id);
        }
        response.error =
            Error(ErrorCode::kNotFound,
                  fmt::format("no stream {} on this connection ({})", request.stream,
                              ids.empty() ? std::string("it has none")
                                          : fmt::format("its streams: {}", fmt::join(ids, ", "))));
        return response;
      }
      response.result = {{"stream", request.stream}, {"dropped", found->dropped_total}};
      connection.streams.erase(found);
      return response;
    }
    default:
      return handle_device(connection, request);
  }
}

std::string Server::job_energy_description() const {
  if (!job_energy_) {
    return "job energy of shared GPUs: off (--job-energy-period-s 0)";
  }
  const auto& unsupported = job_energy_->unsupported();
  if (!job_energy_->any_supported()) {
    return fmt::format(
        "job energy of shared GPUs: not accounted: {}{}",
        unsupported.empty() ? std::string("no GPU") : unsupported.front().second,
        unsupported.size() > 1 ? fmt::format(" (and {} more GPUs)", unsupported.size() - 1) : std::string());
  }
  const size_t accounted = gpus_.size() - unsupported.size();
  return fmt::format(
      "job energy of shared GPUs: {} GPU{} of {} split among jobs every {} s (process samples, Slurm "
      "cgroups)",
      accounted, accounted == 1 ? "" : "s", gpus_.size(), options_.job_energy_period_s);
}

proto::Response Server::job_energy_response(const Connection& connection, const std::string& job) {
  proto::Response response;
  if (!job_energy_) {
    response.error = Error(ErrorCode::kNotSupported,
                           "this daemon does not account the energy of jobs on shared GPUs: it was started "
                           "with --job-energy-period-s 0");
    return response;
  }
  if (const auto valid = measure::validate_job_id(job); !valid) {
    response.error = valid.error();
    return response;
  }
  if (!job_energy_->any_supported()) {
    std::vector<std::string> reasons;
    for (const auto& entry : job_energy_->unsupported()) {
      reasons.push_back(entry.second);  // each names its GPU
    }
    response.error =
        Error(ErrorCode::kNotSupported,
              fmt::format("no GPU of this daemon reports per-process samples, so a job's share of a shared "
                          "GPU cannot be estimated: {}",
                          reasons.empty() ? std::string("it serves no GPU")
                                          : fmt::format("{}", fmt::join(reasons, "; "))));
    return response;
  }
  // The windows close now (unless they closed very recently), so the share runs up to this request: an
  // epilog asks right after the job's processes end.
  const auto now_us = static_cast<uint64_t>(std::max<int64_t>(clock_.to_unix_ns(clock_.now()), 0)) / 1000;
  constexpr uint64_t kMinWindowUs = 500'000;
  if (now_us >= last_job_energy_update_us_ + kMinWindowUs) {
    update_job_energy();
  }
  // Only root (the Slurm epilog) makes an ended job's record go once read; anyone with the read right may
  // look without taking it from the epilog.
  const auto figures = job_energy_->read(job, privileged(connection));
  if (!figures) {
    response.error = figures.error();
    return response;
  }
  proto::JobEnergyAnswer answer;
  answer.job = figures->job;
  answer.method = std::string(figures->method);
  answer.ended = figures->ended;
  for (const auto& share : figures->gpus) {
    answer.gpus.push_back({static_cast<int>(share.gpu), gpus_[share.gpu]->info().uuid, share.energy_mj,
                           share.gpu_energy_mj, static_cast<int64_t>(share.start_us / 1000),
                           static_cast<int64_t>(share.end_us / 1000)});
  }
  for (const auto& [index, why] : job_energy_->unsupported()) {
    answer.not_accounted.push_back({static_cast<int>(index), gpus_[index]->info().uuid, why});
  }
  response.result = proto::job_energy_result(answer);
  return response;
}

proto::Response Server::handle_device(Connection& connection, const proto::Request& request) {
  proto::Response response;
  const auto index = static_cast<size_t>(request.gpu);
  device::Gpu& gpu = *gpus_[index];
  response.result = {{"gpu", request.gpu}};
  json& result = response.result;
  switch (request.op) {
    case proto::Op::kEnergy: {
      const auto energy = gpu.energy_mj();
      if (!failed(energy, response)) {
        result["energy_mj"] = *energy;
      }
      break;
    }
    case proto::Op::kPower: {
      const auto power = gpu.power_mw();
      if (!failed(power, response)) {
        result["power_mw"] = *power;
        result["time_ms"] = clock_.to_unix_ns(clock_.now()) / 1'000'000;
      }
      break;
    }
    case proto::Op::kPowerLimit: {
      const auto limit = gpu.power_limit_mw();
      if (!failed(limit, response)) {
        result["power_limit_mw"] = *limit;
      }
      break;
    }
    case proto::Op::kConstraints: {
      const auto constraints = gpu.power_limit_constraints();
      if (!failed(constraints, response)) {
        result["min_mw"] = constraints->min_mw;
        result["max_mw"] = constraints->max_mw;
        result["default_mw"] = constraints->default_mw;
      }
      break;
    }
    case proto::Op::kClocks: {
      const auto clocks = gpu.supported_sm_clocks_mhz();
      if (!failed(clocks, response)) {
        result["supported_sm_clocks_mhz"] = *clocks;
        const auto lock = ledger_.sm_clock_lock(index);
        result["locked_sm_clocks_mhz"] =
            lock ? json{{"min_mhz", lock->min_mhz}, {"max_mhz", lock->max_mhz}} : json(nullptr);
      }
      break;
    }
    case proto::Op::kSetPowerLimit: {
      const auto previous = ledger_.set_power_limit(owner_of(connection), index, request.power_limit_mw);
      if (!failed(previous, response)) {
        result["power_limit_mw"] = request.power_limit_mw;
        result["previous_mw"] = *previous;
      }
      break;
    }
    case proto::Op::kResetPowerLimit: {
      const auto now = ledger_.release_power_limit(owner_of(connection), index, RestoreReason::kReset);
      if (!failed(now, response)) {
        result["power_limit_mw"] = *now;
      }
      break;
    }
    case proto::Op::kLockSmClocks: {
      const auto locked =
          ledger_.lock_sm_clocks(owner_of(connection), index, SmClockLock{request.min_mhz, request.max_mhz});
      if (!failed(locked, response)) {
        result["min_mhz"] = request.min_mhz;
        result["max_mhz"] = request.max_mhz;
      }
      break;
    }
    case proto::Op::kResetSmClocks: {
      const auto reset = ledger_.release_sm_clocks(owner_of(connection), index, RestoreReason::kReset);
      failed(reset, response);
      break;
    }
    case proto::Op::kMemoryClocks: {
      const auto clocks = gpu.supported_memory_clocks_mhz();
      if (!failed(clocks, response)) {
        result["supported_memory_clocks_mhz"] = *clocks;
        const auto lock = ledger_.memory_clock_lock(index);
        result["locked_memory_clocks_mhz"] =
            lock ? json{{"min_mhz", lock->min_mhz}, {"max_mhz", lock->max_mhz}} : json(nullptr);
      }
      break;
    }
    case proto::Op::kLockMemoryClocks: {
      const auto locked = ledger_.lock_memory_clocks(owner_of(connection), index,
                                                     MemoryClockLock{request.min_mhz, request.max_mhz});
      if (!failed(locked, response)) {
        result["min_mhz"] = request.min_mhz;
        result["max_mhz"] = request.max_mhz;
      }
      break;
    }
    case proto::Op::kResetMemoryClocks: {
      const auto reset = ledger_.release_memory_clocks(owner_of(connection), index, RestoreReason::kReset);
      failed(reset, response);
      break;
    }
    case proto::Op::kSimulateBusy: {
      const auto slowdown = gpu.set_simulated_busy(request.busy);
      if (!failed(slowdown, response)) {
        result["busy"] = request.busy;
        result["slowdown"] = *slowdown;
      }
      break;
    }
    case proto::Op::kGpuTelemetry:
      // Never an error as a whole: each field the GPU does not report says why in 'errors'.
      result = proto::telemetry_result(request.gpu, gpu.telemetry());
      break;
    default:
      response.error = Error(ErrorCode::kInternal,
                             fmt::format("'{}' is not a device request", proto::to_string(request.op)));
      break;
  }
  if (!response.ok()) {
    response.result = json::object();
  }
  return response;
}

}  // namespace joule::daemon
