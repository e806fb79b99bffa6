"""What a node does when its committed metadata image changes (Kafka's ``MetadataPublisher``, as
``BrokerMetadataPublisher`` implements it for a broker; Inkless's control-plane calls).

:class:`BrokerMetadataPublisher` is registered in ``QuorumController.publishers``: the controller
calls it with ``(old image, new image)`` on the event loop after every change of its committed
image (``handle_commit``, ``handle_load_snapshot``) and knows nothing else of it. The callback only
computes what changed and queues it; one background task does the work, serialized, so the Raft
loop never waits for SQLite or the disk:

1. **Diskless topics into the Batch Coordinator** (Inkless ``ControllerApis`` ->
   ``ControlPlane.createTopicAndPartitions``): a topic that appears with the topic config
   ``diskless.enable=true``, or that gains partitions, gets ``create_topic_and_partitions(id,
   name, partition count)`` (idempotent: existing partitions are left as they are). Until that
   call has run, a commit to the new topic answers UNKNOWN_TOPIC_OR_PARTITION, which Kafka clients
   retry.
2. **Deleted topic ids are garbage-collected** (KIP-516 immediate delete, docs/architecture.md): an
   id that was in the old image and is not in the new one goes to ``delete_topics([...])`` (its
   batches go; an object left without batches is marked for deletion, and the existing file
   deletion path removes it), and every partition directory under the node's log directories whose
   ``partition.metadata`` names it is removed (Kafka ``LogManager.asyncDelete``: renamed to
   ``<topic>-<partition>.<32 hex>-delete``, then deleted).
3. **Full reconcile once the node has caught up** (Kafka: ``BrokerMetadataPublisher``'s first
   publish after the loader caught up, ``LogManager.findStrayReplicas``): once the image holds this
   node's own broker registration with this process's incarnation id (that RegisterBrokerRecord was
   written after the process started, so every record committed before the start has been
   replayed; a half-replayed image would make live topics look deleted), and again in no other
   case:

   * every partition directory whose ``partition.metadata`` names an id the image does not have is
     removed (the metadata log's ``__cluster_metadata-0``, with the sentinel metadata topic id, is
     always kept), and leftover ``-delete`` directories are removed;
   * every diskless topic of the image missing (or short of partitions) in the coordinator is
     created;
   * every id in the **mirror file** that the image does not have is deleted from the coordinator.

**Which coordinator topics the publisher deletes.** The coordinator also holds topics that never
were in the image: the load pipeline (``bench/diskless_load.py``) and other brokers create them
with the InitDisklessTopics RPC, our inter-broker API that works without the controller. So "delete
every coordinator topic the image does not have" would destroy them. The rule: the publisher
deletes only ids *this node saw in its image and then saw gone* (case 2), and ids it *itself
created in the coordinator* that the caught-up image no longer has (case 3). The second set is
kept durable in the mirror file (``<log.dirs[0]>/diskless-topics.mirror``: ``version: 0`` then one
``topic_id: <Kafka Uuid>`` line per id; an id is added before the coordinator creates it and
removed after the coordinator deleted it), so a delete that the node missed (it was down when the
topic was deleted and loaded a snapshot that no longer has it; it crashed after the
RemoveTopicRecord committed but before the coordinator call ran) is still collected at the next
start. An id that is neither in the image nor in the mirror file is left alone (logged at
start-up with its count).

**Failures** never reach the controller or crash the node: a failing round (coordinator error,
I/O error) is logged and retried, whole (every step is idempotent), with exponential backoff from
``retry_backoff_ms`` to ``retry_backoff_max_ms``, at most ``max_attempts`` times; then its work
waits for the next change of the image (or the next start-up's reconcile) and the publisher goes
on. Directories without ``partition.metadata`` and unreadable ones are never removed (logged once
per directory), nor is any directory of the Batch Coordinator: a ``__diskless-metadata-<p>``
directory whatever id it names (a static ``raft://`` URL's partition, or a replica whose
``__diskless-metadata`` topic id changed), and one that is, or holds, a path the node's
coordinator keeps its state in (:func:`coordinator_paths`: a ``raft://`` URL's partition
directory, a ``sqlite://`` URL's database file).

**The topic-based coordinator** (``served_partitions``, the default): a node that leads no
``__diskless-metadata`` partition (its replicas are starting, follow, or it has none) does none
of the coordinator's side, which is left to the leaders; a replica that stops leading between
two steps answers a create NOT_COORDINATOR, also left to the leader; COORDINATOR_NOT_AVAILABLE
fails the round, which is retried; and the image after which this node gains the write side of
a coordinator partition queues a full reconcile, so the new leader creates whatever its
predecessor did not (also after an import replaced its state).

**Lifecycle**: :meth:`BrokerMetadataPublisher.start` registers the callback and publishes the
controller's current image as the first one (a snapshot the Raft core loaded while it was
constructed included); :meth:`BrokerMetadataPublisher.stop` unregisters it and cancels the task;
the node stops the publisher before it closes the coordinator.
Work not done at a stop is found again by the next start-up's reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from kafka_rpc.controller.image import DISKLESS_ENABLE_CONFIG, EMPTY, MetadataImage, TopicImage
from kafka_rpc.coordinator.api import BatchCoordinator, CreateTopicAndPartitionsRequest, Errors
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.uuids import parse_uuid_text, uuid_text
from kafka_rpc.raft.api import METADATA_TOPIC_ID
from kafka_rpc.storage import partition_metadata as pm
from kafka_rpc.storage.durable import fsync_dir

__all__ = [
    "DISKLESS_ENABLE",
    "MIRROR_FILE_NAME",
    "BrokerMetadataPublisher",
    "MirrorFile",
    "caught_up_when_registered",
    "coordinator_paths",
    "diskless_topics",
    "is_diskless",
    "partition_count",
]

log = logging.getLogger("kafka_rpc.broker.metadata_publisher")

DISKLESS_ENABLE = DISKLESS_ENABLE_CONFIG
"""The topic config that makes a topic diskless (Inkless ``TopicConfig.DISKLESS_ENABLE_CONFIG``)."""
MIRROR_FILE_NAME = "diskless-topics.mirror"
"""The file, in the first log directory, of the topic ids this node created in the coordinator."""

# Kafka UnifiedLog.parseTopicPartitionName: "<topic>-<partition>"; the deletion form is
# "<topic>-<partition>.<uuid without dashes>-delete" (UnifiedLog.logDeleteDirName).
_PARTITION_DIR = re.compile(r"(.+)-(0|[1-9][0-9]*)")
_DELETE_DIR = re.compile(r"(.+)-([0-9]+)\.[0-9a-f]{32}-delete")
# A replicated Batch Coordinator's partition (kafka_rpc.coordinator.replicated.partition_dir_name)
_COORDINATOR_DIR = re.compile(r"__diskless-metadata-(0|[1-9][0-9]*)")


# ============================================================================ image queries
def is_diskless(image: MetadataImage, topic: TopicImage) -> bool:
    """``diskless.enable`` is ``true`` (any case, as Kafka parses booleans) among the topic's
    configs in ``image``."""
    return image.is_diskless(topic.name)


def partition_count(topic: TopicImage) -> int:
    """Partitions ``0 .. n - 1`` the coordinator must hold for ``topic``: its highest partition
    index + 1 (0 without partitions)."""
    return max(topic.partitions.keys(), default=-1) + 1


def diskless_topics(image: MetadataImage) -> dict[UUID, tuple[str, int]]:
    """Every diskless topic of ``image``: topic id -> (name, partition count)."""
    return {
        tid: (t.name, partition_count(t))
        for tid, t in image.topics.items()
        if is_diskless(image, t)
    }


def caught_up_when_registered(
    node_id: int, incarnation_id: Callable[[], UUID | None]
) -> Callable[[MetadataImage], bool]:
    """The catch-up test of a broker-role node: ``image`` holds broker ``node_id`` registered with
    this process's incarnation id (``incarnation_id()``, None before the broker lifecycle exists),
    i.e. it has replayed the RegisterBrokerRecord this process caused, so every record committed
    before the process started (Kafka ``BrokerLifecycleManager``'s initial catch-up: metadata
    offset >= the registration's broker epoch)."""

    def caught_up(image: MetadataImage) -> bool:
        reg = image.brokers.get(node_id)
        inc = incarnation_id()
        return reg is not None and inc is not None and reg.incarnation_id == inc

    return caught_up


# ============================================================================ the mirror file
class MirrorFile:
    """The set of topic ids this node created in the coordinator, kept in ``path``:
    ``version: 0`` then one ``topic_id: <Kafka Uuid.toString>`` line per id (sorted), written
    atomically (temp file, fsync, rename). A missing file is the empty set; a malformed one is
    logged and read as the empty set (its ids can then no longer be garbage-collected, but nothing
    is deleted by mistake). Methods do blocking I/O: call them off the event loop."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.ids: set[UUID] = set()

    def load(self) -> set[UUID]:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            self.ids = set()
            return self.ids
        ids: set[UUID] = set()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:
            if not lines or lines[0] != "version: 0":
                raise ValueError(f"first line {lines[0] if lines else None!r}, not 'version: 0'")
            for ln in lines[1:]:
                key, sep, value = ln.partition(": ")
                if key != "topic_id" or not sep:
                    raise ValueError(f"malformed line {ln!r}")
                ids.add(parse_uuid_text(value))
        except ValueError as e:
            log.error("%s is malformed (%s); starting from an empty set", self.path, e)
            ids = set()
        self.ids = ids
        return ids

    def _save(self, ids: set[UUID]) -> None:
        body = "".join(f"topic_id: {uuid_text(i)}\n" for i in sorted(ids))
        pm.atomic_write(self.path, "version: 0\n" + body)
        self.ids = ids

    def add(self, ids: Iterable[UUID]) -> None:
        new = self.ids | set(ids)
        if new != self.ids:
            self._save(new)

    def discard(self, ids: Iterable[UUID]) -> None:
        new = self.ids - set(ids)
        if new != self.ids:
            self._save(new)


# ============================================================================ partition directories
def _partition_dirs(log_dirs: Sequence[Path]) -> list[Path]:
    out = []
    for root in log_dirs:
        try:
            entries = sorted(root.iterdir())
        except FileNotFoundError:
            continue
        out += [
            p
            for p in entries
            if _PARTITION_DIR.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
        ]
    return out


def coordinator_paths(coordinator: Any) -> list[Path]:
    """The files and directories, resolved, that ``coordinator`` (the node's Batch Coordinator
    as ``diskless.coordinator.url`` built it, or None) keeps its state in: a replicated
    coordinator's log dir and partition directory (``log_dir``, ``directory``; an
    ``AssignedBatchCoordinator``'s ``log_dir`` and each running replica's), a SQLite
    coordinator's database file (``path``). Others (memory, PostgreSQL) keep none here."""
    if coordinator is None:
        return []
    found: list[Any] = [getattr(coordinator, "log_dir", None),
                        getattr(coordinator, "directory", None)]  # fmt: skip
    replicas = getattr(coordinator, "replicas_running", None)
    if isinstance(replicas, dict):
        found += [getattr(r, "directory", None) for r in replicas.values()]
    path = getattr(coordinator, "path", None)
    if isinstance(path, str) and path and path != ":memory:" and not path.startswith("file:"):
        found.append(path)
    out = []
    for p in found:
        if isinstance(p, str | os.PathLike):
            with contextlib.suppress(OSError, RuntimeError):
                out.append(Path(p).resolve())
    return out


def _kept_for_coordinator(path: Path, kept: Sequence[Path]) -> str | None:
    """Why partition directory ``path`` is never removed for the Batch Coordinator, or None:
    it is a ``__diskless-metadata-<p>`` directory (a replicated coordinator's Raft partition and
    its SQLite state: a replica moved away keeps it, and a topic id the image lacks there is a
    static ``raft://`` URL's or an earlier ``__diskless-metadata`` topic's, never a deleted
    user topic's), or it is, or holds, one of ``kept`` (:func:`coordinator_paths`)."""
    if _COORDINATOR_DIR.fullmatch(path.name):
        return "a Batch Coordinator partition's directory"
    if kept:
        with contextlib.suppress(OSError, RuntimeError):
            real = path.resolve()
            for k in kept:
                if k == real or real in k.parents:
                    return f"the Batch Coordinator keeps its state there ({k})"
    return None


def delete_partition_dir(path: Path) -> Path:
    """Kafka ``LogManager.asyncDelete``: rename ``path`` to ``<name>.<uuid hex>-delete`` (atomic:
    the partition is gone at once, a crash leaves a ``-delete`` directory that the next reconcile
    removes), fsync the parent, then delete the tree. Returns the renamed path."""
    doomed = path.with_name(f"{path.name}.{uuid.uuid4().hex}-delete")
    os.rename(path, doomed)
    with contextlib.suppress(OSError):
        fsync_dir(path.parent)
    shutil.rmtree(doomed)
    return doomed


# ============================================================================ the publisher
@dataclass
class _Work:
    deletes: set[UUID] = field(default_factory=set)
    creates: dict[UUID, tuple[str, int]] = field(default_factory=dict)
    reconcile: bool = False

    def __bool__(self) -> bool:
        return bool(self.deletes or self.creates or self.reconcile)

    def merge_older(self, older: _Work) -> None:
        """Take back the work of a round that gave up; what is queued now is newer."""
        self.deletes |= older.deletes
        for tid, v in older.creates.items():
            self.creates.setdefault(tid, v)
        self.reconcile = self.reconcile or older.reconcile


class BrokerMetadataPublisher:
    """See the module docstring.

    ``coordinator``: the node's Batch Coordinator (None on a node without the broker role: only
    partition directories are collected). ``log_dirs``: the directories whose
    ``<topic>-<partition>`` subdirectories belong to this node (``log.dirs`` and
    ``metadata.log.dir``). ``mirror_file``: where the set of ids this node created in the
    coordinator is kept (None: not kept, so only case 2 deletes). ``caught_up(image)``: True once
    ``image`` has replayed everything committed before this process started (see
    :func:`caught_up_when_registered`); the full reconcile runs the first time it holds.
    Retries: ``retry_backoff_ms`` doubling up to ``retry_backoff_max_ms`` (ms), ``max_attempts``
    per round."""

    def __init__(
        self,
        coordinator: BatchCoordinator | None,
        log_dirs: Sequence[Path | str],
        *,
        mirror_file: Path | str | None = None,
        caught_up: Callable[[MetadataImage], bool] = lambda image: False,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 5000,
        max_attempts: int = 8,
    ) -> None:
        self.coordinator = coordinator
        self.log_dirs = [Path(d) for d in log_dirs]
        self.mirror = MirrorFile(mirror_file) if mirror_file is not None else None
        self.caught_up = caught_up
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.max_attempts = max(1, max_attempts)
        #: the latest image published to this publisher
        self.image: MetadataImage = EMPTY
        #: True once the full reconcile has been queued (the node caught up)
        self.is_caught_up = False
        #: rounds done, attempts that failed, rounds given up (for tests and logs)
        self.rounds = 0
        self.failed_attempts = 0
        self.rounds_given_up = 0
        self._pending = _Work()
        self._controller: Any = None
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._reported: set[Path] = set()  # directories already logged as left alone
        #: the coordinator partitions this node could write when the last image came (a
        #: coordinator with ``served_partitions``: the replicated one); gaining one reconciles
        self._writable: frozenset[int] = frozenset()

    # ------------------------------------------------------------------ lifecycle
    def start(self, controller: Any) -> None:
        """Register with ``controller.publishers`` (a ``QuorumController``), start the task and
        publish ``controller.image`` as the first image."""
        if self._task is not None:
            return
        if self.mirror is not None:
            self.mirror.load()  # a few lines; at start-up, before anything runs
        self._task = asyncio.ensure_future(self._run())
        self._controller = controller
        controller.publishers.append(self.on_metadata_update)
        self.on_metadata_update(EMPTY, controller.image)

    async def stop(self) -> None:
        """Unregister and cancel the task (its coroutine is awaited, so nothing runs on the
        coordinator afterwards). Idempotent."""
        controller, self._controller = self._controller, None
        if controller is not None:
            with contextlib.suppress(ValueError):
                controller.publishers.remove(self.on_metadata_update)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._idle.set()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wait_idle(self) -> None:
        """Until the task has nothing queued it can do now (done, or given up until the next
        image change)."""
        while self.running and (not self._idle.is_set() or self._wake.is_set()):
            await self._idle.wait()
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ the callback
    def on_metadata_update(self, old: MetadataImage, new: MetadataImage) -> None:
        """The ``QuorumController`` publisher callback (event loop, synchronous): queue what
        changed from ``old`` to ``new``; never raises."""
        try:
            self._queue(old, new)
        except Exception:
            log.exception("metadata publisher: cannot queue the change to offset %d",
                          new.last_offset)  # fmt: skip

    def _queue(self, old: MetadataImage, new: MetadataImage) -> None:
        self.image = new
        work = self._pending
        changed = False
        if old.topics is not new.topics or old.configs is not new.configs:
            for tid in old.topics:
                if tid not in new.topics:
                    work.deletes.add(tid)
                    work.creates.pop(tid, None)
                    changed = True
            same_configs = old.configs is new.configs
            old_topics = old.topics
            for tid, t in new.topics.items():
                was = old_topics.get(tid)
                if was is t and same_configs:
                    continue  # unchanged (the common case: O(1) per topic, no config lookups)
                if not is_diskless(new, t):
                    continue
                n = partition_count(t)
                if was is not None and is_diskless(old, was) and partition_count(was) >= n:
                    continue
                work.creates[tid] = (t.name, n)
                changed = True
        if not self.is_caught_up and self.caught_up(new):
            self.is_caught_up = True
            work.reconcile = changed = True
        served = getattr(self.coordinator, "served_partitions", None)
        if served is not None:
            writable = served(True)
            if self.is_caught_up and not writable <= self._writable:
                # this node just became a coordinator leader: topics that others skipped, or
                # that it could not create before, are created now
                work.reconcile = changed = True
            self._writable = writable
        if changed and self._task is not None:
            self._idle.clear()
            self._wake.set()

    # ------------------------------------------------------------------ the task
    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            work, self._pending = self._pending, _Work()
            if work and not await self._round(work):
                self._pending.merge_older(work)  # waits for the next change, see the docstring
            if not self._wake.is_set():
                self._idle.set()

    async def _round(self, work: _Work) -> bool:
        backoff_ms = self.retry_backoff_ms
        for attempt in range(1, self.max_attempts + 1):
            try:
                await self._apply(work)
                self.rounds += 1
                return True
            except Exception as e:  # logged and retried; never crashes the node
                self.failed_attempts += 1
                if attempt == self.max_attempts:
                    self.rounds_given_up += 1
                    log.error("metadata publisher: giving up after %d attempts; retried on the "
                              "next metadata change", attempt, exc_info=e)  # fmt: skip
                    return False
                log.warning("metadata publisher: attempt %d/%d failed (%r); retrying in %d ms",
                            attempt, self.max_attempts, e, backoff_ms)  # fmt: skip
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(backoff_ms * 2, self.retry_backoff_max_ms)
        return False  # pragma: no cover - the loop returns

    async def _apply(self, work: _Work) -> None:
        if work.deletes:
            await self._delete_topics(sorted(work.deletes))
            gone = frozenset(work.deletes)
            await asyncio.to_thread(
                self._remove_dirs,
                lambda tid: tid in gone,
                False,
                coordinator_paths(self.coordinator),
            )
        image = self.image  # the latest: a topic deleted meanwhile is not created
        creates = {tid: v for tid, v in work.creates.items() if tid in image.topics}
        if creates:
            await self._create_topics(creates)
        if work.reconcile:
            await self._reconcile(image)

    def _coordinator_writable(self) -> bool:
        """The coordinator can take writes here: a local one, or a replicated one that leads a
        ``__diskless-metadata`` partition on this node (``served_partitions(True)``). A node
        that leads none leaves the coordinator's side of every change to the leaders (each
        leader's publisher does it, and a node that becomes a leader reconciles, see
        :meth:`_queue`), so it does not fail rounds while its replicas start."""
        if self.coordinator is None:
            return False
        served = getattr(self.coordinator, "served_partitions", None)
        return served is None or bool(served(True))

    async def _delete_topics(self, ids: list[UUID]) -> None:
        if not self._coordinator_writable():
            return
        assert self.coordinator is not None  # _coordinator_writable: there is one
        codes = await self.coordinator.delete_topics(ids)
        for tid, code in zip(ids, codes, strict=True):
            if code == Errors.NONE:
                log.info("metadata publisher: deleted topic id %s from the Batch Coordinator",
                         uuid_text(tid))  # fmt: skip
        if self.mirror is not None:
            await asyncio.to_thread(self.mirror.discard, ids)

    async def _create_topics(self, creates: dict[UUID, tuple[str, int]]) -> None:
        if not self._coordinator_writable():
            return
        assert self.coordinator is not None  # _coordinator_writable: there is one
        if self.mirror is not None:  # before the coordinator has it: see the docstring
            await asyncio.to_thread(self.mirror.add, creates)
        reqs = [CreateTopicAndPartitionsRequest(tid, name, n)
                for tid, (name, n) in sorted(creates.items())]  # fmt: skip
        codes = await self.coordinator.create_topic_and_partitions(reqs)
        unavailable = 0
        for req, code in zip(reqs, codes, strict=True):
            if code == Errors.NONE:
                log.info("metadata publisher: diskless topic %s (%s) has partitions 0..%d in the "
                         "Batch Coordinator", req.topic_name, uuid_text(req.topic_id),
                         req.num_partitions - 1)  # fmt: skip
            elif code == ErrorCode.NOT_COORDINATOR:
                # a replica that does not lead its coordinator partition: the leader creates
                # the topic (and reconciles when it becomes the leader, see _queue)
                log.debug("metadata publisher: topic %s left to the coordinator leader",
                          req.topic_name)  # fmt: skip
            elif code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                unavailable += 1
            else:  # not transient (zero id, empty name): retrying would not help
                log.error("metadata publisher: the Batch Coordinator refused topic %s (%s): "
                          "error %d", req.topic_name, uuid_text(req.topic_id),
                          code)  # fmt: skip
        if unavailable:  # transient: the round is retried with backoff
            raise RuntimeError(f"the Batch Coordinator is not available for {unavailable} "
                               "topic(s) yet")  # fmt: skip

    async def _reconcile(self, image: MetadataImage) -> None:
        live = frozenset(image.topics)
        removed = await asyncio.to_thread(
            self._remove_dirs,
            lambda tid: tid not in live,
            True,
            coordinator_paths(self.coordinator),
        )
        if removed:
            log.info("metadata publisher: removed %d stray partition directories", removed)
        if not self._coordinator_writable():
            return
        assert self.coordinator is not None  # _coordinator_writable: there is one
        held: dict[UUID, int] = {}
        for tp in await self.coordinator.list_partitions():
            held[tp.topic_id] = max(held.get(tp.topic_id, 0), tp.partition + 1)
        want = diskless_topics(image)
        missing = {tid: v for tid, v in want.items() if held.get(tid, 0) < v[1]}
        if missing:
            await self._create_topics(missing)
        mirrored = set(self.mirror.ids) if self.mirror is not None else set()
        stale = sorted(tid for tid in mirrored if tid not in live)
        if stale:
            await self._delete_topics(stale)
        if self.mirror is not None:  # topics mirrored before the file existed
            await asyncio.to_thread(self.mirror.add, want)
        foreign = [tid for tid in held if tid not in live and tid not in mirrored]
        log.info("metadata publisher: reconciled with the image at offset %d: %d diskless "
                 "topics, %d created, %d deleted, %d coordinator topics not from the image left "
                 "alone", image.last_offset, len(want), len(missing), len(stale),
                 len(foreign))  # fmt: skip

    def _remove_dirs(
        self, doomed: Callable[[UUID], bool], leftovers: bool, kept: Sequence[Path] = ()
    ) -> int:
        """(Worker thread.) Remove every partition directory whose ``partition.metadata`` names
        an id ``doomed`` accepts (never the metadata topic's, never one the Batch Coordinator
        keeps, :func:`_kept_for_coordinator`, with ``kept`` its :func:`coordinator_paths`, read
        on the loop); with ``leftovers`` also the ``-delete`` directories a crash left behind.
        Returns the directories removed."""
        removed = 0
        for root in self.log_dirs:
            if not leftovers or not root.is_dir():
                continue
            for p in sorted(root.iterdir()):
                if _DELETE_DIR.fullmatch(p.name) and p.is_dir():
                    log.info("metadata publisher: removing leftover %s", p)
                    shutil.rmtree(p, ignore_errors=True)
        for path in _partition_dirs(self.log_dirs):
            why = _kept_for_coordinator(path, kept)
            if why is not None:  # normal: a coordinator's own directory (not worth a warning)
                log.debug("metadata publisher: left %s alone: %s", path, why)
                continue
            try:
                tid = pm.read_topic_id(path)
            except (OSError, pm.PartitionMetadataError) as e:
                self._report(path, f"unreadable partition.metadata ({e})")
                continue
            if tid is None:
                self._report(path, "no partition.metadata")
                continue
            if tid == METADATA_TOPIC_ID or not doomed(tid):
                continue
            delete_partition_dir(path)
            removed += 1
            log.info("metadata publisher: removed partition directory %s of deleted topic id %s",
                     path, uuid_text(tid))  # fmt: skip
        return removed

    def _report(self, path: Path, why: str) -> None:
        if path not in self._reported:
            self._reported.add(path)
            log.warning("metadata publisher: left %s alone: %s", path, why)
