# SPDX-License-Identifier: Apache-2.0
"""Hugging Face Trainer integration: :class:`HFPowerLimitOptimizer`, a ``transformers.TrainerCallback``
that drives joule's power-limit optimizer (Zeus's HFGlobalPowerLimitOptimizer).

Importing this module needs ``transformers``; without it the import raises ImportError with a clear message.

    trainer = transformers.Trainer(..., callbacks=[joule.huggingface.HFPowerLimitOptimizer(joule.Monitor())])
"""

from __future__ import annotations

from typing import Any, Optional

try:
    from transformers import TrainerCallback
except ImportError as error:  # pragma: no cover - exercised by the test that hides transformers
    raise ImportError(
        "joule.huggingface needs the 'transformers' package (pip install transformers); "
        "joule.PowerLimitOptimizer works without it in a hand-written training loop"
    ) from error

from .monitor import Monitor
from .power_limit import PowerLimitOptimizer


class HFPowerLimitOptimizer(TrainerCallback):  # type: ignore[misc]
    """Forwards the Trainer's step and epoch events to a :class:`joule.PowerLimitOptimizer`.

    monitor: the joule.Monitor of the GPUs to control (default: joule.Monitor() over every GPU);
    eta and the keyword arguments are PowerLimitOptimizer's. The optimizer is ``self.optimizer``.
    """

    def __init__(self, monitor: Optional[Monitor] = None, eta: float = 0.5, **optimizer_options: Any) -> None:
        super().__init__()
        self.optimizer = PowerLimitOptimizer(monitor if monitor is not None else Monitor(), eta, **optimizer_options)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.optimizer.on_step_begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.optimizer.on_step_end()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.optimizer.on_epoch_end()


__all__ = ["HFPowerLimitOptimizer"]
