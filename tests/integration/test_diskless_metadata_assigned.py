"""``diskless.coordinator.url=raft:///dir`` "from the metadata log" (issue 14,
``kafka_rpc.coordinator.assigned``): the replica of ``__diskless-metadata`` partition 0 starts once
the controller created the topic with this node among its replicas, with the image's topic id.

* one in-process server over real sockets: the coordinator comes up on its own, a
  CommitBatches / FindDisklessBatches round trip succeeds, ``partition.metadata`` names the
  controller's topic id; before it runs, a direct call raises COORDINATOR_NOT_AVAILABLE (15);
* three ``kafka-rpc serve`` processes, every one with the same ``raft://coordinator`` URL (no
  voters, no topic id; relative to each node's own directory): commits to the coordinator leader
  are found on a follower, and FindCoordinator ``write:`` on a follower names the Raft leader.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
import uuid

import pytest

from kafka_rpc.broker import partition_metadata
from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
from kafka_rpc.controller.coordinator_mapping import DISKLESS_METADATA_TOPIC
from kafka_rpc.controller.image import evolve
from kafka_rpc.coordinator import create_coordinator
from kafka_rpc.coordinator.api import CreateTopicAndPartitionsRequest, FindBatchRequest
from kafka_rpc.coordinator.assigned import AssignedBatchCoordinator, CoordinatorNotAvailableError
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from kafka_rpc.protocol import codec
from tests.integration.conftest import TIMEOUT, start_server
from tests.integration.test_controller_cluster import FAST_FAILOVER, broker_port, cluster_running
from tests.integration.test_crash import _F_PART, _F_TOPIC, Batch, commit_request
from tests.integration.test_diskless_e2e import M, _first_elem, mod

pytestmark = pytest.mark.integration

_I_TOPIC = _first_elem(mod("InitDisklessTopicsRequest"), "topics")
FC = codec.module("FindCoordinatorRequest")
NOT_COORDINATOR = 16
STEP = 15.0  # s, every wait of the 3-process test


async def until(predicate, what: str, timeout: float):
    """Await ``predicate()`` (a coroutine function) until it returns a truthy value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def init_topic(topic_id: uuid.UUID, partitions: int):
    return M("InitDisklessTopicsRequest")(
        topics=(_I_TOPIC(topic_id=topic_id, num_partitions=partitions),)
    )


def find_request(topic_id: uuid.UUID, partition: int):
    return M("FindDisklessBatchesRequest")(
        topics=(_F_TOPIC(topic_id=topic_id, partitions=(
            _F_PART(partition_index=partition, offset=0, max_bytes=1 << 20),)),),
        max_bytes=1 << 20,
    )  # fmt: skip


def found(resp) -> list[tuple[int, int, str]]:
    """(base offset, last offset, object key) of every batch a FindDisklessBatches answered."""
    parts = resp.responses[0].partitions
    assert all(p.error_code == 0 for p in parts), parts
    return [(p.base_offset, p.last_offset, p.object_key) for p in parts if p.object_key]


def test_url_without_voters_or_topic_id_is_from_the_metadata_log(tmp_path):
    c = create_coordinator(f"raft://{tmp_path}?synchronous=OFF&raft.election_timeout_ms=300")
    assert isinstance(c, AssignedBatchCoordinator)
    assert c.served_partitions(True) == c.served_partitions(False) == frozenset()
    assert c.leader_id == -1
    # any of node_id / voters / topic_id keeps the static form
    static = create_coordinator(f"raft://{tmp_path}?node_id=2")
    assert isinstance(static, ReplicatedBatchCoordinator)
    with pytest.raises(ValueError):
        create_coordinator(f"raft://{tmp_path}?partition=1")


async def test_not_running_answers_coordinator_not_available(tmp_path):
    c = create_coordinator(f"raft://{tmp_path}")
    tp_topic = uuid.uuid4()
    calls = [
        lambda: c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tp_topic, "t", 1)]),
        lambda: c.find_batches([FindBatchRequest(_tp(tp_topic), 0, 100)], 100),
        c.list_partitions,
        lambda: c.delete_files(["k"]),
        lambda: c.is_safe_to_delete_file("k"),
    ]
    for call in calls:
        with pytest.raises(CoordinatorNotAvailableError) as e:
            await call()
        assert e.value.error_code == 15
    await c.close()


def _tp(topic_id: uuid.UUID):
    from kafka_rpc.coordinator.api import new_topic_id_partition

    return new_topic_id_partition(topic_id, 0)


async def test_one_server_starts_its_replica_from_the_image(tmp_path, caplog):
    coord_dir = tmp_path / "coordinator"
    caplog.set_level("WARNING", logger="kafka_rpc.coordinator.assigned")
    running = await start_server(tmp_path, **{"diskless.coordinator.url": f"raft://{coord_dir}"})
    try:
        server = running.server
        assert isinstance(server.coordinator, AssignedBatchCoordinator)
        await asyncio.wait_for(server.coordinator.started.wait(), 3 * TIMEOUT)
        meta = server.controller.image.topic_by_name(DISKLESS_METADATA_TOPIC)
        assert meta.partitions[0].replicas == (1,)
        pdir = coord_dir / f"{DISKLESS_METADATA_TOPIC}-0"
        assert partition_metadata.read_topic_id(pdir) == meta.topic_id
        assert server.coordinator.topic_id == meta.topic_id

        topic = uuid.uuid4()
        async with KafkaRpcClient(f"127.0.0.1:{running.port()}", request_timeout=TIMEOUT) as c:

            async def writable():  # elected and applied its epoch's start
                return server.coordinator.is_writable

            await until(writable, "a writable coordinator", 3 * TIMEOUT)
            resp = await c.request(init_topic(topic, 2))
            assert resp.responses[0].error_code == 0, resp
            batches = [Batch(0, 3), Batch(1, 2), Batch(0, 1)]
            resp = await c.request(commit_request(topic, "obj-1", batches))
            parts = resp.topics[0].partitions
            assert [(p.error_code, p.assigned_base_offset) for p in parts] == [
                (0, 0), (0, 0), (0, 3)
            ]  # fmt: skip
            assert found(await c.request(find_request(topic, 0))) == [
                (0, 2, "obj-1"), (3, 3, "obj-1")
            ]  # fmt: skip
            assert found(await c.request(find_request(topic, 1))) == [(0, 1, "obj-1")]

            # an image that moves the partition (reassignment, not supported) or re-creates the
            # topic with a new id is logged; the replica keeps running as it started
            inner = server.coordinator.inner
            image = server.controller.image
            moved = dataclasses.replace(
                meta, partitions=meta.partitions.set(
                    0, dataclasses.replace(meta.partitions[0], replicas=(1, 2)))
            )  # fmt: skip
            server.coordinator.on_metadata_update(image, evolve(image, topics=image.topics.set(
                meta.topic_id, moved)))  # fmt: skip
            new_id = uuid.uuid4()
            recreated = evolve(
                image,
                topics=image.topics.remove(meta.topic_id).set(
                    new_id, dataclasses.replace(meta, topic_id=new_id)
                ),
                topics_by_name=image.topics_by_name.set(DISKLESS_METADATA_TOPIC, new_id),
            )
            server.coordinator.on_metadata_update(image, recreated)
            warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            assert any("replicas [1, 2]" in m and "keeps running" in m for m in warned), warned
            assert any(str(new_id) in m and "keeps running" in m for m in warned), warned
            assert server.coordinator.inner is inner and inner.topic_id == meta.topic_id
            resp = await c.request(commit_request(topic, "obj-2", [Batch(1, 1)]))
            assert [p.assigned_base_offset for p in resp.topics[0].partitions] == [2]
    finally:
        await running.stop()


async def test_a_directory_of_another_topic_id_keeps_it_unavailable(tmp_path, caplog):
    """A partition directory naming another topic id (e.g. the static single-voter form's random
    one) stops the replica (Kafka's InconsistentTopicIdException): logged, and every call keeps
    answering COORDINATOR_NOT_AVAILABLE, never a false success."""
    coord_dir = tmp_path / "coordinator"
    pdir = coord_dir / f"{DISKLESS_METADATA_TOPIC}-0"
    pdir.mkdir(parents=True)
    other = uuid.uuid4()
    partition_metadata.ensure(pdir, other)
    caplog.set_level("ERROR", logger="kafka_rpc.coordinator.assigned")
    running = await start_server(tmp_path, **{"diskless.coordinator.url": f"raft://{coord_dir}"})
    try:
        server = running.server

        async def refused():
            return any("did not start" in r.getMessage() for r in caplog.records)

        await until(refused, "the replica refused", 3 * TIMEOUT)
        assert server.coordinator.inner is None
        assert server.batch_coordinator_partitions(False) == frozenset()
        assert partition_metadata.read_topic_id(pdir) == other  # left as it was
        with pytest.raises(CoordinatorNotAvailableError):
            await server.coordinator.list_partitions()
        async with KafkaRpcClient(f"127.0.0.1:{running.port()}", request_timeout=TIMEOUT) as c:
            topic = uuid.uuid4()
            resp = await c.request(init_topic(topic, 1))
            assert resp.responses[0].error_code == 15, resp
            resp = await c.request(commit_request(topic, "obj-1", [Batch(0, 1)]))
            assert [p.error_code for p in resp.topics[0].partitions] == [NOT_COORDINATOR]
    finally:
        await running.stop()


# -- three processes -------------------------------------------------------------------------


async def _client(cluster, i: int) -> KafkaRpcClient:
    return await KafkaRpcClient.connect(
        f"127.0.0.1:{broker_port(cluster.nodes[i])}", connect_timeout=3.0, request_timeout=5.0
    )


async def test_three_nodes_from_the_metadata_log(tmp_path):
    props = {
        **FAST_FAILOVER,
        # relative to each node's own directory (the processes run there)
        "diskless.coordinator.url": "raft://coordinator?raft.election_timeout_ms=400"
        "&raft.fetch_timeout_ms=1000&write_timeout_ms=5000",
    }
    clients: dict[int, KafkaRpcClient] = {}
    async with cluster_running(tmp_path, budget=60.0, **props) as cluster:
        try:
            for i in cluster.nodes:
                clients[i] = await _client(cluster, i)
            topic = uuid.uuid4()

            async def coordinator_leader():  # the node whose InitDisklessTopics succeeds
                for i, c in clients.items():
                    try:
                        resp = await c.request(init_topic(topic, 2))
                    except (KafkaConnectionError, OSError, TimeoutError):
                        continue
                    code = resp.responses[0].error_code
                    if code == 0:
                        return i
                    assert code in (NOT_COORDINATOR, 15), resp  # follower / not running yet
                return None

            leader = await until(coordinator_leader, "a coordinator leader", STEP)
            resp = await clients[leader].request(
                commit_request(topic, "obj-1", [Batch(0, 3), Batch(1, 2)])
            )
            assert [p.error_code for p in resp.topics[0].partitions] == [0, 0], resp
            follower = next(i for i in clients if i != leader)
            # the same commit to a follower: NOT_COORDINATOR, nothing committed there
            resp = await clients[follower].request(commit_request(topic, "obj-2", [Batch(0, 1)]))
            assert [p.error_code for p in resp.topics[0].partitions] == [NOT_COORDINATOR]

            async def on_follower():  # its replica may still be starting (16 until then)
                resp = await clients[follower].request(find_request(topic, 0))
                if any(p.error_code for p in resp.responses[0].partitions):
                    return False
                return found(resp) == [(0, 2, "obj-1")]

            await until(on_follower, "the commit on a follower", STEP)
            assert found(await clients[follower].request(find_request(topic, 1))) == [
                (0, 1, "obj-1")
            ]

            # every node holds the image's topic id in its partition directory
            meta_ids = {
                partition_metadata.read_topic_id(
                    n.home / "coordinator" / f"{DISKLESS_METADATA_TOPIC}-0"
                )
                for n in cluster.nodes.values()
            }
            assert len(meta_ids) == 1 and None not in meta_ids, meta_ids

            md = await clients[follower].request(
                codec.message_class("MetadataRequest")(topics=None), version=12
            )
            (meta,) = [t for t in md.topics if t.name == DISKLESS_METADATA_TOPIC]
            image_leader = meta.partitions[0].leader_id
            assert meta_ids == {meta.topic_id}  # the controller's topic id on every replica
            # FindCoordinator on the follower: write: is the Raft leader (the image's partition
            # leader is a random replica, so 2 runs in 3 tell them apart), read: the follower
            b64 = base64.urlsafe_b64encode(topic.bytes).decode().rstrip("=")
            keys = (f"write:{b64}:0", f"read:{b64}:1")
            r = await clients[follower].request(
                FC.FindCoordinatorRequest(key_type=3, coordinator_keys=keys), version=7
            )
            assert [(k.error_code, k.node_id, k.port) for k in r.coordinators] == [
                (0, leader, broker_port(cluster.nodes[leader])),
                (0, follower, broker_port(cluster.nodes[follower])),
            ], (r, image_leader)
        finally:
            for c in clients.values():
                await c.close()
