# SPDX-License-Identifier: Apache-2.0
"""joule.huggingface: the Trainer callback, with transformers (if installed) or a stand-in module."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Iterator

import pytest

import joule


@pytest.fixture
def fresh_import(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Lets each test import joule.huggingface anew (it binds transformers at import)."""
    monkeypatch.delitem(sys.modules, "joule.huggingface", raising=False)
    yield
    sys.modules.pop("joule.huggingface", None)


def drive(callback: Any, devices: joule.DeviceSet, steps: int) -> None:
    for _ in range(steps):
        callback.on_step_begin(None, None, None)
        devices.run_iterations(1)
        callback.on_step_end(None, None, None)
    callback.on_epoch_end(None, None, None)


def test_without_transformers_the_import_fails_clearly(monkeypatch: pytest.MonkeyPatch, fresh_import: None) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(ImportError, match="needs the 'transformers' package"):
        importlib.import_module("joule.huggingface")


def test_with_a_stand_in_transformers(monkeypatch: pytest.MonkeyPatch, fresh_import: None, sim: joule.DeviceSet) -> None:
    fake = types.ModuleType("transformers")

    class TrainerCallback:  # the real one is a plain class with no-op event methods
        pass

    fake.TrainerCallback = TrainerCallback  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers", fake)
    huggingface = importlib.import_module("joule.huggingface")
    callback = huggingface.HFPowerLimitOptimizer(
        joule.Monitor(devices=sim), eta=0.5, warmup_steps=1, profile_steps=2, restore_on_signals=False
    )
    assert isinstance(callback, TrainerCallback)
    drive(callback, sim, 40)
    assert callback.optimizer.done
    assert sim.gpus[0].power_limit_w() == callback.optimizer.chosen_power_limit_w
    callback.optimizer.close()


def test_with_real_transformers(fresh_import: None, sim: joule.DeviceSet) -> None:
    transformers = pytest.importorskip("transformers")
    huggingface = importlib.import_module("joule.huggingface")
    callback = huggingface.HFPowerLimitOptimizer(
        joule.Monitor(devices=sim), warmup_steps=1, profile_steps=2, restore_on_signals=False
    )
    assert isinstance(callback, transformers.TrainerCallback)
    drive(callback, sim, 40)
    assert callback.optimizer.done
    callback.optimizer.close()
