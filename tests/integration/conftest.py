"""Helpers: an in-process server on ephemeral ports and a raw-socket Kafka peer."""

import asyncio
import contextlib
import struct

import pytest

from kafka_rpc.config import load_config
from kafka_rpc.node import Node, handlers_registry
from kafka_rpc.protocol import codec, frames

TIMEOUT = 5.0


def make_config(tmp_path, **extra):
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "log.dirs": str(tmp_path / "data"),
        "shutdown.timeout.ms": "3000",
    }
    overrides.update(extra)
    return load_config(overrides=overrides)


class Running:
    def __init__(self, server, task):
        self.server = server
        self.task = task

    def port(self, name="PLAINTEXT"):
        return self.server.bound[name][1]

    async def stop(self):
        """Ask the server to stop and wait, bounded by the sum of its own shutdown steps
        (controlled shutdown, Raft, then draining: each up to ``shutdown.timeout.ms``)."""
        self.server.should_exit.set()
        steps = 3 * self.server.config.shutdown_timeout_ms / 1000
        await asyncio.wait_for(self.task, max(TIMEOUT, steps + 5))


START_TIMEOUT = 60.0
"""s: the cap of a start (about a second alone; a loaded 2-core CI machine is many times slower:
a cap against a hang, not an expectation)."""


async def start_server(tmp_path, registry=None, start_timeout: float = START_TIMEOUT, **extra):
    """A server on ``<tmp_path>/data`` with :func:`make_config`'s overrides and ``extra``, once
    it serves (bounded by ``start_timeout`` s; a start slower than ``tests.waiting.SLOW`` prints
    how long it took)."""
    from tests.waiting import SLOW

    server = Node(make_config(tmp_path, **extra), registry or handlers_registry())
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    task = asyncio.create_task(server.serve())
    started = asyncio.create_task(server.started.wait())
    await asyncio.wait({task, started}, timeout=start_timeout, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    if not started.done():  # not started in time: stop what did start, then fail
        started.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        raise AssertionError(f"the server did not start in {start_timeout:g} s")
    if loop.time() - t0 > SLOW:
        print(f"the server took {loop.time() - t0:.1f} s to start", flush=True)
    return Running(server, task)


@pytest.fixture
async def server(tmp_path):
    running = await start_server(tmp_path)
    yield running
    await running.stop()


class Peer:
    """A raw Kafka peer on one connection."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port):
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), TIMEOUT)
        return cls(r, w)

    def send_raw(self, data: bytes):
        self.writer.write(data)

    def send(self, msg, version, corr, client_id="test", api_key=None):
        api_key = api_key if api_key is not None else type(msg).__api_key__
        body = codec.encode(msg, version)
        self.writer.write(
            frames.frame(frames.request_header_bytes(api_key, version, corr, client_id) + body)
        )

    async def read_frame(self) -> bytes:
        n = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), TIMEOUT))[0]
        return await asyncio.wait_for(self.reader.readexactly(n), TIMEOUT)

    async def read_response(self, name, version):
        from kafka_rpc.client import decode_response

        payload = await self.read_frame()
        corr = struct.unpack_from(">i", payload)[0]
        return corr, decode_response(codec.SPECS[name][2], version, payload)

    async def assert_closed(self):
        data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT)
        assert data == b"", f"expected close, got {data!r}"

    async def close(self):
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), TIMEOUT)
        except (TimeoutError, ConnectionError):
            pass


def wait_broker_unfenced(bootstrap: str, timeout: float = 3 * TIMEOUT) -> None:
    """Block until a freshly started node has registered its broker and been unfenced: until
    then a topic with replication factor 1 cannot be placed, and a validate-only CreateTopics
    says so (INVALID_REPLICATION_FACTOR) without creating anything."""
    from kafka_rpc.client import KafkaRpcClient
    from tests.waiting import until

    mod = codec.module("CreateTopicsRequest")
    probe = mod.CreateTopicsRequest(
        topics=(mod.CreatableTopic(name="probe", num_partitions=1, replication_factor=1),),
        timeout_ms=int(TIMEOUT * 1000),
        validate_only=True,
    )

    async def run() -> None:
        client = await KafkaRpcClient.connect(bootstrap, request_timeout=TIMEOUT)

        async def placeable():
            return (await client.request(probe)).topics[0].error_code == 0

        try:
            await until(placeable, "the node's broker to be unfenced", timeout=timeout)
        finally:
            await client.close()

    asyncio.run(run())
