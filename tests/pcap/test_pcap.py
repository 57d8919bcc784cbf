"""Captures (pcap/pcapng) ingested through tshark: real captures from tests/data/ (see MANIFEST.md).

Every expected value below was read off the captures with tshark 4.0.17 by hand, never computed
with quicack:

* QUIC packets: ``tshark -r FILE [-o tls.keylog_file:KEYS] -T fields -e quic.header_form |
  tr ',' '\\n' | grep -c .`` — one ``header_form`` per QUIC packet, coalesced ones included
  (padding after the last packet of a datagram is not a packet).
* connections: ``tshark -r FILE -Y quic -T fields -e udp.srcport -e udp.dstport`` — the distinct
  client-port/server-port pairs; each starts with a client Initial (a Retry does not start a new
  connection: RFC 9000 §17.2.5, the client keeps its source connection ID).
* server Initial packets: ``tshark -r FILE [-o …] -V`` on the server's first datagrams (``-Y
  udp.srcport==443``), reading "Packet Type", "Packet Number" and each "Frame Type" in order; the
  one-line form is ``-T fields -e frame.number -e udp.srcport -e quic.long.packet_type -e
  quic.packet_number -e quic.frame_type``.
* undecrypted packets: in ``tshark -V``, the "QUIC IETF" sections (with a "Header Form" line)
  that hold no "Frame Type" line, Retry packets left aside — counted with awk.
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from quicack import Store
from quicack.pcap.fields import PACKET_FIELDS
from quicack.pcap.normalize import GSO_REMEDY
from quicack.pcap.source import find_keylog
from quicack.pcap.tshark import lua_script, tshark_binary, tshark_version

DATA = Path(__file__).resolve().parents[1] / "data"

pytestmark = pytest.mark.usefixtures("tshark")
ZEEK = DATA / "zeek/testing/btest/Traces/quic"
INTEROP = ZEEK / "interop/quic-go_quic-go"
P2Q = DATA / "pcap2qlog/examples"
AIOQUIC = DATA / "local/aioquic-aioquic-handshake"
TWO = DATA / "local/aioquic-two-connections"
GSO = DATA / "local/aioquic-gso"


@dataclass(frozen=True)
class Case:
    path: Path
    connections: int
    packets: int
    #: the first server Initial packets in capture order: (packet number, frame types)
    server_initials: tuple[tuple[int, tuple[str, ...]], ...]
    not_decrypted: int  # packets tshark shows without packet number and frames

    def __str__(self) -> str:
        return self.path.name


CASES = [
    # zeek: captures without secrets — Initial packets decrypt (keys from the client's DCID)
    Case(ZEEK / "chromium-115.0.5790.110-api-cirrus-com.pcap", 1, 22, ((1, ("ack", "crypto", "padding")),), 20),
    Case(ZEEK / "curl-8.1.2-dev-http3-www-google-de.pcap", 1, 51, ((1, ("ack", "crypto", "padding")),), 48),
    # Cloudflare: an ACK-only Initial (frame 2), the ServerHello Initial 0.876 ms later (frame 3)
    Case(ZEEK / "firefox-102.13.0esr-blog-cloudflare-com.pcap", 1, 608, ((0, ("ack",)), (1, ("crypto",))), 604),
    Case(ZEEK / "quic_win11_firefox_google.pcap", 1, 444, ((1, ("ack", "crypto", "padding")),), 441),
    # IPv6, ClientHello over three Initials; Google answers with ACK-only Initials, no ServerHello
    Case(ZEEK / "quic-multiple-initial-fragmented-crypto.pcap", 1, 16, ((1, ("ack",)), (2, ("ack",))), 4),
    # QUIC v2 (0x6b3343cf): long header type bits 01 = Initial, 11 = Handshake (RFC 9369 §3.2)
    Case(ZEEK / "quicv2-http3-443.pcap", 1, 17, ((0, ("ack", "crypto")),), 14),
    # interop runner captures: link type PPP
    Case(INTEROP / "handshake.pcap", 1, 12, ((0, ("ack", "crypto")),), 9),
    Case(INTEROP / "retry.pcap", 1, 25, ((0, ("ack", "crypto")),), 20),
    # frame 79: tshark takes the client's Initial to DCID 3ec82f67 for a new connection and
    # removes its header protection with the wrong keys (Packet Number 9612292, no frames)
    Case(INTEROP / "zerortt.pcap", 2, 106, ((0, ("ack", "crypto")),), 101),
    # pcap2qlog draft-22 captures with <name>.keys beside them (ports 4433 and 8443)
    Case(P2Q / "draft-01/ack_range.pcapng", 1, 385, ((0, ("crypto", "ack")),), 0),
    Case(P2Q / "draft-01/multi_stream.pcap", 1, 48, ((0, ("crypto", "ack")),), 0),
    # tshark does not decrypt its Handshake and 1-RTT packets with new_cid.keys
    Case(P2Q / "draft-01/new_cid.pcap", 1, 27, ((0, ("ack", "padding", "crypto")),), 24),
    Case(P2Q / "draft-01/ngtcp2_test.pcapng", 1, 381, ((0, ("crypto", "ack")),), 0),
    Case(P2Q / "draft-01/spin_bit.pcap", 1, 21, ((0, ("ack", "crypto")),), 0),
    # draft-29 with a Decryption Secrets Block; Initial, Retry, Initial again: one connection
    Case(P2Q / "draft-02/ngtcp2-29-dsb.pcapng", 1, 19, ((0, ("ack", "crypto")),), 0),
    # aioquic on 127.0.0.1:4433 with keys.log beside
    Case(AIOQUIC / "cap.pcapng", 1, 11, ((0, ("ack", "crypto")),), 0),
]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    """Every case ingested once into one store: {path: (FileResult, file_id)}."""
    store = Store(tmp_path_factory.mktemp("pcap") / "cases.duckdb")
    results = {}
    for case in CASES:
        result = store.ingest(case.path)
        file_id = store.con.execute("SELECT max(file_id) FROM files").fetchall()[0][0]
        results[case.path] = (result, file_id)
    yield store, results
    store.close()


def _server_initials(store, file_id: int, n: int) -> list[tuple[int, tuple[str, ...]]]:
    rows = store.con.execute("""
        SELECT p.packet_number, list(f.frame_type ORDER BY f.position)
        FROM packets p JOIN connections c USING (connection_id) JOIN frames f USING (connection_id, event_index)
        WHERE c.file_id = ? AND c.trace_index = 0 AND p.sender = 'server' AND p.packet_type = 'initial'
        GROUP BY p.event_index, p.packet_number ORDER BY p.event_index LIMIT ?""", [file_id, n]).fetchall()
    return [(pn, tuple(frames)) for pn, frames in rows]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_connections_packets_and_first_server_initials(ingested, case):
    store, results = ingested
    result, file_id = results[case.path]
    assert result.status == "ingested", result.error
    assert (result.connections, result.packets) == (case.connections, case.packets)
    vantage = store.con.execute("SELECT DISTINCT vantage, flow FROM connections WHERE file_id = ?",
                                [file_id]).fetchall()
    assert vantage == [("network", "client")]
    assert _server_initials(store, file_id, len(case.server_initials)) == list(case.server_initials)
    not_decrypted = store.con.execute(
        "SELECT packets_not_decrypted FROM capture_files WHERE file_id = ?", [file_id]).fetchall()[0][0]
    assert not_decrypted == case.not_decrypted


def test_direction_follows_the_network_convention(ingested):
    """flow 'client': the client's packets are 'sent', the server's 'received' (as normalize.py
    does for network qlogs); the client is the side sending the ClientHello."""
    store, results = ingested
    _, file_id = results[AIOQUIC / "cap.pcapng"]
    rows = store.con.execute("""
        SELECT DISTINCT p.sender, p.direction, cc.client_port, cc.server_port
        FROM packets p JOIN connections c USING (connection_id) JOIN capture_connections cc USING (connection_id)
        WHERE c.file_id = ? ORDER BY 1""", [file_id]).fetchall()
    # by hand: frame 1 (ClientHello) is 127.0.0.1:38196 -> 127.0.0.1:4433
    assert rows == [("client", "sent", 38196, 4433), ("server", "received", 38196, 4433)]


def test_coalesced_packets_are_split(ingested):
    """aioquic's server datagram (frame 2) holds Initial 0 [ACK, CRYPTO], Handshake 1 [CRYPTO] and
    1-RTT 2 [STREAM ×3, PADDING] (tshark -V, frame 2); the client's (frame 3) Initial 1 [ACK],
    Handshake 2 [ACK, CRYPTO], 1-RTT 3 [ACK, NEW_CONNECTION_ID ×7, PADDING]."""
    store, results = ingested
    _, file_id = results[AIOQUIC / "cap.pcapng"]
    rows = store.con.execute("""
        SELECT p.datagram_id, p.sender, p.packet_type, p.packet_number, p.size_bytes,
               list(f.frame_type ORDER BY f.position)
        FROM packets p JOIN connections c USING (connection_id) JOIN frames f USING (connection_id, event_index)
        WHERE c.file_id = ? AND p.datagram_id IN (2, 3) GROUP BY ALL ORDER BY min(p.event_index)""", [file_id]).fetchall()
    nci = ["new_connection_id"] * 7
    assert rows == [
        (2, "server", "initial", 0, 177, ["ack", "crypto"]),
        (2, "server", "handshake", 1, 721, ["crypto"]),
        (2, "server", "1RTT", 2, 302, ["stream", "stream", "stream", "padding"]),
        (3, "client", "initial", 1, 50, ["ack"]),
        (3, "client", "handshake", 2, 105, ["ack", "crypto"]),
        (3, "client", "1RTT", 3, 1045, ["ack", *nci, "padding"]),
    ]


def test_ack_frames_decoded(ingested):
    """RFC 9000 §19.3: ACK Delay × 2^ack_delay_exponent µs; the server's first ACK (Initial) with
    the default exponent 3.  By hand (tshark -V): frame 2 Initial ACK Delay 1499, Largest
    Acknowledged 0, First ACK Range 0; frame 4 (1-RTT) ACK Delay 180, Largest 3; both sides
    advertise ack_delay_exponent 3 (tls.quic.parameter.ack_delay_exponent)."""
    store, results = ingested
    _, file_id = results[AIOQUIC / "cap.pcapng"]
    rows = store.con.execute("""
        SELECT p.datagram_id, f.ack_delay_raw, f.ack_delay_ms, f.largest_acknowledged, f.acked_ranges
        FROM frames f JOIN packets p USING (connection_id, event_index) JOIN connections c USING (connection_id)
        WHERE c.file_id = ? AND f.frame_type = 'ack' AND p.sender = 'server' ORDER BY p.event_index""",
                               [file_id]).fetchall()
    assert rows[0] == (2, 1499, pytest.approx(11.992), 0, [[0, 0]])
    assert rows[1] == (4, 180, pytest.approx(1.44), 3, [[3, 3]])
    params = store.con.execute("""
        SELECT endpoint, owner, ack_delay_exponent, max_ack_delay_ms, max_idle_timeout_ms, initial_max_data_bytes
        FROM transport_parameters JOIN connections USING (connection_id) WHERE file_id = ? ORDER BY 1""",
                               [file_id]).fetchall()
    # by hand: both EncryptedExtensions and ClientHello carry max_idle_timeout 60000,
    # initial_max_data 1048576, ack_delay_exponent 3, max_ack_delay 25
    assert params == [("client", "local", 3, 25.0, 60000.0, 1048576),
                      ("server", "remote", 3, 25.0, 60000.0, 1048576)]


def test_ack_ranges_with_gaps(ingested):
    """ack_range.pcapng (ngtcp2 loses packets on purpose): the first ACK frame with ACK Range Count
    1, by hand (tshark -o tls.keylog_file:ack_range.keys -Y 'quic.ack.ack_range_count > 0' -T fields
    -e frame.number -e quic.ack.largest_acknowledged -e quic.ack.first_ack_range -e quic.ack.gap
    -e quic.ack.ack_range): frame 30, Largest Acknowledged 16, First ACK Range 0, Gap 0, ACK Range
    12: ranges [16, 16] and [16 − 0 − 0 − 2 − 12, 16 − 0 − 0 − 2] = [2, 14]."""
    store, results = ingested
    _, file_id = results[P2Q / "draft-01/ack_range.pcapng"]
    first = store.con.execute("""
        SELECT p.datagram_id, f.largest_acknowledged, f.acked_ranges
        FROM frames f JOIN packets p USING (connection_id, event_index) JOIN connections c USING (connection_id)
        WHERE c.file_id = ? AND f.frame_type = 'ack' AND len(f.acked_ranges) > 1
        ORDER BY p.event_index LIMIT 1""", [file_id]).fetchall()[0]
    assert first == (30, 16, [[2, 14], [16, 16]])


def test_quic_v2_version_and_types(ingested):
    store, results = ingested
    _, file_id = results[ZEEK / "quicv2-http3-443.pcap"]
    version, odcid = store.con.execute("""
        SELECT cc.quic_version, c.odcid FROM capture_connections cc JOIN connections c USING (connection_id)
        WHERE c.file_id = ?""", [file_id]).fetchall()[0]
    # by hand: Version 0x6b3343cf, frame 1 DCID bdf0c5b27927cc667e58d95b
    assert (version, odcid) == ("0x6b3343cf", "bdf0c5b27927cc667e58d95b")
    types = store.con.execute("""
        SELECT packet_type, count(*) FROM packets JOIN connections USING (connection_id)
        WHERE file_id = ? GROUP BY 1 ORDER BY 1""", [file_id]).fetchall()
    # by hand (-T fields -e quic.long.packet_type_v2 | tr , '\n'): Initial (1) ×3, Handshake (3) ×4;
    # the 10 remaining packets have short headers
    assert types == [("1RTT", 10), ("handshake", 4), ("initial", 3)]


def test_retry_is_part_of_the_connection(ingested):
    """retry.pcap: frame 5 client Initial to DCID 4a8294bf9201d6cf, frame 6 Retry from the server,
    frame 7 the client's Initial again (pn 1), frame 8 the server's Initial (pn 0, ACK + SH)
    coalesced with a Handshake packet (not decrypted: no key log)."""
    store, results = ingested
    _, file_id = results[INTEROP / "retry.pcap"]
    rows = store.con.execute("""
        SELECT p.datagram_id, p.sender, p.packet_type, p.packet_number
        FROM packets p JOIN connections c USING (connection_id)
        WHERE c.file_id = ? AND p.datagram_id <= 8 ORDER BY p.event_index""", [file_id]).fetchall()
    assert rows == [(5, "client", "initial", 0), (6, "server", "retry", None), (7, "client", "initial", 1),
                    (8, "server", "initial", 0), (8, "server", "handshake", None)]
    odcid = store.con.execute("SELECT odcid FROM connections WHERE file_id = ?", [file_id]).fetchall()
    assert odcid == [("4a8294bf9201d6cf",)]


def test_undecrypted_packets_have_no_packet_number(ingested):
    store, results = ingested
    _, file_id = results[INTEROP / "zerortt.pcap"]
    rows = store.con.execute("""
        SELECT p.packet_type, p.packet_number, p.frame_count, p.ack_eliciting FROM packets p
        JOIN connections c USING (connection_id) WHERE c.file_id = ? AND p.datagram_id = 79
        ORDER BY p.event_index""", [file_id]).fetchall()
    assert rows == [("initial", None, 0, None), ("handshake", None, 0, None)]


def test_zero_rtt_connection(ingested):
    """zerortt.pcap: client port 60492 (first connection) then 49394 (resumed, 28 0-RTT packets by
    hand: -T fields -e quic.long.packet_type | tr , '\\n' | grep -c '^1$')."""
    store, results = ingested
    _, file_id = results[INTEROP / "zerortt.pcap"]
    rows = store.con.execute("""
        SELECT cc.client_port, count(*) FILTER (WHERE p.packet_type = '0RTT')
        FROM packets p JOIN connections c USING (connection_id) JOIN capture_connections cc USING (connection_id)
        WHERE c.file_id = ? GROUP BY c.trace_index, cc.client_port ORDER BY c.trace_index""", [file_id]).fetchall()
    assert rows == [(60492, 0), (49394, 28)]


def test_secrets_sources(ingested):
    store, results = ingested
    secrets = dict(store.con.execute("""
        SELECT split_part(f.path, '/', -1), cf.secrets FROM capture_files cf JOIN files f USING (file_id)
        WHERE f.path LIKE '%dsb%' OR f.path LIKE '%ack_range%' OR f.path LIKE '%cloudflare%'""").fetchall())
    assert secrets == {"ngtcp2-29-dsb.pcapng": "dsb", "ack_range.pcapng": "keylog",
                       "firefox-102.13.0esr-blog-cloudflare-com.pcap": "none"}


def test_summary_says_what_was_not_decrypted(ingested):
    _, results = ingested
    result, _ = results[ZEEK / "firefox-102.13.0esr-blog-cloudflare-com.pcap"]
    path = ZEEK / "firefox-102.13.0esr-blog-cloudflare-com.pcap"
    # by hand: 595 short-header packets and 9 Handshake packets without a packet number
    assert result.warnings == [
        f"{path}: 604 of 608 QUIC packets not decrypted (1RTT 595, handshake 9); no TLS key log found "
        "(only Initial packets decrypt without one): pass --keylog FILE, put <capture>.keys or keys.log "
        "beside the capture, or embed the secrets (editcap --inject-secrets tls,KEYLOG)"]
    result, _ = results[P2Q / "draft-01/new_cid.pcap"]
    assert result.warnings == [
        f"{P2Q / 'draft-01/new_cid.pcap'}: 24 of 27 QUIC packets not decrypted (1RTT 19, handshake 5); "
        f"the secrets ({P2Q / 'draft-01/new_cid.keys'}) do not cover them"]


def test_two_connections_on_a_non_443_port(tmp_path):
    """aioquic, two connections one after the other to 127.0.0.1:4434 (by hand: client port 55484 in
    frames 1-31, 53238 in frames 32-62; DCIDs of the two client Initials with crypto offset 0:
    fd62aeb317c3452c and cda9cee6e91fa49e — also the names of the qlog files)."""
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(TWO / "cap.pcapng")
        assert result.status == "ingested" and result.warnings == []
        rows = store.con.execute("""
            SELECT c.trace_index, cc.client_port, cc.server_port, min(p.datagram_id), max(p.datagram_id)
            FROM connections c JOIN capture_connections cc USING (connection_id) JOIN packets p USING (connection_id)
            GROUP BY ALL ORDER BY 1""").fetchall()
        odcids = sorted(r[0] for r in store.con.execute("SELECT odcid FROM connections").fetchall())
    qlogs = sorted(p.stem for p in (TWO / "qlog_client").glob("*.qlog"))
    assert rows == [(0, 55484, 4434, 1, 31), (1, 53238, 4434, 32, 62)]
    assert odcids == qlogs == ["cda9cee6e91fa49e", "fd62aeb317c3452c"]


def test_missed_handshake_forces_quic_decoding_of_the_server_port(tmp_path):
    """Without frames 1-3 (the first connection's handshake, removed with editcap), tshark's
    heuristics do not recognise that connection's short-header packets: quicack decodes the
    server port (4434, where the second connection sent its ClientHello) as QUIC.  By hand:
    ``editcap cap.pcapng cut.pcapng 1-3; tshark -r cut.pcapng`` shows frames 1-28 (port 55484) as
    plain UDP, with ``-d udp.port==4434,quic`` as 28 QUIC 'Protected Payload' packets; the second
    connection (frames 29-59) holds 34 QUIC packets (header_form count of frames 32-62 before)."""
    cut = tmp_path / "cut.pcapng"
    subprocess.run(["editcap", str(TWO / "cap.pcapng"), str(cut), "1-3"], check=True, capture_output=True)
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(cut, keylog=TWO / "keys.log")
        assert result.status == "ingested"
        ports = store.con.execute("SELECT decode_as_ports FROM capture_files").fetchall()[0][0]
        rows = store.con.execute("""
            SELECT cc.client_port, c.odcid, c.events, cc.packets_not_decrypted
            FROM connections c JOIN capture_connections cc USING (connection_id) ORDER BY c.trace_index""").fetchall()
    assert ports == [4434]
    assert rows == [(55484, None, 28, 28), (53238, "cda9cee6e91fa49e", 34, 0)]


def test_quic_port_option_for_an_undetected_capture(tmp_path):
    """pcap2qlog's draft-15 capture (pre-RFC 8999 header): tshark 4.0 finds no QUIC in it (by hand:
    ``tshark -r FILE`` shows 'UDP … 50506 → 4433'; ``-T fields -e udp.payload``: six payloads begin
    ``ff``/``fd`` then ``ff00000f``, four ``30…``): refused with the reason, unless --quic-port
    forces it, and then tshark's misreading is reported."""
    capture = DATA / "pcap2qlog/captures/Local/pcap/ngtcp2-pcap-encrypted.pcap"
    with Store(tmp_path / "s.duckdb") as store:
        refused = store.ingest(capture)
        forced = store.ingest(capture, quic_ports=(4433,))
    assert refused.status == "refused"
    assert refused.error == (f"{capture}: no QUIC packets found: 10 frames, 10 UDP datagrams, none dissected "
                             "as QUIC; 6 of them begin like QUIC long-header packets of draft-15 (0xff00000f), "
                             f"which tshark {tshark_version(tshark_binary())} does not read (it reads IETF QUIC from draft-21 on)")
    assert forced.status == "ingested"
    assert any("malformed QUIC datagrams (versions seen: 0xff00000f" in w for w in forced.warnings)


def test_a_peer_port_tshark_gives_to_another_protocol_is_decoded_as_quic_when_named(tmp_path):
    """A peer scan's capture whose server port was 34980, EtherCAT's: by hand ``tshark -r FILE -T
    fields -e frame.protocols -e udp.srcport`` shows 'eth:ethertype:ip:udp:ecatf:data 34980' for
    its 36 datagrams to and from that port, so tshark's QUIC heuristics never see them.  Refused
    as no QUIC by tshark; with the port named, three connections (the scan's three probes) decrypt
    with the scan's key log.  quicack.lab.peers.scan names the peer's port for this reason.  The
    native reader finds QUIC by its headers on any port: the same three connections without it."""
    folder = DATA / "peers/quinn/port-34980"
    with Store(tmp_path / "n.duckdb") as store:
        native = store.ingest(folder / "scan.pcapng", keylog=folder / "keys.log")
        native_rows = store.con.execute("""SELECT cc.server_port, count(*), sum(cc.packets_not_decrypted)
            FROM capture_connections cc GROUP BY ALL""").fetchall()
    assert native.status == "ingested" and native.connections == 3
    with Store(tmp_path / "s.duckdb") as store:
        refused = store.ingest(folder / "scan.pcapng", keylog=folder / "keys.log", dissector="tshark")
        forced = store.ingest(folder / "scan.pcapng", keylog=folder / "keys.log", quic_ports=(34980,),
                              dissector="tshark")
        rows = store.con.execute("""SELECT cc.server_port, count(*), sum(cc.packets_not_decrypted)
            FROM capture_connections cc GROUP BY ALL""").fetchall()
    assert refused.status == "refused" and "none dissected as QUIC" in refused.error
    # (QUIC v1 payloads: the port is the reason, and the hint says so)
    assert refused.error.endswith("none dissected as QUIC (QUIC on an unusual port? try --quic-port PORT)")
    assert forced.status == "ingested" and forced.connections == 3
    assert rows == native_rows == [(34980, 3, 0)]


def test_gso_superframes_reported_and_not_misread(tmp_path):
    """aioquic server sending runs of equal-size datagrams with UDP_SEGMENT (make_capture.py --gso):
    by hand ``tshark -r cap.pcapng -Y 'udp.length > 1480' -T fields -e udp.srcport -e udp.length``
    lists 25 datagrams from port 35631 of 2408 to 19208 bytes (UDP length: payload + 8), each one
    short-header packet that fails decryption ("Decryption failed", -V).  59 QUIC packets in all
    (header_form count), 34 outside super-frames.  The handshake is not in a super-frame: the
    server's first Initial (frame 2) is pn 0 [ACK, CRYPTO]."""
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(GSO / "cap.pcapng")
        issues = store.con.execute("""SELECT count(*), min(size_bytes), max(size_bytes) FROM capture_issues
                                      WHERE kind = 'gso_superframe'""").fetchall()[0]
        in_packets = store.con.execute("""SELECT count(*) FROM packets WHERE datagram_id IN
            (SELECT frame_number FROM capture_issues WHERE kind = 'gso_superframe')""").fetchall()[0][0]
        first = store.con.execute("""
            SELECT p.packet_number, list(f.frame_type ORDER BY f.position) FROM packets p
            JOIN frames f USING (connection_id, event_index)
            WHERE p.sender = 'server' AND p.packet_type = 'initial' GROUP BY ALL ORDER BY min(p.event_index) LIMIT 1""").fetchall()
        per_connection = store.con.execute("SELECT gso_superframes FROM capture_connections").fetchall()
    assert (result.status, result.packets) == ("ingested", 34)
    assert issues == (25, 2400, 19200)
    assert in_packets == 0  # nothing of the unsplittable remainder poses as a packet
    assert first == [(0, ["ack", "crypto"])]
    assert per_connection == [(25,)]
    assert result.warnings == [
        f"{GSO / 'cap.pcapng'}: 25 UDP datagrams of up to 19200 bytes (sent by 127.0.0.1 port 35631) are UDP "
        f"GSO super-frames that tshark cannot split: the packets inside them are missing; {GSO_REMEDY}"]


def test_gso_superframes_before_the_serverhello_make_the_class_unknown(tmp_path):
    from quicack.store import analysis
    with Store(tmp_path / "s.duckdb") as store:
        store.ingest(GSO / "cap.pcapng")
        # here every super-frame comes after the handshake: the class stands
        assert store.con.execute("SELECT handshake_class FROM connections").fetchall() == [("wfc",)]
        # had one come before the ServerHello, the visible packets could mislead
        store.con.execute("""UPDATE capture_issues SET epoch_ms = (SELECT min(epoch_ms) FROM packets)
                             WHERE frame_number = (SELECT min(frame_number) FROM capture_issues)""")
        store.con.execute("DELETE FROM rtt_samples")
        analysis.classify_and_replay(store.con, 1)
        assert store.con.execute("SELECT handshake_class, handshake_reason, handshake_notes FROM connections"
                                 ).fetchall() == [("unknown", "gso_superframes", ["visible_packets_say_wfc"])]


def test_gzip_capture_and_keylog_option(tmp_path):
    """A gzipped copy without a key log beside it: only the Initial packets decrypt; with --keylog
    the same packets as the original, and the store re-ingests the same bytes when the key log
    changes (same hash, other secrets)."""
    copy = tmp_path / "cap.pcapng.gz"
    copy.write_bytes(gzip.compress((AIOQUIC / "cap.pcapng").read_bytes()))
    assert find_keylog(copy) is None
    with Store(tmp_path / "s.duckdb") as store:
        bare = store.ingest(copy)
        again = store.ingest(copy)
        keyed = store.ingest(copy, keylog=AIOQUIC / "keys.log")
        rows = store.con.execute("SELECT count(*), count(*) FILTER (WHERE frame_count = 0) FROM packets").fetchall()
        files = store.con.execute("SELECT format, qlog_version FROM files").fetchall()
    # by hand, without keys: the Initial packets of frames 1, 2 and 3 decrypt, 8 packets do not
    assert (bare.status, bare.packets) == ("ingested", 11)
    assert "8 of 11 QUIC packets not decrypted (1RTT 6, handshake 2)" in bare.warnings[0]
    assert again.status == "unchanged"
    assert (keyed.status, keyed.packets, keyed.warnings) == ("ingested", 11, [])
    assert rows == [(11, 0)]  # the keyless rows were replaced, not added to
    assert files == [("pcapng", None)]


def test_cut_capture_keeps_complete_frames(tmp_path):
    cut = tmp_path / "cut.pcapng"
    raw = (TWO / "cap.pcapng").read_bytes()
    cut.write_bytes(raw[: len(raw) - 500])  # the last frame loses its end
    shutil.copy(TWO / "keys.log", tmp_path / "keys.log")
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(cut)
    assert result.status == "ingested"
    # by hand: tshark -r cut.pcapng reads 58 of the 62 frames and says the file "appears to have
    # been cut short in the middle of a packet"
    assert any("cut short" in w and "kept every complete frame" in w for w in result.warnings)
    assert (result.connections, store_frames(tmp_path / "s.duckdb")) == (2, 58)


def store_frames(db: Path) -> int:
    with Store(db, read_only=True) as store:
        return store.con.execute("SELECT frames FROM capture_files").fetchall()[0][0]


def test_not_a_capture_is_refused(tmp_path):
    bogus = tmp_path / "x.pcap"
    bogus.write_bytes(b"not a capture at all")
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(bogus)
        tables = store.con.execute("SELECT count(*) FROM files").fetchall()[0][0]
    assert result.status == "refused"
    assert result.error == f"{bogus} at byte 0: not a pcap or pcapng capture (unknown magic number)"
    assert tables == 0


def test_lua_layout_counts_the_packet_fields():
    script = lua_script()
    listed = script.split("local names = {", 1)[1].split("}", 1)[0]
    assert [n.strip().strip('"') for n in listed.split(",")] == list(PACKET_FIELDS)


# --- the fast path (Arrow) and the general path (DuckDB) of staging --------------------------

def _staged(path: Path, fast: bool) -> dict[str, list[tuple]]:
    """The temporary rows of one capture (c_dgram, c_tp, c_pkt, c_frame), staged batch by batch."""
    import duckdb

    from quicack.pcap import staging, tshark

    con = duckdb.connect()
    with tshark.Dissection(path) as dissection:
        tables = staging.Staging(con, dissection.layout_file, fast=fast)
        for block in dissection.blocks(tables.idle):
            tables.add(tshark.parse(block, []))
        dissection.wait()
        tables.finish()
    rows = {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
            for t in ("c_dgram", "c_tp", "c_pkt", "c_frame")}
    con.close()
    return rows


FAST_CASES = [c.path for c in CASES] + [
    P2Q / "draft-01/ack_range.pcapng",  # ACK frames with several ranges
    P2Q / "draft-01/multi_stream.pcap", P2Q / "draft-01/new_cid.pcap",  # undecrypted packets
    ZEEK / "quicv2-http3-443.pcap", ZEEK / "firefox-102.13.0esr-blog-cloudflare-com.pcap",
    INTEROP / "retry.pcap", INTEROP / "zerortt.pcap", TWO / "cap.pcapng", GSO / "cap.pcapng"]


@pytest.mark.parametrize("path", FAST_CASES, ids=lambda p: p.name)
def test_the_fast_path_stages_the_rows_of_the_general_path(path, monkeypatch):
    """Most datagrams are staged by quicack.pcap.fastpath in Arrow, the others by the SQL of the
    general path, which can stage any datagram.  Staged both ways, in small batches (the held
    datagrams then go through the general path while tshark runs, several at a time), every
    capture gives the same datagram, packet and frame rows; and the fast path did take datagrams
    of every capture (with CONNECTION_CLOSE, several ACK ranges, undecrypted packets, GSO…)."""
    from quicack.pcap import fastpath, staging, tshark

    monkeypatch.setattr(tshark, "MIN_BATCH_BYTES", 2000)
    monkeypatch.setattr(staging, "HELD_ROWS", 3)
    fast, general = _staged(path, fast=True), _staged(path, fast=False)
    assert fast == general
    assert fast["c_pkt"]
    with tshark.Dissection(path) as dissection:
        taken = sum(fastpath.split(tshark.parse(b, [])).datagrams.num_rows for b in dissection.blocks())
    assert 0 < taken <= len(fast["c_dgram"])


def test_the_fast_path_leaves_what_it_cannot_read_to_the_general_path():
    """A number tshark wrote that does not parse (TRY_CAST gives NULL in the general path) sends
    the batch's rows to the general path; rows of several QUIC packets and repeated frame fields
    always go there; non-UDP rows go nowhere."""
    import pyarrow as pa

    from quicack.pcap import fastpath
    from quicack.pcap.fields import ALL_FIELDS, column

    def rows(*changes: dict) -> pa.Table:
        base = {column(f): None for f in ALL_FIELDS}
        base.update(frame_number="1", frame_time_epoch="1700000000.000000001", ip_src="10.0.0.1",
                    ip_dst="10.0.0.2", udp_srcport="5000", udp_dstport="443", udp_length="40",
                    quic_header_form="0", quic_packet_length="30", quic_packet_number="7",
                    quic_frame_type="1")
        return pa.Table.from_pylist([{**base, **c} for c in changes],
                                    schema=pa.schema([(column(f), pa.string()) for f in ALL_FIELDS]))

    out = fastpath.split(rows({}, {"frame_number": "2", "quic_header_form": "1,0"},
                              {"frame_number": "3", "quic_frame_type": "6,6", "quic_crypto_offset": "0,10"},
                              {"frame_number": "4", "udp_srcport": None}))
    assert out.datagrams["frame_number"].to_pylist() == [1]
    assert out.packets["packet_number"].to_pylist() == [7]
    assert out.frames["frame_type"].to_pylist() == ["ping"]
    assert out.datagrams["epoch_ns"].to_pylist() == [1_700_000_000_000_000_001]
    assert out.held["frame_number"].to_pylist() == ["2", "3"]
    bad = fastpath.split(rows({}, {"frame_number": "2", "quic_packet_number": "seven"}))
    assert bad.datagrams.num_rows == 0 and bad.held["frame_number"].to_pylist() == ["1", "2"]


def test_a_capture_ingest_leaves_the_stores_thread_setting_as_it_was(tmp_path):
    """A capture is staged beside tshark, and a small one normalized, on one DuckDB thread;
    the store's own setting comes back afterwards, whether the capture was taken or refused."""
    bogus = tmp_path / "bogus.pcap"
    bogus.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\0" * 40)  # a pcap header cut short
    with Store(tmp_path / "s.duckdb") as store:
        store.con.execute("SET threads = 3")
        assert store.ingest(AIOQUIC / "cap.pcapng").status == "ingested"
        assert store.con.execute("SELECT current_setting('threads')").fetchall()[0][0] == 3
        assert store.ingest(bogus).status == "refused"
        assert store.con.execute("SELECT current_setting('threads')").fetchall()[0][0] == 3


MAPPING_CASES = [c.path for c in CASES] + [TWO / "cap.pcapng", GSO / "cap.pcapng",
                                           INTEROP / "zerortt.pcap", INTEROP / "retry.pcap"]


@pytest.mark.parametrize("path", MAPPING_CASES, ids=lambda p: p.name)
def test_connections_worked_out_per_tshark_connection_as_per_datagram(path):
    """Connections are worked out per tshark connection when tshark numbered every QUIC datagram
    (its first datagrams, where its hellos came from), else per datagram: both ways give every
    capture the same connections (ids, keys) and the same connection and sender per datagram."""
    import duckdb

    from quicack.pcap import connections, staging

    con = duckdb.connect()
    staging.stage(con, path)
    numbered = con.execute("""SELECT count(*) = 0 FROM c_dgram
                              WHERE packets > 0 AND split_ok AND tshark_connection IS NULL""").fetchall()[0][0]
    assert connections.assign_per_tshark_connection(con, 7) == numbered
    outcomes = []
    for per_tshark_connection in (True, False):
        connections.assign(con, 7, per_tshark_connection=per_tshark_connection)
        outcomes.append({t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr) for t in ("ck", "dmap")})
    con.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0]["dmap"] and {r[1] for r in outcomes[0]["dmap"]} == {r[2] for r in outcomes[0]["ck"]}


@pytest.mark.parametrize("layout", [True, False], ids=["layout", "no-layout"])
def test_packets_numbered_while_staging_are_numbered_in_capture_order(layout):
    """Each QUIC packet's event_index is numbered as its batch is staged, ahead of the general
    path for held datagrams: the numbers are the packets' positions in the capture, 0 to n - 1.
    Without the Lua layout the coalesced datagrams cannot be cut (their packets are left out):
    the packets left are numbered again, still 0 to n - 1 in capture order."""
    import duckdb

    from quicack.pcap import normalize, staging, tshark

    con = duckdb.connect()
    with tshark.Dissection(AIOQUIC / "cap.pcapng") as dissection:
        tables = staging.Staging(con, dissection.layout_file if layout else None)
        for block in dissection.blocks(tables.idle):
            tables.add(tshark.parse(block, []))
        dissection.wait()
        tables.finish()
    unsplit, cut = con.execute("""SELECT count(*) FILTER (WHERE packets > 0 AND NOT split_ok),
                                         sum(packets) FILTER (WHERE split_ok) FROM c_dgram""").fetchall()[0]
    staged = [r[0] for r in con.execute("SELECT event_index FROM c_pkt ORDER BY frame_number, idx").fetchall()]
    capture = staging.StagedCapture(str(AIOQUIC / "cap.pcapng"), "pcapng", "4.0.17", "none", None, None, [], 0, [])
    con.execute(Path(__file__).resolve().parents[2].joinpath("schemas/store.sql").read_text())
    normalize.normalize(con, 1, 1, capture)
    stored = con.execute("SELECT datagram_id, event_index FROM packets ORDER BY event_index").fetchall()
    con.close()
    assert (unsplit > 0) == (not layout)
    if layout:
        assert staged == list(range(len(staged)))
    assert [e for _, e in stored] == list(range(len(stored)))
    assert [d for d, _ in stored] == sorted(d for d, _ in stored)
    assert len(stored) == cut and (cut == 11 or not layout)
