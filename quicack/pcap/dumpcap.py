"""Capturing a scan's traffic with dumpcap (Wireshark's capture engine, Debian's tshark).

Theory of operation: dumpcap runs as a child process writing pcapng, filtered to UDP on the
scan's destination ports.  dumpcap says "Capturing on …" before its capture is live, and packets
still in the kernel's capture buffer when it is stopped are lost, so both ends are synchronised
with marker datagrams: tiny UDP datagrams from loopback to a loopback port of our own (also in
the filter) are sent until dumpcap's packet counter (on its stderr) shows them — at the start
before any probe is sent, at the end before dumpcap is stopped.  The markers stay in the file
(UDP to 127.0.0.1, payload ``quicack capture marker``).  The key log the scan writes beside the
capture decrypts it (``tshark -o tls.keylog_file:…``).
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from quicack.model import QuicackError
from quicack.pcap import tshark

MARKER = b"quicack capture marker"


def tshark_version() -> str | None:
    """The version of the tshark that will read the capture (None without one): asked of
    :func:`quicack.pcap.tshark.installed_version`, since only that module runs tshark."""
    return tshark.installed_version()


def bpf_filter(ports: set[int], marker_port: int) -> str:
    ports_expr = " or ".join(f"port {p}" for p in sorted(ports))
    return f"udp and (({ports_expr}) or (dst host 127.0.0.1 and dst port {marker_port}))"


class Capture:
    """A running dumpcap; ``stop()`` ends it once everything sent so far is in the file."""

    def __init__(self, exe: str, interface: str, ports: set[int], path: Path):
        self.path = path
        self.packets = 0  # dumpcap's own counter
        self.lines: list[str] = []
        self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # where markers go
        self.sink.bind(("127.0.0.1", 0))
        self.sink.setblocking(False)
        self.marker_port = self.sink.getsockname()[1]
        self.process = subprocess.Popen(
            [exe, "-i", interface, "-f", bpf_filter(ports, self.marker_port), "-w", str(path), "-n"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stderr(self) -> None:
        buffer = ""
        while chunk := self.process.stderr.read1(4096):
            buffer += chunk.decode("utf-8", "replace")
            *complete, buffer = re.split(r"[\r\n]", buffer)
            for text in complete + [buffer]:
                found = re.search(r"Packets(?: captured)?: (\d+)", text)
                if found:
                    self.packets = max(self.packets, int(found.group(1)))
            self.lines += [t.strip() for t in complete if t.strip()]

    def sync(self, timeout_s: float) -> bool:
        """Send markers until dumpcap counts one more packet than before; False on timeout."""
        before = self.packets
        deadline = time.monotonic() + timeout_s
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                out.sendto(MARKER, ("127.0.0.1", self.marker_port))
                time.sleep(0.05)
                if self.packets > before:
                    return True
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.sync(timeout_s=5.0)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.sink.close()


def start(path: str | Path, ports: set[int], interface: str = "any", timeout_s: float = 20.0) -> Capture:
    """Start dumpcap and return once it demonstrably captures."""
    exe = shutil.which("dumpcap")
    if exe is None:
        raise QuicackError("--pcap needs dumpcap (Debian: apt-get install tshark)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    capture = Capture(exe, interface, ports, path)
    if not capture.sync(timeout_s):
        capture.process.kill()
        capture.process.wait()
        capture.sink.close()
        raise QuicackError("dumpcap did not start capturing: "
                           f"{' / '.join(capture.lines[-3:]) or 'no output'}", str(path))
    return capture
