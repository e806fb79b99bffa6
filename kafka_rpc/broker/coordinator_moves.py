"""The rule for moving a topic-partition to another Batch Coordinator
(AssignPartitionToBatchCoordinator, KIP-1164 "Scaling the number of Batch Coordinators"), checked
on the active controller's node before the mapping is written.

The KIP defines no migration of a partition's batches between coordinators, and the
coordinators' logs are separate Raft groups: if a partition that already has batches on
coordinator A were mapped to B, B would assign offsets from 0 again and reads would go to B,
so A's batches would be lost to readers and their offsets given twice. Hence the rule:

    **A topic-partition moves to another coordinator partition only before its first batch.**

An entry whose current owner (:func:`~kafka_rpc.controller.coordinator_mapping.
coordinator_partition`: its mapping, or 0) differs from the requested one is checked against
the owner: its high watermark must be 0 (no batch was ever committed there; deleted batches
count, their offsets were given out). The owner is asked with ListDisklessOffsets (latest),
through this node's own replica when it leads that coordinator partition, else over the wire to
the owner's leader (as this node's replica knows it) or, failing that, to each of its replicas
(the highest answer wins). Outcomes per entry:

* high watermark 0, or the owner does not know the partition (UNKNOWN_TOPIC_OR_PARTITION: it
  never held it) -> passed on to the controller;
* high watermark above 0 -> POLICY_VIOLATION (44), logged with the rule;
* no owner replica answers -> COORDINATOR_NOT_AVAILABLE (15), retriable.

Entries that keep their owner (or name a coordinator partition that does not exist: the
controller answers INVALID_PARTITIONS) are not checked. What this cannot see: a first commit
reaching the old owner after the check and before every node applied the new mapping. Move a
topic's partitions before producing to them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kafka_rpc.controller.coordinator_mapping import (
    DISKLESS_METADATA_TOPIC,
    coordinator_partition,
    coordinator_partition_count,
)
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kafka_rpc.broker.services import BrokerServices

__all__ = ["check_moves"]

log = logging.getLogger("kafka_rpc.broker.coordinator_moves")

_LO = codec.module("ListDisklessOffsetsRequest")
_TIMEOUT_S = 5.0
_RULE = "a topic-partition moves to another Batch Coordinator only before its first batch"


async def check_moves(services: BrokerServices, request: Any) -> dict[tuple[uuid.UUID, int], int]:
    """``(topic id, partition) -> error code`` for the entries of an
    AssignPartitionToBatchCoordinator ``request`` that the move rule (module docstring) refuses
    on ``services`` (the active controller's node); entries not in the dict may be written."""
    controller = services.controller
    assert controller is not None  # check_moves runs on the active controller's node
    image = controller.uncommitted_image
    count = coordinator_partition_count(image)
    by_owner: dict[int, set[tuple[uuid.UUID, int]]] = {}
    for t in request.topics:
        for p in t.partitions:
            target = p.batch_coordinator_partition_index
            if t.topic_id not in image.topics or not 0 <= target < count:
                continue  # the controller answers these
            owner = coordinator_partition(image, t.topic_id, p.partition_index)
            if owner != target:
                by_owner.setdefault(owner, set()).add((t.topic_id, p.partition_index))
    if not by_owner:
        return {}
    results = await asyncio.gather(*(_high_watermarks(services, owner, tps)
                                     for owner, tps in by_owner.items()))  # fmt: skip
    refused: dict[tuple[uuid.UUID, int], int] = {}
    for (owner, tps), hws in zip(by_owner.items(), results, strict=True):
        for tp in sorted(tps):
            hw = hws.get(tp)
            if hw is None:
                refused[tp] = ErrorCode.COORDINATOR_NOT_AVAILABLE
                log.info("AssignPartitionToBatchCoordinator: %s:%d: no replica of %s-%d answered; "
                         "cannot check that it has no batch", tp[0], tp[1],
                         DISKLESS_METADATA_TOPIC, owner)  # fmt: skip
            elif hw > 0:
                refused[tp] = ErrorCode.POLICY_VIOLATION
                log.info("AssignPartitionToBatchCoordinator: %s:%d: refused (%s): %s-%d holds "
                         "its batches up to offset %d", tp[0], tp[1], _RULE,
                         DISKLESS_METADATA_TOPIC, owner, hw)  # fmt: skip
    return refused


async def _high_watermarks(
    services: BrokerServices, owner: int, tps: Iterable[tuple[uuid.UUID, int]]
) -> dict[tuple[uuid.UUID, int], int]:
    """The high watermark of each of ``tps`` on coordinator partition ``owner`` (0 for one it
    does not know); a missing key: no replica answered."""
    tps = sorted(tps)
    coordinator = services.coordinator
    replica = getattr(coordinator, "replica", None)
    inner = replica(owner) if replica is not None else None
    if inner is not None and inner.is_writable:
        from kafka_rpc.coordinator.api import ListOffsetsRequest, TopicIdPartition

        answers = await inner.list_offsets(
            [ListOffsetsRequest(TopicIdPartition(t, p), -1) for t, p in tps]
        )
        return _merge({}, tps, [(a.error, a.offset) for a in answers])
    if inner is None and getattr(coordinator, "served_partitions", None) is None and owner == 0:
        # a standalone coordinator (sqlite://, memory://, postgresql://) is partition 0 here
        from kafka_rpc.coordinator.api import ListOffsetsRequest, TopicIdPartition

        answers = await coordinator.list_offsets(
            [ListOffsetsRequest(TopicIdPartition(t, p), -1) for t, p in tps]
        )
        return _merge({}, tps, [(a.error, a.offset) for a in answers])
    controller = services.controller
    assert controller is not None  # check_moves runs on the active controller's node
    image = controller.uncommitted_image
    meta = image.topic_by_name(DISKLESS_METADATA_TOPIC)
    part = None if meta is None else meta.partitions.get(owner)
    if part is None:
        return {}
    leader = inner.leader_id if inner is not None else -1
    candidates = [leader] if leader >= 0 else list(part.replicas)
    out: dict[tuple[uuid.UUID, int], int] = {}
    for node in candidates:
        answers = await _ask(services, node, tps)
        if answers is not None:
            _merge(out, tps, answers)
    return out


def _merge(out: dict, tps: list, answers: list[tuple[int, int]]) -> dict:
    for tp, (error, offset) in zip(tps, answers, strict=True):
        if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            hw = 0
        elif error != ErrorCode.NONE:
            continue
        else:
            hw = offset
        out[tp] = max(out.get(tp, 0), hw)
    return out


async def _ask(services: BrokerServices, node: int, tps: list) -> list[tuple[int, int]] | None:
    """ListDisklessOffsets (latest) of ``tps`` on broker ``node``'s inter-broker listener, as
    ``(error, offset)`` in order; None when it cannot be reached or answers otherwise."""
    from kafka_rpc.client import KafkaRpcClient

    cfg = services.config
    controller = services.controller
    assert controller is not None  # check_moves runs on the active controller's node
    reg = controller.uncommitted_image.brokers.get(node)
    name = cfg.inter_broker_listener_name
    ep = None if reg is None or name is None else reg.endpoint(name)
    if ep is None:
        return None
    assert name is not None  # ep is None without one
    by_topic: dict[uuid.UUID, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    req = _LO.ListDisklessOffsetsRequest(topics=tuple(
        _LO.ListDisklessOffsetsTopic(topic_id=t, partitions=tuple(
            _LO.ListDisklessOffsetsTopicPartition(partition_index=p, timestamp=-1) for p in ps))
        for t, ps in by_topic.items()))  # fmt: skip
    try:
        async with KafkaRpcClient(f"{ep.host}:{ep.port}", client_id="kafka-rpc-assign",
                                  request_timeout=_TIMEOUT_S, connect_timeout=_TIMEOUT_S,
                                  security=services.client_security(name)) as c:  # fmt: skip
            resp = await c.request(req)
    except (OSError, TimeoutError, ConnectionError) as e:
        log.info("AssignPartitionToBatchCoordinator: broker %d unreachable: %r", node, e)
        return None
    got = {(t.topic_id, p.partition_index): (p.error_code, p.offset)
           for t in resp.responses for p in t.partitions}  # fmt: skip
    if any(tp not in got for tp in tps):
        return None
    return [got[tp] for tp in tps]
