# SPDX-License-Identifier: Apache-2.0
"""joule: measure and cut the GPU energy of deep-learning training (Zeus, Perseus, Chase) from Python.

The core is C++ (the module ``joule._joule``); this package gives it Pythonic names. Units are in the names:
``_s`` seconds, ``_j`` joules, ``_w`` watts, ``_mhz`` megahertz.

- :func:`devices`, :class:`DeviceSet`, :class:`Gpu`, :class:`Cpu`: what there is to measure (set
  ``JOULE_SIM=v100:imagenet`` or ``devices(sim=...)`` to simulate GPUs).
- :class:`Monitor` and :class:`Measurement`: energy and time of named windows (context manager, decorator).
- :class:`PowerSampler`: power timelines sampled on a C++ thread.
- :class:`PowerLimitOptimizer`: Zeus's just-in-time power-limit optimizer as a training-loop callback.
- Carbon: :func:`carbon_signal` (a constant, a country's yearly average, a :class:`CarbonTrace`, a live
  provider), :func:`country_intensity`, :class:`CarbonMonitor` and :class:`PriceMonitor` (windows with their
  gCO2e or cost), :class:`ChaseOptimizer` (Chase's carbon-aware power limits as a training-loop callback).
- :class:`BatchSizeOptimizer`: the client of ``joule serve``'s batch-size optimizer.
- :class:`PipelineFrequencyOptimizer`: Perseus's per-instruction GPU frequencies for pipeline-parallel
  training (with a server, or server-less from a profile or plan); :class:`PipelineStageDevice`: one
  pipeline stage as a simulated GPU; :class:`SettingsGuard`: the restore contract for settings made from
  Python.
- :class:`Frontier` and the policies :class:`ZeusCost`, :class:`CarbonCost`, :class:`Deadline`,
  :class:`MaxSlowdown`, :class:`MinEnergy`, :class:`MinTime`.
- :func:`simulate`: Zeus's trace-driven simulator.
- LLM serving: :class:`RequestEnergyLedger` (each iteration's energy split among its requests, per-request
  :class:`RequestEnergy`), :class:`LlmDevice` (a model replica on simulated serving GPUs; :func:`llm_gpus`,
  :func:`llm_models`), :class:`SloClockController` (the least-energy GPU clock meeting a TTFT/TPOT SLO) and
  :class:`InferenceMetrics` (the replica's Prometheus metrics, rendered for ``/metrics``).
- :class:`Error` and its subclasses: every C++ error, with the same message.
- ``joule.torch`` (sync callback, torch.distributed aggregator) and ``joule.huggingface`` (Trainer
  callback) are imported on demand.
"""

from __future__ import annotations

from typing import Any

from ._errors import (
    DeviceError,
    Error,
    InternalError,
    InvalidArgumentError,
    IoError,
    LibraryMissingError,
    NotFoundError,
    NotSupportedError,
    OutOfRangeError,
    ParseError,
    PermissionDeniedError,
    StateError,
)
from . import _args, _joule

# Argument errors name the argument ("ZeusCost(eta=...): expected a number, got str 'x'"), not pybind11's list
# of signatures: wraps the native functions before they are imported below.
_args.install(_joule)

from ._joule import (
    CarbonCost,
    CarbonSignal,
    CarbonTrace,
    Cpu,
    Deadline,
    DeviceSet,
    Gpu,
    HourlyTariff,
    InferenceMetrics,
    LlmDevice,
    MaxSlowdown,
    Measurement,
    MinEnergy,
    MinTime,
    PipelineStageDevice,
    RankAggregator,
    RequestEnergy,
    RequestEnergyLedger,
    SettingsGuard,
    SingleProcessAggregator,
    SloClockController,
    ZeusCost,
    describe,
    llm_gpus,
    llm_models,
    metric_labels,
    paper_workloads,
    power_limit_candidates_w,
    set_metric_labels,
    simulate,
    trace_gpus,
    validate_policy,
)
from .batch_size import BatchSizeClient, BatchSizeOptimizer, TrainFailError, job_spec
from .callbacks import Callback, CallbackSet
from .carbon import (
    CarbonMeasurement,
    CarbonMonitor,
    ChaseOptimizer,
    PriceMonitor,
    carbon_signal,
    countries,
    country_intensity,
)
from .fleet import FleetMonitor
from .frontier import Frontier, FrontierPoint, Policy
from .monitor import Monitor, PowerSampler, Window, default_devices, devices
from .pipeline import PipelineFrequencyOptimizer, PipelineServerError
from .power_limit import PowerLimitOptimizer

__version__ = "0.1.0"


def sim_models() -> list[dict[str, Any]]:
    """The simulated GPU models (key, name, power-limit range in W, has_energy_counter, description)."""
    return _joule._sim_models()


__all__ = [
    "BatchSizeClient",
    "BatchSizeOptimizer",
    "Callback",
    "CallbackSet",
    "CarbonCost",
    "CarbonMeasurement",
    "CarbonMonitor",
    "CarbonSignal",
    "CarbonTrace",
    "ChaseOptimizer",
    "Cpu",
    "Deadline",
    "DeviceError",
    "DeviceSet",
    "Error",
    "FleetMonitor",
    "Frontier",
    "FrontierPoint",
    "Gpu",
    "HourlyTariff",
    "InferenceMetrics",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "LibraryMissingError",
    "LlmDevice",
    "MaxSlowdown",
    "Measurement",
    "MinEnergy",
    "MinTime",
    "Monitor",
    "NotFoundError",
    "NotSupportedError",
    "OutOfRangeError",
    "ParseError",
    "PermissionDeniedError",
    "PipelineFrequencyOptimizer",
    "PipelineServerError",
    "PipelineStageDevice",
    "Policy",
    "PowerLimitOptimizer",
    "PowerSampler",
    "PriceMonitor",
    "RankAggregator",
    "RequestEnergy",
    "RequestEnergyLedger",
    "SettingsGuard",
    "SingleProcessAggregator",
    "SloClockController",
    "StateError",
    "TrainFailError",
    "Window",
    "ZeusCost",
    "carbon_signal",
    "countries",
    "country_intensity",
    "default_devices",
    "describe",
    "devices",
    "job_spec",
    "llm_gpus",
    "llm_models",
    "metric_labels",
    "paper_workloads",
    "power_limit_candidates_w",
    "set_metric_labels",
    "sim_models",
    "simulate",
    "trace_gpus",
    "validate_policy",
]
