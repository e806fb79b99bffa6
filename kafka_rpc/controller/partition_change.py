"""One partition's next state (Kafka's ``PartitionChangeBuilder``,
``PartitionReassignmentReplicas``, ``PartitionReassignmentRevert`` and
``ReplicationControlManager``'s ``LeaderAcceptor`` and ``generateLeaderAndIsrUpdates``).

Every change of a partition's leader, ISR, replica set or recovery state goes through
:class:`PartitionChangeBuilder`: AlterPartition, ElectLeaders, reassignments, the periodic
preferred and unclean elections (:mod:`kafka_rpc.controller.partitions`), and the leader moves
of fencing, unfencing, controlled shutdown, a new incarnation and unregistration
(:func:`generate_leader_and_isr_updates`, used by :mod:`kafka_rpc.controller.replication`).
The reassignment arithmetic here is also the model of KIP-1114's chunk reassignment
(:mod:`kafka_rpc.controller.chunks`).

The builder answers one PartitionChangeRecord or None (nothing changes). Replaying it
(``replication``'s rule) raises the partition epoch by one, and the leader epoch by one when
the record sets ``Leader`` (even to the same id), as ``PartitionRegistration.merge`` does.

Eligible leader replicas (KIP-966) are not implemented: ``eligible.leader.replicas.version``
stays 0 (the features module refuses 1), so, as Kafka with ELR off, **the ISR is never left
empty**: when the last ISR member goes, the ISR field is not written (it keeps that member)
and the leader becomes -1; that member coming back is elected again. A partition that somehow
has ELR fields gets them cleared, as Kafka's builder does with ELR off.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from uuid import UUID

from kafka_rpc.controller import cluster
from kafka_rpc.controller.base import Batch
from kafka_rpc.controller.features import METADATA_VERSION
from kafka_rpc.controller.image import (
    NO_LEADER,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    MetadataImage,
    PartitionRegistration,
)
from kafka_rpc.protocol import codec

__all__ = [
    "RECOVERED",
    "RECOVERING",
    "Election",
    "PartitionChangeBuilder",
    "complete_reassignment",
    "generate_leader_and_isr_updates",
    "is_reassignment_in_progress",
    "leader_acceptor",
    "partitions_with_broker_in_isr",
    "partitions_with_no_leader",
    "reassignment_replicas",
    "revert_reassignment",
    "unclean_leader_election_enabled",
]

RECOVERED = 0
RECOVERING = 1
"""``LeaderRecoveryState``: a leader elected uncleanly is RECOVERING until it tells the
controller (AlterPartition) that it has recovered."""

MV_NO_ISR_SHRINK_BUMP = 12
"""metadata.version 3.6-IV0: from here an ISR shrink no longer bumps the leader epoch
(``MetadataVersion.isLeaderEpochBumpRequiredOnIsrShrink``, KAFKA-15021)."""

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"

_PCR = codec.message_class("PartitionChangeRecord")


class Election(enum.Enum):
    """``PartitionChangeBuilder.Election``.

    - PREFERRED: the first target replica if it is a valid leader, else the current leader if
      still valid, else any valid replica (ElectLeaders PREFERRED, the periodic rebalance);
    - ONLINE: the current leader if still valid, else the first valid target replica;
    - UNCLEAN: ONLINE, then, when no ISR member is acceptable, the first acceptable replica
      outside the ISR (ISR = [it], LeaderRecoveryState RECOVERING): data may be lost."""

    PREFERRED = 0
    ONLINE = 1
    UNCLEAN = 2


# ============================================================================ reassignment math
def reassignment_replicas(
    current: Sequence[int], target: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``PartitionReassignmentReplicas(current, target)``: ``(replicas, removing, adding)`` with
    ``removing = current - target`` and ``adding = target - current`` (both sorted) and
    ``replicas = target ++ removing`` (target order first)."""
    removing = tuple(sorted(set(current) - set(target)))
    adding = tuple(sorted(set(target) - set(current)))
    return tuple(target) + removing, removing, adding


def complete_reassignment(
    replicas: Sequence[int],
    removing: Sequence[int],
    adding: Sequence[int],
    isr: Sequence[int],
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``PartitionReassignmentReplicas.maybeCompleteReassignment``: ``(replicas, isr)`` once a
    reassignment in progress (``removing`` or ``adding`` non-empty) can finish: both lists
    without ``removing`` are non-empty and the ISR covers the replicas; else None (also when
    nothing is in progress). Orders are kept."""
    if not removing and not adding:
        return None
    new_isr = tuple(isr)
    new_replicas = tuple(replicas)
    if removing:
        gone = set(removing)
        new_isr = tuple(r for r in isr if r not in gone)
        if not new_isr:
            return None
        new_replicas = tuple(r for r in replicas if r not in gone)
        if not new_replicas:
            return None
    if not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def is_reassignment_in_progress(p: Any) -> bool:
    """A reassignment is in progress while the partition (or chunk) has adding or removing
    replicas (``PartitionReassignmentReplicas.isReassignmentInProgress``)."""
    return bool(p.removing_replicas) or bool(p.adding_replicas)


def revert_reassignment(p: PartitionRegistration) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """``PartitionReassignmentRevert``: ``(replicas, isr, unclean)`` of cancelling the
    reassignment in progress: the replicas without the adding ones (order kept), the ISR
    without them; when that ISR is empty, the first remaining replica alone and ``unclean``
    True (the caller allows it only with unclean leader election). A partition whose replicas
    are all being added raises ValueError (unreachable: it would have started empty)."""
    adding = set(p.adding_replicas)
    replicas = tuple(r for r in p.replicas if r not in adding)
    isr = tuple(r for r in p.isr if r not in adding)
    if isr:
        return replicas, isr, False
    if not replicas:
        raise ValueError("Invalid replica assignment: addingReplicas contains all replicas.")
    return replicas, (replicas[0],), True


# ============================================================================ leaders
def _directory(p: PartitionRegistration, broker_id: int) -> UUID:
    """The replica's directory (``PartitionRegistration.directory``); MIGRATING when the
    partition carries none (a record written below metadata.version 17)."""
    if not p.directories:
        return cluster.DIR_MIGRATING
    for r, d in zip(p.replicas, p.directories, strict=False):
        if r == broker_id:
            return d
    return cluster.DIR_MIGRATING


def _dir_online(image: MetadataImage, broker_id: int, d: UUID) -> bool:
    """``ClusterControlManager.hasOnlineDir`` / ``DirectoryId.isOnline``: the broker is
    registered and the directory is UNASSIGNED, MIGRATING, one of its online LogDirs, or any
    directory when it registered none; LOST never."""
    reg = image.brokers.get(broker_id)
    if reg is None:
        return False
    if d in (cluster.DIR_UNASSIGNED, cluster.DIR_MIGRATING):
        return True
    if d == cluster.DIR_LOST:
        return False
    return not reg.log_dirs or d in reg.log_dirs


def leader_acceptor(
    image: MetadataImage,
    p: PartitionRegistration,
    *,
    remove: int = NO_LEADER,
    add: int = NO_LEADER,
    unclean_shutdown: int = NO_LEADER,
) -> Callable[[int], bool]:
    """``LeaderAcceptor`` with ``generateLeaderAndIsrUpdates``' predicate: broker ``r`` may lead
    partition ``p`` when it is not ``remove`` (a broker being fenced / shut down /
    unregistered) nor ``unclean_shutdown``, is active (unfenced, not in controlled shutdown) or
    is ``add`` (the broker being unfenced, which the image still shows fenced), and the
    directory of its replica is online."""

    def accept(r: int) -> bool:
        if r in (remove, unclean_shutdown):
            return False
        if r != add and not image.is_active(r):
            return False
        return _dir_online(image, r, _directory(p, r))

    return accept


# ============================================================================ the builder
class PartitionChangeBuilder:
    """Kafka's ``PartitionChangeBuilder`` for partition ``partition_id`` of ``topic_id`` in
    state ``partition``. Set the targets (attributes, all tuples of broker ids), then
    :meth:`build`:

    - ``target_isr``, ``target_replicas``, ``target_removing``, ``target_adding``: start as the
      partition's; ``target_leader_recovery_state`` (0 RECOVERED / 1 RECOVERING);
    - ``election`` (:class:`Election`, ONLINE unless set);
    - ``target_leader`` (ours, None unless set): a replica that leads if it is a valid leader
      (in the target ISR and acceptable), before the election's own choice (the Raft leader of a
      ``__diskless-metadata`` partition taking over through AlterPartition,
      :func:`kafka_rpc.controller.partitions.alter_partition`);
    - :meth:`set_directory` for one replica's directory (AssignReplicasToDirs).

    ``acceptable(broker_id)`` says who may lead (:func:`leader_acceptor`);
    ``metadata_version`` is the finalized level (None: the newest rules);
    ``default_dir(broker_id)`` gives a new replica's directory (``ClusterControlManager.
    defaultDir``)."""

    def __init__(
        self,
        partition: PartitionRegistration,
        topic_id: UUID,
        partition_id: int,
        acceptable: Callable[[int], bool],
        metadata_version: int | None,
        default_dir: Callable[[int], UUID] | None = None,
    ) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.acceptable = acceptable
        self.metadata_version = metadata_version
        self.default_dir = default_dir
        self.target_isr: tuple[int, ...] = tuple(partition.isr)
        self.target_replicas: tuple[int, ...] = tuple(partition.replicas)
        self.target_removing: tuple[int, ...] = tuple(partition.removing_replicas)
        self.target_adding: tuple[int, ...] = tuple(partition.adding_replicas)
        self.target_leader_recovery_state: int = partition.leader_recovery_state
        self.election = Election.ONLINE
        self.target_leader: int | None = None
        self._dirs = dict(zip(partition.replicas, self._current_dirs(), strict=False))

    def _current_dirs(self) -> tuple[UUID, ...]:
        p = self.partition
        return tuple(p.directories) or (cluster.DIR_MIGRATING,) * len(p.replicas)

    def set_directory(self, broker_id: int, directory: UUID) -> PartitionChangeBuilder:
        self._dirs[broker_id] = directory
        return self

    # -------------------------------------------------------------- election
    def _valid_leader(self, r: int) -> bool:
        # ELR is off: only ISR members (never an ELR member of an empty ISR)
        return r in self.target_isr and self.acceptable(r)

    def elect_leader(self) -> tuple[int, bool]:
        """``electLeader``: ``(leader, unclean)`` by :attr:`election` (-1 when none), or
        :attr:`target_leader` when set and valid."""
        p = self.partition
        if self.target_leader is not None and self._valid_leader(self.target_leader):
            return self.target_leader, False
        if self.election == Election.PREFERRED:
            preferred = self.target_replicas[0] if self.target_replicas else NO_LEADER
            if self._valid_leader(preferred):
                return preferred, False
            if self._valid_leader(p.leader):
                return p.leader, False
            for r in self.target_replicas[1:]:
                if self._valid_leader(r):
                    return r, False
            return NO_LEADER, False
        if self._valid_leader(p.leader):
            return p.leader, False
        for r in self.target_replicas:
            if self._valid_leader(r):
                return r, False
        if self.election == Election.UNCLEAN:
            for r in self.target_replicas:
                if self.acceptable(r):
                    return r, True
        return NO_LEADER, False

    # -------------------------------------------------------------- build
    def build(self) -> Any | None:
        """The PartitionChangeRecord that takes the partition to the targets, or None when
        nothing would change. In Kafka's order: complete a reassignment the target ISR now
        covers; elect (an unclean winner gets ISR = [it] and RECOVERING); a replica set losing
        an old replica forces a leader-epoch bump (Leader = the current leader); the ISR is
        written when it differs **and is not empty**; below metadata.version 12 an ISR shrink
        bumps the leader epoch; then Replicas, Directories (metadata.version >= 17),
        RemovingReplicas, AddingReplicas and LeaderRecoveryState where they differ."""
        p = self.partition
        fields: dict[str, Any] = {}
        done = complete_reassignment(
            self.target_replicas, self.target_removing, self.target_adding, self.target_isr
        )
        if done is not None:
            self.target_replicas, self.target_isr = done
            self.target_removing, self.target_adding = (), ()
        leader, unclean = self.elect_leader()
        if leader != p.leader:
            fields["leader"] = leader
            if unclean:
                fields["isr"] = (leader,)
                if p.leader_recovery_state != RECOVERING:
                    fields["leader_recovery_state"] = RECOVERING
        if "leader" not in fields and not set(p.replicas) <= set(self.target_replicas):
            fields["leader"] = p.leader
        if p.elr:
            fields["eligible_leader_replicas"] = ()
        if "isr" not in fields and self.target_isr and self.target_isr != tuple(p.isr):
            fields["isr"] = self.target_isr
        mv = self.metadata_version
        if (
            mv is not None
            and mv < MV_NO_ISR_SHRINK_BUMP
            and "leader" not in fields
            and "isr" in fields
            and not set(p.isr) <= set(fields["isr"])
        ):
            fields["leader"] = p.leader
        if self.target_replicas:
            if mv is not None and mv >= cluster.MV_DIRECTORY_ASSIGNMENT:
                dirs = tuple(
                    self._dirs[r] if r in self._dirs else self._default_dir(r)
                    for r in self.target_replicas
                )
                if dirs != self._current_dirs():
                    fields["directories"] = dirs
            if self.target_replicas != tuple(p.replicas):
                fields["replicas"] = self.target_replicas
        if self.target_removing != tuple(p.removing_replicas):
            fields["removing_replicas"] = self.target_removing
        if self.target_adding != tuple(p.adding_replicas):
            fields["adding_replicas"] = self.target_adding
        if self.target_leader_recovery_state != p.leader_recovery_state:
            fields["leader_recovery_state"] = self.target_leader_recovery_state
        if not fields:
            return None
        return _PCR(partition_id=self.partition_id, topic_id=self.topic_id, **fields)

    def _default_dir(self, broker_id: int) -> UUID:
        if self.default_dir is None:
            raise ValueError(f"no directory known for new replica {broker_id}")
        return self.default_dir(broker_id)


def metadata_version(image: MetadataImage) -> int | None:
    """The finalized ``metadata.version`` level of ``image`` (None when none is)."""
    return image.features.get(METADATA_VERSION)


def builder(
    image: MetadataImage,
    topic_id: UUID,
    partition_id: int,
    acceptable: Callable[[int], bool] | None = None,
) -> PartitionChangeBuilder:
    """A builder for a partition of ``image``, with the default :func:`leader_acceptor`,
    ``image``'s metadata.version and ``cluster.default_dir`` for new replicas."""
    p = image.topics[topic_id].partitions[partition_id]
    return PartitionChangeBuilder(
        p,
        topic_id,
        partition_id,
        acceptable or leader_acceptor(image, p),
        metadata_version(image),
        lambda r: cluster.default_dir(image, r),
    )


# ============================================================================ configs
def unclean_leader_election_enabled(
    image: MetadataImage, topic: str, controller_id: int = -1, static_default: bool = False
) -> bool:
    """``ConfigurationControlManager.uncleanLeaderElectionEnabledForTopic``: the topic's
    ``unclean.leader.election.enable``, else the controller node's dynamic broker config (its
    id), else the cluster-wide dynamic default (broker resource ""), else the controller's
    static config ``static_default``. Parsed as Java's ``Boolean.parseBoolean`` (only "true",
    any case, is true)."""
    for key in (
        (RESOURCE_TOPIC, topic),
        (RESOURCE_BROKER, str(controller_id)),
        (RESOURCE_BROKER, ""),
    ):
        v = image.configs.get(key, {}).get(UNCLEAN_LEADER_ELECTION_ENABLE)
        if v:
            return v.lower() == "true"
    return static_default


# ============================================================================ broker changes
def partitions_with_broker_in_isr(image: MetadataImage, broker_id: int) -> list[tuple[UUID, int]]:
    """(topic id, index) of every partition whose ISR holds ``broker_id`` (Kafka's
    ``BrokersToIsrs.partitionsWithBrokerInIsr``), by topic name then index."""
    return [
        (t.topic_id, i)
        for t in sorted(image.topics.values(), key=lambda t: t.name)
        for i in sorted(t.partitions)
        if broker_id in t.partitions[i].isr
    ]


def partitions_with_no_leader(image: MetadataImage) -> list[tuple[UUID, int]]:
    """(topic id, index) of every leaderless partition (``BrokersToIsrs.partitionsWithNoLeader``),
    by topic name then index."""
    return [
        (t.topic_id, i)
        for t in sorted(image.topics.values(), key=lambda t: t.name)
        for i in sorted(t.partitions)
        if t.partitions[i].leader == NO_LEADER
    ]


def generate_leader_and_isr_updates(
    b: Batch,
    partitions: Iterable[tuple[UUID, int]],
    *,
    remove: int = NO_LEADER,
    add: int = NO_LEADER,
    unclean_shutdown: int = NO_LEADER,
    controller_id: int = -1,
    unclean_default: bool = False,
) -> int:
    """``ReplicationControlManager.generateLeaderAndIsrUpdates``: for each partition, a builder
    whose target ISR is the ISR without ``remove`` and ``unclean_shutdown``, whose acceptor
    refuses those two and accepts ``add`` although fenced (:func:`leader_acceptor`), with an
    UNCLEAN election where the topic allows it (:func:`unclean_leader_election_enabled`); its
    record, if any, is added to ``b``. Returns how many records were added. Each partition is
    read from ``b.image`` when its turn comes."""
    n = 0
    for tid, idx in list(partitions):
        t = b.image.topics.get(tid)
        p = None if t is None else t.partitions.get(idx)
        if p is None:
            continue
        assert t is not None  # p is one of its partitions
        pb = builder(
            b.image, tid, idx,
            leader_acceptor(b.image, p, remove=remove, add=add, unclean_shutdown=unclean_shutdown),
        )  # fmt: skip
        if unclean_leader_election_enabled(b.image, t.name, controller_id, unclean_default):
            pb.election = Election.UNCLEAN
        pb.target_isr = tuple(r for r in p.isr if r != remove and r != unclean_shutdown)
        rec = pb.build()
        if rec is not None:
            b.add(rec)
            n += 1
    return n
