"""Provider attribution (quicack/report/provider.py): the rules table and the offline AS data."""

from __future__ import annotations

from quicack.report.provider import AsNames, Attribution, attribute


def test_local_addresses_are_local():
    assert attribute("127.0.0.2", "cloudflare", None) == Attribution("local", "address")
    assert attribute("::1", None, None).provider == "local"


def test_server_header_and_issuer_when_the_address_says_nothing():
    assert attribute("203.0.113.9", "cloudflare", None) == Attribution("Cloudflare", "server")
    assert attribute("203.0.113.9", "gws", None) == Attribution("Google", "server")
    assert attribute(None, "AkamaiGHost", None) == Attribution("Akamai", "server")
    assert attribute(None, None, "C=US, O=Let's Encrypt, CN=R10").evidence == "issuer"
    assert attribute(None, "<script>", None) == Attribution("other", "none")


def test_the_address_wins_over_what_the_server_says():
    names = {"198.51.100.1": "FASTLY"}
    assert attribute("198.51.100.1", "cloudflare", None, names.get) == Attribution("Fastly", "as")


def test_offline_as_names_from_geolite2():
    # Well-known anycast addresses of the providers (GeoLite2 ASN data shipped with geoip2fast)
    lookup = AsNames()
    assert lookup("1.1.1.1") == "CLOUDFLARENET"
    assert lookup("8.8.8.8") == "GOOGLE"
    assert lookup("151.101.1.1") == "FASTLY"
    assert attribute("157.240.1.35", None, None, lookup) == Attribution("Meta", "as")
    assert lookup("not an address") is None
