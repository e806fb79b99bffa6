"""Kafka principals (``KafkaPrincipal``): ``User:<name>``.

``DefaultKafkaPrincipalBuilder``: ``User:ANONYMOUS`` on PLAINTEXT and on SSL without a client
certificate, ``User:<SASL authorization id>`` after SASL, and on SSL ``User:`` plus the
certificate subject mapped by ``ssl.principal.mapping.rules`` (``SslPrincipalMapper``; DEFAULT
keeps the subject as Java's ``X500Principal.getName()`` prints it: RFC 2253, most specific
attribute first, e.g. ``CN=broker1,OU=eng,O=acme``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["ANONYMOUS", "SslPrincipalMapper", "subject_name", "user"]

ANONYMOUS = "User:ANONYMOUS"


def user(name: str) -> str:
    """``User:<name>``."""
    return f"User:{name}"


def subject_name(der: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` (RFC 2253) prints
    it: RDNs most specific first, keywords CN, L, ST, O, OU, C, STREET, DC, UID, other attributes
    as dotted OIDs with a ``#``-hex value."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    cert = x509.load_der_x509_certificate(der)
    # RFC 2253 names only these keywords; RFC 4514 adds none we must drop except emailAddress
    overrides = {NameOID.EMAIL_ADDRESS: "1.2.840.113549.1.9.1"}
    return cert.subject.rfc4514_string(overrides)


_RULE_RE = re.compile(r"RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)")


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


class SslPrincipalMapper:
    """Kafka's ``SslPrincipalMapper``: ``ssl.principal.mapping.rules`` is a comma-separated list
    of ``DEFAULT`` and ``RULE:<java regex>/<replacement with $1..>/[L|U]``; the first rule whose
    pattern matches the whole subject gives the name; DEFAULT gives the subject unchanged; no
    match raises ``ValueError`` (Kafka: the connection fails authentication)."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        text = rules.strip() or "DEFAULT"
        pos = 0
        while pos < len(text):
            if text.startswith("DEFAULT", pos):
                self.rules.append(_Rule(None))
                pos += len("DEFAULT")
            else:
                m = _RULE_RE.match(text, pos)
                if m is None:
                    raise ValueError(f"ssl.principal.mapping.rules: invalid rule at {text[pos:]!r}")
                repl = re.sub(r"\$(\d)", r"\\\1", m.group(2).replace("\\/", "/"))
                pattern = re.compile(m.group(1).replace("\\/", "/"))
                self.rules.append(_Rule(pattern, repl, m.group(3)))
                pos = m.end()
            while pos < len(text) and text[pos] in ", \t\n":
                pos += 1

    def name(self, subject: str) -> str:
        for r in self.rules:
            if r.pattern is None:
                return subject
            m = r.pattern.fullmatch(subject)
            if m is not None:
                out = m.expand(r.replacement)
                return out.lower() if r.case == "L" else out.upper() if r.case == "U" else out
        raise ValueError(f"no ssl.principal.mapping.rules rule matches {subject!r}")
