"""Metadata (key 3).

API: versions 0-14 on the broker listener.
Behavior: answered from this node's committed metadata image (``ctx.services.controller.image``,
``kafka_rpc.controller.image.MetadataImage``), as Kafka's ``KRaftMetadataCache``:

- Brokers: the registered brokers that are not fenced, at their endpoint for the listener the
  request came in on (a broker without one is left out), by id, with their rack (v1+). While that
  list is empty (no broker registered yet, e.g. at bootstrap) this node is answered alone at its
  advertised endpoint, so a client never sees an empty cluster.
- ClusterId: the persisted cluster id. ControllerId: the active controller (the Raft leader) when
  it is one of the listed brokers; otherwise, as Kafka's KRaft brokers do (clients send admin
  requests to that id over the broker listener, which forwards them), a listed broker: this node
  if listed, else the lowest id; -1 when none.
- Topics: all of them (by name) for a null topic list (an empty one at v0); otherwise each
  requested topic by name, or by id when the name is null (v12+), each once. Per topic: TopicId
  (v10+), IsInternal (true for ``__diskless-metadata`` and Kafka's ``Topic.isInternal``
  names), partitions by index with LeaderId, LeaderEpoch (v7+), ReplicaNodes, IsrNodes and
  OfflineReplicas (v5+: replicas not registered, fenced, or without the listener).
  A leader that is not registered -> LeaderId -1 and LEADER_NOT_AVAILABLE; registered without an
  endpoint for the listener -> LeaderId -1 and LISTENER_NOT_FOUND. At v0 the replica and ISR
  lists keep only brokers that are alive on the listener, and a partition that lost one answers
  REPLICA_NOT_AVAILABLE (Kafka's ``errorUnavailableEndpoints``). v14: StartOffset of the active
  chunk (-1 while the partition never had a chunk, i.e. the active chunk starts at 0) and its
  inactive Chunks, oldest first (start, start timestamp, stop and end offsets, all inclusive,
  replicas and ISR, as the image's ChunkRecords hold them).
- Auto-creation: when ``auto.create.topics.enable`` and the request's AllowAutoTopicCreation
  (always true below v4) hold and the topics are named, each missing legal name is created
  through the active controller (``num.partitions`` / ``default.replication.factor``) in the
  background and answered LEADER_NOT_AVAILABLE now, as Kafka's ``AutoTopicCreationManager``.

Errors, per topic: UNKNOWN_TOPIC_OR_PARTITION (3) for a missing name (without auto-creation),
INVALID_TOPIC_EXCEPTION (17) for an illegal name, LEADER_NOT_AVAILABLE (5) for a name being
auto-created, UNKNOWN_TOPIC_ID (100) for a missing id. Without a metadata image (no controller
object) the cluster has no topics.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any
from uuid import UUID

from kafka_rpc.api.registry import handles
from kafka_rpc.controller.coordinator_mapping import INTERNAL_TOPICS
from kafka_rpc.controller.image import EMPTY, NO_LEADER, MetadataImage
from kafka_rpc.controller.replication import validate_topic_name
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kafka_rpc.api.services import NodeServices

__all__ = ["auto_create", "metadata", "metadata_response"]

log = logging.getLogger("kafka_rpc.handlers.metadata")

_mod = codec.module("MetadataResponse")
MetadataResponse = _mod.MetadataResponse
Broker = _mod.MetadataResponseBroker
Topic = _mod.MetadataResponseTopic
Partition = _mod.MetadataResponsePartition
_ZERO = UUID(int=0)


def _alive_endpoint(image: MetadataImage, broker_id: int, listener: str):
    """The endpoint of an unfenced registered broker for ``listener``, or None."""
    b = image.brokers.get(broker_id)
    if b is None or b.fenced:
        return None
    return b.endpoint(listener)


Chunk = _mod.MetadataResponseChunk


def _chunks(t: Any, index: int, version: int) -> tuple:
    """v14: the partition's inactive chunks, oldest first (KIP-1114 "Chunk Representation in
    Metadata"); none below v14 (the field is ignorable)."""
    if version < 14:
        return ()
    return tuple(
        Chunk(
            start_offset=c.start_offset,
            start_timestamp=c.start_timestamp,
            stop_offset=c.stop_offset,
            end_offset=c.end_offset,
            replica_nodes=c.replicas,
            isr_nodes=c.isr,
        )
        for c in t.partition_chunks(index)
    )


def _partition(
    image: MetadataImage, index: int, p: Any, listener: str, version: int, chunks: tuple = ()
):
    offline = []
    for r in p.replicas:
        b = image.brokers.get(r)
        if b is None or b.fenced or b.endpoint(listener) is None:
            offline.append(r)
    replicas, isr = tuple(p.replicas), tuple(p.isr)
    error = ErrorCode.NONE
    if version == 0:  # errorUnavailableEndpoints
        alive_r = tuple(r for r in replicas if _alive_endpoint(image, r, listener) is not None)
        alive_i = tuple(r for r in isr if _alive_endpoint(image, r, listener) is not None)
        if len(alive_r) < len(replicas) or len(alive_i) < len(isr):
            error = ErrorCode.REPLICA_NOT_AVAILABLE
        replicas, isr = alive_r, alive_i
    leader = p.leader
    leader_reg = image.brokers.get(leader) if leader != NO_LEADER else None
    if leader_reg is None:
        error, leader = ErrorCode.LEADER_NOT_AVAILABLE, NO_LEADER
    elif leader_reg.endpoint(listener) is None:
        error, leader = ErrorCode.LISTENER_NOT_FOUND, NO_LEADER
    return Partition(
        error_code=error,
        partition_index=index,
        leader_id=leader,
        leader_epoch=p.leader_epoch,
        replica_nodes=replicas,
        isr_nodes=isr,
        offline_replicas=tuple(offline),
        start_offset=p.start_offset if version >= 14 else -1,
        chunks=chunks,
    )


def _topic(image: MetadataImage, t: Any, listener: str, version: int):
    return Topic(
        error_code=ErrorCode.NONE,
        name=t.name,
        topic_id=t.topic_id,
        is_internal=t.name in INTERNAL_TOPICS,  # Kafka's Topic.isInternal, plus KIP-1164's
        partitions=tuple(
            _partition(image, i, t.partitions[i], listener, version, _chunks(t, i, version))
            for i in sorted(t.partitions)
        ),
    )


def _missing(code: int, name: str | None, topic_id: UUID, version: int):
    if name is None and version < 12:
        name = ""
    return Topic(error_code=code, name=name, topic_id=topic_id, is_internal=False)


def metadata_response(
    image: MetadataImage,
    request: Any,
    version: int,
    listener: str,
    *,
    cluster_id: str | None,
    node_id: int,
    fallback_endpoint: Any = None,
    active_controller_id: int = -1,
    auto_create_enabled: bool = False,
) -> tuple[Any, list[str]]:
    """``(MetadataResponse, names to auto-create)`` for ``request`` at ``version`` from
    ``image``, as seen on ``listener``. ``fallback_endpoint`` (host, port) answers for this node
    while no broker is listed."""
    brokers = []
    for bid in sorted(image.brokers):
        b = image.brokers[bid]
        ep = None if b.fenced else b.endpoint(listener)
        if ep is not None:
            brokers.append(Broker(node_id=bid, host=ep.host, port=ep.port, rack=b.rack))
    if not brokers and fallback_endpoint is not None:
        host, port = fallback_endpoint
        brokers.append(Broker(node_id=node_id, host=host, port=port))
    listed = [b.node_id for b in brokers]
    if active_controller_id in listed:
        controller_id = active_controller_id
    elif node_id in listed:
        controller_id = node_id
    else:
        controller_id = listed[0] if listed else -1

    to_create: list[str] = []
    all_topics = request.topics is None or (version == 0 and not request.topics)
    if all_topics:
        topics = tuple(
            _topic(image, image.topics[image.topics_by_name[n]], listener, version)
            for n in sorted(image.topics_by_name)
        )
    else:
        allow = auto_create_enabled and (version < 4 or request.allow_auto_topic_creation)
        out = []
        seen_names: set[str] = set()
        seen_ids: set[UUID] = set()
        for req in request.topics:
            name = req.name
            if name is not None:
                if name in seen_names:
                    continue
                seen_names.add(name)
                t = image.topic_by_name(name)
                if t is not None:
                    out.append(_topic(image, t, listener, version))
                elif validate_topic_name(name) is not None:
                    out.append(_missing(ErrorCode.INVALID_TOPIC_EXCEPTION, name, _ZERO, version))
                elif allow:
                    to_create.append(name)
                    out.append(_missing(ErrorCode.LEADER_NOT_AVAILABLE, name, _ZERO, version))
                else:
                    out.append(_missing(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name, _ZERO, version))
            else:
                tid = req.topic_id
                if tid in seen_ids:
                    continue
                seen_ids.add(tid)
                t = image.topics.get(tid)
                if t is not None:
                    out.append(_topic(image, t, listener, version))
                elif tid == _ZERO:
                    out.append(_missing(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None, tid, version))
                else:
                    out.append(_missing(ErrorCode.UNKNOWN_TOPIC_ID, None, tid, version))
        topics = tuple(out)
    resp = MetadataResponse(
        brokers=tuple(brokers),
        cluster_id=cluster_id,
        controller_id=controller_id,
        topics=topics,
    )
    return resp, to_create


# ------------------------------------------------------------------ auto-creation
_inflight: set[str] = set()
_tasks: set[asyncio.Future] = set()


def auto_create(services: NodeServices, names: list[str]) -> None:
    """Create ``names`` through the active controller in the background (each name at most once
    at a time, like Kafka's ``AutoTopicCreationManager.inflightTopics``)."""
    names = [n for n in names if n not in _inflight]
    if not names:
        return
    _inflight.update(names)
    task = asyncio.ensure_future(_create(services, names))
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


async def _create(services: NodeServices, names: list[str]) -> None:
    from kafka_rpc.handlers.topics import route

    cfg = services.config
    mod = codec.module("CreateTopicsRequest")
    request = mod.CreateTopicsRequest(
        topics=tuple(
            mod.CreatableTopic(
                name=n,
                num_partitions=cfg.num_partitions,
                replication_factor=cfg.default_replication_factor,
            )
            for n in names
        ),
        timeout_ms=max(1000, cfg.quorum_request_timeout_ms),
    )
    try:
        resp = await route(services, "broker", "create", request, 7)
        for t in resp.topics:
            if t.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.info("auto-creating topic %r: error %s %s", t.name, t.error_code,
                         t.error_message)  # fmt: skip
    except Exception:
        log.exception("auto-creating topics %s failed", names)
    finally:
        _inflight.difference_update(names)


# ------------------------------------------------------------------ handler
@handles("MetadataRequest")
def metadata(ctx, request):
    services = ctx.services
    ctl = services.controller
    image = getattr(ctl, "image", None) or EMPTY
    ep = services.advertised(ctx.listener.name)
    resp, to_create = metadata_response(
        image,
        request,
        ctx.api_version,
        ctx.listener.name,
        cluster_id=services.cluster_id,
        node_id=services.node_id,
        fallback_endpoint=(ep.host, ep.port),
        active_controller_id=getattr(ctl, "active_controller_id", -1) if ctl else -1,
        auto_create_enabled=ctl is not None and services.config.auto_create_topics_enable,
    )
    if to_create:
        auto_create(services, to_create)
    return resp
