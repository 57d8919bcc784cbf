"""The lab's commands: local servers (serve), real third-party peers (peers), the testbed.

Theory of operation: like :mod:`quicack.cli`, a thin click layer — each command parses its
options, calls :mod:`quicack.lab` (or :mod:`quicack.report` for what a peer scan printed), and
prints; :mod:`quicack.cli` adds these groups to the ``quicack`` program.  A command imports the
module it drives when it runs, so ``quicack --help`` loads neither aioquic nor DuckDB.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from quicack.lab.modes import CONGESTION_CONTROLLERS, SERVE_MODES
from quicack.model import QuicackError
from quicack.terminal import DB_OPTION, console, fail


# --- serve -----------------------------------------------------------------------------------

@click.command()
@click.option("--mode", type=click.Choice(SERVE_MODES), default="wfc", show_default=True,
              help="ACK behaviour: wfc (ACK with the ServerHello), iack (ACK-only Initial at once, "
                   "ServerHello after the certificate delay), iack-ping (the instant ACK carries a "
                   "PING), iack-uncounted (iack whose ACK does not count against the 3x budget); silent, garbage, close, alert, retry, vn for testing scanners.")
@click.option("--cert-delay-ms", type=float, default=0.0, show_default=True,
              help="Time the ServerHello waits for the certificate (a remote certificate store).")
@click.option("--extra-delay-ms", type=float, default=0.0, show_default=True,
              help="Delay added to every datagram the server sends (a longer return path).")
@click.option("--listen", "listens", multiple=True, metavar="IP[:PORT]",
              help="Address to listen on (repeatable; port 4433 if omitted). Default 127.0.0.1:4433.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML file with [[listener]] tables (listen, mode, cert_delay_ms, "
                   "extra_delay_ms, server_header, cert_chain_length, response_bytes, congestion, "
                   "request_ack_frequency, zero_rtt): many listeners with a mix of behaviours.")
@click.option("--qlog-dir", type=click.Path(file_okay=False), help="Write server qlogs here.")
@click.option("--server-header", default=None,
              help="HTTP `server` header to answer with  [default: quicack-serve/MODE aioquic/VERSION]")
@click.option("--cert-chain-length", type=click.IntRange(1, 32), default=1, show_default=True,
              help="Certificates in the server's first flight: the leaf, its issuers, a root.")
@click.option("--response-bytes", type=click.IntRange(0, None), default=None,
              help="Answer every GET with this many bytes (a path /N asks for N)  [default: one line]")
@click.option("--congestion", type=click.Choice(CONGESTION_CONTROLLERS), default="reno",
              show_default=True,
              help="aioquic's congestion controller; careful-resume (draft-ietf-tsvwg-careful-resume-24) "
                   "saves each client address's capacity and RTT when a connection ends and resumes "
                   "from them in the next.")
@click.option("--request-ack-frequency", metavar="N,MAX_DELAY_MS", default=None,
              help="Ask a client that advertises min_ack_delay for one ACK per N ack-eliciting packets "
                   "or MAX_DELAY_MS (an ACK_FREQUENCY frame, draft-ietf-quic-ack-frequency-12).")
@click.option("--no-zero-rtt", "zero_rtt", is_flag=True, flag_value=False, default=True,
              help="Issue no session tickets: no resumption, hence no 0-RTT (on by default: tickets "
                   "allowing early data, 0-RTT accepted).")
def serve(mode, cert_delay_ms, extra_delay_ms, listens, config_path, qlog_dir, server_header,
          cert_chain_length, response_bytes, congestion, request_ack_frequency, zero_rtt):
    """Run local aioquic HTTP/3 servers with a chosen ACK behaviour until Ctrl-C.

    \b
    quicack serve --mode iack --cert-delay-ms 20 --listen 127.0.0.2:4433
    quicack serve --config scanners/demo-servers.toml
    """
    import asyncio

    from quicack.lab import ackrequest
    from quicack.lab import serve as serve_mod
    try:
        request = ackrequest.parse(request_ack_frequency) if request_ack_frequency else None
        specs = serve_mod.load_config(config_path) if config_path else []
        for listen in listens or ([] if config_path else ["127.0.0.1:4433"]):
            host, port = serve_mod.parse_listen(listen)
            spec = serve_mod.ListenerSpec(host, port, mode, cert_delay_ms, extra_delay_ms,
                                          server_header=server_header, cert_chain_length=cert_chain_length,
                                          response_bytes=response_bytes, congestion=congestion,
                                          request_ack_frequency=request, zero_rtt=zero_rtt)
            serve_mod.check_spec(spec)
            specs.append(spec)
    except QuicackError as e:
        fail(e)

    def ready(running) -> None:
        for spec in running.specs:
            click.echo(f"listening on {spec.describe()}")
        click.echo("ready", err=True)
        sys.stdout.flush()

    try:
        asyncio.run(serve_mod.serve_forever(specs, qlog_dir, ready))
    except QuicackError as e:
        fail(e)
    except KeyboardInterrupt:
        pass


@click.group()
def peers():
    """Real third-party QUIC servers as local test peers (Caddy, ngtcp2, quic-go, quinn, go-x-net,
    s2n-quic, quiche, tquic, kwik).

    Debian packages are installed with apt-get (root); the others are built from tests/peers/
    with go/cargo/mvn into ~/.cache/quicack/peers (or $QUICACK_PEERS_CACHE), keyed by a hash of
    their sources and toolchain, so later builds are instant.
    """


def _peer_names(names) -> list[str]:
    from quicack.lab import peers as peer_mod
    try:
        return [peer_mod.peer(n).name for n in names] or list(peer_mod.PEERS)
    except QuicackError as e:
        fail(e)


@peers.command("list")
def peers_list():
    """Each peer: its QUIC stack, how it is obtained, its qlog, how GSO is turned off, its state."""
    from quicack.lab import peers as peer_mod
    for p in peer_mod.PEERS.values():
        click.echo(f"{p.name}: {p.stack}")
        needs = f"; build needs {' '.join(p.apt_packages)}" if p.apt_packages else ""
        click.echo(f"  obtained: {p.kind}" + (f" ({' '.join(p.apt_packages)})" if p.kind == "apt" else
                                                f" (tests/peers/{p.source}{needs})"))
        click.echo(f"  qlog:     {p.qlog or 'none'}")
        click.echo(f"  GSO off:  {p.gso_off}")
        click.echo(f"  state:    {peer_mod.status(p.name)}")


@peers.command("build")
@click.argument("names", nargs=-1)
def peers_build(names):
    """Install or build peers NAMES (default: all) and print what each took."""
    from quicack.lab import peers as peer_mod
    for name in _peer_names(names):
        try:
            done = peer_mod.prepare(name, progress=lambda m: console().print(f"  {m}"))
        except QuicackError as e:
            fail(e)
        click.echo(f"{name}: {done.action} in {done.seconds:.1f} s: {done.binary}")


@peers.command("scan")
@click.argument("names", nargs=-1)
@DB_OPTION
@click.option("--repetitions", "-n", type=click.IntRange(1, 255), default=3, show_default=True,
              help="Probes per peer.")
@click.option("--path", default="/", show_default=True, help="Path of the HTTP/3 GET (/64k.bin for a transfer).")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Folder for the peers' files, the scans' qlog, keys and captures "
                   "(default: DB-scans/peers next to the store).")
@click.option("--all-repetitions", is_flag=True, help="Print every repetition's RTT samples, not only the first.")
def peers_scan(names, db, repetitions, path, workdir, all_repetitions):
    """Scan peers NAMES (default: all) with the scanner and a capture, ingest the capture and each
    peer's own qlog into the store, and print the first-ACK-delay table and the server RTT
    estimators' replay next to what each peer logged.

    Each peer is started on loopback and probed as <name>.localhost (--resolve to its port),
    exactly like `quicack scan --pcap … --allow-private`; `quicack report` shows the same tables."""
    from quicack.lab import peers as peer_mod
    from quicack.report import peers as peerviews
    from quicack.store.database import Store
    chosen = _peer_names(names)
    base = Path(workdir) if workdir else peer_mod.workdir_for(db)
    failed = False
    runs = []
    for name in chosen:
        try:
            done = peer_mod.scan(name, db, base / name, repetitions=repetitions, path=path,
                                 progress=lambda m: console().print(f"  {m}"))
        except QuicackError as e:
            fail(e)
        runs.append(done.run)
        click.echo(f"{name}: run {done.run!r}: " + ", ".join(f"{k} {v}" for k, v in done.outcomes.items())
                   + f"; capture {done.pcap}; server qlog: {len(done.server_qlogs)} file(s)")
        for failure in done.failures:
            failed = True
            click.echo(f"error: {failure}", err=True)
    with Store(db, read_only=True) as store:
        click.echo()
        click.echo(peerviews.format_first_ack_delays(peerviews.first_ack_delays(store, runs)))
        click.echo(peerviews.format_rtt_comparison(peerviews.rtt_comparison(store, runs),
                                                   None if all_repetitions else 1))
    click.echo(f"store: {db}; why the logged values differ: schemas/README.md, rtt_samples")
    sys.exit(1 if failed else 0)


@peers.command("run")
@click.argument("name")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to bind.")
@click.option("--port", type=int, default=None, help="UDP port (default: a free one).")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Folder for certificate, served files, qlog and log (default: a new temp folder).")
def peers_run(name, host, port, workdir):
    """Start peer NAME on loopback and keep it running until Ctrl-C."""
    import time

    from quicack.lab import peers as peer_mod
    name = _peer_names([name])[0]
    try:
        with peer_mod.start(name, workdir, host=host, port=port,
                            progress=lambda m: console().print(f"  {m}")) as run:
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
        fail(e)
    if run.process.returncode not in (0, None, -2, -15):
        fail(QuicackError(f"{name} exited with status {run.process.returncode}", str(run.log)))


@click.group()
def testbed() -> None:
    """A testbed on this machine: an impairment relay between QUIC clients and servers."""


@testbed.command("relay")
@click.option("--listen", required=True, metavar="ADDR:PORT",
              help="Loopback address and port the clients send to.")
@click.option("--upstream", required=True, metavar="ADDR:PORT",
              help="The server's loopback address and port.")
@click.option("--delay-ms", type=float, default=0.0, show_default=True,
              help="One-way delay of each direction.")
@click.option("--delay-to-client-ms", type=float, default=None, help="Delay towards the client (instead of --delay-ms).")
@click.option("--delay-to-server-ms", type=float, default=None, help="Delay towards the server (instead of --delay-ms).")
@click.option("--jitter-ms", type=float, default=0.0, show_default=True,
              help="Uniform jitter ±J ms on every delay, never reordering (J ≤ the delay).")
@click.option("--rate-to-client-kbps", type=float, default=None,
              help="Rate limit towards the client, kbit/s: datagrams leave one after another.")
@click.option("--rate-to-server-kbps", type=float, default=None, help="Rate limit towards the server, kbit/s.")
@click.option("--queue-bytes", type=int, default=None,
              help="Bytes that may wait for a rate limit (per direction); more is dropped.")
@click.option("--queue-packets", type=int, default=None,
              help="Datagrams that may wait for a rate limit (quic-network-simulator's --queue).")
@click.option("--queue-packets-to-client", type=int, default=None, help="The same towards the client only.")
@click.option("--queue-packets-to-server", type=int, default=None, help="The same towards the server only.")
@click.option("--rate-overhead-bytes", type=int, default=0, show_default=True,
              help="Bytes per datagram a rate limit counts besides its UDP payload (28: IPv4 + UDP headers).")
@click.option("--loss-to-client", type=float, default=0.0, metavar="PCT", help="Random loss towards the client, %.")
@click.option("--loss-to-server", type=float, default=0.0, metavar="PCT", help="Random loss towards the server, %.")
@click.option("--burst", type=int, default=None, metavar="N", help="At most N consecutive random losses.")
@click.option("--drop-to-client", default="", metavar="LIST",
              help="Datagrams to drop towards the client, by index from 1 per flow, e.g. 1,3,4 "
                   "(quic-network-simulator's --drops_to_client).")
@click.option("--drop-to-server", default="", metavar="LIST", help="The same towards the server.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the loss and jitter draws.")
@click.option("--realtime", is_flag=True,
              help="Run the relay at a real-time priority (SCHED_FIFO; root or CAP_SYS_NICE): "
                   "its timing holds on a busy machine.")
@DB_OPTION
def relay(db, **options):
    """Relay UDP between clients and a server on loopback, impairing each direction, until
    Ctrl-C or SIGTERM; then store every datagram (tables relay_runs, relay_datagrams).

    \b
    quicack testbed relay --listen 127.0.0.1:4434 --upstream 127.0.0.1:4433 --delay-ms 20 \\
        --drop-to-client 1,3,4 --db lab.duckdb
    """
    from quicack.lab import relay as relay_mod
    from quicack.store.database import Store
    try:
        config = relay_mod.RelayConfig.from_options(**options)
        Store(db).close()  # a store that can be written, before any datagram is relayed
    except QuicackError as e:
        fail(e)

    def ready(address) -> None:
        click.echo(f"relaying {relay_mod.endpoint_text(address)} ⇄ "
                   f"{relay_mod.endpoint_text(config.upstream)} until Ctrl-C", err=True)

    try:
        records = relay_mod.run_until_signal(config, ready)
        run_id = records.write(db)
    except QuicackError as e:
        fail(e)
    for line in records.summary_lines():
        click.echo(line)
    click.echo(f"relay run {run_id}: {len(records)} datagrams stored in {db}")


@testbed.command("run")
@click.argument("experiment", type=click.Path(dir_okay=False))
@DB_OPTION
@click.option("--repetitions", "-n", type=click.IntRange(1, None), default=None,
              help="Attempts per cell  [default: the experiment's repetitions]")
@click.option("--limit", type=click.IntRange(0, None), default=None,
              help="Make at most this many attempts now (a later run continues).")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Folder for the qlogs  [default: <store>-testbed/<experiment> next to the store]")
@click.option("--quiet", "-q", is_flag=True, help="No line per attempt.")
def testbed_run(experiment, db, repetitions, limit, workdir, quiet):
    """Run an experiment (experiments/*.toml): servers × clients × one-way delays × scenarios ×
    repetitions through the impairment relay, one attempt at a time; each attempt a row in
    testbed_runs, both ends' qlogs ingested. Re-running the same command continues a run that was
    stopped (Ctrl-C, kill) where it was.

    \b
    quicack testbed run experiments/instant-ack.toml --db ia.duckdb
    """
    from quicack.lab import runner, testbedrows
    from quicack.report.text import table
    from quicack.store.database import Store

    say = (lambda line: None) if quiet else (lambda line: click.echo(line, err=True))
    try:
        summary = runner.run(experiment, db, repetitions, limit, say, workdir)
    except QuicackError as e:
        fail(e)
    except KeyboardInterrupt:
        click.echo("interrupted: the attempts made so far are stored; run the same command to "
                   "continue", err=True)
        sys.exit(130)
    outcomes = ", ".join(f"{k} {v}" for k, v in summary.outcomes.most_common()) or "none"
    click.echo(f"experiment {summary.experiment!r}: {summary.stored} attempts made and stored in "
               f"{summary.seconds:.1f} s (outcomes: {outcomes}); {summary.stored_before + summary.stored} "
               f"of {summary.total} stored in {db}" + ("" if summary.complete else "; run again to continue"))
    with Store(db, read_only=True) as store:
        columns, rows = testbedrows.medians(store.con, summary.experiment, summary.scenarios)
    for line in table("median TTFB and client first PTO (ms) of the completed attempts:", columns, rows):
        click.echo(line)
