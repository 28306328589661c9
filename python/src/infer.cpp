// SPDX-License-Identifier: Apache-2.0
// LLM inference serving from Python: joule.RequestEnergyLedger (each iteration's energy split among its
// requests), joule.LlmDevice (a model replica on simulated serving GPUs, usable with Monitor and
// SettingsGuard), the built-in serving GPU and model specs and joule.InferenceMetrics (the replica's
// Prometheus metrics); joule.SloClockController is in slo_controller.cpp. Device calls and rendering run
// without the GIL.
#include <cmath>
#include <deque>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/core/validate.hpp"
#include "joule/device/sim_gpu.hpp"
#include "joule/measure/json_forms.hpp"
#include "joule/measure/request_energy.hpp"
#include "joule/metrics/inference_metrics.hpp"
#include "joule/metrics/registry.hpp"
#include "joule/sim/json_forms.hpp"
#include "joule/sim/llm.hpp"
#include "joule/sim/llm_replica.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Exception(ErrorCode::kInvalidArgument, message);
}

py::object optional_float(const std::optional<double>& value) {
  return value ? py::cast(*value) : py::none();
}

// ---- RequestEnergyLedger ---------------------------------------------------------------------------------

// One field of a work item, converted with a message naming the item and the field.
template <class T>
T work_field(const py::handle& value, size_t item, const char* field, const char* expected) {
  // bool is an int in Python: refuse it for counts, and refuse non-bools for first_token.
  const bool is_bool = PyBool_Check(value.ptr()) != 0;
  if constexpr (std::is_same_v<T, bool>) {
    if (!is_bool) {
      invalid(fmt::format("work[{}].{} must be {}, got {}", item, field, expected,
                          py::str(py::repr(value)).cast<std::string>()));
    }
    return value.cast<bool>();
  } else {
    if (!is_bool) {
      try {
        if constexpr (std::is_same_v<T, std::string>) {
          if (py::isinstance<py::str>(value)) {
            return value.cast<std::string>();
          }
        } else if constexpr (std::is_same_v<T, double>) {
          if (py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) {
            return value.cast<double>();
          }
        } else {
          if (py::isinstance<py::int_>(value)) {
            return value.cast<T>();
          }
        }
      } catch (const py::cast_error&) {
        // falls through to the message below (e.g. an int beyond 64 bits)
      }
    }
    invalid(fmt::format("work[{}].{} must be {}, got {}", item, field, expected,
                        py::str(py::repr(value)).cast<std::string>()));
  }
}

constexpr const char* kWorkShape =
    "a dict or a tuple (request_id, prefill_tokens, decode_tokens, first_token[, work])";

// One work item as the ledger takes it; its request id lives in `ids` (stable addresses).
measure::IterationWork work_item(const py::handle& entry, size_t item, std::deque<std::string>& ids) {
  measure::IterationWork parsed;
  const auto request_id = [&](const py::handle& value) {
    ids.push_back(work_field<std::string>(value, item, "request_id", "a string"));
    parsed.request_id = ids.back();
  };
  if (py::isinstance<py::dict>(entry)) {
    const auto dict = py::reinterpret_borrow<py::dict>(entry);
    for (const auto& [key, value] : dict) {
      const std::string name = py::str(key).cast<std::string>();
      if (name == "request_id") {
        request_id(value);
      } else if (name == "prefill_tokens") {
        parsed.prefill_tokens = work_field<int64_t>(value, item, "prefill_tokens", "an integer");
      } else if (name == "decode_tokens") {
        parsed.decode_tokens = work_field<int64_t>(value, item, "decode_tokens", "an integer");
      } else if (name == "first_token") {
        parsed.first_token = work_field<bool>(value, item, "first_token", "True or False");
      } else if (name == "work") {
        parsed.work = work_field<double>(value, item, "work", "a number");
      } else {
        invalid(
            fmt::format("work[{}] has an unknown key '{}' (known: request_id, prefill_tokens, "
                        "decode_tokens, first_token, work)",
                        item, name));
      }
    }
    if (!dict.contains("request_id")) {
      invalid(fmt::format("work[{}] lacks 'request_id'", item));
    }
    return parsed;
  }
  if (!py::isinstance<py::tuple>(entry) && !py::isinstance<py::list>(entry)) {
    invalid(fmt::format("work[{}] must be {}, got {}", item, kWorkShape,
                        py::str(py::repr(entry)).cast<std::string>()));
  }
  const auto sequence = py::reinterpret_borrow<py::sequence>(entry);
  if (sequence.size() != 4 && sequence.size() != 5) {
    invalid(fmt::format("work[{}] has {} fields; it must be {}", item, sequence.size(), kWorkShape));
  }
  request_id(sequence[0]);
  parsed.prefill_tokens = work_field<int64_t>(sequence[1], item, "prefill_tokens", "an integer");
  parsed.decode_tokens = work_field<int64_t>(sequence[2], item, "decode_tokens", "an integer");
  parsed.first_token = work_field<bool>(sequence[3], item, "first_token", "True or False");
  if (sequence.size() == 5) {
    parsed.work = work_field<double>(sequence[4], item, "work", "a number");
  }
  return parsed;
}

void record_iteration(measure::RequestEnergyLedger& ledger, double start_s, double end_s, double energy_j,
                      const py::iterable& work) {
  std::deque<std::string> ids;
  std::vector<measure::IterationWork> items;
  for (const auto& entry : work) {
    items.push_back(work_item(entry, items.size(), ids));
  }
  value_or_throw(ledger.record_iteration(start_s, end_s, energy_j, items));
}

// ---- LlmDevice
// ----------------------------------------------------------------------------------------------

// joule._joule.LlmDevice: the replica and the DeviceSet of its GPUs (on its virtual clock).
using SharedLlmReplica = std::shared_ptr<sim::LlmReplica>;

SharedLlmReplica make_llm_device(const std::string& gpu, const std::string& model,
                                 std::optional<int> tensor_parallel, int index_base) {
  const sim::LlmGpuSpec gpu_spec =
      naming_call("LlmDevice(gpu=...)", [&] { return value_or_throw(sim::load_llm_gpu(gpu)); });
  const sim::LlmModelSpec model_spec =
      naming_call("LlmDevice(model=...)", [&] { return value_or_throw(sim::load_llm_model(model)); });
  const int tp = tensor_parallel.value_or(model_spec.default_tensor_parallel);
  if (index_base < 0) {
    invalid(fmt::format("LlmDevice(index_base=...) must be ≥ 0, got {}", index_base));
  }
  auto device = naming_call("LlmDevice(tensor_parallel=...)", [&] {
    return std::make_shared<sim::LlmDevice>(gpu_spec, model_spec, tp, index_base);
  });
  return std::make_shared<sim::LlmReplica>(sim::make_llm_replica(std::move(device)));
}

// ---- InferenceMetrics
// --------------------------------------------------------------------------------------

// joule.InferenceMetrics: the metrics and the registry they live in (declared first: destroyed last).
struct InferenceMetricsHandle {
  explicit InferenceMetricsHandle(metrics::InferenceMetricsOptions options)
      : gpu(options.gpu), metrics(registry.registry(), std::move(options)) {}

  std::string gpu;
  metrics::MetricsRegistry registry;
  metrics::InferenceMetrics metrics;
};

std::unique_ptr<InferenceMetricsHandle> make_inference_metrics(
    std::string gpu, std::optional<std::vector<double>> request_energy_buckets_j,
    std::optional<std::vector<double>> token_energy_buckets_j,
    std::optional<std::vector<double>> ttft_buckets_s, std::optional<std::vector<double>> tpot_buckets_s) {
  metrics::InferenceMetricsOptions options;
  options.gpu = std::move(gpu);
  // None keeps the library's default buckets.
  options.request_energy_buckets_j = request_energy_buckets_j.value_or(options.request_energy_buckets_j);
  options.token_energy_buckets_j = token_energy_buckets_j.value_or(options.token_energy_buckets_j);
  options.ttft_buckets_s = ttft_buckets_s.value_or(options.ttft_buckets_s);
  options.tpot_buckets_s = tpot_buckets_s.value_or(options.tpot_buckets_s);
  return std::make_unique<InferenceMetricsHandle>(std::move(options));
}

void bind_request_energy(py::module_& module) {
  py::class_<measure::RequestEnergy>(
      module, "RequestEnergy",
      "One request's energy and latency from a RequestEnergyLedger. Times in s on the caller's clock, "
      "energies in J.")
      .def_readonly("request_id", &measure::RequestEnergy::request_id)
      .def_readonly("arrival_s", &measure::RequestEnergy::arrival_s)
      .def_property_readonly(
          "first_token_s",
          [](const measure::RequestEnergy& request) {
            return request.first_token_s < 0 ? py::none() : py::cast(request.first_token_s);
          },
          "End of the iteration that emitted the first output token; None if none came.")
      .def_readonly("finish_s", &measure::RequestEnergy::finish_s,
                    "End of its last iteration (its arrival if it never ran).")
      .def_readonly("prompt_tokens", &measure::RequestEnergy::prompt_tokens, "Prefill tokens processed.")
      .def_readonly("output_tokens", &measure::RequestEnergy::output_tokens, "First token + decoded tokens.")
      .def_readonly("energy_j", &measure::RequestEnergy::energy_j, "prefill_energy_j + decode_energy_j.")
      .def_readonly("prefill_energy_j", &measure::RequestEnergy::prefill_energy_j)
      .def_readonly("decode_energy_j", &measure::RequestEnergy::decode_energy_j)
      .def_property_readonly("energy_per_output_token_j", &measure::RequestEnergy::energy_per_output_token_j,
                             "energy_j / output_tokens (0 without output).")
      .def_property_readonly(
          "ttft_s", [](const measure::RequestEnergy& request) { return optional_float(request.ttft_s()); },
          "Time to first token, s; None if no token came.")
      .def_property_readonly(
          "tpot_s", [](const measure::RequestEnergy& request) { return optional_float(request.tpot_s()); },
          "Time per output token after the first, s; None with fewer than 2 output tokens.")
      .def(
          "to_dict",
          [](const measure::RequestEnergy& request) { return to_python(measure::to_json(request)); },
          "Every field (and ttft_s, tpot_s, energy_per_output_token_j).")
      .def("__repr__", [](const measure::RequestEnergy& request) {
        return fmt::format("<joule.RequestEnergy {} energy={:.6g} J prompt={} output={}>", request.request_id,
                           request.energy_j, request.prompt_tokens, request.output_tokens);
      });
}

void bind_request_energy_ledger(py::module_& module) {
  py::class_<measure::RequestEnergyLedger>(
      module, "RequestEnergyLedger",
      "Splits each serving iteration's measured energy among the requests it worked on and keeps per-request "
      "energy and latency until finish_request(). rule: 'tokens' (each prefill and decoded token counts "
      "one), 'work' (in proportion to each item's work, split between prefill and decode by tokens) or "
      "'equal'. One serving loop owns it.")
      .def(py::init([](const std::string& rule) {
             return std::make_unique<measure::RequestEnergyLedger>(
                 value_or_throw(measure::parse_attribution_rule(rule)));
           }),
           py::arg("rule") = "tokens")
      .def_property_readonly(
          "rule",
          [](const measure::RequestEnergyLedger& ledger) { return std::string(to_string(ledger.rule())); })
      .def(
          "add_request",
          [](measure::RequestEnergyLedger& ledger, const std::string& request_id, double arrival_s) {
            value_or_throw(ledger.add_request(request_id, arrival_s));
          },
          py::arg("request_id"), py::arg("arrival_s"),
          "Starts tracking a request. InvalidArgumentError for an empty id or a non-finite arrival; "
          "StateError if the id is tracked already.")
      .def("record_iteration", &record_iteration, py::arg("start_s"), py::arg("end_s"), py::arg("energy_j"),
           py::arg("work"),
           "Records one iteration [start_s, end_s] and its measured energy, J, split among `work`: dicts "
           "{request_id, prefill_tokens, decode_tokens, first_token, work} or tuples (request_id, "
           "prefill_tokens, decode_tokens, first_token[, work]). With no work the energy is idle. Nothing is "
           "recorded on an error (InvalidArgumentError, NotFoundError for a request not added).")
      .def(
          "record_idle",
          [](measure::RequestEnergyLedger& ledger, double energy_j) {
            value_or_throw(ledger.record_idle(energy_j));
          },
          py::arg("energy_j"), "Energy spent with no request in flight, J.")
      .def(
          "finish_request",
          [](measure::RequestEnergyLedger& ledger, const std::string& request_id) {
            return value_or_throw(ledger.finish_request(request_id));
          },
          py::arg("request_id"),
          "Stops tracking a request; returns its RequestEnergy. NotFoundError if unknown.")
      .def(
          "find",
          [](const measure::RequestEnergyLedger& ledger, const std::string& request_id) -> py::object {
            const measure::RequestEnergy* found = ledger.find(request_id);
            return found == nullptr ? py::none() : py::cast(*found);
          },
          py::arg("request_id"), "A tracked request's figures so far (a copy), or None.")
      .def_property_readonly("active_requests", &measure::RequestEnergyLedger::active_requests,
                             "How many requests are tracked.")
      .def_property_readonly(
          "totals",
          [](const measure::RequestEnergyLedger& ledger) {
            return to_python(measure::to_json(ledger.totals()));
          },
          "{energy_j, attributed_energy_j, idle_energy_j, iterations, prefill_tokens, decode_tokens}.")
      .def("__repr__", [](const measure::RequestEnergyLedger& ledger) {
        return fmt::format("<joule.RequestEnergyLedger rule={} active={} energy={:.6g} J>",
                           to_string(ledger.rule()), ledger.active_requests(), ledger.totals().energy_j);
      });
}

void bind_llm_specs(py::module_& module) {
  module.def(
      "llm_gpus", [] { return to_python_each(sim::llm_gpus()); },
      "The built-in serving GPUs (dicts with every LlmGpuSpec field).");
  module.def(
      "llm_models", [] { return to_python_each(sim::llm_models()); },
      "The built-in LLMs (dicts with every LlmModelSpec field).");
}

using LlmDeviceClass = py::class_<sim::LlmReplica, SharedLlmReplica>;

// What runs the replica: run_iteration, predict, idle_until, settings_log.
void bind_llm_device_iterations(LlmDeviceClass& device_class) {
  device_class
      .def(
          "run_iteration",
          [](const sim::LlmReplica& handle, const std::vector<int64_t>& decode_contexts,
             const std::vector<std::pair<int64_t, int64_t>>& prefill) {
            const sim::IterationBatch batch =
                value_or_throw(sim::make_iteration_batch(decode_contexts, prefill));
            sim::IterationCost cost;
            double start_s = 0;
            double end_s = 0;
            {
              py::gil_scoped_release release;
              start_s = handle.device->now_s();
              cost = handle.device->run_iteration(batch);
              end_s = handle.device->now_s();
            }
            if (batch.empty()) {
              cost = sim::IterationCost{.clock_mhz = cost.clock_mhz};  // nothing ran: no time, no energy
            }
            auto json = sim::to_json(cost, handle.device->cost_model().tensor_parallel());
            json["start_s"] = start_s;
            json["end_s"] = end_s;
            return to_python(json);
          },
          py::arg("decode_contexts") = std::vector<int64_t>{},
          py::arg("prefill") = std::vector<std::pair<int64_t, int64_t>>{},
          "Runs one iteration: one decode step for each context length in decode_contexts (tokens in the "
          "request's KV cache, ≥ 1) and a prompt chunk for each (tokens, context_before) in prefill. Returns "
          "{time_s, power_w (per GPU), energy_j (the replica), clock_mhz, compute_s, memory_s, comm_s, "
          "start_s, end_s}. An empty batch does nothing (time_s and energy_j 0).")
      .def(
          "predict",
          [](const sim::LlmReplica& handle, const std::vector<int64_t>& decode_contexts,
             const std::vector<std::pair<int64_t, int64_t>>& prefill, double clock_mhz) {
            value_or_throw(check_number(clock_mhz, quantity::frequency_mhz(), "clock_mhz"));
            const sim::IterationBatch batch =
                value_or_throw(sim::make_iteration_batch(decode_contexts, prefill));
            return to_python(sim::to_json(handle.device->cost_model().at_clock(batch, clock_mhz),
                                          handle.device->cost_model().tensor_parallel()));
          },
          py::arg("decode_contexts"), py::arg("prefill"), py::arg("clock_mhz"),
          "The serving model's figures for a batch at a clock, without running it (run_iteration's keys but "
          "start_s, end_s).")
      .def(
          "idle_until",
          [](const sim::LlmReplica& handle, double time_s) {
            value_or_throw(check_number(time_s, NumberRule::any_finite(), "time_s"));
            py::gil_scoped_release release;
            handle.device->idle_until(time_s);
          },
          py::arg("time_s"), "Idles until time_s (virtual, s); nothing if that is not later than now.")
      .def(
          "settings_log",
          [](const sim::LlmReplica& handle, int gpu) {
            const auto gpus = handle.device->gpus();
            if (gpu < 0 || static_cast<size_t>(gpu) >= gpus.size()) {
              throw Exception(ErrorCode::kNotFound,
                              fmt::format("the replica has no GPU {} (it has {})", gpu, gpus.size()));
            }
            return settings_log_list(*gpus[static_cast<size_t>(gpu)]);
          },
          py::arg("gpu") = 0,
          "Every setting made on GPU `gpu` of the replica: dicts time_s, setting ('sm_clocks_locked_mhz', "
          "'sm_clocks_reset', 'power_limit_mw'), value, value_min.")
      .def("__repr__", [](const sim::LlmReplica& handle) {
        const auto& cost = handle.device->cost_model();
        return fmt::format("<joule.LlmDevice {} × {} {} now={:.6f} s>", cost.tensor_parallel(),
                           cost.gpu().key, cost.model().key, handle.device->now_s());
      });
}

void bind_llm_device(py::module_& module) {
  LlmDeviceClass device_class(
      module, "LlmDevice",
      "One LLM replica (tensor_parallel simulated serving GPUs on one virtual clock): run_iteration() costs "
      "a "
      "continuous-batching iteration with the serving model at the SM clock (or power limit) set on GPU 0 "
      "and advances the clock; the GPUs' energy counters follow. gpu / model: a built-in key "
      "(joule.llm_gpus(), joule.llm_models()) or a .json spec file; tensor_parallel: GPUs per replica "
      "(default: the model's).");
  device_class
      .def(py::init(&make_llm_device), py::arg("gpu") = "h100", py::arg("model") = "llama-3-8b",
           py::arg("tensor_parallel") = py::none(), py::arg("index_base") = 0)
      .def_property_readonly(
          "gpus",
          [](const SharedLlmReplica& handle) {
            std::vector<GpuRef> gpus;
            for (const auto& gpu : handle->devices->gpus) {
              gpus.push_back({handle->devices, gpu.get()});
            }
            return gpus;
          },
          "The replica's GPUs as joule.Gpu objects (energy counters, clock locks, power limits): lock "
          "clocks on them through a SettingsGuard.")
      .def_property_readonly(
          "devices", [](const SharedLlmReplica& handle) { return handle->devices; },
          "The replica's GPUs as a DeviceSet on its virtual clock, for joule.Monitor(devices=...) and "
          "PowerSampler. Do not advance() it: time moves through run_iteration() and idle_until().")
      .def_property_readonly(
          "tensor_parallel",
          [](const sim::LlmReplica& handle) { return handle.device->cost_model().tensor_parallel(); })
      .def_property_readonly("gpu_spec",
                             [](const sim::LlmReplica& handle) {
                               return to_python(sim::to_json(handle.device->cost_model().gpu()));
                             })
      .def_property_readonly("model_spec",
                             [](const sim::LlmReplica& handle) {
                               return to_python(sim::to_json(handle.device->cost_model().model()));
                             })
      .def(
          "now_s", [](const sim::LlmReplica& handle) { return handle.device->now_s(); },
          "The replica's virtual time, s (starts at 0).")
      .def(
          "supported_clocks_mhz",
          [](const sim::LlmReplica& handle) { return handle.device->cost_model().supported_clocks_mhz(); },
          "The SM clocks of the GPU, MHz, highest first.")
      .def(
          "kv_cache_tokens",
          [](const sim::LlmReplica& handle, double kv_memory_share) {
            value_or_throw(check_number(
                kv_memory_share, NumberRule{.min = 0, .max = 1, .min_exclusive = true}, "kv_memory_share"));
            return handle.device->cost_model().kv_cache_tokens(kv_memory_share);
          },
          py::arg("kv_memory_share") = 0.9, "Tokens that fit the replica's KV cache.");
  bind_llm_device_iterations(device_class);
}
void bind_inference_metrics(py::module_& module) {
  using Metrics = InferenceMetricsHandle;
  py::class_<Metrics> inference_metrics(
      module, "InferenceMetrics",
      "Prometheus metrics of an LLM serving replica, in their own registry: per-request energy, energy per "
      "output token, TTFT/TPOT histograms, energy by phase (prefill, decode, idle), finished requests by "
      "SLO outcome, tokens, iterations, the queue, the SLO and the controller's clock — every series "
      "labelled `model` (keep models few) and `gpu` if given. Units are base units (J, s, Hz, W). Values "
      "that are negative or not finite are skipped, as the C++ class does. render() gives the text "
      "exposition (Content-Type: CONTENT_TYPE). Thread-safe. Buckets: strictly increasing upper bounds "
      "(+Inf is implicit); None keeps the defaults (docs/metrics.md).");
  inference_metrics.attr("CONTENT_TYPE") = metrics::kMetricsContentType;
  inference_metrics
      .def(py::init(&make_inference_metrics), py::arg("gpu") = "", py::kw_only(),
           py::arg("request_energy_buckets_j") = py::none(), py::arg("token_energy_buckets_j") = py::none(),
           py::arg("ttft_buckets_s") = py::none(), py::arg("tpot_buckets_s") = py::none())
      .def_readonly("gpu", &Metrics::gpu, "The `gpu` label on every series ('' for none).")
      .def(
          "observe_request",
          [](Metrics& handle, const std::string& model, const measure::RequestEnergy& request,
             std::optional<bool> slo_met) { handle.metrics.observe_request(model, request, slo_met); },
          py::arg("model"), py::arg("request"), py::arg("slo_met") = py::none(),
          "A finished request (RequestEnergyLedger.finish_request()): its energy, energy per output token, "
          "TTFT and TPOT (those it has), its prefill and decode energy, its tokens, and one request counted "
          "under slo='met', 'missed' or, with slo_met None, 'none'.")
      .def(
          "add_iterations",
          [](Metrics& handle, const std::string& model, int64_t iterations) {
            handle.metrics.add_iterations(model, iterations);
          },
          py::arg("model"), py::arg("iterations"), "Counts serving iterations (nothing for ≤ 0).")
      .def(
          "add_idle_energy",
          [](Metrics& handle, const std::string& model, double energy_j) {
            handle.metrics.add_idle_energy(model, energy_j);
          },
          py::arg("model"), py::arg("energy_j"), "Energy spent with no request in flight, J (phase='idle').")
      .def(
          "set_requests",
          [](Metrics& handle, const std::string& model, int64_t running, int64_t waiting) {
            handle.metrics.set_requests(model, running, waiting);
          },
          py::arg("model"), py::arg("running"), py::arg("waiting"),
          "The engine's queue now: requests being served and waiting to be admitted.")
      .def(
          "set_slo",
          [](Metrics& handle, const std::string& model, double ttft_s, double tpot_s) {
            handle.metrics.set_slo(model, ttft_s, tpot_s);
          },
          py::arg("model"), py::arg("ttft_s"), py::arg("tpot_s"), "The latency SLO in force, s.")
      .def(
          "set_slo_attainment",
          [](Metrics& handle, const std::string& model, double ratio) {
            handle.metrics.set_slo_attainment(model, ratio);
          },
          py::arg("model"), py::arg("ratio"),
          "The controller's window attainment in [0, 1] (skipped outside it).")
      .def(
          "set_slo_unattainable",
          [](Metrics& handle, const std::string& model, bool unattainable) {
            handle.metrics.set_slo_unattainable(model, unattainable);
          },
          py::arg("model"), py::arg("unattainable"), "Whether even the top clock misses the SLO.")
      .def(
          "set_sm_clock_mhz",
          [](Metrics& handle, const std::string& model, double clock_mhz) {
            handle.metrics.set_sm_clock_mhz(model, clock_mhz);
          },
          py::arg("model"), py::arg("clock_mhz"), "The SM clock chosen, MHz (exported in Hz).")
      .def(
          "set_power_limit_w",
          [](Metrics& handle, const std::string& model, double power_limit_w) {
            handle.metrics.set_power_limit_w(model, power_limit_w);
          },
          py::arg("model"), py::arg("power_limit_w"),
          "The power limit chosen where clocks cannot be locked, W.")
      .def(
          "render",
          [](const Metrics& handle) {
            std::string text;
            {
              py::gil_scoped_release release;
              text = handle.registry.render();
            }
            return text;
          },
          "The Prometheus text exposition (version 0.0.4) of every series.")
      .def("__repr__", [](const Metrics& handle) {
        return fmt::format("<joule.InferenceMetrics gpu='{}'>", handle.gpu);
      });
}

}  // namespace

void bind_infer(py::module_& module) {
  bind_request_energy(module);
  bind_request_energy_ledger(module);
  bind_llm_specs(module);
  bind_llm_device(module);
  bind_inference_metrics(module);
}

}  // namespace joule::python
