"""Real third-party QUIC servers as peers, end to end: each peer is installed/built and started on
loopback, scanned with ``quicack scan`` (3 probes of ``<peer>.localhost`` fetching /64k.bin, with
``--pcap``), and then ``quicack analyze`` puts the capture (with the scan's key log) and the peer's
own server qlog into the same store.  Every probe thus has three views — the scanner's client
qlog, the capture and the server's qlog — which the tests pair (quicack.report.peers) and compare.

How the expected values were observed (runs on this machine, loopback, 2 shared cores):
the first server datagram read off the store (``packets`` joined with ``frames``, the server's
first ``datagram_id``) in each view, and `quicack compare` between the capture and each qlog;
ACK delays and RTT samples read off the capture with tshark (``quic.ack.ack_delay`` × 8 µs in
Initial packets) and off each server's qlog.  All four answer an aioquic client WFC-shaped: the
first server Initial carries the ACK of the client's packet 0 *and* the ServerHello, coalesced with
the Handshake packet (certificate) in one datagram.  Why each peer's logged RTT values differ from
the RFC 9002 replay is verified in the peers' sources and written up in schemas/README.md
(``rtt_samples``, "Known systematic differences"); the tests below assert those explanations.
The tables are printed at the end of the test run (conftest.text_report).
"""

from __future__ import annotations

import math
import re
import shutil

import polars as pl
import pytest

from quicack import QuicackError, Store
from quicack.lab import peers
from quicack.report import peers as peerviews
from quicack.store.compare import compare_connections

from peerscan import (LARGE_NAME, LARGE_SIZE, REPETITIONS, REPO, cli, connection,
                      first_server_datagram, scan_peer)


#: The first datagram the server sends, as the scanner's client qlog logs it: per packet, its
#: type and its frames in order (runs of one type as one; padding included), and frames that may
#: follow in the last packet.  The 0.5-RTT packet's content depends on timing: Caddy and quic-go
#: send NEW_CONNECTION_IDs and, in some runs, the HTTP/3 control stream after them.
FIRST_FLIGHT = {
    "caddy": ([("initial", ["ack", "padding", "crypto"]), ("handshake", ["crypto"]),
               ("1RTT", ["new_connection_id"])], {"stream"}),
    "ngtcp2": ([("initial", ["ack", "crypto"]), ("handshake", ["crypto"]),
                ("1RTT", ["stream", "padding"])], set()),
    "quic-go": ([("initial", ["ack", "padding", "crypto"]), ("handshake", ["crypto"]),
                 ("1RTT", ["new_connection_id"])], {"stream"}),
    "quinn": ([("initial", ["ack", "crypto"]), ("handshake", ["crypto", "padding"])], set()),
}

#: (class, reason) the classifier gives the server's own view; None: the peer writes no qlog.
SERVER_CLASS = {"caddy": None, "ngtcp2": ("wfc", "ack_with_server_hello"),
                "quic-go": ("wfc", "ack_with_server_hello"), "quinn": ("unknown", "frames_not_logged")}

#: The ACK delay (ms) of the server's first ACK in an Initial and in a Handshake packet, every
#: repetition: quic-go (Caddy's too) and ngtcp2 never put a delay into Initial/Handshake ACKs
#: (quic-go internal/ackhandler GetAckFrame sets DelayTime only for 1-RTT; ngtcp2 0.12.1
#: conn_create_ack_frame: ack_delay 0 unless 1-RTT); quinn measures it (ReACKed's table: 0.4 ms;
#: 0.46-0.81 ms here); only Caddy's older quic-go acknowledges the client's Finished in a
#: Handshake packet before dropping the Handshake keys.  "measured": 0 < delay < 25 ms.
FIRST_ACK = {"caddy": (0.0, 0.0), "ngtcp2": (0.0, None), "quic-go": (0.0, None), "quinn": ("measured", None)}


@pytest.fixture(scope="module", params=list(FIRST_FLIGHT))  # (the later stacks: test_peer_stacks.py)
def scanned(request, tmp_path_factory, tshark):
    """One peer scanned like a user would: `quicack scan` while it runs, then `quicack analyze`
    of the capture (the scan's key log) and of the peer's own qlog into the same store."""
    scanned = scan_peer(request.param, tmp_path_factory.mktemp(request.param))
    yield scanned
    scanned.store.close()


def _dedup(frames: list[str]) -> list[str]:
    """Runs of one frame type as one (four NEW_CONNECTION_ID frames → one entry)."""
    return [f for i, f in enumerate(frames) if i == 0 or frames[i - 1] != f]


def _no_padding(frames: list[str] | None) -> list[str] | None:
    return None if frames is None else [f for f in frames if f != "padding"]


# --- the scan and the capture ----------------------------------------------------------------------

def test_scan_probes_every_repetition_and_fetches_the_file(scanned):
    probes = scanned.store.sql("SELECT * FROM probes ORDER BY repetition").to_dicts()
    assert [p["repetition"] for p in probes] == list(range(REPETITIONS))
    assert {p["domain"] for p in probes} == {peers.probe_domain(scanned.name)}
    for p in probes:
        assert (p["outcome"], p["http_status"], p["response_bytes"]) == ("ok", 200, LARGE_SIZE)
        assert p["connection_id"] is not None  # the probe's qlog trace was ingested by the scan
    # every probe has its capture connection; every peer with a qlog its server connection
    assert scanned.probes["capture_cid"].null_count() == 0
    has_qlog = peers.PEERS[scanned.name].qlog is not None
    assert scanned.probes["server_cid"].null_count() == (0 if has_qlog else REPETITIONS)


def test_capture_decrypts_and_holds_no_gso_superframes(scanned):
    # GSO off (peers.start): one QUIC datagram per captured frame, all decrypted with the key log.
    capture = scanned.store.sql("SELECT * FROM capture_files").to_dicts()
    assert len(capture) == 1 and capture[0]["secrets"] == "keylog"
    assert capture[0]["gso_superframes"] == 0 and capture[0]["packets_not_decrypted"] == 0
    grams = scanned.store.sql(f"""
        SELECT connection_id, datagram_id, sum(size_bytes) AS payload FROM packets
        WHERE connection_id IN ({', '.join(map(str, scanned.probes['capture_cid']))}) AND sender = 'server'
        GROUP BY ALL""")
    assert grams["payload"].max() <= 1472  # UDP payload within a 1500-byte MTU
    per_probe = grams.group_by("connection_id").len()["len"]
    assert per_probe.min() >= LARGE_SIZE // 1472  # the 64 KiB file alone needs 45 datagrams


def test_gso_on_makes_quic_go_send_superframes_the_capture_cannot_split(tmp_path, tshark):
    # The same scan with QUIC_GO_DISABLE_GSO=false: quic-go hands the kernel several datagrams
    # per sendmsg and the loopback capture sees them as one oversized frame.
    done = peers.scan("quic-go", tmp_path / "gso.duckdb", tmp_path, repetitions=1, path=f"/{LARGE_NAME}",
                      env={"QUIC_GO_DISABLE_GSO": "false"})
    assert done.outcomes == {"ok": 1}
    with Store(tmp_path / "gso.duckdb", read_only=True) as store:
        issues = store.sql("SELECT kind, size_bytes FROM capture_issues WHERE kind = 'gso_superframe'")
        assert issues.height > 0 and issues["size_bytes"].min() > 1472


# --- the three views of each probe -----------------------------------------------------------------

def test_every_view_of_every_probe_has_the_peers_class(scanned):
    for probe in scanned.probes.iter_rows(named=True):
        for cid in (probe["client_cid"], probe["capture_cid"]):
            conn = connection(scanned.store, cid)
            assert (conn["handshake_class"], conn["handshake_reason"]) == ("wfc", "ack_with_server_hello"), conn
        if SERVER_CLASS[scanned.name] is not None:
            conn = connection(scanned.store, probe["server_cid"])
            assert conn["vantage"] == "server"
            assert (conn["handshake_class"], conn["handshake_reason"]) == SERVER_CLASS[scanned.name]


def test_views_agree_on_the_first_server_flight(scanned):
    expected, may_follow = FIRST_FLIGHT[scanned.name]
    for probe in scanned.probes.iter_rows(named=True):
        client = first_server_datagram(scanned.store, probe["client_cid"])
        capture = first_server_datagram(scanned.store, probe["capture_cid"])
        # the client qlog: the observed shape, WFC (ACK of packet 0 with the ServerHello)
        seen = [(p["packet_type"], _dedup(p["frames"])) for p in client]
        assert [t for t, _ in seen] == [t for t, _ in expected], seen
        for (_, frames), (_, wanted) in zip(seen, expected):
            assert frames[:len(wanted)] == wanted and set(frames[len(wanted):]) <= may_follow, seen
        assert client[0]["largest_acknowledged"] == 0 and client[0]["crypto_offset"] == 0
        # the capture: the same packets (type, number, size, frames) in its first server datagram,
        # the same ACK delay within one encoding step (8 µs)
        ident = [(p["packet_type"], p["packet_number"], p["size_bytes"]) for p in client]
        assert [(p["packet_type"], p["packet_number"], p["size_bytes"]) for p in capture] == ident
        assert [p["frames"] for p in capture] == [p["frames"] for p in client]
        assert capture[0]["ack_delay_ms"] == pytest.approx(client[0]["ack_delay_ms"], abs=0.008)
        if probe["server_cid"] is None:
            continue  # Caddy writes no qlog
        server = first_server_datagram(scanned.store, probe["server_cid"])
        assert [(p["packet_type"], p["packet_number"], p["size_bytes"]) for p in server] == ident
        if scanned.name == "quinn":
            assert all(p["frames"] is None for p in server)  # quinn's qlog has no frames
        else:  # quic-go leaves out the PADDING frames the wire has; ngtcp2 logs them
            strip = _no_padding if scanned.name == "quic-go" else list
            assert [strip(p["frames"]) for p in server] == [strip(p["frames"]) for p in capture]
            assert server[0]["ack_delay_ms"] == capture[0]["ack_delay_ms"] == 0.0


_ACK_DELAY = re.compile(r"ack_delay ([\d.]+) ms in A, ([\d.]+) ms in B")


def _explained_server_difference(name: str, d, last_logged_handshake_pn: int | None) -> bool:
    """Differences between the capture (A) and a server's qlog (B) that the peer's logging
    explains (schemas/README.md, rtt_samples, and README "Real QUIC peers")."""
    if name == "quic-go" and d.kind == "frames":
        # quic-go logs no PADDING frames, neither sent nor received
        a, b = (m.split(",") for m in re.match(r"frames \[(.*)\] in A, \[(.*)\] in B", d.detail).groups())
        return _no_padding(a) == _no_padding(b)
    if name == "ngtcp2" and d.kind == "ack":
        on_wire, logged = map(float, _ACK_DELAY.match(d.detail).groups())
        # ngtcp2 0.12.1 zeroes the ACK delay of ACKs received in Initial and Handshake packets
        # (conn_recv_handshake_pkt), and logs every duration in whole milliseconds (truncated)
        zeroed = d.sender == "client" and d.space in ("initial", "handshake") and logged == 0.0
        return zeroed or logged == math.floor(on_wire + 1e-9)
    if d.kind == "only_a":
        # the client's Handshake retransmissions after the server discarded its Handshake keys
        # (RFC 9001 §4.9.2: "An endpoint MUST discard its Handshake keys when the TLS handshake is
        # confirmed"): undecryptable, so no packet event — ngtcp2 every time; quinn when a loaded
        # machine lets the client's PTO fire before the server's ACK of its Finished arrives
        return d.sender == "client" and d.space == "handshake" and d.packet_number > last_logged_handshake_pn
    return False


def test_compare_pairs_every_packet_of_capture_and_qlogs(scanned):
    """`quicack compare`'s pairing on each probe: the capture against the scanner's client qlog
    (no differences but the server's last packets, which reached a client that was closing) and
    against the server's qlog (only the differences its logging explains)."""
    for probe in scanned.probes.iter_rows(named=True):
        client = compare_connections(scanned.store.con, probe["capture_cid"], probe["client_cid"], tolerance_ms=20.0)
        late = [d for d in client.differences if d.kind == "only_a" and d.sender == "server"]
        assert [d for d in client.differences if d not in late] == [], client.differences
        assert client.only_b == 0 and client.matched > LARGE_SIZE // 1472
        if late:  # the tail the server sent while the client was closing: its qlog had ended
            times = scanned.store.sql(f"""SELECT packet_number_space AS space, packet_number AS pn, epoch_ms
                FROM packets WHERE connection_id = {probe['capture_cid']} AND sender = 'server'""")
            at = {(r["space"], r["pn"]): r["epoch_ms"] for r in times.iter_rows(named=True)}
            unseen = {(d.space, d.packet_number) for d in late}
            last_seen = max(t for key, t in at.items() if key not in unseen)
            assert all(at[key] > last_seen for key in unseen), late
        if probe["server_cid"] is None:
            continue
        server = compare_connections(scanned.store.con, probe["capture_cid"], probe["server_cid"], tolerance_ms=20.0)
        last_hs = scanned.store.sql(f"""SELECT max(packet_number) FROM packets WHERE connection_id = {probe['server_cid']}
            AND sender = 'client' AND packet_number_space = 'handshake'""").item()
        unexplained = [d for d in server.differences if not _explained_server_difference(scanned.name, d, last_hs)]
        assert unexplained == [], unexplained
        assert server.only_b == 0 and server.matched > LARGE_SIZE // 1472


# --- the first ACK, as in the ReACKed table ---------------------------------------------------------

def test_first_ack_delay_per_repetition(scanned, text_report):
    table = peerviews.first_ack_delays(scanned.store)
    text_report.rows("peers", table, peerviews.format_first_ack_delays)
    assert table["repetition"].to_list() == list(range(1, REPETITIONS + 1))
    assert set(table["source"]) == {"capture"} and set(table["first_ack_packet"]) == {"initial"}
    initial, handshake = FIRST_ACK[scanned.name]
    for row, probe in zip(table.iter_rows(named=True), scanned.probes.iter_rows(named=True)):
        if initial == "measured":
            assert 0 < row["initial_ack_delay_ms"] < 25
        else:
            assert row["initial_ack_delay_ms"] == initial
        assert row["handshake_ack_delay_ms"] == handshake
        # the scanner's own view (its qlog, classified) says the same within one encoding step
        client = connection(scanned.store, probe["client_cid"])
        assert client["first_ack_delay_ms"] == pytest.approx(row["initial_ack_delay_ms"], abs=0.008)
        assert row["turnaround_ms"] > 0


# --- the server's RTT estimator: replay vs what the peer logged --------------------------------------

def test_server_rtt_replay_next_to_what_the_peer_logged(scanned, text_report):
    table = peerviews.rtt_comparison(scanned.store)
    text_report.text("peers", peerviews.format_rtt_comparison(table))
    qlog = table.filter(pl.col("replay") == "server qlog")
    wire = table.filter(pl.col("replay") == "capture")
    # the capture replayed from the server's side: every peer, every probe
    assert sorted(set(wire["repetition"])) == list(range(1, REPETITIONS + 1))
    assert set(wire["space"]) >= {"initial", "application_data"}
    firsts = wire.filter(pl.col("sample") == 1)
    if scanned.name == "caddy":  # no qlog: nothing logged to compare
        assert qlog.height == 0 and wire["logged_latest_rtt_ms"].null_count() == wire.height
        return
    servers = [connection(scanned.store, c) for c in scanned.probes["server_cid"]]
    if scanned.name == "quinn":
        # no ACK frames in quinn's qlog: no replay of it (the capture replay stands in)
        assert qlog.height == 0 and all(s["replay_samples"] == 0 for s in servers)
        # quinn logs its metrics once per received datagram: the last ACK of the client's second
        # flight (a 1-RTT one) carries its first logged sample, the Initial ACK none
        assert firsts["logged_latest_rtt_ms"].null_count() == REPETITIONS
    else:
        assert all(s["replay_endpoint"] == "server" and s["replay_samples"] > 0 for s in servers)
        # the first sample of every connection found the metrics the peer logged after that ACK
        first = qlog.filter(pl.col("sample") == 1)
        assert first.height == REPETITIONS and first["logged_latest_rtt_ms"].null_count() == 0
        assert first["logged_rttvar_ms"].null_count() == 0
    logged = wire.filter(pl.col("logged_latest_rtt_ms").is_not_null())
    assert logged.height >= REPETITIONS
    if scanned.name == "ngtcp2":
        # ngtcp2 0.12.1 writes every time and duration as whole ms, truncated (ngtcp2_qlog.c
        # write_tstamp/write_duration: ts / NGTCP2_MILLISECONDS), and takes its RTT between the
        # very timestamps its events carry, so the replay of its qlog (whole-ms event times)
        # exceeds the logged latest_rtt by 0 or 1 ms: floor(a) - floor(b) - floor(a - b) ∈ {0, 1}
        for column in ("logged_latest_rtt_ms", "logged_min_rtt_ms", "logged_smoothed_rtt_ms", "logged_rttvar_ms"):
            assert all(v == int(v) for v in table[column].drop_nulls())
        # ... except where ngtcp2 takes no sample and its logged latest_rtt stays the previous one:
        # before the handshake is confirmed (the server sends HANDSHAKE_DONE right after), a sample
        # with ack_delay > 0 and min_rtt ≤ latest < min_rtt + ack_delay is dropped
        # (ngtcp2_conn_update_rtt), where RFC 9002 §5.3 takes it without subtracting the delay;
        # and an ACK whose largest acknowledged packet is one of its ACK-only packets gives none
        # (ACK-only packets are not in its retransmission buffer, ngtcp2_rtb_recv_ack takes the
        # send time from there), where RFC 9002 §5.1 takes one if any newly acknowledged packet
        # was ack-eliciting.
        for cid in scanned.probes["server_cid"]:
            done_at = scanned.store.sql(f"""SELECT min(p.time_ms) FROM packets p JOIN frames f
                USING (connection_id, event_index) WHERE p.connection_id = {cid} AND p.sender = 'server'
                AND f.frame_type = 'handshake_done'""").item()
            samples = scanned.store.sql(f"""SELECT s.time_ms, s.latest_rtt_ms, s.ack_delay_ms, s.flags,
                s.logged_latest_rtt_ms, s.latest_rtt_diff_ms,
                (SELECT NOT bool_or(p.ack_eliciting) FROM packets p WHERE p.connection_id = s.connection_id
                 AND p.sender = 'server' AND p.packet_number_space = s.packet_number_space
                 AND p.packet_number = s.largest_acknowledged) AS to_ack_only
                FROM rtt_samples s WHERE s.connection_id = {cid} ORDER BY s.event_index""").to_dicts()
            previous = None
            for sample in samples:
                taken = sample["latest_rtt_diff_ms"] in (0.0, 1.0)
                ignorable = (previous is not None and sample["time_ms"] < done_at and sample["ack_delay_ms"] > 0
                             and "ack_delay_not_subtracted" in sample["flags"])
                unmeasured = previous is not None and sample["to_ack_only"]
                unchanged = sample["logged_latest_rtt_ms"] == previous
                # (the replay decides on whole-ms values, ngtcp2 on ns: near the edge either may happen)
                assert taken or ((ignorable or unmeasured) and unchanged), samples
                previous = sample["logged_latest_rtt_ms"]
        # against the wire: truncated, never a whole ms below the RTT the capture saw (first samples)
        first_logged = logged.group_by("repetition").agg(pl.all().first())
        assert (first_logged["latest_rtt_diff_ms"] < 1.0 + 0.05).all(), first_logged
    else:
        # quic-go and quinn time a sample from before their sendmsg to after their receive: never
        # shorter than the RTT on the wire (first sample: no ACK delay subtracted by anyone)
        first_logged = logged.group_by("repetition").agg(pl.all().first())
        assert (first_logged["logged_latest_rtt_ms"] >= first_logged["latest_rtt_ms"] - 0.05).all(), first_logged
    if scanned.name == "quic-go":
        first = qlog.filter(pl.col("sample") == 1)
        # first sample: smoothed = latest, rttvar = latest / 2 (RFC 9002 §5.3), in ns precision
        assert (first["logged_smoothed_rtt_ms"] == first["logged_latest_rtt_ms"]).all()
        assert ((first["logged_rttvar_ms"] - first["logged_latest_rtt_ms"] / 2).abs() < 1e-6).all()
        # later samples: quic-go averages in float32 microseconds and truncates (rtt_stats.go)
        later = qlog.filter((pl.col("sample") > 1) & pl.col("logged_smoothed_rtt_ms").is_not_null())
        for v in [*later["logged_smoothed_rtt_ms"], *later["logged_rttvar_ms"]]:
            assert abs(v * 1000 - round(v * 1000)) < 1e-6
        # its replay (qlog event times) and its own estimate agree within the time quic-go takes to
        # handle a packet before logging it (packet_received is written after the frames)
        assert (first["latest_rtt_diff_ms"].abs() < 5.0).all()


def test_initial_pto_as_each_peer_logs_it(scanned):
    """Before any RTT sample: RFC 9002 §6.2.2 says 333 ms initial RTT, PTO 999 ms.  quic-go uses
    100 ms (internal/utils/rtt_stats.go DefaultInitialRTT; PTO 2 × 100 ms) and arms its first
    PTO timer at 200 ms (loss_timer_updated delta); ngtcp2 and quinn log 333 / 166.5 (ngtcp2:
    166, whole ms).  Caddy: no qlog, no server connection to look at."""
    servers = scanned.probes["server_cid"].drop_nulls()
    assert servers.len() == (0 if scanned.name == "caddy" else REPETITIONS)
    for cid in servers:
        if scanned.name == "quic-go":
            first = scanned.store.sql(f"""SELECT timer_type, event_type, delta_ms FROM timers
                WHERE connection_id = {cid} ORDER BY event_index LIMIT 1""").to_dicts()[0]
            assert (first["timer_type"], first["event_type"]) == ("pto", "set")
            assert 150 < first["delta_ms"] <= 200
        else:
            state = scanned.store.sql(f"""SELECT smoothed_rtt_ms, rtt_variance_ms FROM logged_metrics
                WHERE connection_id = {cid} AND smoothed_rtt_ms IS NOT NULL ORDER BY event_index LIMIT 1""").to_dicts()[0]
            assert state["smoothed_rtt_ms"] == 333.0
            assert state["rtt_variance_ms"] == (166.0 if scanned.name == "ngtcp2" else 166.5)


# --- the command and the report ----------------------------------------------------------------------

def test_peers_scan_prints_the_tables_and_report_shows_them(tmp_path, tshark):
    done = cli("peers", "scan", "ngtcp2", "--db", tmp_path / "p.duckdb", "-n", 1, "--workdir", tmp_path / "w")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ngtcp2: run 'peer-ngtcp2-") and "ok 1" in lines[0]
    assert "Acknowledgment delay of the first ACK received from each peer [ms], per repetition" in done.stdout
    row = next(line for line in lines if line.startswith("ngtcp2 ") and "capture" in line)
    assert row.split()[1:3] == ["0.000", "-"]  # Initial ACK delay 0, no Handshake ACK
    assert "server qlog   1  1 initial" in done.stdout  # the replay of ngtcp2's own qlog
    report = cli("report", "--db", tmp_path / "p.duckdb", "--out", tmp_path / "r.html")
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "r.html").read_text()
    assert "Acknowledgment delay of the first ACK received from each peer" in html
    assert "RFC 9002 replay vs what the peer logged" in html


# --- the switches matter, the cache works, failures are clear ---------------------------------------

def test_builds_are_cached_outside_the_work_tree_and_keyed_by_source(tmp_path, monkeypatch):
    for name in ("quic-go", "quinn"):
        first = peers.prepare(name)
        again = peers.prepare(name)
        assert again.action == "cached" and again.binary == first.binary
        assert REPO not in first.binary.parents
    original = peers.build_key(peers.PEERS["quic-go"])
    copy = tmp_path / "peers"
    shutil.copytree(peers.source_root(), copy, ignore=shutil.ignore_patterns("target"))
    monkeypatch.setattr(peers, "source_root", lambda: copy)
    assert peers.build_key(peers.PEERS["quic-go"]) == original
    (copy / "quic-go" / "main.go").write_text((copy / "quic-go" / "main.go").read_text() + "\n// changed\n")
    assert peers.build_key(peers.PEERS["quic-go"]) != original


def test_unknown_peer_is_refused_with_the_list():
    with pytest.raises(QuicackError) as e:
        peers.peer("nginx")
    assert str(e.value) == f"unknown peer 'nginx'; peers: {', '.join(peers.PEERS)}"
    assert list(peers.PEERS)[:4] == ["caddy", "ngtcp2", "quic-go", "quinn"]


def test_a_peer_that_cannot_bind_its_port_is_reported_with_its_log(tmp_path):
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(QuicackError) as e:
            with peers.start("quic-go", tmp_path, port=port):
                pass
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'server.log'}: quic-go exited with status 1 before "
                              f"listening on UDP {port}:")
    assert "address already in use" in message


def test_self_signed_certificate_names_loopback(tmp_path):
    from cryptography import x509
    cert_path, key_path = peers.make_certificate(tmp_path)
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1", "::1"]
    assert key_path.read_text().startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8
