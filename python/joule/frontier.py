# SPDX-License-Identifier: Apache-2.0
"""The time–energy Pareto frontier of a fixed amount of work, over any Python knob.

The Pareto filter and the policies' choice run in C++ (``joule::pareto_indices`` and
``joule::select_index``); the knobs stay Python objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Iterable, Iterator, NamedTuple, TypeVar, Union

from . import _joule
from ._args import number, show

Knob = TypeVar("Knob")

Policy = Union[
    _joule.ZeusCost, _joule.CarbonCost, _joule.Deadline, _joule.MaxSlowdown, _joule.MinEnergy, _joule.MinTime
]


class FrontierPoint(NamedTuple):
    """One way to do the work: a knob setting, its time (s) and its energy (J)."""

    knob: Any
    time_s: float
    energy_j: float


class Frontier(Generic[Knob]):
    """The Pareto-optimal points of measurements of the same work, fastest first (so energy decreases along
    the list). A point is dropped if another is no slower and uses no more energy while being strictly
    better in one of the two; of equal points the first given is kept.

    >>> f = joule.Frontier([(250, 1.0, 300.0), (200, 1.1, 250.0), (150, 1.5, 260.0)])
    >>> [p.knob for p in f]
    [250, 200]
    >>> f.select(joule.MinEnergy()).knob
    200
    """

    def __init__(self, points: Iterable[Union[FrontierPoint, tuple[Any, float, float]]] = ()) -> None:
        """points: (knob, time_s, energy_j) triples or FrontierPoints. InvalidArgumentError for a negative or
        non-finite time or energy."""
        if isinstance(points, (str, bytes)) or not hasattr(points, "__iter__"):
            raise TypeError(f"Frontier(points=...): expected (knob, time_s, energy_j) triples, got {show(points)}")
        given = []
        for position, point in enumerate(points):
            if isinstance(point, (str, bytes)) or not isinstance(point, Sequence) or len(point) != 3:
                raise TypeError(f"Frontier(points=...): expected (knob, time_s, energy_j) triples, got {show(point)} "
                                f"at position {position}")
            given.append(FrontierPoint(*point))
        times = [number("Frontier", f"points[{i}].time_s", point.time_s) for i, point in enumerate(given)]
        energies = [number("Frontier", f"points[{i}].energy_j", point.energy_j) for i, point in enumerate(given)]
        self._points: list[FrontierPoint] = [given[i] for i in _joule.pareto_indices(times, energies)]

    @property
    def points(self) -> list[FrontierPoint]:
        """The points, fastest first."""
        return list(self._points)

    def __len__(self) -> int:
        return len(self._points)

    def __iter__(self) -> Iterator[FrontierPoint]:
        return iter(self._points)

    def __getitem__(self, index: int) -> FrontierPoint:
        return self._points[index]

    def __repr__(self) -> str:
        return f"Frontier({self._points!r})"

    def fastest(self) -> FrontierPoint:
        """The fastest point (the MinTime end). StateError if empty."""
        if not self._points:
            _joule._raise_error("state", "the frontier is empty")
        return self._points[0]

    def least_energy(self) -> FrontierPoint:
        """The least-energy point (the MinEnergy end). StateError if empty."""
        if not self._points:
            _joule._raise_error("state", "the frontier is empty")
        return self._points[-1]

    def select_index(self, policy: Policy) -> int:
        """The index of the point `policy` picks (ties go to the faster point). StateError if empty;
        NotFoundError if no point meets a Deadline or MaxSlowdown bound; InvalidArgumentError for invalid
        policy parameters."""
        return _joule.select_index(
            [point.time_s for point in self._points], [point.energy_j for point in self._points], policy
        )

    def select(self, policy: Policy) -> FrontierPoint:
        """The point `policy` picks (see select_index)."""
        return self._points[self.select_index(policy)]

    def to_list(self) -> list[dict[str, Any]]:
        """The points as plain dicts {knob, time_s, energy_j}."""
        return [point._asdict() for point in self._points]
