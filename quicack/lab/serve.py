"""Local aioquic HTTP/3 servers with a chosen ACK behaviour, for tests and the demo.

Theory of operation: every listener is an aioquic ``QuicServer`` whose connections are a
:class:`ServerConnection`, a small subclass of aioquic's sans-I/O ``QuicConnection`` that decides
when the client's first CRYPTO data (the ClientHello) reaches TLS:

- ``wfc`` — wait for the certificate: nothing leaves until the certificate delay has passed, then
  the ACK rides in the same Initial packet as the ServerHello (aioquic's own behaviour when the
  delay is 0).
- ``iack`` — instant ACK: the ClientHello's CRYPTO frames are held back from TLS, so the
  transmit that follows the datagram's receipt carries an ACK-only Initial; the held frames go
  to TLS when the certificate delay (a remote certificate store) has passed.
- ``iack-ping`` — the same, with a PING in the instant ACK packet (ack-eliciting, so the client
  answers it and the server gets an RTT sample even if its ServerHello flight is lost).

RFC 9000 §13.2.1: "An endpoint MUST acknowledge all ack-eliciting Initial and Handshake packets
immediately".  aioquic arms a 1 ms ACK timer (``_ack_delay``) but writes a pending Initial or
Handshake ACK whenever it builds a packet, so the instant ACK goes out in the transmit that
follows the receipt — after the work aioquic does inside ``receive_datagram`` (connection and
TLS context set-up, key derivation, decryption: 0.3–0.7 ms here, 1.2–1.7 ms for the first
connection of a process, hence a warm-up handshake at start).  Where the earlier experiment's
~7 ms went is the time *before* that: the ClientHello waits in the socket buffer while the
server process is busy with other connections' TLS work or not scheduled at all (a shared
2-core machine: idle server p50 1.0 ms, p99 7.5 ms from the client's Initial to the ACK on the
wire).  asyncio hides that wait — aioquic counts the ACK Delay from when Python read the
datagram — so the listener reads with ``recvmsg`` and ``SO_TIMESTAMPNS`` and counts it from the
kernel's receive time (:class:`_ReceiveClock`): the ACK Delay it reports is what the client's RTT
sample really contains.

Behaviours for testing scanners against broken peers: ``silent`` (reads, never answers),
``garbage`` (random bytes to every datagram), ``close`` (CONNECTION_CLOSE, CONNECTION_REFUSED,
in answer to the ClientHello), ``alert`` (no ALPN the client offers: TLS alert
no_application_protocol), ``retry`` (a Retry packet, then wfc) and ``vn`` (QUIC v2 only).

``extra_delay_ms`` delays every datagram the listener sends (a longer return path; loopback has
no netem). The ``server`` response header names the behaviour, so a probe records what it met.
For the testbed: ``cert_chain_length`` sends a chain of that many certificates (a longer first
flight), ``response_bytes`` or a path ``/N`` makes the response body N bytes long, PTO expiries
are logged (:mod:`quicack.lab.ptolog`); every mode issues session tickets allowing 0-RTT and
accepts it unless ``zero_rtt`` is off (:mod:`quicack.lab.tickets`, :mod:`quicack.lab.earlydata`).
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path

import aioquic
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.buffer import Buffer
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import HeadersReceived
from aioquic.quic import events as quic_events
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection, QuicReceiveContext
from aioquic.quic.logger import QuicFileLogger
from aioquic.quic.packet import QuicErrorCode, QuicFrameType, QuicProtocolVersion
from aioquic.tls import Epoch
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from quicack.lab import ackrequest, carefulcc, certificate, earlydata, iackbudget, tickets
from quicack.lab.ptolog import LoggedPto
from quicack.lab.servechild import Child  # noqa: F401  (where callers have found it)
from quicack.core import recovery
from quicack.scan import rxtime, targets
from quicack.lab.modes import SERVE_MODES as MODES  # ACK behaviours a listener can have (module docstring)
from quicack.model import QuicackError


#: RFC 9002 §6.2.2: "This results in handshakes starting with a PTO of 1 second"
#: (:data:`quicack.core.recovery.FIRST_PTO_MS`).  aioquic's PTO before any RTT sample is twice its
#: ``initial_rtt`` (default 100 ms: 200 ms), so a listener whose return path is longer than that
#: (``extra_delay_ms``) would resend its first flight before the client's ACK could arrive.
INITIAL_RTT_S = recovery.FIRST_PTO_MS / 1000.0 / 2
MAX_RESPONSE_BYTES = 64 << 20  # the longest response body a path /N may ask for


@dataclass(frozen=True)
class ListenerSpec:
    """One UDP listener: where, and how it behaves."""
    host: str
    port: int
    mode: str = "wfc"
    cert_delay_ms: float = 0.0
    extra_delay_ms: float = 0.0
    #: the ack_delay_exponent transport parameter this server advertises (and encodes with)
    ack_delay_exponent: int = 3
    #: aioquic's ACK timer for application data (its default is 1 ms)
    ack_delay_ms: float = 1.0
    #: the HTTP `server` header; None: quicack-serve/MODE aioquic/VERSION
    server_header: str | None = None
    #: certificates sent in the server's first flight: the leaf and its issuers up to a root
    cert_chain_length: int = 1
    #: the response body's size (a path ``/N`` asks for N bytes); None: one line of text
    response_bytes: int | None = None
    #: aioquic's congestion controller: reno (slow start), cubic or careful-resume (:mod:`carefulcc`)
    congestion: str = "reno"
    request_ack_frequency: tuple[int, float] | None = None  # (N, ms): :mod:`quicack.lab.ackrequest`
    #: session tickets allowing early data, 0-RTT accepted (quicack.lab.tickets); off: no tickets
    zero_rtt: bool = True

    def describe(self) -> str:
        return (f"{self.host}:{self.port} mode {self.mode}, cert delay {self.cert_delay_ms:g} ms, "
                f"extra delay {self.extra_delay_ms:g} ms, congestion control {self.congestion}")


def parse_listen(value: str, default_port: int = 4433) -> tuple[str, int]:
    """``HOST[:PORT]`` or ``[V6]:PORT`` → (host, port)."""
    return targets.parse_address(value, default_port)


def load_config(path: str | Path) -> list[ListenerSpec]:
    """Listeners from a TOML file: ``[[listener]]`` tables with ``listen`` (or ``listen = [..]``),
    ``mode``, ``cert_delay_ms``, ``extra_delay_ms``, ``ack_delay_exponent``, ``ack_delay_ms``,
    ``server_header``, ``cert_chain_length``, ``response_bytes``, ``congestion``,
    ``request_ack_frequency``, ``zero_rtt``."""
    from quicack.scan.campaign import read_toml

    doc = read_toml(path)
    specs = []
    for i, table in enumerate(doc.get("listener", [])):
        listens = table.get("listen")
        if listens is None:
            raise QuicackError("listener has no 'listen'", str(path), f"listener {i + 1}")
        for listen in [listens] if isinstance(listens, str) else listens:
            host, port = parse_listen(listen)
            options = {f.name: table[f.name] for f in fields(ListenerSpec)[2:] if f.name in table}
            spec = ListenerSpec(host, port, **options)
            check_spec(spec, f"{path} listener {i + 1}")
            specs.append(spec)
    if not specs:
        raise QuicackError("no [[listener]] tables", str(path))
    return specs


def check_spec(spec: ListenerSpec, where: str = "") -> None:
    ackrequest.check(spec.request_ack_frequency, where or None)
    if spec.mode not in MODES:
        raise QuicackError(f"unknown mode {spec.mode!r}; modes: {', '.join(MODES)}", where or None)
    if spec.congestion not in carefulcc.CHOICES:
        raise QuicackError(f"congestion is one of {', '.join(carefulcc.CHOICES)}", where or None)
    if spec.cert_delay_ms < 0 or spec.extra_delay_ms < 0:
        raise QuicackError("delays must not be negative", where or None)
    if not (1 <= spec.cert_chain_length <= 32 and 0 <= (spec.response_bytes or 0) <= MAX_RESPONSE_BYTES):
        raise QuicackError(f"cert_chain_length is from 1 to 32, response_bytes from 0 to {MAX_RESPONSE_BYTES}",
                           where or None)


# --- certificate ----------------------------------------------------------------------------

def self_signed(common_name: str = "quicack-serve") -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A P-256 certificate for ``common_name`` (cheap to sign with, like most CDNs use)."""
    return certificate.self_signed(("*.test", "localhost"), common_name=common_name,
                                   organization="quicack test server")


# --- the connection -------------------------------------------------------------------------

class ServerConnection(earlydata.EarlyDataBuffer, iackbudget.UncountedInstantAck, LoggedPto,
                       ackrequest.AckFrequencyRequest, QuicConnection):
    """aioquic's server connection with a chosen first-flight behaviour (see module docstring)."""

    def __init__(self, *, spec: ListenerSpec, **kwargs):
        super().__init__(**kwargs)
        self._spec = spec
        self._local_ack_delay_exponent = spec.ack_delay_exponent
        self._ack_delay = spec.ack_delay_ms / 1000.0
        self._hold_s = spec.cert_delay_ms / 1000.0
        self._instant = spec.mode in ("iack", "iack-ping", iackbudget.UNCOUNTED_MODE)
        #: (frame_type, offset, data) of Initial CRYPTO frames not yet given to TLS
        self._held: list[tuple[int, int, bytes]] = []
        self._holding = spec.mode in ("wfc", "iack", "iack-ping", iackbudget.UNCOUNTED_MODE, "retry", "close", "alert")
        self.release_at: float | None = None
        self.instant_ack_sent = False

    @classmethod
    def adopt(cls, plain: QuicConnection, spec: ListenerSpec) -> "ServerConnection":
        """Replace the plain connection aioquic's ``QuicServer`` just built (it names the class
        itself) by one of ours with the same arguments and the same server connection ID, under
        which the listener has already registered it."""
        config = plain.configuration
        if config.quic_logger is not None and plain._quic_logger is not None:
            config.quic_logger._traces.remove(plain._quic_logger)
        conn = cls(spec=spec, configuration=config,
                   original_destination_connection_id=plain.original_destination_connection_id,
                   retry_source_connection_id=plain._retry_source_connection_id,
                   session_ticket_fetcher=plain._session_ticket_fetcher,
                   session_ticket_handler=plain._session_ticket_handler)
        conn._host_cids = plain._host_cids
        conn.host_cid = plain.host_cid
        conn._local_initial_source_connection_id = plain.host_cid
        return conn

    # receive path -------------------------------------------------------------------------

    def _handle_crypto_frame(self, context: QuicReceiveContext, frame_type: int, buf: Buffer) -> None:
        if not (self._holding and context.epoch == Epoch.INITIAL):
            return super()._handle_crypto_frame(context, frame_type, buf)
        offset = buf.pull_uint_var()
        length = buf.pull_uint_var()
        data = buf.pull_bytes(length)
        if self._quic_logger is not None:  # log it as received, like aioquic does
            context.quic_logger_frames.append({"frame_type": "crypto", "offset": offset,
                                               "length": length})
        self._held.append((frame_type, offset, data))
        if self.release_at is None:
            self.release_at = context.time + self._hold_s

    def receive_datagram(self, data: bytes, addr, now: float) -> None:
        super().receive_datagram(data, addr, now)
        if self._instant and self._held and not self.instant_ack_sent:
            # the instant ACK is built here, before anything else happens for this datagram
            self.instant_ack_sent = True
            if self._spec.mode == "iack-ping":
                self._probe_pending = True  # a PING in the Initial packet (aioquic's probe path)

    def release_due(self, now: float) -> bool:
        return self._holding and self.release_at is not None and now >= self.release_at

    def release(self, now: float) -> None:
        """Hand the held ClientHello to TLS: the certificate is 'ready'."""
        self._holding = False
        if self._spec.mode == "close":
            # RFC 9000 §10.2: a CONNECTION_CLOSE of type 0x1c (a transport error) instead of
            # the ServerHello flight: the client's handshake ends half-way with this code
            self.close(error_code=QuicErrorCode.CONNECTION_REFUSED, frame_type=QuicFrameType.CRYPTO,
                       reason_phrase="quicack-serve: closing mid-handshake on purpose")
            return
        held, self._held = self._held, []
        for frame_type, offset, data in held:
            buf = Buffer(capacity=len(data) + 16)
            buf.push_uint_var(offset)
            buf.push_uint_var(len(data))
            buf.push_bytes(data)
            buf.seek(0)
            context = QuicReceiveContext(epoch=Epoch.INITIAL, host_cid=self.host_cid,
                                         network_path=self._network_paths[0],
                                         quic_logger_frames=[], time=now, version=self._version)
            try:
                super()._handle_crypto_frame(context, frame_type, buf)
            except Exception as exc:  # a TLS alert: close like aioquic's receive path does
                code = getattr(exc, "error_code", QuicErrorCode.INTERNAL_ERROR)
                self.close(error_code=code, frame_type=frame_type,
                           reason_phrase=getattr(exc, "reason_phrase", str(exc)))
                return
        # the ClientHello was ACKed already (iack) or is ACKed now, with the delay since receipt

    # send path ----------------------------------------------------------------------------

    def datagrams_to_send(self, now: float):
        if self._holding and not self._instant:
            return []  # wfc: nothing leaves before the certificate, not even the ACK
        return super().datagrams_to_send(now)

    def get_timer(self) -> float | None:
        timer = super().get_timer()
        if self._holding and self.release_at is not None:
            return self.release_at if timer is None else min(timer, self.release_at)
        return timer

    def handle_timer(self, now: float) -> None:
        if self.release_due(now):
            self.release(now)
        super().handle_timer(now)


class _ReceiveClock:
    """The kernel receive time of the datagram being handled, on the event loop's clock.

    RFC 9000 §13.2.5: the ACK Delay is "the time from when the packet was received".  asyncio
    reads datagrams without their kernel timestamps, so a datagram that waited in the socket
    buffer while the loop was busy (TLS work of other connections, a descheduled process) would
    look instant.  The listener's socket reads with ``recvmsg`` and ``SO_TIMESTAMPNS`` instead
    (:func:`_read_with_timestamps`), and connections take their receive time from here."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.current: float | None = None

    def now(self) -> float:
        return self.current if self.current is not None else self.loop.time()


class H3ServerProtocol(QuicConnectionProtocol):
    """Answers every HTTP/3 request with a short text naming the listener's behaviour."""

    def __init__(self, *args, spec: ListenerSpec, clock: _ReceiveClock, **kwargs):
        super().__init__(*args, **kwargs)
        self._spec = spec
        self._clock = clock
        self._h3: H3Connection | None = None

    def datagram_received(self, data, addr) -> None:
        # aioquic's own, with the kernel's receive time instead of the loop's time
        self._quic.receive_datagram(data, addr, now=self._clock.now())
        self._process_events()
        self.transmit()
        quic: ServerConnection = self._quic  # type: ignore[assignment]
        if quic.release_due(self._loop.time()):
            quic.release(self._loop.time())
            self._process_events()
            self.transmit()

    def quic_event_received(self, event) -> None:
        carefulcc.on_event(self._quic, event, self._loop.time())  # (a no-op for other controllers)
        if isinstance(event, quic_events.ProtocolNegotiated):
            self._h3 = H3Connection(self._quic)
        if self._h3 is None:
            return
        for h3_event in self._h3.handle_event(event):
            if isinstance(h3_event, HeadersReceived):
                spec = self._spec
                body = response_body(spec, dict(h3_event.headers).get(b":path", b"/"))
                self._h3.send_headers(h3_event.stream_id, [
                    (b":status", b"200"),
                    (b"server", (spec.server_header if spec.server_header is not None
                                 else f"quicack-serve/{spec.mode} aioquic/{aioquic.__version__}").encode()),
                    (b"alt-svc", f'h3=":{spec.port}"; ma=86400'.encode()),
                    (b"content-type", b"text/plain"),
                    (b"content-length", str(len(body)).encode()),
                ])
                self._h3.send_data(h3_event.stream_id, body, end_stream=True)
                self.transmit()


def response_body(spec: ListenerSpec, path: bytes) -> bytes:
    """A line naming the listener's behaviour; repeated to N bytes when the path is ``/N``
    (decimal, at most MAX_RESPONSE_BYTES) or else the listener has ``response_bytes = N``."""
    text = (f"quicack-serve mode={spec.mode} cert_delay_ms={spec.cert_delay_ms:g} "
            f"extra_delay_ms={spec.extra_delay_ms:g}\n").encode()
    digits = path[1:]
    size = spec.response_bytes
    if path.startswith(b"/") and digits.isdigit() and len(digits) <= 9 and int(digits) <= MAX_RESPONSE_BYTES:
        size = int(digits)
    return text if size is None else (text * (size // len(text) + 1))[:size]


class _DelayedTransport:
    """Sends each datagram ``delay`` seconds later (a longer return path)."""

    def __init__(self, transport: asyncio.DatagramTransport, delay: float):
        self._transport = transport
        self._delay = delay
        self._loop = asyncio.get_running_loop()

    def sendto(self, data: bytes, addr=None) -> None:
        self._loop.call_later(self._delay, self._send, data, addr)

    def _send(self, data, addr) -> None:
        if not self._transport.is_closing():
            self._transport.sendto(data, addr)

    def __getattr__(self, name):
        return getattr(self._transport, name)


class _Listener(QuicServer):
    def __init__(self, *, spec: ListenerSpec, **kwargs):
        super().__init__(**kwargs)
        self._spec = spec

    def connection_made(self, transport) -> None:
        if self._spec.extra_delay_ms > 0:
            transport = _DelayedTransport(transport, self._spec.extra_delay_ms / 1000.0)
        super().connection_made(transport)

    def datagram_received(self, data, addr) -> None:
        mode = self._spec.mode
        if mode == "silent":
            return
        if mode == "garbage":
            self._transport.sendto(os.urandom(max(64, min(len(data), 1200))), addr)
            return
        super().datagram_received(data, addr)


class _UdpTransport:
    """The little of asyncio's datagram transport that aioquic uses (``sendto``, ``close``),
    over a socket we read ourselves (asyncio's transport reads without kernel timestamps)."""

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop):
        self._sock = sock
        self._loop = loop
        self._closed = False

    def sendto(self, data: bytes, addr=None) -> None:
        if self._closed:
            return
        try:
            self._sock.sendto(data, addr)
        except OSError:
            pass  # UDP: as if lost; the peer's recovery resends

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()

    def is_closing(self) -> bool:
        return self._closed

    def get_extra_info(self, name: str, default=None):
        return self._sock if name == "socket" else default


def _read_with_timestamps(sock: socket.socket, listener: QuicServer, clock: _ReceiveClock) -> None:
    """Read every waiting datagram with its kernel receive time and hand it to the listener."""
    for _ in range(64):  # bounded: let timers and other listeners run between bursts
        try:
            data, ancillary, _flags, addr = sock.recvmsg(65536, rxtime.ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # e.g. ICMP errors on the socket: nothing to hand over
            continue
        clock.current, _lag = rxtime.loop_time(rxtime.kernel_time(ancillary), clock.loop.time())
        try:
            listener.datagram_received(data, addr)
        finally:
            clock.current = None


@dataclass
class Running:
    """Listeners started by :func:`start`; ``close()`` stops them."""
    specs: list[ListenerSpec]
    servers: list[QuicServer] = field(default_factory=list)
    #: each listener's trust anchor (the root of its chain; the leaf itself when self-signed), by port
    anchors: dict[int, x509.Certificate] = field(default_factory=dict)

    def close(self) -> None:
        for server in self.servers:
            server.close()


def _configuration(spec: ListenerSpec, cert, key, qlog_dir: Path | None, chain=()) -> QuicConfiguration:
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN, certificate=cert,
                               private_key=key, idle_timeout=10.0, initial_rtt=INITIAL_RTT_S,
                               congestion_control_algorithm=spec.congestion)
    config.certificate_chain = list(chain)  # (sent after the leaf: its issuers)
    if spec.mode == "vn":
        config.supported_versions = [QuicProtocolVersion.VERSION_2]
    if spec.mode == "alert":  # no ALPN in common: TLS alert no_application_protocol (120)
        config.alpn_protocols = ["quicack-none"]
    if qlog_dir is not None:
        config.quic_logger = QuicFileLogger(str(qlog_dir))
    return config


def warm_up(cert, key) -> None:
    """One handshake in memory before the first client comes: the first connection of a process
    pays for lazy set-up (OpenSSL algorithm look-ups, first signature, imports) — more than a
    millisecond here — and would otherwise delay the first instant ACK by that much."""
    import ssl

    client = QuicConnection(configuration=QuicConfiguration(
        is_client=True, alpn_protocols=H3_ALPN, verify_mode=ssl.CERT_NONE))
    client.connect(("127.0.0.1", 1), now=0.0)
    server = ServerConnection(spec=ListenerSpec("127.0.0.1", 1, "iack"), configuration=QuicConfiguration(
        is_client=False, alpn_protocols=H3_ALPN, certificate=cert, private_key=key),
        original_destination_connection_id=client.original_destination_connection_id)
    for now in (0.0, 0.001, 0.002, 0.003):
        for data, _ in client.datagrams_to_send(now):
            server.receive_datagram(data, ("127.0.0.1", 2), now)
        if server.release_due(now):
            server.release(now)
        for data, _ in server.datagrams_to_send(now):
            client.receive_datagram(data, ("127.0.0.1", 1), now)


async def start(specs: Iterable[ListenerSpec], qlog_dir: str | Path | None = None) -> Running:
    """Bind every listener on the running loop; raise QuicackError naming one that cannot bind."""
    cert, key = self_signed()
    warm_up(cert, key)
    qlog_path = Path(qlog_dir) if qlog_dir else None
    if qlog_path:
        qlog_path.mkdir(parents=True, exist_ok=True)
    loop = asyncio.get_running_loop()
    running = Running(list(specs))
    chains = {1: ([cert], key)}  # certificates (the leaf first) and the leaf's key, per length
    saved_paths = carefulcc.SavedPaths()
    for spec in running.specs:
        check_spec(spec)
        n = spec.cert_chain_length
        certs, leaf_key = chains.get(n) or chains.setdefault(n, certificate.chain(
            n, ("*.test", "localhost"), common_name="quicack-serve", organization="quicack test server"))
        config = _configuration(spec, certs[0], leaf_key, qlog_path, certs[1:])
        running.anchors[spec.port] = certs[-1]
        clock = _ReceiveClock(loop)

        def make_protocol(quic, stream_handler=None, s=spec, k=clock):
            connection = ServerConnection.adopt(quic, s)
            carefulcc.attach(connection, saved_paths)  # the saved paths of this process's listeners
            return H3ServerProtocol(connection, stream_handler, spec=s, clock=k)

        try:
            family = socket.AF_INET6 if ":" in spec.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            rxtime.enable(sock)
            sock.bind((spec.host, spec.port))
        except OSError as e:
            running.close()
            raise QuicackError(f"cannot listen on {spec.host}:{spec.port}: {e.strerror}") from None
        server = _Listener(spec=spec, configuration=config, create_protocol=make_protocol,
                           retry=spec.mode == "retry", **tickets.handlers(spec.zero_rtt))
        server.connection_made(_UdpTransport(sock, loop))
        loop.add_reader(sock.fileno(), _read_with_timestamps, sock, server, clock)
        running.servers.append(server)
    return running


class Background:
    """Listeners on an event loop in a daemon thread (for the demo and tests)."""

    def __init__(self, specs: Iterable[ListenerSpec], qlog_dir: str | Path | None = None):
        self.specs = list(specs)
        self._qlog_dir = qlog_dir
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._running: Running | None = None
        self._thread = threading.Thread(target=self._run, name="quicack-serve", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._running = self._loop.run_until_complete(start(self.specs, self._qlog_dir))
        except BaseException as e:  # reported to the starting thread
            self._error = e
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()
        self._running.close()
        self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.close()

    def __enter__(self) -> "Background":
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


async def serve_forever(specs: list[ListenerSpec], qlog_dir: str | Path | None,
                        on_ready: Callable[[Running], None]) -> None:
    running = await start(specs, qlog_dir)
    on_ready(running)
    try:
        await asyncio.Event().wait()
    finally:
        running.close()
