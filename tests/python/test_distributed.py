# SPDX-License-Identifier: Apache-2.0
"""torch.distributed: two CPU processes (gloo on loopback) profile power limits and pick the same one."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from conftest import python_environment

pytestmark = pytest.mark.torch

WORKER = pathlib.Path(__file__).resolve().parent / "distributed_worker.py"


def test_two_ranks_pick_the_same_power_limit(tmp_path: pathlib.Path) -> None:
    init_method = f"file://{tmp_path}/rendezvous"
    env = python_environment({"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), "2", init_method],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in range(2)
    ]
    outputs = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=90)
            assert process.returncode == 0, stderr
            outputs.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    rank0, rank1 = sorted(outputs, key=lambda output: output["rank"])
    assert rank0["auto_is_distributed"] and rank1["auto_is_distributed"]
    # Same choice, same aggregated measurements on both ranks.
    assert rank0["chosen_power_limit_w"] is not None
    assert rank0["chosen_power_limit_w"] == rank1["chosen_power_limit_w"]
    assert rank0["power_limit_w"] == rank1["power_limit_w"] == rank0["chosen_power_limit_w"]
    assert rank0["measurements"] == rank1["measurements"]
    # Energy is summed over ranks, time maximised.
    for measurement, (e0, t0), (e1, t1) in zip(rank0["measurements"], rank0["local"], rank1["local"]):
        assert measurement["energy_j"] == pytest.approx(e0 + e1)
        assert measurement["time_s"] == pytest.approx(max(t0, t1))
    # ZeusCost's derived max power counts both ranks' GPUs.
    assert "max_power=500 W" in rank0["policy"]
    # The ranks run different workloads: alone they would disagree (175 W and 225 W), so agreeing is the
    # collective's doing.
    assert rank0["alone_would_choose_w"] != rank1["alone_would_choose_w"]
