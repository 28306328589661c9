# SPDX-License-Identifier: Apache-2.0
"""Carbon from Python: intensity signals (a constant, a country's yearly average, a replayed trace, the live
providers), carbon and price windows over a :class:`joule.Monitor`, and Chase's carbon-aware power limits as
a training-loop callback. Every computation is joule's C++ (``joule/carbon/*.hpp``,
``joule/optimize/chase_optimizer.hpp``); this module names things."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional, Union

from . import _joule
from ._args import flag, integer, number, show, text
from ._joule import CarbonSignal, CarbonTrace, DeviceSet, HourlyTariff, Measurement
from .frontier import Frontier
from .monitor import Monitor
from .power_limit import AUTO, _NativeOptimizer, _profile_options, _resolve_aggregator


def carbon_signal(
    *,
    intensity: Optional[float] = None,
    trace: Union[None, str, CarbonTrace] = None,
    zone: Optional[str] = None,
    provider: Optional[str] = None,
    country: Optional[str] = None,
    devices: Optional[DeviceSet] = None,
) -> CarbonSignal:
    """A carbon-intensity signal (gCO2e/kWh). Give exactly one source:

    intensity: a constant, g/kWh (at most 2000, as ``joule measure --carbon-intensity``: a larger value is most
    likely in g/MWh, and InvalidArgumentError says so). trace: a CSV path or a :class:`CarbonTrace`, replayed on the devices' clock
    (on a virtual clock it plays as simulated time advances). zone (+ provider ``'electricitymaps'``,
    ``'watttime'`` or ``'uk'``; credentials from the JOULE_* variables, docs/carbon.md): a live provider.
    country: the yearly average of a country, by ISO 3166-1 code (``'DEU'``, ``'de'``), or ``'auto'`` to infer
    it from the timezone or the locale (see :func:`country_intensity`).

    devices: the DeviceSet whose clock gives "now" (pass the monitored devices when they run on a virtual
    clock); None: the real clock.
    """
    call = "carbon_signal"
    if trace is not None and not isinstance(trace, (str, os.PathLike, CarbonTrace)):
        raise TypeError(f"{call}(trace=...): expected a CSV path or a joule.CarbonTrace, got {show(trace)}")
    if devices is not None and not isinstance(devices, DeviceSet):
        raise TypeError(f"{call}(devices=...): expected a joule.DeviceSet or None, got {show(devices)}")
    if intensity is not None:
        intensity = number(call, "intensity", intensity)
    text(call, "zone", zone, none=True)
    text(call, "provider", provider, none=True)
    trace_path = os.fspath(trace) if isinstance(trace, (str, os.PathLike)) else ""
    trace_object = trace if isinstance(trace, CarbonTrace) else None
    return _joule._carbon_signal(
        intensity, trace_path, trace_object, zone or "", provider or "", country or "", devices
    )


def country_intensity(code: Optional[str] = None) -> dict[str, Any]:
    """The yearly average carbon intensity of a country: ``{iso3, name, year, intensity_g_per_kwh, how,
    description}``. code: ISO 3166-1 alpha-3 or alpha-2, case-insensitive; None or ``'auto'`` (as the
    command line's ``--country auto``) infers the country from TZ (or /etc/localtime), then from LC_ALL/LANG. NotFoundError lists close matches for an unknown code, or says
    what was looked at when the country cannot be inferred."""
    return _joule._country_intensity(code or "")


def countries() -> list[dict[str, Any]]:
    """Every country of the shipped table (data/carbon/country_intensity.csv): iso3, name, year,
    intensity_g_per_kwh."""
    return _joule._countries()


@dataclass
class CarbonMeasurement:
    """A carbon window: its energy always; its carbon if the signal had every bucket's intensity."""

    measurement: Measurement
    report: Optional[dict[str, Any]]
    _error: Optional[tuple[str, str]] = None

    @property
    def ok(self) -> bool:
        """True if the carbon is known."""
        return self.report is not None

    @property
    def energy_j(self) -> float:
        """Energy of the window, J (GPU + CPU + DRAM)."""
        return self.measurement.total_energy_j

    @property
    def carbon_g(self) -> float:
        """gCO2e of the window. Raises the signal's error (e.g. NotFoundError "no carbon intensity for …")
        if it could not give every bucket's intensity."""
        if self.report is None:
            assert self._error is not None
            _joule._raise_error(*self._error)
        return float(self.report["carbon_g"])  # type: ignore[index]

    @property
    def average_intensity_g_per_kwh(self) -> float:
        """carbon_g / energy in kWh; raises as carbon_g."""
        self.carbon_g  # noqa: B018 (raises the signal's error)
        return float(self.report["average_intensity_g_per_kwh"])  # type: ignore[index]


class CarbonMonitor:
    """Energy windows with their carbon: each window's energy is split into buckets (bucket_s, default the
    signal's period) and each bucket is weighted by the signal's intensity for it (Zeus's
    CarbonEmissionMonitor). On a virtual clock call ``checkpoint()`` whenever the power changes (every step is
    simplest) so the split stays exact; on a real clock a thread checkpoints at bucket boundaries.

        carbon = joule.CarbonMonitor(monitor, joule.carbon_signal(country="auto"))
        carbon.begin_window("train")
        ...
        m = carbon.end_window("train")      # m.measurement (energy), m.carbon_g, m.report["buckets"]
    """

    def __init__(
        self,
        monitor: Monitor,
        signal: Optional[CarbonSignal] = None,
        *,
        bucket_s: Optional[int] = None,
        background_checkpoints: bool = True,
    ) -> None:
        if signal is None:
            signal = carbon_signal(country="auto", devices=monitor.devices)
        self.monitor = monitor
        self.signal = signal
        bucket = signal.period_s if bucket_s is None else integer("CarbonMonitor", "bucket_s", bucket_s)
        self._carbon = _joule._CarbonMonitor(
            monitor, signal, int(bucket), flag("CarbonMonitor", "background_checkpoints", background_checkpoints)
        )

    def begin_window(self, name: str) -> None:
        """Opens a window (StateError if the name is open)."""
        self._carbon.begin_window(name)

    def end_window(self, name: str) -> CarbonMeasurement:
        """Closes a window: its energy and carbon (NotFoundError if the name is not open)."""
        measurement, report, code, message = self._carbon.end_window(name)
        return CarbonMeasurement(measurement, report, None if code is None else (code, message))

    def cancel_window(self, name: str) -> None:
        self._carbon.cancel_window(name)

    def checkpoint(self) -> None:
        """Attributes the energy since the last checkpoint to the open windows' buckets, now."""
        self._carbon.checkpoint()

    def __repr__(self) -> str:
        return f"<joule.CarbonMonitor {self.signal.describe()}>"


class PriceMonitor:
    """Energy windows with their electricity cost under an hourly tariff (Zeus's EnergyCostMonitor):
    ``end_window`` returns ``{source, energy_j, cost_usd, gpu_cost_usd, buckets}``."""

    def __init__(
        self,
        monitor: Monitor,
        tariff: HourlyTariff,
        *,
        bucket_s: int = 3600,
        background_checkpoints: bool = True,
    ) -> None:
        self.monitor = monitor
        self.tariff = tariff
        self._price = _joule._PriceMonitor(
            monitor,
            tariff,
            integer("PriceMonitor", "bucket_s", bucket_s),
            flag("PriceMonitor", "background_checkpoints", background_checkpoints),
        )

    def begin_window(self, name: str) -> None:
        self._price.begin_window(name)

    def end_window(self, name: str) -> dict[str, Any]:
        return self._price.end_window(name)

    def cancel_window(self, name: str) -> None:
        self._price.cancel_window(name)

    def checkpoint(self) -> None:
        self._price.checkpoint()


class ChaseOptimizer(_NativeOptimizer):
    """Chase (carbon-aware power limits) as a training-loop callback: profiles the GPU power limits once, as
    :class:`joule.PowerLimitOptimizer` does, then every ``interval_s`` of the devices' clock forecasts the grid's
    carbon intensity and sets the limit that minimises ``eta·(I/I_max)·E + (1 − eta)·max_power·T`` over the
    profiled per-step frontier.

    monitor: a joule.Monitor over the GPUs to control (identical GPUs). signal: a :class:`CarbonSignal` on the
    same clock; None: ``carbon_signal(country=country or 'auto', devices=monitor.devices)``.
    eta, max_intensity_g_per_kwh, interval_s, max_power_w (0: largest profiled limit × GPUs × ranks): Chase's
    cost. forecaster: ``'ridge'``, ``'svr'`` or ``'last'``, fitted on training_samples periods of the signal's
    history before the first decision. monitor_only: decide without setting limits.
    wait_steps, warmup_steps, profile_steps, step_w, aggregator, profile_dir, job_key, restore_to, steady_state,
    restore_on_signals: the profile, as PowerLimitOptimizer's. The GPUs get restore_to back on close(),
    ``with`` exit (also on an exception), destruction, process exit and SIGINT/SIGTERM/SIGHUP.
    """

    def __init__(
        self,
        monitor: Monitor,
        signal: Optional[CarbonSignal] = None,
        *,
        country: Optional[str] = None,
        eta: float = 0.5,
        max_intensity_g_per_kwh: float = 750.0,
        interval_s: float = 1800.0,
        max_power_w: float = 0.0,
        forecaster: str = "ridge",
        training_samples: int = 48,
        monitor_only: bool = False,
        wait_steps: int = 1,
        warmup_steps: int = 10,
        profile_steps: int = 40,
        step_w: float = 25.0,
        aggregator: Union[str, None, _joule.RankAggregator] = AUTO,
        profile_dir: Optional[str] = None,
        job_key: Optional[str] = None,
        restore_to: str = "default",
        restore_on_signals: bool = True,
        steady_state: Union[str, dict, None] = "auto",
    ) -> None:
        if signal is None:
            signal = carbon_signal(country=country or "auto", devices=monitor.devices)
        elif country is not None:
            _joule._raise_error("invalid-argument", "give either signal or country, not both")
        aggregator = _resolve_aggregator("ChaseOptimizer", aggregator)
        self.monitor = monitor
        self.signal = signal
        self.aggregator: Optional[_joule.RankAggregator] = aggregator
        call = "ChaseOptimizer"
        # Chase's settings and the profile's, as the C++ options struct: each type is checked here, where its
        # name is known (the profile picks with ZeusCost(eta) until the first decision).
        options = _joule._ChaseOptions()
        options.eta = number(call, "eta", eta)
        options.max_intensity_g_per_kwh = number(call, "max_intensity_g_per_kwh", max_intensity_g_per_kwh)
        options.interval_s = number(call, "interval_s", interval_s)
        options.max_power_w = number(call, "max_power_w", max_power_w)
        options.forecaster = text(call, "forecaster", forecaster)
        options.training_samples = integer(call, "training_samples", training_samples)
        options.monitor_only = flag(call, "monitor_only", monitor_only)
        options.profile = _profile_options(
            call,
            None,
            wait_steps=wait_steps,
            warmup_steps=warmup_steps,
            profile_steps=profile_steps,
            step_w=step_w,
            profile_dir=profile_dir,
            job_key=job_key,
            restore_to=restore_to,
            restore_on_signals=restore_on_signals,
            steady_state=steady_state,
        )
        self._optimizer = _joule._ChaseOptimizer(monitor, signal, options, aggregator)

    @property
    def candidates_w(self) -> list[float]:
        return self._optimizer.candidates_w

    @property
    def current_power_limit_w(self) -> float:
        """The limit in force (the candidate being profiled, then Chase's latest choice), W."""
        return self._optimizer.current_power_limit_w

    @property
    def frontier(self) -> Frontier[float]:
        """The profiled per-step frontier (knob: power limit, W); empty until the profile is done."""
        return Frontier(self._optimizer.frontier)

    @property
    def decisions(self) -> list[dict[str, float]]:
        """Every decision: time_unix_s, previous_g_per_kwh, forecast_g_per_kwh, effective_eta, power_limit_w."""
        return self._optimizer.decisions

    @property
    def profile_measurements(self) -> list[dict[str, float]]:
        return self._optimizer.profile_measurements

    @property
    def max_power_w(self) -> float:
        return self._optimizer.max_power_w

    @property
    def forecaster(self) -> str:
        """The forecaster in use ('last' after a fallback); '' before the first decision."""
        return self._optimizer.forecaster

    @property
    def next_decision_unix_s(self) -> Optional[float]:
        return self._optimizer.next_decision_unix_s

    @property
    def constraints_w(self) -> dict[str, float]:
        return self._optimizer.constraints_w

    def __repr__(self) -> str:
        return (
            f"<joule.ChaseOptimizer state={self.state} current={self.current_power_limit_w} W "
            f"decisions={len(self.decisions)} signal={self.signal.describe()}>"
        )
