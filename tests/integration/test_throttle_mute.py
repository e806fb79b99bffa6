"""Kafka's throttling convention (KIP-219) over real sockets, on a real single-node server whose
controller allows ``producer.ids.allocation.max.per.second`` = 2 AllocateProducerIds blocks per
broker: over the rate the answer is THROTTLING_QUOTA_EXCEEDED with ``ThrottleTimeMs`` > 0, sent
at once, and the server then reads nothing more from that connection until the throttle time has
passed (Kafka's ``SocketServer.Processor`` muting the channel); other connections are served
meanwhile, requests started before the mute are answered, and a client that leaves while muted
leaves no timer behind."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import struct
import weakref
from dataclasses import dataclass

import pytest

from kafka_rpc.api.registry import Registry
from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.handlers import api_versions as av_mod
from kafka_rpc.protocol import codec, frames
from kafka_rpc.protocol.errors import ErrorCode
from tests.integration.conftest import Peer, start_server
from tests.integration.test_controller import BROKER, registration, until_active
from tests.raft.test_driver_single import start_single
from tests.waiting import until

pytestmark = pytest.mark.integration

TIMEOUT = 5.0
RATE = 2  # producer.ids.allocation.max.per.second
#: seconds of slack (5 ms) for rounding only: every bound below is measured from a send made before
#: the server could have started the mute, so the mute's full length must have elapsed
TOLERANCE = 0.005
R = codec.message_class
AllocateProducerIdsRequest = R("AllocateProducerIdsRequest")
ApiVersionsRequest = R("ApiVersionsRequest")


@dataclass
class Node:
    running: object
    port: int  # the CONTROLLER listener
    epoch: int  # broker BROKER's epoch

    def connection_of(self, peer: Peer):
        """The server's KafkaConnection of ``peer`` (None once it is gone)."""
        local = peer.writer.get_extra_info("sockname")
        conns = self.running.server.listeners["CONTROLLER"].connections
        return next((c for c in conns if c.peer == local), None)


@pytest.fixture
async def node(tmp_path):
    running, port = await start_single(
        tmp_path, **{"producer.ids.allocation.max.per.second": str(RATE)}
    )
    try:
        client = await KafkaRpcClient.connect(f"127.0.0.1:{port}", connect_timeout=TIMEOUT)
        try:
            reg = await asyncio.wait_for(until_active(client), TIMEOUT * 2)
            assert reg.error_code == 0, reg
        finally:
            await client.close()
        yield Node(running, port, reg.broker_epoch)
    finally:
        await running.stop()


def alloc_frame(node: Node, corr: int) -> bytes:
    req = AllocateProducerIdsRequest(broker_id=BROKER, broker_epoch=node.epoch)
    return frames.frame(frames.request_header_bytes(67, 0, corr, "t") + codec.encode(req, 0))


def api_versions_frame(corr: int) -> bytes:
    req = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    return frames.frame(frames.request_header_bytes(18, 3, corr, "t") + codec.encode(req, 3))


async def read(peer: Peer, name: str, version: int, corr: int):
    got, resp = await peer.read_response(name, version)
    assert got == corr
    return resp


async def until_throttled(node: Node, peer: Peer):
    """AllocateProducerIds one at a time on ``peer`` until one is throttled (the third within a
    second at RATE 2); returns that response and the loop time just before it was sent."""
    loop = asyncio.get_running_loop()
    for corr in range(100, 100 + 4 * RATE):
        t_sent = loop.time()
        peer.send_raw(alloc_frame(node, corr))
        resp = await read(peer, "AllocateProducerIdsResponse", 0, corr)
        if resp.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
            assert resp.throttle_time_ms > 0 and resp.producer_id_len == 0, resp
            return resp, t_sent
        assert (resp.error_code, resp.throttle_time_ms) == (0, 0), resp
    raise AssertionError("AllocateProducerIds was never throttled")


async def test_a_throttled_connection_is_muted_while_others_are_served(node):
    loop = asyncio.get_running_loop()
    a, b = await Peer.open(node.port), await Peer.open(node.port)
    try:
        resp, t_sent = await until_throttled(node, a)
        throttle = resp.throttle_time_ms / 1000
        assert throttle <= 1.0  # the rest of a one-second window
        a.send_raw(api_versions_frame(1))  # at once, on the muted connection
        a_answer = asyncio.ensure_future(read(a, "ApiVersionsResponse", 3, 1))
        b.send_raw(api_versions_frame(2))
        assert (await read(b, "ApiVersionsResponse", 3, 2)).error_code == 0
        assert not a_answer.done(), "the other connection must not wait for the muted one"
        assert (await a_answer).error_code == 0
        elapsed = loop.time() - t_sent
        assert throttle - TOLERANCE <= elapsed < throttle + 5
        # the mute is over: the connection is served as before
        a.send_raw(api_versions_frame(3))
        assert (await read(a, "ApiVersionsResponse", 3, 3)).error_code == 0
    finally:
        await a.close()
        await b.close()


async def test_requests_started_before_the_mute_are_answered(node):
    """[throttled AllocateProducerIds, ApiVersions, BrokerRegistration] in one write: the
    throttled response is written first (in order) and mutes; the ApiVersions served with it and
    the registration that finishes later (it waits for its record to commit) are still answered
    while muted, and the registration's flush does not lift the mute: a request sent after them
    waits for the whole throttle."""
    loop = asyncio.get_running_loop()
    a = await Peer.open(node.port)
    try:
        corr = 100
        for _ in range(4 * RATE):  # bounded: fill the window, then the next one is throttled
            corr += 10
            t_sent = loop.time()
            reg = registration(broker_id=BROKER + 1)
            a.send_raw(
                alloc_frame(node, corr)
                + api_versions_frame(corr + 1)
                + frames.frame(
                    frames.request_header_bytes(62, 2, corr + 2, "t") + codec.encode(reg, 2)
                )
            )
            alloc = await read(a, "AllocateProducerIdsResponse", 0, corr)
            assert (await read(a, "ApiVersionsResponse", 3, corr + 1)).error_code == 0
            assert (await read(a, "BrokerRegistrationResponse", 2, corr + 2)).error_code == 0
            if alloc.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED:
                break
            assert alloc.error_code == 0, alloc
        else:
            raise AssertionError("AllocateProducerIds was never throttled")
        throttle = alloc.throttle_time_ms / 1000
        conn = node.connection_of(a)
        assert conn is not None and conn._muted, "answered while muted, as requests read before"
        a.send_raw(api_versions_frame(1))
        assert (await read(a, "ApiVersionsResponse", 3, 1)).error_code == 0
        elapsed = loop.time() - t_sent
        assert throttle - TOLERANCE <= elapsed < throttle + 5
        assert not conn._muted and conn._mute_timer is None
    finally:
        await a.close()


# ------------------------------------------------ any API with ThrottleTimeMs: a private registry
FindCoordinatorRequest = R("FindCoordinatorRequest")
FindCoordinatorResponse = R("FindCoordinatorResponse")


def private_registry(gate: asyncio.Event) -> Registry:
    """ApiVersions, and a FindCoordinator whose key ``"<ms>[/yield][/gate]"`` answers with
    ThrottleTimeMs = ms, after suspending once (``yield``: the task path) and/or after ``gate``
    is set."""
    reg = Registry()
    reg.register("ApiVersionsRequest", av_mod.api_versions)

    async def find_coordinator(ctx, request):
        ms, *flags = request.key.split("/")
        if "gate" in flags:
            await asyncio.wait_for(gate.wait(), TIMEOUT)
        if "yield" in flags:
            await asyncio.sleep(0)
        return FindCoordinatorResponse(throttle_time_ms=int(ms), node_id=1, host="h", port=1)

    reg.register("FindCoordinatorRequest", find_coordinator)
    return reg


@pytest.fixture
async def private(tmp_path):
    gate = asyncio.Event()
    running = await start_server(tmp_path, registry=private_registry(gate))
    running.gate = gate
    try:
        yield running
    finally:
        gate.set()
        if not running.task.done():
            await running.stop()


def fc_frame(key: str, corr: int) -> bytes:
    req = FindCoordinatorRequest(key=key)
    return frames.frame(frames.request_header_bytes(10, 3, corr, "t") + codec.encode(req, 3))


def connection_of(running, peer: Peer):
    local = peer.writer.get_extra_info("sockname")
    return next((c for c in running.server.listeners["PLAINTEXT"].connections
                 if c.peer == local), None)  # fmt: skip


async def until_gone(running, peer: Peer, timeout: float = TIMEOUT) -> None:
    """Until the server's connection of ``peer`` has run ``connection_lost``."""
    await until(lambda: connection_of(running, peer) is None, "the server to drop the connection",
                timeout=timeout, interval=0.005)  # fmt: skip


@pytest.fixture
async def no_errors(caplog):
    """Fails the test if anything logs an ERROR or reaches the loop's exception handler."""
    caplog.set_level(logging.INFO)
    loop = asyncio.get_running_loop()
    loop_errors: list = []
    loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
    yield
    loop.set_exception_handler(None)
    assert loop_errors == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_suspended_handlers_throttle_mutes_and_a_longer_one_extends(private, no_errors):
    """[300 ms inline, 600 ms from a task] in one write: the first mutes for 300 ms when written,
    the second, written a moment later, extends the mute to its own end (never shortens it)."""
    loop = asyncio.get_running_loop()
    a = await Peer.open(private.port())
    try:
        t_sent = loop.time()
        a.send_raw(fc_frame("300", 1) + fc_frame("600/yield", 2))
        assert (await read(a, "FindCoordinatorResponse", 3, 1)).throttle_time_ms == 300
        assert (await read(a, "FindCoordinatorResponse", 3, 2)).throttle_time_ms == 600
        a.send_raw(api_versions_frame(3))
        assert (await read(a, "ApiVersionsResponse", 3, 3)).error_code == 0
        elapsed = loop.time() - t_sent
        assert 0.6 - TOLERANCE <= elapsed < 0.6 + 5
        # a shorter throttle while muted does not cut the mute short
        t_sent = loop.time()
        a.send_raw(fc_frame("500", 4) + fc_frame("100/yield", 5))
        await read(a, "FindCoordinatorResponse", 3, 4)
        await read(a, "FindCoordinatorResponse", 3, 5)
        a.send_raw(api_versions_frame(6))
        await read(a, "ApiVersionsResponse", 3, 6)
        assert 0.5 - TOLERANCE <= loop.time() - t_sent < 0.5 + 5
    finally:
        await a.close()


async def test_a_connection_reset_while_muted_cancels_the_timer(private, no_errors):
    """The client resets the connection while muted (30 s); the server learns it when it writes
    the response of a request still in flight: connection_lost cancels the mute timer, nothing is
    logged, and the connection is garbage (the timer no longer references it)."""
    a = await Peer.open(private.port())
    a.send_raw(fc_frame("30000", 1) + fc_frame("0/gate", 2))
    assert (await read(a, "FindCoordinatorResponse", 3, 1)).throttle_time_ms == 30000
    conn = connection_of(private, a)
    timer = conn._mute_timer
    assert conn._muted and timer is not None and not timer.cancelled()
    ref = weakref.ref(conn)
    del conn
    sock = a.writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
    a.writer.transport.abort()
    # the socket is really closed (the RST sent) within a few loop turns
    await until(lambda: sock.fileno() == -1, "the socket closed", timeout=TIMEOUT, interval=0)
    private.gate.set()  # the in-flight request's response is written into the reset connection
    await until_gone(private, a)  # well before the 30 s mute would end
    assert timer.cancelled()
    gc.collect()
    assert ref() is None, "the closed connection is still referenced"


async def test_a_client_closing_while_muted_is_released_when_the_mute_ends(private, no_errors):
    """A muted connection reads nothing, so a client's close (FIN) is seen when the mute ends, as
    with Kafka's muted channel (no OP_READ interest): then the connection is dropped and
    collected; nothing logged."""
    loop = asyncio.get_running_loop()
    a = await Peer.open(private.port())
    t_sent = loop.time()
    a.send_raw(fc_frame("300", 1))
    assert (await read(a, "FindCoordinatorResponse", 3, 1)).throttle_time_ms == 300
    ref = weakref.ref(connection_of(private, a))
    assert ref()._muted
    await a.close()
    await until_gone(private, a, timeout=0.3 + TIMEOUT)
    assert loop.time() - t_sent >= 0.3 - TOLERANCE
    gc.collect()
    assert ref() is None, "the closed connection is still referenced"


async def test_shutdown_does_not_wait_for_a_mute(private, no_errors):
    """A connection muted for 30 s: the server's graceful stop (Running.stop allows 5 s) drains
    and closes it at once, cancelling the timer; the client sees the close."""
    a = await Peer.open(private.port())
    a.send_raw(fc_frame("30000", 1))
    await read(a, "FindCoordinatorResponse", 3, 1)
    conn = connection_of(private, a)
    timer = conn._mute_timer
    assert conn._muted and timer is not None
    await private.stop()  # raises TimeoutError after 5 s if the drain waited for the mute
    assert timer.cancelled() and conn._mute_timer is None
    await a.assert_closed()
    await a.close()
