# SPDX-License-Identifier: Apache-2.0
"""The restore contract for clock locks made from Python (joule.SettingsGuard, and the
PipelineFrequencyOptimizer that locks through one), in child processes: a lock is undone on exit with the
guard alive, on a crash (an uncaught exception), and on SIGINT/SIGTERM/SIGHUP before Python's own handler
runs; if the process lives on, the optimizer locks again."""

from __future__ import annotations

import json
import pathlib

import pytest

from conftest import SOURCE_DIR, run_python

PROFILE = str(SOURCE_DIR / "data" / "perseus" / "example_s4_m8_profile.csv")

EXIT_CHILD = r"""
import sys
import joule
from joule import _joule

device = joule.PipelineStageDevice(sys.argv[1], 0)
_joule._write_settings_log_at_exit(device, sys.argv[2])  # before the first guard: runs after its exit hook
guard = joule.SettingsGuard("child")
guard.lock_sm_clocks_mhz(device.gpu, 1200, 1200)
print(device.settings_log()[-1]["setting"], flush=True)
if sys.argv[3] == "crash":
    raise RuntimeError("the training loop crashed")
sys.exit(0)
"""


@pytest.mark.parametrize("ending", ["exit", "crash"])
def test_a_lock_is_undone_when_the_process_exits(tmp_path: pathlib.Path, ending: str) -> None:
    log = tmp_path / "settings.log"
    result = run_python(["-c", EXIT_CHILD, PROFILE, str(log), ending], timeout_s=30)
    assert result.stdout.strip() == "sm_clocks_locked_mhz"
    if ending == "crash":
        assert result.returncode == 1 and "the training loop crashed" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
    assert log.read_text().splitlines() == ["sm_clocks_locked_mhz 1200 1200", "sm_clocks_reset 0 0"]


SIGNAL_CHILD = r"""
import json, os, signal, sys, time
import joule

got = []
def handler(signum, frame):
    got.append(signum)
signal.signal(signal.SIGTERM, handler)
signal.signal(signal.SIGHUP, handler)

device = joule.PipelineStageDevice(sys.argv[1], 3, p_blocking_w=75)
optimizer = joule.PipelineFrequencyOptimizer(3, 0, 3, 0, 0, 1, 4, 1, 4, None, stage_device=device,
                                             profile=sys.argv[1], num_microbatches=8, p_blocking_w=75)
names = [name for name, _ in optimizer._local.frequencies]

def last_setting():
    return device.settings_log()[-1]["setting"]

results = {}
for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    optimizer.on_step_begin()
    optimizer.on_instruction_begin(names[0])
    optimizer.wait_for_clock()
    before = last_setting()
    outcome = "nothing"
    try:
        os.kill(os.getpid(), signum)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not got and outcome == "nothing":
            time.sleep(0.01)
        outcome = "handler" if got else outcome
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    got.clear()
    after = last_setting()
    optimizer.on_instruction_end(names[0])
    for name in names[1:]:                 # the process lives on: the next instruction locks again
        optimizer.on_instruction_begin(name)
        optimizer.wait_for_clock()
        optimizer.on_instruction_end(name)
    optimizer.on_step_end()
    results[signal.Signals(signum).name] = {"before": before, "outcome": outcome, "after": after,
                                           "relocked": last_setting()}
print(json.dumps(results))
"""


def test_signals_undo_the_lock_first_then_python_handles_them() -> None:
    result = run_python(["-c", SIGNAL_CHILD, PROFILE], timeout_s=60)
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(results) == {"SIGINT", "SIGTERM", "SIGHUP"}
    for name, seen in results.items():
        assert seen["before"] == "sm_clocks_locked_mhz", name
        assert seen["after"] == "sm_clocks_reset", name  # restored before Python's handler ran
        assert seen["relocked"] == "sm_clocks_locked_mhz", name
    assert results["SIGINT"]["outcome"] == "KeyboardInterrupt"
    assert results["SIGTERM"]["outcome"] == "handler"
    assert results["SIGHUP"]["outcome"] == "handler"
