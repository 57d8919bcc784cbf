"""Junk in a target list and names that do not resolve: a row each, the scan goes on, and slow
failures do not set the pace (issue 31, items 3 and 9).

The system resolver is replaced by one that fails (after a pause, for the pace): no lookup leaves
this machine.
"""

from __future__ import annotations

import socket
import threading
import time

import duckdb
import pytest

from quicack.scan import hostname, resolver, scanner, targets
from quicack.scan.options import ScanOptions


@pytest.mark.parametrize("text, expected", [
    ("Example.COM.", "example.com"),
    ("bücher.de", "xn--bcher-kva.de"),       # IDNA 2008 with UTS #46 mapping
    ("XN--BCHER-KVA.DE", "xn--bcher-kva.de"),
    ("_dmarc.example.com", "_dmarc.example.com"),
    ("192.0.2.7", "192.0.2.7"),
    ("[2001:db8::1]", "2001:db8::1"),
    ("a" * 63 + ".com", "a" * 63 + ".com"),
])
def test_usable_names_become_their_a_label(text, expected):
    assert hostname.check(text) == (expected, None)


@pytest.mark.parametrize("text, why", [
    ("a..b", "'a..b': empty label"),
    ("a" * 64 + ".com", "label of 64 characters (at most 63)"),
    (".".join(["a" * 50] * 5), "name of 254 characters (at most 253)"),
    ("host with spaces.com", "'host with spaces.com' contains white space"),
    ("\ufffd\ufffd.com", "holds bytes that are not UTF-8"),
    ("-lead.com", "label '-lead' is not letters, digits and inner hyphens"),
    ("a!b.com", "label 'a!b' is not letters, digits and inner hyphens"),
    ("xn--zz.com", "label 'xn--zz' is not valid Punycode"),
    ("ab\u200dc.com", "is not a valid internationalized name"),  # a joiner where CONTEXTJ forbids it
])
def test_junk_is_named_with_its_reason(text, why):
    name, reason = hostname.check(text)
    assert name is None and why in reason


def test_the_list_reader_keeps_invalid_lines_as_targets(tmp_path):
    """Invalid lines keep their place (index) and their text, so the scan records them."""
    listing = tmp_path / "list.txt"
    listing.write_bytes(b"ok.test\na..b\n\xff\xfe.test\nhost with spaces.com\nB\xc3\xbccher.de\n")
    got = [(t.index, t.domain, t.line, t.invalid is None) for t in targets.read_list(listing)]
    assert got == [(0, "ok.test", 1, True), (1, "a..b", 2, False), (2, "\ufffd\ufffd.test", 3, False),
                   (3, "host with spaces.com", 4, False), (4, "xn--bcher-kva.de", 5, True)]


class SlowFailingResolver:
    """socket.getaddrinfo replaced: every lookup fails after ``pause_s``; counts how many run at
    once."""

    def __init__(self, pause_s: float):
        self.pause_s, self.now, self.most, self.calls = pause_s, 0, 0, 0
        self.lock = threading.Lock()

    def __call__(self, host, port, family=0, type=0, proto=0, flags=0):
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)
        time.sleep(self.pause_s)
        with self.lock:
            self.now -= 1
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_a_scan_records_invalid_names_and_goes_on(tmp_path, monkeypatch):
    fake = SlowFailingResolver(0.0)
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    listing = tmp_path / "list.txt"
    listing.write_bytes(b"first.test\na..b\n" + b"x" * 64 + b".test\n\xff\xfe\nhost with spaces.com\nlast.test\n")
    db = tmp_path / "s.duckdb"
    summary = scanner.scan(ScanOptions(list_path=str(listing), db=str(db), repetitions=2, rate=0, workers=1))
    assert summary.outcomes == {"invalid_name": 8, "resolve_failed": 4}
    with duckdb.connect(str(db), read_only=True) as con:
        got = con.execute("SELECT target_index, domain, outcome, error_reason FROM probes "
                          "WHERE repetition = 0 ORDER BY 1").fetchall()
    assert [(i, d, o) for i, d, o, _ in got] == [
        (0, "first.test", "resolve_failed"), (1, "a..b", "invalid_name"),
        (2, "x" * 64 + ".test", "invalid_name"), (3, "\ufffd\ufffd", "invalid_name"),
        (4, "host with spaces.com", "invalid_name"), (5, "last.test", "resolve_failed")]
    assert "label of 64 characters" in got[2][3] and "white space" in got[4][3]
    assert fake.calls == 2  # only the two usable names were looked up


def test_slow_failing_lookups_overlap(tmp_path, monkeypatch):
    """With a resolver that takes 0.2 s to fail, many lookups run at once — up to the resolver's
    pool — instead of the few of asyncio's default executor, so the list is not paced by them."""
    fake = SlowFailingResolver(0.2)
    monkeypatch.setattr(socket, "getaddrinfo", fake)
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"name{i}.test\n" for i in range(400)))
    summary = scanner.scan(ScanOptions(list_path=str(listing), db=str(tmp_path / "s.duckdb"),
                                       repetitions=1, rate=0, workers=1))
    assert summary.outcomes == {"resolve_failed": 400} and fake.calls == 400
    assert fake.most > 50 and fake.most <= resolver.LOOKUPS
