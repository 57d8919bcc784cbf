"""The testbed's experiment runner: every cell × repetition of an experiment, through the relay,
each attempt a row in ``testbed_runs``; a run that was stopped continues where it was.

Theory of operation: :func:`run` reads the experiment (:mod:`quicack.lab.experiment`), looks up
the attempts already stored (:func:`quicack.lab.testbedrows.stored`) and plans the rest in
groups — one scenario, one-way delay and client each, its servers taking turns repetition by
repetition, so that whatever else the machine does at a time (2 shared cores) falls on every
server alike.  quicack's servers run for the whole invocation in one child process, one listener
per (mode, certificate delay, chain length) the plan needs (:class:`endpoints.ServerProcess`);
each group starts one relay per server (:class:`quicack.lab.relay.RelayProcess`, a child
process: its timing shares no interpreter) with the cell's delay and impairments, and the client
(:func:`endpoints.attempt`, on this process's event loop) connects through it.  Each attempt is a
new client address, hence a new flow of the relay: the drop lists count from 1 for every
attempt.  Attempts run one at a time: on two cores, a second attempt in parallel would share
them with the first one's server, relay and client and change the very timings measured.

When a group is done (or stopped by ``limit`` or Ctrl-C) it is stored, while nothing is being
measured: the relays stop (their records are written to ``relay_runs``/``relay_datagrams``),
the servers' qlogs are awaited (a server writes one when its connection has ended: three PTOs
after the client's CONNECTION_CLOSE, RFC 9000 §10.2), the clients' traces are written as one
qlog file, every qlog is ingested — classified and replayed like any trace — and the group's
rows are inserted with their figures (:func:`quicack.lab.testbedrows.insert`).  A run killed in
the middle of a group loses that group's attempts, which the next run makes again: each cell ×
repetition is stored exactly once.  A resumed run whose experiment now gives a stored cell other
settings (drop lists, chain length, certificate delay, response size) is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from quicack.core import gctuning
from quicack.lab import endpoints, testbedrows
from quicack.lab import experiment as experiments
from quicack.lab.experiment import Cell, Experiment
from quicack.model import QuicackError

#: the longest a group waits for its servers' qlogs after its last attempt: a connection ends
#: three PTOs after the client's CONNECTION_CLOSE, or at the servers' idle timeout (10 s) if
#: that was lost
SERVER_QLOG_WAIT_S = 15.0


@dataclass
class Group:
    """Attempts that run together: one scenario, delay and client; (cell, repetition) in turn."""

    todo: list[tuple[Cell, int]]

    @property
    def cells(self) -> list[Cell]:
        return list(dict.fromkeys(cell for cell, _ in self.todo))


@dataclass
class RunSummary:
    experiment: str
    #: attempts in the matrix, stored before this run, made and stored by it
    total: int
    stored_before: int
    attempted: int = 0
    stored: int = 0
    outcomes: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    workdir: Path | None = None
    #: the experiment's scenario names, in its order
    scenarios: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.stored_before + self.stored == self.total


def _cell_key(cell: Cell) -> tuple:
    return (cell.scenario.name, cell.server, cell.client, cell.one_way_delay_ms)


def _settings(cell: Cell) -> dict:
    return {"drop_to_client": cell.drop_to_client or None, "drop_to_server": cell.drop_to_server or None,
            "cert_chain_length": cell.scenario.cert_chain_length,
            "cert_delay_ms": cell.scenario.cert_delay_ms, "response_bytes": cell.scenario.response_bytes}


def plan(experiment: Experiment, repetitions: int, stored: dict[tuple, dict]) -> list[Group]:
    """The attempts still to make, in groups (module docstring); refuses a stored cell whose
    settings the experiment has changed."""
    groups: dict[tuple, list[tuple[Cell, int]]] = {}
    for cell in experiment.cells():
        before = stored.get(_cell_key(cell), {"repetitions": set()})
        for name, value in _settings(cell).items():
            if name in before and before[name] != value:
                raise QuicackError(
                    f"scenario {cell.scenario.name!r} ({cell.server}, {cell.one_way_delay_ms:g} ms) "
                    f"has {name} {value!r} but its stored attempts had {before[name]!r}; give the "
                    "experiment or the scenario another name, or use another --db",
                    str(experiment.path))
        key = (cell.scenario.name, cell.one_way_delay_ms, cell.client)
        groups.setdefault(key, []).extend(
            (cell, r) for r in range(repetitions) if r not in before["repetitions"])
    out = []
    for todo in groups.values():
        todo.sort(key=lambda item: item[1])  # repetition by repetition, the servers in turn
        if todo:
            out.append(Group(todo))
    return out


def _path(cell: Cell) -> str:
    size = cell.scenario.response_bytes
    return "/" if size is None else f"/{size}"


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class _Invocation:
    """One call of :func:`run`: the servers, the event loop, the store and the counters."""

    def __init__(self, experiment: Experiment, store, workdir: Path, summary: RunSummary,
                 limit: int | None, progress: Callable[[str], None]):
        self.experiment, self.store, self.summary = experiment, store, summary
        self.limit, self.progress = limit, progress
        self.client_dir = workdir / "client"
        self.server_dir = workdir / "server" / time.strftime("%Y%m%dT%H%M%S")
        self.client_dir.mkdir(parents=True, exist_ok=True)
        self.ports: dict[tuple, int] = {}
        self.loop = asyncio.new_event_loop()

    def listeners(self, groups: list[Group]) -> list:
        from quicack.lab.serve import ListenerSpec

        host = self.experiment.address
        for group in groups:
            for cell in group.cells:
                if cell.listener not in self.ports:
                    self.ports[cell.listener] = endpoints.free_port(host)
        return [ListenerSpec(host, port, mode, cert_delay, cert_chain_length=chain)
                for (mode, cert_delay, chain), port in self.ports.items()]

    def warm_up(self) -> None:
        """One attempt straight to a listener, not stored: the client's first connection pays for
        lazy set-up (imports, OpenSSL look-ups) that would otherwise slow the first attempt."""
        port = next(iter(self.ports.values()))
        self.loop.run_until_complete(endpoints.attempt(self.experiment.address, port, "/", 5.0))

    def left(self) -> bool:
        return self.limit is None or self.summary.attempted < self.limit

    def run_group(self, group: Group) -> None:
        """Relays up, the group's attempts, relays down, then everything stored."""
        from quicack.lab.relay import RelayConfig, RelayProcess

        host = _host(self.experiment.address)
        relays: dict[str, RelayProcess] = {}
        done: list[tuple[Cell, int, endpoints.Attempt]] = []
        interrupted = False
        with contextlib.ExitStack() as stack:
            for cell in group.cells:
                config = RelayConfig.from_options(**cell.relay_options(
                    f"{host}:0", f"{host}:{self.ports[cell.listener]}", self.experiment.seed))
                relays[cell.server] = stack.enter_context(RelayProcess(config))
            try:
                # no full collection of the runner's heap (DuckDB's, the store's) in an attempt
                with gctuning.tuned(collect_first=True):
                    for cell, repetition in group.todo:
                        if not self.left():
                            break
                        done.append((cell, repetition, self.attempt(cell, repetition, relays[cell.server])))
            except KeyboardInterrupt:
                interrupted = True
        if done:
            self.store_group(done, {server: relay.records for server, relay in relays.items()})
        if interrupted:
            raise KeyboardInterrupt

    def attempt(self, cell: Cell, repetition: int, relay) -> endpoints.Attempt:
        summary = self.summary
        address, port = relay.address
        one = self.loop.run_until_complete(endpoints.attempt(
            address, port, _path(cell), self.experiment.timeout_s, summary.attempted, repetition))
        summary.attempted += 1
        summary.outcomes[one.result.outcome] += 1
        r = one.result
        took = f"ttfb {r.ttfb_ms:.1f} ms" if r.ttfb_ms is not None else (r.error_reason or r.timeout_phase or "")
        self.progress(f"[{summary.stored_before + summary.attempted}/{summary.total}] {cell.scenario.name} "
                      f"{cell.one_way_delay_ms:g} ms {cell.server} {cell.client} #{repetition}: "
                      f"{r.outcome} ({took})")
        return one

    def store_group(self, done: list, records: dict) -> None:
        """Ingest both ends' qlogs, store the relays' records and the attempts' rows."""
        import orjson

        from quicack.scan import batches

        deadline = time.monotonic() + SERVER_QLOG_WAIT_S
        traced = [a for _, _, a in done if a.result.trace is not None]
        client_path, client_ids = None, {}
        if traced:
            client_path, _ = batches.write_batch(self.client_dir, [orjson.dumps(a.result.trace) for a in traced])
            ids = self._ingest(client_path, "client")
            client_ids = {id(a): ids.get(i) for i, a in enumerate(traced)}
        relay_ids = {server: rec.write(self.store) for server, rec in records.items() if rec is not None}
        rows = []
        for cell, repetition, one in done:
            server_path = endpoints.wait_for_qlog(self.server_dir, one.odcid, deadline)
            server_id = self._ingest(server_path, "server").get(0) if server_path else None
            r = one.result
            rows.append(dict(
                _settings(cell), experiment=self.experiment.name, scenario=cell.scenario.name,
                server=cell.server, client=cell.client, one_way_delay_ms=cell.one_way_delay_ms,
                repetition=repetition, outcome=r.outcome,
                error_reason=r.error_reason or (f"timeout ({r.timeout_phase})" if r.timeout_phase else None),
                started_epoch_ms=r.started_epoch_ms or None, certificates_received=one.certificates,
                response_bytes_received=r.response_bytes, client_connection_id=client_ids.get(id(one)),
                server_connection_id=server_id, relay_run_id=relay_ids.get(cell.server),
                relay_flow=one.flow, client_qlog_path=str(client_path) if id(one) in client_ids else None,
                server_qlog_path=str(server_path) if server_path else None))
        self.summary.stored += testbedrows.insert(self.store.con, rows)
        self.progress(f"stored {len(rows)} attempts of {done[0][0].scenario.name}, "
                      f"{done[0][0].one_way_delay_ms:g} ms")

    def _ingest(self, path: Path, vantage: str) -> dict[int, int]:
        """Ingest one qlog; its connections of that vantage point by trace index."""
        result = self.store.ingest(path)
        if result.file_id is None:
            self.progress(f"warning: {path}: not ingested: {result.error}")
            return {}
        found = self.store.con.execute(
            "SELECT trace_index, connection_id FROM connections WHERE file_id = ? AND vantage = ?",
            [result.file_id, vantage]).fetchall()
        return dict(found)


def default_workdir(db: str | Path, name: str) -> Path:
    """Where a run keeps its qlogs: ``<store>-testbed/<experiment>/`` next to the store."""
    db = Path(db)
    return db.parent / f"{db.stem}-testbed" / name


def run(path: str | Path, db: str | Path, repetitions: int | None = None, limit: int | None = None,
        progress: Callable[[str], None] | None = None, workdir: str | Path | None = None) -> RunSummary:
    """Run (or continue) the experiment in ``path`` into the store ``db``: the attempts not yet
    stored, at most ``limit`` of them (None: all); ``progress`` gets a line per attempt."""
    from quicack.scan.connection import quiet_aioquic
    from quicack.store.database import Store

    started = time.monotonic()
    experiment = experiments.load(path)
    reps = repetitions if repetitions is not None else experiment.repetitions
    if reps < 1:
        raise QuicackError(f"--repetitions {reps}: at least 1")
    say = progress or (lambda line: None)
    with Store(db) as store:
        groups = plan(experiment, reps, testbedrows.stored(store.con, experiment.name))
        total = len(experiment.cells()) * reps
        summary = RunSummary(experiment.name, total, total - sum(len(g.todo) for g in groups),
                             workdir=Path(workdir) if workdir else default_workdir(db, experiment.name),
                             scenarios=[s.name for s in experiment.scenarios])
        say(f"{'resuming' if summary.stored_before else 'starting'} experiment {experiment.name!r}: "
            f"{summary.stored_before} of {total} attempts stored; qlogs in {summary.workdir}")
        if groups and (limit is None or limit > 0):
            quiet_aioquic()
            invocation = _Invocation(experiment, store, summary.workdir, summary, limit, say)
            try:
                with endpoints.ServerProcess(invocation.listeners(groups), invocation.server_dir):
                    invocation.warm_up()
                    for group in groups:
                        if not invocation.left():
                            break
                        invocation.run_group(group)
            finally:
                invocation.loop.close()
    summary.seconds = time.monotonic() - started
    return summary
