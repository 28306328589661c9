#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Overhead of a measurement window (begin_window + end_window) called from Python on the simulated device,
next to the same calls in C++ (bench/monitor_bench, Google Benchmark). Not run by `make test`.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py --cpp-bench build/bench/monitor_bench

Reports wall time and process CPU time per begin+end pair (the machine may be shared: CPU time is the
steadier figure). DESIGN.md's budget for the C++ pair is 2 µs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Callable

from timing import best_per_call  # bench/timing.py, beside this script

import joule
from joule import _joule


def measure(name: str, body: Callable[[int], None], iterations: int, repeats: int) -> dict:
    wall_s, cpu_s = best_per_call(body, iterations, repeats, warmup=1000)
    return {"name": name, "wall_ns": wall_s * 1e9, "cpu_ns": cpu_s * 1e9, "iterations": iterations}


def window_loop(monitor: _joule._Monitor) -> Callable[[int], None]:
    begin, end = monitor.begin_window, monitor.end_window

    def body(iterations: int) -> None:
        for _ in range(iterations):
            begin("step")
            end("step")

    return body


def context_loop(monitor: joule.Monitor) -> Callable[[int], None]:
    def body(iterations: int) -> None:
        for _ in range(iterations):
            with monitor.window("step"):
                pass

    return body


def python_cases(iterations: int, repeats: int) -> list[dict]:
    steady = joule.devices(sim="v100", cpus=False)
    virtual = joule.devices(sim="v100", virtual_clock=True, cpus=False)
    eight = joule.devices(sim="8xa40", cpus=False)
    polled = joule.devices(sim="p100", virtual_clock=True, cpus=False)
    noop_sync_calls = [0]

    def noop_sync() -> None:
        noop_sync_calls[0] += 1

    def empty(iterations: int) -> None:
        for _ in range(iterations):
            pass

    empty_loop = measure("python: empty loop (baseline)", empty, iterations, repeats)
    return [
        measure("python: v100, steady clock", window_loop(joule.Monitor(devices=steady)), iterations, repeats),
        measure("python: v100, virtual clock", window_loop(joule.Monitor(devices=virtual)), iterations, repeats),
        measure("python: 8 x a40, steady clock", window_loop(joule.Monitor(devices=eight)), iterations // 4, repeats),
        measure("python: p100 (polled), virtual", window_loop(joule.Monitor(devices=polled)), iterations, repeats),
        measure("python: v100 steady, sync callback", window_loop(joule.Monitor(devices=steady, sync=noop_sync)),
                iterations, repeats),
        measure("python: v100 steady, `with monitor.window()`", context_loop(joule.Monitor(devices=steady)),
                iterations, repeats),
        empty_loop,
    ]


def cpp_cases(binary: str) -> list[dict]:
    output = subprocess.run(
        [binary, "--benchmark_filter=WindowBeginEnd", "--benchmark_format=json", "--benchmark_min_time=0.3"],
        check=True, capture_output=True, text=True,
    ).stdout
    names = {
        "BM_WindowBeginEnd_SimSteadyClock": "c++: v100, steady clock",
        "BM_WindowBeginEnd_SimVirtualClock": "c++: v100, virtual clock",
        "BM_WindowBeginEnd_8SimGpus": "c++: 8 x a40, steady clock",
        "BM_WindowBeginEnd_SimPolledGpu": "c++: p100 (polled), virtual",
    }
    cases = []
    for benchmark in json.loads(output)["benchmarks"]:
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6}[benchmark["time_unit"]]
        cases.append({"name": names.get(benchmark["name"], benchmark["name"]),
                      "wall_ns": benchmark["real_time"] * scale, "cpu_ns": benchmark["cpu_time"] * scale,
                      "iterations": benchmark["iterations"]})
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cpp-bench", help="path of bench/monitor_bench to run for the C++ figures")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = python_cases(args.iterations, args.repeats)
    if args.cpp_bench:
        cases += cpp_cases(args.cpp_bench)
    if args.json:
        print(json.dumps(cases, indent=2))
        return 0
    print(f"{'begin_window + end_window':48s} {'wall':>10s} {'CPU':>10s}")
    for case in cases:
        print(f"{case['name']:48s} {case['wall_ns'] / 1e3:8.2f} µs {case['cpu_ns'] / 1e3:8.2f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
