"""Test-time certificates (never checked in): a CA, certificates it signs, PEM keystores in
Kafka's ``ssl.keystore.type=PEM`` layout (PKCS#8 key, then the certificate chain)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str, ou: str | None = None, o: str | None = None) -> x509.Name:
    attrs = []
    if o:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o))
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


@dataclass
class Ca:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    path: Path  # the truststore (PEM)

    def issue(
        self,
        directory: Path,
        cn: str,
        ou: str | None = None,
        o: str | None = None,
        password: str | None = None,
        expired: bool = False,
    ) -> Path:
        """A keystore PEM for ``cn`` signed by this CA (SAN localhost and 127.0.0.1)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = (
            (now - datetime.timedelta(days=10), now - datetime.timedelta(days=1))
            if expired
            else (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2))
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, ou, o))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        enc = (
            serialization.BestAvailableEncryption(password.encode())
            if password
            else serialization.NoEncryption()
        )
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)
        pem += cert.public_bytes(serialization.Encoding.PEM)
        path = directory / f"{cn}{'-expired' if expired else ''}.keystore.pem"
        path.write_bytes(pem)
        return path


def make_ca(directory: Path, name: str = "test-ca") -> Ca:
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = _name(name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.truststore.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Ca(key, cert, path)


def split_keystore(keystore: Path) -> tuple[Path, Path]:
    """(key file, certificate file) of a keystore, for clients that want them apart."""
    text = keystore.read_text()
    i = text.index("-----BEGIN CERTIFICATE-----")
    key, cert = keystore.with_suffix(".key"), keystore.with_suffix(".crt")
    key.write_text(text[:i])
    cert.write_text(text[i:])
    return key, cert
