#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Train a small PyTorch model (on the CPU) while joule measures a simulated GPU and picks its power limit.

The GPU is joule's simulated V100 running ImageNet (``--sim``). By default it runs on a virtual clock: every
training step of the real (CPU) model also runs one simulated GPU iteration, whose time and power follow
the GPU's power limit as the Zeus traces measured them, so the optimizer sees a real time–energy trade-off
and the run is deterministic. ``--real-clock`` measures the simulated GPU in wall-clock time instead.

    PYTHONPATH=build/python python3 examples/train_power_limit.py
    PYTHONPATH=build/python python3 examples/train_power_limit.py --eta 0.2 --epochs 4 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

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
    parser.add_argument("--sim", default="v100:imagenet", help="simulated GPU spec (default v100:imagenet)")
    parser.add_argument("--real-clock", action="store_true", help="measure in wall-clock time, not virtual")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2048, help="training samples per epoch")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--eta", type=float, default=0.5, help="weight of energy in Zeus's cost, in [0, 1]")
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--profile-steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    return parser.parse_args()


def make_data(samples: int, weights: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A separable two-class problem in 32 dimensions: the class is the side of a hyperplane."""
    features = torch.randn(samples, 32, generator=generator)
    labels = (features @ weights > 0).long()
    return features, labels


def main() -> int:
    args = parse_args()
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    weights = torch.randn(32, generator=generator)
    features, labels = make_data(args.samples, weights, generator)
    test_features, test_labels = make_data(512, weights, generator)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_function = nn.CrossEntropyLoss()

    devices = joule.devices(sim=args.sim, virtual_clock=not args.real_clock, cpus=False)
    gpu = devices.gpus[0]
    # sync="torch" waits for queued CUDA work before each reading (nothing to wait for on the CPU).
    monitor = joule.Monitor(devices=devices, sync="torch")
    power_limit = joule.PowerLimitOptimizer(
        monitor, eta=args.eta, warmup_steps=args.warmup_steps, profile_steps=args.profile_steps
    )
    print(f"{gpu.name}: power limits {power_limit.candidates_w[-1]:.0f}–{power_limit.candidates_w[0]:.0f} W, "
          f"{len(power_limit.candidates_w)} candidates; eta = {args.eta}")

    epochs = []
    wall_start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        monitor.begin_window("epoch")
        order = torch.randperm(args.samples, generator=generator)
        total_loss = 0.0
        for start in range(0, args.samples, args.batch_size):
            batch = order[start : start + args.batch_size]
            power_limit.on_step_begin()
            optimizer.zero_grad()
            loss = loss_function(model(features[batch]), labels[batch])
            loss.backward()
            optimizer.step()
            total_loss += float(loss) * len(batch)
            if devices.is_virtual:
                devices.run_iterations(1)  # the simulated GPU's share of this step
            power_limit.on_step_end()
        measurement = monitor.end_window("epoch")
        power_limit.on_epoch_end()
        with torch.no_grad():
            accuracy = float((model(test_features).argmax(1) == test_labels).float().mean())
        epochs.append(
            {
                "epoch": epoch,
                "loss": total_loss / args.samples,
                "accuracy": accuracy,
                "time_s": measurement.time_s,
                "gpu_energy_j": measurement.total_gpu_energy_j,
                "power_limit_w": gpu.power_limit_w(),
                "optimizer_state": power_limit.state,
            }
        )
        print(f"epoch {epoch}: loss {total_loss / args.samples:.3f}, accuracy {accuracy:.3f}, "
              f"GPU time {measurement.time_s:.2f} s, GPU energy {measurement.total_gpu_energy_j:.1f} J, "
              f"power limit {gpu.power_limit_w():.0f} W ({power_limit.state})")

    chosen = power_limit.chosen_power_limit_w
    if chosen is None:
        print("the power-limit profile did not finish: train longer or lower --profile-steps")
    else:
        print(f"chosen power limit: {chosen:.0f} W ({joule.describe(power_limit.policy)})")
        for point in power_limit.frontier:
            print(f"  {point.knob:5.0f} W: {point.time_s * 1e3:7.2f} ms/step, {point.energy_j:7.2f} J/step")
    summary = {
        "gpu": gpu.name,
        "chosen_power_limit_w": chosen,
        "candidates_w": power_limit.candidates_w,
        "measurements": power_limit.measurements,
        "epochs": epochs,
        "wall_time_s": time.perf_counter() - wall_start,
    }
    power_limit.close()  # restores the default limit (also done at exit and on SIGINT/SIGTERM)
    if args.json:
        print(json.dumps(summary))
    return 0 if chosen is not None else 1


if __name__ == "__main__":
    sys.exit(main())
