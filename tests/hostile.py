"""Hostile input for the fuzzing tests and benchmarks/mutation_sweep.py (issue 31): real traces with
a value of the wrong type at every field path, and captures with bytes flipped or cut.

A *field path* is where a value sits in a trace, with the elements of arrays named by what they
are rather than by their index: an event by its name (``events[transport:packet_sent].data.
header.packet_number``), a frame by its type, the columns of a draft's array event by their
position.  Each path is mutated once (at its first occurrence in the file) with each value of
another JSON type, and numbers also with values outside what the store's columns hold (1e400,
2^64, -1).  A JSON-SEQ file is mutated record by record and written back as JSON-SEQ.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import orjson

DATA = Path(__file__).parent / "data"
RS = b"\x1e"

#: The real qlog traces the mutations start from (every generation and serialization).
TRACE_SUFFIXES = (".qlog", ".sqlog", ".txt")
#: Captures whose bytes are flipped and cut.
CAPTURE_SUFFIXES = (".pcap", ".pcapng")

_RAW = "\x00raw:"  # a string standing for JSON text orjson cannot write (1e400, 2^64)


def traces() -> list[Path]:
    return sorted(p for p in DATA.rglob("*") if p.suffix in TRACE_SUFFIXES and p.is_file()
                  and not p.name.startswith("attribution"))


def captures() -> list[Path]:
    return sorted(p for p in DATA.rglob("*") if p.suffix in CAPTURE_SUFFIXES and p.is_file())


def _kind(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}[type(value)]


#: One value of each JSON type.
WRONG = {"number": 7, "string": "x", "list": [7], "object": {"x": 7}, "null": None, "bool": True}
#: Numbers the store's columns cannot hold, or that no field may take.
OUT_OF_RANGE = [_RAW + "1e400", _RAW + "18446744073709551616", -1]


def values_for(value) -> list:
    """The mutations of one value: every other JSON type, and out-of-range numbers for a number."""
    kind = _kind(value)
    found = [v for k, v in WRONG.items() if k != kind]
    if kind == "number" or (kind == "string" and _numeric(value)):
        found += OUT_OF_RANGE
    return found


def _numeric(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _element_key(parent_key, value, index: int, length: int):
    """What an array element is called in a field path."""
    if isinstance(value, dict):
        for key in ("name", "frame_type", "event", "event_type", "type"):
            if isinstance(value.get(key), str):
                return f"{key}={value[key]}"
        return "*"
    if parent_key == "events" and isinstance(value, list):  # a draft's array event: by its name
        return "ev=" + ":".join(str(v) for v in value[1:3] if isinstance(v, str))
    return index if length <= 8 else "*"


def field_paths(doc) -> dict[tuple, tuple]:
    """{field path: the concrete path of its first occurrence} of every value in ``doc``."""
    found: dict[tuple, tuple] = {}

    def walk(value, concrete: tuple, schematic: tuple, parent_key) -> None:
        if concrete:
            found.setdefault(schematic, concrete)
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, concrete + (k,), schematic + (k,), k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, concrete + (i,), schematic + (_element_key(parent_key, v, i, len(value)),), parent_key)

    walk(doc, (), (), None)
    return found


def _get(doc, path: tuple):
    for step in path:
        doc = doc[step]
    return doc


def _set(doc, path: tuple, value):
    _get(doc, path[:-1])[path[-1]] = value


def _dumps(doc) -> bytes:
    raw = orjson.dumps(doc)
    marker = orjson.dumps(_RAW)[1:-1]  # the marker as orjson writes it inside a string
    while marker in raw:
        at = raw.index(marker)
        end = raw.index(b'"', at)
        raw = raw[:at - 1] + raw[at + len(marker):end] + raw[end + 1:]
    return raw


def _read(path: Path) -> tuple[str, list]:
    """('json', [document]) or ('seq', [records])."""
    data = path.read_bytes()
    if data.lstrip()[:1] == RS:
        return "seq", [orjson.loads(r) for r in data.split(RS) if r.strip()]
    return "json", [orjson.loads(data)]


def _write(kind: str, records: list) -> bytes:
    if kind == "seq":
        return b"".join(RS + _dumps(r) + b"\n" for r in records)
    return _dumps(records[0])


def mutants(path: Path) -> Iterator[tuple[str, bytes]]:
    """(label, file bytes) of every wrong-type mutation of the trace at ``path``."""
    kind, records = _read(path)
    paths = field_paths(records if kind == "seq" else records[0])
    for schematic, concrete in paths.items():
        original = _get(records if kind == "seq" else records[0], concrete)
        for value in values_for(original):
            copy = orjson.loads(orjson.dumps(records))
            if kind == "seq":
                _set(copy, concrete, value)
            else:
                _set(copy[0], concrete, value)
            label = ".".join(str(s) for s in schematic) + " = " + (
                value[len(_RAW):] if isinstance(value, str) and value.startswith(_RAW) else orjson.dumps(value).decode())
            yield label, _write(kind, copy)


def all_mutants() -> list[tuple[Path, str]]:
    """(trace, label) of every mutation of every real trace, in a fixed order."""
    return [(path, label) for path in traces() for label, _ in mutants(path)]


def sample(n: int, seed: int) -> list[tuple[Path, str, bytes]]:
    """``n`` mutations drawn from all of them (the same ones for the same seed)."""
    everything = [(path, label, data) for path in traces() for label, data in mutants(path)]
    return random.Random(seed).sample(everything, min(n, len(everything)))


def damaged_captures(per_capture: int, seed: int) -> Iterator[tuple[Path, str, bytes]]:
    """Captures with a few bytes flipped, or cut at some byte, ``per_capture`` of each."""
    rng = random.Random(seed)
    for path in captures():
        data = path.read_bytes()
        for _ in range(per_capture):
            if rng.random() < 0.4:
                at = rng.randrange(len(data))
                yield path, f"cut at byte {at}", data[:at]
                continue
            mutated = bytearray(data)
            flips = []
            for _ in range(rng.randint(1, 8)):
                at = rng.randrange(min(len(data), 4096) if rng.random() < 0.5 else len(data))
                mutated[at] ^= 1 << rng.randrange(8)
                flips.append(at)
            yield path, "bits flipped at bytes " + ",".join(map(str, sorted(flips))), bytes(mutated)
