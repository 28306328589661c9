// SPDX-License-Identifier: Apache-2.0
#include "joule/govern/sidecar.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "joule/core/log.hpp"

namespace joule::govern {

namespace {

double seconds_of(const Clock& clock) {
  return std::chrono::duration<double>(clock.now()).count();
}

std::string_view direction(const Decision& decision) {
  if (decision.state == GovernState::kWaiting) {
    return "wait";
  }
  if (!decision.changed() || !decision.knob || !decision.previous) {
    return "hold";
  }
  return decision.knob->value > decision.previous->value ? "up" : "down";
}

// The sidecar's series, one label set per engine.
class GovernMetrics {
 public:
  explicit GovernMetrics(prometheus::Registry& registry)
      : knob_(prometheus::BuildGauge()
                  .Name("joule_govern_knob")
                  .Help("The knob in force on the engine's GPUs (MHz or W by the knob label); 0: their own "
                        "settings")
                  .Register(registry)),
        state_(prometheus::BuildGauge()
                   .Name("joule_govern_state")
                   .Help("1 for the governor's current state: governing, unattainable (the maximum misses "
                         "the SLO) "
                         "or waiting (engine gone or restarted: GPUs at their own settings)")
                   .Register(registry)),
        slo_(prometheus::BuildGauge()
                 .Name("joule_govern_slo_target_seconds")
                 .Help("The latency SLO the governor holds, s")
                 .Register(registry)),
        latency_(
            prometheus::BuildGauge()
                .Name("joule_govern_estimated_latency_seconds")
                .Help("The last window's latency at the SLO's percentile, from the engine's histograms, s")
                .Register(registry)),
        energy_(prometheus::BuildCounter()
                    .Name("joule_govern_energy_joules_total")
                    .Help("The engine's GPUs' energy, split between prompt and output tokens by work, J")
                    .Register(registry)),
        j_per_token_(prometheus::BuildGauge()
                         .Name("joule_govern_joules_per_output_token")
                         .Help("The last window's energy per output token, J")
                         .Register(registry)),
        j_per_request_(prometheus::BuildGauge()
                           .Name("joule_govern_joules_per_request")
                           .Help("The last window's energy per finished request, J")
                           .Register(registry)),
        tokens_(prometheus::BuildCounter()
                    .Name("joule_govern_tokens_total")
                    .Help("Tokens the engine processed while governed")
                    .Register(registry)),
        decisions_(prometheus::BuildCounter()
                       .Name("joule_govern_decisions_total")
                       .Help("Control periods by what the governor did")
                       .Register(registry)),
        tick_time_(prometheus::BuildHistogram()
                       .Name("joule_govern_decision_seconds")
                       .Help("One control period's own time: scrape, parse, energy, decision, setting, s")
                       .Register(registry)) {}

  void set_slo(const std::string& engine, const optimize::ServingSlo& slo) {
    slo_.Add({{"engine", engine}, {"slo", "ttft"}}).Set(slo.ttft_s);
    slo_.Add({{"engine", engine}, {"slo", "tpot"}}).Set(slo.tpot_s);
  }

  void record(const TickReport& report, optimize::KnobKind kind) {
    const std::string& engine = report.engine;
    const Decision& d = report.decision;
    knob_.Add({{"engine", engine}, {"knob", std::string(optimize::knob_field(kind))}})
        .Set(d.knob ? static_cast<double>(d.knob->value) : 0);
    for (const GovernState state :
         {GovernState::kGoverning, GovernState::kUnattainable, GovernState::kWaiting}) {
      state_.Add({{"engine", engine}, {"state", std::string(to_string(state))}})
          .Set(d.state == state ? 1 : 0);
    }
    if (d.p99_ttft_s) {
      latency_.Add({{"engine", engine}, {"slo", "ttft"}}).Set(*d.p99_ttft_s);
    }
    if (d.p99_tpot_s) {
      latency_.Add({{"engine", engine}, {"slo", "tpot"}}).Set(*d.p99_tpot_s);
    }
    if (d.idle) {
      energy_.Add({{"engine", engine}, {"phase", "idle"}}).Increment(d.energy_j);
    } else {
      energy_.Add({{"engine", engine}, {"phase", "prefill"}}).Increment(d.prefill_energy_j);
      energy_.Add({{"engine", engine}, {"phase", "decode"}}).Increment(d.decode_energy_j);
      const double unsplit = d.energy_j - d.prefill_energy_j - d.decode_energy_j;
      if (unsplit >
          0) {  // busy without tokens (a long prefill in progress): charged to decode's running batch
        energy_.Add({{"engine", engine}, {"phase", "decode"}}).Increment(unsplit);
      }
    }
    if (d.j_per_output_token) {
      j_per_token_.Add({{"engine", engine}}).Set(*d.j_per_output_token);
    }
    if (d.j_per_request) {
      j_per_request_.Add({{"engine", engine}}).Set(*d.j_per_request);
    }
    tokens_.Add({{"engine", engine}, {"kind", "prompt"}}).Increment(d.prompt_tokens);
    tokens_.Add({{"engine", engine}, {"kind", "output"}}).Increment(d.output_tokens);
    decisions_.Add({{"engine", engine}, {"direction", std::string(direction(d))}}).Increment();
    static const prometheus::Histogram::BucketBoundaries tick_buckets{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02,
                                                                      0.05,   0.1,   0.25,  0.5,   1};
    tick_time_.Add({{"engine", engine}}, tick_buckets).Observe(report.tick_s);
  }

 private:
  prometheus::Family<prometheus::Gauge>& knob_;
  prometheus::Family<prometheus::Gauge>& state_;
  prometheus::Family<prometheus::Gauge>& slo_;
  prometheus::Family<prometheus::Gauge>& latency_;
  prometheus::Family<prometheus::Counter>& energy_;
  prometheus::Family<prometheus::Gauge>& j_per_token_;
  prometheus::Family<prometheus::Gauge>& j_per_request_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Counter>& decisions_;
  prometheus::Family<prometheus::Histogram>& tick_time_;
};

nlohmann::ordered_json knob_json(const std::optional<optimize::Knob>& knob) {
  if (!knob) {
    return nullptr;
  }
  return {{"kind", optimize::knob_field(knob->kind)}, {"value", knob->value}};
}

template <typename T>
nlohmann::ordered_json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

}  // namespace

struct Sidecar::Impl {
  std::vector<std::unique_ptr<EngineGovernor>> governors;
  GovernOptions options;
  std::shared_ptr<Clock> clock;
  GovernMetrics metrics;

  Impl(std::vector<std::unique_ptr<EngineGovernor>> g, const GovernOptions& o, std::shared_ptr<Clock> c,
       metrics::MetricsRegistry& registry)
      : governors(std::move(g)), options(o), clock(std::move(c)), metrics(registry.registry()) {}
};

Sidecar::Sidecar(std::vector<std::unique_ptr<EngineGovernor>> governors, const GovernOptions& options,
                 std::shared_ptr<Clock> clock, metrics::MetricsRegistry& registry)
    : impl_(std::make_unique<Impl>(std::move(governors), options, std::move(clock), registry)) {
  if (impl_->governors.empty()) {
    throw Exception(ErrorCode::kInvalidArgument, "a sidecar needs at least one engine");
  }
  for (const auto& governor : impl_->governors) {
    impl_->metrics.set_slo(governor->target().name, options.slo);
  }
}

Sidecar::~Sidecar() {
  (void)restore();
}

std::vector<TickReport> Sidecar::tick() {
  std::vector<TickReport> reports;
  for (const auto& governor : impl_->governors) {
    const auto started = std::chrono::steady_clock::now();
    TickReport report{governor->target().name, governor->tick(), 0};
    report.tick_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    impl_->metrics.record(report, impl_->options.knob);
    reports.push_back(std::move(report));
  }
  return reports;
}

void Sidecar::run(double duration_s, const Waiter& wait,
                  const std::function<void(const TickReport&)>& on_tick) {
  Clock& clock = *impl_->clock;
  const double start_s = seconds_of(clock);
  double next_s = start_s;
  while (true) {
    for (const TickReport& report : tick()) {
      if (on_tick) {
        on_tick(report);
      }
    }
    next_s = std::max(next_s + impl_->options.interval_s, seconds_of(clock));  // an overrun skips periods
    if (duration_s >= 0) {
      next_s = std::min(next_s, start_s + duration_s);
    }
    const double wait_s = std::max(0.0, next_s - seconds_of(clock));
    if (wait(std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(wait_s))) ||
        (duration_s >= 0 && seconds_of(clock) - start_s >= duration_s - 1e-9)) {
      break;
    }
  }
  (void)restore();
}

Result<void> Sidecar::restore() {
  Result<void> first;
  for (const auto& governor : impl_->governors) {
    auto restored = governor->restore();
    if (!restored && first) {
      first = std::move(restored);
    }
  }
  return first;
}

const std::vector<std::unique_ptr<EngineGovernor>>& Sidecar::governors() const {
  return impl_->governors;
}

std::string to_json_line(const TickReport& report) {
  const Decision& d = report.decision;
  nlohmann::ordered_json line = {
      {"time_s", d.time_s},
      {"engine", report.engine},
      {"state", to_string(d.state)},
      {"knob", knob_json(d.knob)},
      {"previous", knob_json(d.previous)},
      {"changed", d.changed()},
      {"reason", d.reason},
      {"p99_ttft_s", optional_json(d.p99_ttft_s)},
      {"p99_tpot_s", optional_json(d.p99_tpot_s)},
      {"energy_j", d.energy_j},
      {"prefill_energy_j", d.prefill_energy_j},
      {"decode_energy_j", d.decode_energy_j},
      {"prompt_tokens", d.prompt_tokens},
      {"output_tokens", d.output_tokens},
      {"finished_requests", optional_json(d.finished_requests)},
      {"j_per_output_token", optional_json(d.j_per_output_token)},
      {"j_per_request", optional_json(d.j_per_request)},
      {"idle", d.idle},
      {"tick_s", report.tick_s},
  };
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace joule::govern
