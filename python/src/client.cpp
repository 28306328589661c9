// SPDX-License-Identifier: Apache-2.0
// The client of `joule serve`'s batch-size routes (Zeus's REST API). Bodies cross the boundary as JSON text;
// joule.BatchSizeOptimizer (batch_size.py) turns them into Python data. Calls run without the GIL.
#include "joule/client/client.hpp"

#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/client/json_forms.hpp"
#include "joule/core/duration.hpp"
#include "joule/core/validate.hpp"

#include "bindings.hpp"

namespace joule::python {

namespace {

namespace bs = optimize::batch_size;

nlohmann::json parse_json(const std::string& text, const char* what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    throw Exception(ErrorCode::kParse, fmt::format("{} is not valid JSON: {}", what, error.what()));
  }
}

std::chrono::milliseconds milliseconds(double seconds, const char* what) {
  const Nanos checked = value_or_throw(joule::seconds_to_nanos(seconds, what, duration_rule()));
  return std::chrono::round<std::chrono::milliseconds>(checked);
}

class ClientHandle {
 public:
  ClientHandle(const std::string& urls, double timeout_s, double connect_timeout_s, int attempts) {
    value_or_throw(check_number(attempts, NumberRule{.min = 1, .integer = true}, "attempts"));
    client::ClientOptions options;
    options.timeout = milliseconds(timeout_s, "timeout_s");
    options.connect_timeout = milliseconds(connect_timeout_s, "connect_timeout_s");
    options.attempts = attempts;
    client_ = std::make_unique<client::Client>(value_or_throw(client::Client::connect(urls, options)));
  }

  std::string register_job(const std::string& spec_json, const std::string& gpu_json) {
    const bs::JobSpec spec = value_or_throw(bs::JobSpec::from_json(parse_json(spec_json, "the job spec")));
    const bs::GpuConfig gpu =
        value_or_throw(bs::GpuConfig::from_json(parse_json(gpu_json, "the GPU config")));
    py::gil_scoped_release release;
    const client::RegisteredJob registered = value_or_throw(client_->register_job(spec, gpu));
    return client::to_json(registered).dump();
  }

  std::string next_batch_size(const std::string& job_id) {
    py::gil_scoped_release release;
    return value_or_throw(client_->next_batch_size(job_id)).to_json().dump();
  }

  std::string report(const std::string& result_json) {
    const bs::TrainingResult result =
        value_or_throw(bs::TrainingResult::from_json(parse_json(result_json, "the training result")));
    py::gil_scoped_release release;
    return value_or_throw(client_->report(result)).to_json().dump();
  }

  void end_trial(const std::string& trial_json) {
    const bs::TrialId trial = value_or_throw(bs::TrialId::from_json(parse_json(trial_json, "the trial")));
    py::gil_scoped_release release;
    value_or_throw(client_->end_trial(trial));
  }

  void delete_job(const std::string& job_id) {
    py::gil_scoped_release release;
    value_or_throw(client_->delete_job(job_id));
  }

  std::string job_status(const std::string& job_id) {
    py::gil_scoped_release release;
    return value_or_throw(client_->job_status(job_id)).document.dump();
  }

  std::string health() {
    py::gil_scoped_release release;
    return value_or_throw(client_->health()).document.dump();
  }

 private:
  std::unique_ptr<client::Client> client_;
};

}  // namespace

void bind_client(py::module_& module) {
  py::class_<ClientHandle>(module, "_BatchSizeClient",
                           "Client of the batch-size routes of `joule serve` (JSON text in and out).")
      .def(py::init<const std::string&, double, double, int>(), py::arg("urls"), py::arg("timeout_s") = 120.0,
           py::arg("connect_timeout_s") = 3.0, py::arg("attempts") = 8)
      .def("register_job", &ClientHandle::register_job, py::arg("spec_json"), py::arg("gpu_json"))
      .def("next_batch_size", &ClientHandle::next_batch_size, py::arg("job_id"))
      .def("report", &ClientHandle::report, py::arg("result_json"))
      .def("end_trial", &ClientHandle::end_trial, py::arg("trial_json"))
      .def("delete_job", &ClientHandle::delete_job, py::arg("job_id"))
      .def("job_status", &ClientHandle::job_status, py::arg("job_id"))
      .def("health", &ClientHandle::health);
}

}  // namespace joule::python
