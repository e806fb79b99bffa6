"""The TLS listener's protocol factory (``tls_protocol_factory``) in-process, on uvloop (its
own compiled TLS protocol, the one the server runs) and on asyncio's loop (asyncio's
``SSLProtocol``): a trusted client certificate reaches the connection; an untrusted one is
logged once with the peer address and closed, and the listener keeps serving."""

from __future__ import annotations

import asyncio
import logging
import ssl
import types

import pytest
import uvloop

from kafka_rpc.server.secure_connection import _tls_protocol_class, tls_protocol_factory
from tests.security.conftest import Pki
from tests.waiting import until


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


class _Hello(asyncio.Protocol):
    """Stands in for the connection: says hello once the handshake is done."""

    made: list = []

    def __init__(self, listener) -> None:
        self.listener = listener

    def connection_made(self, transport) -> None:
        _Hello.made.append(transport.get_extra_info("peername"))
        transport.write(b"hello")


async def _scenario(pki: Pki, caplog) -> None:
    loop = asyncio.get_running_loop()
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(pki.server, password="key-secret")
    server_ctx.load_verify_locations(pki.truststore)
    server_ctx.verify_mode = ssl.CERT_REQUIRED  # ssl.client.auth=required
    listener = types.SimpleNamespace(name="MTLS")
    srv = await loop.create_server(
        tls_protocol_factory(listener, _Hello, server_ctx), "127.0.0.1", 0
    )
    port = srv.sockets[0].getsockname()[1]

    async def hello(keystore: str) -> tuple[bytes | None, tuple]:
        ctx = ssl.create_default_context(cafile=pki.truststore)
        ctx.load_cert_chain(keystore)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=ctx, server_hostname="localhost"
        )
        local = writer.get_extra_info("sockname")
        try:
            data = await asyncio.wait_for(reader.read(5), 10)
        except (ssl.SSLError, ConnectionResetError):
            data = None
        writer.close()
        return data, local

    try:
        _Hello.made.clear()
        assert (await hello(str(pki.client)))[0] == b"hello"
        data, local = await hello(str(pki.untrusted))
        assert not data  # closed (EOF or a TLS alert), never served
        needle = f"closing ('127.0.0.1', {local[1]}): TLS handshake failed on MTLS"
        hits = await until(lambda: [r for r in caplog.messages if needle in r],
                           "the handshake failure logged", timeout=10.0)  # fmt: skip
        assert len(hits) == 1, caplog.messages
        assert len(_Hello.made) == 1  # only the trusted client reached the connection
        assert (await hello(str(pki.client)))[0] == b"hello"  # the listener serves on
    finally:
        srv.close()
        await srv.wait_closed()


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_bad_client_certificate_is_logged_and_closed(pki, caplog, loop_kind):
    caplog.set_level(logging.INFO, logger="kafka_rpc.server")

    async def main() -> None:
        cls = _tls_protocol_class(asyncio.get_running_loop())
        base = uvloop.loop.SSLProtocol if loop_kind == "uvloop" else asyncio.sslproto.SSLProtocol
        assert issubclass(cls, base)
        await asyncio.wait_for(_scenario(pki, caplog), 30)

    (uvloop.run if loop_kind == "uvloop" else asyncio.run)(main())
