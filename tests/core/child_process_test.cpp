// SPDX-License-Identifier: Apache-2.0
// run_child and BlockedSignals (joule/core/child_process.hpp, signals.hpp): how a child's end is reported,
// the refusals' words, and signals received only by wait().
#include "joule/core/child_process.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include "joule/core/signals.hpp"

namespace joule {
namespace {

TEST(RunChild, ReportsTheExitStatusOrTheSignalAsShellsDo) {
  ChildSignals signals;
  EXPECT_EQ(run_child({"true"}, signals).value().exit_code, 0);
  const ChildExit three = run_child({"sh", "-c", "exit 3"}, signals).value();
  EXPECT_EQ(three.exit_code, 3);
  EXPECT_EQ(three.signal, 0);
  const ChildExit killed = run_child({"sh", "-c", "kill -TERM $$"}, signals).value();
  EXPECT_EQ(killed.exit_code, 128 + SIGTERM);
  EXPECT_EQ(killed.signal, SIGTERM);
}

TEST(RunChild, NamesTheCommandItCannotRun) {
  ChildSignals signals;
  const auto missing = run_child({"joule-no-such-command"}, signals);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(missing.error().message(), "cannot run 'joule-no-such-command': command not found");
  const auto empty = run_child({}, signals);
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().message(), "no command to run");
}

TEST(BlockedSignals, ASignalSentWhileBlockedIsReceivedByWaitAndATimeoutIsNothing) {
  BlockedSignals blocked({SIGUSR1});
  EXPECT_FALSE(blocked.wait(Nanos{0}).has_value());
  // To this thread, which blocks it: another thread of the test binary would die of it.
  ASSERT_EQ(::pthread_kill(::pthread_self(), SIGUSR1), 0);
  const auto info = blocked.wait(Nanos{1'000'000'000});
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->si_signo, SIGUSR1);
  EXPECT_TRUE(sent_by_process(*info));
}

}  // namespace
}  // namespace joule
