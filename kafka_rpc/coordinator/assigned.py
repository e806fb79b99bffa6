"""The replicated Batch Coordinators as the metadata log assigns them (docs/batch-coordinator.md).

``diskless.coordinator.url=raft:///dir`` with none of ``node_id``, ``voters`` or ``topic_id`` in
the URL selects :class:`AssignedBatchCoordinator` ("from the metadata log"): instead of static
voters and topic id, the server's committed metadata image says which replicas each
``__diskless-metadata`` partition has (the topic the active controller creates,
``kafka_rpc.controller.coordinator_mapping``; KIP-1164 "Batch Coordinator implemented with an
internal topic" and "Scaling the number of Batch Coordinators"). The server attaches it
(:meth:`AssignedBatchCoordinator.attach_metadata`) once its metadata log runs; from then on every
committed image is looked at, and for **every** ``__diskless-metadata`` partition ``p`` whose
replicas include this node a :class:`~kafka_rpc.coordinator.replicated.ReplicatedBatchCoordinator`
starts (its own Raft group, in ``<dir>/__diskless-metadata-<p>/``, named by topic id + ``p`` in
the Raft RPCs, ``kafka_rpc.handlers.raft`` routing through :meth:`raft_driver_for`) with:

* ``topic_id``: the image's id of ``__diskless-metadata`` (written to ``partition.metadata``; a
  directory naming another id stops that partition's start, Kafka's
  InconsistentTopicIdException, logged once; a failed start is retried with backoff,
  ``_start_slot``);
* ``voters``: the partition's replicas, each at the endpoint its broker registered for the
  inter-broker listener (``raft_listener``; so broker-only nodes hold replicas too; a replica
  whose broker has not registered that endpoint yet waits for a later image), or, without
  ``raft_listener``, at its controller listener address among the metadata quorum's voters (a
  replica that is no voter is then logged once as an error and that partition stays
  unavailable). A new partition directory runs a *dynamic* group (kraft.version 1) whose
  voters follow the assignment (:mod:`kafka_rpc.coordinator.membership`, below); one made by
  an earlier version keeps these as static voters;
* ``node_id``: this node; ``cluster_id``: the server's cluster id unless the URL names one.

**Routing** (KIP-1164 "Topic-partitions are assigned to one specific Batch Coordinator"): every
per-entry call (``commit_file``, ``find_batches``, ``list_offsets``, ``delete_records``,
``enforce_retention``) sends each entry to the coordinator partition that owns its
topic-partition in the committed image
(:func:`~kafka_rpc.controller.coordinator_mapping.coordinator_partition`: the last
TopicPartitionToBatchCoordinatorMapping record, unmapped -> 0). A call whose entries span several
coordinator partitions is split, the parts run concurrently, and the answers are merged in
request order. An entry whose coordinator partition has no replica here answers NOT_COORDINATOR
(16); one whose replica does not lead its partition gets the replica's own answer (writes:
NOT_COORDINATOR; reads: its materialized state). A part that raises fails only its own entries
(:func:`~kafka_rpc.coordinator.errors.error_code_of`: the exception's ``error_code`` if it
names one, REQUEST_TIMED_OUT for ``TimeoutError``, KAFKA_STORAGE_ERROR for ``sqlite3.Error`` /
other ``OSError``, else UNKNOWN_SERVER_ERROR; logged) -- the other parts already ran or
committed, and their answers stand. A call that stays on one coordinator partition is that
replica's call as it is (its exceptions propagate).

* ``commit_file`` (CommitBatches, one object): each coordinator partition commits its own
  entries of the object as its own record of the object (KIP-1164: "the rest of the object
  commits"; each part is atomic on its own, the object as a whole is not: one part may commit
  and another answer NOT_COORDINATOR or fail). Every part records the whole object's size.
* ``find_batches``: each part runs with the whole ``fetch_max_bytes``; the merged answer is
  then cut in request order by the rule of a single coordinator (Kafka's fetch budget: a batch
  is added unless the request already has bytes and the partition reached its
  ``max_partition_fetch_bytes`` or the request its ``fetch_max_bytes``), which gives exactly the
  answer one coordinator holding every partition would give.
* ``create_topic_and_partitions`` / ``delete_topics`` (the metadata publisher on CreateTopics /
  DeleteTopics, and InitDisklessTopics / DeleteDisklessTopics) go to **every** coordinator
  partition this node leads: a topic-partition's owner is the one its mapping names, and a
  mapping can be written any time after the topic exists (AssignPartitionToBatchCoordinator
  checks that it does), so every coordinator partition holds every diskless topic and the
  owning one is always ready (the others hold empty logs, never read: reads and writes go to the
  owner). Each node's metadata publisher does the same on the partitions it leads, so every
  partition's leader initializes the topic. Per entry: NONE if every led partition answered
  NONE, else the first other code (``delete_topics``: NONE if any deleted it); NOT_COORDINATOR
  when this node leads none, and for a topic the image does not know (a broker's own
  InitDisklessTopics) when this node does not lead partition 0, that topic's only owner;
  COORDINATOR_NOT_AVAILABLE (raised) when no replica runs here yet.
* ``list_partitions``: each topic-partition held by the replica of its owning coordinator
  partition (the server's retention task sends those to ``enforce_retention``, which routes them
  to their owner again: retention runs per coordinator partition on its leader), except the
  partitions of a topic that some coordinator partition this node leads does not hold (yet):
  the metadata publisher's reconcile, which creates what ``list_partitions`` lacks, then
  creates the topic on every partition this node leads (idempotent where it exists).
* **Objects shared by several coordinator partitions** (our rule: the KIP's "Scaling" section
  only says each topic-partition belongs to one Batch Coordinator, so an object's batches may be
  recorded by several, each with its own row of the object): an object may be physically deleted
  only when **no** coordinator partition still references it.
  ``get_files_to_delete`` lists a key only when every ``__diskless-metadata`` partition of the
  image either has it marked for deletion before the cutoff or has no record of it (read from
  this node's replicas; it raises NOT_COORDINATOR when this node lacks a replica of some
  partition, since it could not tell); the time is the latest marking, the size the largest.
  ``delete_files`` forgets a key in every coordinator partition that has it marked:
  INVALID_REQUEST when some partition still references it (nothing forgotten),
  NOT_COORDINATOR when a partition that knows it is not led here (nothing forgotten),
  RESOURCE_NOT_FOUND when none knows it. ``is_safe_to_delete_file`` is true only if every
  partition's leader has no record of the key, so it needs this node to lead every partition
  (else NOT_COORDINATOR). Reads of followers' replicas may lag: a part of an object committed on
  partition B more than the cleaner's cutoff after partition A marked the object could be missed
  -- the cutoff is the grace period that covers it.

**Image changes** (reassignment of a coordinator partition): a partition newly naming this node
starts (an adding replica as an observer of the group). A dynamic group follows the image
(:meth:`_follow_assignment`, every ``FOLLOW_INTERVAL_S``): its leader adds a caught-up new
replica as a voter, then removes a voter that is no replica any more, one change at a time, and
reports its leadership and ISR with AlterPartition (the controller completes a reassignment the
ISR covers); a replica that is neither one of the image's replicas nor a voter any more stops
(its entries answer NOT_COORDINATOR afterwards; its directory stays). A static group (a
directory of an earlier version) keeps its voters: a changed replica set that still includes
this node is logged, and one that no longer includes it stops the replica. A re-created
topic's new id is logged and the replica keeps its id. A topic-partition re-mapped to another
coordinator partition is served by its new owner from then on; its batches on the old owner are
not moved (the KIP defines no migration).

Until a replica runs, calls raise :class:`CoordinatorNotAvailableError` (``error_code`` 15,
Kafka's COORDINATOR_NOT_AVAILABLE) when no replica runs here at all; a multi-partition call
answers 15 per entry of a partition whose replica is still starting. :meth:`served_partitions`
holds the running replicas' partitions (so the handlers' owner check answers NOT_COORDINATOR,
16, for the others before a call is made).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.raft.base import ADD_RAFT_VOTER, REMOVE_RAFT_VOTER
from kafka_rpc.raft.driver import monotonic_ms
from kafka_rpc.storage.meta_properties import is_reserved

from .api import (
    BatchCoordinator,
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
)
from .errors import NOT_COORDINATOR, NotCoordinatorError, error_code_of
from .membership import Change, Membership, bootstrap_voters, in_sync_replicas, next_change
from .ownership import DEFAULT_PARTITION, coordinator_of, owner_map
from .replica_starts import ReplicaStarts
from .replicated import DISKLESS_METADATA_TOPIC_NAME, ReplicatedBatchCoordinator

__all__ = ["COORDINATOR_NOT_AVAILABLE", "AssignedBatchCoordinator", "CoordinatorNotAvailableError"]

log = logging.getLogger("kafka_rpc.coordinator.assigned")

#: Kafka ``Errors.COORDINATOR_NOT_AVAILABLE``.
COORDINATOR_NOT_AVAILABLE = 15
#: s between two rounds of following the assignment (voter changes, ISR reports)
FOLLOW_INTERVAL_S = 0.25
#: s before the same AlterPartition is sent again when the image did not change
ALTER_RETRY_S = 2.0
_NONE: frozenset[int] = frozenset()
_ZERO_DIR = uuid.UUID(int=0)


def _registered_endpoints(image: Any, listener: str) -> dict[int, tuple[str, int]]:
    """Broker id -> (host, port) of its ``listener`` endpoint in ``image``'s registrations."""
    out = {}
    for b in image.brokers.values():
        ep = b.endpoint(listener)
        if ep is not None:
            out[b.broker_id] = (ep.host, ep.port)
    return out


class CoordinatorNotAvailableError(Exception):
    """No ``__diskless-metadata`` replica of this node is running (yet): Kafka's
    COORDINATOR_NOT_AVAILABLE (15)."""

    error_code = COORDINATOR_NOT_AVAILABLE


class _Slot:
    """One ``__diskless-metadata`` partition this node replicates: the replicas and topic id it
    was started with, its starting task and, once started, its coordinator."""

    __slots__ = ("alter", "alter_sent", "change", "inner", "partition", "replicas", "task",
                 "topic_id")  # fmt: skip

    def __init__(self, partition: int, replicas: tuple[int, ...], topic_id: uuid.UUID) -> None:
        self.partition = partition
        self.replicas = replicas
        self.topic_id = topic_id
        self.task: asyncio.Task | None = None
        self.inner: ReplicatedBatchCoordinator | None = None
        #: the leader's voter change in flight (dynamic groups)
        self.change: asyncio.Task | None = None
        #: the leader's AlterPartition in flight, and (state, loop time) of the last one sent
        self.alter: asyncio.Task | None = None
        self.alter_sent: tuple[Any, float] = (None, 0.0)


class AssignedBatchCoordinator(BatchCoordinator):
    """A ``BatchCoordinator`` running one replica per ``__diskless-metadata`` partition the
    committed metadata image assigns to this node, each call routed per entry to the owning
    partition (module docstring).

    * ``log_dir``: the directory of ``<log_dir>/__diskless-metadata-<p>/`` (as
      ``ReplicatedBatchCoordinator``'s).
    * ``options``: passed to every ``ReplicatedBatchCoordinator`` (``synchronous``,
      ``write_timeout_ms``, ``raft_options``, ``cluster_id``, ``import_path``...); ``node_id``,
      ``voters``, ``topic_id`` and the partition come from the server and the image, and
      ``partition`` may only be 0 (the URL form's default). Raises ``ValueError`` otherwise.
      ``import_path`` (the upgrade from the standalone SQLite coordinator) goes to partition 0's
      replica only.
    """

    def __init__(self, log_dir: str | Path, **options: Any) -> None:
        for key in ("node_id", "voters", "topic_id"):
            if key in options:
                raise ValueError(f"{key} comes from the metadata log here")
        if options.pop("partition", DEFAULT_PARTITION) != DEFAULT_PARTITION:
            raise ValueError("the coordinator partitions come from the metadata log here")
        self.log_dir = Path(log_dir)
        self._options = options
        self._slots: dict[int, _Slot] = {}  # partition -> replica this node runs (or starts)
        self._stopping: dict[int, asyncio.Task] = {}  # partition -> closing its old replica
        self.node_id = -1
        self._voters: dict[int, tuple[str, int]] = {}
        self._voters_now: Callable[[], dict[int, tuple[str, int]]] = dict
        self._raft_listener: str | None = None
        #: node id -> (host, port) on ``raft_listener`` in the latest image (the replicas'
        #: drivers ask it first: a broker that restarted on another port is found again)
        self._address_cache: dict[int, tuple[str, int]] = {}
        self._cluster_id: str | None = None
        self._client_security: Any = None
        self._controller: Any = None
        self._directory_id: uuid.UUID | None = None
        self._listener_name = "CONTROLLER"
        self._alter_partition: Callable[[Any], Awaitable[Any]] | None = None
        self._lag_ms = 30_000
        self._follow_task: asyncio.Task | None = None
        self._closed = False
        self._reported: set[str] = set()
        #: set once the first replica runs
        self.started = asyncio.Event()
        #: set when a replica of this node cannot start (logged): what ``started`` waits for
        #: may never come (until a retry of that start succeeds)
        self.start_failed = asyncio.Event()
        #: the replicas' start attempts, failures and retry backoff (``_start_slot``), also
        #: the node's ``/metrics`` (:mod:`kafka_rpc.coordinator.replica_starts`)
        self.replica_starts = ReplicaStarts()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Nothing to open: replicas start once an image assigns them (:meth:`attach_metadata`)."""

    def attach_metadata(
        self,
        config: Any,
        node_id: int,
        cluster_id: str,
        controller: Any,
        client_security: Any,
        voters: Callable[[], dict[int, tuple[str, int]]] | None = None,
        directory_id: uuid.UUID | None = None,
        alter_partition: Callable[[Any], Awaitable[Any]] | None = None,
        raft_listener: str | None = None,
    ) -> None:
        """Follow ``controller``'s committed metadata image (a ``QuorumController`` whose
        ``publishers`` are called on every change), with this node's ``config``
        (``controller.quorum.voters`` addresses and Raft timing:
        ``controller.quorum.election.timeout.ms``, ``fetch.timeout.ms``,
        ``election.backoff.max.ms``, ``request.timeout.ms``, ``retry.backoff.ms``; the URL's
        ``raft.<field>`` wins), ``node_id``, ``cluster_id`` and ``client_security`` (how its Raft
        groups connect to the controller listener; None for PLAINTEXT). Call once the node's
        metadata log runs. ``voters``: the metadata quorum's voters now, id -> (host, port) of
        their controller listener (the node's Raft replica's voter set, which changes with the
        log in a dynamic quorum, KIP-853); read each time a replica starts. None:
        ``controller.quorum.voters``.

        ``directory_id``: this node's log directory id (``meta.properties`` ``directory.id`` of
        ``log_dir``); with it, new partition directories get dynamic groups whose voters follow
        the assignment (:mod:`kafka_rpc.coordinator.membership`); None: static voters as
        before. ``alter_partition``: sends an AlterPartitionRequest to the active controller
        and returns its response (raising when none answers); the leader of each group reports
        its ISR and leadership with it (``replica.lag.time.max.ms`` from ``config``). None:
        nothing is reported. ``raft_listener``: the broker listener the groups' Raft RPCs use
        (the inter-broker listener; ``client_security`` is then that listener's), each
        replica's address its endpoint of that name in its broker registration, so replicas
        may be on broker-only nodes; None: the controller listener, at the addresses of
        ``voters``."""
        cfg = config
        self.node_id = node_id
        self._voters_now = voters if voters is not None else cfg.voters
        self._raft_listener = raft_listener
        # the Raft groups time out as the metadata quorum does (controller.quorum.*), unless the
        # URL sets raft.<field>
        quorum = {
            "election_timeout_ms": cfg.quorum_election_timeout_ms,
            "fetch_timeout_ms": cfg.quorum_fetch_timeout_ms,
            "election_backoff_max_ms": cfg.quorum_election_backoff_max_ms,
            "request_timeout_ms": cfg.quorum_request_timeout_ms,
            "retry_backoff_ms": cfg.quorum_retry_backoff_ms,
        }
        if raft_listener is not None:
            quorum["listener_name"] = raft_listener
        elif cfg.controller_listener_names:
            quorum["listener_name"] = cfg.controller_listener_names[0]
        self._options["raft_options"] = {**quorum, **self._options.get("raft_options", {})}
        self._listener_name = self._options["raft_options"].get("listener_name", "CONTROLLER")
        self._cluster_id = cluster_id
        self._client_security = client_security
        self._directory_id = directory_id if directory_id and directory_id.int else None
        self._alter_partition = alter_partition
        self._lag_ms = cfg.replica_lag_time_max_ms
        self._controller = controller
        self._controller.publishers.append(self.on_metadata_update)
        self.on_metadata_update(None, self._controller.image)
        self._follow_task = asyncio.ensure_future(self._follow_assignment())

    async def close(self) -> None:
        """Stop following the image; wait for the replicas being started (each bounded by its
        own ``wait_for_leader_ms``) or stopped, and close every replica."""
        self._closed = True
        follow, self._follow_task = self._follow_task, None
        if follow is not None:
            follow.cancel()
            await asyncio.gather(follow, return_exceptions=True)
        controller, self._controller = self._controller, None
        if controller is not None and self.on_metadata_update in controller.publishers:
            controller.publishers.remove(self.on_metadata_update)
        slots, self._slots = list(self._slots.values()), {}
        tasks = {asyncio.ensure_future(self._stop_slot(slot)) for slot in slots}
        tasks |= set(self._stopping.values())
        if tasks:
            await asyncio.wait(tasks)

    async def _stop_slot(self, slot: _Slot) -> None:
        for t in (slot.change, slot.alter):
            if t is not None:
                t.cancel()
                await asyncio.gather(t, return_exceptions=True)
        task, slot.task = slot.task, None
        if task is not None:
            await asyncio.wait({task})
        inner, slot.inner = slot.inner, None
        if inner is not None:
            await inner.close()

    def _report(self, key: str, level: int, msg: str, *args: Any) -> None:
        if key not in self._reported:
            self._reported.add(key)
            log.log(level, msg, *args)

    def on_metadata_update(self, old: Any, new: Any) -> None:
        """The ``QuorumController`` publisher callback (event loop, synchronous, never raises):
        start a replica for each ``__diskless-metadata`` partition ``new`` assigns to this node,
        stop the ones it no longer assigns (module docstring)."""
        if self._closed:
            return
        if self._raft_listener is not None:
            fresh = _registered_endpoints(new, self._raft_listener)
            if fresh != self._address_cache:  # in place: the drivers hold its get
                self._address_cache.clear()
                self._address_cache.update(fresh)
        t = new.topic_by_name(DISKLESS_METADATA_TOPIC_NAME)
        if t is None:
            return
        name = DISKLESS_METADATA_TOPIC_NAME
        for p, reg in sorted(t.partitions.items()):
            replicas = tuple(reg.replicas)
            slot = self._slots.get(p)
            if slot is not None:
                if slot.inner is not None and slot.inner.dynamic:
                    continue  # the leader follows the image; _follow_assignment stops it
                if self.node_id not in replicas:
                    log.warning("%s-%d: the image no longer names node %d among its replicas "
                                "%s; stopping its replica", name, p, self.node_id,
                                sorted(replicas))  # fmt: skip
                    del self._slots[p]
                    self._reported.discard(f"moved {p} {sorted(replicas)}")
                    self._stopping[p] = asyncio.ensure_future(self._stop_slot(slot))
                    continue
                if t.topic_id != slot.topic_id:
                    self._report(f"id {p} {t.topic_id}", logging.WARNING,
                                 "%s now has topic id %s; the replica of partition %d keeps "
                                 "running with %s", name, t.topic_id, p,
                                 slot.topic_id)  # fmt: skip
                if set(replicas) != set(slot.replicas):
                    self._report(f"moved {p} {sorted(replicas)}", logging.WARNING,
                                 "%s-%d: the image now names replicas %s; this replica keeps "
                                 "running with voters %s (static voters: no voter-set change)",
                                 name, p, sorted(replicas), sorted(slot.replicas))  # fmt: skip
                continue
            if self.node_id not in replicas:
                self._report(f"not a replica {p} {sorted(replicas)}", logging.INFO,
                             "%s-%d: node %d is not one of its replicas %s; no coordinator here",
                             name, p, self.node_id, sorted(replicas))  # fmt: skip
                continue
            self._voters = dict(self._peer_addresses())
            unknown = [r for r in replicas if r not in self._voters]
            if unknown and self._raft_listener is not None:  # not registered yet: a later image
                self._report(f"unknown {p} {sorted(replicas)}", logging.INFO,
                             "%s-%d: waiting for replicas %s to register an endpoint on %s",
                             name, p, unknown, self._raft_listener)  # fmt: skip
                continue
            if unknown:
                self._report(f"unknown {p} {sorted(replicas)}", logging.ERROR,
                             "%s-%d: replicas %s are not voters of the metadata quorum (no "
                             "controller listener address); the coordinator stays unavailable",
                             name, p, unknown)  # fmt: skip
                self.start_failed.set()
                continue
            membership = self._membership(reg, replicas)
            slot = self._slots[p] = _Slot(p, replicas, t.topic_id)
            voters = {r: self._voters[r] for r in replicas if r in self._voters}
            boot = None if membership is None or membership.bootstrap is None else sorted(
                membership.bootstrap)  # fmt: skip
            log.info("%s-%d: starting the replica of node %d, topic id %s, voters %s%s",
                     name, p, self.node_id, t.topic_id, voters,
                     "" if membership is None
                     else f" (dynamic; bootstrap voters {boot})")  # fmt: skip
            slot.task = asyncio.ensure_future(self._start_slot(slot, voters, membership))

    def _membership(self, reg: Any, replicas: tuple[int, ...]) -> Membership | None:
        """How a new replica of partition ``reg`` starts a dynamic group
        (:mod:`~kafka_rpc.coordinator.membership`; every replica's address is known), or None
        (static voters): no directory id known here, or an initial replica's directory id is
        unknown, or a lone observer with no other replica to find the group through."""
        if self._directory_id is None:
            return None
        addresses = {r: self._voters[r] for r in replicas if r in self._voters}
        dirs = self._directories(reg)
        if self.node_id not in reg.adding_replicas and any(
            d.int == 0 for r, d in zip(replicas, dirs, strict=True)
            if r not in reg.adding_replicas
        ):  # an initial replica's directory is not known: the group cannot be verified
            return None
        bootstrap = bootstrap_voters(
            replicas, dirs, tuple(reg.adding_replicas), addresses,
            self._listener_name, self.node_id, self._directory_id,
        )  # fmt: skip
        servers = tuple(a for r, a in sorted(addresses.items()) if r != self.node_id)
        if bootstrap is None and not servers:
            return None
        return Membership(self._directory_id, self._listener_name, bootstrap, servers)

    def _peer_addresses(self) -> dict[int, tuple[str, int]]:
        """Node id -> (host, port) of the listener the groups' Raft RPCs use: the registered
        brokers' ``raft_listener`` endpoints in the latest image (:meth:`attach_metadata`),
        else the metadata quorum's voters now."""
        return self._address_cache if self._raft_listener is not None else self._voters_now()

    def _directories(self, reg: Any) -> tuple[uuid.UUID, ...]:
        """Each replica's directory id: the partition record's (``Directories``), else, when
        that is a reserved id (unassigned, lost, migrating), the broker's only registered log
        directory, else zero."""
        controller = self._controller
        brokers = controller.image.brokers if controller is not None else {}
        dirs = tuple(reg.directories) or (_ZERO_DIR,) * len(reg.replicas)
        out = []
        for r, d in zip(reg.replicas, dirs, strict=False):
            if is_reserved(d):
                b = brokers.get(r)
                d = b.log_dirs[0] if b is not None and len(b.log_dirs) == 1 else _ZERO_DIR
            out.append(d)
        return tuple(out)

    async def _start_slot(
        self,
        slot: _Slot,
        voters: dict[int, tuple[str, int]],
        membership: Membership | None = None,
    ) -> None:
        """Start ``slot``'s replica. A start that raises (e.g. ``InconsistentTopicIdError``, an
        unwritable directory) is logged -- at ERROR the first time its error occurs for the
        partition, then at DEBUG -- sets ``start_failed`` and is tried again after a backoff
        (``replica_starts``: 1 s doubling to 30 s), as long as the slot is still this
        partition's and the coordinator is open. The retry is a timer: between attempts the
        slot's task is done, so the partition is not loading (its entries answer
        NOT_COORDINATOR, not COORDINATOR_LOAD_IN_PROGRESS)."""
        stopping = self._stopping.get(slot.partition)
        if stopping is not None:  # the same directory: its previous replica closes first
            await asyncio.wait({stopping})
            if self._stopping.get(slot.partition) is stopping:
                del self._stopping[slot.partition]
        options = dict(self._options)
        if self._cluster_id is not None:
            options.setdefault("cluster_id", self._cluster_id)
        options.setdefault("client_security", self._client_security)
        if slot.partition != DEFAULT_PARTITION:
            options.pop("import_path", None)
        p = slot.partition
        starts = self.replica_starts
        attempt = starts.attempt(p)
        inner = ReplicatedBatchCoordinator(
            self.log_dir, node_id=self.node_id, voters=voters, partition=p,
            topic_id=slot.topic_id, membership=membership,
            resolve_address=self._address_cache.get if self._raft_listener else None,
            **options,
        )  # fmt: skip
        try:
            await inner.start()
        except Exception as e:  # noqa: BLE001 - e.g. InconsistentTopicIdError: logged, retried
            delay, new = starts.failed(p, e)
            log.log(logging.ERROR if new else logging.DEBUG,
                    "%s-%d: the replica did not start (attempt %d): %r; the coordinator stays "
                    "unavailable, next attempt in %g s", DISKLESS_METADATA_TOPIC_NAME, p,
                    attempt, e, delay)  # fmt: skip
            self.start_failed.set()
            await inner.close()

            def retry() -> None:
                if not self._closed and self._slots.get(p) is slot and slot.inner is None:
                    slot.task = asyncio.ensure_future(self._start_slot(slot, voters, membership))

            if not self._closed and self._slots.get(p) is slot:
                asyncio.get_running_loop().call_later(delay, retry)
            return
        if self._closed or self._slots.get(p) is not slot:  # closed or stopped meanwhile
            await inner.close()
            return
        failed = starts.succeeded(p)
        if failed:
            log.info("%s-%d: the replica started at attempt %d, after %d failed",
                     DISKLESS_METADATA_TOPIC_NAME, p, attempt, failed)  # fmt: skip
        slot.inner = inner
        self.started.set()

    # ------------------------------------------------------------------ membership
    async def _follow_assignment(self) -> None:
        """Every ``FOLLOW_INTERVAL_S``, for each running dynamic replica
        (:mod:`~kafka_rpc.coordinator.membership`): on the group's leader, start the next voter
        change the image calls for and report the ISR and leadership with AlterPartition when
        the image differs; on any other replica that is no voter and no longer one of the
        image's replicas, stop it (its directory stays). Never raises (logged)."""
        while not self._closed:
            await asyncio.sleep(FOLLOW_INTERVAL_S)
            try:
                self._follow_once()
            except Exception:  # the loop must go on; logged
                log.exception("following the %s assignment failed", DISKLESS_METADATA_TOPIC_NAME)

    def _follow_once(self) -> None:
        controller = self._controller
        if controller is None:
            return
        image = controller.image
        t = image.topic_by_name(DISKLESS_METADATA_TOPIC_NAME)
        if t is None:
            return
        for p, slot in list(self._slots.items()):
            inner = slot.inner
            reg = t.partitions.get(p)
            if inner is None or not inner.dynamic or inner.core is None or reg is None:
                continue
            core = inner.core
            if inner.is_leader:
                self._lead(slot, inner, core, t.topic_id, reg, image)
            elif self.node_id not in reg.replicas and not core.is_voter:
                log.info("%s-%d: node %d is neither a replica nor a voter any more; stopping "
                         "its replica", DISKLESS_METADATA_TOPIC_NAME, p, self.node_id)  # fmt: skip
                del self._slots[p]
                self._stopping[p] = asyncio.ensure_future(self._stop_slot(slot))

    def _lead(self, slot: _Slot, inner: Any, core: Any, topic_id: uuid.UUID, reg: Any,
              image: Any) -> None:  # fmt: skip
        now = int(time.time() * 1000)
        quorum = core.describe_quorum_partition(monotonic_ms())
        if slot.change is None or slot.change.done():
            change = next_change(quorum, tuple(reg.replicas), now, self._lag_ms)
            if change is not None:
                slot.change = asyncio.ensure_future(self._voter_change(slot, inner, change))
        send = self._alter_partition
        if send is None or (slot.alter is not None and not slot.alter.done()):
            return
        isr = in_sync_replicas(quorum, tuple(reg.replicas), self.node_id, now, self._lag_ms)
        # Kafka's leader leaves out a follower its metadata shows fenced or shutting down
        # (Partition.isReplicaIsrEligible): the controller would refuse it (INELIGIBLE_REPLICA)
        isr = tuple(r for r in isr if r == self.node_id or image.is_active(r))
        if reg.leader == self.node_id and set(isr) == set(reg.isr):
            return
        state = (isr, reg.leader_epoch, reg.partition_epoch)
        loop_now = asyncio.get_running_loop().time()
        last, at = slot.alter_sent
        if last == state and loop_now - at < ALTER_RETRY_S:
            return
        slot.alter_sent = (state, loop_now)
        me = image.brokers.get(self.node_id)
        if me is None:
            return
        m = codec.module("AlterPartitionRequest")
        req = m.AlterPartitionRequest(
            broker_id=self.node_id,
            broker_epoch=me.epoch,
            topics=(m.TopicData(topic_id=topic_id, partitions=(m.PartitionData(
                partition_index=slot.partition,
                leader_epoch=reg.leader_epoch,
                new_isr_with_epochs=tuple(
                    m.BrokerState(broker_id=r, broker_epoch=(
                        image.brokers[r].epoch if r in image.brokers else -1))
                    for r in isr
                ),
                leader_recovery_state=0,
                partition_epoch=reg.partition_epoch,
            ),)),),
        )  # fmt: skip
        log.info("%s-%d: reporting leader %d, ISR %s (the image has leader %d, ISR %s)",
                 DISKLESS_METADATA_TOPIC_NAME, slot.partition, self.node_id, list(isr),
                 reg.leader, list(reg.isr))  # fmt: skip
        slot.alter = asyncio.ensure_future(self._send_alter(slot, send, req))

    async def _send_alter(self, slot: _Slot, send: Callable[[Any], Awaitable[Any]],
                          req: Any) -> None:  # fmt: skip
        try:
            resp = await send(req)
        except Exception as e:  # noqa: BLE001 - no controller now: the next round sends again
            log.info("%s-%d: AlterPartition not answered: %r", DISKLESS_METADATA_TOPIC_NAME,
                     slot.partition, e)  # fmt: skip
            return
        codes = [resp.error_code] + [pd.error_code for td in resp.topics for pd in td.partitions]
        if any(codes):
            log.info("%s-%d: AlterPartition answered %s", DISKLESS_METADATA_TOPIC_NAME,
                     slot.partition, codes)  # fmt: skip

    async def _voter_change(self, slot: _Slot, inner: Any, change: Change) -> None:
        """Ask the group's own leader (its driver, as an RPC would) for ``change``."""
        core = inner.core
        name = f"{DISKLESS_METADATA_TOPIC_NAME}-{slot.partition}"
        if change.kind == "add":
            addr = self._peer_addresses().get(change.voter_id)
            if addr is None:
                self._report(f"no address {slot.partition} {change.voter_id}", logging.WARNING,
                             "%s: no %s address of node %d to add it as a voter", name,
                             self._listener_name, change.voter_id)  # fmt: skip
                return
            m = codec.module("AddRaftVoterRequest")
            req = m.AddRaftVoterRequest(
                cluster_id=core.config.cluster_id,
                timeout_ms=core.config.request_timeout_ms,
                voter_id=change.voter_id,
                voter_directory_id=change.directory_id,
                listeners=(m.Listener(name=self._listener_name, host=addr[0], port=addr[1]),),
                ack_when_committed=True,
            )
            api, version = ADD_RAFT_VOTER, 1
        else:
            m = codec.module("RemoveRaftVoterRequest")
            req = m.RemoveRaftVoterRequest(cluster_id=core.config.cluster_id,
                                           voter_id=change.voter_id,
                                           voter_directory_id=change.directory_id)  # fmt: skip
            api, version = REMOVE_RAFT_VOTER, 0
        log.info("%s: %s voter %d (directory %s)", name, change.kind, change.voter_id,
                 change.directory_id)  # fmt: skip
        try:
            resp = await inner.driver.handle(api, version, req)
        except Exception as e:  # noqa: BLE001 - the next round tries again
            log.info("%s: %s voter %d failed: %r", name, change.kind, change.voter_id, e)
            return
        if resp.error_code:
            log.info("%s: %s voter %d answered %d %s", name, change.kind, change.voter_id,
                     resp.error_code, resp.error_message)  # fmt: skip
        else:
            log.info("%s: voter %d %s", name, change.voter_id,
                     "added" if change.kind == "add" else "removed")  # fmt: skip

    # ------------------------------------------------------------------ state
    def replica(self, partition: int) -> ReplicatedBatchCoordinator | None:
        """The running replica of ``__diskless-metadata`` partition ``partition``, else None."""
        slot = self._slots.get(partition)
        return None if slot is None else slot.inner

    @property
    def replicas_running(self) -> dict[int, ReplicatedBatchCoordinator]:
        """Coordinator partition -> its running replica on this node."""
        return {p: s.inner for p, s in sorted(self._slots.items()) if s.inner is not None}

    @property
    def inner(self) -> ReplicatedBatchCoordinator | None:
        """Partition 0's running replica (the single-coordinator view), else None."""
        return self.replica(DEFAULT_PARTITION)

    @property
    def topic_id(self) -> uuid.UUID | None:
        """The running replicas' topic id (the image's ``__diskless-metadata``), else None."""
        for inner in self.replicas_running.values():
            return inner.topic_id
        return None

    def leader_of(self, partition: int) -> int:
        """The Raft leader of ``__diskless-metadata`` partition ``partition`` as this node's
        replica knows it; -1 when unknown or no replica runs here."""
        inner = self.replica(partition)
        return inner.leader_id if inner is not None else -1

    @property
    def leader_id(self) -> int:
        """:meth:`leader_of` partition 0."""
        return self.leader_of(DEFAULT_PARTITION)

    @property
    def is_writable(self) -> bool:
        """Partition 0's replica runs and may decide writes."""
        inner = self.inner
        return inner is not None and inner.is_writable

    def served_partitions(self, write: bool) -> frozenset[int]:
        """The union of the running replicas' ``served_partitions`` (reads: every running
        replica; writes: the ones that lead, writable); empty before any runs."""
        out: set[int] = set()
        for slot in self._slots.values():
            if slot.inner is not None:
                out |= slot.inner.served_partitions(write)
        return frozenset(out) if out else _NONE

    def loading_partitions(self, write: bool) -> frozenset[int]:
        """The partitions this node has a replica of that cannot answer yet: the replica is
        starting, or (``write``) it leads but is not writable yet (see
        ``ReplicatedBatchCoordinator.loading_partitions``). The handlers answer
        COORDINATOR_LOAD_IN_PROGRESS (14) for them rather than NOT_COORDINATOR (16)."""
        out: set[int] = set()
        for c, slot in self._slots.items():
            if slot.inner is not None:
                out |= slot.inner.loading_partitions(write)
            elif slot.task is not None and not slot.task.done():  # not one that failed
                out.add(c)
        return frozenset(out) if out else _NONE

    def raft_driver_for(self, key: tuple[Any, int]) -> Any:
        """The driver of the running replica a Raft RPC names (by topic id or name, partition),
        else None (``kafka_rpc.handlers.raft`` routing)."""
        slot = self._slots.get(key[1])
        if slot is None or slot.inner is None:
            return None
        return slot.inner.raft_driver_for(key)

    # ------------------------------------------------------------------ routing
    def _owner_map(self) -> dict[uuid.UUID, dict[int, int]]:
        controller = self._controller
        return {} if controller is None else owner_map(controller.image)

    def owner(self, tp: TopicIdPartition) -> int:
        """The coordinator partition owning ``tp`` in the committed image (unmapped -> 0)."""
        return coordinator_of(self._owner_map(), tp.topic_id, tp.partition)

    def _any_running(self) -> None:
        if not any(s.inner is not None for s in self._slots.values()):
            raise CoordinatorNotAvailableError(
                f"no {DISKLESS_METADATA_TOPIC_NAME} replica of node {self.node_id} is running"
            )

    async def _routed(
        self,
        reqs: Sequence[Any],
        call: Callable[[ReplicatedBatchCoordinator, list[Any]], Awaitable[list[Any]]],
        error: Callable[[int, Any], Any],
        what: str,
        merge: Callable[[list[Any]], list[Any]] | None = None,
    ) -> list[Any]:
        """``call(replica, part)`` per owning coordinator partition of the requests (each with a
        ``topic_id_partition``), answers merged in request order (module docstring), then
        ``merge(answers)`` when the call was split."""
        if not reqs:
            return []
        owners = self._owner_map()
        groups: dict[int, list[int]] = {}
        if owners:  # else every entry is coordinator partition 0's
            for i, r in enumerate(reqs):
                tp = r.topic_id_partition
                c = coordinator_of(owners, tp.topic_id, tp.partition)
                g = groups.get(c)
                if g is None:
                    groups[c] = [i]
                else:
                    g.append(i)
        self._any_running()
        if len(groups) <= 1:
            c = next(iter(groups), DEFAULT_PARTITION)
            slot = self._slots.get(c)
            if slot is None:
                return [error(NOT_COORDINATOR, r) for r in reqs]
            if slot.inner is None:
                raise CoordinatorNotAvailableError(
                    f"the {DISKLESS_METADATA_TOPIC_NAME}-{c} replica of node {self.node_id} "
                    "is starting"
                )
            return await call(slot.inner, list(reqs))
        out: list[Any] = [None] * len(reqs)

        async def part(c: int, idx: list[int]) -> None:
            mine = [reqs[i] for i in idx]
            slot = self._slots.get(c)
            if slot is None or slot.inner is None:
                code = NOT_COORDINATOR if slot is None else COORDINATOR_NOT_AVAILABLE
                answers = [error(code, r) for r in mine]
            else:
                try:
                    answers = await call(slot.inner, mine)
                    if len(answers) != len(mine):
                        raise RuntimeError(f"{what}: {len(answers)} answers for {len(mine)}")
                except Exception as e:  # this part's entries only; logged
                    code = error_code_of(e)
                    log.log(logging.INFO if code > 0 else logging.ERROR,
                            "%s on %s-%d failed: %r", what, DISKLESS_METADATA_TOPIC_NAME, c, e,
                            exc_info=code <= 0)  # fmt: skip
                    answers = [error(code, r) for r in mine]
            for i, a in zip(idx, answers, strict=True):
                out[i] = a

        await asyncio.gather(*(part(c, idx) for c, idx in groups.items()))
        return out if merge is None else merge(out)

    def _writable_replicas(self) -> list[ReplicatedBatchCoordinator]:
        """The running replicas that lead their partition; raises COORDINATOR_NOT_AVAILABLE
        when none runs at all."""
        self._any_running()
        return [s.inner for _, s in sorted(self._slots.items())
                if s.inner is not None and s.inner.is_writable]  # fmt: skip

    def _full_set(self) -> dict[int, ReplicatedBatchCoordinator]:
        """Every ``__diskless-metadata`` partition of the image -> this node's running replica;
        raises NOT_COORDINATOR when one has none here (the shared-object rule needs all)."""
        self._any_running()
        running = self.replicas_running
        controller = self._controller
        t = None if controller is None else controller.image.topic_by_name(
            DISKLESS_METADATA_TOPIC_NAME)  # fmt: skip
        wanted = set(t.partitions) if t is not None else set(running)
        missing = sorted(wanted - set(running))
        if missing:
            raise NotCoordinatorError(
                f"node {self.node_id} runs no replica of {DISKLESS_METADATA_TOPIC_NAME} "
                f"partitions {missing}: objects they may reference cannot be checked here"
            )
        return running

    # ------------------------------------------------------------------ the BatchCoordinator
    async def _on_every_led(
        self, n: int, call: Callable[[Any], Awaitable[list[int]]],
        merge: Callable[[tuple[int, ...]], int],
    ) -> list[int]:  # fmt: skip
        """``call`` on every coordinator partition this node leads (a topic is held by all of
        them, see the module docstring); ``n`` codes, each ``merge`` of the partitions' codes
        for that entry; NOT_COORDINATOR for all when this node leads none."""
        if not n:
            return []
        targets = self._writable_replicas()
        if not targets:
            return [NOT_COORDINATOR] * n
        answers = await asyncio.gather(*(call(t) for t in targets))
        return [merge(codes) for codes in zip(*answers, strict=True)]

    async def create_topic_and_partitions(
        self, requests: Sequence[CreateTopicAndPartitionsRequest]
    ) -> list[int]:
        codes = await self._on_every_led(
            len(requests),
            lambda t: t.create_topic_and_partitions(requests),
            lambda codes: next((c for c in codes if c != Errors.NONE), Errors.NONE),
        )
        return self._owner_not_led(codes, [r.topic_id for r in requests])

    async def delete_topics(self, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        codes = await self._on_every_led(
            len(topic_ids),
            lambda t: t.delete_topics(topic_ids),
            lambda codes: Errors.NONE if Errors.NONE in codes else codes[0],
        )
        return self._owner_not_led(codes, list(topic_ids))

    def _owner_not_led(self, codes: list[int], topic_ids: list[uuid.UUID]) -> list[int]:
        """NOT_COORDINATOR instead of NONE for a topic the metadata image does not know (a
        broker's own InitDisklessTopics / DeleteDisklessTopics) when this node does not lead
        coordinator partition 0, its owner: a mapping names only topics of the image, so such a
        topic lives on partition 0 alone, and no other node's metadata publisher will create or
        delete it there. The broker retries at the coordinator FindCoordinator names. (A topic
        of the image is created on each coordinator partition by that partition's leader's
        publisher, so this node's NONE for the partitions it leads stands.)"""
        controller = self._controller
        zero = self.replica(DEFAULT_PARTITION)
        if controller is None or (zero is not None and zero.is_writable):
            return codes
        topics = controller.image.topics
        return [NOT_COORDINATOR if c == Errors.NONE and t not in topics else c
                for c, t in zip(codes, topic_ids, strict=True)]  # fmt: skip

    async def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        return await self._routed(
            requests,
            lambda inner, part: inner.commit_file(object_key, uploader_broker_id, file_size, part),
            lambda code, _r: CommitBatchResponse.of_error(code),
            f"commit_file {object_key!r}",
        )

    async def find_batches(
        self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        return await self._routed(
            requests,
            lambda inner, part: inner.find_batches(part, fetch_max_bytes),
            lambda code, _r: FindBatchResponse(code, (), -1, -1),
            "find_batches",
            lambda out: _fetch_budget(requests, out, fetch_max_bytes),
        )

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        return await self._routed(
            requests,
            lambda inner, part: inner.list_offsets(part),
            lambda code, r: ListOffsetsResponse(code, r.topic_id_partition, -1, -1),
            "list_offsets",
        )

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        return await self._routed(
            requests,
            lambda inner, part: inner.delete_records(part),
            lambda code, _r: DeleteRecordsResponse(code, -1),
            "delete_records",
        )

    async def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], max_batches_per_request: int = 0
    ) -> list[EnforceRetentionResponse]:
        return await self._routed(
            requests,
            lambda inner, part: inner.enforce_retention(part, max_batches_per_request),
            lambda code, _r: EnforceRetentionResponse(code, -1, -1, -1),
            "enforce_retention",
        )

    async def list_partitions(self) -> list[TopicIdPartition]:
        self._any_running()
        running = self.replicas_running
        if set(running) == {DEFAULT_PARTITION} and not self._owner_map():
            return await running[DEFAULT_PARTITION].list_partitions()
        owner = self.owner
        held = {p: await inner.list_partitions() for p, inner in running.items()}
        # partitions of each topic that every partition this node leads holds (0..count-1)
        counts: dict[uuid.UUID, int] | None = None
        for p, inner in running.items():
            if not inner.is_writable:
                continue
            mine: dict[uuid.UUID, int] = {}
            for tp in held[p]:
                mine[tp.topic_id] = max(mine.get(tp.topic_id, 0), tp.partition + 1)
            counts = mine if counts is None else {
                t: min(n, mine[t]) for t, n in counts.items() if t in mine
            }  # fmt: skip
        out: list[TopicIdPartition] = []
        for p, tps in held.items():
            out.extend(
                tp for tp in tps
                if owner(tp) == p and (counts is None or tp.partition < counts.get(tp.topic_id, 0))
            )  # fmt: skip
        return out

    # -- objects (the shared-object rule of the module docstring)
    async def get_files_to_delete(
        self,
        marked_before_ms: int | None = None,
        limit: int = 0,
        after_object_key: str | None = None,
    ) -> list[FileToDelete]:
        """The shared-object rule over every partition's listing (module docstring), merged by
        key: each partition's listing is read in pages of ``max(limit, _FILES_PAGE)`` (all of it
        at once when ``limit`` is 0), and a key is decided -- ``file_states`` asked of every
        partition, one batch per round -- once every listing is exhausted or was read up to it.
        A call reads about what it returns, not the whole backlog after ``after_object_key``."""
        running = self._full_set()
        if len(running) == 1:
            (inner,) = running.values()
            return await inner.get_files_to_delete(marked_before_ms, limit, after_object_key)
        page = max(limit, _FILES_PAGE) if limit > 0 else 0
        listings = [_Listing(inner, marked_before_ms, page, after_object_key)
                    for _, inner in sorted(running.items())]  # fmt: skip
        out: list[FileToDelete] = []
        while True:
            # every listing not exhausted has buffered entries (a short page exhausts it)
            await asyncio.gather(*(x.read() for x in listings if not x.buffered and not x.done))
            # keys <= bound are decided: every listing was read up to it (or to its end)
            open_ = [x.buffered[-1].object_key for x in listings if not x.done]
            bound = min(open_) if open_ else None
            decided: dict[str, dict[int, FileToDelete]] = {}
            for i, x in enumerate(listings):
                while x.buffered and (bound is None or x.buffered[0].object_key <= bound):
                    f = x.buffered.popleft()
                    decided.setdefault(f.object_key, {})[i] = f
            if not decided:  # every listing exhausted and consumed
                return out
            keys = sorted(decided)
            known = await asyncio.gather(*(x.inner.file_states(keys) for x in listings))
            for key in keys:
                mine = decided[key]
                # every partition that has a row of the key has it marked before the cutoff
                if any(key in k and i not in mine for i, k in enumerate(known)):
                    continue
                out.append(FileToDelete(
                    key, max(f.marked_for_deletion_at_ms for f in mine.values()),
                    max(f.size for f in mine.values())))  # fmt: skip
                if 0 < limit <= len(out):
                    return out

    async def delete_files(self, object_keys: Sequence[str]) -> list[int]:
        if not object_keys:
            return []
        running = self._full_set()
        if len(running) == 1:
            (inner,) = running.values()
            return await inner.delete_files(object_keys)
        keys = list(object_keys)
        known = {p: await inner.file_states(keys) for p, inner in running.items()}
        codes: dict[str, int] = {}
        per_partition: dict[int, list[str]] = {}
        for key in dict.fromkeys(keys):
            holders = [p for p in running if key in known[p]]
            if not holders:
                codes[key] = Errors.RESOURCE_NOT_FOUND
            elif any(known[p][key] != "deleting" for p in holders):
                codes[key] = Errors.INVALID_REQUEST  # still referenced by some partition
            elif not all(running[p].is_writable for p in holders):
                codes[key] = NOT_COORDINATOR
            else:
                for p in holders:
                    per_partition.setdefault(p, []).append(key)
        results = await asyncio.gather(
            *(running[p].delete_files(ks) for p, ks in per_partition.items())
        )
        for ks, got in zip(per_partition.values(), results, strict=True):
            for key, code in zip(ks, got, strict=True):
                if codes.get(key, Errors.NONE) == Errors.NONE:
                    codes[key] = code
        out: list[int] = []
        seen: set[str] = set()
        for key in keys:  # a repetition of a key forgotten by its earlier occurrence
            code = codes[key]
            out.append(Errors.RESOURCE_NOT_FOUND if key in seen and code == Errors.NONE else code)
            seen.add(key)
        return out

    async def is_safe_to_delete_file(self, object_key: str) -> bool:
        running = self._full_set()
        for p, inner in running.items():
            if not inner.is_writable:
                raise NotCoordinatorError(
                    f"node {self.node_id} does not lead {DISKLESS_METADATA_TOPIC_NAME}-{p}"
                )
        answers = await asyncio.gather(
            *(inner.is_safe_to_delete_file(object_key) for inner in running.values())
        )
        return all(answers)


#: Entries per read of one partition's listing in a merged ``get_files_to_delete`` with a limit
#: (at least the limit).
_FILES_PAGE = 100


class _Listing:
    """One coordinator partition's ``get_files_to_delete`` listing (sorted by object key,
    strictly after a key, at most ``page`` entries per read; 0 = all), read page by page:
    ``buffered`` holds the entries read and not yet merged, ``last`` the last key read (the next
    page starts after it) and ``done`` says the listing has no more (a page shorter than
    ``page``)."""

    __slots__ = ("buffered", "done", "inner", "last", "marked_before_ms", "page")

    def __init__(
        self,
        inner: ReplicatedBatchCoordinator,
        marked_before_ms: int | None,
        page: int,
        after_object_key: str | None,
    ) -> None:
        self.inner = inner
        self.marked_before_ms = marked_before_ms
        self.page = page
        self.last = after_object_key
        self.buffered: collections.deque[FileToDelete] = collections.deque()
        self.done = False

    async def read(self) -> None:
        files = await self.inner.get_files_to_delete(self.marked_before_ms, self.page, self.last)
        self.buffered.extend(files)
        if files:
            self.last = files[-1].object_key
        if self.page <= 0 or len(files) < self.page:
            self.done = True


def _fetch_budget(
    requests: Sequence[FindBatchRequest], answers: list[FindBatchResponse], fetch_max_bytes: int
) -> list[FindBatchResponse]:
    """The single-coordinator fetch budget (``sqlite.SqliteOps.find_batches``) applied again, in
    request order, to answers each computed with the whole budget by its own coordinator
    partition: a batch is kept unless the request already has bytes and the entry reached its
    ``max_partition_fetch_bytes`` or the request ``fetch_max_bytes``. An answer that is within
    the budget is returned as it is."""
    request_bytes = 0
    out: list[FindBatchResponse] | None = None
    for i, (r, a) in enumerate(zip(requests, answers, strict=True)):
        if a.error != Errors.NONE or not a.batches:
            continue
        kept = 0
        partition_bytes = 0
        max_partition = r.max_partition_fetch_bytes
        for b in a.batches:
            if request_bytes and (
                partition_bytes >= max_partition or request_bytes >= fetch_max_bytes
            ):
                break
            partition_bytes += b.byte_size
            request_bytes += b.byte_size
            kept += 1
        if kept < len(a.batches):
            if out is None:
                out = list(answers)
            out[i] = FindBatchResponse.success(a.batches[:kept], a.log_start_offset,
                                               a.high_watermark)  # fmt: skip
    return answers if out is None else out
