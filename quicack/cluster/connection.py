"""Reaching a Dask cluster: a scheduler's address, or ``local:N`` worker processes on this machine.

Theory of operation: Dask is imported only here and only when ``--cluster`` is given; without it
the user is told which extra to install.  A client connects to the scheduler (a timeout if none
answers), then waits for workers to register, since a scheduler without workers would take tasks
and never run them; either wait ends in one :class:`~quicack.model.QuicackError` saying what to
start.  ``local:N`` starts N worker processes of one thread each (a ``LocalCluster``), which end
with the command.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

from quicack.model import QuicackError

#: What the user runs to get Dask.
INSTALL_HINT = "pip install 'quicack[cluster]'"
#: Seconds to wait for the scheduler to answer, then for a first worker to register.
CONNECT_TIMEOUT_S = 10.0
WORKER_TIMEOUT_S = 60.0


def distributed():
    """The ``distributed`` module, or a QuicackError telling how to install it."""
    try:
        import distributed as module
    except ImportError:
        raise QuicackError(f"--cluster needs Dask distributed, which is not installed: {INSTALL_HINT}") from None
    return module


def local_workers(address: str) -> int | None:
    """N of ``local:N``; None for a scheduler's address."""
    match = re.fullmatch(r"local:(\d+)", address)
    if not match:
        return None
    n = int(match.group(1))
    if not 1 <= n <= 64:
        raise QuicackError(f"local:N takes 1 to 64 worker processes, not {n}")
    return n


@contextlib.contextmanager
def client(address: str, workers: int = 1, timeout_s: float = WORKER_TIMEOUT_S) -> Iterator:
    """A connected Dask client with at least ``workers`` workers registered."""
    dask = distributed()
    logging.getLogger("distributed").setLevel(logging.ERROR)  # (its warnings are not the user's)
    n = local_workers(address)
    connect_s = min(CONNECT_TIMEOUT_S, timeout_s)
    with contextlib.ExitStack() as stack:
        if n is not None:
            cluster = stack.enter_context(dask.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                silence_logs=logging.ERROR))
            address = cluster.scheduler_address
        try:
            c = stack.enter_context(dask.Client(address, timeout=connect_s, set_as_default=False))
        except (OSError, TimeoutError) as e:
            raise QuicackError(f"no Dask scheduler answered at {address} within {connect_s:g} s "
                               f"({type(e).__name__}): start one with `dask scheduler`") from None
        try:
            c.wait_for_workers(workers, timeout=timeout_s)
        except TimeoutError:
            have = len(c.scheduler_info().get("workers", {}))
            raise QuicackError(f"{have} Dask worker{'s' if have != 1 else ''} registered with the scheduler at "
                               f"{address} within {timeout_s:g} s, {workers} needed: start workers with "
                               f"`dask worker {address}`") from None
        yield c


def worker_names(c) -> dict[str, str]:
    """Name → address of every registered worker (a worker without --name is named by its address)."""
    workers = c.scheduler_info(n_workers=-1).get("workers", {})
    return {str(info.get("name", address)): address for address, info in workers.items()}
