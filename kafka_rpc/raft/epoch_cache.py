"""Kafka's leader-epoch cache (``LeaderEpochFileCache``) and the ``KafkaMetadataLog`` rules on top
of it (``endOffsetForEpoch``, ``lastFetchedEpoch``), shared by the file log and the memory log.

The cache is a list of ``(epoch, start_offset)`` in increasing order of both: the first offset
of each leader epoch present in the log. It is kept in memory only (Kafka checkpoints it in
``leader-epoch-checkpoint``; our logs rebuild it from the batches at open).
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Sequence

from kafka_rpc.protocol.record_batch import BATCH_OVERHEAD, Batch
from kafka_rpc.raft.api import OffsetAndEpoch

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochCache",
    "check_append",
    "end_offset_for_epoch",
    "last_fetched_epoch",
]

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochCache:
    """Kafka's ``LeaderEpochFileCache`` in memory: ``(epoch, start_offset)`` entries."""

    __slots__ = ("_epochs", "_starts")

    def __init__(self) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []

    @property
    def entries(self) -> list[tuple[int, int]]:
        """``(epoch, start_offset)`` pairs, oldest first (a copy)."""
        return list(zip(self._epochs, self._starts, strict=True))

    def latest_epoch(self) -> int | None:
        """The epoch of the last entry, None when empty (Kafka ``latestEpoch``)."""
        return self._epochs[-1] if self._epochs else None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (offsets) if it is newer than the
        latest epoch (Kafka ``assign``). An older epoch raises ValueError; a negative epoch
        (NO_PARTITION_LEADER_EPOCH) is ignored, as Kafka does."""
        if epoch < 0:
            return
        if self._epochs:
            if epoch == self._epochs[-1]:
                return
            if epoch < self._epochs[-1]:
                raise ValueError(f"epoch {epoch} is below the latest epoch {self._epochs[-1]}")
            if start_offset < self._starts[-1]:
                raise ValueError(f"epoch start offset {start_offset} goes backwards")
        self._epochs.append(epoch)
        self._starts.append(start_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the epochs starting at or after ``end_offset`` (exclusive end of the log after a
        truncation; Kafka ``truncateFromEnd``)."""
        while self._starts and self._starts[-1] >= end_offset:
            self._starts.pop()
            self._epochs.pop()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to ``start_offset``: drop entries starting at or below it and keep
        the last of them re-started at ``start_offset`` (Kafka ``truncateFromStart``)."""
        i = bisect_right(self._starts, start_offset)
        if i == 0:
            return
        last_epoch = self._epochs[i - 1]
        del self._epochs[:i]
        del self._starts[:i]
        self._epochs.insert(0, last_epoch)
        self._starts.insert(0, start_offset)

    def clear(self) -> None:
        """Forget every entry (Kafka ``clearAndFlush``)."""
        self._epochs.clear()
        self._starts.clear()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka ``LeaderEpochFileCache.endOffsetFor``: ``(epoch, end_offset)`` (end exclusive)
        of the largest epoch <= ``requested_epoch``. The latest epoch ends at ``log_end_offset``;
        any other ends where the next epoch starts. An epoch below every entry answers
        ``(requested_epoch, start of the first entry)``; an undefined epoch, an empty cache or an
        epoch above every entry answers ``(-1, -1)``."""
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        i = bisect_right(self._epochs, requested_epoch)  # index of the first higher epoch
        if i == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if i == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[i - 1], self._starts[i]


def last_fetched_epoch(cache: EpochCache, latest_snapshot: OffsetAndEpoch | None) -> int:
    """Kafka ``KafkaMetadataLog.lastFetchedEpoch``: the log's latest epoch; with no batches the
    latest snapshot's epoch; with neither 0."""
    latest = cache.latest_epoch()
    if latest is not None:
        return latest
    return latest_snapshot.epoch if latest_snapshot is not None else 0


def end_offset_for_epoch(
    cache: EpochCache,
    epoch: int,
    log_end_offset: int,
    earliest_snapshot: OffsetAndEpoch | None,
    latest_snapshot: OffsetAndEpoch | None,
) -> OffsetAndEpoch:
    """Kafka ``KafkaMetadataLog.endOffsetForEpoch`` over :meth:`EpochCache.end_offset_for`.

    - An epoch below every epoch of the log whose answer lands on the oldest snapshot's offset
      answers the oldest snapshot id (the snapshot at the log start).
    - Nothing found in the cache (empty log, or an epoch above every epoch) answers
      ``(log_end_offset, last_fetched_epoch)``: ``(0, 0)`` for an empty log without snapshots,
      the snapshot id for a log emptied onto a snapshot.
    - An epoch below every epoch with no snapshot there answers ``(first epoch start, epoch)``,
      exactly as Kafka: a follower holding that epoch then truncates to that offset.
    """
    found_epoch, found_offset = cache.end_offset_for(epoch, log_end_offset)
    if found_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetAndEpoch(log_end_offset, last_fetched_epoch(cache, latest_snapshot))
    if (
        earliest_snapshot is not None
        and found_offset == earliest_snapshot.offset
        and found_epoch == epoch
    ):
        return earliest_snapshot
    return OffsetAndEpoch(found_offset, found_epoch)


_BASE_AND_LENGTH = struct.Struct(">qi")


def check_append(batches: Sequence[Batch], end_offset: int, cache: EpochCache) -> int:
    """Validate an append (both logs): the first batch starts at ``end_offset``, each next one
    right after the previous one, epochs never below the log's latest epoch nor decreasing, and
    each batch's bytes carry its base offset and its length. Returns the new end offset; raises
    ValueError (before anything is written)."""
    expected = end_offset
    last_epoch = cache.latest_epoch()
    last_epoch = -1 if last_epoch is None else last_epoch
    for b in batches:
        if b.base_offset != expected:
            raise ValueError(f"batch at offset {b.base_offset}, expected offset {expected}")
        if b.last_offset < b.base_offset:
            raise ValueError(f"batch last offset {b.last_offset} < base {b.base_offset}")
        if b.epoch < last_epoch:
            raise ValueError(f"batch epoch {b.epoch} is below the last epoch {last_epoch}")
        data = b.data
        if len(data) < BATCH_OVERHEAD:
            raise ValueError(f"batch at offset {b.base_offset} is only {len(data)} bytes")
        base, length = _BASE_AND_LENGTH.unpack_from(data)
        if base != b.base_offset or length + 12 != len(data):
            raise ValueError(f"batch at offset {b.base_offset}: its bytes do not match it")
        expected = b.last_offset + 1
        last_epoch = max(last_epoch, b.epoch)
    return expected
