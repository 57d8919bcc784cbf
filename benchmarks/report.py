"""Benchmark `quicack report` on a large synthetic scan store: report time and HTML size.

Not a test: it prints figures.  It builds a store with --probes probes (default 1,000,000: about
333k domains × 3 repetitions over two runs) whose connections carry handshake classes, gaps, first
ACK delays, PTOs and server transport parameters drawn from distributions like the published
ones (Cloudflare ~100 % IACK with ~3 ms gaps, Google mostly WFC, …), with ~60k distinct server
addresses, then times `write_report` in a child process and prints the wall time, the peak RSS
and the file size.

    python benchmarks/report.py [--probes 1000000] [--workdir DIR]

Targets (issue 7): < 60 s and < 10 MB for 1M probes.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from quicack import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402  (benchmarks/machine.py)

CHILD = r"""
import json, sys, time
import machine
from datetime import datetime, timezone
from quicack import Store
from quicack.report.document import write_report
t = time.perf_counter()
with Store(sys.argv[1], read_only=True) as store:
    report = write_report(store, sys.argv[2], now=datetime.now(timezone.utc))
print(json.dumps({"wall_s": time.perf_counter() - t, "figures": report.figures,
                  "peak_rss_mb": machine.peak_rss_mb()}))
"""

# provider: (share of probes, server header, address prefix, P(iack), gap median ms, first ACK delay ms)
PROVIDERS = [
    ("cloudflare", 0.35, "cloudflare", "104.16.", 0.999, 3.2, 0.6),
    ("google", 0.20, "gws", "142.250.", 0.11, 30.3, 1.0),
    ("amazon", 0.10, "CloudFront", "13.32.", 0.41, 6.4, 2.0),
    ("akamai", 0.08, "AkamaiGHost", "23.1.", 0.32, 20.9, 1.5),
    ("fastly", 0.07, "Varnish", "151.101.", 0.0, 0.0, 0.3),
    ("meta", 0.05, "proxygen-bolt", "157.240.", 0.0, 0.0, 0.2),
    ("other", 0.15, "nginx", "198.51.", 0.215, 12.0, 2.5),
]


def build(db: Path, probes: int) -> None:
    with Store(db) as store:
        con = store.con
        con.execute("BEGIN")
        con.execute("""INSERT INTO files VALUES (1, 'synthetic', 'x', 0, 'json', '0.3', 2, now()::TIMESTAMP, 0, [])""")
        for run in (1, 2):
            con.execute("""INSERT INTO runs (run_id, name, shard, cid_run_tag, list_path, list_sha256, targets,
                repetitions, arguments, host, started_at, resumed_at, finished_at, quicack_version, aioquic_version,
                tshark_version, python_version, output_dir, pcap_path)
                VALUES (?, ?, '', ?, 'top-1m.csv', 'x', ?, 3, '{}', 'bench', now()::TIMESTAMP, [], now()::TIMESTAMP,
                        '0', '1.7.2', NULL, '3.11', '/tmp', NULL)""", [run, f"run{run}", run, probes // 6])
        cases = []
        lower = 0.0
        for name, share, server, prefix, p_iack, gap, delay in PROVIDERS:
            cases.append(f"WHEN u < {lower + share} THEN {{'server': '{server}', 'prefix': '{prefix}', "
                         f"'p': {p_iack}, 'gap': {gap}, 'delay': {delay}}}")
            lower += share
        provider = "CASE " + " ".join(cases) + " ELSE {'server': 'nginx', 'prefix': '198.51.', 'p': 0.2, 'gap': 12.0, 'delay': 2.5} END"
        con.execute(f"""CREATE TEMP TABLE syn AS
            SELECT i, i // 3 AS target, (i % 3)::INTEGER AS repetition, 1 + (i // (3 * ({probes} // 6 + 1))) % 2 AS run,
                   {provider} AS pv, random() AS r1, random() AS r2, random() AS r3
            FROM (SELECT i, hash(i // 3) / 18446744073709551615.0 AS u FROM range({probes}) t(i))""")
        con.execute("""INSERT INTO connections (connection_id, file_id, trace_index, vantage, implementation, odcid,
                events, quirks, handshake_class, handshake_reason, ack_sh_gap_ms, first_ack_delay_ms,
                first_rtt_sample_ms, first_pto_ms, counterfactual_first_pto_ms, server_max_ack_delay_ms,
                server_ack_delay_exponent, ack_frequency_supported, replay_samples)
            SELECT i + 1, 1, i::INTEGER, 'client', 'aioquic', printf('%016x', i), 40, [],
                   CASE WHEN r1 < pv.p THEN 'iack' WHEN r1 < 0.97 THEN 'wfc' ELSE 'failed' END,
                   CASE WHEN r1 < pv.p THEN 'instant_ack' WHEN r1 < 0.97 THEN 'ack_with_server_hello' ELSE 'timeout' END,
                   CASE WHEN r1 < pv.p THEN pv.gap * (0.3 + 1.4 * r2) WHEN r1 < 0.97 THEN 0.0 END,
                   CASE WHEN r1 < 0.97 THEN pv.delay * (0.5 + r3) + CASE WHEN r1 >= pv.p THEN pv.gap * r2 ELSE 0 END END,
                   CASE WHEN r1 < 0.97 THEN 10 + 80 * r3 END,
                   CASE WHEN r1 < 0.97 THEN 3 * (10 + 80 * r3) END,
                   CASE WHEN r1 < pv.p THEN 3 * (10 + 80 * r3 + pv.gap * (0.3 + 1.4 * r2))
                        WHEN r1 < 0.97 THEN 3 * greatest(10 + 80 * r3 - pv.delay, 10) END,
                   CASE WHEN r1 < 0.97 THEN 25.0 END, CASE WHEN r1 < 0.97 THEN 3 END,
                   CASE WHEN r1 < 0.97 THEN r2 < 0.05 END, 3
            FROM syn""")
        con.execute("""INSERT INTO probes (run_id, target_index, repetition, domain, rank, address, port, schedule,
                outcome, split_clienthello, connection_id, server_header, cert_issuer, started_epoch_ms)
            SELECT run, target, repetition, printf('site%07d.example', target), target + 1,
                   pv.prefix || ((target % 60000) // 250)::VARCHAR || '.' || (target % 250)::VARCHAR, 443, 'spaced',
                   CASE WHEN r1 < 0.97 THEN 'ok' ELSE 'timeout' END, 1, i + 1, pv.server,
                   'C=US, O=Let''s Encrypt, CN=R10', 1.795e12 + i * 10
            FROM syn""")
        con.execute("COMMIT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=1_000_000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="quicack-report-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    db, out = workdir / "scan.duckdb", workdir / "report.html"
    for p in (db, Path(str(db) + ".wal"), out):
        p.unlink(missing_ok=True)
    t = time.perf_counter()
    build(db, args.probes)
    print(f"machine: {os.cpu_count()} cores; store with {args.probes:,} probes built in {time.perf_counter() - t:.1f} s "
          f"({db.stat().st_size / 1e6:.0f} MB) in {workdir}")
    r = machine.run_child(CHILD, db, out)
    size = out.stat().st_size / 1e6
    print(f"report: {r['wall_s']:.1f} s, {size:.2f} MB HTML ({r['figures']} plots), peak RSS {r['peak_rss_mb']:.0f} MB"
          f"  — targets < 60 s, < 10 MB: {'met' if r['wall_s'] < 60 and size < 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
