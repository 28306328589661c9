# SPDX-License-Identifier: Apache-2.0
"""PyTorch integration: a sync callback for Monitor and a torch.distributed rank aggregator.

Importing this module imports torch; ``import joule`` alone never does.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from . import _joule


def cuda_available() -> bool:
    """True if torch sees a CUDA (or ROCm) device."""
    return bool(torch.cuda.is_available())


def sync_function(devices: Optional[Sequence[int]] = None) -> Optional[Callable[[], None]]:
    """A Monitor sync callback: ``torch.cuda.synchronize`` on each device (all visible ones if devices is
    None), so that queued GPU work is finished and counted in the window. None when CUDA is unavailable (CPU
    work is synchronous; nothing to wait for)."""
    if not cuda_available():
        return None
    indices = list(range(torch.cuda.device_count())) if devices is None else list(devices)

    def synchronize() -> None:
        for index in indices:
            torch.cuda.synchronize(index)

    return synchronize


def is_distributed() -> bool:
    """True if torch.distributed is available and a process group is initialised."""
    distributed = getattr(torch, "distributed", None)
    return bool(distributed is not None and distributed.is_available() and distributed.is_initialized())


def get_rank() -> int:
    """This process's rank (0 without torch.distributed)."""
    return torch.distributed.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """The number of ranks (1 without torch.distributed)."""
    return torch.distributed.get_world_size() if is_distributed() else 1


def _device_for(group: Any) -> torch.device:
    # NCCL reduces CUDA tensors only; gloo (and MPI) reduce CPU tensors.
    backend = torch.distributed.get_backend(group) if group is not None else torch.distributed.get_backend()
    if str(backend) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce(values: Sequence[float], operation: str, group: Any = None) -> list[float]:
    """Reduces `values` element-wise across ranks with 'sum' or 'max' (identity without torch.distributed)."""
    if operation not in ("sum", "max"):
        _joule._raise_error("invalid-argument", f"operation must be 'sum' or 'max' (got {operation!r})")
    if not is_distributed():
        return [float(value) for value in values]
    tensor = torch.tensor([float(value) for value in values], dtype=torch.float64, device=_device_for(group))
    op = torch.distributed.ReduceOp.SUM if operation == "sum" else torch.distributed.ReduceOp.MAX
    torch.distributed.all_reduce(tensor, op=op, group=group)
    return [float(value) for value in tensor.cpu().tolist()]


class DistributedAggregator(_joule.RankAggregator):
    """A joule.RankAggregator over torch.distributed: energy summed and time maximised with two all-reduces,
    so every rank of a data-parallel job picks the same power limit. The process group (default: the world)
    must be initialised; gloo, NCCL and MPI backends work."""

    def __init__(self, group: Any = None) -> None:
        _joule.RankAggregator.__init__(self)
        if not is_distributed():
            _joule._raise_error(
                "state", "DistributedAggregator needs torch.distributed.init_process_group() to have been called"
            )
        self.group = group
        self._rank = int(torch.distributed.get_rank(group))
        self._world_size = int(torch.distributed.get_world_size(group))

    def rank(self) -> int:
        return self._rank

    def world_size(self) -> int:
        return self._world_size

    def aggregate(self, energy_j: float, time_s: float) -> tuple[float, float]:
        (energy_sum_j,) = all_reduce([energy_j], "sum", self.group)
        (time_max_s,) = all_reduce([time_s], "max", self.group)
        return energy_sum_j, time_max_s

    def all_ranks(self, value: bool) -> bool:
        (smallest,) = all_reduce([-1.0 if value else 0.0], "max", self.group)
        return smallest < 0


__all__ = [
    "DistributedAggregator",
    "all_reduce",
    "cuda_available",
    "get_rank",
    "get_world_size",
    "is_distributed",
    "sync_function",
]
