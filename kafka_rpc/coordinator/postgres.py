"""PostgreSQL Batch Coordinator, through asyncpg (a connection pool for writes, a free list of
connections for reads).

The shared-database deployment (KIP-1164 names "a stand-alone database" among the
implementations; Inkless runs its control plane on PostgreSQL): any number of ``kafka-rpc serve``
processes point at one database and each is a writable coordinator.

Design (docs/batch-coordinator.md; Inkless's PostgreSQL control plane):

* **One transaction per call.** Every mutating call runs in one ``READ COMMITTED`` transaction
  on a pooled connection; a call is acknowledged only after its ``COMMIT`` returned (PostgreSQL
  flushes the WAL before answering ``COMMIT`` with the default ``synchronous_commit=on``, and
  groups the flushes of concurrent commits itself).
* **Row locks in a fixed order.** ``commit_file`` locks the ``logs`` rows of its partitions with
  one ``SELECT ... FOR UPDATE`` ordered by ``(topic_id, partition)`` (Inkless
  ``commit_file_v1``), reads the high watermarks and producer state under those locks, decides
  every entry in Python with the same ``_rules`` as the other implementations, and writes all rows
  in one statement (``write_commit``). Two commits touching a common partition serialise on its
  row (no lost update: the second reads the first one's committed HW); disjoint commits run in
  parallel. Deletions (``delete_records``, ``enforce_retention``, ``delete_topics``) take the same
  ``logs`` locks in the same order first and then the ``files`` rows they change in ``file_id``
  order, so no two writers can wait on each other in a cycle. A deadlock or serialization failure
  reported anyway (40P01 / 40001; nothing was committed) is retried up to 5 times.
* **Reads take no locks.** ``find_batches`` calls made in one event-loop turn (concurrent
  requests of any connections) are answered together by ONE ``find_many`` statement (at most
  ``_FIND_GROUP`` partitions; a call is never split): one round trip and one snapshot, taken after
  every one of those calls was made, so each sees every commit acknowledged before it and nothing
  uncommitted. A call needing more than the first page (``_FIND_PAGE`` batches) of a partition is
  re-read page by page in one ``REPEATABLE READ READ ONLY`` transaction, as is a multi-partition
  ``list_offsets``; a one-partition ``list_offsets`` is one statement. So one response is one
  consistent snapshot (Inkless: a STABLE function). Reads have their own connections
  (``_Readers``, a plain free list), writes use an ``asyncpg.Pool``.
* **batch_id** comes from the sequence ``batch_id_seq``, taken in request order under the row
  locks: it increases with commit order per partition and is never reused (a rolled-back commit
  leaves a gap).
* **Faults.** A lost connection, a server shutdown or an unreachable server raises
  ``CoordinatorUnavailableError`` (an ``OSError``: the wire handlers answer the call's entries
  KAFKA_STORAGE_ERROR, which Kafka clients retry). A write is never retried after its connection
  broke: if the break came during ``COMMIT`` the outcome is unknown, so the caller gets the
  retriable error, never a false success; a retried idempotent batch is then answered as a
  duplicate with its original offsets if the first attempt did commit (the producer state is in
  the same transaction as the batches). Reads are retried once on a fresh connection. The pool
  replaces broken connections, so the coordinator keeps serving once the server is back.
* SQL lives in ``pg/queries.sql`` (named sections); the schema in numbered
  ``pg/migrations/V###__*.sql``, applied at start under an advisory lock (several servers may
  start at once) and recorded in ``schema_version`` with a checksum; a database newer than the
  code, or an edited migration, is refused (``SchemaVersionError``).

A caller cancelled while its call runs: the transaction is rolled back if its ``COMMIT`` was
not sent yet; otherwise the outcome is unknown, as after a lost connection.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import SimpleNamespace
from typing import Any

import asyncpg

from . import _rules, schema
from ._rules import ProducerEntry
from .api import (
    _COMMIT_INVALID,
    _COMMIT_UNKNOWN,
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    INT32_MAX,
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
    "CoordinatorUnavailableError",
    "PostgresBatchCoordinator",
    "SchemaVersionError",
    "apply_migrations",
    "load_migrations",
    "load_queries",
]

logger = logging.getLogger(__name__)

_INT64_MAX = 9_223_372_036_854_775_807
_MIGRATION_LOCK = 0x6B61666B61727063  # pg_advisory_xact_lock key ("kafkarpc")
_CONFLICT_RETRIES = 5
_FIND_PAGE = 64  # batches fetched per partition and round trip by find_batches
_FIND_GROUP = 64  # partitions per find_many statement (concurrent find_batches calls together)


class CoordinatorUnavailableError(OSError):
    """The database could not be reached or the connection broke during the call.

    An ``OSError`` so that the wire handlers answer KAFKA_STORAGE_ERROR (56, retriable). For a
    write the outcome may be unknown (the break may have come during ``COMMIT``): the caller must
    treat it as "maybe applied", which the idempotent-producer rules make safe to retry."""


# -- SQL resources ---------------------------------------------------------------------------


def load_queries() -> dict[str, str]:
    """All named statements of ``pg/queries.sql`` (sections start with ``-- name: <name>``)."""
    return schema.load_queries("pg", "queries.sql")


def load_migrations() -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of ``pg/migrations/V###__name.sql``, by version."""
    return schema.load_migrations("pg", "migrations")


async def apply_migrations(conn: asyncpg.Connection, now_ms: int) -> int:
    """Bring the schema up to date in one transaction (under an advisory lock, so concurrent
    starters apply each migration once); return the resulting version.

    Raises ``SchemaVersionError`` if the database is newer than the code, or an applied
    migration's checksum differs from the shipped file."""
    migrations = load_migrations()
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, checksum TEXT NOT NULL,"
            " applied_at_ms BIGINT NOT NULL)"
        )
        applied = {
            r[0]: r[1] for r in await conn.fetch("SELECT version, checksum FROM schema_version")
        }
        pending, version = schema.pending_migrations(migrations, applied)
        for number, name, checksum, script in pending:
            await conn.execute(script)  # simple query protocol: the whole script
            await conn.execute(
                "INSERT INTO schema_version (version, name, checksum, applied_at_ms)"
                " VALUES ($1, $2, $3, $4)",
                number,
                name,
                checksum,
                now_ms,
            )
    return version


Q = SimpleNamespace(**load_queries())

_CONNECTION_ERRORS = (
    OSError,  # refused, reset, unreachable
    TimeoutError,
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08, ConnectionDoesNotExistError
    asyncpg.exceptions.OperatorInterventionError,  # 57: admin/crash shutdown, cannot connect now
)
_CONFLICT_ERRORS = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)


def _is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the database was unreachable or the connection broke."""
    if isinstance(exc, CoordinatorUnavailableError):
        return False
    if isinstance(exc, _CONNECTION_ERRORS):
        return True
    # asyncpg reports a use of a connection it already saw die as an InterfaceError
    return isinstance(exc, asyncpg.InterfaceError) and "closed" in str(exc)


class _Readers:
    """The read connections: a free list, without asyncpg's pool machinery.

    A one-partition ``find_batches`` is one statement, and ``asyncpg.Pool`` around it (acquire,
    release, timers, and a task per call: the server steps handlers outside a task and asyncpg's
    timers need one) cost more client CPU than the statement itself (measured in the README's
    PostgreSQL section). A query needs no task; only opening a connection runs in one (asyncpg's
    connect timeout). At most ``size`` connections are open;
    callers beyond wait in FIFO order. A connection that broke, or was left inside a transaction,
    is dropped at release and its slot reopened on demand, so reads reconnect by themselves."""

    def __init__(
        self, connect: Callable[[], Coroutine[Any, Any, asyncpg.Connection]], size: int
    ) -> None:
        self._connect = connect
        self._size = size
        self._idle: list[asyncpg.Connection] = []
        self._open = 0  # connections open or being opened
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._closed = False

    async def acquire(self) -> asyncpg.Connection:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed:
                raise RuntimeError("coordinator closed")
            while self._idle:
                conn = self._idle.pop()
                if not conn.is_closed():
                    return conn
                self._open -= 1
            if self._open < self._size:
                self._open += 1
                try:
                    return await loop.create_task(self._connect())
                except BaseException:
                    self._open -= 1
                    self._wake()
                    raise
            fut = loop.create_future()
            self._waiters.append(fut)
            try:
                conn = await fut
            except BaseException:
                if fut.done() and not fut.cancelled():
                    handed = fut.result()  # handed over just as we were cancelled
                    if handed is not None:
                        self.release(handed)
                    else:
                        self._wake()
                raise
            if conn is not None:
                return conn
            # None: a slot was freed; go round and open a connection

    def release(self, conn: asyncpg.Connection) -> None:
        if self._closed or conn.is_closed() or conn.is_in_transaction():
            if not conn.is_closed():
                conn.terminate()
            self._open -= 1
            self._wake()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._idle.append(conn)

    def _wake(self) -> None:
        """Tell the first waiter a slot is free (it opens a connection)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self, timeout: float) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        self._open -= len(idle)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(RuntimeError("coordinator closed"))
        self._waiters.clear()
        for conn in idle:
            try:
                await asyncio.wait_for(conn.close(), timeout)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                conn.terminate()


class PostgresBatchCoordinator(BatchCoordinator):
    """``BatchCoordinator`` on a PostgreSQL database shared by any number of processes.

    ``dsn``: a libpq URL (``postgresql://user[:password]@host:port/dbname[?sslmode=...]``), given
    to asyncpg. ``pool_min_size`` / ``pool_max_size``: connections kept / at most (concurrent
    calls beyond ``pool_max_size`` wait for a connection). ``time_ms``: clock in ms.
    ``producer_id_expiration_ms``: Kafka ``producer.id.expiration.ms``. ``connect_timeout_s``:
    seconds to wait for a new connection before the call fails with
    ``CoordinatorUnavailableError``. ``read_pool_size``: connections for ``find_batches``,
    ``list_offsets``, ``list_partitions``, ``get_files_to_delete`` and
    ``is_safe_to_delete_file`` (opened on demand), besides the pool of the writes.
    """

    def __init__(
        self,
        dsn: str,
        *,
        pool_min_size: int = 1,
        pool_max_size: int = 16,
        time_ms: Callable[[], int] = wall_clock_ms,
        producer_id_expiration_ms: int = _rules.DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        connect_timeout_s: float = 10.0,
        read_pool_size: int = 8,
    ) -> None:
        if pool_max_size < 1 or pool_min_size < 0 or pool_min_size > pool_max_size:
            raise ValueError("need 0 <= pool_min_size <= pool_max_size and pool_max_size >= 1")
        if read_pool_size < 1:
            raise ValueError("read_pool_size must be >= 1")
        self._read_size = read_pool_size
        self._readers: _Readers | None = None
        self.dsn = dsn
        self._min = pool_min_size
        self._max = pool_max_size
        self._time_ms = time_ms
        self._expiration_ms = producer_id_expiration_ms
        self._connect_timeout = connect_timeout_s
        self._pool: asyncpg.Pool | None = None
        # object keys of this process's commits in flight -> their completion
        # (is_safe_to_delete_file waits for them: it is ordered after every commit submitted
        # before it).
        self._inflight: dict[str, asyncio.Future] = {}
        # find_batches calls of this event-loop turn, sent together by _flush_finds
        self._finds: list[tuple[list[FindBatchRequest], int, asyncio.Future]] = []
        self._find_tasks: set[asyncio.Task] = set()
        self.schema_version = 0
        self.conflict_retries = 0  # statistics: transactions retried after 40P01 / 40001

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._pool is not None:
            return
        try:
            pool = await asyncpg.create_pool(
                self.dsn,
                min_size=self._min,
                max_size=self._max,
                timeout=self._connect_timeout,
                server_settings={"jit": "off", "application_name": "kafka-rpc coordinator"},
                reset=_keep_session,
            )
        except Exception as exc:
            if _is_connection_error(exc):
                raise CoordinatorUnavailableError(
                    f"cannot connect to the coordinator database: {exc!r}"
                ) from exc
            raise
        try:
            async with pool.acquire() as conn:
                self.schema_version = await apply_migrations(conn, self._time_ms())
        except BaseException:
            await pool.close()
            raise
        self._readers = _Readers(self._connect_reader, self._read_size)
        self._pool = pool

    async def _connect_reader(self) -> asyncpg.Connection:
        return await asyncpg.connect(
            self.dsn,
            timeout=self._connect_timeout,
            server_settings={"jit": "off", "application_name": "kafka-rpc coordinator reads"},
        )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        readers, self._readers = self._readers, None
        if readers is not None:
            await readers.close(self._connect_timeout)
        if pool is not None:
            if self._inflight:
                await asyncio.gather(*self._inflight.values(), return_exceptions=True)
            try:
                await asyncio.wait_for(pool.close(), self._connect_timeout)
            except (TimeoutError, OSError, asyncpg.PostgresError):
                pool.terminate()  # an unreachable server: drop the sockets

    def _require_pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("coordinator not started (await start() first)")
        return self._pool

    # -- running calls ---------------------------------------------------------------------------

    async def _write(self, fn: Callable[[asyncpg.Connection], Awaitable[Any]]) -> Any:
        """Run ``fn(conn)`` in one READ COMMITTED transaction and commit it. Retried on a
        deadlock / serialization failure (rolled back, nothing applied); a connection failure
        raises ``CoordinatorUnavailableError`` and is never retried (the outcome of an
        interrupted COMMIT is unknown)."""
        if asyncio.current_task() is None:
            # The server may step a handler's coroutine outside any task; asyncpg's timeouts
            # (asyncio.timeout) need one.
            return await asyncio.get_running_loop().create_task(self._write(fn))
        pool = self._require_pool()
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                async with (
                    pool.acquire() as conn,
                    conn.transaction(),
                ):
                    return await fn(conn)
            except _CONFLICT_ERRORS as exc:
                self.conflict_retries += 1
                if attempt == _CONFLICT_RETRIES:
                    raise
                logger.warning("coordinator transaction rolled back, retrying: %r", exc)
                await asyncio.sleep(0.001 * (attempt + 1))
            except Exception as exc:
                if not _is_connection_error(exc):
                    raise
                raise CoordinatorUnavailableError(
                    f"coordinator database connection failed during a write: {exc!r}"
                ) from exc
        raise AssertionError("unreachable")

    async def _read(
        self, fn: Callable[[asyncpg.Connection], Awaitable[Any]], *, snapshot: bool
    ) -> Any:
        """Run read ``fn(conn)``; in one REPEATABLE READ READ ONLY transaction when ``snapshot``
        (several statements, one snapshot). Retried once on a fresh connection after a
        connection failure, then ``CoordinatorUnavailableError``."""
        readers = self._readers
        if readers is None:
            raise RuntimeError("coordinator not started (await start() first)")
        for attempt in range(2):
            try:
                conn = await readers.acquire()
            except Exception as exc:
                if not _is_connection_error(exc):
                    raise
                raise CoordinatorUnavailableError(
                    f"cannot connect to the coordinator database: {exc!r}"
                ) from exc
            try:
                if not snapshot:
                    return await fn(conn)
                async with conn.transaction(isolation="repeatable_read", readonly=True):
                    return await fn(conn)
            except Exception as exc:
                if not _is_connection_error(exc):
                    raise
                if attempt == 1:
                    raise CoordinatorUnavailableError(
                        f"coordinator database connection failed during a read: {exc!r}"
                    ) from exc
            finally:
                readers.release(conn)
        raise AssertionError("unreachable")

    # -- topics --------------------------------------------------------------------------------

    async def create_topic_and_partitions(
        self, requests: Sequence[CreateTopicAndPartitionsRequest]
    ) -> list[int]:
        requests = list(requests)

        async def run(conn: asyncpg.Connection) -> list[int]:
            out: list[int] = []
            for r in requests:
                if r.topic_id == ZERO_UUID or r.num_partitions < 0 or not r.topic_name:
                    out.append(Errors.INVALID_REQUEST)
                    continue
                if r.num_partitions:
                    await conn.execute(Q.insert_logs, r.topic_id, r.topic_name, r.num_partitions)
                out.append(Errors.NONE)
            return out

        return await self._write(run)

    async def list_partitions(self) -> list[TopicIdPartition]:
        async def run(conn: asyncpg.Connection) -> list[TopicIdPartition]:
            return [
                TopicIdPartition(uuid.UUID(bytes=t.bytes), p)
                for t, p in await conn.fetch(Q.list_partitions)
            ]

        return await self._read(run, snapshot=False)

    async def delete_topics(self, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        topic_ids = list(topic_ids)
        now = self._time_ms()

        async def run(conn: asyncpg.Connection) -> list[int]:
            wanted = sorted({t for t in topic_ids if t != ZERO_UUID}, key=lambda t: t.bytes)
            rows = await conn.fetch(Q.lock_logs_of_topics, wanted) if wanted else []
            deleted = {uuid.UUID(bytes=r[1].bytes) for r in rows}
            log_ids = [r[0] for r in rows]
            if log_ids:
                counts = await conn.fetch(Q.count_batches_by_file, log_ids)
                await conn.execute(Q.delete_logs, log_ids)
                await _release_files(conn, {r[0]: r[1] for r in counts}, now)
            out: list[int] = []
            for tid in topic_ids:
                if tid in deleted:
                    deleted.discard(tid)
                    out.append(Errors.NONE)
                else:
                    out.append(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            return out

        return await self._write(run)

    # -- commit ----------------------------------------------------------------------------------

    async def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        n = len(requests)
        if n == 0:
            return []
        if not _rules.is_valid_object(object_key, file_size) or "\x00" in object_key:
            # PostgreSQL text cannot hold NUL: such a key is refused like an invalid one
            return [_COMMIT_INVALID] * n
        requests = list(requests)
        done = asyncio.get_running_loop().create_future()
        previous = self._inflight.get(object_key)
        self._inflight[object_key] = done
        try:
            return await self._write(
                lambda conn: self._commit(conn, object_key, uploader_broker_id, file_size, requests)
            )
        finally:
            done.set_result(None)
            if self._inflight.get(object_key) is done:
                if previous is not None and not previous.done():
                    self._inflight[object_key] = previous
                else:
                    del self._inflight[object_key]

    async def _commit(
        self,
        conn: asyncpg.Connection,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: list[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        now = self._time_ms()
        # The distinct known-looking partitions, locked in (topic_id, partition) order in the
        # same round trip as the object's row is inserted.
        index: dict[TopicIdPartition, int] = {}
        tids: list[str] = []
        parts: list[int] = []
        for r in requests:
            tp = r.topic_id_partition
            if tp not in index and _storable(tp):
                index[tp] = len(tids)
                tids.append(str(tp.topic_id))
                parts.append(tp.partition)
        locked = await conn.fetch(
            Q.insert_file_lock_logs,
            object_key,
            uploader_broker_id,
            now,
            file_size,
            "{" + ",".join(tids) + "}",
            _pg_array(parts),
        )
        if not locked:  # the key is known: reject everything, write nothing
            return [_COMMIT_INVALID] * len(requests)
        file_id = locked[0][0]
        states: list[list[int] | None] = [None] * len(tids)  # [log_id, lso, hw, byte_size]
        for _, log_id, ord_, lso, hw, size in locked:
            if log_id is not None:
                states[ord_ - 1] = [log_id, lso, hw, size]
        # Producer state of every (log, producer) of an idempotent entry, under the row locks.
        pkeys: dict[tuple[int, int], list] = {}  # -> [entries, stored row ids]
        for r in requests:
            if r.producer_id >= 0 and r.producer_epoch >= 0:
                i = index.get(r.topic_id_partition)
                st = states[i] if i is not None else None
                if st is not None:
                    pkeys.setdefault((st[0], r.producer_id), [[], []])
        if pkeys:
            logs_arg = [k[0] for k in pkeys]
            pids_arg = [k[1] for k in pkeys]
            for row in await conn.fetch(Q.select_producer_states, logs_arg, pids_arg):
                entry = ProducerEntry(row[3], row[4], row[5], row[6], row[7], row[8], row[2])
                ps = pkeys[(row[0], row[1])]
                ps[0].append(entry)
                ps[1].append(row[2])

        expiration_ms = self._expiration_ms
        valid = _rules.is_valid_commit_request
        response = new_commit_batch_response
        none = Errors.NONE
        heads0 = {i: st[2] for i, st in enumerate(states) if st is not None}  # HW before
        rows: list[tuple] = []  # accepted batches, in request order
        append_row = rows.append
        out: list[CommitBatchResponse] = []
        append_out = out.append
        last_tp: Any = None
        st = None  # list[int] | None, as above
        for r in requests:
            tp = r.topic_id_partition
            if tp is not last_tp:  # runs of one partition: one lookup
                last_tp = tp
                i = index.get(tp)
                st = states[i] if i is not None else None
            if st is None:
                append_out(_COMMIT_UNKNOWN)
                continue
            if not valid(r, file_size):
                append_out(_COMMIT_INVALID)
                continue
            entries = None
            if r.producer_id >= 0 and r.producer_epoch >= 0:
                ps = pkeys[(st[0], r.producer_id)]
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
            last = assigned + r.last_offset - r.base_offset
            st[2] = last + 1
            st[3] += r.size
            append_row(
                (st[0], assigned, last, r.byte_offset, r.size, r.magic, r.timestamp_type,
                 r.batch_max_timestamp, r.producer_id, r.producer_epoch, r.base_sequence,
                 r.last_sequence)
            )  # fmt: skip
            if entries is not None:
                ts = now if r.timestamp_type == LOG_APPEND_TIME else r.batch_max_timestamp
                _rules.remember(
                    entries,
                    ProducerEntry(
                        r.producer_epoch, r.base_sequence, r.last_sequence, assigned, ts, now
                    ),
                )
            append_out(response(none, assigned, now, st[1], False))

        h_log: list[int] = []
        h_hw: list[int] = []
        h_size: list[int] = []
        for i, hw0 in heads0.items():
            st = states[i]
            assert st is not None
            if st[2] != hw0:
                h_log.append(st[0])
                h_hw.append(st[2])
                h_size.append(st[3])
        stale: list[int] = []
        fresh: list[list[int]] = [[] for _ in range(7)]
        for (log_id, pid), (entries, stored_ids) in pkeys.items():
            kept = {e.row_id for e in entries}
            stale.extend(rid for rid in stored_ids if rid not in kept)
            for e in entries:
                if e.row_id is None:
                    for col, v in zip(
                        fresh,
                        (log_id, pid, e.producer_epoch, e.base_sequence, e.last_sequence,
                         e.assigned_offset, e.batch_timestamp),
                    ):  # fmt: skip
                        col.append(v)
        await conn.execute(
            Q.write_commit,
            file_id,
            now,
            *(map(_pg_array, zip(*rows)) if rows else ["{}"] * 12),
            _pg_array(h_log),
            _pg_array(h_hw),
            _pg_array(h_size),
            len(rows),
            _pg_array(stale),
            *map(_pg_array, fresh),
        )
        return out

    # -- reads ---------------------------------------------------------------------------------

    async def find_batches(
        self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        requests = list(requests)
        if not requests:
            return []
        if self._readers is None:
            raise RuntimeError("coordinator not started (await start() first)")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        if not self._finds:
            loop.call_soon(self._flush_finds)
        self._finds.append((requests, fetch_max_bytes, fut))
        res = await fut
        if res is not None:
            return res
        # a partition needing more than one page: again, in one snapshot transaction
        return await self._read(
            lambda conn: _find_batches(conn, requests, fetch_max_bytes), snapshot=True
        )

    def _flush_finds(self) -> None:
        """Send the ``find_batches`` calls made since the last flush (this event-loop turn) as
        ``find_many`` statements of at most ``_FIND_GROUP`` partitions (a call is never split),
        each on its own read connection."""
        pending, self._finds = self._finds, []
        loop = asyncio.get_running_loop()
        groups: list[list[tuple[list[FindBatchRequest], int, asyncio.Future]]] = [[]]
        entries = 0
        for item in pending:
            if groups[-1] and entries + len(item[0]) > _FIND_GROUP:
                groups.append([])
                entries = 0
            groups[-1].append(item)
            entries += len(item[0])
        for group in groups:
            if group:
                self._find_tasks.add(task := loop.create_task(self._run_finds(group)))
                task.add_done_callback(self._find_tasks.discard)

    async def _run_finds(
        self, group: list[tuple[list[FindBatchRequest], int, asyncio.Future]]
    ) -> None:
        """One ``find_many`` for ``group``; each call's future gets its answers (None: needs
        more than one page) or the error."""
        try:
            results = await self._read(lambda conn: _find_many(conn, group), snapshot=False)
        except BaseException as exc:
            for _, _, fut in group:
                if not fut.done():
                    if isinstance(exc, asyncio.CancelledError):
                        fut.cancel()
                    else:
                        fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, fut), res in zip(group, results):
            if not fut.done():
                fut.set_result(res)

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        requests = list(requests)
        if not requests:
            return []
        return await self._read(
            lambda conn: _list_offsets(conn, requests), snapshot=len(requests) > 1
        )

    # -- deletion --------------------------------------------------------------------------------

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        requests = list(requests)
        now = self._time_ms()

        async def run(conn: asyncpg.Connection) -> list[DeleteRecordsResponse]:
            logs = await _lock_logs(conn, [r.topic_id_partition for r in requests])
            freed_by_file: collections.Counter[int] = collections.Counter()
            out: list[DeleteRecordsResponse] = []
            for r in requests:
                st = logs.get(r.topic_id_partition)
                if st is None:
                    out.append(DeleteRecordsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1))
                    continue
                hw = st[2]
                target = hw if r.offset == -1 else r.offset
                if target < 0 or target > hw:
                    out.append(DeleteRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, -1))
                    continue
                await _delete_below(conn, st, target, freed_by_file)
                out.append(DeleteRecordsResponse(Errors.NONE, st[1]))
            await _release_files(conn, freed_by_file, now)
            return out

        return await self._write(run)

    async def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], max_batches_per_request: int = 0
    ) -> list[EnforceRetentionResponse]:
        requests = list(requests)
        now = self._time_ms()

        async def run(conn: asyncpg.Connection) -> list[EnforceRetentionResponse]:
            logs = await _lock_logs(conn, [r.topic_id_partition for r in requests])
            freed_by_file: collections.Counter[int] = collections.Counter()
            out: list[EnforceRetentionResponse] = []
            for r in requests:
                st = logs.get(r.topic_id_partition)
                if st is None:
                    out.append(
                        EnforceRetentionResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1)
                    )
                    continue
                rb, rm = r.retention_bytes, r.retention_ms
                if rb < 0 and rm < 0:
                    out.append(EnforceRetentionResponse(Errors.NONE, 0, 0, st[1]))
                    continue
                remaining = st[3]
                boundary = st[2]
                count = 0
                # The cursor stops at the first batch to keep: cost O(deleted + 1).
                async for base, size, ts in conn.cursor(Q.retention_scan, st[0], prefetch=256):
                    size_ok = rb < 0 or remaining <= rb
                    time_ok = rm < 0 or ts >= now - rm
                    if (size_ok and time_ok) or (
                        max_batches_per_request > 0 and count >= max_batches_per_request
                    ):
                        boundary = base
                        break
                    remaining -= size
                    count += 1
                n, freed = await _delete_below(conn, st, boundary, freed_by_file)
                out.append(EnforceRetentionResponse(Errors.NONE, n, freed, st[1]))
            await _release_files(conn, freed_by_file, now)
            return out

        return await self._write(run)

    # -- objects -------------------------------------------------------------------------------

    async def get_files_to_delete(
        self,
        marked_before_ms: int | None = None,
        limit: int = 0,
        after_object_key: str | None = None,
    ) -> list[FileToDelete]:
        async def run(conn: asyncpg.Connection) -> list[FileToDelete]:
            after = after_object_key if after_object_key is not None else ""
            if "\x00" in after:  # keys compare by code point; "a\0..." sorts right after "a"
                after = after.split("\x00", 1)[0]
            rows = await conn.fetch(
                Q.files_to_delete,
                after,
                marked_before_ms if marked_before_ms is not None else _INT64_MAX,
                limit if limit > 0 else None,
            )
            return [FileToDelete(k, at, size) for k, at, size in rows]

        return await self._read(run, snapshot=False)

    async def delete_files(self, object_keys: Sequence[str]) -> list[int]:
        object_keys = list(object_keys)

        async def run(conn: asyncpg.Connection) -> list[int]:
            out: list[int] = []
            for key in object_keys:
                if "\x00" in key:  # never stored (see commit_file)
                    out.append(Errors.RESOURCE_NOT_FOUND)
                elif await conn.fetchval(Q.delete_deleting_file, key) is not None:
                    out.append(Errors.NONE)
                elif await conn.fetchval(Q.file_exists, key) is not None:
                    out.append(Errors.INVALID_REQUEST)
                else:
                    out.append(Errors.RESOURCE_NOT_FOUND)
            return out

        return await self._write(run)

    async def is_safe_to_delete_file(self, object_key: str) -> bool:
        if not object_key or "\x00" in object_key:  # a key with NUL is never stored
            return True
        pending = self._inflight.get(object_key)
        while pending is not None and not pending.done():  # ordered after this process's commits
            await asyncio.shield(pending)
            pending = self._inflight.get(object_key)

        async def run(conn: asyncpg.Connection) -> bool:
            return await conn.fetchval(Q.file_exists, object_key) is None

        return await self._read(run, snapshot=False)


# -- helpers (run inside a caller's transaction) -------------------------------------------------


def _storable(tp: TopicIdPartition) -> bool:
    """Whether ``tp`` can name a ``logs`` row: a non-zero topic id and a partition in
    [0, INT32_MAX] (the column is INTEGER); any other is unknown without a query."""
    return tp.topic_id != ZERO_UUID and 0 <= tp.partition <= INT32_MAX


def _pg_array(values: Sequence[int]) -> str:
    """A list of ints as a PostgreSQL array literal (``'{1,2,3}'``)."""
    return "{" + ",".join(map(str, values)) + "}"


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset hook: nothing to reset. asyncpg's default runs ``RESET ALL; CLOSE ALL;
    UNLISTEN *; SELECT pg_advisory_unlock_all()`` on every release (a round trip per call), but
    our calls leave no session state: no SET, LISTEN or session lock, cursors only inside
    transactions, and the pool rolls back a transaction left open (``Connection._reset``)."""


async def _lock_logs(
    conn: asyncpg.Connection, tps: Sequence[TopicIdPartition]
) -> dict[TopicIdPartition, list[int]]:
    """Lock the ``logs`` rows of ``tps`` in (topic_id, partition) order; return
    ``tp -> [log_id, lso, hw, byte_size]`` for the known ones (unknown ones are absent)."""
    distinct = list(dict.fromkeys(tp for tp in tps if _storable(tp)))
    if not distinct:
        return {}
    rows = await conn.fetch(
        Q.lock_logs, [tp.topic_id for tp in distinct], [tp.partition for tp in distinct]
    )
    return {distinct[o - 1]: [log_id, lso, hw, size] for log_id, o, lso, hw, size in rows}


async def _delete_below(
    conn: asyncpg.Connection,
    st: list[int],
    target: int,
    freed_by_file: collections.Counter[int],
) -> tuple[int, int]:
    """Move the LSO of locked log ``st`` ([log_id, lso, hw, byte_size], updated in place) to
    max(target, lso) and delete the batches entirely below it; count them per file in
    ``freed_by_file``. Returns (batches deleted, bytes deleted)."""
    new_lso = max(target, st[1])
    if new_lso == st[1]:
        return 0, 0
    gone = await conn.fetch(Q.delete_batches_below, st[0], new_lso)
    freed = sum(r[1] for r in gone)
    await conn.execute(Q.update_log_tail, st[0], new_lso, freed)
    st[1] = new_lso
    st[3] -= freed
    for r in gone:
        freed_by_file[r[0]] += 1
    return len(gone), freed


async def _release_files(conn: asyncpg.Connection, deleted: dict[int, int], now: int) -> None:
    """Take ``deleted[file_id]`` deleted batches off each file's ``batch_count`` (rows locked in
    file_id order first); a file left with none is marked for deletion at ``now`` (ms)."""
    if not deleted:
        return
    fids = sorted(deleted)
    await conn.fetch(Q.lock_files, fids)
    await conn.execute(Q.release_files, fids, [deleted[f] for f in fids], now)


def _take_page(
    page: Sequence[Any],
    c: int,
    tp: TopicIdPartition,
    found: list[BatchInfo],
    partition_bytes: int,
    request_bytes: int,
    max_partition_bytes: int,
    fetch_max_bytes: int,
) -> tuple[int, int, bool]:
    """Append to ``found`` the batches of ``page`` (rows whose batch columns start at ``c``:
    batch_id, object_key, byte_offset, byte_size, base_offset, last_offset, log_append_timestamp,
    batch_max_timestamp, timestamp_type, magic, producer_id, producer_epoch, base_sequence,
    last_sequence) that the fetch budget admits (``_rules.admit_batch``; sizes in bytes).
    Returns (partition bytes, request bytes, whether every batch of the page was admitted)."""
    new_info = new_batch_info
    admit = _rules.admit_batch
    for b in page:
        if not admit(request_bytes, partition_bytes, max_partition_bytes, fetch_max_bytes):
            return partition_bytes, request_bytes, False
        size = b[c + 3]
        found.append(
            new_info(
                b[c], b[c + 1], b[c + 2], size, b[c + 4], b[c + 5], b[c + 6], b[c + 7], b[c + 8],
                tp, b[c + 9], b[c + 10], b[c + 11], b[c + 12], b[c + 13],
            )
        )  # fmt: skip
        partition_bytes += size
        request_bytes += size
    return partition_bytes, request_bytes, True


async def _find_many(
    conn: asyncpg.Connection,
    group: Sequence[tuple[list[FindBatchRequest], int, Any]],
    paged: bool = False,
) -> list[list[FindBatchResponse] | None]:
    """``find_batches`` for each ``(requests, fetch_max_bytes, _)`` of ``group`` from ONE
    ``find_many`` statement (one snapshot for all of them); None for a call that needs more than
    the first page of some partition (its caller re-reads it in a snapshot transaction), unless
    ``paged`` (``conn`` inside that transaction): then the further pages are read with
    ``find_more``."""
    tids: list[uuid.UUID] = []
    parts: list[int] = []
    offsets: list[int] = []
    for requests, _, _ in group:
        for r in requests:
            tp = r.topic_id_partition
            if _storable(tp):
                tids.append(tp.topic_id)
                parts.append(tp.partition)
                offsets.append(min(max(r.offset, -1), _INT64_MAX))
    by_ord: dict[int, list] = {}
    if tids:
        for row in await conn.fetch(Q.find_many, tids, parts, offsets, _FIND_PAGE):
            rows = by_ord.get(row[0])
            if rows is None:
                by_ord[row[0]] = [row]
            else:
                rows.append(row)
    out: list[list[FindBatchResponse] | None] = []
    o = 0  # ordinal of the storable entry, as in the statement's arrays
    for requests, fetch_max_bytes, _ in group:
        answers: list[FindBatchResponse] | None = []
        request_bytes = 0
        for r in requests:
            tp = r.topic_id_partition
            if not _storable(tp):
                if answers is not None:
                    answers.append(FindBatchResponse.unknown_topic_or_partition())
                continue
            o += 1
            if answers is None:
                continue
            rows = by_ord.get(o)
            if rows is None:
                answers.append(FindBatchResponse.unknown_topic_or_partition())
                continue
            first = rows[0]
            lso, hw, offset = first[2], first[3], r.offset
            if offset < lso or offset > hw:
                answers.append(FindBatchResponse.offset_out_of_range(lso, hw))
                continue
            if offset == hw or first[4] is None:
                answers.append(FindBatchResponse.success((), lso, hw))
                continue
            found: list[BatchInfo] = []
            page: Sequence[Any] = rows
            c = 4  # find_many: the batch columns follow ord, log_id, lso, hw
            partition_bytes = 0
            while True:
                partition_bytes, request_bytes, whole = _take_page(
                    page, c, tp, found, partition_bytes, request_bytes,
                    r.max_partition_fetch_bytes, fetch_max_bytes,
                )  # fmt: skip
                if not whole or len(page) < _FIND_PAGE:  # budget spent or no more batches
                    break
                if not paged:
                    answers = None
                    break
                page = await conn.fetch(Q.find_more, first[1], page[-1][c + 5], _FIND_PAGE)
                c = 0
                if not page:
                    break
            if answers is not None:
                answers.append(FindBatchResponse.success(tuple(found), lso, hw))
        out.append(answers)
    return out


async def _find_batches(
    conn: asyncpg.Connection, requests: list[FindBatchRequest], fetch_max_bytes: int
) -> list[FindBatchResponse]:
    """``find_batches`` on ``conn`` (inside a snapshot transaction), page by page."""
    [answers] = await _find_many(conn, [(requests, fetch_max_bytes, None)], paged=True)
    assert answers is not None
    return answers


async def _list_offsets(
    conn: asyncpg.Connection, requests: list[ListOffsetsRequest]
) -> list[ListOffsetsResponse]:
    out: list[ListOffsetsResponse] = []
    for r in requests:
        tp, ts = r.topic_id_partition, r.timestamp
        if not _storable(tp):
            out.append(ListOffsetsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, tp, -1, -1))
            continue
        if ts == MAX_TIMESTAMP:
            row = await conn.fetchrow(Q.max_timestamp, tp.topic_id, tp.partition)
        elif ts >= 0:
            row = await conn.fetchrow(
                Q.offset_for_timestamp, tp.topic_id, tp.partition, min(ts, _INT64_MAX)
            )
        else:
            row = await conn.fetchrow(Q.log_bounds, tp.topic_id, tp.partition)
        if row is None:
            out.append(ListOffsetsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, tp, -1, -1))
            continue
        lso, hw = row[0], row[1]
        if ts == LATEST_TIMESTAMP:
            out.append(ListOffsetsResponse(Errors.NONE, tp, -1, hw))
        elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            out.append(ListOffsetsResponse(Errors.NONE, tp, -1, lso))
        elif ts == LATEST_TIERED_TIMESTAMP:
            out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
        elif ts == MAX_TIMESTAMP:
            if row[2] is None:
                out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
            else:
                out.append(ListOffsetsResponse(Errors.NONE, tp, row[2], row[3]))
        elif ts < 0:
            out.append(ListOffsetsResponse(Errors.UNKNOWN_SERVER_ERROR, tp, -1, -1))
        elif row[2] is None:
            out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
        else:
            out.append(ListOffsetsResponse(Errors.NONE, tp, row[2], max(row[3], lso)))
    return out
