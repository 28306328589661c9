#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Train on a simulated GPU under Chase's carbon-aware power limits, replaying a carbon-intensity trace.

The GPU is joule's simulated V100 running ImageNet on a virtual clock: every training step runs one simulated
GPU iteration, whose time and power follow the power limit as the Zeus traces measured them. The grid's
carbon intensity is the shipped synthetic trace (data/carbon/synthetic_us_solar_14d.csv), shifted by whole
days so that it plays from the virtual clock's present; the run starts where ``joule carbon replay`` starts by
default (the trace's start + 48 half hours, the forecaster's training window). joule.ChaseOptimizer profiles
the power limits once, then every 30 minutes of simulated time forecasts the intensity and re-picks the
limit; joule.CarbonMonitor measures the run's energy and gCO2e.

    PYTHONPATH=build/python python3 examples/train_chase.py
    PYTHONPATH=build/python python3 examples/train_chase.py --hours 3 --eta 0.5 --json

The Chase phase (after the profile) can be compared with the replay of the same work (see --json's
``replay_command``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import pathlib
import sys

try:
    import joule
except ImportError as error:  # one line that says how, not a traceback; exit 2 as for a usage error
    print(f"{sys.argv[0]}: cannot import joule ({error}); build it (make demo), then run this from the source "
          f"folder as: PYTHONPATH=build/python python3 {sys.argv[0]}", file=sys.stderr)
    sys.exit(2)

TRACE = pathlib.Path(__file__).resolve().parents[1] / "data" / "carbon" / "synthetic_us_solar_14d.csv"
DAY_S = 86400


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="v100", help="simulated GPU model (default v100)")
    parser.add_argument("--workload", default="imagenet", help="Zeus-trace workload (default imagenet)")
    parser.add_argument("--trace", default=str(TRACE), help="carbon trace CSV (default: the shipped one)")
    parser.add_argument("--hours", type=float, default=6.0, help="simulated training time, h (default 6)")
    parser.add_argument("--eta", type=float, default=0.5, help="Chase's weight of energy at the max intensity")
    parser.add_argument("--interval-min", type=float, default=30.0, help="decision interval, minutes")
    parser.add_argument("--step-w", type=float, default=25.0, help="candidate power-limit spacing, W")
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=40)
    parser.add_argument("--forecaster", default="ridge", help="ridge, svr or last")
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    return parser.parse_args()


def iso(unix_s: float) -> str:
    return datetime.datetime.fromtimestamp(math.floor(unix_s), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def main() -> int:
    args = parse_args()
    devices = joule.devices(sim=f"{args.gpu}:{args.workload}", virtual_clock=True, cpus=False)
    trace = joule.CarbonTrace.read(args.trace)
    start_unix_s = trace.start_unix_s + 48 * trace.period_s  # `joule carbon replay`'s default start

    # The virtual clock starts at the real "now"; the trace is from the past. Shift the trace by whole days
    # (the time of day, and so the solar shape and the forecaster's features, stay) and move the clock to the
    # shifted start.
    now_unix_s = devices.to_unix_s(devices.now_s())
    shift_days = math.ceil((now_unix_s - start_unix_s) / DAY_S) + 1
    shift_s = shift_days * DAY_S
    devices.advance(start_unix_s + shift_s - now_unix_s + 0.001)
    signal = joule.carbon_signal(trace=trace.shifted(shift_s), devices=devices)

    monitor = joule.Monitor(devices=devices)
    carbon = joule.CarbonMonitor(monitor, signal)
    chase = joule.ChaseOptimizer(
        monitor,
        signal,
        eta=args.eta,
        interval_s=args.interval_min * 60,
        step_w=args.step_w,
        warmup_steps=args.warmup_steps,
        profile_steps=args.profile_steps,
        forecaster=args.forecaster,
        restore_on_signals=False,
    )
    gpu = devices.gpus[0]
    print(f"{gpu.name}: {len(chase.candidates_w)} power limits {chase.candidates_w[-1]:.0f}–{chase.candidates_w[0]:.0f} W; "
          f"carbon from {args.trace}, from {iso(start_unix_s)}")

    end_unix_s = devices.to_unix_s(devices.now_s()) + args.hours * 3600
    steps = 0
    chase_steps = 0
    chase_start_unix_s = None
    carbon.begin_window("run")
    with chase:  # restores the GPU's limit when the block ends, also on an exception
        while devices.to_unix_s(devices.now_s()) < end_unix_s:
            chase.on_step_begin()
            if chase.state == "done" and chase_start_unix_s is None:
                # The profile just ended and Chase made its first decision: the replay's start.
                chase_start_unix_s = devices.to_unix_s(devices.now_s()) - shift_s
                carbon.begin_window("chase")
            devices.run_iterations(1)  # the simulated GPU's share of this step; the model's step goes here
            carbon.checkpoint()  # on a virtual clock: the energy so far belongs to this step's limit
            steps += 1
            if chase_start_unix_s is not None:
                chase_steps += 1
            chase.on_step_end()
        run = carbon.end_window("run")
        phase = carbon.end_window("chase") if chase_start_unix_s is not None else None
        decisions = chase.decisions
    limit_after_w = gpu.power_limit_w()

    print(f"{steps} steps in {run.measurement.time_s / 3600:.2f} h: {run.energy_j / 3.6e6:.3f} kWh, "
          f"{run.carbon_g:.1f} gCO2e ({run.average_intensity_g_per_kwh:.0f} g/kWh on average)")
    if phase is not None:
        print(f"Chase phase from {iso(chase_start_unix_s)}: {chase_steps} steps, {phase.energy_j:.0f} J, "
              f"{phase.carbon_g:.2f} gCO2e, {len(decisions)} decisions")
    for decision in decisions[:6]:
        print(f"  {iso(decision['time_unix_s'] - shift_s)}: forecast {decision['forecast_g_per_kwh']:6.1f} g/kWh"
              f" -> {decision['power_limit_w']:.0f} W")
    print(f"power limit after the run: {limit_after_w:.0f} W (restored)")
    if args.json:
        summary = {
            "gpu": gpu.name,
            "steps": steps,
            "energy_j": run.energy_j,
            "carbon_g": run.carbon_g,
            "chase_start": None if chase_start_unix_s is None else iso(chase_start_unix_s),
            "chase_iterations": chase_steps,
            "chase_energy_j": None if phase is None else phase.energy_j,
            "chase_carbon_g": None if phase is None else phase.carbon_g,
            "decisions": [dict(d, time_unix_s=d["time_unix_s"] - shift_s) for d in decisions],
            "power_limit_after_w": limit_after_w,
            "replay_command": None
            if chase_start_unix_s is None
            else [
                "joule", "carbon", "replay", "--trace", args.trace, "--gpu", args.gpu, "--workload", args.workload,
                "--eta", str(args.eta), "--period-min", str(args.interval_min), "--step-w", str(args.step_w),
                "--forecaster", args.forecaster, "--iterations", str(chase_steps),
                "--start", iso(chase_start_unix_s), "--format", "json",
            ],
        }
        print(json.dumps(summary))
    return 0 if phase is not None else 1


if __name__ == "__main__":
    sys.exit(main())
