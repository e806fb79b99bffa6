"""The replicated Batch Coordinator: one ``__diskless-metadata`` partition on Raft.

KIP-1164 "Batch Coordinator implemented with an internal topic" (docs/batch-coordinator.md): the
state of a Batch Coordinator is a log. Each ``__diskless-metadata`` partition is a Raft group among
its replicas, run by the same module as the metadata log (``kafka_rpc.raft``: a
:class:`~kafka_rpc.raft.core.RaftCore` on a :class:`~kafka_rpc.raft.file_log.FileLog` in
``<log dir>/__diskless-metadata-<p>/``, driven by a :class:`~kafka_rpc.raft.driver.RaftDriver`,
the partition named by its topic id in every Raft RPC, ``partition.metadata`` beside the log as
for the metadata log, opened by :func:`kafka_rpc.raft.replica.open_raft_replica`).

This module is the lifecycle, the read and write API and the import; the Raft state machine (the
apply, snapshots, leader changes) is :mod:`kafka_rpc.coordinator.replicated_state`'s.

* **Writes** (``create_topic_and_partitions``, ``commit_file``, ``delete_records``,
  ``delete_topics``, ``delete_files``, ``enforce_retention``) are decided by the Raft leader: it
  reads its clock once (ms, never below the last recorded time) and appends the call and that time
  as ONE record of our own family (``message_specs/Diskless*Record.json``, types 10200-10205). The
  caller is answered once the record is committed and applied, with the result of the leader's
  own apply. Concurrent writes share one Raft batch and one fsync of the log (``append.linger.ms``
  0: every append made before the driver's next poll goes into one batch).
* **Apply** (every replica, leader included): committed records are applied to the replica's own
  SQLite file (``coordinator.db`` in the partition directory) by
  :mod:`kafka_rpc.coordinator.sqlite`'s own operations (``SqliteOps``) with the clock fixed to the
  recorded time, so offsets, idempotence answers, deletions and object/file ids come out the same
  on every replica. The applied records and the applied offset (table ``raft_applied``) go into
  one SQLite transaction, committed every ``apply_commit_records`` records (64),
  ``apply_commit_ms`` (100) after it opened, and before any read of the file through another
  connection (``ReplicatedStateMachine._apply_open``), so a restart re-applies only the
  tail after the last COMMIT. A record whose operation raises is rolled back alone, identically
  on every replica. The log carries durability, so SQLite runs with ``synchronous=NORMAL`` by
  default: a power loss may cost it its last transactions, which the log replays (``OFF`` is
  allowed, but a power loss may then corrupt the file; deleted, it is rebuilt from the latest
  snapshot and the log). The leader fsyncs the log on the driver's fsync thread even as the only
  voter (``RaftDriver(thread_flush_alone=True)``), so its loop decodes and applies meanwhile.
* **Reads** (``find_batches``, ``list_offsets``, ``list_partitions``, ``get_files_to_delete``)
  answer from the local SQLite on every replica (KIP-1164's read-only coordinators: any replica):
  never ahead of the committed log, since only committed records are applied.
  ``is_safe_to_delete_file`` is answered by the leader only, after every write appended before it
  was applied (a follower might not have seen a commit yet).
* **Not the leader**: a write answers NOT_COORDINATOR (16) per entry (create/delete codes,
  ``CommitBatchResponse``/``DeleteRecordsResponse``/``EnforceRetentionResponse`` with error 16);
  so does a write whose leader lost its epoch before the record committed (it may still commit:
  an idempotent producer's retry is then answered IsDuplicate with the original offsets).
  ``is_safe_to_delete_file`` raises ``kafka_rpc.coordinator.errors.NotCoordinatorError``.
* **Snapshots** (KIP-1164 future work "Diskless Metadata Snapshots", KIP-630 mechanics): the Raft
  snapshot of this log is the SQLite image (``sqlite3.Connection.serialize``) cut into
  ``DisklessSnapshotChunkRecord`` records; a follower that fetched one with FetchSnapshot (or a
  restarting replica whose state is older than its latest snapshot) loads it with the SQLite backup
  API into its database. The byte trigger grows with the image (:meth:`snapshot_records`:
  ``SNAPSHOT_LOG_PER_IMAGE`` times the image).

* **Voters**: static ``voters`` (the replicas at the listener their Raft RPCs reach), or, with
  ``membership``, a dynamic group (kraft.version 1) whose voter set is in its own log
  (:mod:`kafka_rpc.coordinator.membership`); ``kafka_rpc.handlers.raft`` routes the RPCs naming
  this partition's topic id (or name, for the versions without one) to this replica's driver, on
  the controller listener and (unadvertised) on the broker listener.
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
import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kafka_rpc._frozen import frozen_constructor
from kafka_rpc.protocol import codec

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
)
from .errors import NOT_COORDINATOR, NotCoordinatorError
from .membership import KRAFT_VERSIONS, Membership, prepare_directory
from .memory import wall_clock_ms
from .replicated_state import (
    APPLIED_DDL,
    ApplyCache,
    FixedClock,
    ReplicatedStateMachine,
    chunk_records,
    image_of,
)
from .sqlite import SqliteBatchCoordinator, SqliteOps, init_writer

__all__ = [
    "DISKLESS_METADATA_TOPIC_NAME",
    "ReplicatedBatchCoordinator",
    "partition_dir_name",
]

log = logging.getLogger("kafka_rpc.coordinator.replicated")

DISKLESS_METADATA_TOPIC_NAME = "__diskless-metadata"
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
    server left behind), checkpointed, serialized (:func:`image_of`), closed."""
    conn = sqlite3.connect(str(source), timeout=10.0)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"logs", "files"} <= tables:
            raise ValueError(f"{source} is not a SQLite Batch Coordinator's database")
        has_data = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM logs) OR EXISTS (SELECT 1 FROM files)"
        ).fetchone()[0]
        return bytes(image_of(conn)) if has_data else b""
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


def _write_marker(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` durably (temp file, fsync, rename)."""
    from kafka_rpc.storage.partition_metadata import atomic_write

    atomic_write(path, text)


# -- the coordinator ---------------------------------------------------------------------------


class ReplicatedBatchCoordinator(ReplicatedStateMachine, BatchCoordinator):
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
    * ``membership``: start a dynamic group (:mod:`~kafka_rpc.coordinator.membership`;
      :attr:`dynamic` says whether it is); None: static ``voters``.
    * ``resolve_address``: node id -> where its Raft RPCs go now (the driver asks it before the
      voter set's recorded endpoints); None: the voter set's.
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
        membership: Membership | None = None,
        resolve_address: Callable[[int], tuple[str, int] | None] | None = None,
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
        self.membership = membership
        self._resolve_address = resolve_address
        #: the group's voters live in its log (kraft.version 1) and follow the assignment
        #: (set by :meth:`start`, :func:`~kafka_rpc.coordinator.membership.prepare_directory`)
        self.dynamic = False
        self._clock = FixedClock()
        self._ops = SqliteOps(self._clock, producer_id_expiration_ms)
        self._cache = ApplyCache(self._ops)
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
        from kafka_rpc.raft.core import RaftConfig
        from kafka_rpc.raft.replica import open_raft_replica
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
        try:
            conn = sqlite3.connect(
                str(self.db_path), isolation_level=None, cached_statements=256,
                check_same_thread=False,
            )  # fmt: skip
            self._conn = conn
            init_writer(conn, self._synchronous, 0)
            conn.execute(APPLIED_DDL)
            conn.execute("INSERT OR IGNORE INTO raft_applied VALUES (1, 0, 0, 0)")
            self._read_applied()
            self._seen = self.applied_offset
            options = {"append_linger_ms": 0, **self._raft_options}
            voters = self.voters
            m = self.membership
            if m is not None and prepare_directory(self.directory, m, self._time_ms()):
                self.dynamic = True
                voters = {}  # the voter set is the log's (the bootstrap checkpoint, then records)
                options.update(
                    directory_id=m.directory_id,
                    listener_name=m.listener_name,
                    bootstrap_servers=m.bootstrap_servers,
                    kraft_version_supported=KRAFT_VERSIONS,
                )
            rc = RaftConfig(
                node_id=self.node_id,
                voters=voters,
                cluster_id=self.cluster_id,
                topic_name=DISKLESS_METADATA_TOPIC_NAME,
                topic_id=self.topic_id,
                partition=self.partition,
                **options,
            )
            self._snapshot_bytes_floor = rc.snapshot_max_record_bytes
            replica = open_raft_replica(
                self.directory,
                rc,
                self,
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
                # the peers are kafka-rpc nodes: on the inter-broker listener they serve the
                # replication RPCs without listing them in ApiVersions, as a Kafka broker would
                unadvertised_raft_rpcs=True,
                resolve_address=self._resolve_address,
            )
            self.core, self.driver = replica.core, replica.driver
            self.driver.start()
        except BaseException:
            self.driver = None
            await self._close_db()
            raise
        alone = set(self.core.voters) == {self.node_id} if self.dynamic else (
            len(self.voters) == 1 and self.node_id in self.voters
        )
        if alone:  # a single voter elects itself: wait for it (and any import)
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
                    records = chunk_records(image)
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
