#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""An OpenAI-compatible LLM server (PyTorch on the CPU, continuous batching) whose every iteration is charged
to a simulated serving GPU, with per-request energy and an SLO-aware GPU clock.

    PYTHONPATH=build/python python3 examples/serve_llm.py --port 8000
    curl -s http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
         -d '{"model": "llama-3-8b", "prompt": "Hello", "max_tokens": 8}'
    curl -sN http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
         -d '{"model": "llama-3-8b", "prompt": "Hello", "max_tokens": 8, "stream": true}'
    curl -s http://127.0.0.1:8000/metrics

What really runs: a small decoder-only transformer (byte-level tokens, random weights from ``--seed``,
greedy decoding restricted to printable ASCII: deterministic) on the CPU, behind ``POST /v1/completions``
(``model``, ``prompt``, ``max_tokens``, ``stream``, ``stream_options``), ``GET /v1/models`` and ``GET /metrics``
(Prometheus text). One engine thread batches continuously: each iteration admits waiting requests (up to
``--max-batch`` in flight) and runs their prefill — the whole prompt, which emits the first token — and one
decode step (one token) for every request already running, each with its own KV cache. A request finishes
after ``max_tokens`` tokens (``finish_reason: "length"``).

How an iteration is charged to the simulated GPU (``--gpu h100 --model llama-3-8b [--tp N]``):

- ``joule.LlmDevice(gpu, model, tp)`` is one replica of that real model on that many simulated GPUs of that
  kind (real ``joule.Gpu`` objects: energy counters, clock locks, settings log) on one virtual clock. The toy
  transformer stands in for the real model: only the *shape* of each iteration is passed on.
- Per iteration the engine calls ``device.run_iteration(decode_contexts, prefill)`` with the batch's token
  counts and context lengths: for every decoding request the tokens in its context (prompt + tokens so far,
  the one being fed included), for every admitted request ``(prompt_tokens, 0)``. The serving model costs
  that batch at the SM clock locked on the GPUs and advances the virtual clock by the iteration's time; the
  GPUs' energy counters advance by its energy.
- The iteration's energy is *measured*, not taken from the model: a ``joule.Monitor`` window over the
  replica's GPUs (``device.devices``) is opened before ``run_iteration`` and closed after it, and its
  energy (all GPUs, J, read from the counters at 1 mJ) is what ``joule.RequestEnergyLedger`` splits among
  the iteration's requests (``--rule``, default ``tokens``: each prompt token and each decoded token counts
  one; ``work``: in proportion to the serving model's time for each request's part alone, from
  ``device.predict``; ``equal``). Energy spent while no request is in flight is idle energy, charged to none.
- ``joule.SloClockController`` (``--slo-ttft-s``, ``--slo-tpot-s``, p99 by default) sees every iteration
  (times, measured energy, clock, batch) and finished request, and picks the next iteration's clock; the
  engine locks it on every GPU of the replica through one ``joule.SettingsGuard``, which sets the clocks
  back on exit, on an uncaught exception and on SIGTERM/SIGINT/SIGHUP (before this script's own handler
  stops the server).

Virtual and wall time: the latency a client sees is real wall time (CPU compute, HTTP, queueing). Energy,
the ``ttft_s``/``tpot_s`` reported per request and the SLO controller all run on the simulated GPU's
virtual clock, which moves only by the simulated iterations' times and, while the engine has nothing to do,
by the wall time it waited (``idle_until``: the GPUs draw idle power meanwhile). A request's virtual
arrival is the virtual time at the first iteration boundary after it reached the engine, so its virtual
TTFT is the time it queued behind a full batch plus its prefill iteration — what it would be on the real
GPU with the same batches, not on this CPU.

Each response's ``usage`` has the OpenAI fields plus ``"energy": {"energy_j", "prefill_energy_j",
"decode_energy_j", "j_per_output_token", "ttft_s", "tpot_s", "clock_mhz"}`` (virtual s; ``tpot_s`` null for
one output token; ``clock_mhz`` the iteration-time-weighted mean SM clock of the request's iterations).
``/metrics`` is ``joule.InferenceMetrics`` (the C++ ``joule::metrics::InferenceMetrics``) rendered, every
series labelled ``gpu`` and ``model``: histograms ``joule_inference_request_energy_joules``,
``joule_inference_energy_per_output_token_joules``, ``joule_inference_time_to_first_token_seconds`` and
``joule_inference_time_per_output_token_seconds`` (virtual), counters
``joule_inference_energy_joules_total{phase="prefill"|"decode"|"idle"}`` (measured: finished requests' shares
and idle energy; the shares of requests still in flight join when they finish),
``joule_inference_requests_total{slo="met"|"missed"}`` (finished requests, judged against both SLOs),
``joule_inference_prompt_tokens_total``, ``joule_inference_output_tokens_total`` and
``joule_inference_iterations_total``, gauges ``joule_inference_requests_running``,
``joule_inference_requests_waiting``, ``joule_inference_slo_target_seconds{slo="ttft"|"tpot"}``,
``joule_inference_slo_attainment_ratio`` (the controller's window), ``joule_inference_slo_unattainable`` and
``joule_inference_sm_clock_hertz`` (the clock chosen for the next iteration). Series appear with their first
value: the counters and histograms after the first finished request.

Streaming (``"stream": true``) answers with server-sent events as vLLM and OpenAI send them
(``Content-Type: text/event-stream``, chunked): one ``data: {"id", "object": "text_completion", "created",
"model", "choices": [{"index": 0, "text", "logprobs": null, "finish_reason": null}]}`` per token, written as
the engine loop produces it (the engine thread hands each token to the request's queue after its iteration;
the HTTP thread writes it at once), the last token's chunk with ``finish_reason: "length"``; then, with
``"stream_options": {"include_usage": true}``, a chunk with ``"choices": []`` and the ``usage`` above (energy
included); then ``data: [DONE]``. The texts joined are the non-streaming text. ``stream`` must be a boolean,
``stream_options`` an object (only ``include_usage``, a boolean) and only with ``stream: true`` (vLLM's rule):
else 400. A client that goes away mid-stream does not cancel the request (the engine finishes it).

``--engine-metrics vllm|sglang|tgi|none`` (default ``vllm``): ``/metrics`` also exports the serving figures
under that engine's own names, types, labels and histogram buckets (vLLM's ``vllm:num_requests_running``,
``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``, ``vllm:generation_tokens_total``,
…; SGLang's ``sglang:*``; TGI's ``tgi_*``), so that a tool that reads a real engine reads this one; joule's
series are unchanged beside them. The tables, with the file of each engine they were taken from, are in
``engine_metrics.py`` beside this script. Their latencies are virtual seconds, as ``ttft_s``; KV-cache
occupancy is the tokens held by running requests over ``--max-batch`` × ``--max-context``.

``--port 0`` picks a free port; the first line on stdout is ``listening on http://HOST:PORT``. On SIGTERM or
SIGINT the server stops, restores the clocks and prints a JSON summary as its last line (requests, energy,
each GPU's settings log, and the clock a probe iteration ran at after the restore).
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

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

import engine_metrics  # noqa: E402 (beside this script; after the checks that say how to get joule and torch)

VOCAB = 257  # bytes 0..255 and BOS
BOS = 256
PRINTABLE = torch.tensor([32 <= token <= 126 for token in range(VOCAB)])
MAX_BODY_BYTES = 1 << 20


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: a free one; default 8000)")
    parser.add_argument("--gpu", default="h100", help="simulated GPU the iterations are costed on (joule.llm_gpus())")
    parser.add_argument("--model", default="llama-3-8b",
                        help="model the iterations are costed as (joule.llm_models()); also the served model id")
    parser.add_argument("--tp", type=int, default=None, help="tensor-parallel GPUs (default: the model's)")
    parser.add_argument("--slo-ttft-s", type=float, default=0.5, help="p99 time-to-first-token SLO, s")
    parser.add_argument("--slo-tpot-s", type=float, default=0.05, help="p99 time-per-output-token SLO, s")
    parser.add_argument("--slo-attainment", type=float, default=0.99, help="share of requests meeting both")
    parser.add_argument("--controller-interval-s", type=float, default=1.0,
                        help="how often the controller re-decides, virtual s (default 1)")
    parser.add_argument("--rule", default="tokens", choices=["tokens", "work", "equal"],
                        help="energy attribution rule (default tokens)")
    parser.add_argument("--max-batch", type=int, default=32, help="requests in flight at most (default 32)")
    parser.add_argument("--max-context", type=int, default=1024,
                        help="prompt + output tokens per request at most (default 1024)")
    parser.add_argument("--seed", type=int, default=0, help="weights' random seed (default 0)")
    parser.add_argument("--layers", type=int, default=2, help="transformer layers (default 2)")
    parser.add_argument("--hidden", type=int, default=64, help="hidden size (default 64)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--gpu-daemon", default=None, metavar="SOCKET",
                        help="run on the simulated GPUs of the joule daemon at SOCKET, in real time, and leave their "
                             "clock to whoever sets it there (e.g. joule infer govern): no clock of its own")
    parser.add_argument("--engine-metrics", default="vllm", choices=[*engine_metrics.ENGINES, "none"],
                        help="also export the serving metrics under this engine's names (default vllm)")
    args = parser.parse_args(argv)
    if args.max_batch < 1:
        parser.error("--max-batch must be ≥ 1")
    if args.hidden % args.heads != 0:
        parser.error("--hidden must be a multiple of --heads")
    if args.max_context < 2:
        parser.error("--max-context must be ≥ 2")
    return args


# ---- the model ------------------------------------------------------------------------------------------------

KvCache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: K, V of shape [heads, tokens, head_dim]


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def split(self, x: torch.Tensor) -> torch.Tensor:  # [T, hidden] → [heads, T, head_dim]
        return x.view(x.shape[0], self.heads, self.head_dim).transpose(0, 1)

    def prefill(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """One request's whole prompt x [T, hidden] (causal); returns the output and the layer's K, V."""
        q, k, v = (self.split(part) for part in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        scores = q @ k.transpose(1, 2) / math.sqrt(self.head_dim)
        steps = x.shape[0]
        mask = torch.ones(steps, steps, dtype=torch.bool).triu(1)
        attended = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attended.transpose(0, 1).reshape(steps, -1))
        return x + self.mlp(self.ln2(x)), (k, v)

    def decode(self, x: torch.Tensor, caches: list[KvCache], layer: int) -> torch.Tensor:
        """One new token of each of B requests x [B, hidden], each attending to its own cache (extended)."""
        q, k, v = (part.view(x.shape[0], self.heads, 1, self.head_dim) for part in self.qkv(self.ln1(x)).chunk(3, -1))
        outputs = []
        for i, cache in enumerate(caches):
            keys = torch.cat([cache[layer][0], k[i]], dim=1)
            values = torch.cat([cache[layer][1], v[i]], dim=1)
            cache[layer] = (keys, values)
            weights = (q[i] @ keys.transpose(1, 2) / math.sqrt(self.head_dim)).softmax(-1)
            outputs.append((weights @ values).reshape(-1))
        x = x + self.proj(torch.stack(outputs))
        return x + self.mlp(self.ln2(x))


class TinyDecoder(nn.Module):
    """A small decoder-only transformer over bytes (random weights: it babbles, deterministically)."""

    def __init__(self, layers: int, hidden: int, heads: int, max_context: int) -> None:
        super().__init__()
        self.token = nn.Embedding(VOCAB, hidden)
        self.position = nn.Embedding(max_context, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, VOCAB)

    def next_token(self, x: torch.Tensor) -> list[int]:
        logits = self.head(self.norm(x)).masked_fill(~PRINTABLE, float("-inf"))
        return [int(token) for token in logits.argmax(-1)]

    def prefill(self, tokens: list[int]) -> tuple[int, KvCache]:
        x = self.token(torch.tensor(tokens)) + self.position(torch.arange(len(tokens)))
        cache: KvCache = []
        for block in self.blocks:
            x, kv = block.prefill(x)
            cache.append(kv)
        return self.next_token(x[-1:])[0], cache

    def decode(self, tokens: list[int], positions: list[int], caches: list[KvCache]) -> list[int]:
        x = self.token(torch.tensor(tokens)) + self.position(torch.tensor(positions))
        for layer, block in enumerate(self.blocks):
            x = block.decode(x, caches, layer)
        return self.next_token(x)


# ---- requests -------------------------------------------------------------------------------------------------


class BadRequest(Exception):
    """An OpenAI-style error: HTTP status, message, param, type, code."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 error_type: str = "invalid_request_error", code: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = {"error": {"message": message, "type": error_type, "param": param, "code": code}}


@dataclass
class Request:
    id: str
    prompt: str
    tokens: list[int]
    max_tokens: int
    stream: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    # A streaming request's tokens as the engine produces them, then None when it finished or failed.
    events: "queue.SimpleQueue[Optional[int]]" = field(default_factory=queue.SimpleQueue)
    arrival_s: float = 0.0  # virtual, as the next three
    scheduled_s: float = 0.0  # the start of its prefill iteration
    first_token_s: float = 0.0
    last_token_s: float = 0.0
    output: list[int] = field(default_factory=list)
    cache: KvCache = field(default_factory=list)
    clock_time_mhz_s: float = 0.0  # Σ clock × iteration time over its iterations
    busy_s: float = 0.0
    result: Optional[dict[str, Any]] = None
    error: Optional[str] = None

    def end(self, error: Optional[str] = None) -> None:
        """Finished (result set) or failed: wakes the handler waiting for it."""
        if error is not None and self.error is None:
            self.error = error
        self.done.set()
        self.events.put(None)


# ---- the engine -----------------------------------------------------------------------------------------------


class DaemonReplica:
    """The replica on a ``joule daemon``'s simulated GPUs, in real time (``--gpu-daemon``): what an engine beside a
    sidecar looks like. The serving model costs each batch at its top clock (``LlmDevice.predict``); the daemon's
    GPUs run their workload (``Gpu.set_simulated_busy``) for that time stretched by their slowdown under the clock or
    power limit set on them now (by another process: this one sets nothing), so they draw busy power only while the
    engine computes and their energy counters, read through the daemon, are the engine's. Same calls as
    ``joule.LlmDevice`` where the engine uses them; times are wall seconds since the start."""

    def __init__(self, socket: str, gpu: str, model: str, tensor_parallel: Optional[int]) -> None:
        self.model_device = joule.LlmDevice(gpu, model, tensor_parallel)
        self.devices = joule.devices(daemon_socket=socket, cpus=False)
        tp = self.model_device.tensor_parallel
        if len(self.devices.gpus) < tp:
            raise joule.InvalidArgumentError(f"the daemon at {socket} serves {len(self.devices.gpus)} GPUs; "
                                             f"tensor parallelism {tp} needs {tp}")
        self.gpus = self.devices.gpus[:tp]
        self.top_mhz = self.model_device.supported_clocks_mhz()[0]
        self.slowdown = max(gpu.set_simulated_busy(False) for gpu in self.gpus)  # idle until the first iteration
        self.start = time.monotonic()

    @property
    def model_spec(self) -> dict[str, Any]:
        return self.model_device.model_spec

    @property
    def gpu_spec(self) -> dict[str, Any]:
        return self.model_device.gpu_spec

    def now_s(self) -> float:
        return time.monotonic() - self.start

    def supported_clocks_mhz(self) -> list[int]:
        return self.model_device.supported_clocks_mhz()

    def predict(self, decode_contexts: list[int], prefill: list[tuple[int, int]], clock_mhz: int) -> dict[str, Any]:
        return self.model_device.predict(decode_contexts, prefill, clock_mhz)

    def idle_until(self, time_s: float) -> None:
        time.sleep(max(0.0, time_s - self.now_s()))

    def effective_clock_mhz(self) -> int:
        """The serving model's clock that runs as slowly as the daemon's GPUs run now."""
        return round(self.top_mhz / self.slowdown)

    def run_iteration(self, decode_contexts: list[int], prefill: list[tuple[int, int]]) -> dict[str, Any]:
        start_s = self.now_s()
        if not decode_contexts and not prefill:
            return {"start_s": start_s, "end_s": start_s, "time_s": 0.0, "clock_mhz": self.effective_clock_mhz()}
        time_s = self.model_device.predict(decode_contexts, prefill, self.top_mhz)["time_s"]
        try:
            self.slowdown = max(gpu.set_simulated_busy(True) for gpu in self.gpus)
            time.sleep(max(0.0, start_s + time_s * self.slowdown - self.now_s()))
        finally:
            for gpu in self.gpus:
                gpu.set_simulated_busy(False)
        end_s = self.now_s()
        return {"start_s": start_s, "end_s": end_s, "time_s": end_s - start_s, "clock_mhz": self.effective_clock_mhz()}


class Engine:
    """One thread: continuous batching of the toy model, every iteration run on the simulated replica."""

    def __init__(self, args: argparse.Namespace, model: TinyDecoder) -> None:
        self.args = args
        self.model = model
        # Its own simulated replica (virtual time, its clock locked by its controller), or a daemon's GPUs governed
        # from outside (--gpu-daemon: real time; the controller only judges the SLO for the metrics).
        self.external = args.gpu_daemon is not None
        self.device = (DaemonReplica(args.gpu_daemon, args.gpu, args.model, args.tp) if self.external
                       else joule.LlmDevice(args.gpu, args.model, args.tp))
        self.served_model: str = self.device.model_spec["key"]
        self.metrics = joule.InferenceMetrics(gpu=self.device.gpu_spec["key"])
        self.metrics.set_slo(self.served_model, args.slo_ttft_s, args.slo_tpot_s)
        self.metrics.set_requests(self.served_model, 0, 0)
        self.finished_requests = 0
        # The same serving figures under an engine's own names (vLLM, SGLang, TGI), beside joule's.
        self.engine_metrics = (None if args.engine_metrics == "none" else
                               engine_metrics.EngineMetrics(args.engine_metrics, self.served_model, args.max_context))
        self.recent_steps: list[tuple[int, float]] = []  # (generated tokens, virtual s) of the last 40 iterations
        self.gpus = self.device.gpus
        self.monitor = joule.Monitor(devices=self.device.devices, cpus=[])
        self.ledger = joule.RequestEnergyLedger(args.rule)
        self.controller = joule.SloClockController(
            args.slo_ttft_s, args.slo_tpot_s, self.device.supported_clocks_mhz(),
            attainment=args.slo_attainment, interval_s=args.controller_interval_s,
            knob_gpus=self.device.tensor_parallel if not self.external else 1)
        self.guard = joule.SettingsGuard("serve_llm")
        self.locked_mhz: Optional[int] = None
        self.lock_clock(self.controller.clock_mhz)
        self.metrics.set_slo_attainment(self.served_model, self.controller.window_attainment)
        self.metrics.set_slo_unattainable(self.served_model, self.controller.slo_unattainable)
        self.condition = threading.Condition()
        self.inbox: list[Request] = []
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.stopping = False
        self.next_id = 0
        self.thread = threading.Thread(target=self.loop, name="engine", daemon=True)

    def lock_clock(self, mhz: int) -> None:
        if self.external:  # the clock is whoever governs the daemon's GPUs'
            self.metrics.set_sm_clock_mhz(self.served_model, self.device.effective_clock_mhz())
            return
        if self.guard.consume_signal_restore():
            self.locked_mhz = None  # a signal set the clocks back: lock again
        if mhz != self.locked_mhz:
            for gpu in self.gpus:
                self.guard.lock_sm_clocks_mhz(gpu, mhz, mhz)
            self.locked_mhz = mhz
        self.metrics.set_sm_clock_mhz(self.served_model, mhz)

    def submit(self, prompt: str, max_tokens: int, stream: bool = False) -> Request:
        tokens = [BOS, *prompt.encode("utf-8")]
        with self.condition:
            if self.stopping:
                raise BadRequest(503, "the server is shutting down", error_type="server_error")
            self.next_id += 1
            request = Request(f"cmpl-{self.next_id}", prompt, tokens, max_tokens, stream)
            self.inbox.append(request)
            self.condition.notify()
        return request

    def stop(self) -> None:
        with self.condition:
            self.stopping = True
            self.condition.notify()
        if self.thread.is_alive():
            self.thread.join()

    def loop(self) -> None:
        try:
            while self.step():
                pass
        except BaseException as error:  # fail every request rather than leave clients hanging
            message = f"engine failed: {error!r}"
            print(message, file=sys.stderr, flush=True)
            with self.condition:
                self.stopping = True
                for request in self.inbox + self.waiting + self.running:
                    request.end(message)
            raise
        finally:
            with self.condition:
                for request in self.inbox + self.waiting + self.running:
                    request.end("the server is shutting down")

    def step(self) -> bool:
        """One turn of the engine thread: admit what arrived (or idle up to 0.1 s while there is nothing to do),
        then one iteration if any request waits or runs. False once stopping."""
        with self.condition:
            if not self.inbox and not self.waiting and not self.running and not self.stopping:
                if self.external:  # real time: the wait itself is the idle time, measured as it passes
                    self.idle_measured(lambda: self.condition.wait(timeout=0.1))
                else:
                    waited_from = time.monotonic()
                    self.condition.wait(timeout=0.1)
                    self.idle(time.monotonic() - waited_from)
            if self.stopping:
                return False
            now_s = self.device.now_s()
            for request in self.inbox:
                request.arrival_s = now_s
                self.ledger.add_request(request.id, now_s)
                self.waiting.append(request)
            self.inbox.clear()
        if self.waiting or self.running:
            self.iteration()
        return True

    def idle(self, wall_s: float) -> None:
        start_s = self.device.now_s()
        self.monitor.begin_window("idle")
        self.device.idle_until(start_s + wall_s)
        energy_j = self.monitor.end_window("idle").total_gpu_energy_j
        self.ledger.record_idle(energy_j)
        self.controller.on_idle(start_s, self.device.now_s(), energy_j)
        self.metrics.add_idle_energy(self.served_model, energy_j)

    def idle_measured(self, wait: Any) -> None:
        start_s = self.device.now_s()
        self.monitor.begin_window("idle")
        wait()
        energy_j = self.monitor.end_window("idle").total_gpu_energy_j
        self.ledger.record_idle(energy_j)
        self.controller.on_idle(start_s, self.device.now_s(), energy_j)
        self.metrics.add_idle_energy(self.served_model, energy_j)

    def iteration(self) -> None:
        if self.external:  # real time: the toy model's CPU time is part of the iteration's window
            self.monitor.begin_window("iteration")
        free = self.args.max_batch - len(self.running)
        admitted, self.waiting = self.waiting[:free], self.waiting[free:]
        decoding = list(self.running)
        # The real computation, on the CPU.
        with torch.inference_mode():
            for request in admitted:
                first, request.cache = self.model.prefill(request.tokens)
                request.output.append(first)
            if decoding:
                feed = [request.output[-1] for request in decoding]
                positions = [len(request.tokens) + len(request.output) - 1 for request in decoding]
                for request, token in zip(decoding, self.model.decode(feed, positions, [r.cache for r in decoding])):
                    request.output.append(token)
        # The same batch on the simulated replica, measured by a Monitor window.
        clock_mhz = self.controller.clock_mhz
        self.lock_clock(clock_mhz)
        decode_contexts = [len(request.tokens) + len(request.output) - 1 for request in decoding]
        prefill = [(len(request.tokens), 0) for request in admitted]
        if not self.external:
            self.monitor.begin_window("iteration")
        cost = self.device.run_iteration(decode_contexts, prefill)
        energy_j = self.monitor.end_window("iteration").total_gpu_energy_j
        start_s, end_s = cost["start_s"], cost["end_s"]
        work = [(r.id, len(r.tokens), 0, True, self.work([], [(len(r.tokens), 0)], clock_mhz)) for r in admitted]
        work += [(r.id, 0, 1, False, self.work([context], [], clock_mhz))
                 for r, context in zip(decoding, decode_contexts)]
        self.ledger.record_iteration(start_s, end_s, energy_j, work)
        oldest_waiting_s = end_s - self.waiting[0].arrival_s if self.waiting else 0.0
        self.controller.on_iteration(start_s=start_s, end_s=end_s, energy_j=energy_j, clock_mhz=int(cost["clock_mhz"]),
                                     decode_requests=len(decoding), prefill_tokens=sum(t for t, _ in prefill),
                                     waiting_requests=len(self.waiting), oldest_waiting_s=oldest_waiting_s,
                                     pending_prompt_tokens=sum(len(r.tokens) for r in self.waiting),
                                     oldest_pending_s=oldest_waiting_s)
        self.running = decoding + admitted
        for request in self.running:
            request.clock_time_mhz_s += cost["clock_mhz"] * cost["time_s"]
            request.busy_s += cost["time_s"]
        finished = [r for r in self.running if len(r.output) >= r.max_tokens]
        self.running = [r for r in self.running if len(r.output) < r.max_tokens]
        self.after_iteration(admitted, decoding, cost["start_s"], cost["end_s"])
        for request in finished:
            self.finish(request)
        metrics, model = self.metrics, self.served_model
        metrics.add_iterations(model, 1)
        metrics.set_requests(model, len(self.running), len(self.waiting) + len(self.inbox))
        metrics.set_slo_attainment(model, self.controller.window_attainment)
        metrics.set_slo_unattainable(model, self.controller.slo_unattainable)
        metrics.set_sm_clock_mhz(model, int(cost["clock_mhz"]) if self.external else self.controller.clock_mhz)

    def after_iteration(self, admitted: list[Request], decoding: list[Request], start_s: float, end_s: float) -> None:
        """The engine-named metrics of this iteration and its streamed tokens, before any request of it finishes
        (so a client that has its response also finds it counted)."""
        for request in admitted:
            request.scheduled_s, request.first_token_s = start_s, end_s
        itl_s = [end_s - request.last_token_s for request in decoding]
        for request in admitted + decoding:
            request.last_token_s = end_s
            if request.stream:
                request.events.put(request.output[-1])
        if self.engine_metrics is None:
            return
        generated = len(admitted) + len(decoding)
        self.recent_steps = [*self.recent_steps[-39:], (generated, end_s - start_s)]
        self.engine_metrics.record("iteration", {
            **self.iteration_quantities(admitted, decoding, end_s - start_s, itl_s),
            "ttft_s": [end_s - request.arrival_s for request in admitted]})
        capacity = self.args.max_batch * self.args.max_context
        used = sum(len(request.tokens) + len(request.output) for request in self.running)
        steps_s = sum(time_s for _, time_s in self.recent_steps)
        self.engine_metrics.record("state", {
            "running": len(self.running), "waiting": len(self.waiting) + len(self.inbox),
            "kv_cache_used_tokens": used, "kv_cache_capacity_tokens": capacity, "kv_cache_usage": used / capacity,
            "batch_max_tokens": sum(len(request.tokens) + request.max_tokens for request in self.running),
            "gen_throughput": sum(tokens for tokens, _ in self.recent_steps) / steps_s if steps_s > 0 else 0.0,
            "zero": 0.0})

    @staticmethod
    def iteration_quantities(admitted: list[Request], decoding: list[Request], time_s: float,
                             itl_s: list[float]) -> dict[str, Any]:
        """An iteration's figures by the names engine_metrics.py's tables give them (virtual seconds). A step
        that admits requests is TGI's "prefill" (the example runs their prefill and the others' decode in one
        step), any other its "decode"."""
        prompt_tokens = sum(len(request.tokens) for request in admitted)
        generated = len(admitted) + len(decoding)
        prefill = bool(admitted)
        return {"prompt_tokens": prompt_tokens, "generation_tokens": generated, "decode_tokens": len(decoding),
                "tokens": prompt_tokens + generated, "itl_s": itl_s,
                "prefill_batch_size": len(admitted) if prefill else None,
                "prefill_step": 1 if prefill else None, "decode_step": None if prefill else 1,
                "prefill_time_s": time_s if prefill else None, "decode_time_s": None if prefill else time_s}

    @staticmethod
    def finish_quantities(request: Request) -> dict[str, Any]:
        """A finished request's figures by the names engine_metrics.py's tables give them (virtual seconds)."""
        generated = len(request.output)
        decode_s = request.last_token_s - request.first_token_s
        inference_s = request.last_token_s - request.scheduled_s
        return {"finished": 1, "n": 1, "prompt_tokens": len(request.tokens), "generation_tokens": generated,
                "max_tokens": request.max_tokens, "e2e_s": request.last_token_s - request.arrival_s,
                "queue_s": request.scheduled_s - request.arrival_s,
                "prefill_s": request.first_token_s - request.scheduled_s, "decode_s": decode_s,
                "inference_s": inference_s, "tpot_s": decode_s / (generated - 1) if generated > 1 else None,
                "mean_time_per_token_s": inference_s / generated}

    def work(self, decode_contexts: list[int], prefill: list[tuple[int, int]], clock_mhz: int) -> float:
        """A request's share of the iteration under --rule work: the model's time for its part alone."""
        if self.args.rule != "work":
            return 0.0
        return self.device.predict(decode_contexts, prefill, clock_mhz)["time_s"]

    def finish(self, request: Request) -> None:
        figures = self.ledger.finish_request(request.id)
        self.controller.on_request_done(figures.finish_s, figures.ttft_s, figures.tpot_s, figures.prompt_tokens)
        request.cache = []
        request.result = {
            "text": bytes(request.output).decode("ascii"),
            "prompt_tokens": figures.prompt_tokens,
            "completion_tokens": figures.output_tokens,
            "energy": {
                "energy_j": figures.energy_j,
                "prefill_energy_j": figures.prefill_energy_j,
                "decode_energy_j": figures.decode_energy_j,
                "j_per_output_token": figures.energy_per_output_token_j,
                "ttft_s": figures.ttft_s,
                "tpot_s": figures.tpot_s,
                "clock_mhz": request.clock_time_mhz_s / request.busy_s if request.busy_s > 0 else None,
            },
        }
        slo_met = figures.ttft_s is not None and self.controller.slo_met(figures.ttft_s, figures.tpot_s)
        self.metrics.observe_request(self.served_model, figures, slo_met)
        if self.engine_metrics is not None:
            self.engine_metrics.record("finish", self.finish_quantities(request))
        self.finished_requests += 1
        request.end()

    def close(self) -> dict[str, Any]:
        """Stops the engine, restores the clocks and returns the summary (with a probe of the clock)."""
        self.stop()
        self.guard.restore()
        if self.external:
            totals = self.ledger.totals
            return {"event": "stopped", "requests": self.finished_requests, "energy_j": totals["energy_j"],
                    "idle_energy_j": totals["idle_energy_j"], "iterations": totals["iterations"],
                    "time_s": self.device.now_s()}
        settings = [self.device.settings_log(i) for i in range(len(self.gpus))]
        probe = self.device.run_iteration([1], [])  # a fresh read: what clock does the GPU run at now?
        totals = self.ledger.totals
        return {"event": "stopped", "requests": self.finished_requests, "energy_j": totals["energy_j"],
                "idle_energy_j": totals["idle_energy_j"], "iterations": totals["iterations"],
                "virtual_time_s": self.device.now_s(), "settings_log": settings,
                "clock_after_restore_mhz": probe["clock_mhz"],
                "max_clock_mhz": self.device.supported_clocks_mhz()[0]}


# ---- HTTP -----------------------------------------------------------------------------------------------------


@dataclass
class Completion:
    prompt: str
    max_tokens: int
    stream: bool
    include_usage: bool


def parse_stream_options(payload: dict[str, Any], stream: bool) -> bool:
    """include_usage from "stream_options" (vLLM's rules: an object, only with stream=true)."""
    options = payload.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise BadRequest(400, f"stream_options must be an object, got {json.dumps(options)[:40]}", "stream_options")
    if not stream:
        raise BadRequest(400, "Stream options can only be defined when `stream=True`.", "stream_options")
    unknown = sorted(set(options) - {"include_usage"})
    if unknown:
        raise BadRequest(400, f"stream_options: unsupported option {unknown[0]!r} (only include_usage)",
                         "stream_options")
    include_usage = options.get("include_usage", False)
    if include_usage is not None and not isinstance(include_usage, bool):
        raise BadRequest(400, f"stream_options.include_usage must be a boolean, got "
                              f"{json.dumps(include_usage)[:40]}", "stream_options")
    return bool(include_usage)


def parse_completion(body: bytes, served_model: str) -> Completion:
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadRequest(400, f"We could not parse the JSON body of your request: {error}") from None
    if not isinstance(payload, dict):
        raise BadRequest(400, "The request body must be a JSON object.")
    if "model" not in payload:
        raise BadRequest(400, "you must provide a model parameter", "model")
    if payload["model"] != served_model:
        raise BadRequest(404, f"The model `{payload['model']}` does not exist (this server serves "
                              f"`{served_model}`).", "model", code="model_not_found")
    if "prompt" not in payload:
        raise BadRequest(400, "you must provide a prompt parameter", "prompt")
    prompt = payload["prompt"]
    if not isinstance(prompt, str):
        raise BadRequest(400, "prompt must be a string (lists of prompts and token arrays are not supported)",
                         "prompt")
    max_tokens = payload.get("max_tokens", 16)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(400, f"max_tokens must be an integer ≥ 1, got {max_tokens!r}", "max_tokens")
    stream = payload.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest(400, f"stream must be a boolean, got {json.dumps(stream)[:40]}", "stream")
    include_usage = parse_stream_options(payload, bool(stream))
    if payload.get("n", 1) != 1:
        raise BadRequest(400, "only n=1 is supported", "n")
    return Completion(prompt, max_tokens, bool(stream), include_usage)


def usage_of(result: dict[str, Any]) -> dict[str, Any]:
    return {"prompt_tokens": result["prompt_tokens"], "completion_tokens": result["completion_tokens"],
            "total_tokens": result["prompt_tokens"] + result["completion_tokens"], "energy": result["energy"]}


def make_handler(engine: Engine, served_model: str, created: int, max_context: int) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "joule-serve-llm/0.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: stdout/stderr stay for the summary
            pass

        def send_json(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [
                    {"id": served_model, "object": "model", "created": created, "owned_by": "joule"}]})
            elif self.path == "/metrics":
                extra = engine.engine_metrics.render() if engine.engine_metrics is not None else ""
                data = (engine.metrics.render() + extra).encode()
                self.send_response(200)
                self.send_header("Content-Type", joule.InferenceMetrics.CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self.send_json(404, BadRequest(404, f"no route GET {self.path}").body)

        def do_POST(self) -> None:
            try:
                if self.path != "/v1/completions":
                    raise BadRequest(404, f"no route POST {self.path}")
                length = self.headers.get("Content-Length")
                if length is None or not length.isdigit():
                    raise BadRequest(411, "a Content-Length header is required")
                if int(length) > MAX_BODY_BYTES:
                    raise BadRequest(413, f"the body exceeds {MAX_BODY_BYTES} bytes")
                completion = parse_completion(self.rfile.read(int(length)), served_model)
                prompt_tokens = len(completion.prompt.encode("utf-8")) + 1
                if prompt_tokens + completion.max_tokens > max_context:
                    raise BadRequest(400, f"This model's maximum context length is {max_context} tokens, "
                                          f"however you requested {prompt_tokens + completion.max_tokens} tokens "
                                          f"({prompt_tokens} in your prompt; {completion.max_tokens} for the "
                                          f"completion).", "max_tokens", code="context_length_exceeded")
                request = engine.submit(completion.prompt, completion.max_tokens, completion.stream)
                if completion.stream:
                    self.stream(request, completion.include_usage)
                    return
                request.done.wait()
                if request.result is None:
                    raise BadRequest(503, request.error or "the request failed", error_type="server_error")
                result = request.result
                self.send_json(200, {
                    "id": request.id, "object": "text_completion", "created": int(time.time()),
                    "model": served_model,
                    "choices": [{"text": result["text"], "index": 0, "logprobs": None, "finish_reason": "length"}],
                    "usage": usage_of(result),
                })
            except BadRequest as error:
                self.send_json(error.status, error.body)
                if error.status in (411, 413):
                    self.close_connection = True

        def stream(self, request: Request, include_usage: bool) -> None:
            """Server-sent events as vLLM and OpenAI send them: one chunk per token as the engine produces it
            (the last with finish_reason), the usage chunk when asked for, then [DONE]; chunked transfer
            encoding, each event written (unbuffered) when its token arrives."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            head = {"id": request.id, "object": "text_completion", "created": int(time.time()), "model": served_model}
            sent = 0
            try:
                while (token := request.events.get()) is not None:
                    sent += 1
                    finish = "length" if sent >= request.max_tokens else None
                    self.send_event({**head, "choices": [
                        {"index": 0, "text": chr(token), "logprobs": None, "finish_reason": finish}]})
                if request.result is None:  # the engine failed or stops: say so in the stream (as vLLM does)
                    self.send_event(BadRequest(503, request.error or "the request failed",
                                               error_type="server_error").body)
                elif include_usage:
                    self.send_event({**head, "choices": [], "usage": usage_of(request.result)})
                self.send_chunk(b"data: [DONE]\n\n")
                self.send_chunk(b"")
            except OSError:  # the client went away: the engine finishes the request anyway
                self.close_connection = True

        def send_event(self, body: Any) -> None:
            self.send_chunk(b"data: " + json.dumps(body).encode() + b"\n\n")

        def send_chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    return Handler


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    model = TinyDecoder(args.layers, args.hidden, args.heads, args.max_context).eval()

    server_box: list[ThreadingHTTPServer] = []
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        # The SettingsGuard has already set the clocks back (it runs first); stop serving from another thread
        # (shutdown() waits for serve_forever(), which runs on this one).
        if not stop_requested.is_set():
            stop_requested.set()
            if server_box:
                threading.Thread(target=server_box[0].shutdown, daemon=True).start()

    # Before the SettingsGuard exists: it keeps these handlers and calls them after restoring.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        engine = Engine(args, model)
    except joule.Error as error:
        print(f"serve_llm: {error}", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer((args.host, args.port),
                                 make_handler(engine, engine.served_model, int(time.time()), args.max_context))
    server.daemon_threads = True
    server_box.append(server)
    engine.thread.start()
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        if not stop_requested.is_set():
            server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        summary = engine.close()
        print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
