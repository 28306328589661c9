// SPDX-License-Identifier: Apache-2.0
// The service against hostile and careless clients (issue 11): bodies nested 100,000 levels deep, numbers
// no double holds, out-of-range values, ids longer than any column, a client that asks for trials and never
// reports, and a job whose history grows. Every refusal names its field and changes nothing; no request's
// cost grows with the job's history (counted in bytes and rows the store touches, not in time).
#include <atomic>
#include <random>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "server/service_fixture.hpp"

namespace joule::test {
namespace {

std::string deeply_nested(size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// Counts what transactions read and write, passing everything through to the real store.
class CountingStore final : public store::Store {
 public:
  struct Counts {
    std::atomic<int64_t> bytes_read{0};
    std::atomic<int64_t> bytes_written{0};
    std::atomic<int64_t> items_read{0};
    void reset() {
      bytes_read = 0;
      bytes_written = 0;
      items_read = 0;
    }
  };

  explicit CountingStore(std::shared_ptr<store::Store> inner) : inner_(std::move(inner)) {}

  Result<void> run(const std::function<Result<void>(store::Transaction&)>& work) override {
    return inner_->run([&](store::Transaction& transaction) {
      Counting counting(transaction, counts_);
      return work(counting);
    });
  }
  std::string description() const override { return inner_->description(); }
  int schema_version() const override { return inner_->schema_version(); }
  Counts& counts() { return counts_; }

 private:
  class Counting final : public store::Transaction {
   public:
    Counting(store::Transaction& inner, Counts& counts) : inner_(inner), counts_(counts) {}
    Result<std::optional<store::Document>> get_for_update(std::string_view kind,
                                                          std::string_view key) override {
      auto found = inner_.get_for_update(kind, key);
      if (found && *found) {
        counts_.bytes_read += static_cast<int64_t>((*found)->body.size());
      }
      return found;
    }
    Result<bool> insert(std::string_view kind, std::string_view key, std::string_view body) override {
      counts_.bytes_written += static_cast<int64_t>(body.size());
      return inner_.insert(kind, key, body);
    }
    Result<void> update(std::string_view kind, std::string_view key, std::string_view body) override {
      counts_.bytes_written += static_cast<int64_t>(body.size());
      return inner_.update(kind, key, body);
    }
    Result<bool> erase(std::string_view kind, std::string_view key) override {
      return inner_.erase(kind, key);
    }
    Result<std::vector<std::string>> keys(std::string_view kind, std::string_view prefix) override {
      return inner_.keys(kind, prefix);
    }
    Result<std::optional<store::Item>> get_item(std::string_view kind, std::string_view key,
                                                int64_t number) override {
      auto found = inner_.get_item(kind, key, number);
      if (found && *found) {
        ++counts_.items_read;
        counts_.bytes_read += static_cast<int64_t>((*found)->body.size());
      }
      return found;
    }
    Result<void> put_item(std::string_view kind, std::string_view key, const store::Item& item) override {
      counts_.bytes_written += static_cast<int64_t>(item.body.size());
      return inner_.put_item(kind, key, item);
    }
    Result<std::vector<store::Item>> items(std::string_view kind, std::string_view key,
                                           const store::ItemQuery& query) override {
      auto found = inner_.items(kind, key, query);
      if (found) {
        for (const auto& item : *found) {
          ++counts_.items_read;
          counts_.bytes_read += static_cast<int64_t>(item.body.size());
        }
      }
      return found;
    }
    Result<int64_t> erase_items(std::string_view kind, std::string_view key) override {
      return inner_.erase_items(kind, key);
    }
    Result<std::optional<std::string>> find_response(std::string_view request_id) override {
      return inner_.find_response(request_id);
    }
    Result<void> save_response(std::string_view request_id, std::string_view response) override {
      return inner_.save_response(request_id, response);
    }
    Result<int64_t> erase_responses_older_than(std::chrono::seconds age, size_t max_rows) override {
      return inner_.erase_responses_older_than(age, max_rows);
    }

   private:
    store::Transaction& inner_;
    Counts& counts_;
  };

  std::shared_ptr<store::Store> inner_;
  Counts counts_;
};

class ServiceLimitsTest : public ServiceTest {
 protected:
  server::ServiceOptions service_options() override {
    server::ServiceOptions options;
    options.max_open_trials = 3;
    return options;
  }

  // A job whose every trial is handed out and ended at once (what a client that asks and gives up does).
  void churn(const std::string& job, int trials) {
    for (int i = 0; i < trials; ++i) {
      const Response trial = next(job);
      ASSERT_EQ(trial.status, 200) << trial.body;
      ASSERT_EQ(call("PATCH", "/trials", parsed(trial)).status, 200);
    }
  }
};

TEST_P(ServiceLimitsTest, DeeplyNestedBodiesAreRefusedOnEveryRoute) {
  const std::string deep = deeply_nested(100000);
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/jobs"}, {"POST", "/report"}, {"PATCH", "/trials"}}) {
    const Response response = call(method, path, deep);
    EXPECT_EQ(response.status, 422) << method << " " << path;
    EXPECT_EQ(parsed(response)["detail"][0]["type"], "value_error.jsondecode");
    EXPECT_NE(response.body.find("nested deeper than 64 levels"), std::string::npos) << response.body;
    EXPECT_LT(response.body.size(), 1000U) << "the error must not echo the body";
  }
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/pipelines"}, {"POST", "/pipelines/none/straggler"}}) {
    const Response response = call(method, path, deep);
    EXPECT_EQ(response.status, 400) << method << " " << path;
    EXPECT_NE(parsed(response)["message"].get<std::string>().find("nested deeper than 64 levels"),
              std::string::npos)
        << response.body;
    EXPECT_LT(response.body.size(), 1000U);
  }
  // A profile upload to a pipeline that exists.
  const Response pipeline =
      call("POST", "/pipelines", json{{"pipeline_id", "pipeline-deep"}, {"stages", 2}, {"microbatches", 4}});
  ASSERT_EQ(pipeline.status, 201) << pipeline.body;
  const Response profile = call("PUT", "/pipelines/pipeline-deep/profile", "{\"rows\": " + deep + "}");
  EXPECT_EQ(profile.status, 400);
  std::string path = "rows";
  for (int level = 0; level < 39; ++level) {
    path += "[0]";
  }
  EXPECT_EQ(
      parsed(profile)["message"].get<std::string>(),
      "profile: malformed JSON: " + path.substr(0, 120) + "…: the document is nested deeper than 64 levels");
  EXPECT_EQ(parsed(call("GET", "/pipelines/pipeline-deep"))["has_profile"], false);
}

TEST_P(ServiceLimitsTest, NumbersNoDoubleHoldsAreBadInputNamingTheField) {
  json body = register_body(synthetic_spec("synthetic-o"), synthetic_gpu());
  std::string text = body.dump();
  text.replace(text.find("\"max_power\":300.0"), 17, "\"max_power\":1e999");
  const Response overflow = call("POST", "/jobs", text);
  EXPECT_EQ(overflow.status, 422);
  EXPECT_EQ(parsed(overflow), json::parse(R"j({"detail": [{"loc": ["body", "max_power"],
      "msg": "the number 1e999 is out of range (a finite number within ±1.8e308 is expected)",
      "type": "value_error"}]})j"));
  EXPECT_EQ(call("GET", "/jobs/synthetic-o").status, 404);

  const Response straggler =
      call("POST", "/pipelines/none/straggler", std::string(R"({"iteration_time_s": -1e999})"));
  EXPECT_EQ(straggler.status, 400);
  EXPECT_EQ(
      parsed(straggler)["message"],
      "iteration_time_s: the number -1e999 is out of range (a finite number within ±1.8e308 is expected)");
}

TEST_P(ServiceLimitsTest, OutOfRangeReportsAreRefusedNamingTheFieldAndChangeNothing) {
  const std::string job = register_job("synthetic-n");
  ASSERT_EQ(next(job).status, 200);
  const json before = status(job);
  const auto refused = [&](const std::string& field, const json& value, const std::string& message) {
    json report = SyntheticTraining::result({job, 32, 1}, 1).to_json();
    report[field] = value;
    const Response response = call("POST", "/report", report);
    EXPECT_EQ(response.status, 422) << field;
    EXPECT_EQ(parsed(response)["detail"][0]["loc"], json({"body", field})) << response.body;
    EXPECT_EQ(parsed(response)["detail"][0]["msg"], message) << response.body;
  };
  refused("current_epoch", -1, "ensure this value is greater than or equal to 0");
  refused("time", 2e9, "ensure this value is less than or equal to 1e+09 (s, about 31.7 years)");
  refused("energy", 1e300, "ensure this value is less than or equal to 1e+15 (J, 278 GWh)");
  refused("metric", "high", "value is not a valid float");
  refused("current_epoch", 1.5, "value is not a valid integer");
  refused("job_id", std::string(401, 'x'), "ensure this value has at most 400 characters");
  EXPECT_EQ(status(job), before);

  // A negative batch size or trial number is an unknown trial (Zeus's 400), changing nothing either.
  json report = SyntheticTraining::result({job, 32, 1}, 1).to_json();
  report["batch_size"] = -32;
  EXPECT_EQ(call("POST", "/report", report).status, 400);
  report["batch_size"] = 32;
  report["trial_number"] = -1;
  EXPECT_EQ(call("POST", "/report", report).status, 400);
  EXPECT_EQ(status(job), before);
}

TEST_P(ServiceLimitsTest, OutOfRangeRegistrationsAreRefusedNamingTheField) {
  const auto refused = [&](const json& body, const json& loc, const std::string& message) {
    const Response response = call("POST", "/jobs", body);
    EXPECT_EQ(response.status, 422) << body.dump();
    EXPECT_EQ(parsed(response)["detail"][0]["loc"], loc) << response.body;
    EXPECT_EQ(parsed(response)["detail"][0]["msg"], message) << response.body;
  };
  json body = register_body(synthetic_spec("synthetic-g"), synthetic_gpu());
  body["max_power"] = 2e9;
  refused(body, json({"body", "max_power"}), "ensure this value is less than or equal to 1e+09");
  body = register_body(synthetic_spec("synthetic-g"), synthetic_gpu());
  body["number_of_gpus"] = 20'000'000;
  refused(body, json({"body", "number_of_gpus"}), "ensure this value is less than or equal to 10000000");
  body = register_body(synthetic_spec("synthetic-g"), synthetic_gpu());
  body["gpu_model"] = std::string(300, 'A');
  refused(body, json({"body", "gpu_model"}), "ensure this value has at most 256 characters");
  body = register_body(synthetic_spec("synthetic-g"), synthetic_gpu());
  body["batch_sizes"] = json::array();
  for (int b = 1; b <= 2000; ++b) {
    body["batch_sizes"].push_back(b);
  }
  refused(body, json({"body", "batch_sizes"}), "2000 batch sizes given; a job explores at most 1024");
  body = register_body(synthetic_spec("synthetic-g"), synthetic_gpu());
  body["max_epochs"] = -5;
  refused(body, json({"body", "max_epochs"}), "ensure this value is greater than 0");
  EXPECT_EQ(call("GET", "/jobs/synthetic-g").status, 404);

  // A job id in the query longer than any stored one is refused before it is looked up or echoed.
  const Response long_id = next(std::string(5000, 'j'));
  EXPECT_EQ(long_id.status, 422);
  EXPECT_EQ(parsed(long_id)["detail"][0]["loc"], json({"query", "job_id"}));
  EXPECT_LT(long_id.body.size(), 1000U);
}

TEST_P(ServiceLimitsTest, OpenTrialsPerJobAreBounded) {
  const std::string job = register_job("synthetic-b");
  std::vector<json> trials;
  for (int i = 0; i < 3; ++i) {
    const Response trial = next(job);
    ASSERT_EQ(trial.status, 200) << trial.body;
    trials.push_back(parsed(trial));
  }
  const json before = status(job);
  const Response refused = next(job);
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(
      parsed(refused)["message"],
      "job synthetic-b already has 3 trials in progress, the most this server hands out: end finished or "
      "abandoned ones (POST /report with their result, or PATCH /trials) before asking for another");
  EXPECT_EQ(status(job), before);
  // Ending one makes room for one.
  ASSERT_EQ(call("PATCH", "/trials", trials[1]).status, 200);
  EXPECT_EQ(next(job).status, 200);
  EXPECT_EQ(next(job).status, 409);
  EXPECT_EQ(status(job)["counts"]["trials"], 4);
}

TEST_P(ServiceLimitsTest, StatusPagesThroughTheTrials) {
  const std::string job = register_job("synthetic-p");
  churn(job, 7);
  const auto page = [&](std::map<std::string, std::string> query) {
    const Response response = call("GET", "/jobs/" + job, "", std::move(query));
    EXPECT_EQ(response.status, 200) << response.body;
    return parsed(response);
  };
  const auto numbers = [](const json& state) {
    std::vector<int64_t> out;
    for (const auto& trial : state["trials"]) {
      out.push_back(trial["trial_number"].get<int64_t>());
    }
    return out;
  };
  const json all = page({});
  EXPECT_EQ(numbers(all), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(all["trials_page"], json({{"limit", 100}, {"before", nullptr}, {"next_before", nullptr}}));
  const json newest = page({{"limit", "3"}});
  EXPECT_EQ(numbers(newest), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(newest["trials_page"]["next_before"], 5);
  const json older = page({{"limit", "3"}, {"before", "5"}});
  EXPECT_EQ(numbers(older), (std::vector<int64_t>{2, 3, 4}));
  const json oldest = page({{"limit", "3"}, {"before", "2"}});
  EXPECT_EQ(numbers(oldest), (std::vector<int64_t>{1}));
  EXPECT_EQ(oldest["trials_page"]["next_before"], nullptr);
  EXPECT_EQ(oldest["counts"]["trials"], 7);
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"limit", "0"}, {"limit", "1001"}, {"limit", "ten"}, {"before", "-1"}}) {
    const Response bad = call("GET", "/jobs/" + job, "", {{name, value}});
    EXPECT_EQ(bad.status, 422) << name << "=" << value;
    EXPECT_EQ(parsed(bad)["detail"][0]["loc"], json({"query", name}));
  }
}

TEST_P(ServiceLimitsTest, ARequestTouchesTheSameDataWhateverTheJobsHistory) {
  auto counting = std::make_shared<CountingStore>(store_);
  service_ = std::make_unique<server::Service>(counting, service_options());
  const std::string job = register_job("synthetic-h");
  // What one round of a client costs the store: ask, report an epoch, end.
  const auto one_round = [&] {
    counting->counts().reset();
    const Response trial = next(job);
    EXPECT_EQ(trial.status, 200) << trial.body;
    const json id = parsed(trial);
    const bso::TrialId trial_id{job, id["batch_size"].get<int64_t>(), id["trial_number"].get<int64_t>()};
    EXPECT_EQ(call("POST", "/report", SyntheticTraining::result(trial_id, 1).to_json()).status, 200);
    EXPECT_EQ(call("PATCH", "/trials", id).status, 200);
    return std::array<int64_t, 3>{counting->counts().bytes_read.load(),
                                  counting->counts().bytes_written.load(),
                                  counting->counts().items_read.load()};
  };
  churn(job, 20);
  const auto early = one_round();
  churn(job, 2000);
  const auto late = one_round();
  // Within a few bytes (trial numbers and counts gain digits); a whole-history document would be 100× more.
  EXPECT_LE(late[0], early[0] + 64) << "bytes read: after 21 trials " << early[0] << ", after 2022 "
                                    << late[0];
  EXPECT_LE(late[1], early[1] + 64) << "bytes written: after 21 trials " << early[1] << ", after 2022 "
                                    << late[1];
  EXPECT_EQ(late[2], early[2]) << "trial records read";
}

// Two services on one database (two `joule serve` replicas), calls alternating between them: each keeps its
// own caches of parsed jobs and succeeded trials, checked against the stored job, so their decisions are
// still exactly the library's (MAB with window_size 0 refits on every past result).
TEST_P(ServiceLimitsTest, TwoServicesOnOneDatabaseDecideExactlyAsTheLibrary) {
  server::Service other(store_, service_options());
  const std::string job_id = "synthetic-two";
  register_job(job_id, 42);
  auto library = bso::BatchSizeJob::create(synthetic_spec(job_id, 42), synthetic_gpu());
  ASSERT_TRUE(library);
  std::mt19937 random(5);  // which service takes each call
  const auto handle = [&](const std::string& method, const std::string& path, const std::string& body,
                          std::map<std::string, std::string> query = {}) {
    Request request{method, path, std::move(query), body, "application/json", std::nullopt};
    return random() % 2 == 0 ? other.handle(request) : service_->handle(request);
  };
  for (int round = 0; round < 40; ++round) {
    const Response response = handle("GET", "/jobs/batch_size", "", {{"job_id", job_id}});
    ASSERT_EQ(response.status, 200) << response.body;
    const auto expected = library->next_trial(0);
    ASSERT_TRUE(expected);
    ASSERT_EQ(parsed(response), expected->to_json()) << "round " << round;
    for (int64_t epoch = 1;; ++epoch) {
      const auto result = SyntheticTraining::result(*expected, epoch);
      const Response reported = handle("POST", "/report", result.to_json().dump());
      ASSERT_EQ(reported.status, 200) << reported.body;
      const auto decided = library->report(result, 0);
      ASSERT_TRUE(decided);
      ASSERT_EQ(parsed(reported), decided->to_json()) << "round " << round << " epoch " << epoch;
      if (decided->stop_train) {
        break;
      }
    }
  }
  const json state = status(job_id);
  EXPECT_EQ(state["stage"], "MAB");
  EXPECT_EQ(state["arms"], library->to_json()["arms"]);
}

// Stored responses (for retries) live response_ttl, then go a batch at a time: the database does not grow
// with every request for ever.
TEST_P(ServiceLimitsTest, StoredResponsesArePrunedAfterTheirTimeToLive) {
  server::ServiceOptions options = service_options();
  options.response_ttl = std::chrono::seconds(1);
  service_ = std::make_unique<server::Service>(store_, options);
  const std::string job = register_job("synthetic-ttl");
  ASSERT_EQ(next(job).status, 200);
  const json first = SyntheticTraining::result({job, 32, 1}, 1).to_json();
  ASSERT_EQ(call("POST", "/report", first, "first").status, 200);
  EXPECT_TRUE(call("POST", "/report", first, "first").replayed);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  for (int i = 0; i < 600; ++i) {
    ASSERT_EQ(
        call("POST", "/report", SyntheticTraining::result({job, 32, 1}, 2).to_json(), fmt::format("r-{}", i))
            .status,
        200);
  }
  // "first" is gone: its retry is a new request now; the recent ones still replay.
  EXPECT_FALSE(call("POST", "/report", first, "first").replayed);
  EXPECT_TRUE(
      call("POST", "/report", SyntheticTraining::result({job, 32, 1}, 2).to_json(), "r-599").replayed);
  EXPECT_EQ(status(job)["counts"]["reports"], 602);
}

// A corrupt stored job or trial (a bad disk, a hand edit): its requests are 500 naming what is corrupt, and
// the other jobs are served as before.
TEST_P(ServiceLimitsTest, CorruptStoredStateIsA500NamingItAndOtherJobsGoOn) {
  const std::string broken = register_job("synthetic-broken");
  const std::string fine = register_job("synthetic-fine");
  ASSERT_EQ(next(broken).status, 200);
  ASSERT_TRUE(store_->run([&](store::Transaction& transaction) -> Result<void> {
    return transaction.put_item("bso_job", broken, {1, 0, "{\"trial\": \x01"});
  }));
  const Response report = call("POST", "/report", SyntheticTraining::result({broken, 32, 1}, 1).to_json());
  EXPECT_EQ(report.status, 500);
  EXPECT_TRUE(parsed(report)["message"].get<std::string>().starts_with(
      "the stored trial 1 of job synthetic-broken is corrupt: "))
      << report.body;
  ASSERT_TRUE(store_->run([&](store::Transaction& transaction) -> Result<void> {
    return transaction.update("bso_job", broken, "not json at all");
  }));
  const Response corrupt = next(broken);
  EXPECT_EQ(corrupt.status, 500);
  EXPECT_TRUE(parsed(corrupt)["message"].get<std::string>().starts_with(
      "the stored job synthetic-broken is corrupt: "))
      << corrupt.body;
  EXPECT_EQ(next(fine).status, 200);
  EXPECT_EQ(status(fine)["counts"]["trials"], 1);
}

INSTANTIATE_TEST_SUITE_P(Stores, ServiceLimitsTest, ::testing::Values("memory:", "sqlite:"),
                         [](const auto& param_info) {
                           return param_info.param == "memory:" ? "Memory" : "Sqlite";
                         });

}  // namespace
}  // namespace joule::test
