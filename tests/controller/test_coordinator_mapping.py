"""KIP-1164 on the controller: AssignPartitionToBatchCoordinator (99), the
TopicPartitionToBatchCoordinatorMapping record in the image, its replay and snapshot, and the
creation of ``__diskless-metadata`` (kafka_rpc.controller.coordinator_mapping)."""

from __future__ import annotations

import random
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_rpc.controller import coordinator_mapping as M
from kafka_rpc.controller.image import EMPTY
from kafka_rpc.controller.replay import ReplayError, replay
from kafka_rpc.controller.snapshot import image_records, image_to_records, load
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

from .harness import Cluster, topic

R = codec.message_class
AQ = codec.module("AssignPartitionToBatchCoordinatorRequest")
MAPPING = R("TopicPartitionToBatchCoordinatorMapping")


def assign_request(*entries):
    """entries: (topic id, [(partition, coordinator partition), ...])"""
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


def codes(resp):
    return [
        (t.topic_id, p.partition_index, p.error_code) for t in resp.responses for p in t.partitions
    ]


def cluster_with(coordinators: int | None, brokers=(0, 1, 2)) -> Cluster:
    c = Cluster(seed=3)
    c.live(*brokers)
    if coordinators is not None:
        res = M.create_diskless_metadata_topic(c.image, c.ctx(), coordinators, 3)
        c.apply(res.records)
    c.create(topic("d", n=4, rf=1, configs=[("diskless.enable", "true")]))
    return c


def tid(c: Cluster, name: str) -> uuid.UUID:
    return c.image.topics_by_name[name]


# ================================================================== the command
def test_assign_writes_one_record_per_accepted_entry_in_one_batch():
    c = cluster_with(4)
    d = tid(c, "d")
    before = len(c.log)
    res = c.run(M.assign_partition_to_batch_coordinator, assign_request((d, [(0, 3), (2, 1)])))
    assert codes(res.response) == [(d, 0, 0), (d, 2, 0)]
    assert res.records == [
        MAPPING(partition_index=0, topic_id=d, batch_coordinator_partition_index=3),
        MAPPING(partition_index=2, topic_id=d, batch_coordinator_partition_index=1),
    ]
    assert len(c.log) == before + 2
    assert [M.coordinator_partition(c.image, d, p) for p in range(4)] == [3, 0, 1, 0]


def test_per_entry_errors_and_the_rest_commits():
    c = cluster_with(2)
    d = tid(c, "d")
    unknown = uuid.UUID("5ca1ab1e-0000-4000-8000-00000000dead")
    zero = uuid.UUID(int=0)
    req = assign_request(
        (d, [(0, 1), (4, 1), (-1, 0), (1, 2), (2, -1), (3, 0)]),
        (unknown, [(0, 0)]),
        (zero, [(0, 0)]),
    )
    res = c.run(M.assign_partition_to_batch_coordinator, req)
    UTP, INV = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PARTITIONS
    assert codes(res.response) == [
        (d, 0, 0), (d, 4, UTP), (d, -1, UTP), (d, 1, INV), (d, 2, INV), (d, 3, 0),
        (unknown, 0, UTP), (zero, 0, UTP),
    ]  # fmt: skip
    assert [(r.partition_index, r.batch_coordinator_partition_index) for r in res.records] == [
        (0, 1),
        (3, 0),
    ]
    assert dict(c.image.topics[d].batch_coordinators) == {0: 1, 3: 0}


def test_no_accepted_entry_no_record():
    c = cluster_with(1)
    d = tid(c, "d")
    res = c.run(M.assign_partition_to_batch_coordinator, assign_request((d, [(0, 1)])))
    assert codes(res.response) == [(d, 0, ErrorCode.INVALID_PARTITIONS)]
    assert res.records == []


def test_without_the_metadata_topic_only_coordinator_zero_exists():
    c = cluster_with(None)
    d = tid(c, "d")
    assert M.coordinator_partition_count(c.image) == 1
    res = c.run(M.assign_partition_to_batch_coordinator, assign_request((d, [(0, 0), (1, 1)])))
    assert codes(res.response) == [(d, 0, 0), (d, 1, ErrorCode.INVALID_PARTITIONS)]


def test_a_later_entry_replaces_an_earlier_one_and_the_topic_takes_its_mapping_along():
    c = cluster_with(3)
    d = tid(c, "d")
    c.run(M.assign_partition_to_batch_coordinator, assign_request((d, [(1, 2), (1, 1)])))
    assert M.coordinator_partition(c.image, d, 1) == 1
    c.run(M.assign_partition_to_batch_coordinator, assign_request((d, [(1, 0)])))
    assert dict(c.image.topics[d].batch_coordinators) == {1: 0}
    c.delete(names=["d"])
    assert M.coordinator_partition(c.image, d, 1) == 0  # gone with the topic
    c.create(topic("d", n=4, rf=1, configs=[("diskless.enable", "true")]))
    new = tid(c, "d")
    assert new != d and not c.image.topics[new].batch_coordinators


def test_not_controller_answer_covers_every_entry():
    from kafka_rpc.controller.quorum_controller import not_controller_response

    a, b = uuid.uuid4(), uuid.uuid4()
    resp = not_controller_response(assign_request((a, [(0, 1), (5, 0)]), (b, [(2, 2)])))
    assert codes(resp) == [
        (a, 0, ErrorCode.NOT_CONTROLLER),
        (a, 5, ErrorCode.NOT_CONTROLLER),
        (b, 2, ErrorCode.NOT_CONTROLLER),
    ]


# ================================================================== replay
def test_replay_rejects_a_mapping_for_an_unknown_partition_or_negative_coordinator():
    c = cluster_with(2)
    d = tid(c, "d")
    for rec in (
        MAPPING(partition_index=9, topic_id=d, batch_coordinator_partition_index=0),
        MAPPING(partition_index=0, topic_id=uuid.uuid4(), batch_coordinator_partition_index=0),
        MAPPING(partition_index=0, topic_id=d, batch_coordinator_partition_index=-1),
    ):
        with pytest.raises(ReplayError):
            replay(c.image, rec, 100)
    img = replay(
        c.image, MAPPING(partition_index=3, topic_id=d, batch_coordinator_partition_index=1), 100
    )
    assert img.last_offset == 100 and img.topics[d].batch_coordinators == {3: 1}
    assert c.image.topics[d].batch_coordinators == {}  # the old image is untouched


# ================================================================== __diskless-metadata
def test_metadata_topic_on_unfenced_brokers_never_fewer_and_created_once():
    c = Cluster(seed=1)
    ctx = c.ctx()
    assert M.create_diskless_metadata_topic(c.image, ctx, 1, 3).records == []  # no broker
    c.live(0, 1)
    c.register(2)  # registered, still fenced: not a replica candidate
    assert M.create_diskless_metadata_topic(c.image, c.ctx(), 2, 3).records == []  # 2 < 3
    res = M.create_diskless_metadata_topic(c.image, c.ctx(), 2, 2)
    c.apply(res.records)
    t = c.image.topic_by_name(M.DISKLESS_METADATA_TOPIC)
    assert t is not None and t.topic_id == res.response
    assert [r.__spec_name__ for r in res.records] == ["TopicRecord"] + ["PartitionRecord"] * 2
    assert sorted(t.partitions) == [0, 1]
    for p in t.partitions.values():
        assert sorted(p.replicas) == [0, 1] and p.leader == p.replicas[0] and p.isr == p.replicas
    assert not c.image.topic_configs(M.DISKLESS_METADATA_TOPIC)  # not diskless, no configs
    assert M.coordinator_partition_count(c.image) == 2
    assert M.create_diskless_metadata_topic(c.image, c.ctx(), 2, 2).records == []


def test_metadata_topic_partitions_and_rf_at_least_one():
    c = Cluster(seed=2)
    c.live(0, 1, 2, 3)
    res = M.create_diskless_metadata_topic(c.image, c.ctx(), 0, 0)
    c.apply(res.records)
    t = c.image.topic_by_name(M.DISKLESS_METADATA_TOPIC)
    assert len(t.partitions) == 1 and len(t.partitions[0].replicas) == 1
    c2 = Cluster(seed=2)
    c2.live(0, 1, 2, 3)
    c2.apply(M.create_diskless_metadata_topic(c2.image, c2.ctx(), 3, 3).records)
    t2 = c2.image.topic_by_name(M.DISKLESS_METADATA_TOPIC)
    assert [len(p.replicas) for p in t2.partitions.values()] == [3, 3, 3]


# ================================================================== snapshots
OPS = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(["a", "b"]), st.integers(1, 4)),
    st.tuples(st.just("delete"), st.sampled_from(["a", "b"])),
    st.tuples(
        st.just("assign"),
        st.sampled_from(["a", "b", "gone"]),
        st.lists(st.tuples(st.integers(-1, 4), st.integers(-1, 3)), max_size=4),
    ),
)


@settings(max_examples=40, deadline=None)
@given(st.lists(OPS, max_size=20), st.integers(1, 3))
def test_snapshot_round_trip_with_mappings(ops, coordinators):
    c = cluster_with(coordinators)
    gone = uuid.UUID(int=random.Random(0).getrandbits(128))
    mid = None
    for i, op in enumerate(ops):
        if op[0] == "create":
            c.create(topic(op[1], n=op[2], rf=1, configs=[("diskless.enable", "true")]))
        elif op[0] == "delete":
            c.delete(names=[op[1]])
        else:
            t = c.image.topics_by_name.get(op[1], gone)
            c.run(M.assign_partition_to_batch_coordinator, assign_request((t, op[2])))
        if i == len(ops) // 2:
            mid = (c.image, len(c.log))
    img = c.image
    assert load(image_records(img), img.last_offset, img.last_epoch) == img
    # the log replayed from empty gives the same image, mappings included
    replayed = EMPTY
    for off, data in enumerate(c.log):
        replayed = replay(replayed, codec.decode_record(data)[0], off, 1)
    assert replayed == img
    if mid is not None:  # a snapshot taken midway plus the tail
        mimg, at = mid
        s = load(image_records(mimg), mimg.last_offset, mimg.last_epoch)
        for off in range(at, len(c.log)):
            s = replay(s, codec.decode_record(c.log[off])[0], off, 1)
        assert s == img


def test_snapshot_carries_one_record_per_mapped_partition_after_the_topics():
    c = cluster_with(4)
    d = tid(c, "d")
    c.run(M.assign_partition_to_batch_coordinator, assign_request((d, [(3, 2), (1, 1), (3, 3)])))
    recs = image_to_records(c.image)
    names = [r.__spec_name__ for r in recs]
    maps = [r for r in recs if r.__spec_name__ == "TopicPartitionToBatchCoordinatorMapping"]
    assert [(r.partition_index, r.batch_coordinator_partition_index) for r in maps] == [
        (1, 1),
        (3, 3),
    ]
    assert names.index("TopicPartitionToBatchCoordinatorMapping") > max(
        i for i, n in enumerate(names) if n == "PartitionRecord"
    )


def test_metadata_topic_waits_for_its_whole_replication_factor():
    """Kafka's rule for __consumer_offsets: created only once replication-factor eligible
    brokers are registered and unfenced, never with fewer replicas (no timer)."""
    c = Cluster(seed=4)
    due, short = M.metadata_topic_due, M.metadata_topic_shortfall
    assert not due(c.image, 3) and short(c.image, 3) == 3  # no broker at all
    c.live(0)
    c.register(1)  # registered, fenced: does not count
    assert not due(c.image, 3) and short(c.image, 3) == 2
    assert M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 3).records == []  # no cap
    assert due(c.image, 1) and short(c.image, 1) == 0  # replication factor 1: one is enough
    c.heartbeat(1)
    assert not due(c.image, 3) and short(c.image, 3) == 1
    c.register(7, kafka=True)  # an Apache Kafka broker never counts
    c.heartbeat(7)
    assert short(c.image, 3) == 1
    c.live(2)
    assert due(c.image, 3) and short(c.image, 3) == 0
    c.apply(M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 3).records)
    meta = c.image.topic_by_name(M.DISKLESS_METADATA_TOPIC)
    assert sorted(meta.partitions[0].replicas) == [0, 1, 2]
    assert not due(c.image, 3) and short(c.image, 5) == 0  # exists: never again


def test_a_deleted_metadata_topic_is_due_again_with_a_new_id():
    c = Cluster(seed=5)
    c.live(0)
    first = M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 1)
    c.apply(first.records)
    assert not M.metadata_topic_due(c.image, 1)
    # DeleteTopics refuses it now; a RemoveTopicRecord of a log written before that still counts
    c.apply([R("RemoveTopicRecord")(topic_id=first.response)])
    assert M.metadata_topic_due(c.image, 1)
    second = M.create_diskless_metadata_topic(c.image, c.ctx(), 1, 1)
    assert second.response not in (None, first.response)
