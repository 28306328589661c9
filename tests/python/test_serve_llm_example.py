# SPDX-License-Identifier: Apache-2.0
"""examples/serve_llm.py end to end: the OpenAI-compatible server on a free loopback port, 8 concurrent
completions with per-request energy in `usage`, /metrics (promtool-checked when promtool is on PATH),
OpenAI-style 400s, and SIGTERM restoring the simulated GPU's clock."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import pytest

from conftest import SOURCE_DIR, python_environment
from prometheus_text import parse_exposition

pytestmark = pytest.mark.torch

EXAMPLE = SOURCE_DIR / "examples" / "serve_llm.py"
MODEL = "llama-3-8b"


class Server:
    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--port", "0", "--gpu", "h100", "--model", MODEL, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=python_environment())
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on http://"):
            self.process.kill()
            _, stderr = self.process.communicate()
            raise AssertionError(f"the example did not start: {line!r} {stderr}")
        self.url = line.split("listening on ", 1)[1].strip()

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str, str]:
        self.process.send_signal(signum)
        try:
            stdout, stderr = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            stdout, stderr = self.process.communicate()
        return self.process.returncode, stdout, stderr


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # joule's own series only (strict promtool lint): the engine-named ones are test_serve_llm_engines.py's.
    running = Server("--max-batch", "4", "--controller-interval-s", "0.02", "--seed", "3", "--engine-metrics", "none")
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.stop(signal.SIGKILL)


def call(url: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        status = error.code
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


PROMPTS = ["Hello", "The GPU's energy", "", "a longer prompt about serving large language models " * 3,
           "x", "tokens per joule", "Hello", "continuous batching"]


def test_concurrent_completions_report_their_energy(server: Server) -> None:
    status, models = call(server.url + "/v1/models")
    assert status == 200 and [model["id"] for model in models["data"]] == [MODEL]
    bodies = [{"model": MODEL, "prompt": prompt, "max_tokens": 4 + 2 * i} for i, prompt in enumerate(PROMPTS)]
    with ThreadPoolExecutor(len(bodies)) as pool:
        results = list(pool.map(lambda body: call(server.url + "/v1/completions", body), bodies))
    for body, (status, response) in zip(bodies, results):
        assert status == 200, response
        assert response["object"] == "text_completion" and response["model"] == MODEL
        choice = response["choices"][0]
        assert len(choice["text"]) == body["max_tokens"] and choice["text"].isprintable()
        assert choice["finish_reason"] == "length"
        usage = response["usage"]
        assert usage["prompt_tokens"] == len(body["prompt"].encode()) + 1  # + BOS
        assert usage["completion_tokens"] == body["max_tokens"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        energy = usage["energy"]
        assert set(energy) == {"energy_j", "prefill_energy_j", "decode_energy_j", "j_per_output_token", "ttft_s",
                               "tpot_s", "clock_mhz"}
        assert energy["energy_j"] > 0 and energy["prefill_energy_j"] > 0 and energy["decode_energy_j"] > 0
        assert energy["prefill_energy_j"] + energy["decode_energy_j"] == pytest.approx(energy["energy_j"])
        assert energy["j_per_output_token"] == pytest.approx(energy["energy_j"] / usage["completion_tokens"])
        assert energy["ttft_s"] > 0 and energy["tpot_s"] > 0
        assert energy["clock_mhz"] > 0
    # Greedy decoding with seeded weights: the same prompt gives the same text, whatever the batch (prompt 6
    # is prompt 0 with more tokens).
    assert results[6][1]["choices"][0]["text"].startswith(results[0][1]["choices"][0]["text"])


def test_metrics_parse_and_pass_promtool(server: Server) -> None:
    status, first = call(server.url + "/v1/completions", {"model": MODEL, "prompt": "metrics", "max_tokens": 3})
    assert status == 200, first
    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = response.read().decode()
    types, samples = parse_exposition(text)
    for name, labels in samples:
        assert {("model", MODEL), ("gpu", "h100")} <= labels, (name, labels)

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset({"model": MODEL, "gpu": "h100", **labels}.items()))]

    def total(name: str) -> float:
        return sum(figure for (sample, _), figure in samples.items() if sample == name)

    assert types["joule_inference_request_energy_joules"] == "histogram"
    assert types["joule_inference_energy_per_output_token_joules"] == "histogram"
    assert types["joule_inference_time_to_first_token_seconds"] == "histogram"
    assert types["joule_inference_energy_joules_total"] == "counter"
    assert types["joule_inference_sm_clock_hertz"] == "gauge"
    assert "joule_inference_idle_energy_joules_total" not in types  # idle energy is phase="idle"
    requests = total("joule_inference_requests_total")  # by slo="met"/"missed"
    assert requests >= 1
    assert {dict(labels)["slo"] for name, labels in samples if name == "joule_inference_requests_total"} <= {
        "met", "missed"}
    assert value("joule_inference_request_energy_joules_count") == requests
    assert value("joule_inference_time_to_first_token_seconds_count") == requests
    energy_sum = value("joule_inference_request_energy_joules_sum")
    assert energy_sum > 0
    # Finished requests' prefill and decode shares are their energy; idle energy is the rest of the measured.
    assert value("joule_inference_energy_joules_total", phase="prefill") + value(
        "joule_inference_energy_joules_total", phase="decode") == pytest.approx(energy_sum, rel=1e-9)
    assert value("joule_inference_energy_joules_total", phase="idle") > 0  # the engine idled before the first
    assert value("joule_inference_output_tokens_total") >= 3
    assert value("joule_inference_prompt_tokens_total") >= len(b"metrics") + 1
    assert value("joule_inference_iterations_total") >= 3
    assert value("joule_inference_requests_running") >= 0 and value("joule_inference_requests_waiting") >= 0
    assert 0 <= value("joule_inference_slo_attainment_ratio") <= 1
    assert value("joule_inference_slo_unattainable") in (0, 1)
    assert value("joule_inference_sm_clock_hertz") > 1e8
    assert value("joule_inference_slo_target_seconds", slo="ttft") == 0.5
    assert value("joule_inference_slo_target_seconds", slo="tpot") == 0.05
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not on PATH (Debian: prometheus); the text parsed")
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(("raw", "status", "param"), [
    (b'{"model": "llama-3-8b", "max_tokens": 4}', 400, "prompt"),
    (b'{"model": "llama-3-8b", "prompt": "hi", "max_tokens": 0}', 400, "max_tokens"),
    (b'{"model": "llama-3-8b", "prompt": "hi", "max_tokens": -2}', 400, "max_tokens"),
    (b'{"model": "llama-3-8b", "prompt": "hi", "max_tokens": "8"}', 400, "max_tokens"),
    (b'{"model": "llama-3-8b", "prompt": ["hi"]}', 400, "prompt"),
    (b'{"model": "llama-3-8b", "prompt": "hi", "stream": "true"}', 400, "stream"),  # true streams
    (b'{"prompt": "hi"}', 400, "model"),
    (b'{"model": "gpt-4", "prompt": "hi"}', 404, "model"),
    (b'{"model": "llama-3-8b", "prompt": "hi", "max_tokens": 5000}', 400, "max_tokens"),
    (b'{"model": "llama-3-8b", "prompt": ', 400, None),
    (b'[1, 2]', 400, None),
])
def test_bad_requests_get_openai_style_errors(server: Server, raw: bytes, status: int, param: str | None) -> None:
    got, body = call(server.url + "/v1/completions", raw=raw)
    assert got == status, body
    error = body["error"]
    assert error["param"] == param and error["message"]
    assert error["type"] == "invalid_request_error"


def test_sigterm_restores_the_clock(server: Server) -> None:
    status, _ = call(server.url + "/v1/completions", {"model": MODEL, "prompt": "last one", "max_tokens": 6})
    assert status == 200
    returncode, stdout, stderr = server.stop(signal.SIGTERM)
    assert returncode == 0, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["event"] == "stopped" and summary["requests"] >= 1
    log = summary["settings_log"][0]
    assert any(entry["setting"] == "sm_clocks_locked_mhz" for entry in log)
    assert log[-1]["setting"] == "sm_clocks_reset"
    assert summary["clock_after_restore_mhz"] == summary["max_clock_mhz"]
