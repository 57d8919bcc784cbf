"""The command line: a thin click layer over the Python API; with :mod:`quicack.labcli` (serve,
peers, testbed) the only place that prints or exits.

Exit status: 0 when every file was ingested (warnings allowed), 1 when any file was refused (the
others are still stored), 2 for usage errors (click's convention).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from quicack import labcli
from quicack.model import QuicackError, Summary
from quicack.scan.options import ALPNS, USER_AGENT, ScanOptions, parse_shard
from quicack.terminal import DB_OPTION, READ_DB_OPTION, console, fail

# Commands import what they use when they run: no command waits for DuckDB, aioquic, polars or
# plotly unless it needs them (`quicack analyze` of a capture has tshark started first: see
# quicack.__main__).


@click.group()
@click.version_option(package_name="quicack")
def main() -> None:
    """quicack: measure how QUIC endpoints acknowledge packets.

    Probe QUIC servers from a domain list (scan) and store every probe; ingest qlog traces and
    packet captures into the same DuckDB store (analyze), which classifies each handshake
    (IACK / WFC) and replays its RTT and PTO per RFC 9002; write an HTML report (report);
    cross-check two views of one connection (compare); merge the stores of sharded scans
    (merge); export the store (export); give back the space killed ingests left in it (vacuum).  Local servers with a chosen ACK behaviour (serve),
    real third-party QUIC servers (peers) and an impairment relay (testbed) are for experiments,
    tests and demos; demo runs the whole path offline on loopback.
    """


def _run_analyze(paths, db: str, reanalyze: bool, quiet: bool, keylog: str | None = None,
                 quic_ports: tuple[int, ...] = (), jobs: int | None = None, dissector: str = "native",
                 cluster: str | None = None, shards: str | None = None, wait_s: float = 60.0) -> Summary:
    from quicack.store import ingest  # light: tshark may start on a capture before DuckDB loads

    state = click.get_current_context().find_root().obj or {}
    early, state["dissection"] = state.get("dissection"), None  # (taken over by the ingest)
    if cluster is not None:
        if early is not None:
            early.close()  # (the workers dissect)
        return _run_cluster_analyze(paths, db, reanalyze, quiet, keylog, quic_ports, cluster, shards, wait_s,
                                    dissector)
    try:
        files = ingest.expand(paths)
    except QuicackError:
        if early is not None:
            early.close()
        raise
    total = sum(f.stat().st_size for f in files)
    show = not quiet and console().is_terminal and (len(files) > 1 or total > 20_000_000)
    # (the paths as given: analyze walks the folders again, counting what it skips in them)
    if not show:
        return ingest.analyze(paths, db=db, reanalyze=reanalyze, keylog=keylog, quic_ports=quic_ports,
                              dissection=early, jobs=jobs, dissector=dissector)
    from quicack.terminal import FileBar
    with FileBar(total) as bar:
        return ingest.analyze(paths, db=db, reanalyze=reanalyze, progress=bar.step, keylog=keylog,
                              quic_ports=quic_ports, dissection=early, jobs=jobs, dissector=dissector)


def _run_cluster_analyze(paths, db, reanalyze, quiet, keylog, quic_ports, cluster, shards, wait_s,
                         dissector) -> Summary:
    from quicack.cluster import ingest as cluster_ingest
    from quicack.store import ingest
    total = sum(f.stat().st_size for f in ingest.expand(paths) if f.is_file())
    arguments = dict(db=db, cluster=cluster, reanalyze=reanalyze, keylog=keylog, quic_ports=quic_ports,
                     shards=shards, timeout_s=wait_s, dissector=dissector)
    if quiet or not console().is_terminal:
        return cluster_ingest.analyze(paths, **arguments)
    from quicack.terminal import FileBar
    with FileBar(total) as bar:
        return cluster_ingest.analyze(paths, progress=bar.step, **arguments)


def _print_summary(summary: Summary, db: str) -> None:
    from quicack.report import text
    for line in text.summary_problems(summary):
        click.echo(line, err=True)
    for line in text.summary_lines(summary, db):
        click.echo(line)


def _cluster_options(whose: str):
    """--shards and --cluster-wait-s, shared by analyze and scan."""
    shards = click.option("--shards", type=click.Path(file_okay=False), metavar="DIR",
                          help=f"With --cluster: folder for the {whose} stores, seen by workers and this "
                               "machine at the same path  [default: DB.shards beside the store].")
    wait = click.option("--cluster-wait-s", "wait_s", type=click.FloatRange(min=0.1), default=60.0,
                        show_default=True, help="With --cluster: how long to wait for the scheduler and the workers.")
    return lambda command: shards(wait(command))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@DB_OPTION
@click.option("--reanalyze", is_flag=True,
              help="Ingest files again even if this analysis version already holds them.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--keylog", type=click.Path(exists=True, dir_okay=False),
              help="TLS key log (SSLKEYLOGFILE format) decrypting the captures; default: a "
                   "<capture>.keys, keys.log or sslkeylog file beside each capture.")
@click.option("--quic-port", "quic_ports", type=click.IntRange(1, 65535), multiple=True, metavar="PORT",
              help="Decode this UDP port as QUIC in captures (repeatable); QUIC is found on any "
                   "port by its headers, this is for the rest.")
@click.option("--dissector", type=click.Choice(["native", "tshark"]), default="native", show_default=True,
              help="What reads captures: quicack's own reader, or tshark (the reference; the native "
                   "reader leaves to tshark the link types and QUIC versions it does not read, saying so).")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=None, metavar="N",
              help="Small qlog files (up to 4 MB) ingested at once, each in its own transaction; "
                   "default: one per core.")
@click.option("--cluster", metavar="ADDRESS|local:N",
              help="Ingest on a Dask cluster: a scheduler's address (tcp://host:8786), or local:N "
                   "worker processes on this machine (pip install 'quicack[cluster]'; docs/cluster.md).")
@_cluster_options("workers'")
def analyze(paths, db, reanalyze, quiet, keylog, quic_ports, jobs, dissector, cluster, shards, wait_s):
    """Ingest qlog traces and packet captures (files or folders, searched recursively).

    Reads every qlog generation (draft-00 … main-schema) as JSON (.qlog/.json), JSON-SEQ (.sqlog)
    or NDJSON, and pcap/pcapng captures (decrypted and dissected by quicack's own reader, or by tshark), each optionally
    gzipped.  Captures are decrypted with --keylog, a key log beside them, or the Decryption
    Secrets Block of a pcapng; without secrets only Initial packets decrypt (the summary says
    what was not decrypted).  Each file is ingested in its own transaction; a file already
    ingested (same SHA-256, same analysis version, same key log) is skipped.  Exits 1 if any
    file was refused; the others are still stored.
    """
    try:
        summary = _run_analyze(paths, db, reanalyze, quiet, keylog, quic_ports, jobs, dissector, cluster, shards,
                               wait_s)
    except QuicackError as e:
        fail(e)
    _print_summary(summary, db)
    state = click.get_current_context().find_root().obj
    if state is not None:
        state["quick_exit"] = True  # (quicack.__main__: nothing left to save at exit)
    sys.exit(1 if summary.count("refused") else 0)


#: Exporting every connection as qlog without naming them is allowed up to this many.
QLOG_EXPORT_ALL_LIMIT = 50


@main.command()
@click.argument("a", type=click.Path(exists=True, dir_okay=False))
@click.argument("b", type=click.Path(exists=True, dir_okay=False))
@click.option("--keylog", type=click.Path(exists=True, dir_okay=False),
              help="TLS key log for a capture among A and B (default: one beside it).")
@click.option("--tolerance-ms", default=1.0, show_default=True, type=click.FloatRange(min=0),
              help="Largest time difference accepted for a packet.")
@click.option("--strict", is_flag=True,
              help="Apply the tolerance to received packets too (by default a qlog may log a "
                   "received packet later than the capture saw it, never earlier).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=0),
              help="Differences listed per connection.")
@click.option("--dissector", "dissectors", type=click.Choice(["native", "tshark"]), multiple=True,
              help="What reads a capture: given once, both; twice, A then B (A and B may then be the "
                   "same capture: the two readers compared).  [default: native]")
def compare(a, b, keylog, tolerance_ms, strict, limit, dissectors):
    """Cross-check two views of the same connection(s), e.g. a capture and a qlog.

    Both files are ingested into a temporary in-memory store, connections are paired by
    original destination connection ID, and packets by (sender, packet number space, packet
    number).  Lists packets only one side has, different packet types, frame lists (ACK ranges,
    ACK delays within one encoding step), and times further apart than --tolerance-ms.  Exits 0
    when the views agree, 1 when they differ or a file cannot be read.
    """
    from quicack.store.compare import compare_files, ingest_both
    from quicack.store.database import Store
    if len(dissectors) > 2:
        fail(QuicackError("--dissector: at most twice (A's reader, then B's)"))
    readers = (list(dissectors) * 2)[:2] if dissectors else ["native", "native"]
    with Store(":memory:") as store:
        results = ingest_both(store, a, b, keylog, tuple(readers))
        for r in results:
            for w in r.warnings:
                click.echo(f"warning: {w}", err=True)
            if r.error:
                fail(QuicackError(r.error))
        if results[1].status == "unchanged":
            fail(QuicackError("A and B hold the same bytes: nothing to compare", b))
        try:
            pairs = compare_files(store.con, 1, 2, tolerance_ms, strict)
        except QuicackError as e:
            fail(e)
    from quicack.report import text
    for line in text.compared_lines(pairs, limit):
        click.echo(line)
    failed = not all(pair.ok for pair in pairs)
    sys.exit(1 if failed else 0)


@main.command()
@READ_DB_OPTION
@click.option("--parquet", "directory", type=click.Path(file_okay=False),
              help="Folder to write one <table>.parquet per table into.")
@click.option("--qlog", "qlog_path", type=click.Path(dir_okay=False),
              help="Write connections as one qlog 0.3 JSON file (one trace each) that qvis loads.")
@click.option("--connection", "connections", type=int, multiple=True,
              help="connection_id to export with --qlog (repeatable; default: all, if at most "
                   f"{QLOG_EXPORT_ALL_LIMIT}).")
def export(db, directory, qlog_path, connections):
    """Write the store's tables as Parquet (--parquet) or connections as qlog (--qlog)."""
    if not directory and not qlog_path:
        raise click.UsageError("give --parquet DIR and/or --qlog FILE")
    if not Path(db).exists():
        fail(QuicackError("no such store", db))
    import orjson

    from quicack.store import qlogexport as qlogwriter
    from quicack.store.database import Store
    try:
        with Store(db, read_only=True) as store:
            if directory:
                written = store.export_parquet(directory)
                click.echo(f"wrote {len(written)} tables to {directory}")
            if qlog_path:
                ids = list(connections) or store.sql("SELECT connection_id FROM connections ORDER BY 1")[
                    "connection_id"].to_list()
                if not connections and len(ids) > QLOG_EXPORT_ALL_LIMIT:
                    raise QuicackError(f"store holds {len(ids)} connections; choose some with --connection", db)
                document = qlogwriter.qlog_document(store, ids)
                Path(qlog_path).write_bytes(orjson.dumps(document))
                click.echo(f"wrote {len(ids)} connection{'s' if len(ids) != 1 else ''} as qlog {qlogwriter.QLOG_VERSION} "
                           f"to {qlog_path}")
    except QuicackError as e:
        fail(e)


@main.command()
@READ_DB_OPTION
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="HTML file to write  [default: reports/<store name>.html]")
@click.option("--open", "open_browser", is_flag=True, help="Open the report in the default browser.")
@click.option("--max-connections", default=12, show_default=True,
              help="Connections that get a section of their own.")
def report(db, out, open_browser, max_connections):
    """Write a self-contained HTML report of the store (plotly, works offline): handshake classes,
    gaps, first ACK delays and PTOs, ACK policy of transfers, per-connection sequence diagrams and
    RTT/PTO replay next to the logged values."""
    import webbrowser
    from datetime import datetime

    from quicack.report import document as report_module  # plotly loads only for reports
    from quicack.store.database import Store
    if not Path(db).exists():
        fail(QuicackError("no such store", db))
    out = out or str(Path("reports") / (Path(db).stem + ".html"))
    try:
        with Store(db, read_only=True) as store:
            written = report_module.write_report(store, out, now=datetime.now().astimezone(),
                                                 max_connections=max_connections)
    except QuicackError as e:
        fail(e)
    size = Path(out).stat().st_size
    click.echo(f"report: {out} ({size / 1e6:.1f} MB, {written.figures} plots; {_drawn(written)})")
    if open_browser:
        webbrowser.open(Path(out).resolve().as_uri())


def _drawn(written) -> str:
    """How many of the store's connections the report draws one by one (--max-connections)."""
    return (f"{written.stored_connections} connections, {written.connections} of them drawn one by one"
            if written.stored_connections != written.connections else f"{written.connections} connections")


@main.command()
@DB_OPTION
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--peers/--no-peers", "with_peers", default=True, show_default=True,
              help="Also scan the real QUIC peers that are installed and built (quicack peers build).")
def demo(db, quiet, with_peers):
    """The whole path on loopback, offline: analyze the traces shipped with quicack (an aioquic
    client and server qlog of one handshake), start ten local servers with different ACK
    behaviours (scanners/demo-servers.toml), scan the demo list against them
    (scanners/demo.toml: 50 names × 3 probes), and print what each server's first flight
    looked like; then scan the real QUIC peers that are ready (Caddy, ngtcp2, quic-go, quinn:
    quicack peers build) and print their first ACK delays."""
    from quicack import demo as steps
    try:
        summary = steps.shipped(db)
        _print_summary(summary, db)
        steps.print_shipped(db, click.echo)
        result = steps.local_servers(db, click.echo)
        peer_failures = steps.ready_peers(db, click.echo, lambda m: click.echo(m, err=True)) if with_peers else []
        out, written = steps.report(db)
    except QuicackError as e:
        fail(e)
    click.echo(f"report: {out} ({written.figures} plots; {_drawn(written)})")
    sys.exit(1 if summary.count("refused") or result.ingest_failures or peer_failures else 0)


# --- scan ------------------------------------------------------------------------------------

class _Workers(click.ParamType):
    name = "N|auto"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, int):
            return value
        try:
            count = int(value)
        except ValueError:
            count = 0
        if not 1 <= count <= 64:
            self.fail(f"expects a count from 1 to 64 or 'auto', got {value!r}", param, ctx)
        return count


_WORKERS = _Workers()


def _scan_options(ctx: click.Context, list_path: str, given: dict, resolve: dict,
                  shard) -> ScanOptions:
    """Campaign values (LIST.toml) overridden by options given on the command line."""
    from quicack.scan import campaign
    values = campaign.load(list_path) if list_path.endswith(".toml") else {"list_path": list_path}
    for name, value in given.items():
        source = ctx.get_parameter_source(name)
        if name not in values or source.name in ("COMMANDLINE", "ENVIRONMENT"):
            values[name] = value
    values["resolve"] = {**values.get("resolve", {}), **resolve}
    if shard is not None:
        values["shard"] = shard
    return ScanOptions(**values)


@main.command()
@click.argument("list_path", metavar="LIST", type=click.Path())
@DB_OPTION
@click.option("--run", help="Run name (default: the list file's name). Re-running a run resumes it.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder for qlog files, the key log (and pcap); default DB-scans/RUN next to the store.")
@click.option("--repetitions", "-n", type=click.IntRange(1, 255), default=3, show_default=True,
              help="Probes per target.")
@click.option("--spacing-s", type=float, default=1.0, show_default=True,
              help="Time between the starts of a target's probes.")
@click.option("--schedule", type=click.Choice(["spaced", "cold-warm"]), default="spaced",
              show_default=True, help="cold-warm: a first probe after the address was idle "
              "--cold-idle-s, then the others right after one another.")
@click.option("--cold-idle-s", type=float, default=30.0, show_default=True)
@click.option("--concurrency", "-c", type=click.IntRange(1), default=100, show_default=True,
              help="Probes in flight at most.")
@click.option("--rate", type=float, default=100.0, show_default=True,
              help="Probes started per second at most (token bucket); 0 for no limit.")
@click.option("--per-address", type=click.IntRange(1), default=4, show_default=True,
              help="Probes in flight to one address at most (names often share a CDN address).")
@click.option("--timeout-first-s", "first_response_timeout_s", type=float, default=3.0,
              show_default=True, help="Wait for the server's first packet.")
@click.option("--timeout-handshake-s", "handshake_timeout_s", type=float, default=5.0,
              show_default=True, help="Then wait for the handshake to complete.")
@click.option("--timeout-response-s", "response_timeout_s", type=float, default=5.0,
              show_default=True, help="Then wait for the HTTP/3 response.")
@click.option("--path", default="/", show_default=True, help="Path of the HTTP/3 GET.")
@click.option("--user-agent", default=USER_AGENT, show_default=True)
@click.option("--split-clienthello", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Spread the ClientHello over N Initial packets (a TLS padding extension).")
@click.option("--alpn", type=click.Choice(ALPNS), default="h3", show_default=True,
              help="h3: an HTTP/3 GET; hq-interop: the QUIC interop runner's 'GET /path' line on a "
                   "stream (servers without HTTP/3).")
@click.option("--ack-policy", default="aioquic", show_default=True, metavar="POLICY",
              help="How the client acknowledges the response: aioquic (its own: 1 ms after the first "
                   "packet), ratio:N (every N packets or 25 ms), custura (1:10 after 1:2 for 100 "
                   "packets, at least every min(25 ms, min_rtt/4)), ack-frequency (advertises "
                   "min_ack_delay and obeys ACK_FREQUENCY / IMMEDIATE_ACK).")
@click.option("--resumption", is_flag=True,
              help="Each probe a pair: a full handshake keeping the session ticket and NEW_TOKEN, "
                   "then a resumed connection sending the same GET in 0-RTT (probes.zero_rtt).")
@click.option("--resolve", "resolve_values", multiple=True, metavar="NAME=IP[:PORT]",
              help="Address of a name (repeatable); wins over --hosts and the resolver.")
@click.option("--hosts", "hosts_file", type=click.Path(dir_okay=False),
              help="Hosts file (ADDRESS NAME… per line; port 443).")
@click.option("--family", type=click.Choice(["any", "4", "6"]), default="any", show_default=True,
              help="Address family for names the system resolver resolves.")
@click.option("--exclude", "exclude_file", type=click.Path(dir_okay=False),
              help="Addresses, prefixes and names (*.suffix) never to probe, one a line.")
@click.option("--allow-private", is_flag=True,
              help="Probe private, loopback and reserved addresses (refused otherwise).")
@click.option("--shard", "shard_value", metavar="K/N",
              help="Probe only the K-th of N parts of the list (merge the stores with quicack merge).")
@click.option("--workers", "-w", type=_WORKERS, default="auto", show_default=True,
              help="Probing processes (the parent writes the store); auto: one per core less one "
                   "for the parent, so on two cores the parent probes itself.")
@click.option("--pcap", type=click.Path(dir_okay=False),
              help="Capture the scan's UDP traffic with dumpcap into this pcapng file.")
@click.option("--pcap-interface", help="Interface to capture on (default: lo for loopback targets, else any).")
@click.option("--ingest-during", is_flag=True,
              help="Ingest qlog files batch by batch while probing (default: once probing ends, "
                   "so that ingest does not take CPU from the probes).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--cluster", metavar="ADDRESS|local:N",
              help="Scan from the workers of a Dask cluster, each a vantage point probing its shard of "
                   "the list (docs/cluster.md).")
@click.option("--vantage", "vantage_values", multiple=True, metavar="NAME=WORKER",
              help="With --cluster: a vantage point and its worker (its --name or address; repeatable); "
                   "default: every registered worker, named by its worker name.")
@_cluster_options("vantages'")
@click.pass_context
def scan(ctx, list_path, quiet, resolve_values, shard_value, cluster, vantage_values, shards, wait_s, **given):
    """Probe every target of LIST over QUIC v1 + HTTP/3 and store each probe.

    LIST is a Tranco list (rank,domain CSV, also zipped), a plain list (one name a line) or a
    campaign file (scanners/*.toml).  Each probe keeps its qlog (OUT/qlog/) and TLS secrets
    (OUT/sslkeylog.txt); the probes are ingested before the scan ends, so probes.connection_id
    joins connections.  Re-running the same command resumes the run.  Ctrl-C stops cleanly
    (probes in flight finish); a second Ctrl-C stops at once.
    """
    from quicack.terminal import ScanBar
    from quicack.scan import scanner, targets
    try:
        opts = _scan_options(ctx, list_path, given, targets.parse_resolve(list(resolve_values)),
                             parse_shard(shard_value))
    except QuicackError as e:
        fail(e)
    if cluster is not None:
        _cluster_scan(opts, quiet, cluster, vantage_values, shards, wait_s)
    with ScanBar(not quiet and console().is_terminal, lambda line: click.echo(line, err=True)) as bar:
        try:
            summary = scanner.scan(opts, on_progress=bar.on_progress, on_start=bar.on_start)
        except QuicackError as e:
            fail(e)
        except KeyboardInterrupt:  # before probing started or after a second Ctrl-C
            click.echo("interrupted: re-run the same command to resume", err=True)
            sys.exit(130)
    click.echo(f"run {summary.run!r} (id {summary.run_id}): {summary.probes} probes in {opts.db}; "
               f"qlog and keys in {summary.out_dir}")
    click.echo("outcomes: " + ", ".join(f"{k} {v}" for k, v in summary.outcomes.items()))
    if summary.pcap:
        click.echo(f"capture: {summary.pcap}")
    for failure in summary.ingest_failures:
        click.echo(f"error: {failure}", err=True)
    if summary.interrupted:
        click.echo("interrupted: re-run the same command to resume", err=True)
        sys.exit(130)
    sys.exit(1 if summary.ingest_failures else 0)


def _cluster_scan(opts: ScanOptions, quiet: bool, cluster: str, vantage_values, shards, wait_s) -> None:
    from quicack.cluster import vantages
    from quicack.terminal import ScanBar

    def started(results) -> None:
        click.echo(f"run {opts.run or Path(opts.list_path).stem!r} from {len(results)} vantage points: " +
                   ", ".join(f"{r.name} (shard {r.shard}, {r.worker})" for r in results), err=True)

    with ScanBar(not quiet and console().is_terminal, lambda line: click.echo(line, err=True)) as bar:
        try:
            results = vantages.scan(opts, cluster, vantages.parse_vantages(list(vantage_values)), shards, wait_s,
                                    on_progress=bar.on_progress, on_start=started)
        except QuicackError as e:
            fail(e)
    for r in results:
        click.echo(f"vantage {r.name}: {r.probes} probes in {opts.db}; outcomes: " +
                   (", ".join(f"{k} {v}" for k, v in r.outcomes.items()) or "none"))
        for failure in r.ingest_failures:
            click.echo(f"error: vantage {r.name}: {failure}", err=True)
        if r.error:
            click.echo(f"error: vantage {r.name}: {r.error}; its probes so far are kept: re-run the same "
                       "command to resume", err=True)
    sys.exit(1 if any(r.error or r.ingest_failures for r in results) else 0)


@main.command()
@click.argument("target", type=click.Path(dir_okay=False))
@click.argument("sources", nargs=-1, required=True, type=click.Path(dir_okay=False))
def merge(target, sources):
    """Append the stores SOURCES (e.g. the shards of a scan) to TARGET (created if missing).

    Keys are renumbered so every join keeps working; a run (name, shard) is merged only once.
    """
    from quicack.store import merge as merge_mod
    try:
        added = merge_mod.merge(target, list(sources))
    except QuicackError as e:
        fail(e)
    click.echo(f"merged {len(sources)} stores into {target}: {added.get('probes', 0)} probes, "
               f"{added.get('connections', 0)} connections, {added.get('files', 0)} files")


@main.command()
@READ_DB_OPTION
def vacuum(db):
    """Give back the disk space the store's file holds beyond its rows (left by ingests killed
    while committing, or by rows deleted): the store is copied into a new file that replaces it."""
    from quicack.store import database
    try:
        before, after = database.vacuum(db)
    except QuicackError as e:
        fail(e)
    click.echo(f"vacuum: {db} {before / 1e6:.1f} MB → {after / 1e6:.1f} MB")


for command in (labcli.serve, labcli.peers, labcli.testbed):
    main.add_command(command)


def run() -> None:
    """The command line without quicack.__main__'s early tshark start (``python -m quicack.cli``)."""
    main()


if __name__ == "__main__":  # pragma: no cover
    run()
