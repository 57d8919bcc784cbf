"""The Careful Resume qlog event in the draft's spelling, whatever its producer wrote.

Theory of operation: draft-ietf-tsvwg-careful-resume-qlog-02 defines one event,
``recovery:careful_resume_phase_updated``, "When the CC algorithm changes the Careful Resume
Phase": ``old`` and ``new`` (phases reconnaissance, unvalidated, validating, normal,
safe_retreat), ``trigger`` (eleven names), ``state_data{pipesize, first_unvalidated_packet,
last_unvalidated_packet, congestion_window?, ssthresh?}`` — "intended to reflect the state after
the phase transition" — and ``restored_data{saved_congestion_window, saved_rtt}``.  Research
implementations wrote the same facts under other names: the ``quic:`` category (qlog 0.4 and
main-schema producers), ``old_phase``/``new_phase``, ``cwnd``, ``cr_mark`` (the packet number
a phase waits for), ``previous_cwnd``/``previous_rtt``, triggers ``cwnd_limited``,
``cr_mark_acknowledged``, ``ecn_ce``, and an older event name ``cr_phase``.

:func:`is_phase_event` tells an event name of this kind; :func:`phase_row` turns one event's data
(a dict) into the values of a ``careful_resume_phases`` row with the draft's names.  Pure: no
I/O, no store.  Sizes are bytes; ``saved_rtt`` is milliseconds as qlog logs durations.
"""

from __future__ import annotations

import re
from typing import Any

#: The event as draft-ietf-tsvwg-careful-resume-qlog-02 names it, and older names of it.
EVENT_NAMES = ("careful_resume_phase_updated", "cr_phase", "careful_resume_phase", "cr_phase_updated")
#: Categories the event was logged under (main-schema producers log ``quic:`` names).
CATEGORIES = ("recovery", "quic", "transport", "")

PHASES = ("reconnaissance", "unvalidated", "validating", "normal", "safe_retreat")
TRIGGERS = ("congestion_window_limited", "rtt_not_validated", "last_unvalidated_packet_sent",
            "first_unvalidated_packet_acknowledged", "rtt_exceeded", "rate_limited",
            "last_unvalidated_packet_acknowledged", "path_changed", "packet_loss", "ECN_CE",
            "exit_recovery")

#: Phase spellings seen in implementations, by their letters alone (``SafeRetreat``, ``safe
#: retreat``, ``safe_retreat`` → ``saferetreat``), and the abbreviations of the qlog draft's table.
_PHASE_ALIASES = {"recon": "reconnaissance", "unval": "unvalidated", "validate": "validating",
                  "val": "validating", "retreat": "safe_retreat", "sr": "safe_retreat",
                  "norm": "normal", **{p.replace("_", ""): p for p in PHASES}}
#: Trigger spellings whose meaning does not depend on the phase left.
_TRIGGER_ALIASES = {"cwnd_limited": "congestion_window_limited", "ecn_ce": "ECN_CE", "ecn": "ECN_CE",
                    "loss": "packet_loss", "rtt_too_divergent": "rtt_not_validated"}
#: ``cr_mark_acknowledged``: the packet a phase waited for was acknowledged; which one depends on
#: the phase left (draft-ietf-tsvwg-careful-resume-24 §4.3–§4.5).
_MARK_BY_PHASE = {"unvalidated": "first_unvalidated_packet_acknowledged",
                  "validating": "last_unvalidated_packet_acknowledged",
                  "safe_retreat": "exit_recovery"}

#: The columns :func:`phase_row` fills, in ``careful_resume_phases`` order (after the keys).
COLUMNS = ("old_phase", "new_phase", "trigger", "logged_trigger", "pipesize_bytes",
           "first_unvalidated_packet", "last_unvalidated_packet", "congestion_window_bytes",
           "ssthresh_bytes", "saved_congestion_window_bytes", "saved_rtt_ms")


def is_phase_event(name: str) -> bool:
    """True for ``recovery:careful_resume_phase_updated`` and its other spellings."""
    category, _, event = name.rpartition(":")
    return event.lower() in EVENT_NAMES and category.lower() in CATEGORIES


def _snake(text: str) -> str:
    text = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", text.strip())
    return re.sub(r"[\s\-]+", "_", text).lower()


def phase_name(value: Any) -> str | None:
    """A phase in the draft's spelling; an unknown one lower-cased and snake-cased as logged."""
    if value is None or value == "":
        return None
    name = _snake(str(value))
    return _PHASE_ALIASES.get(name.replace("_", ""), name)


def trigger_name(value: Any, old_phase: str | None) -> str | None:
    """A trigger in the draft's spelling (``ECN_CE`` keeps its capitals)."""
    if value is None or value == "":
        return None
    name = _snake(str(value))
    if name == "cr_mark_acknowledged":
        return _MARK_BY_PHASE.get(old_phase or "", name)
    name = _TRIGGER_ALIASES.get(name, name)
    return "ECN_CE" if name == "ecn_ce" else name


def _first(data: dict, *keys: str) -> Any:
    for key in keys:
        if isinstance(data, dict) and data.get(key) is not None:
            return data[key]
    return None


def _number(value: Any, integer: bool) -> int | float | None:
    """A logged number (numbers as strings too, as draft-01 producers wrote them); None if absent
    or not a finite non-negative number of that kind."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not (0 <= number < 2 ** 63):
        return None
    if integer:
        return int(number) if number == int(number) else None
    return number


def phase_row(data: dict) -> tuple:
    """One event's data → the values of :data:`COLUMNS`.  State values are looked up in
    ``state_data`` first, then at the top level (forks logged them flat); ``cr_mark`` is the first
    unvalidated packet when the new phase is unvalidated, else the last one."""
    state = data.get("state_data") if isinstance(data.get("state_data"), dict) else {}
    restored = data.get("restored_data") if isinstance(data.get("restored_data"), dict) else {}
    old = phase_name(_first(data, "old", "old_phase", "from"))
    new = phase_name(_first(data, "new", "new_phase", "phase", "to", "state"))
    logged = _first(data, "trigger")
    mark = _number(_first(state, "cr_mark") if state else None, True)
    if mark is None:
        mark = _number(_first(data, "cr_mark"), True)

    def value(*keys: str, integer: bool = True):
        found = _first(state, *keys)
        return _number(found if found is not None else _first(data, *keys), integer)

    first = value("first_unvalidated_packet")
    last = value("last_unvalidated_packet")
    if mark is not None and new == "unvalidated" and first is None:
        first = mark
    elif mark is not None and new != "unvalidated" and last is None:
        last = mark
    saved_cwnd = _first(restored, "saved_congestion_window", "saved_cwnd", "previous_cwnd")
    saved_rtt = _first(restored, "saved_rtt", "previous_rtt")
    return (old, new, trigger_name(logged, old), None if logged is None else str(logged),
            value("pipesize", "pipe_size"), first, last,
            value("congestion_window", "cwnd"), value("ssthresh"),
            _number(saved_cwnd if saved_cwnd is not None else _first(data, "saved_congestion_window",
                                                                       "saved_cwnd", "previous_cwnd"), True),
            _number(saved_rtt if saved_rtt is not None else _first(data, "saved_rtt", "previous_rtt"), False))


#: The qlog draft's transition table: trigger → the (from, to) phase pairs it may label.
#: ``None`` as a trigger: the draft makes it optional; a change without one is checked by phases.
TRANSITIONS: dict[str | None, set[tuple[str, str]]] = {
    "congestion_window_limited": {("reconnaissance", "unvalidated")},
    "rtt_not_validated": {("reconnaissance", "normal"), ("unvalidated", "normal")},
    "last_unvalidated_packet_sent": {("unvalidated", "validating")},
    "first_unvalidated_packet_acknowledged": {("unvalidated", "validating")},
    "rtt_exceeded": {("unvalidated", "validating")},
    "rate_limited": {("unvalidated", "normal")},
    "last_unvalidated_packet_acknowledged": {("validating", "normal")},
    "path_changed": {("unvalidated", "safe_retreat")},
    "packet_loss": {("unvalidated", "safe_retreat"), ("validating", "safe_retreat"),
                    ("reconnaissance", "normal")},
    "ECN_CE": {("unvalidated", "safe_retreat"), ("validating", "safe_retreat"), ("reconnaissance", "normal")},
    "exit_recovery": {("safe_retreat", "normal")},
}
#: Figure 1 of draft-ietf-tsvwg-careful-resume-24: the phase changes there are at all.
EDGES = {("reconnaissance", "unvalidated"), ("reconnaissance", "normal"), ("unvalidated", "validating"),
         ("unvalidated", "normal"), ("unvalidated", "safe_retreat"), ("validating", "normal"),
         ("validating", "safe_retreat"), ("safe_retreat", "normal")}


def rule_breaks(changes: list[tuple[str | None, str | None, str | None]]) -> list[str]:
    """One connection's phase changes ``(old, new, trigger)`` in order, checked against the drafts:
    the first enters reconnaissance, each starts where the one before ended, each is an edge of
    the draft's Figure 1 labelled with a trigger the qlog draft's table allows for it, and nothing
    follows normal.  Returns one line per break (empty: the sequence follows the drafts)."""
    breaks = []
    phase = None
    for i, (old, new, trigger) in enumerate(changes):
        where = f"change {i + 1} ({old} → {new}, {trigger})"
        if i == 0:
            if new != "reconnaissance" or old not in (None, "normal"):
                breaks.append(f"{where}: Careful Resume starts in reconnaissance")
            phase = new
            continue
        if phase == "normal":
            breaks.append(f"{where}: nothing follows normal")
        if old is not None and old != phase:
            breaks.append(f"{where}: the phase was {phase}")
        edge = (old if old is not None else phase, new)
        if edge not in EDGES:
            breaks.append(f"{where}: not a transition of the draft")
        elif trigger is not None and edge not in TRANSITIONS.get(trigger, set()):
            breaks.append(f"{where}: trigger {trigger} does not lead from {edge[0]} to {edge[1]}")
        phase = new
    return breaks
