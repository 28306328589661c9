// SPDX-License-Identifier: Apache-2.0
// The asynchronous mode of the stage runtime: ClockApplier (the thread that locks the latest requested SM
// clock) and FrequencyController with asynchronous = true. No sleeps: a gate in the lock function holds the
// applier's thread where a test needs it.
#include "joule/plan/clock_applier.hpp"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "joule/plan/runtime.hpp"

#include "mocks/mock_gpu.hpp"
#include "test_util.hpp"

namespace joule::plan {
namespace {

// A lock function that records every clock it is called with and, while closed, holds the applier's thread
// inside the call (so that a test can post requests while a lock is under way).
class GatedLock {
 public:
  ClockApplier::LockFn function() {
    return [this](uint32_t mhz) { return lock(mhz); };
  }

  void close_gate() {
    std::lock_guard lock(mutex_);
    open_ = false;
  }
  void open_gate() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  // Blocks until `count` calls have begun.
  void await_calls(size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return calls_.size() >= count; });
  }
  std::vector<uint32_t> calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }
  void fail_at(uint32_t mhz) {
    std::lock_guard lock(mutex_);
    failing_mhz_ = mhz;
  }

 private:
  Result<void> lock(uint32_t mhz) {
    std::unique_lock lock(mutex_);
    calls_.push_back(mhz);
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
    if (mhz == failing_mhz_) {
      return fail(ErrorCode::kOutOfRange, "{} MHz is not a supported SM clock", mhz);
    }
    return {};
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  bool open_ = true;
  std::vector<uint32_t> calls_;
  uint32_t failing_mhz_ = 0;
};

TEST(ClockApplier, AppliesTheLatestClockAndSkipsTheOnesOvertaken) {
  GatedLock gate;
  ClockApplier applier("GPU 0 (Test GPU)", gate.function());
  gate.close_gate();
  ASSERT_TRUE(applier.request(1200));
  gate.await_calls(1);  // the thread is locking 1200 MHz: the next requests only post
  ASSERT_TRUE(applier.request(1005));
  ASSERT_TRUE(applier.request(1305));
  ASSERT_TRUE(applier.request(1410));
  EXPECT_EQ(applier.wait(Nanos::zero()), false) << "a lock is under way";
  gate.open_gate();
  EXPECT_EQ(applier.wait(), true);
  EXPECT_EQ(gate.calls(), (std::vector<uint32_t>{1200, 1410}));
  const ClockApplierStats stats = applier.stats();
  EXPECT_EQ(stats.requests, 4u);
  EXPECT_EQ(stats.locks, 2u);
  EXPECT_EQ(stats.applied_mhz, 1410u);
  EXPECT_EQ(stats.requested_mhz, 1410u);
  EXPECT_LE(stats.max_lock_time_s, stats.lock_time_s);
  EXPECT_DOUBLE_EQ(stats.mean_lock_time_s(), stats.lock_time_s / 2);
}

TEST(ClockApplier, ARepeatIsNoRequestUnlessForced) {
  GatedLock gate;
  ClockApplier applier("GPU 0", gate.function());
  ASSERT_TRUE(applier.request(1200));
  ASSERT_TRUE(applier.request(1200));
  ASSERT_EQ(applier.wait(), true);
  ASSERT_TRUE(applier.request(1200, /*force=*/true));  // e.g. a signal restore undid the lock
  ASSERT_EQ(applier.wait(), true);
  EXPECT_EQ(gate.calls(), (std::vector<uint32_t>{1200, 1200}));
  EXPECT_EQ(applier.stats().requests, 2u);
}

TEST(ClockApplier, ReportsAFailedLockOnceAndTriesTheSameClockAgain) {
  GatedLock gate;
  ClockApplier applier("GPU 0 (Test GPU)", gate.function());
  gate.fail_at(5000);
  ASSERT_TRUE(applier.request(5000));
  JOULE_EXPECT_ERROR(applier.wait(), ErrorCode::kOutOfRange,
                     "locking GPU 0 (Test GPU) to 5000 MHz: 5000 MHz is not a supported SM clock");
  EXPECT_EQ(applier.wait(), true) << "reported once";
  EXPECT_EQ(applier.stats().requested_mhz, std::nullopt);
  // The next request, of the same clock, tries again; its error comes back from request() this time.
  ASSERT_TRUE(applier.request(5000));
  gate.await_calls(2);
  while (applier.stats().requested_mhz.has_value()) {  // the failure lands right after the call returns
    std::this_thread::yield();
  }
  JOULE_EXPECT_ERROR(applier.request(1200), ErrorCode::kOutOfRange,
                     "locking GPU 0 (Test GPU) to 5000 MHz: 5000 MHz is not a supported SM clock");
  EXPECT_EQ(applier.wait(), true);
  EXPECT_EQ(gate.calls(), (std::vector<uint32_t>{5000, 5000}))
      << "the request that saw the error was not posted";
  EXPECT_EQ(applier.stats().locks, 0u);
}

TEST(ClockApplier, CloseFinishesTheLockUnderWayAndDropsTheRest) {
  GatedLock gate;
  ClockApplier applier("GPU 0", gate.function());
  gate.close_gate();
  ASSERT_TRUE(applier.request(1200));
  gate.await_calls(1);
  ASSERT_TRUE(applier.request(1410));  // dropped by close()
  std::thread opener([&applier, &gate] {
    while (!applier.closed()) {  // the lock returns only once close() has begun
      std::this_thread::yield();
    }
    gate.open_gate();
  });
  applier.close();  // joins the thread once its lock returns
  opener.join();
  EXPECT_EQ(gate.calls(), (std::vector<uint32_t>{1200}));
  EXPECT_TRUE(applier.closed());
  EXPECT_EQ(applier.wait(), true) << "nothing left to wait for";
  JOULE_EXPECT_ERROR(applier.request(1005), ErrorCode::kState, "the clock applier of GPU 0 is closed");
  applier.close();  // idempotent
}

TEST(ClockApplier, RequestsFromOneThreadAndReadersOnAnotherAgree) {
  GatedLock gate;
  ClockApplier applier("GPU 0", gate.function());
  std::thread reader([&applier] {
    for (int i = 0; i < 200; ++i) {
      const ClockApplierStats stats = applier.stats();
      ASSERT_LE(stats.locks, stats.requests);
      ASSERT_TRUE(applier.wait(Nanos::zero()));
    }
  });
  for (uint32_t i = 0; i < 200; ++i) {
    ASSERT_TRUE(applier.request(810 + 15 * (i % 41)));
  }
  reader.join();
  ASSERT_EQ(applier.wait(), true);
  EXPECT_EQ(applier.stats().applied_mhz, 810 + 15 * (199 % 41));
}

// ---------------------------------------------------------------------------------------------------------
// FrequencyController, asynchronous

constexpr auto kForward = Instruction::kForward;
constexpr auto kBackward = Instruction::kBackward;

// A mock GPU that supports 810–1410 MHz and records its clock calls (on the applier's thread).
struct AsyncRig {
  ::testing::NiceMock<test::MockGpu> gpu{test::mock_gpu_info()};
  std::mutex mutex;
  std::vector<uint32_t> calls;  // locked MHz, 0 for a reset

  AsyncRig() {
    std::vector<uint32_t> clocks;
    for (uint32_t mhz = 810; mhz <= 1410; mhz += 15) {
      clocks.push_back(mhz);
    }
    ON_CALL(gpu, do_supported_sm_clocks_mhz())
        .WillByDefault(::testing::Return(Result<std::vector<uint32_t>>(clocks)));
    ON_CALL(gpu, do_lock_sm_clocks(::testing::_, ::testing::_)).WillByDefault([this](uint32_t, uint32_t mhz) {
      std::lock_guard lock(mutex);
      calls.push_back(mhz);
      return Result<void>();
    });
    ON_CALL(gpu, do_reset_sm_clocks()).WillByDefault([this] {
      std::lock_guard lock(mutex);
      calls.push_back(0);
      return Result<void>();
    });
  }
  std::vector<uint32_t> recorded() {
    std::lock_guard lock(mutex);
    return calls;
  }
};

FrequencyControllerOptions async_options() {
  return {.restore_on_signals = false,
          .asynchronous = true,
          .label = "rank 3 (stage 3)",
          .end_call = "on_step_end()"};
}

// F0 F1 B0 F2 B1 B2 of stage 0 of a 2-stage, 3-microbatch 1F1B pipeline.
StageSchedule async_schedule() {
  return {{kForward, 0, 1410}, {kForward, 1, 1410},  {kBackward, 0, 1200},
          {kForward, 2, 1200}, {kBackward, 1, 1410}, {kBackward, 2, 1410}};
}

TEST(FrequencyControllerAsync, LocksEachPlannedClockOnItsThread) {
  AsyncRig rig;
  {
    auto controller = FrequencyController::create(rig.gpu, async_schedule(), async_options());
    ASSERT_TRUE(controller) << controller.error().message();
    EXPECT_TRUE(controller->asynchronous());
    for (const PlannedComputation& planned : controller->schedule()) {
      ASSERT_TRUE(controller->begin(planned.instruction));
      ASSERT_EQ(controller->wait_applied(), true);
      EXPECT_EQ(controller->locked_clock_mhz(), planned.frequency_mhz);
    }
    ASSERT_TRUE(controller->end_iteration());
    EXPECT_EQ(rig.recorded(), (std::vector<uint32_t>{1410, 1200, 1410}));
    EXPECT_EQ(controller->lock_count(), 3u);
    // prepare_next() posts the next iteration's first clock early; it is where this one ended: no lock.
    ASSERT_TRUE(controller->prepare_next());
    ASSERT_EQ(controller->wait_applied(), true);
    EXPECT_EQ(controller->stats().locks, 3u);
    EXPECT_EQ(controller->position(), 0u) << "prepare_next() does not advance the plan";
  }
  EXPECT_EQ(rig.recorded(), (std::vector<uint32_t>{1410, 1200, 1410, 0})) << "destruction resets the clock";
}

TEST(FrequencyControllerAsync, ChecksTheOrderAsTheSynchronousModeDoes) {
  AsyncRig rig;
  auto controller = FrequencyController::create(rig.gpu, async_schedule(), async_options());
  ASSERT_TRUE(controller);
  ASSERT_TRUE(controller->begin(kForward));
  JOULE_EXPECT_ERROR(controller->begin(kBackward), ErrorCode::kState,
                     "rank 3 (stage 3): the training loop is out of step with its frequency schedule: "
                     "instruction 2 of 6 should be 'forward', got 'backward'");
  JOULE_EXPECT_ERROR(controller->begin(kForward, 2), ErrorCode::kState,
                     "rank 3 (stage 3): the training loop is out of step with its frequency schedule: "
                     "instruction 2 of 6 should be 'forward' of microbatch 1, got 'forward' of microbatch 2");
  EXPECT_EQ(controller->position(), 1u);
  JOULE_EXPECT_ERROR(controller->end_iteration(), ErrorCode::kState,
                     "rank 3 (stage 3): the iteration ended after 1 of 6 instructions of its frequency "
                     "schedule; the next would have been 'forward' of microbatch 1");
  for (const PlannedComputation& planned : controller->schedule()) {
    ASSERT_TRUE(controller->begin(planned.instruction, planned.microbatch));
  }
  JOULE_EXPECT_ERROR(controller->begin(kForward), ErrorCode::kState,
                     "rank 3 (stage 3): the training loop is out of step with its frequency schedule: got "
                     "'forward' after all 6 instructions of the iteration (on_step_end() was not called)");
  ASSERT_TRUE(controller->end_iteration());
}

TEST(FrequencyControllerAsync, AFailedLockComesBackAtTheNextCallAndTheClockIsLockedAgain) {
  AsyncRig rig;
  EXPECT_CALL(rig.gpu, do_lock_sm_clocks(1200u, 1200u))
      .WillOnce(::testing::Return(fail(ErrorCode::kPermissionDenied, "locking needs root")))
      .WillRepeatedly([&rig](uint32_t, uint32_t mhz) {
        std::lock_guard lock(rig.mutex);
        rig.calls.push_back(mhz);
        return Result<void>();
      });
  EXPECT_CALL(rig.gpu, do_lock_sm_clocks(1410u, 1410u)).Times(::testing::AnyNumber());
  auto controller =
      FrequencyController::create(rig.gpu, {{kForward, 0, 1200}, {kBackward, 0, 1410}}, async_options());
  ASSERT_TRUE(controller);
  ASSERT_TRUE(controller->begin(kForward)) << "asynchronous: begin() only posts";
  JOULE_EXPECT_ERROR(controller->wait_applied(), ErrorCode::kPermissionDenied,
                     "locking GPU 0 (Mock GPU) to 1200 MHz: locking needs root");
  EXPECT_FALSE(controller->end_iteration()) << "1 of 2 begun";
  ASSERT_TRUE(controller->begin(kForward)) << "the same clock is posted again after a failure";
  ASSERT_EQ(controller->wait_applied(), true);
  EXPECT_EQ(controller->locked_clock_mhz(), 1200u);
}

TEST(FrequencyControllerAsync, CloseRestoresTheClockAndRefusesLaterCalls) {
  AsyncRig rig;
  auto controller = FrequencyController::create(rig.gpu, async_schedule(), async_options());
  ASSERT_TRUE(controller);
  ASSERT_TRUE(controller->begin(kForward));
  ASSERT_EQ(controller->wait_applied(), true);
  ASSERT_TRUE(controller->reset_clocks());
  EXPECT_EQ(controller->locked_clock_mhz(), std::nullopt);
  ASSERT_TRUE(controller->begin(kForward)) << "same clock as before the reset: locked again";
  ASSERT_EQ(controller->wait_applied(), true);
  EXPECT_EQ(controller->locked_clock_mhz(), 1410u);
  ASSERT_TRUE(controller->close());
  EXPECT_EQ(rig.recorded(), (std::vector<uint32_t>{1410, 0, 1410, 0}));
  JOULE_EXPECT_ERROR(controller->begin(kBackward), ErrorCode::kState,
                     "rank 3 (stage 3): the frequency controller is closed");
  JOULE_EXPECT_ERROR(controller->prepare_next(), ErrorCode::kState,
                     "rank 3 (stage 3): the frequency controller is closed");
  EXPECT_EQ(controller->wait_applied(), true);
  ASSERT_TRUE(controller->close());  // idempotent
  EXPECT_EQ(rig.recorded().size(), 4u) << "no second reset";
}

TEST(FrequencyControllerAsync, ANewScheduleIsCheckedAndRewindsThePlan) {
  AsyncRig rig;
  auto controller = FrequencyController::create(rig.gpu, async_schedule(), async_options());
  ASSERT_TRUE(controller);
  ASSERT_TRUE(controller->begin(kForward));
  JOULE_EXPECT_ERROR(controller->set_schedule({{kForward, 0, 5000}}), ErrorCode::kOutOfRange,
                     "GPU 0 (Mock GPU) does not support the SM clock 5000 MHz planned for computation 1 "
                     "(forward of microbatch 0); nearest supported: 1410 MHz");
  EXPECT_EQ(controller->position(), 1u) << "a refused schedule changes nothing";
  ASSERT_TRUE(controller->set_schedule({{kBackward, 0, 1005}}));
  EXPECT_EQ(controller->position(), 0u);
  ASSERT_TRUE(controller->begin(kBackward));
  ASSERT_EQ(controller->wait_applied(), true);
  EXPECT_EQ(controller->locked_clock_mhz(), 1005u);
}

TEST(FrequencyControllerAsync, AMovedControllerKeepsItsThreadAndResetsOnce) {
  AsyncRig rig;
  {
    auto controller = FrequencyController::create(rig.gpu, async_schedule(), async_options());
    ASSERT_TRUE(controller);
    ASSERT_TRUE(controller->begin(kForward));
    FrequencyController moved(std::move(*controller));
    EXPECT_TRUE(moved.asynchronous());
    ASSERT_TRUE(moved.begin(kForward));
    ASSERT_EQ(moved.wait_applied(), true);
  }
  EXPECT_EQ(rig.recorded(), (std::vector<uint32_t>{1410, 0}));
}

}  // namespace
}  // namespace joule::plan
