"""Real third-party QUIC servers as test peers: install, build, cache and run them on loopback.

Theory of operation: our own aioquic servers only prove that quicack agrees with itself; the
peers here are QUIC stacks written by others.  Each :class:`Peer` says how it is obtained —

* ``apt``: a Debian package (``caddy``, ``ngtcp2-server``), installed non-interactively when its
  binary is missing;
* ``go`` / ``cargo`` / ``maven``: a minimal HTTP/3 server (and client) whose source (with
  ``go.sum`` / ``Cargo.lock`` / pinned versions in ``pom.xml``, so builds are reproducible) lives
  in ``tests/peers/<name>/`` and is built with the Go module proxy, crates.io or Maven Central
  into a cache *outside* the work tree, keyed by a hash of the sources and the toolchain version,
  so a second build is a file lookup; Debian packages the build needs (cmake for BoringSSL, …)
  are installed first —

and how it is started: on loopback, serving a small folder over HTTP/3 (or hq-interop, for a
stack without HTTP/3: :attr:`Peer.alpn`, which ``quicack peers scan`` probes with) with a
self-signed certificate made here, writing its own server-side qlog where it can, and with UDP generic
segmentation offload (GSO) turned off.  GSO hands the kernel up to 64 QUIC datagrams in one
``sendmsg``; on loopback no segmentation happens before the capture point, so a capture sees
frames of up to ~17 KB that tshark cannot decrypt.  RFC 9000 §14 limits a QUIC datagram to the
path MTU; what a capture must see is one QUIC datagram per frame, hence the per-stack switches
below.

:func:`start` is a context manager: it yields a :class:`RunningPeer` (address, port, qlog folder,
process) once the peer's UDP socket is bound, and on exit stops the process with the signal that
makes it flush its qlog (SIGINT for gtlsserver, SIGTERM for the others), killing it only if it
does not exit.  Nothing here prints; progress goes to an optional callback.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from quicack.model import QuicackError

Progress = Callable[[str], None]

#: Served by every peer at ``/``; tests check the body.
INDEX_BODY = "quicack test peer {name}\n"
#: A larger file (64 KiB, several packets) at ``/64k.bin`` for transfers.
LARGE_FILE = ("64k.bin", 64 * 1024)


@dataclass(frozen=True)
class Peer:
    """One third-party QUIC server and how to obtain and run it."""

    name: str
    #: the QUIC stack inside, with version
    stack: str
    #: 'apt', 'go', 'cargo' or 'maven'
    kind: str
    #: apt: the installed binary; go/cargo/maven: the binary's (maven: launcher's) name in the cache
    binary: str
    #: where its qlog comes from, or None when it writes none
    qlog: str | None
    #: how UDP GSO is turned off
    gso_off: str
    #: apt: the packages; go/cargo/maven: Debian packages the build needs (installed if missing)
    apt_packages: tuple[str, ...] = ()
    #: go/cargo: the source folder under tests/peers/
    source: str | None = None
    #: the signal that makes it close its connections and flush its qlog
    stop_signal: int = signal.SIGTERM
    #: what the scanner speaks to it: 'h3', or 'hq-interop' for a stack without HTTP/3
    alpn: str = "h3"
    #: its row in the seed's first-ACK table (:data:`quicack.report.peers.SEED_FIRST_ACK_MS`)
    seed: str | None = None


PEERS: dict[str, Peer] = {p.name: p for p in (
    Peer("caddy", "Caddy 2.6.2 (Debian), quic-go inside", "apt", "/usr/bin/caddy", None,
         "not needed: its quic-go predates GSO; QUIC_GO_DISABLE_GSO=true is set anyway",
         apt_packages=("caddy",), seed="quic-go"),
    Peer("ngtcp2", "ngtcp2 0.12.1 gtlsserver (Debian ngtcp2-server, GnuTLS)", "apt",
         "/usr/sbin/gtlsserver", "--qlog-dir: one JSON-SEQ file per connection",
         "--max-gso-dgrams=1", apt_packages=("ngtcp2-server",), stop_signal=signal.SIGINT, seed="ngtcp2"),
    Peer("quic-go", "quic-go v0.65.0 (tests/peers/quic-go)", "go", "quic-go-h3-server",
         "QLOGDIR + qlog.DefaultConnectionTracer: one JSON-SEQ file per connection",
         "QUIC_GO_DISABLE_GSO=true", source="quic-go", seed="quic-go"),
    Peer("quinn", "quinn 0.11.12 + h3 0.0.8 (tests/peers/quinn)", "cargo", "quinn-h3-server",
         "qlog feature: one JSON-SEQ stream for all connections, keyed by group_id",
         "TransportConfig::enable_segmentation_offload(false)", source="quinn", seed="quinn"),
    Peer("go-x-net", "Go golang.org/x/net/quic v0.62.0, hq-interop (tests/peers/go-x-net)", "go",
         "go-x-net-peer", "QLOGDIR + x/net quic/qlog JSON handler: one JSON-SEQ file per connection",
         "not needed: x/net/quic sends one datagram per sendmsg", source="go-x-net", alpn="hq-interop",
         seed="go-x-net"),
    Peer("s2n-quic", "s2n-quic 1.91.0 (rustls) + h3 0.0.6 via s2n-quic-h3-community 0.1.0 (tests/peers/s2n-quic)",
         "cargo", "s2n-quic-peer", None, "tokio IO provider: with_gso_disabled()", source="s2n-quic",
         seed="s2n-quic"),
    Peer("quiche", "quiche 0.30.0 (BoringSSL), its h3 (tests/peers/quiche)", "cargo", "quiche-peer",
         "QLOGDIR + Connection::set_qlog: one JSON-SEQ file per connection",
         "not needed: quiche does no I/O, the peer sends one datagram per send_to", source="quiche",
         apt_packages=("cmake", "libclang-dev"), seed="quiche"),
    Peer("tquic", "TQUIC 1.6.0 (BoringSSL), its h3 (tests/peers/tquic)", "cargo", "tquic-peer",
         "QLOGDIR + Connection::set_qlog: one JSON-SEQ file per connection",
         "not needed: TQUIC does no I/O, the peer sends one datagram per send_to", source="tquic",
         apt_packages=("cmake",), seed=None),
    Peer("kwik", "kwik 0.10.8 + flupke 0.9.4 (Java; tests/peers/kwik)", "maven", "kwik-peer", None,
         "not needed: java.net.DatagramSocket sends one datagram per send", source="kwik",
         apt_packages=("maven", "openjdk-17-jdk-headless"), seed="kwik"),
)}


def probe_domain(name: str) -> str:
    """The name a scan of peer ``name`` probes: ``<name>.localhost`` (RFC 6761: loopback only,
    never resolved elsewhere), with ``--resolve`` to the peer's port.  Its certificate holds the
    name, and :mod:`quicack.report.peers` recognises the peer's probes by it."""
    return f"{name}.localhost"


def peer(name: str) -> Peer:
    try:
        return PEERS[name]
    except KeyError:
        raise QuicackError(f"unknown peer {name!r}; peers: {', '.join(PEERS)}") from None


# --- where things live -----------------------------------------------------------------------

def cache_dir() -> Path:
    """Build cache: ``$QUICACK_PEERS_CACHE``, else ``$XDG_CACHE_HOME/quicack/peers``, else
    ``~/.cache/quicack/peers`` — outside any work tree, so clean clones reuse builds."""
    explicit = os.environ.get("QUICACK_PEERS_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "quicack" / "peers"


def source_root() -> Path:
    """The peers' sources: shipped in the wheel as ``quicack/peers_src``, else the source
    tree's ``tests/peers``."""
    packaged = resources.files("quicack").joinpath("peers_src")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "tests" / "peers"


def _source_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "target" not in p.parts)


def _toolchain(kind: str) -> str:
    tool = {"go": ["go", "version"], "cargo": ["rustc", "--version"], "maven": ["mvn", "-v"]}[kind]
    if shutil.which(tool[0]) is None:
        needs = {"go": "Go ≥ 1.26 (Debian's golang-go is too old for quic-go v0.65)",
                 "cargo": "Rust ≥ 1.95 with cargo (rustup; s2n-quic 1.91 needs 1.95)",
                 "maven": "Maven and Java ≥ 17 (Debian: maven, openjdk-17-jdk-headless)"}[kind]
        raise QuicackError(f"{tool[0]} not found on PATH; building this peer needs {needs}")
    return subprocess.run(tool, capture_output=True, text=True, check=True).stdout.strip()


def build_key(p: Peer) -> str:
    """Hash of the source files (names and bytes) and the toolchain version."""
    folder = source_root() / p.source
    digest = hashlib.sha256(_toolchain(p.kind).encode())
    for path in _source_files(folder):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def binary_path(p: Peer) -> Path:
    """Where the peer's binary is (apt) or will be once built (go/cargo)."""
    if p.kind == "apt":
        return Path(p.binary)
    return cache_dir() / f"{p.name}-{build_key(p)}" / p.binary


# --- install and build -----------------------------------------------------------------------

@dataclass
class Prepared:
    """What :func:`prepare` did for one peer."""

    peer: str
    binary: Path
    #: 'present', 'installed', 'cached' or 'built'
    action: str
    seconds: float


def _run(cmd: list[str], what: str, cwd: Path | None = None, env: dict | None = None) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise QuicackError(f"{what} failed (exit {done.returncode}): {' '.join(cmd)}\n{tail}")


def _apt_install(packages: tuple[str, ...], progress: Progress) -> None:
    if os.geteuid() != 0:
        raise QuicackError(f"installing {' '.join(packages)} needs root: run "
                           f"`sudo apt-get install -y {' '.join(packages)}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    progress(f"apt-get install {' '.join(packages)}")
    try:
        _run(cmd, "apt-get install", env=env)
    except QuicackError:
        progress("apt-get update (package lists missing or stale)")
        _run(["apt-get", "update", "-q"], "apt-get update", env=env)
        _run(cmd, "apt-get install", env=env)


def _installed(package: str) -> bool:
    """Whether Debian package ``package`` is installed (dpkg's status)."""
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return done.returncode == 0 and done.stdout.endswith(" installed")


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """One build of a peer at a time, across processes (two test runs, CI and a developer)."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(p: Peer, target: Path, progress: Progress) -> None:
    folder = source_root() / p.source
    staging = target.parent.with_name(target.parent.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if p.kind == "go":
        progress(f"go build {p.name} (modules from the Go module proxy; first build ~1 min)")
        env = {**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false", "GOTOOLCHAIN": "local",
               "CGO_ENABLED": "0"}
        _run(["go", "build", "-trimpath", "-o", str(staging / p.binary), "."], "go build",
             cwd=folder, env=env)
    elif p.kind == "cargo":
        progress(f"cargo build --release {p.name} (crates.io; first build ~2-5 min)")
        cargo_target = cache_dir() / "cargo-target"
        env = {**os.environ, "CARGO_TARGET_DIR": str(cargo_target)}
        _run(["cargo", "build", "--release", "--locked", "--quiet",
              "--manifest-path", str(folder / "Cargo.toml")], "cargo build", env=env)
        shutil.copy2(cargo_target / "release" / p.binary, staging / p.binary)
    elif p.kind == "maven":
        _build_maven(p, folder, staging, progress)
    (staging / "build.json").write_text(json.dumps(
        {"peer": p.name, "toolchain": _toolchain(p.kind), "key": target.parent.name,
         "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat()}, indent=1))
    staging.rename(target.parent)


def _build_maven(p: Peer, folder: Path, staging: Path, progress: Progress) -> None:
    """``mvn package`` of a copy of the sources (Maven writes target/ beside its pom); the jar
    ``<binary>.jar`` (runnable: its manifest names the main class and ``lib/``) and its
    dependencies (target/lib) go to ``staging`` with a launcher script named ``binary``."""
    progress(f"mvn package {p.name} (Maven Central; first build ~1 min)")
    work = staging / "src"
    shutil.copytree(folder, work, ignore=shutil.ignore_patterns("target"))
    _run(["mvn", "-q", "-B", "package"], "mvn package", cwd=work)
    shutil.copy2(work / "target" / f"{p.binary}.jar", staging / f"{p.binary}.jar")
    shutil.copytree(work / "target" / "lib", staging / "lib")
    shutil.rmtree(work)
    launcher = staging / p.binary
    launcher.write_text(f'#!/bin/sh\nexec java -jar "$(dirname "$0")/{p.binary}.jar" "$@"\n')
    launcher.chmod(0o755)


def prepare(name: str, progress: Progress | None = None) -> Prepared:
    """Make the peer's binary available: install (apt) or build (go/cargo/maven) unless present.

    Idempotent: an installed package or a cached build for the same sources and toolchain is
    used as it is.
    """
    progress = progress or (lambda message: None)
    p = peer(name)
    started = time.monotonic()
    if p.kind == "apt":
        if Path(p.binary).exists():
            return Prepared(name, Path(p.binary), "present", 0.0)
        _apt_install(p.apt_packages, progress)
        if not Path(p.binary).exists():
            raise QuicackError(f"{' '.join(p.apt_packages)} installed but {p.binary} is missing")
        return Prepared(name, Path(p.binary), "installed", time.monotonic() - started)
    target = binary_path(p)
    with _locked(p.name):
        if target.exists():
            return Prepared(name, target, "cached", time.monotonic() - started)
        missing = [pkg for pkg in p.apt_packages if not _installed(pkg)]
        if missing:
            _apt_install(tuple(missing), progress)
        _build(p, target, progress)
    return Prepared(name, target, "built", time.monotonic() - started)


def status(name: str) -> str:
    """'installed', 'built', 'not installed', 'not built' or why it cannot be built — without
    installing or building anything."""
    p = peer(name)
    if p.kind == "apt":
        return "installed" if Path(p.binary).exists() else "not installed"
    try:
        return "built" if binary_path(p).exists() else "not built"
    except QuicackError as e:
        return e.message


# --- certificate and content -----------------------------------------------------------------

def make_certificate(folder: Path, names: tuple[str, ...] = ("localhost", "127.0.0.1", "::1"),
                     days: int = 30) -> tuple[Path, Path]:
    """A self-signed certificate for ``names`` (DNS names or IP addresses), written as
    ``cert.pem`` and ``key.pem`` (PKCS#8) into ``folder``.  Returns (cert, key)."""
    from quicack.lab.certificate import self_signed, write_pem
    return write_pem(*self_signed(names, days=days), folder)


def _write_htdocs(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.html").write_text(INDEX_BODY.format(name=name))
    file_name, size = LARGE_FILE
    (folder / file_name).write_bytes(bytes(i % 251 for i in range(size)))
    return folder


# --- running ---------------------------------------------------------------------------------

@dataclass
class RunningPeer:
    """A started peer.  ``qlog_dir`` is None for peers that write no qlog (Caddy)."""

    name: str
    host: str
    port: int
    qlog_dir: Path | None
    process: subprocess.Popen
    workdir: Path
    cert: Path
    key: Path
    log: Path
    #: the name the certificate is valid for (use as SNI)
    server_name: str = "localhost"
    extra: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}/"

    def qlog_files(self) -> list[Path]:
        """The server-side qlog files written so far."""
        if self.qlog_dir is None or not self.qlog_dir.exists():
            return []
        return sorted(p for p in self.qlog_dir.iterdir() if p.is_file() and p.stat().st_size)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free for both UDP and TCP on ``host`` (Caddy also listens on TCP)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(50):
        with socket.socket(family, socket.SOCK_DGRAM) as udp:
            udp.bind((host, 0))
            port = udp.getsockname()[1]
            with socket.socket(family, socket.SOCK_STREAM) as tcp:
                try:
                    tcp.bind((host, port))
                except OSError:
                    continue
            return port
    raise QuicackError(f"no free UDP+TCP port on {host}")


def udp_port_bound(port: int, pid: int | None = None) -> bool:
    """Whether a socket is bound to UDP ``port`` — one of process ``pid`` if given (Linux
    /proc/net/udp{,6} socket inodes matched against /proc/PID/fd)."""
    inodes = set()
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if pid is None or not inodes:
        return bool(inodes)
    try:
        links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    except OSError:  # the process is gone
        return False
    return any(f"socket:[{inode}]" in links for inode in inodes)


def _caddyfile(run_dir: Path, host: str, port: int, cert: Path, key: Path, htdocs: Path) -> Path:
    path = run_dir / "Caddyfile"
    path.write_text(f"""{{
\tadmin off
\tauto_https disable_redirects
\tstorage file_system {run_dir / 'caddy-data'}
\tservers {{
\t\tprotocols h1 h2 h3
\t}}
}}

https://:{port} {{
\tbind {host}
\ttls {cert} {key}
\troot * {htdocs}
\tfile_server
}}
""")
    return path


def _command(p: Peer, binary: Path, host: str, port: int, cert: Path, key: Path,
             htdocs: Path, qlog_dir: Path | None, run_dir: Path) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "QUIC_GO_DISABLE_GSO": "true", "HOME": str(run_dir),
           "XDG_DATA_HOME": str(run_dir / "data"), "XDG_CONFIG_HOME": str(run_dir / "config")}
    if p.name == "caddy":
        caddyfile = _caddyfile(run_dir, host, port, cert, key, htdocs)
        return [str(binary), "run", "--config", str(caddyfile), "--adapter", "caddyfile"], env
    if p.name == "ngtcp2":
        return [str(binary), f"--htdocs={htdocs}", f"--qlog-dir={qlog_dir}", "--max-gso-dgrams=1",
                "--quiet", host, str(port), str(key), str(cert)], env
    if p.kind == "apt":
        raise QuicackError(f"no command line for peer {p.name!r}")
    # the servers of tests/peers/: Go flags (-addr) or long options (--addr); qlog into $QLOGDIR
    # (quinn: one file named on the command line)
    dash = "-" if p.kind == "go" else "--"
    cmd = [str(binary), f"{dash}addr", _join(host, port), f"{dash}cert", str(cert), f"{dash}key", str(key),
           f"{dash}www", str(htdocs)]
    if p.name == "quinn":
        cmd += ["--qlog", str(qlog_dir / "quinn-server.sqlog")]
    elif qlog_dir is not None:
        env["QLOGDIR"] = str(qlog_dir)
    return cmd, env


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop(run: RunningPeer, timeout_s: float = 5.0) -> int | None:
    """Stop the peer with its flushing signal; kill it if it has not exited after ``timeout_s``.
    Returns its exit status."""
    proc = run.process
    if proc.poll() is None:
        proc.send_signal(peer(run.name).stop_signal)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@contextmanager
def start(name: str, workdir: str | Path | None = None, host: str = "127.0.0.1",
          port: int | None = None, startup_timeout_s: float = 20.0,
          progress: Progress | None = None, env: dict[str, str] | None = None,
          args: tuple[str, ...] = ()) -> Iterator[RunningPeer]:
    """Prepare (install/build), then run peer ``name`` on ``host``:``port`` until the block ends.

    ``workdir`` (default: a new temporary folder, kept afterwards) receives the certificate, the
    served files (``htdocs/``), the server's own qlog (``qlog/``) and its output (``server.log``).
    ``env`` adds to or overrides the peer's environment (e.g. ``QUIC_GO_DISABLE_GSO=false`` to
    see GSO at work); ``args`` adds to its command line (e.g. ``("-curves", "P384")`` for the
    quic-go peer).  Raises QuicackError naming the log when the peer exits or does not bind
    its port in time.
    """
    p = peer(name)
    binary = prepare(name, progress).binary
    run_dir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"quicack-peer-{name}-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    cert, key = make_certificate(run_dir / "tls", ("localhost", probe_domain(name), "127.0.0.1", "::1"))
    htdocs = _write_htdocs(run_dir / "htdocs", name)
    qlog_dir = run_dir / "qlog" if p.qlog else None
    if qlog_dir:
        qlog_dir.mkdir(exist_ok=True)
    port = port or free_port(host)
    cmd, peer_env = _command(p, binary, host, port, cert, key, htdocs, qlog_dir, run_dir)
    cmd += list(args)
    log = run_dir / "server.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, cwd=run_dir, env={**peer_env, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    run = RunningPeer(name, host, port, qlog_dir, process, run_dir, cert, key, log)
    try:
        deadline = time.monotonic() + startup_timeout_s
        while not udp_port_bound(port, process.pid):
            if process.poll() is not None:
                raise QuicackError(f"{name} exited with status {process.returncode} before "
                                   f"listening on UDP {port}:\n{_tail(log)}", str(log))
            if time.monotonic() > deadline:
                raise QuicackError(f"{name} did not listen on UDP {port} within "
                                   f"{startup_timeout_s:.0f} s:\n{_tail(log)}", str(log))
            time.sleep(0.05)
        yield run
    finally:
        stop(run)


# --- scanning a peer -------------------------------------------------------------------------

@dataclass
class PeerScan:
    """What :func:`scan` did for one peer: the scan run, the capture and the ingested views."""

    peer: str
    run: str
    run_id: int
    outcomes: dict
    pcap: Path
    keylog: Path
    server_qlogs: list[Path]
    #: files of the scan or of the capture/server qlog that could not be ingested
    failures: list[str]


def scan(name: str, db: str | Path, workdir: str | Path | None = None, *, repetitions: int = 3,
         path: str = "/", spacing_s: float = 0.2, progress: Progress | None = None,
         env: dict[str, str] | None = None) -> PeerScan:
    """Start peer ``name``, scan it like ``quicack scan`` (``repetitions`` probes of
    ``<name>.localhost`` resolved to the peer, GET ``path``, dumpcap capturing), stop it (its qlog
    is flushed), then ingest into ``db`` the capture with the scan's key log and the peer's own
    qlog: every probe's three views — scanner client qlog, capture, server qlog — in one store
    (:mod:`quicack.report.peers` pairs them).  The run is named ``peer-<name>-<UTC time>``; its files
    go to ``workdir/<run>/``: ``peer/`` (the peer's certificate, files, qlog and log), ``scan/``
    (the scanner's qlog and key log) and ``scan.pcapng``."""
    from quicack.store import ingest
    from quicack.scan import scanner
    from quicack.scan.options import ScanOptions

    progress = progress or (lambda message: None)
    p = peer(name)
    base = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=f"quicack-peerscan-{name}-"))
    base.mkdir(parents=True, exist_ok=True)
    domain = probe_domain(p.name)
    list_path = base / f"{p.name}.txt"
    list_path.write_text(domain + "\n")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    run_name = f"peer-{p.name}-{stamp}"
    pcap = base / run_name / "scan.pcapng"
    pcap.parent.mkdir(parents=True, exist_ok=True)
    with start(p.name, base / run_name / "peer", progress=progress, env=env) as running:
        progress(f"{p.name} listening on UDP {running.port}; scanning {domain} × {repetitions}")
        opts = ScanOptions(list_path=str(list_path), db=str(db), run=run_name,
                           out_dir=str(base / run_name / "scan"), repetitions=repetitions,
                           spacing_s=spacing_s, path=path, alpn=p.alpn,
                           resolve={domain: (running.host, running.port)},
                           allow_private=True, pcap=str(pcap))
        summary = scanner.scan(opts)
    server_qlogs = running.qlog_files()  # after stop: flushed
    keylog = Path(summary.out_dir) / "sslkeylog.txt"
    progress(f"ingesting the capture and {len(server_qlogs)} server qlog file(s)")
    # (the peer's port decoded as QUIC: tshark's heuristics lose to a dissector registered for a
    # random client or server port now and then, and the capture then shows no QUIC at all)
    done = ingest.analyze([pcap, *server_qlogs], db=db, keylog=keylog, quic_ports=(running.port,))
    failures = [f"{f.path}: {f.error}" for f in done.files if f.status == "refused"]
    return PeerScan(p.name, summary.run, summary.run_id, summary.outcomes, pcap, keylog, server_qlogs,
                    [*summary.ingest_failures, *failures])


def workdir_for(db: str | Path) -> Path:
    """Where peer scans keep their files: DB-scans/peers next to the store (like scan runs)."""
    return Path(db).resolve().parent / f"{Path(db).stem}-scans" / "peers"
