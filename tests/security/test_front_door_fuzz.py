"""Hypothesis fuzz of the SASL and TLS front door: handshake and authenticate frames
in any order, truncated, oversized, with malformed tokens, and random bytes on a TLS port. Each
connection gets answers or is closed, never a hang beyond its read timeout or a server
traceback, and the server serves a well-behaved client after every example."""

from __future__ import annotations

import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.test_sasl_clients import _decode, _read, _req
from tests.security.test_tls_clients import _served

MAX_RECEIVE = 524288  # sasl.server.max.receive.size default


def _frame(kind: str, version: int, payload: bytes, mech: str) -> bytes:
    if kind == "handshake":
        return _req("SaslHandshakeRequest", version % 2, 1, mechanism=mech)
    if kind == "authenticate":
        return _req("SaslAuthenticateRequest", version % 3, 2, auth_bytes=payload)
    if kind == "raw token":
        return struct.pack(">i", len(payload)) + payload
    if kind == "oversized":
        return struct.pack(">i", MAX_RECEIVE + 1 + len(payload)) + payload
    if kind == "negative":
        return struct.pack(">i", -1 - len(payload))
    if kind == "metadata":  # a request before authentication
        return _req("DescribeClusterRequest", 0, 3)
    return payload  # random bytes


frames = st.lists(
    st.tuples(
        st.sampled_from(
            ["handshake", "authenticate", "raw token", "oversized", "negative", "metadata", "bytes"]
        ),  # fmt: skip
        st.integers(0, 5),
        st.binary(max_size=64),
        st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", ""]),
    ),
    min_size=1,
    max_size=5,
)


def _drain(sock: socket.socket) -> None:
    """Read answers until the server closes or 0.3 s pass without a byte (a truncated frame
    waits for its rest, as Kafka's does; the client then goes away)."""
    sock.settimeout(0.3)
    for _ in range(1000):
        try:
            if not sock.recv(65536):
                return
        except (TimeoutError, ConnectionResetError):
            return


def _healthy(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(_req("SaslHandshakeRequest", 1, 1, mechanism="PLAIN"))
        assert _decode("SaslHandshakeRequest", 1, _read(s)).error_code == 0
        s.sendall(_req("SaslAuthenticateRequest", 2, 2, auth_bytes=b"\0admin\0admin-secret"))
        assert _decode("SaslAuthenticateRequest", 2, _read(s)).error_code == 0
        s.sendall(_req("DescribeClusterRequest", 0, 3))
        assert _decode("DescribeClusterRequest", 0, _read(s)).error_code == 0


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames=frames, truncate=st.integers(0, 40))
def test_sasl_front_door(secure_server, frames, truncate):
    port = secure_server.ports["SASL_PLAINTEXT"]
    data = b"".join(_frame(*f) for f in frames)
    if truncate:
        data = data[: max(1, len(data) - truncate)]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        _drain(s)
    _healthy(port)
    assert not any("Traceback" in line for line in secure_server.errors)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(min_size=1, max_size=600))
def test_tls_front_door(secure_server, pki, data):
    port = secure_server.ports["SSL"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        _drain(s)
    assert _served(port, pki)
    assert not any("Traceback" in line for line in secure_server.errors)


def _client_hello() -> bytes:
    """A real TLS ClientHello (what a client sends first), from an in-memory handshake."""
    import ssl

    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


HELLO = _client_hello()
FLIPS = st.lists(st.tuples(st.integers(0, len(HELLO) - 1), st.integers(1, 255)), max_size=3)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.integers(1, len(HELLO)), flips=FLIPS)
def test_tls_front_door_mangled_client_hello(secure_server, pki, cut, flips):
    """A real ClientHello, truncated and with bytes flipped: the handshake fails or waits for
    the rest; the client then goes away and the server keeps serving others."""
    data = bytearray(HELLO[:cut])
    for pos, x in flips:
        if pos < len(data):
            data[pos] ^= x
    port = secure_server.ports["SSL"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(bytes(data))
        except (BrokenPipeError, ConnectionResetError):
            pass
        _drain(s)
    assert _served(port, pki)
    assert not any("Traceback" in line for line in secure_server.errors)
