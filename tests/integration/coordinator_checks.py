"""What the multi-process tests of the default Batch Coordinator share: creating the diskless
topic through a broker, a continuous ``Producers`` commit load while a step runs, and the final
check that every acknowledged commit is found exactly once, at the offset it was given."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from tests.integration.test_diskless_metadata_failover import PARTITIONS, Producers

CT = codec.module("CreateTopicsRequest")
#: CreateTopics answers a test retries: REQUEST_TIMED_OUT, INVALID_REPLICATION_FACTOR (brokers
#: not registered yet), NOT_CONTROLLER
RETRIABLE_CREATE = (7, 38, 41)


async def create_diskless_topic(client: KafkaRpcClient, name: str = "d",
                                replication_factor: int = 3) -> uuid.UUID | None:  # fmt: skip
    """CreateTopics of a diskless topic of ``PARTITIONS`` partitions: its topic id, or None to
    try again (a connection error or a :data:`RETRIABLE_CREATE` code); any other answer fails
    the test."""
    try:
        resp = await client.request(CT.CreateTopicsRequest(
            topics=(CT.CreatableTopic(name=name, num_partitions=PARTITIONS,
                                      replication_factor=replication_factor,
                                      configs=(CT.CreatableTopicConfig(name="diskless.enable",
                                                                       value="true"),)),),
            timeout_ms=10_000))  # fmt: skip
    except (ConnectionError, OSError, TimeoutError):
        return None
    r = resp.topics[0]
    if r.error_code == 0:
        return r.topic_id
    assert r.error_code in RETRIABLE_CREATE, resp
    return None


def assert_exactly_once(prod: Producers, found: dict[int, list]) -> None:
    """Every batch ``prod`` had acknowledged is in ``found`` (``find_all``'s answer) once, at
    the offset it was acknowledged with, and no producer sequence is there twice."""
    seen: dict[tuple[int, int, int], int] = {}
    for batches in found.values():
        for base, _last, key, byte_offset, _pid, _seq in batches:
            b = prod.attempts[key][byte_offset // 100]
            ident = (b.pid, b.partition, b.seq)
            assert ident not in seen, ("duplicated", ident)
            seen[ident] = base
    lost = {k: v for k, v in prod.acked.items() if seen.get(k) != v}
    assert not lost, ("lost or moved", lost)
    assert prod.acked, "nothing was acknowledged"


@contextlib.asynccontextmanager
async def commit_load(prod: Producers, pids: Sequence[int], rounds: int = 400,
                      pause_s: float = 0.05) -> AsyncIterator[None]:  # fmt: skip
    """Every producer of ``pids`` commits once per round (``pause_s`` s apart, at most
    ``rounds`` rounds) while the body runs; on the way out the load stops after its round and
    its failure, if any, is raised."""
    stop = asyncio.Event()

    async def load() -> None:
        n = 0
        while not stop.is_set() and n < rounds:
            await asyncio.gather(*(prod.produce(pid, 1) for pid in pids))
            n += 1
            await asyncio.sleep(pause_s)

    task = asyncio.ensure_future(load())
    try:
        yield
    finally:
        stop.set()
        await task
