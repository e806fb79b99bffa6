"""The seams of the Raft module: value types, the log and quorum-state store interfaces the sans-io
core reads and writes through, and the state machine (listener) interface.

The core (``kafka_rpc.raft.core``) never opens a file, a socket or reads a clock: it is handed a
:class:`ReplicatedLog` and a :class:`QuorumStateStore` (Kafka's ``ReplicatedLog`` and
``QuorumStateStore``; the file implementations are ``kafka_rpc.raft.file_log`` and
``kafka_rpc.raft.quorum_state``, the simulator's are ``kafka_rpc.raft.memory``), the time as an
argument of every call, and a seeded ``random.Random``.

Offsets are Kafka's: a batch covers ``[base_offset, last_offset]`` inclusive; ``end_offset`` (the
log end offset, LEO) and a snapshot id's ``offset`` are exclusive.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from kafka_rpc.protocol.record_batch import Batch

__all__ = [
    "METADATA_TOPIC_ID",
    "METADATA_TOPIC_NAME",
    "Batch",
    "ElectionState",
    "OffsetAndEpoch",
    "QuorumStateStore",
    "RawSnapshotReader",
    "RawSnapshotWriter",
    "ReplicatedLog",
    "StateMachine",
]

METADATA_TOPIC_NAME = "__cluster_metadata"
#: ``Uuid.METADATA_TOPIC_ID`` (Kafka's ONE_UUID, ``AAAAAAAAAAAAAAAAAAAAAQ``), KIP-516.
METADATA_TOPIC_ID = UUID(int=1)


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """Kafka's ``OffsetAndEpoch``; ordered by (epoch, offset) is NOT the dataclass order: use
    :meth:`key` for Raft's up-to-date comparison (epoch first, then offset)."""

    offset: int
    epoch: int

    def key(self) -> tuple[int, int]:
        return (self.epoch, self.offset)


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What ``quorum-state`` holds (Kafka's ``ElectionState``): -1 = unknown leader / no vote.
    ``voted_directory_id``: the directory id of the candidate voted for (None: none known);
    ``data_version``: the layout to write, 0 at kraft.version 0 (with ``voters``), 1 from
    kraft.version 1 (with ``votedDirectoryId``; Kafka ``KRaftVersion.quorumStateVersion``)."""

    epoch: int
    leader_id: int = -1
    voted_id: int = -1
    voters: tuple[int, ...] = ()
    voted_directory_id: UUID | None = None
    data_version: int = 0


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None:
        """The persisted state, or None when nothing was ever written."""

    def write(self, state: ElectionState) -> None:
        """Persist durably (write a temp file, fsync, rename) before returning."""


class RawSnapshotReader(Protocol):
    snapshot_id: OffsetAndEpoch
    size: int  # bytes

    def read(self, position: int, max_bytes: int) -> bytes:
        """Bytes ``[position, position + max_bytes)`` cut at the end of the file."""

    def batches(self) -> Iterator[Batch]:
        """Every batch of the snapshot in order (CRC checked; raises CorruptRecordError)."""


class RawSnapshotWriter(Protocol):
    snapshot_id: OffsetAndEpoch
    size: int  # bytes written so far

    def append(self, data: bytes) -> None: ...

    def freeze(self, notify: bool = True) -> None:
        """fsync, rename ``.checkpoint.part`` to ``.checkpoint``; the snapshot becomes visible."""

    def close(self) -> None:
        """Without freeze: delete the partial file (abort)."""


class ReplicatedLog(Protocol):
    """One partition's log and its snapshots (Kafka's ``ReplicatedLog`` / ``KafkaMetadataLog``).

    Appends go to the page cache (or memory) at once; :meth:`flush` makes everything appended so
    far durable and ``flushed_offset`` says how far that is. A crash loses what was appended after
    the last flush (the simulator's memory log does exactly that)."""

    start_offset: int  # log start offset (inclusive); moves only onto a snapshot id
    end_offset: int  # log end offset (exclusive)
    flushed_offset: int  # end offset known durable (<= end_offset)

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch; with an empty log, the latest snapshot's epoch; else 0."""

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """Kafka's ``endOffsetForEpoch``: the largest epoch <= ``epoch`` known to the log (or its
        snapshot) and the end offset (exclusive) of that epoch; an epoch at or below the oldest
        snapshot answers the snapshot id; nothing known answers (-1, -1)... for an empty log with
        no snapshot, (0, 0)."""

    def append(self, batches: Sequence[Batch]) -> None:
        """Append whole batches; the first must start at ``end_offset``. Raises ValueError
        otherwise."""

    def read(self, start_offset: int, max_bytes: int) -> bytes:
        """Encoded batches from the batch containing ``start_offset``, whole batches only, at
        least one batch even if larger than ``max_bytes``; b"" at or past the end."""

    def batches(self, start_offset: int, end_offset: int) -> Iterator[Batch]:
        """Decoded batches overlapping ``[start_offset, end_offset)``."""

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above ``offset`` (offset >= start_offset)."""

    def flush(self) -> None:
        """fsync what was appended; afterwards ``flushed_offset == end_offset``."""

    # ---- snapshots (files ``%020d-%010d.checkpoint`` beside the segments)
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        """Complete snapshots, oldest first."""

    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None: ...

    def create_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter:
        """A writer for a new snapshot (not validated: the caller checks the id)."""

    def truncate_to_latest_snapshot(self) -> bool:
        """If the latest snapshot is past the log (its epoch > last epoch, or same epoch and
        offset > end_offset): empty the log, restart it at the snapshot offset, forget older
        snapshots; returns whether it did."""

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Move the log start offset to ``snapshot_id.offset`` (a snapshot that exists, with
        start_offset < offset <= latest snapshot offset), drop segments wholly below it and
        older snapshots; returns whether it moved."""

    def size_in_bytes(self) -> int:
        """Bytes of the segments (for ``metadata.max.retention.bytes``)."""

    def close(self) -> None: ...


class StateMachine(Protocol):
    """What runs on the log (Kafka's ``RaftClient.Listener``); called on the driver's thread."""

    def handle_commit(self, batches: Sequence[Batch]) -> None:
        """Committed batches in offset order (control batches included, to skip)."""

    def handle_load_snapshot(self, reader: RawSnapshotReader) -> None:
        """Replace the whole state with the snapshot's (never called on the leader)."""

    def snapshot_records(self) -> Sequence[bytes]:
        """The committed state (as of the last ``handle_commit``/``handle_load_snapshot``) as
        framed metadata records, for a snapshot the core writes at that offset. A state
        machine may also have an ``in_transaction`` attribute: while it is true, the committed
        offset is not a stable one (inside a KIP-868 metadata transaction) and no snapshot is
        taken (Kafka snapshots at the last stable offset)."""

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        """The leader (-1: unknown) of ``epoch``; for this node only once it has replayed past
        the epoch start offset."""
