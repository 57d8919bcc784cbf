"""Careful Resume's phases as a pure state machine beside a sender's congestion controller.

Theory of operation: draft-ietf-tsvwg-careful-resume-24 (published as RFC 9959) lets a sender
reuse a path's saved capacity (saved_cwnd) and minimum RTT (saved_rtt) from an earlier connection
instead of growing its window from the initial window (IW) by slow start.  A connection moves
through phases: Reconnaissance (normal congestion control while the path is confirmed) →
Unvalidated (the window jumps to jump_cwnd ≤ saved_cwnd/2, paced) → Validating (the jump's packets
are waited for) → Normal; congestion on unvalidated packets leads to Safe Retreat (the window
falls to PipeSize/2 and the saved parameters are forgotten) and from there to Normal.

:class:`CarefulResume` is an overlay, not a whole congestion controller: the base controller
(New Reno's slow start and congestion avoidance, in the lab's aioquic glue) keeps its window and
tells this object what happens — packets sent and acknowledged (packet number, size, flight size,
window after the base controller's own update), RTT samples, congestion — and applies the
:class:`Decision` it gets back: a window or ssthresh to set, whether the saved parameters must be
forgotten, and the phase changes to log (:class:`Transition`, the qlog event of
draft-ietf-tsvwg-careful-resume-qlog-02).  :attr:`CarefulResume.holds_window` says when the base
controller must not grow the window (Unvalidated: it is jump_cwnd; Safe Retreat: "The CWND MUST NOT
be increased").  Packet numbers must grow with sending order across the connection (aioquic uses
one counter for all packet number spaces).  Time is passed in (seconds, any clock); sizes are
bytes.

:class:`PathObserver` is the Observing side: the capacity a connection used, measured as the
largest volume of data acknowledged within one minimum RTT, and that minimum RTT — what a later
connection can resume from (:class:`SavedPath`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

RECONNAISSANCE, UNVALIDATED, VALIDATING, NORMAL, SAFE_RETREAT = (
    "reconnaissance", "unvalidated", "validating", "normal", "safe_retreat")
#: RFC 9002 §4.8 (cited by the draft's Safe Retreat rule): "The minimum CWND in QUIC is 2 packets"
MINIMUM_WINDOW_PACKETS = 2
#: "Beta: A scaling factor between 0.5 and 1, the default value is 0.5."
DEFAULT_BETA = 0.5


@dataclass(frozen=True)
class SavedPath:
    """A set of saved CC parameters: saved_cwnd (bytes) and saved_rtt (seconds)."""

    congestion_window: int
    rtt: float


@dataclass(frozen=True)
class Transition:
    """One phase change: the qlog event's ``old``, ``new``, ``trigger`` and the state after it."""

    time: float
    old: str | None
    new: str
    trigger: str | None
    pipesize: int
    first_unvalidated_packet: int
    last_unvalidated_packet: int
    congestion_window: int
    ssthresh: int | None
    restored: SavedPath | None = None

    def qlog_data(self) -> dict:
        """The event's data as draft-ietf-tsvwg-careful-resume-qlog-02 spells it (saved_rtt in ms)."""
        state = {"pipesize": self.pipesize, "first_unvalidated_packet": self.first_unvalidated_packet,
                 "last_unvalidated_packet": self.last_unvalidated_packet,
                 "congestion_window": self.congestion_window}
        if self.ssthresh is not None:
            state["ssthresh"] = self.ssthresh
        data: dict = {"new": self.new, "state_data": state}
        if self.old is not None:
            data["old"] = self.old
        if self.trigger is not None:
            data["trigger"] = self.trigger
        if self.restored is not None:
            data["restored_data"] = {"saved_congestion_window": self.restored.congestion_window,
                                     "saved_rtt": round(self.restored.rtt * 1000, 3)}
        return data


@dataclass
class Decision:
    """What the base controller must do after one call: set these (None: leave as is)."""

    congestion_window: int | None = None
    ssthresh: int | None = None
    #: Safe Retreat: "The set of saved CC parameters for the path are deleted"
    forget_saved: bool = False
    transitions: list[Transition] = field(default_factory=list)


class CarefulResume:
    """The phases of one connection's sender (module docstring)."""

    def __init__(self, saved: SavedPath | None, *, max_datagram_size: int, initial_window: int,
                 max_jump: int | None = None, beta: float = DEFAULT_BETA):
        self.saved = saved
        self.mss = max_datagram_size
        self.initial_window = initial_window
        self.max_jump = max_jump
        self.beta = beta
        self.phase: str | None = None  # None: not started; NORMAL: not (or no longer) resuming
        self.pipesize = 0
        self.first_unvalidated = 0
        self.last_unvalidated = 0
        self.min_rtt: float | None = None
        self.latest_rtt: float | None = None
        self.jump_window = 0
        self._unvalidated_since = 0.0
        self._initial_unacked: set[int] = set()  # Reconnaissance: the initial data not yet acknowledged
        self._initial_bytes = 0
        self._confirmed = False
        self._filled = False  # Reconnaissance: the sender has filled its window (it has more to send)
        self._last_sent = 0
        self._window = 0  # the window after the last call (for the transitions' state)
        self._ssthresh: int | None = None

    @property
    def holds_window(self) -> bool:
        """True while the base controller must not grow the window."""
        return self.phase in (UNVALIDATED, SAFE_RETREAT)

    @property
    def active(self) -> bool:
        return self.phase in (RECONNAISSANCE, UNVALIDATED, VALIDATING, SAFE_RETREAT)

    def _change(self, decision: Decision, now: float, new: str, trigger: str | None,
                restored: SavedPath | None = None) -> None:
        if decision.congestion_window is not None:
            self._window = decision.congestion_window
        if decision.ssthresh is not None:
            self._ssthresh = decision.ssthresh
        decision.transitions.append(Transition(now, self.phase, new, trigger, self.pipesize, self.first_unvalidated,
                                               self.last_unvalidated, self._window, self._ssthresh, restored))
        self.phase = new

    # --- events ---------------------------------------------------------------------------------

    def start(self, now: float, congestion_window: int) -> Decision:
        """The connection is set up.  "The sender enters the Reconnaissance Phase after connection
        setup (using normal CC)" — with saved parameters; without, it stays in normal CC and logs
        nothing."""
        decision = Decision()
        self._window = congestion_window
        if self.phase is not None:
            return decision
        if self.saved is None:
            self.phase = NORMAL
            return decision
        self._change(decision, now, RECONNAISSANCE, None, self.saved)
        return decision

    def on_rtt(self, now: float, latest_rtt: float) -> Decision:
        decision = Decision()
        self.latest_rtt = latest_rtt
        self.min_rtt = latest_rtt if self.min_rtt is None else min(self.min_rtt, latest_rtt)
        # Unvalidated Phase (Confirming the path during transmission): "If the sender determines that
        # it is not valid to use the previous CC parameters due to a detected path change (e.g., a
        # change in the RTT ...), the Safe Retreat Phase MUST be entered" — "A current RTT that is
        # more than ten times the saved_rrt is indicative of a path change."
        if self.phase == UNVALIDATED and latest_rtt > 10 * self.saved.rtt:
            self._retreat(decision, now, "path_changed")
        return decision

    def on_sent(self, now: float, packet_number: int, size: int, flight_size: int,
                congestion_window: int) -> Decision:
        """A packet counted in flight was sent (``flight_size`` includes it)."""
        decision = Decision()
        self._window = congestion_window
        if self.phase == RECONNAISSANCE:
            self._last_sent = packet_number
            # "the sender transmits any initial data" (the IW): the packets to be acknowledged
            if self._initial_bytes < self.initial_window and not self._confirmed:
                self._initial_unacked.add(packet_number)
                self._initial_bytes += size
            # "has more data to send than the CWND would allow" (qlog draft, congestion_window_limited)
            self._filled = self._filled or flight_size + self.mss > congestion_window
            if self._confirmed and self._filled:
                self._leave_reconnaissance(decision, now, packet_number, flight_size, congestion_window)
        elif self.phase == UNVALIDATED:
            self.last_unvalidated = packet_number
            # Unvalidated Phase (Completed sending all unvalidated packets): "The sender enters the
            # Validating Phase when the flight_size equals the CWND ... also true when the remaining
            # unused CWND is less than one maximum-sized packet."
            if flight_size + self.mss > congestion_window:
                self._end_unvalidated(decision, now, "last_unvalidated_packet_sent", flight_size)
            else:
                self._check_time(decision, now, flight_size)
        return decision

    def on_acked(self, now: float, packet_number: int, size: int, flight_size: int,
                 congestion_window: int) -> Decision:
        """A packet counted in flight was acknowledged (``flight_size`` no longer includes it;
        ``congestion_window`` after the base controller's update)."""
        decision = Decision()
        self._window = congestion_window
        if self.phase == RECONNAISSANCE:
            self._initial_unacked.discard(packet_number)
            # Reconnaissance Phase (Path confirmed): "When the sender has received an ACK that
            # acknowledges all the initial data (usually the IW) without reported congestion, it MAY
            # then enter the Unvalidated Phase. ... this transition MAY be deferred to the time at
            # which more data is sent than would have normally permitted by the CC algorithm."
            self._confirmed = self._confirmed or (self._initial_bytes > 0 and not self._initial_unacked)
            # "Although a sender can immediately transition to the Unvalidated Phase, this transition
            # MAY be deferred": at once when the sender filled its window; a sender that did not
            # (rate-limited) waits in Reconnaissance until it does (on_sent)
            if self._confirmed and self._filled:
                self._leave_reconnaissance(decision, now, self._last_sent, flight_size, congestion_window)
        elif self.phase == UNVALIDATED:
            # Unvalidated Phase (Tracking PipeSize): "increased by the volume of data that is newly
            # acknowledged by each received ACK"
            self.pipesize += size
            # Unvalidated Phase (Receiving acknowledgement for an unvalidated packet)
            if packet_number >= self.first_unvalidated:
                self._end_unvalidated(decision, now, "first_unvalidated_packet_acknowledged", flight_size)
            else:
                self._check_time(decision, now, flight_size)
        elif self.phase == VALIDATING:
            self.pipesize += size  # Validating Phase (Tracking PipeSize)
            # Validating Phase (Receiving acknowledgement of the unvalidated packets): "The sender stops
            # using Careful Resume when an ACK is received that acknowledges the last packet number
            # (or higher) that was sent in the Unvalidated Phase"
            if packet_number >= self.last_unvalidated:
                self._change(decision, now, NORMAL, "last_unvalidated_packet_acknowledged")
        elif self.phase == SAFE_RETREAT:
            self.pipesize += size  # Safe Retreat Phase (Tracking PipeSize)
            # Safe Retreat Phase (Acknowledgement of unvalidated packets): "When the last packet (or a
            # later packet) sent during the Unvalidated Phase has been acknowledged, the sender stops
            # using Careful Resume ... the ssthresh MUST be set to no larger than the most recently
            # measured PipeSize * Beta"
            if packet_number >= self.last_unvalidated:
                decision.ssthresh = max(int(self.pipesize * self.beta), MINIMUM_WINDOW_PACKETS * self.mss)
                self._change(decision, now, NORMAL, "exit_recovery")
        return decision

    def on_congestion(self, now: float, trigger: str = "packet_loss") -> Decision:
        """Congestion detected (``packet_loss`` or ``ECN_CE``) on packets sent while resuming."""
        decision = Decision()
        if self.phase == RECONNAISSANCE:
            # Reconnaissance Phase (Detected congestion): "The sender stops using Careful Resume and
            # MUST continue using normal CC to react to the detected congestion."
            self._change(decision, now, NORMAL, trigger)
        elif self.phase in (UNVALIDATED, VALIDATING):
            # Unvalidated / Validating Phase (Detected congestion): "the Safe Retreat Phase MUST be entered"
            self._retreat(decision, now, trigger)
        return decision

    def on_persistent_congestion(self, now: float) -> Decision:
        """"A sender that experiences persistent congestion ... ceases to use Careful Resume" — the
        qlog draft names no trigger for it (its ``packet_loss`` leads to Safe Retreat from Unvalidated
        and Validating), so the change is logged without one."""
        decision = Decision()
        if self.phase in (RECONNAISSANCE, UNVALIDATED, VALIDATING, SAFE_RETREAT):
            self._change(decision, now, NORMAL, None)
        return decision

    # --- transitions ------------------------------------------------------------------------------

    def _leave_reconnaissance(self, decision: Decision, now: float, packet_number: int, flight_size: int,
                              congestion_window: int) -> None:
        # Reconnaissance Phase (Minimum RTT too small): "If the minimum RTT recorded in the
        # Reconnaissance Phase is less than or equal to (saved_rtt / 2) ..., the sender MUST stop using
        # Careful Resume (e.g., logged as rtt_not_validated)" — and "A current RTT that is more than
        # ten times the saved_rrt is indicative of a path change" (checked on entry, Note 1).
        if self.min_rtt is None or self.min_rtt <= self.saved.rtt / 2 or self.min_rtt > 10 * self.saved.rtt:
            self._change(decision, now, NORMAL, "rtt_not_validated")
            return
        # Unvalidated Phase (Setting the jump_cwnd): "jump_cwnd is less than or equal to
        # Min(max_jump,(saved_cwnd/2)). CWND = jump_cwnd."
        jump = self.saved.congestion_window // 2
        if self.max_jump is not None:
            jump = min(jump, self.max_jump)
        if jump <= congestion_window:
            self._change(decision, now, NORMAL, None)  # nothing to gain: normal CC already sends as much
            return
        # Unvalidated Phase (Initialising PipeSize): "initialised to the flight_size on entry"
        self.pipesize = flight_size
        self.first_unvalidated = self.last_unvalidated = packet_number + 1
        self.jump_window = jump
        self._unvalidated_since = now
        decision.congestion_window = jump
        self._change(decision, now, UNVALIDATED, "congestion_window_limited", self.saved)

    def _check_time(self, decision: Decision, now: float, flight_size: int) -> None:
        # Unvalidated Phase (Limiting time in the Unvalidated Phase): "The sender enters the
        # Validating Phase if more than one RTT has elapsed while in the Unvalidated Phase"
        if self.latest_rtt is not None and now - self._unvalidated_since > self.latest_rtt:
            self._end_unvalidated(decision, now, "rtt_exceeded", flight_size)

    def _end_unvalidated(self, decision: Decision, now: float, trigger: str, flight_size: int) -> None:
        # Unvalidated Phase (Check flight_size): "if (flight_size is less than IW) or (flight_size is
        # less than or equal to the PipeSize) then the CWND is reset to the PipeSize (e.g., logged as
        # rate_limited) and the sender stops using Careful Resume ... In the absence of detected
        # congestion, CWND is not reduced below IW. ... Otherwise, the CWND MUST be set to the
        # flight_size and the sender progresses to the Validating Phase."
        if flight_size < self.initial_window or flight_size <= self.pipesize:
            decision.congestion_window = max(self.pipesize, self.initial_window)
            self._change(decision, now, NORMAL, "rate_limited")
        else:
            decision.congestion_window = flight_size
            self._change(decision, now, VALIDATING, trigger)

    def _retreat(self, decision: Decision, now: float, trigger: str) -> None:
        # Safe Retreat Phase (Removing saved information) and (Re-initializing CWND): "The CWND MUST
        # be reduced to no more than (PipeSize/2)" (and not below QUIC's minimum window)
        decision.forget_saved = True
        decision.congestion_window = max(self.pipesize // 2, MINIMUM_WINDOW_PACKETS * self.mss)
        self._change(decision, now, SAFE_RETREAT, trigger)


class PathObserver:
    """Observing: "The currently utilised capacity for the connection is measured as the volume of
    bytes sent during an RTT ... This could be computed by measuring the volume of data
    acknowledged in one RTT" and "The minimum RTT at the time of observation is saved"."""

    def __init__(self, *, initial_window: int):
        self.initial_window = initial_window
        self.min_rtt: float | None = None
        self.capacity = 0
        self._round_start: float | None = None
        self._round_bytes = 0

    def on_rtt(self, latest_rtt: float) -> None:
        self.min_rtt = latest_rtt if self.min_rtt is None else min(self.min_rtt, latest_rtt)

    def on_acked(self, now: float, size: int) -> None:
        if self.min_rtt is None:
            return
        if self._round_start is None or now - self._round_start >= self.min_rtt:
            self._round_start, self._round_bytes = now, 0
        self._round_bytes += size
        self.capacity = max(self.capacity, self._round_bytes)

    def saved(self) -> SavedPath | None:
        """The parameters to save, or None: "If the measured CWND is less than four times the IW,
        the sender can choose to not save the CC parameters"."""
        if self.min_rtt is None or self.capacity < 4 * self.initial_window:
            return None
        return SavedPath(self.capacity, self.min_rtt)
