"""In-memory :class:`~kafka_rpc.raft.api.ReplicatedLog` and
:class:`~kafka_rpc.raft.api.QuorumStateStore` for the deterministic simulator, with the same
semantics as :mod:`kafka_rpc.raft.file_log` (Kafka ``KafkaMetadataLog``; the epoch rules are
shared through :mod:`kafka_rpc.raft.epoch_cache`) and a machine crash: :meth:`MemoryLog.crash`
loses every batch appended after the last :meth:`MemoryLog.flush` and every snapshot not yet
frozen; frozen snapshots, truncations and log start moves survive (they model operations the
file log makes durable by the next flush or at once).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence

from kafka_rpc.protocol.record_batch import Batch, decode_batches
from kafka_rpc.raft.api import ElectionState, OffsetAndEpoch
from kafka_rpc.raft.epoch_cache import (
    EpochCache,
    check_append,
    end_offset_for_epoch,
    last_fetched_epoch,
)

__all__ = ["MemoryLog", "MemoryQuorumStateStore", "MemorySnapshotReader", "MemorySnapshotWriter"]


class MemorySnapshotReader:
    """A frozen in-memory snapshot (Kafka ``FileRawSnapshotReader`` semantics)."""

    def __init__(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshot_id = snapshot_id
        self._data = data
        self.size = len(data)  # bytes

    def read(self, position: int, max_bytes: int) -> bytes:
        """Bytes ``[position, position + max_bytes)``, cut at the end (b"" past it)."""
        if position < 0 or max_bytes < 0:
            raise ValueError(f"negative position {position} or max_bytes {max_bytes}")
        return self._data[position : position + max_bytes]

    def batches(self) -> Iterator[Batch]:
        """Every batch, decoded and CRC-checked; raises CorruptRecordError on damage."""
        return iter(decode_batches(self._data))

    def close(self) -> None:
        """Nothing to release."""


class MemorySnapshotWriter:
    """A snapshot being written in memory (Kafka ``FileRawSnapshotWriter`` semantics); lost by a
    crash of its log unless frozen before it."""

    def __init__(self, log: MemoryLog, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self.size = 0  # bytes written so far
        self.frozen = False
        self._log = log
        self._incarnation = log.incarnation
        self._parts: list[bytes] | None = []
        self._data: bytes | None = None  # frozen, not yet visible (freeze(notify=False))

    def _check(self) -> list[bytes]:
        if self._parts is None or self.frozen:
            raise ValueError(f"snapshot {self.snapshot_id} is frozen or closed")
        if self._log.incarnation != self._incarnation:
            raise ValueError(f"snapshot {self.snapshot_id} was lost in a crash")
        return self._parts

    def append(self, data: bytes) -> None:
        """Append ``data`` (bytes)."""
        self._check().append(bytes(data))
        self.size += len(data)

    def freeze(self, notify: bool = True) -> None:
        """Make the snapshot visible and durable (the file log fsyncs and renames); with
        ``notify=False`` visible only once :meth:`notify_frozen` is called."""
        self._data = b"".join(self._check())
        self._parts = None
        self.frozen = True
        if notify:
            self.notify_frozen()

    def notify_frozen(self) -> None:
        """Make the frozen snapshot visible to the log (see :meth:`freeze`)."""
        if self.frozen and self._data is not None:
            data, self._data = self._data, None
            self._log._on_frozen(self.snapshot_id, data)

    def close(self) -> None:
        """Without :meth:`freeze`: discard it (abort)."""
        self._parts = None


class MemoryLog:
    """:class:`~kafka_rpc.raft.api.ReplicatedLog` in memory, as :class:`FileLog
    <kafka_rpc.raft.file_log.FileLog>` without segments (Kafka ``KafkaMetadataLog``; offsets
    are offsets, sizes bytes)."""

    def __init__(self) -> None:
        self._batches: list[Batch] = []
        self._bases: list[int] = []
        self._lasts: list[int] = []
        self._cache = EpochCache()
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}
        self._ids: list[OffsetAndEpoch] = []  # sorted by (offset, epoch)
        self.start_offset = 0
        self.end_offset = 0
        self.flushed_offset = 0
        self.incarnation = 0  # bumped by crash()

    # ---- the simulator's fault

    def crash(self) -> None:
        """A machine crash and restart: drop the batches above ``flushed_offset`` and every
        snapshot writer not frozen, then recover as the file log does at open
        (:meth:`truncate_to_latest_snapshot`)."""
        self.incarnation += 1
        i = bisect_left(self._lasts, self.flushed_offset)  # the first batch not wholly flushed
        del self._batches[i:], self._bases[i:], self._lasts[i:]
        self.end_offset = self._lasts[-1] + 1 if self._lasts else self.start_offset
        self._cache.truncate_from_end(self.end_offset)
        self.flushed_offset = self.end_offset
        self.truncate_to_latest_snapshot()

    # ---- ReplicatedLog

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch; with none the latest snapshot's epoch; else 0."""
        return last_fetched_epoch(self._cache, self.latest_snapshot_id())

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka ``KafkaMetadataLog.endOffsetForEpoch``; see
        :func:`kafka_rpc.raft.epoch_cache.end_offset_for_epoch`."""
        return end_offset_for_epoch(
            self._cache, epoch, self.end_offset, self.earliest_snapshot_id(),
            self.latest_snapshot_id(),
        )  # fmt: skip

    def append(self, batches: Sequence[Batch]) -> None:
        """Append whole contiguous batches with non-decreasing epochs; ValueError otherwise."""
        if not batches:
            return
        end = check_append(batches, self.end_offset, self._cache)
        for b in batches:
            self._batches.append(b)
            self._bases.append(b.base_offset)
            self._lasts.append(b.last_offset)
            self._cache.assign(b.epoch, b.base_offset)
        self.end_offset = end

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        """Encoded whole batches from the one containing ``start_offset``, at least one, then
        as many as fit in ``max_bytes`` (bytes); b"" at or past the end; ValueError below the
        log start."""
        if start_offset >= self.end_offset:
            return b""
        if start_offset < self.start_offset:
            raise ValueError(f"offset {start_offset} is below the log start {self.start_offset}")
        i = bisect_left(self._lasts, start_offset)
        out = [self._batches[i].data]
        total = len(out[0])
        for b in self._batches[i + 1 :]:
            if total + len(b.data) > max_bytes:
                break
            out.append(b.data)
            total += len(b.data)
        return b"".join(out)

    def batches(self, start_offset: int, end_offset: int) -> Iterator[Batch]:
        """Batches overlapping ``[start_offset, end_offset)``, not below the log start."""
        start_offset = max(start_offset, self.start_offset)
        lo = bisect_left(self._lasts, start_offset)
        hi = bisect_left(self._bases, min(end_offset, self.end_offset))
        return iter(self._batches[lo:hi])

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at and above ``offset``; an offset inside a batch removes that
        batch (Kafka truncates at batch boundaries). ValueError below the log start."""
        if offset < self.start_offset:
            raise ValueError(f"cannot truncate to {offset}, below log start {self.start_offset}")
        if offset >= self.end_offset:
            return
        i = bisect_left(self._lasts, offset)
        new_end = self._bases[i]
        del self._batches[i:], self._bases[i:], self._lasts[i:]
        self._cache.truncate_from_end(new_end)
        self.end_offset = new_end
        self.start_offset = min(self.start_offset, new_end)
        self.flushed_offset = min(self.flushed_offset, new_end)

    def flush(self) -> None:
        """Everything appended so far becomes durable: ``flushed_offset = end_offset``."""
        self.flushed_offset = self.end_offset

    # ---- snapshots

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        """Frozen snapshots, oldest first (by offset, then epoch)."""
        return list(self._ids)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The newest frozen snapshot id."""
        return self._ids[-1] if self._ids else None

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The oldest frozen snapshot id."""
        return self._ids[0] if self._ids else None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshotReader | None:
        """A reader of a frozen snapshot, None if there is none."""
        data = self._snapshots.get(snapshot_id)
        return None if data is None else MemorySnapshotReader(snapshot_id, data)

    def create_snapshot(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshotWriter:
        """A writer for a new snapshot (the id is not validated)."""
        return MemorySnapshotWriter(self, snapshot_id)

    def _on_frozen(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        if snapshot_id not in self._snapshots:
            i = bisect_right([_skey(s) for s in self._ids], _skey(snapshot_id))
            self._ids.insert(i, snapshot_id)
        self._snapshots[snapshot_id] = data

    def _forget(self, ids: Sequence[OffsetAndEpoch]) -> None:
        for s in ids:
            del self._snapshots[s]
            self._ids.remove(s)

    def truncate_to_latest_snapshot(self) -> bool:
        """If the latest snapshot is past the log (epoch > last log epoch, 0 when empty, or same
        epoch and offset > ``end_offset``): empty the log, restart it at the snapshot offset
        (start = end = flushed), forget older snapshots; returns whether it did."""
        latest = self.latest_snapshot_id()
        if latest is None:
            return False
        last_epoch = self._cache.latest_epoch() or 0
        if not (
            latest.epoch > last_epoch
            or (latest.epoch == last_epoch and latest.offset > self.end_offset)
        ):
            return False
        self._batches.clear()
        self._bases.clear()
        self._lasts.clear()
        self._cache.clear()
        self.start_offset = self.end_offset = self.flushed_offset = latest.offset
        self._forget([s for s in self._ids if s != latest])
        return True

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """If ``snapshot_id`` exists and ``start_offset < snapshot_id.offset <= latest snapshot
        offset`` (and ``<= end_offset``): move the log start to it, drop the batches wholly
        below it and the older snapshots; returns whether the start moved."""
        latest = self.latest_snapshot_id()
        if (
            latest is None
            or snapshot_id not in self._snapshots
            or not (self.start_offset < snapshot_id.offset <= latest.offset)
            or snapshot_id.offset > self.end_offset
        ):
            return False
        self.start_offset = snapshot_id.offset
        self._cache.truncate_from_start(snapshot_id.offset)
        n = bisect_left(self._lasts, snapshot_id.offset)
        del self._batches[:n], self._bases[:n], self._lasts[:n]
        self._forget([s for s in self._ids if _skey(s) < _skey(snapshot_id)])
        return True

    def size_in_bytes(self) -> int:
        """Total bytes of the batches held. The file log counts whole segments, which may still
        hold batches below the log start; this log drops those at once."""
        return sum(len(b.data) for b in self._batches)

    def close(self) -> None:
        """Nothing to release."""


class MemoryQuorumStateStore:
    """:class:`~kafka_rpc.raft.api.QuorumStateStore` in memory: :meth:`write` is durable at
    once (it survives :meth:`MemoryLog.crash`, which does not touch it)."""

    def __init__(self) -> None:
        self._state: ElectionState | None = None
        self.writes = 0  # how many times write() was called

    def read(self) -> ElectionState | None:
        """The last written state, None if never written."""
        return self._state

    def write(self, state: ElectionState) -> None:
        """Persist ``state`` (at once)."""
        self._state = state
        self.writes += 1


def _skey(s: OffsetAndEpoch) -> tuple[int, int]:
    return (s.offset, s.epoch)
