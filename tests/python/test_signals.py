# SPDX-License-Identifier: Apache-2.0
"""SIGINT while the power-limit optimizer holds a lowered limit: the limit is restored, then Python raises
KeyboardInterrupt as usual (the C++ restorer calls Python's own SIGINT handler afterwards)."""

from __future__ import annotations

import json

from conftest import run_python

CHILD = r"""
import json, os, signal, time
import joule

devices = joule.devices(sim="v100:imagenet", virtual_clock=True, cpus=False)
gpu = devices.gpus[0]
optimizer = joule.PowerLimitOptimizer(joule.Monitor(devices=devices), warmup_steps=1, profile_steps=2)
while gpu.power_limit_w() == 250.0:        # run until a lower candidate is being profiled
    optimizer.on_step_begin()
    devices.run_iterations(1)
lowered = gpu.power_limit_w()
try:
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:      # the restorer thread restores, then trips Python's handler
        time.sleep(0.01)
    outcome = "no KeyboardInterrupt"
except KeyboardInterrupt:
    outcome = "KeyboardInterrupt"
print(json.dumps({"lowered": lowered, "after": gpu.power_limit_w(), "outcome": outcome}))
optimizer.on_step_begin()                   # the process lives on: the optimizer re-applies its limit
print(json.dumps({"reapplied": gpu.power_limit_w()}))
"""


def test_sigint_restores_the_limit_then_raises_keyboard_interrupt() -> None:
    result = run_python(["-c", CHILD], timeout_s=30)
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.strip().splitlines()[-2:])
    assert first["lowered"] < 250.0
    assert first["outcome"] == "KeyboardInterrupt"
    assert first["after"] == 250.0  # restored to the default before Python saw the signal
    assert second["reapplied"] == first["lowered"]
