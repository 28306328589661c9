// SPDX-License-Identifier: Apache-2.0
// Zeus's pipeline frequency optimizer routes without HTTP: the whole protocol (register, schedule, result,
// profiling to plan), GET /schedule waiting for the other ranks, a restart mid-job on the same database, and
// every bad input answered with a 4xx naming the field and no change.
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "joule/plan/pipeline.hpp"
#include "joule/probe/card.hpp"
#include "joule/server/service.hpp"

#include "test_util.hpp"

namespace joule::test {
namespace {

using nlohmann::json;
using server::Request;
using server::Response;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const plan::Profile& example() {
  static const plan::Profile profile =
      *plan::Profile::read(std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv");
  return profile;
}

json clocks() {
  json list = json::array();
  for (int mhz = 1410; mhz >= 210; mhz -= 15) {
    list.push_back(mhz);
  }
  return list;
}

// What a stage measures running `schedule` (as the simulated stage GPUs do): each computation at its clock,
// waiting a quarter of its busy time at 60 W.
json result_for(const json& schedule, int pp_rank) {
  std::map<std::string, std::vector<double>> times;
  std::map<std::string, std::vector<double>> energies;
  double busy_s = 0;
  double busy_j = 0;
  for (const json& entry : schedule.at("frequencies")) {
    const auto name = entry.at(0).get<std::string>();
    const auto mhz = entry.at(1).get<uint32_t>();
    const auto& options = example().options(pp_rank, *plan::parse_instruction(name));
    plan::ProfileOption option = options.back();
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
  const int iterations = schedule.at("iterations").get<int>();
  json time_breakdown = json::object();
  json energy_breakdown = json::object();
  for (const auto& [name, values] : times) {
    time_breakdown[name] = std::vector<std::vector<double>>(static_cast<size_t>(iterations), values);
    energy_breakdown[name] =
        std::vector<std::vector<double>>(static_cast<size_t>(iterations), energies[name]);
  }
  return {{"rank", schedule.at("rank")},
          {"iter_time", std::vector<double>(static_cast<size_t>(iterations), busy_s * 1.25)},
          {"iter_energy", std::vector<double>(static_cast<size_t>(iterations), busy_j + busy_s * 0.25 * 60)},
          {"time_breakdown", time_breakdown},
          {"energy_breakdown", energy_breakdown}};
}

class LiveRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override { open(); }

  void open(server::ServiceOptions options = {}) {
    service_.reset();
    store_.reset();
    store_ =
        std::shared_ptr<store::Store>(std::move(*store::open_store("sqlite:" + dir_.path() + "/live.db")));
    service_ = std::make_unique<server::Service>(store_, options);
  }

  Response call(const std::string& method, const std::string& path, const json& body = nullptr,
                std::map<std::string, std::string> query = {}) {
    Request request;
    request.method = method;
    request.path = path;
    request.query = std::move(query);
    if (!body.is_null()) {
      request.body = body.dump();
      request.content_type = "application/json";
    }
    return service_->handle(request);
  }

  std::string register_job(int pp, int dp, int microbatches = 8) {
    const Response response = call("POST", "/register_job",
                                   {{"job_id", ""},
                                    {"pp_degree", pp},
                                    {"dp_degree", dp},
                                    {"tp_degree", 1},
                                    {"world_size", pp * dp},
                                    {"job_metadata", "test"},
                                    {"num_microbatches", microbatches}});
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body).get<std::string>();
  }

  void register_ranks(const std::string& job, int pp, int dp) {
    for (int rank = 0; rank < pp * dp; ++rank) {
      const Response response = call("POST", "/register_rank/" + job,
                                     {{"rank", rank},
                                      {"dp_rank", rank / pp},
                                      {"pp_rank", rank % pp},
                                      {"tp_rank", 0},
                                      {"available_frequencies", clocks()}});
      ASSERT_EQ(response.status, 200) << response.body;
      EXPECT_EQ(response.body, "null");
    }
  }

  // Waits (as a rank does) while the job is planned between rounds; wait_s "0" answers at once.
  json schedule(const std::string& job, int rank, const std::string& wait_s = "30") {
    const Response response =
        call("GET", "/schedule/" + job, nullptr, {{"rank", std::to_string(rank)}, {"wait_s", wait_s}});
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body);
  }

  // One round: every rank gets its schedule and reports what it measured. @return rank 0's schedule.
  json round(const std::string& job, int pp, int dp) {
    json first;
    for (int rank = 0; rank < pp * dp; ++rank) {
      const json got = schedule(job, rank);
      if (rank == 0) {
        first = got;
      }
      const Response reported = call("POST", "/result/" + job, result_for(got, rank % pp));
      EXPECT_EQ(reported.status, 200) << reported.body;
    }
    return first;
  }

  TempDir dir_;
  std::shared_ptr<store::Store> store_;
  std::unique_ptr<server::Service> service_;
};

TEST_F(LiveRoutesTest, ProfilesThenPlansAndSurvivesARestart) {
  const std::string job = register_job(4, 1);
  EXPECT_TRUE(job.find("+dp1+pp4+tp1+perseus+test") != std::string::npos) << job;
  register_ranks(job, 4, 1);
  json first = round(job, 4, 1);
  EXPECT_EQ(first["phase"], "warmup");
  EXPECT_EQ(first["round"], 0);
  EXPECT_EQ(first["frequencies"].size(), 16u);
  EXPECT_EQ(first["frequencies"][0], json::array({"forward", 1410}));
  // A restart mid-profiling on the same database continues where it was.
  first = round(job, 4, 1);
  EXPECT_EQ(first["phase"], "profiling");
  open();
  int rounds = 2;
  while ((first = schedule(job, 0))["phase"] != "planned" && rounds < 40) {
    round(job, 4, 1);
    ++rounds;
  }
  ASSERT_EQ(first["phase"], "planned") << first.dump();
  EXPECT_LE(rounds, 1 + 11);  // warm-up + at most ⌈41 / 4⌉ profiling iterations
  EXPECT_EQ(first["iterations"], 2);
  const json predicted = first["predicted"];
  EXPECT_LE(predicted["iteration_time_s"].get<double>(),
            predicted["max_clock_time_s"].get<double>() * (1 + 1e-9));
  EXPECT_LT(predicted["iteration_energy_j"].get<double>(), predicted["max_clock_energy_j"].get<double>());
  EXPECT_NEAR(predicted["p_blocking_w"].get<double>(), 60, 1e-6);
  // Planned state survives a restart too, and the schedule is the same.
  open();
  EXPECT_EQ(schedule(job, 0), first);
}

TEST_F(LiveRoutesTest, ScheduleWaitsForTheOtherRanks) {
  const std::string job = register_job(2, 1, 4);
  ASSERT_EQ(
      call("POST", "/register_rank/" + job,
           {{"rank", 0}, {"dp_rank", 0}, {"pp_rank", 0}, {"tp_rank", 0}, {"available_frequencies", clocks()}})
          .status,
      200);
  // Rank 0 asks before rank 1 registered: it waits, and gets its schedule once rank 1 registers.
  auto waiting = std::async(std::launch::async, [&] { return schedule(job, 0, "30"); });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_EQ(
      call("POST", "/register_rank/" + job,
           {{"rank", 1}, {"dp_rank", 0}, {"pp_rank", 1}, {"tp_rank", 0}, {"available_frequencies", clocks()}})
          .status,
      200);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const json got = waiting.get();
  EXPECT_EQ(got["round"], 0);
  // Rank 0 reports; asking again waits for rank 1's report, then gets round 1.
  ASSERT_EQ(call("POST", "/result/" + job, result_for(got, 0)).status, 200);
  auto next = std::async(std::launch::async, [&] { return schedule(job, 0, "30"); });
  EXPECT_EQ(next.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_EQ(call("POST", "/result/" + job, result_for(schedule(job, 1), 1)).status, 200);
  ASSERT_EQ(next.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(next.get()["round"], 1);
}

TEST_F(LiveRoutesTest, AScheduleBeforeEveryRankRegisteredIs409AfterTheWait) {
  const std::string job = register_job(2, 1, 4);
  const Response response = call("GET", "/schedule/" + job, nullptr, {{"rank", "0"}, {"wait_s", "0"}});
  EXPECT_EQ(response.status, 409);
  EXPECT_EQ(json::parse(response.body)["detail"],
            "rank: job " + job + " is waiting for 2 of 2 ranks to register (missing: 0, 1)");
}

TEST_F(LiveRoutesTest, AServerProfileSkipsProfilingForClientsThatNeverReport) {
  server::ServiceOptions options;
  options.live_profile_csv =
      read_file(std::string(JOULE_SOURCE_DIR) + "/data/perseus/example_s4_m8_profile.csv");
  options.live_default_microbatches = 8;
  open(options);
  // Zeus's own client sends no num_microbatches: the server's default applies.
  const Response registered = call("POST", "/register_job",
                                   {{"job_id", ""},
                                    {"pp_degree", 4},
                                    {"dp_degree", 1},
                                    {"tp_degree", 1},
                                    {"world_size", 4},
                                    {"job_metadata", nullptr}});
  ASSERT_EQ(registered.status, 200) << registered.body;
  const auto job = json::parse(registered.body).get<std::string>();
  register_ranks(job, 4, 1);
  const json first = schedule(job, 3);
  EXPECT_EQ(first["phase"], "planned");
  EXPECT_EQ(first["rank"], 3);
}

TEST_F(LiveRoutesTest, BadInputIsA4xxNamingTheFieldAndChangesNothing) {
  const auto detail = [](const Response& response) { return json::parse(response.body)["detail"]; };
  const auto loc_and_msg = [&](const Response& response) {
    const json entry = detail(response)[0];
    return entry["loc"].dump() + " " + entry["msg"].get<std::string>();
  };
  json job_info = {{"job_id", ""},   {"pp_degree", 2},  {"dp_degree", 1},
                   {"tp_degree", 1}, {"world_size", 2}, {"num_microbatches", 4}};
  Response response = call("POST", "/register_job", json{{"pp_degree", 2}});
  EXPECT_EQ(response.status, 422);
  EXPECT_EQ(loc_and_msg(response), R"(["body","dp_degree"] field required)");
  json bad = job_info;
  bad["world_size"] = 3;
  response = call("POST", "/register_job", bad);
  EXPECT_EQ(response.status, 422);
  EXPECT_EQ(loc_and_msg(response),
            R"(["body","world_size"] must equal pp_degree × dp_degree × tp_degree = 2 × 1 × 1 = 2, got 3)");
  bad = job_info;
  bad["pp_degree"] = 0;
  bad["world_size"] = 0;
  EXPECT_EQ(loc_and_msg(call("POST", "/register_job", bad)),
            R"(["body","pp_degree"] ensure this value is greater than or equal to 1)");
  bad = job_info;
  bad["job_id"] = "mine";
  EXPECT_EQ(loc_and_msg(call("POST", "/register_job", bad)),
            R"(["body","job_id"] must be empty: the server assigns the job id)");
  bad = job_info;
  bad.erase("num_microbatches");
  EXPECT_NE(
      loc_and_msg(call("POST", "/register_job", bad)).find(R"(["body","num_microbatches"] field required)"),
      std::string::npos);
  bad = job_info;
  bad["job_metadata"] = "a/b";
  EXPECT_EQ(call("POST", "/register_job", bad).status, 422);
  // Waiting ranks take no request thread: a job's size is bounded by max_world_size, not by threads.
  bad = job_info;
  bad["pp_degree"] = 16;
  bad["world_size"] = 16;
  EXPECT_EQ(call("POST", "/register_job", bad).status, 200);
  bad["dp_degree"] = 8192;
  bad["world_size"] = 16 * 8192;
  EXPECT_EQ(loc_and_msg(call("POST", "/register_job", bad)),
            R"(["body","world_size"] 131072 ranks, more than the 65536 one job may have)");
  EXPECT_EQ(call("POST", "/register_job", "{").status, 422);

  const std::string job = register_job(2, 1, 4);
  const std::string path = "/register_rank/" + job;
  const json rank0 = {
      {"rank", 0}, {"dp_rank", 0}, {"pp_rank", 0}, {"tp_rank", 0}, {"available_frequencies", {1410, 1395}}};
  response = call("POST", "/register_rank/nope", rank0);
  EXPECT_EQ(response.status, 404);
  EXPECT_EQ(detail(response), "job 'nope' is not registered (POST /register_job first)");
  json bad_rank = rank0;
  bad_rank["available_frequencies"] = {1410, "fast"};
  EXPECT_EQ(loc_and_msg(call("POST", path, bad_rank)),
            R"(["body","available_frequencies",1] value is not a valid integer)");
  bad_rank["available_frequencies"] = json::array();
  EXPECT_EQ(
      loc_and_msg(call("POST", path, bad_rank)),
      R"(["body","available_frequencies"] the GPU lists no SM clock (the scheduler needs at least one))");
  bad_rank = rank0;
  bad_rank["pp_rank"] = 5;
  EXPECT_EQ(loc_and_msg(call("POST", path, bad_rank)),
            R"(["body","pp_rank"] must be 0 to 1 (the job's degree is 2), got 5)");
  ASSERT_EQ(call("POST", path, rank0).status, 200);
  response = call("POST", path, rank0);
  EXPECT_EQ(response.status, 409);
  EXPECT_EQ(detail(response), "rank: rank 0 is already registered");
  json rank1 = {
      {"rank", 1}, {"dp_rank", 0}, {"pp_rank", 1}, {"tp_rank", 0}, {"available_frequencies", {1200}}};
  response = call("POST", path, rank1);
  EXPECT_EQ(response.status, 422);
  EXPECT_EQ(
      loc_and_msg(response),
      R"(["body","available_frequencies"] the ranks' GPUs share no SM clock (rank 1 lists 1200 to 1200 MHz; the ranks registered before share 1395 to 1410 MHz))");
  rank1["available_frequencies"] = {1410, 1395};
  ASSERT_EQ(call("POST", path, rank1).status, 200);

  // Results.
  const json got = schedule(job, 0);
  json result = result_for(got, 0);
  response = call("GET", "/schedule/" + job);
  EXPECT_EQ(response.status, 422);
  EXPECT_EQ(loc_and_msg(response), R"(["query","rank"] field required)");
  EXPECT_EQ(call("GET", "/schedule/" + job, nullptr, {{"rank", "x"}}).status, 422);
  json bad_result = result;
  bad_result["rank"] = 7;
  response = call("POST", "/result/" + job, bad_result);
  EXPECT_EQ(response.status, 422);
  EXPECT_EQ(loc_and_msg(response), R"(["body","rank"] rank 7 is not part of job )" + job + " (world_size 2)");
  bad_result = result;
  bad_result["time_breakdown"]["sideways"] = {{0.1}};
  EXPECT_EQ(
      loc_and_msg(call("POST", "/result/" + job, bad_result)),
      R"(["body","time_breakdown","sideways"] unknown instruction 'sideways': the schedule of rank 0 has only backward, forward)");
  bad_result = result;
  bad_result["iter_time"] = {"slow"};
  EXPECT_EQ(loc_and_msg(call("POST", "/result/" + job, bad_result)),
            R"(["body","iter_time",0] value is not a valid float)");
  bad_result = result;
  bad_result["thermally_steady"] = "yes";
  response = call("POST", "/result/" + job, bad_result);
  EXPECT_EQ(response.status, 422);
  EXPECT_EQ(loc_and_msg(response), R"(["body","thermally_steady"] value could not be parsed to a boolean)");
  bad_result["thermally_steady"] = 0;
  EXPECT_EQ(loc_and_msg(call("POST", "/result/" + job, bad_result)),
            R"(["body","thermally_steady"] value could not be parsed to a boolean)");
  bad_result = result;
  bad_result.erase("iter_energy");
  EXPECT_EQ(loc_and_msg(call("POST", "/result/" + job, bad_result)),
            R"(["body","iter_energy"] field required)");
  EXPECT_EQ(schedule(job, 0), got);  // nothing refused changed the round
  ASSERT_EQ(call("POST", "/result/" + job, result).status, 200);
  response = call("POST", "/result/" + job, result);
  EXPECT_EQ(response.status, 409);
  EXPECT_EQ(detail(response),
            "rank: rank 0 already reported round 0; it gets the next schedule once every rank has reported");
  response = call("GET", "/schedule/" + job, nullptr, {{"rank", "0"}, {"wait_s", "0"}});
  EXPECT_EQ(response.status, 409);
  EXPECT_EQ(detail(response), "rank: rank 0 reported round 0; the next round starts when ranks 1 report it");
  EXPECT_EQ(call("DELETE", "/result/" + job).status, 405);
}

TEST_F(LiveRoutesTest, InfoSaysTheSchedulerAndItsSettings) {
  const Response response = call("GET", "/info");
  ASSERT_EQ(response.status, 200);
  const json info = json::parse(response.body);
  EXPECT_EQ(info["scheduler"], "joule.perseus");
  EXPECT_EQ(info["scheduler_args"]["profile_samples"], 2);
  EXPECT_EQ(info["scheduler_args"]["max_warmup_rounds"], plan::LiveOptions{}.max_warmup_rounds);
}

TEST_F(LiveRoutesTest, WarmupLastsWhileARankIsNotThermallySteady) {
  const std::string job = register_job(2, 1, 4);
  register_ranks(job, 2, 1);
  // Rank 1 is still heating up (false), rank 0 says nothing (a Zeus client): another warm-up round.
  for (const json& steady : {json(false), json(nullptr)}) {
    for (int rank = 0; rank < 2; ++rank) {
      const json got = schedule(job, rank);
      EXPECT_EQ(got["phase"], "warmup");
      json result = result_for(got, rank);
      if (rank == 1) {
        result["thermally_steady"] = steady;
      }
      const Response reported = call("POST", "/result/" + job, result);
      ASSERT_EQ(reported.status, 200) << reported.body;
    }
  }
  const json got = schedule(job, 0);
  EXPECT_EQ(got["phase"], "profiling");
  EXPECT_EQ(got["round"], 2);
}

json card_document(const std::string& name) {
  std::ifstream in(std::string(JOULE_SOURCE_DIR) + "/data/cards/" + name);
  return json::parse(in);
}

class LiveCardRoutesTest : public LiveRoutesTest {
 protected:
  json job_info(int pp, int microbatches) {
    return {{"job_id", ""},
            {"pp_degree", pp},
            {"dp_degree", 1},
            {"tp_degree", 1},
            {"world_size", pp},
            {"job_metadata", "card"},
            {"num_microbatches", microbatches}};
  }
  json job(const std::string& id) {
    const Response response = call("GET", "/job/" + id);
    EXPECT_EQ(response.status, 200) << response.body;
    return json::parse(response.body);
  }
};

// A job that sends a card profiles only the card's clocks: the warm-up, one profiling round, planned.
TEST_F(LiveCardRoutesTest, AJobsCardProfilesAFewClocksAndGetJobSaysWhichPath) {
  json body = job_info(4, 8);
  body["card"] = card_document("sim-generic.json");
  const Response registered = call("POST", "/register_job", body);
  ASSERT_EQ(registered.status, 200) << registered.body;
  const std::string id = json::parse(registered.body).get<std::string>();
  // The GPUs' clocks are the profile's (the ranks' results read it): a card predicts what they measure.
  for (int rank = 0; rank < 4; ++rank) {
    const Response response = call("POST", "/register_rank/" + id,
                                   {{"rank", rank},
                                    {"dp_rank", 0},
                                    {"pp_rank", rank},
                                    {"tp_rank", 0},
                                    {"available_frequencies", example().frequencies_mhz()}});
    ASSERT_EQ(response.status, 200) << response.body;
  }
  EXPECT_EQ(round(id, 4, 1)["phase"], "warmup");
  const json profiling = round(id, 4, 1);
  EXPECT_EQ(profiling["phase"], "profiling");
  std::set<uint32_t> profiled;
  for (const json& entry : profiling["frequencies"]) {
    profiled.insert(entry[1].get<uint32_t>());
  }
  const json status = job(id);
  ASSERT_TRUE(status["card"].is_object()) << status.dump();
  EXPECT_EQ(status["card"]["source"], "the job's card (Generic 400 W GPU (simulated))");
  const auto probe_clocks = status["card"]["probe_clocks"].get<std::vector<uint32_t>>();
  EXPECT_EQ(probe_clocks.size(), 4u);  // 8 microbatches, 2 samples: a round measures 4
  EXPECT_EQ(std::set<uint32_t>(probe_clocks.begin(), probe_clocks.end()), profiled);
  EXPECT_EQ(probe_clocks.front(), 1410u);
  const json planned = schedule(id, 0);
  ASSERT_EQ(planned["phase"], "planned") << planned.dump() << job(id).dump();
  const json done = job(id);
  EXPECT_EQ(done["profiling_iterations"], 2);
  EXPECT_EQ(done["card"]["fallback"], false);
  EXPECT_NE(done["card"]["summary"].get<std::string>().find("fits every computation"), std::string::npos)
      << done.dump();
}

TEST_F(LiveCardRoutesTest, AServerCardIsEveryJobsDefaultAndABadCardIs422) {
  server::ServiceOptions options;
  options.live_card = *probe::parse_card(card_document("sim-generic.json").dump(), "generic.json");
  options.live_card_source = "generic.json";
  open(options);
  const Response registered = call("POST", "/register_job", job_info(2, 4));
  ASSERT_EQ(registered.status, 200) << registered.body;
  const std::string id = json::parse(registered.body).get<std::string>();
  EXPECT_EQ(job(id)["card"]["source"], "generic.json");
  EXPECT_EQ(json::parse(call("GET", "/info").body)["scheduler_args"]["card_given"], true);

  const auto refused = [&](const json& card) {
    json body = job_info(2, 4);
    body["card"] = card;
    const Response response = call("POST", "/register_job", body);
    EXPECT_EQ(response.status, 422) << response.body;
    const json entry = json::parse(response.body)["detail"][0];
    return entry["loc"].dump() + " " + entry["msg"].get<std::string>();
  };
  json newer = card_document("sim-generic.json");
  newer["schema_version"] = 2;
  EXPECT_EQ(refused(newer),
            R"(["body","card"] the job's card: card schema version 2 is newer than this joule )"
            R"(reads (1): upgrade joule to read it)");
  EXPECT_EQ(refused("sim-generic.json"),
            R"(["body","card"] must be a frontier card (a JSON object, as joule probe writes it))");
  json read_only = card_document("sim-generic.json");
  read_only["frontiers"] = json::array();
  read_only["read_only"] = true;
  EXPECT_EQ(
      refused(read_only),
      R"(["body","card"] the job's card (Generic 400 W GPU (simulated)): the card has no compute kernel )"
      R"(frontier under sm_clock (a --read-only card has no frontiers))");
}

}  // namespace
}  // namespace joule::test
