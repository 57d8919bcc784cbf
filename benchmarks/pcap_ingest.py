"""Benchmark: pcap ingest packets/s next to raw tshark and pyshark on the same capture.

Prints, from one run on one capture (≥ 30k packets; made on loopback with
``benchmarks/make_capture.py`` unless ``--capture`` is given):

* raw ``tshark -T fields`` writing the same fields with the same options to /dev/null
  (the yardstick);
* the native capture reader alone (``quicack._native.CaptureReader``: records, decryption,
  frames and the staged rows as Arrow buffers, no DuckDB), in a process of its own (issue 33's
  target: ≥ 10× raw tshark), with its peak memory;
* ``quicack analyze`` on the capture into a fresh store, as a user runs it (new process:
  Python start-up, the reader, DuckDB normalization and commit all included), with the native
  reader (issue 33's target: ≥ 5× raw tshark on ≥ 500k packets) and with ``--dissector
  tshark`` (issue 13's: ≥ 0.7×), each with its peak memory (resident set, from wait4);
* pyshark's ``FileCapture`` iterating packets and reading one QUIC field (the per-packet object
  API), timed on the first ``--pyshark-packets`` packets (it is far slower);
* optionally (``--default-dissectors``) raw tshark with every dissector on (HTTP/3 included),
  which is what an unconfigured ``tshark -T fields`` costs on an HTTP/3 transfer.

Packets are captured frames (what tshark counts).  Times are wall clock on a shared 2-core
machine: raw tshark and quicack are run ``--repeat`` times, interleaved, and the best run of each
gives the ratio (all runs and the CPU seconds of each, the medians and the run-by-run ratios
are printed too).

    python benchmarks/pcap_ingest.py [--capture FILE --keylog FILE] [--bytes 40000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from quicack.pcap import tshark  # noqa: E402
from quicack.pcap.fields import ALL_FIELDS  # noqa: E402


#: Peak resident set (MB) of the last process :func:`wall` waited for (its own, from wait4).
PEAK_MB: list[float] = [0.0]


#: Resident memory (MB) of the last process :func:`wall` waited for, sampled every 0.1 s.
RESIDENT_MB: list[float] = []


def _sample(pid: int, done: threading.Event) -> None:
    RESIDENT_MB.clear()
    while not done.wait(0.1):
        try:
            with open(f"/proc/{pid}/status") as f:
                RESIDENT_MB.append(int(f.read().split("VmRSS:")[1].split()[0]) / 1024)
        except (OSError, IndexError):
            return


def wall(cmd: list[str], **kwargs) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children); its peak memory in PEAK_MB,
    its resident memory through the run in RESIDENT_MB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, **kwargs)
    done = threading.Event()
    sampler = threading.Thread(target=_sample, args=(proc.pid, done), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    PEAK_MB[0] = usage.ru_maxrss / 1024
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def read_only(capture: Path, keylog: Path | None) -> None:
    """(In a process of its own) read the capture with the native reader, nothing else; print
    the packets, the seconds reading took and the peak memory."""
    from quicack._native import CaptureReader

    start, cpu = time.perf_counter(), time.process_time()
    reader = CaptureReader(str(capture), keylog.read_bytes() if keylog else None, [])
    packets = 0
    while (batch := reader.batch(32768)) is not None:
        packets += batch[2][0][2]  # c_pkt's first column: its length
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"{reader.frames} {packets} {seconds:.4f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
          f"{cpu:.4f}")


def native_reader(capture: Path, keylog: Path | None) -> tuple[float, float, float, float]:
    """(seconds the native reader took inside its process, whole process's wall seconds, peak MB,
    CPU seconds of the reading)."""
    cmd = [sys.executable, __file__, "--read-only", str(capture)] + (["--keylog", str(keylog)] if keylog else [])
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    return float(out[2]), time.perf_counter() - start, float(out[3]), float(out[4])


def frames_in(capture: Path) -> int:
    out = subprocess.run(["capinfos", "-c", "-M", str(capture)], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split(":")[-1].strip())


def raw_tshark(capture: Path, keylog: Path | None, default_dissectors: bool = False) -> tuple[float, float]:
    cmd = [tshark.tshark_binary(), "-r", str(capture), "-n", "-T", "fields", "-E", "separator=/t",
           "-E", "occurrence=a", "-E", "aggregator=,"]
    if not default_dissectors:
        cmd += ["--disable-protocol", "http3"]
    if keylog:
        cmd += ["-o", f"tls.keylog_file:{keylog}"]
    for f in ALL_FIELDS:
        if f != "quicack.layout":
            cmd += ["-e", f]
    return wall(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def quicack_analyze(capture: Path, keylog: Path | None, workdir: Path, dissector: str = "native") -> tuple[float, float]:
    db = workdir / "bench.duckdb"
    db.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "quicack", "analyze", "-q", "--db", str(db), "--dissector", dissector, str(capture)]
    if keylog:
        cmd += ["--keylog", str(keylog)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    return wall(cmd, stdout=subprocess.DEVNULL, env=env)


def pyshark_rate(capture: Path, keylog: Path | None, limit: int) -> tuple[int, float]:
    import asyncio

    import pyshark

    asyncio.set_event_loop(asyncio.new_event_loop())  # make_capture's asyncio.run() left none
    prefs = {"tls.keylog_file": str(keylog)} if keylog else {}
    start = time.perf_counter()
    cap = pyshark.FileCapture(str(capture), override_prefs=prefs, disable_protocol="http3",
                              keep_packets=False)
    n = 0
    try:
        for packet in cap:
            if "quic" in packet:
                getattr(packet.quic, "packet_length", None)
            n += 1
            if n >= limit:
                break
    finally:
        cap.close()
    return n, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capture", type=Path, help="capture to use (default: make one)")
    parser.add_argument("--keylog", type=Path, help="its TLS key log")
    parser.add_argument("--bytes", type=int, default=40_000_000, help="transfer size of the capture made")
    parser.add_argument("--pyshark-packets", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of raw tshark and of quicack")
    parser.add_argument("--default-dissectors", action="store_true",
                        help="also time raw tshark with HTTP/3 dissection on (slow)")
    parser.add_argument("--connections", type=int, default=1, help="connections of the capture made")
    parser.add_argument("--no-pyshark", action="store_true", help="leave pyshark out")
    parser.add_argument("--read-only", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_only:
        read_only(args.read_only, args.keylog)
        return
    with tempfile.TemporaryDirectory(prefix="quicack-bench-") as tmp:
        workdir = Path(tmp)
        capture, keylog = args.capture, args.keylog
        if capture is None:
            import make_capture

            print(f"making a capture: aioquic HTTP/3 GET of {args.bytes} bytes on loopback …", flush=True)
            capture = make_capture.capture(workdir / "capture", args.bytes, connections=args.connections)
            keylog = workdir / "capture" / "keys.log"
        frames = frames_in(capture)
        size = capture.stat().st_size
        print(f"capture: {capture} ({frames} packets, {size / 1e6:.1f} MB), tshark {tshark.tshark_version(tshark.tshark_binary())}")
        if frames < 30_000:
            print("note: fewer than 30k packets; the target is defined on ≥ 30k")

        raw_runs, ingest_runs, native_runs, reader_runs, peaks = [], [], [], [], {"native": 0.0, "tshark": 0.0}
        for _ in range(args.repeat):
            raw_runs.append(raw_tshark(capture, keylog))
            reader_runs.append(native_reader(capture, keylog))
            native_runs.append(quicack_analyze(capture, keylog, workdir, "native"))
            peaks["native"] = max(peaks["native"], PEAK_MB[0])
            resident = list(RESIDENT_MB)
            ingest_runs.append(quicack_analyze(capture, keylog, workdir, "tshark"))
            peaks["tshark"] = max(peaks["tshark"], PEAK_MB[0])
        t_raw, cpu_raw = min(raw_runs)
        t_ingest, cpu_ingest = min(ingest_runs)
        t_native, cpu_native = min(native_runs)
        t_reader, cpu_reader = min((r[0], r[3]) for r in reader_runs)
        rows = [("raw tshark -T fields (same fields and options)", frames / t_raw, t_raw, cpu_raw),
                ("native reader alone (in its process)", frames / t_reader, t_reader, cpu_reader),
                ("quicack analyze --dissector native (whole ingest)", frames / t_native, t_native, cpu_native),
                ("quicack analyze --dissector tshark (whole ingest)", frames / t_ingest, t_ingest, cpu_ingest)]
        if not args.no_pyshark:
            n_py, t_py = pyshark_rate(capture, keylog, args.pyshark_packets)
            rows.append((f"pyshark FileCapture (first {n_py} packets)", n_py / t_py, t_py, None))
        if args.default_dissectors:
            t_def, cpu_def = raw_tshark(capture, keylog, default_dissectors=True)
            rows.append(("raw tshark -T fields, every dissector on (HTTP/3)", frames / t_def, t_def, cpu_def))
        raw_rate = rows[0][1]
        print(f"{'best of ' + str(args.repeat):52} {'packets/s':>10} {'seconds':>8} {'CPU s':>6} {'× raw':>6}")
        for name, rate, seconds, cpu in rows:
            cpu_text = f"{cpu:6.2f}" if cpu is not None else f"{'':6}"
            print(f"{name:52} {rate:10.0f} {seconds:8.2f} {cpu_text} {rate / raw_rate:6.2f}")
        print("all runs, wall s (CPU s): raw " + ", ".join(f"{w:.2f} ({c:.2f})" for w, c in raw_runs)
              + "; quicack " + ", ".join(f"{w:.2f} ({c:.2f})" for w, c in ingest_runs))
        m_raw, m_ingest = statistics.median(w for w, _ in raw_runs), statistics.median(w for w, _ in ingest_runs)
        pairs = [r / q for (r, _), (q, _) in zip(raw_runs, ingest_runs)]
        print(f"median of {args.repeat}: raw {m_raw:.2f} s, quicack {m_ingest:.2f} s: {m_raw / m_ingest:.2f}×; "
              f"run by run (each quicack run right after its raw run): "
              + ", ".join(f"{p:.2f}×" for p in pairs) + f", median {statistics.median(pairs):.2f}×")
        print(f"peak memory (MB): native reader alone {max(r[2] for r in reader_runs):.0f}, quicack analyze "
              f"--dissector native {peaks['native']:.0f}, --dissector tshark {peaks['tshark']:.0f} "
              f"(capture {size / 1e6:.0f} MB)")
        if resident:  # (flat: the same at a quarter of the run as at three quarters, whatever the size)
            tenths = [max(resident[len(resident) * k // 10:max(len(resident) * (k + 1) // 10, 1 + len(resident) * k // 10)])
                      for k in range(10)]
            print("quicack analyze --dissector native, resident memory through its last run, peak of each tenth (MB): "
                  + " ".join(f"{m:.0f}" for m in tenths))
        targets = [("native reader ≥ 10× raw tshark (≥ 30k decrypted packets)", rows[1][1] / raw_rate, 10, 30_000),
                   ("quicack analyze (native) ≥ 5× raw tshark (≥ 500k packets)", rows[2][1] / raw_rate, 5, 500_000),
                   ("quicack analyze --dissector tshark ≥ 0.7× raw tshark", rows[3][1] / raw_rate, 0.7, 30_000)]
        print(f"CPU seconds per packet: raw tshark {cpu_raw / frames * 1e6:.1f} µs, native reader "
              f"{cpu_reader / frames * 1e6:.1f} µs ({cpu_raw / cpu_reader:.1f}×; wall time depends on the machine's load)")
        for name, ratio, target, needed in targets:
            verdict = ("met" if ratio >= target else "NOT met") if frames >= needed else f"not measured (< {needed} packets)"
            print(f"target: {name}: {verdict} ({ratio:.2f}×, best of each)")


if __name__ == "__main__":
    main()
