"""``diskless.coordinator.url=raft:///dir`` "from the metadata log" (the default form,
``kafka_rpc.coordinator.assigned``): the replica of ``__diskless-metadata`` partition 0 starts once
the controller created the topic with this node among its replicas, with the image's topic id.

* one in-process server over real sockets: the coordinator comes up on its own, a
  CommitBatches / FindDisklessBatches round trip succeeds, ``partition.metadata`` names the
  controller's topic id; before it runs, a direct call raises COORDINATOR_NOT_AVAILABLE (15);
* three ``kafka-rpc serve`` processes, every one with the same ``raft://coordinator`` URL (no
  voters, no topic id; relative to each node's own directory) and ``__diskless-metadata`` of 3
  partitions (3 Raft groups over the 3 nodes): a diskless topic's partitions mapped to
  coordinator partitions 0 (unmapped), 1 and 2 are committed through each one's leader and found
  on every replica, a follower answers NOT_COORDINATOR, one object over two coordinator
  partitions commits the part its receiver leads, and FindCoordinator on every node names each
  partition's Raft leader (``write:``) or the node itself (``read:``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.coordinator_mapping import DISKLESS_METADATA_TOPIC
from kafka_rpc.controller.image import evolve
from kafka_rpc.coordinator.api import CreateTopicAndPartitionsRequest, FindBatchRequest
from kafka_rpc.coordinator.assigned import AssignedBatchCoordinator, CoordinatorNotAvailableError
from kafka_rpc.coordinator.factory import create_coordinator
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.uuids import uuid_text
from kafka_rpc.storage import partition_metadata
from tests.integration.conftest import TIMEOUT, start_server
from tests.integration.test_controller_cluster import FAST_FAILOVER, broker_port, cluster_running
from tests.integration.test_crash import _F_PART, _F_TOPIC, Batch, commit_request
from tests.integration.test_diskless_e2e import M, _first_elem, mod
from tests.waiting import until

pytestmark = pytest.mark.integration

_I_TOPIC = _first_elem(mod("InitDisklessTopicsRequest"), "topics")
FC = codec.module("FindCoordinatorRequest")
NOT_COORDINATOR = 16
STEP = 15.0  # s, every wait of the 3-process test


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

            await until(writable, "a writable coordinator", timeout=3 * TIMEOUT)
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
    one) stops the replica (Kafka's InconsistentTopicIdException): logged, and a direct call keeps
    raising COORDINATOR_NOT_AVAILABLE, the RPCs answer NOT_COORDINATOR, never a false success."""
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

        await until(refused, "the replica refused", timeout=3 * TIMEOUT)
        assert server.coordinator.inner is None
        assert server.batch_coordinator_partitions(False) == frozenset()
        assert partition_metadata.read_topic_id(pdir) == other  # left as it was
        with pytest.raises(CoordinatorNotAvailableError):
            await server.coordinator.list_partitions()
        async with KafkaRpcClient(f"127.0.0.1:{running.port()}", request_timeout=TIMEOUT) as c:
            topic = uuid.uuid4()
            resp = await c.request(init_topic(topic, 1))  # a write it cannot take, as a commit
            assert resp.responses[0].error_code == NOT_COORDINATOR, resp
            resp = await c.request(commit_request(topic, "obj-1", [Batch(0, 1)]))
            assert [p.error_code for p in resp.topics[0].partitions] == [NOT_COORDINATOR]
    finally:
        await running.stop()


# -- three processes -------------------------------------------------------------------------


async def _client(cluster, i: int) -> KafkaRpcClient:
    return await KafkaRpcClient.connect(
        f"127.0.0.1:{broker_port(cluster.nodes[i])}", connect_timeout=3.0, request_timeout=5.0
    )


CT = codec.module("CreateTopicsRequest")
AQ = codec.module("AssignPartitionToBatchCoordinatorRequest")
DQ = codec.module("DescribeClusterRequest")


def b64(topic: uuid.UUID) -> str:
    return uuid_text(topic)


async def find_coordinators(client, keys) -> list[tuple[int, int]]:
    r = await client.request(
        FC.FindCoordinatorRequest(key_type=3, coordinator_keys=tuple(keys)), version=7
    )
    return [(k.error_code, k.node_id) for k in r.coordinators]


async def test_three_nodes_from_the_metadata_log(tmp_path):
    """Three coordinator partitions, each a Raft group over the three nodes: topic d's partitions
    mapped to coordinator partitions 0 (unmapped), 1 and 2 are committed through each one's
    leader, found from its followers, refused NOT_COORDINATOR by a follower, and FindCoordinator
    on any node names each partition's leader; an unmapped topic made by InitDisklessTopics
    stays with partition 0."""
    props = {
        **FAST_FAILOVER,
        "diskless.metadata.topic.num.partitions": "3",
        # relative to each node's own directory (the processes run there)
        "diskless.coordinator.url": "raft://coordinator?raft.election_timeout_ms=400"
        "&raft.fetch_timeout_ms=1000&write_timeout_ms=5000",
    }
    clients: dict[int, KafkaRpcClient] = {}
    async with cluster_running(tmp_path, budget=60.0, **props) as cluster:
        try:
            for i in cluster.nodes:
                clients[i] = await _client(cluster, i)
            any_client = clients[1]

            # topic d (diskless, 3 partitions): the publishers initialize it on every
            # coordinator partition's leader; d-1 -> coordinator 1, d-2 -> coordinator 2
            async def created():
                resp = await any_client.request(CT.CreateTopicsRequest(
                    topics=(CT.CreatableTopic(name="d", num_partitions=3, replication_factor=3,
                            configs=(CT.CreatableTopicConfig(name="diskless.enable",
                                                             value="true"),)),),
                    timeout_ms=10_000))  # fmt: skip
                code = resp.topics[0].error_code
                if code == 0:
                    return resp.topics[0].topic_id
                # REQUEST_TIMED_OUT: no active controller yet; INVALID_REPLICATION_FACTOR: the
                # brokers are not all unfenced yet; TOPIC_ALREADY_EXISTS: a timed out attempt
                # created it
                assert code in (7, 36, 38), resp
                md = await any_client.request(
                    codec.message_class("MetadataRequest")(topics=None), version=12
                )
                return next((t.topic_id for t in md.topics if t.name == "d"), None)

            d = await until(created, "topic d", timeout=STEP)

            async def coordinators_listed():  # AssignPartitionToBatchCoordinator checks the range
                md = await any_client.request(
                    codec.message_class("MetadataRequest")(topics=None), version=12
                )
                t = next((t for t in md.topics if t.name == DISKLESS_METADATA_TOPIC), None)
                return t is not None and len(t.partitions) == 3

            await until(coordinators_listed, f"{DISKLESS_METADATA_TOPIC} listed", timeout=STEP)
            async with KafkaRpcClient(cluster.nodes[1].address) as c:
                active = (await c.request(DQ.DescribeClusterRequest(endpoint_type=2))).controller_id
            async with KafkaRpcClient(cluster.nodes[active].address) as c:
                resp = await c.request(AQ.AssignPartitionToBatchCoordinatorRequest(
                    topics=(AQ.AssignTopicToBatchCoordinator(topic_id=d, partitions=tuple(
                        AQ.AssignTopicPartitionToBatchCoordinator(
                            partition_index=p, batch_coordinator_partition_index=p)
                        for p in (1, 2))),)))  # fmt: skip
            assert [p.error_code for t in resp.responses for p in t.partitions] == [0, 0], resp

            leaders: dict[int, int] = {}  # d's partition p == coordinator partition p -> leader
            attempts: dict[int, int] = {}
            last: dict[int, tuple] = {}  # the last FindCoordinator / commit outcome

            async def committed(p: int):
                # the node FindCoordinator names for write:d-p takes the commit; a follower of
                # that coordinator partition refuses it
                ((code, node),) = await find_coordinators(any_client, [f"write:{b64(d)}:{p}"])
                last[p] = (code, node)
                if code != 0 or node not in clients:
                    return None
                attempts[p] = attempts.get(p, 0) + 1  # a retry is a new object
                key = f"obj-d{p}-{attempts[p]}"
                resp = await clients[node].request(commit_request(d, key, [Batch(p, 2)]))
                (e,) = resp.topics[0].partitions
                last[p] = (code, node, e.error_code)
                if e.error_code != 0:  # not yet initialized there / leader moving / loading
                    assert e.error_code in (3, NOT_COORDINATOR, 15, 14), resp
                    return None
                assert e.assigned_base_offset == 0
                leaders[p] = node
                return node

            for p in (0, 1, 2):
                try:
                    await until(lambda p=p: committed(p), f"a commit to d-{p}", timeout=STEP)
                except AssertionError as e:
                    raise AssertionError(f"{e}; last {last}") from None
            for p in (0, 1, 2):
                wrong = next(i for i in clients if i != leaders[p])
                resp = await clients[wrong].request(commit_request(d, f"x-{p}", [Batch(p, 1)]))
                assert [e.error_code for e in resp.topics[0].partitions] == [NOT_COORDINATOR]

                async def on_followers(p=p):  # every replica (all three) finds the batch
                    for i, c in clients.items():
                        resp = await c.request(find_request(d, p))
                        if any(e.error_code for e in resp.responses[0].partitions):
                            return False
                        if found(resp) != [(0, 1, f"obj-d{p}-{attempts[p]}")]:
                            return False
                    return True

                await until(on_followers, f"d-{p} on every replica", timeout=STEP)

            # one object over coordinator partitions 1 and 2, sent to 1's leader: its entry
            # commits; 2's entry commits too if the same node leads 2, else NOT_COORDINATOR
            resp = await clients[leaders[1]].request(
                commit_request(d, "obj-12", [Batch(1, 1), Batch(2, 1)])
            )
            got = [(e.error_code, e.assigned_base_offset) for e in resp.topics[0].partitions]
            same = leaders[1] == leaders[2]
            assert got == [(0, 2), (0, 2) if same else (NOT_COORDINATOR, -1)], (got, leaders)

            # FindCoordinator on every node names each coordinator partition's leader (write:)
            # and the node itself (read:, every node holds a replica of each)
            keys = [f"write:{b64(d)}:{p}" for p in (0, 1, 2)] + [f"read:{b64(d)}:2"]
            for i, c in clients.items():
                want = [(0, leaders[p]) for p in (0, 1, 2)] + [(0, i)]
                assert await find_coordinators(c, keys) == want, (i, leaders)

            # an unmapped topic made by InitDisklessTopics belongs to coordinator partition 0
            topic = uuid.uuid4()
            for c in clients.values():  # each node initializes it on the partitions it leads
                resp = await c.request(init_topic(topic, 2))
                assert resp.responses[0].error_code in (0, NOT_COORDINATOR), resp
            leader = leaders[0]
            resp = await clients[leader].request(
                commit_request(topic, "obj-1", [Batch(0, 3), Batch(1, 2)])
            )
            assert [p.error_code for p in resp.topics[0].partitions] == [0, 0], resp
            follower = next(i for i in clients if i != leader)
            # the same commit to a follower: NOT_COORDINATOR, nothing committed there
            resp = await clients[follower].request(commit_request(topic, "obj-2", [Batch(0, 1)]))
            assert [p.error_code for p in resp.topics[0].partitions] == [NOT_COORDINATOR]

            async def on_follower():  # its replica may lag the commit
                resp = await clients[follower].request(find_request(topic, 0))
                if any(p.error_code for p in resp.responses[0].partitions):
                    return False
                return found(resp) == [(0, 2, "obj-1")]

            await until(on_follower, "the commit on a follower", timeout=STEP)
            assert found(await clients[follower].request(find_request(topic, 1))) == [
                (0, 1, "obj-1")
            ]

            # every node holds the image's topic id in each partition directory
            meta_ids = {
                partition_metadata.read_topic_id(
                    n.home / "coordinator" / f"{DISKLESS_METADATA_TOPIC}-{p}"
                )
                for n in cluster.nodes.values()
                for p in (0, 1, 2)
            }
            assert len(meta_ids) == 1 and None not in meta_ids, meta_ids
            md = await clients[follower].request(
                codec.message_class("MetadataRequest")(topics=None), version=12
            )
            (meta,) = [t for t in md.topics if t.name == DISKLESS_METADATA_TOPIC]
            assert meta_ids == {meta.topic_id}  # the controller's topic id on every replica
        finally:
            for c in clients.values():
                await c.close()
