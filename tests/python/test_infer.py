# SPDX-License-Identifier: Apache-2.0
"""LLM serving energy from Python: joule.RequestEnergyLedger (attribution rules, errors), joule.LlmDevice
(the serving model on simulated GPUs: energy counters, Monitor, clock locks), joule.SloClockController on a
serving loop written in Python, and joule.InferenceMetrics (the C++ metrics, rendered and promtool-checked when
promtool is on PATH)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import joule

from prometheus_text import parse_exposition

# ---- RequestEnergyLedger ----------------------------------------------------------------------------------------


def two_iterations(ledger: joule.RequestEnergyLedger) -> None:
    """r1 (30-token prompt) and r2 (10) prefill together for 8 J, then decode one token each for 1 J."""
    ledger.add_request("r1", 0.0)
    ledger.add_request("r2", 0.5)
    ledger.record_iteration(1.0, 1.5, 8.0, [("r1", 30, 0, True), {"request_id": "r2", "prefill_tokens": 10,
                                                                 "first_token": True}])
    ledger.record_iteration(1.5, 1.6, 1.0, [("r1", 0, 1, False), ("r2", 0, 1, False)])


def test_the_tokens_rule_splits_by_tokens_and_gives_latency() -> None:
    ledger = joule.RequestEnergyLedger()
    assert ledger.rule == "tokens"
    two_iterations(ledger)
    assert ledger.active_requests == 2
    so_far = ledger.find("r1")
    assert so_far is not None and so_far.energy_j == pytest.approx(6.5)
    assert ledger.find("nobody") is None
    r1 = ledger.finish_request("r1")
    assert isinstance(r1, joule.RequestEnergy)
    assert r1.request_id == "r1" and r1.arrival_s == 0.0
    assert r1.prompt_tokens == 30 and r1.output_tokens == 2
    assert r1.prefill_energy_j == pytest.approx(6.0)  # 30 of the 40 prompt tokens
    assert r1.decode_energy_j == pytest.approx(0.5)
    assert r1.energy_j == pytest.approx(r1.prefill_energy_j + r1.decode_energy_j)
    assert r1.energy_per_output_token_j == pytest.approx(3.25)
    assert r1.first_token_s == 1.5 and r1.finish_s == 1.6
    assert r1.ttft_s == pytest.approx(1.5)
    assert r1.tpot_s == pytest.approx(0.1)
    r2 = ledger.finish_request("r2")
    assert r2.energy_j == pytest.approx(2.5) and r2.ttft_s == pytest.approx(1.0)
    assert r2.to_dict()["prefill_energy_j"] == pytest.approx(2.0)
    assert ledger.active_requests == 0
    totals = ledger.totals
    assert totals == pytest.approx({"energy_j": 9.0, "attributed_energy_j": 9.0, "idle_energy_j": 0.0,
                                    "iterations": 2, "prefill_tokens": 40, "decode_tokens": 2})


def test_the_equal_and_work_rules() -> None:
    equal = joule.RequestEnergyLedger("equal")
    two_iterations(equal)
    assert equal.finish_request("r1").energy_j == pytest.approx(4.5)
    assert equal.finish_request("r2").energy_j == pytest.approx(4.5)

    work = joule.RequestEnergyLedger(rule="work")
    work.add_request("a", 0.0)
    work.add_request("b", 0.0)
    work.record_iteration(0.0, 1.0, 10.0, [("a", 4, 0, True, 3.0), {"request_id": "b", "decode_tokens": 1,
                                                                   "work": 1.0}])
    a, b = work.finish_request("a"), work.finish_request("b")
    assert a.energy_j == pytest.approx(7.5) and a.prefill_energy_j == pytest.approx(7.5)
    assert b.energy_j == pytest.approx(2.5) and b.decode_energy_j == pytest.approx(2.5)


def test_idle_energy_and_requests_without_tokens() -> None:
    ledger = joule.RequestEnergyLedger()
    ledger.record_idle(5.0)
    ledger.record_iteration(0.0, 1.0, 2.0, [])  # no request: idle too
    ledger.add_request("r", 3.0)
    never_ran = ledger.finish_request("r")
    assert never_ran.energy_j == 0 and never_ran.output_tokens == 0
    assert never_ran.ttft_s is None and never_ran.tpot_s is None and never_ran.first_token_s is None
    assert never_ran.energy_per_output_token_j == 0
    ledger.add_request("one", 0.0)
    ledger.record_iteration(0.0, 0.2, 1.0, [("one", 5, 0, True)])
    one = ledger.finish_request("one")
    assert one.ttft_s == pytest.approx(0.2) and one.tpot_s is None
    assert ledger.totals["idle_energy_j"] == pytest.approx(7.0)
    assert ledger.totals["energy_j"] == pytest.approx(8.0)


def test_ledger_errors_carry_the_cpp_message_and_record_nothing() -> None:
    with pytest.raises(joule.InvalidArgumentError, match="unknown attribution rule 'joules': expected tokens, work"):
        joule.RequestEnergyLedger("joules")
    ledger = joule.RequestEnergyLedger()
    ledger.add_request("r1", 0.0)
    with pytest.raises(joule.StateError, match="request 'r1' is already tracked"):
        ledger.add_request("r1", 1.0)
    with pytest.raises(joule.InvalidArgumentError, match="a request id must not be empty"):
        ledger.add_request("", 1.0)
    with pytest.raises(joule.InvalidArgumentError, match="arrival_s must be finite"):
        ledger.add_request("r2", math.nan)
    with pytest.raises(joule.NotFoundError, match="request 'ghost' was never added"):
        ledger.record_iteration(0.0, 1.0, 1.0, [("r1", 1, 0, True), ("ghost", 0, 1, False)])
    with pytest.raises(joule.InvalidArgumentError, match="end_s >= start_s"):
        ledger.record_iteration(1.0, 0.5, 1.0, [("r1", 1, 0, True)])
    with pytest.raises(joule.InvalidArgumentError, match="energy_j must be finite and >= 0"):
        ledger.record_iteration(0.0, 1.0, -1.0, [("r1", 1, 0, True)])
    with pytest.raises(joule.InvalidArgumentError, match="request 'r1' is listed twice"):
        ledger.record_iteration(0.0, 1.0, 1.0, [("r1", 1, 0, True), ("r1", 0, 1, False)])
    with pytest.raises(joule.InvalidArgumentError, match="request 'r1' processed no token"):
        ledger.record_iteration(0.0, 1.0, 1.0, [("r1", 0, 0, False)])
    with pytest.raises(joule.InvalidArgumentError, match="idle energy_j must be finite"):
        ledger.record_idle(math.inf)
    with pytest.raises(joule.NotFoundError, match="request 'ghost' is not tracked"):
        ledger.finish_request("ghost")
    # The Python side's own checks of the work items, naming the item and the field.
    with pytest.raises(joule.InvalidArgumentError, match=r"work\[1\] must be a dict or a tuple"):
        ledger.record_iteration(0.0, 1.0, 1.0, [("r1", 1, 0, True), "r1"])
    with pytest.raises(joule.InvalidArgumentError, match=r"work\[0\] has 3 fields"):
        ledger.record_iteration(0.0, 1.0, 1.0, [("r1", 1, 0)])
    with pytest.raises(joule.InvalidArgumentError, match=r"work\[0\].prefill_tokens must be an integer, got 1.5"):
        ledger.record_iteration(0.0, 1.0, 1.0, [("r1", 1.5, 0, True)])
    with pytest.raises(joule.InvalidArgumentError, match=r"work\[0\].first_token must be True or False, got 1"):
        ledger.record_iteration(0.0, 1.0, 1.0, [("r1", 1, 0, 1)])
    with pytest.raises(joule.InvalidArgumentError, match=r"work\[0\] has an unknown key 'prefill'"):
        ledger.record_iteration(0.0, 1.0, 1.0, [{"request_id": "r1", "prefill": 3}])
    with pytest.raises(joule.InvalidArgumentError, match=r"work\[0\] lacks 'request_id'"):
        ledger.record_iteration(0.0, 1.0, 1.0, [{"prefill_tokens": 3}])
    assert ledger.totals["iterations"] == 0 and ledger.totals["energy_j"] == 0
    assert ledger.find("r1").energy_j == 0  # type: ignore[union-attr]


# ---- the serving model and LlmDevice ----------------------------------------------------------------------------


def test_built_in_gpus_and_models() -> None:
    gpus = {gpu["key"]: gpu for gpu in joule.llm_gpus()}
    assert {"h100", "a100-80gb", "a100-40gb"} <= set(gpus)
    for gpu in gpus.values():
        assert gpu["peak_bf16_flops"] > 0 and gpu["hbm_bandwidth_bps"] > 0 and gpu["tdp_w"] > gpu["idle_power_w"] > 0
        assert gpu["max_sm_clock_mhz"] > gpu["min_sm_clock_mhz"] > 0
        assert gpu["source"]
    models = {model["key"]: model for model in joule.llm_models()}
    assert {"llama-3-8b", "llama-3-70b"} <= set(models)
    assert models["llama-3-70b"]["default_tensor_parallel"] > 1
    assert models["llama-3-8b"]["layers"] == 32


def test_unknown_gpu_or_model_lists_the_known_ones() -> None:
    with pytest.raises(joule.NotFoundError, match="h100"):
        joule.LlmDevice(gpu="h200x")
    with pytest.raises(joule.NotFoundError, match="llama-3-8b"):
        joule.LlmDevice(model="gpt-5")
    with pytest.raises(joule.InvalidArgumentError):
        joule.LlmDevice(tensor_parallel=0)


def gpu_energy_j(device: joule.LlmDevice) -> float:
    return sum(gpu.energy_j() for gpu in device.gpus)


def test_the_energy_counters_add_up_to_the_iterations() -> None:
    device = joule.LlmDevice("h100", "llama-3-8b")
    assert device.tensor_parallel == 1 and len(device.gpus) == 1
    assert device.now_s() == 0.0
    gpu = device.gpus[0]
    assert gpu.backend == "sim" and gpu.has_energy_counter
    clocks = device.supported_clocks_mhz()
    assert clocks == sorted(clocks, reverse=True) and gpu.supported_sm_clocks_mhz() == clocks
    before = gpu_energy_j(device)
    total = 0.0
    contexts: list[int] = []
    for step in range(200):
        prefill = [(512, 0)] if step % 20 == 0 else []
        result = device.run_iteration(contexts, prefill)
        assert set(result) >= {"time_s", "power_w", "energy_j", "clock_mhz", "compute_s", "memory_s", "start_s",
                               "end_s"}
        assert result["end_s"] - result["start_s"] == pytest.approx(result["time_s"], abs=2e-9)
        assert result["energy_j"] == pytest.approx(result["time_s"] * result["power_w"])
        total += result["energy_j"]
        contexts = [context + 1 for context in contexts] + [512 + 1 for _ in prefill]
    assert device.now_s() > 0
    assert gpu_energy_j(device) - before == pytest.approx(total, rel=1e-6, abs=0.002)
    # An empty batch does nothing.
    now, energy = device.now_s(), gpu_energy_j(device)
    nothing = device.run_iteration([], [])
    assert nothing["time_s"] == 0 and nothing["energy_j"] == 0
    assert device.now_s() == now and gpu_energy_j(device) == energy
    # Idle: the counters follow the idle power.
    idle_from = gpu_energy_j(device)
    device.idle_until(now + 2.0)
    assert device.now_s() == pytest.approx(now + 2.0)
    assert gpu_energy_j(device) - idle_from == pytest.approx(2.0 * device.gpu_spec["idle_power_w"], rel=0.01)


def test_a_monitor_window_measures_an_iteration() -> None:
    device = joule.LlmDevice("a100-80gb", "llama-3-70b")
    assert device.tensor_parallel == joule.llm_models()[[m["key"] for m in joule.llm_models()].index("llama-3-70b")][
        "default_tensor_parallel"]
    assert len(device.gpus) == device.tensor_parallel
    assert device.devices.is_virtual and len(device.devices.gpus) == device.tensor_parallel
    monitor = joule.Monitor(devices=device.devices, cpus=[])
    monitor.begin_window("iteration")
    result = device.run_iteration([1000] * 16, [(256, 0)])
    measurement = monitor.end_window("iteration")
    assert measurement.time_s == pytest.approx(result["time_s"], abs=2e-9)
    assert measurement.total_gpu_energy_j == pytest.approx(result["energy_j"], rel=1e-4,
                                                           abs=0.002 * device.tensor_parallel)
    assert result["energy_j"] == pytest.approx(result["time_s"] * result["power_w"] * device.tensor_parallel)


def test_a_clock_lock_through_a_settings_guard_slows_prefill() -> None:
    device = joule.LlmDevice("h100", "llama-3-8b")
    clocks = device.supported_clocks_mhz()
    batch: tuple[list[int], list[tuple[int, int]]] = ([], [(2048, 0)])
    fast = device.run_iteration(*batch)  # unlocked: the highest clock the power limit allows
    assert clocks[0] * 0.9 < fast["clock_mhz"] <= clocks[0]
    guard = joule.SettingsGuard("test")
    low = clocks[len(clocks) // 2]
    for gpu in device.gpus:
        guard.lock_sm_clocks_mhz(gpu, low, low)
    slow = device.run_iteration(*batch)
    assert slow["clock_mhz"] == low
    assert slow["time_s"] > fast["time_s"] * 1.2  # compute-bound
    assert slow == pytest.approx({**device.predict(*batch, clock_mhz=low), "start_s": slow["start_s"],
                                  "end_s": slow["end_s"]})
    assert device.settings_log()[-1]["setting"] == "sm_clocks_locked_mhz"
    guard.restore()
    assert device.settings_log()[-1]["setting"] == "sm_clocks_reset"
    assert device.run_iteration(*batch)["clock_mhz"] == fast["clock_mhz"]


def test_bad_batches() -> None:
    device = joule.LlmDevice()
    with pytest.raises(joule.InvalidArgumentError, match=r"decode_contexts\[1\] must be ≥ 1"):
        device.run_iteration([5, 0], [])
    with pytest.raises(joule.InvalidArgumentError, match=r"prefill\[0\] tokens must be ≥ 1"):
        device.run_iteration([], [(0, 0)])
    with pytest.raises(joule.InvalidArgumentError, match="time_s must be a finite number"):
        device.idle_until(math.nan)
    with pytest.raises(joule.NotFoundError, match="no GPU 3"):
        device.settings_log(3)


# ---- SloClockController ----------------------------------------------------------------------------------------


def test_controller_arguments() -> None:
    clocks = joule.LlmDevice().supported_clocks_mhz()
    controller = joule.SloClockController(0.5, 0.05, clocks)
    assert controller.name == "joule"
    assert controller.clock_mhz in clocks
    assert controller.window_attainment == 1.0 and not controller.slo_unattainable
    assert controller.slo == pytest.approx({"ttft_s": 0.5, "tpot_s": 0.05, "attainment": 0.99})
    models = controller.models()
    assert models and [m["clock_mhz"] for m in models] == sorted((m["clock_mhz"] for m in models), reverse=True)
    with pytest.raises(joule.InvalidArgumentError):
        joule.SloClockController(-1.0, 0.05, clocks)
    with pytest.raises(joule.InvalidArgumentError):
        joule.SloClockController(0.5, 0.05, [])
    with pytest.raises(joule.InvalidArgumentError, match="end_s"):
        controller.on_iteration(start_s=1.0, end_s=0.5, energy_j=1.0, clock_mhz=clocks[0])
    with pytest.raises(TypeError):
        controller.on_iteration(1.0, 2.0, 1.0, clocks[0])  # type: ignore[misc]  # keywords only


def test_controller_of_power_limits_names_its_knob() -> None:
    # A controller of power limits (GPUs whose clocks cannot be locked) answers in W, never in MHz.
    clocks = joule.SloClockController(1.0, 0.1, [1980, 1410])
    assert clocks.knob == "sm_clock_mhz" and clocks.clock_mhz == 1980
    with pytest.raises(joule.StateError, match="no power_limit_w"):
        clocks.power_limit_w
    limits = joule.SloClockController(1.0, 0.1, power_limits_w=[300, 700, 500])
    assert limits.knob == "power_limit_w" and limits.power_limit_w == 700
    assert "power_limit=700 W" in repr(limits)
    with pytest.raises(joule.StateError, match="no clock_mhz"):
        limits.clock_mhz
    assert [m["power_limit_w"] for m in limits.models()] == [700, 500, 300]
    limits.on_iteration(start_s=0.0, end_s=0.02, energy_j=8.0, power_limit_w=700, decode_requests=20)
    limits.seed([{"start_s": 0.0, "end_s": 0.02, "energy_j": 8.0, "power_limit_w": 700}])
    assert limits.models()[0]["samples"] == 2
    with pytest.raises(TypeError, match="give power_limit_w="):
        limits.on_iteration(start_s=0.0, end_s=0.02, energy_j=8.0, clock_mhz=1980)
    with pytest.raises(TypeError, match="give clock_mhz="):
        clocks.on_iteration(start_s=0.0, end_s=0.02, energy_j=8.0, clock_mhz=1980, power_limit_w=700)
    with pytest.raises(joule.InvalidArgumentError, match="lacks 'power_limit_w'"):
        limits.seed([{"start_s": 0.0, "end_s": 0.02, "energy_j": 8.0, "clock_mhz": 1980}])
    with pytest.raises(TypeError, match="exactly one"):
        joule.SloClockController(1.0, 0.1)
    with pytest.raises(TypeError, match="exactly one"):
        joule.SloClockController(1.0, 0.1, [1980], power_limits_w=[700])


def test_controller_of_power_limits_over_a_tensor_parallel_group() -> None:
    # knob_gpus: the limit is per GPU, the energy of all; pending prompts answer a burst at once.
    limits = joule.SloClockController(1.0, 0.1, power_limits_w=[700, 450, 200], knob_gpus=2, max_margin=1.5)
    limits.on_iteration(start_s=0.0, end_s=0.02, energy_j=8.0, power_limit_w=700, decode_requests=20,
                        pending_prompt_tokens=4000, oldest_pending_s=0.1)
    assert limits.power_limit_w == 700
    with pytest.raises(joule.InvalidArgumentError, match="knob_gpus must be at least 1, got 0"):
        joule.SloClockController(1.0, 0.1, power_limits_w=[700], knob_gpus=0)
    with pytest.raises(joule.InvalidArgumentError, match="max_margin must be at least margin"):
        joule.SloClockController(1.0, 0.1, power_limits_w=[700], max_margin=0.5)
    with pytest.raises(joule.InvalidArgumentError, match="pending_prompt_tokens must be a finite number ≥ 0"):
        limits.on_iteration(start_s=0.0, end_s=0.02, energy_j=8.0, power_limit_w=700, pending_prompt_tokens=-1)


def serve(device: joule.LlmDevice, controller: joule.SloClockController, guard: joule.SettingsGuard,
          arrivals: list[float], prompt: int, output: int) -> dict[str, Any]:
    """A continuous-batching loop in Python on the LlmDevice: each iteration admits every arrived request
    (prefill, first token) and decodes one token for every running one; the controller picks the clock."""
    ledger = joule.RequestEnergyLedger()
    pending = list(enumerate(arrivals))
    running: dict[str, int] = {}  # id → tokens generated
    clocks: list[int] = []
    done: list[joule.RequestEnergy] = []
    locked = None
    while pending or running:
        if not running and pending[0][1] > device.now_s():
            start = device.now_s()
            energy = gpu_energy_j(device)
            device.idle_until(pending[0][1])
            idle_j = gpu_energy_j(device) - energy
            ledger.record_idle(idle_j)
            controller.on_idle(start, device.now_s(), idle_j)
        admitted = []
        while pending and pending[0][1] <= device.now_s():
            index, arrival = pending.pop(0)
            ledger.add_request(f"r{index}", arrival)
            admitted.append(f"r{index}")
        clock = controller.clock_mhz
        if clock != locked:
            for gpu in device.gpus:
                guard.lock_sm_clocks_mhz(gpu, clock, clock)
            locked = clock
        clocks.append(clock)
        decoding = list(running)
        energy = gpu_energy_j(device)
        result = device.run_iteration([prompt + running[r] for r in decoding], [(prompt, 0)] * len(admitted))
        energy_j = gpu_energy_j(device) - energy
        ledger.record_iteration(result["start_s"], result["end_s"], energy_j,
                                [(r, prompt, 0, True) for r in admitted] + [(r, 0, 1, False) for r in decoding])
        controller.on_iteration(start_s=result["start_s"], end_s=result["end_s"], energy_j=energy_j,
                                clock_mhz=int(result["clock_mhz"]), decode_requests=len(decoding),
                                prefill_tokens=prompt * len(admitted))
        for r in decoding:
            running[r] += 1
        for r in admitted:
            running[r] = 1
        for r in [r for r, tokens in running.items() if tokens >= output]:
            del running[r]
            figures = ledger.finish_request(r)
            controller.on_request_done(figures.finish_s, figures.ttft_s, figures.tpot_s, figures.prompt_tokens)
            done.append(figures)
    return {"clocks": clocks, "requests": done, "energy_j": ledger.totals["energy_j"]}


def test_the_controller_lowers_the_clock_under_light_load() -> None:
    device = joule.LlmDevice("h100", "llama-3-8b")
    clocks = device.supported_clocks_mhz()
    controller = joule.SloClockController(1.0, 0.1, clocks, interval_s=0.5, window_s=5.0)
    guard = joule.SettingsGuard("test")
    arrivals = [0.25 * i for i in range(160)]  # 4 requests/s for 40 s: a light load for an H100
    served = serve(device, controller, guard, arrivals, prompt=256, output=32)
    assert len(served["requests"]) == 160
    first, last = served["clocks"][0], served["clocks"][-1]
    assert first == clocks[0]
    assert last < clocks[0] * 0.9, served["clocks"][-50:]
    late = [r for r in served["requests"] if r.arrival_s >= 20.0]
    met = [r for r in late if r.ttft_s <= 1.0 and (r.tpot_s is None or r.tpot_s <= 0.1)]
    assert len(met) / len(late) >= 0.99
    assert any(model["measured"] for model in controller.models())
    guard.restore()
    assert device.settings_log()[-1]["setting"] == "sm_clocks_reset"

    # The same load at the highest clock throughout uses more energy.
    fixed_device = joule.LlmDevice("h100", "llama-3-8b")
    fixed = joule.SloClockController(1.0, 0.1, [clocks[0]])
    max_clock = serve(fixed_device, fixed, joule.SettingsGuard("test"), arrivals, prompt=256, output=32)
    assert served["energy_j"] < max_clock["energy_j"]


def test_the_controller_starts_from_a_card() -> None:
    """With the GPU's frontier card the controller goes where the card predicts at its first decisions, instead of
    one level a decision; a card of another GPU, or none, is refused with the reason."""
    card = os.path.join(os.environ.get("JOULE_SOURCE_DIR", "."), "data", "cards", "sim-h100.json")
    arrivals = [0.25 * i for i in range(160)]

    def first_low_clock(with_card: bool) -> tuple[int, dict[str, str]]:
        device = joule.LlmDevice("h100", "llama-3-8b")
        clocks = device.supported_clocks_mhz()
        controller = joule.SloClockController(1.0, 0.1, clocks, interval_s=0.5, window_s=5.0)
        assert controller.card_use == {"state": "none", "why": ""}
        if with_card:
            controller.start_from_card(card, device.gpus[0])
            assert controller.card_use["state"] == "active", controller.card_use
        served = serve(device, controller, joule.SettingsGuard("test"), arrivals, prompt=256, output=32)
        late = [r for r in served["requests"] if r.arrival_s >= 20.0]
        met = [r for r in late if r.ttft_s <= 1.0 and (r.tpot_s is None or r.tpot_s <= 0.1)]
        assert len(met) / len(late) >= 0.99
        low = next(i for i, clock in enumerate(served["clocks"]) if clock < clocks[0] * 0.7)
        return low, controller.card_use

    without, _ = first_low_clock(False)
    with_card, use = first_low_clock(True)
    assert with_card < without, (with_card, without, use)

    device = joule.LlmDevice("h100", "llama-3-8b")
    controller = joule.SloClockController(1.0, 0.1, device.supported_clocks_mhz())
    other = card.replace("sim-h100", "sim-v100")
    with pytest.raises(joule.InvalidArgumentError, match=r"sim-v100.json is for Tesla V100-PCIE-32GB .* not NVIDIA "
                                                         r"H100 80GB HBM3 \(driver sim\): make a card for this "
                                                         r"device with 'joule probe'"):
        controller.start_from_card(other, device.gpus[0])
    with pytest.raises(joule.NotFoundError, match="cannot open /nonexistent/card.json"):
        controller.start_from_card("/nonexistent/card.json", device.gpus[0])
    assert controller.card_use["state"] == "none"


# ---- InferenceMetrics -------------------------------------------------------------------------------------------



def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def promtool_check(text: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        return
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def finished_requests() -> list[joule.RequestEnergy]:
    ledger = joule.RequestEnergyLedger()
    two_iterations(ledger)
    return [ledger.finish_request("r1"), ledger.finish_request("r2")]


def test_inference_metrics_render_every_family_in_base_units() -> None:
    metrics = joule.InferenceMetrics(gpu="h100")
    assert metrics.gpu == "h100" and repr(metrics) == "<joule.InferenceMetrics gpu='h100'>"
    assert joule.InferenceMetrics.CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    r1, r2 = finished_requests()  # r1: 6.5 J (6 + 0.5), TTFT 1.5 s; r2: 2.5 J (2 + 0.5), TTFT 1 s; TPOT 0.1 s
    metrics.observe_request("llama", r1, True)
    metrics.observe_request("llama", r2, slo_met=False)
    metrics.add_iterations("llama", 2)
    metrics.add_idle_energy("llama", 0.25)
    metrics.set_requests("llama", 3, 1)
    metrics.set_slo("llama", 0.5, 0.05)
    metrics.set_slo_attainment("llama", 0.75)
    metrics.set_slo_unattainable("llama", True)
    metrics.set_sm_clock_mhz("llama", 1410)
    metrics.set_power_limit_w("llama", 300)
    text = metrics.render()
    types, samples = parse_exposition(text)
    assert types == {
        "joule_inference_request_energy_joules": "histogram",
        "joule_inference_energy_per_output_token_joules": "histogram",
        "joule_inference_time_to_first_token_seconds": "histogram",
        "joule_inference_time_per_output_token_seconds": "histogram",
        "joule_inference_energy_joules_total": "counter",
        "joule_inference_requests_total": "counter",
        "joule_inference_prompt_tokens_total": "counter",
        "joule_inference_output_tokens_total": "counter",
        "joule_inference_iterations_total": "counter",
        "joule_inference_requests_running": "gauge",
        "joule_inference_requests_waiting": "gauge",
        "joule_inference_slo_target_seconds": "gauge",
        "joule_inference_slo_attainment_ratio": "gauge",
        "joule_inference_slo_unattainable": "gauge",
        "joule_inference_sm_clock_hertz": "gauge",
        "joule_inference_power_limit_watts": "gauge",
    }
    for _, labels in samples:
        assert {("model", "llama"), ("gpu", "h100")} <= labels
    base = {"model": "llama", "gpu": "h100"}
    assert value(samples, "joule_inference_request_energy_joules_count", **base) == 2
    assert value(samples, "joule_inference_request_energy_joules_sum", **base) == pytest.approx(9.0)
    assert value(samples, "joule_inference_request_energy_joules_bucket", **base, le="5") == 1  # r2
    assert value(samples, "joule_inference_request_energy_joules_bucket", **base, le="10") == 2
    assert value(samples, "joule_inference_energy_per_output_token_joules_sum", **base) == pytest.approx(4.5)
    assert value(samples, "joule_inference_time_to_first_token_seconds_sum", **base) == pytest.approx(2.5)
    assert value(samples, "joule_inference_time_to_first_token_seconds_bucket", **base, le="1") == 1
    assert value(samples, "joule_inference_time_per_output_token_seconds_count", **base) == 2
    assert value(samples, "joule_inference_time_per_output_token_seconds_sum", **base) == pytest.approx(0.2)
    assert value(samples, "joule_inference_energy_joules_total", **base, phase="prefill") == pytest.approx(8.0)
    assert value(samples, "joule_inference_energy_joules_total", **base, phase="decode") == pytest.approx(1.0)
    assert value(samples, "joule_inference_energy_joules_total", **base, phase="idle") == 0.25
    assert value(samples, "joule_inference_requests_total", **base, slo="met") == 1
    assert value(samples, "joule_inference_requests_total", **base, slo="missed") == 1
    assert value(samples, "joule_inference_prompt_tokens_total", **base) == 40
    assert value(samples, "joule_inference_output_tokens_total", **base) == 4
    assert value(samples, "joule_inference_iterations_total", **base) == 2
    assert value(samples, "joule_inference_requests_running", **base) == 3
    assert value(samples, "joule_inference_requests_waiting", **base) == 1
    assert value(samples, "joule_inference_slo_target_seconds", **base, slo="ttft") == 0.5
    assert value(samples, "joule_inference_slo_target_seconds", **base, slo="tpot") == 0.05
    assert value(samples, "joule_inference_slo_attainment_ratio", **base) == 0.75
    assert value(samples, "joule_inference_slo_unattainable", **base) == 1
    assert value(samples, "joule_inference_sm_clock_hertz", **base) == 1.41e9
    assert value(samples, "joule_inference_power_limit_watts", **base) == 300
    # No phase-less total and no separate idle counter: the phases are the whole energy.
    assert "joule_inference_idle_energy_joules_total" not in text
    assert not any(name == "joule_inference_energy_joules_total" and "phase" not in dict(labels)
                   for name, labels in samples)
    promtool_check(text)


def test_inference_metrics_skip_bad_values_and_label_models_apart() -> None:
    metrics = joule.InferenceMetrics()  # no gpu label
    assert metrics.gpu == ""
    assert not [line for line in metrics.render().splitlines() if line and not line.startswith("#")]
    r1, _ = finished_requests()
    metrics.observe_request("a", r1)  # no SLO: slo="none"
    metrics.observe_request('b "quoted"\\', r1, None)
    metrics.add_idle_energy("a", 1.0)
    for bad in (-1.0, math.nan, math.inf):
        metrics.add_idle_energy("a", bad)
        metrics.set_sm_clock_mhz("a", bad)
    metrics.set_sm_clock_mhz("a", 1000)
    metrics.set_slo_attainment("a", 0.5)
    metrics.set_slo_attainment("a", 1.5)
    metrics.add_iterations("a", 0)
    metrics.set_requests("a", -1, 2)
    text = metrics.render()
    _, samples = parse_exposition(text)
    for _, labels in samples:
        assert "gpu" not in dict(labels)
    assert value(samples, "joule_inference_requests_total", model="a", slo="none") == 1
    assert value(samples, "joule_inference_requests_total", model='b \\"quoted\\"\\\\', slo="none") == 1
    assert value(samples, "joule_inference_energy_joules_total", model="a", phase="idle") == 1.0
    assert value(samples, "joule_inference_sm_clock_hertz", model="a") == 1e9
    assert value(samples, "joule_inference_slo_attainment_ratio", model="a") == 0.5
    assert value(samples, "joule_inference_requests_waiting", model="a") == 2
    assert ("joule_inference_requests_running", frozenset({("model", "a")})) not in samples
    assert not any(name == "joule_inference_iterations_total" for name, _ in samples)
    promtool_check(text)


def test_inference_metrics_buckets() -> None:
    metrics = joule.InferenceMetrics("a100", ttft_buckets_s=[0.5, 2.0], request_energy_buckets_j=(1, 10))
    r1, r2 = finished_requests()
    metrics.observe_request("m", r1, True)
    metrics.observe_request("m", r2, True)
    _, samples = parse_exposition(metrics.render())
    ttft = sorted((dict(labels)["le"], count) for (name, labels), count in samples.items()
                  if name == "joule_inference_time_to_first_token_seconds_bucket")
    assert ttft == [("+Inf", 2), ("0.5", 0), ("2", 2)]
    energy = {dict(labels)["le"] for name, labels in samples if name == "joule_inference_request_energy_joules_bucket"}
    assert energy == {"1", "10", "+Inf"}
    assert value(samples, "joule_inference_time_per_output_token_seconds_bucket", model="m", gpu="a100", le="0.15") == 2
    for bad in ([], [1.0, 0.5], [0.1, 0.1], [math.nan]):
        with pytest.raises(joule.InvalidArgumentError, match="TPOT buckets"):
            joule.InferenceMetrics(tpot_buckets_s=bad)
    with pytest.raises(TypeError):
        joule.InferenceMetrics("h100", [1.0])  # buckets are keywords


def test_inference_metrics_render_while_another_thread_observes() -> None:
    metrics = joule.InferenceMetrics("h100")
    r1, _ = finished_requests()
    stop = threading.Event()

    def observe() -> int:
        count = 0
        while not stop.is_set() and count < 20000:
            metrics.observe_request("m", r1, True)
            metrics.add_iterations("m", 1)
            count += 1
        return count

    with ThreadPoolExecutor(1) as pool:
        observed = pool.submit(observe)
        for _ in range(50):
            parse_exposition(metrics.render())
        stop.set()
        count = observed.result()
    _, samples = parse_exposition(metrics.render())
    assert value(samples, "joule_inference_requests_total", model="m", gpu="h100", slo="met") == count
    assert value(samples, "joule_inference_iterations_total", model="m", gpu="h100") == count
