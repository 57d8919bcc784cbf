"""The native capture reader against the tshark path (issue 33): every capture of tests/data and
../shared/traces ingested both ways gives the same rows in every store table; what the reader
leaves to tshark falls back with the reason; ``quicack analyze --dissector`` picks the reader and
``quicack compare CAP CAP --dissector native --dissector tshark`` finds the two readings equal;
damaged captures are read up to the damage or refused in one line."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quicack import Store
from quicack.cli import main

pytestmark = pytest.mark.usefixtures("tshark")

ROOT = Path(__file__).resolve().parents[2]
#: The store's columns that describe the reader rather than the capture: its version, and the
#: ports it had to decode as QUIC (tshark's heuristics miss short-header packets that the
#: native reader ties to their connection; see docs/native-capture.md).
READER_COLUMNS = {("capture_files", "tshark_version"), ("capture_files", "decode_as_ports"),
                  ("connections", "implementation")}


def _captures() -> list[Path]:
    seen, found = set(), []
    for folder in (ROOT / "tests" / "data", ROOT.parent / "shared" / "traces"):
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".pcap", ".pcapng") and path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                if digest not in seen:
                    seen.add(digest)
                    found.append(path)
    return found


def _ports(path: Path) -> tuple[int, ...]:
    """The server port a capture's folder names (``port-N``): tshark's heuristics need it."""
    return tuple(int(m.group(1)) for part in path.parts if (m := re.fullmatch(r"port-(\d+)", part)))


def _tables(store: Store) -> dict[str, list]:
    out = {}
    tables = [r[0] for r in store.con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "AND table_type = 'BASE TABLE' AND table_name NOT IN ('store_meta', 'files') ORDER BY 1").fetchall()]
    for table in tables:
        cols = [r[0] for r in store.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table]).fetchall() if (table, r[0]) not in READER_COLUMNS]
        rows = store.con.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM {table}").fetchall()
        out[table] = sorted(map(repr, rows))
    return out


def _read(path: Path, tmp: Path, dissector: str):
    with Store(tmp / f"{dissector}.duckdb") as store:
        result = store.ingest(path, quic_ports=_ports(path), dissector=dissector)
        return result, _tables(store)


@pytest.mark.parametrize("path", _captures(), ids=lambda p: str(p.relative_to(p.parents[2])))
def test_the_native_reader_stores_the_rows_the_tshark_path_stores(path, tmp_path):
    reference, expected = _read(path, tmp_path, "tshark")
    native, got = _read(path, tmp_path, "native")
    assert native.status == reference.status
    assert native.error == reference.error
    for table, rows in expected.items():
        assert got[table] == rows, table


def test_what_the_native_reader_leaves_to_tshark_is_read_by_tshark_with_the_reason(tmp_path):
    import duckdb

    from quicack.pcap import nativepath, staging

    # draft-15 Initial packets: neither reader reads them; tshark's explanation is the refusal
    draft15 = ROOT / "tests/data/pcap2qlog/captures/Local/pcap/ngtcp2-pcap-encrypted.pcap"
    with Store(tmp_path / "s.duckdb") as store:
        result = store.ingest(draft15)
    assert result.status == "refused"
    assert "draft-15" in result.error
    # a link type the native reader does not know: it says so, and tshark reads the capture
    origin = ROOT / "tests/data/local/aioquic-aioquic-handshake/cap.pcapng"
    data = bytearray(origin.read_bytes())
    shb_len = int.from_bytes(data[4:8], "little")
    assert int.from_bytes(data[shb_len:shb_len + 4], "little") == 1  # the Interface Description Block
    data[shb_len + 8:shb_len + 10] = (147).to_bytes(2, "little")  # LINKTYPE_USER0
    odd = tmp_path / "odd.pcapng"
    odd.write_bytes(bytes(data))
    con = duckdb.connect()
    staging.begin(con)
    with pytest.raises(nativepath.Unsupported, match="^link type 147 is not read natively$"):
        nativepath.stage(con, odd, None, [])
    with Store(tmp_path / "t.duckdb") as store:
        native = store.ingest(odd, dissector="native")
        reference = store.ingest(odd, dissector="tshark")
    assert native.error == reference.error and "0 UDP datagrams" in native.error  # tshark's reading of it


def test_a_gzipped_capture_is_read_natively_as_the_plain_one(tmp_path):
    origin = ROOT / "tests/data/local/aioquic-two-connections/cap.pcapng"
    for name, data in (("cap.pcapng", origin.read_bytes()), ("cap.pcapng.gz", gzip.compress(origin.read_bytes())),
                       ("keys.log", (origin.parent / "keys.log").read_bytes())):
        (tmp_path / name).write_bytes(data)
    (tmp_path / "plain").mkdir()
    plain, expected = _read(tmp_path / "cap.pcapng", tmp_path / "plain", "native")
    zipped, got = _read(tmp_path / "cap.pcapng.gz", tmp_path, "native")
    assert (zipped.status, zipped.warnings) == (plain.status, []) == ("ingested", [])
    assert got == expected


def test_compare_finds_the_two_readings_of_a_capture_equal():
    capture = ROOT / "tests/data/local/aioquic-two-connections/cap.pcapng"
    out = CliRunner().invoke(main, ["compare", str(capture), str(capture), "--dissector", "native",
                                    "--dissector", "tshark"])
    assert out.exit_code == 0, out.output
    # (its two connections, by hand: tshark -r cap.pcapng -T fields -e quic.connection.number | sort -u)
    assert out.output.count("no differences") == 2 and " 0 only in A, 0 only in B" in out.output, out.output
    same = CliRunner().invoke(main, ["compare", str(capture), str(capture)])
    assert same.exit_code == 1 and "A and B hold the same bytes: nothing to compare" in same.output


def test_analyze_reads_with_the_dissector_asked_for(tmp_path):
    capture = ROOT / "tests/data/local/aioquic-aioquic-handshake/cap.pcapng"
    for dissector, version in (("native", "native"), ("tshark", None)):
        db = tmp_path / f"{dissector}.duckdb"
        out = CliRunner().invoke(main, ["analyze", "-q", "--db", str(db), "--dissector", dissector, str(capture)])
        assert out.exit_code == 0, out.output
        with Store(db, read_only=True) as store:
            stored = store.con.execute("SELECT tshark_version FROM capture_files").fetchall()[0][0]
            readers = store.con.execute("SELECT DISTINCT implementation FROM connections").fetchall()
        assert (stored == "native") == (version == "native"), stored
        assert readers == [("quicack-capture" if dissector == "native" else "tshark",)]


def _ip_udp(payload: bytes) -> bytes:
    udp = (4433).to_bytes(2, "big") + (443).to_bytes(2, "big") + (8 + len(payload)).to_bytes(2, "big") + b"\0\0"
    total = 20 + len(udp) + len(payload)
    ip = bytes([0x45, 0]) + total.to_bytes(2, "big") + b"\0\0\x40\0\x40\x11\0\0" + bytes([127, 0, 0, 1]) * 2
    return ip + udp + payload


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(min_size=0, max_size=80), min_size=1, max_size=6),
       cut=st.integers(min_value=0, max_value=400), quic=st.booleans())
def test_damaged_or_random_captures_never_crash_the_reader(tmp_path, payloads, cut, quic):
    """Random UDP payloads (some starting like a QUIC v1 Initial) in a raw-IP pcap, the file cut
    anywhere: the reader ends with rows, or refuses in one line naming a byte offset."""
    from quicack._native import CaptureReader

    head = bytes.fromhex("d4c3b2a1020004000000000000000000ffff000065000000")
    body, ends = b"", []
    for p in payloads:
        if quic:
            p = bytes.fromhex("c00000000108") + p
        frame = _ip_udp(p)
        body += (1).to_bytes(4, "little") + b"\0\0\0\0" + len(frame).to_bytes(4, "little") * 2 + frame
        ends.append(len(head) + len(body))
    data = (head + body)[:max(cut, 1)] if cut < len(head + body) else head + body
    path = tmp_path / "fuzz.pcap"
    path.write_bytes(data)
    try:
        reader = CaptureReader(str(path), None, [])
    except ValueError as e:
        offset, what = e.args
        assert offset == 0 and "\n" not in what and len(data) < len(head) + 1
        return
    while reader.batch(16) is not None:
        pass
    if reader.damage is not None:
        offset, what = reader.damage
        assert 0 < offset <= len(data) and "\n" not in what
    elif reader.unsupported is None:  # cut at a record's end (or not at all): every record before it read
        assert reader.frames == sum(end <= len(data) for end in ends)
