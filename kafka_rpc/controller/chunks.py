"""Chunks of a partition (KIP-1114): our own control manager, modelled on
``ReplicationControlManager``'s reassignment code.

* Commands: :func:`create_chunks` (CreateChunks: close the active chunk, start a new one) and
  :func:`alter_chunk_assignments` (AlterChunkAssignments: move or drop an inactive chunk's
  replicas); their all-entries error answers :func:`create_chunks_error_response` and
  :func:`alter_chunk_assignments_error_response` (NOT_CONTROLLER, REQUEST_TIMED_OUT, ...).
* Replay: ChunkRecord, ChunkChangeRecord (:data:`REPLAY`); a partition's active chunk is its
  PartitionRecord / PartitionChangeRecord state (:mod:`kafka_rpc.controller.replication`).
* Snapshot part: :func:`chunk_records` (one ChunkRecord per inactive chunk holding its current
  state and epoch).
* Every record here (ChunkRecord, ChunkChangeRecord, PartitionChangeRecord v3) needs our feature
  ``kafka_rpc.chunks.version`` >= 1 (:mod:`kafka_rpc.controller.features`): at 0 (a cluster
  formatted Kafka-compatible) both commands answer UNSUPPORTED_VERSION on every entry, naming
  the feature, and write nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from uuid import UUID

from pyrsistent import pmap

from kafka_rpc.controller import replication
from kafka_rpc.controller.base import (
    NO_LEADER_CHANGE,
    ApiError,
    Batch,
    ControllerContext,
    ControllerResult,
    ReplayError,
)
from kafka_rpc.controller.features import CHUNKS_VERSION, level
from kafka_rpc.controller.image import ChunkRegistration, MetadataImage, TopicImage, evolve
from kafka_rpc.controller.partition_change import complete_reassignment, reassignment_replicas
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "REPLAY",
    "SNAPSHOT",
    "alter_chunk_assignments",
    "alter_chunk_assignments_error_response",
    "chunk_records",
    "create_chunks",
    "create_chunks_error_response",
]

_R = codec.message_class


# ============================================================================ commands
def chunks_disabled_message(image: MetadataImage, api: str) -> str | None:
    """Why ``api`` (a chunk command) cannot run on ``image``: our feature
    ``kafka_rpc.chunks.version`` is not finalized (the cluster was formatted Kafka-compatible,
    where a Kafka node could not parse the chunk records); None when it may."""
    if level(image, CHUNKS_VERSION) >= 1:
        return None
    return (
        f"{api} needs the feature {CHUNKS_VERSION} >= 1, but its finalized level is 0 (the "
        "cluster was formatted Kafka-compatible); finalize it with UpdateFeatures "
        f"(kafka-features upgrade --feature {CHUNKS_VERSION}=1) once no Apache Kafka node is "
        "registered."
    )


def _code_message(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def create_chunks_error_response(
    request: Any, version: int, code: int, message: str | None = None
) -> Any:
    """Every entry of a CreateChunks request answered with ``code`` and ``message`` (the
    code's name when None): NOT_CONTROLLER, REQUEST_TIMED_OUT, a malformed request ..."""
    mod = codec.module("CreateChunksResponse")
    msg = message if message is not None else _code_message(code)
    return mod.CreateChunksResponse(
        results=tuple(
            mod.CreateChunksTopicPartitionResult(
                topic_name=e.topic_name, partition_id=e.partition_id, error_code=code,
                error_message=msg,
            )
            for e in request.topic_partitions
        )
    )  # fmt: skip


def alter_chunk_assignments_error_response(
    request: Any, version: int, code: int, message: str | None = None
) -> Any:
    """Every entry of an AlterChunkAssignments request answered with ``code`` and ``message``
    (the code's name when None)."""
    mod = codec.module("AlterChunkAssignmentsResponse")
    msg = message if message is not None else _code_message(code)
    return mod.AlterChunkAssignmentsResponse(
        results=tuple(
            mod.AlterChunkAssignmentResult(
                topic_name=e.topic_name, partition_id=e.partition_id,
                start_offset=e.start_offset, error_code=code, error_message=msg,
            )
            for e in request.chunks
        )
    )  # fmt: skip


def _chunk_partition(image: MetadataImage, topic_name: str, index: int):
    t = image.topic_by_name(topic_name)
    p = None if t is None else t.partitions.get(index)
    if p is None:
        raise ApiError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic_name}:{index}."
        )
    return t, p


def _check_chunk_brokers(image: MetadataImage, brokers) -> None:
    """Kafka's ``validateManualPartitionAssignment`` for a chunk's replica list: every broker
    registered, none twice (INVALID_REPLICA_ASSIGNMENT)."""
    seen: set[int] = set()
    for bid in brokers:
        if bid not in image.brokers:
            raise ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {bid}, but no such broker is "
                "registered.",
            )
        if bid in seen:
            raise ApiError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {bid} more than once.",
            )
        seen.add(bid)


def create_chunks(image: MetadataImage, request: Any, ctx: ControllerContext) -> ControllerResult:
    """CreateChunks (KIP-1114 "Handle ChunkCreateRequest", the controller part).

    Per entry, checked against the image as left by the earlier entries of the request, in
    this order (each error carries a message and writes nothing):

    - unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
    - ``len(BrokerIds)`` != the partition's replica count: INVALID_REPLICATION_FACTOR;
    - a broker not registered or given twice: INVALID_REPLICA_ASSIGNMENT; every one of them
      fenced or in controlled shutdown: INVALID_REPLICA_ASSIGNMENT (the new active chunk needs a
      leader, as CreateTopics' manual assignments);
    - offsets: StartOffset or PrevStopOffset < 0 (-1: not filled in by the partition leader):
      INVALID_REQUEST; StartOffset must be beyond the active chunk's start (``a`` = the
      partition's StartOffset, 0 while it never had a chunk), so the closed chunk holds
      ``[a, StartOffset - 1]``, and ``a - 1 <= PrevStopOffset <= StartOffset - 1``, else
      INVALID_REQUEST (offsets going backwards or overlapping the active chunk).

    A valid entry writes two records (all of a request go in one atomic batch): a ChunkRecord
    for the closed chunk (start ``a``, the partition's StartTimestamp, stop = PrevStopOffset,
    end = StartOffset - 1, the partition's replicas, directories, ISR and reassignment lists,
    epoch 0) and a PartitionChangeRecord v3 for the new active chunk: StartOffset,
    StartTimestamp (-1 when unknown), Replicas = BrokerIds when they differ, ISR = the active
    brokers among them (the new chunk holds no data yet, so they are all in sync), Leader = the
    first of that ISR when it differs from the current leader or an old replica is dropped
    (Kafka's leader-epoch bump on reassignment), reassignment lists cleared. Answers
    ErrorCode 0 with a null message; the response lists the entries in request order.
    """
    disabled = chunks_disabled_message(image, "CreateChunks")
    if disabled:
        return ControllerResult(
            [], create_chunks_error_response(request, 0, ErrorCode.UNSUPPORTED_VERSION, disabled)
        )
    mod = codec.module("CreateChunksResponse")
    Result = mod.CreateChunksTopicPartitionResult
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    results = []
    for e in request.topic_partitions:
        try:
            t, p = _chunk_partition(b.image, e.topic_name, e.partition_id)
            target = tuple(e.broker_ids)
            if len(target) != len(p.replicas):
                raise ApiError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"The new chunk of {e.topic_name}-{e.partition_id} has {len(target)} "
                    f"replica(s), but the partition has {len(p.replicas)}.",
                )
            _check_chunk_brokers(b.image, target)
            isr = tuple(r for r in target if b.image.is_active(r))
            if not isr:
                raise ApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"All brokers specified for the new chunk of {e.topic_name}-{e.partition_id} "
                    "are fenced or in controlled shutdown.",
                )
            if e.start_offset < 0 or e.prev_stop_offset < 0:
                raise ApiError(
                    ErrorCode.INVALID_REQUEST,
                    "StartOffset and PrevStopOffset must be filled in (the partition leader "
                    f"does so); got StartOffset {e.start_offset}, PrevStopOffset "
                    f"{e.prev_stop_offset}.",
                )
            active_start = max(p.start_offset, 0)
            if e.start_offset <= active_start:
                raise ApiError(
                    ErrorCode.INVALID_REQUEST,
                    f"StartOffset {e.start_offset} must be beyond the active chunk's start "
                    f"offset {active_start}.",
                )
            if not active_start - 1 <= e.prev_stop_offset <= e.start_offset - 1:
                raise ApiError(
                    ErrorCode.INVALID_REQUEST,
                    f"PrevStopOffset {e.prev_stop_offset} must lie in [{active_start - 1}, "
                    f"{e.start_offset - 1}] (the closed chunk starts at {active_start} and ends "
                    f"at StartOffset - 1).",
                )
        except ApiError as err:
            results.append(
                Result(
                    topic_name=e.topic_name,
                    partition_id=e.partition_id,
                    error_code=err.code,
                    error_message=err.message,
                )
            )
            continue
        b.add(
            _R("ChunkRecord")(
                partition_id=e.partition_id,
                topic_id=t.topic_id,
                start_offset=active_start,
                start_timestamp=p.start_timestamp,
                stop_offset=e.prev_stop_offset,
                end_offset=e.start_offset - 1,
                chunk_epoch=0,
                replicas=p.replicas,
                directories=p.directories,
                isr=p.isr,
                removing_replicas=p.removing_replicas,
                adding_replicas=p.adding_replicas,
                epoch=0,
            )
        )
        leader = p.leader if p.leader in isr else isr[0]
        bump = leader != p.leader or any(r not in target for r in p.replicas)
        b.add(
            _R("PartitionChangeRecord")(
                partition_id=e.partition_id,
                topic_id=t.topic_id,
                replicas=None if target == p.replicas else target,
                isr=None if isr == p.isr else isr,
                leader=leader if bump else NO_LEADER_CHANGE,
                removing_replicas=() if p.removing_replicas else None,
                adding_replicas=() if p.adding_replicas else None,
                start_offset=e.start_offset,
                start_timestamp=e.start_timestamp,
            )
        )
        results.append(
            Result(
                topic_name=e.topic_name,
                partition_id=e.partition_id,
                error_code=0,
                error_message=None,
            )
        )
    return ControllerResult(b.records, mod.CreateChunksResponse(results=tuple(results)))


def alter_chunk_assignments(
    image: MetadataImage, request: Any, ctx: ControllerContext
) -> ControllerResult:
    """AlterChunkAssignments (KIP-1114; modelled on ``ReplicationControlManager.
    changePartitionReassignment``).

    Per entry, against the image as left by the earlier entries, in this order (each error
    carries a message and writes nothing):

    - unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION;
    - no inactive chunk starting at StartOffset: INVALID_REQUEST;
    - ChunkEpoch not -1 and not the chunk's epoch: INVALID_UPDATE_VERSION;
    - a broker not registered or given twice: INVALID_REPLICA_ASSIGNMENT;
    - replica count: BrokerIds must be empty (remove the chunk), as many as the partition's
      replicas, or a strict subset of the chunk's current replicas (replicas dropping
      themselves, the seed's automatic deletion); anything else INVALID_REPLICA_ASSIGNMENT.

    Then, with Kafka's reassignment arithmetic (:func:`~kafka_rpc.controller.partition_change.
    reassignment_replicas`; an in-progress one is first reverted: current = replicas - adding,
    ISR - adding): ``removing = current - target`` and ``adding = target - current`` (sorted),
    replicas = target ++ removing. The target ISR is the ISR, plus the adding
    replicas when the topic is diskless (its chunk data is in object storage, which every
    broker reads, so an added replica holds the full data at once). As
    ``PartitionChangeBuilder.completeReassignmentIfNeeded`` (:func:`~kafka_rpc.controller.
    partition_change.complete_reassignment`): when ``ISR - removing`` covers the
    target, the reassignment completes in the same record (Replicas = target, Isr = ISR -
    removing in ISR order, no adding / removing); otherwise the record carries the
    union with the adding / removing lists and the ISR unchanged. An empty target writes
    RemovingReplicas = every replica: replay removes the chunk. Every record raises the chunk
    epoch by one; a target equal to the current replicas (same order, nothing in progress)
    writes nothing. Answers ErrorCode 0, null message, in request order.
    """
    disabled = chunks_disabled_message(image, "AlterChunkAssignments")
    if disabled:
        return ControllerResult([], alter_chunk_assignments_error_response(
            request, 0, ErrorCode.UNSUPPORTED_VERSION, disabled))  # fmt: skip
    mod = codec.module("AlterChunkAssignmentsResponse")
    Result = mod.AlterChunkAssignmentResult
    b = Batch(image, ctx.next_offset, _BATCH_RULES)
    results = []
    for e in request.chunks:
        try:
            t, p = _chunk_partition(b.image, e.topic_name, e.partition_id)
            c = t.chunks.get(e.partition_id, {}).get(e.start_offset)
            if c is None:
                raise ApiError(
                    ErrorCode.INVALID_REQUEST,
                    f"Partition {e.topic_name}-{e.partition_id} has no inactive chunk starting "
                    f"at offset {e.start_offset}.",
                )
            if e.chunk_epoch != -1 and e.chunk_epoch != c.epoch:
                raise ApiError(
                    ErrorCode.INVALID_UPDATE_VERSION,
                    f"Chunk epoch {e.chunk_epoch} is stale: the chunk is at epoch {c.epoch}.",
                )
            target = tuple(e.broker_ids)
            _check_chunk_brokers(b.image, target)
            current = tuple(r for r in c.replicas if r not in c.adding_replicas)
            if (
                target
                and len(target) != len(p.replicas)
                and not (len(target) < len(current) and set(target) <= set(current))
            ):
                raise ApiError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The new assignment of chunk {e.topic_name}-{e.partition_id}@"
                    f"{e.start_offset} has {len(target)} replica(s); it must have "
                    f"{len(p.replicas)}, none (remove the chunk), or fewer than now, all of "
                    "them current replicas.",
                )
        except ApiError as err:
            results.append(
                Result(
                    topic_name=e.topic_name,
                    partition_id=e.partition_id,
                    start_offset=e.start_offset,
                    error_code=err.code,
                    error_message=err.message,
                )
            )
            continue
        replicas, removing, adding = reassignment_replicas(current, target)
        rec = None
        CCR = _R("ChunkChangeRecord")
        if not target:
            rec = CCR(
                partition_id=e.partition_id,
                topic_id=t.topic_id,
                start_offset=e.start_offset,
                removing_replicas=c.replicas,
                epoch=c.epoch + 1,
            )
        elif target != c.replicas or c.adding_replicas or c.removing_replicas:
            isr = [r for r in c.isr if r not in c.adding_replicas]
            if b.image.is_diskless(e.topic_name):
                isr += [r for r in adding if r not in isr]
            done = complete_reassignment(replicas, removing, adding, isr)
            if done is None and not removing and not adding:  # a reordering
                done = (target, tuple(isr))
            if done is not None:  # complete at once
                rec = CCR(
                    partition_id=e.partition_id,
                    topic_id=t.topic_id,
                    start_offset=e.start_offset,
                    replicas=done[0],
                    isr=done[1],
                    epoch=c.epoch + 1,
                )
            else:
                rec = CCR(
                    partition_id=e.partition_id,
                    topic_id=t.topic_id,
                    start_offset=e.start_offset,
                    replicas=replicas,
                    isr=tuple(isr) if tuple(isr) != c.isr else (),
                    removing_replicas=removing,
                    adding_replicas=adding,
                    epoch=c.epoch + 1,
                )
        if rec is not None:
            b.add(rec)
        results.append(
            Result(
                topic_name=e.topic_name,
                partition_id=e.partition_id,
                start_offset=e.start_offset,
                error_code=0,
                error_message=None,
            )
        )
    return ControllerResult(b.records, mod.AlterChunkAssignmentsResponse(results=tuple(results)))


# ============================================================================ replay
def _chunk(img: MetadataImage, r: Any, offset: int) -> MetadataImage:
    """ChunkRecord: an inactive chunk, whole (it replaces one with the same start offset, as a
    PartitionRecord replaces a partition). The topic and partition must exist and the offsets
    must satisfy ``start - 1 <= stop <= end`` and ``start >= 0``; otherwise a ReplayError."""
    t = replication.topic_of(img, r, "add a chunk to")
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
    t = replication.topic_of(img, r, "change a chunk of")
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


REPLAY = {"ChunkRecord": _chunk, "ChunkChangeRecord": _chunk_change}

_BATCH_RULES = {**replication.REPLAY, **REPLAY}
"""What the chunk commands write: ChunkRecords, ChunkChangeRecords, PartitionChangeRecords."""


# ============================================================================ snapshot
def chunk_records(image: MetadataImage) -> list:
    """One ChunkRecord per inactive chunk, holding its current state and epoch: topics by name,
    partitions ascending, chunks by start offset; none while ``kafka_rpc.chunks.version`` is 0."""
    out: list = []
    if level(image, CHUNKS_VERSION) < 1:
        return out
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        for i in sorted(t.chunks):
            for c in t.partition_chunks(i):
                out.append(
                    _R("ChunkRecord")(
                        partition_id=i,
                        topic_id=t.topic_id,
                        start_offset=c.start_offset,
                        start_timestamp=c.start_timestamp,
                        stop_offset=c.stop_offset,
                        end_offset=c.end_offset,
                        chunk_epoch=c.epoch,
                        replicas=c.replicas,
                        directories=c.directories,
                        isr=c.isr,
                        removing_replicas=c.removing_replicas,
                        adding_replicas=c.adding_replicas,
                        epoch=c.epoch,
                    )
                )
    return out


SNAPSHOT = (chunk_records,)
"""This manager's part of a snapshot (``kafka_rpc.controller.snapshot``), in order."""
