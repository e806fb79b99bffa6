"""SASL PLAIN and SCRAM-SHA-256/512 over SASL_PLAINTEXT and SASL_SSL with confluent-kafka,
kafka-python and our own client, against one `kafka-rpc serve` whose SCRAM credentials were
made by `storage format --add-scram`."""

from __future__ import annotations

import asyncio
import json
import socket
import struct

import pytest

from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
from kafka_rpc.protocol import codec, frames
from kafka_rpc.security.client import ClientSecurity
from kafka_rpc.security.tls import client_context, ssl_settings
from tests.security.test_tls_clients import _closed
from tests.waiting import wait_until

pytestmark = [pytest.mark.interop, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

USERS = {
    "PLAIN": ("alice", "alice-secret"),
    "SCRAM-SHA-256": ("alice", "alice-secret"),
    "SCRAM-SHA-512": ("bob", "bob-secret"),
}
CASES = [(p, m) for p in ("SASL_PLAINTEXT", "SASL_SSL") for m in USERS]


@pytest.mark.parametrize(("protocol", "mechanism"), CASES)
def test_confluent_sasl(secure_server, pki, protocol, mechanism):
    from confluent_kafka.admin import AdminClient

    user, password = USERS[mechanism]
    conf = {
        "bootstrap.servers": secure_server.bootstrap(protocol), "security.protocol": protocol,
        "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
        "socket.timeout.ms": 5000,
    }  # fmt: skip
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = pki.truststore
    md = AdminClient(conf).list_topics(timeout=10)
    assert md.brokers[1].port == secure_server.ports[protocol]


@pytest.mark.parametrize(("protocol", "mechanism"), CASES)
def test_kafka_python_sasl(secure_server, pki, protocol, mechanism):
    from kafka.admin import KafkaAdminClient

    user, password = USERS[mechanism]
    extra = {"ssl_cafile": pki.truststore} if protocol == "SASL_SSL" else {}
    admin = KafkaAdminClient(
        bootstrap_servers=secure_server.bootstrap(protocol), security_protocol=protocol,
        sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password,
        request_timeout_ms=10000, **extra,
    )  # fmt: skip
    try:
        desc = admin.describe_cluster()
        assert [b["port"] for b in desc["brokers"]] == [secure_server.ports[protocol]]
    finally:
        admin.close()


def _security(secure_server, protocol, mechanism, user, password):
    ctx = None
    if protocol == "SASL_SSL":
        from kafka_rpc.config import load_config

        cfg = load_config(overrides=secure_server.overrides)
        ctx = client_context(ssl_settings(cfg, protocol))
    return ClientSecurity(ctx, mechanism, user, password)


@pytest.mark.parametrize(("protocol", "mechanism"), CASES)
async def test_our_client_sasl_and_bad_password(secure_server, protocol, mechanism):
    user, password = USERS[mechanism]
    good = _security(secure_server, protocol, mechanism, user, password)
    async with KafkaRpcClient(secure_server.bootstrap(protocol), security=good) as client:
        resp = await client.request(codec.message_class("DescribeClusterRequest")())
        assert resp.error_code == 0
    bad = _security(secure_server, protocol, mechanism, user, password + "x")
    client = KafkaRpcClient(secure_server.bootstrap(protocol), security=bad, connect_timeout=1)
    with pytest.raises(KafkaConnectionError, match="SASL_AUTHENTICATION_FAILED"):
        await client.request(codec.message_class("DescribeClusterRequest")())
    await client.close()


@pytest.mark.parametrize("start", range(3))
async def test_scram_login_at_the_first_accepted_connection(tmp_path, pki, start):
    """A node's broker listeners accept only once it caught up with the metadata log (as
    Kafka's broker opens its client listeners), so the credentials of `storage format
    --add-scram` are in its image at the first connection the port accepts: a SCRAM login
    then succeeds, on each of three fresh starts (a listener open before that answered
    "auth_fn exception: no-resources" in 2 of 6 starts)."""
    from tests.security.conftest import SecureServe
    from tests.waiting import until

    port = _free_port()
    listeners = f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:0"
    srv = SecureServe(tmp_path, pki, wait=False, listeners=listeners)
    try:

        def accepts() -> bool:
            assert srv.proc.poll() is None, (srv.lines, srv.errors)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
            return True

        await until(accepts, "the SASL_PLAINTEXT listener to accept", timeout=60, interval=0.01)
        user, password = USERS["SCRAM-SHA-512"]
        sec = ClientSecurity(None, "SCRAM-SHA-512", user, password)
        async with KafkaRpcClient(f"127.0.0.1:{port}", security=sec) as client:
            resp = await client.request(codec.message_class("DescribeClusterRequest")())
        assert resp.error_code == 0
    finally:
        srv.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_credentials_are_salted_in_the_bootstrap_checkpoint(secure_server):
    """`storage format --add-scram` puts UserScramCredentialRecords into bootstrap.checkpoint
    (as Kafka's Formatter), salted: no password in the file."""
    from pathlib import Path

    from kafka_rpc.storage.bootstrap import BOOTSTRAP_FILE, read_bootstrap

    data = Path(secure_server.overrides["log.dirs"])
    raw = (data / BOOTSTRAP_FILE).read_bytes()
    assert b"alice-secret" not in raw and b"bob-secret" not in raw
    creds = {(r.mechanism, r.name): r for r in read_bootstrap(data).records
             if type(r).__spec_name__ == "UserScramCredentialRecord"}  # fmt: skip
    assert creds[(2, "bob")].iterations == 8192  # SCRAM-SHA-512
    alice = creds[(1, "alice")]  # SCRAM-SHA-256
    assert alice.salt and alice.stored_key and alice.server_key and alice.iterations >= 4096


# ------------------------------------------------------------------------------ raw front door
def _req(name: str, version: int, corr: int, **fields) -> bytes:
    msg = codec.message_class(name)(**fields)
    key = type(msg).__api_key__
    return frames.frame(
        frames.request_header_bytes(key, version, corr, "raw") + codec.encode(msg, version)
    )


def _read(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        assert chunk, "closed"
        head += chunk
    n = struct.unpack(">i", head)[0]
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        assert chunk, "closed"
        body += chunk
    return body


def _decode(name: str, version: int, payload: bytes):
    from kafka_rpc.client import decode_response

    return decode_response(codec.message_class(name).__api_key__, version, payload)


def test_request_before_authentication_closes(secure_server):
    with socket.create_connection(("127.0.0.1", secure_server.ports["SASL_PLAINTEXT"])) as s:
        s.settimeout(10)
        s.sendall(
            _req(
                "ApiVersionsRequest", 3, 1, client_software_name="raw", client_software_version="1"
            )
        )
        assert _decode("ApiVersionsRequest", 3, _read(s)).error_code == 0
        s.sendall(_req("DescribeClusterRequest", 0, 2))
        assert _closed(s)


def test_bad_password_answers_58_then_closes(secure_server):
    with socket.create_connection(("127.0.0.1", secure_server.ports["SASL_PLAINTEXT"])) as s:
        s.settimeout(10)
        s.sendall(_req("SaslHandshakeRequest", 1, 1, mechanism="PLAIN"))
        hs = _decode("SaslHandshakeRequest", 1, _read(s))
        assert hs.error_code == 0 and "SCRAM-SHA-512" in hs.mechanisms
        s.sendall(_req("SaslAuthenticateRequest", 2, 2, auth_bytes=b"\0alice\0wrong"))
        resp = _decode("SaslAuthenticateRequest", 2, _read(s))
        assert resp.error_code == 58 and resp.error_message
        assert _closed(s)


def test_unsupported_mechanism_and_out_of_order(secure_server):
    port = secure_server.ports["SASL_PLAINTEXT"]
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(10)
        s.sendall(_req("SaslHandshakeRequest", 1, 1, mechanism="GSSAPI"))
        assert _decode("SaslHandshakeRequest", 1, _read(s)).error_code == 33
        assert _closed(s)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(10)
        s.sendall(_req("SaslAuthenticateRequest", 1, 1, auth_bytes=b"\0alice\0alice-secret"))
        assert _decode("SaslAuthenticateRequest", 1, _read(s)).error_code == 34
        assert _closed(s)


def test_v0_handshake_then_raw_plain_token(secure_server):
    with socket.create_connection(("127.0.0.1", secure_server.ports["SASL_PLAINTEXT"])) as s:
        s.settimeout(10)
        s.sendall(_req("SaslHandshakeRequest", 0, 1, mechanism="PLAIN"))
        assert _decode("SaslHandshakeRequest", 0, _read(s)).error_code == 0
        token = b"\0alice\0alice-secret"
        # the raw token and a request behind it in one write
        s.sendall(
            struct.pack(">i", len(token))
            + token
            + _req(
                "ApiVersionsRequest", 3, 2, client_software_name="raw", client_software_version="1"
            )
        )
        assert _read(s) == b""  # PLAIN's empty server token, raw
        assert _decode("ApiVersionsRequest", 3, _read(s)).error_code == 0
    with socket.create_connection(("127.0.0.1", secure_server.ports["SASL_PLAINTEXT"])) as s:
        s.settimeout(10)
        s.sendall(_req("SaslHandshakeRequest", 0, 1, mechanism="PLAIN"))
        _read(s)
        token = b"\0alice\0nope"
        s.sendall(struct.pack(">i", len(token)) + token)
        assert _closed(s)  # the raw form has no error answer: close


async def test_reauthentication_lifetime(tmp_path, pki):
    """connections.max.reauth.ms: SessionLifetimeMs is answered; a request after the session
    ended closes; SaslHandshake v1 + SaslAuthenticate on the live connection renews it."""
    from tests.security.conftest import SecureServe

    srv = await asyncio.to_thread(
        SecureServe, tmp_path, pki, **{"connections.max.reauth.ms": "1000"}
    )
    try:
        port = srv.ports["SASL_PLAINTEXT"]

        def run():
            def login(s, corr):
                s.sendall(_req("SaslHandshakeRequest", 1, corr, mechanism="PLAIN"))
                assert _decode("SaslHandshakeRequest", 1, _read(s)).error_code == 0
                s.sendall(_req("SaslAuthenticateRequest", 1, corr + 1,
                               auth_bytes=b"\0alice\0alice-secret"))  # fmt: skip
                resp = _decode("SaslAuthenticateRequest", 1, _read(s))
                assert resp.error_code == 0 and resp.session_lifetime_ms == 1000

            with socket.create_connection(("127.0.0.1", port)) as s:
                s.settimeout(10)
                login(s, 1)
                s.sendall(_req("DescribeClusterRequest", 0, 3))
                assert _decode("DescribeClusterRequest", 0, _read(s)).error_code == 0
                import time

                t0 = time.monotonic()
                time.sleep(0.5)
                login(s, 4)  # re-authenticated half way through the first session
                time.sleep(max(0, t0 + 1.25 - time.monotonic()))  # the first one has ended
                s.sendall(_req("DescribeClusterRequest", 0, 6))
                assert _decode("DescribeClusterRequest", 0, _read(s)).error_code == 0
                time.sleep(1.1)  # past the end of the second one
                s.sendall(_req("DescribeClusterRequest", 0, 7))
                assert _closed(s)

        await asyncio.to_thread(run)
        # our client re-authenticates on the same connection before its session ends
        sec = ClientSecurity(None, "SCRAM-SHA-256", "alice", "alice-secret")
        async with KafkaRpcClient(f"127.0.0.1:{port}", security=sec) as client:
            in_place = []
            seen = [client._proto]  # connections already authenticated (kept alive here)
            authenticate = client._authenticate

            async def counting(proto):
                in_place.append(any(p is proto for p in seen))
                seen.append(proto)
                await authenticate(proto)

            client._authenticate = counting
            for _ in range(125):  # 2.5 s: two and a half sessions, a request every 20 ms
                resp = await client.request(codec.message_class("DescribeClusterRequest")())
                assert resp.error_code == 0  # never a failed request
                await asyncio.sleep(0.02)
            assert any(in_place), in_place  # at least one re-authentication on the live link
            proto = client._proto
            await asyncio.sleep(1.1)  # idle past the end of the session
            resp = await client.request(codec.message_class("DescribeClusterRequest")())
            assert resp.error_code == 0 and client._proto is not proto  # a new connection
    finally:
        srv.stop()


def test_scram_credentials_in_the_metadata_log():
    """--add-scram's store -> UserScramCredentialRecords -> the image -> a SCRAM exchange;
    snapshots carry the credentials."""
    import scramp

    from kafka_rpc.controller import snapshot
    from kafka_rpc.controller.image import EMPTY
    from kafka_rpc.controller.replay import replay_all
    from kafka_rpc.controller.scram import scram_records
    from kafka_rpc.security.sasl import (
        ImageScramCredentials,
        ScramCredentials,
        ScramServer,
        parse_add_scram,
    )

    store = ScramCredentials()
    mech, name, password, iterations, salt = parse_add_scram(
        'SCRAM-SHA-512=[name="carol",password="c-secret",iterations=4096]'
    )
    store.add(mech, name, password, iterations, salt)
    records = scram_records(store)
    assert [r.mechanism for r in records] == [2] and b"c-secret" not in repr(records).encode()
    mv = codec.message_class("FeatureLevelRecord")(name="metadata.version", feature_level=11)
    img = replay_all(EMPTY, [(r, i) for i, r in enumerate([mv, *records])])
    assert snapshot.load(snapshot.image_records(img)).scram == img.scram
    server = ScramServer("SCRAM-SHA-512", ImageScramCredentials(lambda: img))
    client = scramp.ScramClient(["SCRAM-SHA-512"], "carol", "c-secret")
    first = server.step(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = server.step(client.get_client_final().encode())
    client.set_server_final(final.decode())
    assert server.complete and server.username == "carol"


def test_registration_names_each_listeners_security_protocol(secure_server):
    """The broker registers every advertised listener with its ``listener.security.protocol.map``
    protocol (Kafka's SecurityProtocol ids: PLAINTEXT 0, SSL 1, SASL_PLAINTEXT 2, SASL_SSL 3),
    as ``kafka-rpc dump-log --cluster-metadata-decoder`` shows in the RegisterBrokerRecord."""
    import glob
    import subprocess
    import sys

    data = secure_server.overrides["log.dirs"]
    want = {"PLAINTEXT": 0, "SSL": 1, "MTLS": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

    def registered() -> dict:  # the last RegisterBrokerRecord's endpoints in the dumped log
        segs = sorted(glob.glob(f"{data}/__cluster_metadata-0/*.log"))
        out = subprocess.run(
            [sys.executable, "-m", "kafka_rpc.cli", "dump-log", "--cluster-metadata-decoder",
             "--files", *segs], capture_output=True, text=True, timeout=30,
        ).stdout  # fmt: skip
        got: dict = {}
        for line in out.splitlines():
            if '"REGISTER_BROKER_RECORD"' in line:
                rec = json.loads(line[line.index("payload: ") + len("payload: ") :])
                got = {e["name"]: e["securityProtocol"] for e in rec["data"]["endPoints"]}
        return got

    assert wait_until(registered, "a RegisterBrokerRecord in the log", timeout=20) == want


def test_tools_reach_a_sasl_ssl_listener_with_command_config(secure_server, pki, tmp_path):
    """``--command-config`` (Kafka's client properties) takes ``kafka-rpc topics``,
    ``api-versions`` and ``metadata-quorum`` through SCRAM over TLS; without it the same
    command cannot get past the TLS handshake and exits 1."""
    import subprocess
    import sys

    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        f"ssl.truststore.location={pki.truststore}\nsasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="alice-secret";\n'
    )
    server = secure_server.bootstrap("SASL_SSL")
    cli = [sys.executable, "-m", "kafka_rpc.cli"]
    runs = {
        "topics": ["topics", "--list", "--bootstrap-server", server, "--timeout", "10"],
        "api-versions": ["api-versions", "--bootstrap-server", server, "--timeout", "10"],
        "metadata-quorum": ["metadata-quorum", "--bootstrap-server", server, "--timeout", "10",
                            "--command-config", str(props), "describe", "--status"],
    }  # fmt: skip
    for name, argv in runs.items():
        with_config = argv if "--command-config" in argv else [*argv, "--command-config",
                                                                str(props)]  # fmt: skip
        p = subprocess.run([*cli, *with_config], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, (name, p.stdout, p.stderr)
    p = subprocess.run([*cli, *runs["api-versions"], "--timeout", "2"], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert p.returncode == 1, (p.stdout, p.stderr)
    p = subprocess.run([*cli, *runs["api-versions"], "--command-config", str(props)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "SaslAuthenticate(36)" in p.stdout, p.stdout
