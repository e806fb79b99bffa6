"""KafkaRpcClient over real loopback sockets when the peer goes away between the TCP connect and
the first write (a controller SIGKILLed while a broker connects to it): the ApiVersions
negotiation must fail with KafkaConnectionError, so callers that retry on connection errors
(the controller channel, the Raft driver) do, on both event loops the server runs on. Before the
fix uvloop raised RuntimeError ("unable to perform operation on <TCPTransport closed=True>")
and asyncio dropped the bytes and waited out the whole connect timeout (TimeoutError)."""

from __future__ import annotations

import asyncio

import pytest

from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient, _Protocol

CONNECT_TIMEOUT = 2.0


async def negotiate_on_a_closed_connection() -> None:
    """Connect to a real listening socket, lose the connection before anything is written, then
    negotiate on it, as ``_ensure_connected`` does when the loss wins the race."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = KafkaRpcClient(f"127.0.0.1:{port}", connect_timeout=CONNECT_TIMEOUT)
    try:
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: _Protocol(client), "127.0.0.1", port), CONNECT_TIMEOUT
        )
        proto.transport.abort()
        await asyncio.wait_for(proto.lost, CONNECT_TIMEOUT)  # connection_lost has run
        with pytest.raises(KafkaConnectionError):
            await asyncio.wait_for(client._negotiate(proto), 2 * CONNECT_TIMEOUT)
        assert not proto.pending  # nothing left waiting for an answer that cannot come
    finally:
        server.close()
        await server.wait_closed()


async def test_negotiation_on_a_lost_connection_is_a_connection_error_asyncio():
    await negotiate_on_a_closed_connection()


def test_negotiation_on_a_lost_connection_is_a_connection_error_uvloop():
    uvloop = pytest.importorskip("uvloop")
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(negotiate_on_a_closed_connection())
