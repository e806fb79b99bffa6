"""Several Batch Coordinators on one node (``kafka_rpc.coordinator.assigned``): an
``AssignedBatchCoordinator`` runs one real ``ReplicatedBatchCoordinator`` (single-voter Raft log,
SQLite state, tmp dir) per ``__diskless-metadata`` partition the image gives this node, and
routes each entry to the partition its TopicPartitionToBatchCoordinatorMapping names (unmapped
-> 0). Checked against the replicas themselves and, for the merged fetch budget, against one
SqliteBatchCoordinator holding every partition."""

from __future__ import annotations

import types
import uuid

import pytest
from pyrsistent import pmap

from kafka_rpc.controller.image import EMPTY, PartitionRegistration, TopicImage, evolve
from kafka_rpc.coordinator.api import (
    CommitBatchRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    Errors,
    FindBatchRequest,
    ListOffsetsRequest,
)
from kafka_rpc.coordinator.api import CreateTopicAndPartitionsRequest as CTP
from kafka_rpc.coordinator.api import TopicIdPartition as TP
from kafka_rpc.coordinator.assigned import AssignedBatchCoordinator
from kafka_rpc.coordinator.errors import NotCoordinatorError
from kafka_rpc.coordinator.replicated import DISKLESS_METADATA_TOPIC_NAME
from kafka_rpc.coordinator.sqlite import SqliteBatchCoordinator
from tests.waiting import until

A, B = uuid.UUID(int=0xA << 64 | 1), uuid.UUID(int=0xB << 64 | 1)
META_ID = uuid.UUID(int=0xD << 64 | 1)
NOT_COORDINATOR = 16
#: A-1 -> coordinator partition 1, A-2 -> 2; A-0, A-3 and B unmapped (0)
MAPPING = {1: 1, 2: 2}


def image(replicas: dict[int, tuple[int, ...]], mapping=MAPPING):
    meta = TopicImage(
        DISKLESS_METADATA_TOPIC_NAME, META_ID,
        partitions=pmap({p: PartitionRegistration(r, r, r[0]) for p, r in replicas.items()}),
    )  # fmt: skip
    one = PartitionRegistration((1,), (1,), 1)
    a = TopicImage("a", A, partitions=pmap(dict.fromkeys(range(4), one)),
                   batch_coordinators=pmap(mapping))  # fmt: skip
    b = TopicImage("b", B, partitions=pmap({0: one}))
    return evolve(
        EMPTY,
        topics=pmap({META_ID: meta, A: a, B: b}),
        topics_by_name=pmap({DISKLESS_METADATA_TOPIC_NAME: META_ID, "a": A, "b": B}),
    )


class Controller:
    def __init__(self, img) -> None:
        self.image = img
        self.publishers: list = []

    def publish(self, img) -> None:
        old, self.image = self.image, img
        for p in list(self.publishers):
            p(old, img)


def server(img) -> types.SimpleNamespace:
    config = types.SimpleNamespace(
        voters=lambda: {1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2), 3: ("127.0.0.1", 3)},
        controller_listener_names=(),
        # the metadata quorum's timing, which the coordinator's Raft groups take (Kafka's)
        quorum_election_timeout_ms=1000, quorum_fetch_timeout_ms=2000,
        quorum_election_backoff_max_ms=1000, quorum_request_timeout_ms=2000,
        quorum_retry_backoff_ms=20, replica_lag_time_max_ms=30000,
    )
    return types.SimpleNamespace(node_id=1, config=config, cluster_id="c",
                                 controller=Controller(img))  # fmt: skip


async def started(tmp_path, replicas) -> tuple[AssignedBatchCoordinator, types.SimpleNamespace]:
    c = AssignedBatchCoordinator(tmp_path / "coord", synchronous="OFF")
    srv = server(image(replicas))
    c.attach_metadata(srv.config, srv.node_id, srv.cluster_id, srv.controller, None)
    mine = {p for p, r in replicas.items() if 1 in r}
    await until(lambda: c.served_partitions(True) == mine, f"leaders of {sorted(mine)}",
                timeout=10.0)  # fmt: skip
    return c, srv


def batch(topic: uuid.UUID, p: int, byte_offset: int, records: int, size: int = 100):
    return CommitBatchRequest(TP(topic, p), byte_offset, size, 0, records - 1, 1000, 0)


def coords(answers) -> list[tuple[int, int]]:
    return [(a.error, a.assigned_base_offset) for a in answers]


def ALL3():
    return {0: (1,), 1: (1,), 2: (1,)}


async def test_entries_go_to_their_owner_answers_in_request_order(tmp_path):
    c, _ = await started(tmp_path, ALL3())
    try:
        creates = [CTP(A, "a", 4), CTP(B, "b", 1)]
        assert await c.create_topic_and_partitions(creates) == [0, 0]
        for p in (0, 1, 2):  # every coordinator partition holds every topic
            assert len(await c.replica(p).list_partitions()) == 5
        reqs = [batch(A, 1, 0, 3), batch(A, 0, 100, 2), batch(A, 2, 200, 4), batch(B, 0, 300, 1),
                batch(A, 1, 400, 5)]  # fmt: skip
        got = await c.commit_file("obj-1", 7, 500, reqs)
        assert coords(got) == [(0, 0), (0, 0), (0, 0), (0, 0), (0, 3)]
        # the batches are where the mapping says, and nowhere else
        for p, tp, want in ((1, TP(A, 1), 8), (0, TP(A, 0), 2), (2, TP(A, 2), 4), (0, TP(B, 0), 1)):
            for q in (0, 1, 2):
                (o,) = await c.replica(q).list_offsets([ListOffsetsRequest(tp, -1)])
                assert o.offset == (want if q == p else 0), (p, q, tp)
        assert sorted((tp.topic_id, tp.partition) for tp in await c.list_partitions()) == sorted(
            [(A, 0), (A, 1), (A, 2), (A, 3), (B, 0)]
        )
        ends = await c.list_offsets([ListOffsetsRequest(TP(A, p), -1) for p in (2, 1, 0, 3)])
        assert [(o.error, o.topic_id_partition.partition, o.offset) for o in ends] == [
            (0, 2, 4), (0, 1, 8), (0, 0, 2), (0, 3, 0)
        ]  # fmt: skip
        found = await c.find_batches([FindBatchRequest(TP(A, p), 0, 1 << 20) for p in (2, 1, 0)],
                                     1 << 20)  # fmt: skip
        assert [[(b.base_offset, b.last_offset) for b in f.batches] for f in found] == [
            [(0, 3)], [(0, 2), (3, 7)], [(0, 1)]
        ]  # fmt: skip
        dels = await c.delete_records([DeleteRecordsRequest(TP(A, 1), 3),
                                       DeleteRecordsRequest(TP(A, 0), 5)])  # fmt: skip
        assert [(d.error, d.low_watermark) for d in dels] == [
            (0, 3), (Errors.OFFSET_OUT_OF_RANGE, -1)
        ]  # fmt: skip
        ret = await c.enforce_retention([EnforceRetentionRequest(TP(A, 2), 0, -1),
                                         EnforceRetentionRequest(TP(B, 0), -1, -1)])  # fmt: skip
        got = [(r.error, r.batches_deleted, r.log_start_offset) for r in ret]
        assert got == [(0, 1, 4), (0, 0, 0)]
    finally:
        await c.close()


BUDGETS = ((1, 1), (250, 1000), (350, 150), (900, 250), (1 << 20, 1 << 20))


async def test_the_merged_fetch_budget_is_one_coordinator_s(tmp_path):
    """Split reads cut by Kafka's fetch budget in request order give exactly what one
    coordinator holding every partition answers (differential against SqliteBatchCoordinator)."""
    c, _ = await started(tmp_path, ALL3())
    ref = SqliteBatchCoordinator(str(tmp_path / "ref.db"))
    await ref.start()
    try:
        creates = [CTP(A, "a", 4)]
        assert await c.create_topic_and_partitions(creates) == [0]
        assert await ref.create_topic_and_partitions(creates) == [0]
        reqs = [batch(A, p, 1000 * p + 100 * i, 2, size=100 + 10 * p) for i in range(4)
                for p in (0, 1, 2, 3)]  # fmt: skip
        for x in (c, ref):
            assert all(r.error == 0 for r in await x.commit_file("o", 1, 5000, reqs))
        for order in ((0, 1, 2, 3), (2, 1, 3, 0), (1, 2)):
            for fetch_max, part_max in BUDGETS:
                q = [FindBatchRequest(TP(A, p), 2, part_max) for p in order]
                got = await c.find_batches(q, fetch_max)
                want = await ref.find_batches(q, fetch_max)
                shape = [[(b.base_offset, b.byte_size) for b in f.batches] for f in got]
                assert shape == [[(b.base_offset, b.byte_size) for b in f.batches] for f in want], (
                    order, fetch_max, part_max)  # fmt: skip
                assert [(f.error, f.log_start_offset, f.high_watermark) for f in got] == [
                    (f.error, f.log_start_offset, f.high_watermark) for f in want
                ]
    finally:
        await ref.close()
        await c.close()


async def test_a_partition_without_replica_here_answers_not_coordinator(tmp_path):
    c, srv = await started(tmp_path, {0: (1,), 1: (1,), 2: (2, 3)})
    try:
        assert c.served_partitions(False) == frozenset({0, 1})
        assert await c.create_topic_and_partitions([CTP(A, "a", 4)]) == [0]
        got = await c.commit_file("obj", 1, 300, [batch(A, 2, 0, 1), batch(A, 1, 100, 1),
                                                  batch(A, 0, 200, 1)])  # fmt: skip
        assert coords(got) == [(NOT_COORDINATOR, -1), (0, 0), (0, 0)]  # the rest commits
        (only,) = await c.list_offsets([ListOffsetsRequest(TP(A, 2), -1)])
        assert only.error == NOT_COORDINATOR
        # the shared-object rule needs every coordinator partition: partition 2 is not here
        with pytest.raises(NotCoordinatorError):
            await c.get_files_to_delete()
        with pytest.raises(NotCoordinatorError):
            await c.delete_files(["obj"])
        assert c.leader_of(1) == 1 and c.leader_of(2) == -1
    finally:
        await c.close()


async def test_an_object_of_two_coordinators_is_deleted_when_neither_references_it(tmp_path):
    c, _ = await started(tmp_path, ALL3())
    try:
        assert await c.create_topic_and_partitions([CTP(A, "a", 4)]) == [0]
        shared = [batch(A, 1, 0, 2), batch(A, 2, 100, 2)]
        assert coords(await c.commit_file("shared", 1, 200, shared)) == [(0, 0), (0, 0)]
        assert coords(await c.commit_file("solo", 1, 100, [batch(A, 1, 0, 1)])) == [(0, 2)]
        # every batch of A-1 goes: partition 1 marks both objects; partition 2 still uses one
        (d,) = await c.delete_records([DeleteRecordsRequest(TP(A, 1), -1)])
        assert (d.error, d.low_watermark) == (0, 3)
        assert [f.object_key for f in await c.get_files_to_delete()] == ["solo"]
        assert not await c.is_safe_to_delete_file("shared")
        assert await c.delete_files(["shared", "solo", "nope", "solo"]) == [
            Errors.INVALID_REQUEST, 0, Errors.RESOURCE_NOT_FOUND, Errors.RESOURCE_NOT_FOUND
        ]  # fmt: skip
        (d,) = await c.delete_records([DeleteRecordsRequest(TP(A, 2), -1)])
        assert d.error == 0
        files = await c.get_files_to_delete()
        assert [(f.object_key, f.size) for f in files] == [("shared", 200)]
        at = files[0].marked_for_deletion_at_ms
        assert await c.get_files_to_delete(marked_before_ms=at) == []
        assert await c.get_files_to_delete(after_object_key="shared") == []
        assert await c.delete_files(["shared"]) == [0]
        for p in (1, 2):  # forgotten by both
            assert await c.replica(p).is_safe_to_delete_file("shared")
        assert await c.delete_files(["shared"]) == [Errors.RESOURCE_NOT_FOUND]
        assert await c.is_safe_to_delete_file("shared")
    finally:
        await c.close()


async def test_an_image_that_moves_a_partition_away_stops_its_replica(tmp_path):
    c, srv = await started(tmp_path, ALL3())
    try:
        assert await c.create_topic_and_partitions([CTP(A, "a", 4)]) == [0]
        assert coords(await c.commit_file("o1", 1, 100, [batch(A, 2, 0, 1)])) == [(0, 0)]
        srv.controller.publish(image({0: (1,), 1: (1,), 2: (2,)}))
        assert c.served_partitions(False) == frozenset({0, 1}) and c.replica(2) is None
        got = await c.commit_file("o2", 1, 200, [batch(A, 2, 0, 1), batch(A, 1, 100, 1)])
        assert coords(got) == [(NOT_COORDINATOR, -1), (0, 0)]
        srv.controller.publish(image(ALL3()))  # back: the replica starts again from its log
        await until(lambda: c.served_partitions(True) == {0, 1, 2}, "partition 2 again",
                    timeout=10.0)  # fmt: skip
        (o,) = await c.list_offsets([ListOffsetsRequest(TP(A, 2), -1)])
        assert (o.error, o.offset) == (0, 1)
        # away and back in one loop turn: served again, the log continues
        srv.controller.publish(image({0: (1,), 1: (1,), 2: (2,)}))
        srv.controller.publish(image(ALL3()))
        await until(lambda: c.served_partitions(True) == {0, 1, 2}, "partition 2 once more",
                    timeout=10.0)  # fmt: skip
        assert coords(await c.commit_file("o3", 1, 100, [batch(A, 2, 0, 1)])) == [(0, 1)]
    finally:
        await c.close()


async def test_a_topic_that_a_led_partition_lacks_is_not_listed(tmp_path):
    """The metadata publisher's reconcile creates what ``list_partitions`` lacks: a topic held
    by coordinator partitions 1 and 2 (A-1, A-2 by their owners) but not by 0, which this node
    also leads, is not listed until it is created there too."""
    c, _ = await started(tmp_path, ALL3())
    try:
        for p in (1, 2):
            assert await c.replica(p).create_topic_and_partitions([CTP(A, "a", 4)]) == [0]
        assert await c.list_partitions() == []
        assert await c.create_topic_and_partitions([CTP(A, "a", 4)]) == [0]  # idempotent on 1, 2
        assert sorted(tp.partition for tp in await c.list_partitions()) == [0, 1, 2, 3]
    finally:
        await c.close()


async def test_commit_batches_handler_over_several_coordinators(tmp_path):
    """The wire handler with the server's owner check (``owner_check``: the union of the
    replicas' served partitions) and the coordinator's routing: one request, two objects, entries
    of coordinator partitions 0, 1 and 2 (2 not replicated here) answered in request order."""
    from kafka_rpc.handlers import diskless as h
    from kafka_rpc.protocol import codec

    cb = codec.module("CommitBatchesRequest")

    def entry(p: int, key: str, byte_offset: int):
        return cb.CommitBatchesTopicPartition(
            partition_index=p, object_key=key, byte_offset=byte_offset, size=50, base_offset=0,
            last_offset=1, batch_max_timestamp=1000, message_timestamp_type=0, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, last_sequence=-1,
        )  # fmt: skip

    c, srv = await started(tmp_path, {0: (1,), 1: (1,), 2: (2, 3)})
    srv.batch_coordinator_partitions = c.served_partitions
    try:
        assert await c.create_topic_and_partitions([CTP(A, "a", 4)]) == [0]
        req = cb.CommitBatchesRequest(broker_id=1, batches=(cb.Batches(topics=(
            cb.CommitBatchesTopic(topic_id=A, partitions=(
                entry(2, "x", 0), entry(1, "x", 50), entry(0, "y", 0), entry(1, "y", 50),
                entry(3, "x", 100))),)),))  # fmt: skip
        resp = await h.handle_commit_batches(c, req, owns=h.owner_check(srv, True))
        got = [(p.partition_index, p.error_code, p.assigned_base_offset)
               for p in resp.topics[0].partitions]  # fmt: skip
        assert got == [(2, NOT_COORDINATOR, -1), (1, 0, 0), (0, 0, 0), (1, 0, 2), (3, 0, 0)]
        (o,) = await c.replica(1).list_offsets([ListOffsetsRequest(TP(A, 1), -1)])
        assert o.offset == 4
    finally:
        await c.close()


async def test_topics_are_created_and_deleted_on_every_led_partition(tmp_path):
    c, _ = await started(tmp_path, {0: (1,), 1: (1,), 2: (2, 3)})
    try:
        zero = uuid.UUID(int=0)
        assert await c.create_topic_and_partitions([CTP(A, "a", 2), CTP(zero, "z", 1)]) == [
            0, Errors.INVALID_REQUEST
        ]  # fmt: skip
        for p in (0, 1):
            assert len(await c.replica(p).list_partitions()) == 2
        assert await c.delete_topics([A, B]) == [0, Errors.UNKNOWN_TOPIC_OR_PARTITION]
        for p in (0, 1):
            assert await c.replica(p).list_partitions() == []
        assert await c.delete_topics([A]) == [Errors.UNKNOWN_TOPIC_OR_PARTITION]
    finally:
        await c.close()


async def test_a_topic_outside_the_image_needs_the_leader_of_partition_0(tmp_path):
    """A broker's InitDisklessTopics for a topic the metadata image does not know: only
    coordinator partition 0 can own it (mappings name topics of the image), so a node that
    leads partition 1 but not 0 answers NOT_COORDINATOR for it, not NONE; a topic of the image
    is created on the partitions it leads (their leaders' publishers do the rest)."""
    c, _ = await started(tmp_path, {0: (2, 3), 1: (1,)})
    try:
        outside = uuid.UUID(int=0xC << 64 | 1)
        assert await c.create_topic_and_partitions([CTP(A, "a", 4), CTP(outside, "c", 1)]) == [
            0, NOT_COORDINATOR
        ]  # fmt: skip
        assert await c.delete_topics([A, outside]) == [0, NOT_COORDINATOR]
    finally:
        await c.close()
    c, _ = await started(tmp_path / "all", ALL3())
    try:  # leading partition 0: the topic is created and deleted
        outside = uuid.UUID(int=0xC << 64 | 1)
        assert await c.create_topic_and_partitions([CTP(outside, "c", 1)]) == [0]
        assert await c.delete_topics([outside]) == [0]
    finally:
        await c.close()
