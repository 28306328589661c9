// SPDX-License-Identifier: Apache-2.0
// joule/govern/governor.hpp — `joule infer govern`'s machinery: beside a running serving engine (vLLM,
// SGLang, TGI), scrape its Prometheus endpoint, read its GPUs' energy, and turn the SM clock (or power limit)
// of its whole tensor-parallel group with joule's SLO controller (optimize::SloClockController) so that the
// engine's p99 TTFT and TPOT hold their SLO at the least energy. Every setting goes through a SettingsGuard
// (the device layer, or `joule daemon` whose lease restores it if the process dies); an engine that stops
// answering or restarts gets its GPUs' original settings back until it is seen again.
//
//   device::SettingsGuard guard;
//   auto governor = govern::EngineGovernor::start(target, options, clock).value();
//   while (running) { govern::Decision decision = governor->tick(); sleep(options.interval_s); }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "joule/core/clock.hpp"
#include "joule/core/error.hpp"
#include "joule/device/gpu.hpp"
#include "joule/govern/engine.hpp"
#include "joule/optimize/inference_slo.hpp"

namespace joule::govern {

/// The weights by which a window's energy is split between prompt (prefill) and output (decode) tokens:
/// J per prompt token = weight ratio × J per output token. 1 and 1: every token counts one (measure's
/// tokens rule).
struct TokenWeights {
  double prefill_token = 1;
  double decode_token = 1;
};

/// One engine to govern: where its metrics are and the GPUs of its tensor-parallel group.
struct EngineTarget {
  std::string name;                    ///< in logs and metric labels; default: the URL's host:port
  std::string metrics_url;             ///< http://HOST:PORT[/metrics]: "/metrics" is added to a bare origin
  std::optional<EngineKind> kind;      ///< detected from the first scrape when not given
  std::vector<device::Gpu*> gpus;      ///< every GPU of its tensor-parallel group (not owned)
  std::optional<int> tensor_parallel;  ///< the group's size when known (--tp): must equal gpus.size()
};

/// How every engine is governed.
struct GovernOptions {
  optimize::ServingSlo slo;
  optimize::KnobKind knob = optimize::KnobKind::kSmClockMhz;
  double interval_s = 1;          ///< one control period: a scrape, an energy reading, a decision, s
  double scrape_timeout_s = 0.5;  ///< one scrape's whole deadline, s (≤ interval_s)
  size_t max_metrics_bytes = size_t{16} << 20;  ///< the most one /metrics body may hold
  uint32_t power_limit_step_w = 5;              ///< power-limit mode: the values considered, W apart
  optimize::SloControllerOptions controller;    ///< its interval_s and knob_gpus are set from the above
  TokenWeights weights;
  /// Where a lock file per GPU says which process governs it (two governors of one GPU would fight); empty:
  /// $JOULE_GOVERN_LOCK_DIR, else /run/joule when writable, else the temporary folder. Simulated GPUs
  /// belong to one process and take none.
  std::string lock_dir;
  /// A frontier card (`joule probe`) of the GPUs' model: the controller starts from it
  /// (SloClockController::start_from_card); start() reads it against every GPU of the group and refuses a
  /// card for another model or driver, or of a newer schema (probe::read_card's messages). Empty: none.
  std::string card;
};

/// @return kInvalidArgument naming the bad option (SLO, interval, timeout over the interval, …).
Result<void> validate(const GovernOptions& options);

/// What an engine's governor is doing.
enum class GovernState {
  kGoverning,     ///< the controller turns the knob
  kUnattainable,  ///< even the maximum misses the SLO: the GPUs run at the maximum
  kWaiting,       ///< the engine is not answering, or restarted: its GPUs are back at their settings
};

/// @return "governing", "unattainable" or "waiting".
std::string_view to_string(GovernState state);

/// One control period's outcome, for logs and metrics.
struct Decision {
  double time_s = 0;  ///< when the period ended, s since the Unix epoch (on the clock given to start())
  GovernState state = GovernState::kGoverning;
  std::optional<optimize::Knob> knob;      ///< in force after the period; nullopt: the GPUs' own settings
  std::optional<optimize::Knob> previous;  ///< before it
  std::string reason;                      ///< why: "down: …", "up: …", "hold", "engine unreachable: …"
  std::optional<double> p99_ttft_s;        ///< the window's estimate from the engine's histograms
  std::optional<double> p99_tpot_s;
  double energy_j = 0;  ///< the group's energy over the window
  double prompt_tokens = 0;
  double output_tokens = 0;
  std::optional<double> finished_requests;
  std::optional<double> j_per_output_token;  ///< the window's energy / its output tokens
  std::optional<double> j_per_request;       ///< the window's energy / its finished requests
  double prefill_energy_j = 0;               ///< the window's energy split by TokenWeights
  double decode_energy_j = 0;
  bool idle = false;  ///< nothing ran: the energy is idle energy
  /// What the controller does with its card (GovernOptions::card), in the period it starts from it and in
  /// the one it drops it ("starting from the card: …", "card dropped: …"); "" otherwise.
  std::string card;

  /// @return whether the knob changed in this period.
  bool changed() const { return knob != previous; }
};

/// @return the decision as one log line: "vllm-0: 1410 → 1200 MHz: down: …; p99 TTFT 0.41 s / TPOT 31 ms;
/// 0.21 J/token".
std::string describe(const std::string& engine, const Decision& decision);

/// Fetches one /metrics body: (url, timeout s, byte cap) → the body, or kIo/kParse naming the URL. The
/// default (http_scraper()) is a bounded GET; tests may give their own.
using Scraper =
    std::function<Result<std::string>(const std::string& url, double timeout_s, size_t max_bytes)>;

/// @return a scraper over joule's bounded HTTP client (one keep-alive connection per URL).
Scraper http_scraper();

/// One engine's governor. Not thread-safe: one thread ticks it.
class EngineGovernor {
 public:
  /// Checks everything before any change: the options, the URL, the GPUs (at least one, none twice, all with
  /// an energy counter and the knob: clock locks or power limits; the group's size against
  /// tensor_parallel), a first scrape that is an engine's (its kind detected or checked), and takes the
  /// GPUs' lock files, and reads options.card for the GPUs. @return kInvalidArgument / kNotSupported / kState
  /// ("GPU 0 (…) is already governed by another joule process (pid N; lock FILE)") / kIo naming what is
  /// wrong; nothing is changed then.
  static Result<std::unique_ptr<EngineGovernor>> start(EngineTarget target, const GovernOptions& options,
                                                       std::shared_ptr<Clock> clock,
                                                       Scraper scraper = http_scraper());
  ~EngineGovernor();
  EngineGovernor(const EngineGovernor&) = delete;
  EngineGovernor& operator=(const EngineGovernor&) = delete;

  /// One control period: scrape, read the GPUs' energy, feed the controller the window, set the knob on
  /// every GPU of the group. Never throws for what the engine or a GPU does: an engine that does not answer,
  /// sends what is not its metrics, or restarted (a counter went backwards) gets its GPUs restored and the
  /// decision says why (kWaiting); a setting a GPU refuses restores the group and waits too.
  Decision tick();

  /// Restores every setting this governor made (also done on destruction, exit and SIGINT/SIGTERM/SIGHUP).
  Result<void> restore();

  const EngineTarget& target() const;
  EngineKind kind() const;
  const optimize::SloClockController& controller() const;

 private:
  struct State;
  explicit EngineGovernor(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace joule::govern
