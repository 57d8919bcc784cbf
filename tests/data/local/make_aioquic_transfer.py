"""Regenerate tests/data/local/aioquic-transfer: an aioquic client downloads 400 KB from an aioquic
server on 127.0.0.1, both writing qlog (aioquic's QuicFileLogger).  Not run by the tests; the
output is committed so the expected values read off it stay fixed.

    python tests/data/local/make_aioquic_transfer.py
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
from pathlib import Path

from aioquic.asyncio import connect, serve
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived
from aioquic.quic.logger import QuicFileLogger

from quicack.lab.certificate import self_signed, write_pem

OUT = Path(__file__).parent / "aioquic-transfer"
SIZE = 400_000


def _certificate(directory: Path) -> tuple[Path, Path]:
    return write_pem(*self_signed(("localhost",), days=7), directory)


class Server(QuicConnectionProtocol):
    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived) and event.end_stream:
            self._quic.send_stream_data(event.stream_id, b"x" * SIZE, end_stream=True)
            self.transmit()


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.received = 0
        self.done = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event):
        if isinstance(event, StreamDataReceived):
            self.received += len(event.data)
            if event.end_stream and not self.done.done():
                self.done.set_result(self.received)


async def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    (OUT / "qlog_client").mkdir(parents=True)
    (OUT / "qlog_server").mkdir()
    tmp = OUT / "tmp"
    tmp.mkdir()
    cert, key = _certificate(tmp)
    server_config = QuicConfiguration(is_client=False, alpn_protocols=["quicack-test"],
                                      quic_logger=QuicFileLogger(OUT / "qlog_server"))
    server_config.load_cert_chain(cert, key)
    server = await serve("127.0.0.1", 4490, configuration=server_config, create_protocol=Server)
    client_config = QuicConfiguration(is_client=True, alpn_protocols=["quicack-test"],
                                      verify_mode=ssl.CERT_NONE,
                                      quic_logger=QuicFileLogger(OUT / "qlog_client"))
    async with connect("127.0.0.1", 4490, configuration=client_config, create_protocol=Client) as client:
        stream = client._quic.get_next_available_stream_id()
        client._quic.send_stream_data(stream, b"GET", end_stream=True)
        client.transmit()
        print("received", await asyncio.wait_for(client.done, 10), "bytes")
    server.close()
    await asyncio.sleep(0.2)
    shutil.rmtree(tmp)


if __name__ == "__main__":
    asyncio.run(main())
