# SPDX-License-Identifier: Apache-2.0
"""joule.devices(), DeviceSet, Gpu and Cpu on simulated GPUs and a fake RAPL tree."""

from __future__ import annotations

import pathlib

import pytest

import joule


def make_fake_powercap(root: pathlib.Path, package_uj: int = 1_000_000, dram_uj: int = 500_000) -> pathlib.Path:
    """A /sys/class/powercap-like tree with one package (intel-rapl:0) and its DRAM zone."""
    package = root / "intel-rapl:0"
    dram = package / "intel-rapl:0:0"
    dram.mkdir(parents=True)
    for zone, name, energy in ((package, "package-0", package_uj), (dram, "dram", dram_uj)):
        (zone / "name").write_text(name + "\n")
        (zone / "energy_uj").write_text(f"{energy}\n")
        (zone / "max_energy_range_uj").write_text("262143328850\n")
    return root


def set_energy(root: pathlib.Path, package_uj: int, dram_uj: int) -> None:
    (root / "intel-rapl:0" / "energy_uj").write_text(f"{package_uj}\n")
    (root / "intel-rapl:0" / "intel-rapl:0:0" / "energy_uj").write_text(f"{dram_uj}\n")


def test_simulated_gpus_are_found(sim: joule.DeviceSet) -> None:
    assert len(sim.gpus) == 1
    gpu = sim.gpus[0]
    assert gpu.index == 0
    assert gpu.backend == "sim"
    assert "V100" in gpu.name
    assert gpu.has_energy_counter
    assert sim.is_virtual
    assert sim.reports[0]["backend"] == "sim" and sim.reports[0]["ok"]
    assert "Gpu" in repr(gpu) and "DeviceSet" in repr(sim)


def test_several_simulated_gpus() -> None:
    devices = joule.devices(sim="4xa40", cpus=False)
    assert [gpu.index for gpu in devices.gpus] == [0, 1, 2, 3]
    assert len({gpu.uuid for gpu in devices.gpus}) == 4
    assert not devices.is_virtual


def test_power_limits_in_watts(sim: joule.DeviceSet) -> None:
    gpu = sim.gpus[0]
    constraints = gpu.power_limit_constraints_w()
    assert constraints == {"min_w": 100.0, "max_w": 250.0, "default_w": 250.0}
    gpu.set_power_limit_w(150)
    assert gpu.power_limit_w() == 150.0
    assert gpu.power_w() <= 150.0
    gpu.reset_power_limit()
    assert gpu.power_limit_w() == 250.0


def test_power_limit_out_of_range_is_an_out_of_range_error(sim: joule.DeviceSet) -> None:
    with pytest.raises(joule.OutOfRangeError, match="100 W") as caught:
        sim.gpus[0].set_power_limit_w(50)
    assert isinstance(caught.value, ValueError)
    assert caught.value.code == "out-of-range"


def test_a_power_limit_is_checked_by_the_power_rule(sim: joule.DeviceSet) -> None:
    with pytest.raises(joule.InvalidArgumentError, match=r"power_limit_w=...\) must be a finite number ≥ 0, got -1"):
        sim.gpus[0].set_power_limit_w(-1)
    with pytest.raises(joule.InvalidArgumentError, match="must be at most 5000, got 150000: is it in mW"):
        sim.gpus[0].set_power_limit_w(150000)
    assert sim.gpus[0].power_limit_w() == 250.0


def test_sm_clocks(sim: joule.DeviceSet) -> None:
    gpu = sim.gpus[0]
    clocks = gpu.supported_sm_clocks_mhz()
    assert clocks == sorted(clocks, reverse=True)
    gpu.lock_sm_clocks_mhz(clocks[-1], clocks[len(clocks) // 2])
    gpu.reset_sm_clocks()
    with pytest.raises(joule.InvalidArgumentError):
        gpu.lock_sm_clocks_mhz(clocks[0], clocks[-1])


def test_virtual_clock_moves_only_when_advanced(sim: joule.DeviceSet) -> None:
    gpu = sim.gpus[0]
    start_s, start_j = sim.now_s(), gpu.energy_j()
    assert sim.now_s() == start_s
    sim.advance(2.0)
    assert sim.now_s() == pytest.approx(start_s + 2.0)
    assert gpu.energy_j() - start_j == pytest.approx(2.0 * gpu.power_w(), rel=1e-3)


def test_simulated_training_iterations_follow_the_power_limit(sim: joule.DeviceSet) -> None:
    fast_s = sim.iteration_time_s()
    assert sim.run_iterations(10) == pytest.approx(10 * fast_s)
    sim.gpus[0].set_power_limit_w(100)
    assert sim.iteration_time_s() > fast_s


def test_advance_needs_a_virtual_clock() -> None:
    devices = joule.devices(sim="v100", cpus=False)
    with pytest.raises(joule.StateError, match="virtual"):
        devices.advance(1.0)
    with pytest.raises(joule.InvalidArgumentError, match="virtual_clock"):
        joule.devices(virtual_clock=True, gpus=False, cpus=False)


def test_malformed_sim_spec_is_an_invalid_argument_error() -> None:
    with pytest.raises(joule.InvalidArgumentError, match="h100x"):
        joule.devices(sim="h100x")


def test_default_devices_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOULE_SIM", "2xv100")
    monkeypatch.setattr(joule.monitor, "_default_devices", None)
    devices = joule.default_devices()
    assert len(devices.gpus) == 2
    assert joule.default_devices() is devices


def test_no_gpus_is_reported_not_raised() -> None:
    devices = joule.devices(gpus=False, cpus=False)
    assert devices.gpus == []
    assert isinstance(devices.why_no_gpus(), str)


def test_rapl_cpus_from_a_fake_powercap_tree(tmp_path: pathlib.Path) -> None:
    root = make_fake_powercap(tmp_path)
    devices = joule.devices(gpus=False, powercap_root=str(root))
    assert len(devices.cpus) == 1
    cpu = devices.cpus[0]
    assert (cpu.index, cpu.backend, cpu.has_dram) == (0, "rapl", True)
    assert cpu.package_energy_j() == pytest.approx(1.0)
    assert cpu.dram_energy_j() == pytest.approx(0.5)


def test_sim_models_are_listed() -> None:
    keys = [model["key"] for model in joule.sim_models()]
    assert {"v100", "a40", "p100", "rtx6000"} <= set(keys)
