"""FindCoordinator (key 10).

API: versions 0-7 on the broker listener (v0-3: one key; v4+: a batch of keys).
Behavior: key type 3 (BATCH, v7, KIP-1164) with keys ``read:<topicId>:<partition>`` or
``write:<topicId>:<partition>`` (topicId as Kafka's 22-char URL-safe base64 Uuid text or the
36-char hyphenated form; partition >= 0), docs/batch-coordinator.md: the partition belongs to the
``__diskless-metadata`` partition its TopicPartitionToBatchCoordinatorMapping names in the
committed metadata image (0 when unmapped). When this node serves that coordinator partition
(``services.batch_coordinator_partitions``: for ``write:`` it leads it, for ``read:`` it holds a
replica), the answer is this node at the advertised endpoint of the request's listener; that
is every key on a single node, and on every ``kafka-rpc serve`` process sharing one PostgreSQL
database (``postgresql://``: each is a writable coordinator whose acknowledged commits
all others see at once). A ``write:`` key for a coordinator partition this node holds a replica
of but does not lead (the replicated coordinator, ``diskless.coordinator.url=raft://...``)
names the leader of the partition's own Raft group (``coordinator.leader_of(partition)``) at
that broker's endpoint in the image, or this node if it was just elected (it is writable once
it has applied its epoch's start), and COORDINATOR_NOT_AVAILABLE while its Raft group has no
leader. Otherwise the answer is the partition's leader (``write:``)
or its first live replica, leader first (``read:``), as the image registers them, at the
endpoint of the request's listener name; a client sent to a node that no longer serves it gets
NOT_COORDINATOR from the diskless RPCs and asks again. Results come in request order.
Errors, per key: INVALID_REQUEST (42) for a malformed BATCH key, or key type 3 below v7, or an
unknown key type, with NodeId -1, Host "", Port -1; COORDINATOR_NOT_AVAILABLE (15) for key types
0/1/2 (group, transaction, share): those coordinators do not exist here, and we never name a
wrong node; COORDINATOR_NOT_AVAILABLE too for a BATCH key whose coordinator partition has no
live leader (``write:``) or replica (``read:``) with an endpoint on that listener, which is
every BATCH key of the topic-based coordinator (the default) while ``__diskless-metadata`` does
not exist yet (the active controller creates it only once its replication factor of brokers
running the Batch Coordinator are registered and unfenced:
:func:`kafka_rpc.controller.coordinator_mapping.metadata_topic_due`; no node serves a
coordinator partition until then). Handler failure: every key gets the error code.
"""

from __future__ import annotations

import re
from uuid import UUID

from kafka_rpc.api.registry import handles
from kafka_rpc.controller.coordinator_mapping import (
    DEFAULT_COORDINATOR_PARTITION,
    DISKLESS_METADATA_TOPIC,
    coordinator_partition,
)
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.uuids import parse_uuid_text, uuid_text

_mod = codec.module("FindCoordinatorResponse")
FindCoordinatorResponse = _mod.FindCoordinatorResponse
Coordinator = _mod.Coordinator

BATCH = 3
_KEY_RE = re.compile(r"(read|write):([A-Za-z0-9_\-]{22}|[0-9a-fA-F\-]{36}):(0|[1-9][0-9]{0,9})")


def parse_batch_key(key: str) -> tuple[str, UUID, int] | None:
    """``(mode, topic_id, partition)`` of a BATCH key, or None when it is malformed."""
    m = _KEY_RE.fullmatch(key)
    if m is None:
        return None
    mode, tid, part = m.groups()
    partition = int(part)
    if partition > 0x7FFFFFFF:
        return None
    try:
        if len(tid) == 22:
            topic_id = parse_uuid_text(tid)
            if uuid_text(topic_id) != tid:  # one text per id: no other bits in the last char
                return None
        else:
            topic_id = UUID(tid)
            if str(topic_id) != tid.lower():
                return None
    except ValueError:
        return None
    return mode, topic_id, partition


def _batch_answer(ctx, mode: str, topic_id: UUID, partition: int) -> tuple:
    """The coordinator of one parsed BATCH key (module docstring)."""
    services = ctx.services
    served = getattr(services, "batch_coordinator_partitions", None)
    controller = getattr(services, "controller", None)
    write = mode == "write"
    c = DEFAULT_COORDINATOR_PARTITION
    if served is not None and controller is not None:
        c = coordinator_partition(controller.image, topic_id, partition)
    if served is None or controller is None or c in served(write):
        ep = services.advertised(ctx.listener.name)
        return ErrorCode.NONE, None, services.node_id, ep.host, ep.port
    image = controller.image
    t = image.topic_by_name(DISKLESS_METADATA_TOPIC)
    p = None if t is None else t.partitions.get(c)
    if write and c in served(False):  # a replica here: its Raft group knows the leader
        leader_of = getattr(services.coordinator, "leader_of", None)
        leader = leader_of(c) if leader_of is not None else -1
        if leader == services.node_id:  # elected, not yet writable: it will be in a moment
            ep = services.advertised(ctx.listener.name)
            return ErrorCode.NONE, None, services.node_id, ep.host, ep.port
        p = None
        if leader >= 0:
            reg = image.brokers.get(leader)
            ep = None if reg is None else reg.endpoint(ctx.listener.name)
            if ep is not None:
                return ErrorCode.NONE, None, leader, ep.host, ep.port
    if p is not None:
        candidates = [p.leader] if write else [p.leader, *(r for r in p.replicas if r != p.leader)]
        for broker_id in candidates:
            reg = image.brokers.get(broker_id)
            if reg is None or reg.fenced or reg.in_controlled_shutdown:
                continue
            ep = reg.endpoint(ctx.listener.name)
            if ep is not None:
                return ErrorCode.NONE, None, broker_id, ep.host, ep.port
    what = "leader" if write else "live replica"
    return (ErrorCode.COORDINATOR_NOT_AVAILABLE,
            f"no {what} of {DISKLESS_METADATA_TOPIC}-{c} on listener {ctx.listener.name}",
            -1, "", -1)  # fmt: skip


def _answer(ctx, key: str, key_type: int) -> tuple[int, str | None, int, str, int]:
    """``(error_code, error_message, node_id, host, port)`` for one key."""
    if key_type == BATCH and ctx.api_version >= 7:
        parsed = parse_batch_key(key)
        if parsed is None:
            return ErrorCode.INVALID_REQUEST, f"malformed batch coordinator key {key!r}", -1, "", -1
        return _batch_answer(ctx, *parsed)
    if key_type in (0, 1, 2):
        return (ErrorCode.COORDINATOR_NOT_AVAILABLE, "no coordinator of this type here",
                -1, "", -1)  # fmt: skip
    return ErrorCode.INVALID_REQUEST, f"unsupported key type {key_type}", -1, "", -1


def error_response(request, version: int, code: int):
    if version >= 4:
        return FindCoordinatorResponse(
            coordinators=tuple(
                Coordinator(
                    key=k, node_id=-1, host="", port=-1, error_code=code, error_message=None
                )
                for k in request.coordinator_keys
            )
        )
    return FindCoordinatorResponse(error_code=code, error_message=None, node_id=-1, host="",
                                   port=-1)  # fmt: skip


@handles("FindCoordinatorRequest", error_response=error_response)
def find_coordinator(ctx, request):
    if ctx.api_version >= 4:
        out = []
        for key in request.coordinator_keys:
            code, msg, node, host, port = _answer(ctx, key, request.key_type)
            out.append(Coordinator(key=key, node_id=node, host=host, port=port, error_code=code,
                                   error_message=msg))  # fmt: skip
        return FindCoordinatorResponse(coordinators=tuple(out))
    code, msg, node, host, port = _answer(ctx, request.key, request.key_type)
    return FindCoordinatorResponse(error_code=code, error_message=msg, node_id=node, host=host,
                                   port=port)  # fmt: skip
