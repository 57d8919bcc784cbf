"""The dispatcher: the target list, streamed, turned into jobs for the executors.

Theory of operation: :func:`dispatch` (a coroutine on the scan's event loop) streams the list,
keeps the targets of this shard, skips (target, repetition) pairs the run already holds — looked
up a thousand targets at a time (``RESUME_CHUNK``), so a run resumes without being held in
memory — resolves names (:class:`quicack.scan.resolver.Resolver`) and applies the address policy
(:class:`quicack.scan.targets.Policy`).  A target refused by the policy, or whose name does not
resolve, becomes rows with that outcome (:func:`refused_row`), so every (target, repetition) of
a run ends with exactly one row; the others are submitted as :class:`~quicack.scan.options.Job`.
At most ``window`` targets are in flight, and dispatching pauses while the writer is behind.
This module reads the run's probe rows (:mod:`quicack.store.scantables`): it is on the DuckDB side
of the scan, never imported by a probing process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from quicack.scan import targets
from quicack.scan.options import Job, ScanOptions, in_shard
from quicack.scan import resolver as resolver_module
from quicack.scan.resolver import Resolver
from quicack.store import scantables

if TYPE_CHECKING:
    from quicack.scan.writer import Writer

RESUME_CHUNK = 1000


def refused_row(job: Job, rep: int, outcome: str, reason: str, split: int) -> dict:
    return {"target_index": job.target_index, "repetition": rep, "domain": job.domain,
            "rank": job.rank, "address": job.address or None, "port": job.port or None,
            "schedule": "none", "outcome": outcome, "error_reason": reason,
            "split_clienthello": split, "datagrams_sent": 0, "datagrams_received": 0}


async def dispatch(opts: ScanOptions, run_id: int, reader_con, submit: Callable,
                   write_refused: Callable, writer: Writer, inflight: Callable[[], int],
                   window: int, stop: asyncio.Event, check: Callable[[], None]) -> None:
    """Submit a job (``submit``) or write refused rows (``write_refused``) for every target of
    the list with pending repetitions, until the list ends or ``stop`` is set; ``check`` raises
    when the scan must end (a dead worker, a failed writer)."""
    policy = targets.Policy(targets.Exclusions.read(opts.exclude_file) if opts.exclude_file
                            else targets.Exclusions(), opts.allow_private)
    resolver = Resolver(opts)
    reps = range(opts.repetitions)
    done: set = set()
    chunk_end = -1
    resolving: set[asyncio.Task] = set()

    async def prepare(target: targets.Target, pending: tuple[int, ...]) -> None:
        job = Job(target.index, target.domain, target.rank, "", 0, pending)
        refusal = ("invalid_name", target.invalid) if target.invalid else policy.refuse_name(target.domain)
        if refusal is None:
            found = await resolver.resolve(target.domain)
            if isinstance(found, str):
                refusal = ("resolve_failed", found)
            else:
                job = Job(target.index, target.domain, target.rank, found[0], found[1], pending)
                refusal = policy.refuse_address(found[0])
        if refusal is not None:
            for rep in pending:
                write_refused(refused_row(job, rep, refusal[0], refusal[1], opts.split_clienthello))
            return
        submit(job)

    for target in targets.read_list(opts.list_path):
        if stop.is_set():
            break
        if not in_shard(target.index, opts.shard):
            continue
        if target.index > chunk_end:
            chunk_end = target.index + RESUME_CHUNK - 1
            done = scantables.done_between(reader_con, run_id, target.index, chunk_end)
        pending = tuple(r for r in reps if (target.index, r) not in done)
        if not pending:
            continue
        # (lookups are counted apart from probes: a name that takes seconds to fail must not
        # hold a probe's place; see quicack.scan.resolver)
        while (inflight() >= window or len(resolving) >= resolver_module.LOOKUPS
               or writer.backlog > 4 * opts.batch_size + window) and not stop.is_set():
            await asyncio.sleep(0.01)
            check()
        if stop.is_set():
            break
        task = asyncio.get_running_loop().create_task(prepare(target, pending))
        resolving.add(task)
        task.add_done_callback(resolving.discard)
    try:
        if resolving:
            await asyncio.gather(*list(resolving))
    finally:
        resolver.close()
