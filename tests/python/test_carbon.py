# SPDX-License-Identifier: Apache-2.0
"""Carbon from Python: signals and the country default, CarbonMonitor and PriceMonitor windows, and
joule.ChaseOptimizer on a simulated V100 on a virtual clock (all fast: the clock only moves when told)."""

from __future__ import annotations

import json
import math
import pathlib
import subprocess

import pytest

import joule
from conftest import SOURCE_DIR, run_python

FAST = dict(wait_steps=1, warmup_steps=1, profile_steps=2, restore_on_signals=False)
HALF_HOUR_S = 1800


def aligned_trace(sim: joule.DeviceSet, values: list[float]) -> joule.CarbonTrace:
    """A half-hourly trace whose first period starts at the devices' clock's current half hour."""
    now = sim.to_unix_s(sim.now_s())
    start = math.floor(now / HALF_HOUR_S) * HALF_HOUR_S
    rows = [f"{_iso(start + i * HALF_HOUR_S)},{value}" for i, value in enumerate(values)]
    return joule.CarbonTrace.parse("timestamp,carbon_intensity_g_per_kwh\n" + "\n".join(rows) + "\n", "test")


def _iso(unix_s: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(unix_s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# Country default -------------------------------------------------------------------------------------------


def test_country_intensity_by_code_and_inferred(monkeypatch: pytest.MonkeyPatch) -> None:
    germany = joule.country_intensity("DEU")
    assert germany["iso3"] == "DEU" and germany["name"] == "Germany"
    assert germany["intensity_g_per_kwh"] > 0 and germany["how"] == "chosen with --country"
    assert joule.country_intensity("de") == germany
    monkeypatch.setenv("TZ", "Europe/Berlin")
    inferred = joule.country_intensity()
    assert inferred["iso3"] == "DEU"
    assert inferred["description"].endswith("inferred from timezone Europe/Berlin; pass --country to choose")
    assert len(joule.countries()) == 213
    with pytest.raises(joule.NotFoundError, match=r"unknown country code 'DEX': closest: DEU \(Germany\)"):
        joule.country_intensity("DEX")
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("LC_ALL", raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    with pytest.raises(joule.NotFoundError, match="cannot tell the country .* pass --country CODE"):
        joule.country_intensity()


# Issue 23: 'auto' and the unit-slip bounds are the command line's, in the same words.
def test_auto_and_the_unit_bounds_are_the_command_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    for code in ("auto", "AUTO", None):
        assert joule.country_intensity(code)["how"] == "inferred from timezone Europe/Berlin"
    assert joule.carbon_signal(country="Auto").latest()["intensity_g_per_kwh"] == pytest.approx(
        joule.country_intensity("DEU")["intensity_g_per_kwh"]
    )
    with pytest.raises(
        joule.InvalidArgumentError,
        match=r"^carbon intensity must be at most 2000, got 380000: is it in g/MWh\? The unit here is g/kWh$",
    ):
        joule.carbon_signal(intensity=380000)
    assert joule.carbon_signal(intensity=2000).latest()["intensity_g_per_kwh"] == 2000


def test_signals_take_exactly_one_source(sim: joule.DeviceSet) -> None:
    constant = joule.carbon_signal(intensity=400, devices=sim)
    assert constant.latest()["intensity_g_per_kwh"] == 400
    country = joule.carbon_signal(country="fra")
    assert "yearly average of France (FRA, " in country.describe()
    assert country.latest()["intensity_g_per_kwh"] == joule.country_intensity("FRA")["intensity_g_per_kwh"]
    with pytest.raises(joule.InvalidArgumentError, match="give exactly one carbon source"):
        joule.carbon_signal(intensity=1, country="DEU")
    with pytest.raises(joule.InvalidArgumentError, match="give exactly one carbon source"):
        joule.carbon_signal()
    trace = joule.CarbonTrace.read(str(SOURCE_DIR / "data/carbon/synthetic_us_solar_14d.csv"))
    assert len(trace) == 672 and trace.period_s == 1800
    shifted = trace.shifted(86400)
    assert shifted.start_unix_s == trace.start_unix_s + 86400
    assert shifted.at(shifted.start_unix_s) == trace.at(trace.start_unix_s)


def test_unknown_country_on_the_command_line(joule_binary: pathlib.Path) -> None:
    result = subprocess.run(
        [str(joule_binary), "carbon", "intensity", "--country", "DEX"], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "unknown country code 'DEX': closest: DEU (Germany)" in result.stderr
    assert "`joule carbon countries` lists them" in result.stderr
    listed = subprocess.run(
        [str(joule_binary), "carbon", "countries", "--format", "csv"], capture_output=True, text=True, check=True
    )
    assert listed.stdout.splitlines()[0] == "iso3,country,year,carbon_intensity_g_per_kwh"
    assert any(line.startswith("DEU,Germany,") for line in listed.stdout.splitlines())


# Windows ---------------------------------------------------------------------------------------------------


def test_carbon_monitor_weights_each_bucket_by_its_intensity(sim: joule.DeviceSet) -> None:
    trace = aligned_trace(sim, [100, 300, 500, 700])
    monitor = joule.Monitor(devices=sim)
    carbon = joule.CarbonMonitor(monitor, joule.carbon_signal(trace=trace, devices=sim))
    carbon.begin_window("train")
    sim.advance(HALF_HOUR_S - (sim.to_unix_s(sim.now_s()) % HALF_HOUR_S) + 1)  # into the second period
    sim.run_iterations(2000)
    m = carbon.end_window("train")
    assert m.ok and m.energy_j > 0
    expected = sum(b["energy_j"] / 3.6e6 * b["intensity_g_per_kwh"] for b in m.report["buckets"])
    assert m.carbon_g == pytest.approx(expected, rel=1e-9)
    assert {b["intensity_g_per_kwh"] for b in m.report["buckets"]} <= {100.0, 300.0, 500.0, 700.0}
    assert len(m.report["buckets"]) >= 2
    assert m.report["energy_j"] == pytest.approx(m.measurement.total_gpu_energy_j)
    # A window the trace does not cover keeps its energy; its carbon raises the signal's error.
    carbon.begin_window("late")
    sim.advance(4 * HALF_HOUR_S)
    sim.run_iterations(10)
    late = carbon.end_window("late")
    assert not late.ok and late.measurement.total_gpu_energy_j > 0
    with pytest.raises(joule.Error, match="no carbon intensity for|covers"):
        late.carbon_g
    with pytest.raises(joule.NotFoundError):
        carbon.end_window("never-opened")


def test_price_monitor_prices_each_hour(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    price = joule.PriceMonitor(monitor, joule.HourlyTariff.flat(0.2))
    price.begin_window("train")
    sim.run_iterations(500)
    report = price.end_window("train")
    assert report["cost_usd"] == pytest.approx(report["energy_j"] / 3.6e6 * 0.2)
    with pytest.raises(joule.ParseError, match="t.csv"):
        joule.HourlyTariff.parse("hour,price_usd_per_kwh\n0,0.1\n", "t.csv")


# ChaseOptimizer --------------------------------------------------------------------------------------------


def run_steps(chase: joule.ChaseOptimizer, sim: joule.DeviceSet, steps: int, iterations: int = 1) -> None:
    for _ in range(steps):
        chase.on_step_begin()
        sim.run_iterations(iterations)
        chase.on_step_end()


def test_chase_profiles_once_then_reselects_every_interval(sim: joule.DeviceSet) -> None:
    # Low and high intensity alternate every half hour; "last" forecasts the previous value.
    trace = aligned_trace(sim, [50, 750] * 12)
    signal = joule.carbon_signal(trace=trace, devices=sim)
    monitor = joule.Monitor(devices=sim)
    chase = joule.ChaseOptimizer(monitor, signal, eta=0.9, interval_s=HALF_HOUR_S, forecaster="last", **FAST)
    gpu = sim.gpus[0]
    assert chase.state == "ready" and chase.decisions == [] and chase.forecaster == ""
    sim.advance(HALF_HOUR_S - (sim.to_unix_s(sim.now_s()) % HALF_HOUR_S) + 1)  # a previous period exists
    run_steps(chase, sim, 1 + 7 * 3 + 1)
    assert chase.state == "done"
    assert len(chase.profile_measurements) == len(chase.candidates_w) == 7
    assert len(chase.decisions) == 1 and chase.forecaster == "last"
    assert chase.max_power_w == 250.0
    first = chase.decisions[0]
    assert gpu.power_limit_w() == first["power_limit_w"] == chase.current_power_limit_w
    # ~4 hours of steps of 100 iterations: one decision per half hour, and the profile is never redone.
    start = sim.to_unix_s(sim.now_s())
    limits = set()
    while sim.to_unix_s(sim.now_s()) < start + 4 * 3600:
        run_steps(chase, sim, 1, iterations=100)
        limits.add(gpu.power_limit_w())
    assert len(chase.profile_measurements) == 7
    decisions = chase.decisions
    assert 8 <= len(decisions) <= 10
    gaps = [b["time_unix_s"] - a["time_unix_s"] for a, b in zip(decisions, decisions[1:])]
    assert all(HALF_HOUR_S <= gap <= HALF_HOUR_S + 60 for gap in gaps)
    # The forecast follows the trace, and a dirtier forecast never gets a higher limit.
    assert {d["forecast_g_per_kwh"] for d in decisions} == {50.0, 750.0}
    by_forecast = {d["forecast_g_per_kwh"]: d["power_limit_w"] for d in decisions}
    assert by_forecast[750.0] < by_forecast[50.0]
    assert len(limits) == 2
    chase.close()
    assert gpu.power_limit_w() == 250.0  # the default, as PowerLimitOptimizer restores
    chase.close()  # idempotent
    with pytest.raises(joule.StateError, match="closed"):
        chase.on_step_begin()


def test_chase_restores_the_limit_when_the_block_raises(sim: joule.DeviceSet) -> None:
    gpu = sim.gpus[0]
    monitor = joule.Monitor(devices=sim)
    with pytest.raises(RuntimeError, match="training failed"):
        with joule.ChaseOptimizer(monitor, joule.carbon_signal(intensity=700, devices=sim), eta=1.0, **FAST) as chase:
            run_steps(chase, sim, 1 + 7 * 3 + 1)
            assert chase.state == "done"
            assert gpu.power_limit_w() < 250.0  # dirty power, all weight on energy: a low limit
            # A constant signal: the forecaster is fitted on its flat history.
            assert chase.decisions[0]["forecast_g_per_kwh"] == pytest.approx(700.0)
            raise RuntimeError("training failed")
    assert gpu.power_limit_w() == 250.0


def test_chase_options_are_checked(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    signal = joule.carbon_signal(intensity=100, devices=sim)
    with pytest.raises(joule.InvalidArgumentError, match="unknown forecaster 'arima'"):
        joule.ChaseOptimizer(monitor, signal, forecaster="arima", **FAST)
    with pytest.raises(joule.InvalidArgumentError, match="eta must be in"):
        joule.ChaseOptimizer(monitor, signal, eta=2.0, **FAST)
    with pytest.raises(joule.InvalidArgumentError, match="either signal or country"):
        joule.ChaseOptimizer(monitor, signal, country="DEU", **FAST)
    with pytest.raises(joule.NotFoundError, match="unknown country code 'XX'"):
        joule.ChaseOptimizer(monitor, country="XX", **FAST)



def test_chase_settings_reach_cpp_as_its_options_struct(sim: joule.DeviceSet) -> None:
    """ChaseOptimizer fills joule._joule._ChaseOptions once; its checks name the Python argument."""
    options = joule._joule._ChaseOptions()
    assert (options.eta, options.interval_s, options.forecaster, options.training_samples) == (0.25, 1800.0, "ridge", 48)
    options.interval_s = 90.4
    assert options.interval_s == 90.0  # whole seconds
    with pytest.raises(joule.InvalidArgumentError, match="interval_s must be a finite number ≥ 1, got 0.5"):
        options.interval_s = 0.5
    with pytest.raises(joule.InvalidArgumentError, match="training_samples must be a whole number ≥ 0, got -1"):
        options.training_samples = -1
    monitor = joule.Monitor(devices=sim)
    signal = joule.carbon_signal(intensity=100, devices=sim)
    with pytest.raises(joule.InvalidArgumentError, match="interval_s must be"):
        joule.ChaseOptimizer(monitor, signal, interval_s=0, **FAST)
    chase = joule.ChaseOptimizer(monitor, signal, **FAST)
    assert chase.constraints_w == sim.gpus[0].power_limit_constraints_w()
    chase.close()


def test_carbon_trace_shifted_keeps_the_values(sim: joule.DeviceSet) -> None:
    trace = aligned_trace(sim, [50, 750])
    later = trace.shifted(86400)
    assert later.start_unix_s == trace.start_unix_s + 86400
    assert [p["intensity_g_per_kwh"] for p in later.points] == [50.0, 750.0]
    with pytest.raises(joule.InvalidArgumentError):
        trace.shifted(2**62)


# The example against the replay ----------------------------------------------------------------------------


def test_train_chase_example_matches_the_replay(joule_binary: pathlib.Path) -> None:
    """examples/train_chase.py's Chase phase and `joule carbon replay` of the same work from the same time: the
    same frontier (the simulated GPU is deterministic), the same decisions, so the same carbon. They differ only
    by the sub-second start (the replay starts on a whole second): within 0.5 %."""
    result = run_python([str(SOURCE_DIR / "examples/train_chase.py"), "--hours", "3", "--json"])
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["power_limit_after_w"] == 250.0
    assert summary["chase_carbon_g"] > 0 and len(summary["decisions"]) >= 5
    command = summary["replay_command"]
    replay = subprocess.run([str(joule_binary), *command[1:]], capture_output=True, text=True, check=False)
    assert replay.returncode == 0, replay.stderr
    replayed = json.loads(replay.stdout)
    chase = next(s for s in replayed["strategies"] if s["name"] == "chase")
    assert summary["chase_carbon_g"] == pytest.approx(chase["carbon_g"], rel=0.005)
    assert summary["chase_energy_j"] == pytest.approx(chase["energy_j"], rel=0.005)
    decisions = replayed["chase_decisions"]
    assert [d["power_limit_w"] for d in summary["decisions"]] == [d["power_limit_w"] for d in decisions]
    for ours, theirs in zip(summary["decisions"], decisions):
        assert ours["forecast_g_per_kwh"] == pytest.approx(theirs["forecast_g_per_kwh"], rel=1e-3)
