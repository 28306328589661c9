// SPDX-License-Identifier: Apache-2.0
// joule.simulate: Zeus's trace-driven simulator (as `joule simulate` runs it), returning plain Python data.
#include <cmath>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/core/validate.hpp"
#include "joule/sim/json_forms.hpp"
#include "joule/sim/simulator.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

// A Python object that may be copied and destroyed without the GIL (the simulator runs without it).
std::shared_ptr<py::object> hold(py::object object) {
  return std::shared_ptr<py::object>(new py::object(std::move(object)), [](py::object* held) {
    py::gil_scoped_acquire gil;
    delete held;
  });
}

// The policy's copy for a simulation: policy.clone() if it has one, else copy.deepcopy(policy).
py::object clone_object(const py::object& policy) {
  if (py::hasattr(policy, "clone")) {
    return policy.attr("clone")();
  }
  return py::module_::import("copy").attr("deepcopy")(policy);
}

std::string policy_name(const py::object& policy) {
  if (py::hasattr(policy, "name")) {
    py::object name = policy.attr("name");
    return py::str(PyCallable_Check(name.ptr()) ? name() : name);
  }
  return py::str(py::type::of(policy).attr("__name__"));
}

// A batch-size policy written in Python (duck-typed: predict(job) -> int, observe(job, batch_size, cost,
// reached), optionally register_job(job, batch_sizes), clone(), name). Every call takes the GIL.
class PythonBatchSizePolicy final : public sim::BatchSizePolicy {
 public:
  explicit PythonBatchSizePolicy(py::object policy) : policy_(hold(std::move(policy))) {}

  Result<void> register_job(const sim::Job& job, const std::vector<int>& batch_sizes) override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(*policy_, "register_job")) {
      policy_->attr("register_job")(to_python(sim::to_json(job)), batch_sizes);
    }
    return {};
  }
  Result<int> predict(const sim::Job& job) override {
    py::gil_scoped_acquire gil;
    return policy_->attr("predict")(to_python(sim::to_json(job))).cast<int>();
  }
  Result<void> observe(const sim::Job& job, int batch_size, double cost, bool reached) override {
    py::gil_scoped_acquire gil;
    policy_->attr("observe")(to_python(sim::to_json(job)), batch_size, cost, reached);
    return {};
  }
  std::unique_ptr<sim::BatchSizePolicy> clone() const override {
    py::gil_scoped_acquire gil;
    return std::make_unique<PythonBatchSizePolicy>(clone_object(*policy_));
  }
  std::string name() const override {
    py::gil_scoped_acquire gil;
    return policy_name(*policy_);
  }

 private:
  std::shared_ptr<py::object> policy_;
};

// A power-limit policy written in Python: predict(job, batch_size) -> float | None (None: profile every
// limit during the first epoch, reported through observe(job, batch_size, power_limit_w, cost)).
class PythonPowerLimitPolicy final : public sim::PowerLimitPolicy {
 public:
  explicit PythonPowerLimitPolicy(py::object policy) : policy_(hold(std::move(policy))) {}

  std::optional<double> predict(const sim::Job& job, int batch_size) override {
    py::gil_scoped_acquire gil;
    return policy_->attr("predict")(to_python(sim::to_json(job)), batch_size).cast<std::optional<double>>();
  }
  void observe(const sim::Job& job, int batch_size, double power_limit_w, double cost) override {
    py::gil_scoped_acquire gil;
    policy_->attr("observe")(to_python(sim::to_json(job)), batch_size, power_limit_w, cost);
  }
  std::unique_ptr<sim::PowerLimitPolicy> clone() const override {
    py::gil_scoped_acquire gil;
    return std::make_unique<PythonPowerLimitPolicy>(clone_object(*policy_));
  }
  std::string name() const override {
    py::gil_scoped_acquire gil;
    return policy_name(*policy_);
  }

 private:
  std::shared_ptr<py::object> policy_;
};

py::object simulate(const std::string& gpu, const std::string& workload, double eta, double beta,
                    uint64_t seed, std::optional<int> recurrences, std::optional<int> b0,
                    std::optional<double> target_metric, std::optional<int> max_epochs,
                    const std::optional<std::string>& trace_dir, int max_tries,
                    const py::object& batch_size_policy, const py::object& power_limit_policy) {
  // Duck-typed policies: say which argument lacks which method before a simulation calls it.
  const auto check_policy = [](const py::object& policy, const char* keyword, const char* methods) {
    if (policy.is_none()) {
      return;
    }
    for (const char* method : {"predict", "observe"}) {
      if (!py::hasattr(policy, method) || !PyCallable_Check(policy.attr(method).ptr())) {
        throw py::type_error(
            fmt::format("simulate({}=...): expected None or a policy with the methods {}, got {}", keyword,
                        methods, show_value(policy)));
      }
    }
  };
  check_policy(batch_size_policy, "batch_size_policy",
               "predict(job) -> batch size and observe(job, batch_size, cost_j, reached)");
  check_policy(power_limit_policy, "power_limit_policy",
               "predict(job, batch_size) -> W or None and observe(job, batch_size, power_limit_w, cost_j)");
  sim::SimulationOptions options;
  options.eta = eta;
  options.beta = beta;
  options.seed = seed;
  options.recurrences = recurrences;
  options.max_tries = max_tries;
  value_or_throw(sim::validate(options));
  std::unique_ptr<sim::BatchSizePolicy> batch_sizes;
  if (batch_size_policy.is_none()) {
    sim::PruningGtsPolicy::Options pruning;
    pruning.seed = seed;
    batch_sizes = std::make_unique<sim::PruningGtsPolicy>(pruning);
  } else {
    batch_sizes = std::make_unique<PythonBatchSizePolicy>(batch_size_policy);
  }
  std::unique_ptr<sim::PowerLimitPolicy> power_limits;
  if (power_limit_policy.is_none()) {
    power_limits = std::make_unique<sim::JitPowerLimitPolicy>();
  } else {
    power_limits = std::make_unique<PythonPowerLimitPolicy>(power_limit_policy);
  }
  std::string trace_gpu;
  sim::SimulationResult result;
  {
    py::gil_scoped_release release;
    const sim::Trace trace = value_or_throw(sim::gpu_trace(gpu, trace_dir));
    sim::Job job = value_or_throw(sim::paper_job(trace, workload));
    if (b0) {
      job.default_batch_size = *b0;
    }
    if (target_metric) {
      job.target_metric = *target_metric;
    }
    if (max_epochs) {
      value_or_throw(check_number(static_cast<double>(*max_epochs), NumberRule{.min = 1, .integer = true},
                                  "max_epochs"));
      job.max_epochs = *max_epochs;
    }
    trace_gpu = trace.gpu.empty() ? gpu : trace.gpu;
    const sim::Simulator simulator(trace, std::move(batch_sizes), std::move(power_limits), options);
    result = value_or_throw(simulator.simulate(job));
  }
  return to_python(sim::simulation_result_json(trace_gpu, result, options));
}

}  // namespace

void bind_simulate(py::module_& module) {
  module.def(
      "simulate", &simulate, py::arg("gpu"), py::arg("workload"), py::kw_only(), py::arg("eta") = 0.5,
      py::arg("beta") = 2.0, py::arg("seed") = 1, py::arg("recurrences") = py::none(),
      py::arg("b0") = py::none(), py::arg("target_metric") = py::none(), py::arg("max_epochs") = py::none(),
      py::arg("trace_dir") = py::none(), py::arg("max_tries") = 20, py::arg("batch_size_policy") = py::none(),
      py::arg("power_limit_policy") = py::none(),
      R"doc(Replays Zeus's batch-size and power-limit optimization over recurrences of a training job on the
NSDI'23 traces (what `joule simulate --gpu GPU --workload W` prints).

gpu: 'v100', 'a40', 'p100', 'rtx6000' (joule.trace_gpus()); workload: joule.paper_workloads().
eta: weight of energy in [0, 1]; beta: early-stop threshold > 1 (math.inf disables it); seed: random seed;
recurrences: default 2 × batch sizes × power limits; b0, target_metric, max_epochs: override the paper's job;
trace_dir: a directory with summary_train.csv and summary_power_<gpu>.csv instead of the built-in traces.
batch_size_policy / power_limit_policy: your own policies instead of Zeus's (pruning + Gaussian Thompson
sampling; JIT power limit), compared on the same traces. Duck-typed objects: a batch-size policy has
predict(job) -> int and observe(job, batch_size, cost_j, reached) (optionally register_job(job, batch_sizes));
a power-limit policy has predict(job, batch_size) -> W or None (None: every limit is profiled during the first
epoch and reported through observe(job, batch_size, power_limit_w, cost_j)). job is a dict (dataset, network,
optimizer, target_metric, max_epochs, default_batch_size). Each simulation runs on policy.clone() if defined,
else copy.deepcopy(policy).

Returns a dict: gpu, eta, beta, seed, job {dataset, network, optimizer, target_metric, max_epochs,
default_batch_size}, recurrences, max_power_w (W), tries [{recurrence, attempt, batch_size, power_limit_w,
energy_j, time_s, reached, cost}], optimizer {energy_j, time_s, cost} summed over tries, baseline and
oracle {batch_size, power_limit_w, energy_j, time_s, cost, reach_rate} per recurrence (oracle may be None),
configurations [same]. Energies in J, times in s, costs in J.)doc");
  module.def("trace_gpus", &sim::trace_gpus, "The GPUs with a built-in Zeus power trace.");
  module.def("paper_workloads", &sim::paper_workloads, "The workloads of the Zeus paper, in its order.");
}

}  // namespace joule::python
