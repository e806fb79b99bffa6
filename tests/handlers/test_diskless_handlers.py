"""The KIP-1164 diskless handlers, end to end through the wire codec, on every coordinator."""

from __future__ import annotations

import logging
import sqlite3
import uuid
from collections.abc import AsyncIterator

import pytest

from kafka_rpc.coordinator import BatchCoordinator
from kafka_rpc.coordinator.factory import create_coordinator
from kafka_rpc.handlers import diskless as h
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E

T0 = 1_700_000_000_000
ZERO = uuid.UUID(int=0)

InitReq = codec.module("InitDisklessTopicsRequest")
CommitReq = codec.module("CommitBatchesRequest")
DelTopicsReq = codec.module("DeleteDisklessTopicsRequest")
DelRecordsReq = codec.module("DeleteDisklessRecordsRequest")
FindReq = codec.module("FindDisklessBatchesRequest")
ListReq = codec.module("ListDisklessOffsetsRequest")
FilesReq = codec.module("ListDisklessFilesToDeleteRequest")
DelFilesReq = codec.module("DeleteDisklessFilesRequest")

HANDLERS = {
    "InitDisklessTopicsRequest": h.handle_init_diskless_topics,
    "CommitBatchesRequest": h.handle_commit_batches,
    "DeleteDisklessTopicsRequest": h.handle_delete_diskless_topics,
    "DeleteDisklessRecordsRequest": h.handle_delete_diskless_records,
    "FindDisklessBatchesRequest": h.handle_find_diskless_batches,
    "ListDisklessOffsetsRequest": h.handle_list_diskless_offsets,
    "ListDisklessFilesToDeleteRequest": h.handle_list_diskless_files_to_delete,
    "DeleteDisklessFilesRequest": h.handle_delete_diskless_files,
}


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["memory", "sqlite"])
async def coord(request, tmp_path, clock) -> AsyncIterator[BatchCoordinator]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/c.db"
    c = create_coordinator(url, time_ms=clock)
    await c.start()
    try:
        yield c
    finally:
        await c.close()


def wire(msg):
    """Encode then decode ``msg`` at version 0 (the only version of these APIs)."""
    name = type(msg).__spec_name__
    back = codec.decode(name, 0, codec.encode(msg, 0))
    assert back == msg
    return back


async def call(coordinator, request):
    name = type(request).__spec_name__
    response = await HANDLERS[name](coordinator, wire(request), broker_id=1)
    assert type(response).__spec_name__ == name.replace("Request", "Response")
    return wire(response)


# -- request builders ----------------------------------------------------------------------------


def init(*topics):
    return InitReq.InitDisklessTopicsRequest(
        topics=tuple(InitReq.InitDisklessTopic(topic_id=t, num_partitions=n) for t, n in topics)
    )


def entry(
    p, key, records=1, *, bo=0, size=10, base=0, ts=-1, tst=0, pid=-1, epoch=-1, seq=-1, last=None
):
    return CommitReq.CommitBatchesTopicPartition(
        partition_index=p,
        object_key=key,
        byte_offset=bo,
        size=size,
        base_offset=base,
        last_offset=base + records - 1 if last is None else last,
        batch_max_timestamp=ts,
        message_timestamp_type=tst,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        last_sequence=seq + records - 1 if seq >= 0 else -1,
    )


def commit(*groups, broker_id=7):
    """groups: tuples of (topic_id, [entries]) per Batches struct."""
    return CommitReq.CommitBatchesRequest(
        broker_id=broker_id,
        batches=tuple(
            CommitReq.Batches(
                topics=tuple(
                    CommitReq.CommitBatchesTopic(topic_id=t, partitions=tuple(ps)) for t, ps in g
                )
            )
            for g in groups
        ),
    )


def find(topics, max_bytes=10**6):
    return FindReq.FindDisklessBatchesRequest(
        topics=tuple(
            FindReq.FindDisklessBatchTopic(
                topic_id=t,
                partitions=tuple(
                    FindReq.FindDisklessBatchTopicPartition(
                        partition_index=p, offset=o, max_bytes=m
                    )
                    for p, o, m in ps
                ),
            )
            for t, ps in topics
        ),
        max_bytes=max_bytes,
    )


def list_offsets(topic, pairs):
    return ListReq.ListDisklessOffsetsRequest(
        topics=(
            ListReq.ListDisklessOffsetsTopic(
                topic_id=topic,
                partitions=tuple(
                    ListReq.ListDisklessOffsetsTopicPartition(partition_index=p, timestamp=ts)
                    for p, ts in pairs
                ),
            ),
        )
    )


def delete_records(topic, pairs):
    return DelRecordsReq.DeleteDisklessRecordsRequest(
        topics=(
            DelRecordsReq.DeleteDisklessTopicRecords(
                topic_id=topic,
                partitions=tuple(
                    DelRecordsReq.DeleteDisklessPartitionRecords(partition_index=p, offset=o)
                    for p, o in pairs
                ),
            ),
        )
    )


def files_to_delete(max_objects, after=None, cutoff=-1, keys=()):
    return FilesReq.ListDisklessFilesToDeleteRequest(
        marked_for_deletion_before_ms=cutoff,
        after_object_key=after,
        max_objects=max_objects,
        object_keys=tuple(keys),
    )


def rows(resp):
    """Flatten a per-topic response into (topic_id, partition result) pairs."""
    topics = getattr(resp, "topics", None) or getattr(resp, "responses", ())
    return [(t.topic_id, p) for t in topics for p in t.partitions]


def commit_tuples(resp):
    return [
        (
            p.partition_index,
            p.error_code,
            p.assigned_base_offset,
            p.log_append_time,
            p.log_start_offset,
            p.is_duplicate,
        )
        for _, p in rows(resp)
    ]


REJECTED = (-1, -1, -1, False)


async def hw(c, topic, p):
    r = await call(c, list_offsets(topic, [(p, -1)]))
    return r.responses[0].partitions[0].offset


# -- a broker's life -----------------------------------------------------------------------------


async def test_broker_life(coord, clock):
    t, other = uuid.uuid4(), uuid.uuid4()
    r = await call(coord, init((t, 3), (other, 1), (t, 3)))
    assert [(x.topic_id, x.error_code) for x in r.responses] == [(t, 0), (other, 0), (t, 0)]

    # Producers A (pid 1) and B (pid 2) and a non-idempotent one, two objects interleaved in
    # one request: obj-1 is committed first (first appearance), then obj-2.
    A = {"pid": 1, "epoch": 0}
    req = commit(
        [
            (
                t,
                [
                    entry(0, "obj-1", 5, bo=0, size=100, seq=0, ts=T0 - 5, **A),
                    entry(0, "obj-2", 5, bo=0, size=100, seq=5, **A),
                    entry(1, "obj-1", 3, bo=100, size=50, seq=0, pid=2, epoch=0),
                ],
            )
        ],
        [
            (other, [entry(0, "obj-2", 2, bo=100, size=10)]),
            (
                t,
                [
                    entry(2, "obj-2", 1, bo=110, size=5, base=40),
                    entry(0, "obj-1", 2, bo=150, size=30, tst=1),
                ],
            ),
        ],
    )
    r = await call(coord, req)
    # one topic per distinct id, entries in request order within the topic
    assert [x.topic_id for x in r.topics] == [t, other]
    assert commit_tuples(r) == [
        (0, 0, 0, T0, 0, False),  # obj-1 A 0..4
        (0, 0, 7, T0, 0, False),  # obj-2 A 5..9 after obj-1's two batches on p0
        (1, 0, 0, T0, 0, False),  # obj-1 B
        (2, 0, 0, T0, 0, False),  # obj-2, base 40 is only a record count base
        (0, 0, 5, T0, 0, False),  # obj-1 non-idempotent
        (0, 0, 0, T0, 0, False),  # other topic, obj-2
    ]
    assert [await hw(coord, t, p) for p in range(3)] == [12, 3, 1]

    # A retried idempotent batch, uploaded again in a new object: duplicate, original offset.
    clock.now = T0 + 1000
    r = await call(coord, commit([(t, [entry(0, "obj-3", 5, seq=0, **A)])]))
    # a duplicate answers the original batch's max timestamp (as Kafka)
    assert commit_tuples(r) == [(0, 0, 0, T0 - 5, 0, True)]
    assert await hw(coord, t, 0) == 12

    # FindDisklessBatches: one entry per batch, in offset order; error / empty entries.
    unknown = uuid.uuid4()
    r = await call(
        coord,
        find(
            [
                (t, [(0, 3, 10**6), (2, 1, 100), (1, 99, 100), (7, 0, 100)]),
                (unknown, [(0, 0, 100)]),
                (ZERO, [(0, 0, 100)]),
            ]
        ),
    )
    got = [
        (
            tid,
            p.partition_index,
            p.error_code,
            p.log_start_offset,
            p.high_watermark,
            p.object_key,
            p.byte_offset,
            p.size,
            p.base_offset,
            p.last_offset,
            p.batch_max_timestamp,
            p.message_timestamp_type,
            p.producer_id,
            p.producer_epoch,
            p.base_sequence,
            p.last_sequence,
        )
        for tid, p in rows(r)
    ]
    none = ("", -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)
    assert got == [
        (t, 0, 0, 0, 12, "obj-1", 0, 100, 0, 4, T0 - 5, 0, 1, 0, 0, 4),
        (t, 0, 0, 0, 12, "obj-1", 150, 30, 5, 6, T0, 1, -1, -1, -1, -1),
        (t, 0, 0, 0, 12, "obj-2", 0, 100, 7, 11, -1, 0, 1, 0, 5, 9),
        (t, 2, 0, 0, 1, *none),  # caught up at the high watermark
        (t, 1, E.OFFSET_OUT_OF_RANGE, 0, 3, *none),
        (t, 7, E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, *none),
        (unknown, 0, E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, *none),
        (ZERO, 0, E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, *none),
    ]
    # Budgets: the first batch of the request always comes; the crossing batch is included.
    r = await call(coord, find([(t, [(0, 0, 1), (1, 0, 1)])], max_bytes=1))
    assert [(p.partition_index, p.object_key, p.base_offset) for _, p in rows(r)] == [
        (0, "obj-1", 0),
        (1, "", -1),
    ]
    r = await call(coord, find([(t, [(0, 0, 101)])], max_bytes=10**6))
    assert [p.base_offset for _, p in rows(r)] == [0, 5]

    # ListDisklessOffsets sentinels and lookups.
    r = await call(
        coord,
        list_offsets(
            t,
            [
                (0, -1),
                (0, -2),
                (0, -4),
                (0, -5),
                (0, -3),
                (0, T0 - 6),
                (0, T0 + 1),
                (2, -3),
                (0, -7),
                (9, -1),
            ],
        ),
    )
    assert [(p.error_code, p.timestamp, p.offset) for _, p in rows(r)] == [
        (0, -1, 12),
        (0, -1, 0),
        (0, -1, 0),
        (0, -1, -1),
        (0, T0, 6),
        (0, T0 - 5, 0),
        (0, -1, -1),
        (0, -1, 0),
        (E.UNKNOWN_SERVER_ERROR, -1, -1),
        (E.UNKNOWN_TOPIC_OR_PARTITION, -1, -1),
    ]

    # DeleteDisklessRecords: -1 = high watermark; a straddling batch is kept.
    clock.now = T0 + 2000
    r = await call(coord, delete_records(t, [(2, -1), (0, 3), (0, 13), (0, -2), (5, 0)]))
    assert [(p.partition_index, p.error_code, p.low_watermark) for _, p in rows(r)] == [
        (2, 0, 1),
        (0, 0, 3),
        (0, E.OFFSET_OUT_OF_RANGE, -1),
        (0, E.OFFSET_OUT_OF_RANGE, -1),
        (5, E.UNKNOWN_TOPIC_OR_PARTITION, -1),
    ]
    r = await call(coord, find([(t, [(0, 3, 10**6)])]))
    assert [p.base_offset for _, p in rows(r)] == [0, 5, 7]
    r = await call(coord, delete_records(t, [(0, -1)]))
    assert rows(r)[0][1].low_watermark == 12
    r = await call(coord, list_offsets(t, [(0, -2), (0, -1)]))
    assert [p.offset for _, p in rows(r)] == [12, 12]

    # DeleteDisklessTopics: unknown, zero and an already deleted repetition answer 3.
    clock.now = T0 + 3000
    r = await call(
        coord,
        DelTopicsReq.DeleteDisklessTopicsRequest(
            topics=tuple(
                DelTopicsReq.DeleteDisklessTopic(topic_id=x) for x in (t, unknown, ZERO, t)
            )
        ),
    )
    assert [(x.topic_id, x.error_code) for x in r.responses] == [
        (t, 0),
        (unknown, 3),
        (ZERO, 3),
        (t, 3),
    ]
    r = await call(coord, find([(t, [(0, 0, 100)])]))
    assert rows(r)[0][1].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    r = await call(coord, list_offsets(other, [(0, -1)]))
    assert rows(r)[0][1].offset == 2  # obj-2 stays live through the other topic

    # ListDisklessFilesToDelete: obj-3 (nothing accepted, T0+1000), obj-1 (T0+3000).
    r = await call(coord, files_to_delete(1, keys=["obj-1", "obj-2", "never", ""]))
    assert r.error_code == 0 and r.has_more
    assert [(f.object_key, f.marked_for_deletion_at_ms, f.size_in_bytes) for f in r.files] == [
        ("obj-1", T0 + 3000, 180)
    ]
    assert [(s.object_key, s.is_safe_to_delete, s.error_code) for s in r.safe_to_delete] == [
        ("obj-1", False, 0),
        ("obj-2", False, 0),
        ("never", True, 0),
        ("", True, 0),
    ]
    r = await call(coord, files_to_delete(1, after="obj-1"))
    assert [f.object_key for f in r.files] == ["obj-3"] and not r.has_more
    r = await call(coord, files_to_delete(5, cutoff=T0 + 3000))
    assert [f.object_key for f in r.files] == ["obj-3"] and not r.has_more
    r = await call(coord, files_to_delete(2))
    assert [f.object_key for f in r.files] == ["obj-1", "obj-3"] and not r.has_more
    r = await call(coord, files_to_delete(0, keys=["obj-3"]))
    assert r.files == () and not r.has_more and r.safe_to_delete[0].is_safe_to_delete is False

    # DeleteDisklessFiles: forgotten once, then unknown; live objects are refused.
    r = await call(
        coord,
        DelFilesReq.DeleteDisklessFilesRequest(
            object_keys=("obj-1", "obj-2", "obj-1", "never", "obj-3")
        ),
    )
    assert r.error_code == 0
    assert [(x.object_key, x.error_code) for x in r.results] == [
        ("obj-1", 0),
        ("obj-2", E.INVALID_REQUEST),
        ("obj-1", E.RESOURCE_NOT_FOUND),
        ("never", E.RESOURCE_NOT_FOUND),
        ("obj-3", 0),
    ]
    r = await call(coord, files_to_delete(10, keys=["obj-1", "obj-2", "obj-3"]))
    assert r.files == ()
    assert [s.is_safe_to_delete for s in r.safe_to_delete] == [True, False, True]


# -- bad input, isolated per entry ---------------------------------------------------------------


async def test_bad_commit_entries_are_isolated(coord):
    t = uuid.uuid4()
    await call(coord, init((t, 2)))
    r = await call(
        coord,
        commit(
            [
                (
                    t,
                    [
                        entry(0, "a", 2, bo=0, size=10),  # good
                        entry(0, "a", 1, bo=10, size=-1),  # negative size
                        entry(0, "a", 1, bo=-5, size=10),  # negative byte offset
                        entry(0, "a", 1, bo=20, base=5, last=4),  # last < base
                        entry(0, "a", 1, bo=20, base=-3, last=-3),  # negative offsets
                        entry(9, "a", 1, bo=30),  # unknown partition
                        entry(-1, "a", 1, bo=30),  # negative partition
                        entry(1, "", 1),  # empty object key
                        entry(1, "b", 3),  # good, other object
                    ],
                ),
                (uuid.uuid4(), [entry(0, "a", 1)]),
                (ZERO, [entry(0, "a", 1)]),
            ]
        ),
    )
    inv, unk = E.INVALID_REQUEST, E.UNKNOWN_TOPIC_OR_PARTITION
    assert [x[:2] for x in commit_tuples(r)] == [
        (0, 0),
        (0, inv),
        (0, inv),
        (0, inv),
        (0, inv),
        (9, unk),
        (-1, unk),
        (1, inv),
        (1, 0),
        (0, unk),
        (0, unk),
    ]
    assert all(x[2:] == REJECTED for x in commit_tuples(r) if x[1] != 0)
    assert [x[2] for x in commit_tuples(r) if x[1] == 0] == [0, 0]
    assert [await hw(coord, t, p) for p in (0, 1)] == [2, 3]

    # A repeated object key fails all its entries and changes nothing; other objects go through.
    r = await call(coord, commit([(t, [entry(0, "a", 1), entry(1, "c", 1), entry(0, "b", 1)])]))
    assert commit_tuples(r) == [
        (0, inv, *REJECTED),
        (1, 0, 3, r.topics[0].partitions[1].log_append_time, 0, False),
        (0, inv, *REJECTED),
    ]
    assert [await hw(coord, t, p) for p in (0, 1)] == [2, 4]


async def test_bad_input_other_apis(coord):
    t = uuid.uuid4()
    r = await call(coord, init((t, 2), (ZERO, 1), (uuid.uuid4(), -1), (uuid.uuid4(), 0)))
    assert [x.error_code for x in r.responses] == [
        0,
        E.UNKNOWN_TOPIC_OR_PARTITION,
        E.INVALID_PARTITIONS,
        0,
    ]
    await call(coord, commit([(t, [entry(0, "x", 4)])]))
    r = await call(coord, delete_records(t, [(0, -2), (0, 5), (0, 2), (1, 1)]))
    assert [(p.error_code, p.low_watermark) for _, p in rows(r)] == [
        (E.OFFSET_OUT_OF_RANGE, -1),
        (E.OFFSET_OUT_OF_RANGE, -1),
        (0, 2),
        (E.OFFSET_OUT_OF_RANGE, -1),
    ]
    for bad in (files_to_delete(1, cutoff=-2, keys=["k"]), files_to_delete(-1, keys=["k"])):
        r = await call(coord, bad)
        assert (r.error_code, r.files, r.has_more) == (E.INVALID_REQUEST, (), False)
        assert [(s.object_key, s.is_safe_to_delete, s.error_code) for s in r.safe_to_delete] == [
            ("k", False, E.INVALID_REQUEST)
        ]
    r = await call(coord, DelFilesReq.DeleteDisklessFilesRequest(object_keys=("x", "")))
    assert [x.error_code for x in r.results] == [E.INVALID_REQUEST, E.RESOURCE_NOT_FOUND]
    assert await hw(coord, t, 0) == 4
    # empty requests answer empty responses
    assert (await call(coord, init())).responses == ()
    assert (await call(coord, commit())).topics == ()
    assert (await call(coord, find([]))).responses == ()


# -- coordinator failures ------------------------------------------------------------------------


class Failing:
    """Delegates to a real coordinator, failing chosen calls."""

    def __init__(self, inner, fail):
        self._inner, self._fail = inner, fail

    def __getattr__(self, name):
        return getattr(self._inner, name)

    async def commit_file(self, object_key, broker_id, size, reqs):
        if object_key in self._fail:
            raise self._fail[object_key]
        return await self._inner.commit_file(object_key, broker_id, size, reqs)

    async def find_batches(self, reqs, max_bytes):
        raise sqlite3.OperationalError("disk I/O error")

    async def delete_files(self, keys):
        raise RuntimeError("bug")


async def test_failures_map_to_codes_per_call(coord, caplog):
    t = uuid.uuid4()
    await call(coord, init((t, 1)))
    from kafka_rpc.coordinator.errors import NotCoordinatorError

    f = Failing(coord, {"disk": sqlite3.OperationalError("disk I/O error"),
                        "bug": ZeroDivisionError("bug"),
                        "moved": NotCoordinatorError("leader is now 2")})  # fmt: skip
    caplog.set_level(logging.ERROR, logger="kafka_rpc.handlers.diskless")
    r = await call(f, commit([(t, [entry(0, "disk", 1), entry(0, "ok", 1), entry(0, "bug", 1),
                                   entry(0, "moved", 1)])]))  # fmt: skip
    assert commit_tuples(r) == [
        (0, E.KAFKA_STORAGE_ERROR, *REJECTED),
        (0, 0, 0, T0, 0, False),
        (0, E.UNKNOWN_SERVER_ERROR, *REJECTED),
        (0, E.NOT_COORDINATOR, *REJECTED),  # an exception naming its own Kafka code
    ]
    assert any("ZeroDivisionError" in (rec.exc_text or "") for rec in caplog.records)
    r = await call(f, find([(t, [(0, 0, 100)])]))
    assert [(p.error_code, p.log_start_offset, p.object_key) for _, p in rows(r)] == [
        (E.KAFKA_STORAGE_ERROR, -1, "")
    ]
    await call(coord, delete_records(t, [(0, -1)]))
    r = await call(f, DelFilesReq.DeleteDisklessFilesRequest(object_keys=("ok", "nope")))
    assert r.error_code == E.UNKNOWN_SERVER_ERROR
    assert [x.error_code for x in r.results] == [E.UNKNOWN_SERVER_ERROR] * 2
    r = await call(coord, files_to_delete(5))
    assert [x.object_key for x in r.files] == ["ok"]  # failed objects were never recorded
