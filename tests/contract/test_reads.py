"""find_batches (budgets, out-of-range rules) and list_offsets (every sentinel, timestamps)."""

from __future__ import annotations

import uuid

from kafka_rpc.coordinator.api import (
    DeleteRecordsRequest,
    Errors,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)

from .conftest import batch, chain

BIG = 10**9


async def find(c, *reqs, fetch_max=BIG):
    return await c.find_batches([FindBatchRequest(*r) for r in reqs], fetch_max)


async def test_find_returns_batch_containing_offset(topic):
    tp = topic.tp()
    await topic.commit(batch(tp, 5), batch(tp, 5, byte_offset=100))  # [0..4] [5..9]
    (r,) = await find(topic.c, (tp, 3, BIG))
    assert r.error == 0 and (r.log_start_offset, r.high_watermark) == (0, 10)
    assert [(b.base_offset, b.last_offset) for b in r.batches] == [(0, 4), (5, 9)]
    (r,) = await find(topic.c, (tp, 5, BIG))
    assert [b.base_offset for b in r.batches] == [5]


async def test_find_at_hw_is_empty_success(topic):
    tp = topic.tp()
    (r,) = await find(topic.c, (tp, 0, BIG))  # empty log at 0
    assert (r.error, r.batches, r.log_start_offset, r.high_watermark) == (0, (), 0, 0)
    await topic.commit(batch(tp, 3))
    (r,) = await find(topic.c, (tp, 3, BIG))
    assert (r.error, r.batches, r.high_watermark) == (0, (), 3)


async def test_find_out_of_range(topic):
    tp = topic.tp()
    await topic.commit(batch(tp, 3), batch(tp, 3, byte_offset=100))
    await topic.c.delete_records([DeleteRecordsRequest(tp, 4)])  # LSO 4, batch [3..5] kept
    for off in (4 - 1, 7, -1):
        (r,) = await find(topic.c, (tp, off, BIG))
        assert (r.error, r.batches, r.log_start_offset, r.high_watermark) == (
            Errors.OFFSET_OUT_OF_RANGE,
            (),
            4,
            6,
        )
    (r,) = await find(topic.c, (tp, 4, BIG))
    assert r.error == 0 and [b.base_offset for b in r.batches] == [3]  # straddling LSO


async def test_find_unknown(topic):
    (r,) = await find(topic.c, (TopicIdPartition(uuid.uuid4(), 0), 0, BIG))
    assert (r.error, r.batches, r.log_start_offset, r.high_watermark) == (3, (), -1, -1)
    (r,) = await find(topic.c, (topic.tp(7), 0, BIG))
    assert r.error == 3


async def test_partition_budget_includes_crossing_batch(topic):
    tp = topic.tp()
    await topic.commit(*chain(tp, 5, size=100))
    (r,) = await find(topic.c, (tp, 0, 250))
    assert len(r.batches) == 3  # 0, 100, 200 < 250 -> third admitted, then 300 >= 250 stops
    (r,) = await find(topic.c, (tp, 0, 200))
    assert len(r.batches) == 2
    (r,) = await find(topic.c, (tp, 0, 0))
    assert len(r.batches) == 1  # first batch of the request is always returned


async def test_request_budget_across_partitions(topic):
    a, b = topic.tp(0), topic.tp(1)
    await topic.commit(*chain(a, 3, size=100))
    await topic.commit(*chain(b, 3, size=100))
    # request-level grant only for the very first batch: [1, 0]
    r = await find(topic.c, (a, 0, 1), (b, 0, 1), fetch_max=1)
    assert [len(x.batches) for x in r] == [1, 0]
    assert [x.error for x in r] == [0, 0]
    # request budget 250: a gets 0,100,200 -> 300 >= 250, b gets nothing
    r = await find(topic.c, (a, 0, BIG), (b, 0, BIG), fetch_max=250)
    assert [len(x.batches) for x in r] == [3, 0]
    r = await find(topic.c, (a, 0, 150), (b, 0, 150), fetch_max=350)
    assert [len(x.batches) for x in r] == [2, 2]  # 200 < 350 -> b's first two: 300, 400
    # the grant goes to the first batch wherever it is
    r = await find(topic.c, (a, 3, 0), (b, 0, 0), fetch_max=0)
    assert [len(x.batches) for x in r] == [0, 1]


async def test_oversized_first_batch_is_returned(topic):
    tp = topic.tp()
    await topic.commit(batch(tp, size=5000))
    (r,) = await find(topic.c, (tp, 0, 10), fetch_max=10)
    assert [b.byte_size for b in r.batches] == [5000]


async def test_same_partition_twice_is_answered_twice(topic):
    tp = topic.tp()
    await topic.commit(*chain(tp, 2))
    r = await find(topic.c, (tp, 0, BIG), (tp, 1, BIG))
    assert [[b.base_offset for b in x.batches] for x in r] == [[0, 1], [1]]


async def lo(c, tp, ts):
    (r,) = await c.list_offsets([ListOffsetsRequest(tp, ts)])
    assert r.topic_id_partition == tp
    return r.error, r.timestamp, r.offset


async def test_list_offsets_empty(topic):
    tp = topic.tp()
    assert await lo(topic.c, tp, -1) == (0, -1, 0)
    assert await lo(topic.c, tp, -2) == (0, -1, 0)
    assert await lo(topic.c, tp, -3) == (0, -1, -1)
    assert await lo(topic.c, tp, -4) == (0, -1, 0)
    assert await lo(topic.c, tp, -5) == (0, -1, -1)
    assert await lo(topic.c, tp, 0) == (0, -1, -1)


async def test_list_offsets_sentinels(topic, clock):
    tp = topic.tp()
    # [0..1] ts 100, [2..4] ts 300, [5..5] ts 300 (tie), [6..6] log-append (clock)
    await topic.commit(
        batch(tp, 2, ts=100, byte_offset=0),
        batch(tp, 3, ts=300, byte_offset=100),
        batch(tp, 1, ts=300, byte_offset=200),
        batch(tp, 1, ts=50, tt=1, byte_offset=300),
    )
    await topic.c.delete_records([DeleteRecordsRequest(tp, 1)])
    assert await lo(topic.c, tp, -1) == (0, -1, 7)
    assert await lo(topic.c, tp, -2) == (0, -1, 1)
    assert await lo(topic.c, tp, -4) == (0, -1, 1)
    assert await lo(topic.c, tp, -5) == (0, -1, -1)
    assert await lo(topic.c, tp, -3) == (0, clock.now, 6)
    for bad in (-6, -100):
        assert await lo(topic.c, tp, bad) == (Errors.UNKNOWN_SERVER_ERROR, -1, -1)


async def test_list_offsets_max_timestamp_ties_and_create_time(topic):
    tp = topic.tp()
    await topic.commit(
        batch(tp, 2, ts=100),
        batch(tp, 3, ts=300, byte_offset=100),
        batch(tp, 1, ts=300, byte_offset=200),
    )
    assert await lo(topic.c, tp, -3) == (0, 300, 4)  # last offset of the first batch having it


async def test_list_offsets_by_timestamp(topic, clock):
    tp = topic.tp()
    await topic.commit(
        batch(tp, 2, ts=100),
        batch(tp, 3, ts=300, byte_offset=100),
        batch(tp, 1, ts=200, byte_offset=200),
    )
    assert await lo(topic.c, tp, 0) == (0, 100, 0)
    assert await lo(topic.c, tp, 100) == (0, 100, 0)
    assert await lo(topic.c, tp, 101) == (0, 300, 2)
    assert await lo(topic.c, tp, 200) == (0, 300, 2)  # first batch in offset order with ts >= 200
    assert await lo(topic.c, tp, 301) == (0, -1, -1)
    assert await lo(topic.c, tp, 2**63 - 1) == (0, -1, -1)
    await topic.c.delete_records([DeleteRecordsRequest(tp, 1)])
    assert await lo(topic.c, tp, 0) == (0, 100, 1)  # clamped to the LSO


async def test_list_offsets_unknown(topic):
    for tp in (TopicIdPartition(uuid.uuid4(), 0), topic.tp(9)):
        for ts in (-1, -2, -3, 5):
            assert await lo(topic.c, tp, ts) == (3, -1, -1)
