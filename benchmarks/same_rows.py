"""Same rows before and after a change: every table of every real trace, dumped and compared.

    python benchmarks/same_rows.py dump OUT [PATH ...]   # default: tests/data, ../shared/traces
    python benchmarks/same_rows.py compare OLD NEW

``dump`` ingests each trace file and capture found under the paths into a store of its own (so
that surrogate keys do not depend on the order of files) and writes every table's rows, sorted,
as JSON lines to ``OUT/<file's path, slashes as '__'>.jsonl``; files quicack refuses are dumped as
their error line.  Columns that name the moment of ingest (``files.ingested_at``) and where the
store lives are left out.  ``compare`` prints each file whose dump differs (the first differing
line of each table) and exits 1 if any does.  Run ``dump`` with the old code and the new, then
``compare``: this is how a refactoring is shown to keep the rows.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VOLATILE = {("files", "ingested_at"), ("files", "path")}


def _value(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return round(v, 9)
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if v is None or isinstance(v, (int, str, bool)):
        return v
    return str(v)


def _dump_one(path: Path, out: Path) -> None:
    import quicack

    full = path.resolve()
    name = str(full.relative_to(ROOT.parent) if full.is_relative_to(ROOT.parent) else full).strip("/").replace("/", "__")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "s.duckdb"
        summary = quicack.analyze([path], db=str(db))
        lines = []
        for f in summary.files:
            lines.append(json.dumps({"status": f.status, "error": f.error,
                                     "warnings": [w.replace(str(path), "PATH") for w in f.warnings]}))
        with quicack.Store(str(db), read_only=True) as store:
            tables = [r[0] for r in store.con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "AND table_type = 'BASE TABLE' ORDER BY 1").fetchall()]
            for table in tables:
                if table == "store_meta":
                    continue
                cols = [r[0] for r in store.con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                    "ORDER BY ordinal_position", [table]).fetchall()]
                keep = [c for c in cols if (table, c) not in VOLATILE]
                rows = store.con.execute(
                    f"SELECT {', '.join(chr(34) + c + chr(34) for c in keep)} FROM {table}").fetchall()
                dumped = sorted(json.dumps(_value(list(r)), sort_keys=True) for r in rows)
                lines.append(f"## {table} {keep}")
                lines.extend(dumped)
    (out / f"{name}.jsonl").write_text("\n".join(lines) + "\n")


def dump(out: Path, paths: list[Path]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for p in paths:
        files.extend(sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p])
    n = 0
    for f in files:
        if not _is_input(f):
            continue
        _dump_one(f, out)
        n += 1
        print(f"{n:4d} {f}", flush=True)


def _is_input(f: Path) -> bool:
    name = f.name.lower()
    if name.endswith(".gz"):
        name = name[:-3]
    return name.endswith((".qlog", ".sqlog", ".json", ".ndjson", ".pcap", ".pcapng", ".cap"))


def _tables(lines: list[str]) -> dict[str, list[str]]:
    """A dump's lines by table ('' for the file's status lines)."""
    tables: dict[str, list[str]] = {"": []}
    current = ""
    for line in lines:
        if line.startswith("## "):
            current = line.split(" ", 2)[1]
            tables[current] = [line]
        else:
            tables[current].append(line)
    return tables


def compare(old: Path, new: Path) -> int:
    """Files whose dumps differ; a table that only one side has and that holds no rows (a table
    added to the schema) is named but is no difference."""
    bad = 0
    added: set[str] = set()
    names = sorted({p.name for p in old.glob("*.jsonl")} | {p.name for p in new.glob("*.jsonl")})
    for name in names:
        a, b = old / name, new / name
        if not a.exists() or not b.exists():
            print(f"only in {'new' if not a.exists() else 'old'}: {name}")
            bad += 1
            continue
        ta, tb = _tables(a.read_text().splitlines()), _tables(b.read_text().splitlines())
        for table in set(ta) ^ set(tb):
            rows = (ta.get(table) or tb.get(table))[1:]
            if rows:
                continue
            added.add(table)
            ta.pop(table, None)
            tb.pop(table, None)
        for table in sorted(set(ta) | set(tb)):
            la, lb = ta.get(table, []), tb.get(table, [])
            if la != lb:
                bad += 1
                for i, (x, y) in enumerate(zip(la, lb)):
                    if x != y:
                        print(f"{name} {table}: line {i + 1}\n  old {x[:300]}\n  new {y[:300]}")
                        break
                else:
                    print(f"{name} {table}: {len(la)} lines old, {len(lb)} new")
                break
    if added:
        print(f"empty tables only one side has (new in the schema): {', '.join(sorted(added))}")
    print(f"{len(names)} files compared, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "dump":
        paths = [Path(p) for p in sys.argv[3:]] or [ROOT / "tests" / "data", ROOT.parent / "shared" / "traces"]
        dump(Path(sys.argv[2]), paths)
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
