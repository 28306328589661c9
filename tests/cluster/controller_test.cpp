// SPDX-License-Identifier: Apache-2.0
// The cluster controller (joule/cluster/controller.hpp): a job ending hands its watts to the others, a cap
// change moves the limits within it, a silent node's GPUs count at their maximum until heard from, inference
// floors hold before training, deferrable work waits for the clean slot and runs in it without trading its
// deadline, versions increase, and every bad input is refused with its message.
#include "joule/cluster/controller.hpp"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace joule::cluster {
namespace {

constexpr double kOneHourS = 3600;

// `count` GPUs of `node` from index 0.
std::vector<GpuRef> gpus_on(const std::string& node, int count) {
  std::vector<GpuRef> gpus;
  for (int index = 0; index < count; ++index) {
    gpus.push_back({node, index});
  }
  return gpus;
}

// A job on 100–700 W every 100 W, at full speed from `knee_w` up and slowing as knee/limit below it.
JobSpec job(std::string id, std::vector<GpuRef> gpus, double knee_w = 500) {
  JobSpec spec;
  spec.id = std::move(id);
  spec.gpus = std::move(gpus);
  for (double limit_w = 100; limit_w <= 700; limit_w += 100) {
    spec.frontier.push_back({limit_w, limit_w >= knee_w ? 1.0 : knee_w / limit_w});
  }
  return spec;
}

JobSpec inference(std::string id, std::vector<GpuRef> gpus, double slo_floor_w) {
  JobSpec spec = job(std::move(id), std::move(gpus), 600);
  spec.kind = JobKind::kInference;
  spec.slo_floor_w = slo_floor_w;
  return spec;
}

JobSpec deferrable(std::string id, std::vector<GpuRef> gpus, double remaining_s, double deadline_s) {
  JobSpec spec = job(std::move(id), std::move(gpus));
  spec.deferrable = true;
  spec.remaining_s = remaining_s;
  spec.deadline_s = deadline_s;
  return spec;
}

std::vector<ForecastSlot> hourly(std::vector<double> intensities) {
  std::vector<ForecastSlot> slots;
  for (const double intensity : intensities) {
    slots.push_back({.length_s = kOneHourS, .intensity_g_per_kwh = intensity});
  }
  return slots;
}

const JobDecision& of(const ClusterDecision& decision, const std::string& id) {
  for (const JobDecision& job : decision.jobs) {
    if (job.id == id) {
      return job;
    }
  }
  throw std::runtime_error("no job " + id);
}

// Σ of every GPU's limit, silent ones at their count.
double sum_of_limits(const ClusterDecision& decision) {
  double sum_w = 0;
  for (const GpuLimit& limit : decision.limits) {
    sum_w += limit.power_limit_w;
  }
  return sum_w;
}

ClusterDecision replan_ok(Controller& controller, double now_s) {
  auto decision = controller.replan(now_s);
  if (!decision) {
    throw std::runtime_error(decision.error().message());
  }
  return *std::move(decision);
}

TEST(Controller, AJobEndingHandsItsWattsToTheOthers) {
  Controller controller;
  ASSERT_TRUE(controller.set_cap(8 * 300));
  ASSERT_TRUE(controller.add_job(job("a", gpus_on("n1", 4)), 0));
  // b is at full speed from 300 W: the 2,400 W are best spent as 300 W each.
  ASSERT_TRUE(controller.add_job(job("b", gpus_on("n2", 4), 300), 0));
  const ClusterDecision both = replan_ok(controller, 1);
  EXPECT_EQ(both.limits.size(), 8U);
  EXPECT_DOUBLE_EQ(of(both, "a").power_limit_w, 300);
  EXPECT_DOUBLE_EQ(of(both, "b").power_limit_w, 300);
  EXPECT_EQ(of(both, "a").reason, "capped at 300 W of 500 W: 40.0% of its throughput given up");
  ASSERT_TRUE(controller.remove_job("b"));
  const ClusterDecision alone = replan_ok(controller, 2);
  EXPECT_EQ(alone.limits.size(), 4U);
  EXPECT_EQ(alone.jobs.size(), 1U);
  // b's 1,200 W go to a: from 300 W to its full speed at 500 W (600 W would buy nothing).
  EXPECT_DOUBLE_EQ(of(alone, "a").power_limit_w, 500);
  EXPECT_EQ(of(alone, "a").reason, "at full speed (500 W)");
  EXPECT_LE(alone.allocated_w, alone.cap_w);
  // Its GPUs are free again for another job.
  EXPECT_TRUE(controller.add_job(job("c", gpus_on("n2", 2)), 3));
}

TEST(Controller, ACapChangeMovesTheLimitsWithinIt) {
  Controller controller;
  ASSERT_TRUE(controller.set_cap(10'000));
  ASSERT_TRUE(controller.add_job(job("a", gpus_on("n1", 4), 600), 0));
  ASSERT_TRUE(controller.add_job(job("b", gpus_on("n2", 4), 400), 0));
  JobSpec heavy = job("c", gpus_on("n3", 2), 700);
  heavy.priority = 3;
  ASSERT_TRUE(controller.add_job(heavy, 0));
  double previous_sum_w = 1e9;
  for (const double cap_w : {10'000.0, 4'000.0, 2'500.0, 1'000.0}) {
    ASSERT_TRUE(controller.set_cap(cap_w));
    const ClusterDecision decision = replan_ok(controller, 1);
    EXPECT_DOUBLE_EQ(decision.cap_w, cap_w);
    EXPECT_LE(decision.allocated_w, cap_w + 1e-9);
    EXPECT_DOUBLE_EQ(sum_of_limits(decision), decision.allocated_w);
    EXPECT_LT(decision.allocated_w, previous_sum_w) << "cap " << cap_w;
    previous_sum_w = decision.allocated_w;
  }
  ASSERT_TRUE(controller.set_cap(10'000));
  const ClusterDecision loose = replan_ok(controller, 2);
  EXPECT_DOUBLE_EQ(loose.allocated_w, 4 * 600 + 4 * 400 + 2 * 700);
  EXPECT_DOUBLE_EQ(of(loose, "a").power_limit_w, 600);
  EXPECT_DOUBLE_EQ(of(loose, "b").power_limit_w, 400);
  EXPECT_DOUBLE_EQ(of(loose, "c").power_limit_w, 700);
  ASSERT_TRUE(controller.set_cap(1'000));
  const ClusterDecision tight = replan_ok(controller, 3);
  for (const JobDecision& decided : tight.jobs) {
    EXPECT_DOUBLE_EQ(decided.power_limit_w, 100) << decided.id;
  }
  // 200 W more buy the heavy job (priority 3, 2 GPUs) its next step first.
  ASSERT_TRUE(controller.set_cap(1'200));
  const ClusterDecision more = replan_ok(controller, 4);
  EXPECT_DOUBLE_EQ(of(more, "c").power_limit_w, 200);
  EXPECT_DOUBLE_EQ(of(more, "a").power_limit_w, 100);
  EXPECT_EQ(of(tight, "a").reason, "at its lowest limit (100 W): 83.3% of its throughput given up");
}

TEST(Controller, ASilentNodeCountsAtItsMaximumUntilHeardFrom) {
  Controller controller({.node_timeout_s = 30});
  ASSERT_TRUE(controller.set_cap(4'000));
  ASSERT_TRUE(controller.add_job(job("a", gpus_on("n1", 4)), 0));
  ASSERT_TRUE(controller.add_job(job("b", gpus_on("n2", 4)), 0));
  const ClusterDecision before = replan_ok(controller, 10);
  EXPECT_TRUE(before.silent_nodes.empty());
  EXPECT_DOUBLE_EQ(of(before, "a").power_limit_w, 500);
  // n1 answers, n2 does not: at 60 s it has been silent for 60 s > 30 s.
  ASSERT_TRUE(controller.heard_from("n1", 50));
  const ClusterDecision silent = replan_ok(controller, 60);
  EXPECT_EQ(silent.silent_nodes, std::vector<std::string>{"n2"});
  EXPECT_DOUBLE_EQ(silent.reserved_w, 4 * 700);
  // a shrinks to what the reserve leaves: (4000 − 2800) / 4 GPUs.
  EXPECT_DOUBLE_EQ(of(silent, "a").power_limit_w, 300);
  EXPECT_LE(silent.allocated_w + silent.reserved_w, silent.cap_w);
  EXPECT_DOUBLE_EQ(sum_of_limits(silent), silent.allocated_w + silent.reserved_w);
  for (const GpuLimit& limit : silent.limits) {
    EXPECT_EQ(limit.silent, limit.gpu.node == "n2");
    if (limit.silent) {
      EXPECT_DOUBLE_EQ(limit.power_limit_w, 700);
    }
  }
  EXPECT_EQ(of(silent, "b").reason,
            "every GPU is on a silent node (n2): counted at 700 W each until heard from");
  // n2 answers again: everything back where it was.
  ASSERT_TRUE(controller.heard_from("n2", 70));
  ASSERT_TRUE(controller.heard_from("n1", 70));
  const ClusterDecision back = replan_ok(controller, 71);
  EXPECT_TRUE(back.silent_nodes.empty());
  EXPECT_DOUBLE_EQ(back.reserved_w, 0);
  EXPECT_DOUBLE_EQ(of(back, "a").power_limit_w, 500);
  EXPECT_DOUBLE_EQ(of(back, "b").power_limit_w, 500);
}

TEST(Controller, AJobAcrossASilentNodeRunsOnItsLiveGpusAndTheShortfallIsNamed) {
  Controller controller({.node_timeout_s = 30});
  ASSERT_TRUE(controller.set_cap(3'700));
  std::vector<GpuRef> gpus = gpus_on("n1", 2);
  gpus.push_back({"n2", 0});
  ASSERT_TRUE(controller.add_job(job("a", gpus), 0));
  ASSERT_TRUE(controller.add_job(job("b", gpus_on("n3", 4)), 0));
  ASSERT_TRUE(controller.heard_from("n1", 40));
  ASSERT_TRUE(controller.heard_from("n3", 40));
  const ClusterDecision decision = replan_ok(controller, 40);
  EXPECT_DOUBLE_EQ(decision.reserved_w, 700);
  EXPECT_EQ(decision.allocation.jobs[0].id, "a");
  EXPECT_EQ(of(decision, "a").reason,
            "at full speed (500 W); 1 of its GPUs on silent node(s) n2 counted at 700 W each");
  // A cap the reserve leaves too little of is refused, saying what was taken off.
  ASSERT_TRUE(controller.set_cap(1'200));
  const auto refused = controller.replan(41);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(
      refused.error().message(),
      "the cap of 1200 W less 700 W for silent nodes (n2) and 0 W for paused jobs leaves 500 W: the cap of "
      "500 W is 100 W short of every job at its lowest power limit (600 W): no allocation holds it");
  // A reserve above the cap itself: refused, whatever runs.
  ASSERT_TRUE(controller.set_cap(600));
  EXPECT_EQ(
      controller.replan(42).error().message(),
      "the cap of 600 W is 700 W short of the silent nodes' reserve (700 W: n2), the paused jobs' lowest "
      "limits (0 W) and the running jobs' lowest limits (600 W): no allocation holds it");
}

TEST(Controller, InferenceFloorsHoldBeforeTraining) {
  Controller controller;
  ASSERT_TRUE(controller.add_job(inference("chat", gpus_on("n1", 4), 400), 0));
  ASSERT_TRUE(controller.add_job(job("train", gpus_on("n2", 4)), 0));
  ASSERT_TRUE(controller.set_cap(2'000));
  const ClusterDecision decision = replan_ok(controller, 1);
  EXPECT_DOUBLE_EQ(of(decision, "chat").power_limit_w, 400);
  EXPECT_EQ(of(decision, "chat").reason, "at its SLO floor (400 W)");
  EXPECT_DOUBLE_EQ(of(decision, "train").power_limit_w, 100);
  EXPECT_FALSE(decision.degraded);
  // Below the floors: refused with allocate()'s message, the previous decision standing (no new version).
  ASSERT_TRUE(controller.set_cap(1'800));
  const uint64_t next = controller.next_version();
  const auto refused = controller.replan(2);
  ASSERT_FALSE(refused);
  EXPECT_EQ(
      refused.error().message(),
      "the cap of 1800 W is 200 W short of the inference jobs' SLO floors with every training job at its "
      "lowest limit (2000 W): raise the cap, or allow degraded SLOs");
  EXPECT_EQ(controller.next_version(), next);
  // Allowed to degrade: said so, job by job.
  Controller degrading({.degrade_slos = true});
  ASSERT_TRUE(degrading.add_job(inference("chat", gpus_on("n1", 4), 400), 0));
  ASSERT_TRUE(degrading.add_job(job("train", gpus_on("n2", 4)), 0));
  ASSERT_TRUE(degrading.set_cap(1'800));
  const ClusterDecision degraded = replan_ok(degrading, 1);
  ASSERT_TRUE(degraded.degraded);
  EXPECT_LE(degraded.allocated_w, 1'800);
  const JobDecision& chat = of(degraded, "chat");
  EXPECT_LT(chat.power_limit_w, 400);
  EXPECT_EQ(chat.reason, fmt::format("below its SLO floor of 400 W at {:g} W (degraded: the cap is short)",
                                     chat.power_limit_w));
  EXPECT_DOUBLE_EQ(of(degraded, "train").power_limit_w, 100);
}

TEST(Controller, ADeferrableJobWaitsForTheCleanSlotAndRunsInIt) {
  Controller controller;
  ASSERT_TRUE(controller.set_cap(8 * 700));
  ASSERT_TRUE(controller.add_job(job("now", gpus_on("n1", 4)), 0));
  ASSERT_TRUE(controller.add_job(deferrable("later", gpus_on("n2", 4), kOneHourS, 3 * kOneHourS), 0));
  ASSERT_TRUE(controller.set_forecast(hourly({500, 100, 400}), 0));
  const ClusterDecision dirty = replan_ok(controller, 0);
  EXPECT_EQ(dirty.deferred_waiting, std::vector<std::string>{"later"});
  EXPECT_TRUE(dirty.deferred_running.empty());
  const JobDecision& waiting = of(dirty, "later");
  EXPECT_TRUE(waiting.paused);
  EXPECT_DOUBLE_EQ(waiting.power_limit_w, 100);
  EXPECT_EQ(waiting.reason,
            "deferred: cleaner hours before its deadline in 3.0 h (runs in 1.0 h at 100 g/kWh, against 500 "
            "g/kWh now); paused at 100 W");
  for (const GpuLimit& limit : dirty.limits) {
    EXPECT_EQ(limit.paused, limit.job_id == "later");
  }
  EXPECT_DOUBLE_EQ(dirty.paused_w, 400);
  ASSERT_TRUE(dirty.deferral);
  EXPECT_LT(dirty.deferral->carbon_g, dirty.deferral->carbon_as_soon_as_possible_g);
  EXPECT_DOUBLE_EQ(of(dirty, "now").power_limit_w, 500);
  // In the clean hour it runs, at full speed (the nodes kept answering).
  ASSERT_TRUE(controller.heard_from("n1", kOneHourS));
  ASSERT_TRUE(controller.heard_from("n2", kOneHourS));
  const ClusterDecision clean = replan_ok(controller, kOneHourS);
  EXPECT_EQ(clean.deferred_running, std::vector<std::string>{"later"});
  const JobDecision& running = of(clean, "later");
  EXPECT_FALSE(running.paused);
  EXPECT_DOUBLE_EQ(running.power_limit_w, 500);
  EXPECT_EQ(
      running.reason,
      "deferrable: runs now at 100 g/kWh, one of the slots its plan takes before its deadline in 2.0 h; at "
      "full speed (500 W)");
  // Its work done, it pauses until removed.
  ASSERT_TRUE(controller.update_progress("later", 0));
  EXPECT_TRUE(of(replan_ok(controller, kOneHourS + 1), "later").paused);
  // Without a forecast, every job runs.
  controller.clear_forecast();
  ASSERT_TRUE(controller.update_progress("later", kOneHourS));
  const ClusterDecision unplanned = replan_ok(controller, kOneHourS + 2);
  EXPECT_FALSE(of(unplanned, "later").paused);
  EXPECT_EQ(of(unplanned, "later").reason, "deferrable, no carbon forecast: runs now; at full speed (500 W)");
  EXPECT_FALSE(unplanned.deferral);
}

TEST(Controller, ADeadlineIsNeverTradedForCarbon) {
  Controller controller({.node_timeout_s = 1e9});
  ASSERT_TRUE(controller.set_cap(8 * 700));
  // Three hours of work, two to the deadline: at risk, so it runs now although the hour is dirty.
  ASSERT_TRUE(controller.add_job(deferrable("tight", gpus_on("n1", 4), 3 * kOneHourS, 2 * kOneHourS), 0));
  ASSERT_TRUE(controller.set_forecast(hourly({500, 100, 50}), 0));
  const ClusterDecision decision = replan_ok(controller, 0);
  EXPECT_EQ(decision.at_risk, std::vector<std::string>{"tight"});
  EXPECT_EQ(decision.deferred_running, std::vector<std::string>{"tight"});
  const JobDecision& tight = of(decision, "tight");
  EXPECT_FALSE(tight.paused);
  EXPECT_TRUE(tight.at_risk);
  EXPECT_EQ(
      tight.reason,
      "at risk: its deadline in 2.0 h cannot be met in cleaner hours within the forecast's spare watts, so "
      "it runs now; at full speed (500 W)");
  // Two hours of work for two hours: it runs now too (the dirty hour is needed), not at risk.
  ASSERT_TRUE(controller.update_progress("tight", 2 * kOneHourS));
  const ClusterDecision exact = replan_ok(controller, 0);
  EXPECT_FALSE(of(exact, "tight").paused);
  EXPECT_FALSE(of(exact, "tight").at_risk);
  // Past its deadline with work left: it runs, said so.
  const ClusterDecision late = replan_ok(controller, 3 * kOneHourS);
  EXPECT_FALSE(of(late, "tight").paused);
  EXPECT_EQ(of(late, "tight").reason,
            "at risk: its deadline passed 3600 s ago, so it runs now; at full speed (500 W)");
}

TEST(Controller, ForecastSlotsFollowTheClock) {
  Controller controller({.node_timeout_s = 1e9});
  ASSERT_TRUE(controller.set_cap(4 * 700));
  ASSERT_TRUE(controller.add_job(deferrable("d", gpus_on("n1", 4), 0.5 * kOneHourS, 10 * kOneHourS), 0));
  // A forecast from 1000 s: before it starts, its first (dirty) slot's intensity holds; the clean one is
  // next.
  ASSERT_TRUE(controller.set_forecast(hourly({300, 50}), 1000));
  EXPECT_TRUE(of(replan_ok(controller, 0), "d").paused);
  EXPECT_FALSE(of(replan_ok(controller, 1000 + kOneHourS + 10), "d").paused);
  // Once the forecast has ended, every job runs.
  const ClusterDecision ended = replan_ok(controller, 1000 + 2 * kOneHourS);
  EXPECT_EQ(of(ended, "d").reason,
            "deferrable, the carbon forecast has ended: runs now; at full speed (500 W)");
}

// Random clusters, changes and clocks: whenever a re-plan succeeds, every GPU has one limit, paused GPUs sit
// at their job's lowest limit, silent ones at its highest, and the limits add up to no more than the cap.
TEST(Controller, TheCapHoldsThroughRandomChanges) {
  std::mt19937_64 random(28);
  std::uniform_real_distribution<double> unit(0, 1);
  int succeeded = 0;
  for (int trial = 0; trial < 50; ++trial) {
    Controller controller({.node_timeout_s = 30});
    int gpus_total = 0;
    const int nodes = 2 + trial % 5;
    for (int node = 0; node < nodes; ++node) {
      const std::string name = fmt::format("n{}", node);
      const int count = 1 + static_cast<int>(unit(random) * 4);
      JobSpec spec = job(fmt::format("j{}", node), gpus_on(name, count), 200 + 100 * (node % 5));
      if (node % 4 == 1) {
        spec = inference(spec.id, spec.gpus, 300);
      } else if (node % 3 == 2) {
        spec =
            deferrable(spec.id, spec.gpus, unit(random) * 4 * kOneHourS, (1 + unit(random) * 6) * kOneHourS);
      }
      ASSERT_TRUE(controller.add_job(spec, 0));
      gpus_total += count;
    }
    ASSERT_TRUE(controller.set_forecast(hourly({400, 300, 100, 250, 50, 500}), 0));
    for (double now_s = 0; now_s < 6 * kOneHourS; now_s += 1800) {
      ASSERT_TRUE(controller.set_cap((0.2 + unit(random)) * gpus_total * 700));
      for (int node = 0; node < nodes; ++node) {
        if (unit(random) < 0.8) {
          ASSERT_TRUE(controller.heard_from(fmt::format("n{}", node), now_s));
        }
      }
      const auto decision = controller.replan(now_s);
      if (!decision) {
        EXPECT_EQ(decision.error().code(), ErrorCode::kOutOfRange) << decision.error().message();
        continue;
      }
      ++succeeded;
      EXPECT_EQ(decision->limits.size(), static_cast<size_t>(gpus_total));
      EXPECT_LE(decision->allocated_w + decision->reserved_w, decision->cap_w + 1e-6);
      EXPECT_NEAR(sum_of_limits(*decision), decision->allocated_w + decision->reserved_w, 1e-6);
      for (const GpuLimit& limit : decision->limits) {
        if (limit.silent) {
          EXPECT_DOUBLE_EQ(limit.power_limit_w, 700);
        } else if (limit.paused) {
          EXPECT_DOUBLE_EQ(limit.power_limit_w, 100);
        }
      }
    }
  }
  EXPECT_GT(succeeded, 100);
}

TEST(Controller, VersionsIncrease) {
  Controller controller({.first_version = 41});
  ASSERT_TRUE(controller.add_job(job("a", gpus_on("n1", 1)), 0));
  EXPECT_EQ(controller.replan(0).error().message(),
            "no cluster power cap is set: call set_cap() before replan()");
  ASSERT_TRUE(controller.set_cap(1000));
  EXPECT_EQ(replan_ok(controller, 1).version, 41U);
  EXPECT_EQ(replan_ok(controller, 2).version, 42U);
  ASSERT_TRUE(controller.set_cap(50));
  EXPECT_FALSE(controller.replan(3));
  ASSERT_TRUE(controller.set_cap(500));
  EXPECT_EQ(replan_ok(controller, 4).version, 43U);
}

TEST(Controller, RefusesBadInputSayingWhich) {
  Controller controller;
  ASSERT_TRUE(controller.add_job(job("a", gpus_on("n1", 2)), 0));
  const auto add_error = [&](JobSpec spec, double now_s = 0) {
    const auto added = controller.add_job(std::move(spec), now_s);
    return added ? std::string() : added.error().message();
  };
  EXPECT_EQ(add_error(job("a", gpus_on("n2", 1))), "job 'a' is already registered");
  EXPECT_EQ(add_error(job("", gpus_on("n2", 1))), "a job has an empty id");
  EXPECT_EQ(add_error(job("b", {{"n2", 0}, {"n1", 0}})), "job 'b' names GPU n1:0, which job 'a' holds");
  EXPECT_EQ(add_error(job("b", {})), "job 'b' names no GPU");
  EXPECT_EQ(add_error(job("b", {{"n2", 0}, {"n2", 0}})), "job 'b' names GPU n2:0 twice");
  EXPECT_EQ(add_error(job("b", {{"", 0}})), "job 'b' names a GPU with an empty node name");
  EXPECT_EQ(add_error(job("b", {{"n2", -1}})), "job 'b' names GPU n2:-1: a GPU index must be ≥ 0");
  EXPECT_EQ(add_error(deferrable("d", gpus_on("n2", 1), 60, 100), 220),
            "job 'd': its deadline passed 120 s ago: give a later one, or run it as non-deferrable");
  EXPECT_EQ(add_error(deferrable("d", gpus_on("n2", 1), -1, 100)),
            "job 'd': its remaining time must be ≥ 0 s, got -1");
  JobSpec served = deferrable("d", gpus_on("n2", 1), 60, 100);
  served.kind = JobKind::kInference;
  EXPECT_EQ(add_error(served), "job 'd': only training work can be deferrable");
  JobSpec swapped = job("b", gpus_on("n2", 1));
  swapped.frontier = {{100, 1}, {200, 1.5}};
  EXPECT_EQ(
      add_error(swapped),
      "job 'b': its frontier is not monotone: 1.5 s at 200 W is 50% slower than 1 s at a lower limit (time "
      "must not rise with the power limit; are the columns swapped?)");
  JobSpec milliwatts = job("mw", gpus_on("n2", 1));
  milliwatts.frontier = {{300'000, 1}};
  EXPECT_EQ(add_error(milliwatts),
            "job 'mw': a frontier point's power limit of 300000 W per GPU is outside 1–5000 W: is it in mW?");
  JobSpec kilowatts = job("kw", gpus_on("n2", 1));
  kilowatts.frontier = {{0.3, 1}, {0.5, 0.8}};
  EXPECT_EQ(add_error(kilowatts),
            "job 'kw': a frontier point's power limit of 0.3 W per GPU is outside 1–5000 W: is it in kW?");
  EXPECT_EQ(add_error(inference("i", gpus_on("n2", 1), 900)),
            "job 'i': its SLO floor of 900 W is outside its frontier's 100–700 W");
  JobSpec unweighted = job("b", gpus_on("n2", 1));
  unweighted.priority = 0;
  EXPECT_EQ(add_error(unweighted), "job 'b': priority must be a positive number, got 0");
  // Nothing refused was registered: its GPUs are free.
  EXPECT_EQ(controller.job_count(), 1U);
  EXPECT_TRUE(controller.add_job(job("b", gpus_on("n2", 2)), 0));

  const auto cap_error = [&](double cap_w) {
    const auto set = controller.set_cap(cap_w);
    return set ? std::string() : set.error().message();
  };
  EXPECT_EQ(cap_error(0), "the cluster power cap must be a positive number of watts, got 0");
  EXPECT_EQ(cap_error(-5), "the cluster power cap must be a positive number of watts, got -5");
  EXPECT_EQ(cap_error(test::kNan), "the cluster power cap must be a positive number of watts, got nan");
  EXPECT_FALSE(controller.cap_w());

  const auto removed = controller.remove_job("x");
  ASSERT_FALSE(removed);
  EXPECT_EQ(removed.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(removed.error().message(), "no job 'x' is registered");
  EXPECT_EQ(controller.update_progress("x", 1).error().message(), "no job 'x' is registered");
  EXPECT_EQ(controller.update_progress("a", 1).error().message(),
            "job 'a' is not deferrable: its progress is not tracked");
  ASSERT_TRUE(controller.add_job(deferrable("d", gpus_on("n3", 1), 60, 100), 0));
  EXPECT_EQ(controller.update_progress("d", -2).error().message(),
            "job 'd': its remaining time must be ≥ 0 s, got -2");
  EXPECT_EQ(controller.update_progress("d", test::kInf).error().message(),
            "job 'd': its remaining time must be ≥ 0 s, got inf");

  const auto forecast_error = [&](std::vector<ForecastSlot> slots, double start_s = 0) {
    const auto set = controller.set_forecast(std::move(slots), start_s);
    return set ? std::string() : set.error().message();
  };
  EXPECT_EQ(forecast_error({}), "the carbon forecast has no slot");
  EXPECT_EQ(forecast_error(hourly({100}), test::kNan),
            "the carbon forecast's start must be a finite time, got nan");
  EXPECT_EQ(forecast_error({{.length_s = 0, .intensity_g_per_kwh = 100}}),
            "forecast slot 0: its length must be a positive number of s, got 0");
  EXPECT_EQ(forecast_error({{.length_s = 3600, .intensity_g_per_kwh = 100},
                            {.length_s = 3600, .intensity_g_per_kwh = -5}}),
            "forecast slot 1: its carbon intensity must be a number ≥ 0 gCO2/kWh, got -5");
  EXPECT_EQ(forecast_error(hourly({test::kNan})),
            "forecast slot 0: its carbon intensity must be a number ≥ 0 gCO2/kWh, got nan");

  EXPECT_EQ(controller.heard_from("", 0).error().message(), "a node with an empty name cannot be heard from");
  // A clock that is not a number is a bug in the caller: an exception.
  try {
    (void)controller.replan(test::kNan);
    ADD_FAILURE() << "no exception";
  } catch (const Exception& error) {
    EXPECT_STREQ(error.what(), "now_s must be a finite time, got nan");
  }
  EXPECT_THROW(Controller({.node_timeout_s = 0}), Exception);
}

}  // namespace
}  // namespace joule::cluster
