# SPDX-License-Identifier: Apache-2.0
"""joule.FleetMonitor: one window over several daemons ("nodes"), and what it refuses."""

from __future__ import annotations

import math
import pathlib
import subprocess
import time
from typing import Iterator

import pytest

import joule


@pytest.fixture
def two_nodes(joule_binary: pathlib.Path, tmp_path: pathlib.Path) -> Iterator[list[str]]:
    daemons = []
    nodes = []
    try:
        for name, sim in (("a", "2xv100"), ("b", "a40")):
            socket = tmp_path / f"{name}.sock"
            daemon = subprocess.Popen(
                [str(joule_binary), "--sim", sim, "daemon", "--socket", str(socket), "--audit-log",
                 str(tmp_path / f"{name}.log")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            daemons.append(daemon)
            assert daemon.stdout is not None
            assert daemon.stdout.readline().startswith("joule daemon: serving"), daemon.stderr
            nodes.append(f"{name}={socket}")
        yield nodes
    finally:
        for daemon in daemons:
            daemon.terminate()
            daemon.wait(timeout=10)


def test_one_window_over_two_nodes(two_nodes: list[str]) -> None:
    fleet = joule.FleetMonitor(two_nodes)
    assert fleet.nodes == ["a", "b"]
    fleet.begin_window("step")
    time.sleep(0.1)
    result = fleet.end_window("step")
    assert result["name"] == "step"
    assert result["complete"] is True
    assert [node["node"] for node in result["nodes"]] == ["a", "b"]
    assert [len(node["devices"]) for node in result["nodes"]] == [2, 1]
    assert math.isclose(result["total_energy_j"], sum(node["energy_j"] for node in result["nodes"]))
    assert result["total_energy_j"] > 0
    assert 0 <= result["alignment_error_s"] < result["wall_time_s"]
    with pytest.raises(joule.NotFoundError, match=r'^no fleet window called "step" is open$'):
        fleet.end_window("step")
    fleet.begin_window("again")
    with pytest.raises(joule.StateError, match=r'^a fleet window called "again" is already open$'):
        fleet.begin_window("again")
    fleet.cancel_window("again")


def test_bad_nodes_and_arguments_are_named(tmp_path: pathlib.Path) -> None:
    with pytest.raises(joule.IoError, match=r"^cannot reach node ghost \(" + str(tmp_path) + r"/ghost.sock\): "):
        joule.FleetMonitor([f"ghost={tmp_path}/ghost.sock"])
    with pytest.raises(joule.InvalidArgumentError, match=r'^node "a" is listed twice$'):
        joule.FleetMonitor(["a=/x", "a=/y"])
    with pytest.raises(TypeError, match=r"^FleetMonitor\(nodes=\.\.\.\): expected a list of 'NAME=SOCKET' strings, "
                                        r"got int 3$"):
        joule.FleetMonitor(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^FleetMonitor\(clock_probes=\.\.\.\): at least 1, got 0$"):
        joule.FleetMonitor(["a=/x"], clock_probes=0)
