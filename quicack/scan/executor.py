"""The executor: runs jobs' probes on an event loop under the scan's rate and concurrency limits.

Theory of operation: an :class:`Executor` runs a target's repetitions (spaced, or cold then
warm) under a token bucket (the global rate, :class:`TokenBucket`), a concurrency limit and a
per-address limit, and hands each finished probe to ``deliver(row, trace_json, keylog)``: the
probe's row (:func:`probe_row`), its qlog trace serialized, its TLS key log lines.  It runs in
the scan's own process (one probing process) or in each worker process
(:mod:`quicack.scan.worker`), whose share of the rate and concurrency it is then given; either
way it imports aioquic and never the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import orjson

from quicack.core import cidtag
from quicack.scan import probe, resumption
from quicack.scan.options import Job, ScanOptions


class TokenBucket:
    """A global probe rate: ``rate`` tokens a second, bursts of ``burst``."""

    def __init__(self, rate: float, burst: float | None = None):
        self.rate = rate
        self.capacity = burst if burst is not None else max(1.0, rate / 10)
        self.tokens = self.capacity
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self) -> None:
        if self.rate <= 0:
            return
        async with self.lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep((1 - self.tokens) / self.rate)


class Executor:
    """Runs jobs on the current event loop; ``deliver(row, trace_json, keylog)`` per probe."""

    def __init__(self, opts: ScanOptions, run_tag: int, deliver: Callable, worker: int = 0,
                 share: int = 1):
        self.opts = opts
        self.run_tag = run_tag
        self.deliver = deliver
        self.worker = worker
        self.bucket = TokenBucket(opts.rate / share if opts.rate > 0 else 0)
        self.slots = asyncio.Semaphore(max(1, opts.concurrency // share))
        self.per_address: dict[str, list] = {}  # address → [semaphore, users]
        self.last_probe: dict[str, float] = {}  # address → monotonic time of the last probe end
        self.tasks: set[asyncio.Task] = set()
        self.stopping = False

    def submit(self, job: Job) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self.run_job(job))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    @contextlib.asynccontextmanager
    async def _address_slot(self, address: str):
        entry = self.per_address.setdefault(address, [asyncio.Semaphore(self.opts.per_address), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self.per_address[address]

    async def run_job(self, job: Job) -> None:
        opts = self.opts
        previous_start: float | None = None
        for rep in job.repetitions:
            if self.stopping:
                return
            schedule = "spaced"
            if opts.schedule == "cold-warm":
                schedule = "cold" if rep == 0 else "warm"
                if schedule == "cold":
                    await self._wait_idle(job.address)
            elif previous_start is not None:
                wait = previous_start + opts.spacing_s - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            if self.stopping:
                return
            async with self._address_slot(job.address), self.slots:
                await self.bucket.take()
                if self.stopping:
                    return
                previous_start = time.monotonic()
                extra = {}
                if opts.resumption:
                    result, extra = await resumption.run_pair(
                        self._spec(job, rep), resumption.resumed_cids(self.run_tag, job.target_index, rep))
                else:
                    result = await probe.run(self._spec(job, rep))
                self.last_probe[job.address] = time.monotonic()
            trace_json = orjson.dumps(result.trace) if result.trace is not None else None
            result.trace = None
            self.deliver(probe_row(result, job, schedule, opts.split_clienthello, self.worker) | extra,
                         trace_json, result.keylog)
        if len(self.last_probe) > 100_000:  # bounded: forget addresses idle for long
            cutoff = time.monotonic() - opts.cold_idle_s
            self.last_probe = {a: t for a, t in self.last_probe.items() if t > cutoff}

    def _spec(self, job: Job, rep: int) -> probe.ProbeSpec:
        """Repetition ``rep`` of ``job`` as a probe, its connection IDs tagged."""
        opts = self.opts
        cid, odcid = cidtag.pair(self.run_tag, job.target_index, rep)
        return probe.ProbeSpec(
            job.target_index, rep, job.domain, job.address, job.port, cid, odcid,
            path=opts.path, user_agent=opts.user_agent,
            split_clienthello=opts.split_clienthello, alpn=opts.alpn, ack_policy=opts.ack_policy,
            first_response_timeout_s=opts.first_response_timeout_s,
            handshake_timeout_s=opts.handshake_timeout_s,
            response_timeout_s=opts.response_timeout_s)

    async def _wait_idle(self, address: str) -> None:
        last = self.last_probe.get(address)
        if last is not None:
            wait = last + self.opts.cold_idle_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)

    async def drain(self) -> None:
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


def probe_row(result: probe.ProbeResult, job: Job, schedule: str, split: int, worker: int) -> dict:
    row = {k: v for k, v in vars(result).items() if k not in ("trace", "keylog", "session_ticket", "token")}
    row.update(rank=job.rank, schedule=schedule, split_clienthello=split, worker=worker)
    return row
