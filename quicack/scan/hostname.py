"""Host names of a target list, checked before they reach the resolver or TLS.

Theory of operation: a list line names a host as a user or a ranking wrote it — in Unicode, in
upper case, with a trailing dot — or is junk.  :func:`check` returns the name as DNS and TLS
carry it (an A-label: ASCII, lower case, no trailing dot) or the reason it is not one; the scan
then records the target with outcome ``invalid_name`` and goes on (a failed probe is data).

RFC 1035 §2.3.4: "labels 63 octets or less", "names 255 octets or less" — 253 characters in
the dotted text form, which drops the length octets and the root label.  An empty label (``a..b``)
is no name.  Labels written in ASCII follow the LDH rule of RFC 1123 §2.1 (letters, digits,
hyphen, not at either end), with the underscore that DNS names of services carry
(``_dmarc``) allowed; an ``xn--`` label must decode as Punycode.  A label with other characters
is converted by IDNA 2008 with UTS #46 mapping (the ``idna`` package: browsers' behaviour for
``Bücher.de``), which refuses what is not a valid internationalized label.  An IP address literal
is its own name.  Pure: no lookups.
"""

from __future__ import annotations

import ipaddress
import re

import idna

MAX_NAME = 253
MAX_LABEL = 63
_LDH = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?\Z")


def check(text: str) -> tuple[str, None] | tuple[None, str]:
    """(A-label form, None) for a usable host name or address, else (None, why not)."""
    name = text.strip()
    if not name:
        return None, "empty name"
    if any(c.isspace() for c in name):
        return None, f"{name!r} contains white space"
    try:
        return str(ipaddress.ip_address(name.strip("[]"))), None
    except ValueError:
        pass
    if "\ufffd" in name:
        return None, f"{name!r} holds bytes that are not UTF-8"
    name = name.removesuffix(".")
    ascii_name = name.lower() if name.isascii() else _idna(name)
    if isinstance(ascii_name, tuple):
        return ascii_name
    why = _labels(ascii_name)
    return (None, f"{text.strip()!r}: {why}") if why else (ascii_name, None)


def _idna(name: str) -> str | tuple[None, str]:
    try:
        return idna.encode(name, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError) as e:
        return None, f"{name!r} is not a valid internationalized name ({e})"


def _labels(name: str) -> str | None:
    """Why the A-label form is not a DNS host name, or None."""
    if len(name) > MAX_NAME:
        return f"name of {len(name)} characters (at most {MAX_NAME})"
    for label in name.split("."):
        if not label:
            return "empty label"
        if len(label) > MAX_LABEL:
            return f"label of {len(label)} characters (at most {MAX_LABEL})"
        if not _LDH.match(label):
            return f"label {label!r} is not letters, digits and inner hyphens"
        if label.startswith("xn--"):
            try:
                idna.decode(label)
            except (idna.IDNAError, UnicodeError):
                return f"label {label!r} is not valid Punycode"
    return None
