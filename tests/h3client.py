"""A small aioquic HTTP/3 client for the peer tests (the real scanner is `quicack scan`).

One connection, one or more GETs, a client-side qlog (aioquic's QuicFileLogger, written when the
connection ends) and a TLS key log (NSS format, for tshark).  Loopback only.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent
from aioquic.quic.logger import QuicFileLogger


@dataclass
class Response:
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Fetched:
    responses: list[Response]
    #: hex original destination connection ID: the client qlog is <odcid>.qlog
    odcid: str
    qlog: Path


class _H3Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.pending: dict[int, tuple[Response, asyncio.Future]] = {}

    def quic_event_received(self, event: QuicEvent) -> None:
        for ev in self.h3.handle_event(event):
            if not isinstance(ev, (HeadersReceived, DataReceived)) or ev.stream_id not in self.pending:
                continue
            response, done = self.pending[ev.stream_id]
            if isinstance(ev, HeadersReceived):
                for name, value in ev.headers:
                    response.headers[name.decode()] = value.decode()
                response.status = int(response.headers.get(":status", "0"))
            else:
                response.body += ev.data
            if ev.stream_ended and not done.done():
                done.set_result(response)

    async def get(self, authority: str, path: str) -> Response:
        stream_id = self._quic.get_next_available_stream_id()
        done = asyncio.get_running_loop().create_future()
        self.pending[stream_id] = (Response(), done)
        self.h3.send_headers(stream_id, [
            (b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
            (b":path", path.encode()), (b"user-agent", b"quicack-tests")], end_stream=True)
        self.transmit()
        return await done


async def _fetch(host, port, paths, server_name, qlog_dir, keylog, timeout_s) -> Fetched:
    qlog_dir.mkdir(parents=True, exist_ok=True)
    configuration = QuicConfiguration(alpn_protocols=H3_ALPN, is_client=True,
                                      verify_mode=ssl.CERT_NONE, server_name=server_name,
                                      quic_logger=QuicFileLogger(str(qlog_dir)))
    with open(keylog, "a") as secrets:
        configuration.secrets_log_file = secrets
        async with connect(host, port, configuration=configuration,
                           create_protocol=_H3Client) as client:
            odcid = client._quic.original_destination_connection_id.hex()
            responses = [await asyncio.wait_for(client.get(f"{server_name}:{port}", p), timeout_s)
                         for p in paths]
    return Fetched(responses, odcid, qlog_dir / f"{odcid}.qlog")


def fetch(host: str, port: int, paths=("/",), server_name: str = "localhost",
          qlog_dir: Path = Path("qlog"), keylog: Path = Path("keys.log"),
          timeout_s: float = 10.0) -> Fetched:
    """GET each of ``paths`` over one HTTP/3 connection; the client qlog is written on return."""
    return asyncio.run(asyncio.wait_for(
        _fetch(host, port, list(paths), server_name, Path(qlog_dir), Path(keylog), timeout_s),
        timeout_s * (len(paths) + 1)))
