// SPDX-License-Identifier: Apache-2.0
// Live Perseus against hostile and careless clients (docs/reliability.md): waits that hold no thread and end
// when their client goes or the server stops, round numbers and request ids against repeated results,
// implausible measurements, results too large for the body limit, guessable ids, idle and deleted jobs, the
// registration rate, planning that fails, documents of an earlier joule, and the per-job metrics.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <regex>
#include <thread>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "joule/core/clock.hpp"
#include "joule/plan/pipeline.hpp"
#include "joule/server/http_server.hpp"
#include "joule/server/service.hpp"

#include "plan/live_v1_document.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using nlohmann::json;
using server::Request;
using server::Response;

// The 15 highest A100 clocks (MHz): few enough that planning is quick.
json top_clocks_mhz() {
  json list = json::array();
  for (int mhz = 1410; mhz >= 1200; mhz -= 15) {
    list.push_back(mhz);
  }
  return list;
}

// A plausible result of `schedule` (every computation ~12 ms, ~2.3 J, printed with every digit as Python
// does; a quarter more time waiting).
json result_of(const json& schedule) {
  const int iterations = schedule.at("iterations").get<int>();
  std::map<std::string, size_t> counts;
  for (const json& entry : schedule.at("frequencies")) {
    ++counts[entry.at(0).get<std::string>()];
  }
  json time_breakdown = json::object();
  json energy_breakdown = json::object();
  size_t computations = 0;
  for (const auto& [name, count] : counts) {
    time_breakdown[name] = std::vector<std::vector<double>>(static_cast<size_t>(iterations),
                                                            std::vector<double>(count, 0.012345678901234567));
    energy_breakdown[name] = std::vector<std::vector<double>>(static_cast<size_t>(iterations),
                                                              std::vector<double>(count, 2.3456789012345678));
    computations += count;
  }
  const auto n = static_cast<double>(computations);
  return {{"rank", schedule.at("rank")},
          {"round", schedule.at("round")},
          {"iter_time", std::vector<double>(static_cast<size_t>(iterations), n * 0.0155)},
          {"iter_energy", std::vector<double>(static_cast<size_t>(iterations), n * 2.4 + n * 0.003 * 60)},
          {"time_breakdown", time_breakdown},
          {"energy_breakdown", energy_breakdown}};
}

// The answer a sink got, waited for.
class CapturingSink : public server::ResponseSink {
 public:
  void respond(Response response) override {
    std::lock_guard lock(mutex_);
    if (!response_) {
      response_ = std::move(response);
      answered_.notify_all();
    }
  }
  void on_cancel(std::function<void()> /*callback*/) override {}
  std::optional<Response> wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    answered_.wait_for(lock, timeout, [&] { return response_.has_value(); });
    return response_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable answered_;
  std::optional<Response> response_;
};

class LiveLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override { open({}); }

  void open(const server::ServiceOptions& options) {
    service_.reset();
    store_ = std::shared_ptr<store::Store>(std::move(*store::open_store("memory:")));
    service_ = std::make_unique<server::Service>(store_, options);
  }

  Response call(const std::string& method, const std::string& path, const json& body = nullptr,
                std::map<std::string, std::string> query = {}, std::optional<std::string> request_id = {},
                const std::string& peer = "") {
    Request request;
    request.method = method;
    request.path = path;
    request.query = std::move(query);
    request.request_id = std::move(request_id);
    request.peer = peer;
    if (!body.is_null()) {
      request.body = body.dump();
    }
    return service_->handle(request);
  }

  static json detail(const Response& response) { return json::parse(response.body)["detail"]; }

  std::string register_job(int pp, int dp, int microbatches = 4, const std::string& peer = "") {
    const Response response = call("POST", "/register_job",
                                   {{"job_id", ""},
                                    {"pp_degree", pp},
                                    {"dp_degree", dp},
                                    {"tp_degree", 1},
                                    {"world_size", pp * dp},
                                    {"job_metadata", "test"},
                                    {"num_microbatches", microbatches}},
                                   {}, {}, peer);
    EXPECT_EQ(response.status, 200) << response.body;
    return response.status == 200 ? json::parse(response.body).get<std::string>() : "";
  }

  void register_rank(const std::string& job, int rank, int pp) {
    const Response response = call("POST", "/register_rank/" + job,
                                   {{"rank", rank},
                                    {"dp_rank", rank / pp},
                                    {"pp_rank", rank % pp},
                                    {"tp_rank", 0},
                                    {"available_frequencies", top_clocks_mhz()}});
    ASSERT_EQ(response.status, 200) << response.body;
  }

  json schedule(const std::string& job, int rank, const std::string& wait_s = "30") {
    const Response response =
        call("GET", "/schedule/" + job, nullptr, {{"rank", std::to_string(rank)}, {"wait_s", wait_s}});
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body);
  }

  // One round of every rank; @return rank 0's schedule.
  json round(const std::string& job, int ranks) {
    json first;
    for (int rank = 0; rank < ranks; ++rank) {
      const json got = schedule(job, rank);
      if (rank == 0) {
        first = got;
      }
      const Response reported = call("POST", "/result/" + job, result_of(got));
      EXPECT_EQ(reported.status, 200) << reported.body;
    }
    return first;
  }

  std::shared_ptr<store::Store> store_;
  std::unique_ptr<server::Service> service_;
};

TEST_F(LiveLimitsTest, JobIdsCarry64RandomBits) {
  const std::string first = register_job(2, 1);
  const std::string second = register_job(2, 1);
  const std::regex pattern(
      R"(\d{4}-\d{2}-\d{2}-\d{2}-\d{2}-\d{2}\+dp1\+pp2\+tp1\+perseus\+test\+[0-9a-f]{16})");
  EXPECT_TRUE(std::regex_match(first, pattern)) << first;
  EXPECT_TRUE(std::regex_match(second, pattern)) << second;
  EXPECT_NE(first.substr(first.size() - 16), second.substr(second.size() - 16));
}

TEST_F(LiveLimitsTest, ARepeatedResultIsReplayedByItsRequestIdAndALateOneIs409) {
  const std::string job = register_job(2, 1);
  register_rank(job, 0, 2);
  register_rank(job, 1, 2);
  const json result = result_of(schedule(job, 0));
  Response first = call("POST", "/result/" + job, result, {}, "rank0-round0");
  ASSERT_EQ(first.status, 200) << first.body;
  // The client's retry after a lost answer: the stored answer, applied once.
  Response retried = call("POST", "/result/" + job, result, {}, "rank0-round0");
  EXPECT_EQ(retried.status, 200);
  EXPECT_TRUE(retried.replayed);
  // The same result under another id (or none): a second report of the round.
  Response again = call("POST", "/result/" + job, result);
  EXPECT_EQ(again.status, 409);
  EXPECT_EQ(detail(again),
            "rank: rank 0 already reported round 0; it gets the next schedule once every rank has reported");
  ASSERT_EQ(call("POST", "/result/" + job, result_of(schedule(job, 1))).status, 200);
  // Round 1: the round-0 result delivered late is refused, not applied to round 1 (Zeus's format without
  // the round number cannot tell; joule's client sends it).
  Response late = call("POST", "/result/" + job, result, {}, "rank0-round0-late");
  EXPECT_EQ(late.status, 409);
  EXPECT_EQ(detail(late), "round: rank 0 reported round 0, but job " + job +
                              " is at round 1 (a repeated or late result; GET /schedule/" + job +
                              "?rank=0 gives the current round)");
  EXPECT_EQ(schedule(job, 0, "0")["round"], 1);
  const json status = json::parse(call("GET", "/job/" + job).body);
  EXPECT_EQ(status["reported"], 0);
}

TEST_F(LiveLimitsTest, AnImplausibleMeasurementIs422NamingTheRankAndTheLastRankStillReports) {
  const std::string job = register_job(2, 1);
  register_rank(job, 0, 2);
  register_rank(job, 1, 2);
  ASSERT_EQ(call("POST", "/result/" + job, result_of(schedule(job, 0))).status, 200);
  json bad = result_of(schedule(job, 1));
  bad["time_breakdown"]["forward"][0][0] = 1e300;
  Response refused = call("POST", "/result/" + job, bad);
  EXPECT_EQ(refused.status, 422);
  const json entry = detail(refused)[0];
  EXPECT_EQ(entry["loc"], json::array({"body", "time_breakdown", "forward", 0, 0}));
  EXPECT_EQ(
      entry["msg"],
      "rank 1 reported 1e+300 s, more than the 86400 s any computation comes near (a unit mistake, or a "
      "broken measurement); the result is refused and the round goes on without it");
  bad = result_of(schedule(job, 1));
  bad["iter_time"][0] = 1e9;
  EXPECT_EQ(call("POST", "/result/" + job, bad).status, 422);
  // Rank 1 measures again: the round completes; nobody is refused for another rank's value.
  ASSERT_EQ(call("POST", "/result/" + job, result_of(schedule(job, 1))).status, 200);
  EXPECT_EQ(schedule(job, 0)["round"], 1);
}

TEST_F(LiveLimitsTest, AJobWhoseResultsCouldNotFitTheBodyLimitIsRefusedAtRegistration) {
  server::ServiceOptions options;
  options.live_max_result_bytes = 16 * 1024;
  open(options);
  const Response refused = call("POST", "/register_job",
                                {{"job_id", ""},
                                 {"pp_degree", 1},
                                 {"dp_degree", 1},
                                 {"tp_degree", 1},
                                 {"world_size", 1},
                                 {"num_microbatches", 128}});
  EXPECT_EQ(refused.status, 422);
  EXPECT_EQ(detail(refused)[0]["loc"], json::array({"body", "num_microbatches"}));
  EXPECT_EQ(detail(refused)[0]["msg"],
            "a rank's result of 128 microbatches over 2 iterations a round can be 27368 bytes, more than the "
            "16384 this server takes in POST /result (joule serve --pfo-max-result-kib; fewer "
            "--pfo-round-iterations also shrink it)");
  register_job(1, 1, 32);
}

TEST_F(LiveLimitsTest, DeletingAJobAnswersItsWaitingRanksAndForgetsIt) {
  const std::string job = register_job(2, 1);
  register_rank(job, 0, 2);
  auto sink = std::make_shared<CapturingSink>();
  Request waiting;
  waiting.method = "GET";
  waiting.path = "/schedule/" + job;
  waiting.query = {{"rank", "0"}, {"wait_s", "60"}};
  service_->handle_async(waiting, sink);
  const Response deleted = call("DELETE", "/job/" + job);
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  EXPECT_EQ(json::parse(deleted.body), json({{"deleted", job}}));
  const auto answer = sink->wait(std::chrono::seconds(30));
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 404);
  EXPECT_EQ(detail(*answer), "job '" + job + "' is not registered (POST /register_job first)");
  EXPECT_EQ(call("GET", "/job/" + job).status, 404);
  EXPECT_EQ(call("DELETE", "/job/" + job).status, 404);
  register_job(2, 1);  // the server goes on
}

TEST_F(LiveLimitsTest, IdleJobsExpireAsZeusDoes) {
  VirtualClock clock(1'800'000'000LL * 1'000'000'000LL);
  server::ServiceOptions options;
  options.clock = &clock;
  options.live_max_job_idle = std::chrono::seconds(100);
  options.live_expiry_period = std::chrono::milliseconds(10);
  open(options);
  const std::string job = register_job(1, 1);
  register_rank(job, 0, 1);
  clock.advance(std::chrono::seconds(60));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(call("GET", "/job/" + job).status, 200);
  // A result keeps it alive; then 101 s without one ends it.
  ASSERT_EQ(call("POST", "/result/" + job, result_of(schedule(job, 0))).status, 200);
  clock.advance(std::chrono::seconds(60));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(call("GET", "/job/" + job).status, 200);
  clock.advance(std::chrono::seconds(41));
  int status = 200;
  for (int attempt = 0; attempt < 300 && status == 200; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    status = call("GET", "/job/" + job).status;
  }
  EXPECT_EQ(status, 404);
}

TEST_F(LiveLimitsTest, RegistrationsAreRateLimitedPerClient) {
  server::ServiceOptions options;
  options.live_registrations_per_minute = 3;
  open(options);
  for (int i = 0; i < 3; ++i) {
    register_job(1, 1, 4, "10.0.0.1");
  }
  const Response refused = call("POST", "/register_job",
                                {{"job_id", ""},
                                 {"pp_degree", 1},
                                 {"dp_degree", 1},
                                 {"tp_degree", 1},
                                 {"world_size", 1},
                                 {"num_microbatches", 4}},
                                {}, {}, "10.0.0.1");
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(detail(refused),
            "too many job registrations from 10.0.0.1: at most 3 per minute (joule serve "
            "--pfo-registrations-per-minute); retry in 20 s");
  ASSERT_EQ(refused.headers.size(), 1u);
  EXPECT_EQ(refused.headers[0], (std::pair<std::string, std::string>{"Retry-After", "20"}));
  register_job(1, 1, 4, "10.0.0.2");  // another client
}

TEST_F(LiveLimitsTest, APlanThatCannotBeMadeRunsTheJobAtTheHighestClockAndSaysWhy) {
  server::ServiceOptions options;
  options.live_limits.max_planning_work = 10;
  open(options);
  const std::string job = register_job(2, 1);
  register_rank(job, 0, 2);
  register_rank(job, 1, 2);
  json got;
  for (int guard = 0; guard < 40 && (got = round(job, 2))["phase"] != "failed"; ++guard) {
  }
  got = schedule(job, 0);
  ASSERT_EQ(got["phase"], "failed") << got.dump();
  EXPECT_EQ(got["iterations"], 2);
  for (const json& entry : got["frequencies"]) {
    EXPECT_EQ(entry[1], 1410);
  }
  EXPECT_EQ(got["failure"].get<std::string>().substr(0, 22), "planning: 16 computati");
  const json status = json::parse(call("GET", "/job/" + job).body);
  EXPECT_EQ(status["phase"], "failed");
  EXPECT_EQ(status["failure"], got["failure"]);
}

TEST_F(LiveLimitsTest, AJobStoredWholeByAnEarlierJouleGoesOnInTheNewLayout) {
  plan::LiveJobInfo info;
  info.job_id = "2026-11-01-00-00-00+dp1+pp2+tp1+perseus";
  info.pp_degree = 2;
  info.world_size = 2;
  info.num_microbatches = 4;
  std::vector<uint32_t> mhz;
  for (const json& clock : top_clocks_mhz()) {
    mhz.push_back(clock.get<uint32_t>());
  }
  const json document = plan::version_1_document(info, mhz, "warmup", 5, {}, true);
  ASSERT_TRUE(store_->run([&](store::Transaction& transaction) -> Result<void> {
    JOULE_TRY(transaction.insert("pfo_job", info.job_id, document.dump()));
    return {};
  }));
  const json got = schedule(info.job_id, 1);
  EXPECT_EQ(got["round"], 5);
  EXPECT_EQ(got["phase"], "warmup");
  round(info.job_id, 2);
  EXPECT_EQ(schedule(info.job_id, 0)["phase"], "profiling");
}

// --- over HTTP: waits hold no thread
// -------------------------------------------------------------------------

// A client on a raw socket: what a rank's HTTP library does, and what it does when it goes away.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  }
  ~RawClient() { close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool send(const std::string& method, const std::string& target, const std::string& body = "") {
    const std::string text = fmt::format(
        "{} {} HTTP/1.1\r\nHost: joule\r\nContent-Type: application/json\r\n"
        "Content-Length: {}\r\n\r\n{}",
        method, target, body.size(), body);
    size_t sent = 0;
    while (connected_ && sent < text.size()) {
      const ssize_t n = ::send(fd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) {
        return false;
      }
      sent += static_cast<size_t>(n);
    }
    return connected_;
  }

  // @return (status, body) of one response, (0, "") if none came within `timeout`.
  std::pair<int, std::string> receive(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const auto end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        const auto length_at = buffer_.find("Content-Length: ");
        const size_t length = length_at < end ? std::stoul(buffer_.substr(length_at + 16)) : 0;
        if (buffer_.size() >= end + 4 + length) {
          const int status = std::stoi(buffer_.substr(9, 3));
          std::string body = buffer_.substr(end + 4, length);
          buffer_.erase(0, end + 4 + length);
          return {status, body};
        }
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd ready{fd_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&ready, 1, static_cast<int>(left.count())) <= 0) {
        return {0, ""};
      }
      char chunk[65536];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) {
        return {0, ""};
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  void close() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }

 private:
  int fd_;
  bool connected_ = false;
  std::string buffer_;
};

class LiveHttpTest : public LiveLimitsTest {
 protected:
  void start(server::HttpServerOptions options) {
    options.port = 0;
    http_ = std::make_unique<server::HttpServer>(*service_, options);
    ASSERT_TRUE(http_->start());
  }
  void TearDown() override {
    if (http_) {
      http_->stop();
    }
  }
  std::unique_ptr<server::HttpServer> http_;
};

TEST_F(LiveHttpTest, SeventyThreeWaitingRanksOfTwoJobsNeedNoMoreThanTwoThreads) {
  server::HttpServerOptions options;
  options.threads = 2;
  start(options);
  // Two jobs: 8 × 8 ranks and 3 × 3 (the old server refused a second 9-rank job on 16 threads).
  const std::vector<std::pair<int, int>> shapes = {{8, 8}, {3, 3}};
  std::vector<std::string> jobs;
  std::vector<std::unique_ptr<RawClient>> waiting;
  for (const auto& [pp, dp] : shapes) {
    jobs.push_back(register_job(pp, dp));
    for (int rank = 0; rank + 1 < pp * dp; ++rank) {
      register_rank(jobs.back(), rank, pp);
    }
    for (int rank = 0; rank < pp * dp; ++rank) {
      auto& client = waiting.emplace_back(std::make_unique<RawClient>(http_->port()));
      ASSERT_TRUE(client->send("GET", fmt::format("/schedule/{}?rank={}&wait_s=60", jobs.back(), rank)));
    }
  }
  // Every rank waits for the last registrations, over HTTP too: a worker must be free for them.
  for (size_t j = 0; j < jobs.size(); ++j) {
    const auto [pp, dp] = shapes[j];
    const json rank = {{"rank", pp * dp - 1},
                       {"dp_rank", dp - 1},
                       {"pp_rank", pp - 1},
                       {"tp_rank", 0},
                       {"available_frequencies", top_clocks_mhz()}};
    RawClient last(http_->port());
    ASSERT_TRUE(last.send("POST", "/register_rank/" + jobs[j], rank.dump()));
    const auto [status, body] = last.receive(std::chrono::seconds(30));
    ASSERT_EQ(status, 200) << body;
  }
  for (auto& client : waiting) {
    const auto [status, body] = client->receive(std::chrono::seconds(30));
    ASSERT_EQ(status, 200) << body;
    EXPECT_EQ(json::parse(body)["phase"], "warmup");
  }
}

TEST_F(LiveHttpTest, ARankThatHangsUpStopsWaitingAndTheMetricsCountIt) {
  start({});
  const std::string job = register_job(2, 1);
  {
    RawClient gone(http_->port());
    ASSERT_TRUE(gone.send("GET", "/schedule/" + job + "?rank=0&wait_s=60"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string text;
  for (int attempt = 0; attempt < 100; ++attempt) {
    text = http_->metrics().render();
    if (text.find("status=\"499\"") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(text.find(R"(joule_server_requests_total{method="GET",route="/schedule/{job_id}",status="499")"),
            std::string::npos)
      << text;
  // The per-job series, read from the store.
  EXPECT_NE(text.find("joule_pfo_job_phase{job_id=\"" + job + "\",phase=\"registering\""), std::string::npos)
      << text;
  EXPECT_EQ(text.find("route=\"other\""), std::string::npos) << text;
}

TEST_F(LiveHttpTest, StoppingAnswersEveryWaitingRank503AtOnce) {
  server::HttpServerOptions options;
  options.shutdown_grace = std::chrono::seconds(120);  // a wait left unanswered would hold stop() this long
  start(options);
  const std::string job = register_job(2, 1);
  std::vector<std::unique_ptr<RawClient>> waiting;
  for (int rank = 0; rank < 2; ++rank) {
    auto& client = waiting.emplace_back(std::make_unique<RawClient>(http_->port()));
    ASSERT_TRUE(client->send("GET", fmt::format("/schedule/{}?rank={}&wait_s=600", job, rank)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  http_->stop();
  for (auto& client : waiting) {
    const auto [status, body] = client->receive(std::chrono::seconds(5));
    ASSERT_EQ(status, 503) << body;
    EXPECT_EQ(json::parse(body)["detail"],
              "joule serve is stopping; retry the request (another replica, or this server once it is back)");
  }
  // Later waits are refused at once too (the service stopped its background work).
  const Response late = call("GET", "/schedule/" + job, nullptr, {{"rank", "0"}, {"wait_s", "600"}});
  EXPECT_EQ(late.status, 503);
}

TEST_F(LiveHttpTest, AStageOf900MicrobatchesReportsThroughTheListener) {
  start({});
  // Its warm-up result is ~80 KB, over the 64 KiB of other routes: /result takes the job's size.
  const std::string job = register_job(1, 1, 900);
  register_rank(job, 0, 1);
  const json got = schedule(job, 0);
  const std::string body = result_of(got).dump();
  ASSERT_GT(body.size(), size_t{64} * 1024);
  RawClient client(http_->port());
  ASSERT_TRUE(client.send("POST", "/result/" + job, body));
  const auto [status, answer] = client.receive(std::chrono::seconds(30));
  EXPECT_EQ(status, 200) << answer;
}

}  // namespace
}  // namespace joule::test
