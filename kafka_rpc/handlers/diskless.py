"""Wire handlers of the KIP-1164 diskless RPCs (keys 10093-10098) and our object-cleanup RPCs
(10102-10103); AssignPartitionToBatchCoordinator (10099) is registered here too (its logic is the
controller's, ``kafka_rpc.controller.coordinator_mapping``).

Each handler is a plain coroutine ``handle_x(coordinator, request, *, broker_id=None)`` that takes
the decoded *full* request object and returns the full response object. There is no socket or
registry code here: the server registers thin wrappers (``@handles("XRequest")``) that call these
with its ``BatchCoordinator``. The handlers only translate between the wire messages and the domain
API (``kafka_rpc.coordinator.api``); validation lives in the coordinator and its error codes are
mapped, not re-derived. ``broker_id`` is the id of the calling broker when the server knows it; it
is used only in log messages (CommitBatches' uploader is the request's own ``BrokerId``).

Conventions shared by every handler (docs/batch-coordinator.md; the owner routing and the
per-entry fan-out are :mod:`kafka_rpc.handlers.diskless_routing`):

* Unknown topic id, unknown partition and the zero topic id answer UNKNOWN_TOPIC_OR_PARTITION (3).
* Response topics mirror the request's topic entries, in request order (CommitBatches: see below);
  every request entry gets its own answer, repeated partitions included.
* A coordinator call that raises fails only the entries of that call: ``TimeoutError`` (a
  replicated coordinator's write not committed within ``write_timeout_ms``) maps to
  REQUEST_TIMED_OUT (7), ``sqlite3.Error`` and any other ``OSError`` to KAFKA_STORAGE_ERROR
  (56), anything else to UNKNOWN_SERVER_ERROR (-1). All are logged (the last with its
  traceback, as a probable bug). ``asyncio.CancelledError`` is never caught.
* Several Batch Coordinators (KIP-1164): an entry of CommitBatches or
  DeleteDisklessRecords (writes) or FindDisklessBatches or ListDisklessOffsets (reads) whose
  partition the node's metadata image maps to a ``__diskless-metadata`` partition this node does
  not serve for that kind of call (``Server.batch_coordinator_partitions``; unmapped partitions
  belong to 0) answers NOT_COORDINATOR (16) with the fields of a rejected entry, and the other
  entries are served (a CommitBatches object's other entries commit). See :func:`owner_check`.
  On a node replicating several coordinator partitions
  (``kafka_rpc.coordinator.assigned.AssignedBatchCoordinator``) the served set is the union of
  its replicas' and the coordinator routes each remaining entry to its own partition (one
  object's entries of two partitions are two commits, each atomic on its own); the object RPCs
  (10102, 10103) follow its shared-object rule: an object is listed / forgotten only when no
  coordinator partition still references it, NOT_COORDINATOR when this node cannot check every
  partition.

InitDisklessTopics (10093)
    API: version 0.
    Behavior: one ``create_topic_and_partitions`` call for all entries; partitions
    ``0 .. NumPartitions - 1`` exist afterwards, existing ones untouched. The wire carries no topic
    name, so the topic id's string form is stored as the name.
    Errors: the coordinator's INVALID_REQUEST is mapped to UNKNOWN_TOPIC_OR_PARTITION for the zero
    topic id and INVALID_PARTITIONS (37) for a negative NumPartitions, as the spec says;
    NOT_COORDINATOR (16) for a topic whose partition 0 belongs to a coordinator this node does
    not lead (a topic-level write goes to the coordinator ``FindCoordinator write:<id>:0``
    names), and nothing is initialized for it.

CommitBatches (10094)
    API: version 0.
    Behavior: entries of all ``Batches`` / ``Topics`` are grouped by ObjectKey, one ``commit_file``
    per object, objects in order of first appearance; the object's size is the largest
    ``ByteOffset + Size`` of its entries; the uploader is the request's BrokerId. The response has
    one topic per distinct TopicId (order of first appearance in the request) and, in it, one
    partition entry per request entry of that topic, in request order. Magic is not on the wire:
    batches are committed as magic 2.
    Errors: per entry, as ``commit_file`` answers (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST for
    bad fields or a bad/known/empty object key, INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER); a failing ``commit_file`` fails that object's entries only.
    A rejected entry answers AssignedBaseOffset, LogAppendTime and LogStartOffset -1, IsDuplicate
    false.

DeleteDisklessTopics (10095)
    API: version 0.
    Behavior: one ``delete_topics`` call (one transaction) with every non-zero id in request
    order; the coordinator reports per id whether it deleted anything.
    Errors: UNKNOWN_TOPIC_OR_PARTITION for an unknown or zero id, and for a repetition of an id
    already deleted by an earlier entry of the same request; NOT_COORDINATOR as for
    InitDisklessTopics; a failing call fails every entry with the mapped code
    (REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, UNKNOWN_SERVER_ERROR).

DeleteDisklessRecords (10096)
    API: version 0.
    Behavior: one ``delete_records`` call; Offset -1 means the high watermark. LowWatermark (tagged)
    is the log start offset afterwards.
    Errors: as the coordinator answers (OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION), with
    LowWatermark -1.
    On the server, inactive chunks (KIP-1114) that end below a new LowWatermark are then removed
    in the background (``kafka_rpc.broker.chunk_deletion``).

FindDisklessBatches (10097)
    API: version 0.
    Behavior: one ``find_batches`` call with the request's MaxBytes and each entry's MaxBytes (the
    coordinator applies Kafka's fetch budget rule). One partition entry per batch found, in offset
    order, carrying the partition's log start offset and high watermark; an entry with no batch
    (caught up, over budget, error) answers one partition entry with its error, log start offset,
    high watermark, ObjectKey "" and every batch field -1. BatchMaxTimestamp is the effective
    timestamp (the commit time for LogAppendTime batches).
    Errors: OFFSET_OUT_OF_RANGE (real LSO / HW), UNKNOWN_TOPIC_OR_PARTITION (-1 / -1).

ListDisklessOffsets (10098)
    API: version 0.
    Behavior: one ``list_offsets`` call; sentinels as the coordinator implements them.
    Errors: UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_SERVER_ERROR for an unsupported negative timestamp;
    Timestamp and Offset -1 on error.

ListDisklessFilesToDelete (10102)
    API: version 0.
    Behavior: ``get_files_to_delete(cutoff, MaxObjects + 1, AfterObjectKey)``; the extra row only
    sets HasMore. MarkedForDeletionBeforeMs -1 means no cutoff. MaxObjects 0 lists nothing (the
    coordinator's limit 0 would mean "all", so it is not called). Each ObjectKeys entry is answered
    by ``is_safe_to_delete_file``, in request order.
    Errors: INVALID_REQUEST for a cutoff below -1 or a negative MaxObjects; on a whole-request
    error Files is empty, HasMore false and every SafeToDelete entry carries the code with
    IsSafeToDelete false. A key whose check fails gets its own mapped code, IsSafeToDelete false.

DeleteDisklessFiles (10103)
    API: version 0.
    Behavior: one ``delete_files`` call (one transaction) with the keys in request order.
    Errors: per key as the coordinator answers: NONE when forgotten, RESOURCE_NOT_FOUND (91) for a
    key it has no record of (and for a repetition of a key forgotten by its earlier occurrence),
    INVALID_REQUEST for an object still referenced by batches (a repetition answers the same). If
    the call raises, the top-level ErrorCode and every result carry the mapped code.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from kafka_rpc._frozen import frozen_constructor
from kafka_rpc.coordinator.api import (
    ZERO_UUID,
    BatchCoordinator,
    BatchInfo,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    TopicIdPartition,
    new_commit_batch_request,
    new_topic_id_partition,
)
from kafka_rpc.coordinator.ownership import Owns
from kafka_rpc.handlers.diskless_routing import (
    checked,
    failure_code,
    owned_only,
    owner_check,
    per_entry,
    refusal,
    topic_owned,
)
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode

__all__ = [
    "handle_commit_batches",
    "handle_delete_diskless_files",
    "handle_delete_diskless_records",
    "handle_delete_diskless_topics",
    "handle_find_diskless_batches",
    "handle_init_diskless_topics",
    "handle_list_diskless_files_to_delete",
    "handle_list_diskless_offsets",
]

_NONE = int(ErrorCode.NONE)
_UNKNOWN_TP = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
_INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
_NOT_COORDINATOR = int(ErrorCode.NOT_COORDINATOR)
_LOAD_IN_PROGRESS = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

# Wire modules (generated); nested classes are module attributes.
_init_resp = codec.module("InitDisklessTopicsResponse")
_commit_resp = codec.module("CommitBatchesResponse")
_del_topics_resp = codec.module("DeleteDisklessTopicsResponse")
_del_records_resp = codec.module("DeleteDisklessRecordsResponse")
_find_resp = codec.module("FindDisklessBatchesResponse")
_list_offsets_resp = codec.module("ListDisklessOffsetsResponse")
_files_resp = codec.module("ListDisklessFilesToDeleteResponse")
_del_files_resp = codec.module("DeleteDisklessFilesResponse")


# -- InitDisklessTopics (10093) --------------------------------------------------------------------


async def handle_init_diskless_topics(
    coordinator: BatchCoordinator,
    request: Any,
    *,
    broker_id: int | None = None,
    owns: Owns | None = None,
) -> Any:
    """InitDisklessTopicsRequest -> InitDisklessTopicsResponse. A topic whose partition 0 ``owns``
    rejects (this node does not lead its coordinator) answers NOT_COORDINATOR and is not
    initialized, as every write to a read-only coordinator."""
    topics = request.topics
    reqs = [
        CreateTopicAndPartitionsRequest(t.topic_id, str(t.topic_id), t.num_partitions)
        for t in topics
        if topic_owned(owns, t.topic_id)
    ]
    codes: Sequence[int]
    if not reqs:
        codes = []
    else:
        try:
            codes = await coordinator.create_topic_and_partitions(reqs)
        except Exception as exc:  # noqa: BLE001 - mapped and logged by failure_code
            codes = [failure_code(exc, "InitDisklessTopics", broker_id)] * len(reqs)
        codes = checked(codes, len(reqs), "InitDisklessTopics")
    if len(reqs) < len(topics):
        it = iter(codes)
        codes = [next(it) if topic_owned(owns, t.topic_id) else refusal(owns, t.topic_id, 0)
                 for t in topics]  # fmt: skip
    results = []
    for t, code in zip(topics, codes, strict=True):
        code = int(code)
        if code == _INVALID_REQUEST:
            if t.topic_id == ZERO_UUID:
                code = _UNKNOWN_TP
            elif t.num_partitions < 0:
                code = int(ErrorCode.INVALID_PARTITIONS)
        results.append(_init_resp.InitDisklessTopicResult(topic_id=t.topic_id, error_code=code))
    return _init_resp.InitDisklessTopicsResponse(responses=tuple(results))


# -- CommitBatches (10094) -------------------------------------------------------------------------


_new_commit_result = frozen_constructor(_commit_resp.CommitBatchesTopicPartitionResults)


async def handle_commit_batches(
    coordinator: BatchCoordinator,
    request: Any,
    *,
    broker_id: int | None = None,
    owns: Owns | None = None,
) -> Any:
    """CommitBatchesRequest -> CommitBatchesResponse (one ``commit_file`` per object).

    One pass over the entries builds each object's ``CommitBatchRequest`` list, the entry index
    of each and the object's size, with one ``TopicIdPartition`` per distinct partition; the
    domain and wire objects are built with the positional constructors of ``kafka_rpc._frozen``
    (100 of each per typical request: this handler is on the event loop's hot path).

    ``owns(topic id, partition)`` (see :func:`owner_check`) false: the entry answers
    ``owns.refusal`` (NOT_COORDINATOR, 16, or COORDINATOR_LOAD_IN_PROGRESS, 14) and is not
    committed; the object's other entries are (its size still
    counts every entry: it is the size of the whole object)."""
    new_req = new_commit_batch_request
    # topic id -> partition index -> TopicIdPartition (UUID hashing is Python code: once per
    # topic entry, not per batch)
    tps: dict[uuid.UUID, dict[int, TopicIdPartition]] = {}
    # object key -> (requests, entry indexes, [object size])
    objects: dict[str, tuple[list[CommitBatchRequest], list[int], list[int]]] = {}
    topic_runs: list[tuple[uuid.UUID, int]] = []  # (topic id, entries) per topic entry
    partitions: list[int] = []  # per entry
    rejected: list[int] = []  # entries of partitions another coordinator owns
    refused: dict[int, CommitBatchResponse] = {}  # their answers (NOT_COORDINATOR or loading)
    foreign: set[int] = set()  # id() of their TopicIdPartitions (kept alive in tps)
    i = 0
    for group in request.batches:
        for topic in group.topics:
            tid = topic.topic_id
            tp_of = tps.get(tid)
            if tp_of is None:
                tp_of = tps[tid] = {}
            topic_runs.append((tid, len(topic.partitions)))
            for p in topic.partitions:
                index = p.partition_index
                tp = tp_of.get(index)
                if tp is None:
                    tp = tp_of[index] = new_topic_id_partition(tid, index)
                    if owns is not None and not owns(tid, index):
                        foreign.add(id(tp))
                obj = objects.get(p.object_key)
                if obj is None:
                    obj = objects[p.object_key] = ([], [], [0])
                byte_offset, size = p.byte_offset, p.size
                if foreign and id(tp) in foreign:
                    assert owns is not None  # foreign is only filled through owns
                    rejected.append(i)
                    refused[i] = _REFUSED_ANSWERS[owns.refusal(tid, index)]
                else:
                    obj[0].append(
                        new_req(tp, byte_offset, size, p.base_offset, p.last_offset,
                                p.batch_max_timestamp, p.message_timestamp_type, p.producer_id,
                                p.producer_epoch, p.base_sequence, p.last_sequence, 2)
                    )  # fmt: skip
                    obj[1].append(i)
                if byte_offset + size > obj[2][0]:
                    obj[2][0] = byte_offset + size
                partitions.append(index)
                i += 1

    answers: Sequence[CommitBatchResponse] = []
    slots: list[CommitBatchResponse] = []  # answers, when filled in here
    if len(objects) > 1 or rejected:
        answers = slots = [_NO_ANSWER] * i
        for j in rejected:
            slots[j] = refused[j]
    for object_key, (reqs, indexes, (file_size,)) in objects.items():
        if not reqs:
            continue  # every entry of this object belongs to another coordinator
        try:
            out: Sequence[CommitBatchResponse] = await coordinator.commit_file(
                object_key, request.broker_id, file_size, reqs
            )
        except Exception as exc:  # noqa: BLE001 - mapped and logged by failure_code
            code = failure_code(exc, f"CommitBatches object {object_key!r}", broker_id)
            out = [CommitBatchResponse.of_error(code)] * len(reqs)
        out = checked(out, len(reqs), "CommitBatches")
        if len(objects) == 1 and not rejected:
            answers = out  # the entries of the only object are all entries, in order
        else:
            for j, answer in zip(indexes, out, strict=True):
                slots[j] = answer

    per_topic: dict[uuid.UUID, list[Any]] = {}
    new_result = _new_commit_result
    pos = 0
    for tid, n in topic_runs:
        parts = per_topic.setdefault(tid, [])
        append = parts.append
        end = pos + n
        for index, a in zip(partitions[pos:end], answers[pos:end], strict=True):
            if a.error == _NONE:
                append(new_result(index, _NONE, a.assigned_base_offset, a.log_append_time,
                                  a.log_start_offset, bool(a.is_duplicate)))  # fmt: skip
            else:
                append(new_result(index, int(a.error), -1, -1, -1, False))
        pos = end
    return _commit_resp.CommitBatchesResponse(
        topics=tuple(
            _commit_resp.CommitBatchesTopicResults(topic_id=tid, partitions=tuple(parts))
            for tid, parts in per_topic.items()
        )
    )


_NO_ANSWER = CommitBatchResponse.of_error(int(ErrorCode.UNKNOWN_SERVER_ERROR))
"""Placeholder of an entry whose object has not been answered yet (never returned: every
object's call answers all its entries or ``checked`` raises)."""
_REFUSED_ANSWERS = {code: CommitBatchResponse.of_error(code)
                    for code in (_NOT_COORDINATOR, _LOAD_IN_PROGRESS)}  # fmt: skip


# -- DeleteDisklessTopics (10095) ------------------------------------------------------------------


async def handle_delete_diskless_topics(
    coordinator: BatchCoordinator,
    request: Any,
    *,
    broker_id: int | None = None,
    owns: Owns | None = None,
) -> Any:
    """DeleteDisklessTopicsRequest -> DeleteDisklessTopicsResponse. A topic whose partition 0
    ``owns`` rejects answers NOT_COORDINATOR and is not deleted (see
    :func:`handle_init_diskless_topics`)."""
    ids = [t.topic_id for t in request.topics]
    valid = [tid for tid in ids if tid != ZERO_UUID and topic_owned(owns, tid)]
    codes: list[int] = []
    if valid:
        try:
            codes = await coordinator.delete_topics(valid)
            checked(codes, len(valid), "DeleteDisklessTopics")
        except Exception as exc:  # noqa: BLE001 - mapped and logged by failure_code
            codes = [failure_code(exc, "DeleteDisklessTopics", broker_id)] * len(valid)
    it = iter(codes)
    results = tuple(
        _del_topics_resp.DeleteDisklessTopicResult(
            topic_id=tid,
            error_code=(
                _UNKNOWN_TP if tid == ZERO_UUID
                else int(next(it)) if topic_owned(owns, tid)
                else refusal(owns, tid, 0)
            ),
        )
        for tid in ids
    )  # fmt: skip
    return _del_topics_resp.DeleteDisklessTopicsResponse(responses=results)


# -- DeleteDisklessRecords (10096) -----------------------------------------------------------------


async def handle_delete_diskless_records(
    coordinator: BatchCoordinator,
    request: Any,
    *,
    broker_id: int | None = None,
    owns: Owns | None = None,
) -> Any:
    """DeleteDisklessRecordsRequest -> DeleteDisklessRecordsResponse (an entry ``owns``
    rejects: NOT_COORDINATOR, LowWatermark -1)."""
    reqs = [
        DeleteRecordsRequest(TopicIdPartition(t.topic_id, p.partition_index), p.offset)
        for t in request.topics
        for p in t.partitions
    ]
    error = lambda code, _r: DeleteRecordsResponse(code, -1)  # noqa: E731
    out = await per_entry("DeleteDisklessRecords", broker_id, reqs,
                           lambda rs: owned_only(rs, owns, coordinator.delete_records, error),
                           error)  # fmt: skip
    it = iter(out)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            r = next(it)
            ok = r.error == _NONE
            parts.append(
                _del_records_resp.DeleteDisklessPartitionRecordsResult(
                    partition_index=p.partition_index,
                    error_code=int(r.error),
                    low_watermark=r.low_watermark if ok else -1,
                )
            )
        topics.append(
            _del_records_resp.DeleteDisklessRecordsResult(
                topic_id=t.topic_id, partitions=tuple(parts)
            )
        )
    return _del_records_resp.DeleteDisklessRecordsResponse(responses=tuple(topics))


# -- FindDisklessBatches (10097) -------------------------------------------------------------------


_new_find_result = frozen_constructor(_find_resp.FindDisklessBatchTopicPartitionResult)


def _batch_entry(partition: int, lso: int, hw: int, b: BatchInfo) -> Any:
    # positional, in the wire struct's field order (see FindDisklessBatchTopicPartitionResult)
    return _new_find_result(partition, _NONE, lso, hw, b.object_key, b.byte_offset, b.byte_size,
                            b.base_offset, b.last_offset, b.timestamp, b.timestamp_type,
                            b.producer_id, b.producer_epoch, b.base_sequence,
                            b.last_sequence)  # fmt: skip


def _no_batch_entry(partition: int, error: int, lso: int, hw: int) -> Any:
    return _find_resp.FindDisklessBatchTopicPartitionResult(
        partition_index=partition,
        error_code=error,
        log_start_offset=lso,
        high_watermark=hw,
        object_key="",
        byte_offset=-1,
        size=-1,
        base_offset=-1,
        last_offset=-1,
        batch_max_timestamp=-1,
        message_timestamp_type=-1,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        last_sequence=-1,
    )


async def handle_find_diskless_batches(
    coordinator: BatchCoordinator,
    request: Any,
    *,
    broker_id: int | None = None,
    owns: Owns | None = None,
) -> Any:
    """FindDisklessBatchesRequest -> FindDisklessBatchesResponse (flat, one entry per batch;
    an entry ``owns`` rejects: one NOT_COORDINATOR entry, offsets -1)."""
    reqs = [
        FindBatchRequest(TopicIdPartition(t.topic_id, p.partition_index), p.offset, p.max_bytes)
        for t in request.topics
        for p in t.partitions
    ]
    error = lambda code, _r: FindBatchResponse(code, (), -1, -1)  # noqa: E731
    out = await per_entry(
        "FindDisklessBatches", broker_id, reqs,
        lambda rs: owned_only(
            rs, owns, lambda mine: coordinator.find_batches(mine, request.max_bytes), error
        ),
        error,
    )  # fmt: skip
    it = iter(out)
    topics = []
    for t in request.topics:
        parts: list[Any] = []
        for p in t.partitions:
            r = next(it)
            lso, hw = r.log_start_offset, r.high_watermark
            if r.error == _NONE and r.batches:
                parts.extend(_batch_entry(p.partition_index, lso, hw, b) for b in r.batches)
            else:
                parts.append(_no_batch_entry(p.partition_index, int(r.error), lso, hw))
        topics.append(
            _find_resp.FindDisklessBatchTopicResult(topic_id=t.topic_id, partitions=tuple(parts))
        )
    return _find_resp.FindDisklessBatchesResponse(responses=tuple(topics))


# -- ListDisklessOffsets (10098) -------------------------------------------------------------------


async def handle_list_diskless_offsets(
    coordinator: BatchCoordinator,
    request: Any,
    *,
    broker_id: int | None = None,
    owns: Owns | None = None,
) -> Any:
    """ListDisklessOffsetsRequest -> ListDisklessOffsetsResponse (an entry ``owns`` rejects:
    NOT_COORDINATOR, Timestamp and Offset -1)."""
    reqs = [
        ListOffsetsRequest(TopicIdPartition(t.topic_id, p.partition_index), p.timestamp)
        for t in request.topics
        for p in t.partitions
    ]
    error = lambda code, r: ListOffsetsResponse(code, r.topic_id_partition, -1, -1)  # noqa: E731
    out = await per_entry(
        "ListDisklessOffsets", broker_id, reqs,
        lambda rs: owned_only(rs, owns, coordinator.list_offsets, error),
        error,
    )  # fmt: skip
    it = iter(out)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            r = next(it)
            ok = r.error == _NONE
            parts.append(
                _list_offsets_resp.ListDisklessOffsetsTopicPartitionResult(
                    partition_index=p.partition_index,
                    error_code=int(r.error),
                    timestamp=r.timestamp if ok else -1,
                    offset=r.offset if ok else -1,
                )
            )
        topics.append(
            _list_offsets_resp.ListDisklessOffsetsTopicResult(
                topic_id=t.topic_id, partitions=tuple(parts)
            )
        )
    return _list_offsets_resp.ListDisklessOffsetsResponse(responses=tuple(topics))


# -- ListDisklessFilesToDelete (10102) -------------------------------------------------------------


async def handle_list_diskless_files_to_delete(
    coordinator: BatchCoordinator, request: Any, *, broker_id: int | None = None
) -> Any:
    """ListDisklessFilesToDeleteRequest -> ListDisklessFilesToDeleteResponse."""
    keys = request.object_keys
    cutoff = request.marked_for_deletion_before_ms
    max_objects = request.max_objects

    def whole_request_error(code: int) -> Any:
        return _files_resp.ListDisklessFilesToDeleteResponse(
            error_code=code,
            files=(),
            has_more=False,
            safe_to_delete=tuple(
                _files_resp.DisklessFileSafetyResult(
                    object_key=k, is_safe_to_delete=False, error_code=code
                )
                for k in keys
            ),
        )

    if cutoff < -1 or max_objects < 0:
        return whole_request_error(_INVALID_REQUEST)

    files: list[Any] = []
    has_more = False
    if max_objects > 0:
        try:
            found = await coordinator.get_files_to_delete(
                marked_before_ms=None if cutoff == -1 else cutoff,
                limit=max_objects + 1,
                after_object_key=request.after_object_key,
            )
        except Exception as exc:  # noqa: BLE001 - mapped and logged by failure_code
            return whole_request_error(failure_code(exc, "ListDisklessFilesToDelete", broker_id))
        has_more = len(found) > max_objects
        files = [
            _files_resp.DisklessFileToDelete(
                object_key=f.object_key,
                marked_for_deletion_at_ms=f.marked_for_deletion_at_ms,
                size_in_bytes=f.size,
            )
            for f in found[:max_objects]
        ]

    safety = []
    for k in keys:
        try:
            safe, code = bool(await coordinator.is_safe_to_delete_file(k)), _NONE
        except Exception as exc:  # noqa: BLE001 - mapped and logged by failure_code
            safe, code = False, failure_code(exc, "ListDisklessFilesToDelete (safety)", broker_id)
        safety.append(
            _files_resp.DisklessFileSafetyResult(
                object_key=k, is_safe_to_delete=safe, error_code=code
            )
        )
    return _files_resp.ListDisklessFilesToDeleteResponse(
        error_code=_NONE, files=tuple(files), has_more=has_more, safe_to_delete=tuple(safety)
    )


# -- DeleteDisklessFiles (10103) -------------------------------------------------------------------


async def handle_delete_diskless_files(
    coordinator: BatchCoordinator, request: Any, *, broker_id: int | None = None
) -> Any:
    """DeleteDisklessFilesRequest -> DeleteDisklessFilesResponse."""
    keys = request.object_keys
    try:
        codes = await coordinator.delete_files(list(keys)) if keys else []
        checked(codes, len(keys), "DeleteDisklessFiles")
    except Exception as exc:  # noqa: BLE001 - mapped and logged by failure_code
        code = failure_code(exc, "DeleteDisklessFiles", broker_id)
        return _del_files_resp.DeleteDisklessFilesResponse(
            error_code=code,
            results=tuple(
                _del_files_resp.DeleteDisklessFileResult(object_key=k, error_code=code)
                for k in keys
            ),
        )

    results = tuple(
        _del_files_resp.DeleteDisklessFileResult(object_key=k, error_code=int(c))
        for k, c in zip(keys, codes, strict=True)
    )
    return _del_files_resp.DeleteDisklessFilesResponse(error_code=_NONE, results=results)


# ---------------------------------------------------------------------------- server registration
#: the RPCs answered per entry by the partition's Batch Coordinator (KIP-1164), and
#: whether they write (the coordinator partition's leader) or read (any of its replicas)
_OWNED = {
    "InitDisklessTopicsRequest": "write",
    "DeleteDisklessTopicsRequest": "write",
    "CommitBatchesRequest": "write",
    "DeleteDisklessRecordsRequest": "write",
    "FindDisklessBatchesRequest": "read",
    "ListDisklessOffsetsRequest": "read",
}


def _register() -> None:
    """Register every diskless RPC with the server's default registry; each handler calls the
    server's Batch Coordinator (``Server.coordinator``), and answers COORDINATOR_NOT_AVAILABLE
    on every ErrorCode field when this node runs none (no broker role)."""
    from kafka_rpc.api.registry import default_registry
    from kafka_rpc.protocol.errors import KafkaError

    table = {
        "InitDisklessTopicsRequest": handle_init_diskless_topics,
        "CommitBatchesRequest": handle_commit_batches,
        "DeleteDisklessTopicsRequest": handle_delete_diskless_topics,
        "DeleteDisklessRecordsRequest": handle_delete_diskless_records,
        "FindDisklessBatchesRequest": handle_find_diskless_batches,
        "ListDisklessOffsetsRequest": handle_list_diskless_offsets,
        "ListDisklessFilesToDeleteRequest": handle_list_diskless_files_to_delete,
        "DeleteDisklessFilesRequest": handle_delete_diskless_files,
    }
    for name, fn in table.items():

        async def handler(ctx: Any, request: Any, _fn=fn, _name=name) -> Any:
            coordinator = ctx.services.coordinator
            if coordinator is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            kind = _OWNED.get(_name)
            if kind is None:
                resp = await _fn(coordinator, request, broker_id=ctx.services.node_id)
            else:
                owns = owner_check(ctx.services, kind == "write")
                resp = await _fn(coordinator, request, broker_id=ctx.services.node_id, owns=owns)
            if _name == "DeleteDisklessRecordsRequest":  # KIP-1114 automatic chunk deletion
                from kafka_rpc.broker.chunk_deletion import schedule_removal

                schedule_removal(
                    ctx.services,
                    (
                        (t.topic_id, p.partition_index, p.low_watermark)
                        for t in resp.responses
                        for p in t.partitions
                    ),
                )
            return resp

        default_registry.register(name, handler)

    async def assign_partition_to_batch_coordinator(ctx: Any, request: Any) -> Any:
        """AssignPartitionToBatchCoordinator (10099), controller listener only (a controller
        API, docs/batch-coordinator.md): the active controller's write event
        (:func:`kafka_rpc.controller.coordinator_mapping.assign_partition_to_batch_coordinator`),
        answered once committed, for the entries the move rule lets through
        (:mod:`kafka_rpc.broker.coordinator_moves`: a partition moves only before its first
        batch, else POLICY_VIOLATION; COORDINATOR_NOT_AVAILABLE when that cannot be checked);
        NOT_CONTROLLER (41) on every entry elsewhere."""
        from kafka_rpc.broker.coordinator_moves import check_moves
        from kafka_rpc.controller.quorum_controller import not_controller_response

        controller = ctx.services.controller
        if controller is None or not controller.is_active:
            return not_controller_response(request)
        refused = await check_moves(ctx.services, request)  # the move rule: before any batch
        if not refused:
            return await controller.assign_partition_to_batch_coordinator(request, ctx.api_version)
        return await _assign_without(controller, request, refused, ctx.api_version)

    from kafka_rpc.controller.coordinator_mapping import assign_error_response

    default_registry.register(
        "AssignPartitionToBatchCoordinatorRequest",
        assign_partition_to_batch_coordinator,
        assign_error_response,
    )


async def _assign_without(
    controller: Any, request: Any, refused: dict[tuple[uuid.UUID, int], int], version: int
) -> Any:
    """AssignPartitionToBatchCoordinator for the entries not in ``refused`` (the controller
    writes those), the refused ones answered with their code; every entry in request order."""
    import dataclasses

    mod = codec.module("AssignPartitionToBatchCoordinatorResponse")
    kept = []
    for t in request.topics:
        parts = tuple(p for p in t.partitions if (t.topic_id, p.partition_index) not in refused)
        if parts:
            kept.append(dataclasses.replace(t, partitions=parts))
    answers: list[int] = []
    if kept:
        resp = await controller.assign_partition_to_batch_coordinator(
            dataclasses.replace(request, topics=tuple(kept)), version)  # fmt: skip
        answers = [p.error_code for t in resp.responses for p in t.partitions]
    it = iter(answers)
    return mod.AssignPartitionToBatchCoordinatorResponse(responses=tuple(
        mod.AssignTopicToBatchCoordinatorResult(topic_id=t.topic_id, partitions=tuple(
            mod.AssignTopicPartitionToBatchCoordinatorResult(
                partition_index=p.partition_index,
                error_code=refused.get((t.topic_id, p.partition_index)) or next(it))
            for p in t.partitions))
        for t in request.topics))  # fmt: skip


_register()
