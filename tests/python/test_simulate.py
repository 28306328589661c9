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


class FixedBatchSize:
    """A batch-size policy that always proposes the job's default batch size."""

    calls: list[str] = []  # shared by the copies the simulator makes

    def register_job(self, job: dict, batch_sizes: list[int]) -> None:
        FixedBatchSize.calls.append("register")
        assert job["default_batch_size"] in batch_sizes

    def predict(self, job: dict) -> int:
        FixedBatchSize.calls.append("predict")
        return int(job["default_batch_size"])

    def observe(self, job: dict, batch_size: int, cost: float, reached: bool) -> None:
        FixedBatchSize.calls.append("observe")


class FixedPowerLimit:
    name = "fixed-250"

    def predict(self, job: dict, batch_size: int) -> float:
        return 250.0

    def observe(self, job: dict, batch_size: int, power_limit_w: float, cost: float) -> None:
        raise AssertionError("never profiled: predict always answers")


def test_python_policies_plug_into_the_simulator() -> None:
    FixedBatchSize.calls.clear()
    result = joule.simulate(
        "v100", "cifar100", recurrences=4, batch_size_policy=FixedBatchSize(), power_limit_policy=FixedPowerLimit()
    )
    b0 = result["job"]["default_batch_size"]
    assert {(t["batch_size"], t["power_limit_w"]) for t in result["tries"]} == {(b0, 250.0)}
    assert FixedBatchSize.calls[0] == "register"
    assert FixedBatchSize.calls.count("predict") == len(result["tries"])
    # Always the baseline configuration: each recurrence costs about the baseline's mean.
    zeus = joule.simulate("v100", "cifar100", recurrences=4)
    assert result["optimizer"]["cost"] > zeus["optimizer"]["cost"]


def test_python_power_limit_policy_profiles_when_it_returns_none() -> None:
    seen: list[tuple[int, float]] = []

    class Cheapest:
        def __init__(self) -> None:
            self.best: dict[int, tuple[float, float]] = {}

        def clone(self) -> "Cheapest":
            return self  # share state with the test (the simulator would otherwise deep-copy)

        def predict(self, job: dict, batch_size: int):  # type: ignore[no-untyped-def]
            return self.best[batch_size][0] if batch_size in self.best else None

        def observe(self, job: dict, batch_size: int, power_limit_w: float, cost: float) -> None:
            seen.append((batch_size, power_limit_w))
            if batch_size not in self.best or cost < self.best[batch_size][1]:
                self.best[batch_size] = (power_limit_w, cost)

    result = joule.simulate("v100", "cifar100", recurrences=3, power_limit_policy=Cheapest())
    assert seen, "every limit is profiled the first time a batch size is used"
    assert {limit for _, limit in seen} == set(joule.power_limit_candidates_w(100, 250))
    assert len(result["tries"]) >= 3


def test_a_python_policy_error_propagates() -> None:
    class Broken(FixedBatchSize):
        def predict(self, job: dict) -> int:
            raise KeyError("no batch size for you")

    with pytest.raises(KeyError, match="no batch size"):
        joule.simulate("v100", "cifar100", recurrences=2, batch_size_policy=Broken())
