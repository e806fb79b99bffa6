"""SQLite Batch Coordinator (the default), through aiosqlite.

Design (docs/batch-coordinator.md; the rules are Inkless's control plane's, on SQLite):

* **Two connections.** A writer (WAL, ``synchronous=FULL`` by default, foreign keys on) and a
  read-only reader (``PRAGMA query_only``); WAL lets the reader run beside the writer, each read
  group seeing one consistent snapshot. SQLite allows one writer, so ``BEGIN IMMEDIATE``
  serialises all mutations: no row locks, lock ordering or deadlock retries are needed.
* **One hop per group.** Each aiosqlite ``await`` is a thread hop (60-90 us here), so a whole
  operation runs as one plain function on the connection's thread (``_run_on_db_thread``).
* **Group commit.** Mutating calls are queued; the writer takes every waiting call (up to
  ``max_group_size``) into ONE transaction, then one ``COMMIT`` (one fsync) for all. Every
  caller's future is resolved only after that ``COMMIT`` returned, i.e. once its change is
  durable. A failing call rolls back only itself: the group runs without SAVEPOINTs first and,
  if a call raised, is rolled back and run again with a ``SAVEPOINT`` per call (SAVEPOINTs cost
  about 15% of a commit; see ``_run_write_group``). Reads are grouped the same way on the reader
  (one hop, one snapshot for the group).
* **Narrow batches table (migration V002).** ``batches`` is ``WITHOUT ROWID`` keyed by
  ``(log_id, last_offset)``: one b-tree per insert instead of three. ``batch_id`` is assigned
  by the writer from ``batch_id_seq`` (kept in memory, written once per group), and objects
  count their live batches in ``files.batch_count`` instead of an index on ``batches.file_id``.
* **Small reads inline.** ``find_batches`` / ``list_offsets`` calls of at most
  ``inline_read_max_partitions`` (4) partitions run synchronously on the event loop's thread, on
  a third, read-only stdlib ``sqlite3`` connection with ``busy_timeout=0``: a WAL read never waits
  for the writer, and such a read costs less (~20 us) than the hop to a thread and back, which
  on a one-core server also competes for the GIL. Measured with ``bench/coordinator.py --quick
  --inline-read-max-partitions 0|4``, alternated, two runs each (server pinned to one core):
  single-partition FindDisklessBatches 16 conns x 8 in flight 15.2k/13.4k -> 16.7k/19.4k
  lookups/s; unpipelined no gain within the noise (14.2k/12.9k vs 13.2k/9.2k). If the inline
  read reports SQLITE_BUSY (WAL recovery, never in steady state) or the request is larger, the
  read goes to the reader thread as before. ``inline_read_max_partitions=0`` (also a URL
  option) turns inline reads off.
* **Measured** (``bench/coordinator.py --quick``: server on one core, 16 connections, 100
  batches over 50 partitions per CommitBatches; 6 runs alternated with the code before V002 and
  the fast constructors, 2026-11-21, a slow phase of this shared VM): closed loop 743-834
  commits/s (p99 27-32 ms) vs 375-643 (p99 41-71 ms); 1,000/s offered: 816-964 achieved (p99
  126-301 ms) vs 412-585 (p99 0.9-1.6 s); server CPU 1.12-1.32 vs 1.52-2.38 ms per commit.
  See README for the table.
* SQL lives in ``sql/*.sql`` (named sections); the schema in numbered ``migrations/V###__*.sql``,
  applied at start and recorded in ``schema_version``; a database newer than the code is refused.

Cancelling an awaiting caller does not cancel its operation: once queued it is applied.
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import aiosqlite

from . import _rules, schema
from ._rules import ProducerEntry
from .api import (
    _COMMIT_INVALID,
    _COMMIT_UNKNOWN,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    LOG_APPEND_TIME,
    MAX_TIMESTAMP,
    ZERO_UUID,
    BatchCoordinator,
    BatchInfo,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    Errors,
    FileToDelete,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    TopicIdPartition,
    new_batch_info,
    new_commit_batch_response,
)
from .memory import wall_clock_ms
from .schema import SchemaVersionError

__all__ = [
    "OpFailed",
    "OpFailure",
    "SchemaVersionError",
    "SqliteBatchCoordinator",
    "SqliteOps",
    "init_writer",
    "load_migrations",
    "load_queries",
    "run_ops",
]

_INT64_MAX = 9_223_372_036_854_775_807
_SYNCHRONOUS = ("FULL", "NORMAL")


# -- SQL resources ---------------------------------------------------------------------------


def load_queries() -> dict[str, str]:
    """All named statements of ``sql/*.sql`` (sections start with ``-- name: <name>``)."""
    return schema.load_queries("sql")


def load_migrations() -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of ``migrations/V###__name.sql``, by version."""
    return schema.load_migrations("migrations")


def _split_statements(script: str) -> list[str]:
    """Split a script into complete statements (line-based, ``sqlite3.complete_statement``)."""
    stmts: list[str] = []
    buf: list[str] = []
    for line in script.splitlines(keepends=True):
        buf.append(line)
        text = "".join(buf)
        if sqlite3.complete_statement(text):
            stmts.append(text.strip())
            buf = []
    rest = "".join(buf).strip()
    if rest and not all(ln.strip().startswith("--") or not ln.strip() for ln in buf):
        raise ValueError(f"incomplete SQL statement at end of migration: {rest[:80]!r}")
    return stmts


def apply_migrations(conn: sqlite3.Connection, now_ms: int) -> int:
    """Bring the schema up to date in one transaction; return the resulting version.

    Raises ``SchemaVersionError`` if the database is newer than the code, or an applied
    migration's checksum differs from the shipped file.
    """
    migrations = load_migrations()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,"
            " applied_at_ms INTEGER NOT NULL) STRICT"
        )
        applied = dict(conn.execute("SELECT version, checksum FROM schema_version").fetchall())
        pending, version = schema.pending_migrations(migrations, applied)
        for number, name, checksum, script in pending:
            for stmt in _split_statements(script):
                conn.execute(stmt)
            conn.execute(
                "INSERT INTO schema_version (version, name, checksum, applied_at_ms)"
                " VALUES (?, ?, ?, ?)",
                (number, name, checksum, now_ms),
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return version


Q = SimpleNamespace(**load_queries())


# -- running on aiosqlite's thread ----------------------------------------------------------


async def _run_on_db_thread(db: aiosqlite.Connection, fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(sqlite3_connection, *args)`` on ``db``'s thread in ONE hop and return its result.

    aiosqlite (0.22.1) has no public API for this; its private ``Connection._execute(fn, *args)``
    queues ``fn`` to its thread and awaits the result. This helper is the only place that relies
    on it: replace it by a dedicated writer thread if aiosqlite changes.
    """

    def call() -> Any:
        return fn(db._conn, *args)

    return await db._execute(call)


class OpFailure:
    """An exception raised by one operation of a group (returned as a value, not raised): what
    :func:`run_ops` leaves in the result slot of an operation it rolled back to its SAVEPOINT.
    Shared with the replicated coordinator's apply (``kafka_rpc.coordinator.replicated``)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _NoCache:
    """Write-group hooks for operations that keep no writer-side cache."""

    @staticmethod
    def keeps(fn: Callable[..., Any]) -> bool:
        return True

    @staticmethod
    def flush(conn: sqlite3.Connection) -> None:
        pass

    @staticmethod
    def drop() -> None:
        pass


class OpFailed(Exception):
    """An operation raised in a group transaction run without SAVEPOINTs (see
    ``_run_write_group`` and :func:`run_ops`): the caller rolls the transaction back and runs
    the group again with one SAVEPOINT per operation."""


def _run_write_group(
    conn: sqlite3.Connection, ops: list[tuple[Callable[..., Any], tuple]], cache: Any = _NoCache
) -> list:
    """One write transaction for a group of operations, each isolated: a failing operation
    (``OpFailure`` in its result slot) changes nothing, the others commit.

    Isolation is optimistic. A group of several operations first runs without SAVEPOINTs: a
    SAVEPOINT makes SQLite copy every page an operation touches into a statement journal, about
    15% of a 100-batch commit_file (in process, groups of 16 alternating between the two ways on
    two databases, thread CPU time, median of 150 groups: 728/739 vs 611/645 us per commit).
    If an operation raises, that transaction is rolled back (nothing was acknowledged: callers
    are answered after COMMIT) and the group runs again with one SAVEPOINT per operation, so the
    failing one rolls back only itself. A single operation runs alone; its failure rolls back the
    transaction and is raised.

    ``cache`` is the writer-side cache of rows (see ``SqliteOps``): ``cache.flush(conn)`` writes its
    deferred changes, ``cache.keeps(fn)`` tells whether operation ``fn`` keeps it exact (else it
    is flushed before and dropped after ``fn``, outside ``fn``'s SAVEPOINT so a rollback of ``fn``
    cannot undo the flush), ``cache.drop()`` forgets it. It is flushed before ``COMMIT`` and
    dropped when the group transaction rolls back."""
    if len(ops) > 1:
        try:
            return _write_transaction(conn, ops, cache, optimistic=True)
        except OpFailed:
            pass  # rolled back: run again, each operation in its own SAVEPOINT
        return _write_transaction(conn, ops, cache, optimistic=False)
    return _write_transaction(conn, ops, cache, optimistic=True)


def _write_transaction(
    conn: sqlite3.Connection,
    ops: list[tuple[Callable[..., Any], tuple]],
    cache: Any,
    *,
    optimistic: bool,
) -> list:
    """``_run_write_group``'s transaction: without SAVEPOINTs when ``optimistic`` (an operation's
    exception rolls everything back and is raised, as ``OpFailed`` if there are several
    operations), else one SAVEPOINT per operation."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        results = run_ops(conn, ops, cache, optimistic=optimistic)
        cache.flush(conn)
        conn.execute("COMMIT")
    except BaseException:
        cache.drop()
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return results


def run_ops(
    conn: sqlite3.Connection,
    ops: list[tuple[Callable[..., Any], tuple]],
    cache: Any,
    *,
    optimistic: bool,
) -> list:
    """The operations of a write transaction that the caller opened and ends (its COMMIT or
    ROLLBACK; ``cache.flush`` before COMMIT, ``cache.drop`` on ROLLBACK). ``ops``: ``(fn,
    args)`` pairs, each run as ``fn(conn, *args)``; one result per operation, in order. Without
    SAVEPOINTs when ``optimistic`` (an operation's exception is raised, as ``OpFailed`` if there
    are several operations; the caller must roll back), else one SAVEPOINT per operation (a
    failing one leaves an ``OpFailure`` in its result slot and changes nothing)."""
    results: list[Any] = []
    for fn, args in ops:
        keeps = cache.keeps(fn)
        if not keeps:
            cache.flush(conn)
        try:
            if optimistic:
                if len(ops) == 1:
                    results.append(fn(conn, *args))
                    continue
                try:
                    results.append(fn(conn, *args))
                except Exception as exc:
                    raise OpFailed from exc
                continue
            conn.execute("SAVEPOINT op")
            try:
                res = fn(conn, *args)
            except Exception as exc:  # noqa: BLE001 - isolate this operation only
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
                results.append(OpFailure(exc))
            else:
                conn.execute("RELEASE op")
                results.append(res)
        finally:
            if not keeps:
                cache.drop()
    return results


def _run_read_group(conn: sqlite3.Connection, ops: list[tuple[Callable[..., Any], tuple]]) -> list:
    """One read transaction (one WAL snapshot) for a group of read operations."""
    results: list[Any] = []
    conn.execute("BEGIN")
    try:
        for fn, args in ops:
            try:
                results.append(fn(conn, *args))
            except Exception as exc:  # noqa: BLE001 - reported to its own caller
                results.append(OpFailure(exc))
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    return results


class _GroupRunner:
    """Queues operations for one connection and runs every waiting one (up to ``cap``) in a single
    hop to its thread through ``run_group``. Futures are resolved after ``run_group`` returned
    (for the writer: after COMMIT, so acknowledgements are durable)."""

    def __init__(self, db: aiosqlite.Connection, run_group: Callable[..., list], cap: int) -> None:
        self._db = db
        self._run_group = run_group
        self._cap = cap
        self._pending: collections.deque[tuple[Callable[..., Any], tuple, asyncio.Future]] = (
            collections.deque()
        )
        self._task: asyncio.Task | None = None
        self.groups = 0  # statistics: groups run
        self.ops = 0  # statistics: operations run

    def submit(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.append((fn, args, fut))
        if self._task is None:
            self._task = loop.create_task(self._drain())
        return fut

    async def _drain(self) -> None:
        try:
            while self._pending:
                n = min(len(self._pending), self._cap)
                group = [self._pending.popleft() for _ in range(n)]
                try:
                    results = await _run_on_db_thread(
                        self._db, self._run_group, [(fn, args) for fn, args, _ in group]
                    )
                except Exception as exc:  # noqa: BLE001 - the group failed: tell every caller
                    results = [OpFailure(exc)] * n
                except BaseException as exc:  # cancelled: fail everything queued, then stop
                    failure = RuntimeError(f"coordinator stopped: {exc!r}")
                    for _, _, fut in [*group, *self._pending]:
                        if not fut.done():
                            fut.set_exception(failure)
                    self._pending.clear()
                    raise
                self.groups += 1
                self.ops += n
                for (_, _, fut), res in zip(group, results):
                    if fut.done():
                        continue
                    if type(res) is OpFailure:
                        fut.set_exception(res.exc)
                    else:
                        fut.set_result(res)
        finally:
            self._task = None

    async def wait_idle(self) -> None:
        while self._task is not None:
            await asyncio.shield(self._task)


# -- the operations (plain functions run on the database thread) -----------------------------


_MISSING = object()


class SqliteOps:
    """The Batch Coordinator's operations as synchronous functions over a ``sqlite3.Connection``
    (``fn(conn, *args)``; the transaction is the caller's: the group runner's here, the Raft
    apply's in ``kafka_rpc.coordinator.replicated``). Same rules as ``InMemoryBatchCoordinator``
    via ``_rules`` (Inkless's control-plane semantics, Kafka's where they differ).

    ``time_ms()``: the clock of every decision (ms since the epoch; the replicated apply fixes
    it to the recorded time, so every replica decides alike); ``producer_id_expiration_ms`` as
    Kafka's. The instance holds a writer-side cache of ``logs`` rows: the writing connection
    must be the database's only writer, and the caller must :meth:`flush` before ``COMMIT`` and
    :meth:`drop` on ``ROLLBACK`` (:func:`run_ops`' ``cache`` protocol: :meth:`keeps`)."""

    def __init__(self, time_ms: Callable[[], int], producer_id_expiration_ms: int) -> None:
        self.time_ms = time_ms
        self.expiration_ms = producer_id_expiration_ms
        # Writer-side cache of ``logs`` rows: (topic id as int, partition) ->
        # [log_id, log_start_offset, high_watermark, byte_size]. Valid because the writer
        # connection is the only writer of the database and every change to a cached row is made
        # through it: commit_file keeps the entries current; any other operation that changes
        # ``logs`` (deleteRecords, retention, deleteTopics) and any rollback drop the whole cache.
        self.logs: dict[tuple[int, int], list[int]] = {}
        # Entries of ``logs`` whose high watermark / byte size changed since the last flush:
        # written with ONE ``UPDATE`` per partition per group, just before COMMIT (or before an
        # operation that reads ``logs`` from the database).
        self.dirty: dict[int, list[int]] = {}
        # The next batch_id to assign (batch_id_seq.next_batch_id), None = not loaded; written
        # back by flush() when it moved (once per group), dropped with the logs rows.
        self.next_batch_id: int | None = None
        self.stored_batch_id: int | None = None

    def keeps(self, fn: Callable[..., Any]) -> bool:
        """Whether write operation ``fn`` keeps the cache exact (it changes no ``logs`` row
        except through the cache)."""
        return getattr(fn, "__func__", fn) in _CACHE_AWARE

    def flush(self, conn: sqlite3.Connection) -> None:
        if self.dirty:
            conn.executemany(
                Q.update_log_head, [(st[2], st[3], st[0]) for st in self.dirty.values()]
            )
            self.dirty.clear()
        if self.next_batch_id != self.stored_batch_id:
            conn.execute(Q.update_next_batch_id, (self.next_batch_id,))
            self.stored_batch_id = self.next_batch_id

    def drop(self) -> None:
        self.logs.clear()
        self.dirty.clear()
        self.next_batch_id = self.stored_batch_id = None

    def run_write_group(
        self, conn: sqlite3.Connection, ops: list[tuple[Callable[..., Any], tuple]]
    ) -> list:
        return _run_write_group(conn, ops, self)

    # writes ------------------------------------------------------------------------------

    def create_topics(
        self, conn: sqlite3.Connection, requests: Sequence[CreateTopicAndPartitionsRequest]
    ) -> list[int]:
        out: list[int] = []
        for r in requests:
            if r.topic_id == ZERO_UUID or r.num_partitions < 0 or not r.topic_name:
                out.append(Errors.INVALID_REQUEST)
                continue
            tid = r.topic_id.bytes
            conn.executemany(
                Q.insert_log, [(tid, p, r.topic_name) for p in range(r.num_partitions)]
            )
            out.append(Errors.NONE)
        return out

    def commit_file(
        self,
        conn: sqlite3.Connection,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        n = len(requests)
        if n == 0:
            return []
        if (
            not _rules.is_valid_object(object_key, file_size)
            or conn.execute(Q.file_exists, (object_key,)).fetchone() is not None
        ):
            return [CommitBatchResponse.invalid_request()] * n
        now = self.time_ms()
        file_id = conn.execute(
            Q.insert_file, (object_key, uploader_broker_id, now, file_size)
        ).lastrowid
        if self.next_batch_id is None:
            self.next_batch_id = self.stored_batch_id = conn.execute(
                Q.select_next_batch_id
            ).fetchone()[0]
        first_batch_id = self.next_batch_id
        expiration_ms = self.expiration_ms
        valid = _rules.is_valid_commit_request
        cache = self.logs
        select_log = Q.select_log
        response = new_commit_batch_response
        none = Errors.NONE
        # Log rows changed by this call: id(cache entry) -> (entry, hw, byte_size at start).
        touched: dict[int, tuple] = {}
        pstates: dict[tuple[int, int], list] = {}  # (log_id, pid) -> [entries, stored row ids]
        batch_rows: list[tuple] = []
        append_row = batch_rows.append
        out: list[CommitBatchResponse] = []
        append_out = out.append
        last_tp: Any = None
        st: Any = None
        try:
            for r in requests:
                tp = r.topic_id_partition
                if tp is not last_tp:
                    last_tp = tp
                    tid = tp.topic_id
                    key = (tid.int, tp.partition)
                    st = cache.get(key)
                    if st is None and tid.int != 0:
                        row = conn.execute(select_log, (tid.bytes, tp.partition)).fetchone()
                        if row is not None:
                            st = cache[key] = list(row)
                if st is None:
                    append_out(_COMMIT_UNKNOWN)
                    continue
                if not valid(r, file_size):
                    append_out(_COMMIT_INVALID)
                    continue
                if id(st) not in touched:
                    touched[id(st)] = (st, st[2], st[3])
                entries = None
                if r.producer_id >= 0 and r.producer_epoch >= 0:
                    pkey = (st[0], r.producer_id)
                    ps = pstates.get(pkey)
                    if ps is None:
                        stored = [
                            ProducerEntry(e, bs, ls, ao, ts, ca, rid)
                            for rid, e, bs, ls, ao, ts, ca in conn.execute(
                                Q.select_producer_state, pkey
                            )
                        ]
                        ps = pstates[pkey] = [stored, [e.row_id for e in stored]]
                    entries = ps[0]
                    if _rules.producer_state_expired(entries, now, expiration_ms):
                        entries = ps[0] = []
                    err, dup = _rules.check_sequence(entries, r)
                    if err != none:
                        append_out(CommitBatchResponse.of_error(err))
                        continue
                    if dup is not None:
                        append_out(
                            CommitBatchResponse.duplicate(
                                dup.assigned_offset, dup.batch_timestamp, st[1]
                            )
                        )
                        continue
                assigned = st[2]
                size = r.size
                last = assigned + r.last_offset - r.base_offset
                st[2] = last + 1
                st[3] += size
                append_row(
                    (
                        first_batch_id + len(batch_rows),
                        st[0],
                        assigned,
                        last,
                        file_id,
                        r.byte_offset,
                        size,
                        r.magic,
                        r.timestamp_type,
                        now,
                        r.batch_max_timestamp,
                        r.producer_id,
                        r.producer_epoch,
                        r.base_sequence,
                        r.last_sequence,
                    )
                )
                if entries is not None:
                    ts = now if r.timestamp_type == LOG_APPEND_TIME else r.batch_max_timestamp
                    _rules.remember(
                        entries,
                        ProducerEntry(
                            r.producer_epoch, r.base_sequence, r.last_sequence, assigned, ts, now
                        ),
                    )
                append_out(response(none, assigned, now, st[1], False))
            if batch_rows:
                conn.executemany(Q.insert_batch, batch_rows)
                conn.execute(Q.set_file_batch_count, (len(batch_rows), file_id))
                self.next_batch_id = first_batch_id + len(batch_rows)
            else:
                conn.execute(Q.mark_file_deleting, (now, file_id))
            if pstates:
                stale: list[tuple[int]] = []
                fresh: list[tuple] = []
                for (log_id, pid), (entries, stored_ids) in pstates.items():
                    kept = {e.row_id for e in entries}
                    stale.extend((rid,) for rid in stored_ids if rid not in kept)
                    fresh.extend(
                        (
                            log_id,
                            pid,
                            e.producer_epoch,
                            e.base_sequence,
                            e.last_sequence,
                            e.assigned_offset,
                            e.batch_timestamp,
                            e.committed_at_ms,
                        )
                        for e in entries
                        if e.row_id is None
                    )
                if stale:
                    conn.executemany(Q.delete_producer_state_row, stale)
                if fresh:
                    conn.executemany(Q.insert_producer_state, fresh)
        except BaseException:
            for st, hw0, size0 in touched.values():  # undo this call's cache changes
                st[2] = hw0
                st[3] = size0
            self.next_batch_id = first_batch_id
            raise
        # The logs rows themselves are written by flush(), once per partition per group.
        dirty = self.dirty
        for st_id, (st, hw0, _) in touched.items():
            if st[2] != hw0:
                dirty[st_id] = st
        return out

    def _delete_below(
        self, conn: sqlite3.Connection, log_id: int, lso: int, target: int, now: int
    ) -> tuple[int, int, int]:
        """Move the LSO to max(target, lso) and drop the batches entirely below it; mark objects
        left without batches. Returns (new LSO, batches deleted, bytes deleted)."""
        new_lso = max(target, lso)
        if new_lso == lso:
            return lso, 0, 0
        gone = conn.execute(Q.delete_batches_below, (log_id, new_lso)).fetchall()
        freed = sum(size for _, size in gone)
        conn.execute(Q.update_log_tail, (new_lso, freed, log_id))
        if gone:
            _release_files(conn, collections.Counter(fid for fid, _ in gone), now)
        return new_lso, len(gone), freed

    def _log(self, conn: sqlite3.Connection, tp: Any) -> tuple | None:
        if tp.topic_id == ZERO_UUID:
            return None
        return conn.execute(Q.select_log, (tp.topic_id.bytes, tp.partition)).fetchone()

    def delete_records(
        self, conn: sqlite3.Connection, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        now = self.time_ms()
        out: list[DeleteRecordsResponse] = []
        for r in requests:
            row = self._log(conn, r.topic_id_partition)
            if row is None:
                out.append(DeleteRecordsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1))
                continue
            log_id, lso, hw, _ = row
            target = hw if r.offset == -1 else r.offset
            if target < 0 or target > hw:
                out.append(DeleteRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, -1))
                continue
            new_lso, _, _ = self._delete_below(conn, log_id, lso, target, now)
            out.append(DeleteRecordsResponse(Errors.NONE, new_lso))
        return out

    def enforce_retention(
        self,
        conn: sqlite3.Connection,
        requests: Sequence[EnforceRetentionRequest],
        max_batches_per_request: int,
    ) -> list[EnforceRetentionResponse]:
        now = self.time_ms()
        out: list[EnforceRetentionResponse] = []
        for r in requests:
            row = self._log(conn, r.topic_id_partition)
            if row is None:
                out.append(EnforceRetentionResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1))
                continue
            log_id, lso, hw, byte_size = row
            rb, rm = r.retention_bytes, r.retention_ms
            if rb < 0 and rm < 0:
                out.append(EnforceRetentionResponse(Errors.NONE, 0, 0, lso))
                continue
            remaining = byte_size
            boundary = hw
            # The cursor stops at the first batch to keep: cost O(deleted + 1).
            for count, (base, size, ts) in enumerate(conn.execute(Q.retention_scan, (log_id,))):
                size_ok = rb < 0 or remaining <= rb
                time_ok = rm < 0 or ts >= now - rm
                if (size_ok and time_ok) or (
                    max_batches_per_request > 0 and count >= max_batches_per_request
                ):
                    boundary = base
                    break
                remaining -= size
            new_lso, n, freed = self._delete_below(conn, log_id, lso, boundary, now)
            out.append(EnforceRetentionResponse(Errors.NONE, n, freed, new_lso))
        return out

    def delete_topics(self, conn: sqlite3.Connection, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        now = self.time_ms()
        files: collections.Counter[int] = collections.Counter()  # file_id -> batches deleted
        out: list[int] = []
        for tid in topic_ids:
            logs = conn.execute(Q.select_logs_of_topic, (tid.bytes,)).fetchall()
            for (log_id,) in logs:
                for fid, n in conn.execute(Q.count_batches_of_log_by_file, (log_id,)):
                    files[fid] += n
                conn.execute(Q.delete_batches_of_log, (log_id,))
                conn.execute(Q.delete_producer_state_of_log, (log_id,))
                conn.execute(Q.delete_log, (log_id,))
            out.append(Errors.NONE if logs else Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if files:
            _release_files(conn, files, now)
        return out

    def delete_files(self, conn: sqlite3.Connection, object_keys: Sequence[str]) -> list[int]:
        out: list[int] = []
        for key in object_keys:
            if conn.execute(Q.delete_deleting_file, (key,)).rowcount > 0:
                out.append(Errors.NONE)
            elif conn.execute(Q.file_exists, (key,)).fetchone() is not None:
                out.append(Errors.INVALID_REQUEST)
            else:
                out.append(Errors.RESOURCE_NOT_FOUND)
        return out

    @staticmethod
    def is_safe_to_delete_file(conn: sqlite3.Connection, object_key: str) -> bool:
        return not object_key or conn.execute(Q.file_exists, (object_key,)).fetchone() is None

    # reads -------------------------------------------------------------------------------

    @staticmethod
    def find_batches(
        conn: sqlite3.Connection, requests: Sequence[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        out: list[FindBatchResponse] = []
        request_bytes = 0
        q_log, q_batches = Q.select_log_bounds, Q.find_batches
        for r in requests:
            tp = r.topic_id_partition
            row = None
            if tp.topic_id != ZERO_UUID:
                row = conn.execute(q_log, (tp.topic_id.bytes, tp.partition)).fetchone()
            if row is None:
                out.append(FindBatchResponse.unknown_topic_or_partition())
                continue
            log_id, lso, hw = row
            offset = r.offset
            if offset < lso or offset > hw:
                out.append(FindBatchResponse.offset_out_of_range(lso, hw))
                continue
            if offset == hw:
                out.append(FindBatchResponse.success((), lso, hw))
                continue
            found: list[BatchInfo] = []
            new_info = new_batch_info
            partition_bytes = 0
            max_partition = r.max_partition_fetch_bytes
            cur = conn.execute(q_batches, (log_id, offset))
            for b in cur:
                if request_bytes and (
                    partition_bytes >= max_partition or request_bytes >= fetch_max_bytes
                ):
                    break
                size = b[3]
                found.append(
                    new_info(
                        b[0],
                        b[1],
                        b[2],
                        size,
                        b[4],
                        b[5],
                        b[6],
                        b[7],
                        b[8],
                        tp,
                        b[9],
                        b[10],
                        b[11],
                        b[12],
                        b[13],
                    )
                )
                partition_bytes += size
                request_bytes += size
            cur.close()
            out.append(FindBatchResponse.success(tuple(found), lso, hw))
        return out

    @staticmethod
    def list_offsets(
        conn: sqlite3.Connection, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        out: list[ListOffsetsResponse] = []
        for r in requests:
            tp, ts = r.topic_id_partition, r.timestamp
            row = None
            if tp.topic_id != ZERO_UUID:
                row = conn.execute(
                    Q.select_log_bounds, (tp.topic_id.bytes, tp.partition)
                ).fetchone()
            if row is None:
                out.append(ListOffsetsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, tp, -1, -1))
                continue
            log_id, lso, hw = row
            if ts == LATEST_TIMESTAMP:
                out.append(ListOffsetsResponse(Errors.NONE, tp, -1, hw))
            elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                out.append(ListOffsetsResponse(Errors.NONE, tp, -1, lso))
            elif ts == LATEST_TIERED_TIMESTAMP:
                out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
            elif ts == MAX_TIMESTAMP:
                hit = conn.execute(Q.max_timestamp, (log_id,)).fetchone()
                if hit is None:
                    out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
                else:
                    out.append(ListOffsetsResponse(Errors.NONE, tp, hit[0], hit[1]))
            elif ts < 0:
                out.append(ListOffsetsResponse(Errors.UNKNOWN_SERVER_ERROR, tp, -1, -1))
            else:
                hit = conn.execute(Q.offset_for_timestamp, (log_id, ts)).fetchone()
                if hit is None:
                    out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
                else:
                    out.append(ListOffsetsResponse(Errors.NONE, tp, hit[0], max(hit[1], lso)))
        return out

    @staticmethod
    def list_partitions(conn: sqlite3.Connection) -> list[TopicIdPartition]:
        return [
            TopicIdPartition(uuid.UUID(bytes=t), p) for t, p in conn.execute(Q.list_partitions)
        ]

    @staticmethod
    def files_to_delete(
        conn: sqlite3.Connection,
        marked_before_ms: int | None,
        limit: int,
        after_object_key: str | None,
    ) -> list[FileToDelete]:
        rows = conn.execute(
            Q.files_to_delete,
            (
                after_object_key if after_object_key is not None else "",
                marked_before_ms if marked_before_ms is not None else _INT64_MAX,
                limit if limit > 0 else -1,
            ),
        )
        return [FileToDelete(k, at, size) for k, at, size in rows]


def _release_files(conn: sqlite3.Connection, deleted: collections.Counter[int], now: int) -> None:
    """Take ``deleted[file_id]`` deleted batches off each file's ``batch_count``; a file left with
    none is marked for deletion at ``now`` (ms). Raises ``sqlite3.IntegrityError`` (CHECK) if a
    count would go negative, i.e. if the counts were wrong."""
    conn.executemany(Q.release_file_batches, [(n, now, fid) for fid, n in deleted.items()])


_CACHE_AWARE = frozenset(
    {SqliteOps.commit_file, SqliteOps.is_safe_to_delete_file, SqliteOps.delete_files}
)
"""Write operations that keep ``SqliteOps.logs`` exact; any other one is run with the cache flushed
before and dropped after it."""


# -- the coordinator -------------------------------------------------------------------------


def init_writer(conn: sqlite3.Connection, synchronous: str, now_ms: int) -> int:
    """Set up the database's writing connection ``conn`` (WAL, ``synchronous`` = ``OFF`` /
    ``NORMAL`` / ``FULL``, foreign keys, a 64 MiB page cache) and bring the schema up to date
    (:func:`apply_migrations` at ``now_ms``); returns the schema version. Raises
    ``RuntimeError`` if WAL cannot be enabled, ``SchemaVersionError`` as the migrations do."""
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise RuntimeError(f"could not enable WAL (journal_mode={mode})")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=10000")
    conn.execute("PRAGMA temp_store=MEMORY")
    # 64 MiB page cache (default 2 MiB): keeps the hot index pages of batches in memory.
    conn.execute("PRAGMA cache_size=-65536")
    return apply_migrations(conn, now_ms)


def _init_reader(conn: sqlite3.Connection, busy_timeout_ms: int = 10000) -> None:
    conn.execute("PRAGMA query_only=ON")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    conn.execute("PRAGMA cache_size=-65536")


class _InlineReader:
    """A read-only stdlib ``sqlite3`` connection used only on the event loop's thread for small
    reads (see the module docstring). ``run`` returns the operation's result, raises its
    exception, or returns ``_BUSY`` when SQLite could not start the read at once."""

    def __init__(self, path: str) -> None:
        # check_same_thread=False: opened in start(), used by whichever thread runs the loop,
        # never by two threads at once (every use is synchronous on the loop).
        self.conn = sqlite3.connect(
            path, isolation_level=None, cached_statements=256, check_same_thread=False
        )
        _init_reader(self.conn, busy_timeout_ms=0)

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        res = _run_read_group(self.conn, [(fn, args)])[0]
        if type(res) is OpFailure:
            exc = res.exc
            # SQLITE_BUSY and its extended codes (BUSY_RECOVERY, BUSY_SNAPSHOT...)
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if isinstance(exc, sqlite3.OperationalError) and code == sqlite3.SQLITE_BUSY:
                return _BUSY
            raise exc
        return res

    def close(self) -> None:
        self.conn.close()


_BUSY = object()


class SqliteBatchCoordinator(BatchCoordinator):
    """``BatchCoordinator`` on one SQLite file (see the module docstring for the design).

    ``path``: database file (created if missing). ``synchronous``: ``"FULL"`` (default; every
    commit fsynced) or ``"NORMAL"`` (WAL: durable across process crashes, not power loss).
    ``max_group_size``: most operations per group transaction. ``time_ms``: clock in ms.
    ``producer_id_expiration_ms``: Kafka ``producer.id.expiration.ms``.
    ``inline_read_max_partitions``: reads of at most this many partitions run on the event loop's
    thread (0 = every read goes to the reader thread).
    """

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        max_group_size: int = 64,
        time_ms: Callable[[], int] = wall_clock_ms,
        producer_id_expiration_ms: int = _rules.DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        inline_read_max_partitions: int = 4,
    ) -> None:
        synchronous = synchronous.upper()
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, not {synchronous!r}")
        if max_group_size < 1:
            raise ValueError("max_group_size must be >= 1")
        self.path = str(path)
        self._synchronous = synchronous
        self._cap = max_group_size
        self._time_ms = time_ms
        self._ops = SqliteOps(time_ms, producer_id_expiration_ms)
        self._writer_db: aiosqlite.Connection | None = None
        self._reader_db: aiosqlite.Connection | None = None
        self._writer: _GroupRunner | None = None
        self._reader: _GroupRunner | None = None
        self._inline: _InlineReader | None = None
        self._inline_max = inline_read_max_partitions
        self.inline_reads = 0  # statistics: reads answered on the loop's thread
        self.schema_version = 0

    async def start(self) -> None:
        if self._writer is not None:
            return
        writer = await aiosqlite.connect(self.path, isolation_level=None, cached_statements=256)
        try:
            self.schema_version = await _run_on_db_thread(
                writer, init_writer, self._synchronous, self._time_ms()
            )
            reader = await aiosqlite.connect(self.path, isolation_level=None, cached_statements=256)
        except BaseException:
            await writer.close()
            raise
        await _run_on_db_thread(reader, _init_reader)
        if self._inline_max > 0:
            self._inline = _InlineReader(self.path)
        self._writer_db, self._reader_db = writer, reader
        self._writer = _GroupRunner(writer, self._ops.run_write_group, self._cap)
        self._reader = _GroupRunner(reader, _run_read_group, self._cap)

    async def close(self) -> None:
        if self._writer is None:
            return
        writer, reader = self._writer, self._reader
        await writer.wait_idle()
        if reader is not None:
            await reader.wait_idle()
        self._writer = self._reader = None
        if self._inline is not None:
            self._inline.close()
            self._inline = None
        assert self._writer_db is not None and self._reader_db is not None
        await self._reader_db.close()
        await self._writer_db.close()
        self._writer_db = self._reader_db = None

    @property
    def group_stats(self) -> tuple[int, int]:
        """(write groups run, write operations run) since start: ops/groups = mean group size."""
        w = self._require_writer()
        return w.groups, w.ops

    def _require_writer(self) -> _GroupRunner:
        if self._writer is None:
            raise RuntimeError("coordinator not started (await start() first)")
        return self._writer

    def _require_reader(self) -> _GroupRunner:
        if self._reader is None:
            raise RuntimeError("coordinator not started (await start() first)")
        return self._reader

    async def _read(self, partitions: int, fn: Callable[..., Any], *args: Any) -> Any:
        """Run read ``fn`` on the loop's thread when it covers at most
        ``inline_read_max_partitions`` partitions and SQLite can start it at once (no
        suspension); otherwise on the reader thread, grouped with other waiting reads."""
        reader = self._require_reader()
        if self._inline is not None and partitions <= self._inline_max:
            res = self._inline.run(fn, *args)
            if res is not _BUSY:
                self.inline_reads += 1
                return res
        return await reader.submit(fn, *args)

    async def create_topic_and_partitions(
        self, requests: Sequence[CreateTopicAndPartitionsRequest]
    ) -> list[int]:
        return await self._require_writer().submit(self._ops.create_topics, list(requests))

    async def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        if not requests:
            return []
        return await self._require_writer().submit(
            self._ops.commit_file, object_key, uploader_broker_id, file_size, list(requests)
        )

    async def find_batches(
        self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        return await self._read(len(requests), self._ops.find_batches, list(requests),
                                fetch_max_bytes)  # fmt: skip

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        return await self._read(len(requests), self._ops.list_offsets, list(requests))

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        return await self._require_writer().submit(self._ops.delete_records, list(requests))

    async def list_partitions(self) -> list[TopicIdPartition]:
        return await self._require_reader().submit(self._ops.list_partitions)

    async def delete_topics(self, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        return await self._require_writer().submit(self._ops.delete_topics, list(topic_ids))

    async def get_files_to_delete(
        self,
        marked_before_ms: int | None = None,
        limit: int = 0,
        after_object_key: str | None = None,
    ) -> list[FileToDelete]:
        return await self._require_reader().submit(
            self._ops.files_to_delete, marked_before_ms, limit, after_object_key
        )

    async def delete_files(self, object_keys: Sequence[str]) -> list[int]:
        return await self._require_writer().submit(self._ops.delete_files, list(object_keys))

    async def is_safe_to_delete_file(self, object_key: str) -> bool:
        # Through the writer queue: ordered after every commit submitted before it.
        return await self._require_writer().submit(self._ops.is_safe_to_delete_file, object_key)

    async def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], max_batches_per_request: int = 0
    ) -> list[EnforceRetentionResponse]:
        return await self._require_writer().submit(
            self._ops.enforce_retention, list(requests), max_batches_per_request
        )
