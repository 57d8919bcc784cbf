"""Careful Resume in aioquic: a congestion controller named ``careful-resume`` and the server's
saved paths.

Theory of operation: aioquic 1.x creates a connection's congestion controller by name
(``QuicConfiguration.congestion_control_algorithm``, :func:`register_congestion_control`).
:class:`CarefulResumeCongestionControl` is aioquic's New Reno (its slow start is the baseline)
with the pure phase machine of :mod:`quicack.core.carefulresume` beside it: every packet sent,
acknowledged or lost is also told to the machine, whose decisions set the window; the window
does not grow while the machine holds it (Unvalidated, Safe Retreat), and a loss while resuming
is the machine's to answer (PipeSize/2) rather than Reno's halving.

A controller knows nothing of its connection, so the server's protocol tells it (:func:`attach`
when the connection exists, :func:`on_event` with its events): at ``HandshakeCompleted`` —
"The sender enters the Reconnaissance Phase after connection setup" — it takes the saved
parameters for the client's address from :class:`SavedPaths` (the draft lets the server keep
them: "the sender process could use a hash table to manage the CC parameters"), and at
``ConnectionTerminated`` it gives back what :class:`~quicack.core.carefulresume.PathObserver`
measured.  The Remote Endpoint is the client's IP address (through the testbed relay every
connection of a client has its own port).  Each phase change is written to the connection's
qlog as ``recovery:careful_resume_phase_updated`` (draft-ietf-tsvwg-careful-resume-qlog-02).

Pacing: aioquic paces every connection at window ÷ smoothed RTT (its ``QuicPacketPacer``, updated
on each RTT sample).  "All packets sent in the Unvalidated Phase MUST use pacing based on the
current RTT": whenever the machine sets the window, the pacer's rate is set again at once from
the new window and the current RTT — jump_cwnd over one RTT, the draft's
``ITT = (current RTT x MPS)/jump_cwnd`` — rather than at the next RTT sample.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from aioquic.quic import events as quic_events
from aioquic.quic.congestion.base import K_INITIAL_WINDOW, register_congestion_control
from aioquic.quic.congestion.reno import RenoCongestionControl
from aioquic.quic.packet_builder import QuicSentPacket

from quicack.core import carefulresume as cr
from quicack.lab.modes import CONGESTION_CONTROLLERS

NAME = "careful-resume"
#: congestion controllers ``quicack serve --congestion`` offers: aioquic's and this one
CHOICES = CONGESTION_CONTROLLERS
#: Lifetime: "When the path characteristics are known to be dynamic ... a small Lifetime is
#: desirable (e.g., measured in minutes)"
LIFETIME_S = 600.0


class SavedPaths:
    """Saved CC parameters per Remote Endpoint, in memory and, given a file, kept in it (JSON).
    "A sender MUST NOT retain more than one set of CC parameters for a Remote Endpoint";
    "the saved_cwnd can only be used by one connection at a time" (:meth:`take` hands a set out
    until :meth:`give_back`)."""

    def __init__(self, path: str | Path | None = None, lifetime_s: float = LIFETIME_S):
        self.path = Path(path) if path else None
        self.lifetime_s = lifetime_s
        self._saved: dict[str, tuple[int, float, float]] = {}  # endpoint → (cwnd, rtt s, saved at)
        self._in_use: set[str] = set()
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            self._saved = {k: tuple(v) for k, v in json.loads(self.path.read_text()).items()}

    def take(self, endpoint: str) -> cr.SavedPath | None:
        with self._lock:
            entry = self._saved.get(endpoint)
            if entry is None or endpoint in self._in_use:
                return None
            if time.time() - entry[2] > self.lifetime_s:  # Reconnaissance Phase (Lifetime ...)
                self._forget(endpoint)
                return None
            self._in_use.add(endpoint)
            return cr.SavedPath(entry[0], entry[1])

    def give_back(self, endpoint: str, observed: cr.SavedPath | None) -> None:
        """The connection ended: its observation replaces the set ("SHOULD be updated (or
        replaced) after a later observation")."""
        with self._lock:
            self._in_use.discard(endpoint)
            if observed is not None:
                self._saved[endpoint] = (observed.congestion_window, observed.rtt, time.time())
                self._write()

    def forget(self, endpoint: str) -> None:
        with self._lock:
            self._forget(endpoint)

    def _forget(self, endpoint: str) -> None:
        if self._saved.pop(endpoint, None) is not None:
            self._write()

    def _write(self) -> None:
        if self.path is not None:
            self.path.write_text(json.dumps(self._saved))


class CarefulResumeCongestionControl(RenoCongestionControl):
    """aioquic's New Reno with Careful Resume beside it (module docstring)."""

    def __init__(self, *, max_datagram_size: int) -> None:
        super().__init__(max_datagram_size=max_datagram_size)
        self.initial_window = K_INITIAL_WINDOW * max_datagram_size
        self.observer = cr.PathObserver(initial_window=self.initial_window)
        self.machine: cr.CarefulResume | None = None
        self.paths: SavedPaths | None = None
        self.endpoint: str | None = None
        self.recovery = None
        self.quic_logger = None
        self.forgotten = False
        self._now = 0.0

    # --- the connection's side -------------------------------------------------------------

    def begin(self, now: float, paths: SavedPaths, endpoint: str) -> None:
        self.paths, self.endpoint = paths, endpoint
        self.machine = cr.CarefulResume(paths.take(endpoint), max_datagram_size=self._max_datagram_size,
                                        initial_window=self.initial_window)
        self._apply(self.machine.start(now, self.congestion_window))

    def end(self) -> None:
        if self.paths is not None and self.endpoint is not None:
            self.paths.give_back(self.endpoint, None if self.forgotten else self.observer.saved())
            self.paths = None

    def _apply(self, decision: cr.Decision) -> None:
        if decision.congestion_window is not None:
            self.congestion_window = decision.congestion_window
            if self.recovery is not None and self.recovery._rtt_initialized:
                rtt = self.recovery._rtt_latest or self.recovery._rtt_smoothed
                self.recovery._pacer.update_rate(congestion_window=self.congestion_window, smoothed_rtt=rtt)
        if decision.ssthresh is not None:
            self.ssthresh = decision.ssthresh
        if decision.forget_saved and self.paths is not None:
            self.paths.forget(self.endpoint)
            self.forgotten = True
        if self.quic_logger is not None:
            for change in decision.transitions:
                self.quic_logger.log_event(category="recovery", event="careful_resume_phase_updated",
                                           data=change.qlog_data())

    # --- aioquic's congestion control interface --------------------------------------------

    def on_packet_sent(self, *, packet: QuicSentPacket) -> None:
        super().on_packet_sent(packet=packet)
        if self.machine is not None:
            self._apply(self.machine.on_sent(packet.sent_time, packet.packet_number, packet.sent_bytes,
                                             self.bytes_in_flight, self.congestion_window))

    def on_packet_acked(self, *, now: float, packet: QuicSentPacket) -> None:
        self._now = now
        if self.machine is not None and self.machine.holds_window:
            self.bytes_in_flight -= packet.sent_bytes
        else:
            super().on_packet_acked(now=now, packet=packet)
        self.observer.on_acked(now, packet.sent_bytes)
        if self.machine is not None:
            self._apply(self.machine.on_acked(now, packet.packet_number, packet.sent_bytes,
                                              self.bytes_in_flight, self.congestion_window))

    def on_packets_lost(self, *, now: float, packets: Iterable[QuicSentPacket]) -> None:
        self._now = now
        packets = list(packets)
        phase = self.machine.phase if self.machine is not None else None
        if phase in (cr.UNVALIDATED, cr.VALIDATING, cr.SAFE_RETREAT):
            for packet in packets:
                self.bytes_in_flight -= packet.sent_bytes
            if phase != cr.SAFE_RETREAT:
                # "Loss recovery commences using the newly reduced CWND that was set on entry"
                self._congestion_recovery_start_time = now
                self._apply(self.machine.on_congestion(now, "packet_loss"))
                self.ssthresh = self.congestion_window
            return
        super().on_packets_lost(now=now, packets=packets)
        if phase == cr.RECONNAISSANCE:
            self._apply(self.machine.on_congestion(now, "packet_loss"))

    def on_persistent_congestion(self) -> None:
        super().on_persistent_congestion()
        if self.machine is not None:
            self._apply(self.machine.on_persistent_congestion(self._now))

    def on_rtt_measurement(self, *, now: float, rtt: float) -> None:
        self._now = now
        if self.machine is None or not self.machine.holds_window:
            super().on_rtt_measurement(now=now, rtt=rtt)  # (Reno's exit from slow start on RTT growth)
        self.observer.on_rtt(rtt)
        if self.machine is not None:
            self._apply(self.machine.on_rtt(now, rtt))

    def get_log_data(self) -> dict:
        data = super().get_log_data()
        if self.machine is not None and self.machine.active:
            data["careful_resume_phase"] = self.machine.phase
        return data


register_congestion_control(NAME, CarefulResumeCongestionControl)


def attach(connection, paths: SavedPaths) -> None:
    """Give a new connection's controller (if it is Careful Resume's) its qlog, its recovery and
    the server's saved paths."""
    cc = getattr(getattr(connection, "_loss", None), "_cc", None)
    if isinstance(cc, CarefulResumeCongestionControl):
        cc.recovery = connection._loss
        cc.quic_logger = connection._quic_logger
        cc.paths = paths


def on_event(connection, event, now: float) -> None:
    """Start the phases when the handshake completes, save the path when the connection ends
    (``now``: the connection's clock, the event loop's time)."""
    cc = getattr(getattr(connection, "_loss", None), "_cc", None)
    if not isinstance(cc, CarefulResumeCongestionControl):
        return
    if isinstance(event, quic_events.HandshakeCompleted) and cc.machine is None and cc.paths is not None:
        endpoint = connection._network_paths[0].addr[0] if connection._network_paths else "?"
        cc.begin(now, cc.paths, endpoint)
    elif isinstance(event, quic_events.ConnectionTerminated):
        cc.end()
