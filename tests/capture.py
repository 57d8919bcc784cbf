"""Loopback captures for the peer tests: dumpcap while a block runs, tshark to decrypt.

Installs tshark from Debian when it is missing (``conftest.ensure_command``).
"""

from __future__ import annotations

import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from conftest import ensure_command

PACKET_TYPES = {"0": "initial", "1": "0RTT", "2": "handshake", "3": "retry"}  # QUIC v1 long types


def ensure_tshark() -> None:
    ensure_command("tshark", "tshark")
    ensure_command("dumpcap", "tshark")  # dumpcap comes with tshark (wireshark-common)


@contextmanager
def capture(path: Path, port: int, interface: str = "lo"):
    """Capture UDP ``port`` on ``interface`` into ``path`` (pcapng) while the block runs."""
    ensure_tshark()
    proc = subprocess.Popen(["dumpcap", "-q", "-i", interface, "-f", f"udp port {port}", "-w", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # dumpcap writes the pcapng section header once the capture runs
        deadline = time.monotonic() + 10
        while not (path.exists() and path.stat().st_size > 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dumpcap did not start: {proc.stderr.read() if proc.poll() is not None else 'timeout'}")
            time.sleep(0.05)
        time.sleep(0.2)
        yield path
        time.sleep(0.3)  # let the last datagrams reach the capture
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@dataclass
class Datagram:
    frame: int
    ip_len: int
    src_port: int
    #: packet types in the datagram, in order ('initial', 'handshake', '1RTT', …)
    packet_types: list[str]
    packet_numbers: list[int]
    frame_types: list[int]


def datagrams(pcap: Path, keylog: Path, port: int) -> list[Datagram]:
    """Every UDP datagram of the capture, decrypted with the key log."""
    fields = ["frame.number", "ip.len", "udp.srcport", "quic.header_form", "quic.long.packet_type",
              "quic.packet_number", "quic.frame_type"]
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-d", f"udp.port=={port},quic",
         "-T", "fields", "-E", "separator=\t", "-E", "aggregator=,", *sum((["-e", f] for f in fields), [])],
        capture_output=True, text=True, check=True).stdout
    result = []
    for line in out.splitlines():
        number, ip_len, src, forms, long_types, pns, frame_types = (line.split("\t") + [""] * 7)[:7]
        longs = iter(long_types.split(",") if long_types else [])
        types = [PACKET_TYPES.get(next(longs, ""), "?") if form == "1" else "1RTT"
                 for form in (forms.split(",") if forms else [])]
        result.append(Datagram(int(number), int(ip_len), int(src), types,
                               [int(x) for x in pns.split(",") if x],
                               [int(x) for x in frame_types.split(",") if x]))
    return result


def decryption_failures(pcap: Path, keylog: Path, port: int) -> int:
    """Frames in which tshark could not decrypt a QUIC packet."""
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-o", f"tls.keylog_file:{keylog}", "-d", f"udp.port=={port},quic",
         "-Y", "quic.decryption_failed", "-T", "fields", "-e", "frame.number"],
        capture_output=True, text=True, check=True).stdout
    return len(out.split())
