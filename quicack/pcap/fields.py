"""The vocabulary of the capture path: the tshark fields quicack reads and the QUIC tables both
staging paths decode them with.

Theory of operation: tshark is asked for a fixed list of ``-T fields`` fields (:data:`ALL_FIELDS`);
each becomes a text column of the same name with dots replaced by underscores (:func:`column`).
The fields fall in three kinds by how often they occur in a captured frame (one UDP datagram):
once per datagram (:data:`DATAGRAM_FIELDS`), once per QUIC packet at most (:data:`PACKET_FIELDS`:
the Lua layout of :mod:`quicack.pcap.tshark` counts them per packet, which is how a datagram's
coalesced packets are told apart), and once per QUIC frame of a family (:data:`FRAME_FIELDS`,
in frame order).  The frame, packet type and frame family tables below are what the fast path
(:mod:`quicack.pcap.fastpath`, Arrow) and the general path (:mod:`quicack.pcap.generalpath`,
SQL) both decode with, so the two give the same rows.  A leaf: nothing here imports quicack.
"""

from __future__ import annotations

#: Fields that occur once per QUIC packet at most: the Lua layout counts them per packet (each
#: packet is its own ``quic`` protocol item in tshark's tree; the fields follow it).
PACKET_FIELDS = (
    "quic.packet_length", "quic.version", "quic.long.packet_type", "quic.long.packet_type_v2",
    "quic.dcid", "quic.scid", "quic.packet_number", "quic.decryption_failed", "quic.frame_type",
    "tls.handshake.type",
)

#: Fields that occur once per QUIC frame of a given type (or of an ACK's ranges), in frame order.
FRAME_FIELDS = (
    "quic.ack.largest_acknowledged", "quic.ack.ack_delay", "quic.ack.ack_range_count",
    "quic.ack.first_ack_range", "quic.ack.gap", "quic.ack.ack_range", "quic.ack.ect0_count",
    "quic.ack.ect1_count", "quic.ack.ecn_ce_count", "quic.crypto.offset", "quic.crypto.length",
    "quic.stream.stream_id", "quic.stream.offset", "quic.stream.length", "quic.padding_length",
    "quic.nci.sequence", "quic.rci.sequence", "quic.af.sequence_number",
    "quic.af.ack_eliciting_threshold", "quic.af.request_max_ack_delay", "quic.cc.error_code",
    "quic.cc.error_code.app", "quic.cc.frame_type",
)

#: Transport parameters (TLS extension quic_transport_parameters), once per ClientHello /
#: EncryptedExtensions.  Column name → tshark field.
PARAMETER_FIELDS = {
    "max_ack_delay": "tls.quic.parameter.max_ack_delay",
    "ack_delay_exponent": "tls.quic.parameter.ack_delay_exponent",
    "min_ack_delay": "tls.quic.parameter.min_ack_delay",
    "initial_max_data": "tls.quic.parameter.initial_max_data",
    "max_udp_payload_size": "tls.quic.parameter.max_udp_payload_size",
    "max_idle_timeout": "tls.quic.parameter.max_idle_timeout",
    "active_connection_id_limit": "tls.quic.parameter.active_connection_id_limit",
    "initial_max_stream_data_bidi_local": "tls.quic.parameter.initial_max_stream_data_bidi_local",
    "initial_max_stream_data_bidi_remote": "tls.quic.parameter.initial_max_stream_data_bidi_remote",
    "initial_max_stream_data_uni": "tls.quic.parameter.initial_max_stream_data_uni",
    "initial_max_streams_bidi": "tls.quic.parameter.initial_max_streams_bidi",
    "initial_max_streams_uni": "tls.quic.parameter.initial_max_streams_uni",
    "max_datagram_frame_size": "tls.quic.parameter.max_datagram_frame_size",
    "original_destination_connection_id": "tls.quic.parameter.original_destination_connection_id",
    "initial_source_connection_id": "tls.quic.parameter.initial_source_connection_id",
}

#: Fields once per captured frame (one datagram); :data:`ALL_FIELDS` puts them first, then the
#: lists above.
DATAGRAM_FIELDS = (
    "frame.number", "frame.time_epoch", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
    "udp.srcport", "udp.dstport", "udp.length", "icmp.type", "icmpv6.type",
    "quic.connection.number", "quic.header_form", "tls.handshake.extensions_server_name",
    "_ws.malformed",
)

ALL_FIELDS = DATAGRAM_FIELDS + PACKET_FIELDS + FRAME_FIELDS + tuple(PARAMETER_FIELDS.values())


def column(field_name: str) -> str:
    return field_name.replace(".", "_")


#: Largest UDP payload of one datagram on a 1500-byte MTU path (IPv4: 1500 − 20 − 8).
MAX_SINGLE_DATAGRAM_PAYLOAD = 1472

#: RFC 9000 §12.4 / §19 frame type → qlog frame name (quic-events: QuicFrame types).
FRAME_NAMES = {
    0x00: "padding", 0x01: "ping", 0x02: "ack", 0x03: "ack", 0x04: "reset_stream",
    0x05: "stop_sending", 0x06: "crypto", 0x07: "new_token",
    **{t: "stream" for t in range(0x08, 0x10)},
    0x10: "max_data", 0x11: "max_stream_data", 0x12: "max_streams", 0x13: "max_streams",
    0x14: "data_blocked", 0x15: "stream_data_blocked", 0x16: "streams_blocked",
    0x17: "streams_blocked", 0x18: "new_connection_id", 0x19: "retire_connection_id",
    0x1a: "path_challenge", 0x1b: "path_response", 0x1c: "connection_close",
    0x1d: "connection_close", 0x1e: "handshake_done",
    0x1f: "immediate_ack",  # draft-ietf-quic-ack-frequency
    0x30: "datagram", 0x31: "datagram",  # RFC 9221
    0xaf: "ack_frequency",  # draft-ietf-quic-ack-frequency
}

#: Long header packet types: RFC 9000 §17.2 (v1 and the drafts) and RFC 9369 §3.2 (v2).
LONG_TYPES_V1 = {0: "initial", 1: "0RTT", 2: "handshake", 3: "retry"}
LONG_TYPES_V2 = {1: "initial", 2: "0RTT", 3: "handshake", 0: "retry"}

#: Frame families: the frame types that carry a given tshark field (the ACK fields: both ACK
#: types; the ECN counts: ACK_ECN; a STREAM frame's offset and length: the types with the OFF and
#: LEN bits, RFC 9000 §19.8).
FAMILIES = {
    "ack": (2, 3), "ecn": (3,), "crypto": (6,), "stream": tuple(range(8, 16)),
    "stream_off": tuple(t for t in range(8, 16) if t & 4), "stream_len": tuple(t for t in range(8, 16) if t & 2),
    "padding": (0,), "nci": (24,), "rci": (25,), "af": (175,), "cc": (28,), "cc_app": (29,),
}

#: Frame types that do not elicit an ACK (RFC 9002 §2: ACK, PADDING, CONNECTION_CLOSE).
NOT_ELICITING = (0x00, 0x02, 0x03, 0x1c, 0x1d)

#: Frame columns taken from per-frame fields: column → (tshark field, family) pairs, the first
#: whose family holds the frame giving the value.  Besides these: a STREAM frame without the OFF
#: bit has offset 0 (RFC 9000 §19.8), FIN is the type's low bit, request_max_ack_delay_ms is the
#: field (µs) / 1000, details a JSON object (CONNECTION_CLOSE: its error codes).
FRAME_VALUES = {
    "largest": (("quic.ack.largest_acknowledged", "ack"),),
    "ack_delay_raw": (("quic.ack.ack_delay", "ack"),),
    "ecn_ce": (("quic.ack.ecn_ce_count", "ecn"),),
    "offset_bytes": (("quic.crypto.offset", "crypto"), ("quic.stream.offset", "stream_off")),
    "length_bytes": (("quic.crypto.length", "crypto"), ("quic.stream.length", "stream_len"),
                     ("quic.padding_length", "padding")),
    "stream_id": (("quic.stream.stream_id", "stream"),),
    "sequence_number": (("quic.nci.sequence", "nci"), ("quic.rci.sequence", "rci"),
                        ("quic.af.sequence_number", "af")),
    "ack_eliciting_threshold": (("quic.af.ack_eliciting_threshold", "af"),),
    "range_count": (("quic.ack.ack_range_count", "ack"),),
    "first_range": (("quic.ack.first_ack_range", "ack"),),
}

#: Frame types whose details are NULL (their fields have columns of their own).
PLAIN_FRAME_TYPES = (0, 1, 2, 3, 6, *range(8, 16))
