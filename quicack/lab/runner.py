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
connects through it: quicack's (:func:`endpoints.attempt`, on this process's event loop) or a
real stack's, one child process per attempt (:func:`quicack.lab.stackclients.attempt`).  A real
stack as server (a peer) runs for one group (:class:`quicack.lab.stackservers.PeerServers`): it
is stopped before the group is stored, which flushes its qlog.  Each attempt is a
new client address, hence a new flow of the relay: the drop lists count from 1 for every
attempt.  Attempts run one at a time: on two cores, a second attempt in parallel would share
them with the first one's server, relay and client and change the very timings measured.

When a group is done (or stopped by ``limit`` or Ctrl-C) it is stored, while nothing is being
measured: the relays stop (their records are written to ``relay_runs``/``relay_datagrams``),
the servers' qlogs are awaited (a server writes one when its connection has ended: three PTOs
after the client's CONNECTION_CLOSE, RFC 9000 §10.2), quicack's client's traces are written as
one qlog file, every qlog is ingested — classified and replayed like any trace — and the group's
rows are inserted with their figures (:func:`quicack.lab.testbedrows.insert`).  A real client's
ODCID, which names quicack serve's qlog, is read from its ingested trace, and its relay flow is
the one that began while its process ran (:func:`quicack.lab.stackclients.flows_by_time`).  A run killed in
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
from quicack.lab import ackpolicyruns, endpoints, stackclients, stackservers, testbedrows
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
class Made:
    """One attempt as any client made it: what its row needs before the qlogs are ingested."""

    cell: Cell
    repetition: int
    outcome: str
    error_reason: str | None
    started_epoch_ms: float | None
    response_bytes: int | None
    certificates: int | None
    #: the relay's flow (None: found from the relay's records, :func:`stackclients.flows_by_time`)
    flow: str | None
    #: the ODCID (None: read from the client's ingested trace)
    odcid: str | None
    #: quicack's client: its trace (a dict); a real client: its qlog file
    trace: dict | None = None
    qlog: Path | None = None
    #: a real client: its process's start and end (epoch ms); its own clock's figures (quinn)
    window: tuple[float, float] | None = None
    own: dict = field(default_factory=dict)
    #: quicack's client: its source connection ID (quinn's server traces are keyed by it)
    scid: str | None = None
    #: the TTFB the client itself saw, when it says (for the progress line)
    ttfb_ms: float | None = None
    #: quicack's client: from its first Initial to the response's last byte, when it had the whole
    #: response (testbed_runs.ttlb_ms, ack_policy_runs.download_s)
    ttlb_ms: float | None = None
    #: a resumed attempt (:mod:`quicack.lab.resumed`): its full connection, and the resumed
    #: connection's zero_rtt and session_resumed where the client reports them
    full: Made | None = None
    resumed: dict = field(default_factory=dict)
    #: quicack's client: its NSS key log lines (a capture's key log)
    keylog: str = ""

    @classmethod
    def from_probe(cls, cell: Cell, repetition: int, one: endpoints.Attempt) -> Made:
        r = one.result
        return cls(cell, repetition, r.outcome,
                   r.error_reason or (f"timeout ({r.timeout_phase})" if r.timeout_phase else None),
                   r.started_epoch_ms or None, r.response_bytes, one.certificates, one.flow, one.odcid,
                   trace=r.trace, scid=r.cid_tag, ttfb_ms=r.ttfb_ms,
                   ttlb_ms=r.response_ms if r.outcome == "ok" else None, keylog=r.keylog)

    @classmethod
    def from_stack(cls, cell: Cell, repetition: int, one: stackclients.StackAttempt) -> Made:
        return cls(cell, repetition, one.outcome, one.error_reason, one.started_epoch_ms, one.response_bytes,
                   one.certificates, None, one.odcid, qlog=one.qlog,
                   window=(one.started_epoch_ms, one.ended_epoch_ms),
                   own={"client_ttfb_ms": one.ttfb_ms, "client_handshake_ms": one.handshake_ms},
                   ttfb_ms=one.ttfb_ms)


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
    s = cell.scenario
    return {"drop_to_client": cell.drop_to_client or None, "drop_to_server": cell.drop_to_server or None,
            "cert_chain_length": cell.cert_chain_length, "cert_delay_ms": cell.cert_delay_ms,
            "response_bytes": s.response_bytes, "prime_bytes": s.prime_bytes,
            "prime_rate_to_client_kbps": s.prime_rate_to_client_kbps,
            "receive_window_bytes": s.receive_window_bytes, "resumption": s.resumption}


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


def _resumed_columns(one: Made, full_id: int | None) -> dict:
    """A resumed attempt's columns and helpers for :func:`testbedrows.insert`."""
    full = one.full.own if one.full is not None else {}
    return {"full_client_connection_id": full_id, "session_resumed": one.resumed.get("session_resumed"),
            "client_zero_rtt": one.resumed.get("zero_rtt"), "full_client_ttfb_ms": full.get("client_ttfb_ms"),
            "full_client_handshake_ms": full.get("client_handshake_ms")}


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
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.server_dir = workdir / "server" / stamp
        self.peer_dir = workdir / "peers" / stamp
        self.capture_dir = workdir / "capture" / stamp
        self.client_dir.mkdir(parents=True, exist_ok=True)
        self.ports: dict[tuple, int] = {}
        self.programs: dict[str, Path] = {}
        #: quicack serve's trust anchors by port (:attr:`endpoints.ServerProcess.anchors`)
        self.anchors: dict[int, Path] = {}
        self.loop = asyncio.new_event_loop()

    def listeners(self, groups: list[Group]) -> list:
        from quicack.lab.serve import ListenerSpec

        host = self.experiment.address
        for group in groups:
            for cell in group.cells:
                if cell.listener is not None and cell.listener not in self.ports:
                    self.ports[cell.listener] = endpoints.free_port(host)
        return [ListenerSpec(host, port, mode, cert_delay, cert_chain_length=chain, congestion=congestion,
                             request_ack_frequency=request)
                for (mode, cert_delay, chain, congestion, request), port in self.ports.items()]

    def prepare_stacks(self, groups: list[Group]) -> None:
        """Install or build the real clients and servers the plan needs, before anything is measured."""
        from quicack.lab import peers

        cells = [cell for group in groups for cell in group.cells]
        for client in dict.fromkeys(cell.client for cell in cells):
            if client != "quicack":
                self.programs[client] = stackclients.binary(client, self.progress)
        for server in dict.fromkeys(cell.server for cell in cells if cell.peer):
            peers.prepare(server, self.progress)

    def warm_up(self) -> None:
        """One attempt of each client straight to a listener, not stored: a client's first
        connection pays for lazy set-up (imports, OpenSSL look-ups, a binary's first load) that
        would otherwise slow the first attempt."""
        if not self.ports:
            return
        host, port = self.experiment.address, next(iter(self.ports.values()))
        self.loop.run_until_complete(endpoints.attempt(host, port, "/", 5.0))
        for client, program in self.programs.items():
            stackclients.attempt(client, program, host, port, "/", 5.0, self.client_dir / "warm-up",
                                 self.anchors.get(port))

    def left(self) -> bool:
        return self.limit is None or self.summary.attempted < self.limit

    def run_group(self, group: Group) -> None:
        """Peers and relays up, the group's attempts, relays and peers down, then everything stored."""
        from quicack.lab.relay import RelayConfig, RelayProcess
        from quicack.lab.testbedcapture import GroupCapture

        host = _host(self.experiment.address)
        relays: dict[str, RelayProcess] = {}
        primes: dict[str, RelayProcess] = {}  # the earlier connections' path, when its rate differs
        done: list[Made] = []
        interrupted = False
        peer_cells = [cell for cell in group.cells if cell.peer]
        sizes = {c.scenario.response_bytes for c in peer_cells if c.scenario.response_bytes is not None}
        peers = stackservers.PeerServers(list(dict.fromkeys(c.server for c in peer_cells)), self.peer_dir,
                                         self.experiment.address, sizes, self.progress)
        capture = None
        with contextlib.ExitStack() as stack:
            stack.enter_context(peers)
            for cell in group.cells:
                port = peers.ports[cell.server] if cell.peer else self.ports[cell.listener]
                config = RelayConfig.from_options(**cell.relay_options(
                    f"{host}:0", f"{host}:{port}", self.experiment.seed))
                relays[cell.server] = stack.enter_context(RelayProcess(config))
                if cell.scenario.prime_rate_to_client_kbps is not None or (
                        cell.scenario.resumption and (cell.drop_to_client or cell.drop_to_server)):
                    primes[cell.server] = stack.enter_context(RelayProcess(RelayConfig.from_options(
                        **cell.relay_options(f"{host}:0", f"{host}:{port}", self.experiment.seed, prime=True))))
            if self.experiment.capture:  # one leg: the servers' ports, or the relays' (client side)
                first = group.cells[0]
                ports = ({peers.ports[c.server] if c.peer else self.ports[c.listener] for c in group.cells}
                         if self.experiment.capture == "server"
                         else {relay.address[1] for relay in (*relays.values(), *primes.values())})
                capture = stack.enter_context(GroupCapture(
                    self.capture_dir / f"{first.scenario.name}_{first.one_way_delay_ms:g}ms_{first.client}.pcapng",
                    ports))
            try:
                # no full collection of the runner's heap (DuckDB's, the store's) in an attempt
                with gctuning.tuned(collect_first=True):
                    for cell, repetition in group.todo:
                        if not self.left():
                            break
                        ca = peers.certs[cell.server] if cell.peer else self.anchors.get(self.ports[cell.listener])
                        done.append(self.attempt(cell, repetition, relays[cell.server],
                                                 primes.get(cell.server, relays[cell.server]), ca))
            except KeyboardInterrupt:
                interrupted = True
        if done:
            self.store_group(done, {server: relay.records for server, relay in relays.items()}, peers.qlogs,
                             capture)
        if interrupted:
            raise KeyboardInterrupt

    def attempt(self, cell: Cell, repetition: int, relay, prime_relay=None, ca: Path | None = None) -> Made:
        summary = self.summary
        address, port = relay.address
        if cell.scenario.resumption:
            one = self._resumed(cell, repetition, relay, prime_relay or relay, ca)
        elif cell.client == "quicack":
            primed = cell.scenario.prime_bytes is not None
            if primed:
                self._prime(cell, prime_relay or relay)
            one = Made.from_probe(cell, repetition, self.loop.run_until_complete(endpoints.attempt(
                address, port, _path(cell), self.experiment.timeout_s, summary.attempted, repetition,
                receive_window=cell.scenario.receive_window_bytes, ack_policy=cell.ack_policy)))
            if primed and not cell.peer:
                self._server_done(one.odcid)
        else:
            one = Made.from_stack(cell, repetition, stackclients.attempt(
                cell.client, self.programs[cell.client], address, port, _path(cell),
                self.experiment.timeout_s, self._folder(cell, repetition), ca))
        summary.attempted += 1
        summary.outcomes[one.outcome] += 1
        took = (f"ttfb {one.ttfb_ms:.1f} ms" if one.ttfb_ms is not None else
                f"{one.response_bytes} bytes" if one.outcome == "ok" else (one.error_reason or ""))
        self.progress(f"[{summary.stored_before + summary.attempted}/{summary.total}] {cell.scenario.name} "
                      f"{cell.one_way_delay_ms:g} ms {cell.server} {cell.client} #{repetition}: "
                      f"{one.outcome} ({took})")
        return one

    def _folder(self, cell: Cell, repetition: int) -> Path:
        """A real client's folder for one attempt."""
        return self.client_dir / cell.client / (f"{cell.scenario.name}_{cell.one_way_delay_ms:g}ms_"
                                                f"{cell.server}_{repetition}")

    def _resumed(self, cell: Cell, repetition: int, relay, full_relay, ca: Path | None) -> Made:
        """A resumed attempt (:mod:`quicack.lab.resumed`): the full connection through
        ``full_relay`` (the scenario's path without its drops), then the timed one resuming it
        through ``relay``; both relays lead to the cell's server."""
        from quicack.lab import resumed

        path, timeout = _path(cell), self.experiment.timeout_s
        if cell.client == "quicack":
            first, second, columns = self.loop.run_until_complete(resumed.quicack_pair(
                full_relay.address, relay.address, path, timeout, self.summary.attempted, repetition,
                cell.scenario.receive_window_bytes, cell.ack_policy))
            one = Made.from_probe(cell, repetition, second)
            one.full, one.resumed = Made.from_probe(cell, repetition, first), columns
        else:
            first, second = resumed.stack_pair(cell.client, self.programs[cell.client], full_relay.address,
                                               relay.address, path, timeout, self._folder(cell, repetition), ca)
            one = Made.from_stack(cell, repetition, second)
            one.full = Made.from_stack(cell, repetition, first)
        took = f" (ttfb {one.full.ttfb_ms:.1f} ms)" if one.full.ttfb_ms is not None else ""
        self.progress(f"  full connection: {one.full.outcome}{took}; resumed: "
                      f"0-RTT {one.resumed.get('zero_rtt') or '(from the traces)'}")
        return one

    def _prime(self, cell: Cell, relay) -> None:
        """The earlier connection (not a row): quicack's client fetches ``prime_bytes`` through
        ``relay``; a Careful Resume server saves the path when the connection has ended."""
        address, port = relay.address
        one = self.loop.run_until_complete(endpoints.attempt(
            address, port, f"/{cell.scenario.prime_bytes}", self.experiment.timeout_s,
            receive_window=cell.scenario.receive_window_bytes))
        self.progress(f"  earlier connection, {cell.scenario.prime_bytes} bytes: {one.result.outcome} "
                      f"(ttlb {one.result.response_ms or 0:.0f} ms)")
        if not cell.peer:
            self._server_done(one.odcid)

    def _server_done(self, odcid: str) -> None:
        """Wait until quicack's server has ended the connection ``odcid`` (its qlog written): its
        saved path is then given back, and the next connection does not meet a server busy
        writing a large qlog."""
        endpoints.wait_for_qlog(self.server_dir, odcid, time.monotonic() + SERVER_QLOG_WAIT_S)

    def store_group(self, done: list[Made], records: dict, peer_qlogs: dict[str, list[Path]],
                    capture=None) -> None:
        """Ingest both ends' qlogs (and the group's capture), store the relays' records and the
        attempts' rows."""
        deadline = time.monotonic() + SERVER_QLOG_WAIT_S
        client_ids = self._ingest_clients(done)
        fulls = [i for i, one in enumerate(done) if one.full is not None]
        full_ids = {fulls[n]: connection_id for n, connection_id
                    in self._ingest_clients([done[i].full for i in fulls]).items()}
        self._find_flows(done, records)
        relay_ids = {server: rec.write(self.store) for server, rec in records.items() if rec is not None}
        server_ids, server_paths = self._match_peers(done, peer_qlogs)
        captured = self._ingest_capture(capture, done) if capture is not None else [None] * len(done)
        rows = []
        for i, one in enumerate(done):
            cell = one.cell
            if not cell.peer:
                path = endpoints.wait_for_qlog(self.server_dir, one.odcid, deadline) if one.odcid else None
                server_paths[i] = path
                found = self._ingest(path, "server") if path else []
                server_ids[i] = found[0] if found else None
            rows.append(dict(
                _settings(cell), **one.own, experiment=self.experiment.name, scenario=cell.scenario.name,
                server=cell.server, client=cell.client, one_way_delay_ms=cell.one_way_delay_ms,
                repetition=one.repetition, outcome=one.outcome, error_reason=one.error_reason,
                started_epoch_ms=one.started_epoch_ms, certificates_received=one.certificates,
                response_bytes_received=one.response_bytes, client_connection_id=client_ids.get(i),
                server_connection_id=server_ids[i], relay_run_id=relay_ids.get(cell.server),
                relay_flow=one.flow, client_qlog_path=str(one.qlog) if i in client_ids and one.qlog else None,
                server_qlog_path=str(server_paths[i]) if server_paths[i] else None,
                ttlb_ms=one.ttlb_ms, client_pto_source=stackclients.pto_source(cell.client),
                server_pto_source=stackclients.SERVER_PTO_SOURCES.get(cell.server),
                capture_connection_id=captured[i], **_resumed_columns(one, full_ids.get(i))))
        self.summary.stored += testbedrows.insert(self.store.con, rows)
        ackpolicyruns.insert(self.store.con, [
            dict(row, ack_policy=one.cell.ack_policy, path=one.cell.scenario.path,
                 return_kbps=one.cell.scenario.relay.get("rate_to_server_kbps"),
                 forward_loss_pct=one.cell.scenario.relay.get("loss_to_client", 0.0), download_ms=one.ttlb_ms,
                 ttfb_ms=one.ttfb_ms)
            for row, one in zip(rows, done) if one.cell.scenario.ack_policy is not None and one.cell.client == "quicack"])
        self.progress(f"stored {len(rows)} attempts of {done[0].cell.scenario.name}, "
                      f"{done[0].cell.one_way_delay_ms:g} ms")

    def _ingest_capture(self, capture, done: list[Made]) -> list[int | None]:
        """The group's capture, decrypted with its clients' keys: each attempt's connection in it."""
        from quicack.lab import testbedcapture

        made = done + [one.full for one in done if one.full is not None]
        capture.write_keylog([one.keylog for one in made],
                             [one.qlog.parent / "keylog.txt" for one in made if one.trace is None and one.qlog])
        result = self.store.ingest(capture.path)
        if result.file_id is None:
            self.progress(f"warning: {capture.path}: not ingested: {result.error}")
            return [None] * len(done)
        return testbedcapture.match(self.store, result.file_id, [one.odcid for one in done])

    def _ingest_clients(self, done: list[Made]) -> dict[int, int]:
        """Ingest the clients' traces: attempt index → client connection_id.  quicack's are
        written as one batch file first; a real client's ODCID and start come from its trace."""
        import orjson

        from quicack.scan import batches

        ids: dict[int, int] = {}
        traced = [i for i, one in enumerate(done) if one.trace is not None]
        if traced:
            path, _ = batches.write_batch(self.client_dir, [orjson.dumps(done[i].trace) for i in traced])
            found = dict(self._ingest(path, "client", by_trace=True))
            for n, i in enumerate(traced):
                done[i].qlog = path
                if found.get(n) is not None:
                    ids[i] = found[n]
        for i, one in enumerate(done):
            if one.trace is None and one.qlog is not None:
                found = self._ingest(one.qlog, "client")
                if found:
                    ids[i] = found[0]
                    odcid, first_sent = self.store.con.execute("""
                        SELECT c.odcid, (SELECT min(epoch_ms) FROM packets p WHERE p.connection_id = c.connection_id
                                         AND p.direction = 'sent')
                        FROM connections c WHERE c.connection_id = ?""", [ids[i]]).fetchall()[0]
                    one.odcid = one.odcid or odcid
                    one.started_epoch_ms = first_sent or one.started_epoch_ms
        return ids

    def _find_flows(self, done: list[Made], records: dict) -> None:
        """A real client's relay flow: the one that began while its process ran."""
        for server, rec in records.items():
            mine = [one for one in done if one.flow is None and one.window and one.cell.server == server]
            if rec is not None and mine:
                for one, flow in zip(mine, stackclients.flows_by_time(rec, [one.window for one in mine])):
                    one.flow = flow
                    one.odcid = one.odcid or rec.initial_dcids.get(flow)  # a client without a qlog

    def _match_peers(self, done: list[Made], peer_qlogs: dict[str, list[Path]]) -> tuple[list, list]:
        """Ingest each peer's qlog files; their server connections matched to the attempts."""
        ids: list[int | None] = [None] * len(done)
        paths: list[Path | None] = [None] * len(done)
        for server, files in peer_qlogs.items():
            found = []  # (connection_id, odcid, group_id, path, first event)
            for path in files:
                for connection_id in self._ingest(path, "server"):
                    found.append((connection_id, *self.store.con.execute(
                        "SELECT odcid, group_id, ? AS path, first_event_epoch_ms FROM connections "
                        "WHERE connection_id = ?", [str(path), connection_id]).fetchall()[0]))
            # in the order they began (a file per connection: its name is no order)
            found.sort(key=lambda conn: (conn[4] is None, conn[4] or 0, conn[0]))
            mine = [i for i, one in enumerate(done) if one.cell.server == server]
            matched = stackservers.match([conn[:3] for conn in found],
                                         [(done[i].odcid, done[i].scid) for i in mine])
            where = {conn[0]: Path(conn[3]) for conn in found}
            for i, connection_id in zip(mine, matched):
                ids[i], paths[i] = connection_id, where.get(connection_id)
        return ids, paths

    def _ingest(self, path: Path, vantage: str, by_trace: bool = False) -> list:
        """Ingest one qlog; its connections of that vantage point in the order stored (a stream
        may hold several, quinn's by group_id), or (trace index, connection) pairs."""
        result = self.store.ingest(path)
        if result.file_id is None:
            self.progress(f"warning: {path}: not ingested: {result.error}")
            return []
        found = self.store.con.execute(
            "SELECT trace_index, connection_id FROM connections WHERE file_id = ? AND vantage = ? "
            "ORDER BY connection_id", [result.file_id, vantage]).fetchall()
        return found if by_trace else [connection_id for _, connection_id in found]


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
                invocation.prepare_stacks(groups)
                listeners = invocation.listeners(groups)
                with (endpoints.ServerProcess(listeners, invocation.server_dir) if listeners
                      else contextlib.nullcontext()) as servers:
                    invocation.anchors = servers.anchors if servers else {}
                    invocation.warm_up()
                    for group in groups:
                        if not invocation.left():
                            break
                        invocation.run_group(group)
            finally:
                invocation.loop.close()
    summary.seconds = time.monotonic() - started
    return summary
