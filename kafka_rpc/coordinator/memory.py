"""In-memory Batch Coordinator: the reference implementation of the contract.

Simple and obviously right rather than fast: plain dicts and lists, every method runs without an
``await`` inside, so each call is atomic on the event loop (the equivalent of one transaction).
Nothing survives ``close()``.
"""

from __future__ import annotations

import bisect
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

from . import _rules
from ._rules import ProducerEntry
from .api import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    ZERO_UUID,
    BatchCoordinator,
    BatchInfo,
    CommitBatchRequest,
    CommitBatchResponse,
    CreateTopicAndPartitionsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EnforceRetentionRequest,
    EnforceRetentionResponse,
    Errors,
    FileToDelete,
    FindBatchRequest,
    FindBatchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    TopicIdPartition,
    effective_timestamp,
)


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


@dataclass(slots=True)
class _File:
    file_id: int
    object_key: str
    uploader_broker_id: int
    committed_at_ms: int
    size: int
    state: str = "uploaded"
    marked_for_deletion_at_ms: int | None = None
    live_batches: int = 0


@dataclass(slots=True)
class _Batch:
    info: BatchInfo
    file: _File

    @property
    def last_offset(self) -> int:
        return self.info.last_offset


@dataclass(slots=True)
class _Log:
    topic_name: str
    log_start_offset: int = 0
    high_watermark: int = 0
    byte_size: int = 0
    batches: list[_Batch] = field(default_factory=list)
    last_offsets: list[int] = field(default_factory=list)  # parallel to batches, for bisect


class InMemoryBatchCoordinator(BatchCoordinator):
    """Reference ``BatchCoordinator`` keeping everything in Python objects.

    ``time_ms``: clock in ms (injected for tests); ``producer_id_expiration_ms``: idle time after
    which a producer's state is forgotten (Kafka ``producer.id.expiration.ms``).
    """

    def __init__(
        self,
        *,
        time_ms: Callable[[], int] = wall_clock_ms,
        producer_id_expiration_ms: int = _rules.DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self._time_ms = time_ms
        self._expiration_ms = producer_id_expiration_ms
        self._logs: dict[TopicIdPartition, _Log] = {}
        self._files: dict[str, _File] = {}
        self._producers: dict[tuple[TopicIdPartition, int], list[ProducerEntry]] = {}
        self._next_file_id = 1
        self._next_batch_id = 1

    # -- topics -------------------------------------------------------------------------------

    async def create_topic_and_partitions(
        self, requests: Sequence[CreateTopicAndPartitionsRequest]
    ) -> list[int]:
        out: list[int] = []
        for r in requests:
            if r.topic_id == ZERO_UUID or r.num_partitions < 0 or not r.topic_name:
                out.append(Errors.INVALID_REQUEST)
                continue
            for p in range(r.num_partitions):
                self._logs.setdefault(TopicIdPartition(r.topic_id, p), _Log(r.topic_name))
            out.append(Errors.NONE)
        return out

    async def list_partitions(self) -> list[TopicIdPartition]:
        return sorted(self._logs, key=lambda tp: (tp.topic_id.bytes, tp.partition))

    async def delete_topics(self, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        ids = set(topic_ids)
        now = self._time_ms()
        touched: set[str] = set()
        deleted: set[uuid.UUID] = set()
        for tp in [tp for tp in self._logs if tp.topic_id in ids]:
            log = self._logs.pop(tp)
            deleted.add(tp.topic_id)
            for b in log.batches:
                b.file.live_batches -= 1
                touched.add(b.file.object_key)
        for key in [k for k in self._producers if k[0].topic_id in ids]:
            del self._producers[key]
        self._mark_unreferenced(touched, now)
        out: list[int] = []
        for tid in topic_ids:
            if tid in deleted:
                deleted.discard(tid)
                out.append(Errors.NONE)
            else:
                out.append(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        return out

    # -- commit -------------------------------------------------------------------------------

    async def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        if not requests:
            return []
        if not _rules.is_valid_object(object_key, file_size) or object_key in self._files:
            return [CommitBatchResponse.invalid_request()] * len(requests)
        now = self._time_ms()
        f = _File(self._next_file_id, object_key, uploader_broker_id, now, file_size)
        self._next_file_id += 1
        out: list[CommitBatchResponse] = []
        for r in requests:
            tp = r.topic_id_partition
            log = self._logs.get(tp)
            if log is None:
                out.append(CommitBatchResponse.unknown_topic_or_partition())
                continue
            if _rules.validate_commit_request(r, file_size) != Errors.NONE:
                out.append(CommitBatchResponse.invalid_request())
                continue
            batch_ts = effective_timestamp(r.timestamp_type, r.batch_max_timestamp, now)
            entries = None
            if r.is_idempotent:
                key = (tp, r.producer_id)
                entries = self._producers.get(key)
                if entries is None or _rules.producer_state_expired(
                    entries, now, self._expiration_ms
                ):
                    entries = self._producers[key] = []
                err, dup = _rules.check_sequence(entries, r)
                if err != Errors.NONE:
                    out.append(CommitBatchResponse.of_error(err))
                    continue
                if dup is not None:
                    out.append(
                        CommitBatchResponse.duplicate(
                            dup.assigned_offset, dup.batch_timestamp, log.log_start_offset
                        )
                    )
                    continue
            assigned = log.high_watermark
            last = assigned + r.record_count - 1
            info = BatchInfo(
                self._next_batch_id,
                object_key,
                r.byte_offset,
                r.size,
                assigned,
                last,
                now,
                r.batch_max_timestamp,
                r.timestamp_type,
                tp,
                r.magic,
                r.producer_id,
                r.producer_epoch,
                r.base_sequence,
                r.last_sequence,
            )
            self._next_batch_id += 1
            log.batches.append(_Batch(info, f))
            log.last_offsets.append(last)
            log.high_watermark = last + 1
            log.byte_size += r.size
            f.live_batches += 1
            if entries is not None:
                _rules.remember(
                    entries,
                    ProducerEntry(
                        r.producer_epoch, r.base_sequence, r.last_sequence, assigned, batch_ts, now
                    ),
                )
            out.append(CommitBatchResponse.success(assigned, now, log.log_start_offset))
        if f.live_batches == 0:
            f.state, f.marked_for_deletion_at_ms = "deleting", now
        self._files[object_key] = f
        return out

    # -- reads --------------------------------------------------------------------------------

    async def find_batches(
        self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        out: list[FindBatchResponse] = []
        request_bytes = 0
        for r in requests:
            log = self._logs.get(r.topic_id_partition)
            if log is None:
                out.append(FindBatchResponse.unknown_topic_or_partition())
                continue
            lso, hw = log.log_start_offset, log.high_watermark
            if r.offset < lso or r.offset > hw:
                out.append(FindBatchResponse.offset_out_of_range(lso, hw))
                continue
            found: list[BatchInfo] = []
            partition_bytes = 0
            i = bisect.bisect_left(log.last_offsets, r.offset)
            for b in log.batches[i:]:
                if not _rules.admit_batch(
                    request_bytes, partition_bytes, r.max_partition_fetch_bytes, fetch_max_bytes
                ):
                    break
                found.append(b.info)
                partition_bytes += b.info.byte_size
                request_bytes += b.info.byte_size
            out.append(FindBatchResponse.success(tuple(found), lso, hw))
        return out

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        out: list[ListOffsetsResponse] = []
        for r in requests:
            tp, ts = r.topic_id_partition, r.timestamp
            log = self._logs.get(tp)
            if log is None:
                out.append(ListOffsetsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, tp, -1, -1))
            elif ts == LATEST_TIMESTAMP:
                out.append(ListOffsetsResponse(Errors.NONE, tp, -1, log.high_watermark))
            elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                out.append(ListOffsetsResponse(Errors.NONE, tp, -1, log.log_start_offset))
            elif ts == LATEST_TIERED_TIMESTAMP:
                out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
            elif ts == MAX_TIMESTAMP:
                best: BatchInfo | None = None
                for b in log.batches:
                    if best is None or b.info.timestamp > best.timestamp:
                        best = b.info
                if best is None:
                    out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
                else:
                    out.append(
                        ListOffsetsResponse(Errors.NONE, tp, best.timestamp, best.last_offset)
                    )
            elif ts < 0:
                out.append(ListOffsetsResponse(Errors.UNKNOWN_SERVER_ERROR, tp, -1, -1))
            else:
                hit = next((b.info for b in log.batches if b.info.timestamp >= ts), None)
                if hit is None:
                    out.append(ListOffsetsResponse(Errors.NONE, tp, -1, -1))
                else:
                    offset = max(hit.base_offset, log.log_start_offset)
                    out.append(ListOffsetsResponse(Errors.NONE, tp, hit.timestamp, offset))
        return out

    # -- deletion -----------------------------------------------------------------------------

    def _delete_below(self, log: _Log, target: int, now: int) -> tuple[int, int]:
        """Move the LSO to max(target, LSO), drop batches entirely below it, mark emptied
        objects. Returns (batches deleted, bytes deleted)."""
        new_lso = max(target, log.log_start_offset)
        log.log_start_offset = new_lso
        n = bisect.bisect_left(log.last_offsets, new_lso)
        if n == 0:
            return 0, 0
        gone = log.batches[:n]
        del log.batches[:n]
        del log.last_offsets[:n]
        freed = sum(b.info.byte_size for b in gone)
        log.byte_size -= freed
        for b in gone:
            b.file.live_batches -= 1
        self._mark_unreferenced({b.file.object_key for b in gone}, now)
        return n, freed

    def _mark_unreferenced(self, keys: set[str], now: int) -> None:
        for k in keys:
            f = self._files[k]
            if f.live_batches == 0 and f.state == "uploaded":
                f.state, f.marked_for_deletion_at_ms = "deleting", now

    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        now = self._time_ms()
        out: list[DeleteRecordsResponse] = []
        for r in requests:
            log = self._logs.get(r.topic_id_partition)
            if log is None:
                out.append(DeleteRecordsResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1))
                continue
            target = log.high_watermark if r.offset == -1 else r.offset
            if target < 0 or target > log.high_watermark:
                out.append(DeleteRecordsResponse(Errors.OFFSET_OUT_OF_RANGE, -1))
                continue
            self._delete_below(log, target, now)
            out.append(DeleteRecordsResponse(Errors.NONE, log.log_start_offset))
        return out

    async def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], max_batches_per_request: int = 0
    ) -> list[EnforceRetentionResponse]:
        now = self._time_ms()
        out: list[EnforceRetentionResponse] = []
        for r in requests:
            log = self._logs.get(r.topic_id_partition)
            if log is None:
                out.append(EnforceRetentionResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1))
                continue
            rb, rm = r.retention_bytes, r.retention_ms
            if rb < 0 and rm < 0:
                out.append(EnforceRetentionResponse(Errors.NONE, 0, 0, log.log_start_offset))
                continue
            remaining = log.byte_size
            boundary = log.high_watermark
            for count, b in enumerate(log.batches):
                size_ok = rb < 0 or remaining <= rb
                time_ok = rm < 0 or b.info.timestamp >= now - rm
                if (size_ok and time_ok) or (
                    max_batches_per_request > 0 and count >= max_batches_per_request
                ):
                    boundary = b.info.base_offset
                    break
                remaining -= b.info.byte_size
            n, freed = self._delete_below(log, boundary, now)
            out.append(EnforceRetentionResponse(Errors.NONE, n, freed, log.log_start_offset))
        return out

    # -- objects ------------------------------------------------------------------------------

    async def get_files_to_delete(
        self,
        marked_before_ms: int | None = None,
        limit: int = 0,
        after_object_key: str | None = None,
    ) -> list[FileToDelete]:
        keys = sorted(
            f.object_key
            for f in self._files.values()
            if f.state == "deleting"
            # a "deleting" file always has its marked_for_deletion_at_ms (set with the state)
            and (
                marked_before_ms is None
                or cast(int, f.marked_for_deletion_at_ms) < marked_before_ms
            )
            and (after_object_key is None or f.object_key > after_object_key)
        )
        if limit > 0:
            keys = keys[:limit]
        return [
            FileToDelete(
                k, cast(int, self._files[k].marked_for_deletion_at_ms), self._files[k].size
            )
            for k in keys
        ]

    async def delete_files(self, object_keys: Sequence[str]) -> list[int]:
        out: list[int] = []
        for k in object_keys:
            f = self._files.get(k)
            if f is None:
                out.append(Errors.RESOURCE_NOT_FOUND)
            elif f.state != "deleting":
                out.append(Errors.INVALID_REQUEST)
            else:
                del self._files[k]
                out.append(Errors.NONE)
        return out

    async def is_safe_to_delete_file(self, object_key: str) -> bool:
        return not object_key or object_key not in self._files
