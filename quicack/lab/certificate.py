"""Self-signed certificates for the local servers (quicack serve, the peers, benchmark and test
generators): ECDSA P-256, cheap to sign with, like most CDNs use.

Theory of operation: :func:`self_signed` makes the certificate and key in memory, for names that
may be DNS names or IP addresses (subject alternative names); :func:`write_pem` stores them as
``cert.pem`` and ``key.pem`` (PKCS#8, mode 600) for servers that read files.  :func:`chain` makes a
chain of N certificates — a root, N − 2 intermediate CAs each signed by the one above, and the
leaf — for servers whose first flight must carry more certificate bytes: the testbed's
anti-amplification scenario (RFC 9000 §8.1: "Prior to validating the client address, servers
MUST NOT send more than three times as many bytes as the number of bytes they have received").
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common_name: str, organization: str | None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _alt_names(names: tuple[str, ...]) -> x509.SubjectAlternativeName:
    alt_names: list[x509.GeneralName] = []
    for n in names:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt_names.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(alt_names)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey,
             days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days)))


def self_signed(names: tuple[str, ...] = ("localhost",), *, common_name: str | None = None,
                organization: str | None = None, days: int = 30) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(common_name or names[0], organization)
    cert = (_builder(subject, subject, key, days)
            .add_extension(_alt_names(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def chain(length: int, names: tuple[str, ...] = ("localhost",), *, common_name: str | None = None,
          organization: str | None = None,
          days: int = 30) -> tuple[list[x509.Certificate], ec.EllipticCurvePrivateKey]:
    """``length`` certificates in the order a TLS 1.3 Certificate message lists them — the leaf
    (for ``names``) first, then each issuer, the self-signed root last (RFC 8446 §4.4.2: "The
    sender's certificate MUST come in the first CertificateEntry in the list.  Each following
    certificate SHOULD directly certify the one immediately preceding it") — and the leaf's key.
    A chain of 1 is :func:`self_signed`.  The root is sent too (a server would normally leave it
    out): here the chain exists to make the first flight longer."""
    if length < 1:
        raise ValueError("a certificate chain holds at least one certificate")
    if length == 1:
        cert, key = self_signed(names, common_name=common_name, organization=organization, days=days)
        return [cert], key
    issuer_key = ec.generate_private_key(ec.SECP256R1())
    issuer = _name("quicack test root CA", organization)
    cas = [_builder(issuer, issuer, issuer_key, days)
           .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
           .sign(issuer_key, hashes.SHA256())]
    for level in range(1, length - 1):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(f"quicack test intermediate CA {level}", organization)
        cas.append(_builder(subject, issuer, key, days)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(issuer_key, hashes.SHA256()))
        issuer, issuer_key = subject, key
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (_builder(_name(common_name or names[0], organization), issuer, key, days)
            .add_extension(_alt_names(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(issuer_key, hashes.SHA256()))
    return [leaf, *reversed(cas)], key


def write_pem(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey, folder: Path) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_path.chmod(0o600)
    return cert_path, key_path
