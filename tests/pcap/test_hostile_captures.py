"""Damaged captures (issue 31): the real captures of tests/data with bits flipped (in the file's
headers or anywhere) or cut at any byte, drawn anew each run (QUICACK_FUZZ_SEED replays one;
benchmarks/mutation_sweep.py runs many).  Each ends in a stored file or one line naming it —
never a traceback or a hang — and a refused one leaves the store as it was."""

from __future__ import annotations

import os
import random

import pytest

import hostile
from quicack import Store

pytestmark = pytest.mark.usefixtures("tshark")

#: Damaged captures tried per run (each costs a tshark run).
SAMPLE = 12


def test_a_capture_with_bits_flipped_or_cut_ends_in_a_stored_file_or_one_line(tmp_path):
    seed = int(os.environ.get("QUICACK_FUZZ_SEED", random.randrange(1 << 30)))
    damaged = list(hostile.damaged_captures(2, seed))
    failures = []
    with Store(tmp_path / "s.duckdb") as store:
        for k, (origin, label, data) in enumerate(random.Random(seed).sample(damaged, SAMPLE)):
            path = tmp_path / f"c{k}{origin.suffix}"
            path.write_bytes(data)
            keys = origin.with_suffix(".keys")
            packets = store.con.execute("SELECT count(*) FROM packets").fetchall()[0][0]
            try:
                result = store.ingest(path, keylog=keys if keys.exists() else None)
            except Exception as e:  # noqa: BLE001 - what the test looks for
                failures.append(f"{origin.name} {label}: {type(e).__name__}: {e}")
                continue
            if result.status == "refused":
                if "\n" in result.error or not result.error.startswith(str(path)) or "internal error" in result.error:
                    failures.append(f"{origin.name} {label}: {result.error}")
                if store.con.execute("SELECT count(*) FROM packets").fetchall()[0][0] != packets:
                    failures.append(f"{origin.name} {label}: refused, yet rows changed")
    assert failures == [], f"QUICACK_FUZZ_SEED={seed}"
