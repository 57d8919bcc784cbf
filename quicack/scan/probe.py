"""One probe: a QUIC v1 handshake with ALPN h3 and an HTTP/3 GET (or ALPN hq-interop and its
``GET /path`` line), recorded as data.

Theory of operation: aioquic's sans-I/O ``QuicConnection`` (the scanner's subclass,
:class:`quicack.scan.connection.ScanConnection`) is driven by a small loop of our own instead of
aioquic's asyncio protocol, so that each datagram enters the connection with the time the
*kernel* received it.  The probe's connected UDP socket has ``SO_TIMESTAMPNS``; every datagram
is read with ``recvmsg`` and its ``SCM_TIMESTAMPNS`` (CLOCK_REALTIME) both feeds aioquic's clock
(mapped onto the event loop's monotonic clock) and stamps the qlog events the datagram causes.
An event loop busy with 200 other probes therefore delays the *processing* of a datagram but
not its recorded arrival; the delay itself is kept as ``loop_lag_ms``.  With ``alpn =
"hq-interop"`` (servers without HTTP/3, e.g. Go's x/net QUIC) the request is the QUIC interop
runner's HTTP/0.9: ``GET /path\r\n`` on a client bidirectional stream, closed after it; the
response is the stream's bytes until its FIN (no status, no headers).  The first Initial ACK
and the datagram that completed the ServerHello are noted with their kernel receive times (raw
timings for the store; classification happens at ingest).

A probe never raises: whatever happens becomes a :class:`ProbeResult` with an ``outcome``.

CPU per probe (the scan's budget is 4 ms; the connection's own savings are in
:mod:`quicack.scan.connection`): a probe breaks its connection's reference cycles when it ends
(reference counting frees it; the cyclic collector would have to find ~400 objects), and a scan
runs its probes with the collector tuned (:func:`quicack.core.gctuning.tuned`: with its
defaults, collections triggered by the probes' many small objects cost ~1 ms a probe), so that
it does not rescan the long-lived objects of hundreds of probes in flight.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import socket
import ssl
import time
from dataclasses import dataclass, field

from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic import events as qe
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnectionState
from aioquic.quic.packet import QuicErrorCode, QuicProtocolVersion
from aioquic.tls import State

from quicack.core import ackschedule
from quicack.scan import acking, rxtime
from quicack.scan.connection import INITIAL_RTT_S, ScanConnection, Trace, TraceLogger, tag_connection
from quicack.scan.options import USER_AGENT

CRYPTO_ERROR = 0x100

OUTCOMES = ("ok", "retry", "timeout", "version_negotiation", "tls_alert", "connection_closed",
            "refused", "error")


@dataclass(frozen=True)
class ProbeSpec:
    target_index: int
    repetition: int
    domain: str
    address: str
    port: int
    cid: bytes  # 8 bytes: the client source connection ID (tagged)
    odcid: bytes  # 8 bytes: the original destination connection ID (tagged)
    path: str = "/"
    user_agent: str = USER_AGENT
    split_clienthello: int = 1
    #: per-phase timeouts (seconds): first server datagram, handshake done, response done
    first_response_timeout_s: float = 3.0
    handshake_timeout_s: float = 5.0
    response_timeout_s: float = 5.0
    keep_qlog: bool = True
    #: 'h3' (an HTTP/3 GET) or 'hq-interop' (a ``GET /path`` line on a bidirectional stream)
    alpn: str = "h3"
    #: the connection's and each stream's initial flow-control limit, bytes (None: aioquic's 1 MB,
    #: doubled whenever half is used); the testbed's large transfers raise it so that the sender's
    #: congestion window, not the receiver, limits them
    receive_window: int | None = None
    #: how the client acknowledges application data (:func:`quicack.core.ackschedule.make`)
    ack_policy: str = "aioquic"
    #: resume this TLS session (aioquic ``SessionTicket``): the GET goes in 0-RTT when the ticket
    #: allows early data; ``token``: a NEW_TOKEN to send in the Initial (quicack.scan.resumption)
    session_ticket: object | None = None
    token: bytes = b""


@dataclass
class ProbeResult:
    target_index: int
    repetition: int
    domain: str
    address: str
    port: int
    cid_tag: str
    outcome: str = "error"
    timeout_phase: str | None = None
    error_code: int | None = None
    error_frame_type: int | None = None
    error_reason: str | None = None
    #: wall-clock time the first Initial was sent; the *_ms timings below count from it
    started_epoch_ms: float = 0.0
    first_datagram_ms: float | None = None
    first_ack_ms: float | None = None
    server_hello_ms: float | None = None
    handshake_ms: float | None = None
    ttfb_ms: float | None = None
    response_ms: float | None = None
    duration_ms: float = 0.0
    loop_lag_ms: float | None = None
    http_status: int | None = None
    server_header: str | None = None
    alt_svc: str | None = None
    response_bytes: int | None = None
    alpn: str | None = None
    tls_cipher: str | None = None
    cert_subject: str | None = None
    cert_issuer: str | None = None
    server_transport_parameters: dict | None = None
    clienthello_bytes: int | None = None
    clienthello_packets: int | None = None
    datagrams_sent: int = 0
    datagrams_received: int = 0
    #: what the server gave for a later connection (NewSessionTicket, NEW_TOKEN) and, when this
    #: connection resumed one, whether it did and whether the server accepted its 0-RTT data
    session_ticket: object | None = field(default=None, repr=False)
    token: bytes = field(default=b"", repr=False)
    session_resumed: bool | None = None
    early_data_offered: bool = False
    early_data_accepted: bool | None = None
    #: the qlog trace (a dict in aioquic's 0.3 layout) and the NSS key log lines
    trace: dict | None = field(default=None, repr=False)
    keylog: str = field(default="", repr=False)


class _KeyLog:
    """A text sink for aioquic's ``secrets_log_file`` (NSS key log lines)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, s: str) -> None:
        self.lines.append(s)

    def flush(self) -> None:
        pass


def _configuration(spec: ProbeSpec, keylog: _KeyLog) -> QuicConfiguration:
    alpn = H3_ALPN if spec.alpn == "h3" else [spec.alpn]
    config = QuicConfiguration(is_client=True, alpn_protocols=alpn, verify_mode=ssl.CERT_NONE,
                               server_name=spec.domain, idle_timeout=10.0, initial_rtt=INITIAL_RTT_S)
    config.secrets_log_file = keylog
    config.supported_versions = [QuicProtocolVersion.VERSION_1]  # a v1 probe: VN is an outcome
    if spec.receive_window is not None:
        config.max_data = config.max_stream_data = spec.receive_window
    if spec.keep_qlog:
        config.quic_logger = TraceLogger()
    config.session_ticket = spec.session_ticket
    config.token = spec.token
    return config


class Probe:
    """Drives one :class:`ScanConnection` over one connected UDP socket."""

    def __init__(self, spec: ProbeSpec, loop: asyncio.AbstractEventLoop):
        self.spec = spec
        self.loop = loop
        self.keylog = _KeyLog()
        self.result = ProbeResult(spec.target_index, spec.repetition, spec.domain, spec.address,
                                  spec.port, spec.cid.hex())
        self.done = loop.create_future()
        self.quic: ScanConnection | None = None
        self.trace: Trace | None = None
        self.h3: H3Connection | None = None
        self.sock: socket.socket | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at: float | None = None
        self.deadline: asyncio.TimerHandle | None = None
        self.phase = "first_response"
        self.t0 = 0.0  # loop time of the first datagram sent
        self.stream_id: int | None = None
        self.response_bytes = 0
        self.lag_s = 0.0

    # --- set-up ----------------------------------------------------------------------------

    def start(self) -> None:
        spec = self.spec
        family = socket.AF_INET6 if ":" in spec.address else socket.AF_INET
        try:
            sock = socket.socket(family, socket.SOCK_DGRAM)
            sock.setblocking(False)
            rxtime.enable(sock)
            sock.connect((spec.address, spec.port))
        except OSError as e:
            self._finish("refused" if isinstance(e, ConnectionRefusedError) else "error",
                         reason=f"socket: {e.strerror or e}")
            return
        self.sock = sock
        self.loop.add_reader(sock.fileno(), self._readable)
        config = _configuration(spec, self.keylog)
        quic = acking.connection_class(spec.ack_policy)(configuration=config, session_ticket_handler=self._keep_ticket,
                                                        token_handler=self._keep_token)
        if spec.ack_policy != "aioquic":
            quic.ack_schedule = ackschedule.make(spec.ack_policy)
        quic.split_clienthello = spec.split_clienthello
        # the smallest active_connection_id_limit (RFC 9000 §18.2): the server sends one
        # NEW_CONNECTION_ID instead of seven
        quic._local_active_connection_id_limit = 2
        tag_connection(quic, spec.cid, spec.odcid)
        if quic._quic_logger is not None:
            quic._quic_logger.title = f"{spec.domain} #{spec.repetition}"
        self.quic = quic
        self.trace = quic._quic_logger  # aioquic drops its reference when the connection ends
        self.result.started_epoch_ms = time.time() * 1000.0
        self.t0 = self.loop.time()
        quic.connect((spec.address, spec.port), now=self.t0)
        self._arm_deadline(spec.first_response_timeout_s)
        if getattr(spec.session_ticket, "max_early_data_size", None) and quic.tls.session_ticket is not None:
            # RFC 9001 §4.6.1: early data once the ticket allows it; the GET rides the first flight
            self.result.early_data_offered = True
            if spec.alpn == "h3":
                self.h3 = H3Connection(quic)
                self.h3._quic_logger = None
            self._request()
        self._transmit()

    def _keep_ticket(self, ticket) -> None:
        self.result.session_ticket = ticket

    def _keep_token(self, token: bytes) -> None:
        self.result.token = token

    # --- I/O -------------------------------------------------------------------------------

    def _readable(self) -> None:
        while True:
            try:
                data, anc, _flags, _addr = self.sock.recvmsg(65536, rxtime.ANCILLARY_BYTES)
            except BlockingIOError:
                break
            except ConnectionRefusedError:
                self._finish("refused", reason="ICMP port unreachable (connection refused)")
                return
            except OSError as e:
                self._finish("refused", reason=f"ICMP error: {e.strerror or e}")
                return
            kernel_s = rxtime.kernel_time(anc)
            now_loop, lag = rxtime.loop_time(kernel_s, self.loop.time())
            self.lag_s = max(self.lag_s, lag)
            self._receive(data, now_loop, kernel_s if lag else time.time())
            if self.done.done():
                return
            if self.spec.ack_policy != "aioquic" and self.quic.ack_due(now_loop):
                self._after_io()  # a scheduled ACK goes now, not after the whole batch read
        self._after_io()

    def _receive(self, data: bytes, now: float, epoch_s: float) -> None:
        quic = self.quic
        r = self.result
        r.datagrams_received += 1
        if r.first_datagram_ms is None:
            r.first_datagram_ms = (now - self.t0) * 1000.0
        expecting_hello = quic.tls is not None and quic.tls.state == State.CLIENT_EXPECT_SERVER_HELLO
        trace = self.trace
        if trace is not None:
            trace.pinned_epoch_s = epoch_s
        try:
            quic.receive_datagram(data, (self.spec.address, self.spec.port), now=now)
        finally:
            if trace is not None:
                trace.pinned_epoch_s = None
        if self.phase == "first_response" and quic._state != QuicConnectionState.FIRSTFLIGHT:
            # the first datagram that decrypted as a packet of this connection
            self.phase = "handshake"
            self._arm_deadline(self.spec.handshake_timeout_s)
        if expecting_hello and quic.tls.state != State.CLIENT_EXPECT_SERVER_HELLO \
                and r.server_hello_ms is None:
            r.server_hello_ms = (now - self.t0) * 1000.0
        if quic.first_ack_time is not None and r.first_ack_ms is None:
            r.first_ack_ms = (quic.first_ack_time - self.t0) * 1000.0

    def _after_io(self) -> None:
        self._process_events()
        if self.done.done():
            return
        self._transmit()
        quic = self.quic
        if not self.done.done() and quic._close_event is not None \
                and quic._state in (QuicConnectionState.CLOSING, QuicConnectionState.DRAINING):
            # RFC 9000 §10.2: a closed connection stays in the closing or draining state "for at
            # least three times the current Probe Timeout"; aioquic reports the close only after
            # it (3 s with a 333 ms initial RTT), but the outcome is known now (and our own
            # CONNECTION_CLOSE, if any, has just been sent)
            self._terminated(quic._close_event)

    def _due(self) -> list:
        """The datagrams the connection has due now, their packets grouped in the trace."""
        trace = self.trace
        logged = len(trace._events) if trace is not None else 0
        datagrams = self.quic.datagrams_to_send(now=self.loop.time())
        if trace is not None and datagrams:
            stamp_datagrams(trace._events, logged, [len(d) for d, _ in datagrams], self.result.datagrams_sent)
        return datagrams

    def _send_due(self) -> None:
        for data, _ in self._due():
            self.sock.send(data)
            self.result.datagrams_sent += 1

    def _transmit(self) -> None:
        quic = self.quic
        for data, _addr in self._due():
            try:
                if not self.result.datagrams_sent:
                    # probe times count from the moment the first Initial leaves, not from
                    # before the ClientHello was built
                    self.t0 = self.loop.time()
                    self.result.started_epoch_ms = time.time() * 1000.0
                self.sock.send(data)
                self.result.datagrams_sent += 1
            except BlockingIOError:
                pass  # UDP: as if lost on the way; recovery resends
            except ConnectionRefusedError:
                self._finish("refused", reason="ICMP port unreachable (connection refused)")
                return
            except OSError as e:
                self._finish("error", reason=f"send: {e.strerror or e}")
                return
        at = quic.get_timer()
        if self.timer is not None and self.timer_at == at:
            return  # already armed for that time
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.timer_at = at
        if at is not None:
            self.timer = self.loop.call_at(at, self._on_timer, at)

    def _on_timer(self, at: float) -> None:
        self.timer = None
        self.timer_at = None
        now = max(at, self.loop.time())
        self.quic.handle_timer(now=now)
        self._after_io()

    def _arm_deadline(self, seconds: float) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
        self.deadline = self.loop.call_later(seconds, self._on_deadline)

    def _on_deadline(self) -> None:
        self.deadline = None
        if not self.done.done():
            r = self.result
            reason = None
            if self.phase == "first_response" and r.datagrams_received:
                reason = (f"{r.datagrams_received} datagrams received, none a QUIC packet "
                          "of this connection")
            self._finish("timeout", phase=self.phase, reason=reason)

    # --- QUIC and HTTP/3 events ------------------------------------------------------------

    def _process_events(self) -> None:
        quic = self.quic
        r = self.result
        while (event := quic.next_event()) is not None:
            if isinstance(event, qe.ProtocolNegotiated):
                r.alpn = event.alpn_protocol
                if self.spec.alpn == "h3" and self.h3 is None:
                    self.h3 = H3Connection(quic)
                    self.h3._quic_logger = None  # no HTTP/3 events in the probe's qlog (CPU)
            elif isinstance(event, qe.HandshakeCompleted):
                r.handshake_ms = (self.loop.time() - self.t0) * 1000.0
                self.phase = "response"
                self._arm_deadline(self.spec.response_timeout_s)
                r.session_resumed, r.early_data_accepted = event.session_resumed, event.early_data_accepted
                if self.stream_id is None:
                    self._request()
            elif isinstance(event, qe.ConnectionTerminated):
                self._terminated(event)
                return
            elif isinstance(event, qe.StreamDataReceived) and self.spec.alpn != "h3":
                self._hq_data(event)
                if self.done.done():
                    return
            if self.h3 is not None:
                for h3_event in self.h3.handle_event(event):
                    self._h3_event(h3_event)
                    if self.done.done():
                        return

    def _request(self) -> None:
        spec = self.spec
        self.stream_id = self.quic.get_next_available_stream_id()
        if spec.alpn != "h3":  # hq-interop: HTTP/0.9's request line, then the stream's FIN
            self.quic.send_stream_data(self.stream_id, f"GET {spec.path}\r\n".encode(), end_stream=True)
            return
        authority = spec.domain if spec.port == 443 else f"{spec.domain}:{spec.port}"
        self.h3.send_headers(self.stream_id, [
            (b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
            (b":path", spec.path.encode()), (b"user-agent", spec.user_agent.encode())],
            end_stream=True)

    def _h3_event(self, event) -> None:
        r = self.result
        if getattr(event, "stream_id", None) != self.stream_id:
            return
        if isinstance(event, HeadersReceived):
            if r.ttfb_ms is None:
                r.ttfb_ms = (self.loop.time() - self.t0) * 1000.0
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in event.headers}
            try:
                r.http_status = int(headers.get(":status", ""))
            except ValueError:
                r.http_status = None
            r.server_header = headers.get("server")
            r.alt_svc = headers.get("alt-svc")
        elif isinstance(event, DataReceived):
            self.response_bytes += len(event.data)
        if getattr(event, "stream_ended", False):
            r.response_ms = (self.loop.time() - self.t0) * 1000.0
            r.response_bytes = self.response_bytes
            self._finish("retry" if self.quic.retry_received else "ok")

    def _hq_data(self, event: qe.StreamDataReceived) -> None:
        """hq-interop: the response is the request stream's bytes up to its FIN."""
        r = self.result
        if event.stream_id != self.stream_id:
            return
        if r.ttfb_ms is None and event.data:
            r.ttfb_ms = (self.loop.time() - self.t0) * 1000.0
        self.response_bytes += len(event.data)
        if event.end_stream:
            r.response_ms = (self.loop.time() - self.t0) * 1000.0
            r.response_bytes = self.response_bytes
            self._finish("retry" if self.quic.retry_received else "ok")

    def _terminated(self, event: qe.ConnectionTerminated) -> None:
        quic = self.quic
        if quic.version_negotiation_received:
            outcome = "version_negotiation"
        elif CRYPTO_ERROR <= event.error_code < CRYPTO_ERROR + 256:
            outcome = "tls_alert"
        elif event.reason_phrase == "Idle timeout":
            outcome = "timeout"
        else:
            outcome = "connection_closed"
        self._finish(outcome, code=event.error_code, frame_type=event.frame_type,
                     reason=event.reason_phrase, phase=self.phase if outcome == "timeout" else None,
                     closed=True)

    # --- the end ---------------------------------------------------------------------------

    def _finish(self, outcome: str, code: int | None = None, frame_type: int | None = None,
                reason: str | None = None, phase: str | None = None, closed: bool = False) -> None:
        if self.done.done():
            return
        r = self.result
        r.outcome = outcome
        r.timeout_phase = phase
        r.error_code, r.error_frame_type, r.error_reason = code, frame_type, reason
        r.duration_ms = (self.loop.time() - self.t0) * 1000.0 if self.t0 else 0.0
        r.loop_lag_ms = self.lag_s * 1000.0
        quic = self.quic
        if quic is not None:
            if not closed and quic._state not in (QuicConnectionState.CLOSING,
                                                  QuicConnectionState.DRAINING,
                                                  QuicConnectionState.TERMINATED):
                try:
                    if outcome == "ok":
                        # what the last datagram made due goes out before the close: with 0-RTT
                        # the answer can come with the server's first flight, before this client
                        # has sent its Finished, and a close alone would leave it unsent
                        self._send_due()
                    quic.close(error_code=QuicErrorCode.NO_ERROR, reason_phrase="quicack probe done")
                    for data, _ in quic.datagrams_to_send(now=self.loop.time()):
                        self.sock.send(data)
                except OSError:
                    pass
            _describe_tls(quic, r)
            trace = self.trace
            if trace is not None:
                r.trace = trace.to_dict()
                r.trace["title"] = trace.title
                r.trace["description"] = f"quicack probe {r.cid_tag} outcome {outcome}"
                _first_flight(r)
        r.keylog = "".join(self.keylog.lines)
        for handle in (self.timer, self.deadline):
            if handle is not None:
                handle.cancel()
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
        # Break the finished connection's reference cycles (its frame-handler table, loss
        # recovery and TLS callbacks hold bound methods of it; H3 holds it): reference counting
        # then frees a probe's ~400 objects here, instead of the cyclic garbage collector
        # finding them later (~0.8 ms of CPU per probe with 200 in flight).
        for part in (self.h3, quic):
            if part is not None:
                part.__dict__.clear()
        self.done.set_result(r)


def stamp_datagrams(events: list, first: int, sizes: list[int], sent_before: int) -> None:
    """Name the datagram of each packet aioquic just logged as sent (it logs every packet of a
    batch before any datagram leaves) and log each datagram's UDP payload: packets fill datagrams
    in order, a datagram ending where the next packet would not fit (the client pads *after* its
    Initial packet); a datagram longer than its packets gets a ``datagrams_sent`` event with its
    payload.  The store then counts whole datagrams (``datagrams``, RFC 9000 §8.1)."""
    sent = [e for e in itertools.islice(events, first, None) if e["name"] == "transport:packet_sent"]
    t = sent[-1]["time"] if sent else (events[-1]["time"] if events else 0.0)
    k, used = 0, [0] * len(sizes)
    for event in sent:
        size = event["data"].get("raw", {}).get("length", 0)
        while k < len(sizes) - 1 and used[k] and used[k] + size > sizes[k]:
            k += 1
        event["data"]["datagram_id"] = sent_before + k
        used[k] += size
    # (only where the datagram is more than its packets: padding after them; the qlog stays small)
    events.extend({"name": "transport:datagrams_sent", "time": t,
                   "data": {"count": 1, "raw": [{"payload_length": n}], "datagram_ids": [sent_before + i]}}
                  for i, n in enumerate(sizes) if n != used[i])


def _describe_tls(quic: ScanConnection, r: ProbeResult) -> None:
    tls = quic.tls
    if tls is None:
        return
    cert = getattr(tls, "_peer_certificate", None)
    if cert is not None:
        r.cert_subject, r.cert_issuer = _names(cert)
    if tls.key_schedule is not None:
        r.tls_cipher = tls.key_schedule.cipher_suite.name
    params = quic.remote_parameters
    if params is not None:
        r.server_transport_parameters = {
            k: (v.hex() if isinstance(v, bytes) else v) for k, v in vars(params).items()
            if isinstance(v, (int, bytes))}


@functools.lru_cache(maxsize=1024)
def _names(cert) -> tuple[str | None, str | None]:
    """A certificate's subject and issuer as RFC 4514 strings — once per distinct certificate
    (certificates hash and compare by their DER bytes): a scan meets the same certificate on
    every repetition of a target and on every name a CDN address serves, and formatting the
    names costs ~0.07 ms a probe."""
    try:
        return cert.subject.rfc4514_string(), cert.issuer.rfc4514_string()
    except ValueError:
        return None, None


def _first_flight(r: ProbeResult) -> None:
    """ClientHello size and how many Initial packets first carried it, from the client's own log
    (retransmissions of the same CRYPTO offsets are not counted)."""
    size, packets, offsets = 0, 0, set()
    for event in r.trace["events"]:
        name = event["name"]
        if name == "transport:packet_received":
            break
        if name != "transport:packet_sent" or event["data"]["header"].get("packet_type") != "initial":
            continue
        crypto = [f for f in event["data"]["frames"]
                  if f.get("frame_type") == "crypto" and f["offset"] not in offsets]
        if crypto:
            offsets.update(f["offset"] for f in crypto)
            packets += 1
            size = max(size, max(f["offset"] + f["length"] for f in crypto))
    if packets:
        r.clienthello_bytes, r.clienthello_packets = size, packets


async def run(spec: ProbeSpec) -> ProbeResult:
    """Run one probe on the running loop; never raises for network trouble."""
    loop = asyncio.get_running_loop()
    probe = Probe(spec, loop)
    try:
        probe.start()
        return await probe.done
    except asyncio.CancelledError:
        probe._finish("error", reason="cancelled")
        raise
    except Exception as e:  # a bug or an aioquic failure: recorded, the scan goes on
        probe._finish("error", reason=f"{type(e).__name__}: {e}")
        return probe.result

