// SPDX-License-Identifier: Apache-2.0
// Runs iterations of a pipeline DAG on simulated GPUs, event by event on a virtual clock.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "joule/plan/runtime.hpp"

#include "plan/runtime/computation_workload.hpp"

namespace joule::plan {

namespace {

using device::sim::SimulatedGpu;

constexpr std::string_view kWindow = "pipeline iteration";

size_t index_of(Instruction instruction) {
  return instruction == Instruction::kForward ? 0 : 1;
}

uint32_t watts_to_mw(double power_w) {
  return static_cast<uint32_t>(std::clamp(power_w * 1e3, 0.0, static_cast<double>(UINT32_MAX)));
}

}  // namespace

device::sim::GpuModel pipeline_gpu_model(const Profile& profile, double p_blocking_w) {
  device::sim::GpuModel model;
  model.key = "pipeline";
  model.name = "Pipeline stage GPU (simulated)";
  model.description = "a pipeline stage driven by a per-computation time/energy profile";
  const std::vector<uint32_t>& frequencies_mhz = profile.frequencies_mhz();
  if (!frequencies_mhz.empty()) {
    model.max_sm_clock_mhz = *std::max_element(frequencies_mhz.begin(), frequencies_mhz.end());
    model.min_sm_clock_mhz = *std::min_element(frequencies_mhz.begin(), frequencies_mhz.end());
  }
  // The simulator lists clocks from the maximum down in equal steps; the gcd of the distances from the
  // maximum makes every profiled clock one of them (15 MHz for A100-like profiles).
  uint32_t step_mhz = 0;
  for (const uint32_t frequency_mhz : frequencies_mhz) {
    step_mhz = std::gcd(step_mhz, model.max_sm_clock_mhz - frequency_mhz);
  }
  model.sm_clock_step_mhz = step_mhz == 0 ? 15 : step_mhz;
  double peak_power_w = std::max(p_blocking_w, 1.0);
  for (int stage = 0; stage < profile.stage_count(); ++stage) {
    for (const Instruction instruction : {Instruction::kForward, Instruction::kBackward}) {
      for (const ProfileOption& option : profile.options(stage, instruction)) {
        peak_power_w = std::max(peak_power_w, option.energy_j / option.time_s);
      }
    }
  }
  model.max_power_limit_mw = watts_to_mw(std::ceil(peak_power_w));
  model.default_power_limit_mw = model.max_power_limit_mw;
  model.min_power_limit_mw = std::min(watts_to_mw(std::floor(p_blocking_w)), model.max_power_limit_mw);
  // Idle is how the simulator draws a constant power without a workload: here it is a blocked GPU.
  model.idle_power_w = p_blocking_w;
  model.has_energy_counter = true;
  return model;
}

Result<PipelineExecutor> PipelineExecutor::create(PipelineDag dag, Profile profile, double p_blocking_w) {
  if (dag.stages < 1) {
    return fail(ErrorCode::kInvalidArgument, "the pipeline has no stage");
  }
  JOULE_TRY(check_inputs(dag, profile, p_blocking_w));
  if (dag.stage_order.size() != static_cast<size_t>(dag.stages)) {
    return fail(ErrorCode::kInvalidArgument, "the pipeline has {} stages but a stage order for {}",
                dag.stages, dag.stage_order.size());
  }
  for (size_t stage = 0; stage < dag.stage_order.size(); ++stage) {
    for (const int node : dag.stage_order[stage]) {
      if (node < 0 || static_cast<size_t>(node) >= dag.computations.size() ||
          dag.computations[static_cast<size_t>(node)].stage != static_cast<int>(stage)) {
        return fail(ErrorCode::kInvalidArgument,
                    "the stage order of stage {} lists node {}, not one of its computations", stage, node);
      }
    }
  }
  for (const auto& [from, to] : dag.edges) {
    const auto count = static_cast<int>(dag.computations.size());
    if (from < 0 || from >= count || to < 0 || to >= count) {
      return fail(ErrorCode::kInvalidArgument, "the pipeline has an edge {} → {} between unknown nodes", from,
                  to);
    }
  }
  return PipelineExecutor(std::move(dag), std::move(profile), p_blocking_w);
}

PipelineExecutor::PipelineExecutor(PipelineDag dag, Profile profile, double p_blocking_w)
    : dag_(std::move(dag)),
      profile_(std::move(profile)),
      p_blocking_w_(p_blocking_w),
      model_(std::make_unique<device::sim::GpuModel>(pipeline_gpu_model(profile_, p_blocking_w))),
      clock_(std::make_shared<VirtualClock>()) {
  std::vector<device::Gpu*> monitored;
  for (int stage = 0; stage < dag_.stages; ++stage) {
    workloads_.push_back({
        std::make_shared<ComputationWorkload>(stage, Instruction::kForward,
                                              profile_.options(stage, Instruction::kForward)),
        std::make_shared<ComputationWorkload>(stage, Instruction::kBackward,
                                              profile_.options(stage, Instruction::kBackward)),
    });
    auto gpu = std::make_unique<SimulatedGpu>(*model_, workloads_.back()[0], clock_, stage);
    // Blocked (drawing p_blocking_w) until its first computation starts.
    gpu->set_busy(false);
    monitored.push_back(gpu.get());
    gpus_.push_back(std::move(gpu));
  }
  monitor_ =
      std::make_unique<measure::EnergyMonitor>(std::move(monitored), std::vector<device::Cpu*>{}, *clock_);
}

PipelineExecutor::PipelineExecutor(PipelineExecutor&&) noexcept = default;
PipelineExecutor::~PipelineExecutor() = default;

std::vector<SimulatedGpu*> PipelineExecutor::gpus() const {
  std::vector<SimulatedGpu*> gpus;
  for (const auto& gpu : gpus_) {
    gpus.push_back(gpu.get());
  }
  return gpus;
}

Result<void> PipelineExecutor::use_plan(const FrequencyPlan& plan) {
  if (plan_ && *plan_ == plan) {
    return {};
  }
  // Old controllers reset their clocks before the new plan locks any.
  controllers_.clear();
  plan_.reset();
  auto schedules = JOULE_TRY(stage_schedules(dag_, plan));
  for (size_t stage = 0; stage < gpus_.size(); ++stage) {
    // Simulated GPUs: no process-wide signal handlers for them.
    auto controller = FrequencyController::create(*gpus_[stage], std::move((schedules)[stage]),
                                                  /*restore_on_signals=*/false);
    if (!controller) {
      controllers_.clear();
      return tl::make_unexpected(controller.error());
    }
    controllers_.push_back(std::move(*controller));
  }
  plan_ = plan;
  return {};
}

Result<IterationMeasurement> PipelineExecutor::run_iteration(const FrequencyPlan& plan) {
  auto predicted = JOULE_TRY(evaluate(dag_, profile_, plan, p_blocking_w_));
  JOULE_TRY(use_plan(plan));

  const size_t node_count = dag_.computations.size();
  const size_t stage_count = gpus_.size();
  IterationMeasurement result;
  result.predicted = predicted;

  // The model's per-stage energy: what the stage computes plus blocking for the rest of the iteration.
  for (size_t stage = 0; stage < stage_count; ++stage) {
    double energy_j = 0;
    double busy_s = 0;
    for (const int node : dag_.stage_order[stage]) {
      const auto id = static_cast<size_t>(node);
      auto option = JOULE_TRY(option_at(profile_, dag_.computations[id], plan[id]));
      energy_j += option.energy_j;
      busy_s += option.time_s;
    }
    result.predicted_stage_energy_j.push_back(energy_j + p_blocking_w_ * (predicted.time_s - busy_s));
  }

  std::vector<int> unfinished_dependencies(node_count, 0);
  std::vector<std::vector<int>> successors(node_count);
  for (const auto& [from, to] : dag_.edges) {
    ++unfinished_dependencies[static_cast<size_t>(to)];
    successors[static_cast<size_t>(from)].push_back(to);
  }

  std::vector<double> exact_before_mj;
  std::vector<size_t> locks_before;
  for (size_t stage = 0; stage < stage_count; ++stage) {
    exact_before_mj.push_back(gpus_[stage]->exact_energy_mj());
    locks_before.push_back(controllers_[stage].lock_count());
  }

  const Nanos origin = clock_->now();
  // Event times are kept exact in seconds from the origin (the same sums evaluate() forms) and the clock is
  // moved to each one rounded to the nanosecond, so rounding never accumulates.
  auto advance_to = [&](double time_s) {
    const Nanos target = origin + from_seconds(time_s);
    if (const Nanos now = clock_->now(); target > now) {
      clock_->advance(target - now);
    }
  };
  auto clock_s = [&] { return to_seconds(clock_->now() - origin); };

  result.timeline.start_s.assign(node_count, 0);
  result.timeline.end_s.assign(node_count, 0);
  std::vector<size_t> next(stage_count, 0);   // position in the stage's order
  std::vector<int> running(stage_count, -1);  // node computing on the stage, or -1
  std::vector<double> finish_s(stage_count, 0);
  double now_s = 0;

  // Leaves the GPUs blocked and the controllers rewound, so a failed iteration does not poison the next.
  auto abandon = [&](Error error) -> Result<IterationMeasurement> {
    monitor_->cancel_window(kWindow);
    for (size_t stage = 0; stage < stage_count; ++stage) {
      gpus_[stage]->set_busy(false);
      (void)controllers_[stage].end_iteration();
    }
    return tl::make_unexpected(std::move(error));
  };

  // Starts every ready computation on a free stage at now_s.
  auto start_ready = [&]() -> Result<void> {
    for (size_t stage = 0; stage < stage_count; ++stage) {
      const std::vector<int>& order = dag_.stage_order[stage];
      if (running[stage] >= 0 || next[stage] >= order.size()) {
        continue;
      }
      const int node = order[next[stage]];
      const auto id = static_cast<size_t>(node);
      if (unfinished_dependencies[id] > 0) {
        continue;
      }
      const Computation& computation = dag_.computations[id];
      if (auto begun = controllers_[stage].begin(computation.instruction, computation.microbatch); !begun) {
        return begun;
      }
      SimulatedGpu& gpu = *gpus_[stage];
      gpu.set_workload(workloads_[stage][index_of(computation.instruction)]);
      gpu.set_busy(true);
      // The duration is what the device does at the clock it is actually locked to, not the plan's value.
      finish_s[stage] = now_s + gpu.operating_point().iteration_time_s;
      running[stage] = node;
      ++next[stage];
      result.timeline.start_s[id] = clock_s();
    }
    return {};
  };

  monitor_->begin_window(kWindow, /*sync=*/false);
  if (auto started = start_ready(); !started) {
    return abandon(started.error());
  }
  for (size_t finished = 0; finished < node_count;) {
    double earliest_s = std::numeric_limits<double>::infinity();
    for (size_t stage = 0; stage < stage_count; ++stage) {
      if (running[stage] >= 0) {
        earliest_s = std::min(earliest_s, finish_s[stage]);
      }
    }
    if (!std::isfinite(earliest_s)) {
      return abandon(
          Error(ErrorCode::kInvalidArgument,
                fmt::format("the pipeline cannot run to its end: {} of {} computations never became "
                            "ready (a dependency cycle, or a stage order against the edges)",
                            node_count - finished, node_count)));
    }
    now_s = earliest_s;
    advance_to(now_s);
    for (size_t stage = 0; stage < stage_count; ++stage) {
      if (running[stage] < 0 || finish_s[stage] != now_s) {
        continue;
      }
      const auto id = static_cast<size_t>(running[stage]);
      result.timeline.end_s[id] = clock_s();
      for (const int successor : successors[id]) {
        --unfinished_dependencies[static_cast<size_t>(successor)];
      }
      running[stage] = -1;
      ++finished;
      // Blocked until its next computation can start (possibly right now, then this lasts 0 ns).
      gpus_[stage]->set_busy(false);
    }
    if (auto started = start_ready(); !started) {
      return abandon(started.error());
    }
  }
  const measure::Measurement measurement = monitor_->end_window(kWindow, /*sync=*/false);
  result.timeline.time_s = measurement.time_s;

  for (size_t stage = 0; stage < stage_count; ++stage) {
    if (auto ended = controllers_[stage].end_iteration(); !ended) {
      return tl::make_unexpected(
          ended.error().with_context("internal error: the executor skipped computations"));
    }
    result.stage_energy_j.push_back(measurement.gpu_energy[stage].energy_j);
    result.stage_exact_energy_j.push_back(mj_to_j(gpus_[stage]->exact_energy_mj() - exact_before_mj[stage]));
    result.clock_locks.push_back(controllers_[stage].lock_count() - locks_before[stage]);
  }
  result.time_s = measurement.time_s;
  result.energy_j = measurement.total_gpu_energy_j();
  return result;
}

Result<IterationMeasurement> run_iteration(const PipelineDag& dag, const Profile& profile,
                                           const FrequencyPlan& plan, double p_blocking_w) {
  auto executor = JOULE_TRY(PipelineExecutor::create(dag, profile, p_blocking_w));
  return executor.run_iteration(plan);
}

}  // namespace joule::plan
