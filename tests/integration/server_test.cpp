// SPDX-License-Identifier: Apache-2.0
// `joule serve` and `joule job` as users run them: Zeus's routes over real HTTP (statuses, bodies, headers),
// the seeded decision sequence through HTTP equal to the library's, idempotent retries, the planner routes,
// graceful stops, bad flags, and (on SQLite) durability across kill -9. Parameterised by store.
#include <fstream>
#include <sstream>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "joule/client/client.hpp"

#include "integration/server_process.hpp"
#include "server/server_test_util.hpp"
#include "test_util.hpp"

namespace joule::test {
namespace {

using nlohmann::json;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// No real vendor library and no JOULE_SIM from the developer's shell: `job register` reads GPUs only when
// a test asks for simulated ones.
ProcessResult joule(std::vector<std::string> args) {
  args.insert(args.begin(), JOULE_BINARY);
  return run(args, {{"JOULE_SIM", Process::kUnset},
                    {"JOULE_DAEMON_SOCKET", Process::kUnset},
                    {"JOULE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                    {"JOULE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so.1"},
                    {"JOULE_AMD_SMI_LIBRARY", "/nonexistent/libamd_smi.so"},
                    {"JOULE_LEVEL_ZERO_LIBRARY", "/nonexistent/libze_loader.so.1"}});
}

class ServeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    db_ = GetParam();
    if (db_ == "sqlite:") {
      db_ = "sqlite:" + dir_.path() + "/serve.db";
      if (!store::open_store(db_)) {
        GTEST_SKIP() << "the SQLite store is not built yet";
      }
    }
    server_ = std::make_unique<ServeProcess>(db_);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    http_->set_read_timeout(std::chrono::seconds(60));
  }
  void TearDown() override {
    http_.reset();
    if (server_) {
      const auto result = server_->stop(SIGTERM);
      EXPECT_EQ(result.exit_code, 0) << result.err;
    }
  }

  client::Client client() { return value_or_throw(client::Client::connect(server_->url())); }

  TempDir dir_;
  std::string db_;
  std::unique_ptr<ServeProcess> server_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_P(ServeTest, ZeusRoutesOverHttp) {
  const json body = register_body(synthetic_spec("synthetic-http"), synthetic_gpu());
  auto created = http_->Post("/jobs", body.dump(), "application/json");
  ASSERT_TRUE(created);
  EXPECT_EQ(created->status, 201);
  EXPECT_EQ(created->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(json::parse(created->body)["job_id"], "synthetic-http");
  EXPECT_EQ(http_->Post("/jobs", body.dump(), "application/json")->status, 200);

  auto trial = http_->Get("/jobs/batch_size?job_id=synthetic-http");
  ASSERT_EQ(trial->status, 200);
  EXPECT_EQ(json::parse(trial->body),
            json({{"job_id", "synthetic-http"}, {"batch_size", 32}, {"trial_number", 1}}));

  // A retried report with the same X-Request-Id is answered from the store, marked as a replay.
  const std::string report = SyntheticTraining::result({"synthetic-http", 32, 1}, 1).to_json().dump();
  const httplib::Headers id = {{"X-Request-Id", "http-report-1"}};
  auto first = http_->Post("/report", id, report, "application/json");
  auto again = http_->Post("/report", id, report, "application/json");
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(again->body, first->body);
  EXPECT_EQ(first->get_header_value("X-Idempotent-Replay"), "");
  EXPECT_EQ(again->get_header_value("X-Idempotent-Replay"), "true");

  auto ended = http_->Patch(
      "/trials", json({{"job_id", "synthetic-http"}, {"batch_size", 32}, {"trial_number", 1}}).dump(),
      "application/json");
  EXPECT_EQ(ended->status, 200);
  EXPECT_EQ(ended->body, "null");
  auto status = http_->Get("/jobs/synthetic-http");
  EXPECT_EQ(json::parse(status->body)["counts"]["reports"], 1);
  EXPECT_EQ(json::parse(status->body)["trials"][0]["status"], "Failed");

  // Zeus's error statuses and bodies.
  EXPECT_EQ(http_->Get("/jobs/batch_size")->status, 422);
  EXPECT_EQ(json::parse(http_->Get("/jobs/batch_size?job_id=nope")->body)["message"],
            "Unknown job(nope). Please register the job first");
  EXPECT_EQ(http_->Post("/jobs", "{oops", "application/json")->status, 422);
  EXPECT_EQ(http_->Post("/report", "[]", "application/json")->status, 422);
  EXPECT_EQ(http_->Delete("/jobs?job_id=nope")->status, 404);
  EXPECT_EQ(http_->Get("/nope")->status, 404);
  EXPECT_EQ(http_->Put("/jobs", "", "application/json")->status, 405);
  auto erased = http_->Delete("/jobs?job_id=synthetic-http");
  EXPECT_EQ(erased->status, 200);
  EXPECT_EQ(erased->body, "null");
  auto health = http_->Get("/healthz");
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
}

TEST_P(ServeTest, SeededDecisionsThroughHttpEqualTheLibrarys) {
  client::Client api = client();
  const auto registered = api.register_job(synthetic_spec(std::nullopt, 2024), synthetic_gpu());
  ASSERT_TRUE(registered) << registered.error().message();
  EXPECT_TRUE(registered->created);
  const std::string job_id = *registered->spec.job_id;
  auto library = bso::BatchSizeJob::create(synthetic_spec(job_id, 2024), synthetic_gpu());
  ASSERT_TRUE(library);
  for (int round = 0; round < 14; ++round) {
    std::vector<bso::TrialId> trials;
    for (int k = 0; k < 2; ++k) {
      const auto trial = api.next_batch_size(job_id);
      ASSERT_TRUE(trial) << trial.error().message();
      const auto expected = library->next_trial(0);
      ASSERT_TRUE(expected);
      ASSERT_EQ(*trial, *expected) << "round " << round;
      trials.push_back(*trial);
    }
    for (const auto& trial : trials) {
      if (trial.trial_number % 5 != 4) {
        for (int64_t epoch = 1;; ++epoch) {
          const auto result = SyntheticTraining::result(trial, epoch);
          const auto response = api.report(result);
          ASSERT_TRUE(response) << response.error().message();
          const auto expected = library->report(result, 0);
          ASSERT_EQ(*response, *expected);
          if (response->stop_train) {
            break;
          }
        }
      }
      ASSERT_TRUE(api.end_trial(trial));
      ASSERT_TRUE(library->end_trial(trial, 0));
    }
  }
  const auto status = api.job_status(job_id);
  ASSERT_TRUE(status);
  EXPECT_EQ(status->document["stage"], "MAB");
  EXPECT_EQ(status->stage, bso::Stage::kMab);
  EXPECT_EQ(status->document["arms"], library->to_json()["arms"]);
  EXPECT_EQ(status->arms, library->arms());

  // Errors carry the status and the server's message.
  const auto unknown = api.next_batch_size("nope");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message().find("HTTP 400: Unknown job(nope)"), std::string::npos)
      << unknown.error().message();
  bso::JobSpec conflicting = synthetic_spec(job_id, 2024);
  conflicting.eta_knob = 0.1;
  const auto conflict = api.register_job(conflicting, synthetic_gpu());
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().code(), ErrorCode::kState);
}

TEST_P(ServeTest, PlannerRoutesOverHttp) {
  client::Client api = client();
  client::PipelineSpec spec;
  spec.stages = 4;
  spec.microbatches = 8;
  spec.p_blocking_w = 75;
  const auto registered = api.register_pipeline(spec);
  ASSERT_TRUE(registered) << registered.error().message();
  const std::string id = *registered->first.pipeline_id;
  EXPECT_TRUE(registered->second);
  EXPECT_FALSE(api.frontier(id));  // no profile yet: 409
  const auto uploaded = api.upload_profile(
      id, read_text(std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv"));
  ASSERT_TRUE(uploaded) << uploaded.error().message();
  const auto frontier = api.frontier(id);
  ASSERT_TRUE(frontier) << frontier.error().message();
  EXPECT_GT(frontier->points.size(), 10u);
  // joule plan on the same profile reports the same fastest point (docs/plan.md: 0.740 s, 759.65 J).
  EXPECT_NEAR(frontier->points[0].time_s, 0.740, 0.001);
  const auto fastest = api.plan(id);
  ASSERT_TRUE(fastest);
  EXPECT_EQ(fastest->index, 0);
  EXPECT_EQ(fastest->stages_plan.size(), 4u);
  const double slow = fastest->time_s * 1.25;
  const auto adapted = api.report_straggler(id, slow);
  ASSERT_TRUE(adapted) << adapted.error().message();
  EXPECT_GT(adapted->index, 0);
  EXPECT_EQ(api.plan(id)->index, adapted->index);
  EXPECT_EQ(api.plan(id, slow)->index, adapted->index);
  EXPECT_FALSE(api.plan(id, 0.01));  // faster than possible: 400
  EXPECT_TRUE(api.delete_pipeline(id));
}

TEST_P(ServeTest, JobCommandTalksToTheServer) {
  const std::string server = server_->url();
  const auto registered = joule({"job",
                                 "register",
                                 "--server",
                                 server,
                                 "--prefix",
                                 "cli",
                                 "--batch-sizes",
                                 "8,16,32",
                                 "--default-batch-size",
                                 "16",
                                 "--max-epochs",
                                 "5",
                                 "--mab-seed",
                                 "3",
                                 "--max-power-w",
                                 "300",
                                 "--number-of-gpus",
                                 "1",
                                 "--gpu-model",
                                 "NVIDIA A40",
                                 "--format",
                                 "json"});
  ASSERT_EQ(registered.exit_code, 0) << registered.err;
  const json job = json::parse(registered.out);
  EXPECT_EQ(job["created"], true);
  EXPECT_EQ(job["batch_sizes"], json({8, 16, 32}));
  const std::string job_id = job["job_id"];

  const auto next = joule({"job", "next", "--server", server, "--job-id", job_id});
  ASSERT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(next.out, "trial 1 of job " + job_id + ": batch size 16\n");
  const std::vector<std::string> report = {
      "job",      "report",       "--server", server,     "--job-id",     job_id,        "--trial",
      "1",        "--batch-size", "16",       "--time-s", "10",           "--energy-j",  "2000",
      "--metric", "0.2",          "--epoch",  "1",        "--request-id", "cli-report-1"};
  const auto reported = joule(report);
  ASSERT_EQ(reported.exit_code, 0) << reported.err;
  EXPECT_EQ(reported.out, "keep training: Stop condition not met, keep training\n");
  EXPECT_EQ(joule(report).out, reported.out);  // the same request id: applied once
  const auto done =
      joule({"job",      "report",       "--server", server,     "--job-id", job_id,       "--trial",
             "1",        "--batch-size", "16",       "--time-s", "20",       "--energy-j", "4000",
             "--metric", "0.7",          "--epoch",  "2",        "--format", "json"});
  EXPECT_EQ(json::parse(done.out)["converged"], true);
  EXPECT_EQ(
      joule({"job", "end", "--server", server, "--job-id", job_id, "--trial", "1", "--batch-size", "16"})
          .exit_code,
      0);
  const auto status = joule({"job", "status", "--server", server, "--job-id", job_id, "--format", "json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(json::parse(status.out)["counts"]["reports"], 2);
  const auto text = joule({"job", "status", "--server", server, "--job-id", job_id});
  EXPECT_NE(text.out.find("stage Pruning, 1 trials (0 running, 1 succeeded, 0 failed), 2 reports"),
            std::string::npos)
      << text.out;

  // A spec file, overridden by a flag; the same registration again is accepted.
  const std::string spec_file =
      dir_.write("spec.json", register_body(synthetic_spec("synthetic-file"), synthetic_gpu()).dump());
  const auto from_file =
      joule({"job", "register", "--server", server, "--job-spec", spec_file, "--eta-knob", "0.7"});
  EXPECT_EQ(from_file.out, "job synthetic-file registered\n") << from_file.err;
  const auto again =
      joule({"job", "register", "--server", server, "--job-spec", spec_file, "--eta-knob", "0.7"});
  EXPECT_EQ(again.out, "job synthetic-file was already registered with this configuration\n");

  // The GPUs the job runs on default to this machine's, as Zeus's client sends them, and the command says so.
  const auto from_devices =
      joule({"--sim", "2xv100", "job", "register", "--server", server, "--prefix", "gpus", "--batch-sizes",
             "8,16", "--default-batch-size", "8", "--format", "json"});
  ASSERT_EQ(from_devices.exit_code, 0) << from_devices.err;
  const auto device_job = json::parse(from_devices.out);
  EXPECT_EQ(device_job["max_power"], 500.0);
  EXPECT_EQ(device_job["number_of_gpus"], 2);
  EXPECT_EQ(device_job["gpu_model"], "Tesla V100-PCIE-32GB (simulated)");
  EXPECT_EQ(from_devices.err,
            "joule: job register: --max-power-w, --number-of-gpus, --gpu-model from this machine's GPUs: "
            "max_power 500.0 W, 2 GPU(s), Tesla V100-PCIE-32GB (simulated)\n");
  const auto given =
      joule({"--sim", "2xv100", "job", "register", "--server", server, "--prefix", "given", "--batch-sizes",
             "8", "--default-batch-size", "8", "--number-of-gpus", "1", "--format", "json"});
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(json::parse(given.out)["number_of_gpus"], 1);  // a flag wins over the devices
  EXPECT_EQ(json::parse(given.out)["max_power"], 500.0);
  const auto no_gpu = joule({"job", "register", "--server", server, "--prefix", "gpus", "--batch-sizes",
                             "8,16", "--default-batch-size", "8", "--gpu-model", "NVIDIA A40"});
  EXPECT_EQ(no_gpu.exit_code, 2);  // the user must give them
  EXPECT_EQ(
      no_gpu.err.rfind("joule: error: job register: a job is registered with the GPUs it runs on: give "
                       "--max-power-w, --number-of-gpus (or the job spec's max_power, number_of_gpus, "
                       "gpu_model), or run this on the job's machine; no GPU was found here (no GPU found: ",
                       0),
      0u)
      << no_gpu.err;
  EXPECT_NE(no_gpu.err.find("--sim v100 gives a simulated one"), std::string::npos) << no_gpu.err;

  // Errors: one line, exit 2 for what the user must fix, 1 when the server cannot be reached.
  const auto invalid =
      joule({"job", "register", "--server", server, "--job-spec", spec_file, "--eta-knob", "3"});
  EXPECT_EQ(invalid.exit_code, 2);
  EXPECT_EQ(invalid.err, "joule: error: eta_knob: eta_knob should be in range [0,1]\n");
  const auto conflict = joule({"job", "register", "--server", server, "--job-spec", spec_file});
  EXPECT_EQ(conflict.exit_code, 1);
  EXPECT_NE(conflict.err.find("HTTP 409: JobSpec doesn't match"), std::string::npos) << conflict.err;
  const auto unknown = joule({"job", "next", "--server", server, "--job-id", "nope"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(std::count(unknown.err.begin(), unknown.err.end(), '\n'), 1) << unknown.err;
  EXPECT_EQ(joule({"job", "next", "--server", server}).exit_code, 2);  // --job-id missing
  const auto unreachable =
      joule({"job", "next", "--server", "http://127.0.0.1:1", "--job-id", "x", "--attempts", "2"});
  EXPECT_EQ(unreachable.exit_code, 1);
  EXPECT_EQ(
      unreachable.err,
      "joule: error: GET /jobs/batch_size?job_id=x: cannot connect to http://127.0.0.1:1: connection refused "
      "or host unreachable (is joule serve running there?) (2 attempts)\n");
  EXPECT_EQ(joule({"job", "delete", "--server", server, "--job-id", job_id}).exit_code, 0);
}

INSTANTIATE_TEST_SUITE_P(Stores, ServeTest, ::testing::Values("memory:", "sqlite:"),
                         [](const auto& param_info) {
                           return param_info.param == "memory:" ? "Memory" : "Sqlite";
                         });

TEST(Serve, StopsGracefullyOnSigintAndSigterm) {
  for (const int signal_number : {SIGINT, SIGTERM}) {
    ServeProcess server("memory:");
    httplib::Client http("127.0.0.1", server.port());
    EXPECT_EQ(http.Get("/healthz")->status, 200);
    const auto result = server.stop(signal_number);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    EXPECT_NE(result.out.find("joule serve: stopped"), std::string::npos) << result.out;
  }
}

TEST(Serve, BadFlagsAreOneClearLine) {
  const auto listen = joule({"serve", "--db", "memory:", "--listen", "nonsense"});
  EXPECT_EQ(listen.exit_code, 2);
  EXPECT_EQ(std::count(listen.err.begin(), listen.err.end(), '\n'), 1) << listen.err;
  const auto db = joule({"serve", "--db", "nosuch://x", "--listen", "127.0.0.1:0"});
  EXPECT_NE(db.exit_code, 0);
  EXPECT_EQ(std::count(db.err.begin(), db.err.end(), '\n'), 1) << db.err;
  EXPECT_NE(db.err.find("--db"), std::string::npos) << db.err;
  ServeProcess taken("memory:");
  // Refused, not sharing the port (cpp-httplib's SO_REUSEPORT would let it bind): bounded, in case it binds.
  const auto busy = run_bounded(
      {JOULE_BINARY, "serve", "--db", "memory:", "--listen", "127.0.0.1:" + std::to_string(taken.port())},
      std::chrono::seconds(10));
  EXPECT_EQ(busy.exit_code, 1);
  EXPECT_NE(busy.err.find("cannot listen"), std::string::npos) << busy.err;
  const auto help = joule({"serve", "--help"});
  EXPECT_NE(help.out.find("--listen"), std::string::npos);
  EXPECT_NE(joule({"job", "--help"}).out.find("register"), std::string::npos);
}

// The attacks of issue 11 against the real binary: each gets its clear refusal, and the server lives on.
TEST(Serve, HostileRequestsAreRefusedAndTheServerLivesOn) {
  ServeProcess server("memory:", 0, {"--max-open-trials", "2"});
  httplib::Client http("127.0.0.1", server.port());
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  // The body limit answers first on routes with small bodies; the profile route parses, bounded.
  auto straggler = http.Post("/pipelines/pipeline-x/straggler", deep, "application/json");
  ASSERT_TRUE(straggler);
  EXPECT_EQ(straggler->status, 413);
  EXPECT_EQ(json::parse(straggler->body)["message"],
            "the request body is 200000 bytes; POST /pipelines/pipeline-x/straggler takes at most 65536");
  ASSERT_EQ(http.Post("/pipelines", R"({"pipeline_id": "pipeline-x", "stages": 2, "microbatches": 2})",
                      "application/json")
                ->status,
            201);
  auto profile = http.Put("/pipelines/pipeline-x/profile", deep, "application/json");
  ASSERT_TRUE(profile);
  EXPECT_EQ(profile->status, 400);
  EXPECT_NE(profile->body.find("nested deeper than 64 levels"), std::string::npos) << profile->body;
  auto overflow = http.Post("/jobs", R"({"job_id_prefix": "a", "batch_sizes": [8], "default_batch_size": 8,
      "max_power": 1e999, "number_of_gpus": 1, "gpu_model": "A40"})",
                            "application/json");
  ASSERT_TRUE(overflow);
  EXPECT_EQ(overflow->status, 422);
  EXPECT_EQ(json::parse(overflow->body)["detail"][0]["loc"], json({"body", "max_power"}));
  // 20 MB of header lines: 431 after 16 KiB.
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server.port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    std::string lines = "GET /healthz HTTP/1.1\r\n";
    for (int i = 0; i < 10000; ++i) {
      lines += "a: b\r\n";
    }
    for (size_t sent = 0; sent < 20'000'000; sent += lines.size()) {
      if (::send(fd, lines.data(), lines.size(), MSG_NOSIGNAL) <= 0) {
        break;  // the server answered and closed
      }
    }
    char buffer[4096];
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    ::close(fd);
    ASSERT_GT(got, 0);
    EXPECT_TRUE(std::string(buffer, static_cast<size_t>(got)).starts_with("HTTP/1.1 431 "));
  }
  // A client that asks and never reports: refused at the bound.
  ASSERT_EQ(http.Post("/jobs", R"({"job_id": "greedy-1", "job_id_prefix": "greedy", "batch_sizes": [8, 16],
      "default_batch_size": 8, "max_power": 300, "number_of_gpus": 1, "gpu_model": "A40"})",
                      "application/json")
                ->status,
            201);
  EXPECT_EQ(http.Get("/jobs/batch_size?job_id=greedy-1")->status, 200);
  EXPECT_EQ(http.Get("/jobs/batch_size?job_id=greedy-1")->status, 200);
  auto refused = http.Get("/jobs/batch_size?job_id=greedy-1");
  EXPECT_EQ(refused->status, 409);
  EXPECT_NE(refused->body.find("already has 2 trials in progress"), std::string::npos) << refused->body;
  EXPECT_EQ(http.Get("/healthz")->status, 200);
  const auto result = server.stop(SIGTERM);
  EXPECT_EQ(result.exit_code, 0) << result.err;
}

// A full disk (stood in for by a file-size limit on the running server: SQLite's writes beyond it fail): the
// requests that cannot be stored get 503 with the store's message and change nothing, reads go on, the
// server lives, and once there is room again it takes writes again; every job it acknowledged is there.
TEST(Serve, AFullDiskIs503UntilThereIsRoomAgain) {
  TempDir dir;
  ServeProcess server("sqlite:" + dir.path() + "/full.db");
  const std::string pid = std::to_string(server.process().pid());
  // Soft limit only: raising it back needs no privilege.
  ASSERT_EQ(run({"/usr/bin/prlimit", "--pid", pid, "--fsize=200000:unlimited"}).exit_code, 0);
  httplib::Client http("127.0.0.1", server.port());
  const auto job = [](int i) {
    return json{{"job_id", fmt::format("full-{}", i)},
                {"job_id_prefix", "full"},
                {"batch_sizes", {8, 16}},
                {"default_batch_size", 8},
                {"max_power", 300},
                {"number_of_gpus", 1},
                {"gpu_model", std::string(200, 'A')}}
        .dump();
  };
  int acknowledged = 0;
  std::optional<httplib::Result> refused;
  for (int i = 0; i < 2000; ++i) {
    auto response = http.Post("/jobs", job(i), "application/json");
    ASSERT_TRUE(response);
    if (response->status != 201) {
      refused = std::move(response);
      break;
    }
    ++acknowledged;
  }
  ASSERT_TRUE(refused.has_value()) << "2000 jobs fit in 200 kB";
  EXPECT_EQ((*refused)->status, 503);
  EXPECT_TRUE(json::parse((*refused)->body)["message"].get<std::string>().starts_with(
      "store unavailable: sqlite:" + dir.path() + "/full.db: "))
      << (*refused)->body;
  EXPECT_EQ(http.Get("/healthz")->status, 200);
  EXPECT_EQ(http.Get(fmt::format("/jobs/full-{}", acknowledged))->status, 404)
      << "the refused job is not there";
  ASSERT_EQ(run({"/usr/bin/prlimit", "--pid", pid, "--fsize=unlimited:unlimited"}).exit_code, 0);
  EXPECT_EQ(http.Post("/jobs", job(acknowledged), "application/json")->status, 201);
  for (int i = 0; i <= acknowledged; ++i) {
    EXPECT_EQ(http.Get(fmt::format("/jobs/full-{}", i))->status, 200) << i;
  }
  EXPECT_EQ(server.stop(SIGTERM).exit_code, 0);
}

// A database the server's user cannot write: refused at start, in one line that says what to fix.
TEST(Serve, AReadOnlyDatabaseIsRefusedAtStartWithTheFix) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "needs root, to run the server as another user";
  }
  TempDir dir;
  ::chmod(dir.path().c_str(), 0755);
  const std::string db = "sqlite:" + dir.path() + "/readonly.db";
  {
    ServeProcess creator(db);  // as root: creates the database
    EXPECT_EQ(creator.stop(SIGTERM).exit_code, 0);
  }
  const auto refused = run_bounded({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                    JOULE_BINARY, "serve", "--db", db, "--listen", "127.0.0.1:0"},
                                   std::chrono::seconds(30));
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.err, "joule: error: serve: --db " + db + ": " + db +
                             ": attempt to write a readonly database (user 65534 must be able to write the "
                             "database file and create files in its folder)\n");
}

// Every report answered with 2xx survives a kill -9 of the server (responses only after commit).
TEST(Serve, ReportsSurviveKillNineOnSqlite) {
  TempDir dir;
  const std::string db = "sqlite:" + dir.path() + "/durable.db";
  if (!store::open_store(db)) {
    GTEST_SKIP() << "the SQLite store is not built yet";
  }
  int reports = 0;
  std::string job_id;
  {
    ServeProcess server(db);
    auto api = value_or_throw(client::Client::connect(server.url()));
    job_id = *value_or_throw(api.register_job(synthetic_spec(std::nullopt), synthetic_gpu())).spec.job_id;
    for (int i = 0; i < 3; ++i) {
      const auto trial = value_or_throw(api.next_batch_size(job_id));
      for (int64_t epoch = 1; epoch <= 2; ++epoch) {
        ASSERT_TRUE(api.report(SyntheticTraining::result(trial, epoch)));
        ++reports;
      }
    }
    EXPECT_EQ(server.stop(SIGKILL).exit_code, 128 + SIGKILL);
  }
  ServeProcess restarted(db);
  const auto status =
      value_or_throw(value_or_throw(client::Client::connect(restarted.url())).job_status(job_id));
  EXPECT_EQ(status.counts.trials, 3);
  EXPECT_EQ(status.counts.reports, reports);
  EXPECT_EQ(restarted.stop().exit_code, 0);
}

// A client retries through a server restart with the same request id.
TEST(Serve, ClientRetriesAcrossARestart) {
  TempDir dir;
  const std::string db = "sqlite:" + dir.path() + "/restart.db";
  if (!store::open_store(db)) {
    GTEST_SKIP() << "the SQLite store is not built yet";
  }
  auto server = std::make_unique<ServeProcess>(db);
  const int port = server->port();
  client::ClientOptions options;
  options.attempts = 40;
  options.max_backoff = std::chrono::milliseconds(200);
  auto api =
      std::make_unique<client::Client>(value_or_throw(client::Client::connect(server->url(), options)));
  const std::string job_id =
      *value_or_throw(api->register_job(synthetic_spec(std::nullopt), synthetic_gpu())).spec.job_id;
  server->stop(SIGKILL);
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    server = std::make_unique<ServeProcess>(db, port);
  });
  const auto trial = api->next_batch_size(job_id);  // fails until the restart, then goes through
  restart.join();
  ASSERT_TRUE(trial) << trial.error().message();
  EXPECT_EQ(trial->trial_number, 1);
  api.reset();  // its idle keep-alive connection would hold the graceful stop for the keep-alive timeout
  EXPECT_EQ(server->stop().exit_code, 0);
}

}  // namespace
}  // namespace joule::test
