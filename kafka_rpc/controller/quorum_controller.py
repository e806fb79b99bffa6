"""The controller loop on the metadata log (Kafka's ``QuorumController``;
docs/architecture.md, 'The controller').

:class:`QuorumController` is the Raft :class:`~kafka_rpc.raft.api.StateMachine` of every node
that runs the metadata log (voters and broker-only observers), around the sans-io core of
``kafka_rpc.controller`` (the image, the control managers, replay, snapshot):

* **Committed image** (:attr:`QuorumController.image`): every committed batch's records are
  replayed at ``base_offset + i`` with the batch's epoch (control batches skipped); a snapshot is
  loaded with :func:`~kafka_rpc.controller.snapshot.load`. Publishing is one reference swap of an
  immutable image, then each of :attr:`QuorumController.publishers` is called with (old image,
  new image). :meth:`snapshot_records` writes the committed image.
* **Active controller**: this node once ``handle_leader_change(self, epoch)`` arrives (the core
  sends it only after this node replayed past its epoch start). It keeps an *uncommitted* image
  and runs write events one at a time: build the command's context from the uncommitted image
  (``next_offset`` = the offset the driver gives the next appended record), run the command,
  replay its records into the uncommitted image at the offsets they will get (the next command
  sees them), append them as one batch, and answer once they are committed (``handle_commit``
  completes the waiters up to the committed offset, Kafka's ``deferredEventQueue.completeUpTo``).
  The write part is synchronous code on the event loop, so two write events never interleave. A
  command without records answers once every earlier write has committed (Kafka's
  ``nextWriteOffset - 1`` rule), at once when nothing is pending.
* **Losing leadership** (a leader change naming another node, or ``NotLeaderError`` on append):
  the uncommitted image falls back to the committed one and pending requests are answered
  NOT_CONTROLLER. Non-active nodes answer every write NOT_CONTROLLER.
* **Renouncing on a fault** (Kafka's ``renounce``): a write event's records are replayed into
  the uncommitted image *before* they are appended (Kafka's ``ControllerWriteEvent``: replay,
  then ``scheduleAtomicAppend``), so a record the active controller cannot replay is never
  written; such a failure (or a snapshot load, or a failed activation, while active) makes it
  renounce as above **and resign** the Raft leadership of its epoch (the ``resign`` callable,
  Kafka's ``raftClient.resign``), so another controller is elected and rebuilds from the
  committed log. Kafka's fatal fault handler stops the process there; we keep it running.
* **Activation** (Kafka's ``ActivationRecordsGenerator``, written synchronously when this node
  becomes active, before any command can run): on an empty log the bootstrap records
  (:class:`~kafka_rpc.controller.features.BootstrapMetadata`: the feature levels the storage was
  formatted with, then the SCRAM credentials of ``--add-scram``) wrapped in a metadata
  transaction; on a log that ends inside a transaction an ``AbortTransactionRecord``. A write
  event finding no ``metadata.version`` in the uncommitted image answers NOT_CONTROLLER.
* **Metadata transactions** (:mod:`~kafka_rpc.controller.offsets`): the committed image
  takes a transaction's records at its EndTransactionRecord and drops them at an
  AbortTransactionRecord; while one is open the published image stays where it was before it and
  :attr:`QuorumController.in_transaction` holds off snapshots.
* **Records are written at the versions the finalized features dictate**
  (:func:`~kafka_rpc.controller.features.record_version`, from the uncommitted image).
* **Timers on the active controller** (one background task): a ``NoOpRecord`` after
  ``metadata.max.idle.interval.ms`` without a write, the creation of ``__diskless-metadata``
  once ``diskless.metadata.topic.replication.factor`` brokers running the Batch Coordinator are
  registered and unfenced, never with fewer replicas (KIP-1164,
  ``coordinator_mapping.metadata_topic_due``; until then a WARNING per change of the shortfall
  and :attr:`QuorumController.diskless_metadata_missing_brokers`), and the
  broker session check
  (:func:`~kafka_rpc.controller.replication.fence_stale_brokers` with
  ``broker.session.timeout.ms``)
  when the first unfenced broker's session expires and at least every
  ``fence_check_interval_ms``, each as a write event.
* **Periodic elections** (Kafka's ``electPreferred`` / ``electUnclean`` tasks, timers of the
  same task): the preferred-leader rebalance every ``leader.imbalance.check.interval.seconds``
  when ``auto.leader.rebalance.enable``, the unclean election of leaderless partitions whose
  topic allows it every ``unclean.leader.election.interval.ms``.
* **Broker sessions**: the last heartbeat (or registration) per broker, in memory on the active
  controller only, seeded with "now" for every registered broker when it becomes active
  (``ClusterControlManager.activate``).
* **AllocateProducerIds rate limit**: at most ``producer.ids.allocation.max.per.second`` blocks
  per broker in any one-second window; over it the request gets THROTTLING_QUOTA_EXCEEDED and
  ``ThrottleTimeMs`` = the time until the window allows the next one (no block, no record).

All methods run on the event loop thread (the driver's). The driver needs ``append(records) ->
last offset`` (raising :class:`~kafka_rpc.raft.core.NotLeaderError`) and ``core`` (its
``log.end_offset`` plus the records waiting for the linger give the next write offset).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol, cast

from kafka_rpc.controller import (
    acls,
    chunks,
    client_quotas,
    cluster,
    configuration,
    features,
    partitions,
    producer_ids,
    replication,
    scram,
    snapshot,
)
from kafka_rpc.controller import coordinator_mapping as M
from kafka_rpc.controller.base import ControllerContext, ControllerResult, ReplayError
from kafka_rpc.controller.features import BootstrapMetadata, FeatureError, record_version
from kafka_rpc.controller.image import EMPTY, ImageDraft, MetadataImage
from kafka_rpc.controller.offsets import MARKERS, TransactionState
from kafka_rpc.controller.replay import replay
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import DecodeError, ErrorCode
from kafka_rpc.raft.core import NotLeaderError
from kafka_rpc.security.acls import acl_error_response

__all__ = ["QuorumController", "not_controller_response"]

log = logging.getLogger("kafka_rpc.controller")

_R = codec.message_class


class _NotController(Exception):
    pass


class _Levels:
    """Feature levels standing in for an image when choosing record versions (the activation
    batch of an empty log, whose levels are the bootstrap's)."""

    __slots__ = ("features",)

    def __init__(self, levels: Any) -> None:
        self.features = levels


class KRaftVersionAccessor(Protocol):
    """What the controller uses of its metadata log's Raft replica for ``kraft.version``
    (Kafka's ``KRaftVersionAccessor``, given to ``FeatureControlManager`` by
    ``QuorumController``): the composition root passes one; the controller never reaches for
    the replica."""

    def kraft_version(self) -> int:
        """The Raft layer's ``kraft.version``: the latest KRaftVersionRecord (0 without one), on
        the leader the pending level of an accepted upgrade (``RaftClient.kraftVersion``)."""
        ...

    def upgrade_kraft_version(
        self, epoch: int, level: int, validate_only: bool
    ) -> tuple[int, str | None]:
        """``RaftClient.upgradeKRaftVersion(epoch, level, validateOnly)``: ``(0, None)`` when the
        upgrade is accepted (the KRaftVersionRecord batch appended unless ``validate_only``),
        else ``(error code, message)`` (a stale ``epoch``: NOT_LEADER_OR_FOLLOWER; a voter whose
        range excludes ``level``: INVALID_UPDATE_VERSION ...)."""
        ...


class RaftCoreKRaftVersion:
    """A :class:`KRaftVersionAccessor` over a Raft core (``core()``: the metadata log's
    ``RaftCore``, looked up on each call, so the composition root may build this before the
    replica is open; ``now_ms()``: the core's clock): ``core.kraft_version`` and
    ``core.upgrade_kraft_version(now, epoch, level, validate_only)``, the core's KIP-853
    interface (``kafka_rpc.raft``)."""

    def __init__(self, core: Callable[[], Any], now_ms: Callable[[], int]) -> None:
        self._core = core
        self._now_ms = now_ms

    def kraft_version(self) -> int:
        return int(self._core().kraft_version)

    def upgrade_kraft_version(
        self, epoch: int, level: int, validate_only: bool
    ) -> tuple[int, str | None]:
        code, message = self._core().upgrade_kraft_version(
            self._now_ms(), epoch, level, validate_only
        )
        return int(code), message


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def not_controller_response(request: Any) -> Any:
    """The NOT_CONTROLLER answer to a controller write request (per entry where the response
    has entries)."""
    name = type(request).__spec_name__
    code = ErrorCode.NOT_CONTROLLER
    msg = "This node is not the active controller."
    if name == "CreateTopicsRequest":
        return replication.create_topics_error_response(request, code, msg)
    if name == "DeleteTopicsRequest":
        return replication.delete_topics_error_response(request, code, msg)
    if name == "CreatePartitionsRequest":
        return replication.create_partitions_error_response(request, code, msg)
    if name == "CreateChunksRequest":
        return chunks.create_chunks_error_response(request, 0, code, msg)
    if name == "AlterChunkAssignmentsRequest":
        return chunks.alter_chunk_assignments_error_response(request, 0, code, msg)
    if name == "AssignPartitionToBatchCoordinatorRequest":
        return M.assign_error_response(request, 0, code)
    if name in ("CreateAclsRequest", "DeleteAclsRequest"):
        return acl_error_response(request, code, msg)
    if name in ("IncrementalAlterConfigsRequest", "AlterConfigsRequest"):
        return configuration.alter_configs_error_response(request, code, msg)
    if name == "AlterClientQuotasRequest":
        return client_quotas.alter_client_quotas_error_response(request, code, msg)
    if name == "AlterUserScramCredentialsRequest":
        return scram.alter_user_scram_credentials_error_response(request, code, msg)
    if name == "AssignReplicasToDirsRequest":
        return replication.assign_replicas_to_dirs_error_response(request, code, msg)
    if name == "ElectLeadersRequest":
        return partitions.elect_leaders_error_response(request, code, msg)
    if name == "AlterPartitionReassignmentsRequest":
        return partitions.alter_partition_reassignments_error_response(request, code, msg)
    if name == "ListPartitionReassignmentsRequest":
        return partitions.list_partition_reassignments_error_response(request, code, msg)
    if name == "UpdateFeaturesRequest":
        return _R("UpdateFeaturesResponse")(error_code=code, error_message=msg)
    return _R(name[: -len("Request")] + "Response")(error_code=code)


class QuorumController:
    """See the module docstring. ``attach(driver)`` before the driver starts; ``start()`` runs
    the active controller's timers (controllers only), ``stop()`` ends them and answers pending
    requests NOT_CONTROLLER."""

    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        *,
        session_timeout_ms: int = 9000,
        idle_interval_ms: int = 500,
        fence_check_interval_ms: int = 1000,
        producer_ids_max_per_second: int = 10,
        num_partitions: int = 1,
        default_replication_factor: int = 1,
        rng: random.Random | None = None,
        clock_ms: Callable[[], int] = _monotonic_ms,
        diskless_metadata_partitions: int = 0,
        diskless_metadata_replication_factor: int = 3,
        unclean_leader_election_enable: bool = False,
        leader_imbalance_check_interval_ms: int | None = 300_000,
        unclean_leader_election_interval_ms: int = 300_000,
        bootstrap: BootstrapMetadata | None = None,
        min_insync_replicas: int = 1,
        kraft: KRaftVersionAccessor | None = None,
        voter_ids: Callable[[], Collection[int]] | None = None,
        resign: Callable[[int], Any] | None = None,
    ) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.session_timeout_ms = session_timeout_ms
        self.idle_interval_ms = idle_interval_ms
        self.fence_check_interval_ms = fence_check_interval_ms
        self.producer_ids_max_per_second = producer_ids_max_per_second
        self.num_partitions = num_partitions
        self.default_replication_factor = default_replication_factor
        self.rng = rng or random.Random()
        self.clock_ms = clock_ms
        #: KIP-1164 ``__diskless-metadata`` creation (0 partitions: never created); see
        #: :func:`~kafka_rpc.controller.coordinator_mapping.metadata_topic_due`
        self.diskless_metadata_partitions = diskless_metadata_partitions
        self.diskless_metadata_replication_factor = diskless_metadata_replication_factor
        #: on the active controller, how many more brokers running the Batch Coordinator must be
        #: registered and unfenced before it can create ``__diskless-metadata`` (0: it exists,
        #: or is about to be created, or this node is not the active controller); the gauge
        #: ``kafka_rpc_diskless_metadata_missing_brokers`` (:mod:`kafka_rpc.controller.metrics`)
        self.diskless_metadata_missing_brokers = 0
        self._logged_shortfall: tuple[int, int] | None = None
        #: ``unclean.leader.election.enable`` of this node's static config (the last fallback)
        self.unclean_leader_election_enable = unclean_leader_election_enable
        #: the periodic preferred-leader election (``auto.leader.rebalance.enable`` with
        #: ``leader.imbalance.check.interval.seconds``; None = off) and the periodic unclean
        #: election (``unclean.leader.election.interval.ms``), in ms
        self.leader_imbalance_check_interval_ms = leader_imbalance_check_interval_ms
        self.unclean_leader_election_interval_ms = unclean_leader_election_interval_ms
        self._last_balance_ms = 0
        self._last_unclean_ms = 0
        #: the metadata log's ``kraft.version`` and its upgrade (None: kraft.version 0, no
        #: upgrade; :class:`KRaftVersionAccessor`)
        self.kraft = kraft
        #: the metadata quorum's voter ids, from the Raft replica's voter set (a dynamic
        #: quorum's changes with it); None: this node alone (``ctx.controller_ids``)
        self.voter_ids = voter_ids
        #: the metadata log's Raft replica giving up the leadership of an epoch (Kafka's
        #: ``raftClient.resign(epoch)``, called by ``renounce``), so another controller takes
        #: over; None: nothing to tell (the controller only reverts its own state)
        self.resign = resign
        #: what the first active controller of an empty log writes (the formatted features and
        #: SCRAM credentials; the default bootstrap when None: every proposal finalized)
        self.bootstrap = bootstrap if bootstrap is not None else BootstrapMetadata.default()
        #: Kafka's ``min.insync.replicas``: the cluster default the bootstrap writes with ELR on
        self.min_insync_replicas = min_insync_replicas
        self.driver: Any = None
        #: the committed image (every node); replaced, never mutated
        self.image: MetadataImage = EMPTY
        #: called as ``publisher(old image, new image)`` on the event loop after each change of
        #: :attr:`image` (Kafka's ``MetadataPublisher.onMetadataUpdate``); must not block; one
        #: that raises is logged and the others still run
        self.publishers: list[Callable[[MetadataImage, MetadataImage], None]] = []
        #: the raft leader id (-1 unknown) and epoch of the last leader change
        self.active_controller_id = -1
        self.leader_epoch = -1
        #: last offset handed to the state machine (inclusive; control batches count)
        self.committed_offset = -1
        #: the offset of the committed image that last changed the finalized features (-1:
        #: none yet), Kafka's ``FinalizedFeaturesEpoch`` on the controller listener
        self.features_epoch = -1
        #: the open metadata transaction of the committed log, and the image with its records
        #: (``image`` stays at the image before it while it is open)
        self._txn = TransactionState()
        self._replay_image: MetadataImage = EMPTY
        #: committed records replayed per record type (since start-up or the last snapshot load)
        self.record_counts: Counter[str] = Counter()
        self.skipped_records = 0  # undecodable / unknown / contradicting records (logged)
        # active controller state
        self._active_epoch = -1
        self._uncommitted: MetadataImage = EMPTY
        self._last_written = -1  # last offset this controller appended (inclusive)
        self._deferred: list[tuple[int, asyncio.Future]] = []
        self._heartbeats: dict[int, int] = {}
        #: BrokerHeartbeatManager state besides the session clock: each broker's last reported
        #: CurrentMetadataOffset and, while in controlled shutdown, the end offset of the batch
        #: that put it there (in memory on the active controller only)
        self._metadata_offsets: dict[int, int] = {}
        self._shutdown_offsets: dict[int, int] = {}
        self._pid_throttle = producer_ids.AllocationThrottle()
        self._last_write_ms = 0
        self._last_fence_check_ms = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    # ================================================================== lifecycle
    def attach(self, driver: Any) -> None:
        self.driver = driver

    def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.is_active:
            self._renounce("the controller is stopping")

    # ================================================================== queries
    @property
    def is_active(self) -> bool:
        """This node is the active controller (the leader, caught up to its epoch start)."""
        return self._active_epoch >= 0

    @property
    def uncommitted_image(self) -> MetadataImage:
        """The active controller's image with its not yet committed writes (the committed image
        on any other node)."""
        return self._uncommitted if self.is_active else self.image

    # ================================================================== StateMachine
    def handle_commit(self, batches: Sequence[Any]) -> None:
        old = self.image
        draft = None  # Kafka's MetadataDelta: every batch of this call, one new image
        for batch in batches:
            if batch.last_offset <= self.committed_offset:
                continue  # a redelivery
            if draft is None:
                draft = ImageDraft(self._replay_image)
            if not batch.is_control:
                for i, value in enumerate(batch.records):
                    draft = self._replay_value(draft, value, batch.base_offset + i, batch.epoch)
            # every batch moves the provenance, control batches included (Kafka's
            # MetadataBatchLoader), so it matches a snapshot loaded at the same offset
            draft.last_offset = batch.last_offset
            draft.last_epoch = batch.epoch
            self.committed_offset = batch.last_offset
        if draft is None:
            img = old
        else:
            self._replay_image = draft.freeze()
            # an open transaction has its base image (set with its start)
            img = cast(MetadataImage, self._txn.base) if self._txn.open else self._replay_image
        self.image = img
        if self.is_active and self._last_written <= self.committed_offset:
            self._uncommitted = img  # nothing in flight: the two images are the same
        self._publish(old)
        self._complete_up_to(self.committed_offset)

    def handle_load_snapshot(self, reader: Any) -> None:
        if self.is_active:  # Kafka: a fatal fault; the leader never loads a snapshot
            log.error("node %d: asked to load a snapshot while active", self.node_id)
            self._renounce("snapshot load on the active controller", resign=True)
        records = [
            value
            for batch in reader.batches()
            if not batch.is_control
            for value in batch.records
            if value is not None
        ]
        sid = reader.snapshot_id
        old = self.image
        self.image = snapshot.load(records, sid.offset - 1, sid.epoch)
        self._replay_image = self.image
        self._txn.reset()
        self.committed_offset = sid.offset - 1
        self.record_counts = Counter()
        for value in records:
            with contextlib.suppress(DecodeError):
                self.record_counts[type(codec.decode_record(value)[0]).__spec_name__] += 1
        self._publish(old)

    def _publish(self, old: MetadataImage) -> None:
        new = self.image
        if new is old:
            return
        if new.features is not old.features and new.features != old.features:
            self.features_epoch = new.last_offset
        for publisher in list(self.publishers):
            try:
                publisher(old, new)
            except Exception:
                log.exception("controller: metadata publisher %r failed", publisher)

    def snapshot_records(self) -> list[bytes]:
        return snapshot.image_records(self.image)

    @property
    def in_transaction(self) -> bool:
        """The committed log ends inside a metadata transaction: no snapshot now (Kafka takes
        them at the last stable offset, ``OffsetControlManager.lastStableOffset``)."""
        return self._txn.open

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.active_controller_id = leader_id
        self.leader_epoch = epoch
        if leader_id == self.node_id and self.node_id >= 0:
            if self._active_epoch == epoch:
                return
            if self.is_active:
                self._renounce(f"leadership moved to epoch {epoch}")
            self._activate(epoch)
        elif self.is_active:
            self._renounce(f"node {leader_id} leads epoch {epoch}")

    # ================================================================== replay
    def _replay_value(self, img: ImageDraft, value: bytes | None, offset: int, epoch: int):
        """Replay one committed record into ``img`` (a draft); returns the draft to go on with
        (a transaction marker may start a new one)."""
        if value is None:
            self.skipped_records += 1
            return img
        try:
            rec, _version = codec.decode_record(value)
        except DecodeError as e:
            self.skipped_records += 1
            log.warning("metadata log: skipping an undecodable record at %d: %s", offset, e)
            return img
        try:
            if type(rec).__spec_name__ in MARKERS:
                img = self._txn.mark(img, rec, offset)
                log.info("metadata log: replayed %s at offset %d", type(rec).__spec_name__,
                         offset)  # fmt: skip
            else:
                img = replay(img, rec, offset, epoch)
        except (ReplayError, TypeError) as e:
            # Kafka stops the node here (its state would diverge from the log); we log loudly and
            # go on without the record.
            self.skipped_records += 1
            log.error("metadata log: cannot replay %s at %d: %s", type(rec).__name__, offset, e)
            return img
        self.record_counts[type(rec).__spec_name__] += 1
        return img

    # ================================================================== activation
    def _activate(self, epoch: int) -> None:
        now = self.clock_ms()
        self._active_epoch = epoch
        self._uncommitted = self.image
        self._last_written = self.committed_offset
        # ClusterControlManager.activate (KAFKA-18138): only unfenced brokers get a session now
        self._heartbeats = dict.fromkeys(
            (b for b, reg in self.image.brokers.items() if not reg.fenced), now
        )
        self._metadata_offsets = {}
        self._shutdown_offsets = {}
        self._pid_throttle.clear()
        self._last_write_ms = now
        self._last_fence_check_ms = now
        self._last_balance_ms = now
        self._last_unclean_ms = now
        log.info("node %d: active controller in epoch %d at offset %d", self.node_id, epoch,
                 self.committed_offset)  # fmt: skip
        self._write_activation_records()
        if self._wake is not None:
            self._wake.set()

    def _write_activation_records(self) -> None:
        """Kafka's ``CompleteActivationEvent``: the bootstrap records on an empty log, an
        AbortTransactionRecord when the log ends inside a transaction, appended now, so no
        command runs before them (their versions follow the bootstrap's levels on an empty
        log)."""
        try:
            recs, message = features.activation_records(
                self.image, self.bootstrap, self._txn.start, self.min_insync_replicas
            )
        except FeatureError as e:
            log.error("node %d: cannot activate: %s", self.node_id, e)
            self._renounce(str(e), resign=True)
            return
        log.info("node %d: %s", self.node_id, message)
        if not recs:
            return
        levels = _Levels(self.image.features or self.bootstrap.levels)
        try:
            self._write(lambda img, ctx: ControllerResult(recs, None), version_image=levels)
        except _NotController as e:
            log.warning("node %d: the activation records were not written: %s", self.node_id, e)

    def _renounce(self, why: str, resign: bool = False) -> None:
        """Kafka's ``renounce``: stop being the active controller, the uncommitted state dropped
        (the image falls back to the committed one), pending requests answered NOT_CONTROLLER.
        With ``resign`` (a fault of this controller: a replay failure of its own records, a
        snapshot load or a failed activation while active) the Raft replica also gives up the
        leadership of the epoch (:attr:`resign`), so another controller is elected, as Kafka's
        ``renounce`` calls ``raftClient.resign``; when leadership has already moved (a leader
        change, an append refused) there is nothing to resign."""
        if not self.is_active:
            return
        epoch = self._active_epoch
        if resign:
            log.error("node %d: renouncing the leadership of epoch %d: %s", self.node_id, epoch,
                      why)  # fmt: skip
        else:
            log.info("node %d: no longer the active controller (%s)", self.node_id, why)
        self._active_epoch = -1
        self._uncommitted = self.image
        self._last_written = self.committed_offset
        self._heartbeats = {}
        self._metadata_offsets = {}
        self._shutdown_offsets = {}
        self._pid_throttle.clear()
        self.diskless_metadata_missing_brokers = 0
        self._logged_shortfall = None
        deferred, self._deferred = self._deferred, []
        for _, fut in deferred:
            if not fut.done():
                fut.set_exception(_NotController(why))
        if resign and self.resign is not None:
            try:
                self.resign(epoch)
            except Exception:
                log.exception("node %d: resigning epoch %d failed", self.node_id, epoch)

    def _complete_up_to(self, offset: int) -> None:
        if not self._deferred:
            return
        keep = []
        for entry in self._deferred:
            want, fut = entry
            if want <= offset:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append(entry)
        self._deferred = keep

    # ================================================================== write events
    def _next_write_offset(self) -> int:
        return self.driver.core.next_offset

    def _context(self, now: int) -> ControllerContext:
        return ControllerContext(
            now_ms=now,
            next_offset=self._next_write_offset(),
            cluster_id=self.cluster_id,
            rng=self.rng,
            default_replication_factor=self.default_replication_factor,
            num_partitions=self.num_partitions,
            last_heartbeat_ms=self._heartbeats,
            session_timeout_ms=self.session_timeout_ms,
            controller_ids=self._controller_ids(),
            metadata_offsets=self._metadata_offsets,
            controlled_shutdown_offsets=self._shutdown_offsets,
            controller_id=self.node_id,
            unclean_leader_election_enable=self.unclean_leader_election_enable,
            kraft_version=self.kraft_version,
        )

    @property
    def kraft_version(self) -> int:
        """The metadata log's ``kraft.version`` as the Raft replica has it (0 without one)."""
        kraft = self.kraft
        return kraft.kraft_version() if kraft is not None else 0

    def _controller_ids(self) -> frozenset[int]:
        voters = self.voter_ids() if self.voter_ids is not None else ()
        return frozenset(voters) if voters else frozenset({self.node_id})

    def _write(
        self,
        fn: Callable[[MetadataImage, ControllerContext], ControllerResult],
        version_image: Any = None,
    ):
        """One write event, synchronously (Kafka's ``ControllerWriteEvent``): run ``fn`` on the
        uncommitted image, replay its records (each at the version the uncommitted image's
        features dictate, or ``version_image``'s, encoded and decoded as the log will hold them)
        into the uncommitted image at the offsets they will get, **then** append them as one
        batch: a record this controller cannot replay is never written. A replay failure is
        fatal for the leadership (Kafka's fatal fault there stops the process): the controller
        renounces with a resignation (:meth:`_renounce`), nothing is appended, and the request
        answers NOT_CONTROLLER. Returns ``(result, offset to wait for)``; raises _NotController
        (also while no ``metadata.version`` is finalized, which only the activation records,
        with ``version_image``, may write)."""
        if not self.is_active or self.driver is None:
            raise _NotController("not the active controller")
        if version_image is None and features.METADATA_VERSION not in self._uncommitted.features:
            raise _NotController("no metadata.version has been written yet")
        now = self.clock_ms()
        ctx = self._context(now)
        res = fn(self._uncommitted, ctx)
        if res.records:
            vimg = self._uncommitted if version_image is None else version_image
            data = [codec.encode_record(r, record_version(r, vimg)) for r in res.records]
            img = self._uncommitted
            for i, value in enumerate(data):
                offset = ctx.next_offset + i
                try:
                    rec, _ = codec.decode_record(value)
                    img = replay(img, rec, offset, self._active_epoch)
                except Exception as e:
                    why = (f"unable to apply {type(res.records[i]).__name__} record at offset "
                           f"{offset} on the active controller: {e}")  # fmt: skip
                    self._renounce(why, resign=True)
                    raise _NotController(why) from e
            try:
                last = self.driver.append(data)
            except NotLeaderError as e:
                self._renounce(f"append refused: {e}")
                raise _NotController(str(e)) from e
            first = last - len(data) + 1
            if first != ctx.next_offset:  # the broker epoch would not be the record's offset
                log.error("controller: records written at %d, expected %d", first,
                          ctx.next_offset)  # fmt: skip
            self._uncommitted = img
            self._last_written = last
            self._last_write_ms = now
        return res, self._last_written

    async def _submit(self, fn, request: Any, after: Callable[[Any, int], None] | None = None):
        """A write event for a request: the response once its records (and every earlier
        write) are committed; NOT_CONTROLLER when not active or leadership is lost first."""
        try:
            res, wait_for = self._write(fn)
            if after is not None:
                after(res.response, self.clock_ms())
            if wait_for > self.committed_offset:
                fut = asyncio.get_running_loop().create_future()
                self._deferred.append((wait_for, fut))
                await fut
        except _NotController:
            return not_controller_response(request)
        return res.response

    def _internal_write(self, fn, what: str) -> Any:
        try:
            res, _ = self._write(fn)
            return res.response
        except _NotController:
            return None
        except Exception:
            log.exception("controller: %s failed", what)
            return None

    # ================================================================== commands
    async def register_controller(self, request: Any, version: int) -> Any:
        """ControllerRegistration (KIP-919; :func:`~kafka_rpc.controller.cluster.
        register_controller`): a RegisterControllerRecord, answered once committed."""
        return await self._submit(
            lambda img, ctx: cluster.register_controller(img, request, ctx), request
        )

    async def register_broker(self, request: Any, version: int) -> Any:
        """BrokerRegistration (:func:`~kafka_rpc.controller.cluster.register_broker`, with
        :func:`~kafka_rpc.controller.replication.broker_shutdown_records` cleaning up an old
        incarnation). On success the broker's session starts now; a new incarnation's old
        heartbeat state (metadata offset, controlled shutdown offset) is dropped."""
        bid = request.broker_id
        prev = self._uncommitted.brokers.get(bid) if self.is_active else None

        def after(resp: Any, now: int) -> None:
            if resp.error_code == 0:
                self._heartbeats[bid] = now
                if prev is None or prev.incarnation_id != request.incarnation_id:
                    self._metadata_offsets.pop(bid, None)
                    self._shutdown_offsets.pop(bid, None)

        return await self._submit(
            lambda img, ctx: cluster.register_broker(
                img,
                request,
                ctx,
                lambda i, bid, off: replication.broker_shutdown_records(i, bid, off, ctx),
            ),
            request,
            after,
        )

    async def broker_heartbeat(self, request: Any, version: int) -> Any:
        """BrokerHeartbeat (:func:`~kafka_rpc.controller.replication.broker_heartbeat`): the
        session clock and the reported metadata offset are updated (Kafka's ``touch``), and a
        broker that has just entered controlled shutdown gets its controlled shutdown offset (the
        end of the batch that put it there, ``maybeUpdateControlledShutdownOffset``)."""
        bid = request.broker_id

        def after(resp: Any, now: int) -> None:
            if resp.error_code != 0:
                return
            self._heartbeats[bid] = now
            self._metadata_offsets[bid] = request.current_metadata_offset
            reg = self._uncommitted.brokers.get(bid)
            if reg is not None and reg.in_controlled_shutdown and not reg.fenced:
                self._shutdown_offsets.setdefault(bid, self._last_written)
            else:
                self._shutdown_offsets.pop(bid, None)

        return await self._submit(
            lambda img, ctx: replication.broker_heartbeat(img, request, ctx), request, after
        )

    async def assign_replicas_to_dirs(self, request: Any, version: int) -> Any:
        """AssignReplicasToDirs (:func:`~kafka_rpc.controller.replication.
        assign_replicas_to_dirs`), answered once the PartitionChangeRecords are committed."""
        return await self._submit(
            lambda img, ctx: replication.assign_replicas_to_dirs(img, request, ctx), request
        )

    async def allocate_producer_ids(self, request: Any, version: int) -> Any:
        if self.is_active:
            throttle = self._pid_throttle.throttle_ms(
                request.broker_id, self.producer_ids_max_per_second, self.clock_ms()
            )
            if throttle > 0:
                return _R("AllocateProducerIdsResponse")(
                    throttle_time_ms=throttle, error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED
                )

        def after(resp: Any, now: int) -> None:
            if resp.error_code == 0 and self.producer_ids_max_per_second > 0:
                self._pid_throttle.granted(request.broker_id, now)

        return await self._submit(
            lambda img, ctx: producer_ids.allocate_producer_ids(img, request, ctx), request, after
        )

    async def unregister_broker(self, request: Any, version: int) -> Any:
        """UnregisterBroker (:func:`~kafka_rpc.controller.replication.unregister_broker`): answered
        after commit; the broker's session is dropped at once (Kafka's replay of the record
        removes it from the ``BrokerHeartbeatManager``)."""

        def after(resp: Any, now: int) -> None:
            if resp.error_code == 0:
                self._heartbeats.pop(request.broker_id, None)
                self._metadata_offsets.pop(request.broker_id, None)
                self._shutdown_offsets.pop(request.broker_id, None)

        return await self._submit(
            lambda img, ctx: replication.unregister_broker(img, request, ctx), request, after
        )

    async def alter_partition(self, request: Any, version: int) -> Any:
        """AlterPartition (:func:`~kafka_rpc.controller.partitions.alter_partition`), answered
        once its PartitionChangeRecords are committed; no topics: an empty answer at once
        (``QuorumController.alterPartition``)."""
        if not request.topics and self.is_active:
            return _R("AlterPartitionResponse")()
        return await self._submit(
            lambda img, ctx: partitions.alter_partition(img, request, ctx, version), request
        )

    async def elect_leaders(self, request: Any, version: int) -> Any:
        """ElectLeaders (:func:`~kafka_rpc.controller.partitions.elect_leaders`), answered after
        commit; an empty (not null) TopicPartitions gets an empty answer at once."""
        if request.topic_partitions is not None and not request.topic_partitions and self.is_active:
            return _R("ElectLeadersResponse")()
        return await self._submit(
            lambda img, ctx: partitions.elect_leaders(img, request, ctx, version), request
        )

    async def alter_partition_reassignments(self, request: Any, version: int) -> Any:
        """AlterPartitionReassignments (:func:`~kafka_rpc.controller.partitions.
        alter_partition_reassignments`), answered after commit; no topics: an empty answer at
        once."""
        if not request.topics and self.is_active:
            return _R("AlterPartitionReassignmentsResponse")(error_message=None)
        return await self._submit(
            lambda img, ctx: partitions.alter_partition_reassignments(img, request, ctx, version),
            request,
        )

    async def create_topics(self, request: Any, version: int) -> Any:
        return await self._submit(
            lambda img, ctx: replication.create_topics(img, request, ctx), request
        )

    async def create_partitions(self, request: Any, version: int) -> Any:
        """CreatePartitions (:func:`~kafka_rpc.controller.replication.create_partitions`),
        answered once the PartitionRecords are committed."""
        return await self._submit(
            lambda img, ctx: replication.create_partitions(img, request, ctx), request
        )

    async def delete_topics(self, request: Any, version: int) -> Any:
        return await self._submit(
            lambda img, ctx: replication.delete_topics(img, request, ctx), request
        )

    async def incremental_alter_configs(self, request: Any, version: int) -> Any:
        """IncrementalAlterConfigs (:func:`~kafka_rpc.controller.configuration.
        incremental_alter_configs`), answered once the ConfigRecords are committed."""
        return await self._submit(
            lambda img, ctx: configuration.incremental_alter_configs(
                img, request, ctx, replication.validate_topic_name
            ),
            request,
        )

    async def legacy_alter_configs(self, request: Any, version: int) -> Any:
        """AlterConfigs (:func:`~kafka_rpc.controller.configuration.legacy_alter_configs`),
        answered once the ConfigRecords are committed."""
        return await self._submit(
            lambda img, ctx: configuration.legacy_alter_configs(
                img, request, ctx, replication.validate_topic_name
            ),
            request,
        )

    async def alter_client_quotas(self, request: Any, version: int) -> Any:
        """AlterClientQuotas (:func:`~kafka_rpc.controller.client_quotas.alter_client_quotas`),
        answered once the ClientQuotaRecords are committed."""
        return await self._submit(
            lambda img, ctx: client_quotas.alter_client_quotas(img, request, ctx), request
        )

    async def alter_user_scram_credentials(self, request: Any, version: int) -> Any:
        """AlterUserScramCredentials (:func:`~kafka_rpc.controller.scram.
        alter_user_scram_credentials`), answered once the records are committed."""
        return await self._submit(
            lambda img, ctx: scram.alter_user_scram_credentials(img, request, ctx), request
        )

    async def list_partition_reassignments(self, request: Any, version: int) -> Any:
        """ListPartitionReassignments (:func:`~kafka_rpc.controller.replication.
        list_partition_reassignments`), read from the committed image, as Kafka's read events;
        NOT_CONTROLLER when not active."""
        if not self.is_active:
            return not_controller_response(request)
        return replication.list_partition_reassignments(self.image, request)

    async def create_acls(self, request: Any, version: int) -> Any:
        """CreateAcls (:func:`kafka_rpc.controller.acls.create_acls`), answered after commit."""
        return await self._submit(lambda img, ctx: acls.create_acls(img, request, ctx), request)

    async def delete_acls(self, request: Any, version: int) -> Any:
        """DeleteAcls (:func:`kafka_rpc.controller.acls.delete_acls`), answered after commit."""
        return await self._submit(lambda img, ctx: acls.delete_acls(img, request, ctx), request)

    async def create_chunks(self, request: Any, version: int) -> Any:
        """CreateChunks (:func:`~kafka_rpc.controller.chunks.create_chunks`), answered once
        the ChunkRecords and PartitionChangeRecords are committed."""
        return await self._submit(lambda img, ctx: chunks.create_chunks(img, request, ctx), request)

    async def alter_chunk_assignments(self, request: Any, version: int) -> Any:
        """AlterChunkAssignments (:func:`~kafka_rpc.controller.chunks.alter_chunk_assignments`),
        answered once the ChunkChangeRecords are committed."""
        return await self._submit(
            lambda img, ctx: chunks.alter_chunk_assignments(img, request, ctx), request
        )

    async def assign_partition_to_batch_coordinator(self, request: Any, version: int) -> Any:
        """AssignPartitionToBatchCoordinator (:func:`~kafka_rpc.controller.coordinator_mapping.
        assign_partition_to_batch_coordinator`), answered once the mapping records are
        committed."""
        return await self._submit(
            lambda img, ctx: M.assign_partition_to_batch_coordinator(img, request, ctx), request
        )

    async def update_features(self, request: Any, version: int) -> Any:
        """UpdateFeatures (:func:`~kafka_rpc.controller.features.update_features`), answered once
        its FeatureLevelRecords are committed."""
        kraft = self.kraft

        def upgrade(level: int, validate_only: bool) -> tuple[int, str | None]:
            assert kraft is not None
            return kraft.upgrade_kraft_version(self._active_epoch, level, validate_only)

        return await self._submit(
            lambda img, ctx: features.update_features(
                img, request, version, self.node_id, sorted(ctx.controller_ids),
                ctx.kraft_version, upgrade if kraft is not None else None,
            ),
            request,
        )  # fmt: skip

    # ================================================================== timers
    def tick(self) -> None:
        """What the active controller owes now: the session check, a NoOp after the idle
        interval (each its own write event)."""
        if not self.is_active:
            return
        now = self.clock_ms()
        if (
            now - self._last_fence_check_ms >= self.fence_check_interval_ms
            or now >= self._next_session_expiry_ms()
        ):
            self._last_fence_check_ms = now
            fenced = self._internal_write(
                lambda img, ctx: replication.fence_stale_brokers(
                    img, self._heartbeats, ctx.now_ms, self.session_timeout_ms, ctx.next_offset,
                    ctx,
                ),
                "fencing stale brokers",
            )
            if fenced:
                log.info("controller: fenced brokers %s (no heartbeat within %d ms)", fenced,
                         self.session_timeout_ms)  # fmt: skip
        if self.diskless_metadata_partitions > 0:
            self._maybe_create_diskless_metadata(now)
        self._periodic_elections(now)
        if self.idle_interval_ms > 0 and now - self._last_write_ms >= self.idle_interval_ms:
            rec = _R("NoOpRecord")()
            self._internal_write(lambda img, ctx: ControllerResult([rec], None), "NoOp")

    def _periodic_elections(self, now: int) -> None:
        """Kafka's ``electPreferred`` and ``electUnclean`` periodic tasks, each a write event:
        every ``leader_imbalance_check_interval_ms`` (when set) a preferred election for the
        partitions not led by their first replica
        (:func:`~kafka_rpc.controller.partitions.balance_partition_leaders`), and every
        ``unclean_leader_election_interval_ms`` an unclean election for the leaderless
        partitions of topics that allow it (:func:`~kafka_rpc.controller.partitions.
        elect_unclean_leaders`). A run that hit the per-run bound is due again at once."""
        iv = self.leader_imbalance_check_interval_ms
        if iv is not None and now - self._last_balance_ms >= iv:
            more = self._internal_write(
                lambda img, ctx: partitions.balance_partition_leaders(img, ctx),
                "preferred leader election",
            )
            self._last_balance_ms = now - iv if more else now
        iv = self.unclean_leader_election_interval_ms
        if now - self._last_unclean_ms >= iv:
            more = self._internal_write(
                lambda img, ctx: partitions.elect_unclean_leaders(img, ctx),
                "unclean leader election",
            )
            self._last_unclean_ms = now - iv if more else now

    def _maybe_create_diskless_metadata(self, now: int) -> None:
        """KIP-1164: create ``__diskless-metadata`` once ``diskless.metadata.topic.replication.
        factor`` brokers running the Batch Coordinator are registered and unfenced (a write event
        of its TopicRecord and PartitionRecords,
        :func:`~kafka_rpc.controller.coordinator_mapping.create_diskless_metadata_topic`), never
        with fewer replicas. Until then :attr:`diskless_metadata_missing_brokers` says how many
        are missing, and a WARNING says so once per change of that shortfall."""
        rf = self.diskless_metadata_replication_factor
        missing = M.metadata_topic_shortfall(self._uncommitted, rf)
        self.diskless_metadata_missing_brokers = missing
        if missing > 0:
            seen = (missing, rf)
            if self._logged_shortfall != seen:
                self._logged_shortfall = seen
                log.warning(
                    "%s needs %d brokers running the Batch Coordinator, %d are registered and "
                    "unfenced; it will be created when %d are "
                    "(diskless.metadata.topic.replication.factor=%d); until then diskless topics "
                    "have no Batch Coordinator (FindCoordinator: COORDINATOR_NOT_AVAILABLE)",
                    M.DISKLESS_METADATA_TOPIC, rf, rf - missing, rf, rf,
                )  # fmt: skip
            return
        self._logged_shortfall = None
        if not M.metadata_topic_due(self._uncommitted, rf):
            return
        tid = self._internal_write(
            lambda img, ctx: M.create_diskless_metadata_topic(
                img, ctx, self.diskless_metadata_partitions, rf
            ),
            f"creating {M.DISKLESS_METADATA_TOPIC}",
        )
        if tid is not None:
            t = self._uncommitted.topics.get(tid)
            log.info("controller: created %s (id %s, %d partitions, replicas %s)",
                     M.DISKLESS_METADATA_TOPIC, tid, self.diskless_metadata_partitions,
                     [p.replicas for p in t.partitions.values()] if t else "?")  # fmt: skip

    def _next_session_expiry_ms(self) -> int:
        """When the first session of an unfenced broker expires (ms on ``clock_ms``): its last
        heartbeat + ``broker.session.timeout.ms`` + 1, so a dead broker is fenced on time rather
        than at the next periodic check (Kafka schedules the check for the oldest session's
        expiry, ``QuorumController.rescheduleMaybeFenceStaleBrokers``;
        :func:`~kafka_rpc.controller.cluster.next_session_expiry_ms`)."""
        return cluster.next_session_expiry_ms(
            self._uncommitted, self._heartbeats, self.session_timeout_ms
        )

    def _next_tick_s(self) -> float:
        if not self.is_active:
            return 1.0
        now = self.clock_ms()
        due = min(
            self._last_fence_check_ms + self.fence_check_interval_ms,
            self._next_session_expiry_ms(),
        )
        if self.idle_interval_ms > 0:
            due = min(due, self._last_write_ms + self.idle_interval_ms)
        if self.leader_imbalance_check_interval_ms is not None:
            due = min(due, self._last_balance_ms + self.leader_imbalance_check_interval_ms)
        due = min(due, self._last_unclean_ms + self.unclean_leader_election_interval_ms)
        return max(0.0, min(due - now, 1000)) / 1000

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            wake.clear()
            try:
                self.tick()
            except Exception:
                log.exception("controller: tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), max(self._next_tick_s(), 0.005))
