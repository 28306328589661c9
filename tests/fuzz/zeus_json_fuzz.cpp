// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: every JSON body `joule serve` accepts (Zeus's JobSpec, GpuConfig, TrialId,
// TrainingResult, ReportResponse, a persisted job's state, the planner's PipelineSpec), the listen address
// and the /metrics address, the bounded JSON parser, and the service itself: the input as the body of every
// route that takes one. Parsing never throws or crashes, an error always has a message, an accepted JobSpec
// or PipelineSpec survives a round trip through its JSON, and no body makes the service answer 5xx.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "joule/client/pipeline_spec.hpp"
#include "joule/core/json.hpp"
#include "joule/metrics/endpoint.hpp"
#include "joule/metrics/http_listener.hpp"
#include "joule/optimize/batch_size.hpp"
#include "joule/server/http_server.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using joule::fuzz::require_message;
  namespace bso = joule::optimize::batch_size;
  const std::string text(reinterpret_cast<const char*>(data), size);
  require_message(joule::metrics::parse_host_port(text, "listen address", joule::server::kDefaultPort));
  require_message(joule::metrics::parse_host_port(text, "--serve"));
  (void)joule::metrics::percent_decode(text, true);

  // The service, on a store that lives as long as the fuzzer (a job and a pipeline for the bodies to hit).
  static joule::server::Service& service = *[] {
    auto* made =
        new joule::server::Service(std::shared_ptr<joule::store::Store>(joule::store::memory_store()));
    made->handle({"POST",
                  "/jobs",
                  {},
                  R"({"job_id": "fuzz-1", "job_id_prefix": "fuzz", "batch_sizes": [8, 16],
        "default_batch_size": 8, "max_power": 300, "number_of_gpus": 1, "gpu_model": "A40"})",
                  "application/json",
                  std::nullopt});
    made->handle({"GET", "/jobs/batch_size", {{"job_id", "fuzz-1"}}, "", "", std::nullopt});
    made->handle({"POST",
                 "/pipelines",
                 {},
                 R"({"pipeline_id": "pipeline-1", "stages": 2, "microbatches": 2})",
                 "application/json",
                 std::nullopt});
    return made;
  }();
  for (const auto& [method, path] :
       {std::pair{"POST", "/jobs"}, std::pair{"POST", "/report"}, std::pair{"PATCH", "/trials"},
        std::pair{"POST", "/pipelines"}, std::pair{"POST", "/pipelines/pipeline-1/straggler"},
        std::pair{"PUT", "/pipelines/pipeline-1/profile"}}) {
    const auto response = service.handle({method, path, {}, text, "application/json", std::nullopt});
    if (response.status >= 500 || nlohmann::json::parse(response.body, nullptr, false).is_discarded()) {
      std::abort();
    }
  }

  const auto parsed = joule::parse_json(text);
  if (!parsed) {
    if (parsed.error().message.empty()) {
      std::abort();
    }
    return 0;
  }
  const nlohmann::json& json = *parsed;
  (void)joule::describe_json(json);
  const auto job = bso::JobSpec::from_json(json);
  require_message(job);
  if (job && !bso::JobSpec::from_json(job->to_json())) {
    std::abort();
  }
  require_message(bso::GpuConfig::from_json(json));
  require_message(bso::TrialId::from_json(json));
  require_message(bso::TrainingResult::from_json(json));
  require_message(bso::ReportResponse::from_json(json));
  require_message(bso::BatchSizeJob::from_json(json));
  require_message(bso::JobState::from_json(json));
  const auto pipeline = joule::client::PipelineSpec::from_json(json);
  require_message(pipeline);
  if (pipeline) {
    const auto again = joule::client::PipelineSpec::from_json(pipeline->to_json());
    if (!again || !(*again == *pipeline)) {
      std::abort();
    }
  }
  return 0;
}
