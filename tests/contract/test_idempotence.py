"""Idempotent producers: Kafka's ProducerStateManager rules (5-batch window, fencing, epoch bumps,
wrap-around, expiry), per (partition, producer id)."""

from __future__ import annotations

from kafka_rpc.coordinator.api import (
    INT32_MAX,
    CreateTopicAndPartitionsRequest,
    Errors,
    ListOffsetsRequest,
)

from .conftest import batch

OOO = Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
FENCED = Errors.INVALID_PRODUCER_EPOCH
P = 1000


async def hw(c, tp) -> int:
    return (await c.list_offsets([ListOffsetsRequest(tp, -1)]))[0].offset


async def one(topic, **kw):
    return (await topic.commit(batch(topic.tp(), **kw)))[0]


async def test_sequence_continues(topic):
    assert (await one(topic, records=3, pid=P, epoch=0, seq=0)).assigned_base_offset == 0
    assert (await one(topic, records=2, pid=P, epoch=0, seq=3)).assigned_base_offset == 3
    assert (await one(topic, records=1, pid=P, epoch=0, seq=5)).assigned_base_offset == 5


async def test_new_producer_may_start_at_any_sequence(topic):
    r = await one(topic, pid=P, epoch=3, seq=42)
    assert r.error == 0 and r.assigned_base_offset == 0
    assert (await one(topic, pid=P, epoch=3, seq=43)).error == 0


async def test_duplicate_answers_original_offset(topic, clock):
    first = await one(topic, records=2, pid=P, epoch=0, seq=0, ts=555)
    await one(topic, records=1, pid=P, epoch=0, seq=2)
    clock.advance(10)
    dup = await one(topic, records=2, pid=P, epoch=0, seq=0)
    assert dup.error == 0 and dup.is_duplicate
    assert dup.assigned_base_offset == first.assigned_base_offset == 0
    assert dup.log_append_time == 555  # the original batch's timestamp
    assert dup.log_start_offset == 0
    assert await hw(topic.c, topic.tp()) == 3  # nothing appended
    # the object that held only a duplicate is garbage
    assert len(await topic.c.get_files_to_delete()) == 1


async def test_duplicate_window_is_five_batches(topic):
    offsets = [(await one(topic, pid=P, epoch=0, seq=s)).assigned_base_offset for s in range(5)]
    dup = await one(topic, pid=P, epoch=0, seq=0)  # oldest of the 5 retained
    assert dup.is_duplicate and dup.assigned_base_offset == offsets[0]
    await one(topic, pid=P, epoch=0, seq=5)  # 6th batch evicts seq 0
    assert (await one(topic, pid=P, epoch=0, seq=0)).error == OOO
    dup = await one(topic, pid=P, epoch=0, seq=1)
    assert dup.is_duplicate and dup.assigned_base_offset == offsets[1]


async def test_duplicate_and_chain_inside_one_object(topic):
    tp = topic.tp()
    r = await topic.commit(
        batch(tp, 2, pid=P, epoch=0, seq=0, byte_offset=0),
        batch(tp, 2, pid=P, epoch=0, seq=2, byte_offset=100),
        batch(tp, 2, pid=P, epoch=0, seq=0, byte_offset=200),
        batch(tp, 2, pid=P, epoch=0, seq=9, byte_offset=300),
    )
    assert [(x.error, x.assigned_base_offset, x.is_duplicate) for x in r] == [
        (0, 0, False),
        (0, 2, False),
        (0, 0, True),
        (OOO, -1, False),
    ]
    assert await hw(topic.c, tp) == 4


async def test_out_of_order_cases(topic):
    await one(topic, records=5, pid=P, epoch=0, seq=10)  # last = 14
    assert (await one(topic, pid=P, epoch=0, seq=13)).error == OOO
    assert (await one(topic, pid=P, epoch=0, seq=10, last_seq=15)).error == OOO  # same base
    assert (await one(topic, pid=P, epoch=0, seq=16)).error == OOO  # gap
    assert await hw(topic.c, topic.tp()) == 5
    assert (await one(topic, pid=P, epoch=0, seq=15)).error == 0


async def test_lower_epoch_is_fenced(topic):
    await one(topic, pid=P, epoch=3, seq=0)
    r = await one(topic, pid=P, epoch=2, seq=1)
    assert r.error == FENCED and r.assigned_base_offset == -1 and r.log_start_offset == -1
    assert await hw(topic.c, topic.tp()) == 1


async def test_epoch_bump_must_start_at_zero(topic):
    await one(topic, pid=P, epoch=0, seq=0)
    await one(topic, pid=P, epoch=0, seq=1)
    assert (await one(topic, pid=P, epoch=1, seq=1)).error == OOO
    assert (await one(topic, pid=P, epoch=1, seq=0)).error == 0
    # the old epoch is now fenced; the old epoch's batches are no duplicates of the new one
    assert (await one(topic, pid=P, epoch=0, seq=2)).error == FENCED
    assert (await one(topic, pid=P, epoch=1, seq=1)).error == 0
    assert await hw(topic.c, topic.tp()) == 4


async def test_epoch_bump_in_one_object(topic):
    tp = topic.tp()
    r = await topic.commit(
        batch(tp, pid=P, epoch=0, seq=7, byte_offset=0),
        batch(tp, pid=P, epoch=1, seq=0, byte_offset=100),
        batch(tp, pid=P, epoch=0, seq=8, byte_offset=200),
    )
    assert [x.error for x in r] == [0, 0, FENCED]


async def test_sequence_wraps_around(topic):
    assert (await one(topic, records=2, pid=P, epoch=0, seq=INT32_MAX - 1)).error == 0
    r = await one(topic, records=3, pid=P, epoch=0, seq=0)
    assert r.error == 0 and r.assigned_base_offset == 2
    assert (await one(topic, records=1, pid=P, epoch=0, seq=3)).error == 0
    # a batch that itself wraps (last < base)
    await one(topic, records=1, pid=P + 1, epoch=0, seq=INT32_MAX - 1)
    assert (await one(topic, records=3, pid=P + 1, epoch=0, seq=INT32_MAX)).error == 0
    assert (await one(topic, records=1, pid=P + 1, epoch=0, seq=2)).error == 0
    # not wrapping from a non-max value
    assert (await one(topic, pid=P + 1, epoch=0, seq=0)).error == OOO


async def test_wrap_requires_max(topic):
    await one(topic, pid=P, epoch=0, seq=INT32_MAX - 5)
    assert (await one(topic, pid=P, epoch=0, seq=0)).error == OOO


async def test_state_expires(topic, clock):
    await one(topic, pid=P, epoch=0, seq=0)
    clock.advance(86_400_000 - 1)
    assert (await one(topic, pid=P, epoch=0, seq=7)).error == OOO  # still has state
    assert (await one(topic, pid=P, epoch=0, seq=1)).error == 0  # refreshes
    clock.advance(86_400_000)
    assert (await one(topic, pid=P, epoch=0, seq=7)).error == 0  # expired: starts anywhere
    clock.advance(86_400_000)
    # expired state no longer fences a lower epoch either
    assert (await one(topic, pid=P, epoch=0, seq=7)).error == 0  # would be a dup if not expired
    assert (await one(topic, pid=P, epoch=0, seq=8)).error == 0


async def test_state_is_per_partition_and_producer(topic):
    a, b = topic.tp(0), topic.tp(1)
    r = await topic.commit(
        batch(a, pid=P, epoch=0, seq=0, byte_offset=0),
        batch(b, pid=P, epoch=0, seq=50, byte_offset=100),
        batch(a, pid=P + 1, epoch=9, seq=3, byte_offset=200),
        batch(b, pid=P, epoch=0, seq=51, byte_offset=300),
        batch(a, pid=P, epoch=0, seq=1, byte_offset=400),
    )
    assert [x.error for x in r] == [0] * 5
    assert [x.assigned_base_offset for x in r] == [0, 0, 1, 1, 2]


async def test_non_idempotent_batches_skip_checks(topic):
    for _ in range(3):
        assert (await one(topic, pid=-1, epoch=-1, seq=-1)).error == 0
    # producer id without epoch is not idempotent (Inkless: both must be > -1)
    assert (await one(topic, pid=P, epoch=-1, seq=5)).error == 0
    assert (await one(topic, pid=P, epoch=-1, seq=5)).error == 0


async def test_delete_topics_removes_producer_state(topic):
    await one(topic, pid=P, epoch=5, seq=0)
    await topic.c.delete_topics([topic.id])
    await topic.c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(topic.id, "t", 1)])
    r = await one(topic, pid=P, epoch=1, seq=33)  # no state: lower epoch and any sequence
    assert r.error == 0 and r.assigned_base_offset == 0


async def test_custom_expiration(coord_factory):
    c, clock, topic = await coord_factory(producer_id_expiration_ms=1000)
    await topic.commit(batch(topic.tp(), pid=P, epoch=0, seq=0))
    clock.advance(999)
    assert (await topic.commit(batch(topic.tp(), pid=P, epoch=0, seq=5)))[0].error == OOO
    clock.advance(1000)
    assert (await topic.commit(batch(topic.tp(), pid=P, epoch=0, seq=5)))[0].error == 0
