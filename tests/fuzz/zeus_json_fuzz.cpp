// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: every JSON body `joule serve` accepts (Zeus's JobSpec, GpuConfig, TrialId,
// TrainingResult, ReportResponse, a persisted job's state, the planner's PipelineSpec), the listen address
// and the /metrics address. Parsing never throws or crashes, an error always has a message, and an accepted
// JobSpec or PipelineSpec survives a round trip through its JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "joule/measure/metrics_http.hpp"
#include "joule/optimize/batch_size.hpp"
#include "joule/server/http_server.hpp"
#include "joule/server/pipeline_spec.hpp"

#include "fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using joule::fuzz::require_message;
  namespace bso = joule::optimize::batch_size;
  const std::string text(reinterpret_cast<const char*>(data), size);
  require_message(joule::server::parse_listen_address(text));
  require_message(joule::measure::parse_metrics_address(text, "--serve"));
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return 0;
  }
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
  const auto pipeline = joule::server::PipelineSpec::from_json(json);
  require_message(pipeline);
  if (pipeline) {
    const auto again = joule::server::PipelineSpec::from_json(pipeline->to_json());
    if (!again || !(*again == *pipeline)) {
      std::abort();
    }
  }
  return 0;
}
