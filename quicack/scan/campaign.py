"""Scan campaigns: reviewed TOML files in ``scanners/`` that hold a scan's list and options.

Theory of operation: a campaign names its target list (``list``, relative to the TOML file) and
any option of ``quicack scan`` under the option's Python name (``repetitions``, ``spacing_s``,
``concurrency``, ``rate``, ``per_address``, ``path``, ``alpn``, ``schedule``, ``split_clienthello``,
``allow_private``, ``hosts_file``, ``exclude_file``, …), with ``[resolve]`` mapping names to
``IP[:PORT]`` and ``[timeouts]`` holding ``first_response_s``, ``handshake_s``, ``response_s``.
Options given on the command line win over the campaign's.
"""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path

from quicack.model import QuicackError
from quicack.scan import targets
from quicack.scan.options import ScanOptions, parse_shard

PATH_KEYS = ("list", "hosts_file", "exclude_file", "out_dir", "pcap", "db")
TIMEOUT_KEYS = {"first_response_s": "first_response_timeout_s", "handshake_s": "handshake_timeout_s",
                "response_s": "response_timeout_s"}


def read_toml(path: str | Path) -> dict:
    """A TOML file as a dict; QuicackError naming the file when it cannot be read or parsed."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise QuicackError(f"cannot read: {e.strerror}", str(path)) from None
    except tomllib.TOMLDecodeError as e:
        raise QuicackError(f"not TOML: {e}", str(path)) from None


def scanners_dir() -> Path:
    """The reviewed campaign files: shipped inside the package (wheel) or ``scanners/``."""
    from importlib import resources

    packaged = resources.files("quicack").joinpath("scanners")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "scanners"


def load(path: str | Path) -> dict:
    """The campaign as ``ScanOptions`` keyword arguments (``list`` becomes ``list_path``)."""
    path = Path(path)
    doc = read_toml(path)
    known = {f.name for f in fields(ScanOptions)}
    out: dict = {}
    for key, value in doc.items():
        if key in PATH_KEYS:
            value = str((path.parent / value).resolve()) if not Path(value).is_absolute() else value
        if key == "list":
            out["list_path"] = value
        elif key == "resolve":
            out["resolve"] = {n.lower(): targets.parse_address(str(a)) for n, a in value.items()}
        elif key == "timeouts":
            for name, seconds in value.items():
                if name not in TIMEOUT_KEYS:
                    raise QuicackError(f"unknown timeout {name!r}; known: {', '.join(TIMEOUT_KEYS)}",
                                       str(path))
                out[TIMEOUT_KEYS[name]] = float(seconds)
        elif key == "shard":
            out["shard"] = parse_shard(value)
        elif key in known and key != "list_path":
            out[key] = value
        else:
            raise QuicackError(f"unknown campaign key {key!r}", str(path))
    if "list_path" not in out:
        raise QuicackError("a campaign needs 'list' (the target list, relative to the file)", str(path))
    return out
