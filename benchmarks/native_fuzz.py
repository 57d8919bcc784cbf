"""The native capture reader over thousands of damaged real captures, run once (issue 33).

    python benchmarks/native_fuzz.py [--per-capture N] [--seed S]

Every capture of tests/data (tests/hostile.py's list) with bits flipped or cut at a random byte,
``--per-capture`` times each, is read whole by ``quicack._native.CaptureReader`` in this process
(with its key log when one lies beside it).  Each must end in rows, in damage reported as one line
with a byte offset inside the file, or in a refusal (ValueError) naming byte 0 — never a panic
(pyo3 turns one into PanicException) or another exception.  Prints the counts and the distinct
failures; exits 1 if any.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import hostile
from quicack._native import CaptureReader

from quicack.pcap import source


def read(path: Path, keylog: bytes | None, size: int) -> str:
    """'rows', 'damage', 'unsupported' or 'refused'; raise AssertionError on a bad report."""
    try:
        reader = CaptureReader(str(path), keylog, [])
    except ValueError as e:
        offset, what = e.args
        assert offset == 0 and "\n" not in what, e.args
        return "refused"
    while reader.batch(4096) is not None:
        pass
    if reader.damage is not None:
        offset, what = reader.damage
        assert 0 < offset <= size and "\n" not in what, reader.damage
        return "damage"
    return "unsupported" if reader.unsupported else "rows"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-capture", type=int, default=120)
    parser.add_argument("--seed", type=int, default=33)
    args = parser.parse_args()
    counts: collections.Counter = collections.Counter()
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k, (origin, label, data) in enumerate(hostile.damaged_captures(args.per_capture, args.seed)):
            path = Path(tmp) / f"c{origin.suffix}"
            path.write_bytes(data)
            keylog = source.find_keylog(origin)
            try:
                counts[read(path, keylog.read_bytes() if keylog else None, len(data))] += 1
            except BaseException as e:  # noqa: BLE001 - what the sweep looks for (a PanicException too)
                counts["failed"] += 1
                failures.setdefault(f"{type(e).__name__}: {str(e)[:200]}", f"{origin} {label}")
    total = sum(counts.values())
    print(f"{total} damaged captures: " + ", ".join(f"{n} {what}" for what, n in counts.most_common()))
    for failure, where in failures.items():
        print(f"  {failure}  ({where})")
    sys.exit(1 if counts["failed"] else 0)


if __name__ == "__main__":
    main()
