"""Real QUIC stacks as the testbed's servers: the peers of :mod:`quicack.lab.peers`, one process per
group of attempts, their own qlogs matched to the attempts.

Theory of operation: a testbed server named like a peer (``quic-go``, ``quinn``, ``ngtcp2``, …:
:func:`names`, every peer speaking HTTP/3) is started with :func:`quicack.lab.peers.start` when
the runner's group begins and stopped when it ends (:class:`PeerServers`), so that the stop
signal flushes its qlog before the group is stored — quinn writes one stream for all of a
process's connections, the others a file per connection.  What quicack serve does by setting
(certificate delay, chain length, response size) a real stack does its own way: it sends its one
self-signed certificate when its TLS stack is ready, and serves files; the response of ``GET /N``
is a file of N bytes written into its folder.  Its class — WFC, IACK or other — is what the
classification of its traces says.

Each qlog file is ingested whole after the stop; its server connections are matched to the
group's attempts (:func:`match`) by the original destination connection ID, else by ``group_id``
= the client's source connection ID (quinn's server traces, known for quicack's client), else in
order: the connections the server logged and the attempts not yet matched, first to first, when
both number the same (attempts run one at a time).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

def names() -> tuple[str, ...]:
    """The peers that can be testbed servers: those speaking HTTP/3 (the clients' protocol)."""
    from quicack.lab import peers

    # (a peer names its ALPN only when it is not h3)
    return tuple(name for name, p in peers.PEERS.items() if getattr(p, "alpn", "h3") == "h3")


class PeerServers:
    """``with PeerServers(names, folder, host, sizes) as servers: servers.ports[name] …``; after
    the block, ``servers.qlogs[name]`` lists each one's qlog files (flushed)."""

    def __init__(self, servers: list[str], folder: Path, host: str, sizes: set[int],
                 progress=None):
        self.servers, self.folder, self.host, self.sizes = servers, folder.resolve(), host, sizes
        self.progress = progress
        self.ports: dict[str, int] = {}
        self.qlogs: dict[str, list[Path]] = {}
        #: each one's self-signed certificate (PEM), what a client that checks certificates trusts
        self.certs: dict[str, Path] = {}
        self._stack = contextlib.ExitStack()
        self._running = {}

    def __enter__(self) -> PeerServers:
        from quicack.lab import peers

        stamp = time.strftime("%Y%m%dT%H%M%S")
        try:
            for name in self.servers:
                run = self._stack.enter_context(peers.start(
                    name, self.folder / f"{name}-{stamp}-{time.monotonic_ns()}", self.host, progress=self.progress))
                htdocs = run.workdir / "htdocs"
                for size in self.sizes:  # GET /N: N bytes, as quicack serve answers
                    (htdocs / str(size)).write_bytes(bytes(i % 251 for i in range(size)))
                self.ports[name] = run.port
                self.certs[name] = run.cert
                self._running[name] = run
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()  # each stopped with the signal that flushes its qlog
        self.qlogs = {name: run.qlog_files() for name, run in self._running.items()}


def match(server_connections: list[tuple[int, str | None, str | None]],
          attempts: list[tuple[str | None, str | None]]) -> list[int | None]:
    """Server connections (connection_id, odcid, group_id), in the order logged, matched to
    attempts (odcid, client source CID or None): each attempt's connection_id or None."""
    out: list[int | None] = [None] * len(attempts)
    free = list(server_connections)
    for i, (odcid, scid) in enumerate(attempts):
        for conn in free:
            if (odcid and conn[1] == odcid) or (scid and conn[2] == scid):
                out[i] = conn[0]
                free.remove(conn)
                break
    left = [i for i, found in enumerate(out) if found is None]
    if left and len(left) == len(free):
        for i, conn in zip(left, free):
            out[i] = conn[0]
    return out
