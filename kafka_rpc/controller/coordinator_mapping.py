"""Which Batch Coordinator owns a diskless partition (KIP-1164 "Scaling the number of Batch
Coordinators"), and the ``__diskless-metadata`` topic the coordinators live
on: the controller side. Our own control manager (Kafka has no counterpart); the topic is
created as ``ReplicationControlManager`` creates topics (:mod:`kafka_rpc.controller.placement`,
:func:`kafka_rpc.controller.replication.new_topic_id`).

* **The mapping.** ``TopicPartitionToBatchCoordinatorMapping`` (metadata record 10029) says that
  partition ``PartitionIndex`` of topic ``TopicId`` belongs to the Batch Coordinator of
  ``__diskless-metadata`` partition ``BatchCoordinatorPartitionIndex``. Every node replays it into
  its image (:func:`replay_mapping`: ``TopicImage.batch_coordinators``, partition -> coordinator
  partition); a later record for the same partition replaces the earlier one, and the mapping
  goes with its topic (RemoveTopicRecord drops the TopicImage). A partition with no record
  belongs to coordinator partition 0 (:func:`coordinator_partition`). Snapshots carry one record
  per mapped partition (:func:`mapping_records`), after every manager's part.
* **AssignPartitionToBatchCoordinator (10099)** on the active controller
  (:func:`assign_partition_to_batch_coordinator`): per entry, validated against the image as left
  by the earlier entries; every accepted entry gives one mapping record, all of them one atomic
  batch, answered once committed.
* **``__diskless-metadata``** (:func:`create_diskless_metadata_topic`): the active controller
  creates it from its periodic tick, ``diskless.metadata.topic.num.partitions`` partitions with
  exactly ``diskless.metadata.topic.replication.factor`` replicas, once that many unfenced
  brokers run our Batch Coordinator, whatever their roles (:func:`metadata_topic_due`;
  :mod:`kafka_rpc.controller.placement`: never a Kafka broker). Kafka's rule for
  ``__consumer_offsets`` (``offsets.topic.replication.factor``): never with fewer replicas, no
  timer; until then it does not exist (FindCoordinator answers COORDINATOR_NOT_AVAILABLE) and
  the active controller says how many brokers are missing (:func:`metadata_topic_shortfall`). It
  is created once: a controller that finds it in its image (committed or its own uncommitted
  write, across failovers) writes nothing; a deleted one is created again with a new id. More
  coordinators come from CreatePartitions on it (:func:`kafka_rpc.controller.replication.
  create_partitions`), as the KIP says. It is an internal topic (:data:`INTERNAL_TOPICS`, as
  Kafka's ``Topic.isInternal`` names ``__consumer_offsets`` and ``__transaction_state``), not a
  diskless one.
* **The feature gate.** The mapping record is ours, so it is written only while our feature
  ``kafka_rpc.diskless.version`` >= 1 (:mod:`kafka_rpc.controller.features`): at 0 (a cluster
  formatted Kafka-compatible) AssignPartitionToBatchCoordinator answers UNSUPPORTED_VERSION on
  every entry and snapshots carry no mapping record. ``__diskless-metadata`` itself is a topic
  of Kafka's record types and is not gated.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any
from uuid import UUID

from kafka_rpc.controller.base import ControllerResult, ReplayError
from kafka_rpc.controller.features import DISKLESS_VERSION, level
from kafka_rpc.controller.image import MetadataImage, TopicImage, evolve
from kafka_rpc.controller.placement import (
    DISKLESS_METADATA_TOPIC,
    coordinator_hosts,
    place_replicas,
)
from kafka_rpc.controller.replication import new_topic_id
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "DEFAULT_COORDINATOR_PARTITION",
    "DISKLESS_METADATA_TOPIC",
    "INTERNAL_TOPICS",
    "REPLAY",
    "SNAPSHOT",
    "assign_error_response",
    "assign_partition_to_batch_coordinator",
    "coordinator_partition",
    "coordinator_partition_count",
    "create_diskless_metadata_topic",
    "mapping_records",
    "metadata_topic_due",
    "metadata_topic_shortfall",
    "replay_mapping",
]

log = logging.getLogger("kafka_rpc.controller.coordinator_mapping")

DEFAULT_COORDINATOR_PARTITION = 0
"""The coordinator partition of a partition no mapping record names."""
INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", DISKLESS_METADATA_TOPIC}
)
"""Topic names Metadata reports with ``IsInternal`` true (Kafka's ``Topic.isInternal`` set, plus
``__diskless-metadata``)."""

_R = codec.message_class
_Resp = codec.module("AssignPartitionToBatchCoordinatorResponse")


# ============================================================================ queries
def coordinator_partition(image: Any, topic_id: UUID, partition: int) -> int:
    """The ``__diskless-metadata`` partition whose Batch Coordinator owns ``topic_id``'s
    ``partition`` in ``image``: the last mapping record's, else
    :data:`DEFAULT_COORDINATOR_PARTITION` (also for a topic the image does not have)."""
    t = image.topics.get(topic_id)
    if t is None:
        return DEFAULT_COORDINATOR_PARTITION
    return t.batch_coordinators.get(partition, DEFAULT_COORDINATOR_PARTITION)


def coordinator_partition_count(image: Any) -> int:
    """How many Batch Coordinators there are: ``__diskless-metadata``'s partition count, or 1
    while that topic does not exist yet (coordinator partition 0, the owner of every unmapped
    partition, always exists: before the topic is created it is the node's local coordinator)."""
    t = image.topic_by_name(DISKLESS_METADATA_TOPIC)
    return 1 if t is None or not t.partitions else len(t.partitions)


# ============================================================================ replay, snapshot
def replay_mapping(img: Any, r: Any, offset: int) -> Any:
    """Replay of TopicPartitionToBatchCoordinatorMapping: ``batch_coordinators[partition] =
    coordinator partition`` in the topic's image, replacing an earlier mapping. An unknown topic
    or partition, or a negative coordinator partition, is a ReplayError (the controller never
    writes one: :func:`assign_partition_to_batch_coordinator` checks them)."""
    t: TopicImage | None = img.topics.get(r.topic_id)
    if t is None or r.partition_index not in t.partitions:
        raise ReplayError(f"Unable to replay {r}: no partition {r.topic_id}:{r.partition_index}")
    if r.batch_coordinator_partition_index < 0:
        raise ReplayError(f"Unable to replay {r}: negative coordinator partition")
    new = replace(
        t,
        batch_coordinators=t.batch_coordinators.set(
            r.partition_index, r.batch_coordinator_partition_index
        ),
    )
    return evolve(img, topics=img.topics.set(t.topic_id, new))


REPLAY = {"TopicPartitionToBatchCoordinatorMapping": replay_mapping}


def mapping_records(image: MetadataImage) -> list:
    """The mapping records that rebuild every topic's ``batch_coordinators`` (topics by name,
    partitions ascending); they follow the topics' own records in a snapshot. None while
    ``kafka_rpc.diskless.version`` is 0."""
    out: list = []
    if level(image, DISKLESS_VERSION) < 1:
        return out
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        for i in sorted(t.batch_coordinators):
            out.append(
                _R("TopicPartitionToBatchCoordinatorMapping")(
                    partition_index=i,
                    topic_id=t.topic_id,
                    batch_coordinator_partition_index=t.batch_coordinators[i],
                )
            )
    return out


SNAPSHOT = (mapping_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""


# ============================================================================ the command
def assign_partition_to_batch_coordinator(image: MetadataImage, request: Any, ctx: Any) -> Any:
    """AssignPartitionToBatchCoordinator (key 10099, KIP-1164) on the active controller:
    ``(image, request, ctx) -> ControllerResult(records, response)``.

    Per entry, in request order: the zero topic id, a topic id the image does not have, or a
    partition index the topic does not have -> UNKNOWN_TOPIC_OR_PARTITION (3);
    BatchCoordinatorPartitionIndex outside ``[0, coordinator_partition_count(image))`` ->
    INVALID_PARTITIONS (37). Every other entry is accepted and gives one
    TopicPartitionToBatchCoordinatorMapping record (also when it maps the partition where it
    already is, and for a partition named twice: the later entry wins, as on replay). All
    records form one atomic batch; the response (same topics and partitions, in request order)
    is sent once they are committed. The response has no message field: each rejection is
    logged with Kafka's message for it. While ``kafka_rpc.diskless.version`` is 0 every entry
    answers UNSUPPORTED_VERSION and nothing is written."""
    if level(image, DISKLESS_VERSION) < 1:
        log.info("AssignPartitionToBatchCoordinator refused: it needs the feature %s >= 1, but "
                 "its finalized level is 0 (the cluster was formatted Kafka-compatible)",
                 DISKLESS_VERSION)  # fmt: skip
        return ControllerResult(
            [], assign_error_response(request, 0, ErrorCode.UNSUPPORTED_VERSION)
        )
    count = coordinator_partition_count(image)
    records = []
    topics = []
    for t in request.topics:
        timg = image.topics.get(t.topic_id) if t.topic_id != UUID(int=0) else None
        parts = []
        for p in t.partitions:
            code = ErrorCode.NONE
            if timg is None or p.partition_index not in timg.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                log.info(
                    "AssignPartitionToBatchCoordinator: %s:%d: This server does not host this "
                    "topic-partition.", t.topic_id, p.partition_index,
                )  # fmt: skip
            elif not 0 <= p.batch_coordinator_partition_index < count:
                code = ErrorCode.INVALID_PARTITIONS
                log.info(
                    "AssignPartitionToBatchCoordinator: %s:%d: coordinator partition %d is not "
                    "a partition of %s (%d partitions).", t.topic_id, p.partition_index,
                    p.batch_coordinator_partition_index, DISKLESS_METADATA_TOPIC, count,
                )  # fmt: skip
            else:
                records.append(
                    _R("TopicPartitionToBatchCoordinatorMapping")(
                        partition_index=p.partition_index,
                        topic_id=t.topic_id,
                        batch_coordinator_partition_index=p.batch_coordinator_partition_index,
                    )
                )
            parts.append(
                _Resp.AssignTopicPartitionToBatchCoordinatorResult(
                    partition_index=p.partition_index, error_code=code
                )
            )
        topics.append(
            _Resp.AssignTopicToBatchCoordinatorResult(topic_id=t.topic_id, partitions=tuple(parts))
        )
    return ControllerResult(
        records, _Resp.AssignPartitionToBatchCoordinatorResponse(responses=tuple(topics))
    )


def assign_error_response(request: Any, version: int = 0, code: int = 0) -> Any:
    """Every entry of an AssignPartitionToBatchCoordinator request answered with ``code``
    (NOT_CONTROLLER, REQUEST_TIMED_OUT ...)."""
    return _Resp.AssignPartitionToBatchCoordinatorResponse(
        responses=tuple(
            _Resp.AssignTopicToBatchCoordinatorResult(
                topic_id=t.topic_id,
                partitions=tuple(
                    _Resp.AssignTopicPartitionToBatchCoordinatorResult(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ),
            )
            for t in request.topics
        )
    )


# ============================================================================ __diskless-metadata
def metadata_topic_shortfall(image: Any, replication_factor: int) -> int:
    """How many more brokers that may hold a ``__diskless-metadata`` replica
    (:func:`~kafka_rpc.controller.placement.coordinator_hosts`: unfenced, not in controlled
    shutdown, running our Batch Coordinator, whatever their roles) must be registered and
    unfenced before the topic can be created with ``replication_factor`` replicas; 0 once it
    exists (or when enough are)."""
    if DISKLESS_METADATA_TOPIC in image.topics_by_name:
        return 0
    return max(0, replication_factor - len(coordinator_hosts(image)))


def metadata_topic_due(image: Any, replication_factor: int) -> bool:
    """Whether the active controller should create ``__diskless-metadata`` now: it does not
    exist and ``replication_factor`` brokers that may hold a replica are unfenced
    (:func:`metadata_topic_shortfall` is 0). Kafka's rule for its internal topics
    (``offsets.topic.replication.factor``): never created with fewer replicas, however long it
    waits."""
    return (
        DISKLESS_METADATA_TOPIC not in image.topics_by_name
        and metadata_topic_shortfall(image, replication_factor) == 0
    )


def create_diskless_metadata_topic(
    image: MetadataImage, ctx: Any, num_partitions: int, replication_factor: int
) -> Any:
    """The records creating ``__diskless-metadata``, as CreateTopics would
    with ``num_partitions`` partitions (at least 1) and exactly ``replication_factor`` replicas
    placed as ``create_topics`` places them, on the unfenced brokers that run our Batch
    Coordinator, whatever their roles (:func:`~kafka_rpc.controller.placement.coordinator_hosts`;
    never on a Kafka broker): a TopicRecord and one PartitionRecord per partition, no
    ConfigRecord (the topic is internal, not diskless). Returns ``ControllerResult(records,
    topic id)``, or ``ControllerResult([], None)`` when the topic exists already or fewer such
    brokers than ``replication_factor`` (or none) are unfenced: it is never created with fewer
    replicas (:func:`metadata_topic_due`)."""
    if DISKLESS_METADATA_TOPIC in image.topics_by_name:
        return ControllerResult([], None)
    usable = coordinator_hosts(image)
    rf = max(1, replication_factor)
    if len(usable) < rf:
        return ControllerResult([], None)
    assignment = place_replicas(image, max(1, num_partitions), rf, ctx.rng, usable)
    tid = new_topic_id(image, ctx.rng)
    records: list = [_R("TopicRecord")(name=DISKLESS_METADATA_TOPIC, topic_id=tid)]
    for i, replicas in enumerate(assignment):
        records.append(
            _R("PartitionRecord")(
                partition_id=i,
                topic_id=tid,
                replicas=replicas,
                isr=replicas,
                leader=replicas[0],
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return ControllerResult(records, tid)
