"""Careful Resume phase events (draft-ietf-tsvwg-careful-resume-qlog-02) → ``careful_resume_phases``.

tests/data/careful-resume/ holds one sender's four phase changes (reconnaissance → unvalidated →
validating → safe_retreat → normal) written by hand in four spellings (tests/data/MANIFEST.md):
the qlog draft's names in qlog 0.3 JSON under ``recovery:``; the same under ``quic:`` in a
main-schema JSON-SEQ file; draft-01 arrays with every number a string, capitalised phases and the
state logged flat; a research fork's ``recovery:cr_phase`` with ``old_phase``/``new_phase``,
``cwnd``, ``cr_mark``, ``previous_cwnd``/``previous_rtt`` and the triggers ``cwnd_limited`` and
``cr_mark_acknowledged``.  Each must read into the same rows.
"""

from __future__ import annotations

import pytest

from conftest import DATA, tuples

FILES = DATA / "careful-resume"
COLUMNS = ("event_index, time_ms, old_phase, new_phase, trigger, pipesize_bytes, first_unvalidated_packet, "
           "last_unvalidated_packet, congestion_window_bytes, ssthresh_bytes, saved_congestion_window_bytes, "
           "saved_rtt_ms")
#: what the draft's spelling says, event by event (event 0 is a packet_sent)
EXPECTED = [
    (1, 10.0, "reconnaissance", "unvalidated", "congestion_window_limited", 14000, 12, 12, 600000, None, 1200000, 50.0),
    (2, 35.5, "unvalidated", "validating", "first_unvalidated_packet_acknowledged", 30000, 12, 420, 590000, None,
     None, None),
    (3, 62.25, "validating", "safe_retreat", "packet_loss", 300000, 12, 420, 150000, None, None, None),
    (4, 120.0, "safe_retreat", "normal", "exit_recovery", 520000, 12, 420, 150000, 260000, None, None),
]


def _read(store, name: str) -> list[tuple]:
    result = store.ingest(FILES / name)
    assert result.status == "ingested", result
    return tuples(store, f"SELECT {COLUMNS} FROM careful_resume_phases ORDER BY event_index")


@pytest.mark.parametrize("name", ["draft-names-0.3.qlog", "quic-category.sqlog", "draft-01-flat-strings.qlog"])
def test_full_spellings_read_into_the_drafts_rows(store, name):
    assert _read(store, name) == EXPECTED


def test_a_forks_spelling_reads_into_the_same_rows(store):
    # cr_mark is one packet number: the first unvalidated packet on entering unvalidated, the last
    # one afterwards — so the fork's rows lack the other of the two
    expected = [(*r[:6], r[6] if r[3] == "unvalidated" else None, None if r[3] == "unvalidated" else r[7], *r[8:])
                for r in EXPECTED]
    assert _read(store, "fork-cr-phase.sqlog") == expected
    assert tuples(store, "SELECT DISTINCT event_name, logged_trigger FROM careful_resume_phases ORDER BY 2") == [
        ("recovery:cr_phase", "cr_mark_acknowledged"), ("recovery:cr_phase", "cwnd_limited"),
        ("recovery:cr_phase", "packet_loss")]


def test_events_stay_in_other_events_and_reingest_replaces_rows(store):
    _read(store, "quic-category.sqlog")
    assert tuples(store, "SELECT count(*) FROM other_events WHERE event_name = 'quic:careful_resume_phase_updated'") \
        == [(4,)]
    store.ingest(FILES / "quic-category.sqlog", reanalyze=True)
    assert tuples(store, "SELECT count(*), count(DISTINCT connection_id) FROM careful_resume_phases") == [(4, 1)]


def test_unknown_values_are_kept_or_null(store, tmp_path):
    from conftest import write_json

    path = write_json(tmp_path / "odd.qlog", {"qlog_format": "JSON", "qlog_version": "0.3", "traces": [{
        "vantage_point": {"type": "server"}, "common_fields": {"ODCID": "aa"}, "events": [
            {"time": 1.0, "name": "recovery:careful_resume_phase_updated",
             "data": {"new": "Observing", "trigger": "ecn_ce", "state_data": {"pipesize": -5, "congestion_window": "x"}}},
            {"time": 2.0, "name": "recovery:careful_resume_phase_updated", "data": "not an object"},
            {"time": 3.0, "name": "http:careful_resume_phase_updated", "data": {"new": "normal"}}]}]})
    store.ingest(path)
    assert tuples(store, "SELECT old_phase, new_phase, trigger, pipesize_bytes, congestion_window_bytes "
                         "FROM careful_resume_phases ORDER BY event_index") == [
        (None, "observing", "ECN_CE", None, None), (None, None, None, None, None)]
