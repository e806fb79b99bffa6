"""Broker registrations (Kafka's ``ClusterControlManager``) and the broker state machine and
session rule of Kafka's ``BrokerHeartbeatManager``.

* Commands: :func:`register_broker` (BrokerRegistration). The heartbeat's records (fencing,
  unfencing, controlled shutdown) move partitions, so :func:`~kafka_rpc.controller.replication.
  broker_heartbeat` lives with ``ReplicationControlManager`` as in Kafka and asks
  :func:`calculate_next_broker_state` here for the broker's next state.
* Sessions: :func:`has_valid_session` and :func:`next_session_expiry_ms`; the session map itself
  (broker id -> last heartbeat ms) is in memory on the active controller
  (``QuorumController``), handed to commands as ``ControllerContext.last_heartbeat_ms``.
* Replay: RegisterBrokerRecord, UnregisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord,
  BrokerRegistrationChangeRecord, RegisterControllerRecord (:data:`REPLAY`).
* Controllers (KIP-919): :func:`register_controller` (ControllerRegistration) writes a
  RegisterControllerRecord; the image keeps the last one per controller.
* Snapshot part: :func:`broker_records` then :func:`controller_records` (``ClusterImage.write``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any
from uuid import UUID

from kafka_rpc.controller.base import ControllerContext, ControllerResult, ReplayError
from kafka_rpc.controller.features import METADATA_VERSION, registration_error
from kafka_rpc.controller.image import (
    BrokerRegistration,
    ControllerRegistration,
    Endpoint,
    MetadataImage,
    evolve,
)
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "DIR_LOST",
    "DIR_MIGRATING",
    "DIR_UNASSIGNED",
    "KAFKA_RPC_FEATURE_PREFIX",
    "REPLAY",
    "SNAPSHOT",
    "broker_records",
    "broker_state",
    "calculate_next_broker_state",
    "controller_records",
    "controller_registration_supported",
    "default_dir",
    "directory_owner",
    "directory_supported",
    "has_valid_session",
    "is_kafka_rpc_broker",
    "is_reserved_dir",
    "lowest_active_offset",
    "next_session_expiry_ms",
    "register_broker",
    "register_controller",
]

log = logging.getLogger("kafka_rpc.controller")

_R = codec.message_class
MV_DIRECTORY_ASSIGNMENT = 17
"""metadata.version 3.7-IV2: directory assignment (JBOD), RegisterBrokerRecord v3 LogDirs."""
NEVER_MS = 1 << 62
"""ms: no session to expire."""


# ============================================================================ sessions
def has_valid_session(image: MetadataImage, broker_id: int, ctx: ControllerContext) -> bool:
    """BrokerHeartbeatTracker.hasValidSession (Kafka 4.x): the broker is registered and was
    heard from (registration or heartbeat) within ``session_timeout_ms``, **fenced or not**. A
    broker with no entry in ``last_heartbeat_ms`` has no valid session: the active controller
    seeds only the unfenced brokers with its activation time (``ClusterControlManager.activate``,
    KAFKA-18138), so a fenced broker that stays silent can be replaced at once."""
    reg = image.brokers.get(broker_id)
    last = ctx.last_heartbeat_ms.get(broker_id)
    if reg is None or last is None:
        return False
    return last + ctx.session_timeout_ms >= ctx.now_ms


def next_session_expiry_ms(
    image: MetadataImage, last_heartbeat_ms: Mapping[int, int], session_timeout_ms: int
) -> int:
    """When the first session of an unfenced broker expires (ms, on the clock of
    ``last_heartbeat_ms``): its last heartbeat + ``session_timeout_ms`` + 1, :data:`NEVER_MS`
    when no unfenced broker has a session (Kafka schedules the stale-broker check for the oldest
    session's expiry, ``QuorumController.rescheduleMaybeFenceStaleBrokers``)."""
    due = NEVER_MS
    for bid, reg in image.brokers.items():
        if not reg.fenced:
            last = last_heartbeat_ms.get(bid)
            if last is not None:
                due = min(due, last + session_timeout_ms + 1)
    return due


# ============================================================================ directories
DIR_MIGRATING = UUID(int=0)
"""Kafka's ``DirectoryId.MIGRATING``: the replica's directory is not known (a broker that
registered no LogDirs, or a record without Directories)."""
DIR_UNASSIGNED = UUID(int=1)
"""Kafka's ``DirectoryId.UNASSIGNED``: the broker has several directories and has not said
which one holds the replica yet (it sends AssignReplicasToDirs)."""
DIR_LOST = UUID(int=2)
"""Kafka's ``DirectoryId.LOST``: the directory is gone."""
_RESERVED_DIRS = 100


def is_reserved_dir(d: UUID) -> bool:
    """Kafka's ``DirectoryId.reserved``: the first 100 ids (most significant 64 bits zero, least
    significant below 100) are reserved and never a real directory."""
    return d.int < _RESERVED_DIRS


def directory_supported(image: MetadataImage) -> bool:
    """``MetadataVersion.isDirectoryAssignmentSupported``: metadata.version >= 17 (3.7-IV2)."""
    return image.features.get(METADATA_VERSION, 0) >= MV_DIRECTORY_ASSIGNMENT


def default_dir(image: MetadataImage, broker_id: int) -> UUID:
    """ClusterControlManager.defaultDir: the directory a new replica on ``broker_id`` is given in
    PartitionRecord.Directories: its single log directory; UNASSIGNED when it has several (or is
    not registered: the caller reports that); MIGRATING when it registered none."""
    reg = image.brokers.get(broker_id)
    if reg is None:
        return DIR_UNASSIGNED
    if not reg.log_dirs:
        return DIR_MIGRATING
    if len(reg.log_dirs) == 1:
        return reg.log_dirs[0]
    return DIR_UNASSIGNED


def directory_owner(image: MetadataImage, directory: UUID) -> int | None:
    """The broker that registered ``directory`` (ClusterControlManager's ``directoryToBroker``),
    or None."""
    for bid, reg in image.brokers.items():
        if directory in reg.log_dirs:
            return bid
    return None


KAFKA_RPC_FEATURE_PREFIX = "kafka_rpc."
"""The name prefix of the features only kafka-rpc nodes implement (docs/features.md)."""


def is_kafka_rpc_broker(reg: BrokerRegistration) -> bool:
    """Whether a registered broker is a kafka-rpc broker role (which hosts the Batch Coordinator
    and ``__diskless-metadata`` but serves no classic Produce / Fetch) rather than an Apache Kafka
    broker: it registered with at least one feature under :data:`KAFKA_RPC_FEATURE_PREFIX`.
    The one test both classic placement and ``__diskless-metadata`` placement use."""
    return any(name.startswith(KAFKA_RPC_FEATURE_PREFIX) for name, _lo, _hi in reg.features)


# ============================================================================ registration
ShutdownRecords = Callable[[MetadataImage, int, int], list]
"""``(image, broker_id, next_offset) -> records``: the leader/ISR clean-up of a broker's old
incarnation (Kafka's ``BrokerUncleanShutdownHandler.addRecordsForShutdown``, i.e.
``ReplicationControlManager.handleBrokerUncleanShutdown``)."""


def register_broker(
    image: MetadataImage,
    request: Any,
    ctx: ControllerContext,
    shutdown_records: ShutdownRecords | None = None,
) -> ControllerResult:
    """BrokerRegistration v0-4 (ClusterControlManager.registerBroker), in Kafka's order:

    1. ClusterId != ours: INCONSISTENT_CLUSTER_ID ("Expected cluster ID ..., but got ...").
    2. The id is registered with **another** incarnation whose session is still valid, fenced or
       not (:func:`has_valid_session`): DUPLICATE_BROKER_REGISTRATION.
    3. IsMigratingZkBroker: BROKER_ID_NOT_REGISTERED.
    4. metadata.version >= 17 (3.7-IV2): LogDirs must be non-empty, hold no reserved id
       (:func:`is_reserved_dir`), no duplicate, and no directory another broker registered;
       else INVALID_REGISTRATION with Kafka's message.
    5. The finalized features (Kafka's ``processRegistrationFeature``,
       :func:`~kafka_rpc.controller.features.registration_error`; ``kraft.version`` is
       ``ctx.kraft_version``): UNSUPPORTED_VERSION, or INVALID_REGISTRATION when they do not list
       ``metadata.version``; the reason is logged (the response has no message field).
    6. A new incarnation (or a first registration): broker epoch = ``ctx.next_offset`` (where the
       batch starts); ``shutdown_records`` first (the old incarnation leaves ISRs and
       leaderships), then the RegisterBrokerRecord, fenced. The same incarnation again ("amend",
       e.g. a resent registration): the epoch, fenced and InControlledShutdown flags are kept
       and only the record is rewritten.
    The response carries the epoch. LogDirs go into the record only at metadata.version >= 17.
    The caller records ``now`` as the broker's last contact (``heartbeatManager.register``) and,
    for a new incarnation, forgets the old one's session state."""
    Resp = _R("BrokerRegistrationResponse")

    def fail(code: int, message: str) -> ControllerResult:
        log.info("broker %d registration refused: %s (%s)", request.broker_id,
                 ErrorCode.for_code(code).name, message)  # fmt: skip
        return ControllerResult([], Resp(error_code=code))

    if request.cluster_id != ctx.cluster_id:
        return fail(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"Expected cluster ID {ctx.cluster_id}, but got cluster ID {request.cluster_id}",
        )
    bid = request.broker_id
    existing = image.brokers.get(bid)
    prev_incarnation = None if existing is None else existing.incarnation_id
    if (
        existing is not None
        and prev_incarnation != request.incarnation_id
        and has_valid_session(image, bid, ctx)
    ):
        return fail(
            ErrorCode.DUPLICATE_BROKER_REGISTRATION,
            "Another broker is registered with that broker id.",
        )
    if request.is_migrating_zk_broker:
        return fail(
            ErrorCode.BROKER_ID_NOT_REGISTERED,
            "Controller does not support registering ZK brokers.",
        )
    dirs = tuple(request.log_dirs)
    with_dirs = directory_supported(image)
    if with_dirs:
        problem = None
        if not dirs:
            problem = "No directories specified in request"
        elif any(is_reserved_dir(d) for d in dirs):
            problem = "Reserved directory ID in request"
        elif len(set(dirs)) != len(dirs):
            problem = "Duplicate directory ID in request"
        else:
            for d in dirs:
                owner = directory_owner(image, d)
                if owner is not None and owner != bid:
                    problem = f"Broker {owner} is already registered with directory {d}"
                    break
        if problem is not None:
            return fail(ErrorCode.INVALID_REGISTRATION, problem)
    err = registration_error(image, request.features, ctx.kraft_version)
    if err is not None:
        return fail(*err)
    records: list = []
    if prev_incarnation != request.incarnation_id:
        epoch = ctx.next_offset
        fenced, in_shutdown = True, False
        if existing is not None and shutdown_records is not None:
            records.extend(shutdown_records(image, bid, ctx.next_offset))
        log.info("broker %d: registering incarnation %s (previous %s), broker epoch %d, "
                 "%d clean-up record(s)", bid, request.incarnation_id, prev_incarnation,
                 epoch, len(records))  # fmt: skip
    else:
        assert existing is not None  # the same incarnation as a registered one
        epoch = existing.epoch
        fenced, in_shutdown = existing.fenced, existing.in_controlled_shutdown
        log.info("broker %d: amending the registration of incarnation %s, broker epoch stays %d",
                 bid, request.incarnation_id, epoch)  # fmt: skip
    Rec = _R("RegisterBrokerRecord")
    mod = codec.module("RegisterBrokerRecord")
    rec = Rec(
        broker_id=bid,
        is_migrating_zk_broker=request.is_migrating_zk_broker,
        incarnation_id=request.incarnation_id,
        broker_epoch=epoch,
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
        fenced=fenced,
        in_controlled_shutdown=in_shutdown,
        log_dirs=dirs if with_dirs else (),
    )
    records.append(rec)
    return ControllerResult(records, Resp(error_code=0, broker_epoch=epoch))


# ============================================================================ broker states
def broker_state(reg: BrokerRegistration) -> str:
    """A registration's state: ``"FENCED"``, ``"CONTROLLED_SHUTDOWN"`` or ``"UNFENCED"``."""
    if reg.fenced:
        return "FENCED"
    if reg.in_controlled_shutdown:
        return "CONTROLLED_SHUTDOWN"
    return "UNFENCED"


def calculate_next_broker_state(
    current: str, request: Any, caught_up: bool, leads: bool, shutdown_offset_passed: bool = True
) -> str:
    """BrokerHeartbeatManager.calculateNextBrokerState: the state after a heartbeat (fields
    ``want_fence``, ``want_shut_down``) of a broker in state ``current`` (:func:`broker_state`)
    that is ``caught_up`` (CurrentMetadataOffset >= the offset of its RegisterBrokerRecord) and
    ``leads`` partitions.

    - FENCED: WantShutDown -> SHUTDOWN_NOW; not WantFence and caught up -> UNFENCED; else FENCED.
    - UNFENCED: WantFence -> FENCED (SHUTDOWN_NOW with WantShutDown too); WantShutDown ->
      CONTROLLED_SHUTDOWN if it leads partitions, else SHUTDOWN_NOW; else UNFENCED.
    - CONTROLLED_SHUTDOWN: stays while it leads partitions or while ``shutdown_offset_passed``
      is false (its controlled shutdown offset is above the lowest metadata offset an active
      broker reported, :func:`lowest_active_offset`), then SHUTDOWN_NOW.
    """
    if current == "FENCED":
        if request.want_shut_down:
            return "SHUTDOWN_NOW"
        if not request.want_fence and caught_up:
            return "UNFENCED"
        return "FENCED"
    if current == "UNFENCED":
        if request.want_fence:
            return "SHUTDOWN_NOW" if request.want_shut_down else "FENCED"
        if request.want_shut_down:
            return "CONTROLLED_SHUTDOWN" if leads else "SHUTDOWN_NOW"
        return "UNFENCED"
    if leads or not shutdown_offset_passed:
        return "CONTROLLED_SHUTDOWN"
    return "SHUTDOWN_NOW"


LONG_MAX = (1 << 63) - 1


def lowest_active_offset(image: MetadataImage, metadata_offsets: Mapping[int, int]) -> int:
    """BrokerHeartbeatManager.lowestActiveOffset: the lowest CurrentMetadataOffset reported by
    an active broker (unfenced, not in controlled shutdown; -1 for one that has not reported
    yet), ``Long.MAX_VALUE`` when there is none."""
    active = [metadata_offsets.get(bid, -1) for bid in image.unfenced_brokers()]
    return min(active) if active else LONG_MAX


# ============================================================================ replay
def _register_broker(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ClusterControlManager.replay(RegisterBrokerRecord): the record replaces any earlier
    registration of that id (an older incarnation, or the same one re-registering); ``offset``
    becomes its ``registration_offset`` (``registerBrokerRecordOffsets``)."""
    reg = BrokerRegistration(
        broker_id=r.broker_id,
        incarnation_id=r.incarnation_id,
        epoch=r.broker_epoch,
        endpoints=tuple(
            Endpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points
        ),
        features=tuple(
            (f.name, f.min_supported_version, f.max_supported_version) for f in r.features
        ),
        rack=r.rack,
        fenced=r.fenced,
        in_controlled_shutdown=r.in_controlled_shutdown,
        is_migrating_zk_broker=r.is_migrating_zk_broker,
        log_dirs=tuple(r.log_dirs),
        registration_offset=offset,
    )
    return evolve(img, brokers=img.brokers.set(r.broker_id, reg))


def _registration(img: MetadataImage, r: Any, broker_id: int, epoch: int) -> BrokerRegistration:
    reg = img.brokers.get(broker_id)
    if reg is None:
        raise ReplayError(f"Unable to replay {r}: no broker registration found for that id")
    if reg.epoch != epoch:
        raise ReplayError(f"Unable to replay {r}: no broker registration with that epoch found")
    return reg


def _unregister_broker(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ClusterControlManager.replay(UnregisterBrokerRecord): id and epoch must match."""
    _registration(img, r, r.broker_id, r.broker_epoch)
    return evolve(img, brokers=img.brokers.remove(r.broker_id))


def _change(
    img: MetadataImage,
    r: Any,
    broker_id: int,
    epoch: int,
    fenced: bool | None,
    shutdown: bool | None,
) -> MetadataImage:
    """ClusterControlManager.replayRegistrationChange / BrokerRegistration.cloneWith."""
    reg = _registration(img, r, broker_id, epoch)
    new = replace(
        reg,
        fenced=reg.fenced if fenced is None else fenced,
        in_controlled_shutdown=reg.in_controlled_shutdown if shutdown is None else shutdown,
    )
    return img if new == reg else evolve(img, brokers=img.brokers.set(broker_id, new))


def _fence_broker(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    return _change(img, r, r.id, r.epoch, True, None)


def _unfence_broker(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    return _change(img, r, r.id, r.epoch, False, None)


_FENCING = {-1: False, 0: None, 1: True}  # BrokerRegistrationFencingChange
_SHUTDOWN = {0: None, 1: True}  # BrokerRegistrationInControlledShutdownChange


def _broker_registration_change(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """BrokerRegistrationChangeRecord: Fenced 1 / -1 / 0 = fence / unfence / unchanged,
    InControlledShutdown 1 / 0 = entered / unchanged; other values are a ReplayError. A non-empty
    LogDirs replaces the broker's log directories."""
    if r.fenced not in _FENCING:
        raise ReplayError(f"Unable to replay {r}: unknown value for fenced field: {r.fenced}")
    if r.in_controlled_shutdown not in _SHUTDOWN:
        raise ReplayError(
            f"Unable to replay {r}: unknown value for inControlledShutdown field: "
            f"{r.in_controlled_shutdown}"
        )
    img = _change(
        img, r, r.broker_id, r.broker_epoch, _FENCING[r.fenced], _SHUTDOWN[r.in_controlled_shutdown]
    )
    if r.log_dirs:
        reg = img.brokers[r.broker_id]
        img = evolve(
            img, brokers=img.brokers.set(r.broker_id, replace(reg, log_dirs=tuple(r.log_dirs)))
        )
    return img


#: ``MetadataVersion.IBP_3_7_IV0``: controller registrations (KIP-919) from this level on
CONTROLLER_REGISTRATION_MIN_MV = 15


def controller_registration_supported(image: MetadataImage) -> bool:
    """``MetadataVersion.isControllerRegistrationSupported``: metadata.version >= 3.7-IV0."""
    return image.features.get(METADATA_VERSION, 0) >= CONTROLLER_REGISTRATION_MIN_MV


def register_controller(image: MetadataImage, request: Any, ctx: ControllerContext) -> Any:
    """ControllerRegistration (``ClusterControlManager.registerController``): one
    RegisterControllerRecord v0 with the request's controller id, incarnation, listeners and
    features (ZkMigrationReady false); nothing else is checked, as Kafka does. Below
    metadata.version 3.7-IV0 the answer is UNSUPPORTED_VERSION and nothing is written."""
    resp = _R("ControllerRegistrationResponse")
    if not controller_registration_supported(image):
        return ControllerResult([], resp(
            error_code=int(ErrorCode.UNSUPPORTED_VERSION),
            error_message="The current MetadataVersion is too old to support controller "
                          "registrations."))  # fmt: skip
    m = codec.module("RegisterControllerRecord")
    record = _R("RegisterControllerRecord")(
        controller_id=request.controller_id,
        incarnation_id=request.incarnation_id,
        zk_migration_ready=False,
        end_points=tuple(
            m.ControllerEndpoint(name=ln.name, host=ln.host, port=ln.port,
                                 security_protocol=ln.security_protocol)
            for ln in request.listeners
        ),
        features=tuple(
            m.ControllerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                max_supported_version=f.max_supported_version)
            for f in request.features
        ),
    )  # fmt: skip
    return ControllerResult([record], resp())


def _register_controller(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ClusterControlManager.replay(RegisterControllerRecord): the registration replaces any
    earlier one of that controller."""
    reg = ControllerRegistration(
        controller_id=r.controller_id,
        incarnation_id=r.incarnation_id,
        zk_migration_ready=r.zk_migration_ready,
        endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol)
                        for e in r.end_points),
        features=tuple((f.name, f.min_supported_version, f.max_supported_version)
                       for f in r.features),
    )  # fmt: skip
    if r.controller_id in img.controllers and img.controllers[r.controller_id] != reg:
        log.info("controller %d registered again (incarnation %s)", r.controller_id,
                 r.incarnation_id)  # fmt: skip
    return evolve(img, controllers=img.controllers.set(r.controller_id, reg))


REPLAY = {
    "RegisterControllerRecord": _register_controller,
    "RegisterBrokerRecord": _register_broker,
    "UnregisterBrokerRecord": _unregister_broker,
    "FenceBrokerRecord": _fence_broker,
    "UnfenceBrokerRecord": _unfence_broker,
    "BrokerRegistrationChangeRecord": _broker_registration_change,
}


# ============================================================================ snapshot
def controller_records(image: MetadataImage) -> list:
    """One RegisterControllerRecord per registered controller, by id (``ClusterImage.write``
    writes them after the brokers, from metadata.version 3.7-IV0)."""
    if not image.controllers or not controller_registration_supported(image):
        return []
    m = codec.module("RegisterControllerRecord")
    return [
        _R("RegisterControllerRecord")(
            controller_id=c.controller_id,
            incarnation_id=c.incarnation_id,
            zk_migration_ready=c.zk_migration_ready,
            end_points=tuple(m.ControllerEndpoint(name=e.name, host=e.host, port=e.port,
                                                  security_protocol=e.security_protocol)
                             for e in c.endpoints),
            features=tuple(m.ControllerFeature(name=n, min_supported_version=lo,
                                               max_supported_version=hi)
                           for n, lo, hi in c.features),
        )
        for _, c in sorted(image.controllers.items())
    ]  # fmt: skip


def broker_records(image: MetadataImage) -> list:
    """One RegisterBrokerRecord per broker, by id, holding its current fencing and
    controlled-shutdown state (so no change records are needed)."""
    out = []
    reg_mod = codec.module("RegisterBrokerRecord")
    for bid in sorted(image.brokers):
        b = image.brokers[bid]
        out.append(
            _R("RegisterBrokerRecord")(
                broker_id=bid,
                is_migrating_zk_broker=b.is_migrating_zk_broker,
                incarnation_id=b.incarnation_id,
                broker_epoch=b.epoch,
                end_points=tuple(
                    reg_mod.BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in b.endpoints
                ),
                features=tuple(
                    reg_mod.BrokerFeature(
                        name=n, min_supported_version=lo, max_supported_version=hi
                    )
                    for n, lo, hi in b.features
                ),
                rack=b.rack,
                fenced=b.fenced,
                in_controlled_shutdown=b.in_controlled_shutdown,
                log_dirs=b.log_dirs,
            )
        )
    return out


SNAPSHOT = (broker_records, controller_records)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""
