"""``quicack serve`` in a child process, for tests, the demo and benchmarks.

Theory of operation: :class:`Child` starts ``python -m quicack.cli serve --config FILE`` with
this source tree first on ``PYTHONPATH``, waits for the line ``ready`` on its stderr (or its end:
the error it printed is raised as :class:`QuicackError`), keeps draining that pipe so the child
never blocks on it, and terminates the child on leaving the ``with`` block.  Its own interpreter
and core keep the server's CPU time and timing apart from the caller's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from quicack.model import QuicackError


class Child:
    """``quicack serve`` in a child process (its own interpreter and core, so its CPU and its
    timing stay apart from the scanner's): ``with Child(config_path) as child: …``."""

    def __init__(self, config: str | Path, qlog_dir: str | Path | None = None, timeout_s: float = 30):
        self.config = Path(config)
        self.qlog_dir = qlog_dir
        self.timeout_s = timeout_s
        self.process: subprocess.Popen | None = None
        self.lines: list[str] = []

    def __enter__(self) -> "Child":
        args = [sys.executable, "-m", "quicack.cli", "serve", "--config", str(self.config)]
        if self.qlog_dir:
            args += ["--qlog-dir", str(self.qlog_dir)]
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True, env=env)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if line.strip() == "ready":
                # keep draining its stderr so the child never blocks on a full pipe
                threading.Thread(target=self.process.stderr.read, daemon=True).start()
                return self
            if not line and self.process.poll() is not None:
                break
            self.lines.append(line.strip())
        self.process.kill()
        message = (self.lines[-1] if self.lines else "") or self.process.stderr.read().strip()
        raise QuicackError(f"quicack serve did not start: {message}", str(self.config))

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
