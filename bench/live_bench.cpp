// SPDX-License-Identifier: Apache-2.0
// live_bench: how fast `joule serve` follows a straggler (issue 14: under 100 ms for an 8 × 32 pipeline).
// An 8-stage × 32-microbatch job of two data-parallel pipelines is planned from a given profile (the
// example's stages, as plan_bench lays them out), on SQLite in a temporary directory as `joule serve`'s
// default. Each benchmark iteration is the round whose reports reveal a new straggler pace T': the timed part
// is the last rank's POST /result (which observes the round, picks the frontier point for T' and stores the
// job) and the GET /schedule that hands a slowed pipeline its new plan. The pace flips between 1.2 × and
// 1.0 × the fastest time (entering and leaving straggler mode), after the confirmation round, untimed.
#include <filesystem>
#include <map>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/plan/pipeline.hpp"
#include "joule/plan/profile_codec.hpp"
#include "joule/server/service.hpp"
#include "joule/store/store.hpp"

namespace {

using nlohmann::json;
constexpr int kStages = 8;
constexpr int kMicrobatches = 32;
constexpr int kPipelines = 2;

joule::plan::Profile profile_for(int stages) {
  const auto example =
      *joule::plan::Profile::read(JOULE_SOURCE_DIR "/data/perseus/example_s4_m8_profile.csv");
  std::vector<std::array<std::vector<joule::plan::ProfileOption>, 2>> options;
  for (int stage = 0; stage < stages; ++stage) {
    const int source = stage == stages - 1 ? 3 : stage % 3;
    options.push_back({example.options(source, joule::plan::Instruction::kForward),
                       example.options(source, joule::plan::Instruction::kBackward)});
  }
  return *joule::plan::Profile::from_options(std::move(options));
}

joule::server::Response call(joule::server::Service& service, const std::string& method,
                             const std::string& path, const json& body = nullptr,
                             std::map<std::string, std::string> query = {}) {
  joule::server::Request request;
  request.method = method;
  request.path = path;
  request.query = std::move(query);
  if (!body.is_null()) {
    request.body = body.dump();
    request.content_type = "application/json";
  }
  auto response = service.handle(request);
  if (response.status != 200) {
    throw std::runtime_error(fmt::format("{} {}: {} {}", method, path, response.status, response.body));
  }
  return response;
}

void straggler_replan(benchmark::State& state) {
  const auto directory = std::filesystem::temp_directory_path() / fmt::format("live_bench_{}", ::getpid());
  std::filesystem::create_directories(directory);
  auto store = std::shared_ptr<joule::store::Store>(
      std::move(*joule::store::open_store("sqlite:" + (directory / "live.db").string())));
  joule::server::ServiceOptions options;
  options.live_profile_csv = joule::plan::profile_csv(profile_for(kStages));
  options.live_max_waiting = 64;
  joule::server::Service service(store, options);
  const auto job = json::parse(call(service, "POST", "/register_job",
                                    {{"job_id", ""},
                                     {"pp_degree", kStages},
                                     {"dp_degree", kPipelines},
                                     {"tp_degree", 1},
                                     {"world_size", kStages * kPipelines},
                                     {"num_microbatches", kMicrobatches}})
                                   .body)
                       .get<std::string>();
  std::vector<uint32_t> clocks;
  for (uint32_t mhz = 1410; mhz >= 810; mhz -= 15) {
    clocks.push_back(mhz);
  }
  for (int rank = 0; rank < kStages * kPipelines; ++rank) {
    call(service, "POST", "/register_rank/" + job,
         {{"rank", rank},
          {"dp_rank", rank / kStages},
          {"pp_rank", rank % kStages},
          {"tp_rank", 0},
          {"available_frequencies", clocks}});
  }
  const auto schedule = [&](int rank) {
    return json::parse(
        call(service, "GET", "/schedule/" + job, nullptr, {{"rank", std::to_string(rank)}}).body);
  };
  const double fastest_s = schedule(0)["predicted"]["iteration_time_s"].get<double>();
  // A report with only iteration times (allowed once planned): pipeline 1 at `pace`.
  const auto result = [&](int rank, double pace) {
    const json got = schedule(rank);
    const double own_s = got["predicted"]["compute_time_s"].get<double>();
    const double time_s = rank / kStages == 1 ? fastest_s * pace : own_s;
    const int iterations = got["iterations"].get<int>();
    return json{{"rank", rank},
                {"iter_time", std::vector<double>(static_cast<size_t>(iterations), time_s)},
                {"iter_energy", std::vector<double>(static_cast<size_t>(iterations), 1000.0)}};
  };
  const auto report_round = [&](double pace, bool time_last) {
    for (int rank = 0; rank < kStages * kPipelines; ++rank) {
      const json body = result(rank, pace);
      if (time_last && rank == kStages * kPipelines - 1) {
        state.ResumeTiming();
        call(service, "POST", "/result/" + job, body);
        const json slowed = schedule(0);
        state.PauseTiming();
        benchmark::DoNotOptimize(slowed);
      } else {
        call(service, "POST", "/result/" + job, body);
      }
    }
  };
  bool slow = false;
  while (state.KeepRunning()) {
    state.PauseTiming();
    slow = !slow;
    const double pace = slow ? 1.2 : 1.0;
    report_round(pace, false);  // the first round of the new pace: detection waits for confirmation
    report_round(pace, true);   // the confirming round: T' changes here
    const double target_s = schedule(0)["predicted"]["iteration_time_s"].get<double>();
    if (slow != (target_s > fastest_s * 1.1)) {
      state.SkipWithError("the straggler was not followed");
      break;
    }
    state.ResumeTiming();
  }
  state.counters["computations"] = 2.0 * kStages * kMicrobatches;
  std::filesystem::remove_all(directory);
}

BENCHMARK(straggler_replan)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(20);

}  // namespace
