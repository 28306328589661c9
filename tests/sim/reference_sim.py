# SPDX-License-Identifier: Apache-2.0
"""Independent Python re-implementation of Zeus's legacy trace-driven simulator (NSDI'23).

Written from the specification (shared/specs/zeus.md §B.4, §C) the way the original Python code
(Zeus 0.16, ``zeus/_legacy/`` and ``examples/research_reproducibility/zeus_nsdi23/run_single.py``) is
written, with the same libraries doing the arithmetic and the randomness: pandas ``read_csv``/``merge``/
groupby means/``Series.mean``, ``np.var``/``np.sum``, ``numpy.random.default_rng``,
``DataFrame.sample(n=1, random_state=rng)`` and ``Generator.choice``/``Generator.normal``. It is a test
oracle for the C++ simulator (``joule simulate``) and shares no code with it.

It reproduces the original's own output (tests/sim/data/zeus_sim_reference_v100_seed1.csv) exactly.

Run (needs pandas and numpy; Debian: ``apt-get install python3-pandas``)::

    /usr/bin/python3 tests/sim/reference_sim.py --trace-dir data/zeus-traces --gpu v100 \\
        --workload cifar100 --seed 1 --eta 0.5 --beta 2 [--recurrences N]

It prints the CSV header ``recurrence,try,batch_size,power_limit_w,energy_j,time_s,reached,cost`` and one
row per recorded try (floats as ``repr``, i.e. shortest round-trip). A failing simulation prints
``error:<kind>: <message>`` to stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

GPUS = ("v100", "a40", "p100", "rtx6000")


@dataclass(frozen=True)
class Job:
    """The legacy ``zeus._legacy.job.Job`` fields the simulator uses."""

    dataset: str
    network: str
    optimizer: str
    target_metric: float
    max_epochs: int
    default_bs: int

    def filter_df(self, df: pd.DataFrame) -> pd.DataFrame:
        return df.loc[
            (df.dataset == self.dataset)
            & (df.network == self.network)
            & (df.optimizer == self.optimizer)
            & (df.target_metric == self.target_metric)
        ]


# Paper defaults (spec §C): dataset -> (network, optimizer, target metric, max epochs, b0).
WORKLOADS = {
    "cifar100": ("shufflenetv2", "adadelta", 0.6, 100, 1024),
    "imagenet": ("resnet50", "adadelta", 0.65, 100, 256),
    "squad": ("bert_base_uncased", "adamw", 84.0, 6, 32),
    "librispeech": ("deepspeech2", "adamw", 40.0, 16, 192),
    "movielens-1m": ("ncf", "adam", 0.41, 100, 1024),
    "sentiment140": ("bert_base_uncased", "adamw", 0.84, 10, 128),
}


class SimError(RuntimeError):
    """A simulation that fails the way the original raises; ``kind`` names the failure."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def zeus_cost(energy: float, time: float, eta_knob: float, max_power) -> float:
    """zeus.utils.metric.zeus_cost."""
    return eta_knob * energy + (1 - eta_knob) * max_power * time


# --------------------------------------------------------------------------------------------------
# Legacy policies
# --------------------------------------------------------------------------------------------------


class GaussianTS:
    """zeus._legacy.policy.mab.GaussianTS: Gaussian Thompson sampling with learned reward precision."""

    def __init__(self, arms, reward_precision, prior_mean=0.0, prior_precision=0.0,
                 num_exploration=1, seed=123456):
        self.arms = arms
        self.prior_mean = prior_mean
        self.prior_prec = prior_precision
        self.num_exploration = num_exploration
        self.rng = np.random.default_rng(seed)
        self.arm_reward_prec = {arm: reward_precision for arm in arms}
        self.arm_param_mean = dict.fromkeys(arms, prior_mean)
        self.arm_param_prec = dict.fromkeys(arms, prior_precision)
        self.arm_num_observations = dict.fromkeys(arms, 0)

    def fit_arm(self, arm, rewards: np.ndarray, reset: bool) -> None:
        if reset:
            self.arm_param_mean[arm] = self.prior_mean
            self.arm_param_prec[arm] = self.prior_prec
            self.arm_num_observations[arm] = 0
        n = len(rewards)
        self.arm_num_observations[arm] += n
        if n == 0:
            return
        reward_prec = self.arm_reward_prec[arm]
        if reward_prec == np.inf:
            # Zero empirical variance: the posterior collapses onto the rewards' mean.
            self.arm_param_mean[arm] = np.mean(rewards)
            self.arm_param_prec[arm] = np.inf
            return
        new_prec = self.arm_param_prec[arm] + n * reward_prec
        self.arm_param_mean[arm] = (
            self.arm_param_prec[arm] * self.arm_param_mean[arm] + reward_prec * np.sum(rewards)
        ) / new_prec
        self.arm_param_prec[arm] = new_prec

    def predict(self):
        # Exploration: a random order of the arms (drawn on every call).
        for arm in self.rng.choice(self.arms, len(self.arms), replace=False):
            if self.arm_num_observations[arm] < self.num_exploration:
                return arm
        if not self.arms:
            raise SimError("no_surviving_batch_size", "no batch size survived pruning")
        expectations = {}
        for arm in self.arms:
            with np.errstate(divide="ignore"):
                stdev = np.sqrt(np.reciprocal(self.arm_param_prec[arm]))
            expectations[arm] = self.rng.normal(self.arm_param_mean[arm], stdev)
        return max(expectations, key=expectations.get)


class PruningExploreManager:
    """zeus._legacy.policy.optimizer.PruningExploreManager, driven as a generator."""

    def __init__(self, batch_sizes: list[int], default: int, num_pruning_rounds: int = 2):
        if default not in batch_sizes:
            raise SimError("default_not_in_batch_sizes",
                           f"Default batch size {default} not in {batch_sizes}.")
        self.batch_sizes = batch_sizes
        self.num_pruning_rounds = num_pruning_rounds
        self.expecting: Optional[int] = None
        self._gen = self._engine(default)
        self._next = next(self._gen)

    def _engine(self, default: int):
        for _ in range(self.num_pruning_rounds):
            best_bs, min_cost = default, np.inf
            reached_bs: list[int] = []
            idx = self.batch_sizes.index(default)
            for direction in (list(reversed(self.batch_sizes[: idx + 1])),
                              self.batch_sizes[idx + 1:]):
                for bs in direction:
                    self.expecting = bs
                    batch_size, cost, reached = yield bs
                    if batch_size != bs:
                        raise SimError("unexpected_batch_size",
                                       f"expected batch size {bs}, got {batch_size}")
                    if not reached:
                        break
                    reached_bs.append(bs)
                    if min_cost > cost:
                        min_cost, best_bs = cost, bs
            default = best_bs
            self.batch_sizes = sorted(reached_bs)
        return list(self.batch_sizes)

    def next_batch_size(self):
        """An int to explore, or the sorted list of surviving batch sizes when pruning is over."""
        return self._next

    def report_batch_size_result(self, batch_size: int, cost: float, reached: bool) -> None:
        try:
            self._next = self._gen.send((batch_size, cost, reached))
        except StopIteration as done:
            self._next = done.value


class PruningGTSBatchSizeOptimizer:
    """zeus._legacy.policy.optimizer.PruningGTSBatchSizeOptimizer (concurrency=False)."""

    def __init__(self, prior_mean=0.0, prior_precision=0.0, window_size=0, seed=123456):
        self.prior_mean = prior_mean
        self.prior_precision = prior_precision
        self.window_size = window_size
        self.seed = seed
        self.managers: dict[Job, PruningExploreManager] = {}
        self.mabs: dict[Job, GaussianTS] = {}
        self.history: dict[Job, list[tuple[int, float]]] = {}

    def register_job(self, job: Job, batch_sizes: list[int]) -> None:
        self.managers[job] = PruningExploreManager(sorted(batch_sizes), job.default_bs)
        self.history[job] = []

    def _history_for_bs(self, job: Job, batch_size) -> list[float]:
        rewards = []
        for bs, reward in reversed(self.history[job]):
            if bs == batch_size:
                rewards.append(reward)
                if len(rewards) == self.window_size:
                    break
        return list(reversed(rewards))

    def _construct_mab(self, job: Job, batch_sizes: list[int]) -> None:
        mab = GaussianTS(arms=batch_sizes, reward_precision=0.0, prior_mean=self.prior_mean,
                         prior_precision=self.prior_precision, num_exploration=2, seed=self.seed)
        for bs in batch_sizes:
            arm_rewards = np.array(self._history_for_bs(job, bs))
            with np.errstate(divide="ignore"):
                mab.arm_reward_prec[bs] = np.reciprocal(np.var(arm_rewards))
            mab.fit_arm(bs, arm_rewards, reset=True)
        self.mabs[job] = mab

    def predict(self, job: Job):
        if job not in self.mabs:
            nxt = self.managers[job].next_batch_size()
            if isinstance(nxt, int):
                return nxt
            self._construct_mab(job, nxt)
        return self.mabs[job].predict()

    def observe(self, job: Job, batch_size, cost: float, converged: bool) -> None:
        self.history[job].append((batch_size, -cost))
        if job in self.mabs:
            arm_rewards = np.array(self._history_for_bs(job, batch_size))
            mab = self.mabs[job]
            with np.errstate(divide="ignore"):
                mab.arm_reward_prec[batch_size] = np.reciprocal(np.var(arm_rewards))
            mab.fit_arm(batch_size, arm_rewards, reset=True)
        else:
            self.managers[job].report_batch_size_result(batch_size, cost, converged)


class JITPowerLimitOptimizer:
    """zeus._legacy.policy.optimizer.JITPowerLimitOptimizer: lowest observed cost per (job, bs)."""

    def __init__(self):
        self.best_pl: dict[Job, dict[int, int]] = {}
        self.best_cost: dict[Job, dict[int, float]] = {}

    def predict(self, job: Job, batch_size):
        return self.best_pl.get(job, {}).get(batch_size)

    def observe(self, job: Job, batch_size, power_limit, cost: float) -> None:
        best_cost = self.best_cost.setdefault(job, {})
        if batch_size not in best_cost or best_cost[batch_size] > cost:
            best_cost[batch_size] = cost
            self.best_pl.setdefault(job, {})[batch_size] = power_limit


# --------------------------------------------------------------------------------------------------
# Simulator
# --------------------------------------------------------------------------------------------------


@dataclass
class HistoryEntry:
    bs: int
    pl: int
    energy: float
    reached: bool
    time: float


def load_trace(trace_dir: str, gpu: str) -> pd.DataFrame:
    """Simulator.__init__'s data preparation: the merged train x power trace of one GPU."""
    train_df = pd.read_csv(os.path.join(trace_dir, "summary_train.csv"))
    power_df = pd.read_csv(os.path.join(trace_dir, f"summary_power_{gpu}.csv"))
    df = train_df.merge(power_df, how="inner")
    df["TTA"] = df.target_epoch * df.time_per_epoch
    df["ETA"] = df.TTA * df.average_power
    df["energy_per_epoch"] = df.time_per_epoch * df.average_power
    return df


def paper_job(trace_dir: str, gpu: str, workload: str) -> Job:
    """get_job_with_defaults: the paper's job, b0 capped by the GPU's largest batch size."""
    network, optimizer, target, max_epochs, b0 = WORKLOADS[workload]
    power_df = pd.read_csv(os.path.join(trace_dir, f"summary_power_{gpu}.csv"))
    largest = power_df.loc[power_df.dataset == workload].batch_size.max().item()
    return Job(workload, network, optimizer, target, max_epochs, min(b0, largest))


class Simulator:
    def __init__(self, df: pd.DataFrame, bso, plo, seed: int = 123456):
        self.df = df
        self.bso = bso
        self.plo = plo
        self.seed = seed

    def default_num_recurrence(self, job: Job) -> int:
        rows = job.filter_df(self.df)
        return 2 * len(rows.batch_size.unique()) * len(rows.power_limit.unique())

    def _profile_power_limit(self, job: Job, batch_size, eta_knob: float) -> dict:
        df = job.filter_df(self.df)
        df = df.loc[df.batch_size == batch_size]
        max_pl = df.power_limit.max().item()
        df = df.groupby("power_limit", as_index=False)[["time_per_epoch", "average_power"]].mean()
        df["epoch_cost"] = (eta_knob * df["average_power"] + (1 - eta_knob) * max_pl) * df["time_per_epoch"]
        df = df.sort_values(by="power_limit", ascending=False)
        return {int(pl): cost for pl, cost in zip(df.power_limit, df.epoch_cost)}

    def _run_job(self, job: Job, batch_size, power_limit, rng, cost_ub: float, eta_knob: float,
                 profile_power: bool):
        df = job.filter_df(self.df)
        df = df.loc[df.batch_size == batch_size]
        power_df = df.copy()
        df = df.loc[df.power_limit == power_limit]
        path = df.sample(n=1, random_state=rng)

        if cost_ub == np.inf:
            max_epochs = job.max_epochs
        else:
            max_power = power_df.power_limit.max().item()
            epoch_cost = zeus_cost(path.energy_per_epoch.item(), path.time_per_epoch.item(), eta_knob,
                                   max_power)
            max_epochs = min(cost_ub // epoch_cost, job.max_epochs)
        if max_epochs == 0:
            return 0.0, 0.0, False

        def energy_and_time(num_epochs):
            if profile_power:
                time_first = power_df.time_per_epoch.mean().item()
                energy_first = power_df.energy_per_epoch.mean().item()
                time_rest = path.time_per_epoch.item() * (num_epochs - 1)
                energy_rest = path.energy_per_epoch.item() * (num_epochs - 1)
                return energy_first + energy_rest, time_first + time_rest
            return path.energy_per_epoch.item() * num_epochs, path.time_per_epoch.item() * num_epochs

        target_epoch = path.target_epoch.item()
        if path.target_epoch.notnull().item() and target_epoch <= max_epochs:
            energy, time = energy_and_time(target_epoch)
            reached = True
        else:
            energy, time = energy_and_time(max_epochs)
            reached = False
        return energy, time, reached

    def simulate_one_job(self, job: Job, num_recurrence: int, beta_knob: float, eta_knob: float,
                         max_tries: int = 20) -> list[list[HistoryEntry]]:
        """The original's simulate_one_job; the history is returned split per recurrence."""
        bso = self.bso
        plo = self.plo
        rng = np.random.default_rng(self.seed)
        max_power = self.df.power_limit.max().item()
        min_cost = np.inf

        if len(job.filter_df(self.df)) == 0:
            raise SimError("no_job_rows", f"no trace rows for {job}")
        feasible = self.df.loc[(self.df.dataset == job.dataset) & (self.df.network == job.network)
                               & (self.df.optimizer == job.optimizer)]
        bso.register_job(job, sorted(feasible.batch_size.unique().tolist()))

        history: list[list[HistoryEntry]] = []
        for i in range(num_recurrence):
            cost_acc = 0.0
            recurrence: list[HistoryEntry] = []
            history.append(recurrence)
            for _ in range(max_tries):
                profiled_power = False
                bs = bso.predict(job)
                pl = plo.predict(job, bs)
                if pl is None:
                    profiled_power = True
                    for p, cost in self._profile_power_limit(job, bs, eta_knob).items():
                        plo.observe(job, bs, p, cost)
                    pl = plo.predict(job, bs)
                energy, time, reached = self._run_job(job, bs, pl, rng, beta_knob * min_cost, eta_knob,
                                                      profiled_power)
                if energy == 0 and time == 0 and not reached:
                    bso.observe(job, bs, 100 * beta_knob * min_cost, False)
                    continue
                cost = zeus_cost(energy, time, eta_knob, max_power)
                cost_acc += cost
                bso.observe(job, bs, cost, reached)
                recurrence.append(HistoryEntry(int(bs), int(pl), energy, reached, time))
                if reached:
                    if min_cost > cost_acc:
                        min_cost = cost_acc
                    break
                if i == 0:
                    raise SimError("default_not_converged",
                                   f"The default batch size {job.default_bs} did not converge.")
            else:
                raise SimError("not_reached_in_20_tries",
                               f"Recurrence {i + 1} did not reach the target metric in {max_tries} tries.")
        return history


def simulate(df: pd.DataFrame, job: Job, seed: int, eta: float, beta: float,
             recurrences: Optional[int] = None):
    """run_single.py: returns (max_power, history split per recurrence)."""
    sim = Simulator(df, PruningGTSBatchSizeOptimizer(seed=seed), JITPowerLimitOptimizer(), seed=seed)
    n = recurrences if recurrences is not None else sim.default_num_recurrence(job)
    return df.power_limit.max().item(), sim.simulate_one_job(job, n, beta, eta)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-dir", required=True)
    ap.add_argument("--gpu", required=True, choices=GPUS)
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eta", type=float, default=0.5)
    ap.add_argument("--beta", type=float, default=2.0, help="a number or inf")
    ap.add_argument("--recurrences", type=int, default=None)
    args = ap.parse_args(argv)

    df = load_trace(args.trace_dir, args.gpu)
    job = paper_job(args.trace_dir, args.gpu, args.workload)
    try:
        max_power, history = simulate(df, job, args.seed, args.eta, args.beta, args.recurrences)
    except SimError as err:
        print(f"error:{err.kind}: {err}", file=sys.stderr)
        return 2
    print("recurrence,try,batch_size,power_limit_w,energy_j,time_s,reached,cost")
    for r, tries in enumerate(history, 1):
        for t, h in enumerate(tries, 1):
            cost = zeus_cost(h.energy, h.time, args.eta, max_power)
            print(f"{r},{t},{h.bs},{h.pl},{float(h.energy)!r},{float(h.time)!r},"
                  f"{'true' if h.reached else 'false'},{float(cost)!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
