"""Which provider (CDN, hoster) answered a probe: from its address, `server` header and certificate.

Theory of operation: :data:`RULES` is a small table, first match wins, over three kinds of evidence
— the AS name of the address (offline, from the GeoLite2 ASN data that the ``geoip2fast`` package
ships; see :class:`AsNames`), the HTTP ``server`` header, and the certificate issuer.  The address
comes first because it does not depend on what the server chooses to say.  Loopback and private
addresses are ``local``.  :func:`attribute` is pure; the AS lookup is passed in.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

#: (provider, evidence, regular expression), first match wins; evidence is 'as', 'server' or 'issuer'.
RULES: list[tuple[str, str, str]] = [
    ("Cloudflare", "as", r"^CLOUDFLARE"),
    ("Google", "as", r"^GOOGLE"),
    ("Akamai", "as", r"^AKAMAI"),
    ("Amazon", "as", r"^AMAZON"),
    ("Fastly", "as", r"^FASTLY"),
    ("Meta", "as", r"^FACEBOOK"),
    ("Microsoft", "as", r"^MICROSOFT"),
    ("Cloudflare", "server", r"^cloudflare"),
    ("Google", "server", r"^(gws|gfe|esf|sffe|ghs|gse|google)"),
    ("Akamai", "server", r"^akamai"),
    ("Amazon", "server", r"^(cloudfront|amazons3|awselb|amazon)"),
    ("Fastly", "server", r"fastly"),
    ("Meta", "server", r"^proxygen"),
    ("Microsoft", "server", r"^(microsoft|ecacc|ecs)"),
    ("LiteSpeed", "server", r"^litespeed"),
    ("Caddy", "server", r"^caddy"),
    ("Let's Encrypt customer", "issuer", r"let's encrypt"),
]

#: RFC 1918 and RFC 4193 networks (a scan with --allow-private reaches them).
LOCAL_NETWORKS = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")]

_COMPILED = [(provider, evidence, re.compile(pattern, re.I)) for provider, evidence, pattern in RULES]


@dataclass(frozen=True)
class Attribution:
    provider: str
    #: 'as', 'server', 'issuer', 'address' (local) or 'none'
    evidence: str


def attribute(address: str | None, server_header: str | None, cert_issuer: str | None,
              as_name: Callable[[str], str | None] = lambda _address: None) -> Attribution:
    """The provider of one probe's server."""
    if address:
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            ip = None
        if ip is not None and (ip.is_loopback or ip.is_link_local or any(ip in n for n in LOCAL_NETWORKS)):
            return Attribution("local", "address")
    evidence = {"as": as_name(address) if address else None, "server": server_header, "issuer": cert_issuer}
    for provider, kind, pattern in _COMPILED:
        value = evidence[kind]
        if value and pattern.search(value):
            return Attribution(provider, kind)
    return Attribution("other", "none")


class AsNames:
    """Offline address → AS name, from the GeoLite2 ASN data shipped with ``geoip2fast``."""

    def __init__(self) -> None:
        from geoip2fast import GeoIP2Fast
        self._v4 = GeoIP2Fast(geoip2fast_data_file="geoip2fast-asn.dat.gz")
        self._v6 = None
        self._cache: dict[str, str | None] = {}

    def __call__(self, address: str) -> str | None:
        if address in self._cache:
            return self._cache[address]
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return None
        if ip.version == 6:
            if self._v6 is None:
                from geoip2fast import GeoIP2Fast
                self._v6 = GeoIP2Fast(geoip2fast_data_file="geoip2fast-asn-ipv6.dat.gz")
            db = self._v6
        else:
            db = self._v4
        result = db.lookup(address)
        name = getattr(result, "asn_name", "") or None
        cidr = getattr(result, "asn_cidr", "") or getattr(result, "cidr", "")
        # geoip2fast answers with the nearest block; keep the name only if the address is inside it.
        try:
            if not cidr or ip not in ipaddress.ip_network(cidr, strict=False):
                name = None
        except ValueError:
            name = None
        self._cache[address] = name
        return name
