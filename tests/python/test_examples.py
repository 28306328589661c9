# SPDX-License-Identifier: Apache-2.0
"""The examples/ scripts end to end (PyTorch on the CPU, simulated GPU, real `joule serve`)."""

from __future__ import annotations

import json
import pathlib

import pytest

from conftest import SOURCE_DIR, run_python

pytestmark = pytest.mark.torch

EXAMPLES = SOURCE_DIR / "examples"


def test_train_power_limit_example() -> None:
    result = run_python([str(EXAMPLES / "train_power_limit.py"), "--epochs", "3", "--json"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["chosen_power_limit_w"] in summary["candidates_w"]
    assert len(summary["measurements"]) == len(summary["candidates_w"]) == 7
    assert [e["epoch"] for e in summary["epochs"]] == [1, 2, 3]
    assert all(e["gpu_energy_j"] > 0 for e in summary["epochs"])
    assert summary["epochs"][-1]["power_limit_w"] == summary["chosen_power_limit_w"]
    assert summary["epochs"][-1]["accuracy"] > 0.8
    assert any(line.startswith("epoch 3:") and "GPU energy" in line for line in lines)
    assert any(line.startswith("chosen power limit:") for line in lines)


def test_train_power_limit_example_is_deterministic() -> None:
    runs = [run_python([str(EXAMPLES / "train_power_limit.py"), "--epochs", "2", "--json"]) for _ in range(2)]
    summaries = [json.loads(run.stdout.strip().splitlines()[-1]) for run in runs]
    for summary in summaries:
        del summary["wall_time_s"]
    assert summaries[0] == summaries[1]


def test_train_batch_size_example(joule_binary: pathlib.Path) -> None:
    result = run_python(
        [str(EXAMPLES / "train_batch_size.py"), "--joule", str(joule_binary), "--recurrences", "4", "--json"]
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert [run["recurrence"] for run in summary["runs"]] == [1, 2, 3, 4]
    assert summary["runs"][0]["batch_size"] == 32  # the default batch size is explored first
    assert all(run["epochs"] >= 1 and run["energy_j"] > 0 for run in summary["runs"])
    assert "recurrence 4: batch size" in result.stdout
