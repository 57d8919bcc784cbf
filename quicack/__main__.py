"""The ``quicack`` program: tshark started early for ``quicack analyze CAPTURE``, then the CLI.

Theory of operation: a user of ``quicack analyze --dissector tshark capture.pcapng`` waits first for tshark, which
spends a few tenths of a second loading its dissectors before it writes a row.  So before click,
DuckDB and pyarrow load, :func:`early_dissection` reads the few options of a plain ``analyze``
command line that matter (``--keylog``, ``--quic-port``, the first path) and starts tshark on the
first path if it is a capture; :mod:`quicack.cli` receives it in click's context object and hands
it to the ingest, which takes it over if it is the dissection the parsed command wants, else stops
it.  Anything this reading does not understand makes it step aside: click parses every command
line as ever.  After ``analyze`` (the store closed, every line written) the process leaves
without the interpreter's teardown of DuckDB and Arrow, which has nothing left to save.
"""

from __future__ import annotations

import os
import sys
from itertools import pairwise
from pathlib import Path


def analyze_arguments(argv: list[str]) -> tuple[Path, str | None, tuple[int, ...]] | None:
    """(first path, --keylog, --quic-port values) of a plain ``analyze`` command line (argv
    without the program), else None: another command, or an option not understood here."""
    if len(argv) < 2 or argv[0] != "analyze":
        return None
    keylog, ports, paths = None, [], []
    args = iter(argv[1:])
    for arg in args:
        if arg == "--":
            paths.extend(args)
            break
        name, eq, value = arg.partition("=")
        if name in ("--db", "--keylog", "--quic-port", "--dissector") and (eq or arg == name):
            value = value if eq else next(args, None)
            if value is None or (name == "--dissector" and value not in ("native", "tshark")):
                return None
            if name == "--keylog":
                keylog = value
            elif name == "--quic-port":
                if not value.isdigit():
                    return None
                ports.append(int(value))
        elif arg in ("-q", "--quiet", "--reanalyze"):
            continue
        elif arg.startswith("-"):
            return None
        else:
            paths.append(arg)
    return (Path(paths[0]), keylog, tuple(ports)) if paths else None


def early_dissection(argv: list[str]):
    """tshark started on the capture of ``quicack analyze --dissector tshark CAPTURE …`` (None for
    anything else: the native reader, the default, needs no head start)."""
    if "--dissector=tshark" not in argv and ("--dissector", "tshark") not in set(pairwise(argv)):
        return None
    parsed = analyze_arguments(argv)
    if parsed is None or not parsed[0].is_file():
        return None
    from quicack.store import ingest  # light: the pcap path's file checks and tshark, no DuckDB

    return ingest.early_dissection([parsed[0]], parsed[1], parsed[2])


def run() -> None:
    """The ``quicack`` console script."""
    early = early_dissection(sys.argv[1:])
    from quicack import cli

    state = {"dissection": early, "quick_exit": False}
    try:
        cli.main(obj=state)
    except SystemExit as e:
        if not state["quick_exit"] or not isinstance(e.code, int | None):
            raise
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(e.code or 0)
    finally:
        if state["dissection"] is not None:
            state["dissection"].close()  # a usage error before analyze took it over


if __name__ == "__main__":
    run()
