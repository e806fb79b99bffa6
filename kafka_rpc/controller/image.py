"""The immutable metadata image: everything the metadata log says, as of one offset.

Kafka keeps this state in the controller's timeline maps (``ClusterControlManager``,
``ReplicationControlManager``, ``ConfigurationControlManager``, ``ProducerIdControlManager``,
``FeatureControlManager``) and publishes it to brokers as ``org.apache.kafka.image.MetadataImage``.
Here one value serves both: a frozen dataclass whose maps are ``pyrsistent`` PMaps, so a new image
shares all unchanged structure with the old one and publishing it to readers is one reference
swap. Equality is structural: two images built from the same records compare equal.

Only :func:`kafka_rpc.controller.replay.replay` builds images (from :data:`EMPTY`); nothing
mutates one. A run of records (a committed batch, a snapshot) is replayed into an
:class:`ImageDraft`, a private mutable copy frozen into one new image at the end.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from uuid import UUID

from pyrsistent import PMap, pmap

__all__ = [
    "DISKLESS_ENABLE_CONFIG",
    "EMPTY",
    "NO_LEADER",
    "RESOURCE_BROKER",
    "RESOURCE_TOPIC",
    "BrokerRegistration",
    "ChunkRegistration",
    "ControllerRegistration",
    "DelegationToken",
    "Endpoint",
    "ImageDraft",
    "MapDraft",
    "MetadataImage",
    "PartitionRegistration",
    "ProducerIdsImage",
    "TopicImage",
    "evolve",
]

NO_LEADER = -1
"""Leader id of a partition without a leader (Kafka's ``LeaderConstants.NO_LEADER``)."""

RESOURCE_TOPIC = 2
"""ConfigRecord ResourceType of a topic (Kafka's ``ConfigResource.Type.TOPIC``)."""
DISKLESS_ENABLE_CONFIG = "diskless.enable"
"""The topic config that makes a topic diskless (KIP-1164; Inkless
``TopicConfig.DISKLESS_ENABLE_CONFIG``)."""
RESOURCE_BROKER = 4
"""ConfigRecord ResourceType of a broker (Kafka's ``ConfigResource.Type.BROKER``)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener of a broker (RegisterBrokerRecord.EndPoints)."""

    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(frozen=True, slots=True)
class ControllerRegistration:
    """A registered controller (Kafka's ``org.apache.kafka.metadata.ControllerRegistration``,
    KIP-919), from its last RegisterControllerRecord: its process run (``incarnation_id``), its
    listeners and its supported feature ranges ``(name, min, max)`` in record order."""

    controller_id: int
    incarnation_id: UUID
    zk_migration_ready: bool = False
    endpoints: tuple[Endpoint, ...] = ()
    features: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class DelegationToken:
    """A delegation token as the image keeps it (Kafka's ``DelegationTokenData``): the fields of
    its last DelegationTokenRecord; times are wall-clock ms."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker (Kafka's ``org.apache.kafka.metadata.BrokerRegistration``).

    ``epoch`` is the broker epoch: the offset where the batch that registered this incarnation
    starts (``QuorumController.registerBroker`` passes ``nextWriteOffset``; an amended
    registration keeps it). ``registration_offset`` is the offset of the RegisterBrokerRecord
    itself (Kafka's ``ClusterControlManager.registerBrokerRecordOffsets``, controller
    bookkeeping, not part of Kafka's image): the broker counts as caught up once its heartbeat's
    ``CurrentMetadataOffset`` reaches it. A snapshot cannot carry it, so a registration loaded
    from a snapshot has the snapshot's last contained offset (Kafka replays snapshot records at
    ``lastContainedLogOffset``); it is left out of equality so an image and its snapshot round
    trip compare equal. ``features`` holds the supported ranges ``(name, min, max)`` in record
    order; ``log_dirs`` the broker's online log directory ids (RegisterBrokerRecord v3 LogDirs,
    replaced by a BrokerRegistrationChangeRecord v2)."""

    broker_id: int
    incarnation_id: UUID
    epoch: int
    endpoints: tuple[Endpoint, ...] = ()
    features: tuple[tuple[str, int, int], ...] = ()
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    is_migrating_zk_broker: bool = False
    log_dirs: tuple[UUID, ...] = ()
    registration_offset: int = field(default=-1, compare=False)

    def endpoint(self, listener: str) -> Endpoint | None:
        """The endpoint for ``listener`` (a listener name), or None."""
        for ep in self.endpoints:
            if ep.name == listener:
                return ep
        return None


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition (Kafka's ``org.apache.kafka.metadata.PartitionRegistration``).

    Replica lists are tuples of broker ids; ``leader`` is -1 when there is none.
    ``partition_epoch`` goes up by one on every PartitionChangeRecord, ``leader_epoch`` only when
    the record sets ``Leader``. ``start_offset`` / ``start_timestamp`` (ms) are KIP-1114's active
    chunk start (PartitionRecord v3 tags 3/4), -1 when the partition has no chunks.
    ``elr`` / ``last_known_elr`` are KIP-966's lists, None when unset."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    directories: tuple[UUID, ...] = ()
    elr: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    start_offset: int = -1
    start_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class ChunkRegistration:
    """An inactive chunk of a partition (KIP-1114 ChunkRecord, changed by ChunkChangeRecords).

    Offsets are inclusive: ``start_offset`` is the chunk's first offset (its key within the
    partition), ``stop_offset`` the last offset consumers may read (the partition's last stable
    offset when the chunk was closed), ``end_offset`` the last offset its replicas hold (the next
    chunk's start - 1; ``start_offset - 1 <= stop_offset <= end_offset``); all three never change.
    ``start_timestamp`` is the timestamp (ms) of the record at ``start_offset``, -1 when unknown.
    ``replicas`` are broker ids in preferred order (during a reassignment: target ++ removing, as
    Kafka's ``PartitionReassignmentReplicas``), ``isr`` the replicas holding the full data,
    ``epoch`` starts at 0 and goes up by one with every ChunkChangeRecord."""

    start_offset: int
    stop_offset: int
    end_offset: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    start_timestamp: int = -1
    directories: tuple[UUID, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic: its name, id, partitions (index -> registration), inactive chunks
    (``chunks``: partition index -> PMap[start offset, ChunkRegistration]; a partition without
    inactive chunks has no entry) and ``batch_coordinators`` (partition index -> the
    ``__diskless-metadata`` partition owning it, from TopicPartitionToBatchCoordinatorMapping
    records, KIP-1164; an unmapped partition belongs to coordinator partition 0, see
    ``kafka_rpc.controller.coordinator_mapping``)."""

    name: str
    topic_id: UUID
    partitions: PMap = field(default_factory=pmap)  # PMap[int, PartitionRegistration]
    chunks: PMap = field(default_factory=pmap)  # PMap[int, PMap[int, ChunkRegistration]]
    batch_coordinators: PMap = field(default_factory=pmap)  # PMap[int, int]

    def partition_chunks(self, index: int) -> list[ChunkRegistration]:
        """The inactive chunks of partition ``index``, by start offset (ascending)."""
        cs = self.chunks.get(index)
        return [] if cs is None else [cs[k] for k in sorted(cs)]


@dataclass(frozen=True, slots=True)
class ProducerIdsImage:
    """The producer-id state (Kafka's ``ProducerIdControlManager``): the last ProducerIdsRecord.

    ``next_producer_id`` is the first id of the next block to hand out; -1 means no block was ever
    handed out (Kafka's ``ProducerIdsBlock.EMPTY``), so the first block starts at 0.
    ``broker_id`` / ``broker_epoch`` are the broker that received the last block."""

    broker_id: int = -1
    broker_epoch: int = -1
    next_producer_id: int = -1


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The whole metadata state as of ``last_offset`` (inclusive) in leader epoch ``last_epoch``
    (both -1 for the empty image).

    - ``features``: PMap[str, int], finalized feature levels (``metadata.version`` ...);
    - ``brokers``: PMap[int, BrokerRegistration];
    - ``topics``: PMap[UUID, TopicImage] and ``topics_by_name``: PMap[str, UUID];
    - ``configs``: PMap[(resource type, resource name), PMap[key, value]]; resource type 2 is a
      topic (name = topic name), 4 a broker (name = id as decimal, "" = cluster default);
    - ``producer_ids``: ProducerIdsImage;
    - ``acls``: PMap[UUID, AclBinding], the ACLs; ``scram``: PMap[(mechanism id, user),
      ScramCredential], the salted SCRAM credentials;
    - ``controllers``: PMap[int, ControllerRegistration], the registered controllers (KIP-919);
    - ``client_quotas``: PMap[entity, PMap[key, float]], an entity being a sorted tuple of
      ``(entity type, name or None)`` (ClientQuotaRecords);
    - ``delegation_tokens``: PMap[token id, DelegationToken].
    """

    features: PMap = field(default_factory=pmap)
    brokers: PMap = field(default_factory=pmap)
    topics: PMap = field(default_factory=pmap)
    topics_by_name: PMap = field(default_factory=pmap)
    configs: PMap = field(default_factory=pmap)
    producer_ids: ProducerIdsImage = field(default_factory=ProducerIdsImage)
    last_offset: int = -1
    last_epoch: int = -1
    #: ACL id (UUID) -> ``kafka_rpc.security.authorizer.AclBinding`` (AccessControlEntryRecords)
    acls: PMap = field(default_factory=pmap)
    #: (mechanism id, user) -> ``kafka_rpc.security.sasl.ScramCredential``
    #: (UserScramCredentialRecords)
    scram: PMap = field(default_factory=pmap)
    #: client quota entity (a sorted tuple of (entity type, entity name or None)) -> PMap[quota
    #: key, float value] (ClientQuotaRecords)
    client_quotas: PMap = field(default_factory=pmap)
    controllers: PMap = field(default_factory=pmap)
    delegation_tokens: PMap = field(default_factory=pmap)

    # ------------------------------------------------------------------ read helpers
    def topic_by_name(self, name: str) -> TopicImage | None:
        tid = self.topics_by_name.get(name)
        return None if tid is None else self.topics[tid]

    def topic_configs(self, name: str) -> PMap:
        """The explicitly set configs of topic ``name`` (key -> value)."""
        return self.configs.get((RESOURCE_TOPIC, name), pmap())

    def is_diskless(self, name: str) -> bool:
        """Whether topic ``name`` has ``diskless.enable=true`` among its configs (any case, as
        Kafka parses booleans; KIP-1164)."""
        return self.topic_configs(name).get(DISKLESS_ENABLE_CONFIG, "false").lower() == "true"

    def unfenced_brokers(self) -> list[int]:
        """Ids of registered brokers that are neither fenced nor in controlled shutdown (Kafka's
        ``ClusterControlManager.isActive``), sorted."""
        return sorted(
            b.broker_id
            for b in self.brokers.values()
            if not b.fenced and not b.in_controlled_shutdown
        )

    def is_active(self, broker_id: int) -> bool:
        b = self.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def leaderships(self, broker_id: int) -> list[tuple[UUID, int]]:
        """(topic id, partition) of every partition ``broker_id`` leads."""
        return [
            (t.topic_id, i)
            for t in self.topics.values()
            for i, p in t.partitions.items()
            if p.leader == broker_id
        ]


EMPTY = MetadataImage()
"""The image of an empty log."""


_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MetadataImage))


class MapDraft(Mapping):
    """A top-level PMap of an :class:`ImageDraft`, changed in place: PMap's API (``set``,
    ``remove``, ``discard`` return the map itself; reads as a Mapping) on a ``pyrsistent``
    evolver, which changes a key without building a new PMap each time; :meth:`persistent` is
    the PMap it now describes."""

    __slots__ = ("_ev",)

    def __init__(self, m: PMap) -> None:
        self._ev = m.evolver()

    def __getitem__(self, key: Any) -> Any:
        return self._ev[key]

    def __contains__(self, key: Any) -> bool:
        return key in self._ev  # type: ignore[operator]  # pyrsistent's stub omits the evolver's __contains__

    def __len__(self) -> int:
        return len(self._ev)

    def __iter__(self):
        return iter(self._ev.persistent())

    def get(self, key: Any, default: Any = None) -> Any:
        try:
            return self._ev[key]
        except KeyError:
            return default

    def set(self, key: Any, value: Any) -> MapDraft:
        self._ev.set(key, value)
        return self

    def remove(self, key: Any) -> MapDraft:
        """Raises KeyError for a missing key, as ``PMap.remove``."""
        self._ev.remove(key)
        return self

    def discard(self, key: Any) -> MapDraft:
        if key in self._ev:  # type: ignore[operator]  # pyrsistent's stub omits the evolver's __contains__
            self._ev.remove(key)
        return self

    def persistent(self) -> PMap:
        return self._ev.persistent()


class ImageDraft:
    """A mutable working copy of a MetadataImage for replaying a run of records at once (Kafka's
    ``MetadataDelta``: the loader applies a whole batch to a delta and publishes one image).

    It has the image's fields and read helpers, its top-level maps as :class:`MapDraft`;
    :func:`evolve` on a draft sets the fields in place and returns the same draft, so every
    replay rule works on either (a rule must raise before it changes anything, as they all do:
    a rejected record leaves the draft as it was). :meth:`freeze` is O(fields + changed keys)
    and shares all other structure. A draft is private to the code replaying into it and is
    never published."""

    __slots__ = _FIELDS

    # MetadataImage's fields (the slots above; declared for the type checker only): a top-level
    # map is a MapDraft, or the PMap an evolve() set in its place.
    features: PMap | MapDraft
    brokers: PMap | MapDraft
    topics: PMap | MapDraft
    topics_by_name: PMap | MapDraft
    configs: PMap | MapDraft
    producer_ids: ProducerIdsImage
    last_offset: int
    last_epoch: int
    acls: PMap | MapDraft
    scram: PMap | MapDraft
    client_quotas: PMap | MapDraft
    controllers: PMap | MapDraft
    delegation_tokens: PMap | MapDraft

    def __init__(self, image: MetadataImage):
        for name in _FIELDS:
            v = getattr(image, name)
            setattr(self, name, MapDraft(v) if isinstance(v, PMap) else v)

    def freeze(self) -> MetadataImage:
        """The image this draft now describes."""
        values: list[Any] = [
            v.persistent() if v.__class__ is MapDraft else v
            for v in (getattr(self, name) for name in _FIELDS)
        ]
        return MetadataImage(*values)

    topic_by_name = MetadataImage.topic_by_name
    topic_configs = MetadataImage.topic_configs
    is_diskless = MetadataImage.is_diskless
    unfenced_brokers = MetadataImage.unfenced_brokers
    is_active = MetadataImage.is_active
    leaderships = MetadataImage.leaderships


_KEEP: Any = object()


def evolve(
    img: Any,
    *,
    features: PMap = _KEEP,
    brokers: PMap = _KEEP,
    topics: PMap = _KEEP,
    topics_by_name: PMap = _KEEP,
    configs: PMap = _KEEP,
    producer_ids: ProducerIdsImage = _KEEP,
    last_offset: int = _KEEP,
    last_epoch: int = _KEEP,
    acls: PMap = _KEEP,
    scram: PMap = _KEEP,
    client_quotas: PMap = _KEEP,
    controllers: PMap = _KEEP,
    delegation_tokens: PMap = _KEEP,
) -> Any:
    """``dataclasses.replace(img, ...)`` for a MetadataImage through the positional constructor
    (cheaper than ``replace``'s field walk); on an :class:`ImageDraft`, the fields are set in
    place and the draft itself is returned. An unknown field is a TypeError, as with
    ``replace``. (The keywords are MetadataImage's fields, checked at import.)"""
    k = _KEEP
    if img.__class__ is ImageDraft:
        if features is not k:
            img.features = features
        if brokers is not k:
            img.brokers = brokers
        if topics is not k:
            img.topics = topics
        if topics_by_name is not k:
            img.topics_by_name = topics_by_name
        if configs is not k:
            img.configs = configs
        if producer_ids is not k:
            img.producer_ids = producer_ids
        if last_offset is not k:
            img.last_offset = last_offset
        if last_epoch is not k:
            img.last_epoch = last_epoch
        if acls is not k:
            img.acls = acls
        if scram is not k:
            img.scram = scram
        if client_quotas is not k:
            img.client_quotas = client_quotas
        if controllers is not k:
            img.controllers = controllers
        if delegation_tokens is not k:
            img.delegation_tokens = delegation_tokens
        return img
    return MetadataImage(
        img.features if features is k else features,
        img.brokers if brokers is k else brokers,
        img.topics if topics is k else topics,
        img.topics_by_name if topics_by_name is k else topics_by_name,
        img.configs if configs is k else configs,
        img.producer_ids if producer_ids is k else producer_ids,
        img.last_offset if last_offset is k else last_offset,
        img.last_epoch if last_epoch is k else last_epoch,
        img.acls if acls is k else acls,
        img.scram if scram is k else scram,
        img.client_quotas if client_quotas is k else client_quotas,
        img.controllers if controllers is k else controllers,
        img.delegation_tokens if delegation_tokens is k else delegation_tokens,
    )


# A field added to MetadataImage must be added to evolve (both branches) too.
if tuple(inspect.signature(evolve).parameters)[1:] != _FIELDS:
    raise TypeError("evolve() must take exactly MetadataImage's fields")
