"""Per-topic retention from the metadata log, on a real in-process server with
its SQLite coordinator: diskless topics created with CreateTopics and ``retention.ms`` /
``retention.bytes`` configs are trimmed by the retention task by their own limits, others by
``log.retention.*``; a topic that overrides with -1 keeps everything; InitDisklessTopics topics
(no metadata-log topic) keep the broker defaults; a partition of another Batch Coordinator is
left alone. Plus the pure rule (``kafka_rpc.broker.retention``)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from pyrsistent import pmap

from kafka_rpc.broker.retention import retention_requests, topic_retention
from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.image import EMPTY, RESOURCE_TOPIC, TopicImage, evolve
from kafka_rpc.coordinator.api import ListOffsetsRequest
from kafka_rpc.coordinator.api import TopicIdPartition as TP
from kafka_rpc.protocol import codec
from tests.integration.conftest import TIMEOUT, start_server
from tests.waiting import until

CT = codec.module("CreateTopicsRequest")
CB = codec.module("CommitBatchesRequest")
ID = codec.module("InitDisklessTopicsRequest")
AQ = codec.module("AssignPartitionToBatchCoordinatorRequest")


def test_topic_configs_override_the_broker_defaults():
    a, b, c = (uuid.UUID(int=i) for i in (10, 11, 12))
    img = evolve(
        EMPTY,
        topics=pmap({a: TopicImage("a", a), b: TopicImage("b", b)}),
        topics_by_name=pmap({"a": a, "b": b}),
        configs=pmap(
            {(RESOURCE_TOPIC, "a"): pmap({"retention.ms": "-1", "retention.bytes": "150"})}
        ),  # fmt: skip
    )
    assert topic_retention(img, a, 60_000, -1) == (-1, 150)
    assert topic_retention(img, b, 60_000, -1) == (60_000, -1)
    assert topic_retention(img, c, 5, 6) == (5, 6)  # not in the image: defaults
    assert topic_retention(None, a, 5, 6) == (5, 6)
    parts = [TP(a, 0), TP(b, 0), TP(b, 1), TP(c, 0)]
    reqs = retention_requests(img, parts, -1, -1)
    assert [(r.topic_id_partition, r.retention_bytes, r.retention_ms) for r in reqs] == [
        (TP(a, 0), 150, -1)
    ]  # b and c have no limit at all: not asked
    reqs = retention_requests(img, parts, 1000, -1, owns=lambda t, p: p == 0)
    assert [r.topic_id_partition for r in reqs] == [TP(a, 0), TP(b, 0), TP(c, 0)]


def commit(topic_id, key: str, ts: int, records: int = 10):
    p = CB.CommitBatchesTopicPartition(
        partition_index=0, object_key=key, byte_offset=0, size=100, base_offset=0,
        last_offset=records - 1, batch_max_timestamp=ts, message_timestamp_type=0,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip
    topic = CB.CommitBatchesTopic(topic_id=topic_id, partitions=(p,))
    return CB.CommitBatchesRequest(broker_id=1, batches=(CB.Batches(topics=(topic,)),))


@pytest.mark.integration
async def test_retention_task_uses_each_topics_configs(tmp_path):
    running = await start_server(
        tmp_path,
        **{
            "log.retention.ms": "60000",
            "log.retention.bytes": "-1",
            "log.retention.check.interval.ms": "0",  # the test runs the task itself
            "diskless.metadata.topic.num.partitions": "2",
            # a standalone coordinator: coordinator partition 0 only, so the mapping to 1 below
            # is another node's
            "diskless.coordinator.url": f"sqlite://{tmp_path}/coordinator.db",
        },
    )
    server = running.server
    client = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}", request_timeout=TIMEOUT)
    controller = await KafkaRpcClient.connect(
        f"127.0.0.1:{running.port('CONTROLLER')}", request_timeout=TIMEOUT
    )
    try:
        await asyncio.wait_for(server.broker_lifecycle.unfenced.wait(), 3 * TIMEOUT)
        specs = {
            "plain": (),  # log.retention.ms 60 s: an hour-old batch goes
            "forever": (("retention.ms", "-1"),),
            "small": (("retention.ms", "-1"), ("retention.bytes", "150")),
            "elsewhere": (("retention.bytes", "150"),),  # mapped to coordinator 1
        }
        resp = await client.request(
            CT.CreateTopicsRequest(
                topics=tuple(
                    CT.CreatableTopic(
                        name=n, num_partitions=1, replication_factor=1,
                        configs=tuple(CT.CreatableTopicConfig(name=k, value=v)
                                      for k, v in (("diskless.enable", "true"), *cfg)),
                    )
                    for n, cfg in specs.items()
                ),
                timeout_ms=5000,
            )
        )  # fmt: skip
        assert [t.error_code for t in resp.topics] == [0] * 4
        ids = {t.name: t.topic_id for t in resp.topics}
        pipeline = uuid.uuid4()  # InitDisklessTopics: not in the metadata log, broker defaults
        await client.request(
            ID.InitDisklessTopicsRequest(
                topics=(ID.InitDisklessTopic(topic_id=pipeline, num_partitions=1),)
            )
        )
        ids["pipeline"] = pipeline

        async def reached():
            return (
                server.controller.image.topic_by_name("__diskless-metadata") is not None
                and len({tp.topic_id for tp in await server.coordinator.list_partitions()}) >= 5
            )

        await until(reached, "the topics in the coordinator", timeout=3 * TIMEOUT)
        resp = await controller.request(
            AQ.AssignPartitionToBatchCoordinatorRequest(
                topics=(
                    AQ.AssignTopicToBatchCoordinator(
                        topic_id=ids["elsewhere"],
                        partitions=(
                            AQ.AssignTopicPartitionToBatchCoordinator(
                                partition_index=0, batch_coordinator_partition_index=1
                            ),
                        ),
                    ),
                )
            )
        )
        assert resp.responses[0].partitions[0].error_code == 0
        hour_ago = int(time.time() * 1000) - 3_600_000
        # "elsewhere" is written as coordinator 1's node would write it: this node serves both
        # coordinators for the commits, then only its own (0) again for the retention task
        server.batch_coordinator_partitions = lambda write: frozenset({0, 1})
        for name, tid in ids.items():
            for i in range(3):
                r = await client.request(commit(tid, f"{name}-{i}", hour_ago))
                assert r.topics[0].partitions[0].error_code == 0
        del server.batch_coordinator_partitions  # back to Server's own answer: {0}

        deleted = await server.enforce_retention_once()
        starts = await server.coordinator.list_offsets(
            [ListOffsetsRequest(TP(tid, 0), -2) for tid in ids.values()]
        )
        got = dict(zip(ids, [r.offset for r in starts], strict=True))
        assert got["plain"] == 30 and got["pipeline"] == 30  # all three batches expired
        assert got["forever"] == 0
        assert got["small"] == 20  # 3 x 100 bytes, at most 150 kept: the newest batch stays
        assert got["elsewhere"] == 0  # another coordinator's partition: not this node's task
        assert deleted == 3 + 3 + 2
    finally:
        await client.close()
        await controller.close()
        await running.stop()
