"""The broker's metadata publisher against a real SQLite Batch Coordinator (tmp dir) and real
partition directories, fed by a real QuorumController (no driver) to which a harness Cluster's
records are committed as record batches, or loaded as a snapshot: diskless topics are mirrored
(and grow), deleted ids are collected (coordinator batches -> files to delete, partition
directories), the InitDisklessTopics pipeline's topics are never touched, a restarted node
reconciles once caught up (mirror file, stray directories) and not before, failures are retried
with backoff and never reach the controller."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from kafka_rpc.broker.metadata_publisher import (
    MIRROR_FILE_NAME,
    BrokerMetadataPublisher,
    MirrorFile,
    caught_up_when_registered,
    diskless_topics,
)
from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.controller.snapshot import image_records
from kafka_rpc.coordinator.api import (
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)
from kafka_rpc.coordinator.factory import create_coordinator
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import encode_batch
from kafka_rpc.protocol.uuids import uuid_text
from kafka_rpc.raft.api import METADATA_TOPIC_ID, OffsetAndEpoch
from kafka_rpc.raft.memory import MemorySnapshotReader
from kafka_rpc.storage import partition_metadata as pm
from tests.controller.harness import CLUSTER, Cluster, topic
from tests.waiting import until

R = codec.message_class
DISKLESS = [("diskless.enable", "true")]
TIMEOUT = 10.0


class Node:
    """The log (a harness Cluster: commands -> records) and one node's QuorumController, to
    which the log's records are committed (``commit``) or loaded as a snapshot
    (``load_snapshot``)."""

    def __init__(self, cluster: Cluster | None = None) -> None:
        if cluster is None:
            cluster = Cluster()
            cluster.live(1)
        self.c = cluster
        self.qc = QuorumController(1, CLUSTER)
        self.committed = 0  # next offset to commit to qc

    def commit(self, upto: int | None = None) -> None:
        end = len(self.c.log) if upto is None else upto
        if end > self.committed:
            batch = encode_batch(self.committed, 1, self.c.log[self.committed : end], 0)
            self.qc.handle_commit([batch])
            self.committed = end

    def load_snapshot(self) -> None:
        """A snapshot of the whole log so far (KIP-630: the image written as records)."""
        records = image_records(self.c.image)
        data = b"".join(
            encode_batch(i, 1, records[i : i + 50], 0).data for i in range(0, len(records), 50)
        )
        end = len(self.c.log)
        self.qc.handle_load_snapshot(MemorySnapshotReader(OffsetAndEpoch(end, 1), data))
        self.committed = end

    def tid(self, name: str) -> uuid.UUID:
        return self.c.image.topics_by_name[name]


@pytest.fixture
async def coord(tmp_path):
    c = create_coordinator(f"sqlite://{tmp_path / 'coordinator.db'}")
    await c.start()
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
def data(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    return d


def publisher(coord, data, node: Node, **kw) -> BrokerMetadataPublisher:
    kw.setdefault("retry_backoff_ms", 10)
    kw.setdefault("retry_backoff_max_ms", 40)
    return BrokerMetadataPublisher(
        coord,
        [data],
        mirror_file=data / MIRROR_FILE_NAME,
        caught_up=caught_up_when_registered(1, lambda: node.c.incarnations.get(1)),
        **kw,
    )


async def idle(pub: BrokerMetadataPublisher) -> None:
    await asyncio.wait_for(pub.wait_idle(), TIMEOUT)


async def held(coord) -> dict[uuid.UUID, int]:
    out: dict[uuid.UUID, int] = {}
    for tp in await coord.list_partitions():
        out[tp.topic_id] = out.get(tp.topic_id, 0) + 1
    return out


def reregister(c: Cluster, incarnation: uuid.UUID) -> None:
    """Broker 1 restarted as a new process: its old session expires, the new one registers."""
    c.now += c.session_timeout_ms + 1
    assert c.register(1, incarnation=incarnation).response.error_code == 0


def partition_dir(data, name: str, topic_id: uuid.UUID | None):
    d = data / name
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(b"x" * 10)
    if topic_id is not None:
        pm.write(d, topic_id)
    return d


# ------------------------------------------------------------------ the controller hook
async def test_the_controller_calls_publishers_with_old_and_new_images(caplog):
    node = Node()
    seen: list[tuple[int, int]] = []

    def broken(old, new):
        raise RuntimeError("a broken publisher")

    node.qc.publishers += [broken, lambda old, new: seen.append((old.last_offset, new.last_offset))]
    node.c.create(topic("a", n=2))
    node.commit(1)
    node.commit()
    assert seen == [(-1, 0), (0, len(node.c.log) - 1)]
    assert node.qc.image == node.c.image
    # a redelivered batch changes nothing and publishes nothing
    node.qc.handle_commit([encode_batch(0, 1, node.c.log[:1], 0)])
    assert len(seen) == 2
    assert "metadata publisher" in caplog.text and "a broken publisher" in caplog.text
    # a snapshot load publishes the image it replaced and the loaded one
    before = len(node.c.log) - 1
    node.c.create(topic("t", configs=DISKLESS))
    node.load_snapshot()
    assert seen[-1] == (before, len(node.c.log) - 1)
    assert set(node.qc.image.topics_by_name) == {"a", "t"}


# ------------------------------------------------------------------ mirroring
async def test_diskless_topics_are_mirrored_and_grow(coord, data):
    node = Node()
    pub = publisher(coord, data, node)
    pub.start(node.qc)
    try:
        node.c.create(topic("d", n=3, configs=DISKLESS), topic("plain", n=2),
                      topic("off", configs=[("diskless.enable", "false")]))  # fmt: skip
        node.commit()
        await idle(pub)
        assert await held(coord) == {node.tid("d"): 3}
        assert diskless_topics(node.qc.image) == {node.tid("d"): ("d", 3)}
        assert MirrorFile(data / MIRROR_FILE_NAME).load() == {node.tid("d")}
        text = (data / MIRROR_FILE_NAME).read_text()
        assert text == f"version: 0\ntopic_id: {uuid_text(node.tid('d'))}\n"

        # a partition added to the topic (a PartitionRecord for index 3) is created too
        node.c.apply([R("PartitionRecord")(partition_id=3, topic_id=node.tid("d"), replicas=(1,),
                                           isr=(1,), leader=1, leader_epoch=0,
                                           partition_epoch=0)])  # fmt: skip
        node.commit()
        await idle(pub)
        assert await held(coord) == {node.tid("d"): 4}
        assert pub.failed_attempts == 0 and pub.rounds >= 2
    finally:
        await pub.stop()


async def test_delete_collects_batches_and_directories_and_a_recreate_starts_empty(
    coord, data, caplog
):
    caplog.set_level(logging.INFO, "kafka_rpc.broker.metadata_publisher")
    node = Node()
    pub = publisher(coord, data, node)
    pub.start(node.qc)
    try:
        node.c.create(topic("d", n=2, configs=DISKLESS), topic("plain"))
        node.commit()
        await idle(pub)
        d, plain = node.tid("d"), node.tid("plain")
        tp = TopicIdPartition(d, 0)
        [r] = await coord.commit_file("obj-d", 1, 100, [CommitBatchRequest(tp, 0, 100, 0, 9, 5, 0)])
        assert (r.error, r.assigned_base_offset) == (0, 0)
        # the load pipeline's topic: created through InitDisklessTopics, never in the image
        pipeline = uuid.uuid4()
        assert await coord.create_topic_and_partitions(
            [CreateTopicAndPartitionsRequest(pipeline, str(pipeline), 2)]
        ) == [0]
        dirs = {
            "d-0": partition_dir(data, "d-0", d),
            "d-1": partition_dir(data, "d-1", d),
            "plain-0": partition_dir(data, "plain-0", plain),
            "legacy-0": partition_dir(data, "legacy-0", None),
            "__cluster_metadata-0": partition_dir(data, "__cluster_metadata-0", METADATA_TOPIC_ID),
            "notes": partition_dir(data, "notes", d),  # not a <topic>-<partition> name
        }
        bad = partition_dir(data, "bad-0", None)
        (bad / "partition.metadata").write_text("version: 0\ntopic_id: nope")

        node.c.delete(names=["d"])
        node.commit()
        await idle(pub)
        assert await held(coord) == {pipeline: 2}
        files = [f.object_key for f in await coord.get_files_to_delete()]
        assert files == ["obj-d"]
        assert not dirs["d-0"].exists() and not dirs["d-1"].exists()
        for kept in ("plain-0", "legacy-0", "__cluster_metadata-0", "notes"):
            assert dirs[kept].is_dir(), kept
        assert bad.is_dir()
        assert sorted(p.name for p in data.iterdir() if p.name.endswith("-delete")) == []
        assert MirrorFile(data / MIRROR_FILE_NAME).load() == set()
        assert "legacy-0 alone: no partition.metadata" in caplog.text
        assert "bad-0 alone: unreadable partition.metadata" in caplog.text

        # the same name again: a new id, an empty log
        node.c.create(topic("d", n=2, configs=DISKLESS))
        node.commit()
        await idle(pub)
        d2 = node.tid("d")
        assert d2 != d
        assert await held(coord) == {pipeline: 2, d2: 2}
        [lo] = await coord.list_offsets([ListOffsetsRequest(TopicIdPartition(d2, 0), -1)])
        assert (lo.error, lo.offset) == (0, 0)
        assert pub.failed_attempts == 0
        # the directories left alone are reported once, not on every deletion
        node.c.delete(names=["plain"])
        node.commit()
        await idle(pub)
        assert not dirs["plain-0"].exists()
        assert caplog.text.count("legacy-0 alone") == 1
    finally:
        await pub.stop()


async def test_a_topic_created_and_deleted_before_the_task_ran_is_never_created(coord, data):
    node = Node()
    pub = publisher(coord, data, node)
    pub.start(node.qc)
    try:
        await idle(pub)
        node.c.create(topic("short", configs=DISKLESS))
        node.commit()  # queued; the task has not run yet (no await in between)
        node.c.delete(names=["short"])
        node.commit()
        await idle(pub)
        assert await held(coord) == {}
        assert MirrorFile(data / MIRROR_FILE_NAME).load() == set()
    finally:
        await pub.stop()


# ------------------------------------------------------------------ restart: full reconcile
async def test_a_restarted_node_reconciles_once_caught_up_and_not_before(coord, data):
    """Node life 1 mirrors x and y; while it is down x is deleted and a snapshot no longer has
    x, so no image this node will see has it: only the mirror file remembers it. The new process
    loads the snapshot, reconciles once its own registration is in the image, deletes x (batches,
    directory, mirror entry), keeps y and the pipeline's topic."""
    first = Node()
    pub = publisher(coord, data, first)
    pub.start(first.qc)
    first.c.create(topic("x", n=2, configs=DISKLESS), topic("y", configs=DISKLESS))
    first.commit()
    await idle(pub)
    x, y = first.tid("x"), first.tid("y")
    await pub.stop()
    assert await held(coord) == {x: 2, y: 1}
    tp = TopicIdPartition(x, 1)
    await coord.commit_file("obj-x", 1, 50, [CommitBatchRequest(tp, 0, 50, 0, 0, 5, 0)])
    pipeline = uuid.uuid4()
    await coord.create_topic_and_partitions([CreateTopicAndPartitionsRequest(pipeline, "p", 1)])
    x_dir, y_dir = partition_dir(data, "x-1", x), partition_dir(data, "y-0", y)
    ghost = partition_dir(data, "ghost-0", uuid.uuid4())  # an id no image of ours ever had
    leftover = data / f"old-0.{uuid.uuid4().hex}-delete"
    leftover.mkdir()

    # down: x is deleted, z created; the new process starts from a snapshot of that
    c = first.c
    c.delete(names=["x"])
    c.create(topic("z", configs=DISKLESS))
    second = Node(c)
    second.load_snapshot()  # (RaftCore loads it before the publisher is attached)
    new_incarnation = uuid.uuid4()
    pub2 = BrokerMetadataPublisher(
        coord, [data], mirror_file=data / MIRROR_FILE_NAME, retry_backoff_ms=10,
        caught_up=caught_up_when_registered(1, lambda: new_incarnation),
    )  # fmt: skip
    pub2.start(second.qc)
    try:
        await idle(pub2)
        z = c.image.topics_by_name["z"]
        # not caught up: only what the diff says (z appeared); x, the ghost, the leftover stay
        assert not pub2.is_caught_up
        assert await held(coord) == {x: 2, y: 1, z: 1, pipeline: 1}
        assert x_dir.is_dir() and ghost.is_dir() and leftover.is_dir()

        reregister(c, new_incarnation)  # this process's registration commits
        second.commit()
        await idle(pub2)
        assert pub2.is_caught_up
        assert await held(coord) == {y: 1, z: 1, pipeline: 1}
        assert [f.object_key for f in await coord.get_files_to_delete()] == ["obj-x"]
        assert not x_dir.exists() and not ghost.exists() and not leftover.exists()
        assert y_dir.is_dir()
        assert MirrorFile(data / MIRROR_FILE_NAME).load() == {y, z}
    finally:
        await pub2.stop()


async def test_a_half_replayed_image_deletes_nothing(coord, data):
    """A restart replays the log in pieces: before the node's own registration is replayed,
    topics created later in the log are missing from the image but must not be collected."""
    first = Node()
    first.c.create(topic("early", configs=DISKLESS))
    cut = len(first.c.log)
    first.c.create(topic("late", configs=DISKLESS))
    pub = publisher(coord, data, first)
    pub.start(first.qc)
    first.commit()
    await idle(pub)
    await pub.stop()
    early, late = first.tid("early"), first.tid("late")
    late_dir = partition_dir(data, "late-0", late)

    second = Node(first.c)
    new_incarnation = uuid.uuid4()
    pub2 = BrokerMetadataPublisher(
        coord, [data], mirror_file=data / MIRROR_FILE_NAME,
        caught_up=caught_up_when_registered(1, lambda: new_incarnation),
    )  # fmt: skip
    pub2.start(second.qc)
    try:
        second.commit(cut)  # "late" not replayed yet
        await idle(pub2)
        assert await held(coord) == {early: 1, late: 1} and late_dir.is_dir()
        reregister(first.c, new_incarnation)
        second.commit()
        await idle(pub2)
        assert pub2.is_caught_up
        assert await held(coord) == {early: 1, late: 1} and late_dir.is_dir()
    finally:
        await pub2.stop()


# ------------------------------------------------------------------ failures
async def test_failures_back_off_give_up_and_resume_on_the_next_change(tmp_path, data, caplog):
    coord = create_coordinator(f"sqlite://{tmp_path / 'late.db'}")  # not started: calls raise
    node = Node()
    pub = publisher(coord, data, node, max_attempts=3, retry_backoff_ms=20,
                    retry_backoff_max_ms=30)  # fmt: skip
    pub.start(node.qc)
    try:
        node.c.create(topic("a", configs=DISKLESS))
        t0 = time.monotonic()
        node.commit()  # the controller is not disturbed by the failure
        await idle(pub)
        # three attempts, with 20 + 30 ms of backoff between them
        assert time.monotonic() - t0 >= 0.05
        assert (pub.failed_attempts, pub.rounds_given_up) == (3, 1)
        assert "giving up after 3 attempts" in caplog.text
        assert "attempt 1/3 failed" in caplog.text

        await coord.start()
        node.c.create(topic("b", configs=DISKLESS))
        node.commit()  # the next change brings back the work given up
        await idle(pub)
        assert await held(coord) == {node.tid("a"): 1, node.tid("b"): 1}
        assert pub.rounds_given_up == 1
    finally:
        await pub.stop()
        await coord.close()


async def test_a_failing_round_succeeds_once_the_coordinator_works(tmp_path, data):
    coord = create_coordinator(f"sqlite://{tmp_path / 'late.db'}")
    node = Node()
    pub = publisher(coord, data, node, max_attempts=50, retry_backoff_ms=10,
                    retry_backoff_max_ms=20)  # fmt: skip
    pub.start(node.qc)
    try:
        node.c.create(topic("a", configs=DISKLESS))
        node.commit()
        await until(lambda: pub.failed_attempts >= 2, "two failed attempts", timeout=TIMEOUT,
                    interval=0.005)  # fmt: skip
        await coord.start()
        await idle(pub)
        assert await held(coord) == {node.tid("a"): 1}
        assert pub.rounds_given_up == 0 and pub.rounds >= 1
    finally:
        await pub.stop()
        await coord.close()


async def test_stop_ends_the_task_during_a_backoff_and_unregisters(tmp_path, data):
    coord = create_coordinator(f"sqlite://{tmp_path / 'never.db'}")
    node = Node()
    pub = publisher(coord, data, node, retry_backoff_ms=60_000, retry_backoff_max_ms=60_000)
    pub.start(node.qc)
    node.c.create(topic("a", configs=DISKLESS))
    node.commit()
    # then sleeping 60 s before the next attempt
    await until(lambda: pub.failed_attempts >= 1, "a failed attempt", timeout=TIMEOUT,
                interval=0.005)  # fmt: skip
    task = pub._task
    await asyncio.wait_for(pub.stop(), TIMEOUT)
    assert task.done() and not pub.running
    assert node.qc.publishers == []
    node.c.create(topic("b", configs=DISKLESS))
    node.commit()  # nobody listens any more
    await asyncio.wait_for(pub.wait_idle(), TIMEOUT)
    await pub.stop()  # idempotent


class NotLeading:
    """A real coordinator behind a replica that does not lead its ``__diskless-metadata``
    partition until ``lead()``: creates answer NOT_COORDINATOR (16) and ``served_partitions``
    has no write side, as ``ReplicatedBatchCoordinator`` off the leader."""

    def __init__(self, inner) -> None:
        self._inner, self.leading = inner, False

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def lead(self) -> None:
        self.leading = True

    def served_partitions(self, write: bool) -> frozenset[int]:
        return frozenset((0,)) if self.leading or not write else frozenset()

    async def create_topic_and_partitions(self, reqs):
        if not self.leading:
            return [16] * len(reqs)
        return await self._inner.create_topic_and_partitions(reqs)


async def test_a_follower_replica_leaves_creates_to_the_leader_and_reconciles_on_leading(
    coord, data
):
    wrapped = NotLeading(coord)
    node = Node()
    pub = publisher(wrapped, data, node)
    pub.start(node.qc)
    try:
        node.commit()
        node.c.create(topic("a", configs=DISKLESS))
        node.commit()
        await idle(pub)
        assert await held(coord) == {} and pub.rounds_given_up == 0  # left to the leader
        wrapped.lead()
        node.c.create(topic("b"))  # any later image: the node now has the write side
        node.commit()
        await idle(pub)
        assert await held(coord) == {node.tid("a"): 1}
    finally:
        await pub.stop()
