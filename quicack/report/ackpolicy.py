"""ACK policy of a transfer: how many ACKs, how big, how often, and what they cost the return path.

Theory of operation: a transfer has a *forward* direction (the side that sent more bytes: the data
sender) and a *return* direction (the data receiver, whose packets are mostly ACKs).  From one
connection's packets — both directions, as one vantage point logged them — :func:`summarize`
computes the figures of Custura, Jones and Fairhurst's ACK-ratio studies: the ACK ratio
(ack-eliciting forward packets per return packet carrying an ACK), return-path packet sizes, ACKs
per second, forward and return bytes with the return share, and ACK ranges per ACK.  Pure: polars
frames in, figures out.

:func:`requests` lists the sender's ACK_FREQUENCY frames (draft-ietf-quic-ack-frequency-12) with
the ratio each asked for (Ack-Eliciting Threshold + 1) and the ratio the receiver then kept — until
the next request or the end — so whether it obeyed shows; IMMEDIATE_ACK frames are counted.

Bytes are QUIC packet bytes as logged; ``*_wire_bytes`` add the IPv4 + UDP headers (28 bytes) once
per datagram, as the published figures count them (smallest QUIC ACK: 51 bytes on IPv4).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

#: IPv4 (20) + UDP (8) header bytes per datagram.
IPV4_UDP_OVERHEAD_BYTES = 28


@dataclass(frozen=True)
class AckPolicy:
    forward_sender: str
    forward_packets: int
    forward_ack_eliciting_packets: int
    return_packets: int
    return_ack_packets: int
    #: ack-eliciting forward packets per return packet carrying an ACK (e.g. 2.0 for 1:2)
    ack_ratio: float | None
    forward_bytes: int
    return_bytes: int
    forward_wire_bytes: int
    return_wire_bytes: int
    #: return bytes / (forward + return bytes), on the wire, in %
    return_share_pct: float | None
    duration_ms: float
    acks_per_second: float | None
    median_return_packet_bytes: float | None
    median_ack_ranges: float | None


def summarize(packets: pl.DataFrame) -> AckPolicy | None:
    """``packets``: time_ms, sender, size_bytes, datagram_id, ack_eliciting, has_ack, ack_ranges.

    None when the connection has no packets from both sides.
    """
    if packets.height == 0 or packets["sender"].n_unique() < 2:
        return None
    by_sender = packets.group_by("sender").agg(pl.col("size_bytes").fill_null(0).sum().alias("bytes"))
    forward = by_sender.sort(["bytes", "sender"], descending=[True, False])["sender"][0]
    fwd = packets.filter(pl.col("sender") == forward)
    ret = packets.filter(pl.col("sender") != forward)
    acks = ret.filter(pl.col("has_ack"))
    eliciting = int(fwd["ack_eliciting"].fill_null(True).sum())
    fwd_bytes, ret_bytes = int(fwd["size_bytes"].fill_null(0).sum()), int(ret["size_bytes"].fill_null(0).sum())
    fwd_wire = fwd_bytes + IPV4_UDP_OVERHEAD_BYTES * fwd["datagram_id"].n_unique()
    ret_wire = ret_bytes + IPV4_UDP_OVERHEAD_BYTES * ret["datagram_id"].n_unique()
    duration = float(packets["time_ms"].max() - packets["time_ms"].min())
    return AckPolicy(
        forward_sender=forward,
        forward_packets=fwd.height,
        forward_ack_eliciting_packets=eliciting,
        return_packets=ret.height,
        return_ack_packets=acks.height,
        ack_ratio=eliciting / acks.height if acks.height else None,
        forward_bytes=fwd_bytes,
        return_bytes=ret_bytes,
        forward_wire_bytes=fwd_wire,
        return_wire_bytes=ret_wire,
        return_share_pct=100.0 * ret_wire / (fwd_wire + ret_wire) if fwd_wire + ret_wire else None,
        duration_ms=duration,
        acks_per_second=acks.height / (duration / 1000.0) if duration > 0 else None,
        median_return_packet_bytes=_median(ret["size_bytes"]),
        median_ack_ranges=_median(acks["ack_ranges"]),
    )


def over_time(packets: pl.DataFrame, forward_sender: str, bin_ms: float) -> pl.DataFrame:
    """Per time bin: ack-eliciting forward packets, return ACK packets, their ratio, ACKs/s."""
    binned = packets.with_columns((pl.col("time_ms") // bin_ms * bin_ms).alias("bin_ms"))
    out = binned.group_by("bin_ms").agg(
        ((pl.col("sender") == forward_sender) & pl.col("ack_eliciting").fill_null(True)).sum().alias("eliciting"),
        ((pl.col("sender") != forward_sender) & pl.col("has_ack")).sum().alias("acks"),
    ).sort("bin_ms")
    return out.with_columns(
        pl.when(pl.col("acks") > 0).then(pl.col("eliciting") / pl.col("acks")).otherwise(None).alias("ack_ratio"),
        (pl.col("acks") / (bin_ms / 1000.0)).alias("acks_per_second"),
    )


def _median(series: pl.Series) -> float | None:
    series = series.drop_nulls()
    return float(series.median()) if len(series) else None


def requests(packets: pl.DataFrame, frames: pl.DataFrame, forward_sender: str) -> pl.DataFrame:
    """Per ACK_FREQUENCY frame the data sender sent (``frames``: time_ms, sender, frame_type,
    sequence_number, ack_eliciting_threshold, request_max_ack_delay_ms, reordering_threshold):
    the ratio asked for, and the ACK ratio measured over ``packets`` from it to the next request
    (or the end), with the IMMEDIATE_ACK frames of that span.  Frames of a sequence number seen
    before (a retransmission the receiver ignores, §4) are left out."""
    mine = frames.filter((pl.col("sender") == forward_sender)
                         & pl.col("frame_type").is_in(["ack_frequency", "immediate_ack"])).sort("time_ms")
    asked = mine.filter(pl.col("frame_type") == "ack_frequency").unique("sequence_number", keep="first",
                                                                         maintain_order=True)
    rows = []
    times = asked["time_ms"].to_list() + [float("inf")]
    for i, row in enumerate(asked.iter_rows(named=True)):
        start, end = times[i], times[i + 1]
        span = packets.filter((pl.col("time_ms") >= start) & (pl.col("time_ms") < end))
        eliciting = span.filter((pl.col("sender") == forward_sender) & pl.col("ack_eliciting").fill_null(True)).height
        acks = span.filter((pl.col("sender") != forward_sender) & pl.col("has_ack")).height
        immediate = mine.filter((pl.col("frame_type") == "immediate_ack") & (pl.col("time_ms") >= start)
                                & (pl.col("time_ms") < end)).height
        rows.append({"time_ms": start, "sequence_number": row["sequence_number"],
                     "requested_ratio": row["ack_eliciting_threshold"] + 1
                     if row["ack_eliciting_threshold"] is not None else None,
                     "request_max_ack_delay_ms": row["request_max_ack_delay_ms"],
                     "reordering_threshold": row["reordering_threshold"],
                     "measured_ratio": eliciting / acks if acks else None, "immediate_acks": immediate})
    return pl.DataFrame(rows, schema={"time_ms": pl.Float64, "sequence_number": pl.Int64,
                                      "requested_ratio": pl.Int64, "request_max_ack_delay_ms": pl.Float64,
                                      "reordering_threshold": pl.Int64, "measured_ratio": pl.Float64,
                                      "immediate_acks": pl.Int64})
