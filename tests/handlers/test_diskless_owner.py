"""The per-entry NOT_COORDINATOR rule of the diskless handlers (KIP-1164, docs/batch-coordinator.md)
on a real SQLite coordinator: CommitBatches with entries of several objects
and topics, some of another coordinator's partitions, answers each entry in request order and
commits exactly the others; ``owner_check`` reads the mapping from the metadata image."""

from __future__ import annotations

import types
import uuid

from pyrsistent import pmap

from kafka_rpc.controller.image import EMPTY, TopicImage, evolve
from kafka_rpc.coordinator.api import CreateTopicAndPartitionsRequest, ListOffsetsRequest
from kafka_rpc.coordinator.api import TopicIdPartition as TP
from kafka_rpc.coordinator.factory import create_coordinator
from kafka_rpc.handlers import diskless as h
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

CB = codec.module("CommitBatchesRequest")
A, B = uuid.UUID(int=0xA << 64 | 1), uuid.UUID(int=0xB << 64 | 1)


def entry(p: int, key: str, byte_offset: int, records: int = 10):
    return CB.CommitBatchesTopicPartition(
        partition_index=p, object_key=key, byte_offset=byte_offset, size=50, base_offset=0,
        last_offset=records - 1, batch_max_timestamp=1000, message_timestamp_type=0,
        producer_id=-1, producer_epoch=-1, base_sequence=-1, last_sequence=-1,
    )  # fmt: skip


async def test_commit_rejects_foreign_entries_in_request_order(tmp_path):
    c = create_coordinator(f"sqlite:///{tmp_path}/c.db")
    await c.start()
    try:
        await c.create_topic_and_partitions(
            [CreateTopicAndPartitionsRequest(A, "a", 2), CreateTopicAndPartitionsRequest(B, "b", 2)]
        )
        foreign = {(A, 1), (B, 0)}
        req = CB.CommitBatchesRequest(
            broker_id=1,
            batches=(
                CB.Batches(
                    topics=(
                        CB.CommitBatchesTopic(
                            topic_id=A,
                            partitions=(entry(0, "x", 0), entry(1, "y", 0), entry(1, "x", 50)),
                        ),
                        CB.CommitBatchesTopic(
                            topic_id=B, partitions=(entry(0, "y", 50), entry(1, "x", 100, 3))
                        ),
                        CB.CommitBatchesTopic(topic_id=A, partitions=(entry(0, "y", 100, 2),)),
                    )
                ),
            ),
        )
        # A-1 maps to coordinator 1 (another node's), B-0 to coordinator 2 (this node's
        # replica, still loading); the rest to coordinator 0, which this node leads
        owns = h.Owns({A: {1: 1}, B: {0: 2}}, frozenset({0}), frozenset({2}))
        assert {(t, p) for t in (A, B) for p in (0, 1) if not owns(t, p)} == foreign
        resp = await h.handle_commit_batches(c, req, owns=owns)
        got = [
            (t.topic_id, p.partition_index, p.error_code, p.assigned_base_offset)
            for t in resp.topics
            for p in t.partitions
        ]
        NC, LOADING = ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        # objects in order of first appearance: x (A-0, B-1), then y
        assert got == [
            (A, 0, 0, 0), (A, 1, NC, -1), (A, 1, NC, -1), (A, 0, 0, 10),
            (B, 0, LOADING, -1), (B, 1, 0, 0),
        ]  # fmt: skip
        ends = await c.list_offsets(
            [ListOffsetsRequest(TP(t, p), -1) for t in (A, B) for p in (0, 1)]
        )
        assert [r.offset for r in ends] == [12, 0, 0, 3]
    finally:
        await c.close()


def test_owner_check_follows_the_image_and_the_served_partitions():
    img = evolve(EMPTY, topics=EMPTY.topics.set(A, TopicImage("a", A)).set(B, TopicImage("b", B)))
    server = types.SimpleNamespace(
        controller=types.SimpleNamespace(image=img),
        batch_coordinator_partitions=lambda write: frozenset({0}),
    )
    assert h.owner_check(server, True) is None  # nothing mapped, 0 served: no check
    mapped = evolve(
        img, topics=img.topics.set(A, TopicImage("a", A, batch_coordinators=pmap({1: 2})))
    )
    server.controller.image = mapped
    owns = h.owner_check(server, True)
    assert [owns(A, 0), owns(A, 1), owns(B, 0), owns(uuid.uuid4(), 0)] == [True, False, True, True]
    server.batch_coordinator_partitions = lambda write: frozenset({2} if write else {0, 2})
    w, r = h.owner_check(server, True), h.owner_check(server, False)
    assert [w(A, 0), w(A, 1), w(B, 3)] == [False, True, False]
    assert [r(A, 0), r(A, 1), r(B, 3)] == [True, True, True]
    NC, LOADING = ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert w.refusal(A, 0) == NC  # no loading method on the server: another node's
    # this node's replica of coordinator 0 leads but still replays: writes of 0 are loading
    server.batch_coordinator_loading = lambda write: frozenset({0} if write else ())
    w = h.owner_check(server, True)
    assert [w(A, 0), w.refusal(A, 0), w(A, 1)] == [False, LOADING, True]
    # nothing served yet and 0 starting here: every unmapped partition answers loading
    server.batch_coordinator_partitions = lambda write: frozenset()
    server.batch_coordinator_loading = lambda write: frozenset({0})
    r = h.owner_check(server, False)
    assert [r(B, 3), r.refusal(B, 3), r.refusal(A, 1)] == [False, LOADING, NC]
    assert h.owner_check(types.SimpleNamespace(controller=None), True) is None


async def test_topic_writes_on_a_read_only_coordinator_answer_not_coordinator(tmp_path):
    """InitDisklessTopics and DeleteDisklessTopics are writes of the coordinator owning the
    topic's partition 0: a node that does not lead it answers NOT_COORDINATOR per topic and
    initializes / deletes nothing for it; the zero id stays UNKNOWN_TOPIC_OR_PARTITION."""
    II = codec.module("InitDisklessTopicsRequest")
    DD = codec.module("DeleteDisklessTopicsRequest")
    zero = uuid.UUID(int=0)
    c = create_coordinator(f"sqlite:///{tmp_path}/c.db")
    await c.start()
    try:
        # this node leads A's coordinator (0), not B's (1, another node's)
        owns = h.Owns({B: {0: 1, 1: 1}}, frozenset({0}), frozenset())
        req = II.InitDisklessTopicsRequest(topics=tuple(
            II.InitDisklessTopic(topic_id=t, num_partitions=2) for t in (A, B, zero)))  # fmt: skip
        resp = await h.handle_init_diskless_topics(c, req, owns=owns)
        NC, UNKNOWN = ErrorCode.NOT_COORDINATOR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert [(r.topic_id, r.error_code) for r in resp.responses] == [
            (A, 0), (B, NC), (zero, UNKNOWN)]  # fmt: skip
        assert {tp.topic_id for tp in await c.list_partitions()} == {A}
        # the node that leads B's coordinator initializes it
        resp = await h.handle_init_diskless_topics(c, req, owns=None)
        assert [r.error_code for r in resp.responses] == [0, 0, UNKNOWN]
        dreq = DD.DeleteDisklessTopicsRequest(topics=tuple(
            DD.DeleteDisklessTopic(topic_id=t) for t in (B, A, zero)))  # fmt: skip
        resp = await h.handle_delete_diskless_topics(c, dreq, owns=owns)
        assert [(r.topic_id, r.error_code) for r in resp.responses] == [
            (B, NC), (A, 0), (zero, UNKNOWN)]  # fmt: skip
        assert {tp.topic_id for tp in await c.list_partitions()} == {B}
    finally:
        await c.close()
