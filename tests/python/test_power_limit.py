# SPDX-License-Identifier: Apache-2.0
"""joule.PowerLimitOptimizer on a simulated V100 whose iterations run on a virtual clock."""

from __future__ import annotations

import pathlib
from typing import Optional

import pytest

import joule
from conftest import SOURCE_DIR

FAST = dict(wait_steps=1, warmup_steps=2, profile_steps=5, restore_on_signals=False)


def train(optimizer: joule.PowerLimitOptimizer, devices: joule.DeviceSet, steps: int, epoch_steps: Optional[int] = None) -> None:
    for step in range(steps):
        optimizer.on_step_begin()
        devices.run_iterations(1)
        optimizer.on_step_end()
        if epoch_steps and (step + 1) % epoch_steps == 0:
            optimizer.on_epoch_end()


def test_profiles_every_candidate_then_keeps_the_cheapest(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    optimizer = joule.PowerLimitOptimizer(monitor, eta=0.5, **FAST)
    assert optimizer.state == "ready"
    assert optimizer.candidates_w == [250.0, 225.0, 200.0, 175.0, 150.0, 125.0, 100.0]
    assert sim.gpus[0].power_limit_w() == 250.0
    train(optimizer, sim, 1 + 7 * 7 + 1)
    assert optimizer.done
    chosen = optimizer.chosen_power_limit_w
    assert chosen is not None and sim.gpus[0].power_limit_w() == chosen
    assert [m["power_limit_w"] for m in optimizer.measurements] == optimizer.candidates_w
    assert all(m["steps"] == 5 for m in optimizer.measurements)
    # The choice is ZeusCost(0.5, 250 W × 1 GPU × 1 rank) over the per-step frontier.
    frontier = joule.Frontier(
        (m["power_limit_w"], m["time_per_step_s"], m["energy_per_step_j"]) for m in optimizer.measurements
    )
    assert frontier.select(joule.ZeusCost(0.5, 250.0)).knob == chosen
    assert [p.knob for p in optimizer.frontier] == [p.knob for p in frontier]
    assert "ZeusCost(eta=0.5, max_power=250 W)" in joule.describe(optimizer.policy)
    assert optimizer.constraints_w["max_w"] == 250.0
    # Later steps change nothing.
    train(optimizer, sim, 20)
    assert sim.gpus[0].power_limit_w() == chosen
    optimizer.close()
    assert sim.gpus[0].power_limit_w() == 250.0  # back to the default
    optimizer.close()  # idempotent
    with pytest.raises(joule.StateError, match="closed"):
        optimizer.on_step_begin()


def test_policies_pick_the_ends(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    with joule.PowerLimitOptimizer(monitor, policy=joule.MinTime(), **FAST) as fastest:
        train(fastest, sim, 60)
        assert fastest.chosen_power_limit_w == 250.0
    with joule.PowerLimitOptimizer(monitor, policy=joule.MinEnergy(), **FAST) as frugal:
        train(frugal, sim, 60)
        least = min(frugal.measurements, key=lambda m: m["energy_j"])["power_limit_w"]
        assert frugal.chosen_power_limit_w == least


def test_epoch_end_interrupts_a_profile(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    optimizer = joule.PowerLimitOptimizer(monitor, **FAST)
    train(optimizer, sim, 4)  # wait 1, set 250 W, warm up 2 → profiling
    assert optimizer.state == "profiling"
    assert monitor.open_windows() != []
    optimizer.on_epoch_end()
    assert optimizer.state == "ready"
    assert monitor.open_windows() == []
    assert optimizer.current_power_limit_w == 250.0
    train(optimizer, sim, 200, epoch_steps=30)
    assert optimizer.done
    optimizer.close()


def test_invalid_options_are_invalid_argument_errors(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    with pytest.raises(joule.InvalidArgumentError, match="profile_steps"):
        joule.PowerLimitOptimizer(monitor, profile_steps=0)
    with pytest.raises(joule.InvalidArgumentError, match="eta"):
        joule.PowerLimitOptimizer(monitor, eta=1.5)
    with pytest.raises(joule.InvalidArgumentError, match="restore_to"):
        joule.PowerLimitOptimizer(monitor, restore_to="somewhere")
    with pytest.raises(joule.InvalidArgumentError, match="aggregator"):
        joule.PowerLimitOptimizer(monitor, aggregator="mpi")
    with pytest.warns(RuntimeWarning, match="nothing will be measured but time"):
        no_gpu = joule.Monitor(devices=joule.devices(gpus=False, cpus=False))
    with pytest.raises(joule.InvalidArgumentError):
        joule.PowerLimitOptimizer(no_gpu)


class TwoIdenticalRanks(joule.RankAggregator):
    """Pretends to be rank 0 of 2 ranks that measured exactly the same."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[float, float]] = []

    def rank(self) -> int:
        return 0

    def world_size(self) -> int:
        return 2

    def aggregate(self, energy_j: float, time_s: float) -> tuple[float, float]:
        self.calls.append((energy_j, time_s))
        return 2 * energy_j, time_s


def test_a_python_aggregator_combines_the_ranks(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    aggregator = TwoIdenticalRanks()
    optimizer = joule.PowerLimitOptimizer(monitor, aggregator=aggregator, **FAST)
    train(optimizer, sim, 60)
    assert optimizer.done
    assert len(aggregator.calls) == 7
    for (energy_j, time_s), measurement in zip(aggregator.calls, optimizer.measurements):
        assert measurement["energy_j"] == pytest.approx(2 * energy_j)
        assert measurement["time_s"] == pytest.approx(time_s)
    # ZeusCost's derived max power counts both ranks.
    assert "max_power=500 W" in joule.describe(optimizer.policy)
    optimizer.close()


def test_an_aggregator_error_propagates(sim: joule.DeviceSet) -> None:
    class Broken(TwoIdenticalRanks):
        def aggregate(self, energy_j: float, time_s: float) -> tuple[float, float]:
            raise ConnectionError("rank 1 is gone")

    optimizer = joule.PowerLimitOptimizer(joule.Monitor(devices=sim), aggregator=Broken(), **FAST)
    with pytest.raises(ConnectionError, match="rank 1 is gone"):
        train(optimizer, sim, 60)
    optimizer.close()


def test_profile_store_skips_profiling_the_second_time(sim: joule.DeviceSet, tmp_path: pathlib.Path) -> None:
    monitor = joule.Monitor(devices=sim)
    first = joule.PowerLimitOptimizer(monitor, profile_dir=str(tmp_path), job_key="mlp", **FAST)
    train(first, sim, 60)
    chosen = first.chosen_power_limit_w
    assert first.profile_path == str(tmp_path / "mlp.json")
    first.close()
    assert (tmp_path / "mlp.json").is_file()
    second = joule.PowerLimitOptimizer(monitor, profile_dir=str(tmp_path), job_key="mlp", **FAST)
    assert second.done and second.loaded_from_profile
    assert second.chosen_power_limit_w == chosen
    second.close()


def test_callback_set_fans_out(sim: joule.DeviceSet) -> None:
    class Counter(joule.Callback):
        def __init__(self) -> None:
            self.steps = 0

        def on_step_begin(self) -> None:
            self.steps += 1

    counter = Counter()
    optimizer = joule.PowerLimitOptimizer(joule.Monitor(devices=sim), **FAST)
    callbacks = joule.CallbackSet([optimizer, counter])
    callbacks.on_train_begin()
    for _ in range(60):
        callbacks.on_step_begin()
        sim.run_iterations(1)
        callbacks.on_step_end()
    callbacks.on_epoch_end()
    callbacks.on_evaluate(0.5)
    callbacks.on_train_end()
    assert counter.steps == 60 and optimizer.done
    optimizer.close()


def test_candidates_helper() -> None:
    assert joule.power_limit_candidates_w(100, 250) == [250, 225, 200, 175, 150, 125, 100]
    assert joule.power_limit_candidates_w(100, 300, 75) == [300, 225, 150, 100]


def test_optimizers_leave_no_thread_but_the_process_wide_restorer(sim: joule.DeviceSet) -> None:
    """The SIGINT/SIGTERM restorer is one thread per process, started with the first optimizer that restores on
    signals and kept until exit (docs/optimize.md); optimizers coming and going add none."""
    from conftest import settled_thread_count

    monitor = joule.Monitor(devices=sim)
    before = settled_thread_count()
    counts = []
    for _ in range(3):
        optimizer = joule.PowerLimitOptimizer(monitor, warmup_steps=1, profile_steps=1, restore_on_signals=True)
        train(optimizer, sim, 20)
        optimizer.close()
        del optimizer
        counts.append(settled_thread_count())
    assert counts[0] <= before + 1
    assert counts == [counts[0]] * 3


def test_steady_state_wait_is_chosen_and_checked(sim: joule.DeviceSet) -> None:
    monitor = joule.Monitor(devices=sim)
    # Simulated GPUs: no wait by default (their power is the trace's).
    with joule.PowerLimitOptimizer(monitor, **FAST) as default:
        assert default.steady_state_mode == "off"
    # A fixed wait holds every candidate's window: 7 candidates × 60 s at least.
    with joule.PowerLimitOptimizer(monitor, steady_state={"mode": "fixed", "fixed_warmup_s": 60}, **FAST) as fixed:
        assert fixed.steady_state_mode == "fixed"
        start_s = sim.now_s()
        while not fixed.done:
            fixed.on_step_begin()
            sim.run_iterations(1)
        assert sim.now_s() - start_s >= 7 * 60
    with pytest.raises(joule.InvalidArgumentError, match="unknown setting 'band' \\(known: mode, window_s"):
        joule.PowerLimitOptimizer(monitor, steady_state={"band": 1}, **FAST)
    with pytest.raises(joule.InvalidArgumentError, match="unknown steady-state mode 'warm'"):
        joule.PowerLimitOptimizer(monitor, steady_state="warm", **FAST)
    with pytest.raises(joule.InvalidArgumentError, match="max_wait_s must be a finite number ≥ window_s"):
        joule.PowerLimitOptimizer(monitor, steady_state={"mode": "steady", "max_wait_s": 1}, **FAST)


def test_profile_settings_reach_cpp_as_its_options_struct(sim: joule.DeviceSet) -> None:
    """Both optimizers fill joule._joule._PowerLimitOptions once; its defaults are the C++ struct's."""
    options = joule._joule._PowerLimitOptions()
    assert (options.wait_steps, options.warmup_steps, options.profile_steps, options.step_w) == (1, 10, 40, 25.0)
    assert (options.restore_to, options.restore_on_signals, options.steady_state) == ("default", True, "auto")
    options.steady_state = {"mode": "fixed", "fixed_warmup_s": 2}
    assert options.steady_state == "fixed"
    with pytest.raises(joule.InvalidArgumentError, match="restore_to must be 'default' or 'initial' \\(got 'x'\\)"):
        options.restore_to = "x"
    monitor = joule.Monitor(devices=sim)
    with pytest.raises(TypeError, match=r"^PowerLimitOptimizer\(policy=...\): expected None or a policy"):
        joule.PowerLimitOptimizer(monitor, policy="fast", **FAST)
    with pytest.raises(joule.InvalidArgumentError, match="restore_to must be"):
        joule.PowerLimitOptimizer(monitor, restore_to="later", **FAST)
    optimizer = joule.PowerLimitOptimizer(monitor, policy=joule.MinEnergy(), **FAST)
    assert optimizer.constraints_w == {"min_w": 100.0, "max_w": 250.0, "default_w": 250.0}
    optimizer.close()


CARDS = SOURCE_DIR / "data" / "cards"


def test_a_card_shortens_the_profile_and_keeps_the_choice(sim: joule.DeviceSet) -> None:
    """docs/optimize.md, "Starting from a frontier card": the simulated V100's card."""
    monitor = joule.Monitor(devices=sim)
    with joule.PowerLimitOptimizer(monitor, restore_on_signals=False) as plain:
        train(plain, sim, 352)
        assert plain.done and plain.card_path_taken == "none" and plain.card_reason == ""
        assert plain.profiling_steps == 350
        plain_steps, plain_choice = plain.profiling_steps, plain.chosen_power_limit_w
    with joule.PowerLimitOptimizer(monitor, restore_on_signals=False, card=CARDS / "sim-v100.json") as carded:
        assert carded.card_path_taken == "searching"
        train(carded, sim, 352)
        assert carded.done
        assert carded.card_path_taken in ("predicted", "fallback")
        assert carded.card_reason
        assert carded.profiling_steps * 5 < plain_steps
        assert carded.chosen_power_limit_w == plain_choice


def test_a_card_for_another_model_or_schema_is_refused(tmp_path: pathlib.Path) -> None:
    a40 = joule.devices(sim="a40:imagenet", virtual_clock=True, cpus=False)
    monitor = joule.Monitor(devices=a40)
    v100 = str(CARDS / "sim-v100.json")
    with pytest.raises(ValueError) as refused:
        joule.PowerLimitOptimizer(monitor, restore_on_signals=False, card=v100)
    assert isinstance(refused.value, joule.InvalidArgumentError)
    assert str(refused.value) == (
        f"{v100} is for Tesla V100-PCIE-32GB (simulated) (driver sim), not NVIDIA A40 (simulated) (driver sim): "
        "make a card for this device with 'joule probe'"
    )
    newer = tmp_path / "newer.json"
    newer.write_text((CARDS / "sim-a40.json").read_text().replace('"schema_version": 1', '"schema_version": 2'))
    with pytest.raises(joule.ParseError) as future:
        joule.PowerLimitOptimizer(monitor, restore_on_signals=False, card=newer)
    assert str(future.value) == (
        f"{newer}: card schema version 2 is newer than this joule reads (1): upgrade joule to read it"
    )
    with pytest.raises(joule.NotFoundError, match="cannot open"):
        joule.PowerLimitOptimizer(monitor, restore_on_signals=False, card=tmp_path / "none.json")
    with pytest.raises(TypeError, match=r"PowerLimitOptimizer\(card=...\): expected None or a path, got int 3"):
        joule.PowerLimitOptimizer(monitor, restore_on_signals=False, card=3)  # type: ignore[arg-type]
