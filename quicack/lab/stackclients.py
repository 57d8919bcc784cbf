"""Real QUIC stacks as the testbed's clients: one process per connection attempt, its own qlog.

Theory of operation: quicack's own client (:mod:`quicack.lab.endpoints`) is one stack, aioquic; a
testbed that only measures it measures one client's timers.  The clients here are those of the
real peers (:mod:`quicack.lab.peers`): the quic-go, quinn, quiche, TQUIC, s2n-quic and kwik
peers' own binaries in their client mode (``-get`` / ``--get``, built from ``tests/peers/<name>/``)
and Debian's ngtcp2 client (``gtlsclient``, package ``ngtcp2-client``).  The later four check the
server's certificate: each attempt passes the server's trust anchor (``--ca``).  Each attempt runs one of them as a child process
against the relay (:func:`attempt`): one connection, one ``GET``, certificates not checked (as
quicack's client), UDP GSO off, its qlog written into a folder of its own, and its output read
for the outcome — exit status 0 and the response's size — so nothing of the stack is touched.

What each stack's qlog holds differs, and so do the figures ``testbed_runs`` can take from it
(:data:`CLIENTS`; schemas/README.md lists them):

- quic-go v0.65 logs packets with their frames and its PTO timer (``loss_timer_updated``, set /
  expired) against a wall-clock reference; a ``<odcid>_client.sqlog`` per connection.
- ngtcp2 0.12.1 logs packets with frames and ``metrics_updated`` (with ``pto_count``), in whole
  milliseconds from a reference that is no wall-clock time, and no timer events: its PTO
  expiries are counted as the rises of the logged ``pto_count``.  The runner picks its original
  destination connection ID (``--dcid``), which names quicack serve's qlog.
- quinn 0.11.12 logs packets without frames, and switches the events' ``group_id`` from the ODCID
  to the server's connection ID at the server's first Initial (quinn-proto's ``orig_rem_cid``),
  so its trace is ingested as two connections (the second with vantage ``server``, inferred from
  its first packet event).  Its TTFB and handshake time come from the client's own clock
  (``connect`` → response HEADERS / handshake done, printed by the binary).
- quiche 0.30 and TQUIC 1.6 log packets with frames (quiche its ``pto_count`` too); s2n-quic and
  kwik write no qlog: their rows hold the outcome and size, and the server's trace is found by
  the ODCID the relay read from the client's first Initial.

The child's start and end (wall clock) bound the attempt: the relay's flow whose first datagram
arrived in between is the attempt's (:func:`flows_by_time`), since attempts run one at a time.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from quicack.model import QuicackError

#: Debian's ngtcp2 client (0.12.1, GnuTLS), from the package ``ngtcp2-client``
NGTCP2_CLIENT = ("/usr/bin/gtlsclient", "ngtcp2-client")
#: how long a child may outlive its own timeout before it is killed
GRACE_S = 5.0


@dataclass(frozen=True)
class StackClient:
    """What a real stack's client logs, for the figures of ``testbed_runs``."""

    name: str
    #: the stack and version
    stack: str
    #: where its PTO expiries come from: 'timers' (expired timer events), 'metrics' (rises of the
    #: logged pto_count) or None (not logged)
    pto_source: str | None


CLIENTS: dict[str, StackClient] = {c.name: c for c in (
    StackClient("quic-go", "quic-go v0.65.0 client (tests/peers/quic-go, -get)", "timers"),
    StackClient("ngtcp2", "ngtcp2 0.12.1 gtlsclient (Debian ngtcp2-client, GnuTLS)", "metrics"),
    # its pto_count is in metrics_updated, but the trace is split at the server's first Initial;
    # no frames: its TTFB and handshake time come from its own clock (the binary prints them)
    StackClient("quinn", "quinn 0.11.12 + h3 0.0.8 client (tests/peers/quinn, --get)", None),
    # the later peers' clients (--get URL --ca PEM): they check the server's certificate against
    # the listener's trust anchor, with SNI localhost; quiche logs pto_count in its metrics,
    # TQUIC no PTO at all, s2n-quic and kwik write no qlog (their rows: outcome and size only)
    StackClient("quiche", "quiche 0.30.0 client (tests/peers/quiche, --get)", "metrics"),
    StackClient("tquic", "TQUIC 1.6.0 client (tests/peers/tquic, --get)", None),
    StackClient("s2n-quic", "s2n-quic 1.91.0 + h3 client (tests/peers/s2n-quic, --get)", None),
    StackClient("kwik", "kwik 0.10.8 + flupke 0.9.4 client (tests/peers/kwik, --get)", None),
)}
#: the clients told which certificate to trust (``--ca``): each attempt needs the server's anchor
CHECKS_CERTIFICATES = ("quiche", "tquic", "s2n-quic", "kwik")

#: where a server's PTO expiries come from, by its testbed name: quicack serve logs each expiry
#: (:mod:`quicack.lab.ptolog`); peers as their qlog allows (None: not logged)
SERVER_PTO_SOURCES = {"serve-wfc": "timers", "serve-iack": "timers", "serve-iack-ping": "timers",
                      "quic-go": "timers", "ngtcp2": "metrics", "quinn": "metrics"}


def pto_source(client: str) -> str | None:
    """Where a client's PTO expiries come from: quicack's logs each (timers), a stack its way."""
    return "timers" if client == "quicack" else CLIENTS[client].pto_source


@dataclass
class StackAttempt:
    """One attempt of a real stack's client, as its process reported it."""

    client: str
    outcome: str
    error_reason: str | None
    #: wall-clock times (epoch ms) the child was started and had exited
    started_epoch_ms: float
    ended_epoch_ms: float
    response_bytes: int | None
    certificates: int | None
    #: its qlog file (None: it wrote none)
    qlog: Path | None
    #: the ODCID when the runner chose it (ngtcp2), else None (read from the ingested qlog)
    odcid: str | None = None
    #: from the client's own clock, where its qlog cannot give them (quinn)
    handshake_ms: float | None = None
    ttfb_ms: float | None = None


def binary(name: str, progress=None) -> Path:
    """The client's binary, installed or built first if missing (:func:`quicack.lab.peers.prepare`)."""
    from quicack.lab import peers

    if name == "ngtcp2":
        path, package = NGTCP2_CLIENT
        if not Path(path).exists():
            peers._apt_install((package,), progress or (lambda message: None))
        if not Path(path).exists():
            raise QuicackError(f"{package} installed but {path} is missing")
        return Path(path)
    if name not in CLIENTS:
        raise QuicackError(f"unknown client {name!r}; real-stack clients: {', '.join(CLIENTS)}")
    return peers.prepare(name, progress).binary


def command(name: str, program: Path, host: str, port: int, path: str, timeout_s: float,
            folder: Path, ca: Path | None = None,
            session: Path | None = None) -> tuple[list[str], dict[str, str], str | None]:
    """The client's command line and environment for one GET of ``path`` from ``host:port``
    writing its qlog into ``folder``; and the ODCID it was told to use (None: its own).  ``ca``:
    the server's trust anchor (PEM), for the clients of :data:`CHECKS_CERTIFICATES`; ``session``:
    a folder whose TLS session and transport parameters the client writes and, when there,
    resumes with early data (ngtcp2, quic-go: :mod:`quicack.lab.resumed`)."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    url = f"https://{authority}{path}"
    env = {**os.environ, "QUIC_GO_DISABLE_GSO": "true"}
    if name == "quic-go":
        # one X25519 key share, as quicack's client (Go 1.26 would lead with X25519MLKEM768)
        resume = ["-session", str(session / "session.json")] if session is not None else []
        return ([str(program), "-get", url, "-insecure", "-curves", "X25519", "-timeout", f"{timeout_s:g}s",
                 "-keylog", str(folder / "keylog.txt"), *resume], {**env, "QLOGDIR": str(folder)}, None)
    if name == "ngtcp2":
        odcid = secrets.token_hex(8)
        resume = ([f"--session-file={session / 'session.pem'}", f"--tp-file={session / 'tp.pem'}"]
                  if session is not None else [])
        return ([str(program), *resume, "--quiet", "--exit-on-all-streams-close", "--no-quic-dump", "--no-http-dump",
                 f"--qlog-file={folder / 'ngtcp2-client.sqlog'}", f"--dcid={odcid}", f"--download={folder}",
                 f"--handshake-timeout={timeout_s:g}s", f"--timeout={timeout_s:g}s", host, str(port), url],
                env, odcid)
    if name == "quinn":
        return ([str(program), "--get", url, "--qlog", str(folder / "quinn-client.sqlog"),
                 "--timeout", f"{timeout_s:g}"], env, None)
    if session is not None:
        raise QuicackError(f"the {name} client cannot resume a session here")
    if name in CHECKS_CERTIFICATES:
        if ca is None:
            raise QuicackError(f"the {name} client checks the server's certificate: it needs the server's trust anchor")
        # (no timeout option: the runner kills it after timeout_s, an attempt with outcome timeout)
        return ([str(program), "--get", url, "--ca", str(ca)],
                {**env, "QLOGDIR": str(folder), "SSLKEYLOGFILE": str(folder / "keylog.txt")}, None)
    raise QuicackError(f"unknown client {name!r}; real-stack clients: {', '.join(CLIENTS)}")


_LINE = re.compile(r"^(\d{3})\b.*?\s(\d+) bytes(?: (\d+) certificates)?(?: handshake_ms=([\d.]+) ttfb_ms=([\d.]+))?",
                   re.M)


def _result(name: str, code: int | None, stdout: str, stderr: str, folder: Path, path: str) -> dict:
    """outcome, error_reason, response_bytes, certificates, handshake_ms, ttfb_ms from the child."""
    out = {"outcome": "error", "error_reason": None, "response_bytes": None, "certificates": None,
           "handshake_ms": None, "ttfb_ms": None}
    if code is None:
        return dict(out, outcome="timeout", error_reason="timeout (client killed)")
    if name == "ngtcp2":  # its response is the file it downloaded
        body = folder / (path.rstrip("/").rsplit("/", 1)[-1] or "index.html")
        if code == 0 and body.exists():
            return dict(out, outcome="ok", response_bytes=body.stat().st_size)
    else:
        match = _LINE.search(stdout)
        if code == 0 and match and match.group(1) == "200":
            return dict(out, outcome="ok", response_bytes=int(match.group(2)),
                        certificates=int(match.group(3)) if match.group(3) else None,
                        handshake_ms=float(match.group(4)) if match.group(4) else None,
                        ttfb_ms=float(match.group(5)) if match.group(5) else None)
    text = (stderr.strip().splitlines() or stdout.strip().splitlines() or [f"exit status {code}"])[-1]
    timed_out = "timeout" in text.lower() or "deadline" in text.lower()
    return dict(out, outcome="timeout" if timed_out else "error", error_reason=text[:300])


def attempt(name: str, program: Path, host: str, port: int, path: str, timeout_s: float,
            folder: Path, ca: Path | None = None, session: Path | None = None) -> StackAttempt:
    """One connection attempt of client ``name`` through ``host:port`` (the relay); its qlog and
    files in ``folder`` (emptied first); ``ca`` and ``session`` as :func:`command`.  Never raises
    for network trouble."""
    folder = folder.resolve()  # (the child runs in it)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cmd, env, odcid = command(name, program, host, port, path, timeout_s, folder, ca, session)
    started = time.time() * 1e3
    child = subprocess.Popen(cmd, env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = child.communicate(timeout=timeout_s + GRACE_S)
        code = child.returncode
    except subprocess.TimeoutExpired:
        child.kill()
        stdout, stderr = child.communicate()
        code = None
    ended = time.time() * 1e3
    qlogs = sorted(p for p in folder.glob("*.sqlog") if p.stat().st_size)
    return StackAttempt(name, **_result(name, code, stdout, stderr, folder, path), started_epoch_ms=started,
                        ended_epoch_ms=ended, qlog=qlogs[0] if qlogs else None, odcid=odcid)


def flows_by_time(records, windows: list[tuple[float, float]]) -> list[str | None]:
    """For each (start, end) window (epoch ms), the relay flow (``relay_datagrams.flow``) whose
    first datagram from the client arrived in it, or None."""
    first: dict[str, float] = {}
    columns = records.columns
    for flow, direction, arrived in zip(columns["flow"], columns["direction"], columns["time_in_epoch_ms"]):
        if direction == "to_server" and flow not in first and arrived is not None:
            first[flow] = arrived
    out = []
    for start, end in windows:
        inside = [flow for flow, t in first.items() if start <= t <= end]
        out.append(inside[0] if len(inside) == 1 else None)
    return out
