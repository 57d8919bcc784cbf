"""Producer quirks of the QUIC stacks added as peers for issue 27, on real files they wrote
(tests/data/peers/<stack>/, tests/data/MANIFEST.md): Go's golang.org/x/net/quic, quiche and
TQUIC qlogs (one GET of / between each stack's own client and server), and a capture of one
quicack probe of the s2n-quic peer (s2n-quic writes no qlog)."""

from __future__ import annotations

import pytest

from conftest import DATA, read_seq, rows
from quicack import Store
from quicack.qlog import dialect

GO_X_NET = DATA / "peers" / "go-x-net"
QUICHE = DATA / "peers" / "quiche"
TQUIC = DATA / "peers" / "tquic"
S2N_QUIC = DATA / "peers" / "s2n-quic"


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    out = {}
    for name, files in (("go-x-net", [GO_X_NET / "client.sqlog", GO_X_NET / "server.sqlog"]),
                        ("quiche", [QUICHE / "client.sqlog", QUICHE / "server.sqlog"]),
                        ("tquic", [TQUIC / "client.sqlog", TQUIC / "server.sqlog"])):
        store = Store(tmp_path_factory.mktemp(name) / "t.duckdb")
        for f in files:
            assert store.ingest(f).status == "ingested"
        out[name] = store
    yield out
    for store in out.values():
        store.close()


def _acks(store: Store) -> list[dict]:
    return rows(store, """SELECT c.vantage, p.sender, p.packet_type, p.packet_number, f.ack_delay_ms, f.ack_delay_raw
        FROM frames f JOIN packets p USING (connection_id, event_index) JOIN connections c USING (connection_id)
        WHERE f.frame_type = 'ack' ORDER BY c.vantage, p.event_index""")


# --- golang.org/x/net/quic --------------------------------------------------------------------------

def test_go_x_net_is_recognised_by_its_vantage_name(stores):
    # x/net names itself only in vantage_point.name: "go quic" (quic/qlog.go)
    header = (GO_X_NET / "server.sqlog").read_text().split("\x1e")[1]
    assert '"name":"go quic"' in header
    got = rows(stores["go-x-net"], "SELECT vantage, implementation, quirks FROM connections ORDER BY vantage")
    assert [(r["vantage"], r["implementation"], r["quirks"]) for r in got] == [
        ("client", "go-x-net", []), ("server", "go-x-net", [])]
    assert dialect.PRODUCER_ALIASES["go quic"] == "go-x-net"


def test_go_x_net_ack_delay_unknown_before_the_peers_parameters(stores):
    """x/net logs an ACK frame's delay scaled with the *peer's* ack_delay_exponent and leaves it
    out while that is unknown (quic/qlog.go packetFramesAttr): the client's view of the server's
    Initial ACKs (before EncryptedExtensions) and the server's ACK of the first half of a
    ClientHello have none — read as unknown (NULL), not 0."""
    acks = _acks(stores["go-x-net"])
    client_initial = [a for a in acks if a["vantage"] == "client" and a["packet_type"] == "initial"]
    assert [a["ack_delay_ms"] for a in client_initial if a["sender"] == "server"] == [None, None]
    # the client's own Initial ACKs: the first one before it had the server's parameters
    assert [a["ack_delay_ms"] for a in client_initial if a["sender"] == "client"][0] is None
    server_first = next(a for a in acks if a["vantage"] == "server" and a["sender"] == "server")
    assert (server_first["packet_type"], server_first["packet_number"], server_first["ack_delay_ms"]) == ("initial", 0, None)
    # once known, the delays are there (0: x/net sends in the loop turn that received the packet)
    assert {a["ack_delay_ms"] for a in acks if a["packet_type"] == "handshake"} == {0.0}


def test_go_x_net_logs_no_datagrams(stores):
    """No datagram events and every packet at its own time: each packet is a datagram of its own
    in the store, coalesced or not."""
    records = read_seq(GO_X_NET / "server.sqlog")
    assert not any("datagram" in r["name"] for r in records)
    per = rows(stores["go-x-net"], """SELECT count(*) AS packets, count(DISTINCT datagram_id) AS datagrams
        FROM packets p JOIN connections c USING (connection_id) WHERE c.vantage = 'server' AND p.sender = 'server'""")[0]
    assert per["packets"] == per["datagrams"]


def test_go_x_net_client_splits_its_clienthello_and_the_server_acks_the_first_half(stores):
    # Go's TLS offers X25519MLKEM768: its ClientHello takes two Initials; x/net's server ACKs the
    # first one at once, the ServerHello follows the second
    got = rows(stores["go-x-net"], "SELECT vantage, handshake_class, handshake_reason FROM connections ORDER BY vantage")
    assert [(r["handshake_class"], r["handshake_reason"]) for r in got] == [("iack", "partial_clienthello")] * 2


# --- quiche --------------------------------------------------------------------------------------------

def test_quiche_logs_the_ack_delay_field_divided_by_1000(stores):
    """quiche writes an ACK frame's ack_delay as the encoded field / 1000 (src/frame.rs to_qlog:
    `ack_delay as f32 / 1000.0`): 0.024 for a field of 24, i.e. 24 × 2^3 µs = 0.192 ms."""
    records = read_seq(QUICHE / "server.sqlog")
    logged = next(f["ack_delay"] for r in records if r["name"] == "quic:packet_sent"
                  for f in r["data"].get("frames", []) if f["frame_type"] == "ack")
    acks = _acks(stores["quiche"])
    first = next(a for a in acks if a["vantage"] == "server" and a["sender"] == "server")
    assert first["ack_delay_raw"] == round(logged * 1000)
    assert first["ack_delay_ms"] == pytest.approx(first["ack_delay_raw"] * 8 / 1000)
    for a in acks:  # every delay is a whole number of 8 µs steps (exponent 3 everywhere)
        assert a["ack_delay_ms"] == pytest.approx(a["ack_delay_raw"] * 0.008)
    # the same ACK in both traces decodes to the same delay
    mirrored = next(a for a in acks if a["vantage"] == "client" and a["sender"] == "server"
                    and a["packet_number"] == first["packet_number"] and a["packet_type"] == first["packet_type"])
    assert mirrored["ack_delay_ms"] == first["ack_delay_ms"]
    quirks = rows(stores["quiche"], "SELECT DISTINCT unnest(quirks) AS q FROM connections")
    assert [q["q"] for q in quirks] == ["quiche:ack_delay_encoding"]
    assert dialect.QUIRKS["quiche"] == {"ack_delay_encoding": dialect.AckDelayEncoding.RAW_MS}


def test_quiche_received_packet_length_runs_to_the_end_of_the_datagram():
    """quiche logs a received packet's raw.length as the bytes from its start to the datagram's
    end (src/lib.rs recv_single: `b.len()`), while payload_length is the packet's own: the
    quirk is documented, not corrected (the packet's header length is not logged)."""
    received = [r["data"] for r in read_seq(QUICHE / "server.sqlog") if r["name"] == "quic:packet_received"]
    # the client's second flight: Initial, Handshake and 1-RTT coalesced in one 1350-byte datagram
    flight = [p for p in received if p["header"]["packet_number"] in (3, 4, 5)]
    assert [p["header"]["packet_type"] for p in flight] == ["initial", "handshake", "1RTT"]
    lengths = [p["raw"]["length"] for p in flight]
    assert lengths[0] == 1350 and lengths[0] > lengths[1] > lengths[2]
    for packet, rest in zip(flight, lengths[1:]):  # its own bytes: header + payload
        assert packet["raw"]["length"] - rest > packet["raw"]["payload_length"]


# --- TQUIC -------------------------------------------------------------------------------------------

def test_tquic_option_debug_text_is_no_odcid(stores):
    """TQUIC writes Rust's Option debug text into parameters_set ("original_destination_connection_id":
    "None", "tls_cipher": "Some(Aes256Gcm)"): "None" is no ODCID; the DCID of the client's first
    Initial is, in both traces."""
    first = read_seq(TQUIC / "server.sqlog")[0]
    assert first["name"] == "quic:parameters_set" and first["data"]["original_destination_connection_id"] == "None"
    got = rows(stores["tquic"], "SELECT vantage, implementation, odcid FROM connections ORDER BY vantage")
    assert [r["implementation"] for r in got] == ["tquic", "tquic"]
    client_initial = next(r["data"]["header"]["dcid"] for r in read_seq(TQUIC / "client.sqlog")
                          if r["name"] == "quic:packet_sent" and r["data"]["header"]["packet_type"] == "initial")
    assert {r["odcid"] for r in got} == {client_initial}


def test_tquic_logs_the_ack_delay_field_divided_by_1000(stores):
    """As quiche (src/frame.rs to_qlog: `*ack_delay as f32 / 1000.0`); no reference time either."""
    records = read_seq(TQUIC / "server.sqlog")
    logged = next(f["ack_delay"] for r in records if r["name"] == "quic:packet_sent"
                  for f in r["data"].get("frames", []) if f["frame_type"] == "ack")
    acks = _acks(stores["tquic"])
    first = next(a for a in acks if a["vantage"] == "server" and a["sender"] == "server")
    assert first["ack_delay_raw"] == round(logged * 1000)
    assert first["ack_delay_ms"] == pytest.approx(first["ack_delay_raw"] * 8 / 1000)
    mirrored = next(a for a in acks if a["vantage"] == "client" and a["sender"] == "server"
                    and a["packet_number"] == first["packet_number"] and a["packet_type"] == first["packet_type"])
    assert mirrored["ack_delay_ms"] == first["ack_delay_ms"]
    assert {q["q"] for q in rows(stores["tquic"], "SELECT DISTINCT unnest(quirks) AS q FROM connections")} == {
        "tquic:ack_delay_encoding"}


# --- s2n-quic (a capture: it writes no qlog) ----------------------------------------------------------

def test_s2n_quic_initial_ack_delay_is_encoded_with_exponent_0(tmp_path, tshark):
    """s2n-quic encodes Initial and Handshake ACK delays with ack_delay_exponent 0 (s2n-quic-core
    ack::Settings::EARLY) while announcing the default 3; decoded as RFC 9000 §19.3 says (and as
    tshark, aioquic and quicack do), the delay is 8 × what it measured: longer than the server's
    whole turnaround on the wire, which the field read as µs is not."""
    with Store(tmp_path / "t.duckdb") as store:
        assert store.ingest(S2N_QUIC / "scan.pcapng", keylog=S2N_QUIC / "keys.log").status == "ingested"
        conn = rows(store, "SELECT connection_id, handshake_class, first_ack_delay_ms FROM connections")
        assert len(conn) == 1 and conn[0]["handshake_class"] == "wfc"
        turnaround = rows(store, """SELECT min(epoch_ms) FILTER (WHERE sender = 'server')
                                   - min(epoch_ms) FILTER (WHERE sender = 'client') AS t FROM packets""")[0]["t"]
        delay = conn[0]["first_ack_delay_ms"]
        assert delay > turnaround > delay / 8
