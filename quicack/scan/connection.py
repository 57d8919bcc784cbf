"""The scanner's QUIC connection: aioquic's client connection with the scanner's choices.

Theory of operation: :class:`ScanConnection` subclasses aioquic's sans-I/O ``QuicConnection``
(:mod:`quicack.scan.probe` drives it), changing only what a measurement scanner needs:

- one X25519 key share (aioquic offers four: P-256, P-384, X25519, X448 — four key generations
  per probe and a larger ClientHello), so the default ClientHello fits one Initial packet;
  ``split_clienthello = N`` adds a TLS padding extension (RFC 7685) that spreads it over N;
- the client source connection ID and the original destination connection ID carry the probe's
  tag (:mod:`quicack.core.cidtag`, set by :func:`tag_connection`), so a capture of the scan
  joins back to each target;
- the peer's ack_delay_exponent is applied.  RFC 9000 §18.2: "ack_delay_exponent: ... indicating
  an exponent used to decode the ACK Delay field in the ACK frame".  aioquic 1.7.2 assigns the
  variable to itself (``self._remote_ack_delay_exponent = self._remote_ack_delay_exponent``) and
  keeps decoding with 3;
- the time of the first Initial ACK is noted, and whether a Retry or a Version Negotiation came.

Its qlog (:class:`Trace`) can pin its clock to a kernel receive time and leaves out the events
no table of the store uses.  CPU per probe (the scan's budget is 4 ms): besides the single key
share and the unchecked CertificateVerify signature (the chain is not checked either:
``CERT_NONE``), a connection issues no spare connection IDs and asks the server for the minimum,
starts with RFC 9002's 1 s PTO (no ClientHello resent to a server slower than aioquic's 200 ms),
and drops aioquic's debug log calls while a scan has silenced its logger (:func:`quiet_aioquic`).
A few of aioquic's hottest small helpers are replaced by faster equivalents when this module
loads (:mod:`quicack.scan.speedups`).
"""

from __future__ import annotations

import logging
import time

from aioquic.buffer import Buffer
from aioquic.quic.connection import QuicConnection, QuicConnectionState, QuicReceiveContext
from aioquic.quic.logger import QuicLogger, QuicLoggerTrace
from aioquic.quic.packet import pull_quic_transport_parameters
from aioquic.tls import Epoch, Group

from quicack.core import recovery
from quicack.scan import speedups

TLS_PADDING_EXTENSION = 21
#: CRYPTO bytes one 1200-byte client Initial datagram carries with aioquic's headers
CRYPTO_BYTES_PER_INITIAL = 1150
#: RFC 9002 §6.2.2: "When no previous RTT is available, the initial RTT SHOULD be set to 333
#: milliseconds.  This results in handshakes starting with a PTO of 1 second".  aioquic's first
#: PTO is twice its ``initial_rtt`` (default 100 ms: 200 ms, where a server farther or slower
#: than that gets the ClientHello again before its first answer can arrive, costing both sides
#: a flight); the scanner starts with the RFC's 1 s PTO instead (and so do the local servers).
FIRST_PTO_S = recovery.FIRST_PTO_MS / 1000.0
INITIAL_RTT_S = FIRST_PTO_S / 2  # aioquic: PTO before any RTT sample = 2 × initial_rtt


speedups.apply()  # faster stand-ins for a few aioquic helpers (quicack.scan.speedups)


def quiet_aioquic() -> None:
    """aioquic logs warnings (e.g. a failed version negotiation) that are probe outcomes here."""
    logging.getLogger("quic").setLevel(logging.CRITICAL)


#: Events a probe's qlog leaves out to save CPU: none of them feeds a table of the store except
#: ``other_events`` (HTTP/3 frames, key updates and retirements, spin bit, datagram counts).
SKIPPED_CATEGORIES = frozenset({"http", "security", "connectivity"})
SKIPPED_EVENTS = frozenset({"datagrams_sent", "datagrams_received"})


class Trace(QuicLoggerTrace):
    """aioquic's qlog trace whose clock can be pinned to a kernel receive time, without the
    events in SKIPPED_CATEGORIES / SKIPPED_EVENTS."""

    def __init__(self, *, is_client: bool, odcid: bytes) -> None:
        super().__init__(is_client=is_client, odcid=odcid)
        self.pinned_epoch_s: float | None = None
        self.title: str | None = None

    def log_event(self, *, category: str, event: str, data: dict) -> None:
        if category in SKIPPED_CATEGORIES or event in SKIPPED_EVENTS:
            return
        t = self.pinned_epoch_s if self.pinned_epoch_s is not None else time.time()
        self._events.append({"data": data, "name": category + ":" + event, "time": t * 1000.0})


class TraceLogger(QuicLogger):
    """aioquic's qlog logger, whose traces are :class:`Trace`."""

    def start_trace(self, is_client: bool, odcid: bytes) -> QuicLoggerTrace:
        trace = Trace(is_client=is_client, odcid=odcid)
        self._traces.append(trace)
        return trace


class ScanConnection(QuicConnection):
    """aioquic's client connection with the scanner's choices (see the module docstring)."""

    split_clienthello = 1
    first_ack_time: float | None = None
    retry_received = False
    version_negotiation_received = False
    remote_parameters = None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        if not self._logger.isEnabledFor(logging.ERROR):
            # a scan silences aioquic's logger (its warnings are probe outcomes here); its ~20
            # debug calls a probe then cost more than nothing at all (TLS gets this one too)
            self._logger = _SILENT_LOG

    def _initialize(self, peer_cid: bytes) -> None:
        super()._initialize(peer_cid)
        self.tls._supported_groups = [Group.X25519]
        # The scanner measures ACKs, not authenticity: like the certificate chain (CERT_NONE),
        # the CertificateVerify signature is not checked (its key load and verify cost ~1.5 ms
        # of CPU per probe); the certificate itself is still parsed and recorded.
        self.tls._check_certificate_verify_signature = _accept_signature
        if self.split_clienthello > 1:
            # a ClientHello of about 250 bytes plus padding needs exactly N Initial packets
            target = (self.split_clienthello - 1) * CRYPTO_BYTES_PER_INITIAL + 300
            self.tls.handshake_extensions.append((TLS_PADDING_EXTENSION, bytes(target - 250)))

    def _replenish_connection_ids(self) -> None:
        # A probe never migrates: it issues no connection IDs beyond its first (RFC 9000 §5.1.1
        # lets an endpoint issue fewer than the peer's limit) and asks for none (see below).
        return None

    def _parse_transport_parameters(self, data: bytes, from_session_ticket: bool = False) -> None:
        super()._parse_transport_parameters(data, from_session_ticket)
        params = pull_quic_transport_parameters(Buffer(data=data))
        # RFC 9000 §18.2: the ACK Delay field is decoded with the exponent the ACK's sender
        # advertised; aioquic 1.7.2 never applies it (a self-assignment), so we do.
        if params.ack_delay_exponent is not None:
            self._remote_ack_delay_exponent = params.ack_delay_exponent
        if not from_session_ticket:
            self.remote_parameters = params

    def _handle_ack_frame(self, context: QuicReceiveContext, frame_type: int, buf: Buffer) -> None:
        if context.epoch == Epoch.INITIAL and self.first_ack_time is None:
            self.first_ack_time = context.time
        super()._handle_ack_frame(context, frame_type, buf)

    def _receive_retry_packet(self, header, packet_without_tag, now) -> None:
        self.retry_received = True
        super()._receive_retry_packet(header, packet_without_tag, now)

    def _receive_version_negotiation_packet(self, header, now) -> None:
        if self._state == QuicConnectionState.FIRSTFLIGHT:
            self.version_negotiation_received = True
        super()._receive_version_negotiation_packet(header, now)


def _accept_signature(verify) -> None:
    return None


class _SilentLog:
    """A logger adapter that drops everything (for a silenced aioquic logger)."""

    def _drop(self, *args, **kwargs) -> None:
        return None

    debug = info = warning = error = exception = _drop

    def isEnabledFor(self, level: int) -> bool:
        return False


_SILENT_LOG = _SilentLog()


def tag_connection(quic: QuicConnection, cid: bytes, odcid: bytes) -> None:
    """Give a fresh client connection our connection IDs (before ``connect``)."""
    quic._host_cids[0].cid = cid
    quic.host_cid = cid
    quic._local_initial_source_connection_id = cid
    quic._peer_cid.cid = odcid
    quic._original_destination_connection_id = odcid
    if quic._quic_logger is not None:
        quic._quic_logger._odcid = odcid
