# SPDX-License-Identifier: Apache-2.0
"""Generates tests/sim/data/cross_check.csv, the fixture of tests/sim/cross_check_test.cpp.

Runs the independent Python re-implementation of Zeus's legacy simulator (reference_sim.py, which
reproduces the original's output for V100 exactly) over a grid of GPUs, workloads, seeds, η and β, and
writes one row per simulation run:

    gpu,workload,seed,eta,beta,tries,decisions,energy_j,time_s,cost

``tries`` is the number of recorded tries (history entries, over all recurrences); ``decisions`` is every
try as ``batch_size:power_limit:reached`` (reached 1/0) joined by ``;``; energy_j, time_s and cost are the
sums over all tries (``repr`` floats). A run that fails as the original would has tries = -1 and
``error:<kind>`` as decisions (kinds: see reference_sim.SimError) and empty sums.

Grid: all four GPUs x six workloads x seeds 1, 2, 3 at η 0.5, β 2 (72 runs); and on v100 and a40, seed 1,
all six workloads at (η 0.2, β 2), (η 0.9, β 2), (η 0.5, β 1.5) and (η 0.5, β inf) (48 runs).
With --edge, 48 more runs are appended: all GPUs x workloads, seed 1, η 0.5 at β 1.01 and β 1.1. A bound that
tight makes many runs fail as the original does (a recurrence runs out of tries; pruning leaves no batch
size), and puts some early-stop floor divisions within an ULP of an integer (v100 imagenet β 1.1 depends on
pandas' CSV float parsing, which is not correctly rounded).

Run from anywhere (needs pandas and numpy, e.g. Debian's python3-pandas)::

    /usr/bin/python3 tests/sim/make_cross_check.py [--trace-dir data/zeus-traces] \\
        [--out tests/sim/data/cross_check.csv] [--edge]
"""

from __future__ import annotations

import argparse
import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import reference_sim as ref  # noqa: E402

WORKLOADS = ("cifar100", "imagenet", "squad", "librispeech", "movielens-1m", "sentiment140")


def grid(edge: bool = False):
    """(gpu, workload, seed, eta, beta) of every run, in fixture order."""
    for gpu in ref.GPUS:
        for workload in WORKLOADS:
            for seed in (1, 2, 3):
                yield gpu, workload, seed, 0.5, 2.0
    for gpu in ("v100", "a40"):
        for eta, beta in ((0.2, 2.0), (0.9, 2.0), (0.5, 1.5), (0.5, float("inf"))):
            for workload in WORKLOADS:
                yield gpu, workload, 1, eta, beta
    if edge:
        for gpu in ref.GPUS:
            for workload in WORKLOADS:
                for beta in (1.01, 1.1):
                    yield gpu, workload, 1, 0.5, beta


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-dir", default=os.path.join(HERE, "..", "..", "data", "zeus-traces"))
    ap.add_argument("--out", default=os.path.join(HERE, "data", "cross_check.csv"))
    ap.add_argument("--edge", action="store_true", help="append the tight-bound runs (see above)")
    args = ap.parse_args(argv)

    traces = {}
    rows = []
    for gpu, workload, seed, eta, beta in grid(args.edge):
        if gpu not in traces:
            traces[gpu] = ref.load_trace(args.trace_dir, gpu)
        df = traces[gpu]
        job = ref.paper_job(args.trace_dir, gpu, workload)
        row = [gpu, workload, seed, repr(eta), repr(beta)]
        try:
            max_power, history = ref.simulate(df, job, seed, eta, beta)
        except ref.SimError as err:
            rows.append(row + [-1, f"error:{err.kind}", "", "", ""])
            print(f"{gpu} {workload} seed {seed} eta {eta} beta {beta}: error:{err.kind}: {err}",
                  file=sys.stderr)
            continue
        entries = [h for recurrence in history for h in recurrence]
        energy = time = cost = 0.0
        for h in entries:
            energy += h.energy
            time += h.time
            cost += ref.zeus_cost(h.energy, h.time, eta, max_power)
        decisions = ";".join(f"{h.bs}:{h.pl}:{1 if h.reached else 0}" for h in entries)
        rows.append(row + [len(entries), decisions, repr(float(energy)), repr(float(time)),
                           repr(float(cost))])

    with open(args.out, "w", newline="") as f:
        out = csv.writer(f, lineterminator="\n")
        out.writerow(["gpu", "workload", "seed", "eta", "beta", "tries", "decisions", "energy_j",
                      "time_s", "cost"])
        out.writerows(rows)
    print(f"wrote {len(rows)} runs to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
