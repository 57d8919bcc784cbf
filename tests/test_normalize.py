"""quicack.normalize: datagram ids derived from packets (the rules of RFC 9000 §12.2 coalescing
as logged), over hand-built rows whose expected datagrams are spelled out per case."""

import pyarrow as pa

from quicack.normalize import _datagram_ids

CARRIED = ("datagrams", "last_direction", "last_t", "last_rank", "last_checksum", "last_rx_seq")
TYPES = {"event_index": pa.int64(), "connection_id": pa.int64(), "direction": pa.string(), "sender": pa.string(),
         "packet_type": pa.string(), "dcid": pa.string(), "t_ms": pa.float64(), "rank": pa.int32(),
         "checksum": pa.int64(), "rx_seq": pa.int64(), "datagrams": pa.int64(), "last_direction": pa.string(),
         "last_t": pa.float64(), "last_rank": pa.int32(), "last_checksum": pa.int64(), "last_rx_seq": pa.int64()}
RANK = {"initial": 0, "0RTT": 1, "handshake": 2, "1RTT": 3}


def rows(packets, carried=None):
    """packets: (connection_id, event_index, direction, t_ms, packet_type, checksum, rx_seq);
    carried: connection_id -> (datagrams, last_direction, last_t, last_rank, last_checksum, last_rx_seq)."""
    carried = carried or {}
    columns = {name: [] for name in TYPES}
    for cid, event, direction, t, kind, checksum, rx_seq in packets:
        values = dict(event_index=event, connection_id=cid, direction=direction,
                      sender="client" if direction == "sent" else "server", packet_type=kind, dcid=None, t_ms=t,
                      rank=RANK[kind], checksum=checksum, rx_seq=rx_seq)
        values.update(zip(CARRIED, carried.get(cid, (0, None, None, None, None, None))))
        for name in TYPES:
            columns[name].append(values[name])
    return pa.table({name: pa.array(values, TYPES[name]) for name, values in columns.items()})


def ids(table):
    out = _datagram_ids(table)
    return {(c, e): (s, d) for c, e, s, d in zip(*(out.column(n).to_pylist() for n in
                                                   ("connection_id", "event_index", "starts", "derived_datagram_id")))}


def test_same_time_in_coalescing_order_shares_a_datagram():
    got = ids(rows([(1, 0, "received", 5.0, "initial", None, None),
                    (1, 1, "received", 5.0, "handshake", None, None),  # coalesced behind the Initial
                    (1, 2, "received", 5.0, "initial", None, None),  # Initial after Handshake: a new datagram
                    (1, 3, "sent", 5.0, "1RTT", None, None)]))  # other direction: a new datagram
    assert got == {(1, 0): (1, 0), (1, 1): (0, 0), (1, 2): (1, 1), (1, 3): (1, 2)}


def test_checksum_and_datagrams_received_group_packets_and_missing_values_never_do():
    got = ids(rows([(1, 0, "received", 1.0, "1RTT", 7, None),
                    (1, 1, "received", 2.0, "1RTT", 7, None),  # same checksum (quic-go)
                    (1, 2, "received", 3.0, "1RTT", None, None),  # no checksum: not the same
                    (1, 3, "received", 4.0, "1RTT", None, 4),
                    (1, 4, "received", 5.0, "1RTT", None, 4),  # after the same datagrams_received
                    (1, 5, "received", 6.0, "1RTT", None, 0),
                    (1, 6, "received", 7.0, "1RTT", None, 0)]))  # none logged yet (0): times decide
    assert [got[(1, e)] for e in range(7)] == [(1, 0), (0, 0), (1, 1), (1, 2), (0, 2), (1, 3), (1, 4)]


def test_each_connection_counts_its_own_datagrams_from_what_an_earlier_slice_carried():
    # connection 2's first packet continues the datagram its previous slice ended with
    carried = {2: (10, "received", 9.0, 0, None, None)}
    got = ids(rows([(1, 0, "sent", 1.0, "initial", None, None),
                    (2, 1, "received", 9.0, "handshake", None, None),
                    (1, 2, "sent", 1.0, "handshake", None, None),
                    (2, 3, "received", 9.5, "1RTT", None, None)], carried))
    assert got == {(1, 0): (1, 0), (1, 2): (0, 0), (2, 1): (0, 9), (2, 3): (1, 10)}


def test_no_packets():
    assert _datagram_ids(rows([])).num_rows == 0
