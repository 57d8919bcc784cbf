"""The testbed's impairment relay: a UDP relay on loopback that delays, limits and drops datagrams.

Theory of operation: this kernel has no netem, so the relay impairs the path itself.  It
listens on one UDP socket for clients; each client address is a flow with its own upstream
socket connected to the server (like a NAT: the server sees one address per client).  Every
datagram read is offered to the sans-I/O core (:class:`quicack.core.impairment.Direction`, one
per direction) with its arrival time and gets a departure time or a drop reason; departures go
on a heap, and the loop sends each when its time comes.

One thread does everything (:meth:`Relay.run`): it sends what is due, then waits on epoll until
the next departure.  A departure must leave within 1 ms of its time at p99: the loop sleeps in
whole milliseconds with epoll, then the rest with ``time.sleep`` (ns resolution; the sockets are
unwatched for under a millisecond, and what arrives meanwhile keeps its kernel time), with the
thread's timer slack at 1 µs (the default 50 µs made sleeps end ~0.06 ms late, now ~0.01 ms).
Busy-waiting the last ``spin_ms`` is possible but off: it cost up to a core at 5,000
datagrams/s for no better p99 (``benchmarks/relay.py``).  What does spoil the p99 is other
processes keeping both cores busy; ``realtime`` (SCHED_FIFO) makes the relay's wake-ups win.
Arrival times are the kernel's (``SO_TIMESTAMPNS``, CLOCK_REALTIME like the loop's
``time.time_ns``), so a datagram read late is still delayed from when it arrived;
``SO_RXQ_OVFL`` counts what the kernel dropped because the relay read too slowly
(``kernel_drops``: 0 means every datagram that reached it is recorded).

Every datagram is recorded in memory (arrays) and written at stop into ``relay_runs`` /
``relay_datagrams`` (:mod:`quicack.store.relaytable`), none lost: on stop the relay forwards
nothing new, sends what is scheduled (for at most ``drain_s``), then reads what is left in its
sockets; what was not forwarded is recorded as ``stopped``.  Traffic stays on this machine: the
listening and upstream addresses must be loopback (127.0.0.0/8, ``::1``).

API: ``with Relay(config) as relay: … relay.address …`` (a thread; ``relay.records`` after the
block); :class:`RelayProcess` the same in a child process (no GIL shared with the caller);
:func:`run_until_signal` for the command line (SIGINT/SIGTERM stop it).
"""

from __future__ import annotations

import heapq
import ipaddress
import math
import os
import select
import signal
import socket
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from quicack.core.impairment import (DIRECTIONS, TO_CLIENT, TO_SERVER, Direction, Impairment,
                                     datagram_types, destination_cid, option, parse_drops)
from quicack.model import QuicackError
from quicack.scan import rxtime
from quicack.store.relaytable import RelayRecords

#: reasons the relay adds to the core's (drop_list, loss, queue_full)
STOPPED = "stopped"
SEND_ERROR = "send_error"

SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)
ANCILLARY = socket.CMSG_SPACE(rxtime.TIMESPEC.size) + socket.CMSG_SPACE(4)
MAX_DATAGRAM = 65535
#: datagrams read from one socket before the loop looks at the clock again
READ_BATCH = 32
RECEIVE_BUFFER_BYTES = 4 << 20
#: SCHED_FIFO priority of a ``realtime`` relay (1–99; above the kernel's default 50 for threaded
#: interrupt handlers would be too much)
REALTIME_PRIORITY = 20


def parse_endpoint(value: str | tuple[str, int], name: str, any_port: bool = False) -> tuple[str, int]:
    """``IP:PORT`` or ``[V6]:PORT`` (or a (host, port) tuple) on loopback → (host, port);
    port 0 only with ``any_port`` (the system picks one)."""
    if isinstance(value, tuple):
        host, port = value
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise QuicackError(f"{name} {value!r}: expected ADDR:PORT, e.g. 127.0.0.1:4433")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(host)
        port = int(port)
        if not (0 if any_port else 1) <= port < 65536:
            raise ValueError
    except ValueError:
        raise QuicackError(f"{name} {value!r}: expected ADDR:PORT, e.g. 127.0.0.1:4433") from None
    if not address.is_loopback:
        raise QuicackError(f"{name} {value!r}: the relay uses loopback addresses only "
                           "(127.0.0.0/8, ::1)")
    return str(address), port


def endpoint_text(address: tuple) -> str:
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class RelayConfig:
    """Where the relay listens, where it forwards, and what each direction does."""

    listen: tuple[str, int]
    upstream: tuple[str, int]
    to_server: Impairment = field(default_factory=Impairment)
    to_client: Impairment = field(default_factory=Impairment)
    seed: int = 0
    #: the last part of each wait spent polling rather than sleeping (0: none; see the module)
    spin_ms: float = 0.0
    #: after a stop, how long the datagrams already scheduled may take to leave
    drain_s: float = 2.0
    #: run the relay's thread with a real-time priority (SCHED_FIFO; needs CAP_SYS_NICE): on a
    #: busy machine, other processes then delay neither its wake-ups nor its departures
    realtime: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "listen", parse_endpoint(self.listen, "--listen", any_port=True))
        object.__setattr__(self, "upstream", parse_endpoint(self.upstream, "--upstream"))
        self.to_server.check(TO_SERVER)
        self.to_client.check(TO_CLIENT)

    @classmethod
    def from_options(cls, *, listen: str, upstream: str, delay_ms: float = 0.0,
                     delay_to_client_ms: float | None = None, delay_to_server_ms: float | None = None,
                     jitter_ms: float = 0.0, rate_to_client_kbps: float | None = None,
                     rate_to_server_kbps: float | None = None, queue_bytes: int | None = None,
                     queue_packets: int | None = None, loss_to_client: float = 0.0,
                     loss_to_server: float = 0.0, burst: int | None = None,
                     drop_to_client: str = "", drop_to_server: str = "", seed: int = 0,
                     spin_ms: float = 0.0, realtime: bool = False, queue_packets_to_client: int | None = None,
                     queue_packets_to_server: int | None = None, rate_overhead_bytes: int = 0) -> RelayConfig:
        """The command line's options: ``delay_ms`` is each direction's one-way delay unless a
        direction's own is given; jitter, queue bounds and burst apply to both directions (a
        direction's own ``queue_packets_to_*`` replaces ``queue_packets`` there)."""
        if (queue_bytes is not None or queue_packets is not None or queue_packets_to_client is not None
                or queue_packets_to_server is not None) and \
                rate_to_client_kbps is None and rate_to_server_kbps is None:
            raise QuicackError("--queue-bytes/--queue-packets bound what waits for a rate limit: "
                               "give --rate-to-client-kbps or --rate-to-server-kbps")
        given = {TO_CLIENT: (delay_to_client_ms, rate_to_client_kbps, loss_to_client, drop_to_client,
                             queue_packets_to_client),
                 TO_SERVER: (delay_to_server_ms, rate_to_server_kbps, loss_to_server, drop_to_server,
                             queue_packets_to_server)}
        sides = {}
        for direction, (delay, rate, loss, drops, packets) in given.items():
            sides[direction] = Impairment(
                delay_ms=delay_ms if delay is None else delay, jitter_ms=jitter_ms, rate_kbps=rate,
                queue_bytes=queue_bytes, queue_packets=queue_packets if packets is None else packets,
                loss_percent=loss, overhead_bytes=rate_overhead_bytes,
                burst=burst, drops=parse_drops(drops or "", option(direction, "drop")))
        return cls(listen, upstream, sides[TO_SERVER], sides[TO_CLIENT], seed, spin_ms, realtime=realtime)

    def describe(self) -> dict:
        """Every setting as JSON values (``relay_runs.config``)."""
        return {"listen": endpoint_text(self.listen), "upstream": endpoint_text(self.upstream),
                "seed": self.seed, TO_SERVER: self.to_server.describe(),
                TO_CLIENT: self.to_client.describe(), "spin_ms": self.spin_ms, "drain_s": self.drain_s,
                "realtime": self.realtime}


# --- records ---------------------------------------------------------------------------------

class _Log:
    """The records as the loop writes them: arrays, one entry (or a few numbers) per datagram."""

    def __init__(self) -> None:
        self.numbers = array("q")  # flow, direction, index, size
        self.times = array("d")  # time in, planned departure (ms from the origin; NaN: none)
        self.time_out = array("d")
        self.types: list[str] = []
        self.reason: list[str | None] = []

    def add(self, flow: int, direction: int, index: int, size: int, types: str, time_in: float,
            planned: float, reason: str | None) -> int:
        self.numbers.extend((flow, direction, index, size))
        self.times.extend((time_in, planned))
        self.time_out.append(math.nan)
        self.types.append(types)
        self.reason.append(reason)
        return len(self.reason) - 1

    def columns(self, flows: list[str], origin_ms: float) -> dict[str, list]:
        def epoch(values: array) -> list:
            return [None if v != v else origin_ms + v for v in values]
        numbers = self.numbers
        return {"arrival_index": list(range(len(self.reason))),
                "flow": [flows[f] for f in numbers[0::4]],
                "direction": [DIRECTIONS[d] for d in numbers[1::4]],
                "datagram_index": numbers[2::4].tolist(), "size_bytes": numbers[3::4].tolist(),
                "quic_types": self.types, "time_in_epoch_ms": epoch(self.times[0::2]),
                "planned_out_epoch_ms": epoch(self.times[1::2]),
                "time_out_epoch_ms": epoch(self.time_out), "dropped_reason": self.reason}


# --- the relay -------------------------------------------------------------------------------

class _Flow:
    __slots__ = ("id", "client", "upstream", "dcid")

    def __init__(self, flow_id: int, client: tuple, upstream: socket.socket):
        self.id, self.client, self.upstream = flow_id, client, upstream
        self.dcid: str | None = None  # its first client Initial's (destination_cid)


def _udp_socket(family: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_DGRAM)
    sock.setblocking(False)
    rxtime.enable(sock)
    sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)  # (capped by rmem_max)
    return sock


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _fine_timer_slack() -> None:
    """Linux prctl(PR_SET_TIMERSLACK, 1 µs) for this thread: its sleeps end within ~10 µs of
    their time rather than ~60 µs (the default slack is 50 µs).  Best effort."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(29, 1000, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Relay:
    """One relay run: :meth:`start` (a thread) and :meth:`stop`, or a ``with`` block; or
    :meth:`bind` and :meth:`run` in the calling thread."""

    def __init__(self, config: RelayConfig):
        self.config = config
        self.records: RelayRecords | None = None
        self._listen: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._stop_fds: list[int] = []
        self._wake_w: int | None = None
        self._closed = False
        self._running = threading.Event()

    # --- control ---------------------------------------------------------------------------

    def bind(self, stop_fd: int | None = None) -> tuple[str, int]:
        """Open the listening socket (and the stop pipe); returns the address listened on.
        ``stop_fd``: another descriptor whose readability stops the relay (a pipe's end)."""
        if self._closed:
            raise QuicackError("a relay runs once: make another Relay")
        if self._listen is None:
            host, port = self.config.listen
            self._listen = _udp_socket(_family(host))
            try:
                self._listen.bind((host, port))
            except OSError as e:
                self._listen.close()
                self._listen = None
                raise QuicackError(f"--listen {endpoint_text(self.config.listen)}: cannot bind: "
                                   f"{e.strerror}") from None
            self._address = self._listen.getsockname()[:2]
            self._wake_r, self._wake_w = os.pipe()
            os.set_blocking(self._wake_w, False)
            self._stop_fds = [self._wake_r] + ([stop_fd] if stop_fd is not None else [])
        return self.address

    @property
    def address(self) -> tuple[str, int]:
        if self._listen is None:
            raise QuicackError("the relay is not bound yet")
        return self._address

    def start(self) -> Relay:
        """Run in a thread; returns once it runs (or raises what stopped it from running).
        A relay already started is left as it is (``with Relay(config).start() as relay:``)."""
        if self._thread is not None:
            return self
        self.bind()
        self._thread = threading.Thread(target=self._run_catching, name="quicack-relay", daemon=True)
        self._thread.start()
        while not self._running.wait(0.05):
            if not self._thread.is_alive():
                self._thread.join()
                raise self._error
        return self

    def request_stop(self) -> None:
        """Ask the loop to stop (safe in a signal handler and from any thread)."""
        if self._wake_w is None:
            return
        try:
            os.write(self._wake_w, b"x")
        except OSError:  # (the pipe is full: a stop is already pending)
            pass

    def stop(self, timeout: float | None = None) -> RelayRecords:
        """Stop the thread started by :meth:`start`; its records."""
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise QuicackError("the relay did not stop in time")
        if self._error is not None:
            raise self._error
        assert self.records is not None
        return self.records

    def __enter__(self) -> Relay:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run_catching(self) -> None:
        try:
            self.run()
        except BaseException as e:  # handed to stop()
            self._error = e

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> RelayRecords:
        """Relay until asked to stop; the records (also in :attr:`records`)."""
        self.bind()
        cfg = self.config
        self._ep = select.epoll()
        self._ep.register(self._listen.fileno(), select.EPOLLIN)
        for fd in self._stop_fds:
            self._ep.register(fd, select.EPOLLIN)
        self._directions = (Direction(cfg.to_server, TO_SERVER, cfg.seed),
                            Direction(cfg.to_client, TO_CLIENT, cfg.seed))
        self._flows: dict[tuple, _Flow] = {}
        self._by_fd: dict[int, _Flow] = {}
        self._names: list[str] = []
        self._overflow: dict[int, int] = {}
        self._log = _Log()
        self._heap: list = []
        self._stopping = False
        self._origin_ns = time.time_ns()
        described = dict(cfg.describe(), listen=endpoint_text(self.address))  # (port 0: the one bound)
        policy = self._set_realtime() if cfg.realtime else None
        _fine_timer_slack()
        cpu = time.thread_time()
        try:
            self._running.set()
            self._loop()
            self._finish()
        finally:  # (also after a failure: the records so far are kept)
            for _due, record, *_ in self._heap:
                self._log.reason[record] = STOPPED
            cpu_ms = (time.thread_time() - cpu) * 1000.0
            self._close()
            if policy is not None:
                os.sched_setscheduler(0, *policy)
            origin_ms = self._origin_ns / 1e6
            self.records = RelayRecords(described, origin_ms, time.time_ns() / 1e6, cpu_ms,
                                        sum(self._overflow.values()),
                                        self._log.columns(self._names, origin_ms),
                                        {self._names[f.id]: f.dcid for f in self._flows.values() if f.dcid})
        return self.records

    def _set_realtime(self) -> tuple:
        """This thread's scheduling policy before it took SCHED_FIFO (Linux: pid 0 = this thread)."""
        before = (os.sched_getscheduler(0), os.sched_getparam(0))
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))
        except OSError as e:
            self._close()
            raise QuicackError(f"--realtime: cannot take a real-time priority ({e.strerror}); "
                               "it needs root or CAP_SYS_NICE") from None
        return before

    def _loop(self) -> None:
        spin_ns = int(self.config.spin_ms * 1e6)
        heap, poll, listen_fd = self._heap, self._ep.poll, self._listen.fileno()
        drain_until = None
        while True:
            now = time.time_ns()
            while heap and heap[0][0] <= now:
                self._send(heapq.heappop(heap))
                now = time.time_ns()
            if self._stopping:
                if not heap or now >= drain_until:
                    return
            if not heap:
                events = poll(1.0)
            else:
                wait = heap[0][0] - now - spin_ns
                if wait >= 1_000_000:  # whole ms (epoll rounds a timeout up to the next ms)
                    events = poll((wait // 1_000_000 - 0.5) / 1000)
                elif wait > 0:
                    events = poll(0)
                    if not events:
                        time.sleep(wait / 1e9)
                        continue
                else:
                    events = poll(0)
            for fd, _ in events:
                if fd == listen_fd:
                    self._read(self._listen, None)
                elif fd in self._by_fd:
                    self._read(self._by_fd[fd].upstream, self._by_fd[fd])
                elif not self._stopping:  # a stop descriptor: no longer watched
                    self._stopping = True
                    drain_until = time.time_ns() + int(self.config.drain_s * 1e9)
                    for stop_fd in self._stop_fds:
                        self._ep.unregister(stop_fd)

    def _read(self, sock: socket.socket, flow: _Flow | None) -> None:
        """Up to READ_BATCH datagrams from ``sock`` (the listening socket when ``flow`` is None)."""
        for _ in range(READ_BATCH):
            try:
                data, ancillary, _flags, source = sock.recvmsg(MAX_DATAGRAM, ANCILLARY)
            except BlockingIOError:
                return
            except OSError:  # e.g. ECONNREFUSED: the server's port was closed (ICMP)
                continue
            arrival_ns = None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET:
                    if kind == rxtime.SCM_TIMESTAMPNS:
                        sec, nsec = rxtime.TIMESPEC.unpack_from(payload)
                        arrival_ns = sec * 1_000_000_000 + nsec
                    elif kind == SO_RXQ_OVFL:
                        self._overflow[sock.fileno()] = int.from_bytes(payload[:4], "little")
            if arrival_ns is None:
                arrival_ns = time.time_ns()
            if flow is None:
                client = self._flow(source)
                self._arrive(client, 0, data, arrival_ns, client.upstream, None)
            else:
                self._arrive(flow, 1, data, arrival_ns, self._listen, flow.client)
            if self._heap and self._heap[0][0] <= time.time_ns():
                return  # a departure is due: the rest waits in the socket, with its kernel time

    def _flow(self, client: tuple) -> _Flow:
        """The flow of a client address, with its upstream socket (None if none could be made:
        its datagrams are recorded as send errors)."""
        flow = self._flows.get(client)
        if flow is None:
            host, port = self.config.upstream
            upstream = None
            try:
                upstream = _udp_socket(_family(host))
                upstream.connect((host, port))
            except OSError:
                if upstream is not None:
                    upstream.close()
                upstream = None
            flow = _Flow(len(self._names), client, upstream)
            self._names.append(endpoint_text(client))
            self._flows[client] = flow
            if upstream is not None:
                self._by_fd[upstream.fileno()] = flow
                self._ep.register(upstream.fileno(), select.EPOLLIN)
        return flow

    def _arrive(self, flow: _Flow, direction: int, data: bytes, arrival_ns: int,
                sock: socket.socket | None, destination: tuple | None) -> None:
        arrival_ms = (arrival_ns - self._origin_ns) / 1e6
        types = datagram_types(data)
        if flow.dcid is None and DIRECTIONS[direction] == TO_SERVER:
            flow.dcid = destination_cid(data)
        core = self._directions[direction]
        if self._stopping or sock is None:
            self._log.add(flow.id, direction, core.count(flow.id), len(data), types, arrival_ms,
                          math.nan, STOPPED if self._stopping else SEND_ERROR)
            return
        verdict = core.offer(flow.id, len(data), arrival_ms)
        if verdict.reason is not None:
            self._log.add(flow.id, direction, verdict.index, len(data), types, arrival_ms, math.nan,
                          verdict.reason)
            return
        record = self._log.add(flow.id, direction, verdict.index, len(data), types, arrival_ms,
                               verdict.departure_ms, None)
        due_ns = self._origin_ns + round(verdict.departure_ms * 1e6)
        heapq.heappush(self._heap, (due_ns, record, sock, destination, data))

    def _send(self, entry: tuple) -> None:
        _due, record, sock, destination, data = entry
        sent_ns = time.time_ns()
        try:
            if destination is None:
                sock.send(data)
            else:
                sock.sendto(data, destination)
        except OSError:
            self._log.reason[record] = SEND_ERROR
            return
        self._log.time_out[record] = (sent_ns - self._origin_ns) / 1e6

    def _finish(self) -> None:
        """After the loop: what is still scheduled, and what waits in the sockets, is recorded
        as stopped."""
        self._stopping = True
        for _due, record, *_ in self._heap:
            self._log.reason[record] = STOPPED
        self._heap.clear()
        self._read_all(self._listen, None)
        for flow in list(self._flows.values()):
            if flow.upstream is not None:
                self._read_all(flow.upstream, flow)

    def _read_all(self, sock: socket.socket, flow: _Flow | None) -> None:
        before = -1
        while before != len(self._log.reason):
            before = len(self._log.reason)
            self._read(sock, flow)

    def _close(self) -> None:
        self._ep.close()
        for flow in self._flows.values():
            if flow.upstream is not None:
                flow.upstream.close()
        self._listen.close()
        self._closed = True
        wake_w, self._wake_w = self._wake_w, None
        os.close(self._wake_r)
        os.close(wake_w)


# --- in a child process; until a signal ------------------------------------------------------

def _child(config: RelayConfig, conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the relay
    relay = Relay(config)
    try:
        address = relay.bind(stop_fd=conn.fileno())
    except QuicackError as e:
        conn.send(("error", str(e)))
        return
    conn.send(("ready", address))
    try:
        conn.send(("records", relay.run()))
    except Exception as e:  # (OSError: the parent is gone)
        conn.send(("error", f"the relay failed: {e!r}"))


class RelayProcess:
    """A :class:`Relay` in a child process (spawned): its timing does not share the caller's
    GIL.  The same interface: :meth:`start`, :attr:`address`, :meth:`stop` → records."""

    def __init__(self, config: RelayConfig):
        self.config = config
        self.records: RelayRecords | None = None
        self.address: tuple[str, int] | None = None
        self._process = None

    def start(self, timeout: float = 30.0) -> RelayProcess:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(target=_child, args=(self.config, child_conn),
                                        name="quicack-relay", daemon=True)
        self._process.start()
        child_conn.close()
        if not self._conn.poll(timeout):
            self._process.kill()
            raise QuicackError("the relay process did not start")
        kind, value = self._conn.recv()
        if kind == "error":
            self._process.join()
            raise QuicackError(value)
        self.address = value
        return self

    def stop(self, timeout: float = 60.0) -> RelayRecords:
        self._conn.send("stop")
        if not self._conn.poll(timeout):
            self._process.kill()
            raise QuicackError("the relay process did not stop in time")
        kind, value = self._conn.recv()
        self._process.join()
        self._conn.close()
        if kind == "error":
            raise QuicackError(value)
        self.records = value
        return self.records

    def __enter__(self) -> RelayProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def run_until_signal(config: RelayConfig,
                     ready: Callable[[tuple[str, int]], None] | None = None) -> RelayRecords:
    """Relay in this (main) thread until SIGINT or SIGTERM; the records of every datagram."""
    relay = Relay(config)
    address = relay.bind()
    previous = {sig: signal.signal(sig, lambda *_: relay.request_stop())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if ready is not None:
            ready(address)
        return relay.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
