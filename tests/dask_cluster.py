"""A real Dask cluster on loopback for tests: a ``dask scheduler`` process and named ``dask worker``
processes (one thread each, no nanny, so a worker killed stays dead), all importing this
worktree's quicack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")


class DaskCluster:
    """``with DaskCluster(tmp, ["a", "b"]) as c:`` — ``c.address`` the scheduler's, ``c.kill("a")``
    SIGKILLs worker a."""

    def __init__(self, folder: Path, names: list[str]):
        self.folder, self.names = folder, names
        self.scheduler_file = folder / "scheduler.json"
        self.procs: dict[str, subprocess.Popen] = {}
        self.address = ""

    def _start(self, key: str, argv: list[str]) -> None:
        log = open(self.folder / f"dask-{key}.log", "wb")
        self.procs[key] = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)

    def __enter__(self) -> DaskCluster:
        self._start("scheduler", [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--no-dashboard", "--scheduler-file", str(self.scheduler_file)])
        deadline = time.monotonic() + 60
        while not self.scheduler_file.exists() or not self.scheduler_file.read_text().strip():
            assert time.monotonic() < deadline, (self.folder / "dask-scheduler.log").read_text()
            assert self.procs["scheduler"].poll() is None, (self.folder / "dask-scheduler.log").read_text()
            time.sleep(0.1)
        time.sleep(0.2)  # (the file is written in one go, but let it be closed)
        self.address = json.loads(self.scheduler_file.read_text())["address"]
        for name in self.names:
            self.start_worker(name)
        return self

    def start_worker(self, name: str) -> None:
        self._start(name, [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--name", name,
                           "--nthreads", "1", "--nworkers", "1", "--no-nanny", "--host", "127.0.0.1",
                           "--no-dashboard", "--local-directory", str(self.folder / f"worker-{name}")])

    def kill(self, name: str) -> None:
        self.procs[name].send_signal(signal.SIGKILL)
        self.procs[name].wait()

    def log(self, key: str) -> str:
        return (self.folder / f"dask-{key}.log").read_text(errors="replace")

    def __exit__(self, *exc) -> None:
        for key, proc in reversed(list(self.procs.items())):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def quicack(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """``python -m quicack ARGS`` from the worktree (its quicack, not the installed one)."""
    return subprocess.run([sys.executable, "-m", "quicack", *args], cwd=REPO, env=_env(), capture_output=True,
                          text=True, **kwargs)


def different_rows(a: Path, b: Path) -> dict[str, tuple[int, int, int]]:
    """Tables whose rows differ between stores a and b (all columns but files.ingested_at), as
    table → (rows in a, rows only in a, rows only in b)."""
    import duckdb

    from quicack.store.schema import table_names
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    out = {}
    for table in table_names():
        columns = ", ".join(c for (c,) in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' AND table_name = ? "
            "ORDER BY column_index", [table]).fetchall() if c != "ingested_at")
        only_a, only_b = (con.execute(f"SELECT count(*) FROM (SELECT {columns} FROM {x}.{table} EXCEPT ALL "
                                      f"SELECT {columns} FROM {y}.{table})").fetchall()[0][0]
                          for x, y in (("a", "b"), ("b", "a")))
        if only_a or only_b:
            out[table] = (con.execute(f"SELECT count(*) FROM a.{table}").fetchall()[0][0], only_a, only_b)
    con.close()
    return out
