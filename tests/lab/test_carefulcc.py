"""Careful Resume in aioquic (quicack/lab/carefulcc.py): the server's saved paths, and the
congestion controller driven by aioquic's own sent-packet records (no network)."""

from __future__ import annotations

import json

import pytest
from aioquic.quic.congestion.base import create_congestion_control
from aioquic.quic.packet import QuicPacketType
from aioquic.quic.packet_builder import QuicSentPacket
from aioquic.tls import Epoch

from quicack.core import carefulresume as cr
from quicack.lab import carefulcc, serve
from quicack.model import QuicackError

MSS = 1200


class Logger:
    def __init__(self):
        self.events = []

    def log_event(self, *, category, event, data):
        self.events.append((f"{category}:{event}", data))


def packet(pn: int, t: float) -> QuicSentPacket:
    return QuicSentPacket(epoch=Epoch.ONE_RTT, in_flight=True, is_ack_eliciting=True, is_crypto_packet=False,
                          packet_number=pn, packet_type=QuicPacketType.ONE_RTT, sent_time=t, sent_bytes=MSS)


def test_saved_paths_one_connection_at_a_time_lifetime_and_file(tmp_path, monkeypatch):
    path = tmp_path / "saved.json"
    paths = carefulcc.SavedPaths(path)
    assert paths.take("127.0.0.1") is None
    paths.give_back("127.0.0.1", cr.SavedPath(750_000, 0.6))
    assert json.loads(path.read_text())["127.0.0.1"][:2] == [750_000, 0.6]
    assert paths.take("127.0.0.1") == cr.SavedPath(750_000, 0.6)
    # "the saved_cwnd can only be used by one connection at a time"
    assert paths.take("127.0.0.1") is None
    paths.give_back("127.0.0.1", None)                       # nothing observed: the set stays
    assert carefulcc.SavedPaths(path).take("127.0.0.1") == cr.SavedPath(750_000, 0.6)   # from the file
    paths.forget("127.0.0.1")
    assert paths.take("127.0.0.1") is None and json.loads(path.read_text()) == {}
    paths.give_back("10.0.0.1", cr.SavedPath(100_000, 0.05))
    later = carefulcc.time.time() + carefulcc.LIFETIME_S + 1
    monkeypatch.setattr(carefulcc.time, "time", lambda: later)
    assert paths.take("10.0.0.1") is None                     # Lifetime exceeded: deleted


def test_controller_resumes_holds_the_window_and_retreats():
    cc = create_congestion_control(carefulcc.NAME, max_datagram_size=MSS)
    assert isinstance(cc, carefulcc.CarefulResumeCongestionControl)
    logger, paths = Logger(), carefulcc.SavedPaths()
    paths.give_back("127.0.0.1", cr.SavedPath(1_200_000, 0.1))
    cc.quic_logger = logger
    cc.begin(0.0, paths, "127.0.0.1")
    iw = [packet(pn, 0.0) for pn in range(1, 11)]
    for p in iw:
        cc.on_packet_sent(packet=p)
    cc.on_rtt_measurement(now=0.1, rtt=0.1)
    for p in iw:
        cc.on_packet_acked(now=0.1, packet=p)
    # the initial window acknowledged, the sender had filled it: the jump to saved_cwnd / 2
    assert cc.machine.phase == cr.UNVALIDATED and cc.congestion_window == 600_000
    sent = [packet(pn, 0.1) for pn in range(11, 61)]
    for p in sent:
        cc.on_packet_sent(packet=p)
    cc.on_packet_acked(now=0.15, packet=sent[0])
    assert cc.machine.phase == cr.VALIDATING and cc.congestion_window == 49 * MSS
    cc.on_packets_lost(now=0.2, packets=sent[1:4])
    # "The CWND MUST be reduced to no more than (PipeSize/2)"; the saved set deleted
    assert cc.machine.phase == cr.SAFE_RETREAT and cc.congestion_window == max(cc.machine.pipesize // 2, 2 * MSS)
    assert cc.forgotten and paths.take("127.0.0.1") is None
    window = cc.congestion_window
    for p in sent[4:-1]:
        cc.on_packet_acked(now=0.25, packet=p)
    assert cc.congestion_window == window and cc.bytes_in_flight == MSS
    cc.on_packet_acked(now=0.25, packet=sent[-1])
    assert cc.machine.phase == cr.NORMAL and cc.bytes_in_flight == 0
    assert [(n, d["new"], d.get("trigger")) for n, d in logger.events] == [
        ("recovery:careful_resume_phase_updated", "reconnaissance", None),
        ("recovery:careful_resume_phase_updated", "unvalidated", "congestion_window_limited"),
        ("recovery:careful_resume_phase_updated", "validating", "first_unvalidated_packet_acknowledged"),
        ("recovery:careful_resume_phase_updated", "safe_retreat", "packet_loss"),
        ("recovery:careful_resume_phase_updated", "normal", "exit_recovery")]
    cc.end()                                                    # a retreat's connection saves nothing
    assert paths.take("127.0.0.1") is None


def test_serve_refuses_an_unknown_congestion_controller():
    with pytest.raises(QuicackError) as e:
        serve.check_spec(serve.ListenerSpec("127.0.0.1", 4433, congestion="bbr"))
    assert e.value.message == "congestion is one of reno, cubic, careful-resume"
