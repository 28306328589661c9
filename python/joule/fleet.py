# SPDX-License-Identifier: Apache-2.0
"""One energy window over several nodes (:class:`FleetMonitor`), through each node's ``joule daemon``."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from . import _joule
from ._args import integer, number, show, text


class FleetMonitor:
    """Energy windows opened and closed on several nodes' daemons at once (docs/fleet.md).

    nodes: ``["node1:9700", "node2:9700"]`` (daemons' network listeners, over TLS) or
    ``["a=/run/joule/a.sock", "b=/run/joule/b.sock"]`` (Unix sockets), NAME=ADDRESS or a bare ADDRESS (named
    after itself), or the same as one comma-separated string. Each node's daemon serves all of its GPUs and CPU
    packages. IoError names every node that cannot be reached; PermissionError a node that refuses this
    client (its token or certificate) or whose certificate is not trusted, with the reason.

    For HOST:PORT nodes: ``ca`` (the daemons' certificate authority, PEM; default: $JOULE_DAEMON_CA, else the
    system's), ``certificate`` and ``key`` (this client's, for mutual TLS; $JOULE_DAEMON_CERT,
    $JOULE_DAEMON_KEY), ``token_file`` (a file holding the bearer token, readable by this user only;
    $JOULE_DAEMON_TOKEN_FILE), ``plain_tcp`` (daemons started with --allow-plain-loopback).

    ``end_window`` returns a dict: ``name, wall_time_s, alignment_error_s, complete, total_energy_j, nodes``
    (per node: ``node, complete, error, energy_j, clock_offset_s, clock_offset_uncertainty_s, devices``) and
    ``warnings``. A node that stops answering mid-window makes ``complete`` False and ``total_energy_j``
    None, with the node and why in its entry: never a silently lower total.
    """

    def __init__(
        self,
        nodes: Union[str, Sequence[str]],
        *,
        clock_probes: int = 8,
        timeout_s: float = 10.0,
        ca: Optional[str] = None,
        certificate: Optional[str] = None,
        key: Optional[str] = None,
        token_file: Optional[str] = None,
        plain_tcp: bool = False,
    ) -> None:
        call = "FleetMonitor"
        if isinstance(nodes, str):
            spec = nodes
        elif isinstance(nodes, (list, tuple)) and all(isinstance(node, str) for node in nodes):
            spec = ",".join(nodes)
        else:
            raise TypeError(f"{call}(nodes=...): expected a list of 'NAME=ADDRESS' strings, got {show(nodes)}")
        probes = integer(call, "clock_probes", clock_probes)
        if probes < 1:
            raise ValueError(f"{call}(clock_probes=...): at least 1, got {probes}")
        timeout = number(call, "timeout_s", timeout_s)
        if not timeout > 0:
            raise ValueError(f"{call}(timeout_s=...): a positive number of seconds, got {timeout}")
        files = {
            keyword: text(call, keyword, value, none=True) or ""
            for keyword, value in (("ca", ca), ("certificate", certificate), ("key", key), ("token_file", token_file))
        }
        if not isinstance(plain_tcp, bool):
            raise TypeError(f"{call}(plain_tcp=...): expected True or False, got {show(plain_tcp)}")
        if bool(files["certificate"]) != bool(files["key"]):
            raise ValueError(f"{call}(certificate=..., key=...): give both (mutual TLS) or neither")
        self._fleet = _joule._FleetMonitor(spec, probes, timeout, files["ca"], files["certificate"], files["key"],
                                           files["token_file"], plain_tcp)

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
