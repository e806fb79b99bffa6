"""The replicated coordinator's apply transaction: applied records are answered before
their SQLite COMMIT, which comes every ``apply_commit_records`` records, ``apply_commit_ms``
after the transaction opened, and before any read of the file by another connection.

What must hold: no read ever misses an answered write; an answered write whose SQLite
transaction never committed (the process died) is applied again from the Raft log on restart; an
operation that raises rolls back only itself, even when earlier answered groups share its open
transaction; the rows are those of committing every group at once."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid

from kafka_rpc.coordinator.api import (
    CreateTopicAndPartitionsRequest,
    FindBatchRequest,
    ListOffsetsRequest,
)
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from tests.waiting import until

from .conftest import Clock, Topic, batch, chain

LONG = {"apply_commit_records": 10_000, "apply_commit_ms": 600_000}  # only reads commit


def _without_applied(rows: dict) -> dict:
    return {k: v for k, v in rows.items() if k != "raft_applied"}


def _committed_batches(c: ReplicatedBatchCoordinator) -> int:
    """``batches`` rows another connection sees in ``c``'s file (its committed state)."""
    conn = sqlite3.connect(f"file:{c.db_path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
    finally:
        conn.close()


async def _started(path, clock, **kw) -> ReplicatedBatchCoordinator:
    c = ReplicatedBatchCoordinator(path, time_ms=clock, producer_id_expiration_ms=4000, **kw)
    await c.start()
    return c


async def _topic(c) -> Topic:
    t = uuid.UUID(int=7)
    assert await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 2)]) == [0]
    return Topic(c, t, 2)


async def test_answered_before_commit_and_every_read_commits_first(tmp_path):
    c = await _started(tmp_path, Clock(), **LONG)
    try:
        t = await _topic(c)
        commits = c.apply_commits
        got = await t.commit(*chain(t.tp(0), 3))
        assert [r.assigned_base_offset for r in got] == [0, 1, 2]
        assert c.apply_commits == commits  # answered, not yet committed to SQLite
        assert _committed_batches(c) == 0
        # a read through the store's connections commits first, so it sees the answered write
        (found,) = await c.find_batches([FindBatchRequest(t.tp(0), 0, 1 << 20)], 1 << 20)
        assert len(found.batches) == 3 and found.high_watermark == 3
        assert c.apply_commits == commits + 1 and _committed_batches(c) == 3
        await t.commit(batch(t.tp(0)))
        (lo,) = await c.list_offsets([ListOffsetsRequest(t.tp(0), -1)])
        assert lo.offset == 4
        await t.commit(batch(t.tp(1)))
        assert [p.partition for p in await c.list_partitions()] == [0, 1]
        assert _committed_batches(c) == 5
    finally:
        await c.close()


async def test_commit_every_n_records_and_after_the_interval(tmp_path):
    c = await _started(tmp_path, Clock(), apply_commit_records=3, apply_commit_ms=600_000)
    try:
        t = await _topic(c)  # 1 record, open
        commits = c.apply_commits
        await t.commit(batch(t.tp(0)))
        assert c.apply_commits == commits and _committed_batches(c) == 0
        await t.commit(batch(t.tp(0)))  # the third record: COMMIT
        assert c.apply_commits == commits + 1 and _committed_batches(c) == 2
    finally:
        await c.close()
    c = await _started(tmp_path / "b", Clock(), apply_commit_records=10_000, apply_commit_ms=20)
    try:
        t = await _topic(c)
        await t.commit(batch(t.tp(0)))
        # the timer fires 20 ms after the transaction opened
        await until(lambda: _committed_batches(c) == 1, "the timer's COMMIT", interval=0.01)
    finally:
        await c.close()


async def test_answered_write_lost_by_sqlite_is_applied_again_from_the_log(tmp_path):
    clock = Clock()
    c = await _started(tmp_path, clock, **LONG)
    try:
        t = await _topic(c)
        await t.commit(*chain(t.tp(0), 2))
        await c.find_batches([FindBatchRequest(t.tp(0), 0, 1 << 20)], 1 << 20)  # committed
        answered = await t.commit(batch(t.tp(0), 5, pid=3, epoch=0, seq=0))
        assert answered[0].assigned_base_offset == 2
        assert _committed_batches(c) == 2  # the last write is only in the open transaction
        # the process dies: the apply connection goes without COMMIT (SQLite rolls it back)
        conn, c._conn = c._conn, None
        conn.close()
    finally:
        await c.close()
    c = await _started(tmp_path, clock, **LONG)
    try:
        assert c.applied_records == 1  # the tail after the last COMMIT, from the Raft log
        (found,) = await c.find_batches([FindBatchRequest(t.tp(0), 0, 1 << 20)], 1 << 20)
        assert [b.base_offset for b in found.batches] == [0, 1, 2] and found.high_watermark == 7
        t = Topic(c, t.id, 2)
        dup = await t.commit(batch(t.tp(0), 5, pid=3, epoch=0, seq=0), key="retry")
        assert dup[0].is_duplicate and dup[0].assigned_base_offset == 2
    finally:
        await c.close()


async def test_failing_operation_rolls_back_alone_with_earlier_groups_open(tmp_path):
    """An operation that raises in a group whose transaction already holds answered groups: the
    transaction is rolled back and those groups applied again, the failing operation alone
    answers its exception; the rows equal a coordinator that never ran it."""
    clock = Clock()
    a = await _started(tmp_path / "a", clock, **LONG)
    b = await _started(tmp_path / "b", clock, apply_commit_records=1)
    try:
        ta, tb = await _topic(a), await _topic(b)
        for t in (ta, tb):
            await t.commit(*chain(t.tp(0), 2), key="k1")
            await t.commit(batch(t.tp(1), 3, pid=5, epoch=0, seq=0), key="k2")
        real = a._ops.delete_files

        def delete_files(conn, keys):
            if "boom" in keys:
                raise ValueError("boom")
            return real(conn, keys)

        a._ops.delete_files = delete_files  # decoded records resolve it on the instance
        commits = a.apply_commits
        failed, ok = await asyncio.gather(
            a.delete_files(["boom"]),
            ta.commit(batch(ta.tp(0), 2, pid=6, epoch=0, seq=0), key="k3"),
            return_exceptions=True,
        )
        assert isinstance(failed, ValueError)
        assert ok[0].error == 0 and ok[0].assigned_base_offset == 2
        assert a.apply_commits == commits + 1  # the failure's transaction committed at once
        await tb.commit(batch(tb.tp(0), 2, pid=6, epoch=0, seq=0), key="k3")
        assert _without_applied(a.state_rows()) == _without_applied(b.state_rows())
        # the earlier groups are still there, answered the same (idempotent retries: duplicates)
        dup = await ta.commit(batch(ta.tp(1), 3, pid=5, epoch=0, seq=0), key="k2r")
        assert dup[0].is_duplicate and dup[0].assigned_base_offset == 0
    finally:
        await a.close()
        await b.close()
