"""The yardstick for the scanner's CPU figure: stock aioquic doing the same probes.

    python benchmarks/stock_client.py --probes 1000 --concurrency 200 HOST:PORT [HOST:PORT …]

Each probe is what aioquic's own example client does for one URL: ``aioquic.asyncio.connect``
(handshake, no certificate check), an HTTP/3 ``GET /`` read to the end of its stream, and a
closed connection; ``--concurrency`` of them at a time, addresses taken in turn.  Nothing of
quicack is imported, so none of its stand-ins for aioquic helpers (``quicack.scan.speedups``) apply.
With ``--qlog DIR`` each connection's qlog is written as aioquic's example client writes it
(``QuicFileLogger``, one file a connection) — the scanner keeps a qlog per probe too; without
it, nothing is kept: the cheapest version of the work.  Prints one JSON line: probes, how many
completed, and this process's CPU seconds over the probes alone (imports and interpreter
start-up left out).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import ssl

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import QuicEvent
from aioquic.quic.logger import QuicFileLogger


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()

    async def get(self, authority: str) -> None:
        stream_id = self._quic.get_next_available_stream_id()
        self.h3.send_headers(stream_id, [
            (b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
            (b":path", b"/"), (b"user-agent", b"aioquic-stock-benchmark")], end_stream=True)
        self.transmit()
        await self.done

    def quic_event_received(self, event: QuicEvent) -> None:
        for h3_event in self.h3.handle_event(event):
            if isinstance(h3_event, (HeadersReceived, DataReceived)) and h3_event.stream_ended:
                if not self.done.done():
                    self.done.set_result(None)


async def probe(host: str, port: int, limit: asyncio.Semaphore, timeout_s: float,
                qlog: QuicFileLogger | None) -> bool:
    async with limit:
        configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, quic_logger=qlog,
                                          verify_mode=ssl.CERT_NONE, server_name="stock.bench.test")
        try:
            async with asyncio.timeout(timeout_s):
                async with connect(host, port, configuration=configuration,
                                   create_protocol=Client) as client:
                    await client.get("stock.bench.test")
            return True
        except (OSError, TimeoutError, ConnectionError):
            return False


async def main_async(args) -> dict:
    addresses = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in args.address]
    limit = asyncio.Semaphore(args.concurrency)
    qlog = QuicFileLogger(args.qlog) if args.qlog else None
    before = resource.getrusage(resource.RUSAGE_SELF)
    results = await asyncio.gather(*(
        probe(*addresses[i % len(addresses)], limit, args.timeout_s, qlog) for i in range(args.probes)))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"probes": args.probes, "ok": sum(results), "cpu_s": cpu_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address", nargs="+", help="HOST:PORT of a local HTTP/3 server")
    parser.add_argument("--probes", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--timeout-s", type=float, default=10.0)
    parser.add_argument("--qlog", metavar="DIR", help="write each connection's qlog into DIR")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args))))


if __name__ == "__main__":
    main()
