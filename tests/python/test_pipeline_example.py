# SPDX-License-Identifier: Apache-2.0
"""examples/train_pipeline.py end to end: S × D processes (torch.distributed, gloo, loopback), hand-written
1F1B, simulated stage GPUs; server-less, against a fake server (the wire protocol with several ranks), and
against `joule serve` (skipped until the server answers /register_job)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from typing import Any

import pytest

from conftest import SOURCE_DIR, run_python
from test_pipeline import FakeServer

pytestmark = pytest.mark.torch

EXAMPLE = SOURCE_DIR / "examples" / "train_pipeline.py"
PROFILE = str(SOURCE_DIR / "data" / "perseus" / "example_s4_m8_profile.csv")


def summary_of(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.strip().splitlines()[-1])


def check_planned_iterations(summary: dict[str, Any], count: int) -> list[dict[str, Any]]:
    planned = [row for row in summary["iterations"] if row["phase"] == "planned"]
    assert len(planned) == count
    for row in planned:
        assert row["time_error"] < 0.03 and row["energy_error"] < 0.03, row
    return planned


def test_server_less_matches_the_model_and_saves_energy() -> None:
    result = run_python([str(EXAMPLE), "--stages", "4", "--microbatches", "8", "--iterations", "3", "--json"],
                        timeout_s=120)
    assert result.returncode == 0, result.stderr
    summary = summary_of(result.stdout)
    planned = check_planned_iterations(summary, 3)
    for row in planned:
        assert row["time_error"] < 1e-6 and row["energy_error"] < 1e-4  # the model, up to ns and mJ
        assert row["planned_time_s"] == pytest.approx(row["predicted_time_s"], rel=1e-9)
        assert row["planned_energy_j"] == pytest.approx(row["predicted_energy_j"], rel=1e-9)
        assert 0 < row["saving_pct"] < 50
    lines = result.stdout.splitlines()
    assert sum(1 for line in lines if line.startswith("iteration ") and "less energy than all-max clocks" in line) == 3
    assert summary["clock_stats"]["locks"] > 0


def test_data_parallel_pipelines_with_a_straggler() -> None:
    result = run_python([str(EXAMPLE), "--stages", "2", "--microbatches", "4", "--dp", "2", "--iterations", "3",
                         "--straggler-slowdown", "1.5", "--straggler-rank", "3", "--straggler-from-iteration", "1",
                         "--json"], timeout_s=120)
    assert result.returncode == 0, result.stderr
    planned = check_planned_iterations(summary_of(result.stdout), 3)
    assert planned[0]["slowdowns"] == [1.0, 1.0, 1.0, 1.0]
    assert planned[1]["slowdowns"] == [1.0, 1.0, 1.0, 1.5]
    assert planned[1]["time_s"] > planned[0]["time_s"] * 1.05  # everyone waits for the straggler
    assert planned[1]["energy_j"] > planned[0]["energy_j"]


class ScriptedPipelineServer:
    """A fake pipeline-frequency server for S ranks: one profiling round (1 iteration, every instruction
    at the highest clock), then the planner's fastest plan forever."""

    def __init__(self, stages: int, microbatches: int) -> None:
        from joule import _joule

        self.plan = _joule._pipeline_plan(PROFILE, microbatches, stages=stages, p_blocking_w=70.0)
        self.lock = threading.Lock()
        self.rounds: dict[int, int] = {}
        self.server = FakeServer(self.respond)

    def respond(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and path == "/register_job":
            return 200, "job-42"
        if method == "POST" and path == "/register_rank/job-42":
            return 200, None
        if method == "POST" and path == "/result/job-42":
            return 200, None
        if method == "GET" and path.startswith("/schedule/job-42?rank="):
            rank = int(path.split("=")[1])
            with self.lock:
                round_ = self.rounds.get(rank, 0)
                self.rounds[rank] = round_ + 1
            planned = self.plan["schedules"][rank]
            if round_ == 0:
                return 200, {"rank": rank, "frequencies": [[name, 1410] for name, _ in planned], "round": 0,
                             "phase": "profiling", "iterations": 1, "predicted": None}
            return 200, {"rank": rank, "frequencies": [list(entry) for entry in planned], "round": 1,
                         "phase": "planned", "predicted": self.plan["predicted"]}
        return 404, {"detail": f"no route {method} {path}"}


def test_the_example_speaks_the_wire_protocol_from_every_rank() -> None:
    fake = ScriptedPipelineServer(stages=2, microbatches=4)
    try:
        result = run_python([str(EXAMPLE), "--stages", "2", "--microbatches", "4", "--iterations", "2",
                             "--profile", PROFILE, "--p-blocking-w", "70", "--server", fake.server.url, "--json"],
                            timeout_s=120)
        requests = list(fake.server.requests)
    finally:
        fake.server.close()
    assert result.returncode == 0, result.stderr
    summary = summary_of(result.stdout)
    assert summary["job_id"] == "job-42"
    assert [row["phase"] for row in summary["iterations"]] == ["profiling", "planned", "planned"]
    check_planned_iterations(summary, 2)
    paths = [(method, path) for method, path, _ in requests]
    assert paths.count(("POST", "/register_job")) == 1
    assert paths[0] == ("POST", "/register_job")
    assert requests[0][2]["pp_degree"] == 2 and requests[0][2]["num_microbatches"] == 4
    registered = sorted(body["rank"] for method, path, body in requests if path == "/register_rank/job-42")
    assert registered == [0, 1]
    for rank in (0, 1):
        mine = [(method, path) for method, path, body in requests
                if path.endswith(f"rank={rank}") or (body is not None and body.get("rank") == rank
                                                     and path.startswith("/result/"))]
        assert mine == [("GET", f"/schedule/job-42?rank={rank}"), ("POST", "/result/job-42"),
                        ("GET", f"/schedule/job-42?rank={rank}")]
    results = {body["rank"]: body for method, path, body in requests if path == "/result/job-42"}
    for rank, body in results.items():
        assert len(body["iter_time"]) == len(body["iter_energy"]) == 1
        assert [len(b) for b in body["time_breakdown"]["forward"]] == [4]
        assert [len(b) for b in body["energy_breakdown"]["backward"]] == [4]
    # The last stage finishes its own work before the first stage, whose backward ends the iteration.
    assert results[1]["iter_time"][0] < results[0]["iter_time"][0]


def server_answers_register_job(url: str) -> tuple[bool, str]:
    body = json.dumps({"job_id": "", "pp_degree": 1, "dp_degree": 1, "tp_degree": 1, "world_size": 1,
                       "job_metadata": None, "num_microbatches": 1}).encode()
    request = urllib.request.Request(url + "/register_job", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status == 200, f"HTTP {response.status}"
    except urllib.error.HTTPError as error:
        return False, f"HTTP {error.code}"
    except OSError as error:
        return False, str(error)


def test_the_example_against_joule_serve(serve: str) -> None:
    answers, status = server_answers_register_job(serve)
    assert answers, f"joule serve refuses POST /register_job: {status}"
    result = run_python([str(EXAMPLE), "--stages", "4", "--microbatches", "8", "--iterations", "3",
                         "--server", serve, "--json"], timeout_s=170)
    assert result.returncode == 0, result.stderr
    summary = summary_of(result.stdout)
    phases = [row["phase"] for row in summary["iterations"]]
    assert phases[0] == "warmup"
    # The sweep stops where every stage's energy rises (about 33 of the profile's 41 clocks, 4 per iteration).
    assert 5 <= phases.count("profiling") <= 11, phases
    planned = check_planned_iterations(summary, 3)
    for row in planned:
        # Measured against the planner's own prediction, from the profile and blocking power it measured.
        assert abs(row["plan_time_error"]) < 0.03 and abs(row["plan_energy_error"]) < 0.03, row
        assert row["saving_pct"] > 5
    assert "less energy than all-max clocks" in result.stdout


def test_the_server_follows_a_straggler_and_its_recovery(serve: str) -> None:
    # Two pipelines of 2 stages; rank 3 (pipeline 1) is 20% slower for a while after planning. Rounds are 2
    # iterations once planned and detection confirms over 2 rounds, so the others slow down within 4 to 6
    # iterations of the straggler starting, and speed up again as long after it recovers.
    result = run_python([str(EXAMPLE), "--stages", "2", "--microbatches", "4", "--dp", "2", "--iterations", "24",
                         "--server", serve, "--straggler-slowdown", "1.2", "--straggler-rank", "3",
                         "--straggler-planned-from", "4", "--straggler-planned-until", "14", "--json"],
                        timeout_s=170)
    assert result.returncode == 0, result.stderr
    planned = [row for row in summary_of(result.stdout)["iterations"] if row["phase"] == "planned"]
    fastest_s = planned[0]["planned_time_s"]
    slowed = [row["pipeline_planned_time_s"][0] > fastest_s * 1.1 for row in planned]
    assert not any(slowed[:4]), slowed
    first_slowed = slowed.index(True)
    assert 4 < first_slowed <= 10, slowed
    # T' is the straggler pipeline's own pace: one of its two stages 20% slower makes it about 16% slower, and
    # before the others slowed down, the job's iteration took exactly that long.
    assert planned[first_slowed]["pipeline_planned_time_s"][0] == pytest.approx(planned[4]["time_s"], rel=0.01)
    assert planned[first_slowed]["pipeline_planned_time_s"][1] == pytest.approx(fastest_s, rel=1e-9)
    last_slowed = len(slowed) - 1 - slowed[::-1].index(True)
    assert 14 <= last_slowed < 20, slowed
    assert not any(slowed[20:]), slowed
    # Detection never flapped: one slow stretch.
    assert all(slowed[first_slowed:last_slowed + 1]), slowed
