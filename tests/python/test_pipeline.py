# SPDX-License-Identifier: Apache-2.0
"""The pipeline runtime from Python: PipelineStageDevice, SettingsGuard, ClockApplier and
StageFrequencyController, and PipelineFrequencyOptimizer against a fake pipeline-frequency server (the exact
wire protocol), server-less from a profile or a plan file, and out of step with its schedule."""

from __future__ import annotations

import json
import pathlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import pytest

import joule
from joule import _joule
from conftest import SOURCE_DIR

PROFILE = str(SOURCE_DIR / "data" / "perseus" / "example_s4_m8_profile.csv")
BLOCKING_W = 75.0


def option(stage: int, instruction: str, mhz: int) -> tuple[float, float]:
    """(time_s, energy_j) of the example profile's row."""
    for line in pathlib.Path(PROFILE).read_text().splitlines()[1:]:
        s, name, frequency, time_s, energy_j = line.split(",")
        if int(s) == stage and name == instruction and int(frequency) == mhz:
            return float(time_s), float(energy_j)
    raise AssertionError(f"no row {stage} {instruction} {mhz}")


# PipelineStageDevice ------------------------------------------------------------------------------------------

def test_stage_device_runs_at_the_locked_clock_and_idles_at_the_blocking_power() -> None:
    device = joule.PipelineStageDevice(PROFILE, 1, p_blocking_w=BLOCKING_W)
    gpu = device.gpu
    assert isinstance(gpu, joule.Gpu)
    assert gpu.has_energy_counter and gpu.backend == "sim"
    assert 1200 in gpu.supported_sm_clocks_mhz()
    gpu.lock_sm_clocks_mhz(1200, 1200)
    time_s, energy_j = option(1, "forward", 1200)
    device.idle_until(0.5)
    start_s, end_s = device.run("forward", 1.0)  # its input arrives at 1 s
    assert start_s == 1.0
    assert end_s == pytest.approx(1.0 + time_s, abs=1e-12)
    assert device.now_s() == end_s
    assert gpu.energy_j() == pytest.approx(BLOCKING_W * 1.0 + energy_j, abs=2e-3)
    device.slowdown = 2.0
    before_j = gpu.energy_j()
    start_s, end_s = device.run("forward")
    assert end_s - start_s == pytest.approx(2 * time_s, abs=1e-12)
    assert gpu.energy_j() - before_j == pytest.approx(2 * energy_j, abs=2e-3)
    assert [r["setting"] for r in device.settings_log()] == ["sm_clocks_locked_mhz"]
    with pytest.raises(joule.InvalidArgumentError, match="unknown instruction \"sideways\": expected forward or backward"):
        device.run("sideways")
    with pytest.raises(joule.InvalidArgumentError, match="slowdown"):
        device.slowdown = 0.0
    with pytest.raises(joule.InvalidArgumentError, match="stage 7 is not in the profile"):
        joule.PipelineStageDevice(PROFILE, 7)


def test_stage_device_accepts_csv_text() -> None:
    text = "stage,instruction,frequency_mhz,time_s,energy_j\n0,forward,1410,0.01,2\n0,backward,1410,0.02,4\n"
    device = joule.PipelineStageDevice(text, 0, p_blocking_w=50)
    assert device.run("backward") == (0.0, pytest.approx(0.02))
    assert device.gpu.energy_j() == pytest.approx(4.0, abs=2e-3)


def test_settings_guard_and_clock_applier() -> None:
    device = joule.PipelineStageDevice(PROFILE, 0)
    guard = joule.SettingsGuard("test", restore_on_signals=False)
    applier = _joule.ClockApplier(guard, device.gpu)
    for mhz in (1200, 1200, 1005, 1410):
        applier.request(mhz)
    assert applier.wait(10.0)
    stats = applier.stats()
    assert stats["applied_mhz"] == 1410 and stats["requested_mhz"] == 1410
    assert 1 <= stats["locks"] <= 3  # the latest request wins; intermediate ones may be skipped
    assert guard.changed
    applier.request(5000)  # above the GPU's clocks: the lock fails on the thread, the error comes next
    with pytest.raises(joule.OutOfRangeError, match="locking GPU 0 .* to 5000 MHz"):
        applier.wait(10.0)
    applier.close()
    guard.restore()
    assert not guard.changed
    assert device.settings_log()[-1]["setting"] == "sm_clocks_reset"


def test_stage_frequency_controller_is_the_cpp_stage_runtime() -> None:
    """The controller PipelineFrequencyOptimizer drives (plan::FrequencyController, asynchronous): it checks the
    order, locks on its thread, and restores on close()."""
    device = joule.PipelineStageDevice(PROFILE, 0)
    controller = _joule.StageFrequencyController(device.gpu, [("forward", 1200), ("backward", 1410)],
                                                 label="stage 0", end_call="on_step_end()",
                                                 restore_on_signals=False)
    controller.prepare_next()
    assert controller.wait(10.0) and controller.position == 0
    controller.begin("forward")
    with pytest.raises(joule.StateError, match=r"^stage 0: the training loop is out of step with its frequency "
                                               r"schedule: instruction 2 of 2 should be 'backward', got 'forward'$"):
        controller.begin("forward")
    with pytest.raises(joule.InvalidArgumentError, match="unknown instruction"):
        controller.begin("sideways")
    with pytest.raises(joule.StateError, match="the iteration ended after 1 of 2 instructions"):
        controller.check_iteration_complete()
    controller.begin("backward")
    controller.end_iteration()
    assert controller.wait(10.0)
    assert controller.stats()["applied_mhz"] == 1410
    with pytest.raises(joule.OutOfRangeError, match="does not support the SM clock 5000 MHz"):
        controller.set_schedule([("forward", 5000)])
    controller.close()
    assert device.settings_log()[-1]["setting"] == "sm_clocks_reset"
    with pytest.raises(joule.StateError, match="stage 0: the frequency controller is closed"):
        controller.begin("forward")


# A fake pipeline-frequency server ------------------------------------------------------------------------------

class FakeServer:
    """Records every request; answers from `respond(method, path, body)` → (status, JSON body)."""

    def __init__(self, respond: Callable[[str, str, Any], tuple[int, Any]]) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.request_ids: list[Any] = []  # each request's X-Request-Id (None without)
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def handle_one(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                with server.lock:
                    server.requests.append((method, self.path, body))
                    server.request_ids.append(self.headers.get("X-Request-Id"))
                answered = respond(method, self.path, body)
                status, answer = answered[0], answered[1]
                data = json.dumps(answer).encode()
                self.send_response(status)
                for name, value in (answered[2] if len(answered) > 2 else {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                self.handle_one("GET")

            def do_POST(self) -> None:  # noqa: N802
                self.handle_one("POST")

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server() -> Iterator[Callable[[Callable[[str, str, Any], tuple[int, Any]]], FakeServer]]:
    servers: list[FakeServer] = []

    def start(respond: Callable[[str, str, Any], tuple[int, Any]]) -> FakeServer:
        servers.append(FakeServer(respond))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


# One stage, two microbatches: F0 F1 B0 B1 (1F1B with S = 1).
ONE_STAGE = ["forward", "forward", "backward", "backward"]


def scripted(rounds: list[dict[str, Any]]) -> Callable[[str, str, Any], tuple[int, Any]]:
    """A server for one rank: register_job → 'job-7', register_rank → null, schedules in turn."""
    remaining = list(rounds)

    def respond(method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and path == "/register_job":
            return 200, "job-7"
        if method == "POST" and path.startswith("/register_rank/"):
            return 200, None
        if method == "GET" and path.startswith("/schedule/"):
            return 200, remaining.pop(0)
        if method == "POST" and path.startswith("/result/"):
            return 200, None
        return 404, {"detail": f"no route {method} {path}"}

    return respond


def run_iteration(optimizer: joule.PipelineFrequencyOptimizer, device: joule.PipelineStageDevice,
                  names: list[str]) -> None:
    optimizer.on_step_begin()
    for name in names:
        optimizer.on_instruction_begin(name)
        optimizer.wait_for_clock()
        device.run(name)
        optimizer.on_instruction_end(name)
    optimizer.on_step_end()


def test_optimizer_speaks_the_wire_protocol(fake_server: Callable[..., FakeServer]) -> None:
    profiling = {"rank": 0, "frequencies": [["forward", 1410], ["forward", 1200], ["backward", 1410],
                                            ["backward", 1005]],
                 "round": 0, "phase": "profiling", "iterations": 2, "predicted": None}
    planned = {"rank": 0, "frequencies": [["forward", 1305], ["forward", 1305], ["backward", 1410],
                                          ["backward", 1410]],
               "round": 1, "phase": "planned", "predicted": {"iteration_time_s": 0.2, "iteration_energy_j": 50.0,
                                                             "max_clock_time_s": 0.2, "max_clock_energy_j": 55.0}}
    server = fake_server(scripted([profiling, planned]))
    device = joule.PipelineStageDevice(PROFILE, 0, p_blocking_w=BLOCKING_W)
    with joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, server.url, "meta", stage_device=device,
                                          num_microbatches=2) as optimizer:
        assert optimizer.job_id == "job-7"
        for _ in range(5):
            run_iteration(optimizer, device, ONE_STAGE)
        assert optimizer.phase == "planned" and optimizer.predicted == planned["predicted"]
        clocks = [r["value"] for r in device.settings_log() if r["setting"] == "sm_clocks_locked_mhz"]
    assert clocks[:5] == [1410, 1200, 1410, 1005, 1410]  # iteration 1: each instruction's clock
    assert set(clocks[8:]) <= {1305, 1410}
    assert device.settings_log()[-1]["setting"] == "sm_clocks_reset"  # close() restores

    paths = [(method, path) for method, path, _ in server.requests]
    assert paths == [
        ("POST", "/register_job"),
        ("POST", "/register_rank/job-7"),
        ("GET", "/schedule/job-7?rank=0"),
        ("POST", "/result/job-7"),
        ("GET", "/schedule/job-7?rank=0"),  # planned: no iterations, so run it forever, no more results
    ]
    assert server.requests[0][2] == {"job_id": "", "pp_degree": 1, "dp_degree": 1, "tp_degree": 1,
                                     "world_size": 1, "job_metadata": "meta", "num_microbatches": 2}
    rank_info = server.requests[1][2]
    assert {k: rank_info[k] for k in ("rank", "dp_rank", "pp_rank", "tp_rank")} == {
        "rank": 0, "dp_rank": 0, "pp_rank": 0, "tp_rank": 0}
    frequencies = rank_info["available_frequencies"]
    assert frequencies == sorted(frequencies, reverse=True) and 1410 in frequencies and 1005 in frequencies

    result = server.requests[3][2]
    assert set(result) == {"rank", "round", "iter_time", "iter_energy", "time_breakdown", "energy_breakdown"}
    assert result["rank"] == 0
    assert result["round"] == 0  # joule's extension: a late copy of this result cannot count for round 1
    f1410, f1200 = option(0, "forward", 1410), option(0, "forward", 1200)
    b1410, b1005 = option(0, "backward", 1410), option(0, "backward", 1005)
    assert len(result["iter_time"]) == len(result["iter_energy"]) == 2
    for i in range(2):
        assert result["time_breakdown"]["forward"][i] == pytest.approx([f1410[0], f1200[0]], abs=1e-9)
        assert result["time_breakdown"]["backward"][i] == pytest.approx([b1410[0], b1005[0]], abs=1e-9)
        assert result["energy_breakdown"]["forward"][i] == pytest.approx([f1410[1], f1200[1]], abs=3e-3)
        assert result["energy_breakdown"]["backward"][i] == pytest.approx([b1410[1], b1005[1]], abs=3e-3)
        total_s = f1410[0] + f1200[0] + b1410[0] + b1005[0]
        assert result["iter_time"][i] == pytest.approx(total_s, abs=1e-9)
        assert result["iter_energy"][i] == pytest.approx(f1410[1] + f1200[1] + b1410[1] + b1005[1], abs=5e-3)


CARDS = SOURCE_DIR / "data" / "cards"


def test_a_card_goes_with_the_job_once_checked_against_the_gpu(
        fake_server: Callable[..., FakeServer], tmp_path: pathlib.Path) -> None:
    """card= is read against this rank's GPU (plan::read_stage_card) and rank 0 sends it with the job; a card
    of another GPU, of a newer schema, or server-less is refused before anything is sent."""
    server = fake_server(scripted([]))
    gpu = joule.devices(sim="v100", virtual_clock=True, cpus=False).gpus[0]
    args = (0, 0, 0, 0, 0, 1, 1, 1, 1)
    with joule.PipelineFrequencyOptimizer(*args, server.url, gpu=gpu, num_microbatches=2, sync_fn=None,
                                          steady_state="off", card=str(CARDS / "sim-v100.json")):
        pass
    body = server.requests[0][2]
    assert server.requests[0][1] == "/register_job"
    assert body["card"]["device"]["model"] == "Tesla V100-PCIE-32GB (simulated)"
    assert body["card"]["schema_version"] == 1
    assert {f["knob"] for f in body["card"]["frontiers"]} >= {"sm_clock"}
    sent = len(server.requests)

    other = str(CARDS / "sim-a40.json")
    with pytest.raises(joule.InvalidArgumentError) as refused:
        joule.PipelineFrequencyOptimizer(*args, server.url, gpu=gpu, num_microbatches=2, sync_fn=None,
                                         steady_state="off", card=other)
    assert str(refused.value) == (
        f"{other} is for NVIDIA A40 (simulated) (driver sim), not Tesla V100-PCIE-32GB (simulated) (driver sim): "
        "make a card for this device with 'joule probe'")
    card = json.loads((CARDS / "sim-v100.json").read_text())
    card["schema_version"] = 2
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(card))
    with pytest.raises(joule.ParseError) as parse_error:
        joule.PipelineFrequencyOptimizer(*args, server.url, gpu=gpu, num_microbatches=2, sync_fn=None,
                                         steady_state="off", card=str(newer))
    assert str(parse_error.value) == (
        f"{newer}: card schema version 2 is newer than this joule reads (1): upgrade joule to read it")
    with pytest.raises(joule.InvalidArgumentError) as server_less:
        joule.PipelineFrequencyOptimizer(*args, None, gpu=gpu, profile=PROFILE, num_microbatches=2, sync_fn=None,
                                         card=str(CARDS / "sim-v100.json"))
    assert str(server_less.value).startswith("card= is for the form with a server")
    assert len(server.requests) == sent  # nothing sent for a refused card


def test_optimizer_reports_the_time_before_waiting_on_other_pipelines(fake_server: Callable[..., FakeServer]) -> None:
    round_ = {"rank": 0, "frequencies": [["forward", 1410], ["backward", 1410]], "iterations": 1}
    server = fake_server(scripted([round_]))
    device = joule.PipelineStageDevice(PROFILE, 0, p_blocking_w=BLOCKING_W)
    optimizer = joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, server.url, stage_device=device,
                                                 num_microbatches=1)
    optimizer.on_step_begin()
    for name in ("forward", "backward"):
        optimizer.on_instruction_begin(name)
        optimizer.wait_for_clock()
        device.run(name)
        optimizer.on_instruction_end(name)
    own_s = device.now_s()
    device.idle_until(own_s + 1.0)  # waits a second on a slower pipeline
    optimizer.on_step_end()
    result = server.requests[-1][2]
    assert result["iter_time"] == [pytest.approx(own_s, abs=1e-9)]
    # The energy over the same window: the server measures the blocking power from the two.
    assert result["iter_energy"][0] == pytest.approx(
        option(0, "forward", 1410)[1] + option(0, "backward", 1410)[1], abs=5e-3)
    # The history keeps the whole step, the second of waiting included.
    assert optimizer.history[-1]["energy_j"] == pytest.approx(
        option(0, "forward", 1410)[1] + option(0, "backward", 1410)[1] + BLOCKING_W, abs=5e-3)
    optimizer.close()


def test_rank_other_than_zero_does_not_register_the_job(fake_server: Callable[..., FakeServer]) -> None:
    server = fake_server(scripted([]))
    device = joule.PipelineStageDevice(PROFILE, 1)
    with pytest.raises(joule.StateError, match="torch.distributed.init_process_group"):
        joule.PipelineFrequencyOptimizer(1, 0, 1, 0, 0, 1, 2, 1, 2, server.url, stage_device=device)
    assert server.requests == []


def test_server_errors_become_clear_exceptions(fake_server: Callable[..., FakeServer]) -> None:
    def respond(method: str, path: str, body: Any) -> tuple[int, Any]:
        if path == "/register_job":
            return 200, "job-9"
        if path.startswith("/register_rank/"):
            return 200, None
        return 409, {"detail": "rank 0 is not part of job job-9"}

    server = fake_server(respond)
    device = joule.PipelineStageDevice(PROFILE, 0)
    optimizer = joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, server.url, stage_device=device)
    with pytest.raises(joule.PipelineServerError) as raised:
        optimizer.on_step_begin()
    assert raised.value.status == 409
    assert raised.value.detail == "rank 0 is not part of job job-9"
    assert "GET " in str(raised.value) and "/schedule/job-9?rank=0" in str(raised.value)
    assert "HTTP 409: rank 0 is not part of job job-9" in str(raised.value)
    assert isinstance(raised.value, joule.Error)
    optimizer.close()

    def validation(method: str, path: str, body: Any) -> tuple[int, Any]:
        return 422, {"detail": [{"loc": ["body", "pp_degree"], "msg": "field required"}]}

    bad = fake_server(validation)
    with pytest.raises(joule.PipelineServerError, match="HTTP 422.*pp_degree"):
        joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, bad.url, stage_device=device)


def test_a_restarting_server_does_not_end_training(fake_server: Callable[..., FakeServer]) -> None:
    """Every route answers 503 twice (a server stopping, then back), GET /schedule also a 409 with Retry-After
    (joule serve's wait ended before the other ranks): each request is asked again, a state-changing one
    with the same X-Request-Id, and the loop goes on."""
    round_ = {"rank": 0, "frequencies": [["forward", 1410], ["backward", 1410]], "round": 3, "iterations": 1}
    answered = scripted([dict(round_), dict(round_)])
    seen: dict[str, int] = {}

    def respond(method: str, path: str, body: Any) -> tuple[Any, ...]:
        route = path.split("?")[0].rsplit("/", 1)[0] or path
        seen[route] = seen.get(route, 0) + 1
        if seen[route] <= 2:
            return 503, {"detail": "joule serve is stopping; retry the request"}
        if route == "/schedule" and seen[route] == 3:
            return 409, {"detail": "rank: job job-7 is waiting for 1 of 2 ranks to register"}, {"Retry-After": "0"}
        return answered(method, path, body)

    server = fake_server(respond)
    device = joule.PipelineStageDevice(PROFILE, 0, p_blocking_w=BLOCKING_W)
    optimizer = joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, server.url, stage_device=device,
                                                 num_microbatches=1)
    optimizer._client.backoff_s = 0.01  # noqa: SLF001 (the test's patience, not the client's behaviour)
    run_iteration(optimizer, device, ["forward", "backward"])
    optimizer.close()
    paths = [path.split("?")[0] for _, path, _ in server.requests]
    assert paths == ["/register_job"] * 3 + ["/register_rank/job-7"] * 3 + ["/schedule/job-7"] * 4 + [
        "/result/job-7"] * 3
    ids = server.request_ids
    # One id per state-changing request, the same on its every retry; none on GET.
    assert ids[0] == ids[1] == ids[2] and ids[0] is not None
    assert ids[3] == ids[4] == ids[5] and ids[3] not in (None, ids[0])
    assert ids[6:10] == [None] * 4
    assert ids[10] == ids[11] == ids[12] and ids[10] not in (None, ids[0], ids[3])
    assert server.requests[-1][2]["round"] == 3
    assert optimizer._client.retries == 9  # noqa: SLF001


def test_unreachable_server_is_an_io_error() -> None:
    device = joule.PipelineStageDevice(PROFILE, 0)
    with pytest.raises(joule.IoError, match="cannot reach the pipeline frequency server"):
        joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, "http://127.0.0.1:9", stage_device=device,
                                         retry_for_s=0)
    # By default it is asked again, with backoff, before giving up: a restarting server does not end training.
    client = joule.pipeline.PipelineServerClient("http://127.0.0.1:9", retry_for_s=0.3, backoff_s=0.05)
    with pytest.raises(joule.IoError, match="cannot reach the pipeline frequency server"):
        client.register_job({})
    assert client.retries >= 2
    with pytest.raises(joule.InvalidArgumentError, match=r"PipelineServerClient\(retry_for_s=...\): expected seconds"):
        joule.pipeline.PipelineServerClient("http://127.0.0.1:9", retry_for_s=-1)


def test_malformed_schedule_is_rejected(fake_server: Callable[..., FakeServer]) -> None:
    server = fake_server(scripted([{"rank": 0, "frequencies": [["sideways", 1410]]}]))
    device = joule.PipelineStageDevice(PROFILE, 0)
    optimizer = joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, server.url, stage_device=device)
    with pytest.raises(joule.InvalidArgumentError, match=r"frequencies\[0\] must be"):
        optimizer.on_step_begin()
    optimizer.close()


# Thermal warm-up -----------------------------------------------------------------------------------------------

# One stage, one microbatch, seconds per computation: the thermal model (τ = 45 s) settles in tens of
# iterations of virtual time.
SLOW_STAGE = "stage,instruction,frequency_mhz,time_s,energy_j\n0,forward,1410,1,200\n0,backward,1410,2,400\n"


class WarmupServer:
    """Zeus's protocol as joule serve runs the warm-up: a 'warmup' round (one iteration at the highest clock)
    again while the last result says thermally_steady false, then one profiling round, then the plan."""

    def __init__(self) -> None:
        self.results: list[dict[str, Any]] = []
        self.phase = "warmup"

    def respond(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if method == "POST" and path == "/register_job":
            return 200, "job-9"
        if method == "POST" and path.startswith("/register_rank/"):
            return 200, None
        if method == "POST" and path.startswith("/result/"):
            self.results.append(body)
            if self.phase == "warmup" and body.get("thermally_steady") is not False:
                self.phase = "profiling"
            elif self.phase == "profiling":
                self.phase = "planned"
            return 200, None
        frequencies = [["forward", 1410], ["backward", 1410]]
        return 200, {"rank": 0, "frequencies": frequencies, "round": len(self.results), "phase": self.phase,
                     "iterations": None if self.phase == "planned" else 1, "predicted": None}


def warm_up(fake_server: Callable[..., FakeServer], device: joule.PipelineStageDevice, iterations: int,
            **kwargs: Any) -> tuple[WarmupServer, joule.PipelineFrequencyOptimizer]:
    server = WarmupServer()
    url = fake_server(server.respond).url
    optimizer = joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, url, stage_device=device,
                                                 num_microbatches=1, **kwargs)
    for _ in range(iterations):
        run_iteration(optimizer, device, ["forward", "backward"])
        if optimizer.phase == "planned":
            break
    return server, optimizer


def test_a_cold_gpu_warms_up_until_it_is_thermally_steady(fake_server: Callable[..., FakeServer]) -> None:
    device = joule.PipelineStageDevice(SLOW_STAGE, 0, p_blocking_w=60)
    device.set_thermal(device.ambient_c)  # a cold start, power following temperature
    steady_state = {"mode": "steady", "window_s": 6, "temperature_band_c": 0.5, "max_wait_s": 600}
    server, optimizer = warm_up(fake_server, device, 200, steady_state=steady_state)
    assert optimizer.steady_state_mode == "steady"
    flags = [result.get("thermally_steady") for result in server.results]
    warmup = flags.index(True) + 1
    # Many warm-up rounds, every one but the last not steady; the profiling round does not carry the field.
    assert warmup > 10 and flags[:warmup] == [False] * (warmup - 1) + [True]
    assert flags[warmup:] == [None] and "thermally_steady" not in server.results[warmup]
    phases = [entry["phase"] for entry in optimizer.history]
    assert phases == ["warmup"] * warmup + ["profiling", "planned"]
    # Profiling began within half a degree per 6 s of the steady temperature: near it, not at 25 °C.
    warm_end_s = optimizer.history[warmup - 1]["end_s"]
    assert warm_end_s >= 6 and device.temperature_c() > 60
    optimizer.close()


def test_fixed_warmup_lasts_as_long_as_asked_and_off_reports_nothing(fake_server: Callable[..., FakeServer]) -> None:
    device = joule.PipelineStageDevice(SLOW_STAGE, 0, p_blocking_w=60)
    server, optimizer = warm_up(fake_server, device, 20, steady_state={"mode": "fixed", "fixed_warmup_s": 10})
    assert optimizer.steady_state_mode == "fixed"
    # 3 s per iteration: ready once 10 s have passed since the warm-up began, after the 4th iteration.
    assert [result.get("thermally_steady") for result in server.results] == [False, False, False, True, None]
    optimizer.close()
    # Simulated GPUs: 'auto' is off, as Zeus: one warm-up round and no field.
    for steady_state in ("auto", "off", None):
        device = joule.PipelineStageDevice(SLOW_STAGE, 0, p_blocking_w=60)
        server, optimizer = warm_up(fake_server, device, 5, steady_state=steady_state)
        assert optimizer.steady_state_mode == "off"
        assert len(server.results) == 2 and all("thermally_steady" not in r for r in server.results)
        optimizer.close()


def test_bad_steady_state_arguments_are_named() -> None:
    device = joule.PipelineStageDevice(SLOW_STAGE, 0)
    with pytest.raises(joule.InvalidArgumentError, match=r"unknown steady-state mode 'warm' \(expected off, fixed or steady\)"):
        joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, None, stage_device=device, profile=SLOW_STAGE,
                                         num_microbatches=1, steady_state="warm")
    with pytest.raises(joule.InvalidArgumentError, match=r"steady_state: unknown setting 'window'"):
        _joule.SteadyStateDetector(device, {"window": 5})


def test_steady_state_detector_binding() -> None:
    devices = joule.devices(sim="2xv100", virtual_clock=True, cpus=False)
    assert _joule.SteadyStateDetector(devices).mode == "off"  # simulated GPUs: 'auto' is off
    detector = _joule.SteadyStateDetector(devices, [1], {"mode": "fixed", "fixed_warmup_s": 5})
    assert detector.mode == "fixed" and not detector.ready() and not detector.timed_out()
    devices.advance(5)
    detector.sample()
    assert detector.ready() and detector.waited_s() == pytest.approx(5)
    assert detector.describe() == "ready after 5.0 s (fixed mode)"
    detector.restart()
    assert not detector.ready()
    # One Gpu timed by the caller's clock; steady mode times out after max_wait_s.
    now = [0.0]
    gpu = devices.gpus[0]
    timed = _joule.SteadyStateDetector(gpu, {"mode": "steady", "window_s": 1, "max_wait_s": 2}, time_fn=lambda: now[0])
    timed.sample()
    now[0] = 2.0
    assert timed.ready() and timed.timed_out()
    with pytest.raises(joule.InvalidArgumentError, match="time_fn must be None or a callable returning seconds"):
        _joule.SteadyStateDetector(gpu, "fixed", time_fn=3)


# Out of step ---------------------------------------------------------------------------------------------------

def local_optimizer(device: joule.PipelineStageDevice, stage: int = 0, **kwargs: Any) -> joule.PipelineFrequencyOptimizer:
    return joule.PipelineFrequencyOptimizer(stage, 0, stage, 0, 0, 1, 4, 1, 4, None, stage_device=device,
                                            profile=PROFILE, num_microbatches=8, p_blocking_w=BLOCKING_W, **kwargs)


def test_instruction_mismatches_are_clear_errors() -> None:
    device = joule.PipelineStageDevice(PROFILE, 3)
    optimizer = local_optimizer(device, stage=3)
    with pytest.raises(joule.StateError, match=r"on_instruction_begin\('forward'\) outside a step"):
        optimizer.on_instruction_begin("forward")
    optimizer.on_step_begin()
    with pytest.raises(joule.StateError, match="on_step_begin\\(\\) twice"):
        optimizer.on_step_begin()
    # The last stage of 4 runs F0 B0 F1 B1 …
    optimizer.on_instruction_begin("forward")
    with pytest.raises(joule.StateError, match=r"on_instruction_end\('backward'\), but the instruction begun is 'forward'"):
        optimizer.on_instruction_end("backward")
    optimizer.on_instruction_end("forward")
    with pytest.raises(joule.StateError, match=r"rank 3 \(stage 3\): the training loop is out of step with its "
                                               r"frequency schedule: instruction 2 of 16 should be 'backward', "
                                               r"got 'forward'"):
        optimizer.on_instruction_begin("forward")
    with pytest.raises(joule.StateError, match=r"the iteration ended after 1 of 16 instructions of its frequency "
                                               r"schedule; the next would have been 'backward'"):
        optimizer.on_step_end()
    for name in [name for name, _ in optimizer.schedule.frequencies][1:]:
        optimizer.on_instruction_begin(name)
        optimizer.on_instruction_end(name)
    with pytest.raises(joule.StateError, match="got 'forward' after all 16 instructions"):
        optimizer.on_instruction_begin("forward")
    optimizer.on_step_end()
    optimizer.close()
    with pytest.raises(joule.StateError, match="closed"):
        optimizer.on_step_begin()


# Server-less ---------------------------------------------------------------------------------------------------

def test_server_less_plan_from_a_profile_matches_the_model() -> None:
    """Four stages in one process, stepped in turn through the ASAP schedule; the measured iteration equals
    the planner's prediction."""
    devices = [joule.PipelineStageDevice(PROFILE, s, p_blocking_w=BLOCKING_W) for s in range(4)]
    optimizers = [local_optimizer(devices[s], stage=s) for s in range(4)]
    plan = optimizers[0].local_plan
    assert plan is not None and plan["stages"] == 4 and plan["microbatches"] == 8
    predicted = plan["predicted"]
    assert predicted["iteration_time_s"] <= predicted["max_clock_time_s"] + 1e-9
    assert predicted["iteration_energy_j"] < predicted["max_clock_energy_j"]
    for optimizer in optimizers:
        optimizer.on_step_begin()
    # Event-driven: run each stage's next instruction once its input has arrived.
    schedules = [o.schedule.frequencies for o in optimizers]
    positions = [0] * 4
    forward_done: dict[tuple[int, int], float] = {}
    backward_done: dict[tuple[int, int], float] = {}
    counters = [{"forward": 0, "backward": 0} for _ in range(4)]
    remaining = sum(len(s) for s in schedules)
    while remaining:
        progressed = False
        for s in range(4):
            if positions[s] == len(schedules[s]):
                continue
            name = schedules[s][positions[s]][0]
            m = counters[s][name]
            if name == "forward":
                ready = 0.0 if s == 0 else forward_done.get((s - 1, m))
            else:
                ready = forward_done.get((s, m)) if s == 3 else backward_done.get((s + 1, m))
            if ready is None:
                continue
            devices[s].idle_until(ready)
            optimizers[s].on_instruction_begin(name)
            optimizers[s].wait_for_clock()
            _, end_s = devices[s].run(name, ready)
            optimizers[s].on_instruction_end(name)
            (forward_done if name == "forward" else backward_done)[(s, m)] = end_s
            counters[s][name] += 1
            positions[s] += 1
            remaining -= 1
            progressed = True
        assert progressed
    end_s = max(d.now_s() for d in devices)
    for device, optimizer in zip(devices, optimizers):
        device.idle_until(end_s)
        optimizer.on_step_end()
    energy_j = sum(o.history[-1]["energy_j"] for o in optimizers)
    assert end_s == pytest.approx(predicted["iteration_time_s"], rel=1e-6)
    assert energy_j == pytest.approx(predicted["iteration_energy_j"], rel=1e-4)
    for optimizer in optimizers:
        optimizer.close()


def test_server_less_plan_for_a_slowdown_and_from_a_plan_file(tmp_path: pathlib.Path) -> None:
    fastest = _joule._pipeline_plan(PROFILE, 8, p_blocking_w=BLOCKING_W)
    slower = _joule._pipeline_plan(PROFILE, 8, p_blocking_w=BLOCKING_W, slowdown=1.2)
    assert slower["target_time_s"] == pytest.approx(1.2 * fastest["predicted"]["iteration_time_s"])
    assert slower["predicted"]["iteration_time_s"] == pytest.approx(slower["target_time_s"])
    # Blocking until the target on top of the slower plan still costs less than the fastest plan would.
    stretched_j = fastest["predicted"]["iteration_energy_j"] + BLOCKING_W * 4 * (
        slower["target_time_s"] - fastest["predicted"]["iteration_time_s"])
    assert slower["predicted"]["iteration_energy_j"] < stretched_j

    dag_plan = {"schedule": "1f1b", "stages": 4, "microbatches": 8, "time_s": 1.0, "energy_j": 2.0,
                "stages_plan": []}
    for stage, entries in enumerate(fastest["schedules"]):
        counters = {"forward": 0, "backward": 0}
        computations = []
        for name, mhz in entries:
            computations.append({"instruction": name, "microbatch": counters[name], "frequency_mhz": mhz})
            counters[name] += 1
        dag_plan["stages_plan"].append({"stage": stage, "computations": computations})
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(dag_plan))
    read = _joule._pipeline_plan_file(str(path), PROFILE, BLOCKING_W)
    assert read["schedules"] == fastest["schedules"]
    assert read["predicted"] == pytest.approx(fastest["predicted"])
    device = joule.PipelineStageDevice(PROFILE, 2)
    optimizer = joule.PipelineFrequencyOptimizer(2, 0, 2, 0, 0, 1, 4, 1, 4, None, stage_device=device,
                                                 plan=str(path))
    assert optimizer.num_microbatches == 8
    optimizer.on_step_begin()
    assert optimizer.schedule.frequencies == [tuple(e) for e in fastest["schedules"][2]]
    optimizer.close()
    with pytest.raises(joule.InvalidArgumentError, match="plans 4 stages, but pp_degree is 2"):
        joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 2, 1, 2, None, stage_device=device, plan=str(path))
    with pytest.raises(joule.InvalidArgumentError, match="needs profile= .* or plan="):
        joule.PipelineFrequencyOptimizer(0, 0, 0, 0, 0, 1, 1, 1, 1, None, stage_device=device)


# Issue 23: the planner's blocking power has the bound of `joule plan --p-blocking-w` (75000 is 75 W in mW).
def test_blocking_power_in_milliwatts_is_refused_as_on_the_command_line() -> None:
    with pytest.raises(
        joule.InvalidArgumentError,
        match=r"^p_blocking_w must be at most 5000, got 75000: is it in mW\? The unit here is W$",
    ):
        _joule._pipeline_plan(PROFILE, 8, p_blocking_w=75000)
    assert _joule._pipeline_plan(PROFILE, 8, p_blocking_w=75)["stages"] == 4
