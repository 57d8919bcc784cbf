"""Record a real QUIC capture on loopback: aioquic HTTP/3 server and client, a TLS key log, qlogs.

Theory of operation: a self-signed certificate is made in memory, an aioquic HTTP/3 server is
started on 127.0.0.1 (a free port unless ``--port``), ``dumpcap`` captures that UDP port on ``lo``,
and one or more aioquic clients each GET ``--bytes`` bytes.  Both sides write their TLS secrets to
``keys.log`` (so every packet decrypts) and, with ``--qlog``, qlog files into ``qlog_client/`` and
``qlog_server/``.  With ``--gso`` the server sends runs of equal-size datagrams to one peer as
one ``sendmsg`` with ``UDP_SEGMENT`` (what quic-go, quinn and ngtcp2 do on Linux): the capture on
``lo`` then holds GSO super-frames, as real captures of those servers do.

Used by ``benchmarks/pcap_ingest.py`` (a ≥ 30k-packet transfer) and to make the small captures
under ``tests/data/local/``.  Needs dumpcap (Debian ``tshark``) and the right to capture on lo.

    python benchmarks/make_capture.py OUT_DIR [--bytes N] [--connections K] [--gso] [--qlog]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aioquic.asyncio import QuicConnectionProtocol, connect, serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent
from aioquic.quic.logger import QuicFileLogger

from quicack.lab import certificate

UDP_SEGMENT = 103  # linux/udp.h
MAX_GSO_SEGMENTS = 16


def self_signed(directory: Path) -> tuple[Path, Path]:
    return certificate.write_pem(*certificate.self_signed(("localhost",), days=7), directory)


class H3Server(QuicConnectionProtocol):
    """Answers every GET with ``size`` bytes (the size comes from the path: ``/<bytes>``)."""

    gso = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._h3 = H3Connection(self._quic)

    def quic_event_received(self, event: QuicEvent) -> None:
        for ev in self._h3.handle_event(event):
            if isinstance(ev, HeadersReceived) and ev.stream_ended:
                path = dict(ev.headers).get(b":path", b"/0").decode()
                size = int(path.strip("/") or 0)
                self._h3.send_headers(ev.stream_id, [(b":status", b"200"),
                                                     (b"content-length", str(size).encode())])
                self._h3.send_data(ev.stream_id, b"x" * size, end_stream=True)
        self.transmit()

    _raw: dict[int, socket.socket] = {}

    def _raw_socket(self) -> socket.socket:
        """A real socket on the transport's file descriptor (asyncio's wrapper has no sendmsg)."""
        wrapped = self._transport.get_extra_info("socket")
        if wrapped.fileno() not in self._raw:
            self._raw[wrapped.fileno()] = socket.fromfd(wrapped.fileno(), wrapped.family, wrapped.type)
        return self._raw[wrapped.fileno()]

    def transmit(self) -> None:
        if not self.gso:
            return super().transmit()
        # Batch runs of equal-size datagrams to one address into one GSO send.
        self._transmit_task = None
        sock = self._raw_socket()
        batch: list[bytes] = []
        batch_addr = None

        def flush():
            if not batch:
                return
            if len(batch) == 1:
                self._transport.sendto(batch[0], batch_addr)
            else:
                sock.sendmsg([b"".join(batch)], [(socket.SOL_UDP, UDP_SEGMENT,
                                                  struct.pack("=H", len(batch[0])))], 0, batch_addr)
            batch.clear()

        for data, addr in self._quic.datagrams_to_send(now=self._loop.time()):
            if batch and (addr != batch_addr or len(data) > len(batch[0])
                          or len(batch[-1]) != len(batch[0]) or len(batch) == MAX_GSO_SEGMENTS):
                flush()
            batch.append(data)
            batch_addr = addr
        flush()
        timer_at = self._quic.get_timer()
        if self._timer is not None and self._timer_at != timer_at:
            self._timer.cancel()
            self._timer = None
        if self._timer is None and timer_at is not None:
            self._timer = self._loop.call_at(timer_at, self._handle_timer)
        self._timer_at = timer_at


class H3Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._h3 = H3Connection(self._quic)
        self._done: asyncio.Future | None = None
        self.received = 0

    async def get(self, size: int) -> int:
        self._done = self._loop.create_future()
        stream_id = self._quic.get_next_available_stream_id()
        self._h3.send_headers(stream_id, [(b":method", b"GET"), (b":scheme", b"https"),
                                          (b":authority", b"localhost"), (b":path", f"/{size}".encode())],
                              end_stream=True)
        self.transmit()
        await self._done
        return self.received

    def quic_event_received(self, event: QuicEvent) -> None:
        for ev in self._h3.handle_event(event):
            if isinstance(ev, DataReceived):
                self.received += len(ev.data)
            if isinstance(ev, (DataReceived, HeadersReceived)) and ev.stream_ended and self._done:
                if not self._done.done():
                    self._done.set_result(True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def transfer(out: Path, port: int, size: int, connections: int, gso: bool, qlog: bool,
                   keys) -> None:
    cert, key = self_signed(Path(tempfile.mkdtemp(prefix="quicack-cert-")))
    server_conf = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN, secrets_log_file=keys,
                                    max_datagram_frame_size=None)
    server_conf.load_cert_chain(cert, key)
    client_conf = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, verify_mode=0,
                                    server_name="localhost")
    if qlog:
        (out / "qlog_server").mkdir(exist_ok=True)
        (out / "qlog_client").mkdir(exist_ok=True)
        server_conf.quic_logger = QuicFileLogger(str(out / "qlog_server"))
        client_conf.quic_logger = QuicFileLogger(str(out / "qlog_client"))
    H3Server.gso = gso
    server = await serve("127.0.0.1", port, configuration=server_conf, create_protocol=H3Server)
    try:
        for _ in range(connections):
            async with connect("127.0.0.1", port, configuration=client_conf,
                               create_protocol=H3Client) as client:
                got = await asyncio.wait_for(client.get(size), timeout=60)
                if got != size:
                    raise SystemExit(f"received {got} of {size} bytes")
    finally:
        server.close()


def capture(out: Path, size: int, connections: int = 1, gso: bool = False, qlog: bool = False,
            port: int | None = None) -> Path:
    """Run the transfer under dumpcap; return the capture path (``out/cap.pcapng``)."""
    out.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    pcap = out / "cap.pcapng"
    for stale in (pcap, out / "keys.log"):
        stale.unlink(missing_ok=True)
    dumpcap = subprocess.Popen(["dumpcap", "-q", "-i", "lo", "-B", "64", "-f", f"udp port {port}",
                                "-w", str(pcap)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not pcap.exists() or pcap.stat().st_size == 0:
            if dumpcap.poll() is not None:
                raise SystemExit(f"dumpcap failed: {dumpcap.stderr.read().strip()}")
            if time.monotonic() > deadline:
                raise SystemExit("dumpcap did not start capturing within 20 s")
            time.sleep(0.05)
        time.sleep(0.3)
        with open(out / "keys.log", "w") as keys:
            asyncio.run(transfer(out, port, size, connections, gso, qlog, keys))
        time.sleep(0.5)
    finally:
        dumpcap.send_signal(signal.SIGINT)
        try:
            dumpcap.wait(timeout=20)
        except subprocess.TimeoutExpired:
            dumpcap.kill()
    return pcap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--bytes", type=int, default=40_000_000, help="response size per connection")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--port", type=int, help="server UDP port (default: a free one)")
    parser.add_argument("--gso", action="store_true", help="server sends with UDP GSO")
    parser.add_argument("--qlog", action="store_true", help="also write qlog files")
    args = parser.parse_args()
    pcap = capture(args.out, args.bytes, args.connections, args.gso, args.qlog, args.port)
    print(f"wrote {pcap} ({pcap.stat().st_size} bytes) and {args.out / 'keys.log'}", file=sys.stderr)


if __name__ == "__main__":
    main()
