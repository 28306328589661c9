# SPDX-License-Identifier: Apache-2.0
"""Perseus's pipeline frequency optimizer as a training-loop callback (Zeus's
``zeus.optimizer.pipeline_frequency.PipelineFrequencyOptimizer``, same constructor and hooks).

Every rank of a pipeline-parallel job runs one. Around every forward and backward the training loop calls
``on_instruction_begin(name)`` / ``on_instruction_end(name)``; around every iteration ``on_step_begin()`` /
``on_step_end()``. The optimizer locks the GPU's SM clock to the frequency its schedule plans for each
instruction and measures every instruction's and iteration's time and energy.

Schedules come from a server (``joule serve``'s pipeline-frequency routes, or Zeus's server: the wire
protocol is Zeus 0.16's with joule extensions its models ignore) that first sends profiling schedules and
then the plan, or, server-less, from a profile (the plan is computed locally) or a plan file (``joule plan
--plan-out``). See docs/perseus-live.md.

The stage runtime is C++ (:class:`joule._joule.StageFrequencyController`, joule::plan::FrequencyController
in its asynchronous mode): it checks every hook against the schedule and locks the clocks off the training
thread's critical path, on its own thread, through a SettingsGuard, so the lock is undone on close(), at exit
and on SIGINT/SIGTERM/SIGHUP like every joule controller's. The hooks only post the wanted clock; the next
instruction's clock is posted as soon as the previous instruction ends, so it usually lands while the stage
waits for its input. This module keeps the Zeus wire client, the measurements and the training-loop hooks.
"""

from __future__ import annotations

import collections
import json
import random
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings
from typing import Any, Callable, Optional, Sequence, Union

from . import _joule
from ._errors import Error, InvalidArgumentError, IoError, StateError
from .callbacks import Callback

AUTO = "auto"
HISTORY_LENGTH = 1024  # iterations kept in PipelineFrequencyOptimizer.history


class PipelineServerError(Error):
    """The pipeline frequency server answered with an error status. ``status`` is the HTTP status,
    ``detail`` the body's ``detail`` (or the body's text), ``url`` the request's URL."""

    code = "server"

    def __init__(self, method: str, url: str, status: int, detail: Any) -> None:
        self.method = method
        self.url = url
        self.status = status
        self.detail = detail
        super().__init__(f"pipeline frequency server: {method} {url} failed with HTTP {status}: {detail}")


PipelineServerError.__module__ = "joule"


class Schedule:
    """One round of a schedule for this rank: ``frequencies`` is one iteration's ordered
    ``[(instruction, MHz)]`` (MHz 0: leave the clock as it is), to be run for ``iterations`` iterations
    (None: until further notice). ``phase`` is 'warmup', 'profiling' or 'planned'; ``predicted`` the plan's
    ``{iteration_time_s, iteration_energy_j, max_clock_time_s, max_clock_energy_j}`` when known."""

    def __init__(
        self,
        frequencies: Sequence[tuple[str, int]],
        *,
        round: int = 0,
        phase: str = "planned",
        iterations: Optional[int] = None,
        predicted: Optional[dict[str, Any]] = None,
    ) -> None:
        self.frequencies: list[tuple[str, int]] = [(str(name), int(mhz)) for name, mhz in frequencies]
        self.round = round
        self.phase = phase
        self.iterations = iterations
        self.predicted = predicted

    @classmethod
    def from_json(cls, body: Any, rank: int, source: str) -> "Schedule":
        """Parses a ``GET /schedule`` body; InvalidArgumentError naming `source` if it is malformed (the
        checks are C++'s: joule::plan::RoundSchedule::from_json)."""
        frequencies, round_, phase, iterations, has_predicted = _joule._pipeline_round_schedule(
            json.dumps(body), rank, source)
        predicted = body["predicted"] if has_predicted else None
        return cls(frequencies, round=round_, phase=phase, iterations=iterations, predicted=predicted)

    def __repr__(self) -> str:
        return (
            f"<joule.pipeline.Schedule round={self.round} phase={self.phase} iterations={self.iterations} "
            f"instructions={len(self.frequencies)}>"
        )


class PipelineServerClient:
    """The HTTP client of a pipeline frequency server (standard library only). Every method raises
    :class:`PipelineServerError` for an error status and IoError when the server cannot be reached.

    A server that restarts, is stopping (503) or is briefly unreachable does not end training: every call is
    retried with exponential backoff (``backoff_s`` doubling up to ``max_backoff_s``, with jitter) for up to
    ``retry_for_s`` seconds. Requests that change state carry an ``X-Request-Id`` kept across their retries,
    so that a request the server applied before its answer was lost is answered again, not applied twice.
    ``GET /schedule`` waits as long as the other ranks need: the server's 409 after its own wait is asked
    again, up to ``schedule_timeout_s`` in all."""

    #: statuses worth asking again: the server is restarting, stopping, overloaded or rate-limiting.
    RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 60.0,
        schedule_timeout_s: float = 3600.0,
        retry_for_s: float = 600.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 15.0,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            url = "http://" + url
        for name, value in (
            ("timeout_s", timeout_s),
            ("schedule_timeout_s", schedule_timeout_s),
            ("retry_for_s", retry_for_s),
            ("backoff_s", backoff_s),
            ("max_backoff_s", max_backoff_s),
        ):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 7 * 86400:
                raise InvalidArgumentError(
                    f"PipelineServerClient({name}=...): expected seconds from 0 to 604800, got {value!r}"
                )
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.schedule_timeout_s = schedule_timeout_s
        self.retry_for_s = retry_for_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retries = 0  # requests sent again so far (for tests and logs)

    def _send(
        self, method: str, path: str, body: Any, timeout_s: float, request_id: Optional[str]
    ) -> tuple[Any, Optional[float]]:
        """One attempt. Returns (decoded answer, None); raises PipelineServerError or IoError. The float is
        never set here: see request()."""
        url = self.url + path
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if request_id is not None:
            headers["X-Request-Id"] = request_id
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                text = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            raw = error.read().decode("utf-8", "replace")
            try:
                parsed = json.loads(raw)
                detail = parsed.get("detail", parsed) if isinstance(parsed, dict) else parsed
            except ValueError:
                detail = raw.strip() or error.reason
            failure = PipelineServerError(method, url, error.code, detail)
            retry_after = error.headers.get("Retry-After") if error.headers else None
            try:
                failure.retry_after_s = float(retry_after) if retry_after is not None else None
            except ValueError:
                failure.retry_after_s = None
            raise failure from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise IoError(f"cannot reach the pipeline frequency server: {method} {url}: {reason}") from None
        if not text.strip():
            return None, None
        try:
            return json.loads(text), None
        except ValueError:
            raise IoError(f"pipeline frequency server: {method} {url} answered non-JSON: {text[:200]!r}") from None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        timeout_s: Optional[float] = None,
        request_id: Optional[str] = None,
        retry_statuses: frozenset[int] = RETRY_STATUSES,
        retry_for_s: Optional[float] = None,
    ) -> Any:
        """Sends a request with a JSON body (if not None) and returns the decoded JSON answer, asking again
        (same ``request_id``) while the server cannot be reached or answers one of ``retry_statuses``, for up to
        ``retry_for_s`` (default: the client's)."""
        deadline = time.monotonic() + (self.retry_for_s if retry_for_s is None else retry_for_s)
        delay = self.backoff_s
        while True:
            try:
                return self._send(method, path, body, timeout_s or self.timeout_s, request_id)[0]
            except PipelineServerError as error:
                wait = getattr(error, "retry_after_s", None)
                # A 409 is asked again only when the server says so (a wait that ended before the others).
                again = error.status in retry_statuses and (error.status != 409 or wait is not None)
                if not again or time.monotonic() >= deadline:
                    raise
            except IoError:
                if time.monotonic() >= deadline:
                    raise
                wait = None
            if wait is None:
                wait = delay * random.uniform(0.5, 1.5)
                delay = min(self.max_backoff_s, max(delay, 0.05) * 2)
            time.sleep(max(0.0, min(wait, deadline - time.monotonic())))
            self.retries += 1

    @staticmethod
    def _request_id() -> str:
        return uuid.uuid4().hex

    def register_job(self, job: dict[str, Any]) -> str:
        """``POST /register_job``: returns the job id."""
        job_id = self.request("POST", "/register_job", job, request_id=self._request_id())
        if not isinstance(job_id, str) or not job_id:
            raise IoError(f"pipeline frequency server: /register_job answered {job_id!r}, not a job id")
        return job_id

    def register_rank(self, job_id: str, rank_info: dict[str, Any]) -> None:
        """``POST /register_rank/{job_id}``."""
        self.request(
            "POST", f"/register_rank/{urllib.parse.quote(job_id, safe='')}", rank_info, request_id=self._request_id()
        )

    def schedule(self, job_id: str, rank: int) -> Any:
        """``GET /schedule/{job_id}?rank=K``: blocks until the next round's schedule is ready (the other ranks
        reported, or the plan is made), up to ``schedule_timeout_s``."""
        path = f"/schedule/{urllib.parse.quote(job_id, safe='')}?rank={rank}"
        # 409 with Retry-After: the server's own wait ended before the other ranks were done; keep waiting.
        return self.request(
            "GET",
            path,
            timeout_s=self.schedule_timeout_s,
            retry_statuses=self.RETRY_STATUSES | {409},
            retry_for_s=max(self.retry_for_s, self.schedule_timeout_s),
        )

    def result(self, job_id: str, result: dict[str, Any]) -> None:
        """``POST /result/{job_id}`` (give ``result['round']``: a result repeated after its round is refused,
        not applied to the next)."""
        self.request(
            "POST", f"/result/{urllib.parse.quote(job_id, safe='')}", result, request_id=self._request_id()
        )


def _torch_sync(device_id: int) -> Optional[Callable[[], None]]:
    """torch.cuda.synchronize(device_id) if the program imported torch and CUDA is available (torch is
    never imported here); None otherwise."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    from .torch import sync_function

    return sync_function([device_id] if device_id < torch.cuda.device_count() else None)


def _broadcast_job_id(job_id: Optional[str], world_size: int) -> str:
    """Rank 0's job id on every rank, as Zeus does: torch.distributed.broadcast_object_list."""
    torch = sys.modules.get("torch")
    distributed = getattr(torch, "distributed", None) if torch is not None else None
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        holder = [job_id]
        distributed.broadcast_object_list(holder, src=0)
        if not isinstance(holder[0], str):
            raise StateError("rank 0 did not broadcast a job id")
        return holder[0]
    if world_size == 1 and job_id is not None:
        return job_id
    raise StateError(
        f"world_size is {world_size}, so rank 0's job id must be broadcast: call "
        "torch.distributed.init_process_group() before creating the PipelineFrequencyOptimizer"
    )


class PipelineFrequencyOptimizer(Callback):
    """Runs each rank's GPU at the frequencies a pipeline frequency plan gives each forward and backward.

    The positional arguments are Zeus's: this process's global ``rank`` and its data-, pipeline- and
    tensor-parallel ranks, ``device_id`` (the GPU's index among the visible ones), the three degrees and
    ``world_size`` (= dp × pp × tp), ``server_url`` (None: server-less) and ``job_metadata`` (a string the
    server stores with the job).

    joule extensions (keyword-only):

    - ``gpu``: any joule Gpu (simulated, daemon-backed for unprivileged users, NVML, ROCm); default the
      ``device_id``-th GPU of :func:`joule.devices`.
    - ``stage_device``: a :class:`joule._joule.PipelineStageDevice`: its GPU, its virtual clock as
      ``time_fn`` and its energy counter as ``energy_fn``.
    - ``num_microbatches``: sent to the server (``register_job``); needed server-less with ``profile``.
    - ``time_fn``, ``energy_fn``: the time (s) and cumulative energy (J) sources; default
      ``time.monotonic`` and ``gpu.energy_j``, preceded by ``torch.cuda.synchronize`` when the program uses
      torch with CUDA (``sync_fn='auto'``; None: no sync; or any callable).
    - Server-less (``server_url=None``): ``profile`` (a profile CSV's path or text: the plan is computed
      here, the fastest one, or the cheapest for ``target_time_s`` or ``slowdown`` × the fastest time, with
      ``p_blocking_w`` and ``unit_time_s``) or ``plan`` (a plan file of ``joule plan --plan-out``; with
      ``profile`` too, the max-clock figures are evaluated).
    - ``restore_on_signals``: the guard also restores on SIGINT/SIGTERM/SIGHUP (default True).
    - ``timeout_s``, ``schedule_timeout_s``: HTTP timeouts (the schedule request blocks until every rank has
      reported, so it waits longer). ``retry_for_s``: how long a request is retried, with backoff, while the
      server restarts or is unreachable (:class:`PipelineServerClient`); results carry their round and every
      request that changes state an ``X-Request-Id``, so a retry is never applied twice.
    - ``steady_state``: with a server, how the warm-up waits for a thermal steady state before profiling (as
      :class:`PowerLimitOptimizer`'s): ``'auto'`` (default: ``'steady'`` on real GPUs, ``'off'`` on simulated
      ones), ``'off'`` (one warm-up round, as Zeus), ``'fixed'``, ``'steady'``, or a dict with ``mode`` and any
      of ``window_s``, ``temperature_band_c``, ``power_band_ratio``, ``max_wait_s``, ``fixed_warmup_s``. While
      the schedule's phase is 'warmup' the GPU is sampled once per iteration and every result reports
      ``thermally_steady``; the server repeats the warm-up until every rank is steady.

    After each iteration, ``history[-1]`` (the last 1024 iterations) holds its ``round``, ``phase``,
    ``iteration_time_s`` (this rank's own, to the end of its last instruction), ``step_time_s``,
    ``energy_j`` (the GPU's over the step), ``start_s`` and ``end_s``.

    Errors: a hook called out of order or an instruction other than the schedule's next one raises
    StateError naming what was expected and what was got (an unknown instruction name InvalidArgumentError);
    a schedule with a clock the GPU does not support raises OutOfRangeError when it arrives; a server error raises
    :class:`PipelineServerError` (status and detail); a clock lock that failed raises its device error at the
    next hook.
    """

    def __init__(
        self,
        rank: int,
        dp_rank: int,
        pp_rank: int,
        tp_rank: int,
        device_id: int,
        dp_degree: int,
        pp_degree: int,
        tp_degree: int,
        world_size: int,
        server_url: Optional[str],
        job_metadata: Optional[str] = None,
        *,
        gpu: Optional[_joule.Gpu] = None,
        stage_device: Optional[_joule.PipelineStageDevice] = None,
        num_microbatches: Optional[int] = None,
        profile: Optional[str] = None,
        plan: Optional[str] = None,
        card: Optional[str] = None,
        target_time_s: Optional[float] = None,
        slowdown: Optional[float] = None,
        p_blocking_w: float = 70.0,
        unit_time_s: float = 1e-3,
        schedule: str = "1f1b",
        time_fn: Optional[Callable[[], float]] = None,
        energy_fn: Optional[Callable[[], float]] = None,
        sync_fn: Union[str, None, Callable[[], None]] = AUTO,
        restore_on_signals: bool = True,
        timeout_s: float = 60.0,
        schedule_timeout_s: float = 3600.0,
        retry_for_s: float = 600.0,
        steady_state: Union[str, dict[str, Any], None] = AUTO,
    ) -> None:
        # InvalidArgumentError unless the degrees are ≥ 1, multiply to world_size, and every rank is in range.
        _joule._pipeline_check_topology(rank, dp_rank, pp_rank, tp_rank, dp_degree, pp_degree, tp_degree, world_size)
        if num_microbatches is not None and num_microbatches < 1:
            raise InvalidArgumentError(f"num_microbatches must be ≥ 1, got {num_microbatches}")
        self.rank, self.dp_rank, self.pp_rank, self.tp_rank = rank, dp_rank, pp_rank, tp_rank
        self.device_id = device_id
        self.dp_degree, self.pp_degree, self.tp_degree, self.world_size = dp_degree, pp_degree, tp_degree, world_size
        self.server_url = server_url
        self.job_metadata = job_metadata
        self.num_microbatches = num_microbatches

        own_clock = gpu is None and time_fn is None  # the devices' own clock times them
        found = self._use_devices(gpu, stage_device, time_fn, energy_fn, sync_fn)
        self._steady_warned = False
        self._steady = self._steady_state_detector(steady_state, own_clock, stage_device, found, time_fn)

        # The stage's clock controller (C++: plan::FrequencyController, asynchronous): it checks every hook
        # against the schedule and locks the clocks on its own thread through its SettingsGuard.
        self._controller = _joule.StageFrequencyController(
            self.gpu, [], label=self._who(), end_call="on_step_end()", restore_on_signals=restore_on_signals,
            owner="pipeline frequency optimizer")
        self._closed = False

        # The schedule source.
        self._client: Optional[PipelineServerClient] = None
        self._local: Optional[Schedule] = None
        self.local_plan: Optional[dict[str, Any]] = None
        self.job_id: Optional[str] = None
        if server_url is None:
            if card is not None:
                raise InvalidArgumentError(
                    "card= is for the form with a server (it profiles the job); server-less, profile= or plan= "
                    "already says every clock"
                )
            # The plan file's or the profile's plan (C++: joule::plan::plan_stages, which checks it fits the job).
            self.local_plan = _joule._pipeline_stage_plan(profile, plan, pp_degree, num_microbatches, schedule,
                                                          p_blocking_w, unit_time_s, target_time_s, slowdown)
            self.num_microbatches = self.local_plan["microbatches"]
            self._local = Schedule(self.local_plan["schedules"][pp_rank], predicted=self.local_plan["predicted"])
        else:
            if profile is not None or plan is not None:
                raise InvalidArgumentError("profile= and plan= are for the server-less form (server_url=None)")
            # A frontier card of this GPU (joule probe), checked against it here: the server cannot see the
            # GPUs. Rank 0 sends it with the job; the server then profiles a few clocks and predicts the rest.
            self._card: Optional[dict[str, Any]] = (
                json.loads(_joule._pipeline_read_card(card, self.gpu)) if card is not None else None
            )
            self._client = PipelineServerClient(
                server_url, timeout_s=timeout_s, schedule_timeout_s=schedule_timeout_s, retry_for_s=retry_for_s
            )
            self._register()

        # Per-round state.
        self._schedule: Optional[Schedule] = None
        self._iterations_left: Optional[int] = 0
        self._recorder = _joule.StageRoundRecorder()  # the round's result body (C++: plan::RoundRecorder)
        self.history: collections.deque[dict[str, Any]] = collections.deque(maxlen=HISTORY_LENGTH)
        # Per-iteration state.
        self._in_step = False
        self._begun: Optional[tuple[str, float, float]] = None
        self._step_start_s = 0.0
        self._step_start_j = 0.0
        self._last_end_s: Optional[float] = None
        self._last_end_j: Optional[float] = None

    # Setup ---------------------------------------------------------------------------------------------------
    def _use_devices(
        self,
        gpu: Optional[_joule.Gpu],
        stage_device: Optional[_joule.PipelineStageDevice],
        time_fn: Optional[Callable[[], float]],
        energy_fn: Optional[Callable[[], float]],
        sync_fn: Union[str, None, Callable[[], None]],
    ) -> Optional[_joule.DeviceSet]:
        """Sets the GPU and the time, energy and sync functions; returns the DeviceSet found (None if the GPU
        was given)."""
        if stage_device is not None:
            gpu = gpu or stage_device.gpu
            time_fn = time_fn or stage_device.now_s
            if sync_fn == AUTO:
                sync_fn = None
        found: Optional[_joule.DeviceSet] = None
        if gpu is None:
            from .monitor import devices

            found = devices(cpus=False)
            if self.device_id >= len(found.gpus):
                raise InvalidArgumentError(
                    f"device_id {self.device_id}, but there are {len(found.gpus)} GPUs: {found.why_no_gpus()}"
                )
            gpu = found.gpus[self.device_id]
        self.gpu: _joule.Gpu = gpu
        self._time_fn: Callable[[], float] = time_fn or time.monotonic
        self._energy_fn: Callable[[], float] = energy_fn or gpu.energy_j
        if sync_fn == AUTO:
            sync_fn = None if time_fn is not None else _torch_sync(self.device_id)
        elif isinstance(sync_fn, str):
            raise InvalidArgumentError(f"sync_fn must be 'auto', None or a callable (got {sync_fn!r})")
        self._sync: Optional[Callable[[], None]] = sync_fn
        self.available_frequencies_mhz: list[int] = sorted(gpu.supported_sm_clocks_mhz(), reverse=True)
        return found

    def _steady_state_detector(
        self,
        steady_state: Union[str, dict[str, Any], None],
        own_clock: bool,
        stage_device: Optional[_joule.PipelineStageDevice],
        found: Optional[_joule.DeviceSet],
        time_fn: Optional[Callable[[], float]],
    ) -> Optional[_joule.SteadyStateDetector]:
        """The thermal wait of the warm-up, timed like the measurements (only a server has a warm-up); None
        when it is off."""
        if self.server_url is None:
            _joule.SteadyStateDetector(self.gpu, steady_state)  # checks the argument all the same
            return None
        if own_clock and stage_device is not None:
            steady = _joule.SteadyStateDetector(stage_device, steady_state)
        elif own_clock and found is not None:
            steady = _joule.SteadyStateDetector(found, [self.gpu.index], steady_state)
        else:  # the caller's time function (None: the steady clock real GPUs run on)
            steady = _joule.SteadyStateDetector(self.gpu, steady_state, time_fn)
        return None if steady.mode == "off" else steady

    def _register(self) -> None:
        assert self._client is not None
        job_id: Optional[str] = None
        if self.rank == 0:
            job_id = self._client.register_job(
                {
                    "job_id": "",
                    "pp_degree": self.pp_degree,
                    "dp_degree": self.dp_degree,
                    "tp_degree": self.tp_degree,
                    "world_size": self.world_size,
                    "job_metadata": self.job_metadata,
                    "num_microbatches": self.num_microbatches,
                    **({"card": self._card} if self._card is not None else {}),
                }
            )
        self.job_id = _broadcast_job_id(job_id, self.world_size)
        self._client.register_rank(
            self.job_id,
            {
                "rank": self.rank,
                "dp_rank": self.dp_rank,
                "pp_rank": self.pp_rank,
                "tp_rank": self.tp_rank,
                "available_frequencies": self.available_frequencies_mhz,
            },
        )

    # Hooks ---------------------------------------------------------------------------------------------------
    def on_step_begin(self) -> None:
        """At the start of every iteration: fetches the next schedule when the current one is used up
        (blocks on the server until every rank has reported), then starts the iteration's measurement."""
        self._check_open()
        if self._in_step:
            raise StateError(f"{self._who()}: on_step_begin() twice without on_step_end()")
        if self._schedule is None or self._iterations_left == 0:
            self._next_schedule()
        assert self._schedule is not None
        self._controller.prepare_next()  # the first instruction's clock
        self._in_step = True
        self._begun = None
        self._last_end_s = None
        self._last_end_j = None
        self._recorder.begin_iteration()
        self._step_start_s, self._step_start_j = self._measure()

    def on_instruction_begin(self, name: str) -> None:
        """Before every forward and backward: the stage's controller checks it is the schedule's next
        instruction and posts its clock; then its measurement starts."""
        self._check_open()
        self._check_in_step(f"on_instruction_begin({name!r})")
        if self._begun is not None:
            raise StateError(
                f"{self._who()}: on_instruction_begin({name!r}) while {self._begun[0]!r} (instruction "
                f"{self._controller.position}) has not ended (call on_instruction_end first)"
            )
        self._controller.begin(name)
        time_s, energy_j = self._measure()
        self._begun = (name, time_s, energy_j)

    def on_instruction_end(self, name: str) -> None:
        """After every forward and backward: records its time and energy and posts the next instruction's
        clock (so the lock lands while the stage waits for its next input)."""
        self._check_open()
        self._check_in_step(f"on_instruction_end({name!r})")
        if self._begun is None or self._begun[0] != name:
            begun = "none" if self._begun is None else repr(self._begun[0])
            raise StateError(f"{self._who()}: on_instruction_end({name!r}), but the instruction begun is {begun}")
        time_s, energy_j = self._measure()
        _, start_s, start_j = self._begun
        self._recorder.record(name, time_s - start_s, energy_j - start_j)
        self._begun = None
        self._last_end_s = time_s
        self._last_end_j = energy_j
        self._controller.prepare_next()

    def on_step_end(self) -> None:
        """At the end of every iteration (after the data-parallel gradient synchronisation): checks every
        instruction ran and records the iteration; after the schedule's last iteration, reports the round's
        measurements to the server. The iteration time reported is this rank's own, up to the end of its
        last instruction (before waiting on other pipelines), and the energy the GPU's over that same window
        (so that the server can tell the power of a waiting GPU from them); ``history`` keeps the whole step."""
        self._check_open()
        schedule = self._check_in_step("on_step_end()")
        if self._begun is not None:
            raise StateError(f"{self._who()}: on_step_end() while {self._begun[0]!r} has not ended")
        self._controller.check_iteration_complete()  # raises, the iteration going on, if it is not
        self._controller.end_iteration()
        end_s, end_j = self._measure()
        own_end_s = self._last_end_s if self._last_end_s is not None else end_s
        own_end_j = self._last_end_j if self._last_end_j is not None else end_j
        iteration_time_s = own_end_s - self._step_start_s
        own_energy_j = own_end_j - self._step_start_j
        energy_j = end_j - self._step_start_j
        self._in_step = False
        if self._iterations_left is not None:  # a round to report (a schedule for ever reports nothing)
            self._recorder.end_iteration(iteration_time_s, own_energy_j)
        if self._steady is not None and schedule.phase == "warmup":
            self._steady.sample()  # once per iteration, after it (the GPU has just run its load)
        self.history.append(
            {
                "round": schedule.round,
                "phase": schedule.phase,
                "iteration_time_s": iteration_time_s,
                "step_time_s": end_s - self._step_start_s,
                "energy_j": energy_j,
                "start_s": self._step_start_s,
                "end_s": end_s,
            }
        )
        if self._iterations_left is not None:
            self._iterations_left -= 1
            if self._iterations_left == 0:
                self._report()
                return
        self._controller.prepare_next()  # the next iteration's first clock, early

    # Clocks --------------------------------------------------------------------------------------------------
    def wait_for_clock(self, timeout_s: Optional[float] = None) -> bool:
        """Blocks until every clock posted so far is locked (False on timeout). For callers that must be
        sure, like a PipelineStageDevice, which charges an instruction at the clock locked when it begins.
        Raises a failed lock's device error."""
        self._check_open()
        return bool(self._controller.wait(timeout_s))

    @property
    def clock_stats(self) -> dict[str, Any]:
        """The controller's clock requests, locks and their device time (lock_time_s, mean_lock_time_s,
        max_lock_time_s), applied_mhz, requested_mhz."""
        return self._controller.stats()

    # State ---------------------------------------------------------------------------------------------------
    @property
    def schedule(self) -> Optional[Schedule]:
        """The schedule in force (None before the first on_step_begin())."""
        return self._schedule

    @property
    def phase(self) -> Optional[str]:
        """'warmup', 'profiling' or 'planned' (None before the first on_step_begin())."""
        return None if self._schedule is None else self._schedule.phase

    @property
    def steady_state_mode(self) -> str:
        """How the warm-up waits for a thermal steady state: 'off', 'fixed' or 'steady' ('auto' resolved;
        always 'off' server-less)."""
        return "off" if self._steady is None else str(self._steady.mode)

    @property
    def predicted(self) -> Optional[dict[str, Any]]:
        """The schedule's predicted iteration time and energy and the all-max-clock figures, if known."""
        return None if self._schedule is None else self._schedule.predicted

    def close(self) -> None:
        """Stops the controller's clock thread and removes the clock lock (restore). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._controller.close()

    def __enter__(self) -> "PipelineFrequencyOptimizer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<joule.PipelineFrequencyOptimizer rank={self.rank} pp_rank={self.pp_rank} dp_rank={self.dp_rank} "
            f"phase={self.phase} job={self.job_id}>"
        )

    # Internals -----------------------------------------------------------------------------------------------
    def _who(self) -> str:
        return f"rank {self.rank} (stage {self.pp_rank})"

    def _check_open(self) -> None:
        if self._closed:
            raise StateError(f"{self._who()}: the PipelineFrequencyOptimizer is closed")

    def _check_in_step(self, hook: str) -> Schedule:
        if not self._in_step or self._schedule is None:
            raise StateError(f"{self._who()}: {hook} outside a step (call on_step_begin() first)")
        return self._schedule

    def _measure(self) -> tuple[float, float]:
        if self._sync is not None:
            self._sync()
        return float(self._time_fn()), float(self._energy_fn())

    def _next_schedule(self) -> None:
        if self._client is None:
            assert self._local is not None
            self._controller.set_schedule(self._local.frequencies)
            self._schedule = self._local
            self._iterations_left = None
            return
        assert self.job_id is not None
        previous = self._schedule
        body = self._client.schedule(self.job_id, self.rank)
        schedule = Schedule.from_json(body, self.rank, f"{self._client.url}/schedule/{self.job_id}")
        self._controller.set_schedule(schedule.frequencies)  # checks its clocks against the GPU's
        self._schedule = schedule
        self._iterations_left = self._schedule.iterations
        if self._steady is not None and self._schedule.phase == "warmup" and (
            previous is None or previous.phase != "warmup"
        ):
            self._steady.restart()  # a warm-up begins: its wait starts now
            self._steady_warned = False

    def _report(self) -> None:
        schedule = self._schedule
        steady: Optional[bool] = None
        if self._steady is not None and schedule is not None and schedule.phase == "warmup":
            # joule extension (Zeus's server ignores it): the server repeats the warm-up until all are steady.
            steady = bool(self._steady.ready())
            if self._steady.timed_out() and not self._steady_warned:
                self._steady_warned = True
                warnings.warn(
                    f"{self._who()}: profiling without a thermal steady state: {self._steady.describe()}",
                    RuntimeWarning,
                    stacklevel=3,
                )
        # joule extension (Zeus's server ignores it): "round", so a result for another round is refused.
        result = self._recorder.take_result(self.rank, None if schedule is None else schedule.round, steady)
        if self._client is not None:
            assert self.job_id is not None
            self._client.result(self.job_id, result)


__all__ = ["PipelineFrequencyOptimizer", "PipelineServerClient", "PipelineServerError", "Schedule"]
