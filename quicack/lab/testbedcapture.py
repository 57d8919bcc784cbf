"""A capture of a testbed group on one side of the relay (an experiment's ``capture``).

Theory of operation: on loopback the relay carries each datagram twice — client ↔ relay and
relay ↔ server.  dumpcap (:mod:`quicack.pcap.dumpcap`, started and stopped with its marker
datagrams so nothing sent in between is missing) captures only the relay ↔ server leg: its
filter names the servers' ports, which the client ↔ relay leg never uses (each relay listens on
a port of its own).  The capture thus sees each datagram when the server sent or received it,
within loopback's microseconds: a vantage point next to the server, so its ``address_validation``
rows can be checked against the server's own qlog (the capture's smallest RTT sample less the ACK
delay, the clock shift the analysis applies to a trace not taken at the server, is then about
zero).

``capture = "client"`` captures the other leg instead (the relays' own ports): a vantage point
next to the client, where a packet that arrived before the client had its keys shows
(``key_waits`` from captures, :mod:`quicack.store.keywaits`).

Each group writes ``capture/<scenario>_<delay>ms_<client>.pcapng`` in the run's folder and,
beside it, the key log of the group's clients (``<same>.keys``: quicack's client's secrets of
every connection, a real client's ``keylog.txt`` where it writes one — quic-go), which the
ingest finds by its name and decrypts the capture with.  Its connections are matched to the
attempts by their original destination connection ID (``testbed_runs.capture_connection_id``).
"""

from __future__ import annotations

from pathlib import Path

from quicack.pcap import dumpcap


class GroupCapture:
    """``with GroupCapture(path, ports): …`` captures UDP to and from ``ports`` on loopback."""

    def __init__(self, path: Path, ports: set[int]):
        self.path, self.ports = path, ports
        self._capture = None

    def __enter__(self) -> GroupCapture:
        self._capture = dumpcap.start(self.path, self.ports, interface="lo")
        return self

    def __exit__(self, *exc) -> None:
        self._capture.stop()

    @property
    def keylog(self) -> Path:
        return self.path.with_suffix(".keys")

    def write_keylog(self, texts: list[str], files: list[Path]) -> Path:
        """The key log beside the capture: ``texts`` (NSS key log lines) and the lines of ``files``."""
        lines = [t if t.endswith("\n") or not t else t + "\n" for t in texts]
        lines += [f.read_text() for f in files if f.exists()]
        self.keylog.write_text("".join(lines))
        return self.keylog


def match(store, file_id: int, odcids: list[str | None]) -> list[int | None]:
    """The capture's connection for each ODCID (hex), or None."""
    found = dict(store.con.execute(
        "SELECT odcid, connection_id FROM connections WHERE file_id = ? AND odcid IS NOT NULL",
        [file_id]).fetchall())
    return [found.get(odcid) if odcid else None for odcid in odcids]
