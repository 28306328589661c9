// SPDX-License-Identifier: Apache-2.0
// The service without HTTP: Zeus's batch-size optimizer routes (statuses, messages, validation bodies),
// idempotent retries, state unchanged after refused requests, the seeded decision sequence equal to the
// library's, and store failures. Parameterised by store URL (memory:, SQLite when built,
// $JOULE_TEST_STORE_URL).
#include "joule/server/service.hpp"

#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "server/service_fixture.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using nlohmann::json;
using server::Request;
using server::Response;

TEST_P(ServiceTest, RegisterCreatesThenAcceptsTheIdenticalConfigAndRefusesAnother) {
  const json body = register_body(synthetic_spec("synthetic-a"), synthetic_gpu());
  const Response created = call("POST", "/jobs", body);
  ASSERT_EQ(created.status, 201) << created.body;
  const json echo = parsed(created);
  EXPECT_EQ(echo["job_id"], "synthetic-a");
  EXPECT_EQ(echo["batch_sizes"], json({8, 16, 32, 64, 128}));
  EXPECT_EQ(echo["max_power"], 300.0);
  EXPECT_EQ(echo["gpu_model"], "NVIDIA A40");
  EXPECT_EQ(echo["eta_knob"], 0.5);  // Zeus's defaults filled in

  // Batch sizes in another order are the same configuration (Zeus sorts them).
  json shuffled = body;
  shuffled["batch_sizes"] = {128, 8, 64, 16, 32};
  EXPECT_EQ(call("POST", "/jobs", shuffled).status, 200);

  json different = body;
  different["eta_knob"] = 0.9;
  const Response conflict = call("POST", "/jobs", different);
  EXPECT_EQ(conflict.status, 409);
  EXPECT_EQ(
      parsed(conflict),
      json({{"message",
             "JobSpec doesn't match with existing jobSpec. Use a new job_id for different configuration"}}));
}

TEST_P(ServiceTest, RegisterGeneratesUniqueIdsWithThePrefix) {
  std::set<std::string> ids;
  for (int i = 0; i < 20; ++i) {
    const Response response =
        call("POST", "/jobs", register_body(synthetic_spec(std::nullopt), synthetic_gpu()));
    ASSERT_EQ(response.status, 201) << response.body;
    const std::string id = parsed(response)["job_id"];
    EXPECT_TRUE(std::regex_match(id, std::regex("synthetic-[0-9a-f]{8}"))) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 20u);
}

TEST_P(ServiceTest, RegisterValidationIsFastApisUnprocessableEntity) {
  const Response malformed = call("POST", "/jobs", std::string("{\"job_id_prefix\": "));
  EXPECT_EQ(malformed.status, 422);
  EXPECT_EQ(parsed(malformed)["detail"][0]["type"], "value_error.jsondecode");

  json body = register_body(synthetic_spec("synthetic-v"), synthetic_gpu());
  body["eta_knob"] = 1.5;
  EXPECT_EQ(
      parsed(call("POST", "/jobs", body)),
      json::parse(R"({"detail": [{"loc": ["body", "eta_knob"], "msg": "eta_knob should be in range [0,1]",
                                         "type": "value_error"}]})"));

  body = register_body(synthetic_spec("synthetic-v"), synthetic_gpu());
  body["default_batch_size"] = 24;
  EXPECT_EQ(parsed(call("POST", "/jobs", body)), json::parse(R"({"detail": [{"loc": ["body", "__root__"],
                                         "msg": "Default BS(24) not in batch_sizes([8, 16, 32, 64, 128]).",
                                         "type": "value_error"}]})"));

  body = register_body(synthetic_spec("synthetic-v"), synthetic_gpu());
  body.erase("job_id_prefix");
  EXPECT_EQ(parsed(call("POST", "/jobs", body)),
            json::parse(R"({"detail": [{"loc": ["body", "job_id_prefix"], "msg": "field required",
                                         "type": "value_error.missing"}]})"));

  body = register_body(synthetic_spec("synthetic-v"), synthetic_gpu());
  body["batch_sizes"] = {8, "x"};
  const json typed = parsed(call("POST", "/jobs", body));
  EXPECT_EQ(typed["detail"][0]["loc"], json({"body", "batch_sizes", 1}));
  EXPECT_EQ(typed["detail"][0]["type"], "type_error.integer");

  body = register_body(synthetic_spec("synthetic-v"), synthetic_gpu());
  body["max_power"] = 0;
  const json gpu = parsed(call("POST", "/jobs", body));
  EXPECT_EQ(gpu["detail"][0]["loc"], json({"body", "max_power"}));
  EXPECT_EQ(gpu["detail"][0]["msg"], "ensure this value is greater than 0");
  EXPECT_EQ(gpu["detail"][0]["type"], "value_error.number.not_gt");

  EXPECT_EQ(call("POST", "/jobs", json::array()).status, 422);
  // Nothing was registered.
  EXPECT_EQ(call("GET", "/jobs/synthetic-v").status, 404);
}

TEST_P(ServiceTest, UnknownJobsGetZeusStatusesAndMessages) {
  const Response missing = call("GET", "/jobs/batch_size");
  EXPECT_EQ(missing.status, 422);
  EXPECT_EQ(parsed(missing), json::parse(R"({"detail": [{"loc": ["query", "job_id"], "msg": "field required",
                                         "type": "value_error.missing"}]})"));
  const Response predict = next("nope");
  EXPECT_EQ(predict.status, 400);
  EXPECT_EQ(parsed(predict)["message"], "Unknown job(nope). Please register the job first");

  const Response report = call("POST", "/report",
                               json({{"job_id", "nope"},
                                     {"batch_size", 8},
                                     {"trial_number", 1},
                                     {"time", 1.0},
                                     {"energy", 2.0},
                                     {"metric", 0.1},
                                     {"current_epoch", 1}}));
  EXPECT_EQ(report.status, 400);
  EXPECT_EQ(parsed(report)["message"], "Unknown job nope");

  const Response end =
      call("PATCH", "/trials", json({{"job_id", "nope"}, {"batch_size", 8}, {"trial_number", 1}}));
  EXPECT_EQ(end.status, 404);
  EXPECT_EQ(parsed(end)["message"], "Could not find the trial: job_id='nope' batch_size=8 trial_number=1");

  const Response erased = call("DELETE", "/jobs", "", {{"job_id", "nope"}});
  EXPECT_EQ(erased.status, 404);
  EXPECT_EQ(parsed(erased)["message"], "No job was deleted.");
  EXPECT_EQ(call("GET", "/jobs/nope").status, 404);
}

TEST_P(ServiceTest, ATrialFromNextToReportToEnd) {
  const std::string job = register_job("synthetic-t");
  const Response first = next(job);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(parsed(first), json({{"job_id", job}, {"batch_size", 32}, {"trial_number", 1}}));
  const bso::TrialId trial{job, 32, 1};

  const Response keep_going = call("POST", "/report", SyntheticTraining::result(trial, 1).to_json());
  ASSERT_EQ(keep_going.status, 200) << keep_going.body;
  EXPECT_EQ(parsed(keep_going), json({{"stop_train", false},
                                      {"converged", false},
                                      {"message", "Stop condition not met, keep training"}}));
  for (int epoch = 2; epoch < 5; ++epoch) {
    EXPECT_EQ(call("POST", "/report", SyntheticTraining::result(trial, epoch).to_json()).status, 200);
  }
  const Response done = call("POST", "/report", SyntheticTraining::result(trial, 5).to_json());
  EXPECT_EQ(parsed(done), json({{"stop_train", true}, {"converged", true}, {"message", "Train succeeded"}}));

  const Response ended = call("PATCH", "/trials", trial.to_json());
  EXPECT_EQ(ended.status, 200);
  EXPECT_EQ(ended.body, "null");

  const json state = status(job);
  EXPECT_EQ(state["stage"], "Pruning");
  EXPECT_EQ(state["counts"]["reports"], 5);
  EXPECT_EQ(state["trials"][0]["status"], "Succeeded");
  EXPECT_EQ(state["trials"][0]["reports"], 5);
  EXPECT_EQ(state["trials"][0]["last_epoch"], 5);

  // The next trial walks down from the default; ending it without a result makes it Failed and the walk
  // hands its batch size out again.
  const json second = parsed(next(job));
  EXPECT_EQ(second["batch_size"], 16);
  EXPECT_EQ(call("PATCH", "/trials", second).status, 200);
  EXPECT_EQ(status(job)["trials"][1]["status"], "Failed");
  EXPECT_EQ(parsed(next(job))["batch_size"], 16);

  const Response erased = call("DELETE", "/jobs", "", {{"job_id", job}});
  EXPECT_EQ(erased.status, 200);
  EXPECT_EQ(erased.body, "null");
  EXPECT_EQ(next(job).status, 400);
}

TEST_P(ServiceTest, RefusedReportsLeaveTheStateUnchanged) {
  const std::string job = register_job("synthetic-r");
  const json trial = parsed(next(job));
  const json before = status(job);

  bso::TrainingResult bad = SyntheticTraining::result({job, 32, 1}, 1);
  bad.time_s = -1;
  const Response negative = call("POST", "/report", bad.to_json());
  EXPECT_EQ(negative.status, 422);
  EXPECT_EQ(parsed(negative)["detail"][0]["loc"], json({"body", "time"}));

  json wrong_trial = SyntheticTraining::result({job, 32, 1}, 1).to_json();
  wrong_trial["trial_number"] = 9;
  const Response unknown = call("POST", "/report", wrong_trial);
  EXPECT_EQ(unknown.status, 400);
  EXPECT_TRUE(parsed(unknown)["message"].get<std::string>().starts_with(
      "Unknown trial job_id='synthetic-r' batch_size=32 trial_number=9"))
      << unknown.body;

  json missing = SyntheticTraining::result({job, 32, 1}, 1).to_json();
  missing.erase("metric");
  EXPECT_EQ(call("POST", "/report", missing).status, 422);
  EXPECT_EQ(call("POST", "/report", std::string("not json")).status, 422);
  EXPECT_EQ(call("PATCH", "/trials", json({{"job_id", job}, {"batch_size", 64}, {"trial_number", 1}})).status,
            404);

  EXPECT_EQ(status(job), before);

  // A report on a Failed trial is Zeus's 400.
  ASSERT_EQ(call("PATCH", "/trials", trial).status, 200);
  const Response failed = call("POST", "/report", SyntheticTraining::result({job, 32, 1}, 1).to_json());
  EXPECT_EQ(failed.status, 400);
}

TEST_P(ServiceTest, RetriesWithTheSameRequestIdAreAppliedOnce) {
  const std::string job = register_job("synthetic-i");
  const Response first = next(job, "next-1");
  const Response again = next(job, "next-1");
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(again.body, first.body);
  EXPECT_FALSE(first.replayed);
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(status(job)["counts"]["trials"], 1);

  const json report = SyntheticTraining::result({job, 32, 1}, 1).to_json();
  const Response reported = call("POST", "/report", report, "report-1");
  const Response replayed = call("POST", "/report", report, "report-1");
  EXPECT_EQ(replayed.body, reported.body);
  EXPECT_TRUE(replayed.replayed);
  EXPECT_EQ(status(job)["trials"][0]["reports"], 1);

  // The same id with another request is refused, and applies nothing.
  const Response reused =
      call("POST", "/report", SyntheticTraining::result({job, 32, 1}, 2).to_json(), "report-1");
  EXPECT_EQ(reused.status, 409);
  EXPECT_NE(parsed(reused)["message"].get<std::string>().find("report-1"), std::string::npos);
  EXPECT_EQ(status(job)["trials"][0]["reports"], 1);

  // A registration without a job id, retried: the same generated job, created once.
  const json spec = register_body(synthetic_spec(std::nullopt), synthetic_gpu());
  const Response created = call("POST", "/jobs", spec, "register-1");
  const Response retried = call("POST", "/jobs", spec, "register-1");
  EXPECT_EQ(created.status, 201);
  EXPECT_EQ(retried.status, 201);
  EXPECT_EQ(retried.body, created.body);

  // Deleting twice with one id: the second is the first's 200, not a 404.
  EXPECT_EQ(call("DELETE", "/jobs", "", {{"job_id", job}}, "delete-1").status, 200);
  EXPECT_EQ(call("DELETE", "/jobs", "", {{"job_id", job}}, "delete-1").status, 200);
  EXPECT_EQ(call("DELETE", "/jobs", "", {{"job_id", job}}, "delete-2").status, 404);

  // Refused requests store nothing: after registering, the same id goes through.
  const Response early = next("synthetic-late", "late-1");
  EXPECT_EQ(early.status, 400);
  register_job("synthetic-late");
  EXPECT_EQ(next("synthetic-late", "late-1").status, 200);

  Request too_long;
  too_long.method = "GET";
  too_long.path = "/healthz";
  too_long.request_id = std::string(300, 'x');
  EXPECT_EQ(service_->handle(too_long).status, 400);
}

// Drives the service and the library side by side through pruning into the bandit, two trials at a time
// (so that Concurrent trials happen), with some trials failing: every decision must be the library's.
TEST_P(ServiceTest, SeededDecisionsEqualTheLibrarys) {
  for (const uint64_t seed : {1u, 42u}) {
    const std::string job_id = fmt::format("synthetic-seed{}", seed);
    register_job(job_id, seed);
    auto library = bso::BatchSizeJob::create(synthetic_spec(job_id, seed), synthetic_gpu());
    ASSERT_TRUE(library);
    int failures = 0;
    for (int round = 0; round < 20; ++round) {
      std::vector<bso::TrialId> trials;
      for (int k = 0; k < 2; ++k) {
        const Response response = next(job_id);
        ASSERT_EQ(response.status, 200) << response.body;
        const auto expected = library->next_trial(0);
        ASSERT_TRUE(expected);
        ASSERT_EQ(parsed(response), expected->to_json()) << "round " << round;
        trials.push_back(*expected);
      }
      for (const auto& trial : trials) {
        if ((trial.trial_number % 7) == 3) {  // the client crashed: no result
          ++failures;
        } else {
          for (int64_t epoch = 1;; ++epoch) {
            const auto result = SyntheticTraining::result(trial, epoch);
            const Response response = call("POST", "/report", result.to_json());
            ASSERT_EQ(response.status, 200) << response.body;
            const auto expected = library->report(result, 0);
            ASSERT_TRUE(expected);
            ASSERT_EQ(parsed(response), expected->to_json());
            if (expected->stop_train) {
              break;
            }
          }
        }
        ASSERT_EQ(call("PATCH", "/trials", trial.to_json()).status, 200);
        ASSERT_TRUE(library->end_trial(trial, 0));
      }
    }
    EXPECT_GT(failures, 0);
    const json state = status(job_id);
    EXPECT_EQ(state["stage"], "MAB");
    EXPECT_EQ(state["arms"], library->to_json()["arms"]);
    EXPECT_EQ(state["min_cost"], library->to_json()["min_cost"]);
  }
}

TEST_P(ServiceTest, UnknownRoutesAndMethods) {
  EXPECT_EQ(call("GET", "/nope").status, 404);
  EXPECT_EQ(parsed(call("GET", "/nope")), json({{"detail", "Not Found"}}));
  EXPECT_EQ(call("PUT", "/jobs").status, 405);
  EXPECT_EQ(call("POST", "/jobs/batch_size").status, 405);
  EXPECT_EQ(call("GET", "/report").status, 405);
  EXPECT_EQ(call("POST", "/trials").status, 405);
  EXPECT_EQ(call("GET", "/jobs/a/b").status, 404);
  const Response health = call("GET", "/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(parsed(health)["status"], "ok");
}

TEST_P(ServiceTest, ConcurrentClientsOnOneJobAreSerialised) {
  const std::string job = register_job("synthetic-c", std::nullopt);
  constexpr int kThreads = 8;
  constexpr int kTrialsPerThread = 5;
  std::vector<std::thread> threads;
  std::atomic<int> reports{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kTrialsPerThread; ++i) {
        const Response got = next(job, fmt::format("n-{}-{}", t, i));
        if (got.status != 200) {
          ADD_FAILURE() << got.body;
          return;
        }
        const auto trial = bso::TrialId::from_json(parsed(got));
        for (int64_t epoch = 1; epoch <= 10; ++epoch) {
          const Response response =
              call("POST", "/report", SyntheticTraining::result(*trial, epoch).to_json(),
                   fmt::format("r-{}-{}-{}", t, i, epoch));
          ++reports;
          if (parsed(response)["stop_train"] == true) {
            break;
          }
        }
        call("PATCH", "/trials", trial->to_json());
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  const json state = status(job);
  EXPECT_EQ(state["counts"]["trials"], kThreads * kTrialsPerThread);
  EXPECT_EQ(state["counts"]["reports"], reports.load());
  std::set<int64_t> numbers;
  for (const auto& trial : state["trials"]) {
    numbers.insert(trial["trial_number"].get<int64_t>());
  }
  EXPECT_EQ(numbers.size(), static_cast<size_t>(kThreads * kTrialsPerThread));
}

INSTANTIATE_TEST_SUITE_P(Stores, ServiceTest, ::testing::Values("memory:", "sqlite:"),
                         [](const auto& param_info) {
                           return param_info.param == "memory:" ? "Memory" : "Sqlite";
                         });

// A store that is down, or that throws: 503 and 500, never a crash.
class BrokenStore final : public store::Store {
 public:
  explicit BrokenStore(bool throws) : throws_(throws) {}
  Result<void> run(const std::function<Result<void>(store::Transaction&)>&) override {
    if (throws_) {
      throw std::runtime_error("boom");
    }
    return fail(ErrorCode::kIo, "connection refused");
  }
  std::string description() const override { return "broken:"; }
  int schema_version() const override { return 1; }

 private:
  bool throws_;
};

TEST(Service, StoreFailuresAre503AndExceptions500) {
  server::Service down(std::make_shared<BrokenStore>(false));
  Request request{"GET", "/jobs/batch_size", {{"job_id", "x"}}, "", "", std::nullopt};
  Response response = down.handle(request);
  EXPECT_EQ(response.status, 503);
  EXPECT_NE(response.body.find("connection refused"), std::string::npos);
  EXPECT_EQ(down.handle({"GET", "/healthz", {}, "", "", std::nullopt}).status, 503);

  server::Service throwing(std::make_shared<BrokenStore>(true));
  response = throwing.handle(request);
  EXPECT_EQ(response.status, 500);
  EXPECT_NE(response.body.find("boom"), std::string::npos);
}

}  // namespace
}  // namespace joule::test
