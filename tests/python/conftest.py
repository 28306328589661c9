# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the joule Python tests. Run with the build tree's package on PYTHONPATH:

    PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from typing import Iterator

import pytest

import joule

SOURCE_DIR = pathlib.Path(os.environ.get("JOULE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "torch: needs PyTorch (slow import); run by the python.torch CTest test")
    config.addinivalue_line("markers", "govern: the serving-engine sidecar end to end (about 40 s); run by the python.govern CTest test")


# The user's own device and server settings must not change what the tests see (a developer with
# JOULE_SIM=v100 exported runs the same tests as CI); tests that want them set them.
USER_SETTINGS = ("JOULE_SIM", "JOULE_DAEMON_SOCKET", "JOULE_SERVER", "JOULE_CARBON_PROVIDER", "CUDA_VISIBLE_DEVICES",
                 "HIP_VISIBLE_DEVICES")


@pytest.fixture(autouse=True)
def _without_user_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def sim() -> joule.DeviceSet:
    """One simulated V100 running ImageNet on a virtual clock: deterministic time and energy."""
    return joule.devices(sim="v100:imagenet", virtual_clock=True, cpus=False)


@pytest.fixture
def joule_binary() -> pathlib.Path:
    """The `joule` command of the build tree under test."""
    path = os.environ.get("JOULE_BIN")
    candidates = [pathlib.Path(path)] if path else []
    package_dir = pathlib.Path(joule.__file__).resolve().parent
    candidates.append(package_dir.parents[1] / "joule")  # <build>/python/joule → <build>/joule
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("the joule binary was not found (set JOULE_BIN)")
    raise AssertionError  # unreachable


@pytest.fixture
def serve(joule_binary: pathlib.Path) -> Iterator[str]:
    """A `joule serve` on an in-memory store and a free loopback port; yields its URL."""
    process = subprocess.Popen(
        [str(joule_binary), "serve", "--db", "memory:", "--listen", "127.0.0.1:0", "--threads", "8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if "listening on " not in line:
            process.kill()
            raise AssertionError(f"joule serve did not start: {line!r} {process.stderr.read() if process.stderr else ''}")
        url = line.split("listening on ", 1)[1].split()[0]
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def thread_count() -> int:
    """Threads of this process, C++ ones included (threading.active_count() sees only Python's)."""
    return len(os.listdir("/proc/self/task"))


def settled_thread_count() -> int:
    """The thread count once threads of earlier tests have finished exiting (stable for 50 ms)."""
    import gc

    gc.collect()
    count = thread_count()
    for _ in range(100):
        time.sleep(0.05)
        now = thread_count()
        if now == count:
            break
        count = now
    return count


def wait_for_thread_count(expected: int, timeout_s: float = 5.0) -> int:
    """Waits until the process has `expected` threads (a joined thread leaves /proc shortly after)."""
    deadline = time.monotonic() + timeout_s
    count = thread_count()
    while count != expected and time.monotonic() < deadline:
        time.sleep(0.01)
        count = thread_count()
    return count


def python_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the package under test first on PYTHONPATH."""
    environment = dict(os.environ)
    package_parent = str(pathlib.Path(joule.__file__).resolve().parents[1])
    environment["PYTHONPATH"] = package_parent + os.pathsep + environment.get("PYTHONPATH", "")
    environment.update(extra or {})
    return environment


def run_python(args: list[str], timeout_s: float = 60, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs this interpreter (/usr/bin/python3) with the package on PYTHONPATH."""
    environment = python_environment(env)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout_s, env=environment, check=False
    )
