"""Reading packet captures through tshark into DuckDB: the I/O edge of the pcap path.

Theory of operation: tshark (Wireshark's dissector, Debian package ``tshark``) decrypts and
dissects the capture once and streams ``-T fields`` rows — one row per captured frame, every
field's occurrences joined by commas — through a pipe.  A thread empties the pipe; each MB or
so of rows is parsed by pyarrow's CSV reader (C++) and handed as an Arrow table to
:class:`quicack.pcap.staging.Staging` (Arrow compute for nearly every datagram, DuckDB for the rest)
while tshark goes on dissecting.  No per-packet Python runs.  A user waits for the start-up too:
``quicack analyze`` starts tshark (:class:`Dissection`), whose dissectors take a few tenths of
a second to load, before it loads DuckDB and opens the store.

``-T fields`` flattens the QUIC packets coalesced in one UDP datagram: the frame types of an
Initial, a Handshake and a 1-RTT packet come out as one list.  A small Lua tap (generated below),
called by tshark only for datagrams with more than one QUIC packet (its filter), walks their
protocol tree and writes to a side file, per QUIC packet, how many occurrences of each per-packet
field it holds (``frame number<TAB>c1.c2…;c1.c2…``); :mod:`quicack.pcap.staging` cuts the lists with
those counts, as soon as a line is written (the tap flushes it).  The usual one-packet datagram
never reaches Lua, so it costs nothing.

Secrets: ``--keylog FILE``; else a key log beside the capture (``<name>.keys``, ``<name>.keylog``,
``keys.log``, ``sslkeylog``, ``sslkeylog.log``, ``sslkeylogfile``, or the only ``*.keys`` of the
folder); a pcapng Decryption Secrets Block is used by tshark by itself.  Initial packets decrypt
without any secret (their keys derive from the client's first destination connection ID).

HTTP/3 dissection is switched off: quicack needs QUIC frames, and tshark's HTTP/3 stream
reassembly made a 40 MB transfer 25× slower (34 s instead of 1.4 s for 39k packets).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from quicack.model import QuicackError

#: Environment variable naming the tshark binary (default: ``tshark`` on PATH).
TSHARK_ENV = "QUICACK_TSHARK"
MIN_TSHARK = (3, 6)

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".pcap.gz", ".pcapng.gz", ".cap.gz")
_MAGIC = {b"\xa1\xb2\xc3\xd4": "pcap", b"\xd4\xc3\xb2\xa1": "pcap", b"\xa1\xb2\x3c\x4d": "pcap",
          b"\x4d\x3c\xb2\xa1": "pcap", b"\x0a\x0d\x0d\x0a": "pcapng"}
KEYLOG_NAMES = ("keys.log", "sslkeylog", "sslkeylog.log", "sslkeylogfile", "sslkeylogfile.txt",
                "keylog.txt")

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

#: Per-frame (captured frame = one datagram) fields, then the lists above.  Column names in
#: ``dg`` are the field names with dots replaced by underscores.
DATAGRAM_FIELDS = (
    "frame.number", "frame.time_epoch", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
    "udp.srcport", "udp.dstport", "udp.length", "icmp.type", "icmpv6.type",
    "quic.connection.number", "quic.header_form", "tls.handshake.extensions_server_name",
    "_ws.malformed",
)

ALL_FIELDS = DATAGRAM_FIELDS + PACKET_FIELDS + FRAME_FIELDS + tuple(PARAMETER_FIELDS.values())


def column(field_name: str) -> str:
    return field_name.replace(".", "_")


_LUA = """-- quicack: per-QUIC-packet field counts for datagrams holding several QUIC packets.
-- Generated by quicack/pcap.py; the field list must match PACKET_FIELDS there.
-- Every QUIC packet is its own "quic" protocol item in the tree; its fields follow it.
-- A "quic" item without a header (padding after the last packet) is not a packet.
io.stderr:write("quicack-tshark-version " .. get_version() .. "\\n")
local names = {%(names)s}
local slot = {}
for i, n in ipairs(names) do slot[n] = i; Field.new(n) end
Field.new("quic.header_form")
local out = assert(io.open([==[%(out)s]==], "w"))
local tap = Listener.new("frame", "count(quic.header_form) > 1")
function tap.packet(pinfo, tvb)
  local packets, current = {}, nil
  for _, fi in ipairs({ all_field_infos() }) do
    local name = fi.name
    if name == "quic" then
      current = { form = 0 }
      for i = 1, #names do current[i] = 0 end
      packets[#packets + 1] = current
    elseif current ~= nil then
      if name == "quic.header_form" then current.form = current.form + 1 end
      local i = slot[name]
      if i then current[i] = current[i] + 1 end
    end
  end
  local row = {}
  for _, counts in ipairs(packets) do
    if counts.form > 0 then row[#row + 1] = table.concat(counts, ".") end
  end
  out:write(pinfo.number, "\\t", table.concat(row, ";"), "\\n")
  out:flush()  -- read while tshark runs (quicack.pcap.staging.Staging.idle)
end
function tap.draw() out:flush() end
"""


def lua_script(layout_file: Path | str = "/dev/null") -> str:
    """The Lua tap writing the per-packet field counts of multi-packet datagrams to ``layout_file``."""
    return _LUA % {"names": ", ".join(f'"{n}"' for n in PACKET_FIELDS), "out": str(layout_file)}


# --- finding things ---------------------------------------------------------------------------

def capture_format(path: Path) -> str | None:
    """'pcap' or 'pcapng' (also gzip-compressed) by magic number; None if not a capture."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as g:
                head = g.read(4)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return _MAGIC.get(head)


def is_capture(path: Path) -> bool:
    return capture_format(path) is not None or path.name.lower().endswith(CAPTURE_SUFFIXES)


def find_keylog(path: Path) -> Path | None:
    """The TLS key log lying beside a capture, if there is one (see the module docstring)."""
    folder = path.parent
    stem = path.name
    for suffix in (".gz", ".pcapng", ".pcap", ".cap"):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    for name in (f"{stem}.keys", f"{stem}.keylog", f"{stem}.keys.log", *KEYLOG_NAMES):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    others = sorted(folder.glob("*.keys"))
    return others[0] if len(others) == 1 else None


_versions: dict[str, str] = {}


def tshark_binary() -> str:
    wanted = os.environ.get(TSHARK_ENV, "tshark")
    found = shutil.which(wanted)
    if not found:
        raise QuicackError(f"tshark not found ({wanted!r} is not on PATH): captures need it; install "
                           "it (Debian/Ubuntu: apt-get install tshark) or set QUICACK_TSHARK")
    return found


def tshark_version(binary: str) -> str:
    """The version tshark reports (``tshark --version``), cached per binary.  Ingest reads it
    from the Lua script instead (one tshark start less, ~0.3 s)."""
    if binary not in _versions:
        try:
            out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired) as e:
            raise QuicackError(f"cannot run tshark ({binary}): {e}") from None
        m = re.search(r"TShark \(Wireshark\) (\d+)\.(\d+)\.(\d+)", out)
        if not m:
            raise QuicackError(f"cannot tell the version of {binary}: {out.strip()[:80]!r}")
        if tuple(int(x) for x in m.groups()[:2]) < MIN_TSHARK:
            raise QuicackError(f"tshark {'.'.join(m.groups())} is too old: quicack needs tshark ≥ "
                               f"{'.'.join(map(str, MIN_TSHARK))} (QUIC v1/v2 field names)")
        _versions[binary] = ".".join(m.groups())
    return _versions[binary]


# --- staging ---------------------------------------------------------------------------------

@dataclass
class StagedCapture:
    path: str
    format: str  # 'pcap' or 'pcapng'
    tshark_version: str
    secrets: str  # 'keylog', 'dsb', 'keylog+dsb' or 'none'
    keylog: str | None
    keylog_sha256: str | None
    decode_as_ports: list[int]
    frames: int = 0  # captured frames (rows tshark wrote)
    warnings: list[str] = field(default_factory=list)
    events: int = 0  # QUIC packets stored (set by quicack.pcap.staging.normalize)
    qlog_version: str | None = None  # for the files row: captures have none


def secrets_fingerprint(path: Path, keylog: Path | None) -> str | None:
    """SHA-256 of the key log that would decrypt ``path`` (None when there is none)."""
    keylog = keylog or find_keylog(path)
    if keylog is None:
        return None
    try:
        with open(keylog, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _has_dsb(path: Path) -> bool:
    """Whether a pcapng holds a Decryption Secrets Block (type 0x0000000A) before its packets."""
    try:
        with open(path, "rb") as raw:
            compressed = raw.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if compressed else open(path, "rb")) as f:
            head = f.read(12)
            if head[:4] != b"\x0a\x0d\x0d\x0a":
                return False
            order = "little" if head[8:12] == b"\x4d\x3c\x2b\x1a" else "big"
            f.seek(0)
            for _ in range(64):  # secrets come before the packets that need them
                header = f.read(8)
                if len(header) < 8:
                    return False
                block_type = int.from_bytes(header[:4], order)
                length = int.from_bytes(header[4:], order)
                if block_type == 0x0000000A:
                    return True
                if block_type in (3, 6) or length < 12:  # packets started
                    return False
                f.seek(length - 8, 1)
    except (OSError, EOFError, gzip.BadGzipFile):
        return False
    return False


_VERSION_MARK = "quicack-tshark-version "


def _command(binary: str, path: Path, keylog: Path | None, ports: list[int], lua: str) -> list[str]:
    cmd = [binary, "-r", str(path), "-n", "-X", f"lua_script:{lua}", "--disable-protocol", "http3",
           "-T", "fields", "-E", "header=n", "-E", "separator=/t", "-E", "quote=n",
           "-E", "occurrence=a", "-E", "aggregator=,"]
    if keylog is not None:
        cmd += ["-o", f"tls.keylog_file:{keylog}"]
    for port in ports:
        cmd += ["-d", f"udp.port=={port},quic"]
    for f in ALL_FIELDS:
        cmd += ["-e", f]
    return cmd


def udp_payload_heads(path: Path, limit: int = 2000) -> list[bytes]:
    """The first five bytes of the UDP payloads in the first ``limit`` frames of a capture
    (tshark's ``udp.payload``), for telling why none of them was read as QUIC."""
    try:
        out = subprocess.run([tshark_binary(), "-r", str(path), "-n", "-c", str(limit), "-Y", "udp",
                              "-T", "fields", "-e", "udp.payload"],
                             capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    heads = []
    for line in out.splitlines():
        try:
            heads.append(bytes.fromhex(line.split(",")[0][:10]))
        except ValueError:
            continue
    return heads


def _tshark_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines()
             if ln.strip() and "Running as user" not in ln and "dangerous" not in ln
             and not ln.startswith(_VERSION_MARK)]
    return " ".join(lines)[:400]


#: Rows are staged as soon as this many bytes of them (≈ 6k frames) have arrived, or more if
#: more came while the previous batch was staged: few batches (each costs a few milliseconds
#: whatever its size), and a small one left when tshark ends — the only one not overlapped with
#: dissection.
MIN_BATCH_BYTES = 1 << 20

#: Pipe buffer asked for tshark's output (Linux F_SETPIPE_SZ): fewer wake-ups of the reader.
_PIPE_BYTES = 1 << 20

#: After a small read the pump waits this long for tshark to write more (or end): ~50 KB at
#: tshark's ~3 MB/s, far below the pipe's size, in ~4× fewer reads than after 5 ms (the pump's
#: CPU for 40k packets: ~50-90 → ~30 ms).
PUMP_WAIT_S = 0.02


def resolve(path: Path, keylog: Path | str | None = None,
            quic_ports: list[int] | tuple[int, ...] = ()) -> tuple[str, Path | None, list[int]]:
    """(tshark binary, key log, ports decoded as QUIC) for dissecting ``path``; QuicackError if
    tshark is missing or a key log given does not exist."""
    binary = tshark_binary()
    if keylog is not None and not Path(keylog).is_file():
        raise QuicackError("no such key log file", str(keylog))
    keylog = Path(keylog) if keylog is not None else find_keylog(path)
    return binary, keylog, sorted(set(quic_ports))


class Dissection:
    """One tshark run over a capture, started when made; :func:`stage` reads its rows.

    Made early (``quicack analyze`` starts tshark before it loads DuckDB, so tshark's own
    start-up overlaps quicack's), a dissection that turns out not to be needed (the capture was
    already ingested) is closed, which stops tshark.  A thread empties tshark's output pipe into
    a queue, so tshark never waits for DuckDB."""

    def __init__(self, path: Path, keylog: Path | str | None = None,
                 quic_ports: list[int] | tuple[int, ...] = ()):
        self.path = Path(path)
        self.binary, self.keylog, self.ports = resolve(self.path, keylog, quic_ports)
        self._tmp = tempfile.TemporaryDirectory(prefix="quicack-tshark-")
        lua = Path(self._tmp.name) / "quicack_layout.lua"
        self.layout_file = Path(self._tmp.name) / "layout.tsv"
        lua.write_text(lua_script(self.layout_file))
        self._buffer = bytearray()  # tshark's output not taken yet, filled by the pump thread
        self._lock = threading.Lock()
        self._ready = threading.Event()  # MIN_BATCH_BYTES in the buffer, or tshark's output closed
        self._eof = False
        self._stderr: list[bytes] = []
        self._closed = False
        try:
            self.proc = subprocess.Popen(_command(self.binary, self.path, self.keylog, self.ports, str(lua)),
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        except OSError as e:
            self._tmp.cleanup()
            raise QuicackError(f"cannot run tshark: {e}", str(path)) from None
        try:
            import fcntl
            fcntl.fcntl(self.proc.stdout.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
        except (ImportError, OSError):
            pass  # not Linux, or a lower pipe-max-size: the default pipe works too
        self._threads = [threading.Thread(target=self._pump, daemon=True),
                         threading.Thread(target=lambda: self._stderr.append(self.proc.stderr.read()), daemon=True)]
        for t in self._threads:
            t.start()

    def matches(self, path: Path, keylog: Path | str | None, quic_ports) -> bool:
        """Whether this dissection is the one :func:`stage` would start for these arguments."""
        try:
            _, wanted_keylog, ports = resolve(Path(path), keylog, quic_ports)
        except QuicackError:
            return False
        return Path(path) == self.path and wanted_keylog == self.keylog and ports == self.ports

    def _pump(self) -> None:
        ended = _exit_notice(self.proc.pid)
        try:
            while block := self.proc.stdout.read(1 << 20):
                with self._lock:
                    self._buffer += block
                    if len(self._buffer) >= MIN_BATCH_BYTES:
                        self._ready.set()
                if len(block) < _PIPE_BYTES // 8:
                    # let tshark fill the pipe: fewer, larger reads (less CPU); but not past its end
                    if ended is None:
                        time.sleep(PUMP_WAIT_S)
                    else:
                        select.select([ended], [], [], PUMP_WAIT_S)
        finally:
            if ended is not None:
                os.close(ended)
        with self._lock:
            self._eof = True
            self._ready.set()

    def blocks(self, idle=None):
        """tshark's output in blocks of whole rows: one as soon as MIN_BATCH_BYTES arrived,
        holding everything that arrived meanwhile; the rest once tshark has closed its output.
        ``idle()`` is called before waiting for tshark (work that can wait)."""
        pending = b""
        while True:
            if idle is not None and not self._ready.is_set():
                idle()
            self._ready.wait()
            with self._lock:
                taken, self._buffer = self._buffer, bytearray()
                done = self._eof
                if not done:
                    self._ready.clear()
            pending += taken
            if done:
                if pending.strip():
                    yield pending
                return
            cut = pending.rfind(b"\n") + 1
            if cut:
                block, pending = pending[:cut], pending[cut:]
                yield block

    def wait(self) -> tuple[int, str]:
        """(exit status, stderr) once tshark has ended."""
        returncode = self.proc.wait()
        for t in self._threads:
            t.join()
        return returncode, b"".join(self._stderr).decode(errors="replace")

    def close(self) -> None:
        """Stop tshark if it still runs and remove its files (again: nothing)."""
        if self._closed:
            return
        self._closed = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for t in self._threads:
            t.join()
        self.proc.stdout.close()
        self.proc.stderr.close()
        self._tmp.cleanup()

    def __enter__(self) -> "Dissection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _exit_notice(pid: int) -> int | None:
    """A file descriptor that becomes readable when process ``pid`` ends (Linux pidfd), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _parse(block: bytes, bad_rows: list[int]):
    """tshark's TSV (no quoting, empty = missing) as an Arrow table of text columns."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    names = [column(f) for f in ALL_FIELDS]

    def skip(row) -> str:
        bad_rows.append(row.number or 0)
        return "skip"
    return pacsv.read_csv(
        io.BytesIO(block),
        read_options=pacsv.ReadOptions(column_names=names, use_threads=False, block_size=len(block) + 1),
        parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False, escape_char=False,
                                         double_quote=False, newlines_in_values=False,
                                         invalid_row_handler=skip),
        convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                             strings_can_be_null=True))


def _run(con, dissection: Dissection) -> tuple[int, str | None, list[str], int]:
    """Stage every block of tshark's rows (:class:`quicack.pcap.staging.Staging`) while tshark still
    dissects, then what waited for tshark's end.  Return (frames, tshark version, warnings, UDP
    datagrams without QUIC); raise QuicackError if the capture cannot be read."""
    import pyarrow as pa

    from quicack.pcap import staging as capture

    path = dissection.path
    frames = 0
    bad_rows: list[int] = []
    staging = capture.Staging(con, dissection.layout_file)
    try:
        for block in dissection.blocks(staging.idle):
            table = _parse(block, bad_rows)
            frames += table.num_rows
            staging.add(table)
    except pa.ArrowInvalid as e:
        dissection.close()
        raise QuicackError(f"unreadable tshark output: {e}", str(path)) from None
    version, warnings = _outcome(path, frames, *dissection.wait())
    staging.finish()  # tshark has ended: its layout file is complete
    if bad_rows:
        warnings.append(f"{path}: {len(bad_rows)} rows of tshark output unreadable and skipped")
    return frames, version, warnings, staging.not_quic


def _outcome(path: Path, frames: int, returncode: int, stderr: str) -> tuple[str | None, list[str]]:
    """(tshark version, warnings) of an ended tshark run; QuicackError if it failed."""
    version = next((ln[len(_VERSION_MARK):].strip() for ln in stderr.splitlines()
                    if ln.startswith(_VERSION_MARK)), None)
    message = _tshark_error(stderr)
    warnings = []
    if returncode != 0:
        if frames and ("cut short" in message or "truncated" in message.lower()):
            warnings.append(f"{path}: {message}; kept every complete frame before it")
        elif "aren't valid" in message:
            raise QuicackError(f"tshark does not know fields quicack reads (tshark ≥ "
                               f"{'.'.join(map(str, MIN_TSHARK))} needed): {message}", str(path))
        else:
            raise QuicackError(f"tshark cannot read the capture: {message or 'exit status ' + str(returncode)}",
                               str(path))
    if version is None:
        warnings.append(f"{path}: tshark ran no Lua script (Lua disabled?): datagrams holding several "
                        "QUIC packets cannot be split and are left out")
    return version, warnings


def stage(con, path: Path, keylog: Path | None = None, quic_ports: list[int] | tuple[int, ...] = (),
          dissection: Dissection | None = None) -> StagedCapture:
    """Dissect ``path`` with tshark (or take the running ``dissection`` of it, which this closes);
    :class:`quicack.pcap.staging.Staging` turns each batch of rows into per-datagram, per-packet
    and per-frame temporary tables while tshark runs (this thread, DuckDB on one thread; tshark
    on the other core).  Raise QuicackError if the capture is unreadable."""
    from quicack.pcap import staging as capture
    from quicack.store import settings

    name = str(path)
    try:
        fmt = capture_format(path)
        if fmt is None:
            raise QuicackError("not a pcap or pcapng capture (unknown magic number)", name, "byte 0")
        if dissection is None or not dissection.matches(path, keylog, quic_ports):
            if dissection is not None:
                dissection.close()
            dissection = Dissection(path, keylog, quic_ports)
        keylog, ports = dissection.keylog, dissection.ports
        with settings.changed(con, threads=1):
            frames, version, warnings, not_quic = _run(con, dissection)
            # (only UDP that tshark did not take for QUIC can be QUIC it missed)
            forced = sorted(set(capture.ports_to_force(con)) - set(ports)) if not_quic else []
            if forced:  # tshark's heuristics missed QUIC on these ports: decode them as QUIC
                dissection.close()
                dissection = Dissection(path, keylog, sorted(set(ports) | set(forced)))
                ports = dissection.ports
                frames, version, warnings, _ = _run(con, dissection)
    finally:
        if dissection is not None:
            dissection.close()
    version = version or tshark_version(dissection.binary)
    if tuple(int(x) for x in version.split(".")[:2]) < MIN_TSHARK:
        raise QuicackError(f"tshark {version} is too old: quicack needs tshark ≥ "
                           f"{'.'.join(map(str, MIN_TSHARK))} (QUIC v1/v2 field names)", name)
    dsb = fmt == "pcapng" and _has_dsb(path)
    secrets = "+".join(s for s, present in (("keylog", keylog is not None), ("dsb", dsb)) if present) or "none"
    return StagedCapture(name, fmt, version, secrets, str(keylog) if keylog else None,
                         secrets_fingerprint(path, keylog) if keylog else None, ports, frames, warnings)
