"""The resolver: a target's name → the address and port a scan probes.

Theory of operation: ``--resolve NAME=IP[:PORT]`` overrides win over a hosts file
(``--hosts``), which wins over the system resolver; an address literal is its own answer.  A
name that cannot be resolved gets an error text instead, which the dispatcher records as the
target's outcome (``resolve_failed``).

``getaddrinfo`` blocks a thread for as long as the system's resolver takes — milliseconds for a
cached answer, seconds for a name whose servers do not answer, every retry of a resolver with no
server at all.  So lookups run on a pool of their own with :data:`LOOKUPS` threads (asyncio's
default executor has a handful, shared with everything else), at most that many at once, 10 s
each, restricted to ``--family``, and the dispatcher counts them apart from the probes in
flight: slow failures overlap, and a list of names that do not resolve goes at the probing
rate, not at one lookup's speed.
"""

from __future__ import annotations

import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor

from quicack.scan import targets
from quicack.scan.options import ScanOptions


#: Lookups at once (threads of the resolver's pool).
LOOKUPS = 128


class Resolver:
    def __init__(self, opts: ScanOptions):
        self.opts = opts
        self.overrides = dict(targets.read_hosts(opts.hosts_file)) if opts.hosts_file else {}
        self.overrides.update(opts.resolve)
        self.family = {"4": socket.AF_INET, "6": socket.AF_INET6}.get(opts.family, socket.AF_UNSPEC)
        self.limit = asyncio.Semaphore(LOOKUPS)
        self.pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        """Stop the lookup threads (lookups still running end on their own)."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)

    async def resolve(self, name: str) -> tuple[str, int] | str:
        """(address, port), or an error text."""
        if name in self.overrides:
            return self.overrides[name]
        literal = targets.literal(name)
        if literal is not None:
            return literal, targets.DEFAULT_PORT
        loop = asyncio.get_running_loop()
        if self.pool is None:
            self.pool = ThreadPoolExecutor(LOOKUPS, thread_name_prefix="quicack-resolve")
        async with self.limit:
            try:
                infos = await asyncio.wait_for(loop.run_in_executor(
                    self.pool, lambda: socket.getaddrinfo(name, targets.DEFAULT_PORT, family=self.family,
                                                          type=socket.SOCK_DGRAM)), 10)
            except (OSError, UnicodeError, asyncio.TimeoutError) as e:
                return f"cannot resolve {name}: {getattr(e, 'strerror', None) or str(e) or 'timeout'}"
        if not infos:
            return f"cannot resolve {name}: no address"
        return infos[0][4][0], targets.DEFAULT_PORT
