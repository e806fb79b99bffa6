"""commit_file and create_topic_and_partitions: offsets, validation, object bookkeeping."""

from __future__ import annotations

import uuid

from kafka_rpc.coordinator.api import (
    ZERO_UUID,
    CommitBatchRequest,
    CreateTopicAndPartitionsRequest,
    Errors,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)

from .conftest import START_MS, batch, chain


async def hw(c, tp) -> int:
    return (await c.list_offsets([ListOffsetsRequest(tp, -1)]))[0].offset


async def test_offsets_assigned_gap_free_from_hw(topic):
    tp = topic.tp()
    # request offsets only give the record count: 5, 1, 3 records
    r = await topic.commit(
        CommitBatchRequest(tp, 0, 10, 100, 104, 1, 0),
        CommitBatchRequest(tp, 10, 10, 7, 7, 1, 0),
        CommitBatchRequest(tp, 20, 10, 0, 2, 1, 0),
    )
    assert [x.assigned_base_offset for x in r] == [0, 5, 6]
    assert all(x.error == Errors.NONE and not x.is_duplicate for x in r)
    assert all(x.log_append_time == START_MS and x.log_start_offset == 0 for x in r)
    r2 = await topic.commit(batch(tp, 4))
    assert r2[0].assigned_base_offset == 9
    assert await hw(topic.c, tp) == 13


async def test_partitions_are_independent_and_may_reappear(topic):
    a, b = topic.tp(0), topic.tp(1)
    reqs = [batch(a, 2), batch(b, 3), batch(a, 1), batch(b, 1)]
    reqs = [
        CommitBatchRequest(r.topic_id_partition, i * 100, 100, r.base_offset, r.last_offset, 1, 0)
        for i, r in enumerate(reqs)
    ]
    r = await topic.commit(*reqs)
    assert [x.assigned_base_offset for x in r] == [0, 0, 2, 3]
    assert await hw(topic.c, a) == 3
    assert await hw(topic.c, b) == 4
    found = await topic.c.find_batches([FindBatchRequest(a, 0, 10**6)], 10**6)
    assert [(x.base_offset, x.last_offset, x.byte_offset) for x in found[0].batches] == [
        (0, 1, 0),
        (2, 2, 200),
    ]


async def test_zero_topic_id_and_unknown_partitions(topic):
    zero = TopicIdPartition(ZERO_UUID, 0)
    unknown_topic = TopicIdPartition(uuid.uuid4(), 0)
    unknown_partition = topic.tp(3)
    r = await topic.commit(
        batch(zero),
        batch(topic.tp(), byte_offset=100),
        batch(unknown_topic, byte_offset=200),
        batch(unknown_partition, byte_offset=300),
        batch(topic.tp(), byte_offset=400),
    )
    assert [x.error for x in r] == [3, 0, 3, 3, 0]
    assert [x.assigned_base_offset for x in r] == [-1, 0, -1, -1, 1]
    assert r[0].log_append_time == -1 and r[0].log_start_offset == -1 and not r[0].is_duplicate
    assert await topic.c.create_topic_and_partitions(
        [CreateTopicAndPartitionsRequest(ZERO_UUID, "z", 1)]
    ) == [Errors.INVALID_REQUEST]
    assert (await topic.c.find_batches([FindBatchRequest(zero, 0, 1)], 1))[0].error == 3


async def test_create_is_idempotent_and_extends(coord):
    t = uuid.uuid4()
    tp = TopicIdPartition(t, 0)
    assert await coord.create_topic_and_partitions(
        [CreateTopicAndPartitionsRequest(t, "a", 1)]
    ) == [0]
    await coord.commit_file("k", 1, 100, [batch(tp)])
    assert await coord.create_topic_and_partitions(
        [
            CreateTopicAndPartitionsRequest(t, "other-name", 2),
            CreateTopicAndPartitionsRequest(uuid.uuid4(), "b", -1),
            CreateTopicAndPartitionsRequest(uuid.uuid4(), "", 1),
            CreateTopicAndPartitionsRequest(uuid.uuid4(), "c", 0),
        ]
    ) == [0, 42, 42, 0]
    assert await hw(coord, tp) == 1  # existing partition untouched
    assert await hw(coord, TopicIdPartition(t, 1)) == 0  # new one added


async def test_bad_entries_are_isolated(topic):
    tp = topic.tp()
    good = batch(tp, 2, byte_offset=0)
    bad = [
        CommitBatchRequest(tp, -1, 10, 0, 0, 1, 0),  # negative byte offset
        CommitBatchRequest(tp, 0, 0, 0, 0, 1, 0),  # size 0
        CommitBatchRequest(tp, 0, -5, 0, 0, 1, 0),  # negative size
        CommitBatchRequest(tp, 0, 10, 5, 4, 1, 0),  # last < base
        CommitBatchRequest(tp, 0, 10, -1, 0, 1, 0),  # negative base offset
        CommitBatchRequest(tp, 900, 200, 0, 0, 1, 0),  # beyond the object size
        CommitBatchRequest(tp, 0, 10, 0, 0, 1, 5),  # bad timestamp type
        CommitBatchRequest(tp, 0, 10, 0, 0, -7, 0),  # bad timestamp
        CommitBatchRequest(tp, 0, 10, 0, 0, 1, 0, magic=3),
        CommitBatchRequest(tp, 0, 10, 0, 0, 1, 0, producer_id=-2),
        CommitBatchRequest(
            tp,
            0,
            10,
            0,
            0,
            1,
            0,
            producer_id=5,
            producer_epoch=0,
            base_sequence=-1,
            last_sequence=-1,
        ),  # idempotent without sequence
    ]
    r = await topic.commit(good, *bad, batch(tp, 3, byte_offset=100), file_size=1000)
    assert [x.error for x in r] == [0] + [Errors.INVALID_REQUEST] * len(bad) + [0]
    assert r[-1].assigned_base_offset == 2
    assert all(x.assigned_base_offset == -1 for x in r[1:-1])
    assert await hw(topic.c, tp) == 5
    # the rejected producer-id 5 left no state: it may start anywhere later
    r = await topic.commit(batch(tp, pid=5, epoch=0, seq=9))
    assert r[0].error == 0


async def test_repeated_object_key_rejects_every_entry(topic):
    tp = topic.tp()
    await topic.commit(batch(tp), key="same")
    r = await topic.commit(batch(tp), batch(topic.tp(1), byte_offset=100), key="same")
    assert [x.error for x in r] == [Errors.INVALID_REQUEST] * 2
    assert await hw(topic.c, tp) == 1
    assert await hw(topic.c, topic.tp(1)) == 0
    assert await topic.c.get_files_to_delete() == []


async def test_invalid_object_rejects_every_entry(topic):
    tp = topic.tp()
    assert [x.error for x in await topic.c.commit_file("", 1, 100, [batch(tp)])] == [42]
    assert [x.error for x in await topic.c.commit_file("k", 1, -1, [batch(tp)])] == [42]
    assert await hw(topic.c, tp) == 0
    assert await topic.c.is_safe_to_delete_file("k")


async def test_empty_object_writes_nothing(topic):
    assert await topic.c.commit_file("empty", 1, 0, []) == []
    assert await topic.c.is_safe_to_delete_file("empty")
    assert await topic.c.get_files_to_delete() == []


async def test_commit_accepting_nothing_marks_object_deleting(topic, clock):
    r = await topic.commit(batch(TopicIdPartition(uuid.uuid4(), 0)), key="dead")
    assert r[0].error == 3
    assert not await topic.c.is_safe_to_delete_file("dead")
    files = await topic.c.get_files_to_delete()
    assert [(f.object_key, f.marked_for_deletion_at_ms, f.size) for f in files] == [
        ("dead", clock.now, 100)
    ]


async def test_timestamps(topic, clock):
    tp = topic.tp()
    r = await topic.commit(batch(tp, ts=111, tt=0), batch(tp, ts=222, tt=1, byte_offset=100))
    assert [x.log_append_time for x in r] == [clock.now, clock.now]
    found = (await topic.c.find_batches([FindBatchRequest(tp, 0, 10**6)], 10**6))[0].batches
    assert [
        (b.batch_max_timestamp, b.log_append_timestamp, b.timestamp_type, b.timestamp)
        for b in found
    ] == [(111, clock.now, 0, 111), (222, clock.now, 1, clock.now)]


async def test_batch_ids_increase_and_metadata_roundtrips(topic):
    tp = topic.tp()
    await topic.commit(*chain(tp, 2))
    await topic.commit(
        CommitBatchRequest(tp, 7, 50, 0, 9, 5, 0, 77, 3, 10, 19, magic=2), file_size=60
    )
    found = (await topic.c.find_batches([FindBatchRequest(tp, 0, 10**6)], 10**6))[0].batches
    ids = [b.batch_id for b in found]
    assert ids == sorted(ids) and len(set(ids)) == 3
    b = found[-1]
    assert (
        b.byte_offset,
        b.byte_size,
        b.base_offset,
        b.last_offset,
        b.producer_id,
        b.producer_epoch,
        b.base_sequence,
        b.last_sequence,
        b.magic,
        b.topic_id_partition,
    ) == (7, 50, 2, 11, 77, 3, 10, 19, 2, tp)
    assert b.object_key.endswith("-2")
