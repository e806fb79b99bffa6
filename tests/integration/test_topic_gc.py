"""Topic ids and what they leave behind, on a real in-process server (SQLite coordinator, real
sockets): the metadata log directory's ``partition.metadata``; a topic created with
``diskless.enable=true`` shows up in the Batch Coordinator; DeleteTopics removes it there (its
batches' object becomes a file to delete) and removes the partition directory naming its id; the
same name re-created gets a new id and an empty log; the InitDisklessTopics pipeline's topic is
left alone; after a restart the node removes a stray directory once it has caught up."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.coordinator.api import ListOffsetsRequest, TopicIdPartition
from kafka_rpc.protocol import codec
from kafka_rpc.storage import partition_metadata as pm
from tests.integration.conftest import TIMEOUT, start_server
from tests.waiting import until

pytestmark = pytest.mark.integration

CT = codec.module("CreateTopicsRequest")
DT = codec.module("DeleteTopicsRequest")
ID = codec.module("InitDisklessTopicsRequest")
CB = codec.module("CommitBatchesRequest")
WAIT = 3 * TIMEOUT  # s, the cap of every wait for the server to catch up


def create_req(name: str, partitions: int, diskless: bool):
    configs = (CT.CreatableTopicConfig(name="diskless.enable", value="true"),) if diskless else ()
    return CT.CreateTopicsRequest(
        topics=(
            CT.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1, configs=configs
            ),
        ),
        timeout_ms=5000,
    )


def commit_req(topic_id: uuid.UUID, object_key: str):
    part = CB.CommitBatchesTopicPartition(
        partition_index=0, object_key=object_key, byte_offset=0, size=100, base_offset=0,
        last_offset=9, batch_max_timestamp=1000, message_timestamp_type=0, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip
    topic = CB.CommitBatchesTopic(topic_id=topic_id, partitions=(part,))
    return CB.CommitBatchesRequest(broker_id=1, batches=(CB.Batches(topics=(topic,)),))


async def partitions(coordinator) -> dict[uuid.UUID, int]:
    out: dict[uuid.UUID, int] = {}
    for tp in await coordinator.list_partitions():
        out[tp.topic_id] = out.get(tp.topic_id, 0) + 1
    return out


def partition_dir(data, name: str, topic_id: uuid.UUID):
    d = data / name
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"")
    pm.write(d, topic_id)
    return d


async def test_diskless_topic_created_deleted_recreated_and_collected(tmp_path):
    data = tmp_path / "data"
    running = await start_server(tmp_path)
    try:
        server = running.server
        meta = data / "__cluster_metadata-0" / "partition.metadata"
        assert meta.read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
        await asyncio.wait_for(server.broker_lifecycle.unfenced.wait(), TIMEOUT)
        coordinator = server.coordinator
        client = await KafkaRpcClient.connect(f"127.0.0.1:{running.port()}",
                                              request_timeout=TIMEOUT)  # fmt: skip
        try:
            resp = await client.request(create_req("events", 3, diskless=True))
            assert resp.topics[0].error_code == 0
            events = resp.topics[0].topic_id
            resp = await client.request(create_req("plain", 1, diskless=False))
            assert resp.topics[0].error_code == 0
            plain = resp.topics[0].topic_id

            async def events_mirrored():
                return (await partitions(coordinator)).get(events) == 3

            await until(events_mirrored, "the diskless topic in the coordinator", timeout=WAIT)
            assert plain not in await partitions(coordinator)

            # the load pipeline's own topic, through the diskless RPC: never in the image
            pipeline = uuid.uuid4()
            init = ID.InitDisklessTopicsRequest(
                topics=(ID.InitDisklessTopic(topic_id=pipeline, num_partitions=2),)
            )
            assert [r.error_code for r in (await client.request(init)).responses] == [0]

            # a batch in partition 0, through the diskless RPC
            r = await client.request(commit_req(events, "obj-events"))
            [p] = [p for t in r.topics for p in t.partitions]
            assert (p.error_code, p.assigned_base_offset) == (0, 0)

            events_dir = partition_dir(data, "events-0", events)
            plain_dir = partition_dir(data, "plain-0", plain)

            resp = await client.request(
                DT.DeleteTopicsRequest(topic_names=("events",), timeout_ms=5000), version=5
            )
            assert [r.error_code for r in resp.responses] == [0]

            async def events_collected():
                return events not in await partitions(coordinator) and not events_dir.exists()

            await until(events_collected, "the deleted topic's partitions and directory to go",
                        timeout=WAIT)  # fmt: skip
            files = await coordinator.get_files_to_delete()
            assert [f.object_key for f in files] == ["obj-events"]
            assert plain_dir.is_dir()
            assert (await partitions(coordinator)).get(pipeline) == 2

            # the same name again: a new id, an empty log
            resp = await client.request(create_req("events", 3, diskless=True))
            assert resp.topics[0].error_code == 0
            events2 = resp.topics[0].topic_id
            assert events2 != events

            async def events2_mirrored():
                return (await partitions(coordinator)).get(events2) == 3

            await until(events2_mirrored, "the re-created topic in the coordinator", timeout=WAIT)
            [lo] = await coordinator.list_offsets(
                [ListOffsetsRequest(TopicIdPartition(events2, 0), -1)]
            )
            assert (lo.error, lo.offset) == (0, 0)
        finally:
            await client.close()
        publisher = server.metadata_publisher
        assert publisher is not None and publisher.running
        assert publisher.failed_attempts == 0
    finally:
        await running.stop()
    # stopped before the coordinator closed, and its task ended
    assert server.metadata_publisher is None and not publisher.running
    assert server.controller.publishers == []

    # a directory no image ever named, found after a restart: removed once caught up
    ghost = partition_dir(data, "ghost-0", uuid.uuid4())
    running = await start_server(tmp_path)
    try:
        server = running.server
        publisher = server.metadata_publisher

        async def reconciled():
            return publisher.is_caught_up and not ghost.exists()

        await until(reconciled, "the stray directory to be removed after the restart", timeout=WAIT)
        await asyncio.wait_for(publisher.wait_idle(), TIMEOUT)
        assert plain_dir.is_dir()
        held = await partitions(server.coordinator)
        assert held == {events2: 3, pipeline: 2}
        assert meta.read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    finally:
        await running.stop()


async def test_a_metadata_log_of_another_topic_id_stops_the_start(tmp_path):
    meta = tmp_path / "data" / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    other = uuid.uuid4()
    pm.write(meta, other)
    expected = "Tried to assign topic ID AAAAAAAAAAAAAAAAAAAAAQ to log for topic partition "
    with pytest.raises(pm.InconsistentTopicIdError, match=expected + "__cluster_metadata-0"):
        await start_server(tmp_path)
    assert pm.read(meta).topic_id == other
