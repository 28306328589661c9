# SPDX-License-Identifier: Apache-2.0
"""joule.FleetMonitor: one window over several daemons ("nodes"), and what it refuses."""

from __future__ import annotations

import math
import pathlib
import shutil
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
    with pytest.raises(TypeError, match=r"^FleetMonitor\(nodes=\.\.\.\): expected a list of 'NAME=ADDRESS' strings, "
                                        r"got int 3$"):
        joule.FleetMonitor(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^FleetMonitor\(clock_probes=\.\.\.\): at least 1, got 0$"):
        joule.FleetMonitor(["a=/x"], clock_probes=0)


def make_fleet_pki(folder: pathlib.Path) -> None:
    """A CA, a daemon certificate for 127.0.0.1 and a client certificate `agent`, with Debian's openssl."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    openssl("req", "-x509", *curve, "-days", "2", "-subj", "/CN=test CA", "-keyout", "ca.key", "-out", "ca.pem")
    (folder / "node.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, extension in (("node", ["-extfile", "node.ext"]), ("agent", [])):
        openssl("req", *curve, "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days",
                "2", *extension, "-out", f"{name}.pem")
    for private in ("ca.key", "node.key", "agent.key"):
        (folder / private).chmod(0o600)


@pytest.fixture
def network_node(joule_binary: pathlib.Path, tmp_path: pathlib.Path) -> Iterator[tuple[str, pathlib.Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (Debian package openssl; scripts/install-deps has it)")
    make_fleet_pki(tmp_path)
    tokens = tmp_path / "tokens"
    tokens.write_text("trainer read " + "t" * 64 + "\nagent control certificate\n")
    tokens.chmod(0o600)
    token = tmp_path / "trainer.token"
    token.write_text("t" * 64 + "\n")
    token.chmod(0o600)
    daemon = subprocess.Popen(
        [str(joule_binary), "--sim", "2xv100", "daemon", "--socket", str(tmp_path / "n.sock"), "--audit-log",
         str(tmp_path / "n.log"), "--listen", "127.0.0.1:0", "--tls-cert", str(tmp_path / "node.pem"), "--tls-key",
         str(tmp_path / "node.key"), "--tls-client-ca", str(tmp_path / "ca.pem"), "--tokens", str(tokens)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert daemon.stdout is not None
        address = ""
        for _ in range(6):
            line = daemon.stdout.readline()
            if line.startswith("joule daemon: network listener on "):
                address = line.split()[5]
                break
        assert address, daemon.stderr
        yield address, tmp_path
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def test_a_window_over_a_network_node_by_token_and_by_certificate(network_node: tuple[str, pathlib.Path]) -> None:
    address, folder = network_node
    ca = str(folder / "ca.pem")
    by_token = joule.FleetMonitor([f"n1={address}"], ca=ca, token_file=str(folder / "trainer.token"))
    by_token.begin_window("w")
    time.sleep(0.1)
    result = by_token.end_window("w")
    assert result["complete"] is True and len(result["nodes"][0]["devices"]) == 2
    assert result["total_energy_j"] >= 2 * 220 * 0.1
    by_certificate = joule.FleetMonitor([address], ca=ca, certificate=str(folder / "agent.pem"),
                                        key=str(folder / "agent.key"))
    assert by_certificate.nodes == [address]
    with pytest.raises(joule.PermissionDeniedError, match=r"refused hello: the daemon's network listener needs a bearer "
                                                          r"token"):
        joule.FleetMonitor([address], ca=ca)
    with pytest.raises(ValueError, match=r"^FleetMonitor\(certificate=\.\.\., key=\.\.\.\): give both"):
        joule.FleetMonitor([address], ca=ca, certificate=str(folder / "agent.pem"))
