"""KIP-1164 on a real in-process server (real sockets, the metadata log on disk): the controller
creates ``__diskless-metadata`` once the node's broker is registered (internal in Metadata, not
diskless), AssignPartitionToBatchCoordinator on the controller listener writes the mapping (per
entry errors), the broker listener does not serve it, and the mapping survives a restart."""

from __future__ import annotations

import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.coordinator_mapping import DISKLESS_METADATA_TOPIC, coordinator_partition
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.integration.conftest import TIMEOUT, Peer, start_server
from tests.waiting import until

pytestmark = pytest.mark.integration

CT = codec.module("CreateTopicsRequest")
AQ = codec.module("AssignPartitionToBatchCoordinatorRequest")
MD = codec.module("MetadataRequest")


def assign(*entries):
    return AQ.AssignPartitionToBatchCoordinatorRequest(
        topics=tuple(
            AQ.AssignTopicToBatchCoordinator(
                topic_id=tid,
                partitions=tuple(
                    AQ.AssignTopicPartitionToBatchCoordinator(
                        partition_index=p, batch_coordinator_partition_index=c
                    )
                    for p, c in parts
                ),
            )
            for tid, parts in entries
        )
    )


async def test_metadata_topic_created_and_partitions_assigned(tmp_path):
    running = await start_server(tmp_path, **{"diskless.metadata.topic.num.partitions": "2"})
    try:
        server = running.server
        await until(
            lambda: server.controller.image.topic_by_name(DISKLESS_METADATA_TOPIC) is not None,
            "__diskless-metadata",
            timeout=3 * TIMEOUT,
        )
        meta = server.controller.image.topic_by_name(DISKLESS_METADATA_TOPIC)
        # the default replication factor of a node alone (one static voter): 1
        assert {i: p.replicas for i, p in meta.partitions.items()} == {0: (1,), 1: (1,)}
        assert not server.controller.image.topic_configs(DISKLESS_METADATA_TOPIC)

        broker = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}",
                                              request_timeout=TIMEOUT)  # fmt: skip
        controller = await KafkaRpcClient.connect(f"127.0.0.1:{running.port('CONTROLLER')}",
                                                  request_timeout=TIMEOUT)  # fmt: skip
        try:
            md = await broker.request(MD.MetadataRequest(topics=None), version=12)
            internal = {t.name: t.is_internal for t in md.topics}
            assert internal[DISKLESS_METADATA_TOPIC] is True

            resp = await broker.request(
                CT.CreateTopicsRequest(
                    topics=(
                        CT.CreatableTopic(
                            name="d", num_partitions=3, replication_factor=1,
                            configs=(CT.CreatableTopicConfig(name="diskless.enable",
                                                             value="true"),),
                        ),
                    ),
                    timeout_ms=5000,
                )
            )  # fmt: skip
            assert resp.topics[0].error_code == 0
            d = resp.topics[0].topic_id

            unknown = uuid.uuid4()
            resp = await controller.request(
                assign((d, [(0, 1), (1, 2), (5, 0)]), (unknown, [(0, 0)]))
            )
            got = [(t.topic_id, p.partition_index, p.error_code)
                   for t in resp.responses for p in t.partitions]  # fmt: skip
            assert got == [
                (d, 0, 0),
                (d, 1, ErrorCode.INVALID_PARTITIONS),
                (d, 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                (unknown, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
            ]
            # answered after commit: the committed image already has it
            img = server.controller.image
            assert [coordinator_partition(img, d, p) for p in range(3)] == [1, 0, 0]
        finally:
            await broker.close()
            await controller.close()

        # the broker listener does not serve key 99: the connection is closed (unknown API)
        peer = await Peer.open(running.port())
        try:
            peer.send(assign((d, [(0, 0)])), 0, corr=7)
            await peer.assert_closed()
        finally:
            await peer.close()
    finally:
        await running.stop()

    # a restart replays the log (or its snapshot): the mapping and the topic are back, once
    running = await start_server(tmp_path, **{"diskless.metadata.topic.num.partitions": "2"})
    try:
        server = running.server
        await until(lambda: d in server.controller.image.topics, "the log replayed",
                    timeout=3 * TIMEOUT)  # fmt: skip
        img = server.controller.image
        assert coordinator_partition(img, d, 0) == 1
        assert img.topic_by_name(DISKLESS_METADATA_TOPIC).topic_id == meta.topic_id
    finally:
        await running.stop()


CB = codec.module("CommitBatchesRequest")
FB = codec.module("FindDisklessBatchesRequest")
LO = codec.module("ListDisklessOffsetsRequest")
DR = codec.module("DeleteDisklessRecordsRequest")


def commit(topic_id, object_key: str, partitions):
    """One object with a 10-record batch per partition of ``partitions``, 100 bytes each."""
    parts = tuple(
        CB.CommitBatchesTopicPartition(
            partition_index=p, object_key=object_key, byte_offset=100 * i, size=100,
            base_offset=0, last_offset=9, batch_max_timestamp=1000, message_timestamp_type=0,
            producer_id=-1, producer_epoch=-1, base_sequence=-1, last_sequence=-1,
        )
        for i, p in enumerate(partitions)
    )  # fmt: skip
    topic = CB.CommitBatchesTopic(topic_id=topic_id, partitions=parts)
    return CB.CommitBatchesRequest(broker_id=1, batches=(CB.Batches(topics=(topic,)),))


async def test_entries_of_another_coordinator_answer_not_coordinator(tmp_path):
    # a standalone coordinator (by URL) is coordinator partition 0 only
    running = await start_server(tmp_path, **{"diskless.metadata.topic.num.partitions": "2",
                                              "diskless.coordinator.url": "memory://"})
    server = running.server
    broker = controller = None
    try:
        await until(
            lambda: server.controller.image.topic_by_name(DISKLESS_METADATA_TOPIC) is not None,
            "__diskless-metadata",
            timeout=3 * TIMEOUT,
        )
        broker = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}",
                                              request_timeout=TIMEOUT)  # fmt: skip
        controller = await KafkaRpcClient.connect(f"127.0.0.1:{running.port('CONTROLLER')}",
                                                  request_timeout=TIMEOUT)  # fmt: skip
        resp = await broker.request(
            CT.CreateTopicsRequest(
                topics=(
                    CT.CreatableTopic(
                        name="d", num_partitions=3, replication_factor=1,
                        configs=(CT.CreatableTopicConfig(name="diskless.enable", value="true"),),
                    ),
                ),
                timeout_ms=5000,
            )
        )  # fmt: skip
        d = resp.topics[0].topic_id
        resp = await controller.request(assign((d, [(1, 1)])))
        assert resp.responses[0].partitions[0].error_code == 0

        async def mirrored() -> bool:  # the publisher initialized d on the local coordinator
            got = await server.coordinator.list_partitions()
            return sum(tp.topic_id == d for tp in got) == 3

        await until(mirrored, "d in the coordinator", timeout=3 * TIMEOUT)

        # one object, partitions 0, 1, 2: 1 belongs to coordinator 1, which this node does not
        # serve; 0 and 2 commit
        resp = await broker.request(commit(d, "obj-1", [0, 1, 2]))
        got = [(p.partition_index, p.error_code, p.assigned_base_offset)
               for t in resp.topics for p in t.partitions]  # fmt: skip
        assert got == [(0, 0, 0), (1, ErrorCode.NOT_COORDINATOR, -1), (2, 0, 0)]
        # an object whose every entry is another coordinator's: nothing committed
        resp = await broker.request(commit(d, "obj-2", [1]))
        assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR

        find = FB.FindDisklessBatchesRequest(
            topics=(
                FB.FindDisklessBatchTopic(
                    topic_id=d,
                    partitions=tuple(
                        FB.FindDisklessBatchTopicPartition(
                            partition_index=p, offset=0, max_bytes=1 << 20
                        )
                        for p in (0, 1)
                    ),  # fmt: skip
                ),
            ),
            max_bytes=1 << 20,
        )
        resp = await broker.request(find)
        got = [(p.partition_index, p.error_code, p.object_key, p.high_watermark)
               for t in resp.responses for p in t.partitions]  # fmt: skip
        assert got == [(0, 0, "obj-1", 10), (1, ErrorCode.NOT_COORDINATOR, "", -1)]

        offsets = LO.ListDisklessOffsetsRequest(
            topics=(
                LO.ListDisklessOffsetsTopic(
                    topic_id=d,
                    partitions=tuple(
                        LO.ListDisklessOffsetsTopicPartition(partition_index=p, timestamp=-1)
                        for p in (1, 2)
                    ),
                ),
            )
        )
        resp = await broker.request(offsets)
        got = [(p.partition_index, p.error_code, p.offset)
               for t in resp.responses for p in t.partitions]  # fmt: skip
        assert got == [(1, ErrorCode.NOT_COORDINATOR, -1), (2, 0, 10)]

        delete = DR.DeleteDisklessRecordsRequest(
            topics=(
                DR.DeleteDisklessTopicRecords(
                    topic_id=d,
                    partitions=tuple(
                        DR.DeleteDisklessPartitionRecords(partition_index=p, offset=5)
                        for p in (0, 1)
                    ),
                ),
            )
        )
        resp = await broker.request(delete)
        got = [(p.partition_index, p.error_code, p.low_watermark)
               for t in resp.responses for p in t.partitions]  # fmt: skip
        assert got == [(0, 0, 5), (1, ErrorCode.NOT_COORDINATOR, -1)]

        # a node holding a replica of coordinator 1 answers its reads, not its writes
        server.batch_coordinator_partitions = lambda write: frozenset({0} if write else {0, 1})
        resp = await broker.request(offsets)
        assert [p.error_code for t in resp.responses for p in t.partitions] == [0, 0]
        resp = await broker.request(commit(d, "obj-3", [1]))
        assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
        # the node of coordinator 1 only: partition 0 (unmapped: coordinator 0) is not its own
        server.batch_coordinator_partitions = lambda write: frozenset({1})
        resp = await broker.request(commit(d, "obj-4", [0, 1]))
        got = [(p.partition_index, p.error_code, p.assigned_base_offset)
               for t in resp.topics for p in t.partitions]  # fmt: skip
        assert got == [(0, ErrorCode.NOT_COORDINATOR, -1), (1, 0, 0)]
    finally:
        for c in (broker, controller):
            if c is not None:
                await c.close()
        await running.stop()
