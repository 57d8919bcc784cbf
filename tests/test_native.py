"""The native core's own unit tests (``native/src``: the JSON tape parser's strictness and
conversions, the estimator, the sent-packet log), run with cargo as part of the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CRATE = Path(__file__).resolve().parent.parent / "native"


def test_cargo_test_passes_in_the_native_crate(tmp_path):
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    # (its own target folder: the extension's build in native/target is left as it is)
    run = subprocess.run([cargo, "test", "--release", "--manifest-path", str(CRATE / "Cargo.toml")],
                         capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, CARGO_TARGET_DIR=str(tmp_path / "target"), CARGO_TERM_COLOR="never"))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    passed = sum(int(line.split(" passed")[0].rsplit(" ", 1)[-1]) for line in run.stdout.splitlines()
                 if line.startswith("test result: ok."))
    assert passed >= 6, run.stdout
