"""Topics, partitions and their leaders (Kafka's ``ReplicationControlManager``).

* Commands: :func:`create_topics`, :func:`create_partitions`, :func:`delete_topics`; the
  broker-lifecycle commands whose
  records move partitions, as in Kafka: :func:`broker_heartbeat` (``processBrokerHeartbeat``,
  with the state machine of :func:`~kafka_rpc.controller.cluster.calculate_next_broker_state`),
  :func:`unregister_broker` and :func:`fence_stale_brokers`; the leader and ISR changes of
  fencing / unfencing (``handleBrokerFenced`` / ``handleBrokerUnfenced``,
  ``generateLeaderAndIsrUpdates``, the clean election of ``PartitionChangeBuilder``).
  Placement is :mod:`kafka_rpc.controller.placement`, config validation
  :mod:`kafka_rpc.controller.configuration`.
* Replay: TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord
  (:data:`REPLAY`).
* Snapshot part: :func:`topic_records` (``TopicsImage.write``: per topic by name, its
  TopicRecord then one PartitionRecord per partition holding its current state).
* NOT_CONTROLLER answers: :func:`create_topics_error_response`,
  :func:`delete_topics_error_response`.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from uuid import UUID

from kafka_rpc.controller import cluster, configuration
from kafka_rpc.controller.base import (
    ERROR_MESSAGES,
    NO_LEADER_CHANGE,
    ApiError,
    Batch,
    ControllerContext,
    ControllerResult,
    ReplayError,
)
from kafka_rpc.controller.image import (
    DISKLESS_ENABLE_CONFIG,
    NO_LEADER,
    RESOURCE_TOPIC,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    evolve,
)
from kafka_rpc.controller.partition_change import (
    builder,
    generate_leader_and_isr_updates,
    partitions_with_broker_in_isr,
    partitions_with_no_leader,
)
from kafka_rpc.controller.placement import (
    DISKLESS_METADATA_TOPIC,
    place_replicas,
    replica_pool,
    runs_batch_coordinator,
)
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.uuids import uuid_text

__all__ = [
    "REPLAY",
    "SNAPSHOT",
    "assign_replicas_to_dirs",
    "assign_replicas_to_dirs_error_response",
    "broker_heartbeat",
    "broker_shutdown_records",
    "colliding_topic",
    "create_partitions",
    "create_partitions_error_response",
    "create_topics",
    "create_topics_error_response",
    "delete_topics",
    "delete_topics_error_response",
    "fence_stale_brokers",
    "list_partition_reassignments",
    "new_topic_id",
    "topic_of",
    "topic_records",
    "unregister_broker",
    "validate_topic_name",
]

log = logging.getLogger("kafka_rpc.controller")

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")

_R = codec.message_class


# ============================================================================ elections, fencing
def _leader_updates(
    b: Batch,
    partitions: Any,
    ctx: ControllerContext | None,
    *,
    remove: int = NO_LEADER,
    add: int = NO_LEADER,
) -> None:
    """``generateLeaderAndIsrUpdates`` over ``partitions`` (``(topic id, index)``), with the
    topic config fallbacks of ``ctx`` (:func:`~kafka_rpc.controller.partition_change.
    generate_leader_and_isr_updates`)."""
    generate_leader_and_isr_updates(
        b,
        partitions,
        remove=remove,
        add=add,
        controller_id=-1 if ctx is None else ctx.controller_id,
        unclean_default=False if ctx is None else ctx.unclean_leader_election_enable,
    )


def _remove_from_isrs(
    b: Batch, broker_id: int, ctx: ControllerContext | None, only: set | None = None
) -> None:
    """generateLeaderAndIsrUpdates(brokerToRemove=broker_id) over the partitions whose ISR holds
    the broker (only those ``(topic id, index)`` in ``only``, when given): it leaves each ISR and
    never counts as an acceptable leader, so its leaderships move to another active ISR member
    (or, where the topic allows unclean elections, any active replica). Without ELR the last ISR
    member stays in the ISR with the leader set to -1, so it can come back cleanly."""
    parts = partitions_with_broker_in_isr(b.image, broker_id)
    if only is not None:
        parts = [tp for tp in parts if tp in only]
    _leader_updates(b, parts, ctx, remove=broker_id)


def _registration_change(broker_id: int, epoch: int, **fields: Any) -> Any:
    """A BrokerRegistrationChangeRecord (Kafka 4.x writes fencing, unfencing, controlled
    shutdown and LogDirs changes with it, not with Fence/UnfenceBrokerRecord)."""
    return _R("BrokerRegistrationChangeRecord")(broker_id=broker_id, broker_epoch=epoch, **fields)


def _fence(b: Batch, broker_id: int, ctx: ControllerContext | None = None) -> None:
    """ReplicationControlManager.handleBrokerFenced: ISR/leader updates, then
    BrokerRegistrationChangeRecord Fenced=1."""
    reg = b.image.brokers[broker_id]
    _remove_from_isrs(b, broker_id, ctx)
    b.add(_registration_change(broker_id, reg.epoch, fenced=1))


def _unfence(b: Batch, broker_id: int, epoch: int, ctx: ControllerContext | None = None) -> None:
    """ReplicationControlManager.handleBrokerUnfenced: BrokerRegistrationChangeRecord Fenced=-1,
    then an election for every leaderless partition with this broker counted acceptable (the
    image still shows it fenced while the records are built)."""
    b.add(_registration_change(broker_id, epoch, fenced=-1))
    _leader_updates(b, partitions_with_no_leader(b.image), ctx, add=broker_id)


def _partitions_in_dirs(image: MetadataImage, broker_id: int, dirs: set) -> set:
    """(topic id, index) of the partitions whose replica on ``broker_id`` is assigned to one of
    ``dirs`` (ReplicationControlManager's ``directoriesToPartitions``)."""
    out = set()
    for t in image.topics.values():
        for i, p in t.partitions.items():
            for r, d in zip(p.replicas, p.directories, strict=False):
                if r == broker_id and d in dirs:
                    out.add((t.topic_id, i))
    return out


def _directories_offline(
    b: Batch, broker_id: int, epoch: int, offline: Any, ctx: ControllerContext | None = None
) -> None:
    """ReplicationControlManager.handleDirectoriesOffline: for the registered directories of the
    broker that it now reports offline, the broker leaves the ISR and leadership of the
    partitions in them, then a BrokerRegistrationChangeRecord (v2) carries the directories left
    online."""
    reg = b.image.brokers[broker_id]
    newly = [d for d in reg.log_dirs if d in set(offline)]
    if not newly:
        return
    _remove_from_isrs(b, broker_id, ctx, _partitions_in_dirs(b.image, broker_id, set(newly)))
    online = tuple(d for d in reg.log_dirs if d not in set(offline))
    b.add(_registration_change(broker_id, epoch, log_dirs=online))
    log.warning("directories %s of broker %d marked offline, remaining directories: %s",
                [str(d) for d in newly], broker_id, [str(d) for d in online])  # fmt: skip


def broker_shutdown_records(
    image: MetadataImage, broker_id: int, next_offset: int, ctx: ControllerContext | None = None
) -> list:
    """ReplicationControlManager.handleBrokerShutdown (without ELR, clean or not): the records
    that take a broker's previous incarnation out of every ISR and leadership, written before
    the RegisterBrokerRecord of its new incarnation (:func:`~kafka_rpc.controller.cluster.
    register_broker`'s ``shutdown_records``)."""
    b = Batch(image, next_offset, _BATCH_RULES)
    _remove_from_isrs(b, broker_id, ctx)
    return b.records


def broker_heartbeat(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """BrokerHeartbeat v0-1 (ReplicationControlManager.processBrokerHeartbeat and
    BrokerHeartbeatManager.calculateNextBrokerState).

    - Not registered, or BrokerEpoch != the registration's: STALE_BROKER_EPOCH (Kafka's
      ``checkBrokerEpoch`` and the "heartbeat before registration" check both raise
      StaleBrokerEpochException; BROKER_ID_NOT_REGISTERED is only UnregisterBroker's error).
    - Caught up = ``CurrentMetadataOffset >=`` the offset of its RegisterBrokerRecord
      (``registration_offset``; not the log end, which NoOps keep moving).
    - FENCED: WantShutDown -> shut down now; not WantFence and caught up ->
      BrokerRegistrationChangeRecord Fenced=-1 (plus leader elections for leaderless partitions
      it is in the ISR of); else stays fenced.
    - UNFENCED: WantFence -> fenced (Fenced=1 after its ISR memberships and leaderships moved
      away; shut down now if WantShutDown too); WantShutDown -> controlled shutdown if it leads
      partitions (BrokerRegistrationChangeRecord InControlledShutdown=1, then leaderships and ISR
      membership moved away), else fenced and shut down now.
    - CONTROLLED_SHUTDOWN: once it leads nothing **and** its controlled shutdown offset
      (``ctx.controlled_shutdown_offsets``) is at or below the lowest metadata offset an active
      broker reported (``ctx.metadata_offsets``,
      :func:`~kafka_rpc.controller.cluster.lowest_active_offset`), fenced and shut down now.
    - OfflineLogDirs (v1) at metadata.version >= 17: ``handleDirectoriesOffline``.
    - Response: IsCaughtUp, IsFenced, ShouldShutDown of the next state. The caller records
      ``now`` and CurrentMetadataOffset for the broker, and the controlled shutdown offset.
    """
    Resp = _R("BrokerHeartbeatResponse")
    reg = image.brokers.get(request.broker_id)
    if reg is None or reg.epoch != request.broker_epoch:
        return ControllerResult([], Resp(error_code=ErrorCode.STALE_BROKER_EPOCH))
    bid = request.broker_id
    caught_up = request.current_metadata_offset >= reg.registration_offset
    current = cluster.broker_state(reg)
    # Kafka asks brokersToIsrs.hasLeaderships only when the answer matters (a Supplier): a walk
    # of every partition on each heartbeat would cost O(partitions) per broker every 2 s
    leads = (
        current == "CONTROLLED_SHUTDOWN"
        or (current == "UNFENCED" and request.want_shut_down and not request.want_fence)
    ) and bool(image.leaderships(bid))
    passed = True
    if current == "CONTROLLED_SHUTDOWN":
        shutdown_offset = ctx.controlled_shutdown_offsets.get(bid, -1)
        passed = shutdown_offset <= cluster.lowest_active_offset(image, ctx.metadata_offsets)
    nxt = cluster.calculate_next_broker_state(current, request, caught_up, leads, passed)
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    if nxt != current:
        if nxt in ("FENCED", "SHUTDOWN_NOW"):
            if not reg.fenced:
                _fence(b, bid, ctx)
        elif nxt == "UNFENCED":
            _unfence(b, bid, reg.epoch, ctx)
        elif nxt == "CONTROLLED_SHUTDOWN":
            if not reg.in_controlled_shutdown:
                b.add(_registration_change(bid, reg.epoch, in_controlled_shutdown=1))
            _remove_from_isrs(b, bid, ctx)
    if request.offline_log_dirs and cluster.directory_supported(image):
        _directories_offline(b, bid, reg.epoch, request.offline_log_dirs, ctx)
    resp = Resp(
        error_code=0,
        is_caught_up=caught_up,
        is_fenced=nxt in ("FENCED", "SHUTDOWN_NOW"),
        should_shut_down=nxt == "SHUTDOWN_NOW",
    )
    return ControllerResult(b.records, resp)


def assign_replicas_to_dirs(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """AssignReplicasToDirs v0 (ReplicationControlManager.handleAssignReplicasToDirs): a broker
    says which of its log directories holds each of its replicas.

    - metadata.version < 17 (3.7-IV2): top-level UNSUPPORTED_VERSION.
    - Broker not registered or BrokerEpoch not its epoch: top-level STALE_BROKER_EPOCH.
    - Per partition: unknown topic id -> UNKNOWN_TOPIC_ID; unknown partition ->
      UNKNOWN_TOPIC_OR_PARTITION; the broker holds no replica of it -> NOT_LEADER_OR_FOLLOWER
      (the broker then stops asking); else the builder's record with the replica's directory
      set (``PartitionChangeBuilder.setDirectory``; none when nothing differs; like every
      builder run it also elects a leader if the current one is no longer valid).
    - A directory the broker's registration does not list as online: the broker also leaves
      the ISR and leadership of those partitions (``generateLeaderAndIsrUpdates``).
    """
    mod = codec.module("AssignReplicasToDirsResponse")
    Resp = mod.AssignReplicasToDirsResponse
    if not cluster.directory_supported(image):
        return ControllerResult([], Resp(error_code=ErrorCode.UNSUPPORTED_VERSION))
    bid = request.broker_id
    reg = image.brokers.get(bid)
    if reg is None or reg.epoch != request.broker_epoch:
        return ControllerResult([], Resp(error_code=ErrorCode.STALE_BROKER_EPOCH))
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    offline_parts: set = set()
    dirs_out = []
    for d in request.directories:
        offline = d.id not in reg.log_dirs
        topics_out = []
        for t in d.topics:
            topic = b.image.topics.get(t.topic_id)
            parts_out = []
            for p in t.partitions:
                idx = p.partition_index
                code = 0
                if topic is None:
                    code = ErrorCode.UNKNOWN_TOPIC_ID
                else:
                    part = topic.partitions.get(idx)
                    if part is None:
                        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif bid not in part.replicas:
                        code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    else:
                        rec = builder(b.image, t.topic_id, idx).set_directory(bid, d.id).build()
                        if rec is not None:
                            b.add(rec)
                        if offline:
                            offline_parts.add((t.topic_id, idx))
                parts_out.append(mod.PartitionData(partition_index=idx, error_code=code))
            topics_out.append(mod.TopicData(topic_id=t.topic_id, partitions=tuple(parts_out)))
        dirs_out.append(mod.DirectoryData(id=d.id, topics=tuple(topics_out)))
    if offline_parts:
        _remove_from_isrs(b, bid, ctx, offline_parts)
    return ControllerResult(b.records, Resp(error_code=0, directories=tuple(dirs_out)))


def assign_replicas_to_dirs_error_response(request: Any, code: int, message: str | None) -> Any:
    """A top-level ``code`` answer to AssignReplicasToDirs (NOT_CONTROLLER ...)."""
    return codec.message_class("AssignReplicasToDirsResponse")(error_code=code)


def unregister_broker(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """UnregisterBroker (ReplicationControlManager.unregisterBroker, run by
    QuorumController.unregisterBroker as a write event; ``kafka-cluster.sh unregister``).

    - BrokerId has no registration: BROKER_ID_NOT_REGISTERED with "Broker ID N is not currently
      registered" (no records).
    - Otherwise, fenced or not, alive or not (Kafka does not refuse a live broker): as
      ``handleBrokerUnregistered``, the broker leaves every ISR and its leaderships move to
      another active ISR member (PartitionChangeRecords; the last ISR member stays with leader
      -1, as for fencing), then one UnregisterBrokerRecord{BrokerId, BrokerEpoch = the current
      registration's epoch}, all in one atomic batch. The response (ErrorCode 0) is sent once
      they are committed; the caller drops the broker's session (``heartbeatManager.remove``).
      A live broker that heartbeats afterwards gets STALE_BROKER_EPOCH and registers again.
    """
    Resp = _R("UnregisterBrokerResponse")
    reg = image.brokers.get(request.broker_id)
    if reg is None:
        return ControllerResult(
            [],
            Resp(
                error_code=ErrorCode.BROKER_ID_NOT_REGISTERED,
                error_message=f"Broker ID {request.broker_id} is not currently registered",
            ),
        )
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    _remove_from_isrs(b, request.broker_id, ctx)
    b.add(_R("UnregisterBrokerRecord")(broker_id=request.broker_id, broker_epoch=reg.epoch))
    return ControllerResult(b.records, Resp(error_code=0, error_message=None))


def fence_stale_brokers(
    image: MetadataImage,
    last_heartbeat_ms: Mapping[int, int],
    now_ms: int,
    session_timeout_ms: int,
    next_offset: int | None = None,
    ctx: ControllerContext | None = None,
) -> ControllerResult:
    """Session expiry (ReplicationControlManager.maybeFenceOneStaleBroker, all at once): every
    unfenced broker (in controlled shutdown or not) whose last heartbeat is older than
    ``session_timeout_ms`` before ``now_ms``, or unknown, is fenced: its ISR memberships and
    leaderships move away, then a BrokerRegistrationChangeRecord Fenced=1. Brokers are handled
    in id order, each seeing the previous ones' effect. The response is the sorted list of
    fenced broker ids."""
    b = Batch(image, image.last_offset + 1 if next_offset is None else next_offset, _BATCH_RULES)
    fenced = []
    for bid in sorted(image.brokers):
        reg = b.image.brokers[bid]
        last = last_heartbeat_ms.get(bid)
        if reg.fenced or (last is not None and last + session_timeout_ms >= now_ms):
            continue
        _fence(b, bid, ctx)
        fenced.append(bid)
    return ControllerResult(b.records, fenced)


# ============================================================================ topics
def validate_topic_name(name: str) -> str | None:
    """Kafka's ``Topic.validate`` (4.3+ wording): None if legal, else the
    INVALID_TOPIC_EXCEPTION message."""
    if not name:
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = (
            f"the length of '{name}' is longer than the max allowed length "
            f"{MAX_TOPIC_NAME_LENGTH}"
        )
    elif not _LEGAL_TOPIC.fullmatch(name):
        reason = (
            f"'{name}' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'"
        )
    else:
        return None
    return f"Topic name is invalid: {reason}"


def new_topic_id(image: MetadataImage, rng: random.Random) -> UUID:
    """A random v4 uuid that is not zero, not the metadata topic's, not in use, and whose
    base64 form does not start with '-' (Kafka's ``Uuid.randomUuid`` rules)."""
    while True:
        tid = UUID(int=rng.getrandbits(128), version=4)
        if tid.int in (0, 1) or tid in image.topics:
            continue
        if uuid_text(tid).startswith("-"):
            continue
        return tid


def _check_manual(image: MetadataImage, topic: Any) -> list[tuple[int, ...]]:
    """ReplicationControlManager.createTopic + validateManualPartitionAssignment."""
    if topic.num_partitions != -1:
        raise ApiError(
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    if topic.replication_factor != -1:
        raise ApiError(
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but replicationFactor was not set to -1.",
        )
    by_index = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
    if sorted(by_index) != list(range(len(topic.assignments))):
        raise ApiError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    rf = None
    out = []
    for i in range(len(by_index)):
        brokers = by_index[i]
        validate_manual_partition_assignment(image, brokers, rf)
        rf = len(brokers)
        if not any(image.is_active(bid) for bid in brokers):
            raise ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"All brokers specified in the manual partition assignment for partition {i} "
                "are fenced or in controlled shutdown.",
            )
        out.append(brokers)
    return out


def _check_coordinator_hosts(
    image: MetadataImage, topic: str, partition: int, replicas: tuple[int, ...]
) -> None:
    """A manual assignment of a ``__diskless-metadata`` partition names only brokers that run
    our Batch Coordinator (:mod:`kafka_rpc.controller.placement`), else
    INVALID_REPLICA_ASSIGNMENT."""
    if topic != DISKLESS_METADATA_TOPIC:
        return
    for bid in replicas:
        reg = image.brokers.get(bid)
        if reg is not None and not runs_batch_coordinator(reg):
            raise ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment of {topic}-{partition} includes broker {bid}, "
                "which does not run the Batch Coordinator.",
            )


_COLLISION_VARIANTS_MAX = 10  # '.'/'_' positions up to which the variants are enumerated


def colliding_topic(topics_by_name: Any, name: str) -> str | None:
    """An existing topic other than ``name`` that differs from it only by '.' vs '_' (Kafka's
    ``Topic.hasCollision``: the two would share metric names), or None; the smallest when
    several do. With k such characters in ``name`` the 2^k spellings are looked up (k <= 10);
    beyond that every topic is compared, as before. Kafka keeps an index of the names with
    these characters instead (``ReplicationControlManager.topicsWithCollisionChars``)."""
    spots = [i for i, c in enumerate(name) if c in "._"]
    if not spots:
        return None  # only `name` itself normalizes to `name`
    if len(spots) > _COLLISION_VARIANTS_MAX:
        norm = name.replace(".", "_")
        found = [o for o in topics_by_name if o != name and o.replace(".", "_") == norm]
        return min(found) if found else None
    chars = list(name)
    found = []
    for mask in range(1 << len(spots)):
        for bit, i in enumerate(spots):
            chars[i] = "." if mask >> bit & 1 else "_"
        cand = "".join(chars)
        if cand != name and cand in topics_by_name:
            found.append(cand)
    return min(found) if found else None


def create_topics(image: MetadataImage, request: Any, ctx: ControllerContext) -> ControllerResult:
    """CreateTopics (ControllerApis.createTopics + ReplicationControlManager.createTopics).

    Per topic, in this order: a name given twice -> INVALID_REQUEST "Duplicate topic name."; an
    illegal name (``[a-zA-Z0-9._-]``, 1-249 chars, not "." / "..") -> INVALID_TOPIC_EXCEPTION;
    an existing name -> TOPIC_ALREADY_EXISTS; a name equal to an existing one once '.' and '_'
    are identified -> INVALID_TOPIC_EXCEPTION (collision); manual Assignments ->
    INVALID_REQUEST / INVALID_REPLICA_ASSIGNMENT as Kafka; otherwise NumPartitions /
    ReplicationFactor (-1 = ctx defaults) -> INVALID_PARTITIONS / INVALID_REPLICATION_FACTOR (more
    than the active brokers); configs -> INVALID_REQUEST (null) / INVALID_CONFIG (unknown name or
    bad value, see ``topic_configs.TOPIC_CONFIG_DEFS``). Every error entry has an ErrorMessage and
    contributes no records.

    A created topic gets a random v4 id, and records TopicRecord, ConfigRecords (resource type 2),
    then one PartitionRecord per partition (leader = first replica, ISR = the replicas that are
    active, leader epoch 0, partition epoch 0). All records of the request form one atomic
    batch. ``validateOnly``: the same answers (TopicId left zero: no topic exists) and no
    records. Successful entries carry TopicId, NumPartitions, ReplicationFactor and the configs
    set (ConfigSource 1 = DYNAMIC_TOPIC_CONFIG).
    """
    mod = codec.module("CreateTopicsResponse")
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    names = [t.name for t in request.topics]
    dupes = {n for n in names if names.count(n) > 1}
    results = []
    done_dupes: set[str] = set()
    for topic in request.topics:
        name = topic.name
        try:
            if name in dupes:
                if name in done_dupes:
                    continue
                done_dupes.add(name)
                raise ApiError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            msg = validate_topic_name(name)
            if msg is not None:
                raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, msg)
            if name in b.image.topics_by_name:
                raise ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            other = colliding_topic(b.image.topics_by_name, name)
            if other is not None:
                raise ApiError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {other}",
                )
            if topic.assignments:
                assignment = _check_manual(b.image, topic)
                for i, replicas in enumerate(assignment):
                    _check_coordinator_hosts(b.image, name, i, replicas)
            else:
                n = ctx.num_partitions if topic.num_partitions == -1 else topic.num_partitions
                rf = (
                    ctx.default_replication_factor
                    if topic.replication_factor == -1
                    else topic.replication_factor
                )
                diskless = any(
                    c.name == DISKLESS_ENABLE_CONFIG and (c.value or "").lower() == "true"
                    for c in topic.configs
                )  # fmt: skip
                pool, what = replica_pool(b.image, name, diskless)
                assignment = place_replicas(b.image, n, rf, ctx.rng, pool, what)
            configs = configuration.check_topic_configs(topic)
        except ApiError as e:
            results.append(
                mod.CreatableTopicResult(name=name, error_code=e.code, error_message=e.message)
            )
            continue
        tid = new_topic_id(b.image, ctx.rng)
        if not request.validate_only:
            b.add(_R("TopicRecord")(name=name, topic_id=tid))
            for k in sorted(configs):
                b.add(
                    _R("ConfigRecord")(
                        resource_type=RESOURCE_TOPIC, resource_name=name, name=k, value=configs[k]
                    )
                )
            with_dirs = cluster.directory_supported(b.image)
            for i, replicas in enumerate(assignment):
                isr = tuple(r for r in replicas if b.image.is_active(r))
                b.add(
                    _R("PartitionRecord")(
                        partition_id=i,
                        topic_id=tid,
                        replicas=replicas,
                        isr=isr,
                        leader=isr[0],
                        leader_epoch=0,
                        partition_epoch=0,
                        directories=tuple(cluster.default_dir(b.image, r) for r in replicas)
                        if with_dirs
                        else (),
                    )
                )
        results.append(
            mod.CreatableTopicResult(
                name=name,
                topic_id=UUID(int=0) if request.validate_only else tid,
                error_code=0,
                error_message=None,
                num_partitions=len(assignment),
                replication_factor=len(assignment[0]),
                configs=tuple(
                    mod.CreatableTopicConfigs(
                        name=k, value=v, read_only=False, config_source=1, is_sensitive=False
                    )
                    for k, v in sorted(configs.items())
                ),
            )
        )
    return ControllerResult(b.records, mod.CreateTopicsResponse(topics=tuple(results)))


MAX_RECORDS_PER_USER_OP = 10_000
"""Kafka's ``QuorumController.MAX_RECORDS_PER_USER_OP``: the most records one request may write."""


def create_partitions(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """CreatePartitions (37): Kafka's ``ControllerApis.createPartitions`` +
    ``ReplicationControlManager.createPartitions``.

    Results: first one per topic named more than once, INVALID_REQUEST "Duplicate topic name."
    (in order of first appearance), then the other topics in request order. Per topic, in
    Kafka's order: no such topic -> UNKNOWN_TOPIC_OR_PARTITION (no message, as Kafka's);
    ``Count`` equal to the current count -> INVALID_PARTITIONS "Topic already has N
    partition(s).", below it -> INVALID_PARTITIONS "... would not be an increase."; manual
    ``Assignments`` whose length is not the number of new partitions ->
    INVALID_REPLICA_ASSIGNMENT; each assignment as CreateTopics checks one (empty list,
    unregistered or repeated broker, a replica count other than the topic's replication factor:
    that of its first partition), and all of its brokers fenced or in controlled shutdown ->
    INVALID_REPLICA_ASSIGNMENT; placed by the controller otherwise, with the topic's replication
    factor among the brokers :func:`~kafka_rpc.controller.placement.replica_pool` allows (on
    ``__diskless-metadata``: brokers that run our Batch Coordinator, whatever their roles; a
    manual assignment naming another broker there is INVALID_REPLICA_ASSIGNMENT) ->
    INVALID_REPLICATION_FACTOR when too few are unfenced; a request whose records would pass
    :data:`MAX_RECORDS_PER_USER_OP` -> POLICY_VIOLATION "Unable to perform excessively large
    batch operation." for the topic that would pass it (Kafka writes nothing for the whole
    request in that case, or part of the topic's partitions; we write the other topics).

    Every new partition is one PartitionRecord (``partition_id`` from the current count up,
    replicas, ISR = the active replicas, leader = the first of them, epochs 0), all topics' in
    one atomic batch, answered once committed. ``ValidateOnly``: the same answers, no records.
    On ``__diskless-metadata`` each new partition is one more Batch Coordinator (KIP-1164
    "Scaling the number of Batch Coordinators"): its replicas start it once they see it."""
    mod = codec.module("CreatePartitionsResponse")
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    names = [t.name for t in request.topics]
    dupes = [n for n in dict.fromkeys(names) if names.count(n) > 1]
    results = [
        mod.CreatePartitionsTopicResult(
            name=n, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name."
        )
        for n in dupes
    ]
    for topic in request.topics:
        if topic.name in dupes:
            continue
        try:
            records = _new_partitions(b.image, topic, ctx)
            if len(b.records) + len(records) > MAX_RECORDS_PER_USER_OP:
                raise ApiError(ErrorCode.POLICY_VIOLATION,
                               "Unable to perform excessively large batch operation.")  # fmt: skip
        except ApiError as e:
            results.append(mod.CreatePartitionsTopicResult(
                name=topic.name, error_code=e.code, error_message=e.message))  # fmt: skip
            continue
        for rec in records:
            b.add(rec)
        results.append(mod.CreatePartitionsTopicResult(
            name=topic.name, error_code=ErrorCode.NONE, error_message=None))  # fmt: skip
    response = mod.CreatePartitionsResponse(results=tuple(results))
    return ControllerResult([] if request.validate_only else b.records, response)


def _new_partitions(image: MetadataImage, topic: Any, ctx: ControllerContext) -> list:
    """The PartitionRecords growing ``topic`` (a CreatePartitionsTopic) as
    :func:`create_partitions` describes; raises ApiError."""
    t = image.topic_by_name(topic.name)
    if t is None:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
    current = len(t.partitions)
    if topic.count == current:
        raise ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if topic.count < current:
        raise ApiError(
            ErrorCode.INVALID_PARTITIONS,
            f"The topic {topic.name} currently has {current} partition(s); {topic.count} would "
            "not be an increase.",
        )
    additional = topic.count - current
    if topic.assignments is not None and len(topic.assignments) != additional:
        raise ApiError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Attempted to add {additional} additional partition(s), but only "
            f"{len(topic.assignments)} assignment(s) were specified.",
        )
    if additional > MAX_RECORDS_PER_USER_OP:
        raise ApiError(ErrorCode.POLICY_VIOLATION,
                       "Unable to perform excessively large batch operation.")  # fmt: skip
    first = t.partitions[min(t.partitions)] if t.partitions else None
    if first is None:
        raise ApiError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"Invalid state: topic {topic.name} appears to have no partitions.",
        )
    rf = len(first.replicas)
    if topic.assignments is not None:
        assignment = []
        for i, a in enumerate(topic.assignments):
            replicas = tuple(a.broker_ids)
            validate_manual_partition_assignment(image, replicas, rf)
            _check_coordinator_hosts(image, topic.name, current + i, replicas)
            if not any(image.is_active(r) for r in replicas):
                raise ApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "All brokers specified in the manual partition assignment for partition "
                    f"{current + i} are fenced or in controlled shutdown.",
                )
            assignment.append(replicas)
    else:
        pool, what = replica_pool(image, topic.name, image.is_diskless(topic.name))
        assignment = place_replicas(image, additional, rf, ctx.rng, pool, what)
    out = []
    with_dirs = cluster.directory_supported(image)
    for i, replicas in enumerate(assignment):
        isr = tuple(r for r in replicas if image.is_active(r))
        if not isr:
            raise ApiError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {rf} time(s): All brokers are currently "
                "fenced or in controlled shutdown.",
            )
        out.append(
            _R("PartitionRecord")(
                partition_id=current + i,
                topic_id=t.topic_id,
                replicas=replicas,
                isr=isr,
                leader=isr[0],
                leader_epoch=0,
                partition_epoch=0,
                directories=tuple(cluster.default_dir(image, r) for r in replicas)
                if with_dirs
                else (),
            )
        )
    return out


def validate_manual_partition_assignment(
    image: MetadataImage, replicas: Any, rf: int | None = None
) -> None:
    """Kafka's ``ReplicationControlManager.validateManualPartitionAssignment``: a non-empty list
    of registered brokers, none twice (checked in ascending id order), of ``rf`` replicas when
    given; else ApiError INVALID_REPLICA_ASSIGNMENT with Kafka's message. CreateTopics,
    CreatePartitions and reassignments share it."""
    if not replicas:
        raise ApiError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    prev = None
    for bid in sorted(replicas):
        if bid not in image.brokers:
            raise ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {bid}, but no such broker is "
                "registered.",
            )
        if bid == prev:
            raise ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {bid} more than once.",
            )
        prev = bid
    if rf is not None and len(replicas) != rf:
        raise ApiError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{rf} replica(s).",
        )


def create_partitions_error_response(request: Any, code: int, message: str | None) -> Any:
    """Every topic of a CreatePartitions request answered with ``code`` (NOT_CONTROLLER,
    REQUEST_TIMED_OUT ...)."""
    mod = codec.module("CreatePartitionsResponse")
    return mod.CreatePartitionsResponse(results=tuple(
        mod.CreatePartitionsTopicResult(name=n, error_code=code, error_message=message)
        for n in dict.fromkeys(t.name for t in request.topics)))  # fmt: skip


UNDELETABLE_MESSAGE = (
    f"Topic {DISKLESS_METADATA_TOPIC} holds the state of every Batch Coordinator; deleting it "
    "would lose every diskless partition's offsets, so it cannot be deleted"
)
"""The ErrorMessage of a DeleteTopics entry naming ``__diskless-metadata`` (POLICY_VIOLATION)."""


def _undeletable(result_class: Any, topic_id: UUID) -> Any:
    """The DeleteTopics result refusing ``__diskless-metadata`` (:func:`delete_topics`)."""
    log.warning("DeleteTopics: refused for %s: %s", DISKLESS_METADATA_TOPIC, UNDELETABLE_MESSAGE)
    return result_class(
        name=DISKLESS_METADATA_TOPIC,
        topic_id=topic_id,
        error_code=ErrorCode.POLICY_VIOLATION,
        error_message=UNDELETABLE_MESSAGE,
    )


def delete_topics(image: MetadataImage, request: Any, ctx: ControllerContext) -> ControllerResult:
    """DeleteTopics (ControllerApis.deleteTopics + ReplicationControlManager.deleteTopics).

    Topics come from ``TopicNames`` (v1-5) or ``Topics`` (v6: a name, or an id with a null
    name). Errors per entry: neither name nor id -> INVALID_REQUEST "Neither topic name nor id
    were specified."; both -> INVALID_REQUEST "You may not specify both topic name and topic
    id."; a name or id given twice -> INVALID_REQUEST "Duplicate topic name." / "Duplicate topic
    id."; unknown name -> UNKNOWN_TOPIC_OR_PARTITION; unknown id -> UNKNOWN_TOPIC_ID. Each
    deleted topic gets one RemoveTopicRecord (all in one atomic batch); the delete is immediate
    (KIP-516): once committed the name can be created again, with a new id. A successful entry
    carries both the name and the id.

    ``__diskless-metadata``, named or by id, is never deleted: POLICY_VIOLATION (44, not
    retriable) with :data:`UNDELETABLE_MESSAGE` (the ErrorMessage of v5+), the other topics of the
    request going on as usual. Our rule, stricter than Kafka (which deletes
    ``__consumer_offsets``): its partitions hold the state of every Batch Coordinator, so
    deleting it would lose the offsets of every diskless partition.
    """
    mod = codec.module("DeleteTopicsResponse")
    R = mod.DeletableTopicResult
    results = []
    names: list[str] = list(request.topic_names)
    ids: list[UUID] = []
    for t in request.topics:
        if t.name is None:
            if t.topic_id.int == 0:
                results.append(
                    R(
                        name=None,
                        topic_id=UUID(int=0),
                        error_code=ErrorCode.INVALID_REQUEST,
                        error_message="Neither topic name nor id were specified.",
                    )
                )
            else:
                ids.append(t.topic_id)
        elif t.topic_id.int == 0:
            names.append(t.name)
        else:
            results.append(
                R(
                    name=t.name,
                    topic_id=t.topic_id,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message="You may not specify both topic name and topic id.",
                )
            )
    to_delete: list[UUID] = []
    for n in dict.fromkeys(names):
        if names.count(n) > 1:
            results.append(
                R(
                    name=n,
                    topic_id=UUID(int=0),
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message="Duplicate topic name.",
                )
            )
            continue
        tid = image.topics_by_name.get(n)
        if tid is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results.append(
                R(name=n, topic_id=UUID(int=0), error_code=code, error_message=ERROR_MESSAGES[code])
            )
            continue
        if n == DISKLESS_METADATA_TOPIC:
            results.append(_undeletable(R, tid))
            continue
        results.append(R(name=n, topic_id=tid, error_code=0, error_message=None))
        to_delete.append(tid)
    for tid in dict.fromkeys(ids):
        if ids.count(tid) > 1:
            results.append(
                R(
                    name=None,
                    topic_id=tid,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message="Duplicate topic id.",
                )
            )
            continue
        t = image.topics.get(tid)
        if t is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID
            results.append(
                R(name=None, topic_id=tid, error_code=code, error_message=ERROR_MESSAGES[code])
            )
            continue
        if t.name == DISKLESS_METADATA_TOPIC:
            results.append(_undeletable(R, tid))
            continue
        results.append(R(name=t.name, topic_id=tid, error_code=0, error_message=None))
        to_delete.append(tid)
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    for tid in dict.fromkeys(to_delete):
        b.add(_R("RemoveTopicRecord")(topic_id=tid))
    return ControllerResult(b.records, mod.DeleteTopicsResponse(responses=tuple(results)))


def list_partition_reassignments(image: MetadataImage, request: Any) -> Any:
    """ListPartitionReassignments v0 (ReplicationControlManager.listPartitionReassignments, a
    read of the committed image): the partitions with replicas being added or removed, of every
    topic (Topics null) or of the listed ones (unknown topics and partitions, and partitions not
    being reassigned, are left out). Topics by name, partitions ascending when listing all."""
    mod = codec.module("ListPartitionReassignmentsResponse")

    def ongoing(t: TopicImage, indexes) -> Any:
        parts = []
        for i in indexes:
            p = t.partitions.get(i)
            if p is not None and (p.adding_replicas or p.removing_replicas):
                parts.append(mod.OngoingPartitionReassignment(
                    partition_index=i, replicas=p.replicas, adding_replicas=p.adding_replicas,
                    removing_replicas=p.removing_replicas))  # fmt: skip
        return mod.OngoingTopicReassignment(name=t.name, partitions=tuple(parts)) if parts else None

    if request.topics is None:
        wanted = [(t, sorted(t.partitions)) for t in
                  sorted(image.topics.values(), key=lambda t: t.name)]  # fmt: skip
    else:
        wanted = [(image.topic_by_name(x.name), x.partition_indexes) for x in request.topics]
    topics = [o for t, idx in wanted if t is not None and (o := ongoing(t, idx)) is not None]
    return mod.ListPartitionReassignmentsResponse(error_code=0, topics=tuple(topics))


# ============================================================================ replay
def _topic(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ReplicationControlManager.replay(TopicRecord). A topic id or name already present is a
    ReplayError (the controller never writes one: CreateTopics checks both)."""
    if r.topic_id in img.topics:
        raise ReplayError(f"Unable to replay {r}: topic id {r.topic_id} already exists")
    if r.name in img.topics_by_name:
        raise ReplayError(f"Unable to replay {r}: topic name {r.name!r} already exists")
    return evolve(
        img,
        topics=img.topics.set(r.topic_id, TopicImage(r.name, r.topic_id)),
        topics_by_name=img.topics_by_name.set(r.name, r.topic_id),
    )


def topic_of(img: MetadataImage, r: Any, what: str) -> TopicImage:
    t = img.topics.get(r.topic_id)
    if t is None:
        raise ReplayError(
            f"Tried to {what} partition {r.topic_id}:{r.partition_id}, but no topic "
            f"with that ID was found."
        )
    return t


def _with_partition(
    img: MetadataImage, t: TopicImage, index: int, part: PartitionRegistration
) -> MetadataImage:
    return evolve(
        img, topics=img.topics.set(t.topic_id, replace(t, partitions=t.partitions.set(index, part)))
    )


def _partition(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ReplicationControlManager.replay(PartitionRecord): the record is the partition's whole
    state (it replaces an existing one, as Kafka does)."""
    t = topic_of(img, r, "create")
    part = PartitionRegistration(
        replicas=tuple(r.replicas),
        isr=tuple(r.isr),
        leader=r.leader,
        leader_epoch=r.leader_epoch,
        partition_epoch=r.partition_epoch,
        removing_replicas=tuple(r.removing_replicas),
        adding_replicas=tuple(r.adding_replicas),
        leader_recovery_state=r.leader_recovery_state,
        directories=tuple(r.directories),
        elr=None if r.eligible_leader_replicas is None else tuple(r.eligible_leader_replicas),
        last_known_elr=None if r.last_known_elr is None else tuple(r.last_known_elr),
        start_offset=r.start_offset,
        start_timestamp=r.start_timestamp,
    )
    return _with_partition(img, t, r.partition_id, part)


def _partition_change(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """PartitionRegistration.merge(PartitionChangeRecord): a null list / Leader -2 /
    LeaderRecoveryState -1 / StartOffset -1 leaves the field unchanged; Leader -1 means no leader.
    ``partition_epoch`` always goes up by 1; ``leader_epoch`` goes up by 1 iff Leader != -2 (even
    when the leader id is the same). When Replicas changes without Directories, each kept replica
    keeps its directory and a new one gets the zero (unassigned) id. A record that sets StartOffset
    (KIP-1114: a new active chunk) sets StartTimestamp with it, -1 (unknown) included."""
    t = topic_of(img, r, "change")
    p = t.partitions.get(r.partition_id)
    if p is None:
        raise ReplayError(f"Unable to replay {r}: no partition {r.partition_id} in topic {t.name}")
    replicas = p.replicas if r.replicas is None else tuple(r.replicas)
    if r.directories is not None:
        directories = tuple(r.directories)
    elif r.replicas is not None and p.directories:
        old = dict(zip(p.replicas, p.directories, strict=False))
        directories = tuple(old.get(b, UUID(int=0)) for b in replicas)
    else:
        directories = p.directories
    if r.leader == NO_LEADER_CHANGE:
        leader, leader_epoch = p.leader, p.leader_epoch
    else:
        leader, leader_epoch = r.leader, p.leader_epoch + 1
    new = PartitionRegistration(
        replicas=replicas,
        isr=p.isr if r.isr is None else tuple(r.isr),
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=p.partition_epoch + 1,
        removing_replicas=p.removing_replicas
        if r.removing_replicas is None
        else tuple(r.removing_replicas),
        adding_replicas=p.adding_replicas
        if r.adding_replicas is None
        else tuple(r.adding_replicas),
        leader_recovery_state=p.leader_recovery_state
        if r.leader_recovery_state == -1
        else r.leader_recovery_state,
        directories=directories,
        elr=p.elr if r.eligible_leader_replicas is None else tuple(r.eligible_leader_replicas),
        last_known_elr=p.last_known_elr if r.last_known_elr is None else tuple(r.last_known_elr),
        start_offset=p.start_offset if r.start_offset == -1 else r.start_offset,
        start_timestamp=r.start_timestamp
        if r.start_offset != -1 or r.start_timestamp != -1
        else p.start_timestamp,
    )
    return _with_partition(img, t, r.partition_id, new)


def _remove_topic(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ReplicationControlManager.replay(RemoveTopicRecord): the topic, its partitions, its
    inactive chunks and its configs go (``ConfigurationControlManager.deleteTopicConfigs``); the
    name is free at once (KIP-516 immediate delete). An unknown id is a ReplayError."""
    t = img.topics.get(r.topic_id)
    if t is None:
        raise ReplayError(f"Unable to replay {r}: no topic with id {r.topic_id}")
    return evolve(
        img,
        topics=img.topics.remove(r.topic_id),
        topics_by_name=img.topics_by_name.remove(t.name),
        configs=configuration.delete_topic_configs(img, t.name),
    )


def _clear_elr(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ReplicationControlManager.replay(ClearElrRecord): every partition of the named topic (of
    every topic when the name is empty) that has an ELR or a last known ELR loses both, as a
    PartitionChangeRecord setting them empty would (the partition epoch goes up by one). An
    unknown topic name is a ReplayError, as Kafka's "Unable to find a topic named"."""
    if r.topic_name:
        tid = img.topics_by_name.get(r.topic_name)
        if tid is None:
            raise ReplayError(f"Unable to find a topic named {r.topic_name} in order to clear "
                              "its ELRs.")  # fmt: skip
        tids = [tid]
    else:
        tids = list(img.topics)
    for tid in tids:
        t = img.topics[tid]
        for index, p in t.partitions.items():
            if p.elr or p.last_known_elr:
                new = replace(p, elr=(), last_known_elr=(), partition_epoch=p.partition_epoch + 1)
                img = _with_partition(img, t, index, new)
                t = img.topics[tid]
    return img


REPLAY = {
    "ClearElrRecord": _clear_elr,
    "TopicRecord": _topic,
    "PartitionRecord": _partition,
    "PartitionChangeRecord": _partition_change,
    "RemoveTopicRecord": _remove_topic,
}

_BATCH_RULES = {**cluster.REPLAY, **configuration.REPLAY, **REPLAY}
"""What this manager's commands write: broker state changes, topic configs, topics."""


# ============================================================================ snapshot
def topic_records(image: MetadataImage) -> list:
    """Per topic by name: its TopicRecord, then one PartitionRecord per partition (ascending)
    holding its current state, epochs included (no PartitionChangeRecords needed)."""
    out: list = []
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        out.append(_R("TopicRecord")(name=t.name, topic_id=t.topic_id))
        for i in sorted(t.partitions):
            p = t.partitions[i]
            out.append(
                _R("PartitionRecord")(
                    partition_id=i,
                    topic_id=t.topic_id,
                    replicas=p.replicas,
                    isr=p.isr,
                    removing_replicas=p.removing_replicas,
                    adding_replicas=p.adding_replicas,
                    leader=p.leader,
                    leader_recovery_state=p.leader_recovery_state,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                    directories=p.directories,
                    eligible_leader_replicas=p.elr,
                    last_known_elr=p.last_known_elr,
                    start_offset=p.start_offset,
                    start_timestamp=p.start_timestamp,
                )
            )
    return out


SNAPSHOT = (topic_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""


# ============================================================================ error answers
def create_topics_error_response(request: Any, code: int, message: str | None) -> Any:
    """Every topic of a CreateTopics request answered with ``code`` and ``message``
    (NOT_CONTROLLER ...)."""
    mod = codec.module("CreateTopicsResponse")
    return mod.CreateTopicsResponse(
        topics=tuple(
            mod.CreatableTopicResult(name=t.name, error_code=code, error_message=message)
            for t in request.topics
        )
    )


def delete_topics_error_response(request: Any, code: int, message: str | None) -> Any:
    """Every entry of a DeleteTopics request (``TopicNames``, then ``Topics``) answered with
    ``code`` and ``message`` (NOT_CONTROLLER ...)."""
    mod = codec.module("DeleteTopicsResponse")
    entries = [(n, None) for n in request.topic_names]
    entries += [(t.name, t.topic_id) for t in request.topics]
    return mod.DeleteTopicsResponse(
        responses=tuple(
            mod.DeletableTopicResult(
                name=n,
                **({} if tid is None else {"topic_id": tid}),
                error_code=code,
                error_message=message,
            )
            for n, tid in entries
        )
    )
