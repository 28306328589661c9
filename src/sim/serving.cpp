// SPDX-License-Identifier: Apache-2.0
#include "joule/sim/serving.hpp"

#include <algorithm>
#include <cmath>
#include <deque>

#include <fmt/format.h>

#include "joule/core/csv.hpp"
#include "joule/core/file.hpp"
#include "joule/core/numeric.hpp"

namespace joule::sim {

namespace {

// A request's token count: a whole number from 1 to kMaxTraceTokens.
Result<int64_t> trace_token_count(const csv::Table::Row& row, size_t column) {
  const int64_t tokens = JOULE_TRY(row.integer(column));
  if (tokens < 1) {
    return tl::unexpected(row.error_at(column, fmt::format("expected at least 1 token, got {}", tokens)));
  }
  if (tokens > kMaxTraceTokens) {
    return tl::unexpected(row.error_at(
        column, fmt::format("expected at most {} tokens per request, got {}", kMaxTraceTokens, tokens)));
  }
  return tokens;
}

}  // namespace

Result<ServingTrace> parse_serving_trace(std::string_view text, const std::string& source) {
  const csv::Table table = JOULE_TRY(csv::parse(text, source));
  const size_t arrival_column = JOULE_TRY(table.column("arrival_s"));
  const size_t prompt_column = JOULE_TRY(table.column("prompt_tokens"));
  const size_t output_column = JOULE_TRY(table.column("output_tokens"));
  if (table.row_count() == 0) {
    return fail(ErrorCode::kParse, "{}: no request (only a header)", source);
  }
  ServingTrace trace;
  trace.source = source;
  trace.requests.reserve(table.row_count());
  double previous_arrival_s = 0;
  for (size_t i = 0; i < table.row_count(); ++i) {
    const csv::Table::Row row = table.row(i);
    ServingRequest request;
    request.arrival_s = JOULE_TRY(row.number(arrival_column));
    if (!std::isfinite(request.arrival_s) || request.arrival_s < 0) {
      return tl::unexpected(row.error_at(
          arrival_column, fmt::format("expected a finite time >= 0, got {}", row.text(arrival_column))));
    }
    if (request.arrival_s < previous_arrival_s) {
      return tl::unexpected(row.error_at(
          arrival_column, fmt::format("arrivals must not go back in time (unsorted trace): {} s after {} s",
                                      row.text(arrival_column), previous_arrival_s)));
    }
    previous_arrival_s = request.arrival_s;
    request.prompt_tokens = JOULE_TRY(trace_token_count(row, prompt_column));
    request.output_tokens = JOULE_TRY(trace_token_count(row, output_column));
    trace.requests.push_back(request);
  }
  return trace;
}

Result<ServingTrace> read_serving_trace(const std::string& path) {
  return parse_serving_trace(JOULE_TRY(read_text_file(path)), path);
}

double ServedRequest::tpot_s() const {
  return output_tokens > 1 ? (finish_s - first_token_s) / static_cast<double>(output_tokens - 1) : 0.0;
}

Result<void> check_fits(const ServingTrace& trace, const LlmCostModel& cost, const EngineOptions& options) {
  if (options.max_batch < 1 || options.max_batch_tokens < options.max_batch) {
    return fail(
        ErrorCode::kInvalidArgument,
        "need max_batch >= 1 and max_batch_tokens >= max_batch, got max_batch {} and max_batch_tokens {}",
        options.max_batch, options.max_batch_tokens);
  }
  if (!(options.kv_memory_share > 0 && options.kv_memory_share <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "the KV memory share must be in (0, 1], got {}",
                options.kv_memory_share);
  }
  const int64_t capacity = cost.kv_cache_tokens(options.kv_memory_share);
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const ServingRequest& request = trace.requests[i];
    if (request.prompt_tokens + request.output_tokens > capacity) {
      return fail(ErrorCode::kInvalidArgument,
                  "{}: request {} (line {}) needs {} tokens of KV cache, more than the {} that fit {} × {} "
                  "serving {}",
                  trace.source, i + 1, i + 2, request.prompt_tokens + request.output_tokens, capacity,
                  cost.tensor_parallel(), cost.gpu().key, cost.model().key);
    }
  }
  return {};
}

std::vector<uint32_t> power_limit_knobs_w(const LlmGpuSpec& gpu) {
  std::vector<uint32_t> limits;
  const auto top = static_cast<uint32_t>(std::floor(gpu.tdp_w));
  const auto bottom = static_cast<uint32_t>(std::ceil(gpu.min_power_limit_w));
  for (uint32_t limit = top; limit >= bottom && limit >= 5; limit -= 5) {
    limits.push_back(limit);
  }
  if (limits.empty() || limits.back() != bottom) {
    limits.push_back(bottom);
  }
  return limits;
}

std::vector<uint32_t> knob_values(const LlmCostModel& cost, optimize::KnobKind kind) {
  return kind == optimize::KnobKind::kSmClockMhz ? cost.supported_clocks_mhz()
                                                 : power_limit_knobs_w(cost.gpu());
}

namespace {

struct Running {
  size_t request = 0;
  int64_t prompt_done = 0;
  int64_t generated = 0;
  double decode_mark_j = 0;  // the decode accumulator when it started decoding
};

// The nearest-rank percentile; 0 when there is no value.
double percentile(std::vector<double>& values, double share) {
  return numeric::nearest_rank_percentile(values, share).value_or(0.0);
}

struct BucketSums {
  int64_t arrivals = 0;
  double busy_s = 0;
  double clock_time = 0;
  double energy_j = 0;
  std::vector<double> ttfts;
  std::vector<double> tpots;
};

}  // namespace

ServingReplay replay_serving(const ServingTrace& trace, const LlmCostModel& cost,
                             optimize::ServingKnobPolicy& policy, const optimize::ServingSlo& slo,
                             const ReplayOptions& options) {
  value_or_throw(check_fits(trace, cost, options.engine));
  if (policy.knob_kind() != options.engine.knob) {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("serving replay: the policy '{}' turns the {}, the engine the {}", policy.name(),
                    optimize::knob_field(policy.knob_kind()), optimize::knob_field(options.engine.knob)));
  }
  const EngineOptions& engine = options.engine;
  const auto& requests = trace.requests;
  const int tp = cost.tensor_parallel();
  const double idle_power_w = cost.gpu().idle_power_w * tp;
  const int64_t kv_capacity = cost.kv_cache_tokens(engine.kv_memory_share);

  ServingReplay replay;
  replay.summary.name = policy.name();
  replay.requests.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    replay.requests[i].arrival_s = requests[i].arrival_s;
    replay.requests[i].prompt_tokens = requests[i].prompt_tokens;
    replay.requests[i].output_tokens = requests[i].output_tokens;
  }
  std::vector<BucketSums> buckets;
  const auto bucket_at = [&](double time_s) -> BucketSums* {
    if (options.bucket_s <= 0) {
      return nullptr;
    }
    const auto index = static_cast<size_t>(time_s / options.bucket_s);
    if (index >= buckets.size()) {
      buckets.resize(index + 1);
    }
    return &buckets[index];
  };

  std::deque<size_t> waiting;
  std::vector<Running> prefilling;  // admitted, prompt not done; in admission order
  std::vector<Running> decoding;
  int64_t kv_used = 0;
  size_t next_arrival = 0;
  size_t finished = 0;
  double now_s = requests.empty() ? 0.0 : requests.front().arrival_s;
  double start_s = now_s;
  double decode_accumulator_j = 0;  // Σ energy per token over iterations (the tokens rule)
  double busy_s = 0;
  double knob_time = 0;
  double clock_time = 0;
  ReplayIteration record;
  std::vector<int64_t> chunk_tokens;
  std::vector<double> ttfts;
  std::vector<double> tpots;
  ttfts.reserve(requests.size());
  tpots.reserve(requests.size());
  int64_t met = 0;

  const auto finish = [&](const Running& running, double at_s) {
    ServedRequest& served = replay.requests[running.request];
    served.finish_s = at_s;
    if (options.attribute) {
      served.decode_energy_j = decode_accumulator_j - running.decode_mark_j;
      served.energy_j = served.prefill_energy_j + served.decode_energy_j;
    }
    kv_used -= served.prompt_tokens + served.output_tokens;
    ++finished;
    const double ttft = served.ttft_s();
    const double tpot = served.tpot_s();
    const std::optional<double> request_tpot =
        served.output_tokens > 1 ? std::optional<double>(tpot) : std::nullopt;
    ttfts.push_back(ttft);
    if (request_tpot) {
      tpots.push_back(tpot);
    }
    if (slo.met(ttft, request_tpot)) {
      ++met;
    }
    policy.on_request_done({at_s, ttft, request_tpot, served.prompt_tokens});
    if (BucketSums* bucket = bucket_at(at_s)) {
      bucket->ttfts.push_back(ttft);
      if (served.output_tokens > 1) {
        bucket->tpots.push_back(tpot);
      }
    }
  };

  while (finished < requests.size()) {
    while (next_arrival < requests.size() && requests[next_arrival].arrival_s <= now_s) {
      if (BucketSums* bucket = bucket_at(requests[next_arrival].arrival_s)) {
        ++bucket->arrivals;
      }
      waiting.push_back(next_arrival++);
    }
    if (decoding.empty() && prefilling.empty() && waiting.empty()) {
      const double until_s = requests[next_arrival].arrival_s;
      const double energy_j = idle_power_w * (until_s - now_s);
      replay.summary.idle_energy_j += energy_j;
      if (BucketSums* bucket = bucket_at(now_s)) {
        bucket->energy_j += energy_j;
      }
      policy.on_idle(now_s, until_s, energy_j);
      if (options.on_idle) {
        options.on_idle(now_s, until_s, energy_j);
      }
      now_s = until_s;
      continue;
    }
    // The batch: every decoding request decodes one token, then prompt chunks fill the token budget —
    // first the prompts already admitted, then new requests in arrival order while they fit.
    IterationBatch batch;
    int64_t budget = engine.max_batch_tokens;
    for (const Running& running : decoding) {
      batch.add_decode(requests[running.request].prompt_tokens + running.generated);
    }
    budget -= static_cast<int64_t>(decoding.size());
    while (!waiting.empty() && static_cast<int64_t>(decoding.size() + prefilling.size()) < engine.max_batch) {
      const ServingRequest& request = requests[waiting.front()];
      if (kv_used + request.prompt_tokens + request.output_tokens > kv_capacity) {
        break;
      }
      kv_used += request.prompt_tokens + request.output_tokens;
      prefilling.push_back({waiting.front(), 0, 0, 0});
      waiting.pop_front();
    }
    // Prompt chunks, in admission order, while the token budget lasts.
    chunk_tokens.assign(prefilling.size(), 0);
    for (size_t i = 0; i < prefilling.size() && budget > 0; ++i) {
      const Running& running = prefilling[i];
      const int64_t chunk = std::min(requests[running.request].prompt_tokens - running.prompt_done, budget);
      chunk_tokens[i] = chunk;
      batch.add_prefill(chunk, running.prompt_done);
      budget -= chunk;
    }
    if (batch.empty()) {
      // Nothing admitted (the KV cache is full of prompts that wait for none): cannot happen with
      // check_fits(), but never spin.
      throw Exception(ErrorCode::kInternal, "serving replay: an empty iteration with requests waiting");
    }

    const optimize::Knob knob = policy.knob();
    const IterationCost iteration =
        knob.kind == optimize::KnobKind::kSmClockMhz
            ? cost.at_power_limit(batch, cost.gpu().tdp_w, static_cast<double>(knob.value))
            : cost.at_power_limit(batch, static_cast<double>(knob.value));
    const double energy_j = iteration.energy_j(tp);
    const double iteration_start_s = now_s;
    now_s += iteration.time_s;
    busy_s += iteration.time_s;
    clock_time += iteration.clock_mhz * iteration.time_s;
    knob_time += static_cast<double>(knob.value) * iteration.time_s;
    replay.summary.energy_j += energy_j;
    ++replay.summary.iterations;
    if (BucketSums* bucket = bucket_at(iteration_start_s)) {
      bucket->busy_s += iteration.time_s;
      bucket->clock_time += iteration.clock_mhz * iteration.time_s;
      bucket->energy_j += energy_j;
    }
    // The tokens rule: every token processed in the iteration costs the same share of its energy.
    const double per_token_j = energy_j / static_cast<double>(batch.tokens());
    decode_accumulator_j += per_token_j;
    if (options.on_iteration) {
      record.start_s = iteration_start_s;
      record.end_s = now_s;
      record.energy_j = energy_j;
      record.clock_mhz = iteration.clock_mhz;
      record.work.clear();
      for (const Running& running : decoding) {
        record.work.push_back(
            {running.request, 0, 1, false, requests[running.request].prompt_tokens + running.generated});
      }
      for (size_t i = 0; i < prefilling.size(); ++i) {
        if (chunk_tokens[i] == 0) {
          continue;
        }
        const bool first =
            prefilling[i].prompt_done + chunk_tokens[i] == requests[prefilling[i].request].prompt_tokens;
        record.work.push_back({prefilling[i].request, chunk_tokens[i], 0, first, prefilling[i].prompt_done});
      }
      options.on_iteration(record);
    }

    // Decoding requests each got a token; the finished ones leave (swap-remove: order does not matter).
    for (size_t i = 0; i < decoding.size();) {
      Running& running = decoding[i];
      ++running.generated;
      if (running.generated == requests[running.request].output_tokens) {
        finish(running, now_s);
        decoding[i] = decoding.back();
        decoding.pop_back();
      } else {
        ++i;
      }
    }
    // Prompt chunks: a finished prompt emits the first token and starts decoding next iteration.
    size_t kept = 0;
    for (size_t i = 0; i < prefilling.size(); ++i) {
      Running running = prefilling[i];
      running.prompt_done += chunk_tokens[i];
      ServedRequest& served = replay.requests[running.request];
      if (options.attribute) {
        served.prefill_energy_j += per_token_j * static_cast<double>(chunk_tokens[i]);
      }
      if (running.prompt_done < served.prompt_tokens) {
        prefilling[kept++] = running;
        continue;
      }
      served.first_token_s = now_s;
      running.generated = 1;
      // The first token's share was charged as prefill; decode energy counts from the next iteration on.
      running.decode_mark_j = decode_accumulator_j;
      if (served.output_tokens == 1) {
        finish(running, now_s);
      } else {
        decoding.push_back(running);
      }
    }
    prefilling.resize(kept);

    optimize::IterationSample sample;
    sample.start_s = iteration_start_s;
    sample.end_s = now_s;
    sample.energy_j = energy_j;
    sample.knob = knob;
    sample.decode_requests = batch.decode_requests;
    sample.prefill_tokens = batch.prefill_tokens;
    // Waiting: requests the engine could not admit (batch, token or KV limits). The oldest wait also counts
    // arrivals during the iteration, which the next iteration admits.
    double oldest_arrival_s = waiting.empty() ? now_s : requests[waiting.front()].arrival_s;
    if (next_arrival < requests.size() && requests[next_arrival].arrival_s <= now_s) {
      oldest_arrival_s = std::min(oldest_arrival_s, requests[next_arrival].arrival_s);
    }
    sample.waiting_requests = static_cast<int64_t>(waiting.size());
    sample.oldest_waiting_s = now_s - oldest_arrival_s;
    policy.on_iteration(sample);
  }

  ServingSummary& summary = replay.summary;
  summary.energy_j += summary.idle_energy_j;
  summary.requests = static_cast<int64_t>(requests.size());
  for (const ServedRequest& served : replay.requests) {
    summary.output_tokens += served.output_tokens;
  }
  summary.duration_s = now_s - start_s;
  summary.j_per_token =
      summary.output_tokens > 0 ? summary.energy_j / static_cast<double>(summary.output_tokens) : 0;
  summary.p50_ttft_s = percentile(ttfts, 0.5);
  summary.p99_ttft_s = percentile(ttfts, 0.99);
  summary.p50_tpot_s = percentile(tpots, 0.5);
  summary.p99_tpot_s = percentile(tpots, 0.99);
  summary.slo_attainment =
      requests.empty() ? 1.0 : static_cast<double>(met) / static_cast<double>(requests.size());
  summary.mean_clock_mhz = busy_s > 0 ? clock_time / busy_s : 0;
  summary.knob_kind = engine.knob;
  summary.mean_knob_value = busy_s > 0 ? knob_time / busy_s : 0;

  replay.buckets.reserve(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    BucketSums& sums = buckets[i];
    ServingBucket bucket;
    bucket.start_s = static_cast<double>(i) * options.bucket_s;
    bucket.arrivals_per_s = static_cast<double>(sums.arrivals) / options.bucket_s;
    bucket.mean_clock_mhz = sums.busy_s > 0 ? sums.clock_time / sums.busy_s : 0;
    bucket.power_w = sums.energy_j / options.bucket_s;
    bucket.p99_ttft_s = percentile(sums.ttfts, 0.99);
    bucket.p99_tpot_s = percentile(sums.tpots, 0.99);
    replay.buckets.push_back(bucket);
  }
  return replay;
}

namespace {

// The best fixed clock in hindsight: the least-energy knob whose replay meets the attainment target.
// Attainment grows with the clock, so a binary search finds the lowest feasible knob; energy over the
// feasible knobs is searched by golden section (it is unimodal in the clock: static power against dynamic).
struct HindsightSearch {
  const ServingTrace& trace;
  const LlmCostModel& cost;
  const optimize::ServingSlo& slo;
  ReplayOptions options;
  optimize::KnobKind kind;
  const std::vector<uint32_t>& knobs;  // fastest first
  std::vector<std::optional<ServingSummary>> cache;

  const ServingSummary& at(size_t index) {
    if (!cache[index]) {
      optimize::FixedKnobPolicy policy("best_fixed_clock", {kind, knobs[index]});
      cache[index] = replay_serving(trace, cost, policy, slo, options).summary;
    }
    return *cache[index];
  }
  bool feasible(size_t index) { return at(index).slo_attainment >= slo.attainment; }

  size_t run() {
    cache.assign(knobs.size(), std::nullopt);
    size_t low = 0;  // feasible (checked by the caller)
    size_t high = knobs.size() - 1;
    if (feasible(high)) {
      low = high;
    } else {
      while (high - low > 1) {
        const size_t middle = (low + high) / 2;
        (feasible(middle) ? low : high) = middle;
      }
    }
    // Golden section over [0, low] for the least energy, then the exact neighbours.
    size_t a = 0;
    size_t b = low;
    while (b - a > 3) {
      const size_t c = a + (b - a) * 382 / 1000;
      const size_t d = a + (b - a) * 618 / 1000;
      if (at(c).energy_j <= at(d).energy_j) {
        b = d;
      } else {
        a = c;
      }
    }
    size_t best = a;
    for (size_t i = a; i <= b; ++i) {
      if (feasible(i) && at(i).energy_j < at(best).energy_j) {
        best = i;
      }
    }
    return best;
  }
};

}  // namespace

Result<ServingComparison> compare_serving_strategies(const ServingTrace& trace, const LlmCostModel& cost,
                                                     const optimize::ServingSlo& slo,
                                                     const ComparisonOptions& options) {
  JOULE_TRY(optimize::validate(slo));
  JOULE_TRY(check_fits(trace, cost, options.replay.engine));
  const optimize::KnobKind kind = options.replay.engine.knob;
  const std::vector<uint32_t> knobs = knob_values(cost, kind);
  const optimize::Knob top_knob{kind, knobs.front()};
  ServingComparison comparison;

  optimize::FixedKnobPolicy max_clock("max_clock", top_knob);
  comparison.strategies.push_back(replay_serving(trace, cost, max_clock, slo, options.replay));
  const ServingSummary& top = comparison.strategies.front().summary;

  if (top.slo_attainment < slo.attainment) {
    comparison.slo_unattainable = true;
    comparison.best_fixed = top_knob;
    comparison.note = fmt::format(
        "no clock meets the SLO (TTFT {} s, TPOT {} s for {:.4g}% of requests): at the maximum clock {:.4g}% "
        "of "
        "requests meet it, so best_fixed_clock and joule run at the maximum clock ({} {})",
        slo.ttft_s, slo.tpot_s, slo.attainment * 100, top.slo_attainment * 100, top_knob.value,
        optimize::knob_unit(kind));
    optimize::FixedKnobPolicy best("best_fixed_clock", top_knob);
    comparison.strategies.push_back(replay_serving(trace, cost, best, slo, options.replay));
    optimize::UtilizationGovernor governor(kind, knobs);
    comparison.strategies.push_back(replay_serving(trace, cost, governor, slo, options.replay));
    optimize::FixedKnobPolicy joule("joule", top_knob);
    comparison.strategies.push_back(replay_serving(trace, cost, joule, slo, options.replay));
    return comparison;
  }

  ReplayOptions quick = options.replay;
  quick.attribute = false;
  quick.bucket_s = 0;
  quick.on_iteration = nullptr;
  quick.on_idle = nullptr;
  HindsightSearch search{trace, cost, slo, quick, kind, knobs, {}};
  comparison.best_fixed = {kind, knobs[search.run()]};
  optimize::FixedKnobPolicy best("best_fixed_clock", comparison.best_fixed);
  comparison.strategies.push_back(replay_serving(trace, cost, best, slo, options.replay));
  optimize::UtilizationGovernor governor(kind, knobs);
  comparison.strategies.push_back(replay_serving(trace, cost, governor, slo, options.replay));
  optimize::SloClockController controller(slo, kind, knobs, options.controller);
  comparison.strategies.push_back(replay_serving(trace, cost, controller, slo, options.replay));
  if (controller.slo_unattainable()) {
    comparison.note =
        "the joule controller found the SLO unattainable at the end of the trace and ran at the maximum "
        "clock";
  }
  return comparison;
}

}  // namespace joule::sim
