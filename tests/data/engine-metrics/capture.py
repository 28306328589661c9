# SPDX-License-Identifier: Apache-2.0
"""Writes this folder's fixtures: tables.json (examples/engine_metrics.py's tables) and, per engine, NAME.prom:
the engine's families as examples/serve_llm.py --engine-metrics NAME exports them after 8 completions (its
joule_inference_* series left out: a real engine has none), then series the real engine exports that the
example does not (from the engine's source and documentation: see the comments in each block).

    PYTHONPATH=build/python /usr/bin/python3 tests/data/engine-metrics/capture.py
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
EXAMPLES = HERE.parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

import engine_metrics  # noqa: E402

MODEL = "llama-3-8b"

# vLLM: vllm/v1/metrics/loggers.py (sleep state, prefix cache, cache_config_info), vllm/entrypoints (the
# prometheus-fastapi-instrumentator's http_* series) and prometheus_client's default collectors and
# _created gauges.
VLLM_EXTRA = """\
# HELP vllm:engine_sleep_state Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{engine="0",model_name="llama-3-8b",sleep_state="awake"} 1.0
vllm:engine_sleep_state{engine="0",model_name="llama-3-8b",sleep_state="weights_offloaded"} 0.0
vllm:engine_sleep_state{engine="0",model_name="llama-3-8b",sleep_state="discard_all"} 0.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="llama-3-8b"} 0.0
# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_created gauge
vllm:prefix_cache_queries_created{engine="0",model_name="llama-3-8b"} 1.7648e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="llama-3-8b"} 0.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="29126",num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4",swap_space_bytes="4294967296"} 1.0
# HELP http_requests_total Total number of requests by method, status and handler.
# TYPE http_requests_total counter
http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 8.0
http_requests_total{handler="/metrics",method="GET",status="2xx"} 3.0
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
python_gc_objects_collected_total{generation="1"} 2345.0
python_gc_objects_collected_total{generation="2"} 345.0
# HELP python_info Python platform information
# TYPE python_info gauge
python_info{implementation="CPython",major="3",minor="12",patchlevel="3",version="3.12.3"} 1.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 2.147483648e+09
"""

# SGLang: collector.py (cached tokens, aborted requests, CUDA graph, speculative decoding) and
# docs/references/production_metrics.md's sample (func_latency_seconds, exponential buckets).
SGLANG_EXTRA = """\
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{engine_type="unified",model_name="llama-3-8b"} 0.0
# HELP sglang:num_aborted_requests_total Number of requests aborted.
# TYPE sglang:num_aborted_requests_total counter
sglang:num_aborted_requests_total{engine_type="unified",model_name="llama-3-8b"} 0.0
# HELP sglang:is_cuda_graph Whether the batch is using CUDA graph.
# TYPE sglang:is_cuda_graph gauge
sglang:is_cuda_graph{engine_type="unified",model_name="llama-3-8b",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1.0
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="llama-3-8b",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0
# HELP sglang:func_latency_seconds Function latency in seconds
# TYPE sglang:func_latency_seconds histogram
sglang:func_latency_seconds_sum{name="generate_request"} 4.514771912145079
sglang:func_latency_seconds_bucket{le="0.05",name="generate_request"} 14006.0
sglang:func_latency_seconds_bucket{le="0.07500000000000001",name="generate_request"} 14006.0
sglang:func_latency_seconds_bucket{le="0.1125",name="generate_request"} 14006.0
sglang:func_latency_seconds_bucket{le="+Inf",name="generate_request"} 14007.0
sglang:func_latency_seconds_count{name="generate_request"} 14007.0
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 6789.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.073741824e+09
"""


def tgi_extra() -> str:
    """TGI: router/src/server.rs's other described families (validation duration; the per-method decode and
    filter durations with the same 35 duration buckets) and the failure counter with its err label."""
    bounds = engine_metrics.tgi_duration_buckets()
    lines = ["# HELP tgi_request_validation_duration Time spent validating the request",
             "# TYPE tgi_request_validation_duration histogram"]
    lines += [f'tgi_request_validation_duration_bucket{{le="{engine_metrics.rust_float(b)}"}} {8 if b > 0.0005 else 0}'
              for b in bounds]
    lines += ['tgi_request_validation_duration_bucket{le="+Inf"} 8', "tgi_request_validation_duration_sum 0.0061",
              "tgi_request_validation_duration_count 8"]
    for family, help_text in (("tgi_batch_decode_duration",
                               "Time spent decoding a batch per method (prefill or decode)"),
                              ("tgi_batch_filter_duration", "Time spent filtering batches and sending generated "
                                                            "tokens per method (prefill or decode)")):
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} histogram"]
        for method, count in (("prefill", 3), ("decode", 40)):
            lines += [f'{family}_bucket{{method="{method}",le="{engine_metrics.rust_float(b)}"}} '
                      f'{count if b > 0.0002 else 0}' for b in bounds]
            lines += [f'{family}_bucket{{method="{method}",le="+Inf"}} {count}',
                      f'{family}_sum{{method="{method}"}} {count * 0.00031}', f'{family}_count{{method="{method}"}} {count}']
    lines += ["# HELP tgi_request_failure Number of failed requests", "# TYPE tgi_request_failure counter",
              'tgi_request_failure{err="validation"} 1']
    return "\n".join(lines) + "\n"


def capture(serve_llm, engine: str) -> str:  # type: ignore[no-untyped-def]
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor
    from http.server import ThreadingHTTPServer
    import threading

    import torch

    args = serve_llm.parse_args(["--gpu", "h100", "--model", MODEL, "--max-batch", "4", "--engine-metrics", engine])
    torch.manual_seed(args.seed)
    model = serve_llm.TinyDecoder(args.layers, args.hidden, args.heads, args.max_context).eval()
    engine_ = serve_llm.Engine(args, model)
    server = ThreadingHTTPServer(("127.0.0.1", 0), serve_llm.make_handler(engine_, MODEL, int(time.time()), 1024))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    engine_.thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    def post(i: int) -> None:
        body = json.dumps({"model": MODEL, "prompt": "serving energy " * (i + 1), "max_tokens": 4 + 3 * i})
        request = urllib.request.Request(url + "/v1/completions", data=body.encode(), method="POST")
        urllib.request.urlopen(request, timeout=60).read()

    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(post, range(8)))
        assert engine_.engine_metrics is not None
        return engine_.engine_metrics.render()
    finally:
        server.shutdown()
        server.server_close()
        engine_.close()


def main() -> None:
    (HERE / "tables.json").write_text(json.dumps(engine_metrics.tables(), indent=1, sort_keys=True) + "\n")
    spec = importlib.util.spec_from_file_location("serve_llm", EXAMPLES / "serve_llm.py")
    assert spec is not None and spec.loader is not None
    serve_llm = importlib.util.module_from_spec(spec)
    sys.modules["serve_llm"] = serve_llm  # its dataclasses look their module up
    spec.loader.exec_module(serve_llm)
    extras = {"vllm": VLLM_EXTRA, "sglang": SGLANG_EXTRA, "tgi": tgi_extra()}
    for engine in engine_metrics.ENGINES:
        (HERE / f"{engine}.prom").write_text(capture(serve_llm, engine) + extras[engine])


if __name__ == "__main__":
    main()
