// SPDX-License-Identifier: Apache-2.0
// joule/probe/card.hpp — a frontier card: what `joule probe` measured of one device, as versioned JSON
// (docs/cards.md gives the schema field by field).
//
// A card says what the hardware lets software see (the energy counter's update period and its error against
// integrated power), how fast it lets software act (the latency of a power-limit change and of an SM clock
// lock, how long power takes to settle) and the time–energy frontier of a compute-bound and a memory-bound
// kernel under each knob. Optimizers read it as a prior for the same device model and driver.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "joule/core/error.hpp"

namespace joule::device {
struct GpuInfo;
}

namespace joule::probe {

/// The card schema this joule writes and the newest it reads. A change that an older reader would
/// misread increments it (docs/cards.md, "Versions").
inline constexpr int kCardSchemaVersion = 1;

/// Which device a card is for.
struct DeviceIdentity {
  std::string model;           ///< the device's name as its backend reports it, e.g. "Tesla V100-PCIE-32GB"
  std::string backend;         ///< "nvml", "sim", … (joule::device::GpuInfo::backend)
  std::string driver_version;  ///< the driver (or kernel runner's) version, e.g. "12040"; "" if unknown
  std::string uuid;            ///< the probed device's UUID; "" if the backend has none
};

/// @return the identity a card for `gpu` must have: its model and backend, the driver "sim" on simulated
/// GPUs (what `joule probe`'s simulated kernel runner writes), else "" (the device layer does not know the
/// driver's version: a card of the same model made under any driver matches), and its UUID.
DeviceIdentity card_identity_of(const device::GpuInfo& gpu);

/// Static ranges read without changing anything (null where the device does not report them).
struct DeviceRanges {
  std::optional<double> power_limit_min_w;      ///< W
  std::optional<double> power_limit_max_w;      ///< W
  std::optional<double> power_limit_default_w;  ///< W
  std::optional<uint32_t> sm_clock_min_mhz;     ///< lowest supported SM clock, MHz
  std::optional<uint32_t> sm_clock_max_mhz;     ///< highest supported SM clock, MHz
  std::optional<uint32_t> sm_clock_count;       ///< how many SM clocks can be locked
  std::optional<uint32_t> memory_clock_mhz;     ///< memory clock while probed, MHz
  std::optional<double> temperature_c;          ///< temperature when the probe began, °C
};

/// The energy counter against integrated power samples over one polling window.
struct CounterFigures {
  bool has_energy_counter = false;
  double window_s = 0;         ///< how long the counter and power were polled, s
  double poll_interval_s = 0;  ///< the interval asked for between polls, s
  int64_t polls = 0;           ///< readings taken
  int64_t steps = 0;           ///< readings at which the counter had changed
  /// Median time between counter changes, s; null with fewer than 3 changes or no counter. A counter that
  /// changes at every poll updates at least this often: the figure is then the poll interval (an upper
  /// bound).
  std::optional<double> update_period_s;
  std::optional<double> counter_energy_j;  ///< the counter's energy over the window, J; null without counter
  double integrated_power_energy_j = 0;    ///< trapezoid integral of the power samples, J
  /// (counter − integrated) / integrated × 100, %; null without counter or without energy.
  std::optional<double> error_pct;
  bool under_load = false;  ///< whether a kernel ran during the window
};

/// The latency of one control over `tries` changes.
struct LatencyFigures {
  std::string control;  ///< "power_limit" or "sm_clock_lock"
  int tries = 0;
  double median_s = 0;  ///< s
  double p99_s = 0;     ///< s (nearest rank)
  double max_s = 0;     ///< s
};

/// How power settles after a power-limit step under load.
struct SettleFigures {
  double from_power_limit_w = 0;  ///< W
  double to_power_limit_w = 0;    ///< W
  double power_before_w = 0;      ///< mean power before the step, W
  double power_after_w = 0;       ///< mean power over the last fifth of the window, W
  double sample_interval_s = 0;   ///< s
  double window_s = 0;            ///< how long power was sampled after the step, s
  /// First-order time constant τ fitted to the samples between 5% and 95% of the way, s; null when power
  /// settled within one sample interval (too fast to fit: τ < sample_interval_s).
  std::optional<double> time_constant_s;
  double settled_within_s = 0;  ///< time from the step to the first sample within 5% of the final power, s
};

/// One knob value of a frontier.
struct FrontierRow {
  double knob_value = 0;              ///< in the curve's unit
  int64_t iterations = 0;             ///< kernel iterations measured
  double time_per_iteration_s = 0;    ///< s
  double energy_per_iteration_j = 0;  ///< J
  double average_power_w = 0;         ///< W
  bool pareto = false;                ///< on the time–energy Pareto frontier of this curve
};

/// The time–energy frontier of one kernel under one knob.
struct FrontierCurve {
  std::string kernel;               ///< "compute" (an FMA loop) or "memory" (a streaming copy)
  std::string knob;                 ///< "power_limit", "sm_clock" (or "memory_clock")
  std::string unit;                 ///< "W" or "MHz"
  std::vector<FrontierRow> points;  ///< in the order measured (knob value descending)
};

/// Something the probe did not measure, and why.
struct Skipped {
  std::string what;  ///< e.g. "memory_clock", "frontier"
  std::string why;
};

/// A frontier card.
struct Card {
  int schema_version = kCardSchemaVersion;
  std::string joule_version;
  std::string created_utc;  ///< ISO-8601, e.g. "2026-11-29T06:30:00.000Z"
  bool read_only = false;   ///< made with --read-only: no setting was changed, so no latency and no frontier
  bool quick = false;       ///< made with --quick: few knob values and short runs
  DeviceIdentity device;
  std::string kernel_runner;  ///< "simulated", "cuda", or "" (no kernel could be run)
  DeviceRanges ranges;
  CounterFigures counter;
  std::vector<LatencyFigures> latencies;
  std::optional<SettleFigures> settle;
  std::vector<FrontierCurve> frontiers;
  std::vector<Skipped> skipped;
};

/// @return the card as JSON, fields as docs/cards.md lists them.
nlohmann::json card_to_json(const Card& card);
/// @return the card as indented JSON text with a final newline.
std::string render_card(const Card& card);

/// Parses a card's text; `source` names it in errors (a path). Errors (kParse), each starting with
/// `source`: text that is not JSON ("card.json: line 3, column 7: …"), nested too deep, a schema version
/// newer than kCardSchemaVersion ("card.json: card schema version 2 is newer than this joule reads (1):
/// upgrade joule"), and a missing or mistyped field ("card.json: frontiers[0].points[2].time_per_iteration_s:
/// value is not a valid float").
Result<Card> parse_card(std::string_view text, std::string_view source);

/// Refuses (kInvalidArgument) a card made on another device model or driver than `device`, naming both:
/// "card.json is for Tesla V100-PCIE-32GB (driver 535.104), not NVIDIA A40 (driver 535.104)". An empty
/// driver version on either side matches any.
Result<void> check_card_for(const Card& card, const DeviceIdentity& device, std::string_view source);

/// Reads the card at `path` (at most 16 MiB) and checks it is for `device`: the errors of
/// read_text_file(), parse_card() and check_card_for().
Result<Card> read_card(const std::string& path, const DeviceIdentity& device);

}  // namespace joule::probe
