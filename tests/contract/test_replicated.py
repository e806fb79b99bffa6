"""ReplicatedBatchCoordinator on one replica: its files, restart re-applies only the tail, a lost
SQLite file is rebuilt from the log or from a snapshot, NOT_COORDINATOR off the leader, URL
selection. (The contract suite and the differential test run it too; three replicas over sockets
are in tests/integration/test_diskless_metadata_raft.py.)"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid

import pytest

from kafka_rpc.coordinator.api import (
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    FindBatchRequest,
    ListOffsetsRequest,
)
from kafka_rpc.coordinator.errors import NOT_COORDINATOR, NotCoordinatorError
from kafka_rpc.coordinator.factory import create_coordinator
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from kafka_rpc.coordinator.sqlite import SqliteBatchCoordinator
from kafka_rpc.raft.driver import monotonic_ms
from kafka_rpc.storage import partition_metadata
from tests.waiting import until

from .conftest import Clock, Topic, batch, chain


async def _started(path, clock, **kw) -> ReplicatedBatchCoordinator:
    c = ReplicatedBatchCoordinator(path, time_ms=clock, **kw)
    await c.start()
    return c


def _without_applied(rows: dict) -> dict:
    return {k: v for k, v in rows.items() if k != "raft_applied"}


def _lose_database(db) -> None:
    """Delete the SQLite file of a closed replica with its WAL and shared-memory files."""
    for suffix in ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)


async def _topic(c) -> Topic:
    t = uuid.uuid4()
    assert await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 2)]) == [0]
    return Topic(c, t, 2)


async def test_files_in_the_partition_directory(tmp_path):
    c = await _started(tmp_path, Clock())
    try:
        assert c.is_writable
        d = tmp_path / "__diskless-metadata-0"
        assert c.directory == d and c.db_path == d / "coordinator.db"
        assert partition_metadata.read_topic_id(d) == c.topic_id
        assert (d / "quorum-state").exists()
        assert sorted(p.name for p in d.glob("*.log")) == ["00000000000000000000.log"]
        # the single voter's log is fsynced on the driver's fsync thread (thread_flush_alone)
        await _topic(c)
        assert c.driver.thread_flushes > 0
        topic_id = c.topic_id
    finally:
        await c.close()
    c = await _started(tmp_path, Clock())  # the topic id is read back from partition.metadata
    try:
        assert c.topic_id == topic_id
    finally:
        await c.close()
    with pytest.raises(partition_metadata.InconsistentTopicIdError):
        await _started(tmp_path, Clock(), topic_id=uuid.uuid4())


async def test_restart_applies_only_the_tail(tmp_path):
    clock = Clock()
    c = await _started(tmp_path, clock)
    try:
        t = await _topic(c)
        first = await t.commit(*chain(t.tp(0), 3))
        await t.commit(batch(t.tp(1), 4, pid=9, epoch=0, seq=0))
        applied = c.applied_offset
        assert c.applied_records == 3
        rows = c.state_rows()
    finally:
        await c.close()
    c = await _started(tmp_path, clock)
    try:
        assert c.applied_offset >= applied
        assert c.applied_records == 0  # nothing re-applied: the state was at the log's end
        assert _without_applied(c.state_rows()) == _without_applied(rows)
        # the idempotent retry is still a duplicate with the original offset, the HW is kept
        t = Topic(c, t.id, 2)
        dup = await t.commit(batch(t.tp(1), 4, pid=9, epoch=0, seq=0), key="retry")
        assert dup[0].is_duplicate and dup[0].assigned_base_offset == 0
        (lo,) = await c.list_offsets([ListOffsetsRequest(t.tp(0), -1)])
        assert lo.offset == 3 and first[2].assigned_base_offset == 2
    finally:
        await c.close()


async def test_lost_database_is_rebuilt_from_the_log(tmp_path):
    clock = Clock()
    c = await _started(tmp_path, clock)
    try:
        t = await _topic(c)
        for _ in range(3):
            await t.commit(*chain(t.tp(0), 2))
            clock.advance(10)
        await c.delete_records([DeleteRecordsRequest(t.tp(0), 2)])
        rows = c.state_rows()
        db = c.db_path
    finally:
        await c.close()
    _lose_database(db)
    c = await _started(tmp_path, clock)
    try:
        assert c.applied_records == 5  # create, 3 commits, delete_records: the whole log
        # deterministic apply: the same rows, batch and file ids too (raft_applied moved on: the
        # restarted leader's new epoch starts with a LeaderChange batch)
        assert _without_applied(c.state_rows()) == _without_applied(rows)
    finally:
        await c.close()


async def test_lost_database_is_rebuilt_from_a_snapshot_and_the_tail(tmp_path):
    clock = Clock()
    c = await _started(tmp_path, clock)
    try:
        t = await _topic(c)
        await t.commit(*chain(t.tp(0), 2))
        sid = c.core.create_snapshot(monotonic_ms())
        assert sid is not None and sid.offset == c.applied_offset
        # the next snapshot waits for 4 times as many record bytes as this image (>= 20 MiB)
        image = c.db_path.stat().st_size
        assert c.core.config.snapshot_max_record_bytes == max(20 * 1024 * 1024, 4 * image)
        await t.commit(*chain(t.tp(1), 3))
        await c.enforce_retention([EnforceRetentionRequest(t.tp(0), 100, -1)])
        rows = c.state_rows()
        db = c.db_path
    finally:
        await c.close()
    _lose_database(db)
    c = await _started(tmp_path, clock)
    try:
        assert c.snapshots_loaded == 1
        assert c.applied_records == 2  # the commit and the retention after the snapshot
        assert _without_applied(c.state_rows()) == _without_applied(rows)
        found = await c.find_batches([FindBatchRequest(t.tp(1), 0, 10_000)], 10_000)
        assert [b.base_offset for b in found[0].batches] == [0, 1, 2]
    finally:
        await c.close()


async def test_a_due_snapshot_is_written_off_the_event_loop(tmp_path, monkeypatch, caplog):
    """The driver's background snapshots: the state is fixed on the loop (a read transaction),
    the SQLite image is serialized, encoded, written and fsynced on another thread; the snapshot
    then exists, and a lost database is rebuilt from it and the tail. A failed background write
    leaves no part file and the next trigger writes one."""
    from kafka_rpc.raft import file_log

    threads: list[str] = []
    real_append = file_log.FileRawSnapshotWriter.append

    def append(self, data):  # records which thread writes snapshot batches
        threads.append(threading.current_thread().name)
        return real_append(self, data)

    monkeypatch.setattr(file_log.FileRawSnapshotWriter, "append", append)
    from kafka_rpc.coordinator import replicated_state

    real_image_of = replicated_state.image_of
    serialized: list[str] = []

    def image_of(conn):  # records which thread serializes the SQLite image, slowly
        serialized.append(threading.current_thread().name)
        time.sleep(0.05)  # commits go on meanwhile: the image must still be the snapshot's state
        return real_image_of(conn)

    monkeypatch.setattr(replicated_state, "image_of", image_of)
    real_freeze = file_log.FileRawSnapshotWriter.freeze
    fail = [True]

    def freeze(self, notify=True):  # the first background write fails once its file is written
        if fail[0]:
            fail[0] = False
            raise OSError("disk full (test)")
        return real_freeze(self, notify)

    monkeypatch.setattr(file_log.FileRawSnapshotWriter, "freeze", freeze)
    # every delivery makes a snapshot due (no growth of the trigger with the image)
    monkeypatch.setattr("kafka_rpc.coordinator.replicated_state.SNAPSHOT_LOG_PER_IMAGE", 0)
    clock = Clock()
    # every group committed at once, so later commits reach the file while the image is read
    c = await _started(tmp_path, clock, raft_options={"snapshot_max_record_bytes": 1},
                       apply_commit_records=1)  # fmt: skip
    try:
        t = await _topic(c)
        await t.commit(*chain(t.tp(0), 2))
        log_ = c.core.log

        async def snapshotted() -> bool:  # the first write fails, a later trigger succeeds
            if log_.snapshot_ids():
                return True
            await t.commit(batch(t.tp(1)))  # the next trigger
            return False

        await until(snapshotted, "a background snapshot", interval=0.01)
        assert not fail[0]  # the failed one came first
        loop_thread = threading.current_thread().name
        assert threads and all(name != loop_thread for name in threads)
        assert serialized and all(name != loop_thread for name in serialized)
        rows = c.state_rows()
        db = c.db_path
    finally:
        await c.close()  # waits for a snapshot being written
    assert not list(c.directory.glob("*.part"))  # the failed one's was removed
    _lose_database(db)
    with caplog.at_level(logging.WARNING, logger="kafka_rpc.coordinator.replicated"):
        c = await _started(tmp_path, clock)
    try:
        assert c.snapshots_loaded == 1
        # the image is the state at the snapshot's offset, not a later one
        assert not [r for r in caplog.records if "holds applied offset" in r.getMessage()]
        assert _without_applied(c.state_rows()) == _without_applied(rows)
    finally:
        await c.close()


def test_the_snapshot_image_is_the_state_when_the_records_were_asked_for(tmp_path):
    """``snapshot_records`` fixes the state at once (a read transaction of its own); the image,
    serialized later on another thread, holds nothing committed in between."""
    import sqlite3

    from kafka_rpc.coordinator.replicated_state import _ChunkRec, _ImageChunks
    from kafka_rpc.protocol import codec

    db = tmp_path / "c.db"
    w = sqlite3.connect(db, isolation_level=None)
    w.execute("PRAGMA journal_mode=WAL")
    w.execute("CREATE TABLE raft_applied (id INTEGER PRIMARY KEY, next_offset INTEGER)")
    w.execute("INSERT INTO raft_applied VALUES (1, 10)")
    chunks = _ImageChunks(db)
    w.execute("UPDATE raft_applied SET next_offset = 99")  # committed after
    w.execute("CREATE TABLE later (x)")
    records: list = []
    t = threading.Thread(target=lambda: records.extend(chunks[0 : len(chunks)]))
    t.start()
    t.join()
    image = b"".join(codec.decode_record(r)[0].data for r in records)
    assert all(type(codec.decode_record(r)[0]) is _ChunkRec for r in records)
    assert len(image) == chunks.size
    mem = sqlite3.connect(":memory:")
    mem.deserialize(image)
    assert mem.execute("SELECT next_offset FROM raft_applied").fetchone() == (10,)
    assert mem.execute("SELECT name FROM sqlite_master WHERE name = 'later'").fetchone() is None
    w.close()


async def test_not_the_leader_answers_not_coordinator(tmp_path):
    # voter 2 never answers: node 1 can never win a majority, so it never leads
    c = ReplicatedBatchCoordinator(
        tmp_path,
        node_id=1,
        voters={1: ("127.0.0.1", 1), 2: ("127.0.0.1", 1)},
        time_ms=Clock(),
        shutdown_timeout_ms=100,
    )
    await c.start()
    try:
        assert not c.is_writable
        # Server.batch_coordinator_partitions: reads on any replica, writes only on the leader
        assert c.served_partitions(write=False) == {0}
        assert c.served_partitions(write=True) == frozenset()
        t = uuid.uuid4()
        tp = Topic(c, t, 1).tp(0)
        assert (
            await c.create_topic_and_partitions([CreateTopicAndPartitionsRequest(t, "t", 1)] * 2)
            == [NOT_COORDINATOR] * 2
        )
        out = await c.commit_file("k", 1, 200, chain(tp, 2))
        assert [r.error for r in out] == [NOT_COORDINATOR] * 2
        assert [r.assigned_base_offset for r in out] == [-1, -1]
        assert [r.error for r in await c.delete_records([DeleteRecordsRequest(tp, 0)])] == [16]
        assert [
            r.error for r in await c.enforce_retention([EnforceRetentionRequest(tp, 1, 1)])
        ] == [16]
        assert await c.delete_topics([t]) == [16]
        assert await c.delete_files(["k"]) == [16]
        with pytest.raises(NotCoordinatorError):
            await c.is_safe_to_delete_file("k")
        # reads answer from the local (empty) state
        (f,) = await c.find_batches([FindBatchRequest(tp, 0, 100)], 100)
        assert f.error == 3
        assert await c.list_partitions() == []
    finally:
        await c.close()


async def test_url_selection(tmp_path):
    c = create_coordinator(f"raft://{tmp_path}?node_id=3&partition=2&synchronous=OFF")
    assert isinstance(c, ReplicatedBatchCoordinator)
    assert (c.node_id, c.partition, c.directory) == (3, 2, tmp_path / "__diskless-metadata-2")
    async with c:
        assert c.is_writable
        assert c.served_partitions(write=True) == c.served_partitions(write=False) == {2}
        assert await c.create_topic_and_partitions(
            [CreateTopicAndPartitionsRequest(uuid.uuid4(), "t", 1)]
        ) == [0]
    c = create_coordinator(
        f"raft://{tmp_path}?voters=1@127.0.0.1:9093,2@[::1]:9094&topic_id=AAAAAAAAAAAAAAAAAAAAAg"
        "&raft.election_timeout_ms=300"
    )
    assert c.voters == {1: ("127.0.0.1", 9093), 2: ("::1", 9094)}
    assert c.topic_id == uuid.UUID(int=2)
    assert c._raft_options == {"election_timeout_ms": 300}
    with pytest.raises(ValueError):
        create_coordinator(f"raft://{tmp_path}?nope=1")
    with pytest.raises(ValueError):
        create_coordinator(f"raft://{tmp_path}?voters=1@nowhere")
    with pytest.raises(ValueError):
        create_coordinator("raft://")


async def _standalone(path, clock):
    """A standalone SQLite coordinator's database at ``path`` (the default before the
    topic-based one): two partitions with batches, an idempotent producer, an object whose
    batches were deleted (marked for deletion). Returns (topic, what it answers)."""
    old = SqliteBatchCoordinator(str(path), time_ms=clock)
    await old.start()
    try:
        t = await _topic(old)
        first = await t.commit(*chain(t.tp(0), 3))
        await t.commit(batch(t.tp(1), 4, pid=9, epoch=0, seq=0))
        await t.commit(*chain(t.tp(0), 2), key="doomed")
        clock.advance(10)
        await old.delete_records([DeleteRecordsRequest(t.tp(0), 5)])
        answers = (
            await old.find_batches([FindBatchRequest(t.tp(p), 0, 1 << 20) for p in (0, 1)],
                                   1 << 20),
            await old.get_files_to_delete(),
            [r.assigned_base_offset for r in first],
        )  # fmt: skip
    finally:
        await old.close()
    return t, answers


async def test_import_of_a_standalone_sqlite_database(tmp_path):
    """The upgrade: a data directory of the standalone SQLite coordinator is imported through
    the log (so a rebuild from the log has it too), every batch keeping its offsets, producer
    state, object key and deletion marks; the file is then renamed ``.imported``, kept."""
    clock = Clock()
    source = tmp_path / "coordinator.db"
    t, (found, marked, offsets) = await _standalone(source, clock)
    assert offsets == [0, 1, 2] and len(marked) == 2  # every batch of both objects deleted
    logs = tmp_path / "logs"
    c = await _started(logs, clock, import_path=source)
    try:
        assert c.imports_applied == 1 and c.is_writable
        assert not source.exists() and (tmp_path / "coordinator.db.imported").exists()
        got = await c.find_batches([FindBatchRequest(t.tp(p), 0, 1 << 20) for p in (0, 1)],
                                   1 << 20)  # fmt: skip
        assert got == found
        assert await c.get_files_to_delete() == marked
        t = Topic(c, t.id, 2)
        dup = await t.commit(batch(t.tp(1), 4, pid=9, epoch=0, seq=0), key="again")
        assert dup[0].is_duplicate and dup[0].assigned_base_offset == 0
        more = await t.commit(*chain(t.tp(0), 1), key="new")
        assert more[0].assigned_base_offset == 5
        rows = c.state_rows()
        assert len(rows["raft_imports"]) == 1
        db = c.db_path
    finally:
        await c.close()
    c = await _started(logs, clock, import_path=source)
    try:  # nothing left to import: a restart neither re-imports nor re-applies
        assert (c.imports_applied, c.applied_records) == (0, 0)
        assert _without_applied(c.state_rows()) == _without_applied(rows)
    finally:
        await c.close()
    # a crash after the apply and before the rename: the file is back where it was; the
    # partition knows its image (raft_imports), so the start only renames it
    (tmp_path / "coordinator.db.imported").rename(source)
    c = await _started(logs, clock, import_path=source)
    try:
        assert (c.imports_applied, c.applied_records) == (0, 0)
        assert not source.exists() and (tmp_path / "coordinator.db.imported").exists()
        assert _without_applied(c.state_rows()) == _without_applied(rows)
    finally:
        await c.close()
    _lose_database(db)
    c = await _started(logs, clock)
    try:  # rebuilt from the log alone: the import, then the commits after it
        assert c.imports_applied == 1
        assert _without_applied(c.state_rows()) == _without_applied(rows)
    finally:
        await c.close()


async def test_no_import_into_a_partition_that_holds_batches(tmp_path, caplog):
    """Two coordinators' states cannot be merged: a partition with batches imports nothing and
    the standalone file stays where it is (logged as an error)."""
    clock = Clock()
    logs = tmp_path / "logs"
    c = await _started(logs, clock)
    try:
        t = await _topic(c)
        await t.commit(*chain(t.tp(0), 2))
        rows = c.state_rows()
    finally:
        await c.close()
    source = tmp_path / "coordinator.db"
    await _standalone(source, clock)
    caplog.set_level(logging.ERROR, logger="kafka_rpc.coordinator.replicated")
    c = await _started(logs, clock, import_path=source)
    try:
        assert c.imports_applied == 0 and c.is_writable
        assert source.exists() and not (tmp_path / "coordinator.db.imported").exists()
        assert _without_applied(c.state_rows()) == _without_applied(rows)
        assert any("NOT imported" in r.getMessage() for r in caplog.records)
    finally:
        await c.close()


async def test_an_import_cut_short_is_dropped_by_the_next_record(tmp_path, monkeypatch):
    """An import whose leader lost its epoch after appending some of its chunks: the next
    record of the log (another leader's write) drops it; every replica, and a rebuild from the
    log, applies the same (nothing of the import, everything after it)."""
    from kafka_rpc.coordinator import replicated, replicated_state

    monkeypatch.setattr(replicated_state, "SNAPSHOT_CHUNK_BYTES", 4096)
    clock = Clock()
    source = tmp_path / "coordinator.db"
    await _standalone(source, clock)
    image = await asyncio.to_thread(replicated._read_source_image, source)
    chunks = replicated_state.chunk_records(image)
    assert len(chunks) > 3
    logs = tmp_path / "logs"
    c = await _started(logs, clock)
    try:
        c.driver.append(chunks[:3])  # the applied offset stays before them: not waited for
        t = await _topic(c)
        assert (await t.commit(*chain(t.tp(0), 2)))[0].assigned_base_offset == 0
        assert c.imports_applied == 0
        rows = c.state_rows()
        assert "raft_imports" not in rows
        db = c.db_path
    finally:
        await c.close()
    _lose_database(db)
    c = await _started(logs, clock)
    try:
        assert c.imports_applied == 0
        assert _without_applied(c.state_rows()) == _without_applied(rows)
    finally:
        await c.close()


async def test_concurrent_writes_share_an_append_and_an_apply(tmp_path):
    """Group commit: writes issued together go into one Raft batch (one fsync of the log) and
    one SQLite transaction, each caller still getting its own answer."""
    c = await _started(tmp_path, Clock())
    try:
        t = await _topic(c)
        groups0, flushes0 = c.apply_groups, c.driver.thread_flushes
        out = await asyncio.gather(*(t.commit(*chain(t.tp(i % 2), 2)) for i in range(16)))
        firsts = sorted(r[0].assigned_base_offset for r in out)
        assert firsts == sorted([2 * i for i in range(8)] * 2)  # 8 commits per partition
        assert c.applied_records == 1 + 16
        assert c.apply_groups - groups0 < 16  # shared (at once: 1)
        assert c.driver.thread_flushes - flushes0 < 16
    finally:
        await c.close()


async def test_the_snapshot_trigger_grows_with_the_image(tmp_path):
    c = await _started(tmp_path, Clock(), raft_options={"snapshot_max_record_bytes": 1000})
    try:
        t = await _topic(c)
        await t.commit(*chain(t.tp(0), 50))  # > 1,000 record bytes: the core snapshots
        await t.commit(*chain(t.tp(1), 1))

        await until(lambda: c.core.log.latest_snapshot_id() is not None, "the core's snapshot",
                    interval=0.01)  # fmt: skip
        # raised to the image's size: a whole-database snapshot is not taken every 1,000 bytes
        assert c.core.config.snapshot_max_record_bytes > 1000
    finally:
        await c.close()
