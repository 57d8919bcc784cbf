"""Target lists, address overrides, exclusions, the address policy, shards and CID tags."""

from __future__ import annotations

import zipfile

import pytest

from quicack.core import cidtag
from quicack.scan import targets
from quicack.model import QuicackError
from quicack.scan.options import in_shard, parse_shard


def test_a_tranco_csv_and_its_zip_give_ranks_and_positions(tmp_path):
    csv = tmp_path / "top-1m.csv"
    csv.write_text("1,google.com\n2,Example.ORG.\n3,a.test\n")
    with zipfile.ZipFile(tmp_path / "top-1m.csv.zip", "w") as z:
        z.write(csv, "top-1m.csv")
    for path in (csv, tmp_path / "top-1m.csv.zip"):
        got = [(t.index, t.rank, t.domain, t.line) for t in targets.read_list(path)]
        assert got == [(0, 1, "google.com", 1), (1, 2, "example.org", 2), (2, 3, "a.test", 3)]


def test_a_plain_list_skips_comments_and_blank_lines(tmp_path):
    plain = tmp_path / "l.txt"
    plain.write_text("# names\n\na.test  # first\nb.test\n192.0.2.1\n")
    got = [(t.index, t.rank, t.domain, t.line) for t in targets.read_list(plain)]
    assert got == [(0, None, "a.test", 3), (1, None, "b.test", 4), (2, None, "192.0.2.1", 5)]


def test_a_bad_csv_line_is_named(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("1,a.test\nx,b.test\n")
    with pytest.raises(QuicackError) as e:
        list(targets.read_list(bad))
    assert str(e.value) == f"{bad} at line 2: expected 'rank,domain', got 'x,b.test'"


def test_resolve_options_and_hosts_files(tmp_path):
    assert targets.parse_resolve(["A.test=192.0.2.1", "b.test=[2001:db8::1]:8443", "c.test=192.0.2.3:4433"]) == {
        "a.test": ("192.0.2.1", 443), "b.test": ("2001:db8::1", 8443), "c.test": ("192.0.2.3", 4433)}
    with pytest.raises(QuicackError, match="--resolve expects NAME=IP"):
        targets.parse_resolve(["a.test"])
    hosts = tmp_path / "hosts"
    hosts.write_text("# comment\n192.0.2.7 x.test y.test\n\n2001:db8::2 z.test\n")
    assert targets.read_hosts(hosts) == {"x.test": ("192.0.2.7", 443), "y.test": ("192.0.2.7", 443),
                                         "z.test": ("2001:db8::2", 443)}
    hosts.write_text("not-an-ip x.test\n")
    with pytest.raises(QuicackError, match="hosts at line 1: not an address: 'not-an-ip'"):
        targets.read_hosts(hosts)


def test_private_loopback_and_reserved_addresses_are_special():
    for address in ("127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.0.1", "169.254.1.1", "::1",
                    "fe80::1", "fc00::1", "0.0.0.0", "240.0.0.1", "100.64.0.1", "::ffff:10.0.0.1"):
        assert targets.is_special(address), address
    for address in ("8.8.8.8", "1.1.1.1", "2606:4700::1111"):
        assert not targets.is_special(address), address


def test_exclusions_by_address_prefix_name_and_suffix(tmp_path):
    ex = tmp_path / "ex.txt"
    ex.write_text("203.0.113.0/24\n2001:db8::/32 # docs\nbad.test\n*.cdn.test\n")
    policy = targets.Policy(targets.Exclusions.read(ex), allow_private=False)
    assert policy.refuse_address("203.0.113.9") == ("excluded", f"address 203.0.113.9 excluded by {ex} line 1")
    assert policy.refuse_address("2001:db8::5")[0] == "excluded"
    assert policy.refuse_name("bad.test") == ("excluded", f"name excluded by {ex} line 3")
    assert policy.refuse_name("a.cdn.test") == ("excluded", f"name excluded by {ex} line 4")
    assert policy.refuse_name("cdn.test") is None and policy.refuse_address("8.8.8.8") is None
    assert policy.refuse_address("127.0.0.1")[0] == "private_address"
    assert targets.Policy(targets.Exclusions(), allow_private=True).refuse_address("127.0.0.1") is None


def test_shards_partition_the_list():
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "x", "1-2"):
        with pytest.raises(QuicackError, match="--shard expects K/N"):
            parse_shard(bad)
    owners = [[k for k in (1, 2, 3) if in_shard(i, (k, 3))] for i in range(10)]
    assert all(len(o) == 1 for o in owners)


def test_cid_tags_round_trip():
    tag = cidtag.run_tag("demo")
    cid, odcid = cidtag.pair(tag, 123456, 7)
    assert len(cid) == len(odcid) == 8 and cid[:7] == odcid[:7] and cid != odcid
    assert cidtag.decode(cid) == cidtag.decode(odcid.hex()) == (tag, 123456, 7)
    assert cidtag.decode(b"short") is None
    assert cidtag.run_tag("demo", "1/2") != cidtag.run_tag("demo", "2/2")
