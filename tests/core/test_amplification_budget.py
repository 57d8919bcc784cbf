"""The anti-amplification budget (RFC 9000 §8.1), worked by hand, then replayed.

The hand-worked example is the handshake of ``tests/data/local/aioquic-amplification`` (an
instant-ACK server with a 12-certificate chain), datagram by datagram, UDP payloads:

====  ======  ===========================================================  =======  ========  ======
t ms  from    datagram (coalesced packets; padding)                         payload  received  sent
====  ======  ===========================================================  =======  ========  ======
0.0   client  Initial 276 B (ClientHello) + 924 B of padding after it       1200     1200      0
0.2   server  Initial 50 B: ACK only (the instant ACK)                        50      1200      50
2.4   server  Initial 138 B (ServerHello) + Handshake 1062 B, coalesced     1200     1200      1250
2.4   server  Handshake 1200 B (certificates)                               1200     1200      2450
2.4   server  Handshake 1150 B (certificates)                               1150     1200      3600
====  ======  ===========================================================  =======  ========  ======

Budget 3 × 1200 = 3600 B: after the last line 0 B are left, less than a full 1200-byte datagram —
the server is at the limit with the rest of its chain unsent.  Had the padding not been counted
(276 B received), the budget would have been 828 B and the coalesced 1200-byte datagram alone would
have broken it (that is why §8.1 counts whole datagrams).  Without its instant ACK the server would
have had 50 B left: still less than a datagram, so the ACK did not cause the block.  The client's
next datagram (Initial ACK + Handshake ACK + padding, 1200 B) holds a Handshake packet: the address
is validated on it (RFC 9000 §8.1), and the server sends its remaining certificates.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quicack.core.amplification import Datagram, prefix_budget, replay_budget, server_order

HAND_WORKED = [
    Datagram(0.0, "client", 276 + 924),
    Datagram(0.2, "server", 50, ack_only_initial=True),
    Datagram(2.4, "server", 138 + 1062, new_data=True),
    Datagram(2.41, "server", 1200, new_data=True),
    Datagram(2.42, "server", 1150, new_data=True),
    Datagram(14.0, "client", 50 + 49 + 1101, validates=True),
    Datagram(14.5, "server", 1200, new_data=True),
    Datagram(14.6, "server", 1002 + 53, new_data=True),
]


def test_hand_worked_budget_with_padding_and_coalesced_packets():
    b = replay_budget(HAND_WORKED)
    assert (b.client_bytes, b.server_bytes) == (1200, 50 + 1200 + 1200 + 1150)
    assert b.server_bytes == 3 * b.client_bytes and b.factor == 3.0
    assert b.limit_reached and not b.limit_exceeded
    assert (b.validated_ms, b.validated_by) == (14.0, "handshake")
    [block] = b.blocks
    assert (block.start_ms, block.end_ms, block.remaining_bytes, block.ended_by) == (2.42, 14.0, 0, "validation")
    assert b.blocked_ms == pytest.approx(14.0 - 2.42)
    assert b.iack_bytes == 50 and not b.iack_caused_block


def test_padding_left_out_breaks_the_budget():
    """The same datagrams counting only the Initial packet (what a trace without the padding shows)."""
    unpadded = [HAND_WORKED[0]._replace(size_bytes=276), *HAND_WORKED[1:]]
    b = replay_budget(unpadded)
    assert b.limit_exceeded and b.max_excess_bytes == 3600 - 3 * 276


def test_an_instant_ack_that_spends_the_last_datagram_of_budget():
    """1200 B in, an instant ACK of 50 B, then three 1200-byte datagrams would be 3650 B: a server
    counting its ACK sends two and is blocked with 1150 B left, which the ACK's 50 B would have
    made a third full datagram."""
    datagrams = [Datagram(0, "client", 1200), Datagram(0.1, "server", 50, ack_only_initial=True),
                 Datagram(1, "server", 1200, new_data=True), Datagram(1.1, "server", 1200, new_data=True),
                 Datagram(10, "client", 1200), Datagram(10.2, "server", 1200, new_data=True)]
    b = replay_budget(datagrams)
    assert [blk.remaining_bytes for blk in b.blocks] == [1150]
    assert b.blocks[0].ended_by == "client_datagram" and b.iack_caused_block


def test_a_server_that_does_not_count_its_instant_ack_exceeds_three_times():
    datagrams = [Datagram(0, "client", 1200), Datagram(0.1, "server", 50, ack_only_initial=True),
                 *[Datagram(1 + i, "server", 1200, new_data=True) for i in range(3)]]
    b = replay_budget(datagrams)
    assert b.limit_exceeded and b.max_excess_bytes == 50


def test_a_server_at_the_limit_with_nothing_more_to_send_was_not_blocked():
    datagrams = [Datagram(0, "client", 1200), *[Datagram(1 + i, "server", 1200, new_data=True) for i in range(3)],
                 Datagram(10, "client", 100, validates=True), Datagram(11, "server", 60)]
    b = replay_budget(datagrams)
    assert b.limit_reached and b.blocks == ()


def test_a_trace_that_ends_at_the_limit_ends_blocked():
    """The deadlock shape: nothing more from the client, the server never sends again."""
    datagrams = [Datagram(0, "client", 1200), *[Datagram(1 + i, "server", 1200, new_data=True) for i in range(3)]]
    b = replay_budget(datagrams)
    [block] = b.blocks
    assert block.end_ms is None and b.blocked_ms is None and b.validated_ms is None


def test_a_token_validates_from_the_first_datagram():
    b = replay_budget(HAND_WORKED, token_validated=True)
    assert (b.validated_by, b.server_bytes, b.blocks) == ("token", 0, ())


def test_a_client_side_view_is_put_in_the_server_order():
    """At the client (RTT 13 ms, server times then shifted by it): the server's last datagrams
    arrive at 15.4 ms, after the client's validating datagram left at 14.0 ms — yet the server
    sent them long before that datagram reached it.  Taking the RTT off restores the server's order."""
    client_view = sorted((d._replace(time_ms=d.time_ms + (13.0 if d.sender == "server" else 0.0))
                          for d in HAND_WORKED), key=lambda d: d.time_ms)  # a trace's order
    b = replay_budget(server_order(client_view, 13.0))
    assert (b.client_bytes, b.server_bytes) == (1200, 3600)
    assert b.blocked_ms == pytest.approx(14.0 - 2.42)
    unordered = replay_budget(client_view)
    assert unordered.server_bytes < 3600  # the server's last datagrams "arrive after" validation


def test_a_request_ends_no_block_and_an_answer_begun_later_was_not_waiting():
    """At the limit with 300 B left, the server's next data follows the client's request: what it
    sends then answers the request (a stream begun after the block), and its QPACK bytes are new —
    no block.  The same server whose answer had begun before the limit, resumed after a datagram
    without a request and too large for what was left, was blocked."""
    start = [Datagram(0, "client", 1200), Datagram(1, "server", 1200, new_data=True, data_started_ms=1),
             Datagram(1.1, "server", 1200, new_data=True, data_started_ms=1),
             Datagram(1.2, "server", 900, new_data=True, new_bytes=850, data_started_ms=1.2)]
    answered = replay_budget(start + [Datagram(20, "client", 1200, validates=True, request=True),
                                      Datagram(21, "server", 400, new_data=True, new_bytes=3, data_started_ms=1.2)])
    assert answered.limit_reached and answered.blocks == ()
    later = replay_budget(start + [Datagram(20, "client", 1200, validates=True),
                                   Datagram(21, "server", 400, new_data=True, new_bytes=3, data_started_ms=30)])
    assert later.blocks == ()  # a stream begun after the block started was not waiting in it
    small = replay_budget(start + [Datagram(20, "client", 1200, validates=True),
                                   Datagram(21, "server", 400, new_data=True, new_bytes=3, data_started_ms=1.2)])
    assert small.blocks == ()  # 3 B (+ a packet's 33 B) would have fitted in the 300 B left
    waited = replay_budget(start + [Datagram(20, "client", 1200, validates=True),
                                    Datagram(21, "server", 400, new_data=True, new_bytes=350, data_started_ms=1.2)])
    [block] = waited.blocks
    assert (block.remaining_bytes, block.pending_bytes, block.ended_by) == (300, 383, "validation")


def test_the_server_order_moves_when_the_data_began_with_the_datagram():
    """A capture near the server: its datagrams move by the small clock shift, and so does the
    time their data began — the block (CRYPTO begun with the first flight) stays a block."""
    seen = [Datagram(0.0, "client", 1200), Datagram(7.0, "server", 1200, new_data=True, data_started_ms=7.0),
            Datagram(7.01, "server", 1200, new_data=True, data_started_ms=7.0),
            Datagram(7.02, "server", 1200, new_data=True, data_started_ms=7.0),
            Datagram(27.8, "client", 1280, validates=True),
            Datagram(28.7, "server", 1200, new_data=True, new_bytes=1150, data_started_ms=7.0)]
    [block] = replay_budget(server_order(seen, 0.35)).blocks
    assert block.start_ms == pytest.approx(7.02 - 0.35) and block.end_ms == 27.8


def test_the_hand_worked_budget_is_settled_once_the_server_sent_what_waited():
    # validated at 14.0 with a block pending; the server's new bytes at 14.5 show it
    assert prefix_budget(HAND_WORKED[:6]) is None
    assert prefix_budget(HAND_WORKED[:7]) == replay_budget(HAND_WORKED)
    assert prefix_budget(HAND_WORKED[:5]) is None  # not validated yet


_DATAGRAM = st.builds(Datagram, st.integers(0, 60).map(float), st.sampled_from(["client", "server"]),
                      st.sampled_from([50, 600, 1200, 1252]), st.booleans(), st.booleans(), st.booleans(),
                      st.sampled_from([0, 10, 900]), st.sampled_from([None, 0.0, 20.0]), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(_DATAGRAM, max_size=14), st.booleans())
def test_a_settled_prefix_gives_the_whole_budget(datagrams, token):
    # what the store's first look relies on: once prefix_budget answers, the rest changes nothing
    datagrams = sorted(datagrams, key=lambda d: d.time_ms)
    whole = replay_budget(datagrams, token)
    for k in range(1, len(datagrams) + 1):
        settled = prefix_budget(datagrams[:k], token)
        assert settled is None or settled == whole
