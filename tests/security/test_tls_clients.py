"""Real clients over SSL and SASL against one `kafka-rpc serve`: kafka-python and
confluent-kafka with and without a client certificate, SASL PLAIN and SCRAM-SHA-256/512 over
SASL_PLAINTEXT and SASL_SSL; a plaintext client on a TLS port, untrusted and expired
certificates and bad credentials close only their own connection."""

from __future__ import annotations

import socket
import ssl
import struct

import pytest

from kafka_rpc.protocol import codec, frames
from tests.waiting import wait_until

pytestmark = [pytest.mark.interop, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _confluent_topics(conf: dict) -> object:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"socket.timeout.ms": 5000, **conf})
    return admin.list_topics(timeout=10)


def _kafka_python_cluster(**conf) -> dict:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(request_timeout_ms=10000, **conf)
    try:
        return admin.describe_cluster()
    finally:
        admin.close()


def _api_versions_frame() -> bytes:
    body = codec.encode(codec.message_class("ApiVersionsRequest")(), 0)
    return frames.frame(frames.request_header_bytes(18, 0, 7, "raw") + body)


def _closed(sock: socket.socket) -> bool:
    """True when the peer closed (EOF or reset) within the timeout."""
    sock.settimeout(10)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


# ------------------------------------------------------------------------------------ TLS
def test_confluent_ssl_without_client_certificate(secure_server, pki):
    conf = {"bootstrap.servers": secure_server.bootstrap("SSL"), "security.protocol": "SSL"}
    md = _confluent_topics({**conf, "ssl.ca.location": pki.truststore})
    assert md.brokers[1].port == secure_server.ports["SSL"]


def test_confluent_ssl_with_client_certificate_on_mtls(secure_server, pki):
    md = _confluent_topics({
        "bootstrap.servers": secure_server.bootstrap("MTLS"), "security.protocol": "SSL",
        "ssl.ca.location": pki.truststore, "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
    })  # fmt: skip
    assert md.brokers[1].port == secure_server.ports["MTLS"]


def test_kafka_python_ssl_with_and_without_certificate(secure_server, pki):
    desc = _kafka_python_cluster(bootstrap_servers=secure_server.bootstrap("SSL"),
                                 security_protocol="SSL", ssl_cafile=pki.truststore)  # fmt: skip
    assert [b["port"] for b in desc["brokers"]] == [secure_server.ports["SSL"]]
    desc = _kafka_python_cluster(
        bootstrap_servers=secure_server.bootstrap("MTLS"), security_protocol="SSL",
        ssl_cafile=pki.truststore, ssl_certfile=str(pki.client_cert),
        ssl_keyfile=str(pki.client_key),
    )  # fmt: skip
    assert [b["port"] for b in desc["brokers"]] == [secure_server.ports["MTLS"]]


def _tls_socket(port: int, pki, keystore=None) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=pki.truststore)
    if keystore is not None:
        ctx.load_cert_chain(str(keystore))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def _served(port: int, pki, keystore=None) -> bool:
    with _tls_socket(port, pki, keystore) as s:
        s.sendall(_api_versions_frame())
        n = struct.unpack(">i", s.recv(4))[0]
        return n > 0


@pytest.mark.parametrize("which", ["plaintext", "untrusted", "expired", "no certificate"])
def test_bad_tls_peers_are_closed_and_logged_once(secure_server, pki, which):
    port = secure_server.ports["MTLS"]
    before = len(secure_server.errors)
    if which == "plaintext":
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(_api_versions_frame())
        local = sock.getsockname()
    else:
        keystore = {"untrusted": pki.untrusted, "expired": pki.expired}.get(which)
        try:
            sock = _tls_socket(port, pki, keystore)
            local = sock.getsockname()
            sock.sendall(_api_versions_frame())
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            sock = None  # TLS 1.2 fails in the client's handshake already
    try:
        if sock is not None:
            assert _closed(sock)
    finally:
        if sock is not None:
            sock.close()
    # the server keeps serving others meanwhile
    assert _served(port, pki, pki.client)
    assert _served(secure_server.ports["SSL"], pki)
    if sock is not None:
        needle = f"closing ('127.0.0.1', {local[1]}): TLS handshake failed"
        hits = wait_until(lambda: [x for x in secure_server.errors[before:] if needle in x],
                          "the handshake failure logged", timeout=5, interval=0.05)  # fmt: skip
        assert len(hits) == 1, secure_server.errors[before:]
