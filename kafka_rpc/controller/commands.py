"""Controller commands: ``(image, request, ctx) -> ControllerResult(records, response)``.

Pure functions, as Kafka's ``*ControlManager`` methods that ``QuorumController`` runs in a write
event: they read the image, validate, and return the records to append (one atomic batch) and
the response to send **once those records are committed**. They change nothing; the caller
appends the records, replays them into its (uncommitted) image at once so the next command sees
them (ProducerIdControlManager depends on this), and answers after commit (DESIGN.md section 7,
kraft.md 2.5). Every response is a generated response class; errors carry Kafka's codes and, where
the response has an ErrorMessage field, a message.

``ctx.next_offset`` is the offset the first returned record will get: a RegisterBrokerRecord is
always first in its batch, so the broker epoch it carries is its own offset (Kafka passes
``offsetControl.nextWriteOffset()``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from kafka_rpc.controller.image import (
    NO_LEADER,
    RESOURCE_TOPIC,
    MetadataImage,
)
from kafka_rpc.controller.replay import NO_LEADER_CHANGE, replay
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "PRODUCER_ID_BLOCK_SIZE",
    "TOPIC_CONFIGS",
    "ControllerContext",
    "ControllerResult",
    "allocate_producer_ids",
    "alter_chunk_assignments",
    "alter_chunk_assignments_error_response",
    "broker_heartbeat",
    "create_chunks",
    "create_chunks_error_response",
    "create_topics",
    "delete_topics",
    "fence_stale_brokers",
    "has_valid_session",
    "register_broker",
    "unregister_broker",
    "validate_topic_name",
]

PRODUCER_ID_BLOCK_SIZE = 1000
"""Ids per AllocateProducerIds block (Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``)."""
_LONG_MAX = (1 << 63) - 1
METADATA_TOPIC_ID = UUID(int=1)
"""``__cluster_metadata``'s id (Kafka's ``Uuid.METADATA_TOPIC_ID``, AAAAAAAAAAAAAAAAAAAAAQ)."""
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")

_R = codec.message_class


@dataclass(frozen=True)
class ControllerContext:
    """What a command may know besides the image.

    - ``now_ms``: wall clock (ms); ``next_offset``: log offset of the first record returned;
    - ``cluster_id``: this cluster's id (BrokerRegistration checks it);
    - ``rng``: randomness for topic ids and replica placement (seed it for reproducible tests);
    - ``default_replication_factor`` / ``num_partitions``: CreateTopics defaults for -1
      (Kafka's ``default.replication.factor`` / ``num.partitions``);
    - ``last_heartbeat_ms``: broker id -> ms of its last registration or heartbeat, as the active
      controller's ``BrokerHeartbeatManager`` tracks it (not in the log); ``session_timeout_ms``
      is ``broker.session.timeout.ms``.
    """

    now_ms: int
    next_offset: int
    cluster_id: str
    rng: random.Random = field(default_factory=random.Random)
    default_replication_factor: int = 1
    num_partitions: int = 1
    last_heartbeat_ms: Mapping[int, int] = field(default_factory=dict)
    session_timeout_ms: int = 9000


@dataclass(frozen=True)
class ControllerResult:
    """``records``: decoded metadata records to append as one atomic batch, in order (may be
    empty); ``response``: the generated response object (or, for internal operations, a plain
    value)."""

    records: list
    response: Any


class _Batch:
    """Records under construction, replayed on a scratch image as they are added so later
    checks in the same command see earlier records (what the batch will do once applied)."""

    def __init__(self, image: MetadataImage, next_offset: int):
        self.image = image
        self.next_offset = next_offset
        self.records: list = []

    def add(self, record: Any) -> None:
        self.image = replay(self.image, record, self.next_offset + len(self.records))
        self.records.append(record)


_MESSAGES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
}


# ============================================================================ brokers
def has_valid_session(image: MetadataImage, broker_id: int, ctx: ControllerContext) -> bool:
    """BrokerHeartbeatManager.hasValidSession: the broker is registered, unfenced, and was heard
    from within ``session_timeout_ms``. A broker with no entry in ``last_heartbeat_ms`` has no
    valid session (the caller must seed every registered broker with the activation time when
    it becomes the active controller, as ``ClusterControlManager.activate`` touches them all)."""
    reg = image.brokers.get(broker_id)
    last = ctx.last_heartbeat_ms.get(broker_id)
    if reg is None or reg.fenced or last is None:
        return False
    return last + ctx.session_timeout_ms >= ctx.now_ms


def register_broker(image: MetadataImage, request: Any, ctx: ControllerContext) -> ControllerResult:
    """BrokerRegistration (ClusterControlManager.registerBroker).

    - ClusterId != ours: INCONSISTENT_CLUSTER_ID.
    - The id is registered with **another** incarnation that has a valid session (unfenced and
      heard from within the session timeout): DUPLICATE_BROKER_REGISTRATION.
    - The broker's supported ``metadata.version`` range excludes the finalized level:
      UNSUPPORTED_VERSION.
    - Otherwise one RegisterBrokerRecord, **fenced**, BrokerEpoch = ``ctx.next_offset`` (its own
      offset), and the response carries that epoch. This holds for the same incarnation
      re-registering too: Kafka accepts it (no DUPLICATE error) but writes a new record with a new
      epoch and the broker is fenced again until it catches up; a retried registration is thus
      idempotent in outcome, not in epoch. The caller must record ``now`` as the broker's last
      heartbeat (``heartbeatManager.register``).
    """
    Resp = _R("BrokerRegistrationResponse")
    if request.cluster_id != ctx.cluster_id:
        return ControllerResult([], Resp(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID))
    existing = image.brokers.get(request.broker_id)
    if (
        existing is not None
        and existing.incarnation_id != request.incarnation_id
        and has_valid_session(image, request.broker_id, ctx)
    ):
        return ControllerResult([], Resp(error_code=ErrorCode.DUPLICATE_BROKER_REGISTRATION))
    for f in request.features:
        level = image.features.get(f.name)
        if level is not None and not f.min_supported_version <= level <= f.max_supported_version:
            return ControllerResult([], Resp(error_code=ErrorCode.UNSUPPORTED_VERSION))
    Rec = _R("RegisterBrokerRecord")
    mod = codec.module("RegisterBrokerRecord")
    rec = Rec(
        broker_id=request.broker_id,
        is_migrating_zk_broker=request.is_migrating_zk_broker,
        incarnation_id=request.incarnation_id,
        broker_epoch=ctx.next_offset,
        end_points=tuple(
            mod.BrokerEndpoint(
                name=lst.name, host=lst.host, port=lst.port, security_protocol=lst.security_protocol
            )
            for lst in request.listeners
        ),
        features=tuple(
            mod.BrokerFeature(
                name=f.name,
                min_supported_version=f.min_supported_version,
                max_supported_version=f.max_supported_version,
            )
            for f in request.features
        ),
        rack=request.rack,
        fenced=True,
        in_controlled_shutdown=False,
        log_dirs=tuple(request.log_dirs),
    )
    return ControllerResult([rec], Resp(error_code=0, broker_epoch=ctx.next_offset))


def _elect(image: MetadataImage, replicas, isr, exclude: int) -> int:
    """PartitionChangeBuilder's clean election: the first replica (in replica order) that is in
    the ISR, is not ``exclude`` and is active (unfenced, not in controlled shutdown); -1 if none."""
    for r in replicas:
        if r in isr and r != exclude and image.is_active(r):
            return r
    return NO_LEADER


def _partitions_sorted(image: MetadataImage):
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        for i in sorted(t.partitions):
            yield t, i, t.partitions[i]


def _remove_from_isrs(b: _Batch, broker_id: int) -> None:
    """ReplicationControlManager.generateLeaderAndIsrUpdates(brokerToRemove=broker_id): take the
    broker out of every ISR and move its leaderships. The last ISR member stays in the ISR (a
    partition always keeps one, so it can come back cleanly) with the leader set to -1."""
    PCR = _R("PartitionChangeRecord")
    for t, i, p in list(_partitions_sorted(b.image)):
        if broker_id not in p.isr and p.leader != broker_id:
            continue
        isr = tuple(r for r in p.isr if r != broker_id) or p.isr
        leader = p.leader
        if leader == broker_id or (leader != NO_LEADER and leader not in isr):
            leader = _elect(b.image, p.replicas, isr, broker_id)
        if isr == p.isr and leader == p.leader:
            continue
        b.add(
            PCR(
                partition_id=i,
                topic_id=t.topic_id,
                isr=None if isr == p.isr else isr,
                leader=NO_LEADER_CHANGE if leader == p.leader else leader,
            )
        )


def _fence(b: _Batch, broker_id: int) -> None:
    """ReplicationControlManager.handleBrokerFenced: ISR/leader updates, then FenceBrokerRecord."""
    reg = b.image.brokers[broker_id]
    _remove_from_isrs(b, broker_id)
    b.add(_R("FenceBrokerRecord")(id=broker_id, epoch=reg.epoch))


def _unfence(b: _Batch, broker_id: int, epoch: int) -> None:
    """ReplicationControlManager.handleBrokerUnfenced: UnfenceBrokerRecord, then elect a leader
    for every leaderless partition whose ISR holds the broker."""
    b.add(_R("UnfenceBrokerRecord")(id=broker_id, epoch=epoch))
    PCR = _R("PartitionChangeRecord")
    for t, i, p in list(_partitions_sorted(b.image)):
        if p.leader == NO_LEADER and broker_id in p.isr:
            leader = _elect(b.image, p.replicas, p.isr, exclude=-3)
            if leader != NO_LEADER:
                b.add(PCR(partition_id=i, topic_id=t.topic_id, leader=leader))


def broker_heartbeat(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """BrokerHeartbeat (ReplicationControlManager.processBrokerHeartbeat and
    BrokerHeartbeatManager.calculateNextBrokerState).

    - Not registered, or BrokerEpoch != the registration's: STALE_BROKER_EPOCH (Kafka's
      ``checkBrokerEpoch`` and the "heartbeat before registration" check both raise
      StaleBrokerEpochException; BROKER_ID_NOT_REGISTERED is only UnregisterBroker's error).
    - Caught up = ``CurrentMetadataOffset >= broker epoch`` (= its RegisterBrokerRecord offset).
    - FENCED: WantShutDown -> shut down now; not WantFence and caught up -> UnfenceBrokerRecord
      (plus leader elections for leaderless partitions it is in the ISR of); else stays fenced.
    - UNFENCED: WantFence -> FenceBrokerRecord (shut down now if WantShutDown too); WantShutDown ->
      controlled shutdown if it leads partitions (BrokerRegistrationChangeRecord
      InControlledShutdown=1, then leaderships and ISR membership moved away), else fenced and
      shut down now.
    - CONTROLLED_SHUTDOWN: once it leads nothing, fenced and shut down now. (Kafka also waits for
      every active broker to pass the shutdown offset; this core does not track broker offsets.)
    - Response: IsCaughtUp, IsFenced, ShouldShutDown of the next state. The caller records
      ``now`` as the broker's last heartbeat.
    """
    Resp = _R("BrokerHeartbeatResponse")
    reg = image.brokers.get(request.broker_id)
    if reg is None or reg.epoch != request.broker_epoch:
        return ControllerResult([], Resp(error_code=ErrorCode.STALE_BROKER_EPOCH))
    bid = request.broker_id
    caught_up = request.current_metadata_offset >= reg.epoch
    if reg.fenced:
        current = "FENCED"
    elif reg.in_controlled_shutdown:
        current = "CONTROLLED_SHUTDOWN"
    else:
        current = "UNFENCED"
    leads = bool(image.leaderships(bid))
    if current == "FENCED":
        if request.want_shut_down:
            nxt = "SHUTDOWN_NOW"
        elif not request.want_fence and caught_up:
            nxt = "UNFENCED"
        else:
            nxt = "FENCED"
    elif current == "UNFENCED":
        if request.want_fence:
            nxt = "SHUTDOWN_NOW" if request.want_shut_down else "FENCED"
        elif request.want_shut_down:
            nxt = "CONTROLLED_SHUTDOWN" if leads else "SHUTDOWN_NOW"
        else:
            nxt = "UNFENCED"
    else:
        nxt = "CONTROLLED_SHUTDOWN" if leads else "SHUTDOWN_NOW"
    b = _Batch(image, ctx.next_offset)
    if nxt != current:
        if nxt in ("FENCED", "SHUTDOWN_NOW"):
            if not reg.fenced:
                _fence(b, bid)
        elif nxt == "UNFENCED":
            _unfence(b, bid, reg.epoch)
        elif nxt == "CONTROLLED_SHUTDOWN":
            b.add(
                _R("BrokerRegistrationChangeRecord")(
                    broker_id=bid, broker_epoch=reg.epoch, fenced=0, in_controlled_shutdown=1
                )
            )
            _remove_from_isrs(b, bid)
    resp = Resp(
        error_code=0,
        is_caught_up=caught_up,
        is_fenced=nxt in ("FENCED", "SHUTDOWN_NOW"),
        should_shut_down=nxt == "SHUTDOWN_NOW",
    )
    return ControllerResult(b.records, resp)


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
    b = _Batch(image, ctx.next_offset)
    _remove_from_isrs(b, request.broker_id)
    b.add(_R("UnregisterBrokerRecord")(broker_id=request.broker_id, broker_epoch=reg.epoch))
    return ControllerResult(b.records, Resp(error_code=0, error_message=None))


def fence_stale_brokers(
    image: MetadataImage,
    last_heartbeat_ms: Mapping[int, int],
    now_ms: int,
    session_timeout_ms: int,
    next_offset: int | None = None,
) -> ControllerResult:
    """Session expiry (ReplicationControlManager.maybeFenceOneStaleBroker, all at once): every
    unfenced broker (in controlled shutdown or not) whose last heartbeat is older than
    ``session_timeout_ms`` before ``now_ms``, or unknown, is fenced: its ISR memberships and
    leaderships move away, then a FenceBrokerRecord. Brokers are handled in id order, each seeing
    the previous ones' effect. The response is the sorted list of fenced broker ids."""
    b = _Batch(image, image.last_offset + 1 if next_offset is None else next_offset)
    fenced = []
    for bid in sorted(image.brokers):
        reg = b.image.brokers[bid]
        last = last_heartbeat_ms.get(bid)
        if reg.fenced or (last is not None and last + session_timeout_ms >= now_ms):
            continue
        _fence(b, bid)
        fenced.append(bid)
    return ControllerResult(b.records, fenced)


# ============================================================================ topics
def validate_topic_name(name: str) -> str | None:
    """Kafka's ``Topic.validate``: None if legal, else the INVALID_TOPIC_EXCEPTION message."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} "
            f"characters, topic name: {name}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def _int_cfg(v: str) -> bool:
    try:
        int(v)
    except ValueError:
        return False
    return True


def _bool_cfg(v: str) -> bool:
    return v.lower() in ("true", "false")


def _policy_cfg(v: str) -> bool:
    parts = [p.strip() for p in v.split(",")]
    return all(p in ("delete", "compact") for p in parts) or v == ""


TOPIC_CONFIGS = {
    "cleanup.policy": _policy_cfg,
    "compression.type": lambda v: (
        v in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
    ),
    "delete.retention.ms": _int_cfg,
    "diskless.enable": _bool_cfg,
    "file.delete.delay.ms": _int_cfg,
    "flush.messages": _int_cfg,
    "flush.ms": _int_cfg,
    "index.interval.bytes": _int_cfg,
    "local.retention.bytes": _int_cfg,
    "local.retention.ms": _int_cfg,
    "max.compaction.lag.ms": _int_cfg,
    "max.message.bytes": _int_cfg,
    "message.timestamp.after.max.ms": _int_cfg,
    "message.timestamp.before.max.ms": _int_cfg,
    "message.timestamp.type": lambda v: v in ("CreateTime", "LogAppendTime"),
    "min.cleanable.dirty.ratio": lambda v: _float(v),
    "min.compaction.lag.ms": _int_cfg,
    "min.insync.replicas": _int_cfg,
    "preallocate": _bool_cfg,
    "remote.storage.enable": _bool_cfg,
    "retention.bytes": _int_cfg,
    "retention.ms": _int_cfg,
    "segment.bytes": _int_cfg,
    "segment.index.bytes": _int_cfg,
    "segment.jitter.ms": _int_cfg,
    "segment.ms": _int_cfg,
    "unclean.leader.election.enable": _bool_cfg,
}
"""Topic configs CreateTopics accepts (Kafka's ``LogConfig`` names plus Inkless's
``diskless.enable``), each with a value check; anything else is INVALID_CONFIG."""


def _float(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _new_topic_id(image: MetadataImage, rng: random.Random) -> UUID:
    """A random v4 uuid that is not zero, not the metadata topic's, not in use, and whose
    base64 form does not start with '-' (Kafka's ``Uuid.randomUuid`` rules)."""
    import base64

    while True:
        tid = UUID(int=rng.getrandbits(128), version=4)
        if tid.int in (0, 1) or tid in image.topics:
            continue
        if base64.urlsafe_b64encode(tid.bytes).startswith(b"-"):
            continue
        return tid


class _TopicError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _check_manual(image: MetadataImage, topic: Any) -> list[tuple[int, ...]]:
    """ReplicationControlManager.createTopic + validateManualPartitionAssignment."""
    if topic.num_partitions != -1:
        raise _TopicError(
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    if topic.replication_factor != -1:
        raise _TopicError(
            ErrorCode.INVALID_REQUEST,
            "A manual partition assignment was specified, but replicationFactor was not set to -1.",
        )
    by_index = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
    if sorted(by_index) != list(range(len(topic.assignments))):
        raise _TopicError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    rf = None
    out = []
    for i in range(len(by_index)):
        brokers = by_index[i]
        if not brokers:
            raise _TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.",
            )
        seen = set()
        for bid in sorted(brokers):
            if bid not in image.brokers:
                raise _TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {bid}, but no such "
                    "broker is registered.",
                )
            if bid in seen:
                raise _TopicError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {bid} more than once.",
                )
            seen.add(bid)
        if rf is not None and len(brokers) != rf:
            raise _TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(brokers)} "
                f"replica(s), but this is not consistent with previous partitions, which have "
                f"{rf} replica(s).",
            )
        rf = len(brokers)
        if not any(image.is_active(bid) for bid in brokers):
            raise _TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"All brokers specified in the manual partition assignment for partition {i} "
                "are fenced or in controlled shutdown.",
            )
        out.append(brokers)
    return out


def _place(image: MetadataImage, n: int, rf: int, rng: random.Random) -> list[tuple[int, ...]]:
    """Roughly Kafka's StripedReplicaPlacer without racks: active brokers sorted by id, a random
    start, partition p gets the ``rf`` brokers from ``start + p`` round-robin."""
    if n <= 0:
        raise _TopicError(
            ErrorCode.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        )
    if rf <= 0:
        raise _TopicError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    usable = image.unfenced_brokers()
    if not usable:
        raise _TopicError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): All brokers are currently fenced.",
        )
    if rf > len(usable):
        raise _TopicError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {rf} time(s): The target replication factor of "
            f"{rf} cannot be reached because only {len(usable)} broker(s) are registered.",
        )
    start = rng.randrange(len(usable))
    return [tuple(usable[(start + p + j) % len(usable)] for j in range(rf)) for p in range(n)]


def _check_configs(topic: Any) -> dict[str, str]:
    """ConfigurationControlManager validation of CreateTopics configs (KRaft rejects null values
    and unknown names, and values of the wrong type)."""
    out: dict[str, str] = {}
    for c in topic.configs:
        if c.value is None:
            raise _TopicError(
                ErrorCode.INVALID_REQUEST, f"Null value not supported for topic configs: {c.name}"
            )
        check = TOPIC_CONFIGS.get(c.name)
        if check is None:
            raise _TopicError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.name}")
        if not check(c.value):
            raise _TopicError(
                ErrorCode.INVALID_CONFIG,
                f"Invalid value {c.value} for configuration {c.name}",
            )
        out[c.name] = c.value
    return out


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
    bad value, see TOPIC_CONFIGS). Every error entry has an ErrorMessage and contributes no
    records.

    A created topic gets a random v4 id, and records TopicRecord, ConfigRecords (resource type 2),
    then one PartitionRecord per partition (leader = first replica, ISR = the replicas that are
    active, leader epoch 0, partition epoch 0). All records of the request form one atomic
    batch. ``validateOnly``: the same answers (TopicId left zero: no topic exists) and no
    records. Successful entries carry TopicId, NumPartitions, ReplicationFactor and the configs
    set (ConfigSource 1 = DYNAMIC_TOPIC_CONFIG).
    """
    mod = codec.module("CreateTopicsResponse")
    b = _Batch(image, ctx.next_offset)
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
                raise _TopicError(ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            msg = validate_topic_name(name)
            if msg is not None:
                raise _TopicError(ErrorCode.INVALID_TOPIC_EXCEPTION, msg)
            if name in b.image.topics_by_name:
                raise _TopicError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
            other = colliding_topic(b.image.topics_by_name, name)
            if other is not None:
                raise _TopicError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {other}",
                )
            if topic.assignments:
                assignment = _check_manual(b.image, topic)
            else:
                n = ctx.num_partitions if topic.num_partitions == -1 else topic.num_partitions
                rf = (
                    ctx.default_replication_factor
                    if topic.replication_factor == -1
                    else topic.replication_factor
                )
                assignment = _place(b.image, n, rf, ctx.rng)
            configs = _check_configs(topic)
        except _TopicError as e:
            results.append(
                mod.CreatableTopicResult(name=name, error_code=e.code, error_message=e.message)
            )
            continue
        tid = _new_topic_id(b.image, ctx.rng)
        if not request.validate_only:
            b.add(_R("TopicRecord")(name=name, topic_id=tid))
            for k in sorted(configs):
                b.add(
                    _R("ConfigRecord")(
                        resource_type=RESOURCE_TOPIC, resource_name=name, name=k, value=configs[k]
                    )
                )
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
                R(name=n, topic_id=UUID(int=0), error_code=code, error_message=_MESSAGES[code])
            )
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
                R(name=None, topic_id=tid, error_code=code, error_message=_MESSAGES[code])
            )
            continue
        results.append(R(name=t.name, topic_id=tid, error_code=0, error_message=None))
        to_delete.append(tid)
    b = _Batch(image, ctx.next_offset)
    for tid in dict.fromkeys(to_delete):
        b.add(_R("RemoveTopicRecord")(topic_id=tid))
    return ControllerResult(b.records, mod.DeleteTopicsResponse(responses=tuple(results)))


# ============================================================================ producer ids
def allocate_producer_ids(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """AllocateProducerIds (ProducerIdControlManager.generateNextProducerId, kraft.md 3.1).

    - BrokerId not registered, or BrokerEpoch != its registration epoch: STALE_BROKER_EPOCH
      (fencing is not checked: a fenced broker with the right epoch gets a block).
    - First id = the image's next producer id (0 for a new cluster); if it is above
      ``Long.MAX - 1000``: UNKNOWN_SERVER_ERROR (exhausted).
    - Otherwise the block [first, first + 999]: one ProducerIdsRecord{BrokerId, BrokerEpoch,
      NextProducerId = first + 1000} and the response {ProducerIdStart = first,
      ProducerIdLen = 1000}. The image moves only when the record is replayed, so the caller must
      replay it before running the next command, and answer only after commit.
    """
    Resp = _R("AllocateProducerIdsResponse")
    reg = image.brokers.get(request.broker_id)
    if reg is None or reg.epoch != request.broker_epoch:
        return ControllerResult([], Resp(error_code=ErrorCode.STALE_BROKER_EPOCH))
    first = max(image.producer_ids.next_producer_id, 0)
    if first > _LONG_MAX - PRODUCER_ID_BLOCK_SIZE:
        return ControllerResult([], Resp(error_code=ErrorCode.UNKNOWN_SERVER_ERROR))
    rec = _R("ProducerIdsRecord")(
        broker_id=request.broker_id,
        broker_epoch=request.broker_epoch,
        next_producer_id=first + PRODUCER_ID_BLOCK_SIZE,
    )
    return ControllerResult(
        [rec],
        Resp(error_code=0, producer_id_start=first, producer_id_len=PRODUCER_ID_BLOCK_SIZE),
    )


# ============================================================================ chunks (KIP-1114)
class _ChunkError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def _code_message(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def create_chunks_error_response(
    request: Any, version: int, code: int, message: str | None = None
) -> Any:
    """Every entry of a CreateChunks request answered with ``code`` and ``message`` (the
    code's name when None): NOT_CONTROLLER, REQUEST_TIMED_OUT, a malformed request ..."""
    mod = codec.module("CreateChunksResponse")
    msg = message if message is not None else _code_message(code)
    return mod.CreateChunksResponse(
        results=tuple(
            mod.CreateChunksTopicPartitionResult(
                topic_name=e.topic_name, partition_id=e.partition_id, error_code=code,
                error_message=msg,
            )
            for e in request.topic_partitions
        )
    )  # fmt: skip


def alter_chunk_assignments_error_response(
    request: Any, version: int, code: int, message: str | None = None
) -> Any:
    """Every entry of an AlterChunkAssignments request answered with ``code`` and ``message``
    (the code's name when None)."""
    mod = codec.module("AlterChunkAssignmentsResponse")
    msg = message if message is not None else _code_message(code)
    return mod.AlterChunkAssignmentsResponse(
        results=tuple(
            mod.AlterChunkAssignmentResult(
                topic_name=e.topic_name, partition_id=e.partition_id,
                start_offset=e.start_offset, error_code=code, error_message=msg,
            )
            for e in request.chunks
        )
    )  # fmt: skip


def _chunk_partition(image: MetadataImage, topic_name: str, index: int):
    t = image.topic_by_name(topic_name)
    p = None if t is None else t.partitions.get(index)
    if p is None:
        raise _ChunkError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic_name}:{index}."
        )
    return t, p


def _check_chunk_brokers(image: MetadataImage, brokers) -> None:
    """Kafka's ``validateManualPartitionAssignment`` for a chunk's replica list: every broker
    registered, none twice (INVALID_REPLICA_ASSIGNMENT)."""
    seen: set[int] = set()
    for bid in brokers:
        if bid not in image.brokers:
            raise _ChunkError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {bid}, but no such broker is "
                "registered.",
            )
        if bid in seen:
            raise _ChunkError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {bid} more than once.",
            )
        seen.add(bid)


def create_chunks(image: MetadataImage, request: Any, ctx: ControllerContext) -> ControllerResult:
    """CreateChunks (KIP-1114 "Handle ChunkCreateRequest", the controller part; DESIGN.md 8).

    Per entry, checked against the image as left by the earlier entries of the request, in
    this order (each error carries a message and writes nothing):

    - unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
    - ``len(BrokerIds)`` != the partition's replica count: INVALID_REPLICATION_FACTOR;
    - a broker not registered or given twice: INVALID_REPLICA_ASSIGNMENT; every one of them
      fenced or in controlled shutdown: INVALID_REPLICA_ASSIGNMENT (the new active chunk needs a
      leader, as CreateTopics' manual assignments);
    - offsets: StartOffset or PrevStopOffset < 0 (-1: not filled in by the partition leader):
      INVALID_REQUEST; StartOffset must be beyond the active chunk's start (``a`` = the
      partition's StartOffset, 0 while it never had a chunk), so the closed chunk holds
      ``[a, StartOffset - 1]``, and ``a - 1 <= PrevStopOffset <= StartOffset - 1``, else
      INVALID_REQUEST (offsets going backwards or overlapping the active chunk).

    A valid entry writes two records (all of a request go in one atomic batch): a ChunkRecord
    for the closed chunk (start ``a``, the partition's StartTimestamp, stop = PrevStopOffset,
    end = StartOffset - 1, the partition's replicas, directories, ISR and reassignment lists,
    epoch 0) and a PartitionChangeRecord v3 for the new active chunk: StartOffset,
    StartTimestamp (-1 when unknown), Replicas = BrokerIds when they differ, ISR = the active
    brokers among them (the new chunk holds no data yet, so they are all in sync), Leader = the
    first of that ISR when it differs from the current leader or an old replica is dropped
    (Kafka's leader-epoch bump on reassignment), reassignment lists cleared. Answers
    ErrorCode 0 with a null message; the response lists the entries in request order.
    """
    mod = codec.module("CreateChunksResponse")
    Result = mod.CreateChunksTopicPartitionResult
    b = _Batch(image, ctx.next_offset)
    results = []
    for e in request.topic_partitions:
        try:
            t, p = _chunk_partition(b.image, e.topic_name, e.partition_id)
            target = tuple(e.broker_ids)
            if len(target) != len(p.replicas):
                raise _ChunkError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"The new chunk of {e.topic_name}-{e.partition_id} has {len(target)} "
                    f"replica(s), but the partition has {len(p.replicas)}.",
                )
            _check_chunk_brokers(b.image, target)
            isr = tuple(r for r in target if b.image.is_active(r))
            if not isr:
                raise _ChunkError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"All brokers specified for the new chunk of {e.topic_name}-{e.partition_id} "
                    "are fenced or in controlled shutdown.",
                )
            if e.start_offset < 0 or e.prev_stop_offset < 0:
                raise _ChunkError(
                    ErrorCode.INVALID_REQUEST,
                    "StartOffset and PrevStopOffset must be filled in (the partition leader "
                    f"does so); got StartOffset {e.start_offset}, PrevStopOffset "
                    f"{e.prev_stop_offset}.",
                )
            active_start = max(p.start_offset, 0)
            if e.start_offset <= active_start:
                raise _ChunkError(
                    ErrorCode.INVALID_REQUEST,
                    f"StartOffset {e.start_offset} must be beyond the active chunk's start "
                    f"offset {active_start}.",
                )
            if not active_start - 1 <= e.prev_stop_offset <= e.start_offset - 1:
                raise _ChunkError(
                    ErrorCode.INVALID_REQUEST,
                    f"PrevStopOffset {e.prev_stop_offset} must lie in [{active_start - 1}, "
                    f"{e.start_offset - 1}] (the closed chunk starts at {active_start} and ends "
                    f"at StartOffset - 1).",
                )
        except _ChunkError as err:
            results.append(
                Result(
                    topic_name=e.topic_name,
                    partition_id=e.partition_id,
                    error_code=err.code,
                    error_message=err.message,
                )
            )
            continue
        b.add(
            _R("ChunkRecord")(
                partition_id=e.partition_id,
                topic_id=t.topic_id,
                start_offset=active_start,
                start_timestamp=p.start_timestamp,
                stop_offset=e.prev_stop_offset,
                end_offset=e.start_offset - 1,
                chunk_epoch=0,
                replicas=p.replicas,
                directories=p.directories,
                isr=p.isr,
                removing_replicas=p.removing_replicas,
                adding_replicas=p.adding_replicas,
                epoch=0,
            )
        )
        leader = p.leader if p.leader in isr else isr[0]
        bump = leader != p.leader or any(r not in target for r in p.replicas)
        b.add(
            _R("PartitionChangeRecord")(
                partition_id=e.partition_id,
                topic_id=t.topic_id,
                replicas=None if target == p.replicas else target,
                isr=None if isr == p.isr else isr,
                leader=leader if bump else NO_LEADER_CHANGE,
                removing_replicas=() if p.removing_replicas else None,
                adding_replicas=() if p.adding_replicas else None,
                start_offset=e.start_offset,
                start_timestamp=e.start_timestamp,
            )
        )
        results.append(
            Result(
                topic_name=e.topic_name,
                partition_id=e.partition_id,
                error_code=0,
                error_message=None,
            )
        )
    return ControllerResult(b.records, mod.CreateChunksResponse(results=tuple(results)))


def alter_chunk_assignments(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """AlterChunkAssignments (KIP-1114; modelled on ``ReplicationControlManager.
    changePartitionReassignment``, reference/kraft.md 4.1; DESIGN.md 8).

    Per entry, against the image as left by the earlier entries, in this order (each error
    carries a message and writes nothing):

    - unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
    - no inactive chunk starting at StartOffset: INVALID_REQUEST;
    - ChunkEpoch not -1 and not the chunk's epoch: INVALID_UPDATE_VERSION;
    - a broker not registered or given twice: INVALID_REPLICA_ASSIGNMENT;
    - replica count: BrokerIds must be empty (remove the chunk), as many as the partition's
      replicas, or a strict subset of the chunk's current replicas (replicas dropping
      themselves, the seed's automatic deletion); anything else INVALID_REPLICA_ASSIGNMENT.

    Then, as Kafka computes a reassignment (an in-progress one is first reverted: current =
    replicas - adding, ISR - adding): ``removing = current - target`` and ``adding = target -
    current`` (sorted), replicas = target ++ removing. The target ISR is the ISR, plus the adding
    replicas when the topic is diskless (its chunk data is in object storage, which every
    broker reads, so an added replica holds the full data at once). As
    ``PartitionChangeBuilder.completeReassignmentIfNeeded``: when ``ISR - removing`` covers the
    target, the reassignment completes in the same record (Replicas = target, Isr = ISR -
    removing in ISR order, no adding / removing); otherwise the record carries the
    union with the adding / removing lists and the ISR unchanged. An empty target writes
    RemovingReplicas = every replica: replay removes the chunk. Every record raises the chunk
    epoch by one; a target equal to the current replicas (same order, nothing in progress)
    writes nothing. Answers ErrorCode 0, null message, in request order.
    """
    mod = codec.module("AlterChunkAssignmentsResponse")
    Result = mod.AlterChunkAssignmentResult
    b = _Batch(image, ctx.next_offset)
    results = []
    for e in request.chunks:
        try:
            t, p = _chunk_partition(b.image, e.topic_name, e.partition_id)
            c = t.chunks.get(e.partition_id, {}).get(e.start_offset)
            if c is None:
                raise _ChunkError(
                    ErrorCode.INVALID_REQUEST,
                    f"Partition {e.topic_name}-{e.partition_id} has no inactive chunk starting "
                    f"at offset {e.start_offset}.",
                )
            if e.chunk_epoch != -1 and e.chunk_epoch != c.epoch:
                raise _ChunkError(
                    ErrorCode.INVALID_UPDATE_VERSION,
                    f"Chunk epoch {e.chunk_epoch} is stale: the chunk is at epoch {c.epoch}.",
                )
            target = tuple(e.broker_ids)
            _check_chunk_brokers(b.image, target)
            current = tuple(r for r in c.replicas if r not in c.adding_replicas)
            if (
                target
                and len(target) != len(p.replicas)
                and not (len(target) < len(current) and set(target) <= set(current))
            ):
                raise _ChunkError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The new assignment of chunk {e.topic_name}-{e.partition_id}@"
                    f"{e.start_offset} has {len(target)} replica(s); it must have "
                    f"{len(p.replicas)}, none (remove the chunk), or fewer than now, all of "
                    "them current replicas.",
                )
        except _ChunkError as err:
            results.append(
                Result(
                    topic_name=e.topic_name,
                    partition_id=e.partition_id,
                    start_offset=e.start_offset,
                    error_code=err.code,
                    error_message=err.message,
                )
            )
            continue
        removing = tuple(sorted(set(current) - set(target)))
        adding = tuple(sorted(set(target) - set(current)))
        rec = None
        CCR = _R("ChunkChangeRecord")
        if not target:
            rec = CCR(
                partition_id=e.partition_id,
                topic_id=t.topic_id,
                start_offset=e.start_offset,
                removing_replicas=c.replicas,
                epoch=c.epoch + 1,
            )
        elif target != c.replicas or c.adding_replicas or c.removing_replicas:
            isr = [r for r in c.isr if r not in c.adding_replicas]
            if b.image.is_diskless(e.topic_name):
                isr += [r for r in adding if r not in isr]
            new_isr = tuple(r for r in isr if r not in removing)
            if set(new_isr) >= set(target):  # complete at once
                rec = CCR(
                    partition_id=e.partition_id,
                    topic_id=t.topic_id,
                    start_offset=e.start_offset,
                    replicas=target,
                    isr=new_isr,
                    epoch=c.epoch + 1,
                )
            else:
                rec = CCR(
                    partition_id=e.partition_id,
                    topic_id=t.topic_id,
                    start_offset=e.start_offset,
                    replicas=target + removing,
                    isr=tuple(isr) if tuple(isr) != c.isr else (),
                    removing_replicas=removing,
                    adding_replicas=adding,
                    epoch=c.epoch + 1,
                )
        if rec is not None:
            b.add(rec)
        results.append(
            Result(
                topic_name=e.topic_name,
                partition_id=e.partition_id,
                start_offset=e.start_offset,
                error_code=0,
                error_message=None,
            )
        )
    return ControllerResult(b.records, mod.AlterChunkAssignmentsResponse(results=tuple(results)))
