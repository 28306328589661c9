# SPDX-License-Identifier: Apache-2.0
"""The just-in-time power-limit optimizer (Zeus's GlobalPowerLimitOptimizer) as a training-loop callback."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, TypeVar, Union, get_args

from . import _joule
from ._args import flag, integer, number, show, steady_state as check_steady_state, text
from .callbacks import Callback
from .frontier import Frontier, Policy
from .monitor import Monitor

_Self = TypeVar("_Self", bound="_NativeOptimizer")

AUTO = "auto"


def _auto_aggregator() -> Optional[_joule.RankAggregator]:
    """The torch.distributed aggregator if the program imported torch and initialised a process group;
    None otherwise (torch is never imported here)."""
    torch = sys.modules.get("torch")
    distributed = getattr(torch, "distributed", None) if torch is not None else None
    if distributed is None or not distributed.is_available() or not distributed.is_initialized():
        return None
    from .torch import DistributedAggregator

    return DistributedAggregator()


def _check_aggregator(call: str, aggregator: Any) -> None:
    if aggregator is not None and not isinstance(aggregator, _joule.RankAggregator):
        raise TypeError(
            f"{call}(aggregator=...): expected 'auto', None or a joule.RankAggregator, got {show(aggregator)}"
        )


def _resolve_aggregator(call: str, aggregator: Any) -> Optional[_joule.RankAggregator]:
    """An optimizer's aggregator=: 'auto' (torch.distributed's if initialised, else None), None or a
    joule.RankAggregator. @raises InvalidArgumentError for another string, TypeError for another type."""
    if isinstance(aggregator, str):
        if aggregator != AUTO:
            _joule._raise_error(
                "invalid-argument",
                f"{call}(aggregator=...): expected 'auto', None or a joule.RankAggregator, got {show(aggregator)}",
            )
        aggregator = _auto_aggregator()
    _check_aggregator(call, aggregator)
    return aggregator


def _profile_options(call: str, policy: Optional[Policy], **settings: Any) -> _joule._PowerLimitOptions:
    """The profile settings PowerLimitOptimizer and ChaseOptimizer share, as the C++ options struct: each
    value's type is checked here, under its public name; its range by the library when the optimizer is made.
    `settings`: wait_steps, warmup_steps, profile_steps, step_w, profile_dir, job_key, restore_to,
    restore_on_signals, steady_state. `policy` None keeps the C++ default (Chase sets its own)."""
    options = _joule._PowerLimitOptions()
    if policy is not None and not isinstance(policy, get_args(Policy)):
        raise TypeError(
            f"{call}(policy=...): expected None or a policy (ZeusCost, CarbonCost, Deadline, MaxSlowdown, "
            f"MinEnergy or MinTime), got {show(policy)}"
        )
    if policy is not None:
        options.policy = policy
    options.wait_steps = integer(call, "wait_steps", settings["wait_steps"])
    options.warmup_steps = integer(call, "warmup_steps", settings["warmup_steps"])
    options.profile_steps = integer(call, "profile_steps", settings["profile_steps"])
    options.step_w = number(call, "step_w", settings["step_w"])
    options.profile_dir = text(call, "profile_dir", settings["profile_dir"], none=True) or ""
    options.job_key = text(call, "job_key", settings["job_key"], none=True) or ""
    options.restore_to = text(call, "restore_to", settings["restore_to"])
    options.restore_on_signals = flag(call, "restore_on_signals", settings["restore_on_signals"])
    options.steady_state = check_steady_state(call, settings["steady_state"])
    return options


class _NativeOptimizer(Callback):
    """The training-loop hooks and restore of an optimizer implemented in C++ (``self._optimizer``): the
    power-limit optimizer and Chase share them."""

    _optimizer: Any

    # Hooks -------------------------------------------------------------------------------------------------
    def on_step_begin(self) -> None:
        """At the start of every step: advances the profile (may set a power limit or open/close a window)."""
        self._optimizer.on_step_begin()

    def on_step_end(self) -> None:
        """At the end of every step (nothing to do today; keeps loops stable)."""
        self._optimizer.on_step_end()

    def on_epoch_end(self) -> None:
        """At the end of every epoch: an interrupted profile restarts its candidate at the next step."""
        self._optimizer.on_epoch_end()

    def close(self) -> None:
        """Cancels an open profile window and restores the GPUs' limits (restore_to). Idempotent."""
        if not self._optimizer.closed:
            self._optimizer.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # State -------------------------------------------------------------------------------------------------
    @property
    def state(self) -> str:
        """'ready', 'warmup', 'profiling' or 'done'."""
        return str(self._optimizer.state)


class PowerLimitOptimizer(_NativeOptimizer):
    """Profiles each candidate GPU power limit for a few training steps, then keeps the one the policy picks.

    monitor: a joule.Monitor over the GPUs to control (all set to one limit, so they must be identical).
    eta: weight of energy in Zeus's cost (used when policy is None: ZeusCost(eta), whose max power is derived
        as the highest profiled limit × GPUs × ranks).
    policy: any joule policy (ZeusCost, CarbonCost, Deadline, MaxSlowdown, MinEnergy, MinTime); it sees
        per-step time (s) and energy (J).
    wait_steps, warmup_steps, profile_steps: steps before the first candidate, before each profile window,
        and measured per candidate. step_w: distance between candidates, W.
    aggregator: combines measurements across ranks (energy summed, time maximised) so every rank picks the
        same limit. ``'auto'`` (default): joule.torch.DistributedAggregator when torch.distributed is
        initialised, else single-process. None: single-process. Or any joule.RankAggregator.
    profile_dir, job_key: a profile store; a matching stored profile skips profiling.
    restore_to: ``'default'`` (board default) or ``'initial'`` (the limit before the optimizer): what the GPUs
        get back on close(), destruction, process exit, SIGINT and SIGTERM (if restore_on_signals).
    card: the path of a frontier card of the GPUs' model (``joule probe``; docs/optimize.md, "Starting from a
        frontier card"): the optimizer measures the maximum limit, sizes the later windows from the card's
        counter and settling figures, and measures only the limits the card's prior cannot rule out (all of
        them when the card does not describe the workload). A card for another GPU model or driver, or of a
        newer schema, raises ValueError naming both. None (default): no card.
    steady_state: wait for a thermal steady state before measuring each candidate (docs/optimize.md):
        ``'auto'`` (default: ``'steady'`` on real GPUs, ``'off'`` on simulated ones), ``'off'``, ``'fixed'``
        (wait ``fixed_warmup_s``), ``'steady'`` (temperature and power within their bands over ``window_s``),
        or a dict with ``mode`` and any of ``window_s``, ``temperature_band_c``, ``power_band_ratio``,
        ``max_wait_s``, ``fixed_warmup_s``.

    Call ``on_step_begin()`` at the start of each step, ``on_step_end()`` at its end, and ``on_epoch_end()``
    at the end of each epoch (an epoch end interrupts a profile, which restarts at the next step).
    """

    def __init__(
        self,
        monitor: Monitor,
        eta: float = 0.5,
        *,
        policy: Optional[Policy] = None,
        wait_steps: int = 1,
        warmup_steps: int = 10,
        profile_steps: int = 40,
        step_w: float = 25.0,
        aggregator: Union[str, None, _joule.RankAggregator] = AUTO,
        profile_dir: Optional[str] = None,
        job_key: Optional[str] = None,
        restore_to: str = "default",
        restore_on_signals: bool = True,
        steady_state: Union[str, dict, None] = "auto",
        card: Union[str, "os.PathLike[str]", None] = None,
    ) -> None:
        if card is not None and not isinstance(card, (str, os.PathLike)):
            raise TypeError(f"PowerLimitOptimizer(card=...): expected None or a path, got {show(card)}")
        if policy is None:
            policy = _joule.ZeusCost(number("PowerLimitOptimizer", "eta", eta), 0.0)
        aggregator = _resolve_aggregator("PowerLimitOptimizer", aggregator)
        self.monitor = monitor
        self.aggregator: Optional[_joule.RankAggregator] = aggregator
        options = _profile_options(
            "PowerLimitOptimizer",
            policy,
            wait_steps=wait_steps,
            warmup_steps=warmup_steps,
            profile_steps=profile_steps,
            step_w=step_w,
            profile_dir=profile_dir,
            job_key=job_key,
            restore_to=restore_to,
            restore_on_signals=restore_on_signals,
            steady_state=steady_state,
        )
        self._optimizer = _joule._PowerLimitOptimizer(
            monitor, options, aggregator, None if card is None else os.fspath(card)
        )

    @property
    def steady_state_mode(self) -> str:
        """How each candidate waits before it is measured: 'off', 'fixed' or 'steady' ('auto' resolved)."""
        return str(self._optimizer.steady_state_mode)

    @property
    def done(self) -> bool:
        """True once the limit is chosen and set."""
        return self._optimizer.state == "done"

    @property
    def candidates_w(self) -> list[float]:
        """The candidate limits, W, highest first."""
        return self._optimizer.candidates_w

    @property
    def current_power_limit_w(self) -> float:
        """The candidate being warmed up or profiled (next, when ready); the chosen limit when done, W."""
        return self._optimizer.current_power_limit_w

    @property
    def chosen_power_limit_w(self) -> Optional[float]:
        """The chosen limit, W; None until done."""
        return self._optimizer.chosen_power_limit_w

    @property
    def measurements(self) -> list[dict[str, float]]:
        """Per candidate: power_limit_w, energy_j and time_s of its profile window (summed over GPUs and
        ranks; time maximised over ranks), steps, energy_per_step_j, time_per_step_s."""
        return self._optimizer.measurements

    @property
    def frontier(self) -> Frontier[float]:
        """The per-step frontier of the measurements (knob: power limit, W); empty until done."""
        return Frontier(self._optimizer.frontier)

    @property
    def policy(self) -> Policy:
        """The policy in use, with a derived ZeusCost max_power_w filled in."""
        return self._optimizer.policy

    @property
    def constraints_w(self) -> dict[str, float]:
        """The GPUs' common power-limit range {min_w, max_w, default_w}."""
        return self._optimizer.constraints_w

    @property
    def profile_path(self) -> Optional[str]:
        """The profile file, or None without a profile store."""
        return self._optimizer.profile_path

    @property
    def loaded_from_profile(self) -> bool:
        """True if the choice came from a stored profile."""
        return self._optimizer.loaded_from_profile

    @property
    def card_path_taken(self) -> str:
        """How the card was used: 'none' (no card, or a stored profile), 'searching', 'predicted' (the limits
        left unmeasured were predicted to lose by a safe margin) or 'fallback' (every limit measured)."""
        return str(self._optimizer.card_path_taken)

    @property
    def card_reason(self) -> str:
        """Why that path, as logged; '' without a card."""
        return str(self._optimizer.card_reason)

    @property
    def profiling_steps(self) -> int:
        """Steps run while a candidate was warmed up or measured: what a card shortens."""
        return int(self._optimizer.profiling_steps)

    def __repr__(self) -> str:
        return (
            f"<joule.PowerLimitOptimizer state={self.state} current={self.current_power_limit_w} W "
            f"chosen={self.chosen_power_limit_w}>"
        )
