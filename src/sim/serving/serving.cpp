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

// One replay: the engine's queues, the clock and the running sums, advanced one iteration at a time.
class ServingReplayRun {
 public:
  ServingReplayRun(const ServingTrace& trace, const LlmCostModel& cost, optimize::ServingKnobPolicy& policy,
                   const optimize::ServingSlo& slo, const ReplayOptions& options)
      : requests_(trace.requests),
        cost_(cost),
        policy_(policy),
        slo_(slo),
        options_(options),
        tp_(cost.tensor_parallel()),
        idle_power_w_(cost.gpu().idle_power_w * tp_),
        kv_capacity_(cost.kv_cache_tokens(options.engine.kv_memory_share)) {
    replay_.summary.name = policy.name();
    replay_.requests.resize(requests_.size());
    for (size_t i = 0; i < requests_.size(); ++i) {
      replay_.requests[i].arrival_s = requests_[i].arrival_s;
      replay_.requests[i].prompt_tokens = requests_[i].prompt_tokens;
      replay_.requests[i].output_tokens = requests_[i].output_tokens;
    }
    now_s_ = requests_.empty() ? 0.0 : requests_.front().arrival_s;
    start_s_ = now_s_;
    ttfts_.reserve(requests_.size());
    tpots_.reserve(requests_.size());
  }

  ServingReplay run() {
    while (finished_ < requests_.size()) {
      while (next_arrival_ < requests_.size() && requests_[next_arrival_].arrival_s <= now_s_) {
        if (BucketSums* bucket = bucket_at(requests_[next_arrival_].arrival_s)) {
          ++bucket->arrivals;
        }
        waiting_prompt_tokens_ += requests_[next_arrival_].prompt_tokens;
        waiting_.push_back(next_arrival_++);
      }
      if (decoding_.empty() && prefilling_.empty() && waiting_.empty()) {
        idle_until_next_arrival();
      } else {
        run_iteration();
      }
    }
    summarize();
    return std::move(replay_);
  }

 private:
  BucketSums* bucket_at(double time_s) {
    if (options_.bucket_s <= 0) {
      return nullptr;
    }
    const auto index = static_cast<size_t>(time_s / options_.bucket_s);
    if (index >= buckets_.size()) {
      buckets_.resize(index + 1);
    }
    return &buckets_[index];
  }

  void idle_until_next_arrival() {
    const double until_s = requests_[next_arrival_].arrival_s;
    const double energy_j = idle_power_w_ * (until_s - now_s_);
    replay_.summary.idle_energy_j += energy_j;
    if (BucketSums* bucket = bucket_at(now_s_)) {
      bucket->energy_j += energy_j;
    }
    policy_.on_idle(now_s_, until_s, energy_j);
    if (options_.on_idle) {
      options_.on_idle(now_s_, until_s, energy_j);
    }
    now_s_ = until_s;
  }

  // The batch: every decoding request decodes one token, then prompt chunks fill the token budget — first
  // the prompts already admitted, then new requests in arrival order while they fit.
  IterationBatch next_batch() {
    const EngineOptions& engine = options_.engine;
    IterationBatch batch;
    int64_t budget = engine.max_batch_tokens;
    for (const Running& running : decoding_) {
      batch.add_decode(requests_[running.request].prompt_tokens + running.generated);
    }
    budget -= static_cast<int64_t>(decoding_.size());
    while (!waiting_.empty() &&
           static_cast<int64_t>(decoding_.size() + prefilling_.size()) < engine.max_batch) {
      const ServingRequest& request = requests_[waiting_.front()];
      if (kv_used_ + request.prompt_tokens + request.output_tokens > kv_capacity_) {
        break;
      }
      kv_used_ += request.prompt_tokens + request.output_tokens;
      prefilling_.push_back({waiting_.front(), 0, 0, 0});
      waiting_prompt_tokens_ -= request.prompt_tokens;
      waiting_.pop_front();
    }
    // Prompt chunks, in admission order, while the token budget lasts.
    chunk_tokens_.assign(prefilling_.size(), 0);
    for (size_t i = 0; i < prefilling_.size() && budget > 0; ++i) {
      const Running& running = prefilling_[i];
      const int64_t chunk = std::min(requests_[running.request].prompt_tokens - running.prompt_done, budget);
      chunk_tokens_[i] = chunk;
      batch.add_prefill(chunk, running.prompt_done);
      budget -= chunk;
    }
    if (batch.empty()) {
      // Nothing admitted (the KV cache is full of prompts that wait for none): cannot happen with
      // check_fits(), but never spin.
      throw Exception(ErrorCode::kInternal, "serving replay: an empty iteration with requests waiting");
    }
    return batch;
  }

  void run_iteration() {
    const IterationBatch batch = next_batch();
    const optimize::Knob knob = policy_.knob();
    const IterationCost iteration =
        knob.kind == optimize::KnobKind::kSmClockMhz
            ? cost_.at_power_limit(batch, cost_.gpu().tdp_w, static_cast<double>(knob.value))
            : cost_.at_power_limit(batch, static_cast<double>(knob.value));
    const double energy_j = iteration.energy_j(tp_);
    const double iteration_start_s = now_s_;
    now_s_ += iteration.time_s;
    busy_s_ += iteration.time_s;
    clock_time_ += iteration.clock_mhz * iteration.time_s;
    knob_time_ += static_cast<double>(knob.value) * iteration.time_s;
    replay_.summary.energy_j += energy_j;
    ++replay_.summary.iterations;
    if (BucketSums* bucket = bucket_at(iteration_start_s)) {
      bucket->busy_s += iteration.time_s;
      bucket->clock_time += iteration.clock_mhz * iteration.time_s;
      bucket->energy_j += energy_j;
    }
    // The tokens rule: every token processed in the iteration costs the same share of its energy.
    const double per_token_j = energy_j / static_cast<double>(batch.tokens());
    decode_accumulator_j_ += per_token_j;
    if (options_.on_iteration) {
      report_iteration(iteration_start_s, energy_j, iteration.clock_mhz);
    }
    advance_requests(per_token_j);
    policy_.on_iteration(sample_of(batch, iteration_start_s, energy_j, knob));
  }

  void report_iteration(double start_s, double energy_j, double clock_mhz) {
    record_.start_s = start_s;
    record_.end_s = now_s_;
    record_.energy_j = energy_j;
    record_.clock_mhz = clock_mhz;
    record_.work.clear();
    for (const Running& running : decoding_) {
      record_.work.push_back(
          {running.request, 0, 1, false, requests_[running.request].prompt_tokens + running.generated});
    }
    for (size_t i = 0; i < prefilling_.size(); ++i) {
      if (chunk_tokens_[i] == 0) {
        continue;
      }
      const bool first =
          prefilling_[i].prompt_done + chunk_tokens_[i] == requests_[prefilling_[i].request].prompt_tokens;
      record_.work.push_back(
          {prefilling_[i].request, chunk_tokens_[i], 0, first, prefilling_[i].prompt_done});
    }
    options_.on_iteration(record_);
  }

  // After an iteration: decoding requests each got a token, prompt chunks were processed.
  void advance_requests(double per_token_j) {
    // The finished ones leave (swap-remove: order does not matter).
    for (size_t i = 0; i < decoding_.size();) {
      Running& running = decoding_[i];
      ++running.generated;
      if (running.generated == requests_[running.request].output_tokens) {
        finish(running, now_s_);
        decoding_[i] = decoding_.back();
        decoding_.pop_back();
      } else {
        ++i;
      }
    }
    // A finished prompt emits the first token and starts decoding next iteration.
    size_t kept = 0;
    for (size_t i = 0; i < prefilling_.size(); ++i) {
      Running running = prefilling_[i];
      running.prompt_done += chunk_tokens_[i];
      ServedRequest& served = replay_.requests[running.request];
      if (options_.attribute) {
        served.prefill_energy_j += per_token_j * static_cast<double>(chunk_tokens_[i]);
      }
      if (running.prompt_done < served.prompt_tokens) {
        prefilling_[kept++] = running;
        continue;
      }
      served.first_token_s = now_s_;
      running.generated = 1;
      // The first token's share was charged as prefill; decode energy counts from the next iteration on.
      running.decode_mark_j = decode_accumulator_j_;
      if (served.output_tokens == 1) {
        finish(running, now_s_);
      } else {
        decoding_.push_back(running);
      }
    }
    prefilling_.resize(kept);
  }

  void finish(const Running& running, double at_s) {
    ServedRequest& served = replay_.requests[running.request];
    served.finish_s = at_s;
    if (options_.attribute) {
      served.decode_energy_j = decode_accumulator_j_ - running.decode_mark_j;
      served.energy_j = served.prefill_energy_j + served.decode_energy_j;
    }
    kv_used_ -= served.prompt_tokens + served.output_tokens;
    ++finished_;
    const double ttft = served.ttft_s();
    const double tpot = served.tpot_s();
    const std::optional<double> request_tpot =
        served.output_tokens > 1 ? std::optional<double>(tpot) : std::nullopt;
    ttfts_.push_back(ttft);
    if (request_tpot) {
      tpots_.push_back(tpot);
    }
    if (slo_.met(ttft, request_tpot)) {
      ++met_;
    }
    policy_.on_request_done({at_s, ttft, request_tpot, served.prompt_tokens});
    if (BucketSums* bucket = bucket_at(at_s)) {
      bucket->ttfts.push_back(ttft);
      if (served.output_tokens > 1) {
        bucket->tpots.push_back(tpot);
      }
    }
  }

  optimize::IterationSample sample_of(const IterationBatch& batch, double start_s, double energy_j,
                                      optimize::Knob knob) const {
    optimize::IterationSample sample;
    sample.start_s = start_s;
    sample.end_s = now_s_;
    sample.energy_j = energy_j;
    sample.knob = knob;
    sample.decode_requests = batch.decode_requests;
    sample.prefill_tokens = batch.prefill_tokens;
    // Waiting: requests the engine could not admit (batch, token or KV limits). The oldest wait also counts
    // arrivals during the iteration, which the next iteration admits.
    double oldest_arrival_s = waiting_.empty() ? now_s_ : requests_[waiting_.front()].arrival_s;
    if (next_arrival_ < requests_.size() && requests_[next_arrival_].arrival_s <= now_s_) {
      oldest_arrival_s = std::min(oldest_arrival_s, requests_[next_arrival_].arrival_s);
    }
    sample.waiting_requests = static_cast<int64_t>(waiting_.size());
    sample.oldest_waiting_s = now_s_ - oldest_arrival_s;
    // Pending: every request without its first token, admitted (its prompt partly prefilled) or not.
    int64_t pending_tokens = waiting_prompt_tokens_;
    for (const Running& running : prefilling_) {
      pending_tokens += requests_[running.request].prompt_tokens - running.prompt_done;
      oldest_arrival_s = std::min(oldest_arrival_s, requests_[running.request].arrival_s);
    }
    for (size_t i = next_arrival_; i < requests_.size() && requests_[i].arrival_s <= now_s_; ++i) {
      pending_tokens += requests_[i].prompt_tokens;
    }
    sample.pending_prompt_tokens = pending_tokens;
    sample.oldest_pending_s = now_s_ - oldest_arrival_s;
    return sample;
  }

  void summarize() {
    ServingSummary& summary = replay_.summary;
    summary.energy_j += summary.idle_energy_j;
    summary.requests = static_cast<int64_t>(requests_.size());
    for (const ServedRequest& served : replay_.requests) {
      summary.output_tokens += served.output_tokens;
    }
    summary.duration_s = now_s_ - start_s_;
    summary.j_per_token =
        summary.output_tokens > 0 ? summary.energy_j / static_cast<double>(summary.output_tokens) : 0;
    summary.p50_ttft_s = percentile(ttfts_, 0.5);
    summary.p99_ttft_s = percentile(ttfts_, 0.99);
    summary.p50_tpot_s = percentile(tpots_, 0.5);
    summary.p99_tpot_s = percentile(tpots_, 0.99);
    summary.slo_attainment =
        requests_.empty() ? 1.0 : static_cast<double>(met_) / static_cast<double>(requests_.size());
    summary.mean_clock_mhz = busy_s_ > 0 ? clock_time_ / busy_s_ : 0;
    summary.knob_kind = options_.engine.knob;
    summary.mean_knob_value = busy_s_ > 0 ? knob_time_ / busy_s_ : 0;

    replay_.buckets.reserve(buckets_.size());
    for (size_t i = 0; i < buckets_.size(); ++i) {
      BucketSums& sums = buckets_[i];
      ServingBucket bucket;
      bucket.start_s = static_cast<double>(i) * options_.bucket_s;
      bucket.arrivals_per_s = static_cast<double>(sums.arrivals) / options_.bucket_s;
      bucket.mean_clock_mhz = sums.busy_s > 0 ? sums.clock_time / sums.busy_s : 0;
      bucket.power_w = sums.energy_j / options_.bucket_s;
      bucket.p99_ttft_s = percentile(sums.ttfts, 0.99);
      bucket.p99_tpot_s = percentile(sums.tpots, 0.99);
      replay_.buckets.push_back(bucket);
    }
  }

  const std::vector<ServingRequest>& requests_;
  const LlmCostModel& cost_;
  optimize::ServingKnobPolicy& policy_;
  const optimize::ServingSlo& slo_;
  const ReplayOptions& options_;
  const int tp_;
  const double idle_power_w_;
  const int64_t kv_capacity_;

  ServingReplay replay_;
  std::vector<BucketSums> buckets_;
  std::deque<size_t> waiting_;
  std::vector<Running> prefilling_;  // admitted, prompt not done; in admission order
  std::vector<Running> decoding_;
  int64_t kv_used_ = 0;
  int64_t waiting_prompt_tokens_ = 0;  // Σ prompt tokens of waiting_
  size_t next_arrival_ = 0;
  size_t finished_ = 0;
  double now_s_ = 0;
  double start_s_ = 0;
  double decode_accumulator_j_ = 0;  // Σ energy per token over iterations (the tokens rule)
  double busy_s_ = 0;
  double knob_time_ = 0;
  double clock_time_ = 0;
  ReplayIteration record_;
  std::vector<int64_t> chunk_tokens_;
  std::vector<double> ttfts_;
  std::vector<double> tpots_;
  int64_t met_ = 0;
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
  return ServingReplayRun(trace, cost, policy, slo, options).run();
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
    const std::string_view noun = optimize::knob_noun(kind);
    comparison.note = fmt::format(
        "no {0} meets the SLO (TTFT {1} s, TPOT {2} s for {3:.4g}% of requests): at the maximum {0} {4:.4g}% "
        "of requests meet it, so best_fixed_clock and joule run at the maximum {0} ({5} {6})",
        noun, slo.ttft_s, slo.tpot_s, slo.attainment * 100, top.slo_attainment * 100, top_knob.value,
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
  optimize::SloControllerOptions controller_options = options.controller;
  controller_options.knob_gpus =
      cost.tensor_parallel();  // a power limit is per GPU, the energy the replica's
  optimize::SloClockController controller(slo, kind, knobs, controller_options);
  if (options.card) {
    controller.start_from_card(*options.card);
  }
  KnobRecorder recorder(controller);
  comparison.strategies.push_back(replay_serving(trace, cost, recorder, slo, options.replay));
  std::vector<uint32_t> levels;
  for (const optimize::KnobModel& model : controller.models()) {
    levels.push_back(model.knob.value);
  }
  comparison.exploration = recorder.exploration(levels);
  comparison.card = controller.card_use().why;
  if (controller.slo_unattainable()) {
    comparison.note = fmt::format(
        "the joule controller found the SLO unattainable at the end of the trace and ran at the maximum {}",
        optimize::knob_noun(kind));
  }
  return comparison;
}

}  // namespace joule::sim
