# SPDX-License-Identifier: Apache-2.0
"""joule.Monitor: windows, context manager, decorator, sync callback, CPUs, GPUs without counters."""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import threading

import pytest

import joule
from test_devices import make_fake_powercap, set_energy


def test_window_measures_time_and_counter_energy(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    power_w = sim.gpus[0].power_w()
    monitor.begin_window("step")
    sim.advance(1.5)
    measurement = monitor.end_window("step")
    assert measurement.name == "step"
    assert measurement.time_s == pytest.approx(1.5)
    assert measurement.gpu_energy_j[0] == pytest.approx(1.5 * power_w, abs=0.002)
    assert measurement.total_gpu_energy_j == measurement.gpu_energy_j[0]
    assert measurement.total_energy_j == measurement.total_gpu_energy_j
    assert measurement.cpu_energy_j == {} and measurement.dram_energy_j == {}
    assert measurement.gpu_estimated == {0: False}
    assert measurement.gpu_energy_source == {0: "counter"}
    assert not measurement.estimated
    assert measurement.to_dict()["gpu_energy_j"] == measurement.gpu_energy_j
    assert repr(measurement).startswith("Measurement(name='step', time_s=1.5,")


def test_windows_overlap_and_nest(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    monitor.begin_window("outer")
    sim.advance(1)
    monitor.begin_window("inner")
    sim.advance(2)
    assert monitor.open_windows() == ["inner", "outer"]
    inner = monitor.end_window("inner")
    sim.advance(1)
    outer = monitor.end_window("outer")
    assert inner.time_s == pytest.approx(2)
    assert outer.time_s == pytest.approx(4)
    assert monitor.open_windows() == []


def test_cancel_restart_and_reset(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    monitor.begin_window("a")
    monitor.cancel_window("a")
    assert not monitor.is_open("a")
    with pytest.raises(joule.NotFoundError):
        monitor.cancel_window("a")
    monitor.begin_window("a")
    sim.advance(5)
    monitor.begin_window("a", restart=True)
    sim.advance(1)
    assert monitor.end_window("a").time_s == pytest.approx(1)
    monitor.begin_window("x")
    monitor.begin_window("y")
    monitor.reset_windows()
    assert monitor.open_windows() == []


def test_window_as_context_manager(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    seen: list[joule.Measurement] = []
    with monitor.window("block", on_end=seen.append) as window:
        sim.advance(0.5)
    assert window.measurement is not None
    assert window.measurement.time_s == pytest.approx(0.5)
    assert seen == [window.measurement]


def test_context_manager_cancels_on_exception(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    window = monitor.window("failing")
    with pytest.raises(KeyError):
        with window:
            raise KeyError("boom")
    assert window.measurement is None
    assert not monitor.is_open("failing")


def test_window_as_decorator(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    times: list[float] = []

    @monitor.window("train_step", on_end=lambda m: times.append(m.time_s))
    def train_step(seconds: float) -> str:
        sim.advance(seconds)
        return "done"

    assert train_step(0.25) == "done"
    assert train_step(0.75) == "done"
    assert times == [pytest.approx(0.25), pytest.approx(0.75)]


def test_sync_callback_runs_before_each_reading(sim: joule.DeviceSet) -> None:
    calls: list[int] = []
    monitor = joule.Monitor(devices=sim, sync=lambda: calls.append(1))
    monitor.begin_window("a")
    monitor.end_window("a")
    assert len(calls) == 2
    monitor.begin_window("b", sync=False)
    monitor.end_window("b", sync=False)
    assert len(calls) == 2


def test_sync_callback_exception_propagates(sim: joule.DeviceSet) -> None:
    def failing_sync() -> None:
        raise ZeroDivisionError("sync failed")

    monitor = joule.Monitor(devices=sim, sync=failing_sync)
    with pytest.raises(ZeroDivisionError, match="sync failed"):
        monitor.begin_window("a")
    assert not monitor.is_open("a")


def test_sync_callback_from_several_threads() -> None:
    devices = joule.devices(sim="v100", cpus=False)
    calls: list[str] = []
    monitor = joule.Monitor(devices=devices, sync=lambda: calls.append(threading.current_thread().name))

    def worker(name: str) -> None:
        for i in range(20):
            monitor.begin_window(f"{name}-{i}")
            monitor.end_window(f"{name}-{i}")

    threads = [threading.Thread(target=worker, args=(f"t{n}",), name=f"t{n}") for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 4 * 20 * 2
    assert set(calls) == {"t0", "t1", "t2", "t3"}


def test_invalid_sync_argument(sim: joule.DeviceSet) -> None:
    with pytest.raises(joule.InvalidArgumentError, match="sync"):
        joule.Monitor(devices=sim, sync="jax")  # type: ignore[arg-type]


def test_gpu_selection() -> None:
    devices = joule.devices(sim="3xv100", virtual_clock=True, cpus=False)
    monitor = joule.Monitor(gpus=[2, 0], devices=devices)
    assert monitor.gpu_indices == [2, 0]
    monitor.begin_window("w")
    devices.advance(1)
    assert sorted(monitor.end_window("w").gpu_energy_j) == [0, 2]
    with pytest.raises(joule.InvalidArgumentError, match="twice"):
        joule.Monitor(gpus=[1, 1], devices=devices)


def test_gpu_without_energy_counter_is_estimated() -> None:
    devices = joule.devices(sim="p100", virtual_clock=True, cpus=False)
    monitor = joule.Monitor(devices=devices)
    assert monitor.polled_gpu_indices == [0]
    power_w = devices.gpus[0].power_w()
    monitor.begin_window("w")
    devices.advance(2)
    measurement = monitor.end_window("w")
    assert measurement.estimated
    assert measurement.gpu_estimated == {0: True}
    assert measurement.gpu_energy_source[0] == "power-samples"
    assert measurement.gpu_energy_j[0] == pytest.approx(2 * power_w, rel=1e-6)


def test_cpu_and_dram_energy(tmp_path: pathlib.Path) -> None:
    root = make_fake_powercap(tmp_path)
    devices = joule.devices(sim="v100", virtual_clock=True, powercap_root=str(root))
    monitor = joule.Monitor(devices=devices)
    assert monitor.cpu_indices == [0]
    monitor.begin_window("w")
    set_energy(root, 1_000_000 + 30_000_000, 500_000 + 4_000_000)
    devices.advance(1)
    measurement = monitor.end_window("w")
    assert measurement.cpu_energy_j == {0: pytest.approx(30.0)}
    assert measurement.dram_energy_j == {0: pytest.approx(4.0)}
    assert measurement.total_energy_j == pytest.approx(measurement.total_gpu_energy_j + 34.0)
    assert joule.Monitor(cpus=[], devices=devices).cpu_indices == []


def test_a_rapl_reset_inside_a_window_is_not_measurable(tmp_path: pathlib.Path) -> None:
    # joule issue 23: before, the window subtracted the readings around a RAPL counter reset and reported what
    # that gave as measured (here 0 J: the reset step counts nothing).
    root = make_fake_powercap(tmp_path, package_uj=5_000_000)
    devices = joule.devices(sim="v100", virtual_clock=True, powercap_root=str(root))
    monitor = joule.Monitor(devices=devices)
    monitor.begin_window("w")
    set_energy(root, 1_000, 500_000 + 4_000_000)  # the package counter reset: 5 J -> 1 mJ
    devices.advance(1)
    measurement = monitor.end_window("w")
    assert not measurement.measurable
    assert math.isnan(measurement.cpu_energy_j[0])
    assert math.isnan(measurement.total_energy_j)  # not silently low
    assert measurement.dram_energy_j == {0: pytest.approx(4.0)}
    assert measurement.total_gpu_energy_j > 0
    why = measurement.why_not_measurable
    assert why is not None and why.startswith(
        "CPU 0: not measurable: the energy counter was reset once between the readings "
        f"({root}/intel-rapl:0/energy_uj went back from 5000000 to 1000 uJ in "), why
    assert why.endswith("; the energy before the reset is unknown, so none is counted rather than a wrap's worth "
                        "of phantom energy"), why
    assert measurement.to_dict()["why_not_measurable"] == why
    assert "cpu_energy_j={0: not measurable}" in repr(measurement)
    assert measurement == measurement
    # A window after the reset is measured.
    monitor.begin_window("after")
    set_energy(root, 2_001_000, 4_500_000)
    measurement = monitor.end_window("after")
    assert measurement.measurable and measurement.why_not_measurable is None
    assert measurement.cpu_energy_j == {0: pytest.approx(2.0)}


def test_monitor_keeps_its_devices_alive() -> None:
    monitor = joule.Monitor(devices=joule.devices(sim="v100", virtual_clock=True, cpus=False))
    monitor.begin_window("w")
    monitor.devices.advance(1)
    assert monitor.end_window("w").time_s == pytest.approx(1)


def test_measurements_compare_by_value(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    monitor.begin_window("a")
    monitor.begin_window("b")
    sim.advance(1)
    a, b = monitor.end_window("a"), monitor.end_window("b")
    assert a != b  # names differ
    assert a.to_dict() | {"name": "b"} == b.to_dict()
    assert a == a and not (a == "a")


def no_gpu_devices() -> joule.DeviceSet:
    return joule.devices(cpus=False, nvml_library="/nonexistent/libnvidia-ml.so.1",
                         rocm_library="/nonexistent/librocm_smi64.so.1")


def test_every_vendor_library_and_the_jetson_root_can_be_named() -> None:
    found = joule.devices(cpus=False, nvml_library="/nonexistent/nvml.so", rocm_library="/nonexistent/rocm.so",
                          amd_smi_library="/nonexistent/amd_smi.so", level_zero_library="/nonexistent/ze.so",
                          jetson_sysfs_root="/nonexistent/jetson")
    details = {report["backend"]: report["detail"] for report in found.reports}
    assert "/nonexistent/amd_smi.so" in details["amdsmi"], details
    assert "/nonexistent/ze.so" in details["levelzero"], details
    assert "/nonexistent/jetson" in details["jetson"], details
    # The fake Level Zero loader of the C++ tests, through the real loading code: its GPUs are found.
    fake = os.path.join(os.environ.get("JOULE_BUILD_DIR", ""), "tests/fakes/levelzero/complete/libze_loader.so.1")
    if os.path.exists(fake):
        intel = joule.devices(cpus=False, nvml_library="/nonexistent/nvml.so", level_zero_library=fake,
                              amd_smi_library="/nonexistent/amd_smi.so", rocm_library="/nonexistent/rocm.so")
        assert intel.gpus and all(gpu.backend == "levelzero" for gpu in intel.gpus), intel.reports


def test_a_monitor_with_no_gpu_warns_and_says_how_to_simulate_one() -> None:
    devices = no_gpu_devices()
    with pytest.warns(RuntimeWarning) as warned:
        monitor = joule.Monitor(devices=devices)
    message = str(warned[0].message)
    assert message.startswith("joule.Monitor: nothing will be measured but time: no GPU found: ")
    assert message.endswith("For a simulated GPU, set JOULE_SIM=v100 or pass devices=joule.devices(sim='v100')")
    assert monitor.gpu_indices == []


def test_gpus_asked_for_that_are_missing_raise() -> None:
    with pytest.raises(joule.NotFoundError, match=r"^Monitor\(gpus=\.\.\.\): unknown GPU index 0: no GPU found: "):
        joule.Monitor(gpus=[0], devices=no_gpu_devices())
    with pytest.raises(joule.NotFoundError, match=r"^daemon_socket=/nonexistent/joule.sock: no GPU found: daemon: "
                       r"cannot connect to the joule daemon at /nonexistent/joule.sock"):
        joule.devices(daemon_socket="/nonexistent/joule.sock", cpus=False)


def test_a_monitor_measures_cpu_energy_through_the_daemon(joule_binary: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """RAPL is root-only since Linux 5.10: with a daemon socket the CPUs' counters are the daemon's."""
    powercap = make_fake_powercap(tmp_path / "powercap", package_uj=5_000_000, dram_uj=1_000_000)
    socket = tmp_path / "run" / "joule.sock"
    daemon = subprocess.Popen(
        [str(joule_binary), "--sim", "v100", "daemon", "--socket", str(socket), "--audit-log",
         str(tmp_path / "audit.log")],
        env={**os.environ, "JOULE_POWERCAP_ROOT": str(powercap)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.stdout is not None
        lines = [daemon.stdout.readline() for _ in range(3)]
        assert lines[2] == f"joule daemon: serving the energy of 1 CPU package (RAPL at {powercap})\n", lines
        # This process has no counters of its own: the CPUs can only be the daemon's.
        devices = joule.devices(daemon_socket=str(socket), powercap_root=str(tmp_path / "no-powercap"))
        assert [(cpu.index, cpu.backend, cpu.has_dram) for cpu in devices.cpus] == [(0, "daemon", True)]
        assert [(r["backend"], r["kind"], r["ok"]) for r in devices.reports] == [("daemon", "gpu", True),
                                                                                  ("daemon", "cpu", True)]
        monitor = joule.Monitor(cpus=[0], devices=devices)
        monitor.begin_window("step")
        for zone, energy_uj in ((powercap / "intel-rapl:0", 8_000_000),
                                (powercap / "intel-rapl:0" / "intel-rapl:0:0", 1_500_000)):
            # Replaced whole: the daemon's wraparound thread may read it at any moment.
            (zone / "energy_uj.tmp").write_text(f"{energy_uj}\n")
            os.replace(zone / "energy_uj.tmp", zone / "energy_uj")
        measurement = monitor.end_window("step")
        assert measurement.cpu_energy_j == {0: pytest.approx(3.0)}
        assert measurement.dram_energy_j == {0: pytest.approx(0.5)}
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


def test_numbers_are_checked_by_the_shared_rules(sim: joule.DeviceSet) -> None:
    with pytest.raises(joule.InvalidArgumentError) as caught:
        joule.Monitor(devices=sim, polling_period_s=float("nan"))
    assert str(caught.value) == "polling_period_s must be a finite number > 0, got nan"
    with pytest.raises(joule.InvalidArgumentError) as caught:
        joule.PowerSampler(devices=sim, period_s=-1)
    assert str(caught.value) == "period_s must be a finite number > 0, got -1"
