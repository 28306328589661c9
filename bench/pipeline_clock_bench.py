#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What an SM clock lock costs from Python on a simulated pipeline-stage GPU, and what the
PipelineFrequencyOptimizer's hooks cost the training thread (docs/perseus-live.md, "What a clock change
costs"). Not run by `make test`.

    PYTHONPATH=build/python /usr/bin/python3 bench/pipeline_clock_bench.py [--json]

Each figure is the best of a few repeats, per call, wall time and process CPU time (the machine may be
shared). Alternating two clocks makes every call a real lock (the guard skips a repeated one). The simulated
GPU's lock is a mutex and a power update; on an NVIDIA GPU, nvmlDeviceSetGpuLockedClocks takes far longer
(it goes to the driver), which is why the optimizer locks on its applier thread, off the critical path.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from typing import Any, Callable

from timing import best_per_call  # bench/timing.py, beside this script

import joule
from joule import _joule

PROFILE = str(pathlib.Path(__file__).resolve().parents[1] / "data" / "perseus" / "example_s4_m8_profile.csv")
CLOCKS = (1410, 1200)


def measure(name: str, body: Callable[[int], None], iterations: int, repeats: int) -> dict[str, Any]:
    wall_s, cpu_s = best_per_call(body, iterations, repeats, warmup=200)
    return {"name": name, "wall_us": wall_s * 1e6, "cpu_us": cpu_s * 1e6, "iterations": iterations}


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n, repeats = args.iterations, args.repeats
    device = joule.PipelineStageDevice(PROFILE, 0, p_blocking_w=70)
    gpu = device.gpu
    results = []

    def direct(count: int) -> None:
        lock = gpu.lock_sm_clocks_mhz
        for i in range(count):
            mhz = CLOCKS[i & 1]
            lock(mhz, mhz)

    results.append(measure("Gpu.lock_sm_clocks_mhz (Python → C++ → simulated GPU)", direct, n, repeats))

    guard = joule.SettingsGuard("bench", restore_on_signals=False)

    def guarded(count: int) -> None:
        lock = guard.lock_sm_clocks_mhz
        for i in range(count):
            mhz = CLOCKS[i & 1]
            lock(gpu, mhz, mhz)

    results.append(measure("SettingsGuard.lock_sm_clocks_mhz (recorded, restorable)", guarded, n, repeats))

    applier = _joule.ClockApplier(guard, gpu)

    def post(count: int) -> None:
        request = applier.request
        for i in range(count):
            request(CLOCKS[i & 1])
        applier.wait(None)

    results.append(measure("ClockApplier.request (training thread: post only; latest wins)", post, n, repeats))

    def round_trip(count: int) -> None:
        request, wait = applier.request, applier.wait
        for i in range(count):
            request(CLOCKS[i & 1])
            wait(None)

    results.append(measure("ClockApplier.request + wait (lock landed: thread hand-off)", round_trip, n // 4,
                           repeats))
    stats = applier.stats()
    applier.close()

    optimizer = joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 4, 1, 4, None, stage_device=device,
                                                 profile=PROFILE, num_microbatches=8, p_blocking_w=70)
    names = [name for name, _ in optimizer._local.frequencies] if optimizer._local else []

    def hooks(count: int) -> None:
        # Whole iterations (16 instructions each) of the four hooks, without waiting for the locks.
        for _ in range(count):
            optimizer.on_step_begin()
            for name in names:
                optimizer.on_instruction_begin(name)
                optimizer.on_instruction_end(name)
            optimizer.on_step_end()

    iterations = max(1, n // 100)
    hook_result = measure("optimizer hooks per instruction (begin + end, no wait)", hooks, iterations, repeats)
    for key in ("wall_us", "cpu_us"):
        hook_result[key] /= len(names)
    hook_result["iterations"] = iterations * len(names)
    results.append(hook_result)
    optimizer_stats = optimizer.clock_stats
    optimizer.close()

    applier_lock = {"mean_lock_us": stats["mean_lock_time_s"] * 1e6, "max_lock_us": stats["max_lock_time_s"] * 1e6,
                    "locks": stats["locks"]}
    if args.json:
        print(json.dumps({"results": results, "applier_thread": applier_lock,
                          "optimizer_clock_stats": optimizer_stats}))
        return 0
    for result in results:
        print(f"{result['name']:<70} {result['wall_us']:8.2f} µs wall {result['cpu_us']:8.2f} µs CPU")
    print(f"{'the lock itself, on the applier thread (C++ steady clock)':<70} "
          f"{applier_lock['mean_lock_us']:8.2f} µs mean ({applier_lock['locks']} locks, max "
          f"{applier_lock['max_lock_us']:.1f} µs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
