"""Testbed experiments: reviewed TOML files in ``experiments/`` that name a matrix of runs.

Theory of operation: an experiment is servers × clients × one-way delays × scenarios ×
repetitions (:meth:`Experiment.cells`: every combination but the repetition is a :class:`Cell`).
A scenario is what the path and the server do besides the delay: drop lists per direction
(quic-network-simulator's semantics, counted from 1 per flow and direction, see
:mod:`quicack.core.impairment`), random loss, rate limits, jitter, the server's certificate chain
length and certificate delay, and the response size.  The file::

    name = "instant-ack"            # optional; default: the file's name without .toml
    repetitions = 10
    servers = ["serve-wfc", "serve-iack", "serve-iack-ping"]
    clients = ["quicack"]
    one_way_delay_ms = [0.5, 4.5, 10, 50, 150]
    address = "127.0.0.1"           # loopback: where the servers and the relays listen
    cert_delay_ms = 5               # the defaults of every scenario's server settings
    cert_chain_length = 1
    response_bytes = 10240

    [[scenario]]
    name = "client-second-flight-lost"
    drop_to_server = "2,3,4"        # or [2, 3, 4], or a table: one list per server
    # also: servers, one_way_delay_ms, drop_to_client, loss_to_client, loss_to_server, burst,
    # jitter_ms, rate_to_client_kbps, rate_to_server_kbps, queue_bytes, queue_packets,
    # cert_delay_ms, cert_chain_length, response_bytes, description

A file is checked whole before anything runs: an unknown key, a value of the wrong kind, a
malformed drop list, an address outside loopback, a relay setting the relay refuses — each is
refused with one line naming the file, the line and the key (:class:`QuicackError` with the
position ``line N``).  tomllib gives no line numbers, so :func:`key_line` finds the key in the
text: the line that assigns it in the right table (the N-th ``[[scenario]]``, or the top level).
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from quicack.core.impairment import parse_drops
from quicack.model import QuicackError

#: quicack's own servers, by the name a ``testbed_runs`` row gives them, and their serve mode
SERVE_SERVERS = {"serve-wfc": "wfc", "serve-iack": "iack", "serve-iack-ping": "iack-ping"}
#: clients: quicack's aioquic client (the scanner's probe)
CLIENTS = ("quicack",)

TOP_KEYS = ("name", "description", "repetitions", "servers", "clients", "one_way_delay_ms", "address",
            "seed", "timeout_s", "cert_delay_ms", "cert_chain_length", "response_bytes", "scenario")
#: relay settings a scenario may give (the relay's option names, :meth:`RelayConfig.from_options`)
RELAY_KEYS = ("loss_to_client", "loss_to_server", "burst", "jitter_ms", "rate_to_client_kbps",
              "rate_to_server_kbps", "queue_bytes", "queue_packets")
SERVER_KEYS = ("cert_delay_ms", "cert_chain_length", "response_bytes")
SCENARIO_KEYS = ("name", "description", "servers", "one_way_delay_ms", "drop_to_client",
                 "drop_to_server") + SERVER_KEYS + RELAY_KEYS
DROP_KEYS = ("drop_to_client", "drop_to_server")
#: quicack serve's bound on a response (quicack.lab.serve.MAX_RESPONSE_BYTES; serve loads aioquic)
MAX_RESPONSE_BYTES = 64 << 20


def key_line(text: str, key: str, scenario: int | None = None) -> int | None:
    """The line (from 1) assigning ``key`` at the top level (``scenario`` None) or in the
    ``scenario``-th ``[[scenario]]`` table (from 0); the table's header line when the key is not
    assigned there; None when not found."""
    section, count, header = None, -1, None
    pattern = re.compile(rf"""^\s*(["']?){re.escape(key)}\1\s*=""")
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if re.match(r"\[\[\s*scenario\s*\]\]", stripped):
            count += 1
            section = ("scenario", count)
            if count == scenario:
                header = number
        elif stripped.startswith("["):
            section = ("other", 0)
        elif pattern.match(line) and section == (None if scenario is None else ("scenario", scenario)):
            return number
    return header


@dataclass(frozen=True, eq=False)
class Scenario:
    """What the path and the server do in one scenario (drop lists per server: ``""`` none);
    compared and hashed as an object (cells of one experiment share it)."""

    name: str
    servers: tuple[str, ...]
    one_way_delay_ms: tuple[float, ...]
    drop_to_client: dict[str, str]
    drop_to_server: dict[str, str]
    cert_delay_ms: float
    cert_chain_length: int
    #: None: the server's one line of text (``GET /``)
    response_bytes: int | None
    relay: dict = field(default_factory=dict)
    description: str = ""


@dataclass(frozen=True)
class Cell:
    """One matrix cell: everything about a connection attempt but its repetition number."""

    scenario: Scenario
    server: str
    client: str
    one_way_delay_ms: float

    @property
    def drop_to_client(self) -> str:
        return self.scenario.drop_to_client.get(self.server, "")

    @property
    def drop_to_server(self) -> str:
        return self.scenario.drop_to_server.get(self.server, "")

    @property
    def listener(self) -> tuple[str, float, int]:
        """What the server must be: (serve mode, certificate delay, chain length)."""
        s = self.scenario
        return SERVE_SERVERS[self.server], s.cert_delay_ms, s.cert_chain_length

    def relay_options(self, listen: str, upstream: str, seed: int) -> dict:
        """Keyword arguments of :meth:`quicack.lab.relay.RelayConfig.from_options`."""
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

    def drops(self, table: dict, key: str, servers: tuple[str, ...], scenario: int) -> dict[str, str]:
        """``"2,3"``, ``[2, 3]`` or a table of one such list per server → server → ``"2,3"``."""
        value = table.get(key, "")
        per_server = value if isinstance(value, dict) else {s: value for s in servers}
        missing = [s for s in servers if s not in per_server]
        extra = [s for s in per_server if s not in servers]
        if missing or extra:
            raise self.fail(f"{key}: a table of drop lists names each server of the scenario once "
                            f"({', '.join(servers)}); " + (f"missing {', '.join(missing)}" if missing
                                                           else f"not in the scenario: {', '.join(extra)}"),
                            key, scenario)
        out = {}
        for server, drops in per_server.items():
            name = key if not isinstance(value, dict) else f"{key}.{server}"
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
            out[server] = ",".join(str(i) for i in sorted(indexes))
        return out


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


def _scenario(reader: _Reader, table, index: int, top: dict, servers, delays) -> Scenario:
    if not isinstance(table, dict):
        raise reader.fail("[[scenario]] must be a table", "scenario")
    reader.unknown(table, SCENARIO_KEYS, "in [[scenario]]", index)
    name = table.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise reader.fail(f"name {name!r}: every [[scenario]] needs a name (letters, digits, . _ -)",
                          "name", index)
    mine = reader.names(table, "servers", servers, SERVE_SERVERS, index)
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
            low = 1 if key in ("burst", "queue_bytes", "queue_packets") else 0
            relay[key] = reader.number(table, key, None, low, index,
                                       integer=key in ("burst", "queue_bytes", "queue_packets"),
                                       above=key.startswith("rate_"))
    description = table.get("description", "")
    return Scenario(name, mine, reader.delays(table, list(delays), index),
                    reader.drops(table, "drop_to_client", mine, index),
                    reader.drops(table, "drop_to_server", mine, index),
                    float(settings["cert_delay_ms"]), settings["cert_chain_length"],
                    settings["response_bytes"], relay, description if isinstance(description, str) else "")


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
    servers = reader.names(doc, "servers", tuple(SERVE_SERVERS), SERVE_SERVERS)
    clients = reader.names(doc, "clients", CLIENTS, CLIENTS)
    delays = reader.delays(doc, [0.0])
    top = {"cert_delay_ms": reader.number(doc, "cert_delay_ms", 0.0, 0),
           "cert_chain_length": reader.number(doc, "cert_chain_length", 1, 1, integer=True),
           "response_bytes": reader.number(doc, "response_bytes", 0, 0, integer=True)
           if "response_bytes" in doc else None}
    tables = doc.get("scenario", [{"name": "default"}])
    if not isinstance(tables, list) or not tables:
        raise reader.fail("[[scenario]]: expected one or more tables", "scenario")
    scenarios = tuple(_scenario(reader, t, i, top, servers, delays) for i, t in enumerate(tables))
    for i, s in enumerate(scenarios):
        if s.name in [t.name for t in scenarios[:i]]:
            raise reader.fail(f"name {s.name!r}: two scenarios have this name", "name", i)
    experiment = Experiment(
        path, name, reader.number(doc, "repetitions", 1, 1, integer=True), servers, clients,
        _address(reader, doc), reader.number(doc, "seed", 0, 0, integer=True),
        float(reader.number(doc, "timeout_s", 10.0, 0, above=True)), scenarios,
        doc.get("description", "") if isinstance(doc.get("description", ""), str) else "")
    for i, s in enumerate(scenarios):
        _check_relay(reader, experiment, i, s)
    return experiment
