// SPDX-License-Identifier: Apache-2.0
// The pipeline (Perseus) runtime for Python, as conversions around joule::plan: PipelineStageDevice (one
// stage as a simulated GPU), SettingsGuard (plan::SharedSettingsGuard, the restore contract for settings made
// from Python), ClockApplier (plan::ClockApplier), StageFrequencyController (plan::FrequencyController in its
// asynchronous mode: what joule.PipelineFrequencyOptimizer drives), SteadyStateDetector
// (plan::WarmupDetector, the thermal wait of the warm-up) and the plan functions (plan/local_plan.hpp,
// plan/stage_round.hpp) that joule.PipelineFrequencyOptimizer (pipeline.py) checks its topology, reads its
// schedules and plans with when it has no server. Device calls run without the GIL.
#include "joule/plan/pipeline.hpp"

#include <cmath>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/core/duration.hpp"
#include "joule/core/validate.hpp"
#include "joule/device/settings_guard.hpp"
#include "joule/plan/card_profile.hpp"
#include "joule/plan/clock_applier.hpp"
#include "joule/plan/local_plan.hpp"
#include "joule/plan/planner.hpp"
#include "joule/plan/runtime.hpp"
#include "joule/plan/shared_guard.hpp"
#include "joule/plan/stage_device.hpp"
#include "joule/plan/stage_round.hpp"
#include "joule/plan/warmup_detector.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

using SharedStageDevice = std::shared_ptr<plan::StageDevice>;
using SharedGuard = std::shared_ptr<plan::SharedSettingsGuard>;

plan::Profile load_profile(const std::string& path_or_csv) {
  return value_or_throw(plan::load_profile(path_or_csv));
}

// An instruction given as an argument: a wrong name is an invalid argument, not unparsable input.
plan::Instruction instruction_named(const std::string& name) {
  Result<plan::Instruction> instruction = plan::parse_instruction(name);
  if (!instruction) {
    throw Exception(ErrorCode::kInvalidArgument, instruction.error().message());
  }
  return *instruction;
}

// A trampoline: a Clock whose now() is a Python time function (s), for GPUs whose time base only the caller
// knows (a simulated GPU on a virtual clock given to PipelineFrequencyOptimizer with its own time_fn). The
// warm-up detector only reads now(); the rest are the fixed answers of a clock that runs on its own (not
// virtual, no known Unix offset), so nothing here is worth a library class.
class PythonTimeClock final : public Clock {
 public:
  explicit PythonTimeClock(py::object time_fn)
      : time_fn_(new py::object(std::move(time_fn)), [](py::object* object) {
          py::gil_scoped_acquire gil;
          delete object;
        }) {}

  Nanos now() const override {
    py::gil_scoped_acquire gil;
    return seconds_to_nanos((*time_fn_)().cast<double>(), "time_fn()");
  }
  void sleep_for(Nanos duration) override { std::this_thread::sleep_for(duration); }
  bool is_virtual() const override { return false; }
  int64_t to_unix_ns(Nanos time) const override { return time.count(); }

 private:
  std::shared_ptr<py::object> time_fn_;
};

// A shared_ptr to `object` whose deletion (which may join a thread or restore a GPU) runs without the GIL,
// and which keeps `keep_alive` (whatever owns the GPUs it references) until then.
template <class T>
std::shared_ptr<T> released_on_delete(std::unique_ptr<T> object,
                                      std::shared_ptr<const void> keep_alive = {}) {
  return std::shared_ptr<T>(object.release(), [keep_alive = std::move(keep_alive)](T* doomed) {
    if (PyGILState_Check() == 0) {
      delete doomed;  // already without the GIL (one of these deleting another)
      return;
    }
    py::gil_scoped_release release;
    delete doomed;
  });
}

std::optional<Nanos> timeout_from(std::optional<double> timeout_s) {
  if (!timeout_s) {
    return std::nullopt;
  }
  return value_or_throw(joule::seconds_to_nanos(std::max(0.0, *timeout_s), "timeout_s"));
}

py::dict stats_dict(const plan::ClockApplierStats& stats) {
  py::dict dict;
  dict["requests"] = stats.requests;
  dict["locks"] = stats.locks;
  dict["lock_time_s"] = stats.lock_time_s;
  dict["mean_lock_time_s"] = stats.mean_lock_time_s();
  dict["max_lock_time_s"] = stats.max_lock_time_s;
  dict["applied_mhz"] = stats.applied_mhz ? py::cast(*stats.applied_mhz) : py::none();
  dict["requested_mhz"] = stats.requested_mhz ? py::cast(*stats.requested_mhz) : py::none();
  return dict;
}

// [(instruction name, MHz)] (the wire form) as a stage schedule.
plan::StageSchedule schedule_from_python(const std::vector<std::pair<std::string, uint32_t>>& entries) {
  std::vector<std::pair<plan::Instruction, uint32_t>> named;
  named.reserve(entries.size());
  for (const auto& [name, mhz] : entries) {
    named.emplace_back(instruction_named(name), mhz);
  }
  return plan::schedule_from_instructions(named);
}

device::SettingsGuardOptions guard_options(const std::string& owner, bool restore_on_signals,
                                           const std::string& power_limit_restore) {
  device::SettingsGuardOptions options;
  options.owner = owner;
  options.restore_on_signals = restore_on_signals;
  if (power_limit_restore == "recorded") {
    options.power_limit_restore = device::PowerLimitRestore::kRecorded;
  } else if (power_limit_restore == "default") {
    options.power_limit_restore = device::PowerLimitRestore::kDefault;
  } else {
    throw Exception(
        ErrorCode::kInvalidArgument,
        fmt::format("power_limit_restore must be 'recorded' or 'default' (got '{}')", power_limit_restore));
  }
  return options;
}

// ---- plans (plan::plan_locally, read_plan_file, evaluate_stage_schedules) as Python dicts

py::dict local_plan_dict(const plan::LocalPlan& local) {
  py::list stages;
  for (const auto& schedule : local.schedules) {
    py::list entries;
    for (const auto& planned : schedule) {
      entries.append(
          py::make_tuple(std::string(plan::to_string(planned.instruction)), planned.frequency_mhz));
    }
    stages.append(entries);
  }
  const auto optional = [](std::optional<double> value) { return value ? py::cast(*value) : py::none(); };
  py::dict predicted;
  predicted["iteration_time_s"] = local.iteration_time_s;
  predicted["iteration_energy_j"] = local.iteration_energy_j;
  predicted["max_clock_time_s"] = optional(local.max_clock_time_s);
  predicted["max_clock_energy_j"] = optional(local.max_clock_energy_j);
  py::dict dict;
  dict["stages"] = local.stages;
  dict["microbatches"] = local.microbatches;
  dict["schedule"] = local.schedule;
  dict["schedules"] = stages;
  dict["plan"] = local.plan;
  dict["predicted"] = predicted;
  dict["target_time_s"] = optional(local.target_time_s);
  if (!local.frontier.empty()) {  // planned here (a plan file has none)
    py::list points;
    for (const auto& [time_s, energy_j] : local.frontier) {
      points.append(py::make_tuple(time_s, energy_j));
    }
    dict["frontier"] = points;
  }
  return dict;
}

// A server-less stage runtime's plan (plan::plan_stages): a plan file's, or the profile's (with its
// frontier).
py::dict stage_plan(std::optional<std::string> profile, std::optional<std::string> plan_path,
                    std::optional<int> stages, std::optional<int> microbatches, const std::string& schedule,
                    double p_blocking_w, double unit_time_s, std::optional<double> target_time_s,
                    std::optional<double> slowdown) {
  plan::StagePlanRequest request{.profile = std::move(profile),
                                 .plan_path = std::move(plan_path),
                                 .stages = stages,
                                 .microbatches = microbatches,
                                 .schedule = schedule,
                                 .options = {},
                                 .target_time_s = target_time_s,
                                 .slowdown = slowdown};
  request.options.p_blocking_w = p_blocking_w;
  request.options.unit_time_s = unit_time_s;
  Result<plan::LocalPlan> planned = [&] {
    py::gil_scoped_release release;
    return plan::plan_stages(request);
  }();
  return local_plan_dict(value_or_throw(std::move(planned)));
}

// A plan file written by `joule plan --plan-out`, checked against its own DAG (and the profile, if given).
py::dict plan_from_file(const std::string& path, const std::optional<std::string>& profile_text,
                        std::optional<double> p_blocking_w) {
  const std::optional<plan::Profile> profile =
      profile_text ? std::optional(load_profile(*profile_text)) : std::nullopt;
  const plan::Profile* given = profile ? &*profile : nullptr;
  return local_plan_dict(value_or_throw(plan::read_plan_file(path, given, p_blocking_w)));
}

// The model's iteration time and energy for per-stage schedules (as the optimizer runs them), with each
// stage's computations stretched by its slowdown (a straggler): what a StageDevice pipeline measures.
py::dict evaluate_schedules(const std::string& profile_text, int microbatches,
                            const std::vector<std::vector<std::pair<std::string, uint32_t>>>& schedules,
                            double p_blocking_w, const std::optional<std::vector<double>>& slowdowns,
                            const std::string& schedule) {
  const plan::Profile profile = load_profile(profile_text);
  std::vector<plan::StageSchedule> stage_schedules;
  stage_schedules.reserve(schedules.size());
  for (const auto& entries : schedules) {
    stage_schedules.push_back(schedule_from_python(entries));
  }
  const plan::PlanCost cost = value_or_throw(plan::evaluate_stage_schedules(
      profile, microbatches, schedule, stage_schedules, p_blocking_w, slowdowns));
  py::dict dict;
  dict["time_s"] = cost.time_s;
  dict["energy_j"] = cost.energy_j;
  return dict;
}

}  // namespace

py::list settings_log_list(const device::sim::SimulatedGpu& gpu) {
  py::list records;
  for (const auto& record : gpu.settings_log()) {
    py::dict dict;
    dict["time_s"] = to_seconds(record.time);
    dict["setting"] = record.setting;
    dict["value"] = record.value;
    dict["value_min"] = record.value_min;
    records.append(dict);
  }
  return records;
}

namespace {

void bind_stage_device(py::module_& module) {
  py::class_<plan::StageDevice, SharedStageDevice>(
      module, "PipelineStageDevice",
      "One pipeline stage as a simulated GPU on its own virtual clock: forwards and backwards take the "
      "profile's time and energy at the SM clock locked on it (× slowdown); idle, it draws p_blocking_w. "
      "Times in s on its virtual clock, starting at 0.")
      .def(py::init([](const std::string& profile, int stage, double p_blocking_w, double slowdown) {
             return SharedStageDevice(value_or_throw(
                 plan::StageDevice::create(load_profile(profile), stage, p_blocking_w, slowdown)));
           }),
           py::arg("profile"), py::arg("stage"), py::arg("p_blocking_w") = 70.0, py::arg("slowdown") = 1.0,
           "profile: a profile CSV's path, or its text. InvalidArgumentError for a stage the profile lacks.")
      .def_property_readonly(
          "gpu",
          [](const SharedStageDevice& device) {
            return GpuRef{std::shared_ptr<const void>(device), &device->gpu()};
          },
          "The stage's GPU as a joule.Gpu (energy counter, supported clocks, clock locks, power).")
      .def(
          "run",
          [](plan::StageDevice& device, const std::string& name, double not_before_s) {
            const plan::Instruction instruction = instruction_named(name);
            Result<plan::StageRun> run = [&] {
              py::gil_scoped_release release;
              return device.run(instruction, not_before_s);
            }();
            const plan::StageRun done = value_or_throw(std::move(run));
            return py::make_tuple(done.start_s, done.end_s);
          },
          py::arg("name"), py::arg("not_before_s") = 0.0,
          "Runs 'forward' or 'backward': idles until not_before_s if later than now, computes at the locked "
          "clock, goes idle. Returns (start_s, end_s).")
      .def(
          "idle_until",
          [](plan::StageDevice& device, double time_s) { value_or_throw(device.idle_until(time_s)); },
          py::arg("time_s"), "Idles (blocking power) until time_s; nothing if that is not later than now.")
      .def("now_s", &plan::StageDevice::now_s, "The device's virtual time, s.")
      .def_property(
          "slowdown", &plan::StageDevice::slowdown,
          [](plan::StageDevice& device, double slowdown) { value_or_throw(device.set_slowdown(slowdown)); },
          "Every computation begun from now on takes slowdown × its profiled time at the same power.")
      .def_property_readonly("stage", &plan::StageDevice::stage)
      .def_property_readonly("p_blocking_w", &plan::StageDevice::p_blocking_w)
      .def(
          "set_thermal",
          [](plan::StageDevice& device, std::optional<double> temperature_c, bool leakage) {
            if (temperature_c && !std::isfinite(*temperature_c)) {
              throw Exception(ErrorCode::kInvalidArgument,
                              fmt::format("temperature_c must be a finite number, got {}", *temperature_c));
            }
            py::gil_scoped_release release;
            device.gpu().set_thermal({temperature_c, leakage});
          },
          py::arg("temperature_c") = py::none(), py::arg("leakage") = true,
          "Sets the GPU's thermal state now: its temperature, °C (None: the steady temperature of its "
          "load), and whether its power follows temperature (leakage: a cold GPU draws less). "
          "set_thermal(ambient_c) is a cold start; ambient_c is the model's.")
      .def_property_readonly(
          "ambient_c", [](const plan::StageDevice& device) { return device.model().ambient_c; },
          "The temperature of a cold GPU of this model, °C.")
      .def(
          "temperature_c",
          [](const plan::StageDevice& device) {
            Result<double> temperature = [&] {
              py::gil_scoped_release release;
              return device.gpu().temperature_c();
            }();
            return value_or_throw(std::move(temperature));
          },
          "The GPU's temperature now, °C (its thermal model).")
      .def(
          "settings_log", [](const plan::StageDevice& device) { return settings_log_list(device.gpu()); },
          "Every setting made on the GPU: dicts time_s, setting ('sm_clocks_locked_mhz', 'sm_clocks_reset', "
          "'power_limit_mw'), value, value_min.")
      .def("__repr__", [](const plan::StageDevice& device) {
        return fmt::format("<joule.PipelineStageDevice stage={} now={:.6f} s slowdown={:g}>", device.stage(),
                           device.now_s(), device.slowdown());
      });

  module.def(
      "_write_settings_log_at_exit",
      [](const SharedStageDevice& device, const std::string& path) {
        value_or_throw(plan::write_settings_log_at_exit(device, path));
      },
      py::arg("device"), py::arg("path"),
      "Test seam: at process exit (after the SettingsGuard exit hook if called before the first guard "
      "exists), write the device's settings log to `path`, one 'setting min max' per line.");
}

void bind_settings_guard(py::module_& module) {
  py::class_<plan::SharedSettingsGuard, SharedGuard>(
      module, "SettingsGuard",
      "The device layer's restore contract for settings made from Python: the first change of each control "
      "is recorded and set back on restore(), destruction, process exit and (restore_on_signals) "
      "SIGINT/SIGTERM/SIGHUP, exactly as joule's C++ controllers do. Thread-safe.")
      .def(py::init(
               [](const std::string& owner, bool restore_on_signals, const std::string& power_limit_restore) {
                 return released_on_delete(std::make_unique<plan::SharedSettingsGuard>(
                     guard_options(owner, restore_on_signals, power_limit_restore)));
               }),
           py::arg("owner") = "python", py::arg("restore_on_signals") = true,
           py::arg("power_limit_restore") = "recorded")
      .def(
          "lock_sm_clocks_mhz",
          [](plan::SharedSettingsGuard& guard, const GpuRef& gpu, uint32_t min_mhz, uint32_t max_mhz) {
            Result<void> result = [&] {
              py::gil_scoped_release release;
              return guard.lock_sm_clocks(gpu.owner, *gpu.gpu, min_mhz, max_mhz);
            }();
            value_or_throw(std::move(result));
          },
          py::arg("gpu"), py::arg("min_mhz"), py::arg("max_mhz"),
          "Locks the GPU's SM clock into [min_mhz, max_mhz]; no device call if this guard set this very lock "
          "last.")
      .def(
          "set_power_limit_w",
          [](plan::SharedSettingsGuard& guard, const GpuRef& gpu, double power_limit_w) {
            const uint32_t power_limit_mw =
                power_mw_from_python(power_limit_w, NumberRule{.min = 0, .max = 4e6}, "power_limit_w");
            Result<void> result = [&] {
              py::gil_scoped_release release;
              return guard.set_power_limit_mw(gpu.owner, *gpu.gpu, power_limit_mw);
            }();
            value_or_throw(std::move(result));
          },
          py::arg("gpu"), py::arg("power_limit_w"),
          "Sets the power limit, W, recording the one in force first.")
      .def(
          "restore",
          [](plan::SharedSettingsGuard& guard) {
            Result<void> result = [&] {
              py::gil_scoped_release release;
              return guard.guard().restore();
            }();
            value_or_throw(std::move(result));
          },
          "Restores every control this guard changed, now (the guard stays usable).")
      .def_property_readonly(
          "changed", [](plan::SharedSettingsGuard& guard) { return guard.guard().changed(); },
          "True if some control is changed and not restored yet.")
      .def(
          "consume_signal_restore",
          [](plan::SharedSettingsGuard& guard) { return guard.guard().consume_signal_restore(); },
          "True once after a signal restore set something back (set it again if the process lives on).")
      .def_static("signal_handler_installed", &device::SettingsGuard::signal_handler_installed,
                  py::arg("signal_number"), "True if a guard's handler is installed for the signal now.");
}

void bind_clock_applier(py::module_& module) {
  py::class_<plan::ClockApplier, std::shared_ptr<plan::ClockApplier>>(
      module, "ClockApplier",
      "Locks a GPU's SM clock through a SettingsGuard on a C++ thread (plan::ClockApplier): request() only "
      "posts the clock (the latest wins), wait() blocks until every request has landed.")
      .def(py::init([](const SharedGuard& guard, const GpuRef& gpu) {
             // The lock function holds the guard and the GPU's owner: both outlive the thread.
             auto lock = [guard, gpu](uint32_t mhz) {
               return guard->lock_sm_clocks(gpu.owner, *gpu.gpu, mhz, mhz);
             };
             return released_on_delete(
                 std::make_unique<plan::ClockApplier>(gpu.gpu->label(), std::move(lock)));
           }),
           py::arg("guard"), py::arg("gpu"))
      .def(
          "request",
          [](plan::ClockApplier& applier, uint32_t mhz, bool force) {
            value_or_throw(applier.request(mhz, force));
          },
          py::arg("mhz"), py::arg("force") = false,
          "Posts a clock lock, MHz (nothing if it is the clock last requested, unless force). Raises the "
          "error of a failed earlier lock, once.")
      .def(
          "wait",
          [](plan::ClockApplier& applier, std::optional<double> timeout_s) {
            const std::optional<Nanos> timeout = timeout_from(timeout_s);
            Result<bool> waited = [&] {
              py::gil_scoped_release release;
              return applier.wait(timeout);
            }();
            return value_or_throw(std::move(waited));
          },
          py::arg("timeout_s") = py::none(),
          "Waits until every request has been applied; False on timeout. Raises a failed lock's error.")
      .def("close", &plan::ClockApplier::close, py::call_guard<py::gil_scoped_release>(),
           "Stops the thread (pending requests are dropped). Idempotent.")
      .def(
          "stats", [](const plan::ClockApplier& applier) { return stats_dict(applier.stats()); },
          "requests, locks, lock_time_s, mean_lock_time_s, max_lock_time_s (device time of the locks), "
          "applied_mhz, requested_mhz.");
}

void bind_stage_controller(py::module_& module) {
  using plan::FrequencyController;
  py::class_<FrequencyController, std::shared_ptr<FrequencyController>>(
      module, "StageFrequencyController",
      "One pipeline stage's SM clock controller (plan::FrequencyController, asynchronous: a C++ thread locks "
      "the clocks). Checks every instruction against the schedule [(name, MHz)] and raises StateError naming "
      "what was expected and what was got; restores the clock on close(), destruction, exit and signals.")
      .def(
          py::init([](const GpuRef& gpu, const std::vector<std::pair<std::string, uint32_t>>& schedule,
                      const std::string& label, const std::string& end_call, bool restore_on_signals,
                      const std::string& owner) {
            plan::FrequencyControllerOptions options;
            options.restore_on_signals = restore_on_signals;
            options.asynchronous = true;
            options.label = label;
            options.end_call = end_call;
            options.owner = owner;
            plan::StageSchedule stage = schedule_from_python(schedule);
            Result<FrequencyController> created = [&] {
              py::gil_scoped_release release;
              return FrequencyController::create(*gpu.gpu, std::move(stage), std::move(options));
            }();
            return released_on_delete(
                std::make_unique<FrequencyController>(value_or_throw(std::move(created))), gpu.owner);
          }),
          py::arg("gpu"), py::arg("schedule"), py::arg("label") = "", py::arg("end_call") = "end_iteration()",
          py::arg("restore_on_signals") = true, py::arg("owner") = "frequency controller",
          "label names the controller in its errors (empty: the GPU's label); end_call is the call that ends "
          "an iteration, as the caller's users know it.")
      .def(
          "begin",
          [](FrequencyController& controller, const std::string& name) {
            value_or_throw(controller.begin(instruction_named(name)));
          },
          py::arg("name"), "Announces the next instruction and posts its clock (StateError if out of step).")
      .def(
          "prepare_next", [](FrequencyController& controller) { value_or_throw(controller.prepare_next()); },
          "Posts the next instruction's clock early (nothing once the iteration's last one has begun).")
      .def(
          "check_iteration_complete",
          [](const FrequencyController& controller) {
            value_or_throw(controller.check_iteration_complete());
          },
          "StateError if not every instruction of the iteration has begun; changes nothing.")
      .def(
          "end_iteration",
          [](FrequencyController& controller) { value_or_throw(controller.end_iteration()); },
          "Ends the iteration and rewinds the schedule (StateError if it was not used up; rewound anyway).")
      .def(
          "set_schedule",
          [](FrequencyController& controller, const std::vector<std::pair<std::string, uint32_t>>& schedule) {
            value_or_throw(controller.set_schedule(schedule_from_python(schedule)));
          },
          py::arg("schedule"), "Replaces the schedule (the next round) and rewinds it.")
      .def(
          "wait",
          [](FrequencyController& controller, std::optional<double> timeout_s) {
            const std::optional<Nanos> timeout = timeout_from(timeout_s);
            Result<bool> waited = [&] {
              py::gil_scoped_release release;
              return controller.wait_applied(timeout);
            }();
            return value_or_throw(std::move(waited));
          },
          py::arg("timeout_s") = py::none(),
          "Waits until every posted clock is locked; False on timeout. Raises a failed lock's error.")
      .def(
          "close",
          [](FrequencyController& controller) {
            Result<void> closed = [&] {
              py::gil_scoped_release release;
              return controller.close();
            }();
            value_or_throw(std::move(closed));
          },
          "Stops the thread and removes the clock lock. Idempotent.")
      .def_property_readonly("position", &FrequencyController::position,
                             "How many instructions of the iteration have begun.")
      .def(
          "stats", [](const FrequencyController& controller) { return stats_dict(controller.stats()); },
          "requests, locks, lock_time_s, mean_lock_time_s, max_lock_time_s, applied_mhz, requested_mhz.");
}

// The clock of a SteadyStateDetector made from one Gpu: the caller's time function, or the steady clock.
std::shared_ptr<Clock> clock_from_python(const py::object& time_fn) {
  if (time_fn.is_none()) {
    return std::make_shared<SteadyClock>();
  }
  if (PyCallable_Check(time_fn.ptr()) != 0) {
    return std::make_shared<PythonTimeClock>(time_fn);
  }
  throw Exception(ErrorCode::kInvalidArgument, "time_fn must be None or a callable returning seconds");
}

void bind_steady_state(py::module_& module) {
  using plan::WarmupDetector;
  // Every call releases the GIL before the detector's mutex (a PythonTimeClock takes the GIL back inside), so
  // two Python threads cannot deadlock on it.
  const auto release = py::call_guard<py::gil_scoped_release>();
  py::class_<WarmupDetector, std::shared_ptr<WarmupDetector>>(
      module, "SteadyStateDetector",
      "Decides when GPUs are thermally steady (plan::WarmupDetector): call sample() now and then "
      "(once per iteration); ready() says whether they may be measured. steady_state: None or 'auto' "
      "(steady on real GPUs, off on simulated ones), 'off', 'fixed', 'steady', or a dict with mode and "
      "window_s, temperature_band_c, power_band_ratio, max_wait_s, fixed_warmup_s.")
      .def(py::init([](const SharedDeviceSet& set, const std::optional<std::vector<int>>& gpu_indices,
                       const py::object& steady_state) {
             const measure::SteadyStateOptions options = steady_state_from_python(steady_state);
             std::vector<device::Gpu*> gpus = select_gpus(*set, gpu_indices);
             py::gil_scoped_release unlocked;
             return std::make_shared<WarmupDetector>(set, std::move(gpus), set->clock, options);
           }),
           py::arg("devices"), py::arg("gpu_indices") = py::none(), py::arg("steady_state") = py::none(),
           "The GPUs of a DeviceSet (all, or these framework indices) on the set's clock.")
      .def(py::init([](const SharedStageDevice& device, const py::object& steady_state) {
             const measure::SteadyStateOptions options = steady_state_from_python(steady_state);
             // The stage device owns its clock: alias it so that it lives as long as the device.
             std::shared_ptr<Clock> clock(device, &device->clock());
             py::gil_scoped_release unlocked;
             return std::make_shared<WarmupDetector>(device, std::vector<device::Gpu*>{&device->gpu()},
                                                     std::move(clock), options);
           }),
           py::arg("stage_device"), py::arg("steady_state") = py::none(),
           "A PipelineStageDevice's GPU on its virtual clock.")
      .def(py::init([](const GpuRef& gpu, const py::object& steady_state, const py::object& time_fn) {
             const measure::SteadyStateOptions options = steady_state_from_python(steady_state);
             std::shared_ptr<Clock> clock = clock_from_python(time_fn);
             py::gil_scoped_release unlocked;
             return std::make_shared<WarmupDetector>(gpu.owner, std::vector<device::Gpu*>{gpu.gpu},
                                                     std::move(clock), options);
           }),
           py::arg("gpu"), py::arg("steady_state") = py::none(), py::arg("time_fn") = py::none(),
           "One Gpu, timed by time_fn (seconds; None: the steady clock, which real GPUs run on).")
      .def("sample", &WarmupDetector::sample, release,
           "Reads every GPU's temperature and power now (failed reads are skipped).")
      .def("ready", &WarmupDetector::ready, release,
           "Whether the GPUs may be measured now: steady, waited long enough, or timed out.")
      .def("timed_out", &WarmupDetector::timed_out, release,
           "True if ready() only because max_wait_s passed without a steady state.")
      .def("restart", &WarmupDetector::restart, release,
           "Forgets the readings and starts waiting again (after a change of settings or load).")
      .def("waited_s", &WarmupDetector::waited_s, release,
           "Seconds since the detector was made or restarted.")
      .def("describe", &WarmupDetector::describe, release,
           "One line for logs: 'steady after 42.0 s (GPU 0: 71.2–71.9 °C, 210.1–212.0 W)' or why not yet.")
      .def_property_readonly(
          "mode",
          [](const WarmupDetector& detector) {
            const measure::SteadyStateMode mode = [&] {
              py::gil_scoped_release unlocked;
              return detector.mode();
            }();
            return std::string(measure::to_string(mode));
          },
          "'off', 'fixed' or 'steady' ('auto' resolved for these GPUs).");
}

void bind_plan_functions(py::module_& module) {
  module.def(
      "_pipeline_plan",
      [](const std::string& profile, int microbatches, std::optional<int> stages, const std::string& schedule,
         double p_blocking_w, double unit_time_s, std::optional<double> target_time_s,
         std::optional<double> slowdown) {
        return stage_plan(profile, std::nullopt, stages, microbatches, schedule, p_blocking_w, unit_time_s,
                          target_time_s, slowdown);
      },
      py::arg("profile"), py::arg("microbatches"), py::arg("stages") = py::none(),
      py::arg("schedule") = "1f1b", py::arg("p_blocking_w") = 70.0, py::arg("unit_time_s") = 1e-3,
      py::arg("target_time_s") = py::none(), py::arg("slowdown") = py::none(),
      "Plans a pipeline from a profile (path or CSV text): the fastest plan, or the cheapest for a "
      "target time (or slowdown × the fastest time). Returns stages, microbatches, schedule, "
      "schedules (per stage, [(instruction, MHz)] in execution order), plan, predicted "
      "{iteration_time_s, iteration_energy_j, max_clock_time_s, max_clock_energy_j}, target_time_s, "
      "frontier [(time_s, energy_j)].");
  module.def("_pipeline_plan_file", &plan_from_file, py::arg("path"), py::arg("profile") = py::none(),
             py::arg("p_blocking_w") = py::none(),
             "Reads a plan written by `joule plan --plan-out` (same keys as _pipeline_plan; the max-clock "
             "figures need the profile).");
  module.def("_pipeline_evaluate", &evaluate_schedules, py::arg("profile"), py::arg("microbatches"),
             py::arg("schedules"), py::arg("p_blocking_w") = 70.0, py::arg("slowdowns") = py::none(),
             py::arg("schedule") = "1f1b",
             "The model's {time_s, energy_j} of one iteration of per-stage schedules, each stage's "
             "computations stretched by its slowdown.");
  py::class_<plan::RoundRecorder>(module, "StageRoundRecorder",
                                  "One rank's measurements of a round (plan::RoundRecorder): times in s, "
                                  "energies in J.")
      .def(py::init<>())
      .def("begin_iteration", &plan::RoundRecorder::begin_iteration)
      .def("record", [](plan::RoundRecorder& recorder, const std::string& name, double time_s,
                        double energy_j) { recorder.record(instruction_named(name), time_s, energy_j); })
      .def("end_iteration", &plan::RoundRecorder::end_iteration)
      .def("take_result", [](plan::RoundRecorder& recorder, int64_t rank, std::optional<int64_t> round,
                             std::optional<bool> steady) {
        // The body is only ever sent as JSON: json.loads is the whole conversion.
        return py::module_::import("json").attr("loads")(recorder.take_result(rank, round, steady).dump());
      });
  module.def("_pipeline_stage_plan", &stage_plan,
             "A server-less stage runtime's plan (plan::plan_stages): a plan file's (plan_path), else the "
             "profile's for target_time_s or slowdown; the same keys as _pipeline_plan.");
  module.def(
      "_pipeline_read_card",
      [](const std::string& path, const GpuRef& gpu) {
        return probe::render_card(value_or_throw(plan::read_stage_card(path, *gpu.gpu)));
      },
      py::arg("path"), py::arg("gpu"),
      "The frontier card at `path` (JSON text) checked against `gpu` (plan::read_stage_card): "
      "InvalidArgumentError for a card of another model or driver, ParseError for a newer schema.");
  module.def(
      "_pipeline_check_topology",
      [](int64_t rank, int64_t dp_rank, int64_t pp_rank, int64_t tp_rank, int64_t dp_degree,
         int64_t pp_degree, int64_t tp_degree, int64_t world_size) {
        value_or_throw(plan::check_topology(
            {rank, dp_rank, pp_rank, tp_rank, dp_degree, pp_degree, tp_degree, world_size}));
      },
      "InvalidArgumentError unless the degrees are ≥ 1, multiply to world_size and every rank is in range.");
  module.def(
      "_pipeline_round_schedule",
      [](const std::string& text, int64_t rank, const std::string& source) {
        const plan::RoundSchedule schedule = value_or_throw(plan::RoundSchedule::parse(text, rank, source));
        py::list frequencies;
        for (const auto& [instruction, mhz] : schedule.frequencies) {
          frequencies.append(py::make_tuple(std::string(plan::to_string(instruction)), mhz));
        }
        return py::make_tuple(frequencies, schedule.round, schedule.phase, schedule.iterations,
                              !schedule.predicted.is_null());
      },
      py::arg("text"), py::arg("rank"), py::arg("source"),
      "Checks a GET /schedule body (JSON text): (frequencies, round, phase, iterations, has_predicted); "
      "InvalidArgumentError naming source, quoting the text, if it is malformed.");
}

}  // namespace

void bind_pipeline(py::module_& module) {
  bind_stage_device(module);
  bind_settings_guard(module);
  bind_clock_applier(module);
  bind_stage_controller(module);
  bind_steady_state(module);
  bind_plan_functions(module);
}

}  // namespace joule::python
