# SPDX-License-Identifier: Apache-2.0
"""The timing loop the Python benchmarks share: the best (least disturbed) of several repeats, per call."""

from __future__ import annotations

import time
from typing import Callable


def best_per_call(body: Callable[[int], None], iterations: int, repeats: int, warmup: int) -> tuple[float, float]:
    """Runs ``body(warmup)`` once, then ``body(iterations)`` ``repeats`` times; returns the best wall and CPU
    time per call, in seconds (the minimum: on a shared machine, the repeat least disturbed by others)."""
    body(min(iterations, warmup))
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        body(iterations)
        best_wall = min(best_wall, (time.perf_counter() - wall) / iterations)
        best_cpu = min(best_cpu, (time.process_time() - cpu) / iterations)
    return best_wall, best_cpu
