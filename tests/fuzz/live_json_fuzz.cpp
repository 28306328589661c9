// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the bodies of Zeus's pipeline frequency optimizer routes (JobInfo, RankInfo,
// ProfilingResult, joule's round), the rank and wait_s queries of GET /schedule, and the live scheduler's stored
// forms (the whole scheduler of versions 1 and 2, the state, the data, a report).
// No input makes the service answer 5xx or a body that is not JSON, and parsing a stored state never throws.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "joule/plan/live.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

#include "fuzz_util.hpp"

namespace {

void check(const joule::server::Response& response) {
  if (response.status >= 500 || nlohmann::json::parse(response.body, nullptr, false).is_discarded()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // A job of two ranks, rank 0 registered: bodies hit registration and results of a live job.
  static std::string job_id;
  static joule::server::Service& service = *[] {
    auto* made =
        new joule::server::Service(std::shared_ptr<joule::store::Store>(joule::store::memory_store()));
    const auto registered = made->handle(
        {"POST",
         "/register_job",
         {},
         R"({"job_id": "", "pp_degree": 2, "dp_degree": 1, "tp_degree": 1, "world_size": 2, "num_microbatches": 2})",
         "application/json",
         std::nullopt});
    job_id = nlohmann::json::parse(registered.body).get<std::string>();
    made->handle(
        {"POST",
         "/register_rank/" + job_id,
         {},
         R"({"rank": 0, "dp_rank": 0, "pp_rank": 0, "tp_rank": 0, "available_frequencies": [1410, 1395]})",
         "application/json",
         std::nullopt});
    return made;
  }();
  for (const std::string& path :
       {std::string("/register_job"), "/register_rank/" + job_id, "/result/" + job_id}) {
    check(service.handle({"POST", path, {}, text, "application/json", std::nullopt}));
  }
  check(service.handle(
      {"GET", "/schedule/" + job_id, {{"rank", text}, {"wait_s", "0"}}, "", "", std::nullopt}));
  // wait_s on a job nobody registered: parsed, then 404 at once (a valid wait on the live job would wait).
  check(service.handle(
      {"GET", "/schedule/no-such-job", {{"rank", "0"}, {"wait_s", text}}, "", "", std::nullopt}));
  joule::fuzz::require_message(joule::plan::LiveScheduler::parse(text));
  joule::fuzz::require_message(joule::plan::LiveState::parse(text));
  joule::fuzz::require_message(joule::plan::LiveData::parse(text));
  joule::fuzz::require_message(joule::plan::LiveReport::parse(text));
  return 0;
}
