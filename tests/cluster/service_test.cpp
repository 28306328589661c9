// SPDX-License-Identifier: Apache-2.0
// The machinery around the cluster controller (joule/cluster/service.hpp): every change re-planned, stored
// and enforced; the state surviving a re-open on SQLite; a node that stops answering counted at its
// maximum; refused changes leaving everything as it was; every bad input's message.
#include "joule/cluster/service.hpp"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "joule/store/store.hpp"

#include "cluster/service_helpers.hpp"
#include "test_util.hpp"

namespace joule::cluster {
namespace {

using test::kStartUnixNs;
using test::sum_of_limits;
using test::training;

using std::chrono::seconds;

// 2027-01-15T08:00:00Z: deadlines and forecasts are Unix seconds on the service's clock.
constexpr double kStartS = 1.8e9;

JobSpec inference(const std::string& id, std::vector<GpuRef> gpus) {
  return {.id = id,
          .kind = JobKind::kInference,
          .gpus = std::move(gpus),
          .frontier = {{300, 0.061}, {450, 0.050}, {700, 0.047}},
          .slo_floor_w = 450};
}

class ClusterServiceTest : public ::testing::Test {
 protected:
  std::shared_ptr<store::Store> open_store() {
    auto opened = store::open_store("sqlite:" + dir_.path() + "/cluster.db");
    EXPECT_TRUE(opened) << opened.error().message();
    return std::shared_ptr<store::Store>(std::move(*opened));
  }

  std::unique_ptr<ClusterService> open(std::optional<double> cap_w = 4000, double node_timeout_s = 10) {
    ClusterServiceOptions options;
    options.controller.node_timeout_s = node_timeout_s;
    options.initial_cap_w = cap_w;
    options.clock = &clock_;
    options.enforcer = enforcer_;
    auto service = ClusterService::open(open_store(), options);
    EXPECT_TRUE(service) << service.error().message();
    return std::move(*service);
  }

  test::TempDir dir_;
  VirtualClock clock_{kStartUnixNs};
  std::shared_ptr<RecordingEnforcer> enforcer_ = std::make_shared<RecordingEnforcer>();
};

// The limits of `node` in `decision`, by GPU index.
std::map<int, double> limits_on(const ClusterDecision& decision, const std::string& node) {
  std::map<int, double> limits;
  for (const GpuLimit& limit : decision.limits) {
    if (limit.gpu.node == node) {
      limits[limit.gpu.index] = limit.power_limit_w;
    }
  }
  return limits;
}

TEST_F(ClusterServiceTest, EveryChangeReplansAndIsEnforcedOnEveryNode) {
  auto service = open();
  ASSERT_TRUE(service->cap_w());
  EXPECT_DOUBLE_EQ(*service->cap_w(), 4000);
  auto added = service->add_job(training("pretrain", {{"n1", 0}, {"n1", 1}, {"n2", 0}, {"n2", 1}}));
  ASSERT_TRUE(added) << added.error().message();
  ASSERT_TRUE(*added);
  const uint64_t first = (*added)->version;
  auto chat = service->add_job(inference("chat", {{"n3", 0}, {"n3", 1}}));
  ASSERT_TRUE(chat) << chat.error().message();
  EXPECT_EQ((*chat)->version, first + 1);
  // Every node got exactly its GPUs' limits.
  const ClusterDecision decision = **chat;
  for (const std::string node : {"n1", "n2", "n3"}) {
    EXPECT_EQ(enforcer_->applied().at(node), limits_on(decision, node)) << node;
  }
  EXPECT_LE(sum_of_limits(decision), 4000 + 1e-9);
  EXPECT_GE(limits_on(decision, "n3").at(0), 450);  // the SLO floor first
  // The cap, progress, forecast and a node heard from each re-plan at once.
  auto capped = service->set_cap(3000);
  ASSERT_TRUE(capped) << capped.error().message();
  EXPECT_EQ((*capped)->version, first + 2);
  EXPECT_DOUBLE_EQ((*capped)->cap_w, 3000);
  EXPECT_LE(sum_of_limits(**capped), 3000 + 1e-9);
  EXPECT_EQ(enforcer_->applied().at("n1"), limits_on(**capped, "n1"));
  auto forecast = service->set_forecast(
      {{.length_s = 3600, .intensity_g_per_kwh = 400}, {.length_s = 3600, .intensity_g_per_kwh = 100}},
      kStartS);
  ASSERT_TRUE(forecast) << forecast.error().message();
  EXPECT_EQ((*forecast)->version, first + 3);
  auto heard = service->heard_from("n1");
  ASSERT_TRUE(heard) << heard.error().message();
  EXPECT_EQ((*heard)->version, first + 4);
  auto cleared = service->clear_forecast();
  ASSERT_TRUE(cleared) << cleared.error().message();
  EXPECT_EQ((*cleared)->version, first + 5);
  EXPECT_EQ(service->decision()->version, first + 5);
  EXPECT_EQ(service->stats().replans, 7u);  // the cap at open, then one per change above
  EXPECT_TRUE(service->stats().unanswered_nodes.empty());
}

TEST_F(ClusterServiceTest, AJobEndingHandsItsWattsToTheOthersAndItsNodeIsReleased) {
  auto service = open(1200);
  ASSERT_TRUE(service->add_job(training("a", {{"n1", 0}, {"n1", 1}})));
  auto both = service->add_job(training("b", {{"n2", 0}, {"n2", 1}}));
  ASSERT_TRUE(both) << both.error().message();
  const double a_before = limits_on(**both, "n1").at(0);
  auto alone = service->remove_job("b");
  ASSERT_TRUE(alone) << alone.error().message();
  EXPECT_GT(limits_on(**alone, "n1").at(0), a_before);
  EXPECT_EQ((*alone)->jobs.size(), 1u);
  // n2 has no job left: it was told so (no limits), so its daemon restores its own.
  EXPECT_TRUE(enforcer_->applied().at("n2").empty());
}

TEST_F(ClusterServiceTest, StateSurvivesAReopenAndTheVersionContinues) {
  uint64_t last_version = 0;
  {
    auto service = open(3000);
    ASSERT_TRUE(service->add_job(training("pretrain", {{"n1", 0}, {"n1", 1}})));
    JobSpec deferrable = training("finetune", {{"n2", 0}});
    deferrable.deferrable = true;
    deferrable.deadline_s = kStartS + 12 * 3600;
    deferrable.remaining_s = 2 * 3600;
    ASSERT_TRUE(service->add_job(deferrable));
    ASSERT_TRUE(service->add_job(inference("chat", {{"n3", 0}})));
    ASSERT_TRUE(service->update_progress("finetune", 3600));
    ASSERT_TRUE(service->set_forecast(
        {{.length_s = 3600, .intensity_g_per_kwh = 500}, {.length_s = 7200, .intensity_g_per_kwh = 50}},
        kStartS));
    ASSERT_TRUE(service->set_cap(2500));
    last_version = service->decision()->version;
  }
  clock_.advance(seconds(60));
  // No cap from the options now: the stored one stands; a different initial cap would not override it.
  auto service = open(9999);
  ASSERT_TRUE(service->cap_w());
  EXPECT_DOUBLE_EQ(*service->cap_w(), 2500);
  const auto jobs = service->jobs();
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].id, "pretrain");
  EXPECT_EQ(jobs[1].id, "finetune");
  EXPECT_EQ(jobs[2].id, "chat");
  EXPECT_TRUE(jobs[1].deferrable);
  EXPECT_DOUBLE_EQ(jobs[1].remaining_s, 3600);
  EXPECT_DOUBLE_EQ(jobs[1].deadline_s, kStartS + 12 * 3600);
  ASSERT_TRUE(jobs[2].slo_floor_w);
  EXPECT_DOUBLE_EQ(*jobs[2].slo_floor_w, 450);
  // Opening re-planned once: the version continues from the stored one.
  ASSERT_TRUE(service->decision());
  EXPECT_EQ(service->decision()->version, last_version + 1);
  // The forecast came back too: the deferrable job waits for the cleaner slot.
  EXPECT_EQ(service->decision()->deferred_waiting, std::vector<std::string>{"finetune"});
  // And the registration order goes on after the stored jobs.
  ASSERT_TRUE(service->remove_job("pretrain"));
  ASSERT_TRUE(service->add_job(training("pretrain", {{"n1", 0}})));
  EXPECT_EQ(service->jobs().back().id, "pretrain");
}

TEST_F(ClusterServiceTest, ADeadlineThatPassedWhileDownRunsAsNonDeferrable) {
  {
    auto service = open(3000);
    JobSpec deferrable = training("finetune", {{"n2", 0}});
    deferrable.deferrable = true;
    deferrable.deadline_s = kStartS + 600;
    deferrable.remaining_s = 300;
    ASSERT_TRUE(service->add_job(deferrable));
  }
  clock_.advance(seconds(3600));
  auto service = open();
  ASSERT_EQ(service->jobs().size(), 1u);
  EXPECT_FALSE(service->jobs()[0].deferrable);
  ASSERT_TRUE(service->decision());
  EXPECT_FALSE(service->decision()->jobs[0].paused);
}

TEST_F(ClusterServiceTest, ANodeThatStopsAnsweringIsCountedAtItsMaximum) {
  auto service = open(4000, /*node_timeout_s=*/10);
  ASSERT_TRUE(service->add_job(training("a", {{"n1", 0}, {"n1", 1}})));
  ASSERT_TRUE(service->add_job(training("b", {{"n2", 0}, {"n2", 1}})));
  enforcer_->set_failing("n2", true);
  auto within_timeout = service->tick();
  ASSERT_TRUE(within_timeout) << within_timeout.error().message();
  EXPECT_TRUE((*within_timeout)->silent_nodes.empty());
  EXPECT_EQ(service->stats().unanswered_nodes, std::vector<std::string>{"n2"});
  // Ticks come more often than the timeout (as --cluster-control-period-s must): n1 is heard at each one.
  clock_.advance(seconds(6));
  ASSERT_TRUE(service->tick());
  clock_.advance(seconds(6));
  auto silent = service->tick();
  ASSERT_TRUE(silent) << silent.error().message();
  EXPECT_EQ((*silent)->silent_nodes, std::vector<std::string>{"n2"});
  // Its two GPUs at job b's highest limit (700 W), taken off the cap; the rest shares what is left.
  EXPECT_DOUBLE_EQ((*silent)->reserved_w, 1400);
  EXPECT_EQ(limits_on(**silent, "n2"), (std::map<int, double>{{0, 700}, {1, 700}}));
  EXPECT_LE((*silent)->allocated_w + (*silent)->reserved_w, 4000 + 1e-9);
  // A cap the reserve leaves too little for is refused, and the previous cap and decision stand.
  auto refused = service->set_cap(1500);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kOutOfRange);
  EXPECT_TRUE(refused.error().message().starts_with("cap 1500 W refused: ")) << refused.error().message();
  EXPECT_DOUBLE_EQ(*service->cap_w(), 4000);
  EXPECT_EQ(service->decision()->version, (*silent)->version);
  EXPECT_EQ(service->stats().failed_replans, 1u);
  // The node answers again: heard from at this round, back in the allocation at the next.
  enforcer_->set_failing("n2", false);
  ASSERT_TRUE(service->tick());
  EXPECT_TRUE(service->stats().unanswered_nodes.empty());
  auto back = service->tick();
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_TRUE((*back)->silent_nodes.empty());
  EXPECT_DOUBLE_EQ((*back)->reserved_w, 0);
}

TEST_F(ClusterServiceTest, ATickTheCapCannotHoldKeepsThePreviousDecision) {
  auto service = open(1700, /*node_timeout_s=*/10);
  ASSERT_TRUE(service->add_job(training("a", {{"n1", 0}, {"n1", 1}})));
  ASSERT_TRUE(service->add_job(training("b", {{"n2", 0}, {"n2", 1}})));
  enforcer_->set_failing("n2", true);
  clock_.advance(seconds(6));
  ASSERT_TRUE(service->tick());
  const ClusterDecision before = *service->decision();
  clock_.advance(seconds(6));
  // n2's reserve (2 × 700 W) leaves 300 W, short of job a at its lowest (2 × 200 W).
  auto ticked = service->tick();
  ASSERT_FALSE(ticked);
  EXPECT_EQ(ticked.error().code(), ErrorCode::kOutOfRange);
  EXPECT_TRUE(
      ticked.error().message().starts_with("re-plan refused: the cap of 1700 W less 1400 W for silent nodes "
                                           "(n2) and 0 W for paused jobs leaves 300 W: "))
      << ticked.error().message();
  EXPECT_EQ(service->decision()->version, before.version);
  EXPECT_EQ(service->stats().last_error, ticked.error().message());
  EXPECT_EQ(service->stats().failed_replans, 1u);
  // The previous decision is still what n1 holds.
  EXPECT_EQ(enforcer_->applied().at("n1"), limits_on(before, "n1"));
}

TEST_F(ClusterServiceTest, ARefusedChangeLeavesTheStoreAsItWas) {
  {
    auto service = open(2000);
    ASSERT_TRUE(service->add_job(inference("chat", {{"n1", 0}, {"n1", 1}})));
    auto refused = service->set_cap(800);  // below the SLO floors (2 × 450 W)
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code(), ErrorCode::kOutOfRange);
    EXPECT_EQ(refused.error().message(),
              "cap 800 W refused: the cap of 800 W is 100 W short of the inference jobs' SLO floors with "
              "every training job at its lowest limit (900 W): raise the cap, or allow degraded SLOs");
    // A job the cap cannot hold is refused as a whole.
    auto too_big = service->add_job(inference("chat2", {{"n2", 0}, {"n2", 1}, {"n2", 2}}));
    ASSERT_FALSE(too_big);
    EXPECT_TRUE(too_big.error().message().starts_with("job 'chat2' refused: the cap of 2000 W is"))
        << too_big.error().message();
    EXPECT_EQ(service->jobs().size(), 1u);
  }
  auto service = open();
  EXPECT_DOUBLE_EQ(*service->cap_w(), 2000);
  ASSERT_EQ(service->jobs().size(), 1u);
  EXPECT_EQ(service->jobs()[0].id, "chat");
}

TEST_F(ClusterServiceTest, WithoutACapChangesAreKeptAndNothingIsDecided) {
  auto service = open(std::nullopt);
  EXPECT_FALSE(service->cap_w());
  auto added = service->add_job(training("a", {{"n1", 0}}));
  ASSERT_TRUE(added) << added.error().message();
  EXPECT_FALSE(*added);
  EXPECT_FALSE(service->decision());
  auto capped = service->set_cap(1000);
  ASSERT_TRUE(capped) << capped.error().message();
  ASSERT_TRUE(*capped);
  EXPECT_EQ((*capped)->version, 1u);
}

TEST_F(ClusterServiceTest, BadInputIsRefusedWithTheControllersMessage) {
  auto service = open();
  ASSERT_TRUE(service->add_job(training("a", {{"n1", 0}})));
  const auto message = [](const auto& result) {
    return result ? std::string("(no error)") : result.error().message();
  };
  EXPECT_EQ(message(service->add_job(training("b", {{"n1", 0}}))),
            "job 'b' names GPU n1:0, which job 'a' holds");
  EXPECT_EQ(message(service->add_job(training("a", {{"n9", 0}}))), "job 'a' is already registered");
  JobSpec swapped = training("c", {{"n2", 0}});
  swapped.frontier = {{200, 1.0}, {700, 1.6}};
  EXPECT_TRUE(message(service->add_job(swapped)).starts_with("job 'c': its frontier is not monotone"));
  JobSpec milliwatts = training("d", {{"n2", 0}});
  milliwatts.frontier = {{200'000, 1.6}, {700'000, 1.0}};
  EXPECT_NE(message(service->add_job(milliwatts)).find("is it in mW?"), std::string::npos)
      << message(service->add_job(milliwatts));
  JobSpec late = training("e", {{"n2", 0}});
  late.deferrable = true;
  late.deadline_s = kStartS - 120;
  late.remaining_s = 60;
  EXPECT_TRUE(message(service->add_job(late)).starts_with("job 'e': its deadline passed 120 s ago"))
      << message(service->add_job(late));
  auto unknown = service->remove_job("x");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(unknown.error().message(), "no job 'x' is registered");
  EXPECT_EQ(message(service->update_progress("a", 10)),
            "job 'a' is not deferrable: its progress is not tracked");
  EXPECT_EQ(message(service->set_cap(0)), "the cluster power cap must be a positive number of watts, got 0");
  EXPECT_EQ(message(service->set_forecast({}, kStartS)), "the carbon forecast has no slot");
  EXPECT_EQ(message(service->heard_from("")), "a node with an empty name cannot be heard from");
  // Nothing of that changed the state.
  EXPECT_EQ(service->jobs().size(), 1u);
  EXPECT_DOUBLE_EQ(*service->cap_w(), 4000);
}

// 1,000 GPUs (125 nodes of 8) and 50 jobs, on SQLite: every change still re-plans, holds the cap and is
// enforced on every node. The time of each change is printed (and recorded as a test property), never
// asserted: docs/cluster.md quotes it.
TEST_F(ClusterServiceTest, AThousandGpusReplanOnEveryChange) {
  auto service = open(0.8 * 1000 * 700);
  for (int j = 0; j < 50; ++j) {
    std::vector<GpuRef> gpus;
    for (int g = 0; g < 20; ++g) {
      const int gpu = j * 20 + g;
      gpus.push_back({fmt::format("n{:03d}", gpu / 8), gpu % 8});
    }
    JobSpec spec =
        j % 10 == 0 ? inference(fmt::format("job{}", j), gpus) : training(fmt::format("job{}", j), gpus);
    spec.priority = 1 + j % 3;
    ASSERT_TRUE(service->add_job(spec));
  }
  double worst_change_s = 0;
  double worst_controller_s = 0;
  double total_change_s = 0;
  int changes = 0;
  const auto note = [&] {
    const ReplanStats stats = service->stats();
    worst_change_s = std::max(worst_change_s, stats.last_replan_s);
    worst_controller_s = std::max(worst_controller_s, stats.last_controller_s);
    total_change_s += stats.last_replan_s;
    ++changes;
  };
  for (const double cap_w : {500'000.0, 450'000.0, 600'000.0, 560'000.0}) {
    auto capped = service->set_cap(cap_w);
    ASSERT_TRUE(capped) << capped.error().message();
    EXPECT_EQ((*capped)->limits.size(), 1000u);
    EXPECT_LE(sum_of_limits(**capped), cap_w + 1e-6);
    note();
  }
  ASSERT_TRUE(service->remove_job("job7"));
  note();
  ASSERT_TRUE(service->add_job(training("job7", {{"n017", 4}, {"n017", 5}})));
  note();
  ASSERT_TRUE(service->tick());
  note();
  EXPECT_EQ(enforcer_->applied().size(), 125u);
  const std::string figures = fmt::format(
      "1,000 GPUs, 50 jobs, SQLite: {} changes, mean {:.2f} ms, worst {:.2f} ms (controller worst {:.2f} ms)",
      changes, total_change_s / changes * 1e3, worst_change_s * 1e3, worst_controller_s * 1e3);
  RecordProperty("replan_figures", figures);
  std::cout << figures << "\n";
}

TEST(ClusterServiceOpen, BadOptionsAreRefused) {
  auto store = std::shared_ptr<store::Store>(store::memory_store());
  auto bad_cap = ClusterService::open(store, {.initial_cap_w = -5});
  ASSERT_FALSE(bad_cap);
  EXPECT_EQ(bad_cap.error().message(), "the cluster power cap must be a positive number of watts, got -5");
  auto bad_period = ClusterService::open(store, {.control_period_s = -1});
  ASSERT_FALSE(bad_period);
  EXPECT_EQ(bad_period.error().message(), "the control period must be a number of seconds ≥ 0, got -1");
}

TEST(DaemonEnforcer, RefusesBadNodesAndNamesTheNodeThatDoesNotAnswer) {
  const auto message = [](std::vector<NodeAddress> nodes) {
    auto created = DaemonEnforcer::create(std::move(nodes));
    return created ? std::string("(no error)") : created.error().message();
  };
  EXPECT_EQ(message({}), "no node daemon given");
  EXPECT_EQ(message({{"", "/run/a.sock"}}), "node '' at '/run/a.sock': a node needs a name and an address");
  EXPECT_EQ(message({{"n1", "/run/a.sock"}, {"n1", "/run/b.sock"}}), "node 'n1' is given twice");
  test::TempDir dir;
  auto enforcer = DaemonEnforcer::create({{"n1", dir.path() + "/absent.sock"}});
  ASSERT_TRUE(enforcer) << enforcer.error().message();
  // Built member by member, each string moved in: g++ 12 warns falsely (maybe-uninitialized, restrict) on the
  // designated initializer and on assigning a literal.
  GpuLimit limit;
  limit.gpu = {"n1", 0};
  limit.job_id = std::string("a");
  limit.power_limit_w = 300;
  const std::vector<GpuLimit> limits = {limit};
  auto unknown = (*enforcer)->apply("n9", limits);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(unknown.error().message(), "node 'n9' has no daemon address (--cluster-nodes)");
  auto absent = (*enforcer)->apply("n1", limits);
  ASSERT_FALSE(absent);
  EXPECT_TRUE(
      absent.error().message().starts_with("node 'n1' (" + dir.path() + "/absent.sock): cannot connect"))
      << absent.error().message();
}

TEST(ClusterJobJson, RoundTripsAndNamesEveryBadField) {
  const nlohmann::json body = {{"id", "chat"},
                               {"kind", "inference"},
                               {"gpus", {{{"node", "n1"}, {"index", 0}}, {{"node", "n1"}, {"index", 1}}}},
                               {"priority", 2},
                               {"frontier", {{300, 0.061}, {700, 0.047}}},
                               {"slo_floor_w", 450}};
  auto spec = job_spec_from_json(body, kStartS);
  ASSERT_TRUE(spec) << spec.error().message();
  EXPECT_EQ(spec->kind, JobKind::kInference);
  EXPECT_EQ(spec->gpus, (std::vector<GpuRef>{{"n1", 0}, {"n1", 1}}));
  EXPECT_DOUBLE_EQ(spec->frontier[1].power_limit_w, 700);
  auto again = job_spec_from_json(to_json(*spec), kStartS);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(to_json(*again), to_json(*spec));

  const nlohmann::json deferrable = {{"id", "ft"},
                                     {"gpus", {{{"node", "n1"}, {"index", 0}}}},
                                     {"frontier", {{{"power_limit_w", 300}, {"time_s", 1.2}}}},
                                     {"deferrable", true},
                                     {"deadline_in_s", 3600},
                                     {"remaining_s", 600}};
  auto relative = job_spec_from_json(deferrable, kStartS);
  ASSERT_TRUE(relative) << relative.error().message();
  EXPECT_DOUBLE_EQ(relative->deadline_s, kStartS + 3600);

  const auto message = [](nlohmann::json changed) {
    auto parsed = job_spec_from_json(changed, kStartS);
    return parsed ? std::string("(no error)") : parsed.error().message();
  };
  nlohmann::json changed = body;
  changed["slo_floor_mw"] = 450'000;
  EXPECT_TRUE(message(changed).starts_with("slo_floor_mw: unknown field")) << message(changed);
  changed = body;
  changed["gpus"][1]["index"] = -1;
  EXPECT_EQ(message(changed), "gpus[1].index: must be an integer ≥ 0, got -1");
  changed = body;
  changed["gpus"][0] = "n1:0";
  EXPECT_EQ(message(changed), "gpus[0]: expected {\"node\": NAME, \"index\": I}, got \"n1:0\"");
  changed = body;
  changed["frontier"][1] = {700};
  EXPECT_EQ(
      message(changed),
      "frontier[1]: expected [power_limit_w, time_s] or {\"power_limit_w\": W, \"time_s\": S}, got [700]");
  changed = body;
  changed["kind"] = "batch";
  EXPECT_EQ(message(changed), "kind: expected \"training\" or \"inference\", got \"batch\"");
  changed = body;
  changed.erase("id");
  EXPECT_EQ(message(changed), "id: required: the job's id, a string");
  changed = body;
  changed["deadline_s"] = kStartS + 10;
  EXPECT_EQ(message(changed),
            "deadline_s: only a deferrable job (\"deferrable\": true) has a deadline and remaining time");
  changed = deferrable;
  changed.erase("remaining_s");
  EXPECT_EQ(message(changed),
            "remaining_s: required for a deferrable job: its running time left at full speed, s");
  changed = deferrable;
  changed["deadline_s"] = kStartS;
  EXPECT_EQ(message(changed), "deadline_s: give deadline_s (Unix s) or deadline_in_s (s from now), not both");
  changed = body;
  changed["priority"] = "high";
  EXPECT_EQ(message(changed), "priority: expected a number, got \"high\"");
}

TEST(ClusterDecisionJson, CarriesEveryJobAndGpu) {
  Controller controller;
  ASSERT_TRUE(controller.set_cap(1000));
  ASSERT_TRUE(controller.add_job(training("a", {{"n1", 0}, {"n1", 1}}), 0));
  auto decision = controller.replan(0);
  ASSERT_TRUE(decision) << decision.error().message();
  const nlohmann::json body = to_json(*decision);
  EXPECT_EQ(body["version"], 1);
  EXPECT_EQ(body["cap_w"], 1000.0);
  EXPECT_EQ(body["jobs"].size(), 1u);
  EXPECT_EQ(body["jobs"][0]["id"], "a");
  EXPECT_EQ(body["jobs"][0]["power_limit_w"], 500.0);
  EXPECT_EQ(body["gpus"].size(), 2u);
  EXPECT_EQ(body["gpus"][1]["node"], "n1");
  EXPECT_EQ(body["gpus"][1]["index"], 1);
  EXPECT_EQ(body["gpus"][1]["job_id"], "a");
  EXPECT_TRUE(body["degraded"].is_null());
}

}  // namespace
}  // namespace joule::cluster
