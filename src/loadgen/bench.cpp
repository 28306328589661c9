// SPDX-License-Identifier: Apache-2.0
// The open-loop run: requests are queued at their scheduled times whatever the server's pace (a slow server
// makes them late, never fewer), and the energy measured over the run is shared among the requests in
// flight, period by period.
#include "joule/loadgen/bench.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <mutex>
#include <semaphore>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "joule/core/numeric.hpp"
#include "joule/core/units.hpp"
#include "joule/loadgen/stream.hpp"
#include "joule/measure/power_sampler.hpp"
#include "joule/measure/request_energy.hpp"

#include "loadgen/worker_pool.hpp"

namespace joule::loadgen {

Result<std::vector<RequestRecord>> plan_requests(std::span<const TraceRequest> trace,
                                                 const PlanOptions& options) {
  std::vector<RequestRecord> plan;
  if (trace.empty()) {
    return plan;
  }
  const double first_arrival_s = trace.front().arrival_s;
  int64_t prompt_tokens = 0;
  for (const TraceRequest& request : trace) {
    const double at_s = (request.arrival_s - first_arrival_s) / options.rate_scale;
    if (options.duration_s && at_s >= *options.duration_s) {
      break;
    }
    RequestRecord record;
    record.scheduled_s = at_s;
    record.requested_prompt_tokens = request.prompt_tokens;
    record.max_tokens = request.output_tokens;
    plan.push_back(std::move(record));
    // Each count is bounded by the trace's reader; their sum is what the prompts built up front take.
    if (__builtin_add_overflow(prompt_tokens, request.prompt_tokens, &prompt_tokens) ||
        prompt_tokens > kMaxRunPromptTokens) {
      return fail(ErrorCode::kOutOfRange,
                  "the requests to send ask for more than {} prompt tokens in all, the most one run builds "
                  "prompts for (about 5 GB of text, held for the run); send fewer with --duration-s",
                  kMaxRunPromptTokens);
    }
  }
  return plan;
}

std::string_view to_string(Attribution attribution) {
  switch (attribution) {
    case Attribution::kWork:
      return "work";
    case Attribution::kEqual:
      return "equal";
    case Attribution::kServer:
      return "server";
  }
  return "work";
}

Result<Attribution> parse_attribution(std::string_view name) {
  for (const Attribution attribution : {Attribution::kWork, Attribution::kEqual, Attribution::kServer}) {
    if (name == to_string(attribution)) {
      return attribution;
    }
  }
  return fail(ErrorCode::kInvalidArgument, "unknown attribution '{}': expected work, equal or server", name);
}

namespace {

// Sends every planned request at its time on `clock` by a pool of workers, from the time `start` returns
// (called once the first workers run); fills in each record's times and answer. @return the number of
// workers started.
size_t send_all(std::vector<RequestRecord>& records, const std::vector<std::string>& bodies, Clock& clock,
                const Endpoint& endpoint, const BenchOptions& options, const std::function<Nanos()>& start) {
  Nanos t0{0};  // the run's start: set before the first request is queued
  const auto since_start_s = [&] { return to_seconds(clock.now() - t0); };
  std::mutex records_mutex;  // guards the records' fields while workers write them
  // Responses are parsed by as many workers at once as there are cores (parsing gains nothing from more): a
  // parsed body can take ~20 times its size (8 MiB of "[0,0,…" is ~150 MB), so this, not max_concurrency,
  // bounds that memory.
  std::counting_semaphore<> parsers(std::max<std::ptrdiff_t>(1, std::thread::hardware_concurrency()));
  const double period_s = to_seconds(options.sampling_period);
  // A few workers up front: thread start-up then delays no early request.
  detail::WorkerPool pool(
      endpoint.host, endpoint.port, options.max_concurrency, 16,
      [&](http::Connection& connection, size_t index) {
        const double start_s = since_start_s();
        Completion completion;
        double end_s = 0;
        if (options.stream) {
          // Events are parsed as they come (each at most 64 KiB: no parser slot).
          CompletionStream stream(since_start_s, start_s, period_s);
          const auto response = connection.request(
              "POST", "/v1/completions", bodies[index], "application/json", {}, options.limits,
              [&](std::string_view piece) { return stream.on_body(piece); });
          end_s = since_start_s();
          completion = stream.finish(response, options.limit_names);
        } else {
          const auto response = connection.request("POST", "/v1/completions", bodies[index],
                                                   "application/json", {}, options.limits);
          end_s = since_start_s();
          // Parsed before taking the lock, which every worker shares.
          parsers.acquire();
          completion = read_completion(response, options.limit_names);
          parsers.release();
        }
        std::lock_guard lock(records_mutex);
        RequestRecord& record = records[index];
        record.start_s = start_s;
        record.end_s = end_s;
        record.completion = std::move(completion);
      });
  t0 = start();
  for (size_t i = 0; i < records.size(); ++i) {
    const Nanos due =
        t0 + std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(records[i].scheduled_s));
    const Nanos wait = due - clock.now();
    if (wait > Nanos(0)) {
      std::this_thread::sleep_for(wait);
    }
    const bool late = pool.submit(i);
    std::lock_guard lock(records_mutex);
    records[i].late = late;
  }
  pool.close();
  return pool.workers();
}

// The requests' work as measure sees it: the server's prompt count (the trace's when it gave none), the
// stream's first token and arrivals; a request not streamed spreads its work over its flight. A failed
// request's work is not known (a refused prompt was never processed): none, so it shares only the intervals
// without work.
std::vector<measure::RequestWork> request_work(const std::vector<RequestRecord>& records) {
  std::vector<measure::RequestWork> work;
  work.reserve(records.size());
  for (const RequestRecord& record : records) {
    const Completion& answer = record.completion;
    int64_t prompt = answer.prompt_tokens > 0 ? answer.prompt_tokens : record.requested_prompt_tokens;
    prompt = answer.outcome == Outcome::kOk ? prompt : 0;
    work.push_back({record.start_s, record.end_s, static_cast<double>(prompt), answer.first_token_s,
                    static_cast<double>(answer.completion_tokens), answer.arrivals});
  }
  return work;
}

// Shares the intervals' energy among the run's requests by options.attribution.
Result<void> share(BenchRun& run, std::span<const measure::EnergyInterval> intervals,
                   const BenchOptions& options) {
  run.attribution = options.attribution;
  measure::TimelineAttribution attribution;
  if (options.attribution == Attribution::kEqual) {
    std::vector<measure::FlightInterval> flights;
    flights.reserve(run.requests.size());
    for (const RequestRecord& record : run.requests) {
      flights.push_back({record.start_s, record.end_s});
    }
    attribution = JOULE_TRY(measure::attribute_energy_over_time(intervals, flights));
  } else {
    attribution =
        JOULE_TRY(measure::attribute_energy_by_work(intervals, request_work(run.requests), options.weights));
  }
  for (size_t i = 0; i < run.requests.size(); ++i) {
    run.requests[i].energy_j = attribution.request_energy_j[i];
    if (const auto& server = run.requests[i].completion.server_energy_j) {
      run.server_energy_j = run.server_energy_j.value_or(0) + *server;
    }
  }
  run.attributed_energy_j = attribution.attributed_energy_j;
  run.idle_energy_j = attribution.idle_energy_j;
  if (options.attribution == Attribution::kServer) {
    run.attributed_energy_j = 0;
    for (RequestRecord& record : run.requests) {
      record.energy_j = record.completion.server_energy_j.value_or(record.energy_j);
      run.attributed_energy_j += record.energy_j;
    }
    run.idle_energy_j = attribution.energy_j - run.attributed_energy_j;
  }
  return {};
}

// The run [t0, t1] cut into sampling periods; each GPU's sampled energy per period, scaled so that the
// GPU's periods add up to what the monitor measured (the samples give the shape over time, the monitor the
// total), summed over GPUs, then shared among the requests in flight.
Result<void> attribute(BenchRun& run, std::span<device::Gpu* const> gpus,
                       const measure::Measurement& measurement, const measure::PowerSampler& sampler,
                       Nanos t0, Nanos t1, const BenchOptions& options) {
  const Nanos period = options.sampling_period;
  const double span_s = to_seconds(t1 - t0);
  const double period_s = to_seconds(period);
  std::vector<measure::EnergyInterval> intervals;
  const auto periods = static_cast<size_t>(std::ceil(span_s / period_s));
  for (size_t i = 0; i < periods; ++i) {
    const double start_s = static_cast<double>(i) * period_s;
    // Each end is the next start, computed the same way, so that rounding never makes them overlap.
    intervals.push_back({start_s, std::min(static_cast<double>(i + 1) * period_s, span_s), 0});
  }
  const auto at = [t0](double seconds) {
    return t0 + std::chrono::duration_cast<Nanos>(std::chrono::duration<double>(seconds));
  };
  for (size_t g = 0; g < gpus.size(); ++g) {
    const GpuEnergy figure{gpus[g]->info().index, gpus[g]->info().name, measurement.gpu_energy[g].energy_j,
                           measurement.gpu_energy[g].source};
    run.gpus.push_back(figure);
    run.energy_j += figure.energy_j;
    run.estimated = run.estimated || measurement.gpu_energy[g].estimated();
    std::vector<double> sampled(intervals.size(), 0.0);
    double sampled_total_j = 0;
    for (size_t i = 0; i < intervals.size(); ++i) {
      sampled[i] = JOULE_TRY(sampler.energy_j(g, at(intervals[i].start_s), at(intervals[i].end_s)));
      sampled_total_j += sampled[i];
    }
    const double scale = sampled_total_j > 0 ? figure.energy_j / sampled_total_j : 0.0;
    for (size_t i = 0; i < intervals.size(); ++i) {
      intervals[i].energy_j += sampled[i] * scale;
    }
  }
  return share(run, intervals, options);
}

}  // namespace

Result<BenchRun> run_bench(std::span<device::Gpu* const> gpus, Clock& clock, const Endpoint& endpoint,
                           const std::string& model, std::vector<RequestRecord> plan,
                           const BenchOptions& options) {
  BenchRun run;
  run.requests = std::move(plan);
  // Bodies are built before the clock starts.
  std::vector<std::string> bodies;
  bodies.reserve(run.requests.size());
  for (size_t i = 0; i < run.requests.size(); ++i) {
    bodies.push_back(completion_body(
        model, synthetic_prompt(run.requests[i].requested_prompt_tokens, i, options.prompt_words),
        run.requests[i].max_tokens, options.stream));
  }
  const std::vector<device::Gpu*> measured(gpus.begin(), gpus.end());
  measure::EnergyMonitor monitor(measured, {}, clock);
  measure::PowerSampler sampler(measured, clock, options.sampling_period);
  Nanos t0{0};
  run.workers = send_all(run.requests, bodies, clock, endpoint, options, [&] {
    sampler.start();
    t0 = clock.now();
    monitor.begin_window("infer-bench", false);
    return t0;
  });
  sampler.sample_now();
  const Nanos t1 = clock.now();
  const measure::Measurement measurement = monitor.end_window("infer-bench", false);
  sampler.stop();
  run.duration_s = measurement.time_s;
  JOULE_TRY(attribute(run, gpus, measurement, sampler, t0, t1, options));
  return run;
}

Result<BenchSummary> summarize(std::span<const RequestRecord> requests) {
  BenchSummary summary;
  std::vector<double> latencies, ttfts, tpots;
  double first_error_at = INFINITY;
  const auto add = [](int64_t& total, int64_t count, std::string_view what) -> Result<void> {
    if (__builtin_add_overflow(total, count, &total)) {
      return fail(ErrorCode::kOutOfRange, "the {} add up to more than {}", what,
                  std::numeric_limits<int64_t>::max());
    }
    return {};
  };
  for (const RequestRecord& record : requests) {
    const Completion& answer = record.completion;
    summary.late += record.late ? 1 : 0;
    summary.max_start_delay_s = std::max(summary.max_start_delay_s, record.start_s - record.scheduled_s);
    switch (answer.outcome) {
      case Outcome::kOk:
        ++summary.ok;
        break;
      case Outcome::kHttpError:
        ++summary.http_errors;
        break;
      case Outcome::kTimeout:
        ++summary.timeouts;
        break;
      case Outcome::kConnectionError:
        ++summary.connection_errors;
        break;
      case Outcome::kBadResponse:
      case Outcome::kPending:
        ++summary.bad_responses;
        break;
    }
    if (answer.outcome != Outcome::kOk) {
      if (record.end_s < first_error_at) {
        first_error_at = record.end_s;
        summary.first_error = answer.error;
      }
      continue;
    }
    JOULE_TRY(add(summary.requested_prompt_tokens, record.requested_prompt_tokens, "trace's prompt tokens"));
    JOULE_TRY(add(summary.prompt_tokens, answer.prompt_tokens, "prompt tokens of the responses"));
    JOULE_TRY(add(summary.output_tokens, answer.completion_tokens, "completion tokens of the responses"));
    latencies.push_back(record.latency_s());
    summary.streamed += answer.streamed ? 1 : 0;
    summary.tokens_counted += answer.tokens_counted ? 1 : 0;
    if (answer.ttft_s) {
      ttfts.push_back(*answer.ttft_s);
    }
    if (answer.tpot_s) {
      tpots.push_back(*answer.tpot_s);
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    summary.latency_s[i] = numeric::nearest_rank_percentile(latencies, kPercentileShares[i]);
    summary.ttft_s[i] = numeric::nearest_rank_percentile(ttfts, kPercentileShares[i]);
    summary.tpot_s[i] = numeric::nearest_rank_percentile(tpots, kPercentileShares[i]);
  }
  return summary;
}

}  // namespace joule::loadgen
