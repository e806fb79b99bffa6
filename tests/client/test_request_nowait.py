"""``KafkaRpcClient.request_nowait`` / ``abandon`` (the Raft driver's direct send path) against a
real server on loopback: None until connected and after close, the same answer as ``request``
once connected, an abandoned request's late answer dropped while the connection serves the
next one, and a lost connection failing the future with KafkaConnectionError."""

from __future__ import annotations

import asyncio

import pytest

from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
from kafka_rpc.protocol import codec
from tests.integration.conftest import start_server

pytestmark = pytest.mark.integration

TIMEOUT = 10.0


def api_versions():
    return codec.message_class("ApiVersionsRequest")(
        client_software_name="t", client_software_version="1"
    )


async def test_request_nowait_and_abandon(tmp_path):
    running = await start_server(tmp_path)
    client = KafkaRpcClient(f"127.0.0.1:{running.port()}", connect_timeout=TIMEOUT)
    try:
        assert client.request_nowait(api_versions(), 3) is None  # not connected yet
        await client._ensure_connected()
        via_request = await client.request(api_versions(), version=3, timeout=TIMEOUT)
        corr, fut = client.request_nowait(api_versions(), 3)
        resp = await asyncio.wait_for(fut, TIMEOUT)
        assert resp.error_code == 0
        assert resp.api_keys == via_request.api_keys
        assert corr not in client._proto.pending

        corr, abandoned = client.request_nowait(api_versions(), 3)
        client.abandon(corr)
        assert corr not in client._proto.pending
        _, nxt = client.request_nowait(api_versions(), 3)
        assert (await asyncio.wait_for(nxt, TIMEOUT)).error_code == 0
        assert not abandoned.done()  # its answer came first and was dropped

        _, lost = client.request_nowait(api_versions(), 3)
        client._proto.transport.abort()
        with pytest.raises(KafkaConnectionError):
            await asyncio.wait_for(lost, TIMEOUT)
        assert client.request_nowait(api_versions(), 3) is None  # lost: use request()
        await client.close()
        assert client.request_nowait(api_versions(), 3) is None
    finally:
        await client.close()
        await running.stop()
