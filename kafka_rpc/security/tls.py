"""TLS contexts from Kafka's ``ssl.*`` keys (PEM stores only), for listeners and for this
node's outbound connections.

Kafka's ``DefaultSslEngineFactory`` with ``ssl.keystore.type=PEM``: the keystore file holds the
private key (PKCS#8, encrypted with ``ssl.key.password`` when set) and the certificate chain; the
truststore file the trusted CA certificates. ``ssl.client.auth`` none / requested / required
maps to ``CERT_NONE`` / ``CERT_OPTIONAL`` / ``CERT_REQUIRED``; ``ssl.enabled.protocols``
(TLSv1.2, TLSv1.3) bounds the versions; ``ssl.cipher.suites`` restricts TLS 1.2 suites (IANA
names as Kafka takes them, or OpenSSL names; TLS 1.3 suites stay OpenSSL's, Python's ``ssl`` has
no setter for them); ``ssl.endpoint.identification.algorithm=https`` makes clients check the
server's host name. Bad files or values raise :class:`~kafka_rpc.config.ConfigError`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from kafka_rpc.config import Config, ConfigError

__all__ = ["SslSettings", "client_context", "server_context", "ssl_settings"]

_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class SslSettings:
    """One listener's TLS settings (Kafka's keys, after ``listener.name.<name>.`` overrides)."""

    listener: str
    keystore_location: str
    key_password: str
    truststore_location: str
    client_auth: str
    enabled_protocols: tuple[str, ...]
    cipher_suites: tuple[str, ...]
    endpoint_identification: str


def ssl_settings(config: Config, listener: str) -> SslSettings:
    """The TLS settings of ``listener`` from ``config``."""

    def v(key: str) -> str:
        return config.listener_value(listener, key)

    def items(key: str) -> tuple[str, ...]:
        return tuple(x.strip() for x in v(key).split(",") if x.strip())

    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        if v(key).upper() != "PEM":
            raise ConfigError(f"{key} of listener {listener}: only PEM is supported")
    auth = v("ssl.client.auth").lower()
    if auth not in _CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth of listener {listener}: {auth!r}")
    protocols = items("ssl.enabled.protocols")
    if not protocols or any(p not in _VERSIONS for p in protocols):
        raise ConfigError(f"ssl.enabled.protocols of listener {listener}: {protocols}")
    return SslSettings(
        listener=listener,
        keystore_location=v("ssl.keystore.location"),
        key_password=v("ssl.key.password"),
        truststore_location=v("ssl.truststore.location"),
        client_auth=auth,
        enabled_protocols=protocols,
        cipher_suites=items("ssl.cipher.suites"),
        endpoint_identification=v("ssl.endpoint.identification.algorithm").lower(),
    )


def iana_to_openssl(name: str) -> str:
    """A TLS 1.2 cipher suite's IANA name (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``, as Kafka
    takes it) as OpenSSL names it (``ECDHE-RSA-AES128-GCM-SHA256``); other names unchanged."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[4:].partition("_WITH_")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = [] if kx == "RSA" else kx.split("_")
    return "-".join([*parts, *cipher.split("_")])


def _common(ctx: ssl.SSLContext, s: SslSettings) -> ssl.SSLContext:
    ctx.minimum_version = min((_VERSIONS[p] for p in s.enabled_protocols), key=lambda x: x.value)
    ctx.maximum_version = max((_VERSIONS[p] for p in s.enabled_protocols), key=lambda x: x.value)
    if s.cipher_suites:
        tls12 = [iana_to_openssl(c) for c in s.cipher_suites if not _is_tls13_suite(c)]
        if tls12:
            try:
                ctx.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise ConfigError(
                    f"ssl.cipher.suites of listener {s.listener}: none of {s.cipher_suites} "
                    "is available"
                ) from None
    try:
        if s.keystore_location:
            ctx.load_cert_chain(s.keystore_location, password=s.key_password or None)
        if s.truststore_location:
            ctx.load_verify_locations(cafile=s.truststore_location)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"TLS stores of listener {s.listener}: {e}") from None
    return ctx


def _is_tls13_suite(name: str) -> bool:
    return name in ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                    "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_CCM_SHA256",
                    "TLS_AES_128_CCM_8_SHA256")  # fmt: skip


def server_context(s: SslSettings) -> ssl.SSLContext:
    """The listener side: needs ``ssl.keystore.location``; verifies client certificates against
    the truststore as ``ssl.client.auth`` says."""
    if not s.keystore_location:
        raise ConfigError(f"ssl.keystore.location: required by TLS listener {s.listener}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.verify_mode = _CLIENT_AUTH[s.client_auth]
    if s.client_auth != "none" and not s.truststore_location:
        raise ConfigError(f"ssl.truststore.location: needed by ssl.client.auth on {s.listener}")
    return _common(ctx, s)


def client_context(s: SslSettings) -> ssl.SSLContext:
    """This node as a client of a TLS listener: verifies the server against the truststore
    (the system's CAs without one), presents the keystore's certificate when one is set."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = s.endpoint_identification == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    if not s.truststore_location:
        ctx.load_default_certs()
    return _common(ctx, s)
