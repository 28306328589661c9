# SPDX-License-Identifier: Apache-2.0
"""joule.torch: the sync callback and the torch.distributed helpers (single process)."""

from __future__ import annotations

import pytest

import joule

pytestmark = pytest.mark.torch


def test_sync_function_is_none_without_cuda() -> None:
    import torch

    import joule.torch as jt

    assert jt.cuda_available() == torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert jt.sync_function() is None


def test_monitor_accepts_sync_torch(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim, sync="torch")
    monitor.begin_window("w")
    sim.advance(1)
    assert monitor.end_window("w").time_s == pytest.approx(1)


def test_helpers_without_a_process_group() -> None:
    import joule.torch as jt

    assert not jt.is_distributed()
    assert jt.get_rank() == 0 and jt.get_world_size() == 1
    assert jt.all_reduce([1.5, 2], "sum") == [1.5, 2.0]
    with pytest.raises(joule.InvalidArgumentError):
        jt.all_reduce([1.0], "mean")
    with pytest.raises(joule.StateError, match="init_process_group"):
        jt.DistributedAggregator()
