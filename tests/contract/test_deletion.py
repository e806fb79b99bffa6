"""delete_records, delete_topics, soft/physical object deletion, is_safe_to_delete_file,
retention."""

from __future__ import annotations

import uuid

from kafka_rpc.coordinator.api import (
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    Errors,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)

from .conftest import batch, chain

BIG = 10**9


async def bounds(c, tp):
    (r,) = await c.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
    return r.log_start_offset, r.high_watermark


async def offsets(c, tp):
    lso, _ = await bounds(c, tp)
    (r,) = await c.find_batches([FindBatchRequest(tp, max(lso, 0), BIG)], BIG)
    return [(b.base_offset, b.last_offset) for b in r.batches]


async def keys_to_delete(c, **kw):
    return [f.object_key for f in await c.get_files_to_delete(**kw)]


async def dr(c, tp, off):
    (r,) = await c.delete_records([DeleteRecordsRequest(tp, off)])
    return r.error, r.low_watermark


async def test_delete_records(topic):
    tp = topic.tp()
    await topic.commit(batch(tp, 3), key="a")  # [0..2]
    await topic.commit(batch(tp, 3), key="b")  # [3..5]
    assert await dr(topic.c, tp, 4) == (0, 4)
    assert await offsets(topic.c, tp) == [(3, 5)]  # straddling batch kept
    assert await keys_to_delete(topic.c) == ["a"]
    assert await dr(topic.c, tp, 2) == (0, 4)  # never moves back
    assert await dr(topic.c, tp, 7) == (Errors.OFFSET_OUT_OF_RANGE, -1)
    assert await dr(topic.c, tp, -2) == (Errors.OFFSET_OUT_OF_RANGE, -1)
    assert await bounds(topic.c, tp) == (4, 6)
    assert await dr(topic.c, tp, -1) == (0, 6)  # -1 = HW: empties the partition
    assert await offsets(topic.c, tp) == []
    assert await keys_to_delete(topic.c) == ["a", "b"]
    (r,) = await topic.c.find_batches([FindBatchRequest(tp, 5, BIG)], BIG)
    assert r.error == Errors.OFFSET_OUT_OF_RANGE
    # the log continues from the HW
    assert (await topic.commit(batch(tp)))[0].assigned_base_offset == 6
    assert (await topic.commit(batch(tp)))[0].log_start_offset == 6


async def test_delete_records_several_and_unknown(topic):
    a, b = topic.tp(0), topic.tp(1)
    await topic.commit(*chain(a, 3), *[batch(b, byte_offset=300 + 100 * i) for i in range(2)])
    r = await topic.c.delete_records(
        [
            DeleteRecordsRequest(a, 1),
            DeleteRecordsRequest(TopicIdPartition(uuid.uuid4(), 0), 0),
            DeleteRecordsRequest(b, 5),
            DeleteRecordsRequest(a, 2),
            DeleteRecordsRequest(b, 2),
        ]
    )
    assert [(x.error, x.low_watermark) for x in r] == [(0, 1), (3, -1), (1, -1), (0, 2), (0, 2)]
    assert await keys_to_delete(topic.c) == []  # the shared object is still referenced


async def test_delete_topics(topic):
    other = uuid.uuid4()
    await topic.c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(other, "o", 1)])
    await topic.commit(batch(topic.tp()), key="only-mine")
    await topic.commit(
        batch(topic.tp(1)), batch(TopicIdPartition(other, 0), byte_offset=100), key="shared"
    )
    assert await topic.c.delete_topics([topic.id, uuid.uuid4(), topic.id]) == [0, 3, 3]
    assert await keys_to_delete(topic.c) == ["only-mine"]
    assert await topic.c.delete_topics([topic.id]) == [3]  # idempotent, reported as unknown
    for tp in (topic.tp(0), topic.tp(1)):
        assert (await topic.c.find_batches([FindBatchRequest(tp, 0, 1)], 1))[0].error == 3
        assert (await topic.c.list_offsets([ListOffsetsRequest(tp, -1)]))[0].error == 3
        assert (await topic.commit(batch(tp)))[0].error == 3
        assert await dr(topic.c, tp, 0) == (3, -1)
    assert await offsets(topic.c, TopicIdPartition(other, 0)) == [(0, 0)]
    assert await topic.c.delete_topics([other]) == [Errors.NONE]
    assert await keys_to_delete(topic.c) == sorted(await keys_to_delete(topic.c))
    assert "shared" in await keys_to_delete(topic.c)


async def test_soft_and_physical_deletion(topic, clock):
    tp = topic.tp()
    await topic.commit(batch(tp), key="k1")
    await topic.commit(batch(tp), key="k2")
    assert not await topic.c.is_safe_to_delete_file("k1")
    assert await topic.c.delete_files(["k1"]) == [Errors.INVALID_REQUEST]  # still live
    assert not await topic.c.is_safe_to_delete_file("k1")
    t1 = clock.now
    await dr(topic.c, tp, 1)
    clock.advance(1000)
    await dr(topic.c, tp, 2)
    files = await topic.c.get_files_to_delete()
    assert [(f.object_key, f.marked_for_deletion_at_ms, f.size) for f in files] == [
        ("k1", t1, 100),
        ("k2", t1 + 1000, 100),
    ]
    assert await keys_to_delete(topic.c, marked_before_ms=t1) == []  # strict
    assert await keys_to_delete(topic.c, marked_before_ms=t1 + 1) == ["k1"]
    assert await keys_to_delete(topic.c, limit=1) == ["k1"]
    assert await keys_to_delete(topic.c, after_object_key="k1") == ["k2"]
    assert await topic.c.delete_files(["k1", "nope", "k1"]) == [
        Errors.NONE,
        Errors.RESOURCE_NOT_FOUND,  # never recorded
        Errors.RESOURCE_NOT_FOUND,  # forgotten by its earlier occurrence
    ]
    assert await topic.c.is_safe_to_delete_file("k1")
    assert not await topic.c.is_safe_to_delete_file("k2")
    assert await keys_to_delete(topic.c) == ["k2"]
    # a key can be reused once forgotten
    assert (await topic.commit(batch(tp), key="k1"))[0].error == 0


async def test_is_safe_to_delete_file(topic):
    assert await topic.c.is_safe_to_delete_file("never-seen")
    assert await topic.c.is_safe_to_delete_file("")
    await topic.commit(batch(topic.tp()), key="x")
    assert not await topic.c.is_safe_to_delete_file("x")


async def ret(c, tp, rb=-1, rm=-1, cap=0):
    (r,) = await c.enforce_retention([EnforceRetentionRequest(tp, rb, rm)], cap)
    return r.error, r.batches_deleted, r.bytes_deleted, r.log_start_offset


async def test_retention_by_bytes(topic):
    tp = topic.tp()
    for i in range(4):
        await topic.commit(batch(tp, 2, size=100), key=f"r{i}")  # [0..1] [2..3] [4..5] [6..7]
    assert await ret(topic.c, tp) == (0, 0, 0, 0)  # both disabled
    assert await ret(topic.c, tp, rb=400) == (0, 0, 0, 0)
    assert await ret(topic.c, tp, rb=250) == (0, 2, 200, 4)  # whole batches: 200 left
    assert await keys_to_delete(topic.c) == ["r0", "r1"]
    assert await ret(topic.c, tp, rb=0) == (0, 2, 200, 8)  # nothing qualifies: up to HW
    assert await offsets(topic.c, tp) == []
    assert await ret(topic.c, tp, rb=0) == (0, 0, 0, 8)


async def test_retention_by_time(topic, clock):
    tp = topic.tp()
    now = clock.now
    await topic.commit(
        batch(tp, ts=now - 5000),
        batch(tp, ts=now - 1000, byte_offset=100),
        batch(tp, ts=now - 9000, byte_offset=200),
        batch(tp, ts=now, byte_offset=300),
    )
    assert await ret(topic.c, tp, rm=1000) == (0, 1, 100, 1)  # stops at the first kept batch
    assert await ret(topic.c, tp, rm=999) == (0, 2, 200, 3)  # the older batch 2 goes too
    assert await ret(topic.c, tp, rm=10**9) == (0, 0, 0, 3)
    clock.advance(1)
    assert await ret(topic.c, tp, rm=0) == (0, 1, 100, 4)


async def test_retention_log_append_time_uses_commit_clock(topic, clock):
    tp = topic.tp()
    await topic.commit(batch(tp, ts=0, tt=1))  # producer ts ignored
    assert await ret(topic.c, tp, rm=10) == (0, 0, 0, 0)
    clock.advance(11)
    assert await ret(topic.c, tp, rm=10) == (0, 1, 100, 1)


async def test_retention_both_policies_and_cap(topic, clock):
    tp = topic.tp()
    now = clock.now
    await topic.commit(*[batch(tp, ts=now - 100 * (5 - i), byte_offset=100 * i) for i in range(5)])
    # time keeps ts >= now-250 (batches 3, 4); bytes keep the last 300 (2, 3, 4): union deletes 3
    assert await ret(topic.c, tp, rb=300, rm=250, cap=2) == (0, 2, 200, 2)  # capped
    assert await ret(topic.c, tp, rb=300, rm=250) == (0, 1, 100, 3)
    assert await offsets(topic.c, tp) == [(3, 3), (4, 4)]


async def test_retention_does_not_move_lso_back(topic):
    tp = topic.tp()
    await topic.commit(batch(tp, 5))
    await dr(topic.c, tp, 3)  # LSO 3 inside the only batch
    assert await ret(topic.c, tp, rb=1000) == (0, 0, 0, 3)


async def test_retention_unknown(topic):
    assert await ret(topic.c, TopicIdPartition(uuid.uuid4(), 0), rb=1) == (3, -1, -1, -1)


async def test_list_partitions_follows_create_and_delete(coord):
    a, b = uuid.UUID(int=2), uuid.UUID(int=1)
    await coord.create_topic_and_partitions(
        [CreateTopicAndPartitionsRequest(a, "a", 2), CreateTopicAndPartitionsRequest(b, "b", 1)]
    )
    assert await coord.list_partitions() == [
        TopicIdPartition(b, 0), TopicIdPartition(a, 0), TopicIdPartition(a, 1)
    ]
    await coord.delete_topics([a])
    assert await coord.list_partitions() == [TopicIdPartition(b, 0)]
