"""The replicated Batch Coordinator: one ``__diskless-metadata`` partition on Raft.

DESIGN.md section 9 (KIP-1164 "Batch Coordinator implemented with an internal topic"): the state
of a Batch Coordinator is a log. Each ``__diskless-metadata`` partition is a Raft group among its
replicas, run by the same module as the metadata log (``kafka_rpc.raft``: a
:class:`~kafka_rpc.raft.core.RaftCore` on a :class:`~kafka_rpc.raft.file_log.FileLog` in
``<log dir>/__diskless-metadata-<p>/``, driven by a :class:`~kafka_rpc.raft.driver.RaftDriver`,
the partition named by its topic id in every Raft RPC, ``partition.metadata`` beside the log as
for the metadata log).

* **Writes** (``create_topic_and_partitions``, ``commit_file``, ``delete_records``,
  ``delete_topics``, ``delete_files``, ``enforce_retention``) are decided by the Raft leader: it
  reads its clock once (ms, never below the last recorded time) and appends the call and that time
  as ONE record of our own family (``message_specs/Diskless*Record.json``, types 10200-10205). The
  caller is answered once the record is committed and applied, with the result of the leader's
  own apply. Concurrent writes share one Raft batch and one fsync of the log (``append.linger.ms``
  0: every append made before the driver's next poll goes into one batch).
* **Apply** (every replica, leader included): committed records are applied to the replica's own
  SQLite file (``coordinator.db`` in the partition directory) by
  :mod:`kafka_rpc.coordinator.sqlite`'s own operations (``_Ops``) with the clock fixed to the
  recorded time, so offsets, idempotence answers, deletions and object/file ids come out the same
  on every replica. The applied records and the applied offset (table ``raft_applied``) go into
  one SQLite transaction, committed every ``apply_commit_records`` records (64),
  ``apply_commit_ms`` (100) after it opened, and before any read of the file through another
  connection (:meth:`ReplicatedBatchCoordinator._apply_open`), so a restart re-applies only the
  tail after the last COMMIT. A record whose operation raises is rolled back alone, identically
  on every replica. The log carries durability, so SQLite runs with ``synchronous=NORMAL`` by
  default: a power loss may cost it its last transactions, which the log replays (``OFF`` is
  allowed, but a power loss may then corrupt the file; deleted, it is rebuilt from the latest
  snapshot and the log). The leader fsyncs the log on the driver's fsync thread even as the only
  voter (``RaftDriver(thread_flush_alone=True)``), so its loop decodes and applies meanwhile.
* **Reads** (``find_batches``, ``list_offsets``, ``list_partitions``, ``get_files_to_delete``)
  answer from the local SQLite on every replica (the read-only coordinators of DESIGN section 9):
  never ahead of the committed log, since only committed records are applied.
  ``is_safe_to_delete_file`` is answered by the leader only, after every write appended before it
  was applied (a follower might not have seen a commit yet).
* **Not the leader**: a write answers NOT_COORDINATOR (16) per entry (create/delete codes,
  ``CommitBatchResponse``/``DeleteRecordsResponse``/``EnforceRetentionResponse`` with error 16);
  so does a write whose leader lost its epoch before the record committed (it may still commit:
  an idempotent producer's retry is then answered IsDuplicate with the original offsets).
  ``is_safe_to_delete_file`` raises :class:`NotCoordinatorError`.
* **Snapshots** (KIP-1164 future work "Diskless Metadata Snapshots", KIP-630 mechanics): the Raft
  snapshot of this log is the SQLite image (``sqlite3.Connection.serialize``) cut into
  ``DisklessSnapshotChunkRecord`` records; a follower that fetched one with FetchSnapshot (or a
  restarting replica whose state is older than its latest snapshot) loads it with the SQLite backup
  API into its database. The byte trigger grows with the image (:meth:`snapshot_records`:
  ``SNAPSHOT_LOG_PER_IMAGE`` times the image).

* **Voters**: the partition's replicas at their servers' controller listener (the Raft RPCs'
  listener, as for the metadata log); ``kafka_rpc.handlers.raft`` routes the RPCs naming this
  partition's topic id (or name, for the versions without one) to this replica's driver. A
  broker-only node has no controller listener, so it cannot hold a replica yet.
* **Upgrade** from a data directory of the standalone SQLite coordinator: ``import_path``
  (:meth:`_import`).

Units: times in ms since the Unix epoch; offsets of the Raft log are Kafka offsets, ``next_offset``
exclusive.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import random
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kafka_rpc._frozen import frozen_constructor
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.primitives import uvarint_bytes

from . import _rules
from .api import (
    BatchCoordinator,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    FileToDelete,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    TopicIdPartition,
    new_commit_batch_request,
    new_topic_id_partition,
)
from .memory import wall_clock_ms
from .sqlite import (
    SqliteBatchCoordinator,
    _Failure,
    _init_writer,
    _OpFailed,
    _Ops,
    _run_ops,
)

__all__ = [
    "DISKLESS_METADATA_TOPIC_NAME",
    "NOT_COORDINATOR",
    "NotCoordinatorError",
    "ReplicatedBatchCoordinator",
    "partition_dir_name",
]

log = logging.getLogger("kafka_rpc.coordinator.replicated")

DISKLESS_METADATA_TOPIC_NAME = "__diskless-metadata"
#: Kafka ``Errors.NOT_COORDINATOR``.
NOT_COORDINATOR = 16
#: Bytes of SQLite image per DisklessSnapshotChunkRecord.
SNAPSHOT_CHUNK_BYTES = 256 * 1024
#: The next snapshot waits for this many times the last image's size in record bytes (see
#: ``snapshot_records``). A snapshot copies, frames and checksums the whole image on the event
#: loop, and the database grows faster than the log; the price is a log up to this many images
#: long between snapshots.
SNAPSHOT_LOG_PER_IMAGE = 4
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL")

_CommitRec = codec.message_class("DisklessCommitFileRecord")
_CommitBatch = codec.module("DisklessCommitFileRecord").DisklessCommitBatch
_new_commit_batch = frozen_constructor(_CommitBatch)  # positional, every field in order
_CreateRec = codec.message_class("DisklessCreateTopicsRecord")
_CreateTopic = codec.module("DisklessCreateTopicsRecord").DisklessCreateTopic
_DelRecordsRec = codec.message_class("DisklessDeleteRecordsRecord")
_DelRecordsEntry = codec.module("DisklessDeleteRecordsRecord").DisklessDeleteRecordsEntry
_DelTopicsRec = codec.message_class("DisklessDeleteTopicsRecord")
_DelFilesRec = codec.message_class("DisklessDeleteFilesRecord")
_RetentionRec = codec.message_class("DisklessEnforceRetentionRecord")
_RetentionEntry = codec.module("DisklessEnforceRetentionRecord").DisklessRetentionEntry
_ChunkRec = codec.message_class("DisklessSnapshotChunkRecord")

_APPLIED_DDL = (
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
#: The suffix a standalone SQLite coordinator's file gets once imported (it is kept).
IMPORTED_SUFFIX = ".imported"
#: The marker an earlier version of the import left beside the partition's log.
_LEGACY_IMPORT_MARKER = "import.done"
#: The import's wait for its apply: ``write_timeout_ms`` plus its image at this rate (bytes/s).
_IMPORT_BYTES_PER_S = 4 * 1024 * 1024


def _imported(conn: sqlite3.Connection, digest: str) -> bool:
    """Whether the image of SHA-256 ``digest`` (hex) was imported into this state."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = "
                    "'raft_imports'").fetchone() is None:  # fmt: skip
        return False
    return conn.execute("SELECT 1 FROM raft_imports WHERE sha256 = ?",
                        (digest,)).fetchone() is not None  # fmt: skip


def _read_source_image(source: Path) -> bytes:
    """(Worker thread.) The image of a standalone SQLite coordinator's database ``source``, empty
    when it holds no topic, batch or file: opened read-write (so SQLite recovers a WAL the old
    server left behind), checkpointed, serialized (:func:`_image_of`), closed."""
    conn = sqlite3.connect(str(source), timeout=10.0)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"logs", "files"} <= tables:
            raise ValueError(f"{source} is not a SQLite Batch Coordinator's database")
        has_data = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM logs) OR EXISTS (SELECT 1 FROM files)"
        ).fetchone()[0]
        return bytes(_image_of(conn)) if has_data else b""
    finally:
        conn.close()


def _rename_source(source: Path, target: Path) -> None:
    """(Worker thread.) ``source`` (and a ``-wal``/``-shm`` file beside it) renamed to
    ``target`` durably (the directory fsynced)."""
    from kafka_rpc.storage.durable import fsync_dir

    for suffix in ("-wal", "-shm"):
        side = source.with_name(source.name + suffix)
        if side.exists():
            os.replace(side, target.with_name(target.name + suffix))
    os.replace(source, target)
    fsync_dir(source.parent)


def partition_dir_name(partition: int) -> str:
    """``__diskless-metadata-<partition>``: the partition directory under a log dir."""
    return f"{DISKLESS_METADATA_TOPIC_NAME}-{partition}"


class NotCoordinatorError(Exception):
    """This replica is not (or stopped being) the leader of its ``__diskless-metadata``
    partition: Kafka's NOT_COORDINATOR (16)."""

    error_code = NOT_COORDINATOR


# -- the clock fixed to the recorded time, and the ops adapter ------------------------------


class _FixedClock:
    """The ``time_ms`` of the applying ``_Ops``: the recorded TimestampMs of the record being
    applied (ms)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class _Timed:
    """An operation of ``_Ops`` run with the clock set to ``time_ms`` first."""

    __slots__ = ("clock", "fn", "time_ms")

    def __init__(self, clock: _FixedClock, fn: Callable[..., Any], time_ms: int) -> None:
        self.clock, self.fn, self.time_ms = clock, fn, time_ms

    def __call__(self, conn: sqlite3.Connection, *args: Any) -> Any:
        self.clock.now = self.time_ms
        return self.fn(conn, *args)


def _write_applied(conn: sqlite3.Connection, next_offset: int, epoch: int, last_time: int) -> None:
    conn.execute(
        "UPDATE raft_applied SET next_offset = ?, epoch = ?, last_time_ms = ? WHERE id = 1",
        (next_offset, epoch, last_time),
    )


class _Cache:
    """``_run_write_group``'s cache hooks for ``_Timed`` operations: the ``_Ops`` row cache,
    kept across apply groups (this connection is the database's only writer)."""

    def __init__(self, ops: _Ops) -> None:
        self.ops = ops

    def keeps(self, fn: Any) -> bool:
        inner = fn.fn if type(fn) is _Timed else fn
        return inner is _write_applied or self.ops.keeps(inner)

    def flush(self, conn: sqlite3.Connection) -> None:
        self.ops.flush(conn)

    def drop(self) -> None:
        self.ops.drop()


# -- record <-> call ---------------------------------------------------------------------------


def _commit_record(key: str, broker: int, size: int, reqs: Sequence[CommitBatchRequest],
                   now: int) -> bytes:  # fmt: skip
    new = _new_commit_batch
    batches = [
        new(r.topic_id_partition.topic_id, r.topic_id_partition.partition, r.byte_offset, r.size,
            r.base_offset, r.last_offset, r.batch_max_timestamp, r.timestamp_type,
            r.producer_id, r.producer_epoch, r.base_sequence, r.last_sequence, r.magic)
        for r in reqs
    ]  # fmt: skip
    rec = _CommitRec(
        timestamp_ms=now,
        object_key=key,
        uploader_broker_id=broker,
        file_size=size,
        batches=tuple(batches),
    )
    return codec.encode_record(rec)


def _decode_op(ops: _Ops, value: bytes) -> Any:
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


def _write_marker(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` durably (temp file, fsync, rename)."""
    from kafka_rpc.storage.partition_metadata import atomic_write

    atomic_write(path, text)


def _image_of(conn: sqlite3.Connection) -> bytearray:
    """The database as one file image, journal mode bytes set to rollback (1, 1) so that it can
    be opened in memory (WAL needs a file). One copy of ``serialize()``'s bytes."""
    image = bytearray(conn.serialize())
    if len(image) >= 20:
        image[18] = image[19] = 1
    return image


def _chunk_records(image: bytes | bytearray) -> list[bytes]:
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
    under that transaction, on whichever thread reads it, cuts it with :func:`_chunk_records`
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
                    image = _image_of(conn)
                finally:
                    conn.close()
                if len(image) != self.size:
                    raise RuntimeError(f"an image of {len(image)} bytes, {self.size} expected")
                self._records = _chunk_records(image)
            return self._records


# -- the coordinator ---------------------------------------------------------------------------


class ReplicatedBatchCoordinator(BatchCoordinator):
    """A ``BatchCoordinator`` on one ``__diskless-metadata`` partition (module docstring).

    * ``log_dir``: the log directory (the first of ``log.dirs``); the partition lives in
      ``<log_dir>/__diskless-metadata-<partition>/`` (Raft segments, snapshots, ``quorum-state``,
      ``partition.metadata``, ``coordinator.db``).
    * ``node_id`` / ``voters``: this replica's id and every replica's id -> (host, port) of the
      listener its Raft RPCs reach (the servers' controller listener, routed by topic id by
      ``kafka_rpc.handlers.raft``); default: a single voter (``{node_id: ("127.0.0.1", 0)}``,
      never dialled).
    * ``topic_id``: the partition's topic id (KIP-516); None = the one in ``partition.metadata``,
      or a new random one written there. A different one than the file's raises
      ``InconsistentTopicIdError``.
    * ``cluster_id``: checked in every Raft RPC (Kafka's INCONSISTENT_CLUSTER_ID).
    * ``time_ms``: the leader's clock (ms); ``producer_id_expiration_ms`` as Kafka's.
    * ``synchronous``: SQLite's ``synchronous`` for the materialized state (OFF/NORMAL/FULL).
    * ``write_timeout_ms``: how long a write waits for its record to be committed and applied
      before it raises ``TimeoutError``.
    * ``wait_for_leader_ms``: :meth:`start` waits this long for a single voter to become a
      writable leader (a multi-voter replica does not wait); ``shutdown_timeout_ms`` bounds
      :meth:`close`'s graceful resignation (Kafka's ``shutdown(timeoutMs)``).
    * ``apply_commit_records`` / ``apply_commit_ms``: the apply COMMITs its SQLite transaction
      once it holds this many records, or this many ms after its first group, whichever comes
      first, and before any read (:meth:`_apply_open`).
    * ``import_path``: a standalone ``SqliteBatchCoordinator``'s database; the leader imports
      it through the log while the partition holds no batch and no file, then renames it
      ``<name>.imported`` (:meth:`_import`).
    * ``raft_options``: overrides of :class:`~kafka_rpc.raft.core.RaftConfig` fields (election
      and fetch timeouts, snapshot triggers...); ``append_linger_ms`` defaults to 0 here.
    * ``client_security``: TLS/SASL settings of the voters' listener for the driver's clients.
    """

    def __init__(
        self,
        log_dir: str | Path,
        *,
        node_id: int = 1,
        voters: Mapping[int, tuple[str, int]] | None = None,
        partition: int = 0,
        topic_id: uuid.UUID | None = None,
        cluster_id: str = "diskless-metadata",
        time_ms: Callable[[], int] = wall_clock_ms,
        producer_id_expiration_ms: int = _rules.DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        synchronous: str = "NORMAL",
        write_timeout_ms: int = 30_000,
        wait_for_leader_ms: int = 10_000,
        shutdown_timeout_ms: int = 5_000,
        import_path: str | Path | None = None,
        inline_read_max_partitions: int = 4,
        apply_commit_records: int = 64,
        apply_commit_ms: int = 100,
        raft_options: Mapping[str, Any] | None = None,
        client_security: Any = None,
    ) -> None:
        synchronous = synchronous.upper()
        if synchronous not in _SYNCHRONOUS:
            raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, not {synchronous!r}")
        self.log_dir = Path(log_dir)
        self.node_id = node_id
        self.voters = dict(voters) if voters else {node_id: ("127.0.0.1", 0)}
        self.partition = partition
        self.topic_id = topic_id
        self.cluster_id = cluster_id
        self.directory = self.log_dir / partition_dir_name(partition)
        self.db_path = self.directory / "coordinator.db"
        self._time_ms = time_ms
        self._expiration_ms = producer_id_expiration_ms
        self._synchronous = synchronous
        self._write_timeout = write_timeout_ms / 1000
        self._wait_for_leader = wait_for_leader_ms / 1000
        self._shutdown_timeout_ms = shutdown_timeout_ms
        self._import_path = Path(import_path) if import_path else None
        self._importing = False
        self._import_task: asyncio.Future | None = None
        self._inline_max = inline_read_max_partitions
        if apply_commit_records < 1 or apply_commit_ms < 0:
            raise ValueError("apply_commit_records must be >= 1 and apply_commit_ms >= 0")
        self._commit_records = apply_commit_records
        self._commit_s = apply_commit_ms / 1000
        self._raft_options = dict(raft_options or {})
        self._client_security = client_security
        self._clock = _FixedClock()
        self._ops = _Ops(self._clock, producer_id_expiration_ms)
        self._cache = _Cache(self._ops)
        self._conn: sqlite3.Connection | None = None  # the apply connection (loop thread)
        # The apply's open SQLite transaction (see _apply_open): the work of each group applied
        # in it (replayed if a later operation fails), its records, and the COMMIT timer.
        self._open_work: list[list] = []
        self._open_records = 0
        self._commit_timer: asyncio.TimerHandle | None = None
        # Set when an apply or its COMMIT failed (I/O): SQLite is behind what this replica
        # answered, so it applies nothing more and takes no write until a restart.
        self.failed: BaseException | None = None
        self._store: SqliteBatchCoordinator | None = None  # reads (its reader connections)
        self.driver: Any = None
        self.core: Any = None
        # applied state (mirrors the raft_applied row)
        self.applied_offset = 0  # next Raft offset to apply
        self._applied_epoch = 0
        self._last_time = 0  # largest recorded TimestampMs applied or appended
        # leader side
        self._leader: tuple[int, int] = (-1, -1)  # (leader id, epoch) last announced
        self._pending: dict[int, asyncio.Future] = {}  # record offset -> caller's future
        # record offset -> (operation, args, time) of this leader's own appends: applied without
        # decoding the record again (the same values the record carries)
        self._local: dict[int, tuple[Callable[..., Any], tuple, int]] = {}
        self._barriers: list[tuple[int, asyncio.Future]] = []
        self._leader_event: asyncio.Event | None = None
        self._seen = 0  # next offset handle_commit has not been given yet
        self._import_buf: list[bytes] | None = None  # chunks of an import being read
        self._import_start = -1
        self.imports_applied = 0  # statistics
        self._snapshot_bytes_floor = 0  # RaftConfig.snapshot_max_record_bytes as configured
        self.applied_records = 0  # statistics
        self.apply_groups = 0
        self.apply_commits = 0  # SQLite COMMITs of the apply
        self.snapshots_loaded = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self.driver is not None:
            return
        from kafka_rpc.raft.core import RaftConfig, RaftCore
        from kafka_rpc.raft.driver import RaftDriver, monotonic_ms
        from kafka_rpc.raft.file_log import FileLog
        from kafka_rpc.raft.quorum_state import FileQuorumStateStore
        from kafka_rpc.storage import partition_metadata

        self._leader_event = asyncio.Event()
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.topic_id is None:
            self.topic_id = partition_metadata.read_topic_id(self.directory) or uuid.uuid4()
        partition_metadata.ensure(self.directory, self.topic_id)
        # the reads' store first: it creates the file and applies the migrations (clock 0, the
        # same on every replica)
        store = SqliteBatchCoordinator(
            str(self.db_path),
            synchronous="NORMAL" if self._synchronous == "OFF" else self._synchronous,
            time_ms=lambda: 0,
            inline_read_max_partitions=self._inline_max,
        )
        await store.start()
        self._store = store
        raft_log = None
        try:
            conn = sqlite3.connect(
                str(self.db_path), isolation_level=None, cached_statements=256,
                check_same_thread=False,
            )  # fmt: skip
            self._conn = conn
            _init_writer(conn, self._synchronous, 0)
            conn.execute(_APPLIED_DDL)
            conn.execute("INSERT OR IGNORE INTO raft_applied VALUES (1, 0, 0, 0)")
            self._read_applied()
            self._seen = self.applied_offset
            raft_log = FileLog(self.directory)
            options = {"append_linger_ms": 0, **self._raft_options}
            rc = RaftConfig(
                node_id=self.node_id,
                voters=self.voters,
                cluster_id=self.cluster_id,
                topic_name=DISKLESS_METADATA_TOPIC_NAME,
                topic_id=self.topic_id,
                partition=self.partition,
                **options,
            )
            self._snapshot_bytes_floor = rc.snapshot_max_record_bytes
            now = monotonic_ms()
            store_q = FileQuorumStateStore(self.directory / "quorum-state")
            self.core = RaftCore(rc, raft_log, store_q, self, random.Random(), now,
                                 wall_offset_ms=int(time.time() * 1000) - now)  # fmt: skip
            self.driver = RaftDriver(
                self.core,
                raft_log,
                self.node_id,
                self.voters,
                request_timeout_ms=rc.request_timeout_ms,
                retry_backoff_ms=rc.retry_backoff_ms,
                shutdown_timeout_ms=self._shutdown_timeout_ms,
                client_id=f"diskless-metadata-{self.partition}-{self.node_id}",
                client_security=self._client_security,
                # the leader's fsync waits on the disk while the loop decodes the next commits
                # and applies the last group (1 node, server on one CPU, alternated runs: 761-923
                # -> 1,128-1,153 commits/s)
                thread_flush_alone=True,
                # a snapshot of a large SQLite image is serialized, encoded, written and
                # fsynced off the loop (see snapshot_records)
                background_snapshots=True,
            )
            self.driver.start()
        except BaseException:
            if self.driver is None and raft_log is not None:
                raft_log.close()
            self.driver = None
            await self._close_db()
            raise
        if len(self.voters) == 1 and self.node_id in self.voters:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._leader_event.wait(), self._wait_for_leader)
            task = self._import_task
            if task is not None:  # the import handle_leader_change started: writes wait for it
                await asyncio.wait({task})
            if not self.is_writable:
                log.warning("diskless-metadata-%d: no leader after %.1f s", self.partition,
                            self._wait_for_leader)  # fmt: skip

    async def close(self) -> None:
        driver, self.driver = self.driver, None
        if driver is not None:
            try:
                await driver.stop()
            except Exception:
                log.exception("diskless-metadata-%d: stopping the driver failed", self.partition)
        self._fail_pending(NotCoordinatorError("the coordinator is closing"))
        await self._close_db()

    async def _close_db(self) -> None:
        if self._conn is not None:
            try:
                self.commit_applied()
            except Exception:
                log.exception("diskless-metadata-%d: COMMIT at close failed", self.partition)
            self._conn.close()
            self._conn = None
        if self._store is not None:
            store, self._store = self._store, None
            await store.close()

    def _read_applied(self) -> None:
        assert self._conn is not None
        row = self._conn.execute(
            "SELECT next_offset, epoch, last_time_ms FROM raft_applied WHERE id = 1"
        ).fetchone()
        self.applied_offset, self._applied_epoch, self._last_time = row

    def served_partitions(self, write: bool) -> frozenset[int]:
        """The ``__diskless-metadata`` partitions this coordinator serves
        (``Server.batch_coordinator_partitions``): its partition for reads on any replica, for
        writes only while it is the writable leader; else none."""
        if self.driver is None or (write and not self.is_writable):
            return frozenset()
        return frozenset((self.partition,))

    def loading_partitions(self, write: bool) -> frozenset[int]:
        """The ``__diskless-metadata`` partitions this coordinator will serve but cannot yet
        (``Server.batch_coordinator_loading``; the handlers answer COORDINATOR_LOAD_IN_PROGRESS,
        14, for them, as Kafka's group coordinator does while it loads a partition): its
        partition while the replica is starting, and for writes while it leads but its state
        machine has not applied past the start of its epoch or an import runs
        (:attr:`is_writable` not yet); else none. A failed replica is not loading."""
        if self.failed is not None:
            return frozenset()
        if self.driver is None:
            return frozenset((self.partition,))
        core = self.core
        if write and core is not None and core.is_leader and not self.is_writable:
            return frozenset((self.partition,))
        return frozenset()

    def raft_driver_for(self, key: tuple[Any, int]) -> Any:
        """This replica's driver when ``key`` -- (topic id or topic name, partition) of a Raft
        request -- names its partition, else None (``kafka_rpc.handlers.raft`` routing for the
        server whose ``diskless.coordinator.url`` built this coordinator)."""
        topic, partition = key
        if partition == self.partition and topic in (self.topic_id, DISKLESS_METADATA_TOPIC_NAME):
            return self.driver
        return None

    # ------------------------------------------------------------------ the import
    def _start_import(self) -> None:
        """On becoming the writable leader: when ``import_path`` names a standalone SQLite
        coordinator's file that is still there, hold every write (``is_writable`` false) and run
        :meth:`_import` (once per leadership; another leader that has no file never imports)."""
        source = self._import_path
        if source is None or self._import_task is not None or not source.exists():
            return
        if (self.directory / _LEGACY_IMPORT_MARKER).exists():
            return  # imported by an older version of this code (no raft_imports row)
        self._importing = True
        self._import_task = asyncio.ensure_future(self._import(source))

    async def _import(self, source: Path) -> None:
        """The upgrade from a data directory of the standalone SQLite coordinator (the default
        before the topic-based one): ``source`` (``<log.dirs>/coordinator.db``) is imported into
        this partition through its log, then renamed ``coordinator.db.imported`` (kept, never
        deleted). Runs on the leader, writes held until it ends.

        * The source is opened read-write once (SQLite recovers a WAL the old server left and
          checkpoints it), then its image (``serialize``, the whole database file) is taken.
        * Already imported (the image's SHA-256 is in this partition's ``raft_imports`` table,
          which every replica writes when it applies an import): only the rename is left (a
          crash came between the apply and the rename).
        * This partition holds no batch and no file (an empty partition, or one whose only
          records are topic creations): the image is appended as ``DisklessSnapshotChunkRecord``
          records (in appends of at most 4 MiB) and every replica replaces its state by it once
          the last chunk is committed; :meth:`handle_commit` restarts an import at a chunk of
          position 0 and drops an unfinished one when any other record follows it (its leader
          lost the epoch). Atomic: the state is replaced in one SQLite transaction together with
          the ``raft_imports`` row and the applied offset, or not at all; a crash before that
          leaves the source in place and the partition as it was, so the next leader with the
          file imports again. Idempotent: the ``raft_imports`` row makes a second import of the
          same image a rename only. Every batch keeps its offsets, producer state, object key and
          the files' states (deletion marks included): it is the same database.
        * Otherwise (the partition already has batches or files: two coordinators' states cannot
          be merged, since both may have assigned the same offsets) nothing is imported and the
          file is left where it is, logged as an error.
        Leadership lost meanwhile (``NotCoordinatorError``) or a failure is logged; the file
        stays, and the next time this node leads the import is tried again."""
        try:
            image = await asyncio.to_thread(_read_source_image, source)
            digest = hashlib.sha256(image).hexdigest()
            assert self._conn is not None
            self.commit_applied()
            if not _imported(self._conn, digest):
                if not self._holds_nothing():
                    log.error("diskless-metadata-%d: %s is a standalone SQLite coordinator's "
                              "database, but this partition already holds batches or files; "
                              "two coordinators' states cannot be merged (both may have "
                              "assigned the same offsets), so it is NOT imported and stays "
                              "where it is", self.partition, source)  # fmt: skip
                    return
                if image:
                    records = _chunk_records(image)
                    last = -1
                    for i in range(0, len(records), 16):  # <= 4 MiB per append
                        last = self.driver.append(records[i : i + 16])
                    timeout = self._write_timeout + len(image) / _IMPORT_BYTES_PER_S
                    await self.wait_applied(last + 1, timeout)
                    self.commit_applied()
                    if not _imported(self._conn, digest):
                        raise RuntimeError("the import was applied without its raft_imports row")
            done_path = source.with_name(source.name + IMPORTED_SUFFIX)
            await asyncio.to_thread(_rename_source, source, done_path)
            log.info("diskless-metadata-%d: %s imported (%d bytes, sha256 %s) and renamed %s",
                     self.partition, source, len(image), digest, done_path.name)  # fmt: skip
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - logged; the file stays, retried next leadership
            log.error("diskless-metadata-%d: the import of %s did not complete (%r); the file "
                      "stays and is imported when this node next leads", self.partition, source,
                      e)  # fmt: skip
        finally:
            self._importing = False
            self._import_task = None

    def _holds_nothing(self) -> bool:
        """No batch and no file in the applied state (topics without batches may exist)."""
        assert self._conn is not None
        return bool(self._conn.execute(
            "SELECT NOT EXISTS (SELECT 1 FROM batches) AND NOT EXISTS (SELECT 1 FROM files)"
        ).fetchone()[0])  # fmt: skip

    async def wait_applied(self, offset: int, timeout: float) -> None:
        """Wait until every record below ``offset`` (exclusive) was applied to SQLite; raises
        ``TimeoutError`` after ``timeout`` seconds."""
        if self.applied_offset >= offset:
            return
        fut = asyncio.get_running_loop().create_future()
        self._barriers.append((offset, fut))
        await asyncio.wait_for(fut, timeout)

    # ------------------------------------------------------------------ state
    @property
    def is_leader(self) -> bool:
        """This replica leads its partition (its Raft core is Leader)."""
        return self.core is not None and self.core.is_leader

    @property
    def is_writable(self) -> bool:
        """Leader, and its state machine has applied past the start of its epoch (Kafka's
        ``handleLeaderChange`` for this node), so its answers reflect every committed write."""
        core = self.core
        return (
            core is not None
            and core.is_leader
            and self._leader == (self.node_id, core.epoch)
            and self.driver is not None
            and not self._importing
            and self.failed is None
        )

    @property
    def leader_id(self) -> int:
        """The partition's leader as this replica knows it; -1 when unknown."""
        return self.core.leader_id if self.core is not None else -1

    def leader_of(self, partition: int) -> int:
        """:attr:`leader_id` when ``partition`` is this replica's, else -1 (FindCoordinator asks
        it, as of ``AssignedBatchCoordinator.leader_of``)."""
        return self.leader_id if partition == self.partition else -1

    # ------------------------------------------------------------------ StateMachine
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
                    op = local.pop(offset, None) if local else None
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
                if type(res) is _Failure:
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
                results = _run_ops(conn, work, cache, optimistic=True)
            except _OpFailed:
                cache.drop()
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                for earlier in self._open_work:
                    _run_ops(conn, earlier, cache, optimistic=False)
                results = _run_ops(conn, work, cache, optimistic=False)
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
            src.execute(_APPLIED_DDL)
            src.execute("INSERT OR REPLACE INTO raft_applied VALUES (1, ?, ?, ?)",
                        (end, epoch, last_time))  # fmt: skip
            src.execute(_IMPORTS_DDL)
            src.execute("INSERT OR REPLACE INTO raft_imports VALUES (?, ?, ?)",
                        (hashlib.sha256(image).hexdigest(), len(image), end))  # fmt: skip
            src.commit()

        self._load_image(image, bookkeeping)
        _init_writer(self._conn, self._synchronous, 0)
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

    def snapshot_records(self) -> list[bytes]:
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
        return chunks  # type: ignore[return-value] - a read-only sequence of the records

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

    # ------------------------------------------------------------------ writes
    def _decide_time(self) -> int:
        now = max(self._time_ms(), self._last_time)
        self._last_time = now
        return now

    async def _submit(self, record: bytes, op: tuple | None = None) -> Any:
        """Append ``record`` and wait for its apply; raises NotCoordinatorError when this replica
        does not lead or loses the epoch first, TimeoutError after ``write_timeout_ms``. ``op``:
        the record's ``(operation, args, time)``, applied as is instead of decoding ``record``."""
        from kafka_rpc.raft.core import NotLeaderError

        if not self.is_writable:
            raise NotCoordinatorError(f"node {self.node_id} is not the leader")
        try:
            offset = self.driver.append([record])
        except NotLeaderError as exc:
            raise NotCoordinatorError(str(exc)) from None
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending[offset] = fut
        if op is not None:
            self._local[offset] = op
        timer = loop.call_later(self._write_timeout, _expire, fut, offset, self._write_timeout)
        try:
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(offset, None)
            self._local.pop(offset, None)

    async def create_topic_and_partitions(
        self, requests: Sequence[CreateTopicAndPartitionsRequest]
    ) -> list[int]:
        if not requests:
            return []
        if not self.is_writable:
            return [NOT_COORDINATOR] * len(requests)
        rec = _CreateRec(
            timestamp_ms=self._decide_time(),
            topics=tuple(
                _CreateTopic(topic_id=r.topic_id, topic_name=r.topic_name,
                             num_partitions=r.num_partitions)
                for r in requests
            ),
        )  # fmt: skip
        try:
            return await self._submit(codec.encode_record(rec))
        except NotCoordinatorError:
            return [NOT_COORDINATOR] * len(requests)

    async def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        if not requests:
            return []
        not_coord = [CommitBatchResponse(NOT_COORDINATOR)] * len(requests)
        if not self.is_writable:
            return not_coord
        now = self._decide_time()
        reqs = list(requests)
        rec = _commit_record(object_key, uploader_broker_id, file_size, reqs, now)
        op = (self._ops.commit_file, (object_key, uploader_broker_id, file_size, reqs), now)
        try:
            return await self._submit(rec, op)
        except NotCoordinatorError:
            return not_coord

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        if not requests:
            return []
        not_coord = [DeleteRecordsResponse(NOT_COORDINATOR, -1)] * len(requests)
        if not self.is_writable:
            return not_coord
        rec = _DelRecordsRec(
            timestamp_ms=self._decide_time(),
            entries=tuple(
                _DelRecordsEntry(topic_id=r.topic_id_partition.topic_id,
                                 partition=r.topic_id_partition.partition, offset=r.offset)
                for r in requests
            ),
        )  # fmt: skip
        try:
            return await self._submit(codec.encode_record(rec))
        except NotCoordinatorError:
            return not_coord

    async def delete_topics(self, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        if not topic_ids:
            return []
        if not self.is_writable:
            return [NOT_COORDINATOR] * len(topic_ids)
        rec = _DelTopicsRec(timestamp_ms=self._decide_time(), topic_ids=tuple(topic_ids))
        try:
            return await self._submit(codec.encode_record(rec))
        except NotCoordinatorError:
            return [NOT_COORDINATOR] * len(topic_ids)

    async def delete_files(self, object_keys: Sequence[str]) -> list[int]:
        if not object_keys:
            return []
        if not self.is_writable:
            return [NOT_COORDINATOR] * len(object_keys)
        rec = _DelFilesRec(timestamp_ms=self._decide_time(), object_keys=tuple(object_keys))
        try:
            return await self._submit(codec.encode_record(rec))
        except NotCoordinatorError:
            return [NOT_COORDINATOR] * len(object_keys)

    async def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], max_batches_per_request: int = 0
    ) -> list[EnforceRetentionResponse]:
        if not requests:
            return []
        not_coord = [EnforceRetentionResponse(NOT_COORDINATOR, -1, -1, -1)] * len(requests)
        if not self.is_writable:
            return not_coord
        rec = _RetentionRec(
            timestamp_ms=self._decide_time(),
            max_batches_per_request=max_batches_per_request,
            entries=tuple(
                _RetentionEntry(topic_id=r.topic_id_partition.topic_id,
                                partition=r.topic_id_partition.partition,
                                retention_bytes=r.retention_bytes,
                                retention_ms=r.retention_ms)
                for r in requests
            ),
        )  # fmt: skip
        try:
            return await self._submit(codec.encode_record(rec))
        except NotCoordinatorError:
            return not_coord

    async def is_safe_to_delete_file(self, object_key: str) -> bool:
        """The leader's answer once every write appended before the call was applied; raises
        :class:`NotCoordinatorError` on a follower."""
        if not self.is_writable:
            raise NotCoordinatorError(f"node {self.node_id} is not the leader")
        await self.wait_applied(self.core.next_offset, self._write_timeout)
        assert self._conn is not None
        self.commit_applied()
        return self._ops.is_safe_to_delete_file(self._conn, object_key)

    # ------------------------------------------------------------------ reads
    def _reads(self) -> SqliteBatchCoordinator:
        """The reads' store, once what was applied is committed (its connections see only
        committed transactions)."""
        if self._store is None:
            raise RuntimeError("coordinator not started (await start() first)")
        self.commit_applied()
        return self._store

    async def find_batches(
        self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        return await self._reads().find_batches(requests, fetch_max_bytes)

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        return await self._reads().list_offsets(requests)

    async def list_partitions(self) -> list[TopicIdPartition]:
        return await self._reads().list_partitions()

    async def get_files_to_delete(
        self,
        marked_before_ms: int | None = None,
        limit: int = 0,
        after_object_key: str | None = None,
    ) -> list[FileToDelete]:
        return await self._reads().get_files_to_delete(marked_before_ms, limit, after_object_key)

    async def file_states(self, object_keys: Sequence[str]) -> dict[str, str]:
        """``object key -> state`` (``'uploaded'`` or ``'deleting'``) of those ``object_keys``
        that this replica's applied state has a ``files`` row of (no row: not in the dict). A
        follower's state may lag its leader's. Read on a worker thread over a read-only
        connection (the file is in WAL mode, so it does not block the apply)."""
        self.commit_applied()
        return await asyncio.to_thread(_file_states, self.db_path, list(object_keys))

    # ------------------------------------------------------------------ tests and tools
    def state_rows(self) -> dict[str, list[tuple]]:
        """Every row of every table of the materialized state, sorted (for comparing replicas
        row by row); ``schema_version`` included."""
        assert self._conn is not None
        self.commit_applied()
        out: dict[str, list[tuple]] = {}
        names = [r[0] for r in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]  # fmt: skip
        for name in names:
            rows = self._conn.execute(f'SELECT * FROM "{name}"').fetchall()
            out[name] = sorted(rows, key=repr)
        return out


def _file_states(db_path: Path, keys: list[str]) -> dict[str, str]:
    """(Worker thread.) :meth:`ReplicatedBatchCoordinator.file_states` over a read-only
    connection to ``db_path``, 500 keys per query."""
    out: dict[str, str] = {}
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5.0)
    try:
        for i in range(0, len(keys), 500):
            part = keys[i : i + 500]
            marks = ",".join("?" * len(part))
            q = f"SELECT object_key, state FROM files WHERE object_key IN ({marks})"
            out.update(conn.execute(q, part).fetchall())
    finally:
        conn.close()
    return out


def _expire(fut: asyncio.Future, offset: int, timeout: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"record {offset} not applied within {timeout} s"))
