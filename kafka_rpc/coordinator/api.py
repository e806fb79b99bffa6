"""The Batch Coordinator domain API (KIP-1164), as plain frozen dataclasses.

This module is the contract between the wire handlers and the coordinator implementations
(``memory.py``, ``sqlite.py``). It imports nothing from the wire codec: requests and responses
are plain Python values, error codes are plain ``int`` with Kafka's numbering (``Errors``).

Conventions shared by every method of ``BatchCoordinator``:

* **Lists in, lists out**: ``responses[i]`` answers ``requests[i]``; a request list may name the
  same partition several times, each entry is then answered on its own, in order.
* **Units**: timestamps and durations are milliseconds since the Unix epoch (``*_ms``,
  ``*_timestamp``, ``*_time``); sizes and byte positions are bytes; offsets are Kafka record
  offsets. ``last_offset`` is *inclusive*; the high watermark (HW) is *exclusive* (the offset the
  next record will get; there is no separate log end offset: a commit is durable and visible
  atomically); the log start offset (LSO) is inclusive.
* **Unknown partitions**: an unknown topic id, an unknown partition and the zero topic id
  (``uuid.UUID(int=0)``, Kafka's ``Uuid.ZERO_UUID``) all answer ``UNKNOWN_TOPIC_OR_PARTITION``,
  as Inkless does, in every method.
* **Bad entries are isolated**: an invalid entry gets its error code; the other entries of the same
  call are processed normally and nothing else changes.
* Semantics follow Aiven Inkless's PostgreSQL control plane (the most mature KIP-1164
  implementation; function names cited per method) except where Inkless departs from Kafka; there
  the Kafka class that defines the rule is cited instead.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from types import TracebackType

from kafka_rpc._frozen import frozen_constructor

__all__ = [
    "CREATE_TIME",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "INT32_MAX",
    "LATEST_TIERED_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "LOG_APPEND_TIME",
    "MAX_TIMESTAMP",
    "NO_TIMESTAMP_TYPE",
    "NUM_BATCHES_TO_RETAIN",
    "ZERO_UUID",
    "BatchCoordinator",
    "BatchInfo",
    "CommitBatchRequest",
    "CommitBatchResponse",
    "CreateTopicAndPartitionsRequest",
    "DeleteRecordsRequest",
    "DeleteRecordsResponse",
    "EnforceRetentionRequest",
    "EnforceRetentionResponse",
    "Errors",
    "FileToDelete",
    "FindBatchRequest",
    "FindBatchResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "TopicIdPartition",
    "new_batch_info",
    "new_commit_batch_request",
    "new_commit_batch_response",
    "new_topic_id_partition",
]


class Errors(IntEnum):
    """The Kafka error codes this layer returns.

    Numbering of ``org.apache.kafka.common.protocol.Errors``.

    Only the codes used here are listed; the protocol layer's ``ErrorCode`` is a superset.
    """

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    KAFKA_STORAGE_ERROR = 56
    INVALID_RECORD = 87
    RESOURCE_NOT_FOUND = 91


ZERO_UUID = uuid.UUID(int=0)
"""Kafka's ``Uuid.ZERO_UUID``: never a valid topic id."""

INT32_MAX = 2_147_483_647
"""Largest producer sequence number; the next one after it is 0 (wrap-around)."""

NUM_BATCHES_TO_RETAIN = 5
"""Batches remembered per (partition, producer) for duplicate detection
(Kafka ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``)."""

# Timestamp types (Kafka ``TimestampType``).
NO_TIMESTAMP_TYPE = -1
CREATE_TIME = 0
LOG_APPEND_TIME = 1

# ListOffsets sentinels (Kafka ``ListOffsetsRequest``).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition of a diskless topic, named by topic id (KIP-516) and partition index (>= 0)."""

    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class CreateTopicAndPartitionsRequest:
    """Create partitions ``0 .. num_partitions - 1`` of a topic (KIP-1164).

    Existing partitions are left untouched (whatever their name), so the call is idempotent and a
    larger ``num_partitions`` later adds only the new partitions (Inkless
    ``TopicsAndPartitionsCreateJob``: ``INSERT ... ON CONFLICT DO NOTHING``).
    """

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class CommitBatchRequest:
    """One record batch inside an uploaded object (KIP-1164 ``CommitBatchRequest``).

    * ``byte_offset`` / ``size``: position and length in bytes of the batch inside the object
      (``byte_offset >= 0``, ``size > 0``, ``byte_offset + size <= file_size``).
    * ``base_offset`` / ``last_offset`` (inclusive): only give the record count
      ``last_offset - base_offset + 1``; the coordinator assigns the real offsets from the high
      watermark (brokers send relative offsets starting at 0).
    * ``batch_max_timestamp``: the batch's max record timestamp in ms (-1 = none).
    * ``timestamp_type``: 0 CREATE_TIME, 1 LOG_APPEND_TIME (-1 NO_TIMESTAMP_TYPE for magic < 1).
    * ``producer_id`` / ``producer_epoch`` / ``base_sequence`` / ``last_sequence``: idempotent
      producer fields; the batch is idempotent iff ``producer_id >= 0 and producer_epoch >= 0``.
    * ``magic``: record batch format version (0..2).
    """

    topic_id_partition: TopicIdPartition
    byte_offset: int
    size: int
    base_offset: int
    last_offset: int
    batch_max_timestamp: int
    timestamp_type: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    last_sequence: int = -1
    magic: int = 2

    @property
    def record_count(self) -> int:
        """Number of records (``last_offset - base_offset + 1``)."""
        return self.last_offset - self.base_offset + 1

    @property
    def is_idempotent(self) -> bool:
        """True when the producer-state checks apply.

        Inkless: ``producer_id > -1 AND producer_epoch > -1``.
        """
        return self.producer_id >= 0 and self.producer_epoch >= 0


@dataclass(frozen=True, slots=True)
class CommitBatchResponse:
    """The answer to one ``CommitBatchRequest`` (KIP-1164 ``CommitBatchResponse``).

    * success: ``error = NONE``, ``assigned_base_offset`` = first offset given to the batch,
      ``log_append_time`` = commit time in ms (the broker forwards it to the client only for
      LOG_APPEND_TIME batches), ``log_start_offset`` = the partition's LSO.
    * duplicate (idempotent retry of a batch still in the 5-batch window): ``error = NONE``,
      ``is_duplicate = True``, ``assigned_base_offset`` = the *original* base offset,
      ``log_append_time`` = the original batch's timestamp (Kafka ``UnifiedLog`` answers a
      duplicate with the cached ``BatchMetadata.timestamp``), ``log_start_offset`` = current LSO.
    * rejected: the error, every other field -1, ``is_duplicate = False``.
    """

    error: int
    assigned_base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    is_duplicate: bool = False

    @classmethod
    def success(
        cls, assigned_base_offset: int, log_append_time: int, log_start_offset: int
    ) -> CommitBatchResponse:
        return cls(Errors.NONE, assigned_base_offset, log_append_time, log_start_offset, False)

    @classmethod
    def duplicate(
        cls, assigned_base_offset: int, log_append_time: int, log_start_offset: int
    ) -> CommitBatchResponse:
        return cls(Errors.NONE, assigned_base_offset, log_append_time, log_start_offset, True)

    @classmethod
    def of_error(cls, error: int) -> CommitBatchResponse:
        return cls(error)

    @classmethod
    def unknown_topic_or_partition(cls) -> CommitBatchResponse:
        return _COMMIT_UNKNOWN

    @classmethod
    def invalid_request(cls) -> CommitBatchResponse:
        return _COMMIT_INVALID

    @classmethod
    def invalid_producer_epoch(cls) -> CommitBatchResponse:
        return _COMMIT_FENCED

    @classmethod
    def out_of_order_sequence(cls) -> CommitBatchResponse:
        return _COMMIT_OOO


# Hot-path constructors (``kafka_rpc._frozen``): positional, EVERY field in declaration order, no
# defaults; about 5x cheaper than the dataclass ``__init__``. The objects are ordinary frozen
# instances. Used by the CommitBatches handler and the coordinators (100 of each per request).
new_topic_id_partition = frozen_constructor(TopicIdPartition)
new_commit_batch_request = frozen_constructor(CommitBatchRequest)
new_commit_batch_response = frozen_constructor(CommitBatchResponse)

_COMMIT_UNKNOWN = CommitBatchResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION)
_COMMIT_INVALID = CommitBatchResponse(Errors.INVALID_REQUEST)
_COMMIT_FENCED = CommitBatchResponse(Errors.INVALID_PRODUCER_EPOCH)
_COMMIT_OOO = CommitBatchResponse(Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)


@dataclass(frozen=True, slots=True)
class FindBatchRequest:
    """Find the batches of a partition from ``offset`` on, for a fetch (KIP-1164).

    ``max_partition_fetch_bytes`` is the partition's byte budget (Kafka fetch
    ``PartitionMaxBytes``).
    """

    topic_id_partition: TopicIdPartition
    offset: int
    max_partition_fetch_bytes: int


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """Coordinates of one committed batch (KIP-1164 ``BatchInfo`` + ``BatchMetadata``, flattened).

    ``base_offset`` / ``last_offset`` are the assigned absolute offsets (both inclusive);
    ``byte_offset`` / ``byte_size`` locate the batch inside object ``object_key``;
    ``log_append_timestamp`` is the commit time (ms); ``batch_max_timestamp`` the producer's max
    timestamp (ms); ``timestamp`` (property) the effective one. ``batch_id`` increases with commit
    order and is never reused.
    """

    batch_id: int
    object_key: str
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    log_append_timestamp: int
    batch_max_timestamp: int
    timestamp_type: int
    topic_id_partition: TopicIdPartition | None = None
    magic: int = 2
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    last_sequence: int = -1

    @property
    def timestamp(self) -> int:
        """Effective timestamp: the commit time for LOG_APPEND_TIME batches, else the max
        timestamp (Inkless SQL ``batch_timestamp``; Inkless ``BatchMetadata.timestamp()``)."""
        return effective_timestamp(
            self.timestamp_type, self.batch_max_timestamp, self.log_append_timestamp
        )


@dataclass(frozen=True, slots=True)
class FindBatchResponse:
    """The answer to one ``FindBatchRequest`` (KIP-1164 ``FindBatchResponse``).

    * ``NONE``: ``batches`` in offset order (possibly empty: caught up at the HW, or over budget),
      with the partition's LSO and HW.
    * ``OFFSET_OUT_OF_RANGE``: ``batches`` empty, with the real LSO and HW.
    * ``UNKNOWN_TOPIC_OR_PARTITION``: ``batches`` empty, LSO = HW = -1.

    Unlike Inkless (``batches = null`` on error) ``batches`` is always a tuple.
    """

    error: int
    batches: tuple[BatchInfo, ...]
    log_start_offset: int
    high_watermark: int

    @classmethod
    def unknown_topic_or_partition(cls) -> FindBatchResponse:
        return _FIND_UNKNOWN

    @classmethod
    def offset_out_of_range(cls, log_start_offset: int, high_watermark: int) -> FindBatchResponse:
        return cls(Errors.OFFSET_OUT_OF_RANGE, (), log_start_offset, high_watermark)

    @classmethod
    def success(
        cls, batches: tuple[BatchInfo, ...], log_start_offset: int, high_watermark: int
    ) -> FindBatchResponse:
        return cls(Errors.NONE, batches, log_start_offset, high_watermark)


_FIND_UNKNOWN = FindBatchResponse(Errors.UNKNOWN_TOPIC_OR_PARTITION, (), -1, -1)

new_batch_info = frozen_constructor(BatchInfo)  # hot path of find_batches, as new_commit_*


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    """Look up an offset by ``timestamp`` (ms >= 0) or by a sentinel (KIP-1164, Kafka ListOffsets):
    -1 LATEST, -2 EARLIEST, -3 MAX_TIMESTAMP, -4 EARLIEST_LOCAL, -5 LATEST_TIERED."""

    topic_id_partition: TopicIdPartition
    timestamp: int


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    """The answer to one ``ListOffsetsRequest``: ``timestamp`` (ms, -1 = none) and ``offset``
    (-1 = none). On error both are -1."""

    error: int
    topic_id_partition: TopicIdPartition
    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest:
    """Delete the records below ``offset`` (exclusive; -1 = up to the high watermark)."""

    topic_id_partition: TopicIdPartition
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse:
    """``low_watermark`` = the partition's LSO after the call; -1 on error."""

    error: int
    low_watermark: int


@dataclass(frozen=True, slots=True)
class EnforceRetentionRequest:
    """Apply a partition's retention (Inkless ``enforce_retention_v2``, V22).

    ``retention_bytes``: keep at most this many bytes of batches (-1 disables);
    ``retention_ms``: keep batches whose effective timestamp is >= now - retention_ms (-1 disables).
    """

    topic_id_partition: TopicIdPartition
    retention_bytes: int
    retention_ms: int


@dataclass(frozen=True, slots=True)
class EnforceRetentionResponse:
    """``batches_deleted`` / ``bytes_deleted`` by this call and the LSO after it; -1s on error."""

    error: int
    batches_deleted: int
    bytes_deleted: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class FileToDelete:
    """An object soft-deleted by the coordinator, to be removed from object storage.

    ``marked_for_deletion_at_ms``: when its last batch went (ms); ``size``: object size in bytes.
    """

    object_key: str
    marked_for_deletion_at_ms: int
    size: int


def effective_timestamp(timestamp_type: int, batch_max_timestamp: int, log_append: int) -> int:
    """Commit time for LOG_APPEND_TIME batches, else the batch max timestamp (Inkless
    ``batch_timestamp(type, max_ts, append_ts)``)."""
    return log_append if timestamp_type == LOG_APPEND_TIME else batch_max_timestamp


class BatchCoordinator(abc.ABC):
    """The pluggable Batch Coordinator (KIP-1164 ``BatchCoordinator``).

    Lifecycle: ``await start()`` before use, ``await close()`` after (or ``async with``).
    Every method is a coroutine; a coordinator is used from one event loop. Unexpected failures
    (I/O, corrupted database) raise; expected rejections are error codes in the responses.
    """

    async def start(self) -> None:  # noqa: B027 - optional hook
        """Open resources (database, migrations). Idempotent."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources after pending operations finished. Idempotent."""

    async def __aenter__(self) -> BatchCoordinator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @abc.abstractmethod
    async def create_topic_and_partitions(
        self, requests: Sequence[CreateTopicAndPartitionsRequest]
    ) -> list[int]:
        """Create the partitions ``0 .. num_partitions - 1`` of each topic, with LSO = HW = 0.

        Existing partitions are untouched (idempotent; Inkless ``ON CONFLICT DO NOTHING``).
        Returns one error code per request: ``NONE``, or ``INVALID_REQUEST`` for the zero topic
        id, ``num_partitions < 0`` or an empty topic name (nothing created for that request).
        """

    @abc.abstractmethod
    async def commit_file(
        self,
        object_key: str,
        uploader_broker_id: int,
        file_size: int,
        requests: Sequence[CommitBatchRequest],
    ) -> list[CommitBatchResponse]:
        """Record an uploaded object and the batches in it; acknowledge only once durable.

        Per entry, in request order (Inkless ``commit_file_v1``, with Kafka's producer rules):

        1. unknown/zero topic or unknown partition -> ``UNKNOWN_TOPIC_OR_PARTITION``;
        2. invalid fields (``byte_offset < 0``, ``size <= 0``, ``byte_offset + size > file_size``,
           ``base_offset < 0``, ``last_offset < base_offset``, record count > 2**31-1,
           ``batch_max_timestamp < -1``, ``timestamp_type`` not in -1..1, ``magic`` not in 0..2,
           producer fields < -1, idempotent batch with a negative sequence) -> ``INVALID_REQUEST``;
        3. idempotent batches (Kafka ``ProducerStateManager`` / ``ProducerAppendInfo``): a lower
           epoch than the producer's -> ``INVALID_PRODUCER_EPOCH``; a retry of one of the last 5
           batches (same epoch, same base and last sequence) -> duplicate answer with the original
           offset; a higher epoch must start at sequence 0; the same epoch must continue at
           ``last + 1`` (or 0 after 2**31-1) of the most recent batch; otherwise
           ``OUT_OF_ORDER_SEQUENCE_NUMBER``. A producer with no state on the partition (new, or
           idle for ``producer_id_expiration_ms``) may start at any sequence;
        4. accepted: offsets ``[HW, HW + count)`` gap-free in request order, HW advanced.

        A rejected entry consumes nothing. If no entry is accepted the object is recorded already
        marked for deletion. A repeated ``object_key`` (already committed), an empty key or
        ``file_size < 0`` answers ``INVALID_REQUEST`` for every entry and writes nothing. No
        requests -> ``[]``, nothing written.
        """

    @abc.abstractmethod
    async def find_batches(
        self, requests: Sequence[FindBatchRequest], fetch_max_bytes: int
    ) -> list[FindBatchResponse]:
        """Batches to serve a fetch (Inkless ``find_batches_v2``, V27), one consistent snapshot.

        Per request: unknown -> ``UNKNOWN_TOPIC_OR_PARTITION`` (-1, -1); ``offset < LSO`` or
        ``offset > HW`` -> ``OFFSET_OUT_OF_RANGE`` with the real LSO/HW; ``offset == HW`` -> NONE,
        no batches; else the batches with ``last_offset >= offset`` in offset order, the first
        being the one containing ``offset``. Budget (Kafka's fetch rule): the first batch of the
        whole call is always returned; after it a batch is added while the partition's bytes are
        below ``max_partition_fetch_bytes`` and the call's bytes below ``fetch_max_bytes``
        (checked before adding, whole batch sizes).
        """

    @abc.abstractmethod
    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest]
    ) -> list[ListOffsetsResponse]:
        """Offsets by sentinel or timestamp (Inkless ``list_offsets_v1``, V17).

        -1 LATEST -> (-1, HW); -2 EARLIEST and -4 EARLIEST_LOCAL -> (-1, LSO);
        -5 LATEST_TIERED -> (-1, -1) (nothing is tiered); -3 MAX_TIMESTAMP -> (max effective
        timestamp, ``last_offset`` of the first batch having it) or (-1, -1) when empty;
        timestamp >= 0 -> the first batch (offset order) whose effective timestamp >= it:
        (its timestamp, max(its base_offset, LSO)), or (-1, -1). Lookups are batch-granular.
        Other negative timestamps -> ``UNKNOWN_SERVER_ERROR`` (as Inkless). Unknown ->
        ``UNKNOWN_TOPIC_OR_PARTITION``. Errors carry (-1, -1).
        """

    @abc.abstractmethod
    async def delete_records(
        self, requests: Sequence[DeleteRecordsRequest]
    ) -> list[DeleteRecordsResponse]:
        """Advance the LSO (Inkless ``delete_records_v1``, V20).

        ``offset = -1`` means the HW. An offset < 0 otherwise or > HW -> ``OFFSET_OUT_OF_RANGE``
        (low watermark -1, nothing changes). New LSO = max(offset, LSO) (never moves back);
        batches entirely below it are deleted (a batch straddling it is kept); objects left
        without batches are marked for deletion. Returns ``NONE`` and the new LSO.
        """

    @abc.abstractmethod
    async def delete_topics(self, topic_ids: Sequence[uuid.UUID]) -> list[int]:
        """Delete the topics' partitions, batches and producer state in one transaction; objects
        left without batches are marked for deletion (Inkless ``delete_topic_v1``; producer state
        goes with the log as in Kafka).

        ``responses[i]`` answers ``topic_ids[i]``: ``NONE`` when this call deleted the topic,
        ``UNKNOWN_TOPIC_OR_PARTITION`` when it has no partitions here (never created, already
        deleted, or deleted by an earlier occurrence in the same call). Deleting is idempotent;
        only the code tells the caller whether there was anything to delete.
        """

    @abc.abstractmethod
    async def get_files_to_delete(
        self,
        marked_before_ms: int | None = None,
        limit: int = 0,
        after_object_key: str | None = None,
    ) -> list[FileToDelete]:
        """Objects marked for deletion, ordered by object key.

        ``marked_before_ms``: only objects marked strictly before it (None = all);
        ``limit``: at most this many (0 = all); ``after_object_key``: only keys > it (paging).
        """

    @abc.abstractmethod
    async def delete_files(self, object_keys: Sequence[str]) -> list[int]:
        """Forget objects that were physically deleted from storage (Inkless ``delete_files_v1``).

        Only objects marked for deletion are removed, in one transaction. ``responses[i]`` answers
        ``object_keys[i]``: ``NONE`` if removed, ``INVALID_REQUEST`` if the object is still live
        (nothing removed), ``RESOURCE_NOT_FOUND`` if the coordinator has no record of the key
        (never committed, already forgotten, or forgotten by an earlier occurrence in the call).
        """

    @abc.abstractmethod
    async def is_safe_to_delete_file(self, object_key: str) -> bool:
        """True iff the coordinator has no record of ``object_key`` in any state (an empty key is
        safe). Ordered after every commit submitted before it. Used by a broker whose commit failed
        before it deletes its uploaded object (Inkless ``SafeDeleteFileCheckJob``)."""

    @abc.abstractmethod
    async def list_partitions(self) -> list[TopicIdPartition]:
        """Every partition the coordinator holds, ordered by (topic id, partition); used by the
        broker's periodic retention task to build its ``enforce_retention`` requests."""

    @abc.abstractmethod
    async def enforce_retention(
        self, requests: Sequence[EnforceRetentionRequest], max_batches_per_request: int = 0
    ) -> list[EnforceRetentionResponse]:
        """Delete whole batches beyond retention (Inkless ``enforce_retention_v2``, V22).

        Walk batches in offset order to the first one satisfying every enabled policy (bytes of it
        and all later batches <= ``retention_bytes``; effective timestamp >= now - ``retention_ms``)
        and delete everything before it, or everything (LSO = HW) if none qualifies. Both
        policies -1 -> no-op. ``max_batches_per_request > 0`` caps deletions per partition per
        call. Unknown -> ``UNKNOWN_TOPIC_OR_PARTITION`` (-1, -1, -1). The LSO never moves back.
        """
