"""Testbed experiments: reviewed TOML files in ``experiments/`` that name a matrix of runs.

Theory of operation: an experiment is servers × clients × one-way delays × scenarios ×
repetitions (:meth:`Experiment.cells`: every combination but the repetition is a :class:`Cell`).
The servers are quicack's own (:data:`SERVE_SERVERS`) and real stacks by their peer name
(:mod:`quicack.lab.stackservers`); the clients quicack's aioquic client and real stacks' clients
(:data:`CLIENTS`, :mod:`quicack.lab.stackclients`).  A scenario is what the path and the server
do besides the delay: drop lists per direction (quic-network-simulator's semantics, counted from
1 per flow and direction, see :mod:`quicack.core.impairment`), random loss, rate limits, jitter,
the server's certificate chain length and certificate delay (quicack's servers only: a real
stack sends its one certificate when it is ready), and the response size.  The file::

    name = "instant-ack"            # optional; default: the file's name without .toml
    repetitions = 10
    servers = ["serve-wfc", "serve-iack", "serve-iack-ping"]   # also peers: "quic-go", "quinn", …
    clients = ["quicack"]           # also "quic-go", "ngtcp2", "quinn", "quiche", "tquic", "s2n-quic", "kwik"
    one_way_delay_ms = [0.5, 4.5, 10, 50, 150]
    address = "127.0.0.1"           # loopback: where the servers and the relays listen
    capture = false                 # true or "server": a capture per group of the relay ↔ server
                                    # leg (dumpcap); "client": of the client ↔ relay leg
    cert_delay_ms = 5               # the defaults of every scenario's server settings
    cert_chain_length = 1
    response_bytes = 10240

    [[scenario]]
    name = "client-second-flight-lost"
    drop_to_server = "2,3,4"        # or [2, 3, 4], or a table: one list per server or per client
    # also: servers, one_way_delay_ms, drop_to_client, loss_to_client, loss_to_server, burst,
    # jitter_ms, rate_to_client_kbps, rate_to_server_kbps, queue_bytes, queue_packets,
    # queue_packets_to_client, queue_packets_to_server (one direction's own bound),
    # rate_overhead_bytes (bytes per datagram the rate counts besides its UDP payload: 28),
    # cert_delay_ms, cert_chain_length, response_bytes, description, ack_policy, path,
    # request_ack_frequency, prime_bytes, prime_rate_to_client_kbps, receive_window_bytes,
    # resumption (below)

``ack_policy`` (also a top-level default) is how quicack's client acknowledges the response
(:func:`quicack.core.ackschedule.make`: ``aioquic``, ``ratio:N``, ``custura``,
``ack-frequency``), ``request_ack_frequency = [N, MAX_DELAY_MS]`` has quicack's servers ask a
client that advertises ``min_ack_delay`` for one ACK per N packets; a scenario that names an
``ack_policy`` also gets an ``ack_policy_runs`` row per attempt
of quicack's client (:mod:`quicack.lab.ackpolicyruns`), whose ``path`` column is the scenario's
``path`` label (``geo``, ``terrestrial``, …; default: the scenario's name).

Careful Resume (issue 30): the server ``serve-careful-resume`` is ``serve-wfc`` with the
congestion controller ``careful-resume`` (:mod:`quicack.lab.carefulcc`); the other servers use
aioquic's New Reno (slow start).  ``prime_bytes`` makes quicack's client fetch that many bytes
through the path first, in an earlier connection that is not a row: the one whose capacity and
RTT a Careful Resume server saves, waited for until the server has ended it (its qlog written)
— the same for every server, so slow start and Careful Resume meet the same path.
``prime_rate_to_client_kbps`` gives the earlier connection another bottleneck rate than the
scenario's (a path whose capacity dropped in between: Safe Retreat).  ``receive_window_bytes``
raises the client's initial flow-control limits (aioquic's 1 MB, doubled whenever half is used,
would otherwise cap what a sender may have in flight on a high-BDP path).

Resumption and 0-RTT (issue 29): ``resumption = true`` makes each attempt a pair through the
relay — a full connection keeping the session ticket and NEW_TOKEN, then the attempt itself, a
connection resuming the session with the same GET in 0-RTT (:mod:`quicack.lab.resumed`: quicack's
client, ngtcp2's and quic-go's).  The drop lists apply to the resumed connection only (the full
one meets the path without drops, as the earlier connection of ``prime_bytes``).

A drop list may differ per server and per client, as the datagrams a stack sends do: a table
whose keys are the scenario's servers gives one per server, one whose keys are the experiment's
clients one per client (when both name the same set, the servers), and each of its values may
again be such a table of the other kind — ``{ serve-wfc = "2", serve-iack = { quicack = "2",
quic-go = "3" } }`` — or, for readability, a sub-table ``[scenario.drop_to_server]`` after the
scenario's other keys.  :attr:`Scenario.drop_to_server` holds the result per (server, client).

A file is checked whole before anything runs: an unknown key, a value of the wrong kind, a
malformed drop list, an address outside loopback, a relay setting the relay refuses — each is
refused with one line naming the file, the line and the key (:class:`QuicackError` with the
position ``line N``).  tomllib gives no line numbers, so :func:`key_line` finds the key in the
text: the line that assigns it in the right table (the N-th ``[[scenario]]``, or the top level;
a ``[scenario.KEY]`` header assigns KEY).
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from quicack.core.impairment import parse_drops
from quicack.lab import stackclients
from quicack.model import QuicackError

#: quicack's own servers, by the name a ``testbed_runs`` row gives them, and their serve mode
SERVE_SERVERS = {"serve-wfc": "wfc", "serve-iack": "iack", "serve-iack-ping": "iack-ping",
                 "serve-careful-resume": "wfc", "serve-iack-uncounted": "iack-uncounted"}
#: quicack's servers whose congestion controller is not aioquic's New Reno
SERVE_CONGESTION = {"serve-careful-resume": "careful-resume"}
#: the servers of an experiment that names none: seed 000's three (not Careful Resume, nor the
#: instant ACK that breaks the anti-amplification limit on purpose)
DEFAULT_SERVERS = ("serve-wfc", "serve-iack", "serve-iack-ping")
#: clients: quicack's aioquic client (the scanner's probe), then real stacks' clients
CLIENTS = ("quicack", *stackclients.CLIENTS)


def server_names() -> tuple[str, ...]:
    """Every server name: quicack's own, then the real stacks (:func:`quicack.lab.stackservers.names`)."""
    from quicack.lab import stackservers

    return tuple(SERVE_SERVERS) + stackservers.names()

TOP_KEYS = ("name", "description", "repetitions", "servers", "clients", "one_way_delay_ms", "address",
            "seed", "timeout_s", "cert_delay_ms", "cert_chain_length", "response_bytes", "ack_policy",
            "path", "capture", "scenario")
#: relay settings a scenario may give (the relay's option names, :meth:`RelayConfig.from_options`)
RELAY_KEYS = ("loss_to_client", "loss_to_server", "burst", "jitter_ms", "rate_to_client_kbps",
              "rate_to_server_kbps", "queue_bytes", "queue_packets", "queue_packets_to_client",
              "queue_packets_to_server", "rate_overhead_bytes")
SERVER_KEYS = ("cert_delay_ms", "cert_chain_length", "response_bytes")
#: the earlier connection and the client's flow-control limits (module docstring)
PRIME_KEYS = ("prime_bytes", "prime_rate_to_client_kbps", "receive_window_bytes")
SCENARIO_KEYS = ("name", "description", "servers", "one_way_delay_ms", "drop_to_client", "drop_to_server",
                 "ack_policy", "path", "request_ack_frequency", "resumption", *SERVER_KEYS, *RELAY_KEYS,
                 *PRIME_KEYS)
DROP_KEYS = ("drop_to_client", "drop_to_server")
#: quicack serve's bound on a response (quicack.lab.serve.MAX_RESPONSE_BYTES; serve loads aioquic)
MAX_RESPONSE_BYTES = 64 << 20


def key_line(text: str, key: str, scenario: int | None = None) -> int | None:
    """The line (from 1) assigning ``key`` at the top level (``scenario`` None) or in the
    ``scenario``-th ``[[scenario]]`` table (from 0); the table's header line when the key is not
    assigned there; None when not found."""
    section, count, header = None, -1, None
    pattern = re.compile(rf"""^\s*(["']?){re.escape(key)}\1\s*=""")
    sub = re.compile(rf"""\[\s*scenario\s*\.\s*(["']?){re.escape(key)}\1\s*[.\]]""")
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if re.match(r"\[\[\s*scenario\s*\]\]", stripped):
            count += 1
            section = ("scenario", count)
            if count == scenario:
                header = number
        elif re.match(r"\[\s*scenario\s*\.", stripped) and section and section[0] == "scenario":
            if sub.match(stripped) and count == scenario:
                return number
            section = ("scenario-sub", count)  # its keys are not the scenario's
        elif stripped.startswith("["):
            section = ("other", 0)
        elif pattern.match(line) and section == (None if scenario is None else ("scenario", scenario)):
            return number
    return header


@dataclass(frozen=True, eq=False)
class Scenario:
    """What the path and the server do in one scenario (drop lists per (server, client): ``""``
    none); compared and hashed as an object (cells of one experiment share it)."""

    name: str
    servers: tuple[str, ...]
    one_way_delay_ms: tuple[float, ...]
    drop_to_client: dict[tuple[str, str], str]
    drop_to_server: dict[tuple[str, str], str]
    cert_delay_ms: float
    cert_chain_length: int
    #: None: the server's one line of text (``GET /``)
    response_bytes: int | None
    relay: dict = field(default_factory=dict)
    description: str = ""
    #: quicack's client's ACK policy (None: aioquic's own, and no ack_policy_runs rows) and the
    #: path's label in ack_policy_runs
    ack_policy: str | None = None
    path: str = ""
    #: quicack's servers ask a client that advertises min_ack_delay for one ACK per N packets or
    #: MAX_DELAY ms ([N, MAX_DELAY]; :mod:`quicack.lab.ackrequest`)
    request_ack_frequency: tuple[int, float] | None = None
    #: the earlier connection's response size (None: none), its bottleneck rate (None: the
    #: scenario's), and the client's flow-control limit (None: aioquic's)
    prime_bytes: int | None = None
    prime_rate_to_client_kbps: float | None = None
    receive_window_bytes: int | None = None
    #: each attempt a full connection, then the timed one resuming it with 0-RTT
    resumption: bool = False


@dataclass(frozen=True)
class Cell:
    """One matrix cell: everything about a connection attempt but its repetition number."""

    scenario: Scenario
    server: str
    client: str
    one_way_delay_ms: float

    @property
    def drop_to_client(self) -> str:
        return self.scenario.drop_to_client.get((self.server, self.client), "")

    @property
    def drop_to_server(self) -> str:
        return self.scenario.drop_to_server.get((self.server, self.client), "")

    @property
    def ack_policy(self) -> str:
        """How quicack's client acknowledges in this cell (aioquic's own unless the scenario says)."""
        return self.scenario.ack_policy or "aioquic"

    @property
    def peer(self) -> bool:
        """Whether the server is a real stack (a peer), not quicack serve."""
        return self.server not in SERVE_SERVERS

    @property
    def cert_chain_length(self) -> int:
        """Certificates the server sends: the scenario's, or a peer's one."""
        return 1 if self.peer else self.scenario.cert_chain_length

    @property
    def cert_delay_ms(self) -> float:
        """The server's added certificate delay: the scenario's; 0 for a peer (its own timing)."""
        return 0.0 if self.peer else self.scenario.cert_delay_ms

    @property
    def listener(self) -> tuple[str, float, int, str, tuple[int, float] | None] | None:
        """What quicack's server must be: (serve mode, certificate delay, chain length, congestion
        controller, ACK frequency it asks for); None for a peer."""
        s = self.scenario
        return None if self.peer else (SERVE_SERVERS[self.server], s.cert_delay_ms, s.cert_chain_length,
                                       SERVE_CONGESTION.get(self.server, "reno"), s.request_ack_frequency)

    def relay_options(self, listen: str, upstream: str, seed: int, prime: bool = False) -> dict:
        """Keyword arguments of :meth:`quicack.lab.relay.RelayConfig.from_options` (``prime``: for
        the earlier connection, at its rate and without drops)."""
        if prime:
            relay = dict(self.scenario.relay)
            if self.scenario.prime_rate_to_client_kbps is not None:
                relay["rate_to_client_kbps"] = self.scenario.prime_rate_to_client_kbps
            return dict(relay, listen=listen, upstream=upstream, delay_ms=self.one_way_delay_ms, seed=seed)
        return dict(self.scenario.relay, listen=listen, upstream=upstream, delay_ms=self.one_way_delay_ms,
                    drop_to_client=self.drop_to_client, drop_to_server=self.drop_to_server, seed=seed)


@dataclass(frozen=True)
class Experiment:
    path: Path
    name: str
    repetitions: int
    servers: tuple[str, ...]
    clients: tuple[str, ...]
    address: str
    seed: int
    timeout_s: float
    scenarios: tuple[Scenario, ...]
    description: str = ""
    #: capture each group's relay ↔ server leg (``server``) or client ↔ relay leg (``client``);
    #: None: no capture (:mod:`quicack.lab.testbedcapture`)
    capture: str | None = None

    def cells(self) -> list[Cell]:
        """Every cell, scenario by scenario, delay by delay, then server and client."""
        return [Cell(s, server, client, delay) for s in self.scenarios for delay in s.one_way_delay_ms
                for server in s.servers for client in self.clients]


class _Reader:
    """Checks values of one file, raising QuicackError at the line of the key."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def fail(self, message: str, key: str, scenario: int | None = None) -> QuicackError:
        line = key_line(self.text, key, scenario)
        return QuicackError(message, str(self.path), f"line {line}" if line else None)

    def unknown(self, table: dict, known: tuple[str, ...], where: str, scenario: int | None = None) -> None:
        for key in table:
            if key not in known:
                raise self.fail(f"unknown key {key!r} {where}; known: {', '.join(known)}", key, scenario)

    def number(self, table: dict, key: str, default, low: float, scenario: int | None = None,
               integer: bool = False, above: bool = False):
        value = table.get(key, default)
        kinds = int if integer else (int, float)
        if (isinstance(value, bool) or not isinstance(value, kinds)
                or (value <= low if above else value < low)):
            kind = "an integer" if integer else "a number"
            raise self.fail(f"{key} {value!r}: expected {kind} {'above' if above else 'of at least'} "
                            f"{low:g}", key, scenario)
        return value

    def names(self, table: dict, key: str, default: tuple, known, scenario: int | None = None) -> tuple[str, ...]:
        value = table.get(key, list(default))
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise self.fail(f"{key}: expected a list of names", key, scenario)
        for v in value:
            if v not in known:
                raise self.fail(f"{key}: unknown {key[:-1]} {v!r}; known: {', '.join(known)}", key, scenario)
        if len(set(value)) != len(value):
            raise self.fail(f"{key}: a name is given twice", key, scenario)
        return tuple(value)

    def delays(self, table: dict, default, scenario: int | None = None) -> tuple[float, ...]:
        key = "one_way_delay_ms"
        value = table.get(key, default)
        if not isinstance(value, list):
            value = [value]
        if not value or any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in value):
            raise self.fail(f"{key} {table.get(key, default)!r}: expected delays in ms, none negative",
                            key, scenario)
        if len(set(value)) != len(value):
            raise self.fail(f"{key}: a delay is given twice", key, scenario)
        return tuple(float(v) for v in value)

    def drops(self, table: dict, key: str, servers: tuple[str, ...], clients: tuple[str, ...],
              scenario: int) -> dict[tuple[str, str], str]:
        """``"2,3"``, ``[2, 3]``, or a table of such lists per server or per client, each of
        which may be a table of the other kind (module docstring) → (server, client) → ``"2,3"``."""
        value = table.get(key, "")
        out = {}
        for first, nested in self._level(value, key, servers, clients, scenario, None).items():
            kind = "server" if first[0] == "server" else "client"
            name = key if first[1] is None else f"{key}.{first[1]}"
            for second, drops in self._level(nested, name, servers, clients, scenario, kind).items():
                pairs = {"server": [], "client": []}
                for level in (first, second):
                    if level[1] is not None:
                        pairs[level[0]] = [level[1]]
                label = name if second[1] is None else f"{name}.{second[1]}"
                text = self._drop_list(drops, label, key, scenario)
                for server in pairs["server"] or servers:
                    for client in pairs["client"] or clients:
                        out[(server, client)] = text
        return out

    def _level(self, value, name: str, servers: tuple[str, ...], clients: tuple[str, ...], scenario: int,
               outer: str | None) -> dict[tuple[str, str | None], object]:
        """One level of a drop table: (kind, name) → value; ('all', None) for a plain list."""
        if not isinstance(value, dict):
            return {("all", None): value}
        key = name.split(".")[0]
        kinds = [k for k in ("server", "client") if k != outer]
        sets = {"server": servers, "client": clients}
        for kind in kinds:
            if set(value) == set(sets[kind]):
                return {(kind, v): value[v] for v in sets[kind]}
        if outer is not None and isinstance(next(iter(value.values()), None), dict):
            raise self.fail(f"{name}: a drop table nests one level at most", key, scenario)
        kind = max(kinds, key=lambda k: len(set(value) & set(sets[k])))
        where = "the scenario" if kind == "server" else "the experiment"
        missing = [v for v in sets[kind] if v not in value]
        extra = [v for v in value if v not in sets[kind]]
        raise self.fail(f"{name}: a table of drop lists names each {kind} of {where} once "
                        f"({', '.join(sets[kind])}); " + (f"missing {', '.join(missing)}" if missing
                                                         else f"not in {where}: {', '.join(extra)}"),
                        key, scenario)

    def _drop_list(self, drops, name: str, key: str, scenario: int) -> str:
        if isinstance(drops, list):
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in drops):
                raise self.fail(f"{name} {drops!r}: expected datagram indexes counted from 1", key, scenario)
            drops = ",".join(str(d) for d in drops)
        if not isinstance(drops, str):
            raise self.fail(f"{name} {drops!r}: expected a drop list such as \"2,3,4\"", key, scenario)
        try:
            indexes = parse_drops(drops, name)
        except QuicackError as e:
            raise self.fail(e.message, key, scenario) from None
        return ",".join(str(i) for i in sorted(indexes))


def _address(reader: _Reader, doc: dict) -> str:
    value = doc.get("address", "127.0.0.1")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise reader.fail(f"address {value!r}: expected an IP address on loopback, e.g. 127.0.0.1",
                          "address") from None
    if not address.is_loopback:
        raise reader.fail(f"address {value!r}: the testbed uses loopback addresses only "
                          "(127.0.0.0/8, ::1)", "address")
    return str(address)


def _scenario(reader: _Reader, table, index: int, top: dict, servers, clients, delays) -> Scenario:
    if not isinstance(table, dict):
        raise reader.fail("[[scenario]] must be a table", "scenario")
    reader.unknown(table, SCENARIO_KEYS, "in [[scenario]]", index)
    name = table.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise reader.fail(f"name {name!r}: every [[scenario]] needs a name (letters, digits, . _ -)",
                          "name", index)
    mine = reader.names(table, "servers", servers, server_names(), index)
    settings = {key: reader.number(table, key, top[key], 1 if key == "cert_chain_length" else 0, index,
                                   integer=key != "cert_delay_ms")
                if table.get(key, top[key]) is not None else None for key in SERVER_KEYS}
    if settings["cert_chain_length"] > 32:
        raise reader.fail("cert_chain_length: at most 32 certificates", "cert_chain_length", index)
    if (settings["response_bytes"] or 0) > MAX_RESPONSE_BYTES:
        raise reader.fail(f"response_bytes: at most {MAX_RESPONSE_BYTES}", "response_bytes", index)
    relay = {}
    for key in RELAY_KEYS:
        if key in table:
            counted = key in ("burst", "rate_overhead_bytes") or key.startswith("queue_")
            low = 1 if counted and key != "rate_overhead_bytes" else 0
            relay[key] = reader.number(table, key, None, low, index, integer=counted,
                                       above=key.startswith("rate_"))
    description = table.get("description", "")
    prime = {key: reader.number(table, key, None, 1, index, integer=not key.endswith("_kbps"))
             if key in table else None for key in PRIME_KEYS}
    if prime["prime_rate_to_client_kbps"] is not None and prime["prime_bytes"] is None:
        raise reader.fail("prime_rate_to_client_kbps is the earlier connection's rate: give prime_bytes",
                          "prime_rate_to_client_kbps", index)
    if (prime["prime_bytes"] or 0) > MAX_RESPONSE_BYTES:
        raise reader.fail(f"prime_bytes: at most {MAX_RESPONSE_BYTES}", "prime_bytes", index)
    policy, label = _ack_policy(reader, table, top, index), table.get("path", top.get("path") or name)
    if not isinstance(label, str) or not label:
        raise reader.fail(f"path {label!r}: expected a label such as \"geo\"", "path", index)
    resume = _flag(reader, table, "resumption", index)
    if resume:
        _resumers(reader, clients, index)
    return Scenario(name, mine, reader.delays(table, list(delays), index),
                    reader.drops(table, "drop_to_client", mine, clients, index),
                    reader.drops(table, "drop_to_server", mine, clients, index),
                    float(settings["cert_delay_ms"]), settings["cert_chain_length"],
                    settings["response_bytes"], relay, description if isinstance(description, str) else "",
                    policy, label, _request(reader, table, index), **prime, resumption=resume)


def _capture(reader: _Reader, doc: dict) -> str | None:
    """``capture``: false, true (the server's leg), "server" or "client" (the leg next to it)."""
    value = doc.get("capture", False)
    if value is True or value in ("server", "client"):
        return "server" if value is True else value
    if value is False:
        return None
    raise reader.fail(f"capture {value!r}: expected false, true, \"server\" or \"client\"", "capture")


def _flag(reader: _Reader, table: dict, key: str, index: int | None = None) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise reader.fail(f"{key} {value!r}: expected true or false", key, index)
    return value


def _resumers(reader: _Reader, clients: tuple[str, ...], index: int) -> None:
    """Every client of a resumption scenario must be able to resume (:mod:`quicack.lab.resumed`)."""
    from quicack.lab import resumed

    for client in clients:
        try:
            resumed.check_client(client)
        except QuicackError as e:
            raise reader.fail(e.message, "resumption", index) from None


def _request(reader: _Reader, table: dict, index: int) -> tuple[int, float] | None:
    from quicack.lab import ackrequest

    value = table.get("request_ack_frequency")
    try:
        ackrequest.check(value)
    except QuicackError as e:
        raise reader.fail(e.message, "request_ack_frequency", index) from None
    return None if value is None else (value[0], float(value[1]))


def _ack_policy(reader: _Reader, table: dict, top: dict, index: int) -> str | None:
    from quicack.core import ackschedule

    value = table.get("ack_policy", top.get("ack_policy"))
    if value is None:
        return None
    try:
        ackschedule.make(value) if isinstance(value, str) else ackschedule.make("?")
    except QuicackError as e:
        raise reader.fail(e.message, "ack_policy", index if "ack_policy" in table else None) from None
    return value


def _check_relay(reader: _Reader, experiment: Experiment, index: int, scenario: Scenario) -> None:
    """What the relay itself would refuse (jitter above the delay, a queue without a rate)."""
    from quicack.lab.relay import RelayConfig

    host = f"[{experiment.address}]" if ":" in experiment.address else experiment.address
    for cell in experiment.cells():
        if cell.scenario is scenario:
            try:
                RelayConfig.from_options(**cell.relay_options(f"{host}:0", f"{host}:1", experiment.seed))
            except QuicackError as e:  # (it names its command-line options: --jitter-ms → jitter_ms)
                message = re.sub(r"--([a-z-]+)", lambda m: m.group(1).replace("-", "_"), e.message)
                key = next((k for k in RELAY_KEYS if k in scenario.relay and k in message), "name")
                raise reader.fail(f"[[scenario]] {scenario.name!r}: {message}", key, index) from None


def load(path: str | Path) -> Experiment:
    """Read and check an experiment file (module docstring); QuicackError naming file and line."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise QuicackError(f"cannot read: {e.strerror}", str(path)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise QuicackError(f"not TOML: {e}", str(path)) from None
    reader = _Reader(path, text)
    reader.unknown(doc, TOP_KEYS, "at the top level")
    name = doc.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise reader.fail(f"name {name!r}: expected a text", "name")
    chosen = reader.names(doc, "servers", DEFAULT_SERVERS,
                          server_names())
    clients = reader.names(doc, "clients", CLIENTS[:1], CLIENTS)
    delays = reader.delays(doc, [0.0])
    top = {"cert_delay_ms": reader.number(doc, "cert_delay_ms", 0.0, 0),
           "cert_chain_length": reader.number(doc, "cert_chain_length", 1, 1, integer=True),
           "response_bytes": reader.number(doc, "response_bytes", 0, 0, integer=True)
           if "response_bytes" in doc else None, "ack_policy": doc.get("ack_policy"), "path": doc.get("path")}
    tables = doc.get("scenario", [{"name": "default"}])
    if not isinstance(tables, list) or not tables:
        raise reader.fail("[[scenario]]: expected one or more tables", "scenario")
    scenarios = tuple(_scenario(reader, t, i, top, chosen, clients, delays) for i, t in enumerate(tables))
    for i, s in enumerate(scenarios):
        if s.name in [t.name for t in scenarios[:i]]:
            raise reader.fail(f"name {s.name!r}: two scenarios have this name", "name", i)
    experiment = Experiment(
        path, name, reader.number(doc, "repetitions", 1, 1, integer=True), chosen, clients,
        _address(reader, doc), reader.number(doc, "seed", 0, 0, integer=True),
        float(reader.number(doc, "timeout_s", 10.0, 0, above=True)), scenarios,
        doc.get("description", "") if isinstance(doc.get("description", ""), str) else "",
        _capture(reader, doc))
    for i, s in enumerate(scenarios):
        _check_relay(reader, experiment, i, s)
    return experiment
