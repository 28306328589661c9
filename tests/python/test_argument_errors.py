# SPDX-License-Identifier: Apache-2.0
"""Every argument of the public API, given a value of the wrong type, is refused with one message that names
it: ``ZeusCost(eta=...): expected a number, got Wrong Wrong()`` (a TypeError, or a joule.Error for a value
the C++ side checks), never pybind11's "incompatible function arguments" and its list of signatures."""

from __future__ import annotations

import pathlib
from typing import Any, Callable

import pytest

import joule
from joule import _joule
from conftest import SOURCE_DIR

TRACE = SOURCE_DIR / "data" / "carbon" / "synthetic_us_solar_14d.csv"
TARIFF = SOURCE_DIR / "data" / "price" / "example_tou_tariff.csv"


class Wrong:
    """A value no argument accepts: not a number, a string, a sequence, a callable or None."""

    def __repr__(self) -> str:
        return "Wrong()"


WRONG = Wrong()


@pytest.fixture(autouse=True)
def _keep_metric_labels() -> Any:
    """set_metric_labels() is in the table: the process-wide labels are as before after each test."""
    before = joule.metric_labels()
    yield
    joule.set_metric_labels(before, detect=False)


@pytest.fixture(scope="module")
def devices() -> joule.DeviceSet:
    return joule.devices(sim="v100:imagenet", virtual_clock=True, cpus=False)


def valid_calls(devices: joule.DeviceSet) -> dict[str, tuple[Callable[..., Any], dict[str, Any]]]:
    """Each public constructor and function with a call that works, every argument given by keyword."""
    monitor = joule.Monitor(devices=devices)
    signal = joule.carbon_signal(intensity=400.0)
    tariff = joule.HourlyTariff.read(str(TARIFF))
    return {
        "devices": (joule.devices, dict(sim="v100", virtual_clock=True, gpus=True, cpus=False, powercap_root=None)),
        "Monitor": (joule.Monitor, dict(gpus=[0], cpus=[], sync=None, devices=devices, approx_instant_energy=False,
                                        polling_period_s=0.1)),
        "PowerSampler": (joule.PowerSampler, dict(gpus=[0], period_s=0.1, max_points=0, devices=devices)),
        "PowerLimitOptimizer": (joule.PowerLimitOptimizer, dict(
            monitor=monitor, eta=0.5, wait_steps=1, warmup_steps=10, profile_steps=40, step_w=25.0, aggregator=None,
            profile_dir=None, job_key=None, restore_to="default", restore_on_signals=False, steady_state="off")),
        "ChaseOptimizer": (joule.ChaseOptimizer, dict(
            monitor=monitor, signal=signal, eta=0.5, max_intensity_g_per_kwh=750.0, interval_s=1800.0,
            max_power_w=0.0, forecaster="last", training_samples=48, monitor_only=True, wait_steps=1,
            warmup_steps=10, profile_steps=40, step_w=25.0, aggregator=None, profile_dir=None, job_key=None,
            restore_to="default", restore_on_signals=False, steady_state="off")),
        "CarbonMonitor": (joule.CarbonMonitor, dict(monitor=monitor, signal=signal, bucket_s=3600,
                                                    background_checkpoints=False)),
        "PriceMonitor": (joule.PriceMonitor, dict(monitor=monitor, tariff=tariff, bucket_s=3600,
                                                  background_checkpoints=False)),
        "ZeusCost": (joule.ZeusCost, dict(eta=0.5, max_power_w=300.0)),
        "CarbonCost": (joule.CarbonCost, dict(eta=0.5, intensity_g_per_kwh=400.0, max_intensity_g_per_kwh=750.0,
                                              max_power_w=300.0)),
        "Deadline": (joule.Deadline, dict(time_s=1.0)),
        "MaxSlowdown": (joule.MaxSlowdown, dict(factor=1.1)),
        "describe": (joule.describe, dict(policy=joule.MinEnergy())),
        "validate_policy": (joule.validate_policy, dict(policy=joule.MinEnergy())),
        "Frontier": (joule.Frontier, dict(points=[(250, 1.0, 200.0), (200, 1.2, 180.0)])),
        "CallbackSet": (joule.CallbackSet, dict(callbacks=[joule.Callback()])),
        "simulate": (joule.simulate, dict(gpu="v100", workload="cifar100", eta=0.5, beta=2.0, seed=1,
                                          recurrences=2, b0=None, target_metric=None, max_epochs=None,
                                          trace_dir=None, max_tries=20, batch_size_policy=None,
                                          power_limit_policy=None)),
        "power_limit_candidates_w": (joule.power_limit_candidates_w, dict(min_w=100.0, max_w=250.0, step_w=25.0)),
        "set_metric_labels": (joule.set_metric_labels, dict(labels={"team": "vision"}, detect=False)),
        "job_spec": (joule.job_spec, dict(
            job_id_prefix="mnist", batch_sizes=[32, 64], default_batch_size=32, job_id=None, eta_knob=0.5,
            beta_knob=2.0, target_metric=0.5, higher_is_better_metric=True, max_epochs=10, num_pruning_rounds=2,
            window_size=0, mab_prior_mean=0.0, mab_prior_precision=0.0, mab_num_explorations=2, mab_seed=1)),
        "BatchSizeClient": (joule.BatchSizeClient, dict(urls="http://127.0.0.1:1", timeout_s=1.0,
                                                        connect_timeout_s=1.0, attempts=1)),
        # (country= is checked by carbon.py's country handling.)
        "carbon_signal": (joule.carbon_signal, dict(intensity=400.0, trace=None, zone=None, provider=None,
                                                    devices=None)),
        "CarbonTrace.read": (joule.CarbonTrace.read, dict(path=str(TRACE))),
        "HourlyTariff.read": (joule.HourlyTariff.read, dict(path=str(TARIFF))),
        "LlmDevice": (joule.LlmDevice, dict(gpu="h100", model="llama-3-8b", tensor_parallel=1, index_base=0)),
        "RequestEnergyLedger": (joule.RequestEnergyLedger, dict(rule="tokens")),
        "SloClockController": (joule.SloClockController, dict(
            ttft_s=1.0, tpot_s=0.1, clocks_mhz=[1980, 1500, 1000], attainment=0.99, interval_s=1.0, window_s=20.0,
            margin=0.85, min_margin=0.5, min_samples=8, max_step_down=4, candidate_levels=24)),
        "InferenceMetrics": (joule.InferenceMetrics, dict(gpu="0", request_energy_buckets_j=[1.0, 10.0])),
        "SettingsGuard": (joule.SettingsGuard, dict(owner="test", restore_on_signals=False,
                                                    power_limit_restore="recorded")),
    }


def cases() -> list[tuple[str, str]]:
    calls = valid_calls(joule.devices(sim="v100:imagenet", virtual_clock=True, cpus=False))
    return [(name, keyword) for name, (_, kwargs) in calls.items() for keyword in kwargs]


def test_every_valid_call_works(devices: joule.DeviceSet) -> None:
    for name, (function, kwargs) in valid_calls(devices).items():
        function(**kwargs)  # raises if the table is out of date


@pytest.mark.parametrize("name,keyword", cases())
def test_a_wrong_type_names_the_argument(devices: joule.DeviceSet, name: str, keyword: str) -> None:
    function, kwargs = valid_calls(devices)[name]
    with pytest.raises((TypeError, joule.Error)) as caught:
        function(**{**kwargs, keyword: WRONG})
    message = str(caught.value)
    assert message.startswith(f"{name}({keyword}=...): expected "), message
    assert message.endswith("got Wrong Wrong()"), message
    assert "\n" not in message and "incompatible" not in message


def test_the_brief_cases(devices: joule.DeviceSet) -> None:
    # One GPU index is a list of one.
    assert joule.Monitor(gpus=0, devices=devices).gpu_indices == [0]
    assert joule.PowerSampler(gpus=0, devices=devices).gpu_indices == [0]
    with pytest.raises(TypeError) as caught:
        joule.Monitor(gpus="a", devices=devices)
    assert str(caught.value) == "Monitor(gpus=...): expected a list of GPU indices or an int, got str 'a'"
    with pytest.raises(TypeError) as caught:
        joule.Monitor(gpus=[0, 1.5], devices=devices)
    assert str(caught.value) == (
        "Monitor(gpus=...): expected a list of GPU indices or an int, got list [0, 1.5] (item 1 is float 1.5)"
    )
    with pytest.raises(TypeError) as caught:
        joule.Monitor(gpus=True, devices=devices)
    assert str(caught.value) == "Monitor(gpus=...): expected a list of GPU indices or an int, got bool True"


def test_positional_unknown_and_missing_arguments_are_named() -> None:
    with pytest.raises(TypeError) as caught:
        joule.ZeusCost("high")
    assert str(caught.value) == "ZeusCost(eta=...): expected a number, got str 'high'"
    with pytest.raises(TypeError) as caught:
        joule.ZeusCost(etaa=0.5)
    assert str(caught.value) == "ZeusCost(): no argument called 'etaa' (it takes: eta, max_power_w)"
    with pytest.raises(TypeError) as caught:
        joule.Deadline()
    assert str(caught.value) == "Deadline(): missing the argument 'time_s'"
    with pytest.raises(TypeError) as caught:
        joule.Deadline(1.0, 2.0)
    assert str(caught.value) == "Deadline() takes 1 positional argument, got 2"
    with pytest.raises(TypeError) as caught:
        joule.simulate(gpu=3)
    assert str(caught.value) == "simulate(gpu=...): expected a string, got int 3"
    with pytest.raises(TypeError) as caught:
        joule.describe(3)
    assert str(caught.value) == (
        "describe(policy=...): expected one of joule.ZeusCost, joule.CarbonCost, joule.Deadline, "
        "joule.MaxSlowdown, joule.MinEnergy, joule.MinTime, got int 3"
    )


def test_methods_and_setters_name_the_argument(devices: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=devices)
    # The per-step calls check their arguments in C++ (no wrapper: docs/python.md's window cost holds).
    with pytest.raises(TypeError) as caught:
        monitor.begin_window(3)
    assert str(caught.value) == "Monitor.begin_window(name=...): expected a string, got int 3"
    with pytest.raises(TypeError) as caught:
        monitor.begin_window("a", sync="no")
    assert str(caught.value) == "Monitor.begin_window(sync=...): expected True or False, got str 'no'"
    with pytest.raises(TypeError) as caught:
        monitor.end_window(None)
    assert str(caught.value) == "Monitor.end_window(name=...): expected a string, got NoneType None"
    assert "begin_window" in joule.Monitor.__dict__ or "begin_window" in _joule._Monitor.__dict__
    assert not hasattr(_joule._Monitor.__dict__["begin_window"], "__joule_native__")
    # Other methods are wrapped.
    with pytest.raises(TypeError) as caught:
        devices.advance("1 s")
    assert str(caught.value) == "DeviceSet.advance(seconds=...): expected a number, got str '1 s'"
    with pytest.raises(TypeError) as caught:
        devices.gpus[0].set_power_limit_w("max")
    assert str(caught.value) == "Gpu.set_power_limit_w(power_limit_w=...): expected a number, got str 'max'"
    # A TypeError raised inside a call, not by pybind11's argument conversion, is not rewritten.
    sampler = joule.PowerSampler(devices=devices)
    with pytest.raises(TypeError) as caught:
        sampler.energy()
    assert "incompatible" not in str(caught.value)


def test_wrapping_keeps_names_docs_and_results() -> None:
    assert joule.simulate.__name__ == "simulate"
    assert joule.simulate.__doc__ == joule.simulate.__joule_native__.__doc__
    assert joule.ZeusCost.__init__.__doc__.startswith("__init__(self: joule._joule.ZeusCost, eta: float")
    assert joule.describe(joule.ZeusCost(0.5, 300.0)) == _joule.describe.__joule_native__(joule.ZeusCost(0.5, 300.0))


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda d: joule.ZeusCost(eta=1.5), "ZeusCost(eta=...) must be a finite number in [0, 1], got 1.5"),
        (lambda d: joule.ZeusCost(max_power_w=-1), "ZeusCost(max_power_w=...) must be a finite number ≥ 0, got -1"),
        (lambda d: joule.CarbonCost(max_intensity_g_per_kwh=0),
         "CarbonCost(max_intensity_g_per_kwh=...) must be a finite number > 0, got 0"),
        (lambda d: joule.Deadline(float("nan")), "Deadline(time_s=...) must be a finite number ≥ 0, got nan"),
        (lambda d: joule.MaxSlowdown(0.5), "MaxSlowdown(factor=...) must be a finite number ≥ 1, got 0.5"),
        (lambda d: joule.PowerLimitOptimizer(joule.Monitor(devices=d), eta=2, restore_on_signals=False),
         "ZeusCost(eta=...) must be a finite number in [0, 1], got 2"),
        (lambda d: joule.power_limit_candidates_w(0, 250), "power_limit_candidates_w(min_w=...) must be a finite "
         "number > 0, got 0"),
        (lambda d: joule.PowerSampler(max_points=-1, devices=d),
         "PowerSampler(max_points=...): expected a non-negative integer, got int -1"),
        (lambda d: joule.simulate("v100", "cifar100", seed=-1),
         "simulate(seed=...): expected a non-negative integer, got int -1"),
        (lambda d: joule.LlmDevice(gpu="v100"), "LlmDevice(gpu=...): unknown GPU 'v100': known GPUs are a100-40gb, "
         "a100-80gb, h100 (or a JSON file, see docs/inference.md)"),
        (lambda d: joule.LlmDevice(index_base=-1), "LlmDevice(index_base=...) must be ≥ 0, got -1"),
        (lambda d: joule.SloClockController(ttft_s=0, tpot_s=0.1, clocks_mhz=[1000]),
         "SloClockController: the TTFT SLO must be a positive number of seconds, got 0"),
        (lambda d: joule.PowerLimitOptimizer(joule.Monitor(devices=d), steady_state="soon", restore_on_signals=False),
         "steady_state: unknown steady-state mode 'soon' (expected off, fixed or steady)"),
        (lambda d: joule.PowerLimitOptimizer(joule.Monitor(devices=d), steady_state={"window_s": "1 min"},
                                             restore_on_signals=False),
         "steady_state['window_s']: expected a number, got str '1 min'"),
        (lambda d: joule.simulate("v100", "cifar100", batch_size_policy=object()),
         None),  # checked below: names the methods a policy needs
    ],
)
def test_a_wrong_value_names_the_argument(devices: joule.DeviceSet, call: Callable[[Any], Any],
                                          message: str | None) -> None:
    with pytest.raises((TypeError, ValueError, joule.Error)) as caught:
        call(devices)
    if message is None:
        assert str(caught.value).startswith(
            "simulate(batch_size_policy=...): expected None or a policy with the methods predict(job) -> batch size "
            "and observe(job, batch_size, cost_j, reached), got object <object object at "
        ), str(caught.value)
    else:
        assert str(caught.value) == message


def test_a_subclass_of_a_native_class_with_virtuals_still_gets_the_base_methods() -> None:
    """RankAggregator's methods are C++ virtuals that Python may override: a wrapped base method must not be
    taken for an override (it would call itself through the trampoline until RecursionError)."""

    class OneRank(joule.RankAggregator):
        def rank(self) -> int:
            return 0

        def world_size(self) -> int:
            return 1

        def aggregate(self, energy_j: float, time_s: float) -> tuple[float, float]:
            return energy_j, time_s

    aggregator = OneRank()
    assert aggregator.all_ranks(True) is True and aggregator.all_ranks(False) is False  # the C++ default
    with pytest.raises(TypeError) as caught:
        aggregator.all_ranks("yes")
    assert str(caught.value) == "OneRank.all_ranks(value=...): expected True or False, got str 'yes'"
