"""The native path of capture staging: quicack's own capture reader instead of tshark.

Theory of operation: ``quicack._native.CaptureReader`` (Rust, ``native/src/capture/``) reads
the capture file itself — pcap/pcapng records, link, IP and UDP headers, QUIC headers and
coalesced packets, Initial keys from the client's DCID, the other keys from the key log or a
pcapng Decryption Secrets Block, header protection, AEAD, frames, the TLS messages inside
CRYPTO — and hands back, batch by batch, the rows of the same temporary tables the tshark path
fills (``c_dgram``, ``c_tp``, ``c_pkt``, ``c_frame``: :func:`quicack.pcap.staging.begin`), with
a connection number worked out as tshark's is (connection IDs followed).  Everything after
staging (:mod:`quicack.pcap.connections`, :mod:`quicack.pcap.normalize`) is shared.  What the
reader does not read (a link type, a QUIC version it does not know) raises
:class:`Unsupported` with the reason, and the caller has tshark read the capture instead.  A
damaged capture is read up to the damage (a warning names the byte offset), or refused with
that offset if nothing before it could be read.  The reader runs a batch ahead on a thread of its
own (it lets go of the GIL while it reads), so reading the next batch and inserting this one share
the two cores.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from quicack.model import QuicackError

#: Datagrams per batch handed from the reader to DuckDB.
BATCH_DATAGRAMS = 32768

#: What capture_files.tshark_version holds for captures the native reader read.
READER_VERSION = "native"


class Unsupported(Exception):
    """The native reader does not read this capture (the message says why)."""


def stage(con, path: Path, keylog: Path | None, quic_ports,
          stop: Callable[[], object] | None = None) -> tuple[int, str, list[str]] | None:
    """Stage ``path`` into the temporary tables (already created), UDP on ``quic_ports`` read as
    QUIC whatever it holds; return (frames read, reader version, warnings), or None if ``stop()``,
    asked after each batch, said to stop (the capture's SHA-256, hashed meanwhile, is one already
    stored).  Raise :class:`Unsupported` if tshark must read it, QuicackError if it is no
    capture."""
    reader = open_reader(path, keylog, quic_ports)
    batches = read_ahead(reader)
    try:
        for batch in batches:
            if stop is not None and stop():
                return None
            for quicack_rows, target in zip(batch, ("c_dgram", "c_tp", "c_pkt", "c_frame")):
                if quicack_rows.num_rows:  # (c_dgram: not the packet types the streamed rows take)
                    columns = "* EXCLUDE (packet_types)" if target == "c_dgram" else "*"
                    con.execute(f"INSERT INTO {target} SELECT {columns} FROM quicack_rows")
    finally:
        batches.close()
    return outcome(reader, path)


def open_reader(path: Path, keylog: Path | None, quic_ports):
    """The native reader of ``path`` (QuicackError naming the byte offset if it is no capture)."""
    from quicack._native import CaptureReader

    try:
        return CaptureReader(str(path), Path(keylog).read_bytes() if keylog else None, list(quic_ports))
    except ValueError as e:
        offset, what = e.args
        raise QuicackError(what, str(path), f"byte {offset}") from None


def outcome(reader, path: Path) -> tuple[int, str, list[str]]:
    """Once the reader is done: (frames read, reader version, warnings); :class:`Unsupported` if
    it found what it does not read, QuicackError if the damage left nothing before it."""
    if reader.unsupported:
        raise Unsupported(reader.unsupported)
    warnings = []
    if reader.damage is not None:
        offset, what = reader.damage
        if not reader.frames:
            raise QuicackError(what, str(path), f"byte {offset}")
        warnings.append(f"{path}: byte {offset}: {what}; kept every complete frame before it ({reader.frames})")
    return reader.frames, READER_VERSION, warnings


def read_ahead(reader) -> Iterator[tuple]:
    """The reader's batches as Arrow tables (c_dgram, c_tp, c_pkt, c_frame), each read on a thread
    while the caller works on the one before; none once the reader finds what it does not read."""
    from quicack.core.native import table

    batches = _ahead(reader)
    try:
        for batch in batches:
            if reader.unsupported:
                return
            yield tuple(table(columns) for columns in batch)
    finally:
        batches.close()


def _ahead(reader) -> Iterator[tuple]:
    """The reader's batches, the next one read on a thread while the caller works on this one; an
    error of the reader is raised here, and closing the generator stops the thread."""
    ready: queue.Queue = queue.Queue(maxsize=1)
    closed = threading.Event()

    def read() -> None:
        try:
            while not closed.is_set():
                batch = reader.batch(BATCH_DATAGRAMS)
                ready.put(("batch", batch))
                if batch is None or reader.unsupported:
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            ready.put(("error", e))

    thread = threading.Thread(target=read, daemon=True, name="capture-reader")
    thread.start()
    try:
        while True:
            kind, value = ready.get()
            if kind == "error":
                raise value
            if value is None:
                return
            yield value
    finally:
        closed.set()
        while thread.is_alive():  # (a reader waiting to put its batch is let go)
            try:
                ready.get(timeout=0.05)
            except queue.Empty:
                pass
