"""The Raft log of one partition on disk, in Kafka's formats (Kafka ``KafkaMetadataLog`` over
``UnifiedLog``, with ``FileRawSnapshotWriter``/``FileRawSnapshotReader`` and ``Snapshots``).

One directory (``<log.dir>/__cluster_metadata-0/``) holds:

- segment files ``%020d.log`` named by their base offset, each a concatenation of RecordBatch v2
  batches (what Kafka's ``DumpLogSegments`` reads). There are no ``.index``/``.timeindex`` files:
  the positions of the batches are indexed in memory when the log is opened. As in Kafka there is
  always an active (last) segment, possibly empty;
- snapshots ``%020d-%010d.checkpoint`` (end offset exclusive, epoch), written as
  ``%020d-%010d-<random>.checkpoint.part`` and renamed when frozen;
- ``leader-epoch-checkpoint``: the leader-epoch cache in Kafka's ``LeaderEpochCheckpointFile``
  format (a version line ``0``, a count line, then one ``<epoch> <start offset>`` line per
  entry), rewritten atomically (temp file, fsync, rename) whenever the cache changes: a new
  epoch appended, a truncation at either end. It is for Kafka's tools and for a Kafka process
  opening the directory: this log rebuilds the cache from the batches when it opens.

Appends are written to the page cache at once (no fsync); :meth:`FileLog.flush` makes them
durable. The batches appended last (up to ``tail_cache_bytes``) are also kept decoded in memory,
so the state machine's delivery of what was just appended (the leader's own batches, the
follower's fetched ones) reads neither the file nor the CRC again.

Opening the log recovers it: a torn, corrupt (CRC32C), non-contiguous or epoch-decreasing batch
ends the log, its segment is truncated there and later segments are
deleted (Kafka ``LogLoader.recoverLog``); then the snapshots are recovered
(``KafkaMetadataLog.recoverSnapshots``).

Deletions happen at once: Kafka renames segments and snapshots to ``.deleted`` and deletes them
``file.delete.delay.ms`` later, so that open readers keep working; here an open
:class:`FileRawSnapshotReader` keeps its file descriptor, which POSIX keeps readable after unlink.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import struct
import tempfile
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from crc32c import crc32c

from kafka_rpc.protocol.record_batch import BATCH_OVERHEAD, Batch, decode_batches
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.epoch_cache import (
    EpochCache,
    check_append,
    end_offset_for_epoch,
    last_fetched_epoch,
)
from kafka_rpc.storage.durable import atomic_write as _atomic_write
from kafka_rpc.storage.durable import fsync_dir as _fsync_dir

__all__ = [
    "FileLog",
    "FileRawSnapshotReader",
    "FileRawSnapshotWriter",
    "FlushTicket",
    "LogStateError",
    "segment_path",
    "snapshot_path",
]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 1 << 30  # metadata.log.segment.bytes
DEFAULT_TAIL_CACHE_BYTES = 8 << 20  # decoded batches kept after an append (bytes of batch data)

_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
EPOCH_CHECKPOINT_NAME = "leader-epoch-checkpoint"  # LeaderEpochCheckpointFile
_SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_PART_SUFFIX = ".checkpoint.part"
_DELETED_SUFFIX = ".deleted"
# baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32
_FRAME = struct.Struct(">qiibI")
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23
_LOG_OVERHEAD = 12
_CRC_START = 21


class LogStateError(RuntimeError):
    """The directory's segments and snapshots are inconsistent (Kafka IllegalStateException)."""


def segment_path(directory: Path, base_offset: int) -> Path:
    """``<dir>/%020d.log`` (Kafka ``LogFileUtils.logFile``)."""
    return directory / f"{base_offset:020d}.log"


def snapshot_path(directory: Path, snapshot_id: OffsetAndEpoch) -> Path:
    """``<dir>/%020d-%010d.checkpoint`` (Kafka ``Snapshots.snapshotPath``)."""
    return directory / f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}.checkpoint"


def _pread_all(fd: int, n: int, pos: int) -> bytes:
    data = os.pread(fd, n, pos)
    if len(data) == n:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = os.pread(fd, n - got, pos + got)
        if not more:
            raise OSError(f"short read: {got} of {n} bytes at position {pos}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _pwrite_all(fd: int, data: bytes, pos: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, pos)
        view = view[n:]
        pos += n


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Segment:
    """One ``.log`` file and the in-memory index of its batches."""

    __slots__ = ("base", "bases", "ends", "fd", "lasts", "path", "positions", "size")

    def __init__(self, path: Path, base: int, fd: int) -> None:
        self.path = path
        self.base = base
        self.fd = fd
        self.size = 0  # bytes
        self.positions: list[int] = []  # file position of each batch
        self.ends: list[int] = []  # file position just after each batch
        self.bases: list[int] = []  # base offset of each batch
        self.lasts: list[int] = []  # last offset (inclusive) of each batch

    def add(self, position: int, size: int, base: int, last: int) -> None:
        self.positions.append(position)
        self.ends.append(position + size)
        self.bases.append(base)
        self.lasts.append(last)
        self.size = position + size

    def cut(self, index: int) -> None:
        """Forget batches ``index`` and later (the file is truncated by the caller)."""
        self.size = self.positions[index] if index < len(self.positions) else self.size
        del self.positions[index:], self.ends[index:], self.bases[index:], self.lasts[index:]


class FileRawSnapshotReader:
    """A frozen snapshot file (Kafka ``FileRawSnapshotReader``). Holds its file open, so it stays
    readable if the snapshot is deleted meanwhile; :meth:`close` releases it."""

    def __init__(self, path: Path, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size  # bytes

    def read(self, position: int, max_bytes: int) -> bytes:
        """Bytes ``[position, position + max_bytes)`` of the file, cut at its end (b"" at or past
        the end). Positions and sizes in bytes (Kafka ``FileRawSnapshotReader.slice``)."""
        if position < 0 or max_bytes < 0:
            raise ValueError(f"negative position {position} or max_bytes {max_bytes}")
        if self._fd is None:
            raise ValueError(f"snapshot reader {self.path} is closed")
        n = min(max_bytes, self.size - position)
        if n <= 0:
            return b""
        return _pread_all(self._fd, n, position)

    def batches(self) -> Iterator[Batch]:
        """Every batch of the snapshot, decoded and CRC-checked; raises CorruptRecordError on
        any damage, including a partial batch at the end (Kafka ``RecordsSnapshotReader``)."""
        return iter(decode_batches(self.read(0, self.size)))

    def close(self) -> None:
        """Release the file descriptor (Kafka ``FileRawSnapshotReader.close``)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


_WRITE_BEHIND_BYTES = 1 << 20  # a snapshot piece this large is written by a thread
_MAX_PENDING = 2  # pieces in flight to that thread (back-pressure)


class FileRawSnapshotWriter:
    """A snapshot being written (Kafka ``FileRawSnapshotWriter``): a temp file
    ``%020d-%010d-<random>.checkpoint.part`` beside the segments, renamed to
    ``%020d-%010d.checkpoint`` by :meth:`freeze`."""

    def __init__(
        self,
        directory: Path,
        snapshot_id: OffsetAndEpoch,
        on_frozen: Callable[[OffsetAndEpoch], None] | None = None,
    ) -> None:
        self.snapshot_id = snapshot_id
        self.directory = directory
        self.size = 0  # bytes written so far
        self._on_frozen = on_frozen
        prefix = f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}-"
        fd, name = tempfile.mkstemp(suffix=_PART_SUFFIX, prefix=prefix, dir=directory)
        self._fd: int | None = fd
        self.path = Path(name)  # the .part file until frozen
        self.frozen = False
        # write-behind for large pieces (a FetchSnapshot download): one thread writes them in
        # order while the event loop fetches the next piece; at most _MAX_PENDING in flight
        self._writer: ThreadPoolExecutor | None = None
        self._pending: deque[Future] = deque()

    def append(self, data: bytes) -> None:
        """Append ``data`` (encoded record batches, bytes) to the part file (no fsync).
        Pieces of at least 1 MiB are written by a background thread, in order, at most
        ``_MAX_PENDING`` at a time; :meth:`freeze` waits for them. ``size`` counts the bytes
        accepted. A failed background write raises from a later append or from freeze."""
        if self.frozen or self._fd is None:
            raise ValueError(f"snapshot {self.snapshot_id} is frozen or closed")
        if self._writer is None and len(data) < _WRITE_BEHIND_BYTES:
            _write_all(self._fd, data)
        else:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="snapshot-writer")
            while self._pending and (self._pending[0].done() or
                                     len(self._pending) >= _MAX_PENDING):  # fmt: skip
                self._pending.popleft().result()
            self._pending.append(self._writer.submit(_write_all, self._fd, data))
        self.size += len(data)

    def _drain(self) -> None:
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None

    def freeze(self, notify: bool = True) -> None:
        """fsync the part file, close it, make it read-only, rename it atomically to
        ``.checkpoint`` and fsync the directory; the snapshot then exists for the log (its
        :meth:`FileLog.snapshot_ids`), at once or, with ``notify=False`` (the file work done on
        another thread), once :meth:`notify_frozen` is called on the log's thread."""
        if self.frozen or self._fd is None:
            raise ValueError(f"snapshot {self.snapshot_id} is frozen or closed")
        self._drain()
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        os.chmod(self.path, 0o444)
        final = snapshot_path(self.directory, self.snapshot_id)
        os.replace(self.path, final)
        _fsync_dir(self.directory)
        self.path = final
        self.frozen = True
        if notify:
            self.notify_frozen()

    def notify_frozen(self) -> None:
        """Tell the log that this frozen snapshot exists (see :meth:`freeze`)."""
        if self.frozen and self._on_frozen is not None:
            self._on_frozen(self.snapshot_id)

    def close(self) -> None:
        """Without :meth:`freeze`: delete the part file (abort). After it: nothing."""
        with contextlib.suppress(OSError):
            self._drain()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self.frozen:
            self.path.unlink(missing_ok=True)


class FlushTicket:
    """One flush in flight (:meth:`FileLog.begin_flush`): duplicated descriptors of the segments
    written since the previous flush, the directory if files were created or deleted, and the
    log end offset (exclusive) those writes reach."""

    __slots__ = ("_fds", "directory", "end_offset", "segment_bases", "truncations")

    def __init__(
        self,
        fds: list[int],
        directory: Path | None,
        end_offset: int,
        truncations: int,
        segment_bases: tuple[int, ...],
    ) -> None:
        self._fds = fds
        self.directory = directory
        self.end_offset = end_offset
        self.truncations = truncations
        self.segment_bases = segment_bases

    def sync(self) -> None:
        """fsync the segments, then the directory (blocking; safe on any thread). Raises
        OSError as ``os.fsync`` does."""
        for fd in self._fds:
            os.fsync(fd)
        if self.directory is not None:
            _fsync_dir(self.directory)

    def close(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)


class FileLog:
    """:class:`~kafka_rpc.raft.api.ReplicatedLog` on disk (Kafka ``KafkaMetadataLog``).

    ``start_offset``, ``end_offset`` and ``flushed_offset`` are offsets (``end`` exclusive);
    ``segment_bytes`` is the size in bytes above which a new segment is rolled
    (``metadata.log.segment.bytes``, default 1 GiB); ``tail_cache_bytes`` bounds the encoded size
    of the most recently appended batches kept decoded for :meth:`batches` (0: none; at least
    the last appended batch is kept otherwise)."""

    def __init__(
        self,
        directory: Path | str,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        tail_cache_bytes: int = DEFAULT_TAIL_CACHE_BYTES,
    ) -> None:
        """Open (creating it if needed) and recover the partition directory: segments first
        (Kafka ``LogLoader``), then snapshots (``KafkaMetadataLog.recoverSnapshots``), then
        :meth:`truncate_to_latest_snapshot`. Raises :class:`LogStateError` when the log starts
        above 0 with no snapshot at or beyond its start."""
        if segment_bytes < BATCH_OVERHEAD:
            raise ValueError(f"segment_bytes {segment_bytes} is below one batch")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.tail_cache_bytes = tail_cache_bytes
        # the last appended batches, contiguous and ending at end_offset (or empty)
        self._tail: deque[Batch] = deque()
        self._tail_bytes = 0
        self._segments: list[_Segment] = []
        self._seg_bases: list[int] = []
        self._snapshots: list[OffsetAndEpoch] = []  # sorted by (offset, epoch)
        self._cache = EpochCache()
        self._epoch_file: list[tuple[int, int]] | None = None  # entries last written
        self._dirty: set[int] = set()  # base offsets of segments written since the last flush
        self._dir_dirty = False
        self._truncations = 0  # bumped by every truncation: an fsync begun before is stale
        self._closed = False
        self.start_offset = 0
        self.end_offset = 0
        self.flushed_offset = 0

        seg_bases: list[int] = []
        snapshot_ids: list[OffsetAndEpoch] = []
        for p in self.directory.iterdir():
            name = p.name
            if name.endswith(_DELETED_SUFFIX) or name.endswith(_PART_SUFFIX):
                log.info("deleting leftover file %s", p)
                p.unlink(missing_ok=True)
                self._dir_dirty = True
            elif m := _SEGMENT_RE.match(name):
                seg_bases.append(int(m.group(1)))
            elif m := _SNAPSHOT_RE.match(name):
                snapshot_ids.append(OffsetAndEpoch(int(m.group(1)), int(m.group(2))))
        seg_bases.sort()
        self._recover_segments(seg_bases)

        if self._segments:
            self.start_offset = self._segments[0].base
        else:
            self.start_offset = max((s.offset for s in snapshot_ids), default=0)
            self._new_segment(self.start_offset)
            self.end_offset = self.start_offset
        self.flushed_offset = self.end_offset

        # KafkaMetadataLog.recoverSnapshots
        keep = sorted((s for s in snapshot_ids if s.offset >= self.start_offset), key=_skey)
        if self.start_offset > 0 and not any(s.offset >= self.start_offset for s in keep):
            self._close_fds()
            raise LogStateError(
                f"inconsistent snapshot state in {self.directory}: the log starts at offset "
                f"{self.start_offset} but no snapshot is at or beyond it (latest: "
                f"{max(snapshot_ids, key=_skey, default=None)})"
            )
        for s in snapshot_ids:
            if s.offset < self.start_offset:
                log.info("deleting snapshot %s below the log start offset", s)
                snapshot_path(self.directory, s).unlink(missing_ok=True)
                self._dir_dirty = True
        self._snapshots = keep
        self.truncate_to_latest_snapshot()
        self.flush()
        self._write_epoch_checkpoint()

    def _write_epoch_checkpoint(self) -> None:
        """Rewrite ``leader-epoch-checkpoint`` (Kafka's format, see the module docstring) when
        the cache's entries differ from what the file holds."""
        entries = self._cache.entries
        if entries == self._epoch_file:
            return
        lines = [f"{e} {s}\n" for e, s in entries]
        _atomic_write(self.directory / EPOCH_CHECKPOINT_NAME,
                      f"0\n{len(entries)}\n" + "".join(lines))  # fmt: skip
        self._epoch_file = entries

    # ---- recovery

    def _recover_segments(self, seg_bases: list[int]) -> None:
        expected: int | None = None
        last_epoch = -1
        for i, base in enumerate(seg_bases):
            path = segment_path(self.directory, base)
            if expected is not None and base != expected:
                log.warning(
                    "%s: segment base offset %d does not follow the log end offset %d; "
                    "the log ends before it", path, base, expected,
                )  # fmt: skip
                self._delete_files(seg_bases[i:])
                return
            if expected is None:
                expected = base
            fd = os.open(path, os.O_RDWR)
            seg = _Segment(path, base, fd)
            file_size = os.fstat(fd).st_size
            reason = ""
            if file_size:
                with mmap.mmap(fd, file_size, access=mmap.ACCESS_READ) as mm:
                    expected, last_epoch, reason = self._scan(mm, seg, expected, last_epoch)
            self._segments.append(seg)
            self._seg_bases.append(base)
            if seg.size < file_size:
                log.warning(
                    "%s: %s at file position %d (offset %d); truncating %d bytes and deleting "
                    "%d later segment(s)", path, reason, seg.size, expected,
                    file_size - seg.size, len(seg_bases) - i - 1,
                )  # fmt: skip
                os.ftruncate(fd, seg.size)
                os.fsync(fd)
                self._delete_files(seg_bases[i + 1 :])
                break
        if self._segments:
            self.end_offset = expected if expected is not None else 0

    def _scan(
        self, data: mmap.mmap, seg: _Segment, expected: int, last_epoch: int
    ) -> tuple[int, int, str]:
        """Index the valid batches of ``data`` into ``seg``; returns the next expected offset,
        the last epoch and why the scan stopped early ("" if it reached the end)."""
        n = len(data)
        pos = 0
        view = memoryview(data)
        try:
            while pos < n:
                if n - pos < BATCH_OVERHEAD:
                    return expected, last_epoch, "a torn batch header"
                base, length, epoch, magic, crc = _FRAME.unpack_from(data, pos)
                size = length + _LOG_OVERHEAD
                if length < BATCH_OVERHEAD - _LOG_OVERHEAD:
                    return expected, last_epoch, f"a bad batch length {length}"
                if pos + size > n:
                    return expected, last_epoch, "a torn batch"
                if magic != 2:
                    return expected, last_epoch, f"a batch with magic {magic}"
                if crc32c(view[pos + _CRC_START : pos + size]) != crc:
                    return expected, last_epoch, "a CRC32C mismatch"
                (last_delta,) = _LAST_OFFSET_DELTA.unpack_from(data, pos + 23)
                if last_delta < 0:
                    return expected, last_epoch, f"a bad last offset delta {last_delta}"
                if base != expected:
                    return expected, last_epoch, f"a batch at offset {base}, expected {expected}"
                if epoch < last_epoch:
                    return expected, last_epoch, f"epoch {epoch} after epoch {last_epoch}"
                self._cache.assign(epoch, base)
                last_epoch = max(last_epoch, epoch)
                seg.add(pos, size, base, base + last_delta)
                expected = base + last_delta + 1
                pos += size
            return expected, last_epoch, ""
        finally:
            view.release()

    def _delete_files(self, bases: Sequence[int]) -> None:
        for b in reversed(bases):
            segment_path(self.directory, b).unlink(missing_ok=True)
            self._dir_dirty = True

    # ---- segments

    def _new_segment(self, base: int) -> _Segment:
        path = segment_path(self.directory, base)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg = _Segment(path, base, fd)
        self._segments.append(seg)
        self._seg_bases.append(base)
        self._dir_dirty = True
        return seg

    def _drop_segments_from(self, index: int) -> None:
        """Close and delete segments ``index`` and later (highest first)."""
        for seg in reversed(self._segments[index:]):
            os.close(seg.fd)
            seg.path.unlink(missing_ok=True)
            self._dirty.discard(seg.base)
        del self._segments[index:], self._seg_bases[index:]
        self._dir_dirty = True

    def _close_fds(self) -> None:
        for seg in self._segments:
            os.close(seg.fd)
        self._segments.clear()
        self._seg_bases.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self.directory} is closed")

    # ---- ReplicatedLog

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch; with no batches the latest snapshot's epoch; else 0
        (Kafka ``KafkaMetadataLog.lastFetchedEpoch``)."""
        return last_fetched_epoch(self._cache, self.latest_snapshot_id())

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka ``KafkaMetadataLog.endOffsetForEpoch`` (``UnifiedLog.endOffsetForEpoch``,
        ``LeaderEpochFileCache.endOffsetFor``): the largest epoch <= ``epoch`` in the log and
        its end offset (exclusive: where the next epoch starts, or the log end offset for the
        latest epoch). An epoch below every epoch of the log answers the oldest snapshot id when
        that epoch's answer is the snapshot's offset (the log start), else
        ``(first epoch start offset, epoch)``; an empty log answers
        ``(end_offset, last_fetched_epoch())``: (0, 0) without a snapshot. See
        :func:`kafka_rpc.raft.epoch_cache.end_offset_for_epoch`."""
        return end_offset_for_epoch(
            self._cache, epoch, self.end_offset, self.earliest_snapshot_id(),
            self.latest_snapshot_id(),
        )  # fmt: skip

    def append(self, batches: Sequence[Batch]) -> None:
        """Append whole batches (Kafka ``UnifiedLog.appendAsLeader``/``appendAsFollower``): the
        first must start at ``end_offset``, each next one right after the previous one, epochs
        never decreasing; ValueError otherwise (nothing is written then). The bytes go to the
        active segment with a plain write (page cache, no fsync); a new segment is rolled first
        when the active one is not empty and the batch would take it past ``segment_bytes``."""
        self._check_open()
        if not batches:
            return
        expected = check_append(batches, self.end_offset, self._cache)
        epoch_before = self._cache.latest_epoch()

        seg = self._segments[-1]
        chunks: list[bytes] = []
        write_pos = seg.size
        for b in batches:
            size = len(b.data)
            if seg.size > 0 and seg.size + size > self.segment_bytes:
                if chunks:
                    _pwrite_all(seg.fd, b"".join(chunks), write_pos)
                    self._dirty.add(seg.base)
                    chunks = []
                seg = self._new_segment(b.base_offset)
                write_pos = 0
            chunks.append(b.data)
            seg.add(seg.size, size, b.base_offset, b.last_offset)
            self._cache.assign(b.epoch, b.base_offset)
        if chunks:
            _pwrite_all(seg.fd, b"".join(chunks), write_pos)
            self._dirty.add(seg.base)
        self.end_offset = expected
        if self._cache.latest_epoch() != epoch_before:
            self._write_epoch_checkpoint()
        if self.tail_cache_bytes > 0:
            tail = self._tail
            for b in batches:
                tail.append(b)
                self._tail_bytes += len(b.data)
            while self._tail_bytes > self.tail_cache_bytes and len(tail) > 1:
                self._tail_bytes -= len(tail.popleft().data)

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        """Encoded batches (bytes) from the batch containing ``start_offset``: whole batches
        only, at least one even if larger than ``max_bytes`` (bytes), then as many as fit;
        b"" at or past ``end_offset``. May span segments (one read per segment). Reading below
        ``start_offset`` raises ValueError (Kafka OffsetOutOfRangeException). Kafka
        ``UnifiedLog.read``."""
        self._check_open()
        if start_offset >= self.end_offset:
            return b""
        if start_offset < self.start_offset:
            raise ValueError(f"offset {start_offset} is below the log start {self.start_offset}")
        si = bisect_right(self._seg_bases, start_offset) - 1
        bi = bisect_left(self._segments[si].lasts, start_offset)
        out: list[bytes] = []
        total = 0
        while si < len(self._segments):
            seg = self._segments[si]
            if bi < len(seg.positions):
                pos0 = seg.positions[bi]
                j = bisect_right(seg.ends, pos0 + max_bytes - total) - 1
                if j < bi:
                    if total:
                        break
                    j = bi
                out.append(_pread_all(seg.fd, seg.ends[j] - pos0, pos0))
                total += seg.ends[j] - pos0
                if j < len(seg.positions) - 1:
                    break
            si += 1
            bi = 0
        return b"".join(out)

    def batches(self, start_offset: int, end_offset: int) -> Iterator[Batch]:
        """Decoded batches (``decode_batches``, CRC checked) overlapping offsets
        ``[start_offset, end_offset)``, not below the log start offset."""
        self._check_open()
        start_offset = max(start_offset, self.start_offset)
        end_offset = min(end_offset, self.end_offset)
        if start_offset >= end_offset:
            return iter(())
        tail = self._tail
        if tail and tail[0].base_offset <= start_offset:
            return self._tail_batches(start_offset, end_offset)
        return self._batches(start_offset, end_offset)

    def _tail_batches(self, start_offset: int, end_offset: int) -> Iterator[Batch]:
        """From the tail cache (its first batch starts at or below ``start_offset``): the
        batches with ``last_offset >= start_offset`` and ``base_offset < end_offset``."""
        tail = self._tail
        i = len(tail)
        while i > 0 and tail[i - 1].last_offset >= start_offset:
            i -= 1
        out = []
        for k in range(i, len(tail)):
            b = tail[k]
            if b.base_offset >= end_offset:
                break
            out.append(b)
        return iter(out)

    def _drop_tail(self) -> None:
        self._tail.clear()
        self._tail_bytes = 0

    def _batches(self, start_offset: int, end_offset: int) -> Iterator[Batch]:
        si = max(bisect_right(self._seg_bases, start_offset) - 1, 0)
        for seg in self._segments[si:]:
            if seg.base >= end_offset:
                break
            lo = bisect_left(seg.lasts, start_offset)
            hi = bisect_left(seg.bases, end_offset)
            if lo >= hi:
                continue
            pos0 = seg.positions[lo]
            yield from decode_batches(_pread_all(seg.fd, seg.ends[hi - 1] - pos0, pos0))

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at and above ``offset`` (Kafka ``UnifiedLog.truncateTo``).
        Kafka truncates at batch boundaries: an ``offset`` inside a batch removes that whole
        batch, so ``end_offset`` becomes its base offset. Segments above are deleted, the one
        holding the cut is truncated (``os.ftruncate``; durable at the next :meth:`flush`).
        ``offset`` below ``start_offset`` raises ValueError; at or past ``end_offset`` it does
        nothing."""
        self._check_open()
        if offset < self.start_offset:
            raise ValueError(f"cannot truncate to {offset}, below log start {self.start_offset}")
        if offset >= self.end_offset:
            return
        si = bisect_right(self._seg_bases, offset) - 1
        seg = self._segments[si]
        bi = bisect_left(seg.lasts, offset)
        new_end = seg.bases[bi] if bi < len(seg.bases) else offset
        self._drop_segments_from(si + 1)
        seg.cut(bi)
        os.ftruncate(seg.fd, seg.size)
        self._dirty.add(seg.base)
        self._cache.truncate_from_end(new_end)
        tail = self._tail
        while tail and tail[-1].base_offset >= new_end:
            self._tail_bytes -= len(tail.pop().data)
        self.end_offset = new_end
        self.start_offset = min(self.start_offset, new_end)
        self.flushed_offset = min(self.flushed_offset, new_end)
        self._truncations += 1
        self._write_epoch_checkpoint()

    def flush(self) -> None:
        """fsync every segment written or truncated since the last flush, and the directory
        when segment files were created or deleted; then ``flushed_offset = end_offset``
        (Kafka ``UnifiedLog.flush``). :meth:`begin_flush` is the same in three steps, so the
        fsyncs can run on another thread."""
        ticket = self.begin_flush()
        ok = False
        try:
            ticket.sync()
            ok = True
        finally:
            self.end_flush(ticket, ok)

    def begin_flush(self) -> FlushTicket:
        """Take everything appended so far for an fsync: returns a :class:`FlushTicket` whose
        ``sync()`` (any thread; blocking) fsyncs what was written up to now, and which
        :meth:`end_flush` (the log's own thread, afterwards) turns into ``flushed_offset``.
        Appends, truncations and segment deletions may go on meanwhile: the ticket holds its own
        duplicates of the file descriptors, and a truncation before ``end_flush`` keeps the
        flushed offset where it is (the next flush covers the cut)."""
        self._check_open()
        fds: list[int] = []
        try:
            for seg in self._segments:
                if seg.base in self._dirty:
                    fds.append(os.dup(seg.fd))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        ticket = FlushTicket(
            fds,
            self.directory if self._dir_dirty else None,
            self.end_offset,
            self._truncations,
            tuple(self._dirty),
        )
        self._dirty.clear()
        self._dir_dirty = False
        return ticket

    def end_flush(self, ticket: FlushTicket, ok: bool) -> None:
        """Conclude ``ticket``: if its ``sync()`` succeeded (``ok``) and nothing was truncated
        since :meth:`begin_flush`, ``flushed_offset`` becomes the end offset of that moment;
        otherwise its segments (and the directory) are marked for the next flush again.
        Closes the ticket's descriptors if ``sync()`` did not."""
        ticket.close()
        if not ok:
            live = set(self._seg_bases)
            self._dirty.update(b for b in ticket.segment_bases if b in live)
            self._dir_dirty = self._dir_dirty or ticket.directory is not None
            return
        if ticket.truncations == self._truncations and ticket.end_offset > self.flushed_offset:
            self.flushed_offset = min(ticket.end_offset, self.end_offset)

    # ---- snapshots

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        """Complete (frozen) snapshots, oldest first (ordered by offset, then epoch, as Kafka
        ``KafkaMetadataLog``'s snapshot TreeMap)."""
        return list(self._snapshots)

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The newest frozen snapshot id (Kafka ``KafkaMetadataLog.latestSnapshotId``)."""
        return self._snapshots[-1] if self._snapshots else None

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The oldest frozen snapshot id (Kafka ``KafkaMetadataLog.earliestSnapshotId``)."""
        return self._snapshots[0] if self._snapshots else None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotReader | None:
        """A reader of the frozen snapshot ``snapshot_id``, None if there is none (Kafka
        ``KafkaMetadataLog.readSnapshot``). The caller may :meth:`FileRawSnapshotReader.close`
        it; it stays readable if the snapshot is deleted meanwhile."""
        if snapshot_id not in self._snapshots:
            return None
        try:
            return FileRawSnapshotReader(snapshot_path(self.directory, snapshot_id), snapshot_id)
        except FileNotFoundError:
            return None

    def create_snapshot(self, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotWriter:
        """A writer for snapshot ``snapshot_id`` on a ``.checkpoint.part`` temp file (Kafka
        ``FileRawSnapshotWriter.create``); the id is not validated. It becomes one of
        :meth:`snapshot_ids` when frozen."""
        self._check_open()
        return FileRawSnapshotWriter(self.directory, snapshot_id, self._on_snapshot_frozen)

    def _on_snapshot_frozen(self, snapshot_id: OffsetAndEpoch) -> None:
        if snapshot_id not in self._snapshots:
            self._snapshots.append(snapshot_id)
            self._snapshots.sort(key=_skey)

    def _delete_snapshots(self, ids: Sequence[OffsetAndEpoch]) -> None:
        for s in ids:
            snapshot_path(self.directory, s).unlink(missing_ok=True)
            self._snapshots.remove(s)
            self._dir_dirty = True

    def truncate_to_latest_snapshot(self) -> bool:
        """Kafka ``KafkaMetadataLog.truncateToLatestSnapshot``: if the latest snapshot is past
        the log (its epoch > the last log epoch, 0 for an empty log, or the same epoch and its
        offset > ``end_offset``), delete every segment, restart the log empty at the snapshot
        offset (``start_offset = end_offset = flushed_offset`` = it, with an empty active
        segment, fsynced with the directory) and delete the older snapshots. Returns whether it
        did."""
        self._check_open()
        latest = self.latest_snapshot_id()
        if latest is None:
            return False
        last_epoch = self._cache.latest_epoch() or 0
        if not (
            latest.epoch > last_epoch
            or (latest.epoch == last_epoch and latest.offset > self.end_offset)
        ):
            return False
        log.info("%s: truncating the log fully to snapshot %s", self.directory, latest)
        self._truncations += 1
        self._drop_segments_from(0)
        self._cache.clear()
        self._drop_tail()
        self._new_segment(latest.offset)
        self.start_offset = self.end_offset = latest.offset
        self._delete_snapshots([s for s in self._snapshots if s != latest])
        _fsync_dir(self.directory)
        self._dir_dirty = False
        self.flushed_offset = self.end_offset
        if not self._closed and self._epoch_file is not None:
            self._write_epoch_checkpoint()
        return True

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Kafka ``KafkaMetadataLog.deleteBeforeSnapshot``: only if ``snapshot_id`` exists and
        ``start_offset < snapshot_id.offset <= latest snapshot offset`` (and, as Kafka's
        ``maybeIncrementLogStartOffset`` requires, ``<= end_offset``): the log start offset
        becomes ``snapshot_id.offset``, segments whose batches are all below it are deleted
        (never the active one) and so are the snapshots older than ``snapshot_id``. Kafka
        renames them ``.deleted`` and deletes them later; this deletes them at once. Returns
        whether the start moved."""
        self._check_open()
        latest = self.latest_snapshot_id()
        if (
            latest is None
            or snapshot_id not in self._snapshots
            or not (self.start_offset < snapshot_id.offset <= latest.offset)
            or snapshot_id.offset > self.end_offset
        ):
            return False
        new_start = snapshot_id.offset
        self.start_offset = new_start
        self._cache.truncate_from_start(new_start)
        tail = self._tail
        while tail and tail[0].last_offset < new_start:
            self._tail_bytes -= len(tail.popleft().data)
        n = 0  # segments wholly below the new start: the next segment starts at or below it
        while n + 1 < len(self._segments) and self._segments[n + 1].base <= new_start:
            n += 1
        if n:
            doomed = self._segments[:n]
            for seg in doomed:
                os.close(seg.fd)
                seg.path.unlink(missing_ok=True)
                self._dirty.discard(seg.base)
            del self._segments[:n], self._seg_bases[:n]
            self._dir_dirty = True
        self._delete_snapshots([s for s in self._snapshots if _skey(s) < _skey(snapshot_id)])
        self._write_epoch_checkpoint()
        return True

    def size_in_bytes(self) -> int:
        """Total bytes of the segment files, not the snapshots (Kafka ``UnifiedLog.size``, what
        ``metadata.max.retention.bytes`` is checked against with the snapshots' sizes)."""
        return sum(seg.size for seg in self._segments)

    def close(self) -> None:
        """Flush (Kafka's ``FileRecords.close`` forces the channel) and close every file."""
        if self._closed:
            return
        self.flush()
        self._close_fds()
        self._drop_tail()
        self._closed = True


def _skey(s: OffsetAndEpoch) -> tuple[int, int]:
    """Kafka's snapshot order (``OffsetAndEpoch.compareTo``): offset, then epoch."""
    return (s.offset, s.epoch)
