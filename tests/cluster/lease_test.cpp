// SPDX-License-Identifier: Apache-2.0
// Leadership among cluster service replicas on one store (LeaseOptions, docs/cluster.md "High
// availability"), on SQLite: two services on one database file, one leads; a leader that stops renewing is
// taken over after a whole lease on the follower's own clock; the old leader, back, is fenced (its decision
// write refused) and follows; the decision version continues across leaders; a released lease is taken at
// once; with real threads the follower leads within lease + 1 s of the leader's end; every bad option's
// message.
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "joule/cluster/service.hpp"
#include "joule/store/store.hpp"

#include "cluster/service_helpers.hpp"
#include "test_util.hpp"

namespace joule::cluster {
namespace {

using test::kStartUnixNs;
using test::sum_of_limits;
using test::training;

constexpr double kLeaseS = 5;

std::chrono::nanoseconds nanos_of(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

// One replica: its own clock (replicas on several hosts do not share one), enforcer and store connection.
struct Replica {
  std::unique_ptr<VirtualClock> clock = std::make_unique<VirtualClock>(kStartUnixNs);
  std::shared_ptr<RecordingEnforcer> enforcer = std::make_shared<RecordingEnforcer>();
  std::unique_ptr<ClusterService> service;
};

class ClusterLeaseTest : public ::testing::Test {
 protected:
  std::shared_ptr<store::Store> open_store() {
    auto opened = store::open_store("sqlite:" + dir_.path() + "/cluster.db");
    EXPECT_TRUE(opened) << opened.error().message();
    return std::shared_ptr<store::Store>(std::move(*opened));
  }

  ClusterServiceOptions options(const std::string& name, const Clock* clock,
                                std::shared_ptr<NodeEnforcer> enforcer) {
    ClusterServiceOptions options;
    options.initial_cap_w = 4000;
    options.clock = clock;
    options.enforcer = std::move(enforcer);
    options.lease = LeaseOptions{.holder = name,
                                 .address = "http://" + name + ":7787",
                                 .lease_s = kLeaseS,
                                 .renew_period_s = 0,
                                 .release_on_close = false};
    return options;
  }

  Replica open(const std::string& name) {
    Replica replica;
    auto service = ClusterService::open(open_store(), options(name, replica.clock.get(), replica.enforcer));
    EXPECT_TRUE(service) << service.error().message();
    replica.service = std::move(*service);
    return replica;
  }

  test::TempDir dir_;
};

TEST_F(ClusterLeaseTest, OneReplicaLeadsTheOtherFollowsAndServesTheLeadersDecision) {
  Replica a = open("a");
  Replica b = open("b");
  EXPECT_TRUE(a.service->leadership().leading);
  EXPECT_EQ(a.service->leadership().epoch, 1u);
  const Leadership seen_by_b = b.service->leadership();
  EXPECT_FALSE(seen_by_b.leading);
  EXPECT_EQ(seen_by_b.holder, "a");
  EXPECT_EQ(seen_by_b.address, "http://a:7787");
  EXPECT_EQ(seen_by_b.epoch, 1u);

  // A follower opened after the leader's last decision serves it from its first round.
  ASSERT_TRUE(b.service->decision());
  EXPECT_EQ(b.service->decision()->version, a.service->decision()->version);

  ASSERT_TRUE(a.service->add_job(training("pretrain", {{"n1", 0}, {"n1", 1}})));
  ASSERT_TRUE(a.service->add_job(training("finetune", {{"n2", 0}})));
  const auto decision = a.service->decision();
  ASSERT_TRUE(decision);
  // The follower reads the state and the decision as written: it does not re-plan.
  ASSERT_TRUE(b.service->lease_round());
  EXPECT_EQ(b.service->jobs().size(), 2u);
  EXPECT_EQ(b.service->cap_w(), 4000);
  ASSERT_TRUE(b.service->decision());
  EXPECT_EQ(b.service->decision()->version, decision->version);
  EXPECT_EQ(to_json(*b.service->decision()), to_json(*decision));
  EXPECT_EQ(b.enforcer->calls(), 0u);

  // A change on the follower is refused, naming the leader; so is a tick.
  auto refused = b.service->set_cap(3000);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kState);
  EXPECT_EQ(refused.error().message(),
            "this replica (b) does not lead: changes go to the leader at http://a:7787 (epoch 1)");
  EXPECT_FALSE(b.service->tick());
  EXPECT_FALSE(b.service->add_job(training("other", {{"n3", 0}})));
  EXPECT_EQ(a.service->cap_w(), 4000);
  EXPECT_EQ(b.enforcer->calls(), 0u);
}

TEST_F(ClusterLeaseTest, ALeaderThatRenewsKeepsItsLease) {
  Replica a = open("a");
  Replica b = open("b");
  for (int round = 0; round < 20; ++round) {
    a.clock->advance(nanos_of(1));
    b.clock->advance(nanos_of(1));
    ASSERT_TRUE(a.service->lease_round());
    ASSERT_TRUE(b.service->lease_round());
    EXPECT_TRUE(a.service->leadership().leading) << "round " << round;
    EXPECT_FALSE(b.service->leadership().leading) << "round " << round;
  }
  EXPECT_EQ(a.service->leadership().epoch, 1u);
}

TEST_F(ClusterLeaseTest, AStalledLeaderIsTakenOverAfterAWholeLeaseAndIsFencedWhenItComesBack) {
  Replica a = open("a");
  Replica b = open("b");
  ASSERT_TRUE(a.service->add_job(training("pretrain", {{"n1", 0}, {"n1", 1}})));
  const uint64_t last_version = a.service->decision()->version;
  const size_t a_calls = a.enforcer->calls();
  ASSERT_TRUE(b.service->lease_round());  // sees the lease document as a's job left it

  // a stops renewing (paused, cut off): b waits a whole lease on its own clock, not less.
  b.clock->advance(nanos_of(kLeaseS - 0.5));
  ASSERT_TRUE(b.service->lease_round());
  EXPECT_FALSE(b.service->leadership().leading);
  b.clock->advance(nanos_of(1));
  auto round = b.service->lease_round();
  ASSERT_TRUE(round) << round.error().message();
  EXPECT_TRUE(round->leading);
  EXPECT_EQ(round->epoch, 2u);
  // It re-planned from the stored state at once: same jobs, the version continued, enforced.
  ASSERT_TRUE(b.service->decision());
  EXPECT_EQ(b.service->decision()->version, last_version + 1);
  EXPECT_EQ(b.service->jobs().size(), 1u);
  EXPECT_EQ(b.enforcer->applied().at("n1").size(), 2u);
  EXPECT_LE(sum_of_limits(*b.service->decision()), 4000 + 1e-6);

  // a, whose clock did not move (it believes its lease still runs), tries a change: the write is fenced
  // in its transaction, nothing is enforced, and a follows from then on.
  EXPECT_TRUE(a.service->leadership().leading);
  auto fenced = a.service->add_job(training("late", {{"n2", 0}}));
  ASSERT_FALSE(fenced);
  EXPECT_EQ(fenced.error().code(), ErrorCode::kState);
  EXPECT_EQ(fenced.error().message(),
            "this replica (a) does not lead: changes go to the leader at http://b:7787 (epoch 2)");
  EXPECT_FALSE(a.service->leadership().leading);
  EXPECT_EQ(a.enforcer->calls(), a_calls);
  ASSERT_TRUE(a.service->lease_round());
  EXPECT_FALSE(a.service->leadership().leading);
  EXPECT_EQ(a.service->leadership().holder, "b");
  EXPECT_EQ(a.service->leadership().epoch, 2u);
  EXPECT_EQ(a.service->decision()->version, last_version + 1);
  auto refused = a.service->set_cap(3000);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message(),
            "this replica (a) does not lead: changes go to the leader at http://b:7787 (epoch 2)");

  // The new leader's changes continue the version; the jobs the refused change named are not there.
  auto added = b.service->add_job(training("finetune", {{"n2", 0}}));
  ASSERT_TRUE(added) << added.error().message();
  EXPECT_EQ((*added)->version, last_version + 2);
  EXPECT_EQ(b.service->jobs().size(), 2u);

  // Even long after, a stays a follower while b renews.
  for (int i = 0; i < 10; ++i) {
    a.clock->advance(nanos_of(1));
    b.clock->advance(nanos_of(1));
    ASSERT_TRUE(b.service->lease_round());
    ASSERT_TRUE(a.service->lease_round());
    EXPECT_FALSE(a.service->leadership().leading);
  }
  EXPECT_EQ(a.service->decision()->version, b.service->decision()->version);
}

TEST_F(ClusterLeaseTest, ALeaderWhoseLeaseRanOutOnItsClockStopsEnforcing) {
  Replica a = open("a");
  ASSERT_TRUE(a.service->add_job(training("pretrain", {{"n1", 0}})));
  a.clock->advance(nanos_of(kLeaseS));  // its renewals stalled: the lease it counts on has run out
  EXPECT_FALSE(a.service->leadership().leading);
  const size_t calls = a.enforcer->calls();
  EXPECT_FALSE(a.service->tick());
  EXPECT_EQ(a.enforcer->calls(), calls);
  // Nobody took it over: the next round renews it, epoch unchanged.
  auto round = a.service->lease_round();
  ASSERT_TRUE(round) << round.error().message();
  EXPECT_TRUE(round->leading);
  EXPECT_EQ(round->epoch, 1u);
  EXPECT_TRUE(a.service->tick());
}

TEST_F(ClusterLeaseTest, AReleasedLeaseIsTakenAtTheNextRound) {
  Replica b;
  {
    ClusterServiceOptions released = options("a", nullptr, nullptr);
    released.lease->release_on_close = true;
    auto a = ClusterService::open(open_store(), released);
    ASSERT_TRUE(a) << a.error().message();
    EXPECT_TRUE((*a)->leadership().leading);
    b = open("b");
    EXPECT_FALSE(b.service->leadership().leading);
  }
  auto round = b.service->lease_round();
  ASSERT_TRUE(round) << round.error().message();
  EXPECT_TRUE(round->leading);
  EXPECT_EQ(round->epoch, 2u);
}

TEST_F(ClusterLeaseTest, WithThreadsTheFollowerLeadsSoonAfterTheLeadersEnd) {
  constexpr double kRealLeaseS = 1;
  auto real = [&](const std::string& name) {
    ClusterServiceOptions opts = options(name, nullptr, std::make_shared<RecordingEnforcer>());
    opts.lease->lease_s = kRealLeaseS;
    opts.lease->renew_period_s = 0.2;
    opts.control_period_s = 0.5;
    auto service = ClusterService::open(open_store(), opts);
    EXPECT_TRUE(service) << service.error().message();
    return std::move(*service);
  };
  auto a = real("a");
  auto b = real("b");
  ASSERT_TRUE(a->add_job(training("pretrain", {{"n1", 0}})));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // b watches a renew
  EXPECT_TRUE(a->leadership().leading);
  EXPECT_FALSE(b->leadership().leading);
  const uint64_t version = a->decision()->version;
  const auto ended = std::chrono::steady_clock::now();
  a.reset();  // as if killed: the lease is not released
  while (!b->leadership().leading && std::chrono::steady_clock::now() - ended < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double took_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - ended).count();
  std::cout << fmt::format("[ failover ] {:.2f} s (lease {:g} s, renewed every 0.2 s)\n", took_s,
                           kRealLeaseS);
  ASSERT_TRUE(b->leadership().leading);
  // About a lease (1.1 s measured); the bound is loose because CI's two cores run the sanitizer build
  // beside other tests: the figure belongs to docs/cluster.md, the test checks that it happens at all.
  EXPECT_LE(took_s, kRealLeaseS + 4);
  EXPECT_EQ(b->leadership().epoch, 2u);
  ASSERT_TRUE(b->decision());
  EXPECT_GT(b->decision()->version, version);
}

TEST_F(ClusterLeaseTest, OnOneProcessAMemoryStoreLeads) {
  ClusterServiceOptions opts = options("solo", nullptr, nullptr);
  auto service = ClusterService::open(std::shared_ptr<store::Store>(store::memory_store()), opts);
  ASSERT_TRUE(service) << service.error().message();
  EXPECT_TRUE((*service)->leadership().leading);
  EXPECT_TRUE((*service)->add_job(training("pretrain", {{"n1", 0}})));
}

TEST_F(ClusterLeaseTest, AnUnreadableLeaseDocumentIsNamed) {
  Replica a = open("a");
  auto store = open_store();
  ASSERT_TRUE(store->run([](store::Transaction& transaction) {
    return transaction.update("cluster_leader", "leader", R"({"holder": 7})");
  }));
  auto round = a.service->lease_round();
  ASSERT_FALSE(round);
  EXPECT_EQ(round.error().code(), ErrorCode::kParse);
  EXPECT_EQ(
      round.error().message(),
      "cluster lease: stored cluster lease (cluster_leader/leader): expected {holder, address, epoch}, got "
      "{\"holder\": 7}");
  // Its writes are refused too: the lease they check cannot be read.
  EXPECT_FALSE(a.service->add_job(training("pretrain", {{"n1", 0}})));
}

TEST(ClusterLeaseOptions, BadOptionsAreRefused) {
  auto store = std::shared_ptr<store::Store>(store::memory_store());
  auto with = [&](LeaseOptions lease) {
    ClusterServiceOptions options;
    options.lease = std::move(lease);
    auto opened = ClusterService::open(store, options);
    EXPECT_FALSE(opened);
    return opened ? std::string() : opened.error().message();
  };
  EXPECT_EQ(with({.holder = "", .address = ""}), "the cluster lease needs a holder id (unique per replica)");
  EXPECT_EQ(with({.holder = "a", .address = "", .lease_s = 0}),
            "the cluster lease must be a positive number of seconds, got 0");
  EXPECT_EQ(with({.holder = "a", .address = "", .lease_s = 2, .renew_period_s = 1}),
            "the cluster lease's renewal period (1 s) must be ≥ 0 and shorter than half the lease (2 s), so "
            "that a renewal that is late once does not lose the lease");
  auto plain = ClusterService::open(store, {});
  ASSERT_TRUE(plain);
  EXPECT_TRUE((*plain)->leadership().leading);
  auto round = (*plain)->lease_round();
  ASSERT_FALSE(round);
  EXPECT_EQ(round.error().message(), "this cluster service has no lease (ClusterServiceOptions::lease)");
}

TEST(ClusterDecisionFromJson, RoundTripsAndNamesABadField) {
  Controller controller;
  ASSERT_TRUE(controller.set_cap(1000));
  ASSERT_TRUE(controller.add_job(training("a", {{"n1", 0}, {"n2", 1}}), 0));
  auto decision = controller.replan(0);
  ASSERT_TRUE(decision);
  const auto json = to_json(*decision);
  auto parsed = decision_from_json(json);
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(to_json(*parsed), json);
  auto bad = json;
  bad["gpus"][1]["power_limit_w"] = "lots";
  auto refused = decision_from_json(bad);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kParse);
  EXPECT_EQ(refused.error().message(),
            "cluster decision: gpus[1].power_limit_w: expected a number, got \"lots\"");
  bad = json;
  bad.erase("jobs");
  EXPECT_EQ(decision_from_json(bad).error().message(), "cluster decision: jobs: missing");
}

}  // namespace
}  // namespace joule::cluster
