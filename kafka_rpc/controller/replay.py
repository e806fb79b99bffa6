"""``replay(image, record, offset) -> image``: how every node builds its image from the log.

Each rule is the ``replay`` method of the Kafka class named in its handler. A record that
contradicts the image raises :class:`ReplayError`, which Kafka treats as a fatal fault (the node
stops: its state would diverge from the log). ``offset`` is the record's log offset; for records
loaded from a snapshot it is the snapshot's last contained offset (``QuorumController`` §2.5).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any
from uuid import UUID

from pyrsistent import pmap

from kafka_rpc.controller import coordinator_mapping as _mapping
from kafka_rpc.controller.image import (
    RESOURCE_TOPIC,
    BrokerRegistration,
    ChunkRegistration,
    Endpoint,
    MetadataImage,
    PartitionRegistration,
    ProducerIdsImage,
    TopicImage,
    evolve,
)
from kafka_rpc.security import acls as _acls
from kafka_rpc.security import sasl as _sasl

__all__ = ["ReplayError", "replay", "replay_all"]

NO_LEADER_CHANGE = -2
"""PartitionChangeRecord.Leader meaning "unchanged"."""


class ReplayError(Exception):
    """A record contradicts the image (e.g. a change for an unknown broker epoch, producer ids
    going down). Kafka treats this as a fatal fault: the log and this node's state disagree."""


def replay(
    image: MetadataImage, record: Any, offset: int, epoch: int | None = None
) -> MetadataImage:
    """The image after applying decoded metadata ``record`` written at log ``offset`` (in leader
    ``epoch``, or the image's current epoch when None). Raises ReplayError, or TypeError for a
    record type the controller does not know."""
    handler = _HANDLERS.get(type(record).__spec_name__)
    if handler is None:
        raise TypeError(f"no replay rule for {type(record).__spec_name__}")
    image = handler(image, record, offset)
    return evolve(
        image, last_offset=offset, last_epoch=image.last_epoch if epoch is None else epoch
    )


def replay_all(
    image: MetadataImage, records: Iterable[tuple[Any, int]], epoch: int | None = None
) -> MetadataImage:
    """Replay ``(record, offset)`` pairs in order."""
    for rec, off in records:
        image = replay(image, rec, off, epoch)
    return image


# ------------------------------------------------------------------------- brokers
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


# ------------------------------------------------------------------------- topics
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


def _topic_of(img: MetadataImage, r: Any, what: str) -> TopicImage:
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
    t = _topic_of(img, r, "create")
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
    t = _topic_of(img, r, "change")
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


# ------------------------------------------------------------------------- chunks (KIP-1114)
def _chunk(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ChunkRecord: an inactive chunk, whole (it replaces one with the same start offset, as a
    PartitionRecord replaces a partition). The topic and partition must exist and the offsets
    must satisfy ``start - 1 <= stop <= end`` and ``start >= 0``; otherwise a ReplayError."""
    t = _topic_of(img, r, "add a chunk to")
    if r.partition_id not in t.partitions:
        raise ReplayError(f"Unable to replay {r}: no partition {r.partition_id} in topic {t.name}")
    if r.start_offset < 0 or not r.start_offset - 1 <= r.stop_offset <= r.end_offset:
        raise ReplayError(f"Unable to replay {r}: inconsistent chunk offsets")
    chunk = ChunkRegistration(
        start_offset=r.start_offset,
        stop_offset=r.stop_offset,
        end_offset=r.end_offset,
        replicas=tuple(r.replicas),
        isr=tuple(r.isr),
        start_timestamp=r.start_timestamp,
        directories=tuple(r.directories),
        removing_replicas=tuple(r.removing_replicas),
        adding_replicas=tuple(r.adding_replicas),
        epoch=r.epoch,
    )
    return _with_chunk(img, t, r.partition_id, chunk)


def _with_chunk(
    img: MetadataImage, t: TopicImage, index: int, chunk: ChunkRegistration | None, start=None
) -> MetadataImage:
    """``t`` with ``chunk`` set (or, for None, the chunk at ``start`` removed) in partition
    ``index``; a partition left without chunks drops its entry."""
    cs = t.chunks.get(index, pmap())
    cs = cs.discard(start) if chunk is None else cs.set(chunk.start_offset, chunk)
    chunks = t.chunks.set(index, cs) if cs else t.chunks.discard(index)
    return evolve(img, topics=img.topics.set(t.topic_id, replace(t, chunks=chunks)))


def _chunk_change(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ChunkChangeRecord (modelled on ``PartitionRegistration.merge``): an empty Replicas / Isr
    and a null Directories leave the field unchanged (when Replicas changes without
    Directories, a kept replica keeps its directory, a new one gets the zero id);
    RemovingReplicas / AddingReplicas are the reassignment's current lists, empty when none.
    Epoch must be the chunk's epoch + 1. When no replica is left outside RemovingReplicas the
    chunk is removed from the image (KIP-1114: "the controller should detect that all of
    replicas in a given chunk was removed and then remove the chunk"). An unknown topic,
    partition or chunk, or a wrong epoch, is a ReplayError."""
    t = _topic_of(img, r, "change a chunk of")
    c = t.chunks.get(r.partition_id, pmap()).get(r.start_offset)
    if c is None:
        raise ReplayError(
            f"Unable to replay {r}: no chunk starting at {r.start_offset} in {t.name}-"
            f"{r.partition_id}"
        )
    if r.epoch != c.epoch + 1:
        raise ReplayError(f"Unable to replay {r}: chunk epoch {c.epoch}, record epoch {r.epoch}")
    replicas = tuple(r.replicas) or c.replicas
    removing = tuple(r.removing_replicas)
    if not [b for b in replicas if b not in removing]:
        return _with_chunk(img, t, r.partition_id, None, r.start_offset)
    if r.directories is not None:
        directories = tuple(r.directories)
    elif r.replicas and c.directories:
        old = dict(zip(c.replicas, c.directories, strict=False))
        directories = tuple(old.get(b, UUID(int=0)) for b in replicas)
    else:
        directories = c.directories
    new = replace(
        c,
        replicas=replicas,
        isr=tuple(r.isr) or c.isr,
        directories=directories,
        removing_replicas=removing,
        adding_replicas=tuple(r.adding_replicas),
        epoch=r.epoch,
    )
    return _with_chunk(img, t, r.partition_id, new)


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
        configs=img.configs.discard((RESOURCE_TOPIC, t.name)),
    )


# ------------------------------------------------------------------------- configs, features, pids
def _config(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ConfigurationControlManager.replay(ConfigRecord): set the key, or remove it for a null
    Value; a resource left with no keys disappears."""
    key = (r.resource_type, r.resource_name)
    cur = img.configs.get(key, pmap())
    cur = cur.discard(r.name) if r.value is None else cur.set(r.name, r.value)
    return evolve(img, configs=img.configs.set(key, cur) if cur else img.configs.discard(key))


def _feature_level(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """FeatureControlManager.replay(FeatureLevelRecord): level 0 removes the feature."""
    if r.feature_level == 0:
        return evolve(img, features=img.features.discard(r.name))
    return evolve(img, features=img.features.set(r.name, r.feature_level))


def _producer_ids(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ProducerIdControlManager.replay(ProducerIdsRecord): ids only go up. Once a block was
    handed out, a NextProducerId <= the current one is a ReplayError; gaps are fine."""
    cur = img.producer_ids
    if cur.next_producer_id >= 0 and r.next_producer_id <= cur.next_producer_id:
        raise ReplayError(
            f"Next Producer ID from replayed record ({r.next_producer_id}) is not greater "
            f"than current next Producer ID in block ({cur.next_producer_id})"
        )
    return evolve(
        img, producer_ids=ProducerIdsImage(r.broker_id, r.broker_epoch, r.next_producer_id)
    )


def _noop(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """NoOpRecord: only moves the image's offset."""
    return img


_HANDLERS = {
    "RegisterBrokerRecord": _register_broker,
    "UnregisterBrokerRecord": _unregister_broker,
    "FenceBrokerRecord": _fence_broker,
    "UnfenceBrokerRecord": _unfence_broker,
    "BrokerRegistrationChangeRecord": _broker_registration_change,
    "TopicRecord": _topic,
    "PartitionRecord": _partition,
    "PartitionChangeRecord": _partition_change,
    "ChunkRecord": _chunk,
    "ChunkChangeRecord": _chunk_change,
    "RemoveTopicRecord": _remove_topic,
    "ConfigRecord": _config,
    "FeatureLevelRecord": _feature_level,
    "ProducerIdsRecord": _producer_ids,
    "NoOpRecord": _noop,
    # ACLs (issue 15): kafka_rpc.security.acls, AclControlManager.replay
    "AccessControlEntryRecord": _acls.replay_access_control_entry,
    "RemoveAccessControlEntryRecord": _acls.replay_remove_access_control_entry,
    "UserScramCredentialRecord": _sasl.replay_user_scram_credential,
    # KIP-1164 (issue 14): kafka_rpc.controller.coordinator_mapping
    "TopicPartitionToBatchCoordinatorMapping": _mapping.replay_mapping,
}
