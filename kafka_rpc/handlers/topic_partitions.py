"""DescribeTopicPartitions (key 75, KIP-966), v0 on the broker listener.

Kafka's ``DescribeTopicPartitionsRequestHandler`` over ``KRaftMetadataCache
.describeTopicResponse``, answered from this node's committed metadata image:

- the topics: every topic of the image for an empty Topics list, else the names given; either
  way only names at or after the Cursor's topic (string order), each once, described in name
  order. A Cursor whose topic is not in a non-empty Topics list, or whose PartitionIndex is
  negative: the request fails (Kafka throws InvalidRequestException) and is answered as Kafka's
  ``getErrorResponse``: every named topic with INVALID_REQUEST and no partitions.
- per topic: TopicId, IsInternal (Kafka's ``Topic.isInternal`` names, plus
  ``__diskless-metadata``), and its partitions from the Cursor's PartitionIndex (the cursor
  topic) or 0, by index, each with LeaderId (-1 when the leader is not an unfenced broker with
  this listener), LeaderEpoch, ReplicaNodes and IsrNodes (unfiltered), EligibleLeaderReplicas
  and LastKnownElr (empty when none), OfflineReplicas (replicas not registered, fenced or
  without the listener). Partitions carry no error, as in Kafka.
- the page: at most ``min(max.request.partition.size.limit = 2000, ResponsePartitionLimit)``
  partitions (at least 1). When a topic does not fit, NextCursor names it and the first
  partition left out; when the limit is reached exactly before a topic, NextCursor names that
  topic at partition 0.
- a named topic the image does not hold: UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION
  for an illegal name (listed only when topics were named).
- TopicAuthorizedOperations: every TOPIC operation (READ, WRITE, CREATE, DESCRIBE, DELETE,
  ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS as bits of their codes) without an authorizer, as
  Kafka; with one, the operations the principal may perform and TOPIC_AUTHORIZATION_FAILED
  for a named topic it may not DESCRIBE (``kafka_rpc.security.authorizer.topic_plan``).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from kafka_rpc.api.registry import handles
from kafka_rpc.controller.coordinator_mapping import INTERNAL_TOPICS
from kafka_rpc.controller.image import EMPTY, NO_LEADER, MetadataImage
from kafka_rpc.controller.replication import validate_topic_name
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "MAX_REQUEST_PARTITION_SIZE_LIMIT",
    "TOPIC_OPERATIONS",
    "describe_topic_partitions",
    "describe_topic_partitions_response",
]

_mod = codec.module("DescribeTopicPartitionsResponse")
_ZERO = UUID(int=0)

#: Kafka's ``max.request.partition.size.limit`` default: the most partitions one answer holds.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
#: ``AclEntry.supportedOperations(TOPIC)``: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7,
#: DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11.
TOPIC_OPERATIONS = (3, 4, 5, 6, 7, 8, 10, 11)
_ALL_TOPIC_OPERATIONS = sum(1 << op for op in TOPIC_OPERATIONS)


def _partition(image: MetadataImage, index: int, p: Any, listener: str) -> Any:
    offline = []
    for r in p.replicas:
        b = image.brokers.get(r)
        if b is None or b.fenced or b.endpoint(listener) is None:
            offline.append(r)
    leader = p.leader
    b = image.brokers.get(leader) if leader != NO_LEADER else None
    if b is None or b.fenced or b.endpoint(listener) is None:
        leader = NO_LEADER
    return _mod.DescribeTopicPartitionsResponsePartition(
        error_code=0,
        partition_index=index,
        leader_id=leader,
        leader_epoch=p.leader_epoch,
        replica_nodes=tuple(p.replicas),
        isr_nodes=tuple(p.isr),
        eligible_leader_replicas=tuple(p.elr or ()),
        last_known_elr=tuple(p.last_known_elr or ()),
        offline_replicas=tuple(offline),
    )


def error_response(request: Any, version: int, code: int) -> Any:
    """Kafka's ``DescribeTopicPartitionsRequest.getErrorResponse``: every named topic (each name
    once) with ``code`` and no partitions."""
    names = dict.fromkeys(t.name for t in request.topics)
    return _mod.DescribeTopicPartitionsResponse(
        topics=tuple(
            _mod.DescribeTopicPartitionsResponseTopic(error_code=code, name=n, is_internal=False)
            for n in names
        )
    )


def describe_topic_partitions_response(image: MetadataImage, request: Any, listener: str) -> Any:
    """The answer to ``request`` from ``image`` as seen on ``listener`` (see the module
    docstring); a bad Cursor gets :func:`error_response` with INVALID_REQUEST."""
    cursor = request.cursor
    start_name = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    if fetch_all:
        names = {n for n in image.topics_by_name if n >= start_name}
    else:
        names = {t.name for t in request.topics if t.name >= start_name}
        if cursor is not None and cursor.topic_name not in names:
            return error_response(request, 0, ErrorCode.INVALID_REQUEST)
    if cursor is not None and cursor.partition_index < 0:
        return error_response(request, 0, ErrorCode.INVALID_REQUEST)
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit), 1)
    topics = []
    next_cursor = None
    for name in sorted(names):
        if remaining == 0:
            next_cursor = _mod.Cursor(topic_name=name, partition_index=0)
            break
        t = image.topic_by_name(name)
        if t is None:
            if not fetch_all:
                code = (
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    if validate_topic_name(name) is None
                    else ErrorCode.INVALID_TOPIC_EXCEPTION
                )
                topics.append(_mod.DescribeTopicPartitionsResponseTopic(
                    error_code=code, name=name, topic_id=_ZERO,
                    is_internal=name in INTERNAL_TOPICS,
                    topic_authorized_operations=_ALL_TOPIC_OPERATIONS,
                ))  # fmt: skip
            continue
        first = cursor.partition_index if cursor is not None and name == start_name else 0
        upper = min(len(t.partitions), first + remaining)
        parts = tuple(
            _partition(image, i, t.partitions[i], listener)
            for i in range(first, upper)
            if i in t.partitions
        )
        topics.append(
            _mod.DescribeTopicPartitionsResponseTopic(
                error_code=0,
                name=name,
                topic_id=t.topic_id,
                is_internal=name in INTERNAL_TOPICS,
                partitions=parts,
                topic_authorized_operations=_ALL_TOPIC_OPERATIONS,
            )
        )
        if upper < len(t.partitions):
            next_cursor = _mod.Cursor(topic_name=name, partition_index=upper)
            break
        remaining -= len(parts)
    return _mod.DescribeTopicPartitionsResponse(topics=tuple(topics), next_cursor=next_cursor)


@handles("DescribeTopicPartitionsRequest", error_response=error_response)
def describe_topic_partitions(ctx: Any, request: Any) -> Any:
    ctl = ctx.services.controller
    image = getattr(ctl, "image", None) or EMPTY
    return describe_topic_partitions_response(image, request, ctx.listener.name)
