"""SQLite-only behaviour: durability across reopen, group commit, migrations, URL selection."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid

import pytest

from kafka_rpc.coordinator.api import (
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    Errors,
    FindBatchRequest,
    ListOffsetsRequest,
    TopicIdPartition,
)
from kafka_rpc.coordinator.factory import create_coordinator
from kafka_rpc.coordinator.memory import InMemoryBatchCoordinator
from kafka_rpc.coordinator.sqlite import SchemaVersionError, SqliteBatchCoordinator, load_migrations

from .conftest import Clock, batch

BIG = 10**9


async def started(path, **kw) -> SqliteBatchCoordinator:
    c = SqliteBatchCoordinator(str(path), **kw)
    await c.start()
    return c


async def test_durable_across_reopen(tmp_path):
    clock = Clock()
    path = tmp_path / "d.db"
    c = await started(path, time_ms=clock)
    t = uuid.uuid4()
    tp = TopicIdPartition(t, 0)
    await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 1)])
    await c.commit_file("a", 1, 100, [batch(tp, 3, pid=7, epoch=0, seq=0)])
    await c.commit_file("b", 1, 100, [batch(tp, 2)])
    await c.delete_records([DeleteRecordsRequest(tp, 3)])
    await c.close()
    await c.close()  # idempotent

    c2 = await started(path, time_ms=clock)
    try:
        (r,) = await c2.find_batches([FindBatchRequest(tp, 3, BIG)], BIG)
        assert (r.error, r.log_start_offset, r.high_watermark) == (0, 3, 5)
        assert [(b.object_key, b.base_offset) for b in r.batches] == [("b", 3)]
        assert [f.object_key for f in await c2.get_files_to_delete()] == ["a"]
        # producer state survived: a retry of the first batch is a duplicate of offset 0 ...
        # ... but its batch was deleted; Kafka still answers the duplicate from producer state
        d = (await c2.commit_file("c", 1, 100, [batch(tp, 3, pid=7, epoch=0, seq=0)]))[0]
        assert d.is_duplicate and d.assigned_base_offset == 0
        assert (await c2.commit_file("d", 1, 100, [batch(tp, 1, pid=7, epoch=0, seq=9)]))[
            0
        ].error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert not await c2.is_safe_to_delete_file("b")
        assert c2.schema_version == load_migrations()[-1][0]
    finally:
        await c2.close()


async def test_group_commit_isolation(tmp_path):
    c = await started(tmp_path / "g.db")
    try:
        t = uuid.uuid4()
        tp = TopicIdPartition(t, 0)
        await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 1)])
        await c.commit_file("dup", 1, 100, [batch(tp, 1)])
        groups0, ops0 = c.group_stats
        n = 40
        keys = [f"k{i}" for i in range(n)]
        keys[17] = "dup"
        results = await asyncio.gather(
            *(c.commit_file(k, 1, 200, [batch(tp, 2), batch(tp, 1, byte_offset=100)]) for k in keys)
        )
        groups, ops = c.group_stats
        assert ops - ops0 == n
        assert groups - groups0 < n  # grouped: far fewer transactions than commits
        assert [x.error for x in results[17]] == [Errors.INVALID_REQUEST] * 2
        starts = sorted(r[0].assigned_base_offset for i, r in enumerate(results) if i != 17)
        assert starts == [1 + 3 * i for i in range(n - 1)]  # gap-free, 3 records per commit
        for i, r in enumerate(results):
            if i != 17:
                assert r[1].assigned_base_offset == r[0].assigned_base_offset + 2
        (lo,) = await c.list_offsets([ListOffsetsRequest(tp, -1)])
        assert lo.offset == 1 + 3 * (n - 1)
    finally:
        await c.close()


async def test_failing_operation_rolls_back_only_itself(tmp_path):
    c = await started(tmp_path / "s.db")
    try:
        t = uuid.uuid4()
        tp = TopicIdPartition(t, 0)
        await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 1)])

        def explode(conn):
            conn.execute(
                "INSERT INTO files (object_key, state, uploader_broker_id,"
                " committed_at_ms, size) VALUES ('half-done', 'uploaded', 1, 1, 1)"
            )
            conn.execute("UPDATE logs SET high_watermark = -5")  # violates a CHECK

        writer = c._require_writer()
        ok1 = c.commit_file("x1", 1, 100, [batch(tp)])
        bad = writer.submit(explode)
        ok2 = c.commit_file("x2", 1, 100, [batch(tp)])
        r1, rb, r2 = await asyncio.gather(ok1, bad, ok2, return_exceptions=True)
        assert isinstance(rb, sqlite3.IntegrityError)
        assert [r1[0].assigned_base_offset, r2[0].assigned_base_offset] == [0, 1]
        assert await c.is_safe_to_delete_file("half-done")
        assert not await c.is_safe_to_delete_file("x2")
    finally:
        await c.close()


async def test_group_with_a_failing_operation_runs_again_isolated(tmp_path):
    """A group first runs without SAVEPOINTs; when one of its operations raises, the whole
    transaction is rolled back and the group runs again with a SAVEPOINT each: the others commit
    exactly once (offsets and batch ids gap-free), the failing one changes nothing."""
    c = await started(tmp_path / "r.db")
    try:
        t = uuid.uuid4()
        tp = TopicIdPartition(t, 0)
        await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 1)])

        def explode(conn):
            conn.execute(
                "INSERT INTO files (object_key, state, uploader_broker_id,"
                " committed_at_ms, size) VALUES ('half-done', 'uploaded', 1, 1, 1)"
            )
            raise RuntimeError("boom")

        writer = c._require_writer()
        groups0, _ = c.group_stats
        futures = [
            writer.submit(c._ops.commit_file, "y1", 1, 100, [batch(tp)]),
            writer.submit(explode),
            writer.submit(c._ops.commit_file, "y2", 1, 100, [batch(tp, 2)]),
        ]
        r1, rb, r2 = await asyncio.gather(*futures, return_exceptions=True)
        assert c.group_stats[0] == groups0 + 1  # one group, run twice
        assert isinstance(rb, RuntimeError)
        assert [r1[0].assigned_base_offset, r2[0].assigned_base_offset] == [0, 1]
        assert await c.is_safe_to_delete_file("half-done")
        (found,) = await c.find_batches([FindBatchRequest(tp, 0, BIG)], BIG)
        assert [(b.batch_id, b.object_key) for b in found.batches] == [(1, "y1"), (2, "y2")]
        assert found.high_watermark == 3
    finally:
        await c.close()


async def test_refuses_newer_database(tmp_path):
    path = tmp_path / "m.db"
    c = await started(path)
    await c.close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_version VALUES (999, 'future', 'x', 0)")
    db.close()
    with pytest.raises(SchemaVersionError, match="999"):
        await started(path)


async def test_refuses_changed_migration(tmp_path):
    path = tmp_path / "m.db"
    c = await started(path)
    await c.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_version SET checksum = 'edited' WHERE version = 1")
    db.close()
    with pytest.raises(SchemaVersionError, match="changed"):
        await started(path)


async def test_pragmas_and_schema(tmp_path):
    path = tmp_path / "p.db"
    c = await started(path, synchronous="normal")
    await c.close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        assert {"logs", "files", "batches", "producer_state", "schema_version"} <= tables
        plan = " ".join(
            r[3]
            for r in db.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM batches WHERE log_id = 1 AND last_offset >= 5"
                " ORDER BY last_offset"
            )
        )
        assert "USING PRIMARY KEY (log_id=? AND last_offset>?)" in plan, plan
        assert "TEMP B-TREE" not in plan
    finally:
        db.close()
    with pytest.raises(ValueError):
        SqliteBatchCoordinator(str(path), synchronous="OFF")


async def test_not_started(tmp_path):
    c = SqliteBatchCoordinator(str(tmp_path / "n.db"))
    with pytest.raises(RuntimeError):
        await c.list_offsets([])


async def test_create_coordinator_urls(tmp_path):
    assert isinstance(create_coordinator("memory://"), InMemoryBatchCoordinator)
    c = create_coordinator(f"sqlite://{tmp_path}/u.db?synchronous=NORMAL&max_group_size=8")
    assert isinstance(c, SqliteBatchCoordinator)
    assert c.path == f"{tmp_path}/u.db" and c._synchronous == "NORMAL" and c._cap == 8
    async with c:
        assert await c.is_safe_to_delete_file("x")
    off = create_coordinator(f"sqlite://{tmp_path}/n.db?inline_read_max_partitions=0")
    async with off:
        await off.list_offsets([ListOffsetsRequest(TopicIdPartition(uuid.uuid4(), 0), -1)])
        assert off.inline_reads == 0
    dotted = create_coordinator(
        "kafka_rpc.coordinator.memory:InMemoryBatchCoordinator", producer_id_expiration_ms=5
    )
    assert isinstance(dotted, InMemoryBatchCoordinator)
    with pytest.raises(TypeError):
        create_coordinator("kafka_rpc.coordinator.api:Errors")
    with pytest.raises(ValueError):
        create_coordinator("mysql://x")  # postgres(ql):// is PostgreSQL
    with pytest.raises(ValueError):
        create_coordinator("sqlite://")


async def test_small_reads_inline_large_reads_on_the_reader_thread(tmp_path):
    """Reads of <= inline_read_max_partitions partitions are answered on the loop's thread and
    see every acknowledged commit; larger ones go through the reader thread; both agree."""
    clock = Clock()
    c = await started(tmp_path / "i.db", time_ms=clock, inline_read_max_partitions=2)
    try:
        t = uuid.uuid4()
        await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 3)])
        tps = [TopicIdPartition(t, p) for p in range(3)]
        for i in range(3):
            out = await c.commit_file(f"k{i}", 1, 300, [batch(tp) for tp in tps])
            assert [r.error for r in out] == [0, 0, 0]
            # read-your-writes on the inline connection, right after the acknowledgement
            found = await c.find_batches([FindBatchRequest(tps[0], i, BIG)], BIG)
            assert found[0].high_watermark == i + 1 and len(found[0].batches) == 1
        assert c.inline_reads == 3
        small = await c.list_offsets([ListOffsetsRequest(tp, -1) for tp in tps[:2]])
        assert c.inline_reads == 4
        large = await c.list_offsets([ListOffsetsRequest(tp, -1) for tp in tps])
        assert c.inline_reads == 4  # three partitions: the reader thread answered
        assert [r.offset for r in large] == [3, 3, 3] and large[:2] == small
        many = await c.find_batches([FindBatchRequest(tp, 0, BIG) for tp in tps], BIG)
        assert c.inline_reads == 4 and [len(r.batches) for r in many] == [3, 3, 3]
    finally:
        await c.close()
    off = await started(tmp_path / "o.db", time_ms=clock, inline_read_max_partitions=0)
    try:
        await off.find_batches([FindBatchRequest(TopicIdPartition(uuid.uuid4(), 0), 0, 1)], 1)
        assert off.inline_reads == 0
    finally:
        await off.close()


def test_inline_reader_reports_busy_instead_of_waiting(tmp_path):
    """busy_timeout=0 on the loop's connection: a read SQLite cannot start at once comes back as
    _BUSY (the caller then uses the reader thread), other errors are raised."""
    from kafka_rpc.coordinator.sqlite import _BUSY, _InlineReader

    path = str(tmp_path / "b.db")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")  # rollback-journal mode: a writer locks readers
    reader = _InlineReader(path)
    try:
        assert reader.run(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()) == (0,)
        holder.execute("BEGIN EXCLUSIVE")
        t0 = time.monotonic()
        assert reader.run(lambda conn: conn.execute("SELECT count(*) FROM t").fetchone()) is _BUSY
        assert time.monotonic() - t0 < 1.0
        holder.execute("COMMIT")
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            reader.run(lambda conn: conn.execute("SELECT * FROM missing").fetchall())
    finally:
        reader.close()
        holder.close()


async def test_v001_database_is_upgraded_with_its_data(tmp_path, monkeypatch):
    """A database written under schema V001 (batches with a rowid, AUTOINCREMENT batch ids and
    the batches_by_file index) is migrated at start: batches, object reference counts and the
    batch id counter carry over, and reads, commits and deletions answer as before."""
    import kafka_rpc.coordinator.sqlite as sqlite_mod

    path = tmp_path / "v1.db"
    v001 = [m for m in load_migrations() if m[0] == 1]
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA foreign_keys=ON")
    monkeypatch.setattr(sqlite_mod, "load_migrations", lambda: v001)
    assert sqlite_mod.apply_migrations(db, 1) == 1
    monkeypatch.undo()
    t = uuid.uuid4()
    # V001 rows as its coordinator wrote them: partition 0 holds batches 1-2 (object a) and 3
    # (object b); batch 4 (object c, partition 1), the newest, was deleted by deleteRecords,
    # which marked c: the AUTOINCREMENT counter (4) is above every remaining batch id.
    db.executescript(f"""
        BEGIN;
        INSERT INTO logs (log_id, topic_id, partition, topic_name, log_start_offset,
                          high_watermark, byte_size)
        VALUES (1, x'{t.hex}', 0, 't', 0, 6, 300), (2, x'{t.hex}', 1, 't', 2, 2, 0);
        INSERT INTO files (file_id, object_key, state, uploader_broker_id, committed_at_ms,
                           marked_for_deletion_at_ms, size)
        VALUES (1, 'a', 'uploaded', 1, 1000, NULL, 200), (2, 'c', 'deleting', 1, 1001, 1500, 50),
               (3, 'b', 'uploaded', 1, 1002, NULL, 100);
        INSERT INTO batches (batch_id, log_id, base_offset, last_offset, file_id, byte_offset,
                             byte_size, magic, timestamp_type, log_append_timestamp,
                             batch_max_timestamp, producer_id, producer_epoch, base_sequence,
                             last_sequence)
        VALUES (1, 1, 0, 1, 1, 0, 100, 2, 0, 1000, 900, -1, -1, -1, -1),
               (2, 1, 2, 4, 1, 100, 100, 2, 1, 1000, 950, 7, 0, 0, 2),
               (3, 1, 5, 5, 3, 0, 100, 2, 0, 1002, 1200, -1, -1, -1, -1),
               (4, 2, 0, 1, 2, 0, 50, 2, 0, 1001, 990, -1, -1, -1, -1);
        DELETE FROM batches WHERE batch_id = 4;
        INSERT INTO producer_state (log_id, producer_id, producer_epoch, base_sequence,
                                    last_sequence, assigned_offset, batch_timestamp,
                                    committed_at_ms)
        VALUES (1, 7, 0, 0, 2, 2, 1000, 1000);
        COMMIT;
    """)
    assert db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'batches'").fetchone() == (4,)
    db.close()

    clock = Clock(2000)
    c = await started(path, time_ms=clock)
    try:
        assert c.schema_version == load_migrations()[-1][0] >= 2
        tp0, tp1 = TopicIdPartition(t, 0), TopicIdPartition(t, 1)
        r0, r1 = await c.find_batches(
            [FindBatchRequest(tp0, 0, BIG), FindBatchRequest(tp1, 2, BIG)], BIG
        )
        assert (r0.error, r0.log_start_offset, r0.high_watermark) == (0, 0, 6)
        got = [(b.batch_id, b.object_key, b.base_offset, b.last_offset, b.timestamp, b.producer_id)
               for b in r0.batches]  # fmt: skip
        assert got == [(1, "a", 0, 1, 900, -1), (2, "a", 2, 4, 1000, 7), (3, "b", 5, 5, 1200, -1)]
        assert (r1.error, r1.log_start_offset, r1.high_watermark, r1.batches) == (0, 2, 2, ())
        offsets = await c.list_offsets(
            [ListOffsetsRequest(tp0, ts) for ts in (-1, -2, -3, 950, 1001)]
        )
        assert [(o.timestamp, o.offset) for o in offsets] == [
            (-1, 6), (-1, 0), (1200, 5), (1000, 2), (1200, 5)
        ]  # fmt: skip
        assert [f.object_key for f in await c.get_files_to_delete()] == ["c"]
        # the producer state came along: a retry of its batch is a duplicate
        (dup,) = await c.commit_file("d", 1, 100, [batch(tp0, 3, pid=7, epoch=0, seq=0)])
        assert dup.is_duplicate and dup.assigned_base_offset == 2
        # batch ids continue after the largest ever used (4, deleted), not the largest left
        await c.commit_file("e", 1, 100, [batch(tp0, 1)])
        (r,) = await c.find_batches([FindBatchRequest(tp0, 6, BIG)], BIG)
        assert [(b.batch_id, b.object_key, b.base_offset) for b in r.batches] == [(5, "e", 6)]
        # reference counts were rebuilt: a is released only when both its batches are gone
        await c.delete_records([DeleteRecordsRequest(tp0, 2)])
        assert [f.object_key for f in await c.get_files_to_delete()] == ["c", "d"]
        await c.delete_records([DeleteRecordsRequest(tp0, 5)])
        assert [f.object_key for f in await c.get_files_to_delete()] == ["a", "c", "d"]
        assert not await c.is_safe_to_delete_file("b")
    finally:
        await c.close()


async def test_object_batch_counts_follow_every_deletion_path(tmp_path):
    """files.batch_count (V002, replaces the batches_by_file index) equals the number of batches
    pointing at each object after commits, deleteRecords, retention and deleteTopics, and an
    object is 'deleting' exactly when that number is 0."""
    from kafka_rpc.coordinator.api import EnforceRetentionRequest

    from .conftest import chain

    path = tmp_path / "rc.db"
    clock = Clock()
    c = await started(path, time_ms=clock)

    def check() -> None:
        db = sqlite3.connect(path)
        try:
            counted = dict(db.execute("SELECT file_id, batch_count FROM files"))
            actual = dict(db.execute("SELECT file_id, count(*) FROM batches GROUP BY file_id"))
            assert counted == {fid: actual.get(fid, 0) for fid in counted}
            assert set(actual) <= set(counted)
            for n, state in db.execute("SELECT batch_count, state FROM files"):
                assert (state == "deleting") == (n == 0)
        finally:
            db.close()

    try:
        a, b = uuid.uuid4(), uuid.uuid4()
        await c.create_topic_and_partitions(
            [CreateTopicAndPartitionsRequest(a, "a", 2), CreateTopicAndPartitionsRequest(b, "b", 1)]
        )
        a0, a1, b0 = TopicIdPartition(a, 0), TopicIdPartition(a, 1), TopicIdPartition(b, 0)
        for i in range(4):  # each object spans both topics
            reqs = [*chain(a0, 2), batch(a1, byte_offset=200), batch(b0, byte_offset=300)]
            assert all(r.error == 0 for r in await c.commit_file(f"o{i}", 1, 400, reqs))
            clock.advance(1000)
        check()
        await c.delete_records([DeleteRecordsRequest(a0, 3)])  # o0 whole, o1 half
        check()
        await c.enforce_retention([EnforceRetentionRequest(a1, 100, -1)])  # keeps o3's batch
        check()
        await c.delete_topics([a])
        check()
        assert await c.get_files_to_delete() == []  # every object still has its batch on b0
        await c.delete_records([DeleteRecordsRequest(b0, -1)])
        check()
        assert [f.object_key for f in await c.get_files_to_delete()] == ["o0", "o1", "o2", "o3"]
    finally:
        await c.close()
