# SPDX-License-Identifier: Apache-2.0
"""joule.simulate: Zeus's trace-driven simulator, as plain Python data."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

import joule


def test_simulate_returns_plain_data() -> None:
    result = joule.simulate("v100", "cifar100", seed=1)
    json.dumps(result)  # plain Python data throughout
    assert result["gpu"] == "v100"
    assert result["job"]["dataset"] == "cifar100"
    assert result["recurrences"] == len({t["recurrence"] for t in result["tries"]})
    assert result["max_power_w"] == 250.0
    total = sum(t["energy_j"] for t in result["tries"])
    assert result["optimizer"]["energy_j"] == pytest.approx(total)
    assert result["baseline"]["batch_size"] == result["job"]["default_batch_size"]
    assert result["oracle"] is not None
    assert len(result["configurations"]) > 1


def test_same_seed_same_result_and_options_apply() -> None:
    first = joule.simulate("a40", "imagenet", seed=3, recurrences=5)
    assert first == joule.simulate("a40", "imagenet", seed=3, recurrences=5)
    assert first["recurrences"] == 5
    no_stop = joule.simulate("a40", "imagenet", seed=3, recurrences=5, beta=math.inf)
    assert no_stop["beta"] == math.inf


def test_matches_the_cli(joule_binary) -> None:  # type: ignore[no-untyped-def]
    cli = subprocess.run(
        [str(joule_binary), "simulate", "--gpu", "v100", "--workload", "cifar100", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    expected = json.loads(cli.stdout)
    result = joule.simulate("v100", "cifar100")
    assert result["optimizer"]["energy_j"] == pytest.approx(expected["totals"]["zeus"]["energy_j"])
    assert result["optimizer"]["time_s"] == pytest.approx(expected["totals"]["zeus"]["time_s"])
    assert result["baseline"] == pytest.approx(expected["baseline"])
    assert result["oracle"] == pytest.approx(expected["oracle"])
    assert len(result["tries"]) == len(expected["tries"])


def test_errors() -> None:
    with pytest.raises(joule.NotFoundError, match="v100"):
        joule.simulate("h100", "imagenet")
    with pytest.raises(joule.NotFoundError, match="imagenet"):
        joule.simulate("v100", "mnist")
    with pytest.raises(joule.InvalidArgumentError, match="eta"):
        joule.simulate("v100", "imagenet", eta=2)
    with pytest.raises(joule.InvalidArgumentError, match="beta"):
        joule.simulate("v100", "imagenet", beta=0.5)
    with pytest.raises(joule.InvalidArgumentError, match="max_epochs"):
        joule.simulate("v100", "imagenet", max_epochs=0)


def test_lists() -> None:
    assert set(joule.trace_gpus()) == {"v100", "a40", "p100", "rtx6000"}
    assert "imagenet" in joule.paper_workloads()
