from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from quicack import Store

DATA = Path(__file__).parent / "data"
RS = b"\x1e"


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "t.duckdb") as s:
        yield s


def write_json(path: Path, doc: dict, gz: bool = False) -> Path:
    raw = orjson.dumps(doc)
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def write_seq(path: Path, header: dict, events: list, gz: bool = False, separator: bytes = RS) -> Path:
    """JSON-SEQ (RFC 7464: RS json LF per record) or, with separator b'', NDJSON."""
    raw = b"".join(separator + orjson.dumps(r) + b"\n" for r in [header, *events])
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def rows(store: Store, sql: str) -> list[dict]:
    return store.sql(sql).to_dicts()


def tuples(store: Store, sql: str) -> list[tuple]:
    return [tuple(r.values()) for r in rows(store, sql)]


def read_seq(path: Path) -> list[dict]:
    """The event records of a JSON-SEQ file (its header record left out)."""
    return [orjson.loads(r) for r in path.read_bytes().split(RS) if r.strip()][1:]


def ms(value: float, tol: float = 1e-6):
    """A time in ms, compared to ``tol`` ms."""
    return pytest.approx(value, abs=tol)


def ensure_command(command: str, package: str) -> str:
    """The path of ``command``, installing Debian's ``package`` first if it is missing (tests
    install the real components they need rather than skip)."""
    found = shutil.which(command)
    if found:
        return found
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    update = subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, text=True)
    install = subprocess.run(["apt-get", "install", "-y", "-q", package], env=env, capture_output=True, text=True)
    found = shutil.which(command)
    if not found:
        pytest.fail(f"{command} is missing and `apt-get install {package}` did not provide it:\n"
                    f"{update.stderr[-2000:]}\n{install.stdout[-2000:]}\n{install.stderr[-2000:]}")
    return found


@pytest.fixture(scope="session")
def tshark() -> str:
    """The real tshark (and editcap, same package), installed from Debian when missing: the
    capture tests run it rather than skip."""
    ensure_command("editcap", "tshark")
    return ensure_command("tshark", "tshark")


# --- text reports shown after the test run ---------------------------------------------------
# Tests that measure something worth reading (the peers' first ACK delays, their logged RTT next to
# the RFC 9002 replay) add a section here; it is printed in pytest's terminal summary, pass or
# fail, and written to reports/test-artifacts/ (or $QUICACK_TEST_ARTIFACTS).

ARTIFACTS = Path(os.environ.get("QUICACK_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "reports/test-artifacts"))
_TEXT_REPORTS: dict[str, list] = {}


class TextReport:
    """Sections of a text report shown after the run: plain text, or rows (polars) that are
    concatenated over the tests and formatted once (one table for all parametrized cases)."""

    def text(self, name: str, text: str) -> None:
        _TEXT_REPORTS.setdefault(name, []).append(text.rstrip("\n"))

    def rows(self, name: str, frame, formatter) -> None:
        parts = _TEXT_REPORTS.setdefault(name, [])
        for part in parts:
            if isinstance(part, list) and part[0] is formatter:
                part.append(frame)
                return
        parts.append([formatter, frame])


@pytest.fixture(scope="session")
def text_report() -> TextReport:
    return TextReport()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    import polars as pl
    for name, parts in _TEXT_REPORTS.items():
        rendered = [p if isinstance(p, str) else p[0](pl.concat(p[1:], how="diagonal_relaxed")).rstrip("\n")
                    for p in parts]
        text = "\n\n".join(rendered) + "\n"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.txt"
        path.write_text(text, encoding="utf-8")
        terminalreporter.section(f"{name} (also in {path})")
        terminalreporter.write(text)


def run_experiment(base: Path, text: str) -> Path:
    """Write the experiment ``text`` into ``base`` and run it with ``quicack testbed run`` (a
    tiny version of an experiment, for a test module's fixture); the store's path."""
    from click.testing import CliRunner

    from quicack.cli import main

    (base / "tiny.toml").write_text(text)
    db = base / "tiny.duckdb"
    result = CliRunner().invoke(main, ["testbed", "run", str(base / "tiny.toml"), "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db
