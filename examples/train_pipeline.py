#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Pipeline-parallel training (PyTorch on the CPU, hand-written 1F1B) with Perseus's per-instruction GPU
frequencies on simulated pipeline-stage GPUs.

One command launches S × D processes on the loopback interface (torch.distributed, gloo): D data-parallel
pipelines of S stages of a small MLP. Each process is one stage of one pipeline; it owns a
``joule.PipelineStageDevice`` (a simulated GPU whose computations take the profile's time and energy at the
SM clock locked on it) and a ``joule.PipelineFrequencyOptimizer``, whose hooks the loop calls around every
forward and backward. With ``--server URL`` the optimizer registers with a pipeline-frequency server, runs
the profiling rounds the server sends, receives the plan and trains; without, it plans locally from
``--profile`` (or runs ``--plan``, a ``joule plan --plan-out`` file).

    PYTHONPATH=build/python python3 examples/train_pipeline.py --stages 4 --microbatches 8
    PYTHONPATH=build/python python3 examples/train_pipeline.py --dp 2 --server http://127.0.0.1:7787

Time and energy accounting (what makes the measured figures follow the planner's model exactly):

- The CPU really computes every forward and backward, and the stages really exchange activations and
  gradients (send/recv between neighbouring stages; gradients all-reduced across pipelines per stage). But
  time and energy are the simulated GPUs': each stage device has its own virtual clock, starting at 0.
- Every message between stages carries the sender's virtual completion time of the computation that
  produced it. A computation starts at max(this stage's virtual now, its input's virtual arrival time) —
  the stage idles meanwhile, drawing the blocking power ``--p-blocking-w`` — and lasts the profile's time
  at the SM clock locked on the device when it starts (× the device's slowdown, for a straggler), drawing
  the profile's energy / time meanwhile. The first stage's forwards have their input at the iteration's
  start; the last stage's backwards have theirs when its own forward ended. Communication takes no virtual
  time (as in the planner's model).
- The loop posts each instruction's clock to the optimizer (``on_instruction_begin``) and, because the
  simulated device charges a computation at the clock locked when it begins, waits for the lock to land
  (``wait_for_clock``) before running it.
- At the end of an iteration every rank has recorded its own iteration time up to its last instruction
  (what the optimizer reports to the server as ``iter_time``, before any data-parallel wait); then all ranks
  agree on the iteration's virtual end (an all-reduce max of their virtual clocks) and idle until it, so
  the next iteration starts at the same virtual time everywhere. A rank's iteration energy is its device's
  energy counter over [start, agreed end].
- So an iteration's measured time is the critical path of the DAG and its energy Σ computation energy +
  p_blocking_w × (S × time − Σ computation time) per pipeline — ``plan::evaluate()``'s model — up to the
  virtual clock's 1 ns and the energy counters' 1 mJ. With several pipelines, every pipeline blocks until
  the slowest one ends.

Per iteration after planning, rank 0 prints the measured iteration time and energy (all GPUs), the
predicted figures (the model evaluated for the schedules that ran, with the slowdowns in force; equal to the
plan's own prediction when nothing straggles) with the relative error, and the saving against every
computation at the highest clock with no slowdown. ``--json`` adds a JSON summary as the last line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import socket
import sys
import time
from typing import Any, Optional

REPO = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_PROFILE = REPO / "data" / "perseus" / "example_s4_m8_profile.csv"
HIDDEN = 64
CLASSES = 4
MICROBATCH_SIZE = 16
PREDICTION_TOLERANCE = 0.03  # the measured figures must be within 3% of the model's


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stages", type=int, default=4, help="pipeline stages S (default 4)")
    parser.add_argument("--microbatches", type=int, default=8, help="microbatches per iteration M (default 8)")
    parser.add_argument("--dp", type=int, default=1, help="data-parallel pipelines D (default 1)")
    parser.add_argument("--iterations", type=int, default=5, help="iterations to train after planning")
    parser.add_argument("--server", help="URL of a pipeline-frequency server (else server-less)")
    parser.add_argument("--profile", default=str(DEFAULT_PROFILE),
                        help="profile CSV (stages beyond its own wrap around); default the 4-stage example")
    parser.add_argument("--plan", help="server-less: run this plan file (joule plan --plan-out) as is")
    parser.add_argument("--target-time-s", type=float, help="server-less: plan for this iteration time")
    parser.add_argument("--p-blocking-w", type=float, default=70.0, help="blocking (idle) power, W")
    parser.add_argument("--straggler-slowdown", type=float, help="slow one rank's GPU by this factor")
    parser.add_argument("--straggler-rank", type=int, default=0, help="the straggler's global rank")
    parser.add_argument("--straggler-from-iteration", type=int, default=0,
                        help="first iteration (0-based, profiling included) the straggler is slow")
    parser.add_argument("--straggler-until-iteration", type=int,
                        help="first iteration it is no longer slow (default: never)")
    parser.add_argument("--straggler-planned-from", type=int,
                        help="instead of --straggler-from-iteration: slow from this many planned iterations on")
    parser.add_argument("--straggler-planned-until", type=int,
                        help="with --straggler-planned-from: no longer slow from this many planned iterations on")
    parser.add_argument("--max-profiling-iterations", type=int, default=1000,
                        help="give up if the server has not planned after this many iterations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    args = parser.parse_args(argv)
    if args.stages < 1 or args.microbatches < 1 or args.dp < 1 or args.iterations < 0:
        parser.error("--stages, --microbatches and --dp must be ≥ 1, --iterations ≥ 0")
    if not 0 <= args.straggler_rank < args.stages * args.dp:
        parser.error(f"--straggler-rank must be in [0, {args.stages * args.dp})")
    if args.server and (args.plan or args.target_time_s):
        parser.error("--plan and --target-time-s are for the server-less form")
    return args


def profile_text(path: str, stages: int) -> str:
    """The profile CSV for `stages` stages: stage s uses the file's stage s mod (its stage count)."""
    lines = pathlib.Path(path).read_text().splitlines()
    header, rows = lines[0], [line for line in lines[1:] if line.strip()]
    columns = header.split(",")
    stage_column = columns.index("stage")
    by_stage: dict[int, list[list[str]]] = {}
    for row in rows:
        fields = row.split(",")
        by_stage.setdefault(int(fields[stage_column]), []).append(fields)
    own = len(by_stage)
    out = [header]
    for stage in range(stages):
        for fields in by_stage[stage % own]:
            copied = list(fields)
            copied[stage_column] = str(stage)
            out.append(",".join(copied))
    return "\n".join(out) + "\n"


def one_f_one_b(stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """This stage's 1F1B order (joule's plan::build_pipeline): min(S − s, M) warm-up forwards, then one
    backward before each further forward, then the remaining backwards."""
    order: list[tuple[str, int]] = []
    warmup = min(stages - stage, microbatches)
    forward = backward = 0
    while forward < warmup:
        order.append(("forward", forward))
        forward += 1
    while forward < microbatches:
        order.append(("backward", backward))
        backward += 1
        order.append(("forward", forward))
        forward += 1
    while backward < microbatches:
        order.append(("backward", backward))
        backward += 1
    return order


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def relative_error(measured: float, predicted: float) -> float:
    return abs(measured - predicted) / abs(predicted) if predicted else float("inf")


def worker(rank: int, args: argparse.Namespace, port: int, profile: str) -> None:
    """One stage of one pipeline (global rank = dp_rank × S + stage)."""
    import torch
    import torch.distributed as dist
    from torch import nn

    import joule

    stages, microbatches, dp = args.stages, args.microbatches, args.dp
    world_size = stages * dp
    stage, dp_rank = rank % stages, rank // stages
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=300))
    # Every rank creates every group, in the same order; a stage's group holds its D data-parallel peers.
    stage_groups = [dist.new_group([d * stages + s for d in range(dp)]) for s in range(stages)]
    my_group = stage_groups[stage]

    torch.manual_seed(args.seed + stage)  # the same weights for a stage in every pipeline
    layers: list[nn.Module] = [nn.Linear(HIDDEN, HIDDEN), nn.ReLU()]
    if stage == stages - 1:
        layers.append(nn.Linear(HIDDEN, CLASSES))
    model = nn.Sequential(*layers)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_function = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(args.seed * 1000 + dp_rank)
    teacher = torch.randn(HIDDEN, CLASSES, generator=torch.Generator().manual_seed(args.seed))

    device = joule.PipelineStageDevice(profile, stage, p_blocking_w=args.p_blocking_w)
    frequency_optimizer = joule.PipelineFrequencyOptimizer(
        rank, dp_rank, stage, 0, 0, dp, stages, 1, world_size, args.server,
        job_metadata=json.dumps({"example": "train_pipeline", "stages": stages, "dp": dp}),
        stage_device=device,
        num_microbatches=microbatches,
        profile=None if args.server else profile,
        plan=args.plan,
        target_time_s=args.target_time_s,
        p_blocking_w=args.p_blocking_w,
    )
    order = one_f_one_b(stage, stages, microbatches)
    activation_shape = (MICROBATCH_SIZE, HIDDEN)
    message_size = 1 + MICROBATCH_SIZE * HIDDEN

    def send(tensor: torch.Tensor, time_s: float, to: int) -> Any:
        message = torch.cat([torch.tensor([time_s], dtype=torch.float64), tensor.detach().double().flatten()])
        return message, dist.isend(message, dst=to)

    def receive(source: int) -> tuple[torch.Tensor, float]:
        message = torch.empty(message_size, dtype=torch.float64)
        dist.recv(message, src=source)
        return message[1:].float().view(activation_shape), float(message[0])

    summary: dict[str, Any] = {"iterations": []}
    planned_done = 0
    iteration = 0
    started_wall = time.monotonic()
    while planned_done < args.iterations:
        if iteration - planned_done >= args.max_profiling_iterations:
            raise RuntimeError(f"no plan after {args.max_profiling_iterations} profiling iterations")
        if args.straggler_planned_from is not None:  # counted in planned iterations (the same on every rank)
            straggling = (
                args.straggler_slowdown is not None
                and args.straggler_planned_from <= planned_done
                and (args.straggler_planned_until is None or planned_done < args.straggler_planned_until)
            )
        else:
            straggling = (
                args.straggler_slowdown is not None
                and args.straggler_from_iteration <= iteration
                and (args.straggler_until_iteration is None or iteration < args.straggler_until_iteration)
            )
        device.slowdown = args.straggler_slowdown if straggling and rank == args.straggler_rank else 1.0
        start_s = device.now_s()
        frequency_optimizer.on_step_begin()
        schedule = frequency_optimizer.schedule
        assert schedule is not None
        inputs: dict[int, torch.Tensor] = {}
        outputs: dict[int, torch.Tensor] = {}
        forward_end_s: dict[int, float] = {}
        pending: list[Any] = []
        optimizer.zero_grad()
        for name, microbatch in order:
            if name == "forward":
                if stage == 0:
                    features = torch.randn(activation_shape, generator=generator)
                    arrival_s = start_s
                else:
                    features, arrival_s = receive(rank - 1)
                    features.requires_grad_()
                inputs[microbatch] = features
            else:
                if stage == stages - 1:
                    gradient, arrival_s = None, forward_end_s[microbatch]
                else:
                    gradient, arrival_s = receive(rank + 1)
            device.idle_until(arrival_s)  # blocked on the input; the instruction starts when it is here
            frequency_optimizer.on_instruction_begin(name)
            frequency_optimizer.wait_for_clock()  # the device charges the clock locked when it starts
            _, end_s = device.run(name, arrival_s)
            if name == "forward":
                output = model(inputs[microbatch])
                if stage == stages - 1:
                    labels = (inputs[microbatch].detach() @ teacher).argmax(dim=1)
                    output = loss_function(output, labels) / microbatches
                outputs[microbatch] = output
                forward_end_s[microbatch] = end_s
            else:
                output = outputs.pop(microbatch)
                output.backward(gradient)
            frequency_optimizer.on_instruction_end(name)
            if name == "forward" and stage < stages - 1:
                pending.append(send(outputs[microbatch], end_s, rank + 1))
            if name == "backward" and stage > 0:
                grad = inputs.pop(microbatch).grad
                assert grad is not None
                pending.append(send(grad, end_s, rank - 1))
        for _, handle in pending:
            handle.wait()
        # Data-parallel gradient synchronisation (real; no virtual time, as in the model).
        if dp > 1:
            for parameter in model.parameters():
                assert parameter.grad is not None
                dist.all_reduce(parameter.grad, group=my_group)
                parameter.grad /= dp
        optimizer.step()
        # Every rank agrees on the iteration's virtual end and idles until it.
        end = torch.tensor([device.now_s()], dtype=torch.float64)
        dist.all_reduce(end, op=dist.ReduceOp.MAX)
        device.idle_until(float(end))
        frequency_optimizer.on_step_end()
        record = frequency_optimizer.history[-1]
        totals = torch.tensor([record["energy_j"]], dtype=torch.float64)
        dist.all_reduce(totals)
        # The model's prediction for what ran: every pipeline's schedules with the slowdowns in force.
        schedules: list[Any] = [None] * world_size
        dist.all_gather_object(schedules, (schedule.frequencies, device.slowdown, schedule.phase,
                                           schedule.round, schedule.predicted))
        if rank == 0:
            row = report_iteration(args, profile, iteration, float(end) - start_s, float(totals), schedules,
                                   frequency_optimizer)
            summary["iterations"].append(row)
        if schedule.phase == "planned":
            planned_done += 1
        iteration += 1
    if rank == 0:
        summary.update(
            stages=stages, microbatches=microbatches, dp=dp, server=args.server, job_id=frequency_optimizer.job_id,
            p_blocking_w=args.p_blocking_w, clock_stats=frequency_optimizer.clock_stats,
            wall_time_s=time.monotonic() - started_wall,
        )
        planned = [row for row in summary["iterations"] if row["phase"] == "planned"]
        summary["max_time_error"] = max((row["time_error"] for row in planned), default=0.0)
        summary["max_energy_error"] = max((row["energy_error"] for row in planned), default=0.0)
        print(f"done: {len(planned)} planned iterations; largest error vs the model: time "
              f"{100 * summary['max_time_error']:.3f}%, energy {100 * summary['max_energy_error']:.3f}%", flush=True)
        if args.json:
            print(json.dumps(summary), flush=True)
    frequency_optimizer.close()
    dist.barrier()
    dist.destroy_process_group()


def report_iteration(args: argparse.Namespace, profile: str, iteration: int, time_s: float, energy_j: float,
                     schedules: list[Any], frequency_optimizer: Any) -> dict[str, Any]:
    """Rank 0: the iteration's line (and JSON row), measured against the model."""
    from joule import _joule

    stages, dp = args.stages, args.dp
    _, _, phase, round_, planned = schedules[0]
    pipelines = []
    for d in range(dp):
        ranks = schedules[d * stages:(d + 1) * stages]
        pipelines.append(_joule._pipeline_evaluate(profile, args.microbatches, [r[0] for r in ranks],
                                                   args.p_blocking_w, [r[1] for r in ranks]))
    predicted_time_s = max(p["time_s"] for p in pipelines)
    predicted_energy_j = sum(p["energy_j"] + args.p_blocking_w * stages * (predicted_time_s - p["time_s"])
                             for p in pipelines)
    time_error = relative_error(time_s, predicted_time_s)
    energy_error = relative_error(energy_j, predicted_energy_j)
    row: dict[str, Any] = {
        "iteration": iteration, "phase": phase, "round": round_, "time_s": time_s, "energy_j": energy_j,
        "predicted_time_s": predicted_time_s, "predicted_energy_j": predicted_energy_j,
        "time_error": time_error, "energy_error": energy_error,
        "slowdowns": [r[1] for r in schedules],
    }
    # What the planner gave each pipeline: its pace (a straggler's T' for the pipelines it slows down).
    row["pipeline_planned_time_s"] = [
        (schedules[d * stages][4] or {}).get("iteration_time_s") for d in range(dp)
    ]
    if planned:
        row["planned_time_s"] = planned.get("iteration_time_s")
        row["planned_energy_j"] = None if planned.get("iteration_energy_j") is None else dp * planned["iteration_energy_j"]
    if phase != "planned":
        print(f"iteration {iteration} ({phase}, round {round_}): time {time_s:.4f} s, energy {energy_j:.1f} J "
              f"(model {predicted_time_s:.4f} s, {predicted_energy_j:.1f} J)", flush=True)
        return row
    max_clock_energy_j = planned.get("max_clock_energy_j") if planned else None
    saving = ""
    if max_clock_energy_j:
        baseline_j = dp * max_clock_energy_j
        row["max_clock_energy_j"] = baseline_j
        row["max_clock_time_s"] = planned.get("max_clock_time_s")
        row["saving_pct"] = 100 * (1 - energy_j / baseline_j)
        saving = f"; {row['saving_pct']:.1f}% less energy than all-max clocks ({baseline_j:.1f} J)"
    print(f"iteration {iteration}: time {time_s:.4f} s (predicted {predicted_time_s:.4f} s, error "
          f"{100 * time_error:.3f}%), energy {energy_j:.1f} J (predicted {predicted_energy_j:.1f} J, error "
          f"{100 * energy_error:.3f}%){saving}", flush=True)
    # Against the planner's own prediction (from the profile it measured, with the blocking power it measured):
    # when every pipeline runs the same plan at full speed, the job's iteration is that plan's.
    same_plan = all(r[4] == planned for r in schedules) and all(r[1] == 1.0 for r in schedules)
    if planned and same_plan and planned.get("iteration_time_s") and planned.get("iteration_energy_j"):
        plan_time_error = relative_error(time_s, planned["iteration_time_s"])
        plan_energy_error = relative_error(energy_j, dp * planned["iteration_energy_j"])
        row["plan_time_error"], row["plan_energy_error"] = plan_time_error, plan_energy_error
        print(f"  the planner predicted {planned['iteration_time_s']:.4f} s, {dp * planned['iteration_energy_j']:.1f} J: "
              f"error {100 * plan_time_error:.3f}% in time, {100 * plan_energy_error:.3f}% in energy", flush=True)
        time_error = max(time_error, plan_time_error)
        energy_error = max(energy_error, plan_energy_error)
    if time_error > PREDICTION_TOLERANCE or energy_error > PREDICTION_TOLERANCE:
        raise RuntimeError(f"iteration {iteration}: the measurement is more than "
                           f"{100 * PREDICTION_TOLERANCE:.0f}% off the model")
    return row


def check_imports() -> None:
    """Exits 2 with one line saying how, if the workers could not import joule or torch."""
    try:
        import joule  # noqa: F401
    except ImportError as error:
        print(f"{sys.argv[0]}: cannot import joule ({error}); build it (make demo), then run this from the "
              f"source folder as: PYTHONPATH=build/python python3 {sys.argv[0]}", file=sys.stderr)
        sys.exit(2)
    try:
        import torch  # noqa: F401
    except ImportError as error:
        print(f"{sys.argv[0]}: cannot import torch ({error}); install PyTorch (Debian: sudo apt install "
              f"python3-torch) and run this with that Python: PYTHONPATH=build/python /usr/bin/python3 "
              f"{sys.argv[0]}", file=sys.stderr)
        sys.exit(2)


def main() -> int:
    check_imports()
    args = parse_args()
    import torch.multiprocessing as mp

    profile = profile_text(args.profile, args.stages)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(worker, args=(args, free_port(), profile), nprocs=args.stages * args.dp, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
