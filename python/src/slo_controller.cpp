// SPDX-License-Identifier: Apache-2.0
// joule.SloClockController from Python: the least-energy SM clock (or power limit) of a serving replica that
// meets its latency SLO (joule/optimize/inference_slo.hpp), fed by the serving loop's iterations, finished
// requests and idle stretches.
#include <string>
#include <vector>

#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/core/validate.hpp"
#include "joule/optimize/inference_slo.hpp"
#include "joule/optimize/json_forms.hpp"
#include "joule/probe/card.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

// ---- SloClockController
// ------------------------------------------------------------------------------------

optimize::IterationSample iteration_sample(double start_s, double end_s, double energy_j, optimize::Knob knob,
                                           int64_t decode_requests, int64_t prefill_tokens,
                                           int64_t waiting_requests, double oldest_waiting_s,
                                           int64_t pending_prompt_tokens = 0, double oldest_pending_s = 0) {
  const optimize::IterationSample sample{.start_s = start_s,
                                         .end_s = end_s,
                                         .energy_j = energy_j,
                                         .knob = knob,
                                         .decode_requests = decode_requests,
                                         .prefill_tokens = prefill_tokens,
                                         .waiting_requests = waiting_requests,
                                         .oldest_waiting_s = oldest_waiting_s,
                                         .pending_prompt_tokens = pending_prompt_tokens,
                                         .oldest_pending_s = oldest_pending_s};
  value_or_throw(optimize::validate(sample));
  return sample;
}

template <class T>
T dict_value(const py::dict& dict, const char* key, T fallback) {
  return dict.contains(key) ? dict[key].cast<T>() : fallback;
}

using SloControllerClass = py::class_<optimize::SloClockController>;

std::unique_ptr<optimize::SloClockController> make_slo_controller(
    double ttft_s, double tpot_s, std::optional<std::vector<uint32_t>> clocks_mhz, double attainment,
    double interval_s, double window_s, double margin, double min_margin, int min_samples, int max_step_down,
    size_t candidate_levels, std::optional<std::vector<uint32_t>> power_limits_w, int knob_gpus,
    double max_margin) {
  if (clocks_mhz.has_value() == power_limits_w.has_value()) {
    throw py::type_error(
        "SloClockController: give clocks_mhz (to turn the SM clock) or power_limits_w (to turn the power "
        "limit), exactly one");
  }
  const optimize::ServingSlo slo{.ttft_s = ttft_s, .tpot_s = tpot_s, .attainment = attainment};
  const optimize::SloControllerOptions options{.interval_s = interval_s,
                                               .window_s = window_s,
                                               .margin = margin,
                                               .min_margin = min_margin,
                                               .min_samples = min_samples,
                                               .max_step_down = max_step_down,
                                               .candidate_levels = candidate_levels,
                                               .knob_gpus = knob_gpus,
                                               .max_margin = max_margin};
  const optimize::KnobKind kind =
      clocks_mhz ? optimize::KnobKind::kSmClockMhz : optimize::KnobKind::kPowerLimitW;
  std::vector<uint32_t> values = clocks_mhz ? std::move(*clocks_mhz) : std::move(*power_limits_w);
  return naming_call("SloClockController", [&] {
    return std::make_unique<optimize::SloClockController>(slo, kind, std::move(values), options);
  });
}

// The controller's knob from on_iteration's clock_mhz / power_limit_w keywords: the one of its kind.
optimize::Knob knob_argument(const optimize::SloClockController& controller,
                             std::optional<uint32_t> clock_mhz, std::optional<uint32_t> power_limit_w,
                             const char* call) {
  const optimize::KnobKind kind = controller.knob_kind();
  const char* keyword = optimize::knob_json_key(kind);
  const std::optional<uint32_t> value = kind == optimize::KnobKind::kSmClockMhz ? clock_mhz : power_limit_w;
  const std::optional<uint32_t> other = kind == optimize::KnobKind::kSmClockMhz ? power_limit_w : clock_mhz;
  if (!value || other) {
    throw py::type_error(fmt::format("{}: this controller turns the {}: give {}= (and only it)", call,
                                     optimize::knob_noun(kind) == "clock" ? "SM clock" : "power limit",
                                     keyword));
  }
  return {kind, *value};
}

optimize::IterationSample seed_sample(const optimize::SloClockController& controller, const py::dict& sample,
                                      size_t index) {
  const char* knob_key = optimize::knob_json_key(controller.knob_kind());
  for (const char* key : {"start_s", "end_s", "energy_j", knob_key}) {
    if (!sample.contains(key)) {
      throw Exception(ErrorCode::kInvalidArgument, fmt::format("seed sample {} lacks '{}'", index, key));
    }
  }
  return iteration_sample(
      sample["start_s"].cast<double>(), sample["end_s"].cast<double>(), sample["energy_j"].cast<double>(),
      {controller.knob_kind(), sample[knob_key].cast<uint32_t>()},
      dict_value<int64_t>(sample, "decode_requests", 0), dict_value<int64_t>(sample, "prefill_tokens", 0),
      dict_value<int64_t>(sample, "waiting_requests", 0), dict_value<double>(sample, "oldest_waiting_s", 0.0),
      dict_value<int64_t>(sample, "pending_prompt_tokens", 0),
      dict_value<double>(sample, "oldest_pending_s", 0.0));
}

// What the serving loop reports: on_iteration, on_request_done, on_idle, seed.
void bind_slo_controller_inputs(SloControllerClass& controller_class) {
  controller_class
      .def(
          "on_iteration",
          [](optimize::SloClockController& controller, double start_s, double end_s, double energy_j,
             std::optional<uint32_t> clock_mhz, int64_t decode_requests, int64_t prefill_tokens,
             int64_t waiting_requests, double oldest_waiting_s, std::optional<uint32_t> power_limit_w,
             int64_t pending_prompt_tokens, double oldest_pending_s) {
            const optimize::Knob knob = knob_argument(controller, clock_mhz, power_limit_w, "on_iteration");
            controller.on_iteration(iteration_sample(start_s, end_s, energy_j, knob, decode_requests,
                                                     prefill_tokens, waiting_requests, oldest_waiting_s,
                                                     pending_prompt_tokens, oldest_pending_s));
          },
          py::kw_only(), py::arg("start_s"), py::arg("end_s"), py::arg("energy_j"),
          py::arg("clock_mhz") = py::none(), py::arg("decode_requests") = 0, py::arg("prefill_tokens") = 0,
          py::arg("waiting_requests") = 0, py::arg("oldest_waiting_s") = 0.0,
          py::arg("power_limit_w") = py::none(), py::arg("pending_prompt_tokens") = 0,
          py::arg("oldest_pending_s") = 0.0,
          "One measured iteration: its times, energy (J, the whole replica), the knob it ran at (clock_mhz, "
          "or power_limit_w for a controller of power limits), requests that decoded, prompt tokens "
          "processed, requests still queued after it and how long the oldest has waited, s; the prompt "
          "tokens not yet prefilled of every request without its first token, and how long the oldest of "
          "those has waited, s (0 if unknown).")
      .def(
          "on_request_done",
          [](optimize::SloClockController& controller, double finish_s, double ttft_s,
             std::optional<double> tpot_s, int64_t prompt_tokens) {
            const optimize::RequestSample sample{
                .finish_s = finish_s, .ttft_s = ttft_s, .tpot_s = tpot_s, .prompt_tokens = prompt_tokens};
            value_or_throw(optimize::validate(sample));
            controller.on_request_done(sample);
          },
          py::arg("finish_s"), py::arg("ttft_s"), py::arg("tpot_s") = py::none(),
          py::arg("prompt_tokens") = 0,
          "A finished request's latency (tpot_s None for a single output token) and prompt length (0: "
          "unknown; lets the controller predict long prompts' TTFT).")
      .def(
          "on_idle",
          [](optimize::SloClockController& controller, double from_s, double to_s, double energy_j) {
            value_or_throw(check_number(from_s, NumberRule::any_finite(), "from_s"));
            value_or_throw(check_number(to_s, NumberRule{.min = from_s}, "to_s"));
            value_or_throw(check_number(energy_j, NumberRule::non_negative(), "energy_j"));
            controller.on_idle(from_s, to_s, energy_j);
          },
          py::arg("from_s"), py::arg("to_s"), py::arg("energy_j"),
          "The replica idled over [from_s, to_s] drawing energy_j (all its GPUs).")
      .def(
          "seed",
          [](optimize::SloClockController& controller, const std::vector<py::dict>& samples) {
            std::vector<optimize::IterationSample> parsed;
            parsed.reserve(samples.size());
            for (const auto& sample : samples) {
              parsed.push_back(seed_sample(controller, sample, parsed.size()));
            }
            controller.seed(parsed);
          },
          py::arg("samples"),
          "Seeds the per-level models with profiled iterations: dicts with on_iteration's keywords.");
}

// What the controller says: the SLO, its attainment, its models.
void bind_slo_controller_reports(SloControllerClass& controller_class) {
  controller_class
      .def_property_readonly(
          "slo_unattainable", &optimize::SloClockController::slo_unattainable,
          "True while even the highest knob value misses the SLO (it runs at the highest).")
      .def_property_readonly("window_attainment", &optimize::SloClockController::window_attainment,
                             "The window's share of requests meeting both SLOs (1 with none finished).")
      .def(
          "slo_met",
          [](const optimize::SloClockController& controller, double ttft_s, std::optional<double> tpot_s) {
            return controller.slo().met(ttft_s, tpot_s);
          },
          py::arg("ttft_s"), py::arg("tpot_s") = py::none(),
          "Whether a request with this TTFT and TPOT (None: one output token) met both SLOs, by the "
          "controller's own rule.")
      .def_property_readonly(
          "slo",
          [](const optimize::SloClockController& controller) {
            return to_python(optimize::to_json(controller.slo()));
          },
          "{ttft_s, tpot_s, attainment}.")
      .def(
          "start_from_card",
          [](optimize::SloClockController& controller, const std::string& path, const GpuRef& gpu) {
            probe::KnobPrior prior = value_or_throw(optimize::read_card_prior(
                path, probe::card_identity_of(gpu.gpu->info()), controller.knob_kind()));
            controller.start_from_card(std::move(prior));
          },
          py::arg("path"), py::arg("gpu"),
          "Starts from the frontier card at `path` (`joule probe`'s), read against `gpu`: levels never "
          "measured are predicted by the card, so the first decision may go straight to the level it "
          "predicts; dropped for good when a level reached on its word runs over 10% slower or hungrier "
          "(card_use says so). InvalidArgumentError for a card of another model or driver or without this "
          "knob's curves, ParseError for a newer schema.")
      .def_property_readonly(
          "card_use",
          [](const optimize::SloClockController& controller) {
            const optimize::CardUse use = controller.card_use();
            const char* state = use.state == optimize::CardUse::State::kActive    ? "active"
                                : use.state == optimize::CardUse::State::kDropped ? "dropped"
                                                                                  : "none";
            py::dict out;
            out["state"] = state;
            out["why"] = use.why;
            return out;
          },
          "{state: 'none' | 'active' | 'dropped', why}: whether a card is used, and why it was dropped.")
      .def(
          "models",
          [](const optimize::SloClockController& controller) { return to_python_each(controller.models()); },
          "Each candidate level's learned model for the current mean iteration, highest first: dicts "
          "clock_mhz (power_limit_w for a controller of power limits), samples, predicted_time_s, "
          "predicted_power_w (the replica, busy), measured.");
}

}  // namespace

void bind_slo_controller(py::module_& module) {
  SloControllerClass controller_class(
      module, "SloClockController",
      "The SM clock (or, given power_limits_w instead of clocks_mhz, the power limit) of a serving replica "
      "chosen online: least energy while the p-th percentile TTFT and TPOT meet their SLOs (attainment: the "
      "share of requests that must meet both). Call on_iteration() after every iteration, on_request_done() "
      "per finished request and on_idle() for idle stretches, on the clock the serving loop measures with; "
      "lock clock_mhz (set power_limit_w) before the next iteration.");
  controller_class
      .def(py::init(&make_slo_controller), py::arg("ttft_s"), py::arg("tpot_s"),
           py::arg("clocks_mhz") = py::none(), py::arg("attainment") = 0.99, py::arg("interval_s") = 1.0,
           py::arg("window_s") = 20.0, py::arg("margin") = 0.85, py::arg("min_margin") = 0.5,
           py::arg("min_samples") = 8, py::arg("max_step_down") = 4, py::arg("candidate_levels") = 24,
           py::arg("power_limits_w") = py::none(), py::arg("knob_gpus") = 1, py::arg("max_margin") = 2.0)
      .def_property_readonly("name", &optimize::SloClockController::name)
      .def_property_readonly(
          "knob",
          [](const optimize::SloClockController& controller) {
            return std::string(optimize::knob_field(controller.knob_kind()));
          },
          "What it turns: 'sm_clock_mhz' or 'power_limit_w'.")
      .def_property_readonly(
          "clock_mhz", &optimize::SloClockController::clock_mhz,
          "The clock the next iteration should run at, MHz (StateError for a controller of "
          "power limits).")
      .def_property_readonly("power_limit_w", &optimize::SloClockController::power_limit_w,
                             "The power limit the next iteration should run under, W (StateError for a "
                             "controller of clocks).")
      .def("__repr__", [](const optimize::SloClockController& controller) {
        const optimize::Knob knob = controller.knob();
        return fmt::format("<joule.SloClockController ttft={:g} s tpot={:g} s {}={} {}>",
                           controller.slo().ttft_s, controller.slo().tpot_s,
                           knob.kind == optimize::KnobKind::kSmClockMhz ? "clock" : "power_limit", knob.value,
                           optimize::knob_unit(knob.kind));
      });
  bind_slo_controller_inputs(controller_class);
  bind_slo_controller_reports(controller_class);
}

}  // namespace joule::python
