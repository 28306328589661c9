# SPDX-License-Identifier: Apache-2.0
"""`joule infer govern` end to end, without a GPU: a `joule daemon` serving a simulated GPU, the example engine
(examples/serve_llm.py) running on it in real time and exporting vLLM's metric names, the sidecar governing the
GPU's clock through the daemon, and `joule infer bench` replaying a bursty trace against the engine.

It checks what a user of the sidecar relies on: the clock goes down while the load is calm and back up
when a burst needs it, the SLO holds, the per-request energies (with the idle energy) add up to the GPU's
counter over the run, and a sidecar killed with -9 has its clock restored by the daemon."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.torch, pytest.mark.govern]

SOURCE = Path(os.environ.get("JOULE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
SLO_TTFT_S = 1.0
# Tight enough that the calm load's clock is set by TPOT, so the burst's longer iterations need a higher one.
SLO_TPOT_S = 0.05
CALM_S = 20.0
BURST_S = (20.0, 28.0)


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def bursty_trace(path: Path) -> None:
    """20 s calm (one short request a second), a burst that ramps over 3 s up to 8 requests a second with
    5 times longer prompts and holds 5 s, then 10 s calm again."""
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    t = 0.0
    while t < CALM_S:
        rows.append(f"{t:.3f},40,24")
        t += 1.0
    t = BURST_S[0]
    while t < BURST_S[1]:
        rows.append(f"{t:.3f},200,40")
        t += 1.0 / min(8.0, 2.0 + 2.0 * (t - BURST_S[0]))  # 2, 4, 6, then 8 requests a second
    t = BURST_S[1]
    while t < BURST_S[1] + 10:
        rows.append(f"{t:.3f},40,24")
        t += 1.0
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture
def stack(tmp_path, joule_binary):
    """A daemon with one simulated GPU and the example engine on it; yields (socket, engine URL, audit log)."""
    socket = tmp_path / "joule.sock"
    audit = tmp_path / "audit.log"
    processes: list[subprocess.Popen] = []
    daemon = subprocess.Popen(
        [str(joule_binary), "--sim", "v100", "daemon", "--socket", str(socket), "--audit-log", str(audit),
         "--lease-s", "5"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    processes.append(daemon)
    try:
        wait_for(socket.exists, 10, "the daemon's socket")
        engine = subprocess.Popen(
            [sys.executable, str(SOURCE / "examples" / "serve_llm.py"), "--port", "0", "--gpu-daemon", str(socket),
             "--engine-metrics", "vllm", "--gpu", "h100", "--model", "llama-3-8b", "--max-batch", "32"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        processes.append(engine)
        line = engine.stdout.readline()
        assert line.startswith("listening on "), line + engine.stderr.read()
        yield socket, line.split()[-1], audit
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def govern_once(joule_binary, socket: Path, url: str, folder: Path):
    """The sidecar on the engine while `joule infer bench` replays the bursty trace. Returns the running sidecar,
    its decisions, the bench's report and the rows of its per-request CSV."""
    folder.mkdir()
    decisions = folder / "decisions.jsonl"
    sidecar = subprocess.Popen(
        [str(joule_binary), "--daemon", str(socket), "infer", "govern", "--engine", url, "--slo-ttft-s",
         str(SLO_TTFT_S), "--slo-tpot-s", str(SLO_TPOT_S), "--interval-s", "0.5", "--decisions-out",
         str(decisions), "--lock-dir", str(folder)],  # its own: a concurrent run governs a GPU of the same UUID
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert sidecar.stdout.readline().startswith("governing "), sidecar.stderr.read()
        trace = folder / "bursty.csv"
        bursty_trace(trace)
        bench = subprocess.run(
            [str(joule_binary), "--daemon", str(socket), "infer", "bench", "--endpoint", url, "--trace", str(trace),
             "--prompt-unit", "char", "--format", "json", "--requests-out", str(folder / "requests.csv")],
            capture_output=True, text=True, timeout=120)
        assert bench.returncode == 0, bench.stderr
    except BaseException:
        sidecar.kill()
        sidecar.wait()
        raise
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    return sidecar, lines, json.loads(bench.stdout), (folder / "requests.csv").read_text().splitlines()


def timing_problems(lines: list[dict], report: dict) -> list[str]:
    """What depends on the machine's pace: the clock's path and the latencies (the example is Python in real
    time, so a machine starved of CPU slows its steps whatever the clock)."""
    start = lines[0]["time_s"]
    top = lines[0]["knob"]["value"]

    def knobs(from_s: float, to_s: float) -> list[int]:
        return [line["knob"]["value"] for line in lines if from_s <= line["time_s"] - start < to_s and line["knob"]]

    story = "; ".join(f"{l['time_s'] - start:.1f}s {l['knob']['value']} {l['reason']}" for l in lines if l["changed"])
    problems = []
    # Down while calm, and back up in the burst: its longer iterations at the calm clock would pass the TPOT SLO.
    if not min(knobs(0, CALM_S)) < 0.8 * top:
        problems.append("the clock did not go well down while calm")
    before_burst = knobs(CALM_S - 1, CALM_S)[-1]
    if not max(knobs(*BURST_S)) > before_burst:
        problems.append("the clock never went up in the burst")
    # The SLO holds (the example reports each request's TTFT and TPOT; p99 over the run).
    if report["p99_ttft_s"] > SLO_TTFT_S:
        problems.append(f"p99 TTFT {report['p99_ttft_s']:.3f} s over the SLO")
    if report["p99_tpot_s"] > SLO_TPOT_S:
        problems.append(f"p99 TPOT {report['p99_tpot_s']:.3f} s over the SLO")
    return [f"{problem}: {story}" for problem in problems]


def test_the_sidecar_governs_the_example_engine_through_the_daemon(stack, tmp_path, joule_binary):
    socket, url, audit = stack
    # A real-time run on a shared machine: one more try, on the same engine, when only what depends on the
    # machine's pace missed (CI runs other suites beside this one). Everything else is checked on the run kept.
    sidecar, lines, report, rows = govern_once(joule_binary, socket, url, tmp_path / "run1")
    problems = timing_problems(lines, report)
    if problems:
        print("first run:", *problems, sep="\n  ", file=sys.stderr)
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(timeout=10)
        sidecar, lines, report, rows = govern_once(joule_binary, socket, url, tmp_path / "run2")
        problems = timing_problems(lines, report)
    try:
        assert not problems, "\n".join(problems)
        # The sidecar ran the whole time and never lost the engine.
        assert all(line["state"] != "waiting" for line in lines), [l["reason"] for l in lines if l["state"] == "waiting"]
        assert report["requests_ok"] == report["requests"]
        # Per-request energies and the idle energy add up to the GPU's counter over the run, within 1%.
        header = rows[0].split(",")
        column = header.index("energy_j")
        requests_j = sum(float(row.split(",")[column]) for row in rows[1:])
        assert requests_j + report["idle_energy_j"] == pytest.approx(report["energy_j"], rel=0.01)
        assert report["gpus"][0]["source"] == "counter"
        # Killed with -9, the sidecar restores nothing itself: the daemon does, as the connection goes.
        locked_before = "action=set gpu=0 setting=sm_clocks_mhz" in audit.read_text()
        assert locked_before
        sidecar.send_signal(signal.SIGKILL)
        sidecar.wait(timeout=10)
        wait_for(lambda: "setting=sm_clocks_mhz" in audit.read_text().split("reason=request")[-1] and
                 "action=restore gpu=0 setting=sm_clocks_mhz" in audit.read_text(), 10,
                 "the daemon to restore the clock")
    finally:
        if sidecar.poll() is None:
            sidecar.kill()
            sidecar.wait()
