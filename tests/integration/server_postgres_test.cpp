// SPDX-License-Identifier: Apache-2.0
// Several `joule serve` processes on one PostgreSQL: 64 concurrent clients spread over 2 servers, every
// report accounted exactly once; a server killed with SIGKILL mid-load and restarted: every report that got
// a 2xx is in the database, once. The database comes from the `postgres` CTest fixture
// (scripts/start-postgres writes its URL to ${CMAKE_BINARY_DIR}/postgres/url); without it the tests skip.
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "joule/client/client.hpp"

#include "integration/server_process.hpp"
#include "server/server_test_util.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using nlohmann::json;

constexpr int kClients = 64;
constexpr int kJobs = 16;  // 4 clients share each job, through both servers

std::optional<std::string> postgres_url() {
  if (const char* url = std::getenv("JOULE_TEST_POSTGRES_URL"); url != nullptr && *url != '\0') {
    return url;
  }
  return read_first_line(std::string(JOULE_BUILD_DIR) + "/postgres/url");
}

// What the clients saw, to compare with what the servers stored.
struct Ledger {
  std::mutex mutex;
  // (job, trial) → (2xx reports, last epoch reported)
  std::map<std::pair<std::string, int64_t>, std::pair<int64_t, int64_t>> trials;
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> failures{0};

  void trial(const std::string& job, int64_t number) {
    std::lock_guard lock(mutex);
    trials.try_emplace({job, number}, 0, 0);
  }
  void report(const std::string& job, int64_t number, int64_t epoch) {
    std::lock_guard lock(mutex);
    auto& entry = trials[{job, number}];
    ++entry.first;
    entry.second = epoch;
  }
};

// One client: trials on its job until `stop`, each trial's epochs reported until the server says stop.
void run_client(const std::string& urls, const std::string& job_id, int index, const std::atomic<bool>& stop,
                Ledger& ledger) {
  client::ClientOptions options;
  options.attempts = 60;  // rides out a server restart (failing over to the other server meanwhile)
  options.backoff = std::chrono::milliseconds(20);
  options.max_backoff = std::chrono::milliseconds(250);
  options.timeout = std::chrono::milliseconds(30000);
  auto client = client::Client::connect(urls, options);
  if (!client) {
    ++ledger.failures;
    return;
  }
  std::mt19937 random(static_cast<unsigned>(index));
  while (!stop) {
    auto trial = client->next_batch_size(job_id);
    ++ledger.requests;
    if (!trial) {
      ADD_FAILURE() << "client " << index << ": " << trial.error().message();
      ++ledger.failures;
      return;
    }
    ledger.trial(job_id, trial->trial_number);
    // Reports of a trial ended by a crash: a few trials end early, as a crashed client would.
    const bool crashes = random() % 10 == 0;
    for (int64_t epoch = 1; !crashes && !stop; ++epoch) {
      const auto response = client->report(SyntheticTraining::result(*trial, epoch));
      ++ledger.requests;
      if (!response) {
        ADD_FAILURE() << "client " << index << ": " << response.error().message();
        ++ledger.failures;
        return;
      }
      ledger.report(job_id, trial->trial_number, epoch);
      if (response->stop_train) {
        break;
      }
    }
    const auto ended = client->end_trial(*trial);
    ++ledger.requests;
    if (!ended) {
      ADD_FAILURE() << "client " << index << ": " << ended.error().message();
      ++ledger.failures;
      return;
    }
  }
}

// Every trial a client got is stored, with exactly the reports that got a 2xx, and nothing else.
void expect_accounted(const std::string& url, const std::vector<std::string>& jobs, const Ledger& ledger) {
  auto client = value_or_throw(client::Client::connect(url));
  size_t trials = 0;
  int64_t reports = 0;
  for (const auto& job : jobs) {
    // Every trial, a page of up to 1000 at a time.
    json all_trials = json::array();
    std::optional<int64_t> before;
    std::optional<json> status;
    do {
      auto page = client.job_status(job, 1000, before);
      ASSERT_TRUE(page) << page.error().message();
      for (const auto& trial : page->document["trials"]) {
        all_trials.push_back(trial);
      }
      before = page->trials_page.next_before;
      status = std::move(page->document);
    } while (before);
    EXPECT_EQ(static_cast<int64_t>(all_trials.size()), (*status)["counts"]["trials"].get<int64_t>()) << job;
    for (const auto& trial : all_trials) {
      const auto found = ledger.trials.find({job, trial["trial_number"].get<int64_t>()});
      ASSERT_NE(found, ledger.trials.end()) << job << " trial " << trial["trial_number"] << " nobody got";
      EXPECT_EQ(trial["reports"].get<int64_t>(), found->second.first)
          << job << " trial " << trial["trial_number"];
      EXPECT_EQ(trial["last_epoch"].get<int64_t>(), found->second.second)
          << job << " trial " << trial["trial_number"];
      ++trials;
      reports += trial["reports"].get<int64_t>();
    }
    EXPECT_EQ((*status)["counts"]["dispatched"], 0) << job;
  }
  EXPECT_EQ(trials, ledger.trials.size());
  int64_t sent = 0;
  for (const auto& [key, entry] : ledger.trials) {
    sent += entry.first;
  }
  EXPECT_EQ(reports, sent);
  std::cout << fmt::format("[ accounted ] {} jobs, {} trials, {} reports, {} requests\n", jobs.size(), trials,
                           reports, ledger.requests.load());
}

class ServePostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto url = postgres_url();
    if (!url) {
      GTEST_SKIP() << "no PostgreSQL: the `postgres` fixture did not write " << JOULE_BUILD_DIR
                   << "/postgres/url";
    }
    url_ = *url;
    auto opened = store::open_store(url_);
    if (!opened) {
      GTEST_SKIP() << "cannot open " << url_ << ": " << opened.error().message();
    }
  }

  std::vector<std::string> register_jobs(const std::string& server_url, const std::string& prefix) {
    auto client = value_or_throw(client::Client::connect(server_url));
    std::vector<std::string> jobs;
    for (int i = 0; i < kJobs; ++i) {
      bso::JobSpec spec = synthetic_spec(std::nullopt, static_cast<uint64_t>(i));
      spec.job_id_prefix = prefix;
      jobs.push_back(*value_or_throw(client.register_job(spec, synthetic_gpu())).spec.job_id);
    }
    return jobs;
  }

  std::string url_;
};

TEST_F(ServePostgresTest, SixtyFourClientsOnTwoServersAccountEveryReportOnce) {
  ServeProcess a(url_);
  ServeProcess b(url_);
  const std::string both = a.url() + "," + b.url();
  const auto jobs = register_jobs(a.url(), fmt::format("pg{:x}", std::random_device()()));
  Ledger ledger;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back(run_client, both, jobs[static_cast<size_t>(i % kJobs)], i, std::cref(stop),
                         std::ref(ledger));
  }
  std::this_thread::sleep_for(std::chrono::seconds(6));
  stop = true;
  for (auto& client : clients) {
    client.join();
  }
  EXPECT_EQ(ledger.failures, 0);
  EXPECT_GT(ledger.requests, 500);
  expect_accounted(b.url(), jobs, ledger);
  EXPECT_EQ(a.stop().exit_code, 0);
  EXPECT_EQ(b.stop().exit_code, 0);
}

TEST_F(ServePostgresTest, KillNineMidLoadThenRestartLosesNoAcknowledgedReport) {
  auto a = std::make_unique<ServeProcess>(url_);
  ServeProcess b(url_);
  const int port_a = a->port();
  const std::string both = a->url() + "," + b.url();
  const auto jobs = register_jobs(b.url(), fmt::format("kill{:x}", std::random_device()()));
  Ledger ledger;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back(run_client, both, jobs[static_cast<size_t>(i % kJobs)], i, std::cref(stop),
                         std::ref(ledger));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t before_kill = ledger.requests;
  EXPECT_EQ(a->stop(SIGKILL).exit_code, 128 + SIGKILL);  // mid-transaction for some clients
  std::this_thread::sleep_for(std::chrono::seconds(1));
  a = std::make_unique<ServeProcess>(url_, port_a);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  stop = true;
  for (auto& client : clients) {
    client.join();
  }
  EXPECT_EQ(ledger.failures, 0);
  EXPECT_GT(ledger.requests, before_kill);
  expect_accounted(a->url(), jobs, ledger);
  EXPECT_EQ(a->stop().exit_code, 0);
  EXPECT_EQ(b.stop().exit_code, 0);
}

// PostgreSQL itself restarts under load (every connection cut, 2 s down): the servers answer 503 meanwhile,
// the clients retry with their request ids, and afterwards every acknowledged report is stored exactly once.
// On a PostgreSQL of its own (restarting the fixture's would break the tests running beside this one).
TEST_F(ServePostgresTest, PostgresRestartMidLoadLosesNoAcknowledgedReport) {
  if (std::getenv("JOULE_TEST_POSTGRES_URL") != nullptr) {
    GTEST_SKIP() << "JOULE_TEST_POSTGRES_URL points at a server this test must not restart";
  }
  TempDir dir;
  const std::string scripts = std::string(JOULE_SOURCE_DIR) + "/scripts/";
  const auto started = run({scripts + "start-postgres", dir.path() + "/pg"});
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const std::string url = started.out.substr(0, started.out.find('\n'));
  ServeProcess a(url);
  ServeProcess b(url);
  const auto jobs = register_jobs(a.url(), fmt::format("pgre{:x}", std::random_device()()));
  Ledger ledger;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back(run_client, a.url() + "," + b.url(), jobs[static_cast<size_t>(i % kJobs)], i,
                         std::cref(stop), std::ref(ledger));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int64_t before_restart = ledger.requests;
  const auto restarted = run({scripts + "restart-postgres", dir.path() + "/pg", "2"});
  EXPECT_EQ(restarted.exit_code, 0) << restarted.err;
  std::this_thread::sleep_for(std::chrono::seconds(3));
  stop = true;
  for (auto& client : clients) {
    client.join();
  }
  EXPECT_EQ(ledger.failures, 0);
  EXPECT_GT(ledger.requests, before_restart + 100) << "the clients went on after the restart";
  expect_accounted(b.url(), jobs, ledger);
  EXPECT_EQ(a.stop().exit_code, 0);
  EXPECT_EQ(b.stop().exit_code, 0);
  (void)run({scripts + "stop-postgres", dir.path() + "/pg"});
}

}  // namespace
}  // namespace joule::test
