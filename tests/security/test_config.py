"""Kafka's security keys: the protocol map, listener overrides, TLS contexts from
``ssl.*`` (versions, cipher suites, encrypted keys), JAAS options, --add-scram syntax, and a
bad TLS store failing `kafka-rpc serve` with exit status 2."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import threading

import pytest

from kafka_rpc.config import ConfigError, load_config
from kafka_rpc.security.principal import SslPrincipalMapper
from kafka_rpc.security.sasl import parse_add_scram, parse_jaas
from kafka_rpc.security.tls import client_context, iana_to_openssl, server_context, ssl_settings
from tests.security.certs import make_ca


def test_protocol_map_and_overrides():
    cfg = load_config(overrides={
        "listeners": "SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "listener.security.protocol.map": "SSL:SSL,INTERNAL:SASL_PLAINTEXT,CONTROLLER:SSL",
        "inter.broker.listener.name": "internal",
        "ssl.client.auth": "requested",
        "listener.name.controller.ssl.client.auth": "required",
        "listener.name.internal.scram-sha-256.sasl.jaas.config": 'x required username="u";',
    })  # fmt: skip
    assert cfg.security_protocol("INTERNAL") == "SASL_PLAINTEXT"
    assert cfg.inter_broker_listener_name == "INTERNAL"
    assert cfg.listener_value("CONTROLLER", "ssl.client.auth") == "required"
    assert cfg.listener_value("SSL", "ssl.client.auth") == "requested"
    # without an explicit map, a controller listener not named in Kafka's default is PLAINTEXT
    assert load_config().security_protocol("CONTROLLER") == "PLAINTEXT"


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"}, "no security protocol"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS,CONTROLLER:SSL"}, "malformed"),
    ({"listener.name.plaintext.ssl.nope": "1"}, "unknown configuration key"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"ssl.keystore.type": "JKS"}, "only PEM"),
    ({"ssl.enabled.protocols": "TLSv1"}, "ssl.enabled.protocols"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "not supported"),
    ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}, "not supported"),
    ({"inter.broker.listener.name": "CONTROLLER"}, "not a broker listener"),
])  # fmt: skip
def test_bad_security_keys(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(overrides=overrides)


def test_tls12_only_with_one_cipher_suite(tmp_path):
    ca = make_ca(tmp_path)
    ks = ca.issue(tmp_path, "localhost", password="pw")
    cfg = load_config(overrides={
        "listeners": "SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "ssl.keystore.location": str(ks), "ssl.key.password": "pw",
        "ssl.truststore.location": str(ca.path),
        "ssl.enabled.protocols": "TLSv1.2",
        "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    })  # fmt: skip
    s = ssl_settings(cfg, "SSL")
    server_ctx = server_context(s)
    assert [c["name"] for c in server_ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES256-GCM-SHA384"
    ]
    with socket.create_server(("127.0.0.1", 0)) as lsock:
        port = lsock.getsockname()[1]
        seen = {}

        def serve():
            conn, _ = lsock.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    seen["version"], seen["cipher"] = tls.version(), tls.cipher()[0]
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError) as e:
                seen["error"] = e

        t = threading.Thread(target=serve)
        t.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_context(s).wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            assert tls.recv(2) == b"ok"
        t.join(10)
    assert seen == {"version": "TLSv1.2", "cipher": "ECDHE-ECDSA-AES256-GCM-SHA384"}
    # a TLS 1.3-only client cannot connect to it
    with socket.create_server(("127.0.0.1", 0)) as lsock:
        port = lsock.getsockname()[1]
        seen = {}
        t = threading.Thread(target=serve)
        t.start()
        only13 = ssl.create_default_context(cafile=str(ca.path))
        only13.minimum_version = ssl.TLSVersion.TLSv1_3
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            pytest.raises(ssl.SSLError),
        ):
            only13.wrap_socket(raw, server_hostname="localhost")
        t.join(10)
    assert "error" in seen


def test_wrong_key_password_is_a_config_error(tmp_path):
    ca = make_ca(tmp_path)
    ks = ca.issue(tmp_path, "localhost", password="pw")
    cfg = load_config(overrides={
        "listeners": "SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "ssl.keystore.location": str(ks), "ssl.key.password": "wrong",
    })  # fmt: skip
    with pytest.raises(ConfigError, match="TLS stores of listener SSL"):
        server_context(ssl_settings(cfg, "SSL"))
    r = subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "serve", "--override",
         "listeners=SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "--override",
         f"log.dirs={tmp_path / 'data'}", "--override", f"ssl.keystore.location={ks}",
         "--override", "ssl.key.password=wrong"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert r.returncode == 2 and "TLS stores of listener SSL" in r.stderr, r.stderr


def test_names_and_syntaxes():
    assert iana_to_openssl("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert iana_to_openssl("TLS_RSA_WITH_AES_256_GCM_SHA384") == "AES256-GCM-SHA384"
    assert iana_to_openssl("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256") == (
        "ECDHE-RSA-CHACHA20-POLY1305"
    )
    jaas = parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'username="admin" password="a b\\"c" user_alice="x";')  # fmt: skip
    assert jaas == {"username": "admin", "password": 'a b"c', "user_alice": "x"}
    assert parse_add_scram("SCRAM-SHA-256=[name=alice,password=alice-secret]")[:4] == (
        "SCRAM-SHA-256",
        "alice",
        "alice-secret",
        4096,
    )
    with pytest.raises(ConfigError):
        parse_add_scram("SCRAM-SHA-1=[name=a,password=b]")
    mapper = SslPrincipalMapper("RULE:^CN=([^,]+),.*$/$1/L,DEFAULT")
    assert mapper.name("CN=Broker1,OU=k") == "broker1"
    assert mapper.name("O=acme") == "O=acme"
    with pytest.raises(ValueError, match="no ssl.principal.mapping.rules"):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")
