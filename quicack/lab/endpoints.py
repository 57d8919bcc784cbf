"""The testbed's endpoints: quicack's aioquic client for one attempt, quicack's servers in a child.

Theory of operation: the client is the scanner's probe (:class:`quicack.scan.probe.Probe`: a
QUIC v1 handshake and an HTTP/3 GET, every datagram stamped with its kernel receive time, the
qlog kept in memory), run once per connection attempt on the runner's event loop
(:func:`attempt`).  It does not check the certificate chain (``CERT_NONE``), so a chain of any
length reaches it; :class:`TestbedProbe` notes how many certificates came, the client's local
address (the relay's name for the flow) and logs its PTO expiries
(:class:`quicack.lab.ptolog.LoggedPto`: the probe makes its connection itself, so the
connection's class is swapped for a subclass that adds only that, before any timer can fire).

The servers are ``quicack serve`` listeners (:mod:`quicack.lab.serve`) in one child process
(:class:`ServerProcess`, spawned: their timing does not share the runner's interpreter), each
writing a qlog per connection into a folder when the connection ends — after its closing or
draining period (RFC 9000 §10.2: three PTOs), so :func:`wait_for_qlog` waits for the file and
for it to be whole (aioquic writes it without a temporary name).  The child stops when the
runner asks or when the runner's end of the pipe closes (the runner was killed), so no server
outlives its run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from quicack.lab.ptolog import LoggedPto
from quicack.model import QuicackError
from quicack.scan import probe
from quicack.scan.acking import ScheduledAcks
from quicack.scan.connection import ScanConnection


class TestbedConnection(LoggedPto, ScanConnection):
    """The probe's connection, logging its PTO expiries."""


class ScheduledTestbedConnection(LoggedPto, ScheduledAcks, ScanConnection):
    """The same, its 1-RTT ACKs by a schedule (:mod:`quicack.scan.acking`)."""


class TestbedProbe(probe.Probe):
    """The scanner's probe, noting what the testbed needs besides its result."""

    certificates: int | None = None
    flow: str | None = None

    def start(self) -> None:
        super().start()
        if self.quic is not None and not self.done.done():
            # same attributes, one more method; swapped before the loop runs any timer of it
            scheduled = isinstance(self.quic, ScheduledAcks)
            self.quic.__class__ = ScheduledTestbedConnection if scheduled else TestbedConnection
            host, port = self.sock.getsockname()[:2]
            self.flow = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _finish(self, *args, **kwargs) -> None:
        tls = self.quic.tls if self.quic is not None and not self.done.done() else None
        if tls is not None and getattr(tls, "_peer_certificate", None) is not None:
            self.certificates = 1 + len(tls._peer_certificate_chain)
        super()._finish(*args, **kwargs)


@dataclass
class Attempt:
    """One connection attempt as the client saw it."""

    result: probe.ProbeResult
    odcid: str
    certificates: int | None
    flow: str | None


async def attempt(address: str, port: int, path: str, timeout_s: float, index: int = 0,
                  repetition: int = 0, receive_window: int | None = None, ack_policy: str = "aioquic",
                  session_ticket: object | None = None, token: bytes = b"") -> Attempt:
    """One handshake and GET ``path`` to ``address:port`` (the relay), the client acknowledging
    by ``ack_policy``, resuming ``session_ticket`` (the GET in 0-RTT when it allows early data)
    and sending ``token`` when given; never raises for network trouble (the outcome says what
    happened)."""
    cid, odcid = os.urandom(8), os.urandom(8)
    spec = probe.ProbeSpec(index, repetition, "localhost", address, port, cid, odcid, path=path,
                           first_response_timeout_s=timeout_s, handshake_timeout_s=timeout_s,
                           response_timeout_s=timeout_s, receive_window=receive_window, ack_policy=ack_policy,
                           session_ticket=session_ticket, token=token)
    one = TestbedProbe(spec, asyncio.get_running_loop())
    try:
        one.start()
        result = await one.done
    except Exception as e:  # a bug or an aioquic failure: recorded as the attempt's outcome
        one._finish("error", reason=f"{type(e).__name__}: {e}")
        result = one.result
    return Attempt(result, odcid.hex(), one.certificates, one.flow)


def free_port(host: str) -> int:
    """A UDP port nothing listens on now (the system's choice)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_qlog(folder: Path, odcid: str, deadline: float) -> Path | None:
    """The server's qlog of the connection ``odcid`` once written whole, or None at ``deadline``
    (a ``time.monotonic`` time)."""
    path = folder / f"{odcid}.qlog"
    while True:
        try:
            json.loads(path.read_bytes())
            return path
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


# --- the servers, in a child process ---------------------------------------------------------

def _serve(specs: list, qlog_dir: str, conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner stops it
    from cryptography.hazmat.primitives import serialization

    from quicack.lab import serve

    async def main() -> None:
        try:
            running = await serve.start(specs, qlog_dir)
        except QuicackError as e:
            conn.send(("error", str(e)))
            return
        conn.send(("ready", {port: anchor.public_bytes(serialization.Encoding.PEM)
                             for port, anchor in running.anchors.items()}))
        stopped = asyncio.Event()
        asyncio.get_running_loop().add_reader(conn.fileno(), stopped.set)  # a message, or EOF
        await stopped.wait()
        running.close()

    asyncio.run(main())


class ServerProcess:
    """quicack serve listeners (:class:`quicack.lab.serve.ListenerSpec`) in a spawned child;
    ``with ServerProcess(specs, qlog_dir): …``."""

    def __init__(self, specs: list, qlog_dir: str | Path):
        self.specs = specs
        self.qlog_dir = Path(qlog_dir)
        self._process = None
        #: each listener's trust anchor as a PEM file, by port (``qlog_dir/ca-PORT.pem``): what a
        #: real stack's client that checks certificates is told to trust
        self.anchors: dict[int, Path] = {}

    def __enter__(self) -> ServerProcess:
        import multiprocessing

        self.qlog_dir.mkdir(parents=True, exist_ok=True)
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(target=_serve, args=(self.specs, str(self.qlog_dir), child_conn),
                                        name="quicack-testbed-servers", daemon=True)
        self._process.start()
        child_conn.close()
        try:
            if not self._conn.poll(60):
                raise EOFError
            kind, value = self._conn.recv()
        except EOFError:
            self._process.kill()
            raise QuicackError("the testbed's servers did not start") from None
        if kind == "error":
            self._process.join()
            raise QuicackError(value)
        for port, pem in value.items():
            self.anchors[port] = self.qlog_dir / f"ca-{port}.pem"
            self.anchors[port].write_bytes(pem)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._conn.send("stop")
        except OSError:
            pass
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()
