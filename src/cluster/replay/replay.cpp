// SPDX-License-Identifier: Apache-2.0
// The cluster replay (joule/cluster/replay.hpp): the job mix, the inference services' SLO tables, and one
// pass over the horizon per policy. The model and its sources: docs/cluster.md, "Replaying a cluster".
#include "joule/cluster/replay.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "joule/carbon/signal.hpp"
#include "joule/cluster/allocator.hpp"
#include "joule/cluster/deferral.hpp"
#include "joule/core/frontier.hpp"
#include "joule/core/rng.hpp"
#include "joule/core/units.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/sim/llm.hpp"
#include "joule/sim/trace.hpp"

namespace joule::cluster {
namespace {

constexpr double kSecondsPerDay = 86400;
// Training GPU pools: the two Zeus-trace GPUs with a full power-limit sweep for every workload.
constexpr std::array<std::string_view, 2> kTrainingGpus = {"v100", "a40"};

// ---- the job mix: shapes after Jeon et al. (ATC'19, Microsoft Philly), parameters ours (docs/cluster.md).
struct SizeShare {
  int gpus;
  double share;
};
constexpr std::array<SizeShare, 6> kJobSizes = {
    {{1, 0.70}, {2, 0.10}, {4, 0.09}, {8, 0.08}, {16, 0.02}, {32, 0.01}}};
constexpr double kRunMedianS = 1.5 * 3600;  // log-normal run time at full speed: median, σ of its log
constexpr double kRunSigma = 1.6;
constexpr double kRunMinS = 600;
constexpr double kRunMaxS = 4 * kSecondsPerDay;
constexpr double kDeadlineStretch = 1.5;  // a non-deferrable job's deadline: arrival + 1.5 × run + 1 h
constexpr double kDeadlineAllowanceS = 3600;
constexpr double kDeferrableStretch = 1.2;  // a deferrable one's: arrival + 1.2 × run + slack
constexpr double kDeferralPadding = 1.1;    // remaining time given to the plan: × this (cap slowdowns)
constexpr double kDeferralHorizonS = 7 * kSecondsPerDay;
constexpr double kMinDeferralSlotS = 1800;
constexpr double kDeadlineMarginS = 1800;  // the autopilot slows a job only while it would finish this early

// ---- inference: request lengths and the daily load shape of data/inference/diurnal-1h.csv's generator
// (docs/inference.md): log-normal prompts (median 400, σ 0.8) and outputs (median 150, σ 0.8); rate ∝ 1 − 0.6
// · cos(2π · time of day), lowest at midnight. The SLO is docs/inference.md's: TPOT ≤ 0.1 s.
constexpr double kMeanPromptTokens = 545.6;  // the trace's means (clipping included)
constexpr double kMeanOutputTokens = 203.8;
constexpr double kTpotSloS = 0.1;
constexpr double kPeakUtilization = 0.7;  // daily peak load / the replica's SLO capacity at full power
constexpr double kCapacityAttainment =
    0.99;  // the capacity: the highest load at which 99% of tokens meet the SLO
constexpr int kLimitLevels = 11;
constexpr int kLoadLevels = 41;
constexpr double kLoadGridTop = 1.25;  // × the peak load

struct ServiceTemplate {
  std::string_view name;
  std::string_view model;
  std::string_view gpu;
  int tensor_parallel;
  double gpu_share;  // of the inference GPUs
};
constexpr std::array<ServiceTemplate, 3> kServices = {{
    {"chat-8b", "llama-3-8b", "a100-80gb", 1, 0.40},
    {"assist-70b", "llama-3-70b", "h100", 4, 0.32},
    {"code-8b", "llama-3-8b", "h100", 1, 0.28},
}};

// One training workload on one GPU: its Zeus power-limit sweep, Pareto points on (draw, time) by draw.
struct Profile {
  int pool = 0;
  std::string workload;
  std::vector<double> limit_w;
  std::vector<double> draw_w;  // average power at that limit, W per GPU
  std::vector<double> time_s;  // per epoch
  double max_limit_w = 0;
  size_t fastest() const { return time_s.size() - 1; }
  double speed(size_t level) const { return time_s.back() / time_s[level]; }
};

struct Pool {
  std::string gpu;
  int gpus = 0;
  double max_w = 0;
  double idle_w = 0;
};

struct TrainingJob {
  double arrival_s = 0;
  int pool = 0;
  int profile = 0;
  int gpus = 1;
  double run_s = 0;  // at full speed
  double deadline_s = 0;
  bool deferrable = false;
};

// One service's SLO table over (load level, limit level).
struct Service {
  ServiceInfo info;
  double idle_w = 0;
  double tdp_w = 0;
  int gpus = 0;
  std::vector<double> limit_w;    // kLimitLevels (+ the uniform cap's level), ascending
  std::vector<double> load_grid;  // requests/s per replica
  // [load][limit]
  std::vector<std::vector<double>> draw_w;
  std::vector<std::vector<double>> time_s;
  std::vector<std::vector<double>> attainment;
  std::vector<double> daily_peak_factor;  // per day
};

struct World {
  ReplayOptions options;
  carbon::CarbonTrace trace;
  std::vector<Pool> pools;
  std::vector<Profile> profiles;
  std::vector<TrainingJob> jobs;
  std::vector<Service> services;
  int training_gpus = 0;
  int inference_gpus = 0;
  double max_power_w = 0;
  double cap_w = 0;
  int64_t periods = 0;
  double horizon_s = 0;
  double offered_work_gpu_s = 0;
  double deferrable_work_gpu_s = 0;
};

double intensity_at(const carbon::CarbonTrace& trace, double time_s) {
  const auto& points = trace.points();
  const auto index = static_cast<int64_t>(std::floor(time_s / static_cast<double>(trace.period_s())));
  const auto count = static_cast<int64_t>(points.size());
  const int64_t wrapped = ((index % count) + count) % count;
  return points[static_cast<size_t>(wrapped)].intensity_g_per_kwh;
}

Result<std::vector<Profile>> load_profiles() {
  std::vector<Profile> profiles;
  for (size_t pool = 0; pool < kTrainingGpus.size(); ++pool) {
    const std::string gpu(kTrainingGpus[pool]);
    for (const std::string& workload : sim::paper_workloads()) {
      auto trace = JOULE_TRY(sim::workload_trace(gpu, workload));
      auto job = JOULE_TRY(sim::paper_job(trace, workload));
      std::vector<std::array<double, 3>> points;  // limit, draw, time
      for (const auto& row : trace.rows) {
        if (row.dataset != job.dataset || row.network != job.network || row.optimizer != job.optimizer ||
            row.batch_size != job.default_batch_size) {
          continue;
        }
        const bool seen = std::any_of(points.begin(), points.end(),
                                      [&](const auto& p) { return p[0] == row.power_limit_w; });
        if (!seen) {
          points.push_back({row.power_limit_w, row.average_power_w, row.time_per_epoch_s});
        }
      }
      if (points.empty()) {
        return fail(ErrorCode::kInternal, "the {} trace has no power sweep for {}", gpu, workload);
      }
      std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a[1] < b[1]; });
      Profile profile;
      profile.pool = static_cast<int>(pool);
      profile.workload = workload;
      profile.max_limit_w = 0;
      for (const auto& p : points) {
        profile.max_limit_w = std::max(profile.max_limit_w, p[0]);
        // Pareto on (draw, time): a point that draws more must be faster.
        if (!profile.time_s.empty() && p[2] >= profile.time_s.back()) {
          continue;
        }
        profile.limit_w.push_back(p[0]);
        profile.draw_w.push_back(p[1]);
        profile.time_s.push_back(p[2]);
      }
      profiles.push_back(std::move(profile));
    }
  }
  return profiles;
}

double log_normal(rng::Generator& generator, double median, double sigma) {
  return median * std::exp(sigma * generator.standard_normal());
}

TrainingJob draw_shape(rng::Generator& generator, const std::vector<Pool>& pools, int training_gpus,
                       size_t workloads) {
  TrainingJob job;
  double u = generator.random();
  job.gpus = kJobSizes.back().gpus;
  for (const auto& size : kJobSizes) {
    if (u < size.share) {
      job.gpus = size.gpus;
      break;
    }
    u -= size.share;
  }
  job.run_s = std::clamp(log_normal(generator, kRunMedianS, kRunSigma), kRunMinS, kRunMaxS);
  const double pick = generator.random() * training_gpus;
  job.pool = pick < pools[0].gpus ? 0 : 1;
  job.gpus = std::min(job.gpus, pools[static_cast<size_t>(job.pool)].gpus);
  const auto workload =
      std::min(workloads - 1, static_cast<size_t>(generator.random() * static_cast<double>(workloads)));
  job.profile = static_cast<int>(static_cast<size_t>(job.pool) * workloads + workload);
  return job;
}

void generate_jobs(World& world) {
  const auto& options = world.options;
  const size_t workloads = sim::paper_workloads().size();
  if (world.training_gpus < 1) {
    return;
  }
  // The mean work of a job (GPU-s), estimated from the same distributions on a stream of its own.
  rng::Generator sampler(options.seed ^ 0x5eed'c1a5'7e12ULL);
  double mean_work = 0;
  constexpr int kSamples = 20000;
  for (int i = 0; i < kSamples; ++i) {
    const TrainingJob shape = draw_shape(sampler, world.pools, world.training_gpus, workloads);
    mean_work += shape.run_s * shape.gpus / kSamples;
  }
  const double arrivals_per_s = options.training_load * world.training_gpus / mean_work;
  rng::Generator generator(options.seed);
  double time_s = 0;
  double deferrable_work = 0;
  double all_work = 0;
  while (true) {
    time_s += -std::log(1 - generator.random()) / arrivals_per_s;
    if (time_s >= world.horizon_s) {
      break;
    }
    TrainingJob job = draw_shape(generator, world.pools, world.training_gpus, workloads);
    job.arrival_s = time_s;
    const double work = job.run_s * job.gpus;
    all_work += work;
    // Deferrable work is marked greedily in arrival order, so that its share of the work so far stays at
    // most the target: every share uses the same jobs.
    if (options.deferrable_share > 0 &&
        deferrable_work + work <= options.deferrable_share * all_work + 1e-9) {
      job.deferrable = true;
      deferrable_work += work;
    }
    job.deadline_s = job.deferrable
                         ? job.arrival_s + kDeferrableStretch * job.run_s + options.deferral_slack_s
                         : job.arrival_s + kDeadlineStretch * job.run_s + kDeadlineAllowanceS;
    world.jobs.push_back(job);
  }
  world.offered_work_gpu_s = all_work;
  world.deferrable_work_gpu_s = deferrable_work;
}

// ---- inference: a replica's steady state at a load, from the serving cost model.
struct SteadyState {
  double batch = 0;   // requests in flight
  double time_s = 0;  // iteration time (TPOT)
  double draw_w = 0;  // per GPU
  double attainment = 0;
  bool overloaded = false;
};

sim::IterationBatch make_batch(int64_t decodes, double prefill_tokens) {
  sim::IterationBatch batch;
  batch.decode_requests = decodes;
  batch.decode_context_tokens = static_cast<int64_t>(
      std::llround(static_cast<double>(decodes) * (kMeanPromptTokens + kMeanOutputTokens / 2)));
  batch.prefill_tokens = static_cast<int64_t>(std::llround(prefill_tokens));
  batch.prefill_attention_pairs = prefill_tokens * kMeanPromptTokens / 2;
  batch.prefill_context_tokens = batch.prefill_tokens;
  return batch;
}

// The iteration at `decodes` requests in flight, with the prompts arriving at `load` chunked into it.
sim::IterationCost iteration(const sim::LlmCostModel& cost, int64_t decodes, double load, double limit_w) {
  sim::IterationCost it = cost.at_power_limit(make_batch(decodes, 0), limit_w);
  for (int i = 0; i < 3; ++i) {
    it = cost.at_power_limit(make_batch(decodes, load * it.time_s * kMeanPromptTokens), limit_w);
  }
  return it;
}

SteadyState steady_state(const sim::LlmCostModel& cost, int64_t max_batch, double load, double limit_w) {
  SteadyState state;
  const double idle_w = cost.gpu().idle_power_w;
  if (load <= 0) {
    state.time_s = iteration(cost, 1, 0, limit_w).time_s;
    state.draw_w = idle_w;
    state.attainment = 1;
    return state;
  }
  // The in-flight count B solves B = load · output tokens · t(B) (Little's law); the least integer B with
  // load · Ō · t(B) ≤ B is the stable one.
  auto demand = [&](int64_t b) {
    return load * kMeanOutputTokens * iteration(cost, b, load, limit_w).time_s;
  };
  if (demand(max_batch) > static_cast<double>(max_batch)) {
    const sim::IterationCost it = iteration(cost, max_batch, load, limit_w);
    state.overloaded = true;
    state.batch = static_cast<double>(max_batch);
    state.time_s = it.time_s;
    state.draw_w = it.power_w;
    state.attainment = 0;
    return state;
  }
  int64_t low = 1;
  int64_t high = max_batch;
  while (low < high) {
    const int64_t mid = (low + high) / 2;
    if (demand(mid) <= static_cast<double>(mid)) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  const sim::IterationCost it = iteration(cost, low, load, limit_w);
  const double busy = std::min(1.0, demand(1));
  state.batch = low == 1 ? busy : static_cast<double>(low);
  state.time_s = it.time_s;
  state.draw_w = idle_w + (low == 1 ? busy : 1.0) * (it.power_w - idle_w);
  // Attainment: the share of tokens produced by iterations within the TPOT SLO, with the in-flight count
  // Poisson around its mean (requests arrive at random).
  const double mean = std::max(1.0, static_cast<double>(low));
  const double spread = 6 * std::sqrt(mean) + 5;
  const auto first = static_cast<int64_t>(std::max(1.0, std::floor(mean - spread)));
  const auto last = static_cast<int64_t>(std::min(static_cast<double>(max_batch), std::ceil(mean + spread)));
  double tokens = 0;
  double within = 0;
  for (int64_t b = first; b <= last; ++b) {
    const double bd = static_cast<double>(b);
    const double pmf = std::exp(bd * std::log(mean) - mean - std::lgamma(bd + 1));
    tokens += pmf * bd;
    if (iteration(cost, b, load, limit_w).time_s <= kTpotSloS) {
      within += pmf * bd;
    }
  }
  state.attainment = tokens > 0 ? within / tokens : 1;
  return state;
}

Result<void> build_services(World& world, double uniform_w, bool tables) {
  const auto& options = world.options;
  const int budget = static_cast<int>(std::floor(options.inference_gpu_share * options.gpus + 1e-9));
  rng::Generator generator(options.seed ^ 0x1f3e'5e7d'a11bULL);
  const auto days = static_cast<size_t>(std::ceil(options.days)) + 1;
  for (const auto& service_template : kServices) {
    const int replicas =
        static_cast<int>(std::floor(service_template.gpu_share * budget / service_template.tensor_parallel));
    if (replicas < 1) {
      continue;
    }
    auto gpu = JOULE_TRY(sim::find_llm_gpu(service_template.gpu));
    auto model = JOULE_TRY(sim::find_llm_model(service_template.model));
    const sim::LlmCostModel cost(*gpu, *model, service_template.tensor_parallel);
    Service service;
    service.info.name = std::string(service_template.name);
    service.info.model = std::string(service_template.model);
    service.info.gpu = std::string(service_template.gpu);
    service.info.tensor_parallel = service_template.tensor_parallel;
    service.info.replicas = replicas;
    service.gpus = replicas * service_template.tensor_parallel;
    service.idle_w = gpu->idle_power_w;
    service.tdp_w = gpu->tdp_w;
    if (!tables) {
      world.inference_gpus += service.gpus;
      world.services.push_back(std::move(service));
      continue;
    }
    const auto kv_batch = static_cast<int64_t>(static_cast<double>(cost.kv_cache_tokens()) /
                                               (kMeanPromptTokens + kMeanOutputTokens));
    const int64_t max_batch = std::clamp<int64_t>(kv_batch, 1, 256);
    for (int i = 0; i < kLimitLevels; ++i) {
      service.limit_w.push_back(gpu->min_power_limit_w +
                                (gpu->tdp_w - gpu->min_power_limit_w) * i / (kLimitLevels - 1));
    }
    const double uniform_level = std::clamp(uniform_w, gpu->min_power_limit_w, gpu->tdp_w);
    if (std::find(service.limit_w.begin(), service.limit_w.end(), uniform_level) == service.limit_w.end()) {
      service.limit_w.push_back(uniform_level);
      std::sort(service.limit_w.begin(), service.limit_w.end());
    }
    // Capacity: the highest load whose attainment at full power meets the target.
    double low = 0;
    double high = 1;
    while (steady_state(cost, max_batch, high, gpu->tdp_w).attainment >= kCapacityAttainment) {
      low = high;
      high *= 2;
    }
    for (int i = 0; i < 30; ++i) {
      const double mid = (low + high) / 2;
      (steady_state(cost, max_batch, mid, gpu->tdp_w).attainment >= kCapacityAttainment ? low : high) = mid;
    }
    service.info.capacity_requests_per_s = low;
    service.info.peak_requests_per_s = kPeakUtilization * low;
    for (int l = 0; l < kLoadLevels; ++l) {
      const double load = service.info.peak_requests_per_s * kLoadGridTop * l / (kLoadLevels - 1);
      service.load_grid.push_back(load);
      std::vector<double> draw;
      std::vector<double> time;
      std::vector<double> attainment;
      for (double limit : service.limit_w) {
        const SteadyState state = steady_state(cost, max_batch, load, limit);
        draw.push_back(state.draw_w);
        time.push_back(state.overloaded ? std::numeric_limits<double>::infinity() : state.time_s);
        attainment.push_back(state.attainment);
      }
      service.draw_w.push_back(std::move(draw));
      service.time_s.push_back(std::move(time));
      service.attainment.push_back(std::move(attainment));
    }
    for (size_t d = 0; d < days; ++d) {
      service.daily_peak_factor.push_back(0.85 + 0.25 * generator.random());
    }
    world.inference_gpus += service.gpus;
    world.services.push_back(std::move(service));
  }
  return {};
}

// A service's load (requests/s per replica) at a time.
double service_load(const Service& service, double time_s) {
  const auto day = static_cast<size_t>(time_s / kSecondsPerDay);
  const double phase = 2 * M_PI * std::fmod(time_s, kSecondsPerDay) / kSecondsPerDay;
  const double shape = (1 - 0.6 * std::cos(phase)) / 1.6;  // 1 at the daily peak
  const double factor = service.daily_peak_factor[std::min(day, service.daily_peak_factor.size() - 1)];
  return std::min(service.info.peak_requests_per_s * shape * factor, service.load_grid.back());
}

// A service's table at a load, interpolated between load levels.
struct ServiceAt {
  std::vector<double> draw_w;
  std::vector<double> time_s;
  std::vector<double> attainment;
};

ServiceAt service_at(const Service& service, double load) {
  const double step = service.load_grid[1] - service.load_grid[0];
  const double position = std::clamp(load / step, 0.0, static_cast<double>(kLoadLevels - 1));
  const auto low = std::min(static_cast<size_t>(position), static_cast<size_t>(kLoadLevels - 2));
  const double w = position - static_cast<double>(low);
  ServiceAt at;
  for (size_t k = 0; k < service.limit_w.size(); ++k) {
    auto mix = [&](const std::vector<std::vector<double>>& table) {
      const double a = table[low][k];
      const double b = table[low + 1][k];
      // An overloaded end (infinite iteration time) makes the whole interval overloaded: the cautious side.
      if (std::isinf(a) || std::isinf(b)) {
        return std::numeric_limits<double>::infinity();
      }
      return a + (b - a) * w;
    };
    at.draw_w.push_back(mix(service.draw_w));
    at.time_s.push_back(mix(service.time_s));
    at.attainment.push_back(mix(service.attainment));
  }
  return at;
}

Result<World> build_world(const ReplayOptions& options) {
  World world;
  world.options = options;
  auto trace = JOULE_TRY(carbon::CarbonTrace::read_file(options.carbon_trace_path));
  world.trace = std::move(trace);
  world.horizon_s = options.days * kSecondsPerDay;
  world.periods = static_cast<int64_t>(std::ceil(world.horizon_s / options.control_period_s - 1e-9));
  auto profiles = JOULE_TRY(load_profiles());
  world.profiles = std::move(profiles);
  for (std::string_view key : kTrainingGpus) {
    auto model = JOULE_TRY(device::sim::find_gpu_model(key));
    Pool pool;
    pool.gpu = std::string(key);
    pool.max_w = model->max_power_limit_mw / 1000.0;
    pool.idle_w = model->idle_power_w;
    world.pools.push_back(pool);
  }
  // The uniform cap's level depends on the summed maximum, which depends on the services' GPUs: size the
  // services first with a provisional level, then rebuild their tables with the real one.
  JOULE_TRY(build_services(world, 0, false));
  world.training_gpus = options.gpus - world.inference_gpus;
  world.pools[0].gpus = world.training_gpus / 2;
  world.pools[1].gpus = world.training_gpus - world.pools[0].gpus;
  world.max_power_w = world.pools[0].gpus * world.pools[0].max_w + world.pools[1].gpus * world.pools[1].max_w;
  for (const auto& service : world.services) {
    world.max_power_w += service.gpus * service.tdp_w;
  }
  world.cap_w = options.cap_share * world.max_power_w;
  world.services.clear();
  world.inference_gpus = 0;
  JOULE_TRY(build_services(world, world.cap_w / options.gpus, true));
  generate_jobs(world);
  return world;
}

// ---- one policy's pass.
struct JobState {
  double remaining_s = 0;  // run time left at full speed
  bool queued = false;
  bool running = false;
  bool finished = false;
  bool runs_now = true;  // the deferral plan lets it run (autopilot)
  double finish_s = 0;
  size_t level = 0;
};

class Pass {
 public:
  Pass(const World& world, ReplayPolicy policy) : world_(world), policy_(policy) {}

  PolicyReport run();

 private:
  void admit(double now_s);
  void plan_deferral(double now_s);
  void schedule();
  void choose_levels(double now_s);
  void allocate_autopilot(double now_s);
  size_t uniform_level(const Profile& profile) const;
  size_t zeus_level(const Profile& profile) const;
  size_t chase_level(const Profile& profile, double intensity, double eta) const;
  size_t slo_controller_level(const ServiceAt& at) const;
  void update_chase_levels(double now_s);
  // The deferral plan's slot: the carbon trace's period, at least 30 min (a 5-min trace would make the plan
  // six times longer for little gain). Each slot takes the intensity at its start.
  double deferral_slot_s() const {
    return std::max(static_cast<double>(world_.trace.period_s()), kMinDeferralSlotS);
  }

  const World& world_;
  ReplayPolicy policy_;
  std::vector<JobState> state_;
  std::vector<size_t> queue_;    // job indices, arrival order
  std::vector<size_t> running_;  // job indices
  std::array<int, 2> free_gpus_{};
  size_t next_arrival_ = 0;
  std::vector<size_t> service_level_;
  std::vector<ServiceAt> service_now_;
  std::vector<size_t> chase_levels_;
  std::vector<size_t> deferrable_levels_;
  std::vector<size_t> autopilot_levels_;  // the autopilot's, for jobs that cannot wait (autopilot_eta)  //
                                          // the autopilot's, for deferrable jobs (deferrable_eta)
  int64_t chase_slot_ = -1;
  int64_t deferral_slot_ = -1;
};

size_t Pass::uniform_level(const Profile& profile) const {
  const double uniform_w = world_.cap_w / world_.options.gpus;
  size_t best = 0;
  for (size_t k = 0; k < profile.limit_w.size(); ++k) {
    if (profile.limit_w[k] <= uniform_w + 1e-9) {
      best = k;
    }
  }
  return best;
}

// The profile's level of least `cost` (ZeusCost, CarbonCost: cost(energy_j, time_s)); ties to the fastest.
template <typename Cost>
size_t cheapest_level(const Profile& profile, const Cost& cost) {
  size_t best = profile.fastest();
  double best_cost = std::numeric_limits<double>::infinity();
  for (size_t k = 0; k < profile.time_s.size(); ++k) {
    const double c = cost.cost(profile.draw_w[k] * profile.time_s[k], profile.time_s[k]);
    if (c < best_cost) {
      best_cost = c;
      best = k;
    }
  }
  return best;
}

size_t Pass::zeus_level(const Profile& profile) const {
  return cheapest_level(profile,
                        ZeusCost{.eta = world_.options.zeus_eta, .max_power_w = profile.max_limit_w});
}

size_t Pass::chase_level(const Profile& profile, double intensity, double eta) const {
  return cheapest_level(profile,
                        CarbonCost{.eta = eta,
                                   .intensity_g_per_kwh = intensity,
                                   .max_intensity_g_per_kwh = world_.options.chase_max_intensity_g_per_kwh,
                                   .max_power_w = profile.max_limit_w});
}

size_t Pass::slo_controller_level(const ServiceAt& at) const {
  const double target = std::min(world_.options.slo_attainment_target, at.attainment.back());
  size_t best = at.draw_w.size() - 1;
  for (size_t k = 0; k < at.draw_w.size(); ++k) {
    if (at.attainment[k] >= target - 1e-12 && at.draw_w[k] < at.draw_w[best]) {
      best = k;
    }
  }
  return best;
}

void Pass::admit(double now_s) {
  while (next_arrival_ < world_.jobs.size() && world_.jobs[next_arrival_].arrival_s <= now_s) {
    auto& state = state_[next_arrival_];
    state.queued = true;
    // Under the autopilot a deferrable job waits for the next deferral plan.
    state.runs_now = !(policy_ == ReplayPolicy::kAutopilot && world_.jobs[next_arrival_].deferrable);
    queue_.push_back(next_arrival_);
    ++next_arrival_;
  }
}

// The autopilot's deferral plan, re-made every carbon slot: the deferrable jobs' remaining work over a
// seasonal-naive forecast (each future slot's intensity is that of the same time of day in the last day
// seen; the first day, the current intensity), within the watts the cap leaves them now.
void Pass::plan_deferral(double now_s) {
  const double period_s = deferral_slot_s();
  std::vector<DeferrableWork> work;
  std::vector<size_t> index;
  double other_w = 0;  // what the rest of the cluster draws now (inference at its SLO floor, the
  int other_gpus = 0;  // non-deferrable training at full power), and the GPUs it holds
  for (size_t s = 0; s < world_.services.size(); ++s) {
    other_w += world_.services[s].gpus * service_now_[s].draw_w[service_level_[s]];
  }
  int waiting_gpus = 0;
  for (size_t j : running_) {
    const auto& job = world_.jobs[j];
    if (!job.deferrable) {
      const auto& profile = world_.profiles[static_cast<size_t>(job.profile)];
      other_w += job.gpus * profile.draw_w[profile.fastest()];
      other_gpus += job.gpus;
    }
  }
  double deferrable_draw_per_gpu = 0;
  int deferrable_gpus = 0;
  for (size_t j : queue_) {
    const auto& job = world_.jobs[j];
    if (!job.deferrable) {
      waiting_gpus += job.gpus;
    }
  }
  double latest_s = now_s;
  auto consider = [&](size_t j) {
    const auto& job = world_.jobs[j];
    auto& state = state_[j];
    if (!job.deferrable || state.finished) {
      return;
    }
    if (job.deadline_s - now_s <= period_s) {
      state.runs_now = true;  // too close to its deadline to plan: it runs
      return;
    }
    const auto& profile = world_.profiles[static_cast<size_t>(job.profile)];
    // The plan sees the job at the level it runs at now (slower than full speed when it follows carbon).
    const size_t level = world_.options.autopilot_follows_carbon
                             ? deferrable_levels_[static_cast<size_t>(job.profile)]
                             : profile.fastest();
    const double draw_w = profile.draw_w[level];
    work.push_back({.id = fmt::format("j{}", j),
                    .power_w = job.gpus * draw_w,
                    .remaining_s = state.remaining_s / profile.speed(level) * kDeferralPadding,
                    .deadline_s = job.deadline_s - now_s});
    index.push_back(j);
    deferrable_draw_per_gpu += job.gpus * draw_w;
    deferrable_gpus += job.gpus;
    latest_s = std::max(latest_s, job.deadline_s);
  };
  for (size_t j : running_) {
    consider(j);
  }
  for (size_t j : queue_) {
    consider(j);
  }
  if (work.empty()) {
    return;
  }
  deferrable_draw_per_gpu /= deferrable_gpus;
  const int idle_gpus = world_.training_gpus - other_gpus;
  const double idle_w = idle_gpus * (world_.pools[0].idle_w + world_.pools[1].idle_w) / 2;
  const double power_room_w = world_.cap_w - other_w - idle_w;
  const double gpu_room_w =
      std::max(0, world_.training_gpus - other_gpus - waiting_gpus) * deferrable_draw_per_gpu;
  const double available_w = std::max(0.0, std::min(power_room_w, gpu_room_w));
  std::vector<ForecastSlot> forecast;
  const double now_intensity = intensity_at(world_.trace, now_s);
  const double horizon_end_s = std::min(latest_s, now_s + kDeferralHorizonS);
  for (int64_t slot = 0; now_s + static_cast<double>(slot) * period_s < horizon_end_s; ++slot) {
    const double slot_s = now_s + static_cast<double>(slot) * period_s;
    double intensity = now_intensity;
    if (world_.options.deferral_oracle_forecast) {
      intensity = intensity_at(world_.trace, slot_s);
    } else if (slot_s > now_s) {
      const double days_back = std::ceil((slot_s - now_s) / kSecondsPerDay);
      const double seen_s = slot_s - days_back * kSecondsPerDay;
      if (seen_s >= 0) {
        intensity = intensity_at(world_.trace, seen_s);
      }
    }
    forecast.push_back({.length_s = period_s, .intensity_g_per_kwh = intensity, .available_w = available_w});
  }
  auto plan = plan_deferrable(work, forecast);
  if (!plan) {
    for (size_t j : index) {
      state_[j].runs_now = true;  // never trade a deadline for carbon on a planning error
    }
    return;
  }
  for (size_t i = 0; i < index.size(); ++i) {
    const auto& decision = plan->jobs[i];
    state_[index[i]].runs_now = decision.runs_now || decision.at_risk;
  }
}

void Pass::schedule() {
  // Paused deferrable jobs give their GPUs back (checkpointed; their progress is kept).
  for (size_t i = 0; i < running_.size();) {
    const size_t j = running_[i];
    if (!state_[j].runs_now) {
      state_[j].running = false;
      state_[j].queued = true;
      free_gpus_[static_cast<size_t>(world_.jobs[j].pool)] += world_.jobs[j].gpus;
      queue_.push_back(j);
      running_[i] = running_.back();
      running_.pop_back();
    } else {
      ++i;
    }
  }
  // Arrival order; the autopilot, which knows the deadlines, takes the earliest deadline first (work that
  // cannot wait has the tighter ones; deferrable work moves up as its deadline nears).
  if (policy_ == ReplayPolicy::kAutopilot) {
    std::sort(queue_.begin(), queue_.end(), [&](size_t a, size_t b) {
      return std::pair(world_.jobs[a].deadline_s, a) < std::pair(world_.jobs[b].deadline_s, b);
    });
  } else {
    std::sort(queue_.begin(), queue_.end());
  }
  // First come, first served, with backfilling: any waiting job that fits its pool's free GPUs starts.
  std::vector<size_t> waiting;
  waiting.reserve(queue_.size());
  for (size_t j : queue_) {
    const auto& job = world_.jobs[j];
    auto& free = free_gpus_[static_cast<size_t>(job.pool)];
    if (state_[j].runs_now && job.gpus <= free) {
      free -= job.gpus;
      state_[j].queued = false;
      state_[j].running = true;
      running_.push_back(j);
    } else {
      waiting.push_back(j);
    }
  }
  queue_ = std::move(waiting);
}

void Pass::update_chase_levels(double now_s) {
  const auto slot = static_cast<int64_t>(std::floor(now_s / world_.options.chase_period_s));
  if (slot == chase_slot_) {
    return;
  }
  chase_slot_ = slot;
  // The intensity of the coming period is taken as the trace's actual value: Chase's best case (a perfect
  // forecast); the autopilot, when it follows the carbon signal, sees the same.
  const double intensity = intensity_at(world_.trace, now_s);
  for (size_t p = 0; p < world_.profiles.size(); ++p) {
    chase_levels_[p] = chase_level(world_.profiles[p], intensity, world_.options.chase_eta);
    autopilot_levels_[p] = chase_level(world_.profiles[p], intensity, world_.options.autopilot_eta);
    deferrable_levels_[p] = chase_level(world_.profiles[p], intensity, world_.options.deferrable_eta);
  }
}

void Pass::allocate_autopilot(double now_s) {
  update_chase_levels(now_s);
  std::vector<JobDemand> demands;
  demands.reserve(running_.size() + world_.services.size());
  for (size_t j : running_) {
    const auto& job = world_.jobs[j];
    const auto& profile = world_.profiles[static_cast<size_t>(job.profile)];
    JobDemand demand;
    demand.id = fmt::format("j{}", j);
    demand.gpus = job.gpus;
    // Following the carbon signal, a job is offered no more than its carbon-weighted optimum at the current
    // intensity, raised where that pace would miss its deadline: the cap decides how much less.
    size_t top = profile.fastest();
    if (world_.options.autopilot_follows_carbon) {
      top = (job.deferrable ? deferrable_levels_ : autopilot_levels_)[static_cast<size_t>(job.profile)];
      while (top < profile.fastest() &&
             now_s + state_[j].remaining_s / profile.speed(top) > job.deadline_s - kDeadlineMarginS) {
        ++top;
      }
    }
    for (size_t k = 0; k <= top; ++k) {
      demand.frontier.push_back({.power_limit_w = profile.draw_w[k], .time_s = profile.time_s[k]});
    }
    demands.push_back(std::move(demand));
  }
  std::vector<std::vector<size_t>> service_points(world_.services.size());
  for (size_t s = 0; s < world_.services.size(); ++s) {
    const auto& at = service_now_[s];
    JobDemand demand;
    demand.id = world_.services[s].info.name;
    demand.kind = JobKind::kInference;
    demand.gpus = world_.services[s].gpus;
    const double target = std::min(world_.options.slo_attainment_target, at.attainment.back());
    std::optional<double> floor_w;
    double last_draw = -1;
    double last_time = std::numeric_limits<double>::infinity();
    for (size_t k = 0; k < at.draw_w.size(); ++k) {
      if (std::isinf(at.time_s[k]) || at.draw_w[k] <= last_draw || at.time_s[k] >= last_time) {
        continue;  // overloaded, or not on the (draw, time) Pareto front
      }
      last_draw = at.draw_w[k];
      last_time = at.time_s[k];
      demand.frontier.push_back({.power_limit_w = at.draw_w[k], .time_s = at.time_s[k]});
      service_points[s].push_back(k);
      if (!floor_w && at.attainment[k] >= target - 1e-12) {
        floor_w = at.draw_w[k];
      }
    }
    if (demand.frontier.empty()) {
      demand.frontier.push_back({.power_limit_w = at.draw_w.back(), .time_s = 1});
      service_points[s].push_back(at.draw_w.size() - 1);
    }
    demand.slo_floor_w = floor_w.value_or(demand.frontier.back().power_limit_w);
    // Speed beyond the SLO buys nothing a service needs: it is offered its floor and the points below it
    // (where the cap is short and SLOs are degraded), never the watts above.
    while (demand.frontier.size() > 1 && demand.frontier.back().power_limit_w > *demand.slo_floor_w) {
      demand.frontier.pop_back();
      service_points[s].pop_back();
    }
    demands.push_back(std::move(demand));
  }
  const double idle_w = free_gpus_[0] * world_.pools[0].idle_w + free_gpus_[1] * world_.pools[1].idle_w;
  const double budget_w = world_.cap_w - idle_w;
  auto allocation = budget_w > 0 ? allocate(demands, budget_w)
                                 : Result<Allocation>(fail(ErrorCode::kOutOfRange, "no budget"));
  if (!allocation && allocation.error().code() == ErrorCode::kOutOfRange && budget_w > 0) {
    allocation = allocate(demands, budget_w, {.degrade_slos = true});
  }
  if (!allocation) {
    // Not even every job at its lowest limit fits: every job at its lowest, and the replay counts the excess.
    for (size_t j : running_) {
      state_[j].level = 0;
    }
    for (size_t s = 0; s < world_.services.size(); ++s) {
      service_level_[s] = service_points[s].front();
    }
    return;
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    const size_t j = running_[i];
    const auto& profile = world_.profiles[static_cast<size_t>(world_.jobs[j].profile)];
    const double draw = allocation->jobs[i].power_limit_w;
    size_t level = 0;
    for (size_t k = 0; k < profile.draw_w.size(); ++k) {
      if (profile.draw_w[k] <= draw + 1e-9) {
        level = k;
      }
    }
    state_[j].level = level;
  }
  for (size_t s = 0; s < world_.services.size(); ++s) {
    const double draw = allocation->jobs[running_.size() + s].power_limit_w;
    size_t level = service_points[s].front();
    for (size_t k : service_points[s]) {
      if (service_now_[s].draw_w[k] <= draw + 1e-9) {
        level = k;
      }
    }
    service_level_[s] = level;
  }
}

void Pass::choose_levels(double now_s) {
  const size_t top_service_level = world_.services.empty() ? 0 : world_.services[0].limit_w.size() - 1;
  switch (policy_) {
    case ReplayPolicy::kUncapped:
      for (size_t s = 0; s < world_.services.size(); ++s) {
        service_level_[s] = world_.services[s].limit_w.size() - 1;
      }
      break;
    case ReplayPolicy::kZeusPerJob:
    case ReplayPolicy::kChasePerJob:
      // Per job, an inference service runs under its own SLO controller (joule infer govern): the least
      // power that holds its SLO at the load, whatever the rest of the cluster does.
      for (size_t s = 0; s < world_.services.size(); ++s) {
        service_level_[s] = slo_controller_level(service_now_[s]);
      }
      break;
    case ReplayPolicy::kUniformCap: {
      const double uniform_w = world_.cap_w / world_.options.gpus;
      for (size_t s = 0; s < world_.services.size(); ++s) {
        const auto& limits = world_.services[s].limit_w;
        const double level_w = std::clamp(uniform_w, limits.front(), limits.back());
        service_level_[s] =
            static_cast<size_t>(std::find(limits.begin(), limits.end(), level_w) - limits.begin());
        if (service_level_[s] >= limits.size()) {
          service_level_[s] = top_service_level;
        }
      }
      break;
    }
    case ReplayPolicy::kAutopilot:
      allocate_autopilot(now_s);
      return;
  }
  if (policy_ == ReplayPolicy::kChasePerJob) {
    update_chase_levels(now_s);
  }
  for (size_t j : running_) {
    const auto profile_index = static_cast<size_t>(world_.jobs[j].profile);
    const auto& profile = world_.profiles[profile_index];
    switch (policy_) {
      case ReplayPolicy::kUncapped:
        state_[j].level = profile.fastest();
        break;
      case ReplayPolicy::kUniformCap:
        state_[j].level = uniform_level(profile);
        break;
      case ReplayPolicy::kZeusPerJob:
        state_[j].level = zeus_level(profile);
        break;
      case ReplayPolicy::kChasePerJob:
        state_[j].level = chase_levels_[profile_index];
        break;
      case ReplayPolicy::kAutopilot:
        break;
    }
  }
}

PolicyReport Pass::run() {
  const auto& options = world_.options;
  PolicyReport report;
  report.policy = policy_;
  report.name = std::string(to_string(policy_));
  state_.assign(world_.jobs.size(), JobState{});
  for (size_t j = 0; j < world_.jobs.size(); ++j) {
    state_[j].remaining_s = world_.jobs[j].run_s;
  }
  free_gpus_ = {world_.pools[0].gpus, world_.pools[1].gpus};
  service_level_.assign(world_.services.size(), 0);
  service_now_.assign(world_.services.size(), ServiceAt{});
  chase_levels_.assign(world_.profiles.size(), 0);
  deferrable_levels_.assign(world_.profiles.size(), 0);
  autopilot_levels_.assign(world_.profiles.size(), 0);
  const double period_s = options.control_period_s;
  const double carbon_period_s = deferral_slot_s();
  double tokens = 0;
  double tokens_within = 0;
  report.min_period_slo_attainment = 1;
  if (options.keep_timeline) {
    report.power_w.reserve(static_cast<size_t>(world_.periods));
  }
  for (int64_t k = 0; k < world_.periods; ++k) {
    const double now_s = static_cast<double>(k) * period_s;
    const double length_s = std::min(period_s, world_.horizon_s - now_s);
    admit(now_s);
    for (size_t s = 0; s < world_.services.size(); ++s) {
      service_now_[s] = service_at(world_.services[s], service_load(world_.services[s], now_s));
    }
    if (policy_ == ReplayPolicy::kAutopilot) {
      const auto slot = static_cast<int64_t>(std::floor(now_s / carbon_period_s));
      if (slot != deferral_slot_) {
        deferral_slot_ = slot;
        // The services' levels the plan sees (before this period's allocation): their SLO floors at the
        // current load, what the autopilot gives them.
        for (size_t s = 0; s < world_.services.size(); ++s) {
          service_level_[s] = slo_controller_level(service_now_[s]);
        }
        update_chase_levels(now_s);
        plan_deferral(now_s);
      }
    }
    schedule();
    choose_levels(now_s);
    const double intensity = intensity_at(world_.trace, now_s);
    double energy_j = 0;
    double training_energy_j = 0;
    for (size_t s = 0; s < world_.services.size(); ++s) {
      const auto& service = world_.services[s];
      const size_t level = service_level_[s];
      energy_j += service.gpus * service_now_[s].draw_w[level] * length_s;
      const double load = service_load(service, now_s);
      const double service_tokens = load * service.info.replicas * kMeanOutputTokens * length_s;
      tokens += service_tokens;
      tokens_within += service_tokens * service_now_[s].attainment[level];
      report.min_period_slo_attainment =
          std::min(report.min_period_slo_attainment, service_now_[s].attainment[level]);
    }
    double idle_gpu_s[2] = {static_cast<double>(free_gpus_[0]) * length_s,
                            static_cast<double>(free_gpus_[1]) * length_s};
    std::vector<size_t> still_running;
    still_running.reserve(running_.size());
    for (size_t j : running_) {
      const auto& job = world_.jobs[j];
      auto& state = state_[j];
      const auto& profile = world_.profiles[static_cast<size_t>(job.profile)];
      const double speed = profile.speed(state.level);
      const double run_s = std::min(length_s, state.remaining_s / speed);
      state.remaining_s -= run_s * speed;
      const double job_energy_j = job.gpus * profile.draw_w[state.level] * run_s;
      energy_j += job_energy_j;
      training_energy_j += job_energy_j;
      report.training_work_gpu_s += job.gpus * run_s * speed;
      if (state.remaining_s <= 1e-6) {
        state.remaining_s = 0;
        state.running = false;
        state.finished = true;
        state.finish_s = now_s + run_s;
        ++report.jobs_finished;
        idle_gpu_s[job.pool] += job.gpus * (length_s - run_s);
        free_gpus_[static_cast<size_t>(job.pool)] += job.gpus;
      } else {
        still_running.push_back(j);
      }
    }
    running_ = std::move(still_running);
    energy_j += idle_gpu_s[0] * world_.pools[0].idle_w + idle_gpu_s[1] * world_.pools[1].idle_w;
    const double power_w = energy_j / length_s;
    report.energy_j += energy_j;
    report.carbon_g += energy_j / kJoulesPerKwh * intensity;
    report.training_energy_j += training_energy_j;
    report.training_carbon_g += training_energy_j / kJoulesPerKwh * intensity;
    report.peak_power_w = std::max(report.peak_power_w, power_w);
    if (power_w > world_.cap_w * (1 + 1e-9)) {
      ++report.periods_over_cap;
      report.time_over_cap_s += length_s;
      report.energy_over_cap_j += (power_w - world_.cap_w) * length_s;
    }
    if (options.keep_timeline) {
      report.power_w.push_back(power_w);
    }
  }
  report.mean_power_w = report.energy_j / world_.horizon_s;
  report.slo_attainment = tokens > 0 ? tokens_within / tokens : 1;
  if (world_.services.empty()) {
    report.min_period_slo_attainment = 1;
  }
  for (size_t j = 0; j < world_.jobs.size(); ++j) {
    const auto& job = world_.jobs[j];
    if (job.deadline_s > world_.horizon_s) {
      continue;
    }
    const bool met = state_[j].finished && state_[j].finish_s <= job.deadline_s + 1e-6;
    ++report.deadlines_due;
    report.deadlines_met += met ? 1 : 0;
    if (job.deferrable) {
      ++report.deferrable_deadlines_due;
      report.deferrable_deadlines_met += met ? 1 : 0;
    }
  }
  return report;
}

}  // namespace

std::string_view to_string(ReplayPolicy policy) {
  switch (policy) {
    case ReplayPolicy::kUncapped:
      return "uncapped";
    case ReplayPolicy::kUniformCap:
      return "uniform_cap";
    case ReplayPolicy::kZeusPerJob:
      return "zeus_per_job";
    case ReplayPolicy::kChasePerJob:
      return "chase_per_job";
    case ReplayPolicy::kAutopilot:
      return "autopilot";
  }
  return "unknown";
}

Result<ReplayPolicy> parse_replay_policy(std::string_view name) {
  for (auto policy : {ReplayPolicy::kUncapped, ReplayPolicy::kUniformCap, ReplayPolicy::kZeusPerJob,
                      ReplayPolicy::kChasePerJob, ReplayPolicy::kAutopilot}) {
    if (to_string(policy) == name) {
      return policy;
    }
  }
  return fail(ErrorCode::kInvalidArgument,
              "unknown policy '{}' (known: uncapped, uniform_cap, zeus_per_job, chase_per_job, autopilot)",
              name);
}

Result<void> validate(const ReplayOptions& options) {
  if (options.gpus < 1) {
    return fail(ErrorCode::kInvalidArgument, "--gpus must be at least 1 (got {})", options.gpus);
  }
  if (options.gpus > 1'000'000) {
    return fail(ErrorCode::kInvalidArgument, "--gpus must be at most 1000000 (got {})", options.gpus);
  }
  if (!(options.days > 0) || options.days > 366) {
    return fail(ErrorCode::kInvalidArgument, "--days must be above 0 and at most 366 (got {})", options.days);
  }
  if (!(options.cap_share > 0)) {
    return fail(ErrorCode::kInvalidArgument,
                "--cap-share must be above 0: the cap is a share of the GPUs' summed maximum power (got {})",
                options.cap_share);
  }
  if (options.cap_share > 1) {
    return fail(ErrorCode::kInvalidArgument,
                "--cap-share of {} puts the cap above the GPUs' summed maximum power: give a share in (0, 1]",
                options.cap_share);
  }
  if (!(options.deferrable_share >= 0 && options.deferrable_share <= 1)) {
    return fail(ErrorCode::kInvalidArgument,
                "--deferrable-share must be a share of the training work in [0, 1] (got {})",
                options.deferrable_share);
  }
  if (options.carbon_trace_path.empty()) {
    return fail(ErrorCode::kInvalidArgument, "a carbon trace is required (--carbon-trace FILE.csv)");
  }
  if (!(options.control_period_s >= 1 && options.control_period_s <= 86400)) {
    return fail(ErrorCode::kInvalidArgument, "the control period must be 1 s to 1 day (got {} s)",
                options.control_period_s);
  }
  if (!(options.chase_period_s >= 1)) {
    return fail(ErrorCode::kInvalidArgument, "Chase's period must be at least 1 s (got {} s)",
                options.chase_period_s);
  }
  if (!(options.chase_eta >= 0 && options.chase_eta <= 1) ||
      !(options.zeus_eta >= 0 && options.zeus_eta <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "eta must be in [0, 1] (Chase {}, Zeus {})", options.chase_eta,
                options.zeus_eta);
  }
  if (!(options.autopilot_eta >= 0 && options.autopilot_eta <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "the autopilot's eta must be in [0, 1] (got {})",
                options.autopilot_eta);
  }
  if (!(options.deferrable_eta >= 0 && options.deferrable_eta <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "the deferrable jobs' eta must be in [0, 1] (got {})",
                options.deferrable_eta);
  }
  if (!(options.chase_max_intensity_g_per_kwh > 0)) {
    return fail(ErrorCode::kInvalidArgument, "Chase's maximum intensity must be above 0 g/kWh (got {})",
                options.chase_max_intensity_g_per_kwh);
  }
  if (!(options.inference_gpu_share >= 0 && options.inference_gpu_share <= 0.5)) {
    return fail(ErrorCode::kInvalidArgument, "the inference GPU share must be in [0, 0.5] (got {})",
                options.inference_gpu_share);
  }
  if (!(options.training_load > 0 && options.training_load <= 2)) {
    return fail(ErrorCode::kInvalidArgument, "the training load must be in (0, 2] (got {})",
                options.training_load);
  }
  if (!(options.deferral_slack_s >= 0)) {
    return fail(ErrorCode::kInvalidArgument, "the deferral slack must be at least 0 s (got {})",
                options.deferral_slack_s);
  }
  if (!(options.slo_attainment_target > 0 && options.slo_attainment_target <= 1)) {
    return fail(ErrorCode::kInvalidArgument, "the SLO attainment target must be in (0, 1] (got {})",
                options.slo_attainment_target);
  }
  return {};
}

Result<ReplayReport> run_cluster_replay(const ReplayOptions& options) {
  JOULE_TRY(validate(options));
  auto world = JOULE_TRY(build_world(options));
  ReplayReport report;
  report.options = options;
  report.carbon_source = world.trace.source();
  report.training_gpus = world.training_gpus;
  report.inference_gpus = world.inference_gpus;
  report.max_power_w = world.max_power_w;
  report.cap_w = world.cap_w;
  report.periods = world.periods;
  report.jobs = static_cast<int64_t>(world.jobs.size());
  report.offered_work_gpu_s = world.offered_work_gpu_s;
  report.deferrable_work_share =
      world.offered_work_gpu_s > 0 ? world.deferrable_work_gpu_s / world.offered_work_gpu_s : 0;
  for (const auto& service : world.services) {
    report.services.push_back(service.info);
  }
  double intensity_sum = 0;
  for (int64_t k = 0; k < world.periods; ++k) {
    const double intensity = intensity_at(world.trace, static_cast<double>(k) * options.control_period_s);
    intensity_sum += intensity;
    if (options.keep_timeline) {
      report.intensity_g_per_kwh.push_back(intensity);
    }
  }
  report.mean_intensity_g_per_kwh = intensity_sum / static_cast<double>(world.periods);
  std::vector<ReplayPolicy> policies = options.policies;
  if (policies.empty()) {
    policies = {ReplayPolicy::kUncapped, ReplayPolicy::kUniformCap, ReplayPolicy::kZeusPerJob,
                ReplayPolicy::kChasePerJob, ReplayPolicy::kAutopilot};
  }
  for (ReplayPolicy policy : policies) {
    Pass pass(world, policy);
    report.policies.push_back(pass.run());
  }
  const auto uncapped =
      std::find_if(report.policies.begin(), report.policies.end(),
                   [](const PolicyReport& p) { return p.policy == ReplayPolicy::kUncapped; });
  if (uncapped != report.policies.end() && uncapped->training_work_gpu_s > 0) {
    const double reference = uncapped->training_work_gpu_s;
    for (auto& policy : report.policies) {
      policy.throughput_vs_uncapped = policy.training_work_gpu_s / reference;
    }
  }
  return report;
}

Result<std::vector<DeferrableCurvePoint>> deferrable_curve(const ReplayOptions& options,
                                                           const std::vector<double>& shares) {
  JOULE_TRY(validate(options));
  std::vector<DeferrableCurvePoint> curve;
  for (double share : shares) {
    ReplayOptions at = options;
    at.deferrable_share = share;
    at.policies = {ReplayPolicy::kUncapped, ReplayPolicy::kChasePerJob, ReplayPolicy::kAutopilot};
    at.keep_timeline = false;
    auto report = JOULE_TRY(run_cluster_replay(at));
    const PolicyReport& chase = report.policies[1];
    const PolicyReport& autopilot = report.policies[2];
    DeferrableCurvePoint point;
    point.deferrable_share = report.deferrable_work_share;
    point.chase_carbon_g = chase.carbon_g;
    point.autopilot_carbon_g = autopilot.carbon_g;
    point.chase_training_carbon_g = chase.training_carbon_g;
    point.autopilot_training_carbon_g = autopilot.training_carbon_g;
    point.carbon_saving_vs_chase = chase.carbon_g > 0 ? 1 - autopilot.carbon_g / chase.carbon_g : 0;
    point.autopilot_throughput_vs_uncapped = autopilot.throughput_vs_uncapped;
    point.autopilot_deadlines_met = autopilot.deadlines_met;
    point.autopilot_deadlines_due = autopilot.deadlines_due;
    point.chase_deadlines_met = chase.deadlines_met;
    point.chase_deadlines_due = chase.deadlines_due;
    curve.push_back(point);
  }
  return curve;
}

}  // namespace joule::cluster
