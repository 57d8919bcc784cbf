"""``quicack demo``: the whole path on loopback, offline, on what ships with quicack.

Theory of operation: four steps, each through the public API, each printing through ``echo`` (the
command line passes click's): (1) analyze the traces shipped in ``quicack/demo/`` (an aioquic
client and server qlog of one handshake) and show the server's Initial packets as each side
logged them; (2) start the local servers of ``scanners/demo-servers.toml`` (ten ACK behaviours)
in a child process and scan ``scanners/demo.toml`` against them, then show each server's first
flight as the scanner received it with the class the classifier gave it; (3) scan the real QUIC
peers that are already built (nothing is installed here) and show their first ACK delays; (4)
write the HTML report ``reports/<store>.html``.  The exit status is 1 when any file, ingest or
peer failed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from importlib import resources
from pathlib import Path

from quicack.lab import peers as peer_mod
from quicack.lab import serve
from quicack.model import QuicackError, Summary
from quicack.report import document, firstflight
from quicack.report import peers as peer_views
from quicack.scan import campaign
from quicack.scan import scanner
from quicack.scan.options import ScanOptions, ScanSummary
from quicack.store import ingest
from quicack.store.database import Store

Echo = Callable[..., None]


def shipped(db: str) -> Summary:
    """Step 1: the shipped traces into ``db``."""
    with resources.as_file(resources.files("quicack").joinpath("demo")) as path:
        return ingest.analyze([path], db=db)


def print_shipped(db: str, echo: Echo) -> None:
    with Store(db, read_only=True) as store:
        rows = firstflight.shipped_handshake(store.con)
    echo("server Initial packets as each side logged them:")
    for row in rows:
        echo(f"  {row['vantage']:>7} {row['direction']:<8} pn {row['packet_number']} "
             f"at {row['time_ms']:.3f} ms: {row['frames']}")


def local_servers(db: str, echo: Echo) -> ScanSummary:
    """Step 2: the demo scan of the local servers, and each server's first flight printed."""
    scanners = campaign.scanners_dir()
    config = scanners / "demo-servers.toml"
    specs = {f"{s.host}:{s.port}": s for s in serve.load_config(config)}
    opts = ScanOptions(**{**campaign.load(scanners / "demo.toml"), "db": db})
    echo(f"\nstarting {len(specs)} local servers ({config.name}) and scanning "
         f"{opts.list_path.rsplit('/', 1)[-1]} ({opts.repetitions} probes a name)")
    with serve.Child(config):
        result = scanner.scan(opts)
    resumed = " (already in the store: resumed)" if result.resumed else ""
    echo(f"run {result.run!r}{resumed}: {result.probes} probes; outcomes: "
         + ", ".join(f"{k} {v}" for k, v in result.outcomes.items()))
    with Store(db, read_only=True) as store:
        servers = firstflight.per_server(store.con, result.run_id)
    echo("first server Initial as the scanner received it, per server (most common; medians):")
    echo(f"  {'server':<18} {'behaviour':<47} {'probes':>6}  {'first Initial':<14} "
         f"{'class':<10} {'ACK→SH gap':>10}  {'first ACK':>9}")
    for row in servers:
        spec = specs.get(row["server"])
        what = (f"{spec.mode}, cert delay {spec.cert_delay_ms:g} ms, extra delay "
                f"{spec.extra_delay_ms:g} ms") if spec else "?"
        gap = "" if row["gap_ms"] is None else f"{row['gap_ms']:.1f} ms"
        ack = "" if row["first_ack_ms"] is None else f"{row['first_ack_ms']:.1f} ms"
        echo(f"  {row['server']:<18} {what:<47} {row['probes']:>6}  "
             f"{row['first_frames']:<14} {row['handshake_class'] or '-':<10} {gap:>10}  {ack:>9}")
    echo(f"store: {db} (tables probes, connections, packets, frames, …); "
         f"qlog and TLS keys: {result.out_dir}")
    return result


def ready_peers(db: str, echo: Echo, warn: Echo) -> list[str]:
    """Step 3: scan the peers that are ready and print their first ACK delays; the failures."""
    ready = [n for n in peer_mod.PEERS if peer_mod.status(n) in ("installed", "built")]
    if not ready:
        echo("\nreal QUIC peers: none ready (`quicack peers build` adds Caddy, ngtcp2, quic-go and quinn)")
        return []
    echo(f"\nscanning the real QUIC peers that are ready: {', '.join(ready)} (3 probes each, with a capture)")
    workdir = peer_mod.workdir_for(db)
    runs, failures = [], []
    for name in ready:
        try:
            done = peer_mod.scan(name, db, workdir / name)
        except QuicackError as e:
            failures.append(str(e))
            warn(f"error: {e}")
            continue
        runs.append(done.run)
        failures += done.failures
    with Store(db, read_only=True) as store:
        echo(peer_views.format_first_ack_delays(peer_views.first_ack_delays(store, runs)), nl=False)
    echo("(`quicack peers scan` prints their RTT estimators next to the replay)")
    return failures


def report(db: str) -> tuple[Path, document.Report]:
    """Step 4: the HTML report reports/<store>.html."""
    out = Path("reports") / (Path(db).stem + ".html")
    with Store(db, read_only=True) as store:
        written = document.write_report(store, out, now=datetime.now().astimezone(),
                                        max_connections=document.DEFAULT_MAX_CONNECTIONS)
    return out, written
