// SPDX-License-Identifier: Apache-2.0
// joule/sim/serving.hpp — replay a request trace through a simulated LLM serving engine (continuous,
// iteration-level batching with chunked prefill) on the serving cost model, under a knob policy (SM clock
// or power limit); and
// compare the policies `joule infer replay` prints.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "joule/core/error.hpp"
#include "joule/measure/request_energy.hpp"
#include "joule/optimize/inference_slo.hpp"
#include "joule/probe/prior.hpp"
#include "joule/sim/llm.hpp"

namespace joule::sim {

/// The most tokens a trace's request may ask for, prompt and output each: ten times the longest context any
/// model serves (about 10^6 tokens). A trace's count is acted on (`joule infer bench` builds a prompt of
/// that many words, 5 bytes each, before the run; the replay sums counts in int64), so a mistyped 10^12
/// must be refused when the trace is read.
inline constexpr int64_t kMaxTraceTokens = 10'000'000;

/// One request of a trace.
struct ServingRequest {
  double arrival_s = 0;
  int64_t prompt_tokens = 0;  ///< 1 to kMaxTraceTokens
  int64_t output_tokens = 0;  ///< 1 to kMaxTraceTokens (the first token comes from the prefill)
};

/// A request trace: CSV `arrival_s,prompt_tokens,output_tokens`, arrivals non-decreasing.
struct ServingTrace {
  std::string source;
  std::vector<ServingRequest> requests;
  /// @return the last arrival, s (0 when empty).
  double duration_s() const { return requests.empty() ? 0.0 : requests.back().arrival_s; }
};

/// Parses a trace. @return kParse naming the source, line and field for a malformed number, a token count
/// below 1 or above kMaxTraceTokens, a negative or non-finite arrival, an arrival before the previous one
/// ("unsorted"), a missing column, or no request at all.
Result<ServingTrace> parse_serving_trace(std::string_view text, const std::string& source);
/// Reads and parses a trace file (bounded like every joule input file).
Result<ServingTrace> read_serving_trace(const std::string& path);

/// The engine's scheduler, vLLM-like.
struct EngineOptions {
  int64_t max_batch = 256;          ///< requests in flight at most (vLLM's max_num_seqs)
  int64_t max_batch_tokens = 8192;  ///< tokens per iteration at most, prefill chunks included
  double kv_memory_share = 0.9;     ///< share of GPU memory for weights + KV cache (vLLM's default 0.9)
  /// What the policy turns: a locked SM clock (the power limit stays at TDP), or the power limit with
  /// clocks unlocked (GPUs without clock locks).
  optimize::KnobKind knob = optimize::KnobKind::kSmClockMhz;
};

/// One request's outcome.
struct ServedRequest {
  double arrival_s = 0;
  double first_token_s = 0;
  double finish_s = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double energy_j = 0;  ///< attributed (tokens rule); 0 when the replay ran without attribution
  double prefill_energy_j = 0;
  double decode_energy_j = 0;
  double ttft_s() const { return first_token_s - arrival_s; }
  /// @return TPOT, s; 0 for one output token.
  double tpot_s() const;
};

/// One time bucket of a replay, for plots.
struct ServingBucket {
  double start_s = 0;
  double arrivals_per_s = 0;
  double mean_clock_mhz = 0;  ///< busy-time weighted; 0 if idle throughout
  double power_w = 0;         ///< replica mean power over the bucket
  double p99_ttft_s = 0;      ///< of requests finishing in it (0 if none)
  double p99_tpot_s = 0;
};

/// A replay's summary: what `joule infer replay` prints per strategy.
struct ServingSummary {
  std::string name;
  double energy_j = 0;     ///< the replica's energy over the whole replay, idle included
  double j_per_token = 0;  ///< energy / output tokens
  double p50_ttft_s = 0, p99_ttft_s = 0, p50_tpot_s = 0, p99_tpot_s = 0;
  double slo_attainment = 0;  ///< share of requests meeting both SLOs
  double mean_clock_mhz = 0;  ///< the clock the GPUs ran at, busy-time weighted
  optimize::KnobKind knob_kind = optimize::KnobKind::kSmClockMhz;  ///< what the policy turned
  /// The knob the policy chose, busy-time weighted, in knob_unit(knob_kind): a clock lock (MHz) or a power
  /// limit (W).
  double mean_knob_value = 0;
  double duration_s = 0;  ///< until the last request finished
  int64_t requests = 0;
  int64_t output_tokens = 0;
  int64_t iterations = 0;
  double idle_energy_j = 0;
};

struct ServingReplay {
  ServingSummary summary;
  std::vector<ServedRequest> requests;  ///< in trace order
  std::vector<ServingBucket> buckets;
};

/// One request's work in one iteration, as handed to ReplayOptions::on_iteration.
struct ReplayWork {
  size_t request = 0;  ///< index in the trace
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  bool first_token = false;
  int64_t context_tokens = 0;  ///< KV entries before this iteration's tokens (a decode's context)
};

/// One iteration of a replay.
struct ReplayIteration {
  double start_s = 0;
  double end_s = 0;
  double energy_j = 0;  ///< of the replica
  double clock_mhz = 0;
  std::vector<ReplayWork> work;
};

struct ReplayOptions {
  EngineOptions engine;
  /// Split energy per request by the tokens rule (measure::AttributionRule::kTokens, computed with running
  /// sums; a test checks it against RequestEnergyLedger).
  bool attribute = true;
  double bucket_s = 0;  ///< timeline bucket; 0: no timeline
  /// Called after every iteration (slower: builds the work list); e.g. to feed a RequestEnergyLedger.
  std::function<void(const ReplayIteration&)> on_iteration;
  /// Called for every idle stretch with the replica's energy over it.
  std::function<void(double from_s, double to_s, double energy_j)> on_idle;
};

/// Replays `trace` on `cost` under `policy`, which sees every iteration and finished request as a live
/// controller would (with the time and energy the model gives). Deterministic. The policy's knob is of
/// the engine's kind (options.engine.knob): an SM clock in MHz, or a power limit in W (see knob_values()).
/// @throws joule::Exception (kInvalidArgument) for bad engine options, a policy whose knob is of another
/// kind, or a request that can never fit the KV cache (check_fits() says which first).
ServingReplay replay_serving(const ServingTrace& trace, const LlmCostModel& cost,
                             optimize::ServingKnobPolicy& policy, const optimize::ServingSlo& slo,
                             const ReplayOptions& options);

/// @return kInvalidArgument for bad options (max_batch < 1, max_batch_tokens < max_batch, a KV share outside
/// (0, 1]) or naming the first request (trace line) whose prompt + output never fits the replica's KV cache.
Result<void> check_fits(const ServingTrace& trace, const LlmCostModel& cost, const EngineOptions& options);

/// @return the power limits a policy chooses among when clocks cannot be locked: TDP down to the lowest
/// limit in 5 W steps, W.
std::vector<uint32_t> power_limit_knobs_w(const LlmGpuSpec& gpu);
/// @return the values a policy chooses among for a knob kind, highest first: the supported SM clocks (MHz)
/// or power_limit_knobs_w() (W).
std::vector<uint32_t> knob_values(const LlmCostModel& cost, optimize::KnobKind kind);

/// How long a controller explored before it reached the knob it then held (docs/inference.md, "Starting
/// from a card"): exploration ends at the first iteration whose knob is within one candidate level of the
/// busy-time-weighted median knob of the `hold_s` seconds of serving that follow it.
struct ServingExploration {
  double seconds = 0;      ///< serving time from the first iteration's start to the end of exploration, s
  int64_t iterations = 0;  ///< iterations until then
  double energy_j = 0;     ///< the replica's energy until then (idle included), J
  optimize::Knob held{};   ///< the median knob of the hold that followed
};

/// Records what a policy does (the knob of every iteration, the energy so far) while forwarding every call
/// to it, for exploration().
class KnobRecorder final : public optimize::ServingKnobPolicy {
 public:
  explicit KnobRecorder(optimize::ServingKnobPolicy& policy) : policy_(policy) {}
  std::string name() const override { return policy_.name(); }
  optimize::Knob knob() const override { return policy_.knob(); }
  void on_iteration(const optimize::IterationSample& sample) override;
  void on_request_done(const optimize::RequestSample& sample) override { policy_.on_request_done(sample); }
  void on_idle(double from_s, double to_s, double energy_j) override;

  /// @return the exploration over `levels` (the policy's candidate knob values, any order; a knob not among
  /// them counts as the nearest), holds of `hold_s` seconds; zeros if nothing ran.
  ServingExploration exploration(std::vector<uint32_t> levels, double hold_s = 60) const;

 private:
  struct Record {
    double start_s;
    double end_s;
    uint32_t knob;
    double energy_before_j;  // the replica's energy before this iteration, idle included
  };
  optimize::ServingKnobPolicy& policy_;
  std::vector<Record> records_;
  double energy_j_ = 0;
};

/// The four strategies of `joule infer replay`.
struct ServingComparison {
  std::vector<ServingReplay> strategies;  ///< max_clock, best_fixed_clock, utilization_governor, joule
  optimize::Knob best_fixed{};            ///< the best fixed knob in hindsight (the top one if unattainable)
  bool slo_unattainable = false;  ///< not even the highest clock meets the SLO: every strategy ran at it
  std::string note;               ///< a sentence for the user when something is off (empty otherwise)
  /// The joule controller's exploration (none when no knob meets the SLO and it did not run).
  std::optional<ServingExploration> exploration;
  /// What the joule controller did with its card (ComparisonOptions::card): "" without one.
  std::string card;
};

struct ComparisonOptions {
  ReplayOptions replay;
  optimize::SloControllerOptions controller;
  /// The card's prior for the joule controller (SloClockController::start_from_card), of the engine's knob:
  /// kSmClock for clocks, kPowerLimit for power limits; none: no card.
  std::optional<probe::KnobPrior> card;
};

/// Runs max clock, the best fixed clock in hindsight (least energy meeting the attainment target, found by
/// replaying candidate clocks), the utilisation governor and the SLO controller on the same trace; each
/// turns the knob of options.replay.engine.knob (an SM clock, or a power limit whose highest value is
/// what "max_clock" runs at).
/// @return check_fits()'s and validate(slo)'s errors.
Result<ServingComparison> compare_serving_strategies(const ServingTrace& trace, const LlmCostModel& cost,
                                                     const optimize::ServingSlo& slo,
                                                     const ComparisonOptions& options);

}  // namespace joule::sim
