# SPDX-License-Identifier: Apache-2.0
"""joule.PowerSampler: timelines, energy, the C++ thread (no GIL, no leak)."""

from __future__ import annotations

import threading
import time

import pytest

import joule
from conftest import settled_thread_count, wait_for_thread_count


def test_timeline_and_energy_on_a_virtual_clock(sim: joule.DeviceSet) -> None:
    sampler = joule.PowerSampler(devices=sim, period_s=0.01)
    power_w = sim.gpus[0].power_w()
    start_s = sim.now_s()
    sampler.sample_for(2.0)
    end_s = sim.now_s()
    assert end_s == pytest.approx(start_s + 2.0)
    timeline = sampler.timeline(0)
    assert timeline[0] == (pytest.approx(start_s), pytest.approx(power_w))
    assert all(point[1] == pytest.approx(power_w) for point in timeline)
    assert sampler.energy(start_s, end_s) == {0: pytest.approx(2.0 * power_w)}
    assert sampler.latest_w(0) == pytest.approx(power_w)
    assert sampler.peak_w(0, start_s, end_s) == pytest.approx(power_w)
    assert sampler.reads >= 2 and sampler.failed_reads == 0


def test_timeline_follows_a_power_limit_change(sim: joule.DeviceSet) -> None:
    sampler = joule.PowerSampler(devices=sim)
    sampler.sample_for(1.0)
    sim.gpus[0].set_power_limit_w(120)
    sampler.sample_for(1.0)
    powers = [power for _, power in sampler.timeline(0)]
    assert powers[0] > 120 >= powers[-1]
    middle_s = sampler.timeline(0)[-1][0] - 0.5
    assert len(sampler.timeline(0, start_s=middle_s)) <= 1


def test_real_clock_thread_polls() -> None:
    devices = joule.devices(sim="2xv100", cpus=False)
    with joule.PowerSampler(devices=devices, period_s=0.005) as sampler:
        assert sampler.running
        start_s = sampler.now_s()
        deadline = time.monotonic() + 30
        while sampler.reads < 10 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sampler.reads >= 10
    assert not sampler.running
    energies = sampler.energy(start_s, sampler.now_s())
    assert sorted(energies) == [0, 1] and all(energy > 0 for energy in energies.values())


def test_errors(sim: joule.DeviceSet) -> None:
    sampler = joule.PowerSampler(devices=sim)
    with pytest.raises(joule.NotFoundError):
        sampler.energy(0, 1)  # no reading yet
    sampler.sample_now()
    with pytest.raises(joule.InvalidArgumentError):
        sampler.energy(2, 1)
    with pytest.raises(joule.NotFoundError, match="GPU 5 is not sampled"):
        sampler.timeline(5)
    with pytest.raises(joule.InvalidArgumentError, match="period_s"):
        joule.PowerSampler(devices=sim, period_s=0)
    # Issue 23: 1e10 s wrapped around int64 nanoseconds; every duration is bounded by 100 years.
    before_s = sim.now_s()
    with pytest.raises(
        joule.InvalidArgumentError,
        match=r"^duration_s must be at most 3\.15576e\+09, got 1e\+10: 100 years is the longest duration joule takes$",
    ):
        sampler.sample_for(1e10)
    assert sim.now_s() == before_s
    with pytest.raises(joule.NotFoundError, match="no GPU"):
        joule.PowerSampler(devices=joule.devices(gpus=False, cpus=False))
    sampler.start()
    with pytest.raises(joule.StateError):
        sampler.start()
    sampler.stop()


def test_gil_is_released_while_sampling() -> None:
    """A Python thread keeps running while the main thread is blocked in a long C++ sample: it records
    timestamps, and some fall well inside the call (no Python bytecode could run there if the call held the
    GIL). Nothing is asserted about speed."""
    devices = joule.devices(sim="v100", cpus=False)
    sampler = joule.PowerSampler(devices=devices, period_s=0.01)
    stamps: list[float] = []
    stop = threading.Event()

    def spin() -> None:
        last = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now - last >= 0.001:
                stamps.append(now)
                last = now

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        call_start = time.monotonic()
        sampler.sample_for(0.5)
        call_end = time.monotonic()
    finally:
        stop.set()
        thread.join()
    margin = 0.05
    inside = [stamp for stamp in stamps if call_start + margin < stamp < call_end - margin]
    assert inside, "the Python thread made no progress while sample_for ran: the GIL was held"
    assert not sampler.running


def test_no_thread_is_leaked() -> None:
    before = settled_thread_count()
    devices = joule.devices(sim="2xv100", cpus=False)
    for _ in range(3):
        sampler = joule.PowerSampler(devices=devices, period_s=0.005)
        sampler.start()
        assert wait_for_thread_count(before + 1) == before + 1
        del sampler  # destruction stops and joins the thread
        assert wait_for_thread_count(before) == before
    # A monitor of a GPU without an energy counter owns a polling thread too.
    polled = joule.Monitor(devices=joule.devices(sim="p100", cpus=False))
    assert wait_for_thread_count(before + 1) == before + 1
    polled.begin_window("w")
    polled.end_window("w")
    del polled
    assert wait_for_thread_count(before) == before
    # sample_for starts and stops its own thread.
    sampler = joule.PowerSampler(devices=devices, period_s=0.005)
    sampler.sample_for(0.02)
    assert wait_for_thread_count(before) == before
