"""The resolver: a target's name → the address and port a scan probes.

Theory of operation: ``--resolve NAME=IP[:PORT]`` overrides win over a hosts file
(``--hosts``), which wins over the system resolver (``getaddrinfo`` on the event loop's executor,
at most 64 lookups at once, 10 s each, restricted to ``--family``); an address literal is its
own answer.  A name that cannot be resolved gets an error text instead, which the dispatcher
records as the target's outcome (``resolve_failed``).
"""

from __future__ import annotations

import asyncio
import socket

from quicack.scan import targets
from quicack.scan.options import ScanOptions


class Resolver:
    def __init__(self, opts: ScanOptions):
        self.opts = opts
        self.overrides = dict(targets.read_hosts(opts.hosts_file)) if opts.hosts_file else {}
        self.overrides.update(opts.resolve)
        self.family = {"4": socket.AF_INET, "6": socket.AF_INET6}.get(opts.family, socket.AF_UNSPEC)
        self.limit = asyncio.Semaphore(64)

    async def resolve(self, name: str) -> tuple[str, int] | str:
        """(address, port), or an error text."""
        if name in self.overrides:
            return self.overrides[name]
        literal = targets.literal(name)
        if literal is not None:
            return literal, targets.DEFAULT_PORT
        loop = asyncio.get_running_loop()
        async with self.limit:
            try:
                infos = await asyncio.wait_for(loop.getaddrinfo(
                    name, targets.DEFAULT_PORT, family=self.family, type=socket.SOCK_DGRAM), 10)
            except (OSError, asyncio.TimeoutError) as e:
                return f"cannot resolve {name}: {getattr(e, 'strerror', None) or 'timeout'}"
        if not infos:
            return f"cannot resolve {name}: no address"
        return infos[0][4][0], targets.DEFAULT_PORT
