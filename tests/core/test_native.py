"""The native core's own unit tests (``native/src/tests``: the JSON tape parser's refusals and
where it reports them, each qlog generation's field spellings as staging reads them, the RFC 9002
estimator and replay against worked examples), run with cargo as part of the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CRATE = Path(__file__).resolve().parents[2] / "native"


def test_cargo_test_passes_in_the_native_crate(tmp_path):
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    # (its own target folder: the extension's build in native/target is left as it is)
    run = subprocess.run([cargo, "test", "--release", "--manifest-path", str(CRATE / "Cargo.toml")],
                         capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, CARGO_TARGET_DIR=str(tmp_path / "target"), CARGO_TERM_COLOR="never"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    passed = sum(int(line.split(" passed")[0].rsplit(" ", 1)[-1]) for line in run.stdout.splitlines()
                 if line.startswith("test result: ok."))
    assert passed >= 50, run.stdout


# --- bad input never gets past the native core as anything but a refusal ----------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import DATA  # noqa: E402
from quicack import Store  # noqa: E402
from quicack.qlog import slicing

#: a JSON document (aioquic 0.3 client) and the same events as JSON-SEQ, both small
SOURCES = [DATA / "local/aioquic-aioquic-handshake/qlog_client/e60faf3e02b8978c.qlog"]


@st.composite
def damaged(draw):
    """A real trace, as a JSON document or as JSON-SEQ, with a few bytes changed, cut or copied."""
    import orjson
    doc = orjson.loads(SOURCES[0].read_bytes())
    if draw(st.booleans()):
        trace = doc["traces"][0]
        header = {k: v for k, v in doc.items() if k != "traces"}
        header.update(qlog_format="JSON-SEQ", trace={k: v for k, v in trace.items() if k != "events"})
        data = bytearray(b"".join(b"\x1e" + orjson.dumps(r) + b"\n" for r in [header, *trace["events"]]))
    else:
        data = bytearray(orjson.dumps(doc))
    for _ in range(draw(st.integers(1, 6))):
        if len(data) < 2:
            break
        at = draw(st.integers(0, len(data) - 1))
        what = draw(st.sampled_from(["byte", "cut", "copy", "delete"]))
        if what == "byte":
            data[at] = draw(st.sampled_from(list(b'{}[]",:-.0e\\\x1e\n \x00\xff')))
        elif what == "cut":
            data = data[:max(at, 1)]
        elif what == "copy":
            start = draw(st.integers(0, len(data) - 1))
            data[at:at] = data[start:start + draw(st.integers(1, 40))]
        else:
            del data[at:at + draw(st.integers(1, 20))]
    return bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=damaged(), slice_bytes=st.sampled_from([400, 4096, 8 << 20]))
def test_a_damaged_trace_is_ingested_or_refused_and_never_crashes(tmp_path_factory, monkeypatch, data, slice_bytes):
    # (the parser is strict: a damaged record is refused where it is, or left out when cut off at
    # the end; anything escaping as another exception — a panic of the native core — fails)
    directory = tmp_path_factory.mktemp("damaged")
    path = directory / ("t.sqlog" if data.lstrip()[:1] == b"\x1e" else "t.qlog")
    path.write_bytes(data)
    monkeypatch.setattr(slicing, "SLICE_BYTES", slice_bytes)
    with Store(directory / "s.duckdb") as store:
        result = store.ingest(path)
        assert result.status in ("ingested", "refused")
        if result.status == "refused":
            assert result.error.startswith(str(path))
            assert store.con.execute("SELECT count(*) FROM packets").fetchall() == [(0,)]
        else:
            assert store.con.execute("SELECT count(*) FROM connections").fetchall()[0][0] >= 1
