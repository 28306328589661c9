# SPDX-License-Identifier: Apache-2.0
"""Training-loop callbacks (Zeus's ``zeus.callback``): no-op hooks that optimizers override."""

from __future__ import annotations

from typing import Iterable

from ._args import show


class Callback:
    """Base class of training-loop callbacks. Every hook does nothing; subclasses override the ones they
    need. Call the hooks from the training loop (or through :class:`CallbackSet`)."""

    def on_train_begin(self) -> None:
        """Before the first epoch."""

    def on_train_end(self) -> None:
        """After the last epoch."""

    def on_epoch_begin(self) -> None:
        """At the start of every epoch."""

    def on_epoch_end(self) -> None:
        """At the end of every epoch, before evaluation."""

    def on_step_begin(self) -> None:
        """At the start of every step (training iteration)."""

    def on_step_end(self) -> None:
        """At the end of every step."""

    def on_evaluate(self, metric: float) -> None:
        """After evaluation, with the validation metric."""


class CallbackSet(Callback):
    """Fans every hook out to several callbacks, in order."""

    def __init__(self, callbacks: Iterable[Callback]) -> None:
        if isinstance(callbacks, (str, bytes)) or not hasattr(callbacks, "__iter__"):
            raise TypeError(f"CallbackSet(callbacks=...): expected a list of callbacks, got {show(callbacks)}")
        self.callbacks: list[Callback] = list(callbacks)
        for position, callback in enumerate(self.callbacks):
            if not all(hasattr(callback, hook) for hook in ("on_step_begin", "on_step_end", "on_epoch_end")):
                raise TypeError(
                    f"CallbackSet(callbacks=...): expected callbacks (joule.Callback), got {show(callback)} at "
                    f"position {position}"
                )

    def on_train_begin(self) -> None:
        for callback in self.callbacks:
            callback.on_train_begin()

    def on_train_end(self) -> None:
        for callback in self.callbacks:
            callback.on_train_end()

    def on_epoch_begin(self) -> None:
        for callback in self.callbacks:
            callback.on_epoch_begin()

    def on_epoch_end(self) -> None:
        for callback in self.callbacks:
            callback.on_epoch_end()

    def on_step_begin(self) -> None:
        for callback in self.callbacks:
            callback.on_step_begin()

    def on_step_end(self) -> None:
        for callback in self.callbacks:
            callback.on_step_end()

    def on_evaluate(self, metric: float) -> None:
        for callback in self.callbacks:
            callback.on_evaluate(metric)
