"""Scan targets: lists streamed line by line, address overrides, exclusions, address policy.

Theory of operation: a target list is never held in memory.  :func:`read_list` yields one
:class:`Target` per usable line with its 0-based position among targets (``index``, stable
across runs of the same file, which is what resume and the connection-ID tag use) and the
line number for messages.  Accepted inputs: a Tranco list (``rank,domain`` CSV, also inside a
``.zip``), or a plain list (one name or address per line; ``#`` starts a comment).  Each name is
checked as it is read (:func:`quicack.scan.hostname.check`): a usable one becomes its A-label
form, one that is not a host name keeps its text and the reason (``invalid``), and the scan
records it with outcome ``invalid_name`` instead of stopping.

Addresses come from ``--resolve NAME=IP[:PORT]``, a hosts file (``ADDRESS NAME…``, port 443)
or the system resolver.  :class:`Policy` decides what may be probed: exclusions (addresses,
prefixes, names and ``*.suffix`` patterns from ``--exclude``) and the refusal of private,
loopback and reserved addresses unless ``--allow-private``.  Pure except for opening files.
"""

from __future__ import annotations

import io
import ipaddress
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from quicack.model import QuicackError
from quicack.scan import hostname

DEFAULT_PORT = 443


@dataclass(frozen=True)
class Target:
    index: int
    #: the name as DNS and TLS carry it (A-label, lower case), or as written when ``invalid``
    domain: str
    rank: int | None
    line: int
    #: why the line names no host (outcome ``invalid_name``), None for a usable name
    invalid: str | None = None

#: Longest text of an invalid name kept for its row.
KEPT_TEXT = 300


def _lines(path: Path) -> Iterator[str]:
    if path.suffix.lower() == ".zip":
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if not n.endswith("/")]
            if len(names) != 1:
                raise QuicackError(f"expected one file inside the zip, found {len(names)}", str(path))
            with z.open(names[0]) as raw:
                yield from io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        yield from f


def read_list(path: str | Path) -> Iterator[Target]:
    """Targets of a Tranco CSV (``rank,domain``) or a plain list, streamed."""
    path = Path(path)
    if not path.exists():
        raise QuicackError("no such list", str(path))
    index = 0
    try:
        for number, raw in enumerate(_lines(path), start=1):
            line = raw.split("#", 1)[0].strip().lstrip("\ufeff")
            if not line:
                continue
            rank = None
            if "," in line:
                first, _, rest = line.partition(",")
                rest = rest.split(",", 1)[0].strip()
                if first.strip().isdigit() and rest:
                    rank, line = int(first), rest
                elif number == 1:
                    continue  # a CSV header line
                else:
                    raise QuicackError(f"expected 'rank,domain', got {raw.strip()!r}", str(path),
                                       f"line {number}")
            name, why = hostname.check(line)
            yield Target(index, name or line[:KEPT_TEXT], rank, number, why)
            index += 1
    except (OSError, zipfile.BadZipFile) as e:
        raise QuicackError(f"cannot read: {e}", str(path)) from None


def count(path: str | Path) -> int:
    """Number of targets in a list (one streaming pass; for the progress bar's total)."""
    return sum(1 for _ in read_list(path))


def parse_address(value: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``IP``, ``IP:PORT``, ``[V6]:PORT`` or a bare IPv6 address → (ip, port)."""
    host, port = value, default_port
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest.startswith(":"):
            port = rest[1:]
    elif value.count(":") == 1:
        host, port = value.split(":")
    try:
        host = str(ipaddress.ip_address(host))
        port = int(port)
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise QuicackError(f"not an address: {value!r} (expected IP[:PORT])") from None
    return host, port


def parse_resolve(values: list[str]) -> dict[str, tuple[str, int]]:
    """``NAME=IP[:PORT]`` options → {name: (ip, port)}."""
    out = {}
    for value in values:
        name, sep, address = value.partition("=")
        if not sep or not name:
            raise QuicackError(f"--resolve expects NAME=IP[:PORT], got {value!r}")
        out[_key(name)] = parse_address(address.strip())
    return out


def _key(name: str) -> str:
    """A name of --resolve or a hosts file as the list's names are kept (A-label form)."""
    return hostname.check(name)[0] or name.strip().rstrip(".").lower()


def read_hosts(path: str | Path) -> dict[str, tuple[str, int]]:
    """A hosts file: ``ADDRESS NAME [NAME…]`` per line, ``#`` comments; port 443."""
    out: dict[str, tuple[str, int]] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise QuicackError(f"cannot read: {e.strerror}", str(path)) from None
    for number, raw in enumerate(lines, start=1):
        fields = raw.split("#", 1)[0].split()
        if not fields:
            continue
        try:
            address = str(ipaddress.ip_address(fields[0]))
        except ValueError:
            raise QuicackError(f"not an address: {fields[0]!r}", str(path), f"line {number}") from None
        if len(fields) < 2:
            raise QuicackError("an address without a name", str(path), f"line {number}")
        for name in fields[1:]:
            out.setdefault(_key(name), (address, DEFAULT_PORT))
    return out


def is_special(address: str) -> bool:
    """Private, loopback, link-local, multicast, reserved or unspecified (RFC 6890 registries)."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast
            or ip.is_reserved or ip.is_unspecified or not ip.is_global)


class Exclusions:
    """Addresses, prefixes and names never to probe (``--exclude FILE``, one a line)."""

    def __init__(self) -> None:
        self.networks: list[tuple[ipaddress._BaseNetwork, str]] = []
        self.names: dict[str, str] = {}
        self.suffixes: list[tuple[str, str]] = []

    @classmethod
    def read(cls, path: str | Path) -> "Exclusions":
        ex = cls()
        try:
            lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as e:
            raise QuicackError(f"cannot read: {e.strerror}", str(path)) from None
        for number, raw in enumerate(lines, start=1):
            entry = raw.split("#", 1)[0].strip().lower()
            if not entry:
                continue
            where = f"{path} line {number}"
            try:
                ex.networks.append((ipaddress.ip_network(entry, strict=False), where))
                continue
            except ValueError:
                pass
            if entry.startswith("*.") or entry.startswith("."):
                ex.suffixes.append(("." + entry.lstrip("*."), where))
            else:
                ex.names[entry.rstrip(".")] = where
        return ex

    def match_name(self, name: str) -> str | None:
        if name in self.names:
            return self.names[name]
        for suffix, where in self.suffixes:
            if name.endswith(suffix):
                return where
        return None

    def match_address(self, address: str) -> str | None:
        ip = ipaddress.ip_address(address)
        for net, where in self.networks:
            if ip.version == net.version and ip in net:
                return where
        return None


@dataclass(frozen=True)
class Policy:
    exclusions: Exclusions
    allow_private: bool = False

    def refuse_name(self, name: str) -> tuple[str, str] | None:
        where = self.exclusions.match_name(name)
        return ("excluded", f"name excluded by {where}") if where else None

    def refuse_address(self, address: str) -> tuple[str, str] | None:
        """(outcome, reason) if this address must not be probed, else None."""
        where = self.exclusions.match_address(address)
        if where:
            return "excluded", f"address {address} excluded by {where}"
        if not self.allow_private and is_special(address):
            return "private_address", (f"{address} is a private, loopback or reserved address; "
                                       "pass --allow-private to probe it")
        return None


def literal(name: str) -> str | None:
    """The name itself if it is an IP address literal."""
    try:
        return str(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        return None
