"""Where probes go, end to end: names from a hosts file onto servers on port 443, and a server
on the IPv6 loopback (::1), each scanned with the `quicack scan` command and checked in the store
(and, for IPv6, in a capture of the scan).

Everything is loopback: the hosts-file servers listen on port 443 of loopback addresses drawn
at random from 127.0.0.0/8 (so concurrent test runs on the machine do not collide; port 443 needs
root, as the CI runs), the IPv6 one on ::1 with a free port.  Expected values come from the
hosts file and the servers' configuration (addresses, ports, modes, certificate delay).
"""

from __future__ import annotations

import errno
import random
import socket
import subprocess

import duckdb
import pytest

from quicack.core import cidtag
from quicack.lab import serve
from servers import REPO, env, quicack

CERT_DELAY_MS = 20.0


def rows(db, sql):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def free_loopback_443(exclude: set[str]) -> str:
    """A 127.a.b.c address whose port 443 is free (bound and released here)."""
    rng = random.Random()
    for _ in range(50):
        address = f"127.{rng.randrange(64, 250)}.{rng.randrange(1, 250)}.{rng.randrange(2, 250)}"
        if address in exclude:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((address, 443))
            except OSError as e:
                if e.errno == errno.EACCES:
                    raise AssertionError("binding UDP port 443 needs root (or "
                                         "net.ipv4.ip_unprivileged_port_start ≤ 443)") from None
                continue
            return address
    raise AssertionError("no free port 443 on 50 random loopback addresses")


def gap_near_cert_delay(gap_ms: float) -> bool:
    """The server counts the certificate delay from the kernel receive time of the ClientHello
    and sends its instant ACK once it has handled it: on a busy shared machine the ACK can leave
    a few ms late (a shorter gap) or the ServerHello later still (a longer one)."""
    return CERT_DELAY_MS - 10 <= gap_ms < CERT_DELAY_MS + 100


def write_servers(path, listeners: list[tuple[str, str, float]]):
    path.write_text("".join(f'[[listener]]\nlisten = "{listen}"\nmode = "{mode}"\ncert_delay_ms = {delay}\n'
                            for listen, mode, delay in listeners))
    return path


def scan(tmp_path, listing, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(quicack("scan", str(listing), "--db", str(tmp_path / "s.duckdb"), "-n", "2",
                                  "--spacing-s", "0.05", "--allow-private", "-q", *args),
                          cwd=REPO, env=env(), capture_output=True, text=True, timeout=120)


def test_a_hosts_file_sends_names_to_servers_on_port_443(tmp_path):
    iack = free_loopback_443(set())
    wfc = free_loopback_443({iack})
    nobody = free_loopback_443({iack, wfc})  # in the hosts file, overridden by --resolve
    config = write_servers(tmp_path / "servers.toml", [(f"{iack}:443", "iack", CERT_DELAY_MS),
                                                      (f"{wfc}:443", "wfc", 0)])
    hosts = tmp_path / "hosts"
    hosts.write_text(f"# test servers\n{iack}   iack.hosts.test Mixed.Hosts.Test.\n"
                     f"{wfc}\twfc.hosts.test  # the WFC one\n\n{nobody} over.hosts.test\n")
    listing = tmp_path / "list.txt"
    listing.write_text("iack.hosts.test\nmixed.hosts.test\nwfc.hosts.test\nover.hosts.test\n")
    with serve.Child(config):
        result = scan(tmp_path, listing, "--hosts", str(hosts), "--resolve", f"over.hosts.test={wfc}")
    assert result.returncode == 0, result.stderr
    db = tmp_path / "s.duckdb"
    probes = rows(db, """SELECT domain, repetition, address, port, outcome, server_header, handshake_class,
                                ack_sh_gap_ms
                         FROM probes p JOIN connections c USING (connection_id) ORDER BY 1, 2""")
    expected = {"iack.hosts.test": (iack, "iack"), "mixed.hosts.test": (iack, "iack"),
                "wfc.hosts.test": (wfc, "wfc"), "over.hosts.test": (wfc, "wfc")}
    assert len(probes) == 8
    for domain, rep, address, port, outcome, server, handshake_class, gap in probes:
        assert (address, port, outcome) == (expected[domain][0], 443, "ok"), domain
        assert server.startswith(f"quicack-serve/{expected[domain][1]} "), (domain, server)
        assert handshake_class == expected[domain][1], (domain, rep)
        if handshake_class == "iack":  # the ServerHello follows the instant ACK after the delay
            assert gap_near_cert_delay(gap), (domain, rep, gap)


def test_a_server_on_the_ipv6_loopback(tmp_path):
    # ::1 must work here; if this machine had IPv6 off (disable_ipv6), binding fails right here
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.bind(("::1", 0))
        port = s.getsockname()[1]
    config = write_servers(tmp_path / "servers.toml", [(f"[::1]:{port}", "iack", CERT_DELAY_MS)])
    listing = tmp_path / "list.txt"
    listing.write_text("v6.test\n")
    pcap = tmp_path / "scan.pcapng"
    with serve.Child(config):
        result = scan(tmp_path, listing, "--resolve", f"v6.test=[::1]:{port}", "--pcap", str(pcap))
    assert result.returncode == 0, result.stderr
    db = tmp_path / "s.duckdb"
    probes = rows(db, """SELECT repetition, address, port, outcome, handshake_class, ack_sh_gap_ms,
                                p.first_ack_ms, p.server_hello_ms, cid_tag
                         FROM probes p JOIN connections c USING (connection_id) ORDER BY 1""")
    assert [(r, a, p, o, c) for r, a, p, o, c, *_ in probes] == [(0, "::1", port, "ok", "iack"),
                                                                 (1, "::1", port, "ok", "iack")]
    for *_, gap, first_ack, server_hello, _ in probes:
        assert gap_near_cert_delay(gap), gap
        assert server_hello - first_ack == pytest.approx(gap, abs=0.05)  # kernel times = qlog
    # the capture holds the probes as IPv6 datagrams, joined back by the connection-ID tag
    out = subprocess.run(["tshark", "-r", str(pcap), "-n", "-d", f"udp.port=={port},quic",
                          "-Y", f"udp.dstport=={port} && quic.long.packet_type == 0",
                          "-T", "fields", "-e", "ipv6.src", "-e", "ipv6.dst", "-e", "quic.scid"],
                         capture_output=True, text=True, check=True).stdout
    seen = {(src, dst, scid.split(",")[0].replace(":", "")) for src, dst, scid in
            (line.split("\t") for line in out.splitlines())}
    assert seen == {("::1", "::1", tag) for *_, tag in probes}  # both Initials of each probe
    (run_tag,) = rows(db, "SELECT cid_run_tag FROM runs")[0]
    assert sorted(cidtag.decode(tag) for *_, tag in probes) == [(run_tag, 0, 0), (run_tag, 0, 1)]
