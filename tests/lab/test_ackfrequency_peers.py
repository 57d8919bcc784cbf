"""The ACK_FREQUENCY exchange with a third-party stack: the quinn peer (quinn 0.11.12, its
``AckFrequencyConfig``, tests/peers/quinn ``--ack-frequency N,MAX_DELAY_MS``) asks quicack's
aioquic client for one ACK per 10 packets.  A client with the ``ack-frequency`` policy advertises
``min_ack_delay``, receives the frame and follows it; a client with another policy advertises
nothing, so quinn asks nothing (draft-ietf-quic-ack-frequency-12 §3) and the client keeps its own
ratio.  The ratios are measured in the client's own qlog: ack-eliciting 1-RTT packets received
after the first ACK_FREQUENCY frame per 1-RTT packet sent with an ACK."""

from __future__ import annotations

import asyncio

import pytest

from quicack.lab import endpoints, peers

BIG = ("ack-frequency.bin", 600_000)


def _frames(trace: dict, direction: str) -> list[tuple[float, list[dict]]]:
    return [(e["time"], e["data"].get("frames", [])) for e in trace["events"]
            if e["name"] == f"transport:packet_{direction}" and e["data"]["header"]["packet_type"] == "1RTT"]


def _ratio_after(trace: dict, start: float) -> float:
    received = [f for t, f in _frames(trace, "received")
                if t >= start and any(x["frame_type"] not in ("ack", "padding") for x in f)]
    acks = [f for t, f in _frames(trace, "sent") if t >= start and any(x["frame_type"] == "ack" for x in f)]
    return len(received) / len(acks)


@pytest.fixture(scope="module")
def quinn_asking(tmp_path_factory):
    """The quinn peer asking for 1:10 within 25 ms: one GET of 600 kB by each client policy."""
    with peers.start("quinn", tmp_path_factory.mktemp("quinn-ack-frequency"), args=("--ack-frequency", "10,25")) as run:
        name, size = BIG
        (run.workdir / "htdocs" / name).write_bytes(bytes(size))
        got = {}
        for policy in ("ack-frequency", "ratio:2"):
            one = asyncio.run(endpoints.attempt(run.host, run.port, f"/{name}", 20.0, ack_policy=policy))
            assert one.result.outcome == "ok" and one.result.response_bytes == size, one.result
            got[policy] = one.result.trace
    return got


def test_quinn_asks_an_ack_frequency_client_and_the_ratio_follows(quinn_asking):
    trace = quinn_asking["ack-frequency"]
    asked = [(t, x) for t, f in _frames(trace, "received") for x in f if x["frame_type"] == "ack_frequency"]
    assert asked, "quinn sent no ACK_FREQUENCY"
    first_time, first = asked[0]
    assert first["sequence_number"] == 0 and first["ack_eliciting_threshold"] == 9
    assert 1.0 <= first["request_max_ack_delay"] <= 25.0  # ms: quinn caps it by the RTT, floors it at ours
    assert [x["sequence_number"] for _, x in asked] == sorted({x["sequence_number"] for _, x in asked})
    assert 7.0 <= _ratio_after(trace, first_time) <= 10.5


def test_quinn_asks_nothing_of_a_client_that_does_not_advertise_min_ack_delay(quinn_asking):
    trace = quinn_asking["ratio:2"]
    assert not [x for _, f in _frames(trace, "received") for x in f if x["frame_type"] in ("ack_frequency",
                                                                                          "immediate_ack")]
    assert 1.7 <= _ratio_after(trace, 0.0) <= 2.2
