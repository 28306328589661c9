// SPDX-License-Identifier: Apache-2.0
#include "joule/govern/governor.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <unistd.h>

#include "joule/core/strings.hpp"
#include "joule/device/settings_guard.hpp"
#include "joule/http/connection.hpp"
#include "joule/http/url.hpp"
#include "joule/metrics/exposition.hpp"
#include "joule/probe/card.hpp"

namespace joule::govern {

namespace {

// Synthesised samples per window at most: enough for the controller's percentiles and its regression, few
// enough that a decision stays well under a millisecond whatever the engine's step rate.
constexpr size_t kMaxIterationSamples = 256;
constexpr size_t kMaxRequestSamples = 512;

// Decisions carry wall-clock time (s since the Unix epoch), as logs and the daemon's events do.
double seconds(const Clock& clock) {
  return static_cast<double>(clock.to_unix_ns(clock.now())) / 1e9;
}

std::string gpu_label(const device::Gpu& gpu) {
  return fmt::format("GPU {} ({})", gpu.info().index, printable_excerpt(gpu.info().name, 60));
}

// A lock file per GPU: two governors turning one GPU would fight (the daemon lets the later setting win).
class GpuLock {
 public:
  GpuLock() = default;
  GpuLock(const GpuLock&) = delete;
  GpuLock& operator=(const GpuLock&) = delete;
  GpuLock(GpuLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
  GpuLock& operator=(GpuLock&&) = delete;
  ~GpuLock() {
    if (fd_ >= 0) {
      ::close(fd_);  // releases the lock; the file stays (removing it would race a new taker)
    }
  }

  static Result<GpuLock> take(const std::string& folder, const device::Gpu& gpu) {
    std::string id = gpu.info().uuid.empty()
                         ? fmt::format("{}-{}", gpu.info().backend, gpu.info().physical_index)
                         : gpu.info().uuid;
    std::replace_if(
        id.begin(), id.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)) && c != '-'; },
        '_');
    GpuLock lock;
    lock.path_ = (std::filesystem::path(folder) / fmt::format("joule-govern-{}.lock", id)).string();
    lock.fd_ = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (lock.fd_ < 0) {
      return fail(ErrorCode::kIo, "cannot open the lock file {} of {}: {} (choose a folder with --lock-dir)",
                  lock.path_, gpu_label(gpu), std::strerror(errno));
    }
    if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
      char pid[32] = {};
      const ssize_t n = ::pread(lock.fd_, pid, sizeof pid - 1, 0);
      std::string_view written(pid, n > 0 ? static_cast<size_t>(n) : 0);
      while (!written.empty() && (written.back() == '\n' || written.back() == ' ')) {
        written.remove_suffix(1);
      }
      const std::string holder = written.empty() ? "?" : printable_excerpt(written, 20);
      return fail(ErrorCode::kState, "{} is already governed by another joule process (pid {}; lock {})",
                  gpu_label(gpu), holder, lock.path_);
    }
    const std::string pid = fmt::format("{}\n", ::getpid());
    if (::ftruncate(lock.fd_, 0) == 0) {
      (void)!::pwrite(lock.fd_, pid.data(), pid.size(), 0);
    }
    return lock;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

// One scrape of `url`, parsed: what start() and every tick read.
Result<metrics::Exposition> fetch_exposition(const Scraper& scraper, const std::string& url,
                                             const GovernOptions& options) {
  const std::string body = JOULE_TRY(scraper(url, options.scrape_timeout_s, options.max_metrics_bytes));
  return metrics::parse_exposition(body, url);
}

std::string default_lock_dir() {
  if (const char* dir = std::getenv("JOULE_GOVERN_LOCK_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  if (::access("/run/joule", W_OK | X_OK) == 0) {
    return "/run/joule";
  }
  return std::filesystem::temp_directory_path().string();
}

std::string knob_text(const std::optional<optimize::Knob>& knob) {
  if (!knob) {
    return "own settings";
  }
  return fmt::format("{} {}", knob->value, optimize::knob_unit(knob->kind));
}

std::string seconds_text(std::optional<double> s) {
  if (!s) {
    return "n/a";
  }
  return *s < 1 ? fmt::format("{:.0f} ms", *s * 1000) : fmt::format("{:.2f} s", *s);
}

}  // namespace

std::string_view to_string(GovernState state) {
  switch (state) {
    case GovernState::kGoverning:
      return "governing";
    case GovernState::kUnattainable:
      return "unattainable";
    case GovernState::kWaiting:
      break;
  }
  return "waiting";
}

Result<void> validate(const GovernOptions& options) {
  JOULE_TRY(optimize::validate(options.slo));
  if (!std::isfinite(options.interval_s) || options.interval_s < 0.05 || options.interval_s > 3600) {
    return fail(ErrorCode::kInvalidArgument, "the interval must be from 0.05 to 3600 s, got {}",
                options.interval_s);
  }
  if (!std::isfinite(options.scrape_timeout_s) || options.scrape_timeout_s <= 0 ||
      options.scrape_timeout_s > options.interval_s) {
    return fail(ErrorCode::kInvalidArgument, "the scrape timeout must be in (0, {}] s (the interval), got {}",
                options.interval_s, options.scrape_timeout_s);
  }
  if (options.max_metrics_bytes < 1024) {
    return fail(ErrorCode::kInvalidArgument, "the metrics size cap must be at least 1 KiB");
  }
  if (options.power_limit_step_w == 0) {
    return fail(ErrorCode::kInvalidArgument, "the power-limit step must be at least 1 W");
  }
  const auto weight_ok = [](double w) { return std::isfinite(w) && w > 0; };
  if (!weight_ok(options.weights.prefill_token) || !weight_ok(options.weights.decode_token)) {
    return fail(ErrorCode::kInvalidArgument, "token weights must be finite and > 0, got {} and {}",
                options.weights.prefill_token, options.weights.decode_token);
  }
  return {};
}

std::string describe(const std::string& engine, const Decision& decision) {
  std::string line = decision.changed()
                         ? fmt::format("{}: {} → {}: {}", engine, knob_text(decision.previous),
                                       knob_text(decision.knob), decision.reason)
                         : fmt::format("{}: {}: {}", engine, knob_text(decision.knob), decision.reason);
  if (decision.state != GovernState::kWaiting) {
    line += fmt::format("; p99 TTFT {} / TPOT {}", seconds_text(decision.p99_ttft_s),
                        seconds_text(decision.p99_tpot_s));
    if (decision.j_per_output_token) {
      line += fmt::format("; {:.4g} J/token", *decision.j_per_output_token);
    }
  }
  return line;
}

Scraper http_scraper() {
  auto connections = std::make_shared<std::map<std::string, http::Connection>>();
  return [connections](const std::string& url, double timeout_s, size_t max_bytes) -> Result<std::string> {
    const auto parsed = http::parse_url(url);
    if (!parsed) {
      return fail(ErrorCode::kInvalidArgument, "URL {} {}", quoted_excerpt(url, 80), parsed.error().message);
    }
    auto found = connections->find(parsed->origin);
    if (found == connections->end()) {
      found = connections->emplace(parsed->origin, http::Connection(*parsed)).first;
    }
    http::RequestLimits limits;
    limits.timeout_s = timeout_s;
    limits.connect_timeout_s = timeout_s;
    limits.max_response_bytes = max_bytes;
    const std::string path = parsed->path_prefix.empty() ? "/" : parsed->path_prefix;
    auto response = found->second.get(path, {}, limits);
    if (!response) {
      return fail(ErrorCode::kIo, "GET {}: {}", url, response.error().message);
    }
    if (response->status != 200) {
      return fail(ErrorCode::kIo, "GET {}: HTTP {}: {}", url, response->status,
                  printable_excerpt(response->body, 120));
    }
    return std::move(response->body);
  };
}

struct EngineGovernor::State {
  EngineTarget target;
  GovernOptions options;
  std::shared_ptr<Clock> clock;
  Scraper scraper;
  EngineKind kind = EngineKind::kVllm;
  std::vector<uint32_t> knob_values;
  std::vector<GpuLock> locks;
  std::unique_ptr<device::SettingsGuard> guard;
  std::unique_ptr<optimize::SloClockController> controller;
  std::optional<probe::KnobPrior> card;  // options.card's prior, given to every new controller
  std::string card_said;                 // the controller's card_use().why last logged
  std::optional<EngineSnapshot> previous;
  std::vector<uint64_t> previous_energy_mj;
  std::optional<optimize::Knob> applied;
  std::optional<double> idle_power_w;  // the group's power in idle windows, W (smoothed)
  std::optional<double> last_step_s;   // the engine's mean step time in the last window that timed one, s
  std::optional<EngineWindow> last_ttft_window;  // the last window in which first tokens were observed

  const EngineMetricNames& names() const { return engine_metric_names(kind); }

  void reset_controller() {
    optimize::SloControllerOptions controller_options = options.controller;
    controller_options.knob_gpus = static_cast<int>(target.gpus.size());  // a power limit is per GPU
    controller_options.interval_s = options.interval_s;                   // a decision every period
    controller = std::make_unique<optimize::SloClockController>(options.slo, options.knob, knob_values,
                                                                controller_options);
    if (card) {
      controller->start_from_card(*card);
    }
    card_said.clear();
  }

  Result<EngineSnapshot> scrape(double now_s) const {
    const auto exposition = JOULE_TRY(fetch_exposition(scraper, target.metrics_url, options));
    const auto detected = detect_engine(exposition, target.metrics_url);
    if (detected && *detected != kind) {
      return fail(ErrorCode::kInvalidArgument, "{} is a {} endpoint, not {}", target.metrics_url,
                  engine_metric_names(*detected).display_name, names().display_name);
    }
    return read_snapshot(exposition, names(), now_s);
  }

  Result<std::vector<uint64_t>> read_energy() const {
    std::vector<uint64_t> energy;
    for (device::Gpu* gpu : target.gpus) {
      energy.push_back(JOULE_TRY(gpu->energy_mj()));
    }
    return energy;
  }

  Result<void> apply(const optimize::Knob& knob) {
    for (device::Gpu* gpu : target.gpus) {
      if (knob.kind == optimize::KnobKind::kSmClockMhz) {
        JOULE_TRY(guard->lock_sm_clocks(*gpu, knob.value, knob.value));
      } else {
        JOULE_TRY(guard->set_power_limit_mw(*gpu, knob.value * 1000));
      }
    }
    applied = knob;
    return {};
  }

  // Feeds the controller one window as the iterations and finished requests it stands for.
  void feed(const EngineWindow& window, double energy_j, const optimize::Knob& knob) {
    const double window_s = window.end_s - window.start_s;
    if (!window.busy()) {
      const double power_w = energy_j / window_s;  // what the group draws idle, to split busy windows' energy
      idle_power_w = idle_power_w ? 0.8 * *idle_power_w + 0.2 * power_w : power_w;
      controller->on_idle(window.start_s, window.end_s, energy_j);
      return;
    }
    double steps = window.steps.value_or(0);
    if (steps < 1) {  // one decode step per output token of the mean batch
      steps = window.generation_tokens / std::max(1.0, window.running);
    }
    steps = std::max(steps, 1.0);
    const size_t samples =
        std::clamp<size_t>(static_cast<size_t>(std::llround(steps)), 1, kMaxIterationSamples);
    // The window's busy time is its steps times the mean step time (the engine's step-time histogram: vLLM's
    // and SGLang's inter-token latency, TGI's forward duration), the rest idle. A window with no step timed
    // takes the last window's mean (a request's latencies are observed as it goes, or when it ends); with
    // none yet, busy throughout.
    if (const auto mean = window.mean_step_s(); mean && *mean > 0) {
      last_step_s = *mean;
    }
    const double step_s = std::min(window_s / steps, last_step_s.value_or(window_s / steps));
    const double sample_s = step_s * steps / static_cast<double>(samples);
    const double busy_s = sample_s * static_cast<double>(samples);
    // Until an idle window has shown the group's idle power, all the window's energy counts as busy: an upper
    // bound. A share by time would be a lower one, and the controller never predicts a lower knob hungrier
    // than a faster one it measured, so a busy power learned too low at the first knob would cap every knob
    // below it and hide what going down saves.
    double busy_energy_j = energy_j;
    if (idle_power_w) {
      busy_energy_j =
          std::clamp(energy_j - *idle_power_w * (window_s - busy_s), energy_j * busy_s / window_s, energy_j);
    }
    const double idle_energy_j = energy_j - busy_energy_j;
    const double gap_s = (window_s - busy_s) / static_cast<double>(samples);
    const double queued_s = window.queue_time ? window.queue_time->quantile(0.99).value_or(0) : 0;
    const double finished_requests = window.finished.value_or(window.ttft ? window.ttft->count : 0);
    const double prompt_per_request = finished_requests > 0 ? window.prompt_tokens / finished_requests : 0;
    for (size_t i = 0; i < samples; ++i) {
      optimize::IterationSample sample;
      sample.start_s = window.start_s + (sample_s + gap_s) * static_cast<double>(i);
      sample.end_s = sample.start_s + sample_s;
      sample.energy_j = busy_energy_j / static_cast<double>(samples);
      sample.knob = knob;
      sample.decode_requests = std::llround(window.generation_tokens / static_cast<double>(samples));
      sample.prefill_tokens = std::llround(window.prompt_tokens / static_cast<double>(samples));
      if (i + 1 == samples && window.waiting > 0) {
        // The queue at the scrape: its prompts at the window's mean prompt length, its oldest at the window's
        // p99 queue time (the engines export no age of what still waits).
        sample.waiting_requests = std::llround(window.waiting);
        sample.oldest_waiting_s = queued_s;
        sample.pending_prompt_tokens = std::llround(window.waiting * prompt_per_request);
        sample.oldest_pending_s = queued_s;
      }
      controller->on_iteration(sample);
      if (gap_s > 0) {
        controller->on_idle(sample.end_s, sample.end_s + gap_s, idle_energy_j / static_cast<double>(samples));
      }
    }
    double finished = window.finished.value_or(0);
    if (finished <= 0 && window.ttft) {
      finished = window.ttft->count;
    }
    const size_t requests =
        std::min<size_t>(static_cast<size_t>(std::llround(std::max(0.0, finished))), kMaxRequestSamples);
    // The histograms are not joined per request: the k-th shortest TTFT goes with the k-th shortest TPOT.
    // No TPOT is taken under the window's mean step time: a request's TPOT is observed when it finishes,
    // seconds after the knob that set its pace, while the window's steps ran at the knob in force now and a
    // request decoding now sees about their mean per token. Without that floor the controller would judge a
    // lower knob by latencies from faster ones, and go below the SLO before the requests that show it finish.
    // A request's first token and its end fall in different windows as soon as it outlasts one: a window
    // whose requests finished but started none takes the TTFTs of the last window that had some.
    std::vector<double> ttfts = window.ttft_values_s(requests);
    if (!ttfts.empty()) {
      last_ttft_window = window;
    } else if (requests > 0 && last_ttft_window) {
      ttfts = last_ttft_window->ttft_values_s(requests);
    }
    const std::vector<double> tpots = window.tpot_values_s(requests);
    const std::optional<double> step_s_now = window.mean_step_s();
    for (size_t k = 0; k < ttfts.size(); ++k) {
      optimize::RequestSample sample;
      sample.finish_s = window.end_s;
      sample.ttft_s = ttfts[k];
      if (k < tpots.size()) {
        sample.tpot_s = std::max(tpots[k], step_s_now.value_or(0));
      }
      sample.prompt_tokens = std::llround(prompt_per_request);
      controller->on_request_done(sample);
    }
  }

  std::string explain(const optimize::Knob& previous_knob, const optimize::Knob& next,
                      const EngineWindow& window) const {
    if (controller->slo_unattainable()) {
      return "no knob meets the SLO: even the maximum misses it for a whole window, so the GPUs run at the "
             "maximum";
    }
    if (next.value > previous_knob.value) {
      if (controller->window_attainment() < options.slo.attainment) {
        return fmt::format("up: SLO attainment {:.2f}% in the window, under the target {:.2f}%",
                           controller->window_attainment() * 100, options.slo.attainment * 100);
      }
      if (window.waiting > 0) {
        return fmt::format("up: {:.0f} requests queued", window.waiting);
      }
      return "up: at the lower knob the predicted p99 latency or throughput leaves too little headroom";
    }
    if (next.value < previous_knob.value) {
      double power_then = 0;
      double power_now = 0;
      for (const optimize::KnobModel& model : controller->models()) {
        if (model.knob == previous_knob) {
          power_then = model.predicted_power_w;
        }
        if (model.knob == next) {
          power_now = model.predicted_power_w;
        }
      }
      return power_then > 0 && power_now > 0
                 ? fmt::format(
                       "down: the SLO holds at the lower knob with headroom; predicted power {:+.1f}%",
                       (power_now / power_then - 1) * 100)
                 : "down: the SLO holds at the lower knob with headroom";
    }
    return "hold";
  }

  Decision wait(Decision decision, std::string reason) {
    decision.state = GovernState::kWaiting;
    if (guard->changed()) {
      const auto restored = guard->restore();
      reason += restored ? "; the GPUs are back at their own settings"
                         : fmt::format("; restoring the GPUs failed: {}", restored.error().message());
    }
    decision.knob = std::nullopt;
    decision.reason = std::move(reason);
    applied = std::nullopt;
    previous = std::nullopt;
    previous_energy_mj.clear();
    last_ttft_window = std::nullopt;
    last_step_s = std::nullopt;
    reset_controller();
    return decision;
  }
};

namespace {

// The knob's values that every GPU of the group supports (clocks, or power limits `step_w` apart), ascending;
// kNotSupported naming a GPU without an energy counter or without the knob.
Result<std::vector<uint32_t>> group_knob_values(const EngineTarget& target, const GovernOptions& options) {
  std::vector<uint32_t> knob_values;
  for (device::Gpu* gpu : target.gpus) {
    if (!gpu->info().has_energy_counter) {
      return fail(ErrorCode::kNotSupported,
                  "{}: {} has no energy counter; the governor needs one to measure "
                  "what each setting costs",
                  target.name, gpu_label(*gpu));
    }
    std::vector<uint32_t> values;
    if (options.knob == optimize::KnobKind::kSmClockMhz) {
      auto clocks = gpu->supported_sm_clocks_mhz();
      if (!clocks || clocks->empty()) {
        return fail(ErrorCode::kNotSupported, "{}: {} cannot lock its SM clock ({}); use --power-limit",
                    target.name, gpu_label(*gpu), clocks ? "it lists no clocks" : clocks.error().message());
      }
      values = std::move(*clocks);
    } else {
      const auto constraints = gpu->power_limit_constraints();
      if (!constraints) {
        return fail(ErrorCode::kNotSupported, "{}: {} has no settable power limit: {}", target.name,
                    gpu_label(*gpu), constraints.error().message());
      }
      const uint32_t low_w = (constraints->min_mw + 999) / 1000;
      const uint32_t high_w = constraints->max_mw / 1000;
      for (uint32_t w = high_w; w >= low_w && w > 0; w -= std::min(options.power_limit_step_w, w)) {
        values.push_back(w);
        if (w < low_w + options.power_limit_step_w) {
          break;
        }
      }
      if (values.empty() || values.back() != low_w) {
        values.push_back(low_w);
      }
    }
    std::sort(values.begin(), values.end());
    if (knob_values.empty()) {
      knob_values = std::move(values);
    } else {
      std::vector<uint32_t> common;
      std::set_intersection(knob_values.begin(), knob_values.end(), values.begin(), values.end(),
                            std::back_inserter(common));
      knob_values = std::move(common);
    }
  }
  if (knob_values.empty()) {
    return fail(ErrorCode::kNotSupported, "{}: the GPUs of the group have no {} value in common", target.name,
                optimize::knob_noun(options.knob));
  }
  return knob_values;
}

}  // namespace

EngineGovernor::EngineGovernor(std::unique_ptr<State> state) : state_(std::move(state)) {}
EngineGovernor::~EngineGovernor() = default;

Result<std::unique_ptr<EngineGovernor>> EngineGovernor::start(EngineTarget target,
                                                              const GovernOptions& options,
                                                              std::shared_ptr<Clock> clock, Scraper scraper) {
  JOULE_TRY(validate(options));
  auto url = http::parse_url(target.metrics_url);
  if (!url) {
    return fail(ErrorCode::kInvalidArgument, "the metrics URL {} {}", quoted_excerpt(target.metrics_url, 80),
                url.error().message);
  }
  if (url->path_prefix.empty()) {
    target.metrics_url = url->origin + "/metrics";
  }
  if (target.name.empty()) {
    target.name = fmt::format("{}:{}", url->host, url->port);
  }
  if (target.gpus.empty()) {
    return fail(ErrorCode::kInvalidArgument,
                "{}: no GPU given: name every GPU of the engine's tensor-parallel "
                "group",
                target.name);
  }
  std::set<int> seen;
  for (const device::Gpu* gpu : target.gpus) {
    if (!seen.insert(gpu->info().index).second) {
      return fail(ErrorCode::kInvalidArgument, "{}: GPU {} given twice", target.name, gpu->info().index);
    }
  }
  if (target.tensor_parallel && *target.tensor_parallel != static_cast<int>(target.gpus.size())) {
    return fail(ErrorCode::kInvalidArgument,
                "{}: the engine's tensor-parallel group has {} GPUs but {} {} given: a group is governed "
                "together (its slowest GPU sets the pace), so give all of them",
                target.name, *target.tensor_parallel, target.gpus.size(),
                target.gpus.size() == 1 ? "is" : "are");
  }
  auto state = std::make_unique<State>();
  state->knob_values = JOULE_TRY(group_knob_values(target, options));
  // A first scrape: the endpoint must be an engine's, and say what the governor reads.
  const auto exposition = JOULE_TRY(fetch_exposition(scraper, target.metrics_url, options));
  const EngineKind detected = JOULE_TRY(detect_engine(exposition, target.metrics_url));
  if (target.kind && *target.kind != detected) {
    return fail(ErrorCode::kInvalidArgument, "{} is a {} endpoint, not {} (--engine-kind {})",
                target.metrics_url, engine_metric_names(detected).display_name,
                engine_metric_names(*target.kind).display_name, to_string(*target.kind));
  }
  state->kind = detected;
  target.kind = detected;
  if (!options.card.empty()) {
    for (const device::Gpu* gpu : target.gpus) {
      auto prior =
          optimize::read_card_prior(options.card, probe::card_identity_of(gpu->info()), options.knob);
      if (!prior) {
        return fail(prior.error().code(), "{}: --card: {}", target.name, prior.error().message());
      }
      state->card = std::move(*prior);
    }
  }
  JOULE_TRY(read_snapshot(exposition, engine_metric_names(detected), 0));
  const std::string lock_dir = options.lock_dir.empty() ? default_lock_dir() : options.lock_dir;
  for (device::Gpu* gpu : target.gpus) {
    if (gpu->info().backend != "sim") {  // a simulated GPU is its process's own
      state->locks.push_back(JOULE_TRY(GpuLock::take(lock_dir, *gpu)));
    }
  }
  state->target = std::move(target);
  state->options = options;
  state->clock = std::move(clock);
  state->scraper = std::move(scraper);
  device::SettingsGuardOptions guard_options;
  guard_options.owner = fmt::format("infer govern ({})", state->target.name);
  state->guard = std::make_unique<device::SettingsGuard>(guard_options);
  state->reset_controller();
  return std::unique_ptr<EngineGovernor>(new EngineGovernor(std::move(state)));
}

Decision EngineGovernor::tick() {
  State& s = *state_;
  Decision decision;
  decision.time_s = seconds(*s.clock);
  decision.previous = s.applied;
  decision.knob = s.applied;
  auto snapshot = s.scrape(decision.time_s);
  if (!snapshot) {
    const bool restarted = snapshot.error().code() == ErrorCode::kState;
    return s.wait(std::move(decision),
                  fmt::format("{}: {}", restarted ? "engine restarted" : "engine unreachable",
                              snapshot.error().message()));
  }
  auto energy = s.read_energy();
  if (!energy) {
    return s.wait(std::move(decision), fmt::format("GPU energy unreadable: {}", energy.error().message()));
  }
  std::optional<EngineWindow> window;
  double energy_j = 0;
  if (s.previous && !s.previous_energy_mj.empty()) {
    auto difference_result = difference(*s.previous, *snapshot, s.names());
    if (!difference_result) {
      const std::string message = difference_result.error().message();
      auto waited = s.wait(std::move(decision), message);
      s.previous = std::move(*snapshot);  // the restarted engine's first figures are the next baseline
      s.previous_energy_mj = std::move(*energy);
      return waited;
    }
    window = std::move(*difference_result);
    for (size_t i = 0; i < energy->size(); ++i) {
      energy_j +=
          static_cast<double>((*energy)[i] - std::min((*energy)[i], s.previous_energy_mj[i])) / 1000.0;
    }
  }
  s.previous = std::move(*snapshot);
  s.previous_energy_mj = std::move(*energy);
  const optimize::Knob before = s.applied.value_or(s.controller->knob());
  if (window) {
    s.feed(*window, energy_j, before);
    decision.energy_j = energy_j;
    decision.prompt_tokens = window->prompt_tokens;
    decision.output_tokens = window->generation_tokens;
    decision.finished_requests = window->finished;
    decision.p99_ttft_s = window->ttft_quantile_s(s.options.slo.attainment);
    decision.p99_tpot_s = window->tpot_quantile_s(s.options.slo.attainment);
    decision.idle = !window->busy();
    const double prefill_work = window->prompt_tokens * s.options.weights.prefill_token;
    const double decode_work = window->generation_tokens * s.options.weights.decode_token;
    if (prefill_work + decode_work > 0) {
      decision.prefill_energy_j = energy_j * prefill_work / (prefill_work + decode_work);
      decision.decode_energy_j = energy_j - decision.prefill_energy_j;
    }
    if (window->generation_tokens > 0) {
      decision.j_per_output_token = energy_j / window->generation_tokens;
    }
    if (window->finished && *window->finished > 0) {
      decision.j_per_request = energy_j / *window->finished;
    }
  }
  const optimize::Knob next = s.controller->knob();
  decision.state = s.controller->slo_unattainable() ? GovernState::kUnattainable : GovernState::kGoverning;
  if (!s.applied || next != *s.applied) {
    if (auto applied = s.apply(next); !applied) {
      return s.wait(std::move(decision),
                    fmt::format("a GPU refused the {} {}: {}", optimize::knob_noun(next.kind),
                                knob_text(next), applied.error().message()));
    }
  }
  decision.knob = s.applied;
  decision.reason = !decision.previous ? "start: the maximum until the controller has measured the engine"
                    : window           ? s.explain(before, next, *window)
                                       : "hold";
  // What the controller does with its card, once when it starts and once when it drops the card.
  if (std::string said = s.controller->card_use().why; said != s.card_said) {
    decision.card = said;
    s.card_said = std::move(said);
  }
  return decision;
}

Result<void> EngineGovernor::restore() {
  state_->applied = std::nullopt;
  return state_->guard->restore();
}

const EngineTarget& EngineGovernor::target() const {
  return state_->target;
}
EngineKind EngineGovernor::kind() const {
  return state_->kind;
}
const optimize::SloClockController& EngineGovernor::controller() const {
  return *state_->controller;
}

}  // namespace joule::govern
