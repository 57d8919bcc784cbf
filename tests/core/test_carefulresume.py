"""Careful Resume's state machine (quicack/core/carefulresume.py) on synthetic sends, ACKs and
losses, against the rules of draft-ietf-tsvwg-careful-resume-24 quoted beside each test; every
sequence's logged changes are also walked by :func:`quicack.core.resumelog.rule_breaks`."""

from __future__ import annotations

from quicack.core import carefulresume as cr
from quicack.core.resumelog import rule_breaks

MSS = 1200
IW = 10 * MSS
SAVED = cr.SavedPath(congestion_window=1_200_000, rtt=0.050)


class Sender:
    """A minimal slow-start sender around the overlay: one packet number counter, a window that
    grows by each acknowledged packet unless the overlay holds it, always data to send."""

    def __init__(self, saved=SAVED, **kw):
        self.cr = cr.CarefulResume(saved, max_datagram_size=MSS, initial_window=IW, **kw)
        self.cwnd, self.ssthresh, self.flight, self.pn, self.now = IW, None, 0, 0, 0.0
        self.sent: dict[int, int] = {}
        self.changes: list[cr.Transition] = []
        self.forgot = False
        self.apply(self.cr.start(self.now, self.cwnd))

    def apply(self, d: cr.Decision) -> None:
        if d.congestion_window is not None:
            self.cwnd = d.congestion_window
        if d.ssthresh is not None:
            self.ssthresh = d.ssthresh
        self.forgot |= d.forget_saved
        self.changes += d.transitions

    def send(self, n: int | None = None) -> list[int]:
        """``n`` packets, or as many as the window allows."""
        out = []
        while (n is None and self.flight + MSS <= self.cwnd) or (n is not None and len(out) < n):
            self.pn += 1
            self.flight += MSS
            self.sent[self.pn] = MSS
            out.append(self.pn)
            self.apply(self.cr.on_sent(self.now, self.pn, MSS, self.flight, self.cwnd))
        return out

    def ack(self, pns, rtt: float = 0.050) -> None:
        self.apply(self.cr.on_rtt(self.now, rtt))
        for pn in pns:
            self.flight -= self.sent.pop(pn)
            if not self.cr.holds_window:
                self.cwnd += MSS
            self.apply(self.cr.on_acked(self.now, pn, MSS, self.flight, self.cwnd))

    def lose(self, pns) -> None:
        for pn in pns:
            self.flight -= self.sent.pop(pn)
        self.apply(self.cr.on_congestion(self.now, "packet_loss"))

    def path(self) -> list[tuple]:
        return [(t.old, t.new, t.trigger) for t in self.changes]


def _to_unvalidated(s: Sender) -> list[int]:
    first = s.send()                  # the initial window, filled: the sender has more to send
    s.now += 0.050
    s.ack(first)                      # all initial data acknowledged: path confirmed, the jump
    return s.send()                   # the jump's window, sent


def test_without_saved_parameters_nothing_changes():
    s = Sender(saved=None)
    _to_unvalidated(s)
    assert s.changes == [] and s.cr.phase == cr.NORMAL and s.cwnd == 2 * IW


def test_a_sender_that_does_not_fill_its_window_stays_in_reconnaissance():
    # "A sender that is rate-limited ... is allowed to remain in the Reconnaissance Phase and to not
    # transition to the Unvalidated Phase until there is more data in the transmission buffer than
    # would normally be permitted by the CC algorithm"
    s = Sender()
    first = s.send(n=4)
    s.now += 0.05
    s.ack(first)
    assert s.cr.phase == cr.RECONNAISSANCE
    s.send(n=24)                                   # now it fills the window: IW + 4 packets
    assert s.path()[-1] == ("reconnaissance", "unvalidated", "congestion_window_limited")
    # packets 5 to 18 filled it; the next one is the first sent beyond what slow start allowed
    assert s.changes[-1].first_unvalidated_packet == 19 and s.cr.last_unvalidated == s.pn == 28


def _jump(s: Sender, rtt: float = 0.050) -> None:
    """Through reconnaissance into the Unvalidated Phase (nothing sent there yet)."""
    first = s.send()
    s.now += rtt
    s.ack(first, rtt=rtt)


def test_jump_validate_normal():
    s = Sender()
    assert s.path() == [(None, "reconnaissance", None)] and s.changes[0].restored == SAVED
    sent = _to_unvalidated(s)
    # "jump_cwnd is less than or equal to Min(max_jump,(saved_cwnd/2)). CWND = jump_cwnd."
    jump = s.changes[1]
    assert (jump.old, jump.new, jump.trigger) == ("reconnaissance", "unvalidated", "congestion_window_limited")
    assert jump.congestion_window == 600_000 and jump.restored == SAVED
    # at once when the ACK acknowledged all the initial data: "The variable PipeSize is
    # initialised to the flight_size on entry" — nothing in flight then
    assert jump.pipesize == 0 and jump.time == 0.050 and jump.first_unvalidated_packet == 11
    # the window was filled up to jump_cwnd: "the flight_size equals the CWND" → Validating,
    # "the CWND MUST be set to the flight_size"
    val = s.changes[2]
    assert (val.new, val.trigger) == ("validating", "last_unvalidated_packet_sent")
    assert val.congestion_window == s.flight == 600_000 - 600_000 % MSS
    assert val.first_unvalidated_packet == sent[0] == 11 and val.last_unvalidated_packet == s.pn == sent[-1]
    s.now += 0.050
    s.ack(sorted(s.sent))
    assert s.path()[-1] == ("validating", "normal", "last_unvalidated_packet_acknowledged")
    assert s.cr.pipesize == val.congestion_window
    assert rule_breaks(s.path()) == []


def test_first_unvalidated_packet_acknowledged_ends_the_unvalidated_phase():
    s = Sender(max_jump=10_000_000)
    _jump(s)
    assert s.cr.phase == cr.UNVALIDATED
    unvalidated = s.send(n=25)
    s.now += 0.01
    s.ack([unvalidated[0]])                        # an ACK for the first unvalidated packet
    assert s.path()[-1] == ("unvalidated", "validating", "first_unvalidated_packet_acknowledged")
    assert s.cwnd == s.flight                      # "the CWND MUST be set to the flight_size"
    assert rule_breaks(s.path()) == []


def test_rtt_too_small_means_normal_cc():
    # "If the minimum RTT recorded in the Reconnaissance Phase is less than or equal to
    # (saved_rtt / 2) ..., the sender MUST stop using Careful Resume (rtt_not_validated)"
    s = Sender()
    first = s.send()
    s.now += 0.025
    s.ack(first, rtt=0.025)
    s.send()
    assert s.path()[-1] == ("reconnaissance", "normal", "rtt_not_validated") and s.cwnd == 2 * IW
    s2 = Sender()
    _jump(s2, rtt=0.026)
    assert s2.cr.phase == cr.UNVALIDATED           # just above half: resumed


def test_loss_in_reconnaissance_stops_careful_resume():
    s = Sender()
    first = s.send()
    s.lose(first[:1])
    assert s.path()[-1] == ("reconnaissance", "normal", "packet_loss") and not s.forgot


def test_loss_in_unvalidated_retreats_then_exits_recovery():
    s = Sender(max_jump=10_000_000)
    _to_unvalidated(s)
    assert s.cr.phase == cr.VALIDATING
    s.now += 0.05
    acked = sorted(s.sent)[:100]
    s.ack(acked)
    pipesize = s.cr.pipesize
    s.lose(sorted(s.sent)[:3])
    # "The CWND MUST be reduced to no more than (PipeSize/2)"; "The set of saved CC parameters for
    # the path are deleted"
    assert s.path()[-1] == ("validating", "safe_retreat", "packet_loss")
    assert s.cwnd == pipesize // 2 and s.forgot
    window = s.cwnd
    s.ack(sorted(s.sent)[:-1])
    assert s.cwnd == window                       # "The CWND MUST NOT be increased in the Safe Retreat Phase"
    s.ack(sorted(s.sent))                          # the last unvalidated packet
    assert s.path()[-1] == ("safe_retreat", "normal", "exit_recovery")
    # "the ssthresh MUST be set to no larger than the most recently measured PipeSize * Beta"
    assert s.ssthresh == s.cr.pipesize // 2
    assert rule_breaks(s.path()) == []


def test_rate_limited_sender_returns_to_normal():
    s = Sender()
    _jump(s)
    s.send(n=3)                                    # then the application has little to send
    s.now += 0.05
    s.ack(sorted(s.sent)[:1])                      # the first unvalidated packet acknowledged
    # "if (flight_size is less than IW) or (flight_size is less than or equal to the PipeSize)
    # then the CWND is reset to the PipeSize (rate_limited)"
    assert s.path()[-1] == ("unvalidated", "normal", "rate_limited")
    assert s.cwnd == max(s.cr.pipesize, IW)
    assert rule_breaks(s.path()) == []


def test_more_than_one_rtt_unvalidated_is_rtt_exceeded():
    s = Sender()
    _jump(s)
    s.send(n=40)
    s.now += 0.051                                  # a later send, more than one RTT after the jump
    s.send(n=1)
    assert s.path()[-1] == ("unvalidated", "validating", "rtt_exceeded")


def test_rtt_ten_times_the_saved_one_is_a_path_change():
    s = Sender()
    _jump(s)
    s.ack([], rtt=0.6)
    assert s.path()[-1] == ("unvalidated", "safe_retreat", "path_changed") and s.forgot


def test_jump_not_above_the_window_is_no_resume():
    s = Sender(saved=cr.SavedPath(congestion_window=40_000, rtt=0.05))
    _to_unvalidated(s)
    assert s.path()[-1] == ("reconnaissance", "normal", None) and s.cwnd == 2 * IW


def test_qlog_data_is_the_drafts_shape():
    t = cr.Transition(1.0, "reconnaissance", "unvalidated", "congestion_window_limited", 24000, 21, 21,
                      600000, None, SAVED)
    assert t.qlog_data() == {
        "old": "reconnaissance", "new": "unvalidated", "trigger": "congestion_window_limited",
        "state_data": {"pipesize": 24000, "first_unvalidated_packet": 21, "last_unvalidated_packet": 21,
                       "congestion_window": 600000},
        "restored_data": {"saved_congestion_window": 1_200_000, "saved_rtt": 50.0}}


def test_observer_saves_the_volume_acknowledged_in_one_rtt():
    obs = cr.PathObserver(initial_window=IW)
    obs.on_rtt(0.125)
    # one packet acknowledged every 1/512 s (64 per RTT) for a second, then 20 at the same instant
    for i in range(512):
        obs.on_acked(i / 512, MSS)
    assert obs.saved() == cr.SavedPath(64 * MSS, 0.125)
    for _ in range(20):
        obs.on_acked(1.0, MSS)
    assert obs.saved() == cr.SavedPath(64 * MSS, 0.125)   # a round started at 1.0 holds only 20
    few = cr.PathObserver(initial_window=IW)
    few.on_rtt(0.125)
    for i in range(39):
        few.on_acked(i / 512, MSS)
    assert few.saved() is None                     # "less than four times the IW": not saved


def test_rule_breaks_names_what_the_drafts_do_not_allow():
    assert rule_breaks([(None, "reconnaissance", None), ("reconnaissance", "validating", "rtt_exceeded"),
                        ("unvalidated", "normal", "exit_recovery")]) == [
        "change 2 (reconnaissance → validating, rtt_exceeded): not a transition of the draft",
        "change 3 (unvalidated → normal, exit_recovery): the phase was validating",
        "change 3 (unvalidated → normal, exit_recovery): trigger exit_recovery does not lead from unvalidated to normal"]


def test_persistent_congestion_ends_careful_resume_without_a_trigger():
    s = Sender()
    _jump(s)
    s.apply(s.cr.on_persistent_congestion(s.now))
    assert s.path()[-1] == ("unvalidated", "normal", None) and rule_breaks(s.path()) == []
