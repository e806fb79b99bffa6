"""What the multi-process tests of the default Batch Coordinator share: creating the diskless
topic through a broker, and the final check that every acknowledged commit of a
``Producers`` load is found exactly once, at the offset it was given."""

from __future__ import annotations

import uuid

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
