"""What the command-line modules share: the --db options, the error line, progress on stderr.

Theory of operation: :mod:`quicack.cli` (the data path's commands) and :mod:`quicack.labcli`
(local servers, peers, the testbed) print through click; a user's error is one line
``error: …`` on stderr and exit status 1 (:func:`fail`).  The Python API reports progress
through callbacks (``progress(path, n)`` of :func:`quicack.analyze`, ``on_start``/``on_progress``
of a scan); the classes here turn them into rich progress bars on stderr, drawn only when stderr
is a terminal and the work is long enough to be worth one.  rich loads when a bar is made, not
when the command line starts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import click

from quicack.model import QuicackError

DB_OPTION = click.option("--db", default="quicack.duckdb", show_default=True,
                         type=click.Path(dir_okay=False),
                         help="DuckDB store to write (created if missing).")
READ_DB_OPTION = click.option("--db", default="quicack.duckdb", show_default=True,
                              type=click.Path(dir_okay=False), help="DuckDB store to read.")


def fail(e: QuicackError) -> None:
    """A user's error: one line on stderr, exit status 1."""
    click.echo(f"error: {e}", err=True)
    sys.exit(1)


@cache
def console():
    """rich's console on stderr (progress bars, peer messages), made when first needed."""
    from rich.console import Console
    return Console(stderr=True, highlight=False)


class FileBar:
    """Bytes of files done; ``step(path, n)`` is :func:`quicack.analyze`'s ``progress``."""

    def __init__(self, total: int):
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                             TimeRemainingColumn(), console=console(), transient=True)
        self._task = self._bar.add_task("analyzing", total=total)

    def __enter__(self) -> FileBar:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.__exit__(*exc)

    def step(self, path: Path, size: int) -> None:
        self._bar.update(self._task, advance=size, description=path.name[:40])


class ScanBar:
    """Probes done and their rate, then qlog files ingested; ``say`` prints the run's first line."""

    def __init__(self, show: bool, say: Callable[[str], None]):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), console=console(),
                             disable=not show, transient=True)
        self._task = self._bar.add_task("probing", total=None, rate="")
        self._say = say
        self._started = time.monotonic()

    def __enter__(self) -> ScanBar:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.__exit__(*exc)

    def on_start(self, info: dict) -> None:
        self._started = time.monotonic()
        self._bar.update(self._task, total=info["total"], completed=info["stored"])
        verb = "resuming" if info["resumed"] else "starting"
        self._say(f"{verb} run {info['run']!r}: {info['stored']} of {info['total']} probes "
                  f"stored; files in {info['out_dir']}")

    def on_progress(self, p) -> None:
        if p.phase == "ingesting":
            self._bar.update(self._task, total=p.files_to_ingest, completed=p.files_ingested,
                             description="ingesting qlog files", rate="")
            return
        elapsed = max(1e-6, time.monotonic() - self._started)
        label = "stopping (Ctrl-C again: now)" if p.stopping else "probing"
        self._bar.update(self._task, completed=p.done, total=p.total or None, description=label,
                         rate=f"{p.probed / elapsed:.0f} probes/s, {p.ingested} stored")
