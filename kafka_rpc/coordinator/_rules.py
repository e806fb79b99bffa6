"""Pure rules shared by every coordinator implementation (no I/O).

Keeping validation, the idempotent-producer decision and the fetch budget in one place means the
in-memory reference and the SQLite implementation cannot drift apart on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .api import (
    INT32_MAX,
    NUM_BATCHES_TO_RETAIN,
    CommitBatchRequest,
    Errors,
)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
"""Kafka ``producer.id.expiration.ms`` default (1 day)."""

MAX_OBJECT_KEY_LENGTH = 1024
"""Inkless ``object_key_t VARCHAR(1024)``."""


@dataclass(slots=True)
class ProducerEntry:
    """One remembered idempotent batch of a producer on a partition (Inkless ``producer_state``
    row, Kafka ``BatchMetadata``). ``row_id`` is the storage id (None = not stored yet)."""

    producer_epoch: int
    base_sequence: int
    last_sequence: int
    assigned_offset: int
    batch_timestamp: int
    committed_at_ms: int
    row_id: int | None = None


def is_valid_commit_request(req: CommitBatchRequest, file_size: int) -> bool:
    """True iff one entry's own fields are valid (see ``BatchCoordinator.commit_file``, step 2).

    The hot-path form of ``validate_commit_request`` (a plain bool, each field read once)."""
    byte_offset = req.byte_offset
    size = req.size
    base = req.base_offset
    last = req.last_offset
    if (
        byte_offset < 0
        or size <= 0
        or byte_offset + size > file_size
        or base < 0
        or last < base
        or last - base >= INT32_MAX
        or req.batch_max_timestamp < -1
        or not -1 <= req.timestamp_type <= 1
        or not 0 <= req.magic <= 2
    ):
        return False
    pid = req.producer_id
    epoch = req.producer_epoch
    base_seq = req.base_sequence
    last_seq = req.last_sequence
    if pid < -1 or epoch < -1 or base_seq < -1 or last_seq < -1:
        return False
    return not (pid >= 0 and epoch >= 0 and (base_seq < 0 or last_seq < 0))


def validate_commit_request(req: CommitBatchRequest, file_size: int) -> int:
    """``Errors.NONE`` or ``Errors.INVALID_REQUEST`` for one entry's own fields (see
    ``BatchCoordinator.commit_file``, step 2)."""
    return Errors.NONE if is_valid_commit_request(req, file_size) else Errors.INVALID_REQUEST


def is_valid_object(object_key: str, file_size: int) -> bool:
    """Whole-call checks of ``commit_file``: a non-empty key of at most 1024 characters and a
    non-negative size."""
    return bool(object_key) and len(object_key) <= MAX_OBJECT_KEY_LENGTH and file_size >= 0


def producer_state_expired(entries: list[ProducerEntry], now_ms: int, expiration_ms: int) -> bool:
    """Kafka ``ProducerStateManager.isProducerExpired``: the producer's newest batch was committed
    ``expiration_ms`` or more ago. (Kafka measures from the batch's max timestamp; we use the
    coordinator's commit time, which the producer cannot skew.)"""
    return bool(entries) and now_ms - entries[-1].committed_at_ms >= expiration_ms


def check_sequence(
    entries: list[ProducerEntry], req: CommitBatchRequest
) -> tuple[int, ProducerEntry | None]:
    """Decide an idempotent batch against the producer's retained entries (oldest first).

    Returns ``(NONE, None)`` to accept, ``(NONE, entry)`` for a duplicate of ``entry``, or
    ``(error, None)``. Rules (Kafka ``UnifiedLog.analyzeAndValidateProducerState``,
    ``ProducerStateEntry.findDuplicateBatch``, ``ProducerAppendInfo.checkProducerEpoch`` and
    ``checkSequence``):

    * no state -> accept any base sequence (Kafka >= 2.5);
    * epoch lower than the newest entry's -> ``INVALID_PRODUCER_EPOCH``;
    * epoch higher -> accept iff ``base_sequence == 0``, else ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
    * same epoch: an entry of that epoch with equal (base, last) sequences -> duplicate; else
      accept iff ``base == last + 1`` or ``(base == 0 and last == 2**31-1)`` where ``last`` is the
      newest entry's last sequence, else ``OUT_OF_ORDER_SEQUENCE_NUMBER``.
    """
    if not entries:
        return Errors.NONE, None
    newest = entries[-1]
    epoch = req.producer_epoch
    if epoch < newest.producer_epoch:
        return Errors.INVALID_PRODUCER_EPOCH, None
    if epoch > newest.producer_epoch:
        if req.base_sequence == 0:
            return Errors.NONE, None
        return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None
    base, last_seq = req.base_sequence, req.last_sequence
    for e in entries:
        if e.producer_epoch == epoch and e.base_sequence == base and e.last_sequence == last_seq:
            return Errors.NONE, e
    last = newest.last_sequence
    if base == last + 1 or (base == 0 and last == INT32_MAX):
        return Errors.NONE, None
    return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None


def remember(entries: list[ProducerEntry], entry: ProducerEntry) -> None:
    """Append an accepted batch and keep only the newest ``NUM_BATCHES_TO_RETAIN`` entries."""
    entries.append(entry)
    if len(entries) > NUM_BATCHES_TO_RETAIN:
        del entries[: len(entries) - NUM_BATCHES_TO_RETAIN]


def admit_batch(
    request_bytes: int, partition_bytes: int, max_partition_bytes: int, fetch_max_bytes: int
) -> bool:
    """Fetch budget (Inkless V27, Kafka's fetch rule): the first batch of the whole request is
    always admitted; after it, admit while both budgets are not yet reached (checked before
    adding, so the crossing batch is included)."""
    return request_bytes == 0 or (
        partition_bytes < max_partition_bytes and request_bytes < fetch_max_bytes
    )
