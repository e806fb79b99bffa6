"""The state machine of a replicated Batch Coordinator (one ``__diskless-metadata`` partition):
what every replica, leader included, does with its Raft log (Raft's
:class:`~kafka_rpc.raft.api.StateMachine`: ``handle_commit``, ``handle_load_snapshot``,
``snapshot_records``, ``handle_leader_change``). The read and write API, the lifecycle and the
import are :mod:`kafka_rpc.coordinator.replicated`'s.

* **Apply**: committed records (our ``Diskless*Record`` family, types 10200-10205) are applied to
  the replica's own SQLite file by :class:`~kafka_rpc.coordinator.sqlite.SqliteOps` with the
  clock fixed to the recorded time (:class:`FixedClock`), so offsets, idempotence answers,
  deletions and object/file ids come out the same on every replica. The applied records and the
  applied offset (table ``raft_applied``) go into one SQLite transaction, committed every
  ``apply_commit_records`` records, ``apply_commit_ms`` after it opened, and before any read of
  the file through another connection (:meth:`ReplicatedStateMachine._apply_open`); a record
  whose operation raises is rolled back alone, identically on every replica.
* **Snapshots** (KIP-630 mechanics): the snapshot is the SQLite image cut into
  ``DisklessSnapshotChunkRecord`` records (:func:`chunk_records`, :class:`_ImageChunks`),
  loaded with the SQLite backup API; the byte trigger grows with the image
  (``SNAPSHOT_LOG_PER_IMAGE``). None is taken while an import is partially applied or the
  apply failed (:attr:`ReplicatedStateMachine.in_transaction`).
* **Imports**: the chunks of a standalone SQLite coordinator's image in the log replace the
  state once the last one is committed (:meth:`ReplicatedStateMachine._load_import`).

Units: times in ms since the Unix epoch; Raft offsets are Kafka offsets, ``next_offset``
exclusive.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import sqlite3
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.primitives import uvarint_bytes

from .api import (
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    EnforceRetentionRequest,
    TopicIdPartition,
    new_commit_batch_request,
    new_topic_id_partition,
)
from .errors import NotCoordinatorError
from .sqlite import OpFailed, OpFailure, SqliteOps, init_writer, run_ops

__all__ = [
    "APPLIED_DDL",
    "SNAPSHOT_CHUNK_BYTES",
    "SNAPSHOT_LOG_PER_IMAGE",
    "ApplyCache",
    "FixedClock",
    "ReplicatedStateMachine",
    "chunk_records",
    "image_of",
]

#: the replicated coordinator's logger (the apply's lines keep its name)
log = logging.getLogger("kafka_rpc.coordinator.replicated")

#: Bytes of SQLite image per DisklessSnapshotChunkRecord.
SNAPSHOT_CHUNK_BYTES = 256 * 1024
#: The next snapshot waits for this many times the last image's size in record bytes (see
#: ``snapshot_records``). A snapshot copies, frames and checksums the whole image on the event
#: loop, and the database grows faster than the log; the price is a log up to this many images
#: long between snapshots.
SNAPSHOT_LOG_PER_IMAGE = 4

_ChunkRec: Any = codec.message_class("DisklessSnapshotChunkRecord")

#: The applied offset of the state: one row, updated in the transaction of what it applied.
APPLIED_DDL = (
    "CREATE TABLE IF NOT EXISTS raft_applied ("
    " id INTEGER PRIMARY KEY CHECK (id = 1),"
    " next_offset INTEGER NOT NULL,"  # the next Raft offset to apply (exclusive end of applied)
    " epoch INTEGER NOT NULL,"  # epoch of the last applied batch
    " last_time_ms INTEGER NOT NULL"  # the largest recorded TimestampMs applied
    ") STRICT"
)


#: Every import applied to this partition (:meth:`ReplicatedBatchCoordinator._import`), by the
#: SHA-256 of its image; created by the first one (absent before: a plain state's tables).
_IMPORTS_DDL = (
    "CREATE TABLE IF NOT EXISTS raft_imports ("
    " sha256 TEXT PRIMARY KEY,"  # hex SHA-256 of the imported image
    " image_size INTEGER NOT NULL,"  # bytes
    " end_offset INTEGER NOT NULL"  # the Raft offset after its last chunk (exclusive)
    ") STRICT"
)

# -- the clock fixed to the recorded time, and the ops adapter ------------------------------


class FixedClock:
    """The ``time_ms`` of the applying ``SqliteOps``: the recorded TimestampMs of the record being
    applied (ms)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class _Timed:
    """An operation of ``SqliteOps`` run with the clock set to ``time_ms`` first."""

    __slots__ = ("clock", "fn", "time_ms")

    def __init__(self, clock: FixedClock, fn: Callable[..., Any], time_ms: int) -> None:
        self.clock, self.fn, self.time_ms = clock, fn, time_ms

    def __call__(self, conn: sqlite3.Connection, *args: Any) -> Any:
        self.clock.now = self.time_ms
        return self.fn(conn, *args)


def _write_applied(conn: sqlite3.Connection, next_offset: int, epoch: int, last_time: int) -> None:
    conn.execute(
        "UPDATE raft_applied SET next_offset = ?, epoch = ?, last_time_ms = ? WHERE id = 1",
        (next_offset, epoch, last_time),
    )


class ApplyCache:
    """``_run_write_group``'s cache hooks for ``_Timed`` operations: the ``SqliteOps`` row cache,
    kept across apply groups (this connection is the database's only writer)."""

    def __init__(self, ops: SqliteOps) -> None:
        self.ops = ops

    def keeps(self, fn: Any) -> bool:
        inner = fn.fn if type(fn) is _Timed else fn
        return inner is _write_applied or self.ops.keeps(inner)

    def flush(self, conn: sqlite3.Connection) -> None:
        self.ops.flush(conn)

    def drop(self) -> None:
        self.ops.drop()


# -- records -> operations, and the SQLite image -------------------------------------------


def _decode_op(ops: SqliteOps, value: bytes) -> Any:
    """``(operation, args, recorded time)`` of one record, or the ``DisklessSnapshotChunkRecord``
    itself (a piece of an import). Raises DecodeError for an unknown type."""
    rec, _ = codec.decode_record(value)
    kind = type(rec).__spec_name__
    if kind == "DisklessCommitFileRecord":
        tps: dict[tuple[uuid.UUID, int], TopicIdPartition] = {}
        reqs = []
        new_req = new_commit_batch_request
        for b in rec.batches:
            k = (b.topic_id, b.partition)
            tp = tps.get(k)
            if tp is None:
                tp = tps[k] = new_topic_id_partition(b.topic_id, b.partition)
            reqs.append(
                new_req(tp, b.byte_offset, b.size, b.base_offset, b.last_offset,
                        b.batch_max_timestamp, b.timestamp_type, b.producer_id,
                        b.producer_epoch, b.base_sequence, b.last_sequence, b.magic)
            )  # fmt: skip
        return (ops.commit_file,
                (rec.object_key, rec.uploader_broker_id, rec.file_size, reqs),
                rec.timestamp_ms)  # fmt: skip
    if kind == "DisklessCreateTopicsRecord":
        return (ops.create_topics,
                ([CreateTopicAndPartitionsRequest(t.topic_id, t.topic_name, t.num_partitions)
                  for t in rec.topics],),
                rec.timestamp_ms)  # fmt: skip
    if kind == "DisklessDeleteRecordsRecord":
        return (ops.delete_records,
                ([DeleteRecordsRequest(TopicIdPartition(e.topic_id, e.partition), e.offset)
                  for e in rec.entries],),
                rec.timestamp_ms)  # fmt: skip
    if kind == "DisklessDeleteTopicsRecord":
        return ops.delete_topics, (list(rec.topic_ids),), rec.timestamp_ms
    if kind == "DisklessDeleteFilesRecord":
        return ops.delete_files, (list(rec.object_keys),), rec.timestamp_ms
    if kind == "DisklessEnforceRetentionRecord":
        return (ops.enforce_retention,
                ([EnforceRetentionRequest(TopicIdPartition(e.topic_id, e.partition),
                                          e.retention_bytes, e.retention_ms)
                  for e in rec.entries], rec.max_batches_per_request),
                rec.timestamp_ms)  # fmt: skip
    if kind == "DisklessSnapshotChunkRecord":
        return rec  # an import's piece (handle_commit)
    raise codec.DecodeError(f"{kind} is not a __diskless-metadata record")


def image_of(conn: sqlite3.Connection) -> bytearray:
    """The database as one file image, journal mode bytes set to rollback (1, 1) so that it can
    be opened in memory (WAL needs a file). One copy of ``serialize()``'s bytes."""
    image = bytearray(conn.serialize())
    if len(image) >= 20:
        image[18] = image[19] = 1
    return image


def chunk_records(image: bytes | bytearray) -> list[bytes]:
    """``image`` as ``DisklessSnapshotChunkRecord`` records of ``SNAPSHOT_CHUNK_BYTES`` (one, empty,
    for an empty image). The codec frames each record with empty Data (its last two bytes: the
    compact length 1 and no tagged fields); the chunk's bytes go in between, copied once."""
    view = memoryview(image)
    size = len(image)
    out = []
    for pos in range(0, max(size, 1), SNAPSHOT_CHUNK_BYTES):
        data = view[pos : pos + SNAPSHOT_CHUNK_BYTES]
        head = codec.encode_record(_ChunkRec(position=pos, image_size=size, data=b""))
        assert head[-2:] == b"\x01\x00"  # compact bytes length 0 + 1, tagged fields 0
        out.append(b"".join((head[:-2], uvarint_bytes(len(data) + 1), data, b"\x00")))
    return out


class _ImageChunks(Sequence):
    """The ``DisklessSnapshotChunkRecord`` records of the database ``db_path`` as of now, read
    later (:meth:`ReplicatedBatchCoordinator.snapshot_records`).

    The constructor opens a read-only connection and starts a read transaction on it (WAL: the
    committed state at this moment stays readable whatever is committed after); ``size`` (bytes)
    and ``len`` (records) come from the page count. The first item read serializes the image
    under that transaction, on whichever thread reads it, cuts it with :func:`chunk_records`
    and closes the connection."""

    def __init__(self, db_path: Path) -> None:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False)
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT next_offset FROM raft_applied").fetchall()  # the snapshot
            (page_size,) = conn.execute("PRAGMA page_size").fetchone()
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
        except BaseException:
            conn.close()
            raise
        self.size = page_size * pages
        self._conn: sqlite3.Connection | None = conn
        self._records: list[bytes] | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return max(1, -(-self.size // SNAPSHOT_CHUNK_BYTES))

    def __getitem__(self, index: Any) -> Any:
        return self._load()[index]

    def _load(self) -> list[bytes]:
        with self._lock:
            if self._records is None:
                conn, self._conn = self._conn, None
                assert conn is not None
                try:
                    image = image_of(conn)
                finally:
                    conn.close()
                if len(image) != self.size:
                    raise RuntimeError(f"an image of {len(image)} bytes, {self.size} expected")
                self._records = chunk_records(image)
            return self._records


# -- the state machine -------------------------------------------------------------------------


class ReplicatedStateMachine:
    """The Raft state machine half of ``replicated.ReplicatedBatchCoordinator`` (module
    docstring), which sets up every attribute it works on: the apply connection ``_conn`` (None
    once closed), ``_ops`` (a ``SqliteOps`` on ``_clock``, a ``FixedClock``) and its ``_cache``
    (an ``ApplyCache``); the applied state ``applied_offset``, ``_applied_epoch``,
    ``_last_time``, ``_seen``; the open transaction ``_open_work``, ``_open_records``,
    ``_commit_timer``, ``_commit_records``, ``_commit_s``; the leader side ``_leader``,
    ``_pending``, ``_local``, ``_barriers``, ``_leader_event``; the import ``_import_buf``,
    ``_import_start``; ``failed``, ``core``, ``db_path``, ``partition``, ``node_id``,
    ``_synchronous``, ``_snapshot_bytes_floor`` and the statistics counters; and the methods
    ``_read_applied()`` and ``_start_import()``."""

    # What the subclass sets up (declared for the type checker only: no class attributes)
    _conn: sqlite3.Connection | None
    _clock: FixedClock
    _ops: SqliteOps
    _cache: ApplyCache
    applied_offset: int
    _applied_epoch: int
    _last_time: int
    _seen: int
    _open_work: list[list]
    _open_records: int
    _commit_timer: asyncio.TimerHandle | None
    _commit_records: int
    _commit_s: float
    _leader: tuple[int, int]
    _pending: dict[int, asyncio.Future]
    _local: dict[int, tuple[Callable[..., Any], tuple, int]]
    _barriers: list[tuple[int, asyncio.Future]]
    _leader_event: asyncio.Event | None
    _import_buf: list[bytes] | None
    _import_start: int
    failed: BaseException | None
    core: Any
    db_path: Path
    partition: int
    node_id: int
    _synchronous: str
    _snapshot_bytes_floor: int
    imports_applied: int
    applied_records: int
    apply_groups: int
    apply_commits: int
    snapshots_loaded: int

    if TYPE_CHECKING:

        def _read_applied(self) -> None: ...

        def _start_import(self) -> None: ...

    @property
    def in_transaction(self) -> bool:
        """Whether the committed offset is not a state this replica holds, so the Raft core
        must not snapshot at it (``RaftCore.create_snapshot``, :mod:`kafka_rpc.raft.snapshots`,
        takes none while this is true and tries again at the next trigger, as Kafka snapshots
        only at a stable offset):

        * an import is partially applied: its chunks so far are in ``_import_buf``, not in
          SQLite, and the applied offset stays before its first chunk. A snapshot at the
          committed offset would hold the state before the import under an id past some of its
          chunks; a replica rebuilt from it would skip the rest of the import as "the tail of
          an import applied before a restart" and never hold the imported state. The snapshot
          waits until the last chunk is applied (or the next record drops an unfinished import);
        * the apply failed (:attr:`failed`): SQLite is behind the committed log."""
        return self._import_buf is not None or self.failed is not None

    def handle_commit(self, batches: Sequence[Any]) -> None:
        """Apply committed records (those at or above the last delivered offset) with the new
        applied offset in the apply's open SQLite transaction (:meth:`_apply_open`); answer the
        leader's waiting callers. An import (``DisklessSnapshotChunkRecord`` records in the log,
        see :meth:`_import`) replaces the state once its last chunk is committed; the applied
        offset does not pass its first chunk before that, so a restart reads the import again."""
        conn = self._conn
        if conn is None:
            raise RuntimeError("the coordinator is closed")
        if self.failed is not None:
            return  # logged once by _fail; a restart applies the log again
        clock, ops, local = self._clock, self._ops, self._local
        work: list[tuple[Any, tuple]] = []
        offsets: list[int] = []
        start = self._seen
        end, epoch, last_time = self.applied_offset, self._applied_epoch, self._last_time
        for b in batches:
            if b.last_offset < start:
                continue
            if not b.is_control:
                for i, value in enumerate(b.records):
                    offset = b.base_offset + i
                    if offset < start or value is None:
                        continue
                    op: Any = local.pop(offset, None) if local else None
                    if op is None:
                        op = _decode_op(ops, value)
                    if type(op) is _ChunkRec:
                        if op.position == 0:  # an import starts: what came before is applied
                            if work or end > self.applied_offset:
                                self._apply_group(work, offsets, offset, epoch, last_time)
                                work, offsets = [], []
                            self._import_buf = []
                            self._import_start = offset
                        if self._import_buf is None:
                            continue  # the tail of an import applied before a restart
                        self._import_buf.append(op.data)
                        if op.position + len(op.data) >= op.image_size:
                            self._load_import(b"".join(self._import_buf), offset + 1, b.epoch)
                            end, epoch = offset + 1, b.epoch
                        continue
                    if op is None:
                        continue
                    if self._import_buf is not None:  # its leader lost the epoch mid-import
                        log.warning("diskless-metadata-%d: the import started at offset %d was "
                                    "not finished; dropped at offset %d", self.partition,
                                    self._import_start, offset)  # fmt: skip
                        self._import_buf = None
                    fn, args, t = op
                    work.append((_Timed(clock, fn, t), args))
                    offsets.append(offset)
                    last_time = max(last_time, t)
            self._seen = b.last_offset + 1
            if self._import_buf is None:
                end, epoch = b.last_offset + 1, b.epoch
        if end > self.applied_offset or work:
            self._apply_group(work, offsets, end, epoch, last_time)

    def _apply_group(self, work: list, offsets: list[int], end: int, epoch: int,
                     last_time: int) -> None:  # fmt: skip
        """Apply ``work`` and move the applied offset to ``end`` in the open SQLite transaction
        (:meth:`_apply_open`); answer the leader's callers and barriers."""
        assert self._conn is not None
        work.append((_write_applied, (end, epoch, last_time)))
        results = self._apply_open(work)
        self.applied_offset, self._applied_epoch = end, epoch
        self._last_time = max(self._last_time, last_time)
        self.applied_records += len(offsets)
        self.apply_groups += 1
        if self._pending:
            for offset, res in zip(offsets, results):
                fut = self._pending.pop(offset, None)
                if fut is None or fut.done():
                    continue
                if type(res) is OpFailure:
                    fut.set_exception(res.exc)
                else:
                    fut.set_result(res)
        self._release_barriers(end)
        if self._open_records >= self._commit_records:
            self.commit_applied()
        elif self._commit_timer is None and self._open_work:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.commit_applied()
            else:
                self._commit_timer = loop.call_later(self._commit_s, self.commit_applied)

    def _apply_open(self, work: list) -> list:
        """Run ``work`` (one apply group, its ``_write_applied`` last) in the apply connection's
        open transaction, opening one if none is (``BEGIN IMMEDIATE``); returns its results.

        The transaction is committed by :meth:`commit_applied`, not here: every
        ``apply_commit_records`` records, ``apply_commit_ms`` after the first group, and before
        anything reads the file through another connection. Callers are answered from the
        results before that COMMIT: the record is committed in the Raft log, which is what makes
        it durable (a restart applies the log again from the last committed ``raft_applied``
        row), and every read of the SQLite file commits first, so no answer is ever ahead of
        what a read sees. One transaction of up to ``apply_commit_records`` records writes each
        index and ``logs`` page it touches once, not once per apply group (one log fsync's worth
        of commits).

        Each operation stays isolated (``sqlite._run_write_group``'s rule): the group first runs
        without SAVEPOINTs; if an operation raises, the whole open transaction is rolled back
        and its groups are applied again, the earlier ones and this one with one SAVEPOINT per
        operation (the earlier results are the same: the apply is deterministic), then
        committed. Any other error rolls the open transaction back and is raised: this replica's
        SQLite is then behind what it answered until a restart applies the log again."""
        conn, cache = self._conn, self._cache
        assert conn is not None
        try:
            if not conn.in_transaction:
                conn.execute("BEGIN IMMEDIATE")
            try:
                results = run_ops(conn, work, cache, optimistic=True)
            except OpFailed:
                cache.drop()
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                for earlier in self._open_work:
                    run_ops(conn, earlier, cache, optimistic=False)
                results = run_ops(conn, work, cache, optimistic=False)
                self._open_work.append(work)
                self._open_records += len(work) - 1
                self.commit_applied()
                return results
        except BaseException:
            cache.drop()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._open_work.clear()
            self._open_records = 0
            self._fail(f"applying at offset {self.applied_offset} failed")
            raise
        self._open_work.append(work)
        self._open_records += len(work) - 1
        return results

    def commit_applied(self) -> None:
        """COMMIT the apply's open SQLite transaction (with the ``logs`` rows the row cache holds
        changed), if one is open (see :meth:`_apply_open`). Called before every read of the file
        by another connection; raises what the COMMIT raises (the transaction is then rolled
        back)."""
        timer, self._commit_timer = self._commit_timer, None
        if timer is not None:
            timer.cancel()
        conn = self._conn
        if conn is None or not conn.in_transaction:
            return
        self._open_work.clear()
        self._open_records = 0
        try:
            self._cache.flush(conn)
            conn.execute("COMMIT")
        except BaseException:
            self._cache.drop()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._fail("the COMMIT of the applied records failed")
            raise
        self.apply_commits += 1

    def _fail(self, what: str) -> None:
        """Stop applying and writing after an apply failure (see :attr:`failed`)."""
        self.failed = sys.exc_info()[1] or RuntimeError(what)
        log.error("diskless-metadata-%d: %s; SQLite rolled back to its last COMMIT (offset "
                  "below %d per raft_applied): this replica applies nothing more and answers "
                  "writes NOT_COORDINATOR until a restart applies the log again",
                  self.partition, what, self._committed_row_offset())  # fmt: skip
        self._fail_pending(NotCoordinatorError(f"diskless-metadata-{self.partition}: {what}"))

    def _committed_row_offset(self) -> int:
        try:
            assert self._conn is not None
            return self._conn.execute(
                "SELECT next_offset FROM raft_applied WHERE id = 1").fetchone()[0]  # fmt: skip
        except Exception:  # noqa: BLE001 - only for the log line
            return -1

    def _release_barriers(self, end: int) -> None:
        """Answer the :meth:`wait_applied` barriers at or below applied offset ``end``
        (exclusive: the next offset to apply); drop those already done."""
        if self._barriers:
            keep = []
            for target, fut in self._barriers:
                if fut.done():
                    continue
                if end >= target:
                    fut.set_result(None)
                else:
                    keep.append((target, fut))
            self._barriers[:] = keep

    def _load_import(self, image: bytes, end: int, epoch: int) -> None:
        """Replace the state by an imported image (a standalone SQLite coordinator's database)
        with ``end`` as the applied offset and the image's ``raft_imports`` row, all in the one
        transaction of the backup (a crash leaves the old state or the new one), then bring its
        schema up to date (deterministic: clock 0; a start does it again after a crash)."""
        assert self._conn is not None
        last_time = self._last_time

        def bookkeeping(src: sqlite3.Connection) -> None:
            src.execute(APPLIED_DDL)
            src.execute("INSERT OR REPLACE INTO raft_applied VALUES (1, ?, ?, ?)",
                        (end, epoch, last_time))  # fmt: skip
            src.execute(_IMPORTS_DDL)
            src.execute("INSERT OR REPLACE INTO raft_imports VALUES (?, ?, ?)",
                        (hashlib.sha256(image).hexdigest(), len(image), end))  # fmt: skip
            src.commit()

        self._load_image(image, bookkeeping)
        init_writer(self._conn, self._synchronous, 0)
        self._import_buf = None
        self.applied_offset, self._applied_epoch = end, epoch
        self.imports_applied += 1
        log.info("diskless-metadata-%d: imported a %d-byte SQLite image at offsets [%d, %d)",
                 self.partition, len(image), self._import_start, end)  # fmt: skip
        self._release_barriers(end)

    def handle_load_snapshot(self, reader: Any) -> None:
        """Replace the state by the snapshot's SQLite image (backup API), unless the local state
        already is at or past the snapshot (a restart: only the log's tail is re-applied)."""
        sid = reader.snapshot_id
        if self.applied_offset >= sid.offset:
            log.info("diskless-metadata-%d: state at %d, snapshot %s not loaded",
                     self.partition, self.applied_offset, sid)  # fmt: skip
            return
        chunks: list[bytes] = []
        size = -1
        for b in reader.batches():
            if b.is_control:
                continue
            for value in b.records:
                rec, _ = codec.decode_record(value)
                if type(rec).__spec_name__ != "DisklessSnapshotChunkRecord":
                    raise codec.DecodeError(f"{type(rec).__spec_name__} in a coordinator snapshot")
                if rec.position != sum(len(c) for c in chunks):
                    raise codec.DecodeError("snapshot chunks out of order")
                size = rec.image_size
                chunks.append(rec.data)
        image = b"".join(chunks)
        if len(image) != size:
            raise codec.DecodeError(f"snapshot image of {len(image)} bytes, expected {size}")
        self._load_image(image)
        self._read_applied()
        if self.applied_offset != sid.offset:
            log.warning("diskless-metadata-%d: snapshot %s holds applied offset %d",
                        self.partition, sid, self.applied_offset)  # fmt: skip
            self.applied_offset = sid.offset
            self._applied_epoch = sid.epoch
        self._seen = self.applied_offset
        self._import_buf = None
        self.snapshots_loaded += 1
        log.info("diskless-metadata-%d: snapshot %s loaded (%d bytes)", self.partition, sid,
                 len(image))  # fmt: skip

    def _load_image(
        self, image: bytes, prepare: Callable[[sqlite3.Connection], None] | None = None
    ) -> None:
        """Replace the database by ``image`` with the backup API (one write transaction on the
        destination), after ``prepare`` ran on the image's in-memory copy."""
        conn = self._conn
        assert conn is not None
        self.commit_applied()
        src = sqlite3.connect(":memory:")
        try:
            src.deserialize(image)
            if prepare is not None:
                prepare(src)
            src.backup(conn)
        finally:
            src.close()
        conn.execute("PRAGMA journal_mode=WAL")
        self._ops.drop()

    def snapshot_records(self) -> Sequence[bytes]:
        """The applied state as ``DisklessSnapshotChunkRecord`` records (the SQLite image), as an
        :class:`_ImageChunks` sequence: the state is fixed here (a read transaction on a
        connection of its own, after committing what was applied), the image is read and cut
        when the records are first read -- by the driver's background snapshot writer, off the
        event loop.

        The next snapshot then waits for ``SNAPSHOT_LOG_PER_IMAGE`` times as many record bytes
        as this image (the core's ``snapshot_max_record_bytes`` raised to that, never below its
        configured value): a snapshot costs a whole image, unlike the metadata log's, so it is
        amortised over several times as much log as it replaces."""
        assert self._conn is not None
        self.commit_applied()
        chunks = _ImageChunks(self.db_path)
        if self.core is not None:
            self.core.config.snapshot_max_record_bytes = max(
                self._snapshot_bytes_floor, SNAPSHOT_LOG_PER_IMAGE * chunks.size
            )
        return chunks

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self._leader = (leader_id, epoch)
        if leader_id != self.node_id:
            self._fail_pending(NotCoordinatorError(f"leader is now {leader_id} (epoch {epoch})"))
        else:
            self._start_import()  # before the leader event: start() waits for it
            if self._leader_event is not None:
                self._leader_event.set()

    def _fail_pending(self, exc: Exception) -> None:
        self._local.clear()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)
        barriers, self._barriers = self._barriers, []
        for _, fut in barriers:
            if not fut.done():
                fut.set_exception(exc)
