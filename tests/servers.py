"""Local `quicack serve` listeners in a child process, for scan tests (loopback only)."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from quicack.lab import serve

REPO = Path(__file__).resolve().parent.parent


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quicack(*args: str) -> list[str]:
    """The command line running this worktree's quicack (python -m puts REPO first)."""
    return [sys.executable, "-m", "quicack", *args]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO))


class Servers(serve.Child):
    """``with Servers(tmp, [("wfc", 0), ("iack", 20), …]) as s:`` — one listener per entry on
    127.0.0.(10+i):PORT (a free port); ``s.address(i)`` is its IP:PORT."""

    def __init__(self, folder: Path, listeners: list[tuple], qlog_dir: Path | None = None):
        self.port = free_udp_port()
        lines = []
        for i, entry in enumerate(listeners):
            mode, cert_delay = entry[0], entry[1]
            extra = entry[2] if len(entry) > 2 else {}
            lines += ["[[listener]]", f'listen = "{self.ip(i)}:{self.port}"', f'mode = "{mode}"',
                      f"cert_delay_ms = {cert_delay}", *(f"{k} = {v}" for k, v in extra.items())]
        config = folder / "servers.toml"
        config.write_text("\n".join(lines) + "\n")
        super().__init__(config, qlog_dir)

    @staticmethod
    def ip(i: int) -> str:
        return f"127.0.0.{10 + i}"

    def address(self, i: int) -> str:
        return f"{self.ip(i)}:{self.port}"
