# SPDX-License-Identifier: Apache-2.0
"""examples/serve_llm.py seen as vLLM, SGLang or TGI: `--engine-metrics` exports the serving metrics under each
engine's own names (examples/engine_metrics.py's tables, which tests/data/engine-metrics/tables.json repeats),
their counters agree with joule's own series, and `"stream": true` sends one server-sent event per token as
the engine produces it (checked by stepping the engine by hand: the first event arrives after its first
iteration, long before the last). The engines run in this process (one torch import for all)."""

from __future__ import annotations

import http.client
import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import time
import types
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import ThreadingHTTPServer
from typing import Any, Iterator

import pytest

from conftest import SOURCE_DIR
from prometheus_text import parse_exposition

EXAMPLES = SOURCE_DIR / "examples"
DATA = SOURCE_DIR / "tests" / "data" / "engine-metrics"
MODEL = "llama-3-8b"
ENGINES = ["vllm", "sglang", "tgi"]
PREFIXES = ("vllm:", "sglang:", "tgi_")
# What promtool's linter says of the engines' own names (their exporters' output draws the same): vLLM and
# SGLang put ':' in names, and TGI's counters (metrics-exporter-prometheus) have no _total suffix.
ENGINE_LINT = ("metric names should not contain ':'", 'counter metrics should have "_total" suffix',
               'non-histogram and non-summary metrics should not have "_count" suffix',
               'non-counter metrics should not have "_total" suffix')  # vllm:iteration_tokens_total, a histogram


def load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def engine_metrics_module() -> types.ModuleType:
    return sys.modules.get("engine_metrics") or load("engine_metrics")


def test_tables_json_is_the_examples_tables() -> None:
    # The fixture other tests (the sidecar's parser) read is the example's tables, written with
    # json.dumps(engine_metrics.tables(), indent=1, sort_keys=True).
    tables = engine_metrics_module().tables()
    assert json.loads((DATA / "tables.json").read_text()) == tables
    for engine, table in tables.items():
        names = [family["name"] for family in table["families"]]
        assert len(names) == len(set(names)), engine
        assert all(name.startswith(PREFIXES) for name in names)
        roles = {family["role"] for family in table["families"]}
        # What a governor needs from every engine (TGI has no TTFT histogram and says so in the docs).
        assert {"requests_running", "requests_waiting", "e2e_seconds", "prompt_tokens", "generation_tokens",
                "requests_finished", "tpot_seconds" if engine == "tgi" else "ttft_seconds"} <= roles, engine
        for family in table["families"]:
            assert family["source"] and family["type"] in ("counter", "gauge", "histogram")
            assert ("buckets" in family) == (family["type"] == "histogram")
            if family["type"] == "histogram":
                assert family["buckets"] == sorted(set(family["buckets"])), family["name"]


def test_bucket_layouts_are_the_engines() -> None:
    module = engine_metrics_module()
    assert module.vllm_1_2_5_buckets(1024) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    tgi = module.tgi_duration_buckets()
    assert len(tgi) == 35 and tgi[0] == pytest.approx(0.00015) and tgi[-1] == pytest.approx(0.0001 * 1.5**35)
    assert module.go_float(1) == "1.0" and module.go_float(2560) == "2560.0" and module.go_float(1e7) == "1e+07"
    assert module.rust_float(3.0) == "3" and module.rust_float(0.00015000000000000001) == "0.00015000000000000001"


@pytest.mark.parametrize("engine", ENGINES)
def test_fixture_has_every_family_of_the_table(engine: str) -> None:
    text = (DATA / f"{engine}.prom").read_text()
    types_, samples = parse_exposition(text)
    for family in engine_metrics_module().table(engine, 1024)["families"]:
        assert types_.get(family["name"]) == family["type"], family["name"]
    assert any(name.startswith("python_") or name.startswith("process_") for name in types_) or engine == "tgi"
    problems = promtool_problems(text)  # what promtool says of the real engine's output, nothing else
    assert all(line.endswith(ENGINE_LINT) for line in problems), problems


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^unknown engine 'triton' \(one of vllm, sglang, tgi\)$"):
        engine_metrics_module().table("triton", 1024)


@pytest.mark.torch
def test_an_unknown_engine_metrics_switch_is_a_usage_error(serve_llm: types.ModuleType,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        serve_llm.parse_args(["--engine-metrics", "triton"])
    assert exited.value.code == 2
    assert ("argument --engine-metrics: invalid choice: 'triton' (choose from 'vllm', 'sglang', 'tgi', 'none')"
            in capsys.readouterr().err)


# ---- the example, in this process ------------------------------------------------------------------------------


class Served:
    """serve_llm's Engine and HTTP handler on a free loopback port; the engine thread only if started."""

    def __init__(self, serve_llm: types.ModuleType, *argv: str, start: bool = True) -> None:
        import torch

        args = serve_llm.parse_args(["--gpu", "h100", "--model", MODEL, "--max-batch", "4", "--seed", "3", *argv])
        torch.manual_seed(args.seed)
        model = serve_llm.TinyDecoder(args.layers, args.hidden, args.heads, args.max_context).eval()
        self.engine = serve_llm.Engine(args, model)
        handler = serve_llm.make_handler(self.engine, self.engine.served_model, int(time.time()), args.max_context)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        if start:
            self.engine.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.engine.close()


@pytest.fixture(scope="module")
def serve_llm() -> types.ModuleType:
    pytest.importorskip("torch")
    sys.path.insert(0, str(EXAMPLES))  # serve_llm imports engine_metrics from beside it
    try:
        return load("serve_llm")
    finally:
        sys.path.remove(str(EXAMPLES))


def post(url: str, body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=60) as response:
        return response.read().decode()


def total(samples: dict[Any, float], name: str, **labels: str) -> float:
    return sum(value for (sample, sample_labels), value in samples.items()
               if sample == name and set(labels.items()) <= sample_labels)


def promtool_problems(text: str) -> list[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        return []
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                             timeout=30, check=False)
    assert checked.returncode in (0, 3), checked.stdout + checked.stderr  # 3: lint problems only
    return [line for line in (checked.stdout + checked.stderr).splitlines() if line.strip()]


@pytest.mark.torch
@pytest.mark.parametrize("engine", [*ENGINES, "none"])
def test_engine_metrics_agree_with_joules(serve_llm: types.ModuleType, engine: str) -> None:
    served = Served(serve_llm, "--engine-metrics", engine)
    try:
        bodies = [{"model": MODEL, "prompt": "engine " * i, "max_tokens": 3 + i} for i in range(6)]
        with ThreadPoolExecutor(len(bodies)) as pool:
            results = list(pool.map(lambda body: post(served.url, body), bodies))
        assert all(status == 200 for status, _ in results), results
        text = scrape(served.url)
    finally:
        served.close()
    types_, samples = parse_exposition(text)
    requests = total(samples, "joule_inference_requests_total")
    prompt_tokens = total(samples, "joule_inference_prompt_tokens_total")
    output_tokens = total(samples, "joule_inference_output_tokens_total")
    iterations = total(samples, "joule_inference_iterations_total")
    assert requests == 6 and output_tokens == sum(body["max_tokens"] for body in bodies)
    engine_families = {name for name in types_ if name.startswith(PREFIXES)}
    problems = promtool_problems(text)
    assert not [line for line in problems if line.startswith("joule_")], problems
    assert all(line.endswith(ENGINE_LINT) for line in problems), problems
    if engine == "none":
        assert not engine_families and not problems
        return
    table = engine_metrics_module().table(engine, 1024)
    assert engine_families == {family["name"] for family in table["families"]}
    for family in table["families"]:
        name = family["name"]
        assert types_[name] == family["type"], name
        common = {key: value.replace("{model}", MODEL) for key, value in
                  table["label_sets"][family["label_set"]].items()}
        for series in family["series"]:
            labels = {**common, **series["labels"]}
            if family["type"] != "histogram":
                assert (name, frozenset(labels.items())) in samples, (name, labels)
                continue
            bounds = {dict(sample_labels)["le"] for sample, sample_labels in samples
                      if sample == name + "_bucket" and set(labels.items()) <= sample_labels}
            assert bounds == {*(table_bound for table_bound in map(render_bound(engine), family["buckets"])),
                              "+Inf"}, name
    roles = {family["role"]: family for family in table["families"] if family["role"]}

    def role(name: str, suffix: str = "", **labels: str) -> float:
        return total(samples, roles[name]["name"] + suffix, **labels)

    # Every request has finished: the engine's counters are joule's.
    if engine == "tgi":  # no token counters: the histograms' sums are the finished requests' tokens
        assert role("prompt_tokens", "_sum") == prompt_tokens
        assert role("generation_tokens", "_sum") == output_tokens
        assert role("iterations") == iterations  # prefill + decode calls
        assert role("e2e_seconds", "_count") == requests
    else:
        assert role("prompt_tokens") == prompt_tokens
        assert role("generation_tokens") == output_tokens
        ttft_sum = total(samples, "joule_inference_time_to_first_token_seconds_sum")
        assert role("ttft_seconds", "_count") == requests
        assert role("ttft_seconds", "_sum") == pytest.approx(ttft_sum, rel=1e-6)  # virtual seconds, as joule's
        assert role("itl_seconds", "_count") == output_tokens - requests  # one per token after the first
        assert role("e2e_seconds", "_count") == requests
    assert role("requests_finished") == requests
    assert role("requests_running") == 0 and role("requests_waiting") == 0
    if engine == "vllm":
        assert role("iteration_tokens", "_count") == iterations
        assert role("iteration_tokens", "_sum") == prompt_tokens + output_tokens
        assert total(samples, "vllm:request_success_total", finished_reason="stop") == 0


def render_bound(engine: str) -> Any:
    module = engine_metrics_module()
    return module.rust_float if engine == "tgi" else module.go_float


# ---- streaming -------------------------------------------------------------------------------------------------


def read_event(response: http.client.HTTPResponse) -> str:
    """The next server-sent event's data (lines up to the blank line)."""
    data = []
    while True:
        line = response.readline().decode()
        assert line, "the stream ended without [DONE]"
        if line == "\n":
            return "".join(data)
        assert line.startswith("data: "), line
        data.append(line[len("data: "):].rstrip("\n"))


@pytest.mark.torch
def test_each_token_is_sent_when_the_engine_produces_it(serve_llm: types.ModuleType) -> None:
    # The engine thread is not started: this test steps the engine, so "the first event arrives before the
    # last token exists" is checked by the engine's own iteration count, not by time.
    served = Served(serve_llm, "--engine-metrics", "vllm", start=False)
    engine = served.engine
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    try:
        max_tokens = 6
        connection.request("POST", "/v1/completions", json.dumps(
            {"model": MODEL, "prompt": "stream", "max_tokens": max_tokens, "stream": True,
             "stream_options": {"include_usage": True}}), {"Content-Type": "application/json"})
        for _ in range(600):  # each step waits ≤ 0.1 s for the request to reach the engine
            engine.step()
            if engine.running:
                break
        assert len(engine.running) == 1 and len(engine.running[0].output) == 1  # one iteration: the prefill
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
        first = json.loads(read_event(response))
        assert first["object"] == "text_completion" and first["model"] == MODEL
        assert first["choices"] == [{"index": 0, "text": first["choices"][0]["text"], "logprobs": None,
                                     "finish_reason": None}]
        assert len(first["choices"][0]["text"]) == 1
        assert len(engine.running[0].output) == 1  # still: the event left before the engine went on
        texts = [first["choices"][0]["text"]]
        for produced in range(2, max_tokens + 1):
            engine.step()
            chunk = json.loads(read_event(response))
            assert chunk["id"] == first["id"] and chunk["created"] == first["created"]
            texts.append(chunk["choices"][0]["text"])
            assert chunk["choices"][0]["finish_reason"] == ("length" if produced == max_tokens else None)
        usage = json.loads(read_event(response))
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == max_tokens
        assert usage["usage"]["energy"]["energy_j"] > 0
        assert read_event(response) == "[DONE]"
        assert response.read() == b""
    finally:
        connection.close()
        served.close()
    # The same prompt without streaming, on a fresh engine with the same seed: the same text.
    again = Served(serve_llm, "--engine-metrics", "none")
    try:
        status, body = post(again.url, {"model": MODEL, "prompt": "stream", "max_tokens": max_tokens})
    finally:
        again.close()
    assert status == 200 and body["choices"][0]["text"] == "".join(texts)


@pytest.fixture(scope="module")
def running(serve_llm: types.ModuleType) -> Iterator[Served]:
    served = Served(serve_llm)
    try:
        yield served
    finally:
        served.close()


def stream(url: str, body: dict[str, Any]) -> list[str]:
    request = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        return [event for event in response.read().decode().split("\n\n") if event]


@pytest.mark.torch
def test_stream_texts_join_to_the_completion_and_usage_only_when_asked(running: Served) -> None:
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 7}
    status, whole = post(running.url, body)
    assert status == 200
    plain = stream(running.url, {**body, "stream": True})
    assert plain[-1] == "data: [DONE]" and all(event.startswith("data: ") for event in plain)
    chunks = [json.loads(event[len("data: "):]) for event in plain[:-1]]
    assert len(chunks) == 7 and all(chunk["choices"] for chunk in chunks)  # no usage chunk unless asked
    assert "".join(chunk["choices"][0]["text"] for chunk in chunks) == whole["choices"][0]["text"]
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks] == [None] * 6 + ["length"]
    with_usage = stream(running.url, {**body, "stream": True, "stream_options": {"include_usage": True}})
    usage = json.loads(with_usage[-2][len("data: "):])
    assert usage["choices"] == [] and with_usage[-1] == "data: [DONE]"
    assert usage["usage"]["prompt_tokens"] == whole["usage"]["prompt_tokens"]
    assert usage["usage"]["completion_tokens"] == 7 and usage["usage"]["total_tokens"] == 13
    assert set(usage["usage"]["energy"]) == set(whole["usage"]["energy"])
    off = stream(running.url, {**body, "stream": True, "stream_options": {"include_usage": False}})
    assert len(off) == 8


@pytest.mark.torch
@pytest.mark.parametrize(("extra", "param", "message"), [
    ({"stream": "yes"}, "stream", 'stream must be a boolean, got "yes"'),
    ({"stream": 1}, "stream", "stream must be a boolean, got 1"),
    ({"stream": True, "stream_options": "include_usage"}, "stream_options",
     'stream_options must be an object, got "include_usage"'),
    ({"stream": True, "stream_options": [True]}, "stream_options", "stream_options must be an object, got [true]"),
    ({"stream": True, "stream_options": {"include_usage": "true"}}, "stream_options",
     'stream_options.include_usage must be a boolean, got "true"'),
    ({"stream": True, "stream_options": {"continuous_usage_stats": True}}, "stream_options",
     "stream_options: unsupported option 'continuous_usage_stats' (only include_usage)"),
    ({"stream_options": {"include_usage": True}}, "stream_options",
     "Stream options can only be defined when `stream=True`."),
])
def test_bad_stream_parameters_get_400(running: Served, extra: dict[str, Any], param: str, message: str) -> None:
    status, body = post(running.url, {"model": MODEL, "prompt": "hi", "max_tokens": 2, **extra})
    assert status == 400, body
    assert body["error"] == {"message": message, "type": "invalid_request_error", "param": param, "code": None}
