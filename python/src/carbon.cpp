// SPDX-License-Identifier: Apache-2.0
// Carbon from Python: carbon-intensity signals and traces (joule/carbon/signal.hpp), the yearly average by
// country (country.hpp), carbon and price windows over a joule.Monitor (monitor.hpp, price.hpp), and Chase
// as a training-loop callback (joule/optimize/chase_optimizer.hpp). Thin: every decision is the library's.
// Calls that may talk HTTP or touch devices run without the GIL.
#include <fmt/format.h>
#include <pybind11/stl.h>

#include "joule/carbon/country.hpp"
#include "joule/carbon/json_forms.hpp"
#include "joule/carbon/monitor.hpp"
#include "joule/carbon/price.hpp"
#include "joule/carbon/signal.hpp"
#include "joule/core/validate.hpp"
#include "joule/device/json_forms.hpp"
#include "joule/optimize/chase_optimizer.hpp"
#include "joule/optimize/json_forms.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

/// joule.CarbonSignal: a signal and the clock (a DeviceSet's) it reads "now" from.
struct SignalHandle {
  SharedDeviceSet devices;  // keeps the clock alive; null on the steady clock
  std::unique_ptr<carbon::CarbonSignal> signal;
  carbon::CarbonSignal& get() const { return *signal; }
};

const Clock& clock_of(const SharedDeviceSet& devices) {
  return devices ? *devices->clock : static_cast<const Clock&>(SteadyClock::instance());
}

SharedDeviceSet optional_devices(const py::object& devices) {
  return devices.is_none() ? SharedDeviceSet{} : devices.cast<SharedDeviceSet>();
}

std::shared_ptr<SignalHandle> make_signal(std::optional<double> intensity, const std::string& trace_path,
                                          const std::optional<carbon::CarbonTrace>& trace,
                                          const std::string& zone, const std::string& provider,
                                          const std::string& country, const py::object& devices) {
  auto handle = std::make_shared<SignalHandle>();
  handle->devices = optional_devices(devices);
  const Clock& clock = clock_of(handle->devices);
  if (trace) {
    if (intensity || !trace_path.empty() || !zone.empty() || !country.empty()) {
      throw Exception(ErrorCode::kInvalidArgument,
                      "give exactly one carbon source: intensity, trace, zone or country");
    }
    handle->signal = std::make_unique<carbon::TraceSignal>(*trace, clock);
    return handle;
  }
  carbon::CarbonSourceOptions options;
  options.intensity_g_per_kwh = intensity;
  options.trace_path = trace_path;
  options.zone = zone;
  options.provider = provider;
  options.country = country;
  handle->signal = value_or_throw(carbon::make_carbon_signal(options, clock));
  return handle;
}

carbon::BucketedMonitorOptions bucket_options(int64_t bucket_s, bool background_checkpoints) {
  value_or_throw(check_number(static_cast<double>(bucket_s), NumberRule::positive_integer(), "bucket_s"));
  return {.bucket_s = bucket_s, .background_checkpoints = background_checkpoints};
}

struct CarbonMonitorHandle {
  std::shared_ptr<MonitorHandle> monitor;
  std::shared_ptr<SignalHandle> signal;
  std::unique_ptr<carbon::CarbonMonitor> carbon;  // declared last: destroyed first
  ~CarbonMonitorHandle() {
    py::gil_scoped_release release;
    carbon.reset();
  }
};

struct TariffHandle {
  carbon::HourlyTariff tariff;
};

struct PriceMonitorHandle {
  std::shared_ptr<MonitorHandle> monitor;
  std::shared_ptr<TariffHandle> tariff;
  std::unique_ptr<carbon::PriceMonitor> price;
  ~PriceMonitorHandle() {
    py::gil_scoped_release release;
    price.reset();
  }
};

struct ChaseHandle {
  std::shared_ptr<MonitorHandle> monitor;
  std::shared_ptr<SignalHandle> signal;
  py::object aggregator;
  std::unique_ptr<optimize::ChaseOptimizer> optimizer;  // destroyed first (declared last)

  ~ChaseHandle() {
    // Restores the limits (device calls): let other Python threads run meanwhile.
    py::gil_scoped_release release;
    optimizer.reset();
  }
  optimize::ChaseOptimizer& get() const {
    if (!optimizer) {
      throw Exception(ErrorCode::kState, "the ChaseOptimizer is closed");
    }
    return *optimizer;
  }
};

std::unique_ptr<ChaseHandle> make_chase(const std::shared_ptr<MonitorHandle>& monitor,
                                        const std::shared_ptr<SignalHandle>& signal,
                                        optimize::ChaseOptimizerOptions options, py::object aggregator) {
  if (!monitor || !signal) {
    throw Exception(ErrorCode::kInvalidArgument, "ChaseOptimizer needs a Monitor and a CarbonSignal");
  }
  // The profile picks with Chase's eta until the first decision.
  options.profile.policy = ZeusCost{options.chase.eta, 0};
  if (!aggregator.is_none()) {
    options.profile.aggregator = aggregator.cast<std::shared_ptr<optimize::RankAggregator>>();
  }
  auto handle = std::make_unique<ChaseHandle>();
  handle->monitor = monitor;
  handle->signal = signal;
  handle->aggregator = std::move(aggregator);
  py::gil_scoped_release release;
  handle->optimizer =
      std::make_unique<optimize::ChaseOptimizer>(*monitor->monitor, signal->get(), std::move(options));
  return handle;
}

template <void (optimize::ChaseOptimizer::*hook)()>
void call_chase_hook(ChaseHandle& self) {
  optimize::ChaseOptimizer& optimizer = self.get();
  py::gil_scoped_release release;
  (optimizer.*hook)();
}

void bind_carbon_trace(py::module_& module) {
  py::class_<carbon::CarbonTrace>(
      module, "CarbonTrace",
      "A carbon-intensity time series (CSV columns timestamp,carbon_intensity_g_per_kwh; UTC; regular).")
      .def_static(
          "read",
          [](const std::string& path) { return value_or_throw(carbon::CarbonTrace::read_file(path)); },
          py::arg("path"), "Reads a trace CSV. ParseError naming file:line:column for a bad row.")
      .def_static(
          "parse",
          [](const std::string& text, const std::string& source) {
            return value_or_throw(carbon::CarbonTrace::parse(text, source));
          },
          py::arg("text"), py::arg("source") = "<text>", "Parses trace CSV text.")
      .def_property_readonly("source", &carbon::CarbonTrace::source)
      .def_property_readonly("period_s", &carbon::CarbonTrace::period_s, "The period of one value, s.")
      .def_property_readonly("start_unix_s", &carbon::CarbonTrace::start_unix_s,
                             "The first period's start, UTC.")
      .def_property_readonly("end_unix_s", &carbon::CarbonTrace::end_unix_s, "The last period's end, UTC.")
      .def_property_readonly(
          "points",
          [](const carbon::CarbonTrace& trace) { return to_python(carbon::to_json(trace.points())); },
          "The values, oldest first: dicts time_unix_s, time, intensity_g_per_kwh, estimated.")
      .def(
          "at",
          [](const carbon::CarbonTrace& trace, int64_t time_unix_s) {
            return value_or_throw(trace.at(time_unix_s)).intensity_g_per_kwh;
          },
          py::arg("time_unix_s"), "The intensity in force at a UTC time, g/kWh; OutOfRangeError outside.")
      .def(
          "shifted",
          [](const carbon::CarbonTrace& trace, int64_t seconds) {
            return value_or_throw(trace.shifted(seconds));
          },
          py::arg("seconds"),
          "The same values `seconds` later (a whole number of days keeps the time of day): replays a past "
          "trace on a clock that starts now.")
      .def("to_csv", &carbon::CarbonTrace::to_csv)
      .def("__len__", [](const carbon::CarbonTrace& trace) { return trace.points().size(); })
      .def("__repr__", [](const carbon::CarbonTrace& trace) {
        return fmt::format("<joule.CarbonTrace {} points of {} s from {}>", trace.points().size(),
                           trace.period_s(), carbon::format_utc_time(trace.start_unix_s()));
      });
}

void bind_carbon_signal(py::module_& module) {
  py::class_<SignalHandle, std::shared_ptr<SignalHandle>>(
      module, "CarbonSignal",
      "A source of carbon intensity (gCO2e/kWh, UTC Unix seconds): a constant, a country's yearly average, "
      "a replayed trace or a live provider. Made by joule.carbon_signal().")
      .def("describe", [](const SignalHandle& self) { return self.get().describe(); })
      .def_property_readonly(
          "period_s", [](const SignalHandle& self) { return self.get().period_s(); },
          "How long one value holds, s.")
      .def(
          "latest",
          [](SignalHandle& self) {
            carbon::IntensityPoint point;
            {
              py::gil_scoped_release release;
              point = value_or_throw(self.get().latest());
            }
            return to_python(carbon::to_json(point));
          },
          "The freshest value: dict time_unix_s, time, intensity_g_per_kwh, estimated.")
      .def(
          "history",
          [](SignalHandle& self, int64_t from_unix_s, int64_t to_unix_s) {
            std::vector<carbon::IntensityPoint> points;
            {
              py::gil_scoped_release release;
              points = value_or_throw(self.get().history(from_unix_s, to_unix_s));
            }
            return to_python(carbon::to_json(points));
          },
          py::arg("from_unix_s"), py::arg("to_unix_s"), "The values of the periods overlapping [from, to).")
      .def(
          "forecast",
          [](SignalHandle& self, int64_t horizon_s) {
            std::vector<carbon::IntensityPoint> points;
            {
              py::gil_scoped_release release;
              points = value_or_throw(self.get().forecast(horizon_s));
            }
            return to_python(carbon::to_json(points));
          },
          py::arg("horizon_s"), "The provider's forecast of the next horizon_s; NotSupportedError without.")
      .def("__repr__", [](const SignalHandle& self) {
        return fmt::format("<joule.CarbonSignal {}>", self.get().describe());
      });

  module.def("_carbon_signal", &make_signal, py::arg("intensity"), py::arg("trace_path"), py::arg("trace"),
             py::arg("zone"), py::arg("provider"), py::arg("country"), py::arg("devices"));
}

void bind_countries(py::module_& module) {
  module.def(
      "_country_intensity",
      [](const std::string& code) {
        const auto choice = value_or_throw(carbon::choose_country(carbon::CountryTable::builtin(), code,
                                                                  carbon::LocaleSources::from_process()));
        auto json = carbon::to_json(choice.country);
        json["how"] = choice.how;
        json["description"] = choice.describe();
        return to_python(json);
      },
      py::arg("code"));
  module.def("_countries", [] { return to_python_each(carbon::CountryTable::builtin().countries()); });
}

void bind_carbon_monitor(py::module_& module) {
  py::class_<CarbonMonitorHandle>(module, "_CarbonMonitor", "Use joule.CarbonMonitor.")
      .def(py::init([](const std::shared_ptr<MonitorHandle>& monitor,
                       const std::shared_ptr<SignalHandle>& signal, int64_t bucket_s,
                       bool background_checkpoints) {
             if (!monitor || !signal) {
               throw Exception(ErrorCode::kInvalidArgument,
                               "CarbonMonitor needs a Monitor and a CarbonSignal");
             }
             auto handle = std::make_unique<CarbonMonitorHandle>();
             handle->monitor = monitor;
             handle->signal = signal;
             const auto options = bucket_options(bucket_s, background_checkpoints);
             py::gil_scoped_release release;
             handle->carbon =
                 std::make_unique<carbon::CarbonMonitor>(*monitor->monitor, signal->get(), options);
             return handle;
           }),
           py::arg("monitor"), py::arg("signal"), py::arg("bucket_s"), py::arg("background_checkpoints"))
      .def(
          "begin_window",
          [](CarbonMonitorHandle& self, const std::string& name) {
            py::gil_scoped_release release;
            self.carbon->begin_window(name);
          },
          py::arg("name"))
      .def(
          "end_window",
          [](CarbonMonitorHandle& self, const std::string& name) {
            std::optional<carbon::CarbonMeasurement> measured;
            {
              py::gil_scoped_release release;
              measured.emplace(self.carbon->end_window(name));
            }
            if (measured->carbon) {
              return py::make_tuple(measured->energy.measurement,
                                    to_python(carbon::to_json(*measured->carbon)), py::none(), py::none());
            }
            const auto& error = measured->carbon.error();
            return py::make_tuple(measured->energy.measurement, py::none(),
                                  std::string(to_string(error.code())), error.message());
          },
          py::arg("name"))
      .def(
          "cancel_window",
          [](CarbonMonitorHandle& self, const std::string& name) {
            py::gil_scoped_release release;
            self.carbon->cancel_window(name);
          },
          py::arg("name"))
      .def("checkpoint", [](CarbonMonitorHandle& self) {
        py::gil_scoped_release release;
        self.carbon->checkpoint();
      });
}

void bind_tariff(py::module_& module) {
  py::class_<TariffHandle, std::shared_ptr<TariffHandle>>(
      module, "HourlyTariff", "A price per kWh for each UTC hour of the day (CSV hour,price_usd_per_kwh).")
      .def_static(
          "read",
          [](const std::string& path) {
            return std::make_shared<TariffHandle>(
                TariffHandle{value_or_throw(carbon::HourlyTariff::read_file(path))});
          },
          py::arg("path"), "Reads a tariff CSV: 24 rows, hours 0…23. ParseError naming file:line.")
      .def_static(
          "parse",
          [](const std::string& text, const std::string& source) {
            return std::make_shared<TariffHandle>(
                TariffHandle{value_or_throw(carbon::HourlyTariff::parse(text, source))});
          },
          py::arg("text"), py::arg("source") = "<text>")
      .def_static(
          "flat",
          [](double price_usd_per_kwh) {
            return std::make_shared<TariffHandle>(
                TariffHandle{carbon::HourlyTariff::flat(price_usd_per_kwh)});
          },
          py::arg("price_usd_per_kwh"), "One price for every hour.")
      .def(
          "price_at",
          [](const TariffHandle& self, int64_t time_unix_s) { return self.tariff.price_at(time_unix_s); },
          py::arg("time_unix_s"), "The price in force at a UTC time, $/kWh.")
      .def_property_readonly("prices_usd_per_kwh",
                             [](const TariffHandle& self) {
                               const auto& prices = self.tariff.prices_usd_per_kwh();
                               return std::vector<double>(prices.begin(), prices.end());
                             })
      .def_property_readonly("source", [](const TariffHandle& self) { return self.tariff.source(); });
}

void bind_price_monitor(py::module_& module) {
  py::class_<PriceMonitorHandle>(module, "_PriceMonitor", "Use joule.PriceMonitor.")
      .def(py::init([](const std::shared_ptr<MonitorHandle>& monitor,
                       const std::shared_ptr<TariffHandle>& tariff, int64_t bucket_s,
                       bool background_checkpoints) {
             if (!monitor || !tariff) {
               throw Exception(ErrorCode::kInvalidArgument,
                               "PriceMonitor needs a Monitor and an HourlyTariff");
             }
             auto handle = std::make_unique<PriceMonitorHandle>();
             handle->monitor = monitor;
             handle->tariff = tariff;
             const auto options = bucket_options(bucket_s, background_checkpoints);
             py::gil_scoped_release release;
             handle->price =
                 std::make_unique<carbon::PriceMonitor>(*monitor->monitor, tariff->tariff, options);
             return handle;
           }),
           py::arg("monitor"), py::arg("tariff"), py::arg("bucket_s"), py::arg("background_checkpoints"))
      .def(
          "begin_window",
          [](PriceMonitorHandle& self, const std::string& name) {
            py::gil_scoped_release release;
            self.price->begin_window(name);
          },
          py::arg("name"))
      .def(
          "end_window",
          [](PriceMonitorHandle& self, const std::string& name) {
            std::optional<carbon::PriceReport> report;
            {
              py::gil_scoped_release release;
              report.emplace(self.price->end_window(name));
            }
            return to_python(carbon::to_json(*report));
          },
          py::arg("name"))
      .def(
          "cancel_window",
          [](PriceMonitorHandle& self, const std::string& name) {
            py::gil_scoped_release release;
            self.price->cancel_window(name);
          },
          py::arg("name"))
      .def("checkpoint", [](PriceMonitorHandle& self) {
        py::gil_scoped_release release;
        self.price->checkpoint();
      });
}

// Chase's settings: the C++ struct itself, filled by joule/carbon.py (which checks each value's type under
// its public name); `profile` is a _PowerLimitOptions, as PowerLimitOptimizer takes.
void bind_chase_options(py::module_& module) {
  using Options = optimize::ChaseOptimizerOptions;
  py::class_<Options>(
      module, "_ChaseOptions",
      "The settings of ChaseOptimizer (C++ ChaseOptimizerOptions; the library checks them when "
      "the optimizer is made). Use joule.ChaseOptimizer.")
      .def(py::init<>())
      .def_property(
          "eta", [](const Options& options) { return options.chase.eta; },
          [](Options& options, double eta) { options.chase.eta = eta; })
      .def_property(
          "max_intensity_g_per_kwh",
          [](const Options& options) { return options.chase.max_intensity_g_per_kwh; },
          [](Options& options, double intensity) { options.chase.max_intensity_g_per_kwh = intensity; })
      .def_property(
          "interval_s", [](const Options& options) { return static_cast<double>(options.chase.period_s); },
          [](Options& options, double interval_s) {
            value_or_throw(check_number(interval_s, NumberRule{.min = 1}, "interval_s"));
            options.chase.period_s = static_cast<int64_t>(std::llround(interval_s));
          },
          "How often the limit is re-decided, s (≥ 1; rounded to whole seconds).")
      .def_property(
          "max_power_w", [](const Options& options) { return options.chase.max_power_w; },
          [](Options& options, double max_power_w) { options.chase.max_power_w = max_power_w; })
      .def_property(
          "monitor_only", [](const Options& options) { return options.chase.monitor_only; },
          [](Options& options, bool monitor_only) { options.chase.monitor_only = monitor_only; })
      .def_readwrite("forecaster", &Options::forecaster)
      .def_property(
          "training_samples", [](const Options& options) { return options.training_samples; },
          [](Options& options, int64_t samples) {
            value_or_throw(check_number(static_cast<double>(samples), NumberRule::non_negative_integer(),
                                        "training_samples"));
            options.training_samples = static_cast<size_t>(samples);
          })
      .def_readwrite("profile", &Options::profile, "The profile's settings (a _PowerLimitOptions).");
}

void bind_chase(py::module_& module) {
  py::class_<ChaseHandle>(module, "_ChaseOptimizer", "Chase (C++). Use joule.ChaseOptimizer.")
      .def(py::init(&make_chase), py::arg("monitor"), py::arg("signal"), py::arg("options"),
           py::arg("aggregator"))
      .def("on_step_begin", &call_chase_hook<&optimize::ChaseOptimizer::on_step_begin>)
      .def("on_step_end", &call_chase_hook<&optimize::ChaseOptimizer::on_step_end>)
      .def("on_epoch_end", &call_chase_hook<&optimize::ChaseOptimizer::on_epoch_end>)
      .def("close",
           [](ChaseHandle& self) {
             py::gil_scoped_release release;
             self.optimizer.reset();
           })
      .def_property_readonly("closed", [](const ChaseHandle& self) { return self.optimizer == nullptr; })
      .def_property_readonly("state",
                             [](const ChaseHandle& self) {
                               return std::string(optimize::to_string(self.get().profiler().state()));
                             })
      .def_property_readonly(
          "candidates_w",
          [](const ChaseHandle& self) { return watts(self.get().profiler().candidates_mw()); })
      .def_property_readonly(
          "current_power_limit_w",
          [](const ChaseHandle& self) { return mw_to_w(self.get().profiler().current_power_limit_mw()); })
      .def_property_readonly(
          "frontier", [](const ChaseHandle& self) { return frontier_w(self.get().profiler().frontier()); })
      .def_property_readonly("decisions",
                             [](const ChaseHandle& self) { return to_python_each(self.get().decisions()); })
      .def_property_readonly(
          "profile_measurements",
          [](const ChaseHandle& self) { return to_python_each(self.get().profiler().measurements()); })
      .def_property_readonly("max_power_w",
                             [](const ChaseHandle& self) { return self.get().options().chase.max_power_w; })
      .def_property_readonly("forecaster",
                             [](const ChaseHandle& self) { return self.get().forecaster_name(); })
      .def_property_readonly("next_decision_unix_s",
                             [](const ChaseHandle& self) { return self.get().next_decision_unix_s(); })
      .def_property_readonly(
          "loaded_from_profile",
          [](const ChaseHandle& self) { return self.get().profiler().loaded_from_profile(); })
      .def_property_readonly("constraints_w", [](const ChaseHandle& self) {
        return to_python(device::to_json(self.get().profiler().constraints()));
      });
}

}  // namespace

void bind_carbon(py::module_& module) {
  bind_carbon_trace(module);
  bind_carbon_signal(module);
  bind_countries(module);
  bind_carbon_monitor(module);
  bind_tariff(module);
  bind_price_monitor(module);
  bind_chase_options(module);
  bind_chase(module);
}

}  // namespace joule::python
