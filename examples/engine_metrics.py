# SPDX-License-Identifier: Apache-2.0
"""The serving metrics of vLLM, SGLang and TGI under their own names, for examples/serve_llm.py
(``--engine-metrics vllm|sglang|tgi|none``): the tables (data) and a small recorder that renders them in the
text exposition each engine's own exporter writes.

The tables are data so that other code can reuse them: tests/data/engine-metrics/tables.json is
``json.dumps(tables(), indent=1, sort_keys=True)`` (tests/python/test_serve_llm_engines.py checks that they
agree). Each engine's table lists metric *families* as the engine exposes them (the name a scraper sees:
prometheus_client adds ``_total`` to a counter registered as ``vllm:prompt_tokens``), each with:

- ``type`` (counter, gauge, histogram), ``help`` (the engine's documentation string), ``buckets`` (histograms:
  the engine's default upper bounds, without +Inf), ``label_set`` (which of the engine's label sets its
  series carry), ``source`` (the file the name, type, labels and buckets were taken from);
- ``role``: what joule reads it as (the same vocabulary for the three engines; null for families a governor
  does not need), e.g. ``requests_running``, ``ttft_seconds``, ``generation_tokens``;
- ``series``: the series the example exports, each with its extra ``labels`` (e.g. ``finished_reason``),
  the ``event`` that updates it (``iteration``: after each engine step; ``finish``: when a request
  finishes; ``state``: set after each step) and the ``value`` (a quantity of that event, see
  serve_llm.py's ``Engine.engine_quantities``; null: never moved, exported at 0 like the engine's
  pre-created series).

Latencies are the example's virtual (simulated-GPU) seconds, as its joule_inference_* series are; token
counts and request counts are real. The sources were read at these commits (the name tables of newer releases
may add families; the ones here are those a governor reads):

- vLLM V1: vllm-project/vllm ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``, 0.11–0.12:
  ``vllm:inter_token_latency_seconds`` replaced ``vllm:time_per_output_token_seconds`` in 0.11, and
  ``vllm:kv_cache_usage_perc`` replaced ``vllm:gpu_cache_usage_perc`` in 0.10; both old names are exported
  too, as vLLM did during the deprecation), labels ``model_name`` and ``engine``.
- SGLang: sgl-project/sglang ``python/sglang/srt/metrics/collector.py`` (``SchedulerMetricsCollector``,
  ``TokenizerMetricsCollector``; scheduler labels ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank``
  from ``scheduler_metrics_mixin.py``, tokenizer labels ``model_name, engine_type`` from
  ``tokenizer_manager.py``), example output in ``docs/references/production_metrics.md``.
- TGI: huggingface/text-generation-inference ``router/src/server.rs`` (names, descriptions and buckets set on
  the ``metrics-exporter-prometheus`` recorder), ``backends/v3/src/backend.rs`` (the ``method`` label),
  ``docs/source/reference/metrics.md`` (the table of all of them). TGI exports no time-to-first-token
  histogram and no token counters: its ``tgi_request_queue_duration`` and
  ``tgi_batch_forward_duration{method="prefill"}`` bound the TTFT, and the ``_sum`` of
  ``tgi_request_input_length`` / ``tgi_request_generated_tokens`` are the finished requests' token counts.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Optional

ENGINES = ("vllm", "sglang", "tgi")

VLLM_SOURCE = "vllm-project/vllm vllm/v1/metrics/loggers.py (PrometheusStatLogger, v0.11-v0.12)"
SGLANG_SOURCE = "sgl-project/sglang python/sglang/srt/metrics/collector.py"
TGI_SOURCE = "huggingface/text-generation-inference router/src/server.rs (buckets, descriptions)"
TGI_METHOD_SOURCE = "huggingface/text-generation-inference backends/v3/src/backend.rs (method label)"

# vLLM: loggers.py's bucket lists, verbatim.
VLLM_TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                     20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
VLLM_ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                    40.0, 80.0]
VLLM_REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
VLLM_ITERATION_TOKENS_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
# SGLang: collector.py's defaults (TokenizerMetricsCollector, SchedulerMetricsCollector.queue_time).
SGLANG_TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
SGLANG_E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800,
                      2400]
SGLANG_ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
                      0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]
SGLANG_QUEUE_BUCKETS = [0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
                        400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000]


def vllm_1_2_5_buckets(max_value: int) -> list[int]:
    """loggers.py's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, 50, … up to max_value."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


def tgi_duration_buckets() -> list[float]:
    """server.rs: 35 buckets, a geometric sequence from 0.0001 s × 1.5 (every family whose name ends in
    ``duration``)."""
    buckets, value = [], 0.0001
    for _ in range(35):
        value *= 1.5
        buckets.append(value)
    return buckets


def tgi_length_buckets(max_tokens: int) -> list[float]:
    """server.rs: 100 buckets, max/100 × (1..100) (input length: max_input_tokens; generated and
    max_new_tokens: max_total_tokens)."""
    return [max_tokens / 100.0 * (i + 1) for i in range(100)]


def _family(name: str, kind: str, help_text: str, role: Optional[str], series: list[dict[str, Any]],
            source: str, label_set: str = "default", buckets: Optional[list[float]] = None) -> dict[str, Any]:
    family: dict[str, Any] = {"name": name, "type": kind, "help": help_text, "role": role, "series": series,
                              "source": source, "label_set": label_set}
    if buckets is not None:
        family["buckets"] = [float(b) for b in buckets]
    return family


def _series(event: str, value: Optional[str], **labels: str) -> dict[str, Any]:
    return {"event": event, "value": value, "labels": labels}


def vllm_table(max_model_len: int) -> dict[str, Any]:
    tokens = vllm_1_2_5_buckets(max_model_len)
    s = VLLM_SOURCE
    latency = VLLM_REQUEST_LATENCY_BUCKETS
    families = [
        _family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                "requests_running", [_series("state", "running")], s),
        _family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                "requests_waiting", [_series("state", "waiting")], s),
        _family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
                "kv_cache_usage_ratio", [_series("state", "kv_cache_usage")], s),
        _family("vllm:gpu_cache_usage_perc", "gauge",
                "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                "kv_cache_usage_ratio", [_series("state", "kv_cache_usage")], s + " (before v0.10)"),
        _family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
                None, [_series("iteration", None)], s),
        _family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "prompt_tokens",
                [_series("iteration", "prompt_tokens")], s),
        _family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                "generation_tokens", [_series("iteration", "generation_tokens")], s),
        _family("vllm:request_success_total", "counter", "Count of successfully processed requests.",
                "requests_finished", [_series("finish", None, finished_reason="stop"),
                                      _series("finish", "finished", finished_reason="length"),
                                      _series("finish", None, finished_reason="abort")], s),
        _family("vllm:request_prompt_tokens", "histogram", "Number of prefill tokens processed.", None,
                [_series("finish", "prompt_tokens")], s, buckets=tokens),
        _family("vllm:request_generation_tokens", "histogram", "Number of generation tokens processed.", None,
                [_series("finish", "generation_tokens")], s, buckets=tokens),
        _family("vllm:iteration_tokens_total", "histogram", "Histogram of number of tokens per engine_step.",
                "iteration_tokens", [_series("iteration", "tokens")], s, buckets=VLLM_ITERATION_TOKENS_BUCKETS),
        _family("vllm:request_max_num_generation_tokens", "histogram",
                "Histogram of maximum number of requested generation tokens.", None,
                [_series("finish", "max_tokens")], s, buckets=tokens),
        _family("vllm:request_params_n", "histogram", "Histogram of the n request parameter.", None,
                [_series("finish", "n")], s, buckets=[1, 2, 5, 10, 20]),
        _family("vllm:request_params_max_tokens", "histogram", "Histogram of the max_tokens request parameter.",
                None, [_series("finish", "max_tokens")], s, buckets=tokens),
        _family("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
                "ttft_seconds", [_series("iteration", "ttft_s")], s, buckets=VLLM_TTFT_BUCKETS),
        _family("vllm:time_per_output_token_seconds", "histogram",
                "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds "
                "instead.", "itl_seconds", [_series("iteration", "itl_s")], s + " (before v0.11)",
                buckets=VLLM_ITL_BUCKETS),
        _family("vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.",
                "itl_seconds", [_series("iteration", "itl_s")], s, buckets=VLLM_ITL_BUCKETS),
        _family("vllm:request_time_per_output_token_seconds", "histogram",
                "Histogram of time_per_output_token_seconds per request.", "tpot_seconds",
                [_series("finish", "tpot_s")], s, buckets=VLLM_ITL_BUCKETS),
        _family("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.",
                "e2e_seconds", [_series("finish", "e2e_s")], s, buckets=latency),
        _family("vllm:request_queue_time_seconds", "histogram",
                "Histogram of time spent in WAITING phase for request.", "queue_seconds",
                [_series("finish", "queue_s")], s, buckets=latency),
        _family("vllm:request_inference_time_seconds", "histogram",
                "Histogram of time spent in RUNNING phase for request.", None, [_series("finish", "inference_s")],
                s, buckets=latency),
        _family("vllm:request_prefill_time_seconds", "histogram",
                "Histogram of time spent in PREFILL phase for request.", None, [_series("finish", "prefill_s")],
                s, buckets=latency),
        _family("vllm:request_decode_time_seconds", "histogram",
                "Histogram of time spent in DECODE phase for request.", None, [_series("finish", "decode_s")],
                s, buckets=latency),
    ]
    return {"engine": "vllm", "format": "prometheus_client", "series_from_start": True,
            "label_sets": {"default": {"model_name": "{model}", "engine": "0"}},
            "sources": [VLLM_SOURCE], "families": families}


def sglang_table() -> dict[str, Any]:
    s = SGLANG_SOURCE
    scheduler, tokenizer = "scheduler", "tokenizer"
    families = [
        _family("sglang:num_running_reqs", "gauge", "The number of running requests.", "requests_running",
                [_series("state", "running")], s, scheduler),
        _family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
                "requests_waiting", [_series("state", "waiting")], s, scheduler),
        _family("sglang:num_used_tokens", "gauge", "The number of used tokens.", "kv_cache_used_tokens",
                [_series("state", "kv_cache_used_tokens")], s, scheduler),
        _family("sglang:token_usage", "gauge", "The token usage.", "kv_cache_usage_ratio",
                [_series("state", "kv_cache_usage")], s, scheduler),
        _family("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.",
                "kv_cache_capacity_tokens", [_series("state", "kv_cache_capacity_tokens")], s, scheduler),
        _family("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", None,
                [_series("state", "gen_throughput")], s, scheduler),
        _family("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", None,
                [_series("state", "zero")], s, scheduler),
        _family("sglang:realtime_tokens_total", "counter",
                "Total number of tokens processed (updated on each log interval). mode: prefill_compute, "
                "prefill_cache, decode.", "iteration_tokens",
                [_series("iteration", "prompt_tokens", mode="prefill_compute"),
                 _series("iteration", None, mode="prefill_cache"),
                 _series("iteration", "decode_tokens", mode="decode")], s, scheduler),
        _family("sglang:queue_time_seconds", "histogram", "Histogram of queueing time in seconds.",
                "queue_seconds", [_series("finish", "queue_s")], s, scheduler, buckets=SGLANG_QUEUE_BUCKETS),
        _family("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "prompt_tokens",
                [_series("finish", "prompt_tokens")], s, tokenizer),
        _family("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
                "generation_tokens", [_series("finish", "generation_tokens")], s, tokenizer),
        _family("sglang:num_requests_total", "counter", "Number of requests processed.", "requests_finished",
                [_series("finish", "finished")], s, tokenizer),
        _family("sglang:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.",
                "ttft_seconds", [_series("iteration", "ttft_s")], s, tokenizer, buckets=SGLANG_TTFT_BUCKETS),
        _family("sglang:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.",
                "itl_seconds", [_series("iteration", "itl_s")], s, tokenizer, buckets=SGLANG_ITL_BUCKETS),
        _family("sglang:e2e_request_latency_seconds", "histogram",
                "Histogram of End-to-end request latency in seconds", "e2e_seconds",
                [_series("finish", "e2e_s")], s, tokenizer, buckets=SGLANG_E2E_BUCKETS),
    ]
    return {"engine": "sglang", "format": "prometheus_client", "series_from_start": False,
            "label_sets": {
                # scheduler_metrics_mixin.py (engine_type "unified": no prefill/decode disaggregation)
                scheduler: {"model_name": "{model}", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0",
                            "moe_ep_rank": "0"},
                tokenizer: {"model_name": "{model}", "engine_type": "unified"},  # tokenizer_manager.py
            },
            "sources": [SGLANG_SOURCE, "sgl-project/sglang python/sglang/srt/managers/scheduler_metrics_mixin.py",
                        "sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py"],
            "families": families}


def tgi_table(max_input_tokens: int, max_total_tokens: int) -> dict[str, Any]:
    s, m = TGI_SOURCE, TGI_METHOD_SOURCE
    duration = tgi_duration_buckets()
    families = [
        _family("tgi_batch_current_size", "gauge", "Current batch size", "requests_running",
                [_series("state", "running")], s),
        _family("tgi_queue_size", "gauge", "Current queue size", "requests_waiting",
                [_series("state", "waiting")], s),
        _family("tgi_batch_current_max_tokens", "gauge", "Maximum tokens for the current batch",
                "batch_max_tokens", [_series("state", "batch_max_tokens")], s),
        _family("tgi_batch_next_size", "histogram", "Batch size of the next batch", None,
                [_series("iteration", "prefill_batch_size")], s, buckets=list(range(1, 1025))),
        _family("tgi_batch_inference_count", "counter", "Inference calls per method (prefill or decode)",
                "iterations", [_series("iteration", "prefill_step", method="prefill"),
                               _series("iteration", "decode_step", method="decode")], m),
        _family("tgi_batch_inference_success", "counter",
                "Number of successful inference calls per method (prefill or decode)", None,
                [_series("iteration", "prefill_step", method="prefill"),
                 _series("iteration", "decode_step", method="decode")], m),
        _family("tgi_batch_forward_duration", "histogram", "Batch forward duration per method (prefill or decode)",
                "batch_forward_seconds", [_series("iteration", "prefill_time_s", method="prefill"),
                                          _series("iteration", "decode_time_s", method="decode")], m,
                buckets=duration),
        _family("tgi_batch_inference_duration", "histogram", "Batch inference duration", None,
                [_series("iteration", "prefill_time_s", method="prefill"),
                 _series("iteration", "decode_time_s", method="decode")], m, buckets=duration),
        _family("tgi_request_count", "counter", "Total number of requests", None,
                [_series("finish", "finished")], s),
        _family("tgi_request_success", "counter", "Number of successful requests", "requests_finished",
                [_series("finish", "finished")], s),
        _family("tgi_request_duration", "histogram", "Total time spent processing the request", "e2e_seconds",
                [_series("finish", "e2e_s")], s, buckets=duration),
        _family("tgi_request_queue_duration", "histogram", "Time spent in the queue per request", "queue_seconds",
                [_series("finish", "queue_s")], s, buckets=duration),
        _family("tgi_request_inference_duration", "histogram", "Request inference duration", None,
                [_series("finish", "inference_s")], s, buckets=duration),
        _family("tgi_request_mean_time_per_token_duration", "histogram", "Mean time per token per request",
                "tpot_seconds", [_series("finish", "mean_time_per_token_s")], s, buckets=duration),
        _family("tgi_request_input_length", "histogram", "Input token length per request", "prompt_tokens",
                [_series("finish", "prompt_tokens")], s, buckets=tgi_length_buckets(max_input_tokens)),
        _family("tgi_request_generated_tokens", "histogram", "Generated tokens per request", "generation_tokens",
                [_series("finish", "generation_tokens")], s, buckets=tgi_length_buckets(max_total_tokens)),
        _family("tgi_request_max_new_tokens", "histogram", "Maximum new tokens per request", None,
                [_series("finish", "max_tokens")], s, buckets=tgi_length_buckets(max_total_tokens)),
    ]
    return {"engine": "tgi", "format": "metrics-exporter-prometheus", "series_from_start": False,
            "label_sets": {"default": {}},
            "sources": [TGI_SOURCE, TGI_METHOD_SOURCE,
                        "huggingface/text-generation-inference docs/source/reference/metrics.md"],
            "families": families}


def table(engine: str, max_context: int) -> dict[str, Any]:
    """The table of one engine for a server whose context is max_context tokens (vLLM's max_model_len, TGI's
    max_total_tokens; TGI's max_input_tokens is max_context - 1)."""
    if engine == "vllm":
        return vllm_table(max_context)
    if engine == "sglang":
        return sglang_table()
    if engine == "tgi":
        return tgi_table(max_context - 1, max_context)
    raise ValueError(f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")


def tables(max_context: int = 1024) -> dict[str, Any]:
    """All three, as written to tests/data/engine-metrics/tables.json (serve_llm.py's default context)."""
    return {engine: table(engine, max_context) for engine in ENGINES}


# ---- rendering ------------------------------------------------------------------------------------------------


def go_float(value: float) -> str:
    """prometheus_client's floatToGoString: 1 → "1.0", +Inf, Go's switch to exponents above 1e6."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def rust_float(value: float) -> str:
    """Rust's f64 Display, as metrics-exporter-prometheus writes values and bounds: 3.0 → "3", no exponent."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer():
        return str(int(value))
    text = repr(value)
    if "e" in text:
        text = f"{value:.30f}".rstrip("0")
    return text


def _labels(pairs: list[tuple[str, str]]) -> str:
    if not pairs:
        return ""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, value in pairs)
    return "{" + ",".join(f'{key}="{value}"' for (key, _), value in zip(pairs, escaped)) + "}"


class _Series:
    def __init__(self, spec: dict[str, Any], labels: dict[str, str], bounds: Optional[list[float]]) -> None:
        self.event: str = spec["event"]
        self.value_key: Optional[str] = spec["value"]
        self.labels = labels
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1) if bounds is not None else []
        self.value = 0.0  # counter total, gauge value, histogram sum
        self.count = 0
        self.touched = False

    def update(self, kind: str, figure: Any) -> None:
        figures = figure if isinstance(figure, list) else [figure]
        for one in figures:
            if one is None or not math.isfinite(float(one)):
                continue
            self.touched = True
            if kind == "gauge":
                self.value = float(one)
            elif kind == "counter":
                self.value += float(one)
            else:
                assert self.bounds is not None
                index = next((i for i, bound in enumerate(self.bounds) if float(one) <= bound), len(self.bounds))
                self.counts[index] += 1
                self.value += float(one)
                self.count += 1


class EngineMetrics:
    """One engine's families, updated by the serving loop's events and rendered in that engine's exposition
    style. Thread-safe: the engine thread updates, HTTP threads render."""

    def __init__(self, engine: str, model: str, max_context: int) -> None:
        self.table = table(engine, max_context)
        self.style = self.table["format"]
        self.lock = threading.Lock()
        self.families: list[tuple[dict[str, Any], list[_Series]]] = []
        from_start = self.table["series_from_start"]
        for family in self.table["families"]:
            common = {key: value.replace("{model}", model)
                      for key, value in self.table["label_sets"][family["label_set"]].items()}
            series = [_Series(spec, {**common, **spec["labels"]}, family.get("buckets")) for spec in family["series"]]
            for one in series:
                one.touched = from_start
            self.families.append((family, series))

    def record(self, event: str, quantities: dict[str, Any]) -> None:
        """Updates every series of this event with its quantity (absent or None: left as it is)."""
        with self.lock:
            for family, series in self.families:
                for one in series:
                    if one.event != event:
                        continue
                    if one.value_key is None:  # a series the engine moves by 0 here (e.g. no prefix-cache hits)
                        one.touched = True
                    elif one.value_key in quantities:
                        one.update(family["type"], quantities[one.value_key])

    def render(self) -> str:
        with self.lock:
            return "".join(self._render_family(family, series) for family, series in self.families)

    def _render_family(self, family: dict[str, Any], series: list[_Series]) -> str:
        shown = [one for one in series if one.touched]
        if not shown:
            return ""
        rust = self.style == "metrics-exporter-prometheus"
        number = rust_float if rust else go_float
        name, kind = family["name"], family["type"]
        lines = [f"# HELP {name} {family['help']}", f"# TYPE {name} {kind}"]
        for one in shown:
            pairs = sorted(one.labels.items()) if not rust else list(one.labels.items())
            if kind != "histogram":
                text = str(int(one.value)) if rust and kind == "counter" else number(one.value)
                lines.append(f"{name}{_labels(pairs)} {text}")
                continue
            assert one.bounds is not None
            cumulative = 0
            for bound, count in zip([*one.bounds, math.inf], one.counts):
                cumulative += count
                le = ("le", number(bound))
                labels = [*pairs, le] if rust else sorted([*pairs, le])
                lines.append(f"{name}_bucket{_labels(labels)} {cumulative if rust else go_float(cumulative)}")
            if rust:  # metrics-exporter-prometheus: _sum then _count, after the buckets
                lines.append(f"{name}_sum{_labels(pairs)} {rust_float(one.value)}")
                lines.append(f"{name}_count{_labels(pairs)} {one.count}")
            else:  # prometheus_client: _count then _sum
                lines.append(f"{name}_count{_labels(pairs)} {go_float(one.count)}")
                lines.append(f"{name}_sum{_labels(pairs)} {go_float(one.value)}")
        return "\n".join(lines) + "\n"

