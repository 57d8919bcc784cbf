"""The fast path of capture staging: tshark's rows to datagram, packet and frame rows, in Arrow.

Theory of operation: nearly every datagram of a transfer holds one QUIC packet whose per-frame
fields (``quicack.pcap.fields.FRAME_FIELDS``: ACK, CRYPTO, STREAM, …) hold one value each, so a
field's value belongs to the one frame of its family and no list needs cutting.  :func:`split`
turns such rows of a batch into the rows of ``c_dgram``, ``c_tp``, ``c_pkt`` and ``c_frame``
(:mod:`quicack.pcap.staging`) with vectorized Arrow compute — a few milliseconds a batch, where
the SQL of the general path (:mod:`quicack.pcap.generalpath`) costs DuckDB tens of milliseconds
of planning and set-up a batch whatever its size — and hands back the other UDP rows (several
QUIC packets, a field repeated, a number that does not parse) for the general path, which gives
the same rows for any datagram (tests hold the two to that).  Each table has exactly the columns of its temporary table, ACK ranges and frame
details (JSON text) included, so it goes in with a plain ``INSERT … SELECT *`` (a statement
with lambdas costs DuckDB milliseconds of planning per batch).  A value is taken from a field
with one ``take`` (NULL index: no value); ``if_else`` on taken values, lists above all, is
many times slower.  Pure: Arrow tables in, Arrow tables out.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from quicack.pcap.fields import (FAMILIES, FRAME_FIELDS, FRAME_NAMES, FRAME_VALUES, LONG_TYPES_V1, LONG_TYPES_V2,
                                 MAX_SINGLE_DATAGRAM_PAYLOAD, NOT_ELICITING, PARAMETER_FIELDS, PLAIN_FRAME_TYPES,
                                 column)

#: The fields of an ACK frame's further ranges (RFC 9000 §19.3.1): one value per range, so an
#: ACK frame (one per packet on the fast path) may list several.
_RANGE_FIELDS = ("quic.ack.gap", "quic.ack.ack_range")

_I32, _I64, _BOOL, _STR = pa.int32(), pa.int64(), pa.bool_(), pa.string()


@dataclass
class Rows:
    datagrams: pa.Table  # the columns of c_dgram
    parameters: pa.Table  # the columns of c_tp: the datagrams with transport parameters
    packets: pa.Table  # the columns of c_pkt
    frames: pa.Table  # the columns of c_frame
    held: pa.Table  # tshark's columns: the UDP rows left to the general path


def udp(batch: pa.Table) -> pa.Array:
    """The rows of tshark's columns that quicack reads: UDP datagrams, not inside an ICMP error
    (``quicack.pcap.generalpath._UDP`` in SQL)."""
    return pc.and_(pc.is_valid(batch["udp_srcport"]),
                   pc.and_(pc.is_null(batch["icmp_type"]), pc.is_null(batch["icmpv6_type"])))


def split(batch: pa.Table) -> Rows:
    """The rows of the fast path for ``batch`` (tshark's columns, all text) and the UDP rows
    it leaves to the general path."""
    udp_rows = udp(batch)
    general = _has_comma(batch["quic_header_form"])
    for f in FRAME_FIELDS:
        if f not in _RANGE_FIELDS:
            general = pc.or_(general, _has_comma(batch[column(f)]))
    fast = pc.and_(udp_rows, pc.invert(general))
    try:
        rows = _where(batch, fast)
        odd = _odd_ranges(rows)
        if pc.any(odd).as_py():
            fast = pc.is_in(_arange(len(batch)), pc.indices_nonzero(fast).filter(pc.invert(odd)))
            rows = _where(batch, fast)
        out = _rows(rows)
    except (pa.ArrowInvalid, ValueError):  # a number that does not parse: TRY_CAST's business
        fast = pc.and_(udp_rows, False)
        out = _rows(batch.slice(0, 0).combine_chunks())
    out.held = _where(batch, pc.and_(udp_rows, pc.invert(fast)))
    return out


def number_packets(batch: pa.Table, first: int) -> tuple[pa.Table, int]:
    """``batch`` with ``quicack_event``: each UDP row's first packet's position in the capture,
    counting from ``first`` the QUIC packets of the rows before it (one per ``quic.header_form``
    value: each QUIC packet has one); and the count after the batch.  A datagram's packets are
    its ``event_index`` values from there on, whichever path stages it and whenever (the position
    of a datagram whose packets cannot be cut is skipped: quicack.pcap.normalize numbers them again)."""
    header_form = batch["quic_header_form"]
    # "0,1,1": (length + 1) // 2 values, as the general path counts them
    packets = pc.if_else(udp(batch), pc.fill_null(pc.divide(pc.add(pc.cast(pc.utf8_length(header_form), _I64), 1), 2), 0),
                         pa.scalar(0, _I64))
    after = pc.cumulative_sum(packets, start=first) if len(batch) else pa.array([], _I64)
    events = pc.subtract(after, packets)
    last = after[-1].as_py() if len(batch) else first
    return batch.append_column("quicack_event", events), last


def _where(table: pa.Table, mask: pa.Array) -> pa.Table:
    """The rows of ``table`` where ``mask`` is true, in one chunk (no copy when the mask takes all
    or none: filtering tshark's many text columns is not free)."""
    taken = pc.sum(pc.cast(mask, _I64), min_count=0).as_py()
    if taken == len(table):
        return table if all(c.num_chunks == 1 for c in table.columns) else table.combine_chunks()
    if not taken:
        return table.slice(0, 0).combine_chunks()
    return table.filter(mask).combine_chunks()


def _one_chunk(values: pa.ChunkedArray) -> pa.Array:
    return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()


def _ranges(rows: pa.Table, field: str) -> pa.ListArray:
    return pc.cast(pc.split_pattern(_one_chunk(rows.column(column(field))), ","), pa.list_(_I64))


def _odd_ranges(rows: pa.Table) -> pa.Array:
    """Datagrams whose ACK frame's further ranges the fast path does not take: not as many gaps
    and lengths as its ACK Range Count says, or no Largest Acknowledged or First ACK Range."""
    count = pc.fill_null(pc.cast(rows.column("quic_ack_ack_range_count").combine_chunks(), _I64), 0)
    odd = pc.and_(pc.greater(count, 0), pc.or_(pc.is_null(rows.column("quic_ack_largest_acknowledged")),
                                                 pc.is_null(rows.column("quic_ack_first_ack_range"))))
    for field in _RANGE_FIELDS:
        listed = pc.fill_null(pc.list_value_length(_ranges(rows, field)), 0)
        odd = pc.or_(odd, pc.not_equal(pc.cast(listed, _I64), count))
    return odd


@dataclass
class _Packet:
    """What a fast-path row's one QUIC packet is, which its packet, frame and datagram rows share."""
    frame_number: pa.Array
    header_form: pa.Array
    quic: pa.Array  # a QUIC packet (a header) in the datagram
    version: pa.Array
    packet_type: pa.Array
    types: pa.ListArray  # its frame types
    type_value: pa.Array  # the frame types flattened (one per frame)
    frame_count: pa.Array
    undecrypted: pa.Array


def _rows(table: pa.Table) -> Rows:
    rows = {name: _one_chunk(table.column(name)) for name in table.column_names}
    packet = _packet(rows)
    values = {f: pc.cast(rows[column(f)], pa.float64() if f == "quic.af.request_max_ack_delay" else _I64)
              for f in FRAME_FIELDS if f not in _RANGE_FIELDS}
    values.update({f: _ranges(table, f) for f in _RANGE_FIELDS})
    return Rows(_datagrams(rows, packet, values), _parameters(rows, packet.frame_number),
                _packets(rows, packet), _frames(packet, values), table.slice(0, 0))


def _packet(rows: dict) -> _Packet:
    header_form = pc.cast(rows["quic_header_form"], _I32)
    version = _version(rows["quic_version"])
    packet_type = _packet_type(header_form, version, pc.cast(rows["quic_long_packet_type"], _I32),
                               pc.cast(rows["quic_long_packet_type_v2"], _I32))
    types = pc.cast(pc.split_pattern(rows["quic_frame_type"], ","), pa.list_(_I64))
    frame_count = pc.cast(pc.fill_null(pc.list_value_length(types), 0), _I32)
    undecrypted = _true(pc.and_(pc.equal(frame_count, 0),
                                pc.invert(pc.is_in(packet_type, pa.array(["retry", "version_negotiation"])))))
    return _Packet(pc.cast(rows["frame_number"], _I64), header_form, pc.is_valid(header_form), version,
                   packet_type, types, pc.list_flatten(types), frame_count, undecrypted)


def _frames(packet: _Packet, v: dict[str, pa.Array]) -> pa.Table:
    """One row per frame type listed, the values of its family's fields (``v``: per field, its
    value in each row)."""
    types, type_value = packet.types, packet.type_value
    parents = pc.list_parent_indices(types)
    starts = pc.subtract(types.offsets, types.offsets[0])
    position = pc.cast(pc.subtract(_arange(len(type_value)), starts.take(parents)), _I32)
    family = {name: pc.is_in(type_value, pa.array(ts, _I64)) for name, ts in FAMILIES.items()}
    # Per family, each frame's datagram (NULL for a frame not of the family): one take gives a
    # field's values (if_else on the taken values is several times slower, on lists far more).
    parent_in = {name: pc.if_else(mask, parents, pa.scalar(None, parents.type)) for name, mask in family.items()}

    def at(field: str, name: str) -> pa.Array:
        return v[field].take(parent_in[name])

    def first(name: str) -> pa.Array:
        values = [at(f, fam) for f, fam in FRAME_VALUES[name]]
        if name == "offset_bytes":
            values.append(pc.if_else(family["stream"], pa.scalar(0, _I64), pa.scalar(None, _I64)))
        return values[0] if len(values) == 1 else pc.coalesce(*values)
    return pa.table({
        "frame_number": packet.frame_number.take(parents),
        "idx": pa.repeat(pa.scalar(1, _I64), len(type_value)),
        "packet_type": packet.packet_type.take(parents),
        "position": position,
        "frame_type": _frame_names(type_value),
        **{name: first(name) for name in ("largest", "ack_delay_raw")},
        "ranges": _ack_ranges(family["ack"], first("largest"), first("first_range"), first("range_count"),
                              at("quic.ack.gap", "ack"), at("quic.ack.ack_range", "ack")),
        **{name: first(name) for name in ("ecn_ce", "offset_bytes", "length_bytes", "stream_id")},
        "fin": pc.if_else(family["stream"], pc.equal(pc.bit_wise_and(type_value, 1), 1), pa.scalar(None, _BOOL)),
        "sequence_number": first("sequence_number"),
        "ack_eliciting_threshold": first("ack_eliciting_threshold"),
        "request_max_ack_delay_ms": pc.divide(at("quic.af.request_max_ack_delay", "af"), 1000.0),
        "details": _details(type_value, at("quic.cc.error_code", "cc"), at("quic.cc.frame_type", "cc"),
                            at("quic.cc.error_code.app", "cc_app")),
    })


def _packets(rows: dict, packet: _Packet) -> pa.Table:
    """One row per datagram with a QUIC header."""
    n = len(packet.frame_number)
    eliciting = pc.greater(_count(packet.types, pc.invert(pc.is_in(packet.type_value,
                                                                    pa.array(NOT_ELICITING, _I64)))), 0)
    return pa.table({
        "frame_number": packet.frame_number, "idx": pa.repeat(pa.scalar(1, _I64), n),
        "packet_type": packet.packet_type, "header_form": packet.header_form,
        "size_bytes": pc.cast(rows["quic_packet_length"], _I32),
        "version": packet.version, "version_text": rows["quic_version"], "dcid": rows["quic_dcid"],
        "packet_number": pc.cast(rows["quic_packet_number"], _I64),
        "decryption_failed": pc.is_valid(rows["quic_decryption_failed"]),
        "frame_count": packet.frame_count, "undecrypted": packet.undecrypted,
        "eliciting": pc.if_else(pc.equal(packet.frame_count, 0), pa.scalar(None, _BOOL), eliciting),
        "event_index": rows["quicack_event"] if "quicack_event" in rows else pa.nulls(n, _I64),
    }).filter(packet.quic)


def _datagrams(rows: dict, packet: _Packet, v: dict[str, pa.Array]) -> pa.Table:
    """One row per datagram: what each tells about who is client and server, GSO."""
    n = len(packet.frame_number)
    quic, packet_type, undecrypted = packet.quic, packet.packet_type, packet.undecrypted
    tls_types = pc.split_pattern(rows["tls_handshake_type"], ",")
    udp_payload = pc.subtract(pc.cast(_last(rows["udp_length"]), _I32), pa.scalar(8, _I32))
    initial = _true(pc.equal(packet_type, "initial"))
    crypto = pc.greater(_count(packet.types, pc.equal(packet.type_value, 6)), 0)
    return pa.table({
        "frame_number": packet.frame_number,
        "epoch_ns": _epoch_ns(rows["frame_time_epoch"]),
        "src_ep": _endpoint(rows, "src"), "dst_ep": _endpoint(rows, "dst"),
        "src_port": pc.cast(_last(rows["udp_srcport"]), _I32),
        "dst_port": pc.cast(_last(rows["udp_dstport"]), _I32),
        "udp_payload_bytes": udp_payload,
        "tshark_connection": pc.cast(_first(rows["quic_connection_number"]), _I32),
        "server_name": _first(rows["tls_handshake_extensions_server_name"]),
        "packets": pc.cast(quic, _I32),
        "split_ok": pa.repeat(pa.scalar(True), n),
        "starts": pc.and_(pc.and_(initial, crypto), _true(pc.equal(v["quic.crypto.offset"], 0))),
        "has_server_hello": pc.or_(_true(_contains(tls_types, "2")),
                                   pc.is_in(packet_type, pa.array(["retry", "version_negotiation"]))),
        "has_client_hello": pc.or_(_true(_contains(tls_types, "1")), _true(pc.equal(packet_type, "0RTT"))),
        "has_initial": initial,
        "gso": pc.and_(_true(pc.greater(udp_payload, MAX_SINGLE_DATAGRAM_PAYLOAD)), pc.and_(quic, undecrypted)),
        "parsed": pc.cast(quic, _I32),
        "decrypted": pc.cast(pc.and_(quic, pc.invert(undecrypted)), _I32),
        "malformed": pc.is_valid(rows["_ws_malformed"]),
    })


def _parameters(rows: dict, frame_number: pa.Array) -> pa.Table:
    """One row per datagram carrying transport parameters."""
    with_parameters = pc.indices_nonzero(_any_valid([rows[column(f)] for f in PARAMETER_FIELDS.values()]))
    return pa.table({"frame_number": frame_number.take(with_parameters),
                     **{f"tp_{name}": _first(rows[column(f)].take(with_parameters))
                        for name, f in PARAMETER_FIELDS.items()}})


def _any_valid(arrays: list[pa.Array]) -> pa.Array:
    out = pc.is_valid(arrays[0])
    for a in arrays[1:]:
        out = pc.or_(out, pc.is_valid(a))
    return out


def _ack_ranges(is_ack: pa.Array, largest: pa.Array, first_range: pa.Array, count: pa.Array,
                gaps: pa.ListArray, lengths: pa.ListArray) -> pa.ListArray:
    """Each ACK frame's ranges as [[low, high], …], lowest first (NULL for other frames).

    RFC 9000 §19.3.1: "Each ACK Range consists of alternating Gap and ACK Range Length values
    in descending packet number order"; the First ACK Range ends at Largest Acknowledged, and
    each further range k lies Gap_k + 2 below the smallest packet of the range before it and
    spans ACK Range Length_k more.  The fast path only holds ACK frames listing as many gaps and
    lengths as their ACK Range Count (``gaps``, ``lengths``: the frame's lists)."""
    n = len(is_ack)
    extra = pc.cast(pc.if_else(is_ack, pc.fill_null(count, 0), 0), _I64)  # further ranges per frame
    out_offsets = pa.concat_arrays([pa.array([0], _I64),
                                    pc.cumulative_sum(pc.if_else(is_ack, pc.add(extra, 1), 0))])
    total = out_offsets[-1].as_py()
    base = pc.subtract(largest, first_range)  # the First ACK Range's smallest packet
    # The further ranges, flattened in frame order: each one's distance below ``base``.
    gap = pc.list_flatten(gaps)
    length = pc.list_flatten(lengths)
    m = len(gap)
    owner = pc.list_parent_indices(gaps)
    step = pc.add(pc.add(gap, 2), length)
    running = pc.cumulative_sum(step) if m else pa.array([], _I64)
    list_start = pc.subtract(gaps.offsets, gaps.offsets[0])  # per frame, its first element
    before = pc.subtract(running, step)
    below = pc.subtract(running, before.take(list_start.take(owner))) if m else pa.array([], _I64)
    low = pc.subtract(base.take(owner), below)
    high = pc.add(low, length)
    # Output pair q of frame f is its range extra[f] - q (the last one: the First ACK Range).
    q_frame = pc.list_parent_indices(pa.ListArray.from_arrays(pc.cast(out_offsets, pa.int32()), _arange(total)))
    q = pc.subtract(_arange(total), out_offsets.take(q_frame))
    q_extra = extra.take(q_frame)
    first_pair = pc.equal(q, q_extra)
    source = pc.if_else(first_pair, pc.add(q_frame, m),
                        pc.subtract(pc.add(pc.cast(list_start, _I64).take(q_frame), q_extra), pc.add(q, 1)))
    lows = pa.concat_arrays([low.cast(_I64), base.cast(_I64)]).take(source)
    highs = pa.concat_arrays([high.cast(_I64), largest.cast(_I64)]).take(source)
    j = _arange(2 * total)
    pair_values = pa.concat_arrays([lows, highs]).take(
        pc.add(pc.divide(j, 2), pc.multiply(pc.bit_wise_and(j, 1), total)))
    pairs = pa.ListArray.from_arrays(pc.cast(pc.multiply(_arange(total + 1), 2), pa.int32()), pair_values)
    return pa.ListArray.from_arrays(pc.cast(out_offsets, pa.int32()), pairs, mask=pc.invert(is_ack)) \
        if n else pa.array([], pa.list_(pa.list_(_I64)))


def _details(type_value: pa.Array, error_code: pa.Array, trigger_frame_type: pa.Array,
             app_error_code: pa.Array) -> pa.Array:
    """A frame's details as the general path's SQL writes them (quicack.pcap.generalpath._details):
    NULL for frames with columns of their own, else a JSON object with the frame type
    (CONNECTION_CLOSE: its error space and codes)."""
    def text(values: pa.Array) -> pa.Array:
        return pc.cast(values, _STR)

    def join(*parts) -> pa.Array:
        return pc.binary_join_element_wise(*parts, "", null_handling="replace", null_replacement="null")
    head = join('{"frame_type_value":', text(type_value))
    return pc.case_when(
        pc.make_struct(pc.is_in(type_value, pa.array(PLAIN_FRAME_TYPES, _I64)), pc.equal(type_value, 28),
                       pc.equal(type_value, 29)),
        pa.scalar(None, _STR),
        join(head, ',"error_space":"transport","error_code":', text(error_code),
             ',"trigger_frame_type":', text(trigger_frame_type), "}"),
        join(head, ',"error_space":"application","error_code":', text(app_error_code), "}"),
        join(head, "}"))


def _epoch_ns(text: pa.Array) -> pa.Array:
    """tshark's frame.time_epoch (seconds, up to 9 decimals) as nanoseconds."""
    parts = pc.split_pattern(text, ".", max_splits=1)
    seconds = pc.cast(pc.list_element(parts, 0), _I64)
    digits = pc.utf8_slice_codeunits(pc.utf8_rpad(pc.fill_null(pc.list_element(parts, 1), ""), 9, "0"), 0, 9)
    if not pc.all(pc.match_substring_regex(digits, "^[0-9]{9}$"), min_count=0).as_py():
        raise ValueError("frame.time_epoch")
    return pc.add(pc.multiply(seconds, 1_000_000_000), pc.cast(digits, _I64))


def _true(mask) -> pa.Array:
    """A boolean mask with NULL taken as false (SQL's coalesce(…, false))."""
    return pc.fill_null(mask, False)


def _has_comma(values) -> pa.Array:
    return _true(pc.match_substring(values, ","))


def _arange(n: int) -> pa.Array:
    return pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, _I64), n)), 1) if n else pa.array([], _I64)


def _count(lists: pa.ListArray, flags: pa.Array) -> pa.Array:
    """Per list, how many of its elements are flagged (``flags``: one per flattened element)."""
    running = pa.concat_arrays([pa.array([0], _I64), pc.cumulative_sum(pc.cast(_true(flags), _I64))])
    bounds = pc.subtract(lists.offsets, lists.offsets[0])
    return pc.subtract(running.take(bounds[1:]), running.take(bounds[:-1]))


def _contains(lists: pa.ListArray, value: str) -> pa.Array:
    """Whether each list holds ``value`` (NULL for a NULL list)."""
    hit = pc.greater(_count(lists, pc.equal(pc.list_flatten(lists), value)), 0)
    return pc.if_else(pc.is_null(lists), pa.scalar(None, _BOOL), hit)


def _first(values) -> pa.Array:
    """The first of comma-separated values (tshark's occurrences of a field)."""
    if pc.any(_has_comma(values)).as_py():
        return pc.replace_substring_regex(values, ",.*", "")
    return values


def _last(values) -> pa.Array:
    """The last of comma-separated values (e.g. the innermost IP header's address)."""
    if pc.any(_has_comma(values)).as_py():
        return pc.replace_substring_regex(values, "^.*,", "")
    return values


def _endpoint(rows: dict, side: str) -> pa.Array:
    address = pc.coalesce(_last(rows[f"ipv6_{side}"]), _last(rows[f"ip_{side}"]), pa.scalar("?"))
    return pc.binary_join_element_wise(address, _last(rows[f"udp_{side}port"]), "#")


def _version(text: pa.Array) -> pa.Array:
    """tshark's hexadecimal version text (``0x00000001``) as a number; NULL if it is none."""
    codes = pc.dictionary_encode(text)

    def number(s: str) -> int | None:
        try:
            return int(s[2:], 16) if s[:2].lower() == "0x" else int(s)
        except ValueError:
            return None
    return pa.array([number(s) for s in codes.dictionary.to_pylist()], _I64).take(codes.indices)


def _packet_type(header_form, version, long_type, long_type_v2) -> pa.Array:
    """quicack.pcap.generalpath's packet type: 1RTT, version_negotiation, the long header types, unknown."""
    def named(codes, names: dict[int, str]) -> pa.Array:
        table = pa.array([names.get(i) for i in range(4)], _STR)
        inside = _true(pc.and_(pc.greater_equal(codes, 0), pc.less(codes, 4)))
        return table.take(pc.if_else(inside, codes, pa.scalar(None, _I32)))
    return pc.case_when(
        pc.make_struct(_true(pc.equal(header_form, 0)), _true(pc.equal(version, 0)),
                       pc.is_valid(long_type), pc.is_valid(long_type_v2)),
        "1RTT", "version_negotiation", named(long_type, LONG_TYPES_V1), named(long_type_v2, LONG_TYPES_V2),
        "unknown")


def _frame_names(types: pa.Array) -> pa.Array:
    """FRAME_NAMES of frame types ('unknown' for others)."""
    names = pa.array([FRAME_NAMES.get(t, "unknown") for t in range(257)], _STR)
    inside = _true(pc.and_(pc.greater_equal(types, 0), pc.less(types, 256)))
    return names.take(pc.if_else(inside, types, pa.scalar(256, _I64)))
