"""A packet capture of a scan's traffic with dumpcap (Wireshark's capture engine, Debian's tshark).

Theory of operation: dumpcap runs as a child process writing pcapng, filtered to UDP on the
scan's destination ports; :func:`start` returns once dumpcap says it is capturing, so no probe
is sent before the capture sees it.  The key log the scan writes beside it decrypts the capture
(``tshark -o tls.keylog_file:…``).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

from .model import QuicackError


def tshark_version() -> str | None:
    exe = shutil.which("tshark")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = out.splitlines()[0] if out else ""
    return first.removeprefix("TShark (Wireshark) ").strip() or None


def bpf_filter(ports: set[int]) -> str:
    ports = sorted(ports)
    return "udp and (" + " or ".join(f"port {p}" for p in ports) + ")"


class Capture:
    """A running dumpcap; ``stop()`` ends it and waits for the file to be complete."""

    def __init__(self, process: subprocess.Popen, path: Path):
        self.process = process
        self.path = path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(path: str | Path, ports: set[int], interface: str = "any", timeout_s: float = 20.0) -> Capture:
    exe = shutil.which("dumpcap")
    if exe is None:
        raise QuicackError("--pcap needs dumpcap (Debian: apt-get install tshark)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen([exe, "-i", interface, "-f", bpf_filter(ports), "-w", str(path),
                                "-n"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    lines = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.startswith("Capturing on"):
            return Capture(process, path)
    process.kill()
    process.wait()
    raise QuicackError(f"dumpcap did not start capturing: {' / '.join(lines[-3:]) or 'no output'}",
                       str(path))
