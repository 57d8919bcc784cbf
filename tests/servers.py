"""Local `quicack serve` listeners in a child process, for scan tests (loopback only)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quicack(*args: str) -> list[str]:
    """The command line running this worktree's quicack (python -m puts REPO first)."""
    return [sys.executable, "-m", "quicack.cli", *args]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO))


class Servers:
    """``with Servers(tmp, [("wfc", 0), ("iack", 20), …]) as s:`` — one listener per entry on
    127.0.0.(10+i):PORT; ``s.address(i)`` is its IP:PORT."""

    def __init__(self, folder: Path, listeners: list[tuple], qlog_dir: Path | None = None):
        self.port = free_udp_port()
        self.listeners = listeners
        self.config = folder / "servers.toml"
        lines = []
        for i, entry in enumerate(listeners):
            mode, cert_delay = entry[0], entry[1]
            extra = entry[2] if len(entry) > 2 else {}
            lines.append("[[listener]]")
            lines.append(f'listen = "{self.ip(i)}:{self.port}"')
            lines.append(f'mode = "{mode}"')
            lines.append(f"cert_delay_ms = {cert_delay}")
            lines += [f"{k} = {v}" for k, v in extra.items()]
        self.config.write_text("\n".join(lines) + "\n")
        self.qlog_dir = qlog_dir
        self.process: subprocess.Popen | None = None

    @staticmethod
    def ip(i: int) -> str:
        return f"127.0.0.{10 + i}"

    def address(self, i: int) -> str:
        return f"{self.ip(i)}:{self.port}"

    def __enter__(self) -> "Servers":
        args = ["serve", "--config", str(self.config)]
        if self.qlog_dir:
            args += ["--qlog-dir", str(self.qlog_dir)]
        self.process = subprocess.Popen(quicack(*args), cwd=REPO, env=env(), stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if line.strip() == "ready":
                return self
            if not line and self.process.poll() is not None:
                break
        self.process.kill()
        raise RuntimeError(f"quicack serve did not start: {self.process.stderr.read()}")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
