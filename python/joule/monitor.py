# SPDX-License-Identifier: Apache-2.0
"""Devices, energy windows (:class:`Monitor`) and power timelines (:class:`PowerSampler`)."""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from typing import Any, Callable, Optional, Sequence, TypeVar, Union

from . import _joule
from ._args import indices, show
from ._errors import NotFoundError
from ._joule import DeviceSet, Measurement

SyncArgument = Union[None, str, Callable[[], None]]
F = TypeVar("F", bound=Callable[..., Any])

_default_lock = threading.Lock()
_default_devices: Optional[DeviceSet] = None


def devices(
    sim: Optional[str] = None,
    *,
    virtual_clock: bool = False,
    gpus: bool = True,
    cpus: bool = True,
    powercap_root: Optional[str] = None,
    nvml_library: Optional[str] = None,
    rocm_library: Optional[str] = None,
    daemon_socket: Optional[str] = None,
    amd_smi_library: Optional[str] = None,
    level_zero_library: Optional[str] = None,
    jetson_sysfs_root: Optional[str] = None,
) -> DeviceSet:
    """Discovers the GPUs and CPUs (a new DeviceSet on each call).

    The JOULE_* environment variables are read first (JOULE_SIM, JOULE_DAEMON_SOCKET, JOULE_NVML_LIBRARY,
    JOULE_ROCM_SMI_LIBRARY, JOULE_POWERCAP_ROOT, …); the arguments override them.

    sim: simulate GPUs instead of loading a vendor library: ``'[COUNTx]GPU[:WORKLOAD[:BATCH_SIZE]]'``, e.g.
        ``'v100:imagenet'`` or ``'4xa40'`` (``joule.sim_models()`` lists the GPUs).
    virtual_clock: with sim, run the GPUs on a virtual clock that moves only through
        ``DeviceSet.advance(seconds)`` or ``DeviceSet.run_iterations(n)`` (deterministic simulation).
    gpus / cpus: look for GPUs / CPU energy counters (RAPL) at all.
    powercap_root: the RAPL sysfs root (default /sys/class/powercap).
    nvml_library / rocm_library / amd_smi_library / level_zero_library: the vendor library to load (a path or
        soname), as JOULE_NVML_LIBRARY, JOULE_ROCM_SMI_LIBRARY, JOULE_AMD_SMI_LIBRARY and
        JOULE_LEVEL_ZERO_LIBRARY (docs/devices.md).
    jetson_sysfs_root: the folder holding a Jetson board's ``sys/`` and ``proc/`` (a container's bind-mount),
        as JOULE_JETSON_SYSFS_ROOT; given, the board is looked for there even where ``/`` is not a Jetson.
    daemon_socket: take the GPUs, and the CPU energy counters (root-only since Linux 5.10), from the
        ``joule daemon`` listening there (backend ``'daemon'``); CPUs it does not serve are looked for here.

    Backends that find nothing are not errors (see ``DeviceSet.reports``), except the daemon when it was asked
    for (``daemon_socket`` or JOULE_DAEMON_SOCKET): no GPU from it raises NotFoundError saying why. A malformed
    sim spec or CUDA_VISIBLE_DEVICES raises InvalidArgumentError.
    """
    found = _joule._discover(
        sim=sim,
        virtual_clock=virtual_clock,
        gpus=gpus,
        cpus=cpus,
        powercap_root=powercap_root,
        nvml_library=nvml_library,
        rocm_library=rocm_library,
        daemon_socket=daemon_socket,
        amd_smi_library=amd_smi_library,
        level_zero_library=level_zero_library,
        jetson_sysfs_root=jetson_sysfs_root,
    )
    # The daemon's GPUs asked for by name must be there: without them, training would run unmeasured and
    # uncontrolled, and nobody would notice (the CLI's --daemon fails the same way).
    asked = daemon_socket if daemon_socket is not None else os.environ.get("JOULE_DAEMON_SOCKET")
    daemon_cpus = any(cpu.backend == "daemon" for cpu in found.cpus)  # a daemon serving only CPU energy will do
    if gpus and asked and sim is None and not found.gpus and not daemon_cpus:
        source = "daemon_socket" if daemon_socket is not None else "JOULE_DAEMON_SOCKET"
        raise NotFoundError(f"{source}={asked}: {found.why_no_gpus()}")
    return found


def default_devices() -> DeviceSet:
    """The process-wide DeviceSet that Monitor and PowerSampler use when given none: discovered once, from
    the environment (set JOULE_SIM=v100:imagenet to simulate a GPU)."""
    global _default_devices
    with _default_lock:
        if _default_devices is None:
            _default_devices = devices()
        return _default_devices


@contextlib.contextmanager
def _naming_indices(call: str) -> Any:
    """An unknown GPU or CPU index (C++: "unknown GPU index 3: …") names the argument it came from."""
    try:
        yield
    except NotFoundError as error:
        for keyword, words in (("gpus", "unknown GPU index"), ("cpus", "unknown CPU index")):
            if str(error).startswith(words):
                raise NotFoundError(f"{call}({keyword}=...): {error}") from None
        raise


def _device_set(call: str, devices: Optional[DeviceSet]) -> DeviceSet:
    if devices is None:
        return default_devices()
    if not isinstance(devices, DeviceSet):
        raise TypeError(f"{call}(devices=...): expected a joule.DeviceSet (from joule.devices()), got {show(devices)}")
    return devices


def _resolve_sync(sync: SyncArgument, call: str = "Monitor") -> Optional[Callable[[], None]]:
    if sync is None or callable(sync):
        return sync
    if sync == "torch":
        from .torch import sync_function

        return sync_function()
    _joule._raise_error("invalid-argument", f"{call}(sync=...): expected None, 'torch' or a callable, got {show(sync)}")
    return None


class Window(contextlib.ContextDecorator):
    """A measurement window used as a context manager or a decorator. ``measurement`` holds what the last
    use measured; ``on_end`` (if given) is called with each Measurement. If the body raises, the window is
    cancelled and the exception propagates."""

    def __init__(
        self,
        monitor: "Monitor",
        name: str,
        sync: bool = True,
        on_end: Optional[Callable[[Measurement], None]] = None,
    ) -> None:
        self.monitor = monitor
        self.name = name
        self.sync = sync
        self.on_end = on_end
        self.measurement: Optional[Measurement] = None

    def __enter__(self) -> "Window":
        self.monitor.begin_window(self.name, self.sync)
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> bool:
        if exc_type is not None:
            if self.monitor.is_open(self.name):
                self.monitor.cancel_window(self.name)
            return False
        self.measurement = self.monitor.end_window(self.name, self.sync)
        if self.on_end is not None:
            self.on_end(self.measurement)
        return False


class Monitor(_joule._Monitor):
    """Measures time and energy of named code regions ("windows") on GPUs and CPUs (Zeus's ZeusMonitor).

    gpus: framework indices of the GPUs to measure, a list or one int (None: all of ``devices``); cpus: CPU
    package indices, likewise (None: all; [] to measure none). sync: called before every reading of a window with sync=True so that
    queued GPU work is counted: a callable, ``'torch'`` (torch.cuda.synchronize when CUDA exists; see
    joule.torch) or None. devices: a DeviceSet (default: joule.default_devices()). approx_instant_energy:
    estimate a counter GPU's energy as instantaneous power × time when its counter did not move during a
    window (very short windows). polling_period_s: power polling period for GPUs without an energy counter.

    Windows may overlap and nest; names are unique while open::

        monitor = joule.Monitor()
        monitor.begin_window("epoch")
        train_one_epoch()
        m = monitor.end_window("epoch")     # Measurement: m.time_s, m.gpu_energy_j[0], ...

        with monitor.window("eval") as w:
            evaluate()
        print(w.measurement.total_energy_j)

        @monitor.window("step")
        def step(batch): ...
    """

    def __init__(
        self,
        gpus: Union[None, int, Sequence[int]] = None,
        cpus: Union[None, int, Sequence[int]] = None,
        sync: SyncArgument = None,
        *,
        devices: Optional[DeviceSet] = None,
        approx_instant_energy: bool = False,
        polling_period_s: float = 0.1,
    ) -> None:
        gpu_list = indices("Monitor", "gpus", gpus)
        cpu_list = indices("Monitor", "cpus", cpus, "CPU package indices")
        device_set = _device_set("Monitor", devices)
        # GPUs asked for by index must exist: the C++ side raises NotFoundError naming the index and why.
        with _naming_indices("Monitor"):
            super().__init__(
                device_set,
                gpu_list,
                cpu_list,
                _resolve_sync(sync, "Monitor"),
                approx_instant_energy,
                polling_period_s,
            )
        if gpus is None and not self.gpu_indices:
            # Nothing asked for and nothing found: the training still runs, but say plainly that its energy is
            # not measured, and how to get a simulated GPU (as `joule measure` does).
            warnings.warn(
                f"joule.Monitor: nothing will be measured but time: {device_set.why_no_gpus()}. For a simulated "
                "GPU, set JOULE_SIM=v100 or pass devices=joule.devices(sim='v100')",
                RuntimeWarning,
                stacklevel=2,
            )

    def window(
        self, name: str, sync: bool = True, on_end: Optional[Callable[[Measurement], None]] = None
    ) -> Window:
        """A window called `name` as a context manager or decorator (see :class:`Window`)."""
        return Window(self, name, sync, on_end)

    def __repr__(self) -> str:
        return f"<joule.Monitor gpus={self.gpu_indices} cpus={self.cpu_indices} open={self.open_windows()}>"


class PowerSampler(_joule.PowerSampler):
    """Polls GPU power every ``period_s`` on a C++ thread (no GIL), keeping a change-only timeline per GPU.

    gpus: framework indices, a list or one int (None: all); period_s: polling period, s; max_points: bound on stored points
    per GPU (0: unbounded); devices: a DeviceSet (default: joule.default_devices()).

    Use start()/stop() or ``with sampler:``; ``timeline(gpu)`` gives [(time_s, power_w)] and
    ``energy(start_s, end_s)`` {gpu: J} on the devices' clock (``now_s()``)."""

    def __init__(
        self,
        gpus: Union[None, int, Sequence[int]] = None,
        period_s: float = 0.1,
        max_points: int = 0,
        *,
        devices: Optional[DeviceSet] = None,
    ) -> None:
        gpu_list = indices("PowerSampler", "gpus", gpus)
        with _naming_indices("PowerSampler"):
            super().__init__(_device_set("PowerSampler", devices), gpu_list, period_s, max_points)

    def __repr__(self) -> str:
        return f"<joule.PowerSampler gpus={self.gpu_indices} period_s={self.period_s} running={self.running}>"
