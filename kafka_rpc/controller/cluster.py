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
  BrokerRegistrationChangeRecord (:data:`REPLAY`).
* Snapshot part: :func:`broker_records` (``ClusterImage.write``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kafka_rpc.controller.base import ControllerContext, ControllerResult, ReplayError
from kafka_rpc.controller.features import supports_finalized_levels
from kafka_rpc.controller.image import BrokerRegistration, Endpoint, MetadataImage, evolve
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "REPLAY",
    "broker_records",
    "broker_state",
    "calculate_next_broker_state",
    "has_valid_session",
    "next_session_expiry_ms",
    "register_broker",
]

_R = codec.message_class
NEVER_MS = 1 << 62
"""ms: no session to expire."""


# ============================================================================ sessions
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


# ============================================================================ registration
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
    if not supports_finalized_levels(image, request.features):
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


# ============================================================================ broker states
def broker_state(reg: BrokerRegistration) -> str:
    """A registration's state: ``"FENCED"``, ``"CONTROLLED_SHUTDOWN"`` or ``"UNFENCED"``."""
    if reg.fenced:
        return "FENCED"
    if reg.in_controlled_shutdown:
        return "CONTROLLED_SHUTDOWN"
    return "UNFENCED"


def calculate_next_broker_state(current: str, request: Any, caught_up: bool, leads: bool) -> str:
    """BrokerHeartbeatManager.calculateNextBrokerState: the state after a heartbeat (fields
    ``want_fence``, ``want_shut_down``) of a broker in state ``current`` (:func:`broker_state`)
    that is ``caught_up`` (CurrentMetadataOffset >= its broker epoch) and ``leads`` partitions.

    - FENCED: WantShutDown -> SHUTDOWN_NOW; not WantFence and caught up -> UNFENCED; else FENCED.
    - UNFENCED: WantFence -> FENCED (SHUTDOWN_NOW with WantShutDown too); WantShutDown ->
      CONTROLLED_SHUTDOWN if it leads partitions, else SHUTDOWN_NOW; else UNFENCED.
    - CONTROLLED_SHUTDOWN: stays while it leads partitions, then SHUTDOWN_NOW. (Kafka also waits
      for every active broker to pass the shutdown offset; this core does not track broker
      offsets.)
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
    return "CONTROLLED_SHUTDOWN" if leads else "SHUTDOWN_NOW"


# ============================================================================ replay
def _register_broker(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ClusterControlManager.replay(RegisterBrokerRecord): the record replaces any earlier
    registration of that id (an older incarnation, or the same one re-registering)."""
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


REPLAY = {
    "RegisterBrokerRecord": _register_broker,
    "UnregisterBrokerRecord": _unregister_broker,
    "FenceBrokerRecord": _fence_broker,
    "UnfenceBrokerRecord": _unfence_broker,
    "BrokerRegistrationChangeRecord": _broker_registration_change,
}


# ============================================================================ snapshot
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
