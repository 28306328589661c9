// SPDX-License-Identifier: Apache-2.0
// live_bench: how fast `joule serve` follows a straggler (issue 14: under 100 ms for an 8 × 32 pipeline), and
// what profiling and planning a GPT-3-class job costs the live scheduler.
// An 8-stage × 32-microbatch job of two data-parallel pipelines is planned from a given profile (the
// example's stages, as plan_bench lays them out), on SQLite in a temporary directory as `joule serve`'s
// default. Each benchmark iteration is the round whose reports reveal a new straggler pace T': the timed part
// is the last rank's POST /result (which observes the round and stores the job, asking for a plan) and the
// GET /schedule that hands a slowed pipeline its new plan: it waits while the service's planner thread picks
// the frontier point for T' (cached) and stores it. The pace flips between 1.2 × and 1.0 × the fastest time
// (entering and leaving straggler mode), after the confirmation round, untimed.
#include <chrono>
#include <filesystem>
#include <map>

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "joule/plan/live.hpp"
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

// Profile and plan a GPT-3-class job through the live scheduler (as plan_bench lays it out: 16 stages × 192
// microbatches, GPT-3 175B on 1,024 GPUs in Megatron-LM's example), in-process: every profiling round's
// reports are what the stages would measure (the profile at the scheduled clocks). Counters: the profiling
// iterations the sweep needed, the scheduler's time per round (all ranks' reports, every state stored and
// parsed back as the server does) and the planning time of the measured profile.
void gpt3_profile_and_plan(benchmark::State& state) {
  constexpr int kGptStages = 16;
  constexpr int kGptMicrobatches = 192;
  const joule::plan::Profile truth = profile_for(kGptStages);
  std::vector<uint32_t> clocks;
  for (uint32_t mhz = 1410; mhz >= 210; mhz -= 15) {
    clocks.push_back(mhz);
  }
  double rounds = 0;
  double round_s = 0;
  double planning_s = 0;
  for (auto _ : state) {
    joule::plan::LiveJobInfo info;
    info.job_id = "gpt3";
    info.pp_degree = kGptStages;
    info.world_size = kGptStages;
    info.num_microbatches = kGptMicrobatches;
    auto scheduler = *joule::plan::LiveScheduler::create(info, {});
    const joule::plan::LivePlanProvider provider = [&](const joule::plan::LivePlanRequest& request) {
      auto planned = joule::plan::plan_live(request);
      if (planned) {
        planning_s = (*planned)->planning_time_s;
      }
      return planned;
    };
    for (int rank = 0; rank < kGptStages; ++rank) {
      (void)scheduler.register_rank({rank, 0, rank, 0, clocks}, provider);
    }
    rounds = 0;
    const auto started = std::chrono::steady_clock::now();
    while (scheduler.phase() != joule::plan::LivePhase::kPlanned) {
      for (int rank = 0; rank < kGptStages; ++rank) {
        const auto schedule = *scheduler.schedule(rank);
        joule::plan::LiveResult result;
        result.rank = rank;
        double busy_s = 0;
        double busy_j = 0;
        std::map<std::string, std::vector<double>> times;
        std::map<std::string, std::vector<double>> energies;
        for (const auto& [name, mhz] : schedule.frequencies) {
          const auto& options = truth.options(rank, *joule::plan::parse_instruction(name));
          joule::plan::ProfileOption option = options.back();
          for (const auto& candidate : options) {
            if (candidate.frequency_mhz <= mhz) {
              option = candidate;
              break;
            }
          }
          times[name].push_back(option.time_s);
          energies[name].push_back(option.energy_j);
          busy_s += option.time_s;
          busy_j += option.energy_j;
        }
        for (auto& [name, values] : times) {
          result.time_breakdown_s[name] = {values};
          result.energy_breakdown_j[name] = {energies[name]};
        }
        result.iter_time_s = {busy_s * 1.1};
        result.iter_energy_j = {busy_j + busy_s * 0.1 * 70};
        if (!scheduler.report(result, provider)) {
          state.SkipWithError("a report was refused");
          return;
        }
        scheduler = *joule::plan::LiveScheduler::parse(scheduler.dump());
      }
      ++rounds;
    }
    round_s =
        (std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() - planning_s) /
        rounds;
  }
  state.counters["profiling_iterations"] = rounds;
  state.counters["round_ms"] = round_s * 1e3;
  state.counters["planning_s"] = planning_s;
  state.counters["computations"] = 2.0 * kGptStages * kGptMicrobatches;
}

BENCHMARK(gpt3_profile_and_plan)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);

}  // namespace
