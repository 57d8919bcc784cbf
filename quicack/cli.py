"""The command line: a thin click layer over the Python API; the only place that prints or exits.

Exit status: 0 when every file was ingested (warnings allowed), 1 when any file was refused (the
others are still stored), 2 for usage errors (click's convention).
"""

from __future__ import annotations

import sys
import webbrowser
from datetime import datetime
from importlib import resources
from pathlib import Path

import click
import orjson
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from . import ingest, qlogwriter
from .compare import compare_files
from .model import QuicackError, Summary
from .store import Store

err = Console(stderr=True, highlight=False)

DB_OPTION = click.option("--db", default="quicack.duckdb", show_default=True,
                         type=click.Path(dir_okay=False),
                         help="DuckDB store to write (created if missing).")


def _fail(e: QuicackError) -> None:
    click.echo(f"error: {e}", err=True)
    sys.exit(1)


@click.group()
@click.version_option(package_name="quicack")
def main() -> None:
    """quicack: measure how QUIC endpoints acknowledge packets.

    Ingest qlog traces and packet captures into a DuckDB store (analyze), cross-check two views
    of one connection (compare), export the store (export), or run the demo.
    Real third-party QUIC servers for local tests: peers.
    """


def _run_analyze(paths, db: str, reanalyze: bool, quiet: bool, keylog: str | None = None,
                 quic_ports: tuple[int, ...] = ()) -> Summary:
    files = ingest.expand(paths)
    total = sum(f.stat().st_size for f in files)
    show = not quiet and err.is_terminal and (len(files) > 1 or total > 20_000_000)
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                  TimeRemainingColumn(), console=err, disable=not show, transient=True) as bar:
        task = bar.add_task("analyzing", total=total)

        def step(path: Path, size: int) -> None:
            bar.update(task, advance=size, description=path.name[:40])
        return ingest.analyze(files, db=db, reanalyze=reanalyze, progress=step, keylog=keylog,
                              quic_ports=quic_ports)


def _print_summary(summary: Summary, db: str) -> None:
    ingested, unchanged, refused = (summary.count(s) for s in ("ingested", "unchanged", "refused"))
    for f in summary.files:
        for w in f.warnings:
            click.echo(f"warning: {w}", err=True)
        if f.error:
            click.echo(f"error: {f.error}", err=True)
    click.echo(f"files: {len(summary.files)} ({ingested} ingested, {unchanged} unchanged, "
              f"{refused} refused) into {db}")
    click.echo(f"connections: {summary.connections}  packets: {summary.packets}  "
              f"events: {summary.events}")
    skipped = summary.skipped_events
    if skipped:
        listed = ", ".join(f"{name} {n}" for name, n in list(skipped.items())[:12])
        more = f", … {len(skipped) - 12} more names" if len(skipped) > 12 else ""
        click.echo(f"events kept in other_events: {sum(skipped.values())} ({listed}{more})")
    if refused:
        click.echo(f"failures: {refused}")
    if summary.file_ids:
        with Store(db, read_only=True) as store:
            by_class = store.handshakes_by_class(summary.file_ids)
        _print_table("handshakes by class:", by_class)


def _print_table(title: str, frame) -> None:
    """A plain, aligned text table (numbers with 3 decimals, NULL as '-')."""
    click.echo(title)
    cells = [list(frame.columns)]
    for row in frame.iter_rows():
        cells.append(["-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v) for v in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    for r in cells:
        click.echo("  " + "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths))))


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
              help="Decode this UDP port as QUIC in captures (repeatable); tshark's heuristics "
                   "find QUIC on most ports by themselves.")
def analyze(paths, db, reanalyze, quiet, keylog, quic_ports):
    """Ingest qlog traces and packet captures (files or folders, searched recursively).

    Reads every qlog generation (draft-00 … main-schema) as JSON (.qlog/.json), JSON-SEQ (.sqlog)
    or NDJSON, and pcap/pcapng captures (decrypted and dissected by tshark), each optionally
    gzipped.  Captures are decrypted with --keylog, a key log beside them, or the Decryption
    Secrets Block of a pcapng; without secrets only Initial packets decrypt (the summary says
    what was not decrypted).  Each file is ingested in its own transaction; a file already
    ingested (same SHA-256, same analysis version, same key log) is skipped.  Exits 1 if any
    file was refused; the others are still stored.
    """
    try:
        summary = _run_analyze(paths, db, reanalyze, quiet, keylog, quic_ports)
    except QuicackError as e:
        _fail(e)
    _print_summary(summary, db)
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
def compare(a, b, keylog, tolerance_ms, strict, limit):
    """Cross-check two views of the same connection(s), e.g. a capture and a qlog.

    Both files are ingested into a temporary in-memory store, connections are paired by
    original destination connection ID, and packets by (sender, packet number space, packet
    number).  Lists packets only one side has, different packet types, frame lists (ACK ranges,
    ACK delays within one encoding step), and times further apart than --tolerance-ms.  Exits 0
    when the views agree, 1 when they differ or a file cannot be read.
    """
    with Store(":memory:") as store:
        results = [store.ingest(path, keylog=keylog) for path in (a, b)]
        for r in results:
            for w in r.warnings:
                click.echo(f"warning: {w}", err=True)
            if r.error:
                _fail(QuicackError(r.error))
        if results[1].status == "unchanged":
            _fail(QuicackError("A and B hold the same bytes: nothing to compare", b))
        try:
            pairs = compare_files(store.con, 1, 2, tolerance_ms, strict)
        except QuicackError as e:
            _fail(e)
    failed = False
    for pair in pairs:
        click.echo(f"connection {pair.odcid or '?'}: A {pair.a_vantage}, B {pair.b_vantage}: "
                   f"{pair.matched} packets in both, {pair.only_a} only in A, {pair.only_b} only in B")
        for sender, (n, med_abs, max_abs, med) in pair.time_stats.items():
            click.echo(f"  {sender}-sent packets: time B − A median {med:+.3f} ms, "
                       f"|B − A| median {med_abs:.3f} ms, max {max_abs:.3f} ms ({n} packets)")
        if pair.ok:
            click.echo("  no differences")
            continue
        failed = True
        click.echo(f"  {len(pair.differences)} differences:")
        for d in pair.differences[:limit]:
            click.echo(f"    {d.sender} {d.space or '-'} pn {d.packet_number}: {d.detail}")
        if len(pair.differences) > limit:
            click.echo(f"    … {len(pair.differences) - limit} more (--limit)")
    sys.exit(1 if failed else 0)


@main.command()
@DB_OPTION
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
        _fail(QuicackError("no such store", db))
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
        _fail(e)


@main.command()
@DB_OPTION
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="HTML file to write  [default: reports/<store name>.html]")
@click.option("--open", "open_browser", is_flag=True, help="Open the report in the default browser.")
@click.option("--max-connections", default=12, show_default=True,
              help="Connections that get a section of their own.")
def report(db, out, open_browser, max_connections):
    """Write a self-contained HTML report of the store (plotly, works offline): handshake classes,
    gaps, first ACK delays and PTOs, ACK policy of transfers, per-connection sequence diagrams and
    RTT/PTO replay next to the logged values."""
    from . import report as report_module  # plotly loads only for reports
    if not Path(db).exists():
        _fail(QuicackError("no such store", db))
    out = out or str(Path("reports") / (Path(db).stem + ".html"))
    try:
        with Store(db, read_only=True) as store:
            written = report_module.write_report(store, out, now=datetime.now().astimezone(),
                                                 max_connections=max_connections)
    except QuicackError as e:
        _fail(e)
    size = Path(out).stat().st_size
    click.echo(f"report: {out} ({size / 1e6:.1f} MB, {written.figures} plots, {written.connections} connections)")
    if open_browser:
        webbrowser.open(Path(out).resolve().as_uri())


@main.command()
@DB_OPTION
def demo(db):
    """Analyze the traces shipped with quicack (an aioquic client and server qlog of one
    handshake) and print the summary and the server's first Initial packet."""
    folder = resources.files("quicack").joinpath("demo")
    with resources.as_file(folder) as path:
        try:
            summary = _run_analyze([path], db, reanalyze=False, quiet=True)
        except QuicackError as e:
            _fail(e)
        _print_summary(summary, db)
    with Store(db, read_only=True) as store:
        first = store.sql("""
            SELECT c.vantage, p.direction, p.packet_type, p.packet_number, p.time_ms,
                   string_agg(f.frame_type, '+' ORDER BY f.position) AS frames
            FROM packets p JOIN connections c USING (connection_id)
            JOIN frames f USING (connection_id, event_index)
            WHERE p.sender = 'server' AND p.packet_type = 'initial'
            GROUP BY ALL ORDER BY c.vantage, p.time_ms LIMIT 4""")
    click.echo("server Initial packets as each side logged them:")
    for row in first.iter_rows(named=True):
        click.echo(f"  {row['vantage']:>7} {row['direction']:<8} pn {row['packet_number']} "
                  f"at {row['time_ms']:.3f} ms: {row['frames']}")
    sys.exit(1 if summary.count("refused") else 0)


@main.group()
def peers():
    """Real third-party QUIC servers as local test peers (Caddy, ngtcp2, quic-go, quinn).

    Debian packages are installed with apt-get (root); the quic-go and quinn servers are built
    from tests/peers/ with go/cargo into ~/.cache/quicack/peers (or $QUICACK_PEERS_CACHE), keyed
    by a hash of their sources and toolchain, so later builds are instant.
    """


def _peer_names(names) -> list[str]:
    from . import peers as peer_mod
    try:
        return [peer_mod.peer(n).name for n in names] or list(peer_mod.PEERS)
    except QuicackError as e:
        _fail(e)


@peers.command("list")
def peers_list():
    """Each peer: its QUIC stack, how it is obtained, its qlog, how GSO is turned off, its state."""
    from . import peers as peer_mod
    for p in peer_mod.PEERS.values():
        click.echo(f"{p.name}: {p.stack}")
        click.echo(f"  obtained: {p.kind}" + (f" ({' '.join(p.apt_packages)})" if p.apt_packages else
                                                f" (tests/peers/{p.source})"))
        click.echo(f"  qlog:     {p.qlog or 'none'}")
        click.echo(f"  GSO off:  {p.gso_off}")
        click.echo(f"  state:    {peer_mod.status(p.name)}")


@peers.command("build")
@click.argument("names", nargs=-1)
def peers_build(names):
    """Install or build peers NAMES (default: all) and print what each took."""
    from . import peers as peer_mod
    for name in _peer_names(names):
        try:
            done = peer_mod.prepare(name, progress=lambda m: err.print(f"  {m}"))
        except QuicackError as e:
            _fail(e)
        click.echo(f"{name}: {done.action} in {done.seconds:.1f} s: {done.binary}")


@peers.command("run")
@click.argument("name")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to bind.")
@click.option("--port", type=int, default=None, help="UDP port (default: a free one).")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Folder for certificate, served files, qlog and log (default: a new temp folder).")
def peers_run(name, host, port, workdir):
    """Start peer NAME on loopback and keep it running until Ctrl-C."""
    import time

    from . import peers as peer_mod
    name = _peer_names([name])[0]
    try:
        with peer_mod.start(name, workdir, host=host, port=port,
                            progress=lambda m: err.print(f"  {m}")) as run:
            click.echo(f"{name} serving HTTP/3 on {run.url} (SNI {run.server_name}, "
                       f"self-signed {run.cert})")
            click.echo(f"  qlog: {run.qlog_dir or 'none (this peer writes none)'}")
            click.echo(f"  log:  {run.log}")
            try:
                while run.process.poll() is None:
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
    except QuicackError as e:
        _fail(e)
    if run.process.returncode not in (0, None, -2, -15):
        _fail(QuicackError(f"{name} exited with status {run.process.returncode}", str(run.log)))


if __name__ == "__main__":  # pragma: no cover
    main()
