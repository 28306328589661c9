# SPDX-License-Identifier: Apache-2.0
"""One rank of the torch.distributed test (test_distributed.py): profiles power limits with the gloo backend
and prints, as JSON, what it measured locally and what it chose. Not a test module (no test_ prefix).

Usage: distributed_worker.py RANK WORLD_SIZE INIT_METHOD
"""

from __future__ import annotations

import datetime
import json
import sys

import torch
import torch.distributed as dist

import joule
import joule.torch


class RecordingAggregator(joule.torch.DistributedAggregator):
    """Records this rank's inputs to the collective."""

    def __init__(self) -> None:
        super().__init__()
        self.local: list[tuple[float, float]] = []

    def aggregate(self, energy_j: float, time_s: float) -> tuple[float, float]:
        self.local.append((energy_j, time_s))
        return super().aggregate(energy_j, time_s)


def main() -> int:
    rank, world_size, init_method = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    dist.init_process_group(
        "gloo", init_method=init_method, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60)
    )
    # The ranks run different workloads, so each alone would weigh time and energy differently.
    devices = joule.devices(sim="v100:imagenet" if rank == 0 else "v100:sentiment140", virtual_clock=True, cpus=False)
    monitor = joule.Monitor(devices=devices)
    auto = joule.PowerLimitOptimizer(monitor, warmup_steps=1, profile_steps=3, restore_on_signals=False)
    auto_is_distributed = isinstance(auto.aggregator, joule.torch.DistributedAggregator)
    auto.close()

    aggregator = RecordingAggregator()
    optimizer = joule.PowerLimitOptimizer(
        monitor, eta=0.5, warmup_steps=1, profile_steps=3, aggregator=aggregator, restore_on_signals=False
    )
    steps = 0
    while not optimizer.done and steps < 200:
        optimizer.on_step_begin()
        devices.run_iterations(1)
        optimizer.on_step_end()
        steps += 1
        if steps % 40 == 0:  # an epoch boundary on both ranks: the interrupted candidate is profiled again
            optimizer.on_epoch_end()
    local_frontier = joule.Frontier(
        (m["power_limit_w"], t / 3, e / 3) for m, (e, t) in zip(optimizer.measurements, aggregator.local)
    )
    print(
        json.dumps(
            {
                "rank": rank,
                "auto_is_distributed": auto_is_distributed,
                "chosen_power_limit_w": optimizer.chosen_power_limit_w,
                "power_limit_w": devices.gpus[0].power_limit_w(),
                "measurements": optimizer.measurements,
                "local": aggregator.local,
                "alone_would_choose_w": local_frontier.select(joule.ZeusCost(0.5, 250.0)).knob,
                "policy": joule.describe(optimizer.policy),
            }
        )
    )
    optimizer.close()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
