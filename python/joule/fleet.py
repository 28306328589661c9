# SPDX-License-Identifier: Apache-2.0
"""One energy window over several nodes (:class:`FleetMonitor`), through each node's ``joule daemon``."""

from __future__ import annotations

from typing import Any, Sequence, Union

from . import _joule
from ._args import integer, number, show, text


class FleetMonitor:
    """Energy windows opened and closed on several nodes' daemons at once (docs/fleet.md).

    nodes: ``["a=/run/joule/a.sock", "b=/run/joule/b.sock"]`` (NAME=SOCKET; a bare socket is named after
    itself), or the same as one comma-separated string. Each node's daemon serves all of its GPUs and CPU
    packages. IoError names every node that cannot be reached.

    ``end_window`` returns a dict: ``name, wall_time_s, alignment_error_s, complete, total_energy_j, nodes``
    (per node: ``node, complete, error, energy_j, clock_offset_s, clock_offset_uncertainty_s, devices``) and
    ``warnings``. A node that stops answering mid-window makes ``complete`` False and ``total_energy_j``
    None, with the node and why in its entry: never a silently lower total.
    """

    def __init__(
        self, nodes: Union[str, Sequence[str]], *, clock_probes: int = 8, timeout_s: float = 10.0
    ) -> None:
        call = "FleetMonitor"
        if isinstance(nodes, str):
            spec = nodes
        elif isinstance(nodes, (list, tuple)) and all(isinstance(node, str) for node in nodes):
            spec = ",".join(nodes)
        else:
            raise TypeError(f"{call}(nodes=...): expected a list of 'NAME=SOCKET' strings, got {show(nodes)}")
        probes = integer(call, "clock_probes", clock_probes)
        if probes < 1:
            raise ValueError(f"{call}(clock_probes=...): at least 1, got {probes}")
        timeout = number(call, "timeout_s", timeout_s)
        if not timeout > 0:
            raise ValueError(f"{call}(timeout_s=...): a positive number of seconds, got {timeout}")
        self._fleet = _joule._FleetMonitor(spec, probes, timeout)

    @property
    def nodes(self) -> list[str]:
        """The nodes' names, in the order given."""
        return list(self._fleet.nodes)

    def begin_window(self, name: str) -> None:
        """Opens window `name` on every node at once. StateError if it is open; IoError naming the nodes that
        did not answer (the window is then open on none)."""
        self._fleet.begin_window(text("FleetMonitor.begin_window", "name", name))

    def end_window(self, name: str) -> dict[str, Any]:
        """Closes window `name` on every node at once and returns the fleet's figures (see the class).
        NotFoundError if no such window is open."""
        return self._fleet.end_window(text("FleetMonitor.end_window", "name", name))

    def cancel_window(self, name: str) -> None:
        """Discards window `name`. NotFoundError if no such window is open."""
        self._fleet.cancel_window(text("FleetMonitor.cancel_window", "name", name))
