"""Kafka broker connection semantics over real sockets (Kafka's ``SocketServer``)."""

import asyncio
import struct

import pytest

from kafka_rpc.api.registry import Registry
from kafka_rpc.handlers import api_versions as av_mod
from kafka_rpc.handlers import metadata as md_mod
from kafka_rpc.protocol import codec, frames
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from tests.waiting import until

from .conftest import Peer, start_server

pytestmark = pytest.mark.integration

ApiVersionsRequest = codec.message_class("ApiVersionsRequest")
MetadataRequest = codec.message_class("MetadataRequest")
FindCoordinatorRequest = codec.message_class("FindCoordinatorRequest")
FindCoordinatorResponse = codec.message_class("FindCoordinatorResponse")


def api_versions_frame(version=3, corr=1):
    req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    return frames.frame(
        frames.request_header_bytes(18, version, corr, "t") + codec.encode(req, version)
    )


async def test_api_versions_roundtrip(server):
    p = await Peer.open(server.port())
    p.send(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3, 5)
    corr, resp = await p.read_response("ApiVersionsResponse", 3)
    assert corr == 5 and resp.error_code == 0
    keys = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    table = server.server.listeners["PLAINTEXT"].table  # one source: dispatch == ApiVersions
    assert keys == {k: (e.min_version, e.max_version) for k, e in table.items() if e.advertised}
    # served but not advertised: the coordinator partitions' Raft RPCs (a Kafka broker lists none)
    assert {k for k, e in table.items() if not e.advertised} == {52, 53, 54, 59}
    assert {3: (0, 14), 10: (0, 7), 18: (0, 4)}.items() <= keys.items()
    await p.close()


async def test_api_versions_per_listener(server):
    p = await Peer.open(server.port("CONTROLLER"))
    p.send(ApiVersionsRequest(), 0, 1)
    _, resp = await p.read_response("ApiVersionsResponse", 0)
    table = server.server.listeners["CONTROLLER"].table
    assert [k.api_key for k in resp.api_keys] == list(table)
    assert 18 in table and 3 not in table and 10 not in table
    await p.close()


async def test_oversized_frame_closes(tmp_path):
    running = await start_server(tmp_path, **{"socket.request.max.bytes": "1000"})
    try:
        p = await Peer.open(running.port())
        p.send_raw(struct.pack(">i", 1001) + b"\0" * 16)
        await p.assert_closed()
        p = await Peer.open(running.port())  # the exact limit is accepted
        p.send_raw(api_versions_frame())
        assert len(await p.read_frame()) > 8
        await p.close()
    finally:
        await running.stop()


async def test_negative_size_closes(server):
    p = await Peer.open(server.port())
    p.send_raw(struct.pack(">i", -1))
    await p.assert_closed()


async def test_truncated_frame_then_close_is_harmless(server):
    p = await Peer.open(server.port())
    p.send_raw(api_versions_frame()[:9])
    await p.close()
    p = await Peer.open(server.port())
    p.send_raw(api_versions_frame())
    assert (await p.read_frame())[:4] == b"\0\0\0\x01"
    await p.close()


async def test_frame_split_across_reads(server):
    p = await Peer.open(server.port())
    data = api_versions_frame(corr=9) * 3
    for i in range(0, len(data), 7):
        p.send_raw(data[i : i + 7])
        await p.writer.drain()
    for _ in range(3):
        assert (await p.read_frame())[:4] == struct.pack(">i", 9)
    await p.close()


async def test_unknown_api_key_closes(server):
    p = await Peer.open(server.port())
    p.send_raw(frames.frame(bytes.fromhex("7fff0000000000010000")))
    await p.assert_closed()


async def test_zero_size_frame_closes(server):
    p = await Peer.open(server.port())
    p.send_raw(struct.pack(">i", 0))
    await p.assert_closed()


async def test_unsupported_version_closes(server):
    p = await Peer.open(server.port())
    p.send(FindCoordinatorRequest(), 3, 1, api_key=10)
    p.send_raw(frames.frame(frames.request_header_bytes(10, 99, 2, "t") + b"\0" * 8))
    corr, _ = await p.read_response("FindCoordinatorResponse", 3)  # earlier request answered
    assert corr == 1
    await p.assert_closed()


async def test_api_versions_v99_golden(server):
    p = await Peer.open(server.port())
    # body is not parsed: garbage after a v99 header is fine; header v2 (threshold rule)
    p.send_raw(
        frames.frame(bytes.fromhex("0012006300000007000363 6c6900".replace(" ", "")) + b"\xff\x01")
    )
    raw = await p.read_frame()
    assert struct.pack(">i", len(raw)) + raw == bytes.fromhex(
        "0000001000000007002300000001001200000004"
    )
    # the connection stays usable
    p.send_raw(api_versions_frame(corr=8))
    assert (await p.read_frame())[:4] == struct.pack(">i", 8)
    await p.close()


async def test_garbage_body_closes(server):
    p = await Peer.open(server.port())
    # Metadata v12 with a topics array count claiming far more entries than bytes
    p.send_raw(frames.frame(frames.request_header_bytes(3, 12, 1, "t") + b"\xff\xff\xff\x0f"))
    await p.assert_closed()


async def test_api_not_on_listener_closes(server):
    p = await Peer.open(server.port("CONTROLLER"))
    p.send(MetadataRequest(), 12, 1)
    await p.assert_closed()


# ---------------------------------------------------------------- private registry handlers
def private_registry(state):
    reg = Registry()
    reg.register("ApiVersionsRequest", av_mod.api_versions)
    reg.register("MetadataRequest", md_mod.metadata)

    async def find_coordinator(ctx, request):
        if request.key == "slow":
            state["slow_started"].set()
            await asyncio.wait_for(state["release"].wait(), 5)
        elif request.key == "boom":
            raise RuntimeError("boom")
        elif request.key == "kafka":
            raise KafkaError(ErrorCode.NOT_CONTROLLER)
        elif request.key == "yield":
            await asyncio.sleep(0)
        resp = FindCoordinatorResponse(node_id=1, host=request.key, port=1)
        if request.key in state.get("done", {}):  # this handler has computed its answer
            state["done"][request.key].set()
        return resp

    reg.register("FindCoordinatorRequest", find_coordinator)
    return reg


@pytest.fixture
async def private_server(tmp_path):
    state = {"slow_started": asyncio.Event(), "release": asyncio.Event(),
             "done": {"fast": asyncio.Event(), "yield": asyncio.Event()}}  # fmt: skip
    running = await start_server(tmp_path, registry=private_registry(state))
    running.state = state
    yield running
    state["release"].set()
    await running.stop()


async def test_responses_in_request_order(private_server):
    p = await Peer.open(private_server.port())
    p.send(FindCoordinatorRequest(key="slow"), 3, 1)
    p.send(FindCoordinatorRequest(key="fast"), 3, 2)
    p.send(FindCoordinatorRequest(key="yield"), 3, 3)
    state = private_server.state
    await asyncio.wait_for(state["slow_started"].wait(), 5)
    # the later requests finish while the first one still waits; their answers are held back
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in state["done"].values())), 5)
    state["release"].set()
    got = [await p.read_response("FindCoordinatorResponse", 3) for _ in range(3)]
    assert [(c, r.host) for c, r in got] == [(1, "slow"), (2, "fast"), (3, "yield")]
    await p.close()


async def test_handler_exception_becomes_error_response(private_server):
    p = await Peer.open(private_server.port())
    p.send(FindCoordinatorRequest(key="boom"), 3, 1)
    p.send(FindCoordinatorRequest(key="kafka"), 1, 2)
    p.send(FindCoordinatorRequest(key="ok"), 3, 3)
    c1, r1 = await p.read_response("FindCoordinatorResponse", 3)
    c2, r2 = await p.read_response("FindCoordinatorResponse", 1)
    c3, r3 = await p.read_response("FindCoordinatorResponse", 3)
    assert (c1, r1.error_code) == (1, ErrorCode.UNKNOWN_SERVER_ERROR)
    assert (c2, r2.error_code) == (2, ErrorCode.NOT_CONTROLLER)
    assert (c3, r3.error_code, r3.host) == (3, 0, "ok")
    await p.close()


async def test_error_response_sets_nested_error_codes(server):
    from kafka_rpc.api.context import error_response

    entry = server.server.listeners["PLAINTEXT"].table[10]
    req = FindCoordinatorRequest(key_type=3, coordinator_keys=("a", "b"))
    resp = error_response(entry, req, 7, -1)
    assert [c.error_code for c in resp.coordinators] == [-1, -1]
    entry = server.server.listeners["PLAINTEXT"].table[3]
    assert error_response(entry, MetadataRequest(), 13, 5).error_code == 5
    assert error_response(entry, MetadataRequest(), 12, 5).error_code == 0  # field absent at v12


async def test_graceful_shutdown_answers_in_flight(tmp_path):
    state = {"slow_started": asyncio.Event(), "release": asyncio.Event()}
    running = await start_server(tmp_path, registry=private_registry(state))
    p = await Peer.open(running.port())
    p.send(FindCoordinatorRequest(key="slow"), 3, 1)
    await asyncio.wait_for(state["slow_started"].wait(), 5)
    running.server.should_exit.set()

    async def refused() -> bool:
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", running.port())
        except OSError:
            return True
        w.close()
        return False

    # within the slow handler's 5 s bound: it is still in flight
    await until(refused, "the listener to stop accepting", timeout=3.0, interval=0.01)
    state["release"].set()
    corr, resp = await p.read_response("FindCoordinatorResponse", 3)
    assert (corr, resp.host) == (1, "slow")
    await p.assert_closed()
    await asyncio.wait_for(running.task, 5)


async def test_bad_frame_behind_the_inflight_limit_closes(tmp_path):
    """Frames left unread because the connection was out of room are still size-checked: a
    huge size after them closes the connection instead of being buffered."""
    running = await start_server(
        tmp_path,
        **{"socket.request.max.bytes": "1000", "max.inflight.requests.per.connection": "2"},
    )
    try:
        p = await Peer.open(running.port())
        good = b"".join(api_versions_frame(corr=i) for i in range(5))
        p.send_raw(good + struct.pack(">i", 1 << 30) + b"\0" * 64)
        for i in range(5):
            assert (await p.read_frame())[:4] == struct.pack(">i", i)
        await p.assert_closed()
    finally:
        await running.stop()


async def test_backpressure_many_pipelined(server):
    p = await Peer.open(server.port())
    n = 1000
    p.send_raw(b"".join(api_versions_frame(corr=i) for i in range(n)))
    for i in range(n):
        assert (await p.read_frame())[:4] == struct.pack(">i", i)
    await p.close()


async def test_metrics(tmp_path):
    running = await start_server(tmp_path, **{"metrics.port": "0"})
    try:
        p = await Peer.open(running.port())
        p.send_raw(api_versions_frame())
        await p.read_frame()
        await p.close()
        reg = running.server.metrics_registry
        assert (
            reg.get_sample_value(
                "kafka_rpc_requests_total",
                {"listener": "PLAINTEXT", "api": "ApiVersions", "version": "3"},
            )
            == 1.0
        )
    finally:
        await running.stop()
