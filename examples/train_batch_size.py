#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Recurring training with Zeus's batch-size optimizer: `joule serve` proposes each run's batch size.

Each recurrence trains a small PyTorch model (on the CPU) from scratch with the batch size the server
proposes, reports the cumulative time and energy of a simulated GPU after every epoch, and stops when the
server says so (target accuracy reached, or the run's cost passed β × the best so far). Every optimizer step
also runs one iteration of the simulated GPU on a virtual clock, so smaller batches cost more GPU time per
epoch but may need fewer epochs: the server learns the cheapest batch size across recurrences.

Without --server the example starts `joule serve` on a temporary SQLite database and a free port:

    PYTHONPATH=build/python python3 examples/train_batch_size.py --joule build/joule
    PYTHONPATH=build/python python3 examples/train_batch_size.py --server http://127.0.0.1:7787
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Iterator, Optional

try:
    import joule
except ImportError as error:  # one line that says how, not a traceback; exit 2 as for a usage error
    print(f"{sys.argv[0]}: cannot import joule ({error}); build it (make demo), then run this from the source "
          f"folder as: PYTHONPATH=build/python python3 {sys.argv[0]}", file=sys.stderr)
    sys.exit(2)
try:
    import torch
    from torch import nn
except ImportError as error:
    print(f"{sys.argv[0]}: cannot import torch ({error}); install PyTorch (Debian: sudo apt install "
          f"python3-torch) and run this with that Python: PYTHONPATH=build/python /usr/bin/python3 {sys.argv[0]}",
          file=sys.stderr)
    sys.exit(2)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", help="URL of a running `joule serve` (default: start one)")
    parser.add_argument("--joule", help="the joule binary to start the server with (default: JOULE_BIN, "
                        "build/joule next to this checkout, or joule on PATH)")
    parser.add_argument("--sim", default="v100:cifar100", help="simulated GPU spec (default v100:cifar100)")
    parser.add_argument("--recurrences", type=int, default=6)
    parser.add_argument("--batch-sizes", default="8,16,32,64,128")
    parser.add_argument("--default-batch-size", type=int, default=32)
    parser.add_argument("--target-accuracy", type=float, default=0.95)
    parser.add_argument("--max-epochs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--eta", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    return parser.parse_args()


def find_joule(explicit: Optional[str]) -> str:
    candidates = [explicit, os.environ.get("JOULE_BIN"),
                  str(pathlib.Path(__file__).resolve().parents[1] / "build" / "joule"), shutil.which("joule")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("cannot find the joule binary: pass --joule PATH or --server URL")


@contextlib.contextmanager
def joule_serve(binary: str) -> Iterator[str]:
    """Starts `joule serve` on a temporary SQLite file and a free port; yields its URL."""
    with tempfile.TemporaryDirectory(prefix="joule-example-") as directory:
        process = subprocess.Popen(
            [binary, "serve", "--db", f"sqlite:{directory}/joule.db", "--listen", "127.0.0.1:0", "--threads", "4"],
            stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None
            line = process.stdout.readline()  # "joule serve: listening on http://127.0.0.1:PORT (...)"
            if "listening on " not in line:
                raise SystemExit(f"joule serve did not start: {line!r}")
            yield line.split("listening on ", 1)[1].split()[0]
        finally:
            process.terminate()
            process.wait(timeout=10)


def make_data(samples: int, weights: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    features = torch.randn(samples, 32, generator=generator)
    return features, (features @ weights > 0).long()


def train_once(args: argparse.Namespace, url: str, recurrence: int) -> dict:
    """One recurrence of the job: one training run with the batch size the server proposes."""
    generator = torch.Generator().manual_seed(args.seed)
    weights = torch.randn(32, generator=generator)
    features, labels = make_data(args.samples, weights, generator)
    test_features, test_labels = make_data(512, weights, generator)
    torch.manual_seed(args.seed * 1000 + recurrence)

    devices = joule.devices(sim=args.sim, virtual_clock=True, cpus=False)
    monitor = joule.Monitor(devices=devices)
    job = joule.job_spec("mlp", [int(b) for b in args.batch_sizes.split(",")], args.default_batch_size,
                         job_id="mlp-example", eta_knob=args.eta, target_metric=args.target_accuracy,
                         max_epochs=args.max_epochs, mab_seed=args.seed)
    optimizer_client = joule.BatchSizeOptimizer(monitor, url, job)
    batch_size = optimizer_client.get_batch_size()

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_function = nn.CrossEntropyLoss()
    outcome = "converged"
    accuracy = 0.0
    optimizer_client.on_train_begin()
    try:
        for _ in range(args.max_epochs):
            order = torch.randperm(args.samples)
            for start in range(0, args.samples, batch_size):
                batch = order[start : start + batch_size]
                sgd.zero_grad()
                loss_function(model(features[batch]), labels[batch]).backward()
                sgd.step()
                devices.run_iterations(1)  # the simulated GPU's share of this step
            with torch.no_grad():
                accuracy = float((model(test_features).argmax(1) == test_labels).float().mean())
            optimizer_client.on_evaluate(accuracy)
            if optimizer_client.stop_train:
                break
    except joule.TrainFailError:
        outcome = "stopped"
    finally:
        optimizer_client.on_train_end()
    return {"recurrence": recurrence, "batch_size": batch_size, "epochs": optimizer_client.epoch,
            "accuracy": accuracy, "time_s": optimizer_client.time_s, "energy_j": optimizer_client.energy_j,
            "outcome": outcome}


def main() -> int:
    args = parse_args()
    with contextlib.ExitStack() as stack:
        url = args.server or stack.enter_context(joule_serve(find_joule(args.joule)))
        print(f"batch-size optimizer at {url}; target accuracy {args.target_accuracy}, batch sizes {args.batch_sizes}")
        runs = []
        for recurrence in range(1, args.recurrences + 1):
            run = train_once(args, url, recurrence)
            runs.append(run)
            print(f"recurrence {recurrence}: batch size {run['batch_size']:4d}, {run['epochs']} epoch(s), "
                  f"accuracy {run['accuracy']:.3f}, GPU time {run['time_s']:.1f} s, GPU energy "
                  f"{run['energy_j']:.0f} J, {run['outcome']}")
        status = joule.BatchSizeClient(url).job_status("mlp-example")
    print(f"server: stage {status.get('stage')}, {len(status.get('trials', []))} trials")
    if args.json:
        print(json.dumps({"runs": runs, "stage": status.get("stage")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
