"""The full mutation sweep of issue 31, run once: every real trace in tests/data with a value of the
wrong type at every field path (tests/hostile.py), and every capture with bytes flipped and cut.

    python benchmarks/mutation_sweep.py [--captures N] [--limit N] [--timeout S] [--only SUBSTRING]

Each mutated file is ingested by a worker process (``Store.ingest``, what ``quicack analyze`` does
per file) and must end in a stored file or a refusal of one line naming the file; anything
escaping as an exception is a traceback, a file not done within ``--timeout`` seconds a hang (the
worker is killed and another started).  Prints the counts — files, stored, refused with one
line, refused otherwise, tracebacks, hangs — and the distinct failures; exits 1 if any.  The
suite runs a few hundred of the same mutations each time (tests/store/test_hostile_input.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import hostile  # noqa: E402

#: a worker starts a new store after this many files (the store stays small)
FILES_PER_STORE = 300


def worker(directory: str) -> None:
    """Read paths from stdin, ingest each, write one JSON line per file."""
    from quicack.store.database import Store
    count, store = 0, None
    for line in sys.stdin:
        path = line.rstrip("\n")
        if store is None or count % FILES_PER_STORE == 0:
            if store is not None:
                store.close()
                for leftover in Path(directory).glob("w.duckdb*"):
                    leftover.unlink()
            store = Store(Path(directory) / "w.duckdb")
        count += 1
        try:
            result = store.ingest(path)
            out = {"status": result.status, "error": result.error}
        except BaseException as e:  # noqa: BLE001 - what the sweep counts
            import traceback
            out = {"status": "traceback", "error": "".join(traceback.format_exception_only(e)).strip(),
                   "where": traceback.format_exc().splitlines()[-3:-1]}
            if isinstance(e, KeyboardInterrupt):
                raise
        print(json.dumps(out), flush=True)


class Worker:
    """A process ingesting one file at a time in a folder (and a store) of its own."""

    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", str(directory)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.case = None
        self.started = 0.0

    def start(self, case) -> None:
        origin, label, data, suffix = case
        path = self.directory / f"m{suffix}"
        path.write_bytes(data)
        self.case, self.path, self.started = case, path, time.monotonic()
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()

    def result(self) -> dict:
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"status": "traceback", "error": "the worker died"}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def cases(args):
    """(origin, label, bytes, suffix) of every mutation, made as they are asked for."""
    made = 0
    for path in hostile.traces():
        if args.only and args.only not in str(path):
            continue
        suffix = ".sqlog" if path.suffix == ".sqlog" else ".qlog"
        for label, data in hostile.mutants(path):
            if args.limit and made >= args.limit:
                return
            made += 1
            yield str(path.relative_to(hostile.DATA)), label, data, suffix
    if args.captures:
        for path, label, data in hostile.damaged_captures(args.captures, seed=31):
            if args.only and args.only not in str(path):
                continue
            yield str(path.relative_to(hostile.DATA)), label, data, path.suffix


def _count(result: dict | None, worker: Worker, counts, failures, refusals) -> None:
    origin, label = worker.case[0], worker.case[1]
    counts["files"] += 1
    if result is None:
        counts["hangs"] += 1
        failures["hang"].append(f"{origin}: {label}")
    elif result["status"] == "traceback":
        counts["tracebacks"] += 1
        failures[result["error"] + " " + " | ".join(result.get("where", []))].append(f"{origin}: {label}")
    elif result["status"] == "ingested":
        counts["stored"] += 1
    else:
        error = result["error"] or ""
        if "\n" not in error and error.startswith(str(worker.path)) and "internal error" not in error:
            counts["refused with one line"] += 1
            refusals[error[len(str(worker.path)):].split(":", 1)[-1].strip()[:60]] += 1
        else:
            counts["refused otherwise"] += 1
            failures["refusal not one clean line naming the file: " + error[:200]].append(f"{origin}: {label}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker")
    parser.add_argument("--captures", type=int, default=20, help="damaged copies of each capture")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    todo = cases(args)
    counts = collections.Counter()
    failures: dict[str, list[str]] = collections.defaultdict(list)
    refusals = collections.Counter()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="quicack-sweep-") as tmp:
        pool = [Worker(Path(tmp) / f"w{k}") for k in range(args.workers)]
        idle, busy = list(pool), []
        while True:
            while idle:
                case = next(todo, None)
                if case is None:
                    break
                w = idle.pop()
                w.start(case)
                busy.append(w)
            if not busy:
                break
            ready, _, _ = select.select([w.proc.stdout for w in busy], [], [], 1.0)
            for w in list(busy):
                if w.proc.stdout in ready:
                    _count(w.result(), w, counts, failures, refusals)
                    busy.remove(w)
                    idle.append(w)
                elif time.monotonic() - w.started > args.timeout:
                    _count(None, w, counts, failures, refusals)
                    w.kill()
                    busy.remove(w)
                    pool[pool.index(w)] = fresh = Worker(w.directory)
                    idle.append(fresh)
                else:
                    continue
                if counts["files"] % 500 == 0:
                    print(f"{counts['files']} {dict(counts)} {time.monotonic() - started:.0f} s", file=sys.stderr,
                          flush=True)
        for w in pool:
            w.kill()
    print(f"mutation sweep: {dict(counts)} in {time.monotonic() - started:.0f} s")
    print("refusals, most common first:")
    for message, n in refusals.most_common(30):
        print(f"  {n:6d}  {message}")
    for what, where in failures.items():
        print(f"FAIL ({len(where)}): {what}")
        for w_ in where[:5]:
            print(f"    {w_}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
