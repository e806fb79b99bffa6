"""Partition leadership, ISR and replica-set changes that brokers and admins ask for (the
partition half of Kafka's ``ReplicationControlManager``; topics and the broker life cycle are
:mod:`kafka_rpc.controller.replication`).

* Commands (each ``(image, request, ctx[, version]) -> ControllerResult``, records in one
  atomic batch, answered after commit): :func:`alter_partition` (AlterPartition, 56, from the
  partition leader), :func:`elect_leaders` (ElectLeaders, 43), :func:`alter_partition_reassignments`
  (45); the periodic elections of the active controller :func:`balance_partition_leaders`
  (``maybeBalancePartitionLeaders``, with ``auto.leader.rebalance.enable``) and
  :func:`elect_unclean_leaders` (``maybeElectUncleanLeaders``).
* ListPartitionReassignments (46) is a read of the committed image:
  :func:`~kafka_rpc.controller.replication.list_partition_reassignments`.
* Whole-request error answers (NOT_CONTROLLER, authorization, ...), as Kafka's
  ``getErrorResponse``: :func:`alter_partition_error_response`,
  :func:`elect_leaders_error_response`, :func:`alter_partition_reassignments_error_response`,
  :func:`list_partition_reassignments_error_response`.

Every state change is one :class:`~kafka_rpc.controller.partition_change.PartitionChangeBuilder`
record; the records replay through :mod:`kafka_rpc.controller.replication`'s rules.

**AlterPartition from the Raft leader of a ``__diskless-metadata`` partition** (our rule; Kafka
has no such topic). Such a partition's leader is its Batch Coordinator, the leader its own Raft
group elects, which the controller does not choose. So for partitions of ``__diskless-metadata``
only, an AlterPartition from a broker that is a replica of the partition but not the image's
leader is accepted when its PartitionEpoch equals the current one and its LeaderEpoch the
current leader epoch, it is in the new ISR, and it is registered with that broker epoch,
unfenced and not in controlled shutdown (as every ISR member must be). The change makes it
the leader (leader epoch + 1) with the new ISR: one ordinary PartitionChangeRecord, with the
usual ISR checks; a reassignment completes exactly as for an AlterPartition from the leader
(when the new ISR covers the target replicas; NEW_LEADER_ELECTED if that removes the sender).
Errors are Kafka's: epochs above ours NOT_CONTROLLER, a lower leader epoch
FENCED_LEADER_EPOCH, a lower partition epoch INVALID_UPDATE_VERSION, an ISR without the sender
(or with a non-replica or a duplicate) INVALID_REQUEST, an ISR member not registered, fenced or
shutting down INELIGIBLE_REPLICA (also when the sender cannot lead, e.g. its replica's directory
is offline); a sender that is not a replica INVALID_REQUEST. From the image's leader, and on any
other topic, AlterPartition is Kafka's. For the same reason the periodic preferred-leader
rebalance (:func:`balance_partition_leaders`) leaves ``__diskless-metadata`` alone.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from kafka_rpc.controller import cluster, configuration, replication
from kafka_rpc.controller.base import (
    NO_LEADER_CHANGE,
    ApiError,
    Batch,
    ControllerContext,
    ControllerResult,
)
from kafka_rpc.controller.image import NO_LEADER, MetadataImage
from kafka_rpc.controller.partition_change import (
    RECOVERED,
    RECOVERING,
    Election,
    builder,
    is_reassignment_in_progress,
    partitions_with_no_leader,
    reassignment_replicas,
    revert_reassignment,
    unclean_leader_election_enabled,
)
from kafka_rpc.controller.placement import DISKLESS_METADATA_TOPIC
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "ELECTION_PREFERRED",
    "ELECTION_UNCLEAN",
    "MAX_ELECTIONS_PER_IMBALANCE",
    "alter_partition",
    "alter_partition_error_response",
    "alter_partition_reassignments",
    "alter_partition_reassignments_error_response",
    "balance_partition_leaders",
    "elect_leaders",
    "elect_leaders_error_response",
    "elect_unclean_leaders",
    "imbalanced_partitions",
    "list_partition_reassignments_error_response",
    "validate_manual_partition_assignment",
]

log = logging.getLogger("kafka_rpc.controller")

ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
"""``ElectionType`` codes of ElectLeaders."""
MAX_ELECTIONS_PER_IMBALANCE = 1000
"""Elections one periodic run writes at most (Kafka's ``maxElectionsPerImbalance``); a run that
reaches it is due again at once."""

_ERROR_TEXT = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}
"""Kafka's ``Errors.X.message()`` where ``new ApiError(X)`` carries it."""

_BATCH_RULES = {**cluster.REPLAY, **configuration.REPLAY, **replication.REPLAY}
"""The records these commands write: partition changes (replayed by ``replication``)."""


# ============================================================================ AlterPartition
def _isr_members(p: Any, version: int) -> list[tuple[int, int]]:
    """(broker id, broker epoch) of a request partition's proposed ISR: v3 NewIsrWithEpochs; v2
    NewIsr with epoch -1 (``AlterPartitionRequest.newIsrToSimpleNewIsrWithBrokerEpochs``)."""
    if version >= 3:
        return [(s.broker_id, s.broker_epoch) for s in p.new_isr_with_epochs]
    return [(b, -1) for b in p.new_isr]


def _ineligible(image: MetadataImage, members: list[tuple[int, int]]) -> list[str]:
    """``ineligibleReplicasForIsr``: each proposed member that is not registered, is in
    controlled shutdown, is fenced, or whose given epoch (unless -1) is not its registration's."""
    out = []
    for bid, epoch in members:
        reg = image.brokers.get(bid)
        if reg is None:
            out.append(f"{bid} (not registered)")
        elif reg.in_controlled_shutdown:
            out.append(f"{bid} (shutting down)")
        elif reg.fenced:
            out.append(f"{bid} (fenced)")
        elif epoch != -1 and reg.epoch != epoch:
            out.append(f"{bid} (broker epoch mismatch: requested={epoch} VS expected={reg.epoch})")
    return out


def _raft_leader_takeover(broker_id: int, name: str, part: Any) -> bool:
    """Whether an AlterPartition from ``broker_id`` for ``name``'s partition ``part`` is the Raft
    leader of a ``__diskless-metadata`` partition taking over (module docstring): the topic is
    ``__diskless-metadata``, the sender a replica but not the image's leader."""
    return (
        name == DISKLESS_METADATA_TOPIC
        and part is not None
        and broker_id != part.leader
        and broker_id in part.replicas
    )


def _validate_alter_partition(
    image: MetadataImage, broker_id: int, name: str, index: int, part: Any, d: Any, version: int
) -> int:
    """``validateAlterPartitionData``, in Kafka's order; the error code (0 = valid). A
    ``__diskless-metadata`` replica that is not the image's leader passes the leader check
    (:func:`_raft_leader_takeover`) and must then be in its own new ISR in place of the
    leader; the other checks are the same (the epochs equal to the current ones, since above is
    NOT_CONTROLLER and below FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION; every ISR member,
    the sender among them, registered, unfenced, not shutting down)."""
    if part is None:
        log.info("Rejecting AlterPartition request for unknown partition %s-%d.", name, index)
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # epochs ahead of ours: this controller is probably stale, the leader looks for another
    if d.leader_epoch > part.leader_epoch or d.partition_epoch > part.partition_epoch:
        return ErrorCode.NOT_CONTROLLER
    if d.leader_epoch < part.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    takeover = _raft_leader_takeover(broker_id, name, part)
    if broker_id != part.leader and not takeover:
        log.info("Rejecting AlterPartition request from node %d for %s-%d because the current "
                 "leader is %d.", broker_id, name, index, part.leader)  # fmt: skip
        return ErrorCode.INVALID_REQUEST
    if d.partition_epoch < part.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION
    members = _isr_members(d, version)
    isr = [b for b, _ in members]
    leader = broker_id if takeover else part.leader
    # Replicas.validateIsr: every member a replica, none twice; and the leader must stay in it
    # (the Raft leader taking over must be in it)
    if len(set(isr)) != len(isr) or not set(isr) <= set(part.replicas) or leader not in isr:
        log.error("Rejecting AlterPartition request from node %d for %s-%d because it specified "
                  "an invalid ISR %s.", broker_id, name, index, isr)  # fmt: skip
        return ErrorCode.INVALID_REQUEST
    if d.leader_recovery_state == RECOVERING and len(isr) > 1:
        return ErrorCode.INVALID_REQUEST
    if part.leader_recovery_state == RECOVERED and d.leader_recovery_state == RECOVERING:
        return ErrorCode.INVALID_REQUEST
    bad = _ineligible(image, members)
    if bad:
        log.info("Rejecting AlterPartition request from node %d for %s-%d because it specified "
                 "ineligible replicas %s in the new ISR %s.", broker_id, name, index, bad,
                 isr)  # fmt: skip
        return ErrorCode.INELIGIBLE_REPLICA
    return 0


def alter_partition(
    image: MetadataImage, request: Any, ctx: ControllerContext, version: int = 3
) -> ControllerResult:
    """AlterPartition v2-3 (``ReplicationControlManager.alterPartition``; contract 3.1).

    1. The sender's registration epoch must be BrokerEpoch, else top-level
       STALE_BROKER_EPOCH (nothing else answered).
    2. Per topic: a zero or unknown TopicId -> UNKNOWN_TOPIC_ID on each of its partitions.
    3. Per partition, in order: unknown -> UNKNOWN_TOPIC_OR_PARTITION; LeaderEpoch or
       PartitionEpoch above ours -> NOT_CONTROLLER (we may be a stale controller: the leader
       finds the active one again); LeaderEpoch below ours -> FENCED_LEADER_EPOCH; the sender is
       not the leader -> INVALID_REQUEST (except a replica of a ``__diskless-metadata``
       partition, the Raft leader taking over: module docstring); PartitionEpoch below ours ->
       INVALID_UPDATE_VERSION; an ISR with a non-replica, a duplicate, or without the leader (the
       sender, when it takes over) -> INVALID_REQUEST;
       RECOVERING with more than one member, or RECOVERED -> RECOVERING -> INVALID_REQUEST; a
       member not registered, fenced, in controlled shutdown, or with another broker epoch (v3;
       -1 skips the check) -> INELIGIBLE_REPLICA.
    4. A :class:`~kafka_rpc.controller.partition_change.PartitionChangeBuilder` with the
       proposed ISR and recovery state (UNCLEAN election where the topic allows it) writes at
       most one PartitionChangeRecord; it completes a reassignment the new ISR covers. If that
       moved leadership away from the sender, the answer is NEW_LEADER_ELECTED (the record is
       still written).
    5. Otherwise ErrorCode 0 with the partition's state **after** the change (leader, leader
       epoch, ISR, recovery state, partition epoch) - or its current state when nothing
       changed (an ISR equal to the current one writes no record).
    Entries are checked against the image as left by the earlier entries of the request."""
    mod = codec.module("AlterPartitionResponse")
    reg = image.brokers.get(request.broker_id)
    if reg is None or reg.epoch != request.broker_epoch:
        return ControllerResult(
            [], mod.AlterPartitionResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        )
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    topics_out = []
    for td in request.topics:
        parts_out = []
        topic = b.image.topics.get(td.topic_id)
        if topic is None:
            log.info("Rejecting AlterPartition request for unknown topic ID %s.", td.topic_id)
            topics_out.append(
                mod.TopicData(
                    topic_id=td.topic_id,
                    partitions=tuple(
                        mod.PartitionData(
                            partition_index=d.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_ID
                        )
                        for d in td.partitions
                    ),
                )
            )
            continue
        for d in td.partitions:
            idx = d.partition_index
            topic = b.image.topics[td.topic_id]
            part = topic.partitions.get(idx)
            code = _validate_alter_partition(
                b.image, request.broker_id, topic.name, idx, part, d, version
            )
            if code:
                parts_out.append(mod.PartitionData(partition_index=idx, error_code=code))
                continue
            pb = builder(b.image, td.topic_id, idx)
            if unclean_leader_election_enabled(
                b.image, topic.name, ctx.controller_id, ctx.unclean_leader_election_enable
            ):
                pb.election = Election.UNCLEAN
            pb.target_isr = tuple(bid for bid, _ in _isr_members(d, version))
            pb.target_leader_recovery_state = d.leader_recovery_state
            takeover = _raft_leader_takeover(request.broker_id, topic.name, part)
            if takeover:
                pb.target_leader = request.broker_id
            rec = pb.build()
            if (
                takeover
                and request.broker_id in pb.target_replicas
                and (rec is None or rec.leader != request.broker_id)
            ):
                # the acceptor refused it (e.g. the directory of its replica is offline)
                log.info("Rejecting AlterPartition request from node %d for %s-%d: it cannot "
                         "take over the leadership of its Raft group.", request.broker_id,
                         topic.name, idx)  # fmt: skip
                parts_out.append(
                    mod.PartitionData(partition_index=idx, error_code=ErrorCode.INELIGIBLE_REPLICA)
                )
                continue
            if rec is not None:
                b.add(rec)
                if rec.leader not in (request.broker_id, NO_LEADER_CHANGE):
                    log.info("AlterPartition request from node %d for %s-%d completed the "
                             "ongoing partition reassignment and triggered a leadership change. "
                             "Returning NEW_LEADER_ELECTED.", request.broker_id, topic.name,
                             idx)  # fmt: skip
                    parts_out.append(
                        mod.PartitionData(
                            partition_index=idx, error_code=ErrorCode.NEW_LEADER_ELECTED
                        )
                    )
                    continue
            after = b.image.topics[td.topic_id].partitions[idx]
            parts_out.append(
                mod.PartitionData(
                    partition_index=idx,
                    error_code=0,
                    leader_id=after.leader,
                    leader_epoch=after.leader_epoch,
                    isr=after.isr,
                    leader_recovery_state=after.leader_recovery_state,
                    partition_epoch=after.partition_epoch,
                )
            )
        topics_out.append(mod.TopicData(topic_id=td.topic_id, partitions=tuple(parts_out)))
    return ControllerResult(b.records, mod.AlterPartitionResponse(topics=tuple(topics_out)))


def alter_partition_error_response(request: Any, code: int, message: str | None = None) -> Any:
    """A top-level ``code`` answer (``AlterPartitionRequest.getErrorResponse``)."""
    return codec.message_class("AlterPartitionResponse")(error_code=code)


# ============================================================================ ElectLeaders
def _elect_leader(b: Batch, topic: str, index: int, election_type: int) -> tuple[int, str | None]:
    """``ReplicationControlManager.electLeader``: (error code, message) and, on success, the
    record added to ``b``."""
    tid = b.image.topics_by_name.get(topic)
    if tid is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    p = b.image.topics[tid].partitions.get(index)
    if p is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{index}"
    preferred = p.replicas[0] if p.replicas else NO_LEADER
    if (election_type == ELECTION_PREFERRED and p.leader == preferred) or (
        election_type == ELECTION_UNCLEAN and p.leader != NO_LEADER
    ):
        code = ErrorCode.ELECTION_NOT_NEEDED
        return code, _ERROR_TEXT[code]
    pb = builder(b.image, tid, index)
    pb.election = Election.UNCLEAN if election_type == ELECTION_UNCLEAN else Election.PREFERRED
    rec = pb.build()
    if rec is None:
        code = (
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            if election_type == ELECTION_PREFERRED
            else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        )
        return code, _ERROR_TEXT[code]
    b.add(rec)
    return 0, None


def elect_leaders(
    image: MetadataImage, request: Any, ctx: ControllerContext, version: int = 2
) -> ControllerResult:
    """ElectLeaders v0-2 (``ReplicationControlManager.electLeaders``; KIP-460).

    ElectionType (v1+; v0 means PREFERRED) 0 = PREFERRED, 1 = UNCLEAN; another value fails
    the whole request with INVALID_REQUEST "Unknown election type N" (every named partition
    carries it, as ``getErrorResponse``). Per partition: unknown topic or partition ->
    UNKNOWN_TOPIC_OR_PARTITION ("No such topic as T" / "No such partition as T-P"); PREFERRED
    when the first replica already leads, or UNCLEAN when the partition has a leader ->
    ELECTION_NOT_NEEDED; no record possible -> PREFERRED_LEADER_NOT_AVAILABLE /
    ELIGIBLE_LEADERS_NOT_AVAILABLE; else a PartitionChangeRecord (PREFERRED: the first replica
    when it is an active ISR member, else the current leader kept, else another ISR member;
    UNCLEAN: an ISR member, else the first active replica, ISR = [it], RECOVERING) and ErrorCode
    0 with a null message. An admin's UNCLEAN election does not need
    ``unclean.leader.election.enable``, as in Kafka. TopicPartitions null: every partition of
    every topic (by name), leaving out those answered ELECTION_NOT_NEEDED. One atomic batch."""
    mod = codec.module("ElectLeadersResponse")
    etype = request.election_type if version >= 1 else ELECTION_PREFERRED
    if etype not in (ELECTION_PREFERRED, ELECTION_UNCLEAN):
        return ControllerResult(
            [],
            elect_leaders_error_response(
                request, ErrorCode.INVALID_REQUEST, f"Unknown election type {etype}"
            ),
        )
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    results = []
    if request.topic_partitions is None:
        for name in sorted(b.image.topics_by_name):
            topic = b.image.topic_by_name(name)
            assert topic is not None  # a name of topics_by_name
            parts = []
            for idx in sorted(topic.partitions):
                code, msg = _elect_leader(b, name, idx, etype)
                if code != ErrorCode.ELECTION_NOT_NEEDED:
                    parts.append(
                        mod.PartitionResult(partition_id=idx, error_code=code, error_message=msg)
                    )
            results.append(mod.ReplicaElectionResult(topic=name, partition_result=tuple(parts)))
    else:
        for tp in request.topic_partitions:
            parts = []
            for idx in tp.partitions:
                code, msg = _elect_leader(b, tp.topic, idx, etype)
                parts.append(
                    mod.PartitionResult(partition_id=idx, error_code=code, error_message=msg)
                )
            results.append(mod.ReplicaElectionResult(topic=tp.topic, partition_result=tuple(parts)))
    return ControllerResult(
        b.records, mod.ElectLeadersResponse(error_code=0, replica_election_results=tuple(results))
    )


def elect_leaders_error_response(request: Any, code: int, message: str | None = None) -> Any:
    """``ElectLeadersRequest.getErrorResponse``: the top-level ``code`` (v1+) and every named
    partition with ``code`` and ``message``; nothing per partition for a null TopicPartitions."""
    mod = codec.module("ElectLeadersResponse")
    results = tuple(
        mod.ReplicaElectionResult(
            topic=tp.topic,
            partition_result=tuple(
                mod.PartitionResult(partition_id=i, error_code=code, error_message=message)
                for i in tp.partitions
            ),
        )
        for tp in (request.topic_partitions or ())
    )
    return mod.ElectLeadersResponse(error_code=code, replica_election_results=results)


# ============================================================================ periodic elections
def imbalanced_partitions(image: MetadataImage) -> list[tuple[UUID, int]]:
    """(topic id, index) of every partition not led by its first replica (Kafka's
    ``imbalancedPartitions``: ``!hasPreferredLeader()``), by topic name then index."""
    return [
        (t.topic_id, i)
        for t in sorted(image.topics.values(), key=lambda t: t.name)
        for i in sorted(t.partitions)
        if t.partitions[i].leader != (t.partitions[i].replicas or (NO_LEADER,))[0]
    ]


def balance_partition_leaders(
    image: MetadataImage, ctx: ControllerContext, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE
) -> ControllerResult:
    """``maybeBalancePartitionLeaders`` (run every ``leader.imbalance.check.interval.seconds``
    when ``auto.leader.rebalance.enable``): a PREFERRED election for each imbalanced partition,
    at most ``max_elections`` records. The response is True when it stopped at the bound (more
    may be due at once). Partitions of ``__diskless-metadata`` are left alone: their leader is
    their Raft group's (module docstring), which would take the leadership back at once."""
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    for tid, idx in imbalanced_partitions(image):
        if len(b.records) >= max_elections:
            break
        if b.image.topics[tid].name == DISKLESS_METADATA_TOPIC:
            continue
        pb = builder(b.image, tid, idx)
        pb.election = Election.PREFERRED
        rec = pb.build()
        if rec is not None:
            b.add(rec)
    return ControllerResult(b.records, len(b.records) >= max_elections)


def elect_unclean_leaders(
    image: MetadataImage, ctx: ControllerContext, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE
) -> ControllerResult:
    """``maybeElectUncleanLeaders`` (every ``unclean.leader.election.interval.ms``): an UNCLEAN
    election for each leaderless partition whose topic has ``unclean.leader.election.enable``
    (:func:`~kafka_rpc.controller.partition_change.unclean_leader_election_enabled`), at most
    ``max_elections`` records. The response is True when it stopped at the bound."""
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    for tid, idx in partitions_with_no_leader(image):
        if len(b.records) >= max_elections:
            break
        name = b.image.topics[tid].name
        if not unclean_leader_election_enabled(
            b.image, name, ctx.controller_id, ctx.unclean_leader_election_enable
        ):
            continue
        code, _ = _elect_leader(b, name, idx, ELECTION_UNCLEAN)
        if code == 0:
            log.info("Triggering unclean leader election for offline partition %s-%d.", name, idx)
        else:
            log.warning("Cannot trigger unclean leader election for offline partition %s-%d: %s",
                        name, idx, ErrorCode.for_code(code).name)  # fmt: skip
    return ControllerResult(b.records, len(b.records) >= max_elections)


# ============================================================================ reassignments


validate_manual_partition_assignment = replication.validate_manual_partition_assignment


def _current_replication_factor(p: Any) -> int:
    """``validatePartitionReplicationFactorUnchanged``'s count: the replicas plus the adding
    minus the removing ones while a reassignment is in progress, else the replicas."""
    if is_reassignment_in_progress(p):
        return len((set(p.replicas) | set(p.adding_replicas)) - set(p.removing_replicas))
    return len(p.replicas)


def _alter_reassignment(
    b: Batch, ctx: ControllerContext, name: str, target: Any, allow_rf_change: bool
) -> None:
    """``alterPartitionReassignment`` for one partition; raises ApiError."""
    tid = b.image.topics_by_name.get(name)
    if tid is None:
        raise ApiError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}."
        )
    idx = target.partition_index
    p = b.image.topics[tid].partitions.get(idx)
    if p is None:
        raise ApiError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{idx}."
        )
    unclean_ok = unclean_leader_election_enabled(
        b.image, name, ctx.controller_id, ctx.unclean_leader_election_enable
    )
    pb = builder(b.image, tid, idx)
    if target.replicas is None:  # cancelPartitionReassignment
        if not is_reassignment_in_progress(p):
            raise ApiError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
        replicas, isr, unclean = revert_reassignment(p)
        if unclean and not unclean_ok:
            raise ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Unable to revert partition assignment for {name}:{idx} because it would "
                "require an unclean leader election.",
            )
        if unclean_ok:
            pb.election = Election.UNCLEAN
        pb.target_isr, pb.target_replicas = isr, replicas
        pb.target_removing, pb.target_adding = (), ()
    else:  # changePartitionReassignment
        tgt = tuple(target.replicas)
        validate_manual_partition_assignment(b.image, tgt)
        if not allow_rf_change and _current_replication_factor(p) != len(tgt):
            raise ApiError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"The replication factor is changed from {_current_replication_factor(p)} to "
                f"{len(tgt)}",
            )
        replicas, removing, adding = reassignment_replicas(p.replicas, tgt)
        if replicas != tuple(p.replicas):
            pb.target_replicas = replicas
        if removing:
            pb.target_removing = removing
        if adding:
            pb.target_adding = adding
    rec = pb.build()
    if rec is not None:
        b.add(rec)


def alter_partition_reassignments(
    image: MetadataImage, request: Any, ctx: ControllerContext, version: int = 1
) -> ControllerResult:
    """AlterPartitionReassignments v0-1 (``ReplicationControlManager.
    alterPartitionReassignments``). Per partition (other partitions go
    on after an error, all records form one atomic batch):

    - unknown topic -> UNKNOWN_TOPIC_OR_PARTITION "Unable to find a topic named T."; unknown
      partition -> "Unable to find partition T:P.";
    - Replicas null = **cancel**: nothing in progress -> NO_REASSIGNMENT_IN_PROGRESS; else
      back to the replicas without the adding ones and the ISR without them; when that ISR is
      empty, the first original replica alone, which needs ``unclean.leader.election.enable``
      (else INVALID_REPLICA_ASSIGNMENT "Unable to revert partition assignment for T:P because
      it would require an unclean leader election.");
    - otherwise **change**: the target must be a non-empty list of registered brokers without
      duplicates (INVALID_REPLICA_ASSIGNMENT); with AllowReplicationFactorChange false (v1) its
      size must be the current replication factor (INVALID_REPLICATION_FACTOR "The replication
      factor is changed from X to Y"); then ``replicas = target ++ (current - target)``,
      ``removing = current - target``, ``adding = target - current``, and a builder record: a
      pure reordering, or a target the ISR already covers, completes at once; otherwise the
      partition carries Adding/RemovingReplicas until an AlterPartition grows the ISR over the
      target (:func:`alter_partition`), which completes it (Replicas = target, the removed
      replicas out of the ISR, the leader moved if it was removed, the leader epoch bumped).

    ErrorMessage is null on success and when the message would be the code's default text
    (Kafka's ``ApiError.fromThrowable``). v1 echoes AllowReplicationFactorChange."""
    mod = codec.module("AlterPartitionReassignmentsResponse")
    allow = request.allow_replication_factor_change if version >= 1 else True
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    topics_out = []
    ok = total = 0
    for t in request.topics:
        parts = []
        for target in t.partitions:
            code, msg = 0, None
            try:
                _alter_reassignment(b, ctx, t.name, target, allow)
                ok += 1
            except ApiError as e:
                log.info("Unable to alter partition reassignment for %s:%d because of an %s "
                         "error: %s", t.name, target.partition_index,
                         ErrorCode.for_code(e.code).name, e.message)  # fmt: skip
                code, msg = e.code, e.message
            total += 1
            parts.append(
                mod.ReassignablePartitionResponse(
                    partition_index=target.partition_index, error_code=code, error_message=msg
                )
            )
        topics_out.append(mod.ReassignableTopicResponse(name=t.name, partitions=tuple(parts)))
    log.info("Successfully altered %d out of %d partition reassignment(s).", ok, total)
    return ControllerResult(
        b.records,
        mod.AlterPartitionReassignmentsResponse(
            allow_replication_factor_change=allow,
            error_code=0,
            error_message=None,
            responses=tuple(topics_out),
        ),
    )


def alter_partition_reassignments_error_response(
    request: Any, code: int, message: str | None = None
) -> Any:
    """``AlterPartitionReassignmentsRequest.getErrorResponse``: ``code`` and ``message`` at the
    top and on every named partition."""
    mod = codec.module("AlterPartitionReassignmentsResponse")
    return mod.AlterPartitionReassignmentsResponse(
        error_code=code,
        error_message=message,
        responses=tuple(
            mod.ReassignableTopicResponse(
                name=t.name,
                partitions=tuple(
                    mod.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=code, error_message=message
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        ),
    )


def list_partition_reassignments_error_response(
    request: Any, code: int, message: str | None = None
) -> Any:
    """``ListPartitionReassignmentsRequest.getErrorResponse``: ``code`` and ``message`` at the
    top, and each named topic listed with its partition indexes only."""
    mod = codec.module("ListPartitionReassignmentsResponse")
    return mod.ListPartitionReassignmentsResponse(
        error_code=code,
        error_message=message,
        topics=tuple(
            mod.OngoingTopicReassignment(
                name=t.name,
                partitions=tuple(
                    mod.OngoingPartitionReassignment(partition_index=i) for i in t.partition_indexes
                ),
            )
            for t in (request.topics or ())
        ),
    )
