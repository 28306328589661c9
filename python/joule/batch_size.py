# SPDX-License-Identifier: Apache-2.0
"""The batch-size optimizer client (Zeus's ``BatchSizeOptimizer``) for ``joule serve``.

The server (``joule serve``, docs/serve.md) runs Zeus's pruning + Gaussian Thompson sampling across
recurrences of a training job; each run of the job asks it for a batch size, reports cumulative time and
energy after every epoch, and stops when told to.
"""

from __future__ import annotations

import atexit
import json
from typing import Any, Optional, Sequence

from . import _joule
from ._args import _is_integer, flag, indices, integer, number, show, text
from ._errors import Error
from .callbacks import Callback
from .monitor import Monitor


class TrainFailError(Error):
    """The server stopped a training run that did not converge (its cost passed β × the best cost, or it
    hit max_epochs). Re-launch the job: the batch size it used is not proposed again while pruning."""

    code = "train-failed"


TrainFailError.__module__ = "joule"


def job_spec(
    job_id_prefix: str,
    batch_sizes: Sequence[int],
    default_batch_size: int,
    *,
    job_id: Optional[str] = None,
    eta_knob: float = 0.5,
    beta_knob: Optional[float] = 2.0,
    target_metric: float = 0.5,
    higher_is_better_metric: bool = True,
    max_epochs: int = 100,
    num_pruning_rounds: int = 2,
    window_size: int = 0,
    mab_prior_mean: float = 0.0,
    mab_prior_precision: float = 0.0,
    mab_num_explorations: int = 2,
    mab_seed: Optional[int] = None,
) -> dict[str, Any]:
    """Zeus's JobSpec as a dict. A wrong type is a TypeError naming the argument here; the server validates
    the values (InvalidArgumentError names the field)."""
    call = "job_spec"
    if _is_integer(batch_sizes):
        raise TypeError(f"job_spec(batch_sizes=...): expected a list of batch sizes, got {show(batch_sizes)}")
    return {
        "job_id": text(call, "job_id", job_id, none=True),
        "job_id_prefix": text(call, "job_id_prefix", job_id_prefix),
        "batch_sizes": indices(call, "batch_sizes", batch_sizes, "batch sizes"),
        "default_batch_size": integer(call, "default_batch_size", default_batch_size),
        "eta_knob": number(call, "eta_knob", eta_knob),
        "beta_knob": None if beta_knob is None else number(call, "beta_knob", beta_knob),
        "target_metric": number(call, "target_metric", target_metric),
        "higher_is_better_metric": flag(call, "higher_is_better_metric", higher_is_better_metric),
        "max_epochs": integer(call, "max_epochs", max_epochs),
        "num_pruning_rounds": integer(call, "num_pruning_rounds", num_pruning_rounds),
        "window_size": integer(call, "window_size", window_size),
        "mab_prior_mean": number(call, "mab_prior_mean", mab_prior_mean),
        "mab_prior_precision": number(call, "mab_prior_precision", mab_prior_precision),
        "mab_num_explorations": integer(call, "mab_num_explorations", mab_num_explorations),
        "mab_seed": None if mab_seed is None else integer(call, "mab_seed", mab_seed),
    }


class BatchSizeClient:
    """A thin client of the batch-size routes of ``joule serve`` (and of Zeus's server): plain dicts in and
    out, joule.Error subclasses on failure (IoError if no server answers, InvalidArgumentError for 422,
    StateError for 409, NotFoundError for 404). urls: ``'http://HOST:PORT'`` (several: comma-separated)."""

    def __init__(self, urls: str, *, timeout_s: float = 120.0, connect_timeout_s: float = 3.0, attempts: int = 8):
        self._client = _joule._BatchSizeClient(urls, timeout_s, connect_timeout_s, attempts)

    def register_job(self, spec: dict[str, Any], max_power_w: float, number_of_gpus: int, gpu_model: str) -> dict[str, Any]:
        """POST /jobs. Returns the registered spec (job_id filled in) with the GPU config and 'created'."""
        call = "BatchSizeClient.register_job"
        if not isinstance(spec, dict):
            raise TypeError(f"{call}(spec=...): expected a dict from joule.job_spec(), got {show(spec)}")
        gpu = {
            "max_power": number(call, "max_power_w", max_power_w),
            "number_of_gpus": integer(call, "number_of_gpus", number_of_gpus),
            "gpu_model": text(call, "gpu_model", gpu_model),
        }
        return json.loads(self._client.register_job(json.dumps(spec), json.dumps(gpu)))

    def next_batch_size(self, job_id: str) -> dict[str, Any]:
        """GET /jobs/batch_size: the next trial {job_id, batch_size, trial_number}."""
        return json.loads(self._client.next_batch_size(job_id))

    def report(
        self, job_id: str, batch_size: int, trial_number: int, time_s: float, energy_j: float, metric: float, current_epoch: int
    ) -> dict[str, Any]:
        """POST /report with the trial's cumulative time (s) and energy (J): {stop_train, converged, message}."""
        call = "BatchSizeClient.report"
        result = {
            "job_id": text(call, "job_id", job_id),
            "batch_size": integer(call, "batch_size", batch_size),
            "trial_number": integer(call, "trial_number", trial_number),
            "time": number(call, "time_s", time_s),
            "energy": number(call, "energy_j", energy_j),
            "metric": number(call, "metric", metric),
            "current_epoch": integer(call, "current_epoch", current_epoch),
        }
        return json.loads(self._client.report(json.dumps(result)))

    def end_trial(self, job_id: str, batch_size: int, trial_number: int) -> None:
        """PATCH /trials: ends the trial (a trial without a final report becomes Failed)."""
        call = "BatchSizeClient.end_trial"
        trial = {
            "job_id": text(call, "job_id", job_id),
            "batch_size": integer(call, "batch_size", batch_size),
            "trial_number": integer(call, "trial_number", trial_number),
        }
        self._client.end_trial(json.dumps(trial))

    def delete_job(self, job_id: str) -> None:
        """DELETE /jobs."""
        self._client.delete_job(job_id)

    def job_status(self, job_id: str) -> dict[str, Any]:
        """GET /jobs/{id} (joule): stage, trials, arms."""
        return json.loads(self._client.job_status(job_id))

    def health(self) -> dict[str, Any]:
        """GET /healthz."""
        return json.loads(self._client.health())


class BatchSizeOptimizer(Callback):
    """Zeus's batch-size optimizer client as a training-loop callback.

    monitor: the joule.Monitor of the job's GPUs (energy is their total GPU energy); server_url: the
    ``joule serve`` address; job: a dict from :func:`job_spec`. The job is registered with max_power = the
    largest power limit of GPU 0 (W) × number of GPUs, and GPU 0's name (override with max_power_w,
    gpu_model)::

        bso = joule.BatchSizeOptimizer(monitor, url, joule.job_spec("mnist", [32, 64, 128], 64))
        batch_size = bso.get_batch_size()
        bso.on_train_begin()
        for epoch in range(max_epochs):
            train_one_epoch(batch_size)
            bso.on_evaluate(validate())     # raises TrainFailError if stopped without converging
            if bso.stop_train:
                break
        bso.on_train_end()
    """

    WINDOW = "__joule_batch_size_optimizer"

    def __init__(
        self,
        monitor: Monitor,
        server_url: str,
        job: dict[str, Any],
        *,
        rank: int = 0,
        max_power_w: Optional[float] = None,
        gpu_model: Optional[str] = None,
        client: Optional[BatchSizeClient] = None,
    ) -> None:
        call = "BatchSizeOptimizer"
        if not isinstance(monitor, _joule._Monitor):
            raise TypeError(f"{call}(monitor=...): expected a joule.Monitor, got {show(monitor)}")
        if not isinstance(job, dict):
            raise TypeError(f"{call}(job=...): expected a dict from joule.job_spec(), got {show(job)}")
        if client is not None and not isinstance(client, BatchSizeClient):
            raise TypeError(f"{call}(client=...): expected a joule.BatchSizeClient or None, got {show(client)}")
        if max_power_w is not None:
            max_power_w = number(call, "max_power_w", max_power_w)
        text(call, "gpu_model", gpu_model, none=True)
        self.monitor = monitor
        self.rank = integer(call, "rank", rank)
        self.client = client if client is not None else BatchSizeClient(text(call, "server_url", server_url))
        gpus = [gpu for gpu in monitor.devices.gpus if gpu.index in monitor.gpu_indices]
        if not gpus:
            _joule._raise_error("invalid-argument", "BatchSizeOptimizer needs a Monitor with at least one GPU")
        # max_power: max_power_w, or GPU 0's largest power limit in whole W × the count (Zeus's rule).
        max_power_w, count, gpus_model = _joule._batch_size_gpu_config(gpus, max_power_w)
        registered = self.client.register_job(job, max_power_w, count, gpu_model or gpus_model)
        self.job: dict[str, Any] = registered
        self.job_id: str = registered["job_id"]
        self.trial: Optional[dict[str, Any]] = None
        self.time_s = 0.0
        self.energy_j = 0.0
        self.epoch = 0
        self.stop_train = False
        self.converged = False
        self._ended = False

    def get_batch_size(self) -> int:
        """The batch size of this run (asked once; later calls return the same)."""
        if self.trial is None:
            trial = self.client.next_batch_size(self.job_id)
            if trial["batch_size"] not in self.job["batch_sizes"]:
                _joule._raise_error(
                    "internal", f"the server proposed batch size {trial['batch_size']}, not in the job's list"
                )
            self.trial = trial
            atexit.register(self._end_trial_at_exit)
        return int(self.trial["batch_size"])

    def on_train_begin(self) -> None:
        """Opens the measurement window of the first epoch."""
        self.get_batch_size()
        self.monitor.begin_window(self.WINDOW, restart=True)

    def on_evaluate(self, metric: float) -> dict[str, Any]:
        """Closes the epoch's window, reports the cumulative time and energy with `metric`, and reopens the
        window unless the server said stop. Raises TrainFailError if stopped without converging."""
        if self.trial is None or not self.monitor.is_open(self.WINDOW):
            _joule._raise_error("state", "call on_train_begin() before on_evaluate()")
        measurement = self.monitor.end_window(self.WINDOW)
        self.time_s += measurement.time_s
        self.energy_j += measurement.total_gpu_energy_j
        self.epoch += 1
        response = self.client.report(
            self.job_id,
            int(self.trial["batch_size"]),
            int(self.trial["trial_number"]),
            self.time_s,
            self.energy_j,
            float(metric),
            self.epoch,
        )
        self.stop_train = bool(response["stop_train"])
        self.converged = bool(response["converged"])
        if not self.stop_train:
            self.monitor.begin_window(self.WINDOW)
            return response
        self.on_train_end()
        if not self.converged:
            raise TrainFailError(f"training stopped without converging: {response['message']}")
        return response

    def on_train_end(self) -> None:
        """Ends the trial on the server (PATCH /trials); also done at process exit."""
        if self.trial is None or self._ended:
            return
        if self.monitor.is_open(self.WINDOW):
            self.monitor.cancel_window(self.WINDOW)
        self._ended = True
        atexit.unregister(self._end_trial_at_exit)
        self.client.end_trial(self.job_id, int(self.trial["batch_size"]), int(self.trial["trial_number"]))

    def _end_trial_at_exit(self) -> None:
        try:
            self.on_train_end()
        except Error:
            pass
