"""Handshake classes, gaps and first PTOs of real traces, through `Store.ingest` (the whole path).

Expected values were read off the files with the json module (times as written in the file; no
quicack code involved):

* qvis ``parallel_10_50KB_f5.qlog`` (aioquic client, draft-01 event_fields, string numbers):
  ``[2, packet_sent initial 0 crypto@0]``, ``[171, packet_received retry]``, ``[174, packet_sent
  initial 0 crypto@0]``, ``[346, packet_received initial 0, 47 B, ack [[0,0]] ack_delay 0]``,
  ``[348, packet_received initial 1, 202 B, crypto offset 0]``: an instant ACK 2 ms before the
  ServerHello, after a Retry.  First sample 346 − 174 = 172 ms → PTO 172 × 3 = 516 ms; had the ACK
  come with the ServerHello: 174 ms → 522 ms.
* local aioquic handshake, client qlog: ``packet_sent initial 0`` at 1795331576835.0037,
  ``packet_received initial 0 [ack ack_delay 11.991999999999999, crypto offset 0]`` at
  1795331576854.4766: WFC, first sample 19.4729 ms, first ACK delay 11.992 ms; server qlog:
  ``packet_received initial 0`` at +4.3582 ms, ``packet_sent initial 0 [ack 11.999443999968662,
  crypto]`` at +12.8516 ms (relative to its first event).
* pcap2qlog 0.1 ``20181219_handshake_v6…``: ``[119, PACKET_RX Initial pn 0 CRYPTO offset 0]`` then
  ``[119, PACKET_RX Initial pn 1 ACK largest 0 ack_delay 3060]``: ServerHello before the ACK, the
  same millisecond; 3060 × 2^3 µs = 24.48 ms.
* pcap2qlog draft-02 ``ngtcp2-29-dsb.qlog``: trace 0 ends with the server's Retry; trace 1's first
  server Initial (pn 0) holds ``ack`` and ``crypto`` offset 0 — a HelloRetryRequest, as the capture
  it was made from shows (``tshark -r ngtcp2-29-dsb.pcapng -T fields -e frame.number -e
  frame.time_relative -e quic.packet_number -e quic.ack.largest_acknowledged -e quic.crypto.offset
  -e tls.handshake.type``, its Decryption Secrets Block decrypts it): frame 1 the ClientHello (key
  share secp256r1), 2 the Retry, 3 the ClientHello again, 4 server Initial pn 0 ACK 1 + handshake
  type 2 at offset 0 (the HelloRetryRequest), 5 client Initial pn 2 with a second ClientHello at
  offset 301 (x25519), 6 (13.657144 ms) server Initial pn 1 ACK 2 + the ServerHello at
  offset 56, coalesced with the Handshake packet.
"""

from __future__ import annotations

import orjson
import pytest

from conftest import DATA, rows
from quicack import Store

QVIS = DATA / "qvis/visualizations/public/standalone_data/draft-01"
LOCAL = DATA / "local/aioquic-aioquic-handshake"
PCAP2QLOG = DATA / "pcap2qlog/examples"


def one(store: Store, path, **where) -> list[dict]:
    store.ingest(path)
    cond = " AND ".join(f"c.{k} = '{v}'" for k, v in where.items()) or "true"
    return rows(store, f"""SELECT c.* FROM connections c JOIN files f USING (file_id)
                           WHERE f.path = '{path}' AND {cond} ORDER BY connection_id""")


def test_qvis_client_sees_an_instant_ack_after_a_retry(store):
    (c,) = one(store, QVIS / "parallel_10_50KB_f5.qlog")
    assert (c["handshake_class"], c["handshake_reason"], c["handshake_notes"]) == ("iack", "instant_ack", ["after_retry"])
    assert c["ack_sh_gap_ms"] == 2.0
    assert c["first_ack_frames"] == "ack" and c["first_ack_packet_number"] == 0
    assert c["first_ack_acknowledges_first_initial"] is True and c["first_ack_delay_ms"] == 0.0
    assert (c["first_server_packet_ms"], c["server_hello_ms"]) == (169.0, 346.0)
    assert (c["replay_endpoint"], c["first_rtt_sample_ms"], c["first_pto_ms"]) == ("client", 172.0, 516.0)
    assert c["counterfactual_first_pto_ms"] == 522.0


def test_aioquic_handshake_is_wfc_from_both_sides(store):
    (client,) = one(store, LOCAL / "qlog_client/e60faf3e02b8978c.qlog")
    (server,) = one(store, LOCAL / "qlog_server/e60faf3e02b8978c.qlog")
    for c in (client, server):
        assert (c["handshake_class"], c["ack_sh_gap_ms"], c["first_ack_frames"]) == ("wfc", 0.0, "ack+crypto")
        assert c["server_max_ack_delay_ms"] == 25.0 and c["server_ack_delay_exponent"] == 3
        assert c["ack_frequency_supported"] is False  # aioquic sends no min_ack_delay
    assert client["first_ack_delay_ms"] == pytest.approx(11.992)
    assert client["first_ack_delay_exponent"] is None  # decoded by aioquic, not by quicack
    assert server["first_ack_delay_ms"] == pytest.approx(11.999444, abs=1e-6)
    assert client["first_rtt_sample_ms"] == pytest.approx(1795331576854.4766 - 1795331576835.0037, abs=1e-3)
    assert client["first_pto_ms"] == pytest.approx(3 * client["first_rtt_sample_ms"])
    # wfc counterfactual: sample − the ACK delay the server reported, not below the later min_rtt
    samples = rows(store, f"SELECT * FROM rtt_samples WHERE connection_id = {client['connection_id']} ORDER BY event_index")
    later_min = min(s["min_rtt_ms"] for s in samples)
    expected = max(client["first_rtt_sample_ms"] - client["first_ack_delay_ms"], later_min)
    assert client["counterfactual_first_pto_ms"] == pytest.approx(3 * expected)
    assert server["counterfactual_first_pto_ms"] is None  # a server's own first PTO has no such twin
    assert server["first_server_packet_ms"] == pytest.approx(12.8516 - 4.3582, abs=1e-3)



def test_aioquic_client_handshake_milestones(store):
    # From the client qlog's events (index, time, packet, frames): 4 packet_sent initial
    # [crypto@0]; 7 packet_received initial [ack, crypto@0] (first ACK and ServerHello); 19
    # packet_sent handshake [ack, crypto@0] (its Finished); 25 packet_received 1RTT [ack,
    # handshake_done, …]; 39 packet_received 1RTT [ack, stream 7, stream 0] (the first server
    # STREAM frame on a client bidirectional stream: 15 carried only streams 3, 7 and 11).
    events = orjson.loads((LOCAL / "qlog_client/e60faf3e02b8978c.qlog").read_bytes())["traces"][0]["events"]

    def first(name: str, kind: str | None, frame) -> int:
        return next(i for i, e in enumerate(events) if e["name"] == f"transport:{name}"
                    and kind in (None, e["data"]["header"]["packet_type"]) and any(map(frame, e["data"]["frames"])))
    t0 = events[first("packet_sent", "initial", lambda f: True)]["time"]
    ack = first("packet_received", "initial", lambda f: f["frame_type"] == "ack")
    hello = first("packet_received", "initial", lambda f: f["frame_type"] == "crypto" and f["offset"] == 0)
    finished = first("packet_sent", "handshake", lambda f: f["frame_type"] == "crypto")
    done = first("packet_received", None, lambda f: f["frame_type"] == "handshake_done")
    response = first("packet_received", None, lambda f: f["frame_type"] == "stream" and f["stream_id"] % 4 == 0)
    assert (ack, hello, finished, done, response) == (7, 7, 19, 25, 39)
    (c,) = one(store, LOCAL / "qlog_client/e60faf3e02b8978c.qlog")
    assert (c["first_ack_event_index"], c["server_hello_event_index"]) == (ack, hello)
    got = [c[k] for k in ("server_hello_ms", "handshake_complete_ms", "handshake_done_ms", "first_response_byte_ms")]
    assert got == pytest.approx([events[i]["time"] - t0 for i in (hello, finished, done, response)], abs=1e-6)


def test_picoquic_server_announces_min_ack_delay(store):
    # qlog_trace_ref.txt, a server trace: its own ("local") parameters_set holds "max_ack_delay" :
    # 10 and "min_ack_delay" : 1000 (µs, draft-ietf-quic-ack-frequency), no ack_delay_exponent.
    (c,) = one(store, DATA / "picoquic/picoquictest/qlog_trace_ref.txt")
    assert (c["server_max_ack_delay_ms"], c["server_ack_delay_exponent"], c["server_min_ack_delay_ms"],
            c["ack_frequency_supported"]) == (10.0, None, 1.0, True)

def test_pcap2qlog_serverhello_before_ack_with_a_raw_ack_delay(store):
    (c,) = one(store, PCAP2QLOG / "20181219_handshake_v6_quicker.edm.uhasselt.be.qlog")
    assert (c["handshake_class"], c["handshake_reason"]) == ("sh_before_ack", "ack_after_server_hello")
    assert c["ack_sh_gap_ms"] == 0.0 and c["first_ack_packet_number"] == 1
    assert c["first_ack_delay_ms"] == pytest.approx(24.48) and c["first_ack_delay_exponent"] == 3


def test_retry_trace_and_the_retried_connection(store):
    first, second = one(store, PCAP2QLOG / "draft-02/ngtcp2-29-dsb.qlog")
    assert (first["handshake_class"], first["handshake_reason"]) == ("retry", "retry_without_handshake")
    # the round after the HelloRetryRequest: the ACK of the second ClientHello (pn 2) comes with
    # the ServerHello in server Initial pn 1
    assert (second["handshake_class"], second["handshake_notes"]) == ("wfc", ["after_hello_retry_request"])
    assert (second["first_ack_packet_number"], second["first_ack_largest_acknowledged"]) == (1, 2)


def test_retry_then_hello_retry_request_in_the_capture(store):
    (c,) = one(store, PCAP2QLOG / "draft-02/ngtcp2-29-dsb.pcapng")
    assert (c["handshake_class"], c["handshake_notes"]) == ("wfc", ["after_retry", "after_hello_retry_request"])
    assert (c["first_ack_packet_number"], c["first_ack_largest_acknowledged"]) == (1, 2)
    assert c["server_hello_ms"] == pytest.approx(13.657144) and c["ack_sh_gap_ms"] == 0.0


@pytest.mark.parametrize("name", ["ack_range", "multi_stream", "new_cid", "ngtcp2_test", "spin_bit"])
def test_ngtcp2_network_traces_are_wfc(store, name):
    # MANIFEST: "All server first Initials: ACK coalesced with ServerHello."
    (c,) = one(store, PCAP2QLOG / f"draft-01/{name}.qlog")
    assert c["handshake_class"] == "wfc" and c["replay_endpoint"] == "client" and c["replay_samples"] > 0


def test_summary_by_class_in_analyze_output(tmp_path):
    from click.testing import CliRunner

    from quicack.cli import main
    result = CliRunner().invoke(main, ["analyze", str(QVIS / "parallel_10_50KB_f5.qlog"),
                                       str(LOCAL / "qlog_client"), "--db", str(tmp_path / "q.duckdb")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = lines.index("handshakes by class:")
    table = lines[start + 1:start + 4]
    assert table[0].split() == ["class", "connections", "median_gap_ms", "median_first_ack_delay_ms", "median_first_pto_ms"]
    assert table[1].split() == ["iack", "1", "2.000", "0.000", "516.000"]
    assert table[2].split()[:2] == ["wfc", "1"]


ZEEK = DATA / "zeek/testing/btest/Traces/quic"


@pytest.mark.usefixtures("tshark")
def test_zeek_cloudflare_capture_is_an_instant_ack(store):
    # tshark -r firefox-…-cloudflare-com.pcap -Y quic -T fields -e frame.time_relative -e udp.srcport
    #   -e quic.long.packet_type -e quic.packet_number -e quic.frame_type -e quic.ack.ack_delay:
    #   0.023224 443 0 0 2 79   (Initial pn 0: ACK only, raw delay 79 → 79 × 2^3 µs = 0.632 ms)
    #   0.024100 443 0 1 6      (Initial pn 1: CRYPTO, the ServerHello) → gap 0.876 ms
    (c,) = one(store, ZEEK / "firefox-102.13.0esr-blog-cloudflare-com.pcap")
    assert (c["handshake_class"], c["handshake_reason"], c["first_ack_frames"]) == ("iack", "instant_ack", "ack")
    assert c["ack_sh_gap_ms"] == pytest.approx(0.876, abs=1e-6)
    assert c["first_ack_delay_ms"] == pytest.approx(0.632) and c["first_ack_delay_exponent"] == 3
    assert c["first_server_packet_ms"] == pytest.approx(23.224, abs=1e-6)
    # the client's view: first sample 23.224 ms → PTO 69.672; with WFC it would have been
    # 24.100 ms → 72.300 ms
    assert c["first_rtt_sample_ms"] == pytest.approx(23.224, abs=1e-6)
    assert c["counterfactual_first_pto_ms"] == pytest.approx(3 * 24.100, abs=1e-6)


@pytest.mark.usefixtures("tshark")
@pytest.mark.parametrize("name, sh_ms", [("curl-8.1.2-dev-http3-www-google-de.pcap", 40.222),
                                         ("quic_win11_firefox_google.pcap", None)])
def test_zeek_google_captures_wait_for_the_certificate(store, name, sh_ms):
    # curl/Google: 0.040222 443 Initial pn 1 frames 2,6,0 (ACK, CRYPTO, PADDING), ack_delay 0
    (c,) = one(store, ZEEK / name)
    assert (c["handshake_class"], c["ack_sh_gap_ms"]) == ("wfc", 0.0)
    if sh_ms is not None:
        assert c["server_hello_ms"] == pytest.approx(sh_ms, abs=1e-6) and c["first_ack_delay_ms"] == 0.0
