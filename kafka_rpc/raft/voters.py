"""KIP-853 voter sets: who votes at an offset of the log (Kafka ``VoterSet``,
``VoterSetHistory``, ``TreeMapLogHistory``, ``KRaftControlRecordStateMachine``).

* :class:`VoterNode`: one voter, keyed by (id, directory id); a zero directory id means
  "unknown" (Kafka ``ReplicaKey.of`` maps ``Uuid.ZERO_UUID`` to an empty directory), and then
  any directory of that id is the voter (``VoterSet.VoterNode.isVoter``).
* :class:`VoterSet`: an immutable mapping id -> :class:`VoterNode`, built from the static
  ``controller.quorum.voters`` (no directory ids, one endpoint on the default listener, kraft
  range 0..0: Kafka ``VoterSet.fromInetSocketAddresses``) or from a ``VotersRecord`` (every record
  carries the whole set), and written back to one (``VoterSet.toVotersRecord``).
* :class:`VoterSetHistory` and :class:`ControlRecordState`: offset -> voter set and offset ->
  kraft.version, floor look-ups, truncation on both ends, fed from control batches (the
  snapshot's records are registered at its last contained offset, so the bootstrap checkpoint
  ``00000000000000000000-0000000000.checkpoint`` registers at -1).
* :func:`bootstrap_checkpoint_bytes`: that bootstrap checkpoint with voters only, as Kafka 4.2's
  ``Formatter.writeDynamicQuorumSnapshot`` wrote it (Kafka 4.4's, with the bootstrap records
  too, is ``kafka_rpc.storage.bootstrap.encode_bootstrap_snapshot``).

Control record values are the message bodies at version 0 with no frame (Kafka
``ControlRecordUtils``); a control record of any other type than the five below (including the
transaction markers 0 and 1) is refused with :class:`ControlRecordError`, as Kafka's
``RecordsIterator.decodeControlRecord`` / ``ControlRecord`` throw IllegalArgumentException
"Unknown control record type".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import DecodeError
from kafka_rpc.protocol.record_batch import Batch, control_type, encode_control_batch

__all__ = [
    "KRAFT_VERSION",
    "KRAFT_VOTERS",
    "LEADER_CHANGE",
    "SNAPSHOT_FOOTER",
    "SNAPSHOT_HEADER",
    "ControlRecordError",
    "ControlRecordState",
    "VoterNode",
    "VoterSet",
    "VoterSetHistory",
    "bootstrap_checkpoint_bytes",
    "decode_control_records",
    "encode_voters_control_batch",
    "kraft_version_body",
    "voters_body",
]

log = logging.getLogger("kafka_rpc.raft")

#: Kafka ``ControlRecordType`` ids of the KRaft control records.
LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION, KRAFT_VOTERS = 2, 3, 4, 5, 6
_KNOWN_TYPES = {LEADER_CHANGE, SNAPSHOT_HEADER, SNAPSHOT_FOOTER, KRAFT_VERSION, KRAFT_VOTERS}
_MESSAGE_OF = {
    LEADER_CHANGE: "LeaderChangeMessage",
    SNAPSHOT_HEADER: "SnapshotHeaderRecord",
    SNAPSHOT_FOOTER: "SnapshotFooterRecord",
    KRAFT_VERSION: "KRaftVersionRecord",
    KRAFT_VOTERS: "VotersRecord",
}
_ZERO = UUID(int=0)


class ControlRecordError(ValueError):
    """A control record this replica cannot read: an unknown type, a missing key or value, or a
    body that does not decode (Kafka ``RecordsIterator.decodeControlRecord`` throws
    IllegalArgumentException for these)."""


# ====================================================================== voters
@dataclass(frozen=True)
class VoterNode:
    """One voter (Kafka ``VoterSet.VoterNode``): ``id``, ``directory_id`` (zero: unknown),
    ``endpoints`` listener name -> (host, port) in the order they were given, and the
    kraft.version range it supports (``kraft_min``..``kraft_max``)."""

    id: int
    directory_id: UUID = _ZERO
    endpoints: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    kraft_min: int = 0
    kraft_max: int = 0

    def __hash__(self) -> int:
        return hash((self.id, self.directory_id, tuple(self.endpoints.items()),
                     self.kraft_min, self.kraft_max))  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VoterNode):
            return NotImplemented
        return (
            self.id == other.id
            and self.directory_id == other.directory_id
            and dict(self.endpoints) == dict(other.endpoints)
            and (self.kraft_min, self.kraft_max) == (other.kraft_min, other.kraft_max)
        )

    def is_voter(self, replica_id: int, directory_id: UUID | None) -> bool:
        """Kafka ``VoterNode.isVoter``: the ids are equal and either this voter has no
        directory id or the directory ids are equal (None and zero are "no directory")."""
        if replica_id != self.id:
            return False
        if self.directory_id.int == 0:
            return True
        return directory_id is not None and directory_id == self.directory_id

    def address(self, listener: str) -> tuple[str, int] | None:
        return self.endpoints.get(listener)

    def supports(self, level: int) -> bool:
        return self.kraft_min <= level <= self.kraft_max


class VoterSet(Mapping[int, VoterNode]):
    """An immutable set of voters keyed by id (Kafka ``VoterSet``); the changing operations
    return a new set, or None when the change is not allowed."""

    __slots__ = ("_voters",)

    def __init__(self, voters: Iterable[VoterNode] = ()) -> None:
        self._voters: dict[int, VoterNode] = {}
        for v in voters:
            if v.id in self._voters:
                raise ValueError(f"voter id {v.id} appears twice")
            self._voters[v.id] = v

    # -- Mapping
    def __getitem__(self, voter_id: int) -> VoterNode:
        return self._voters[voter_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._voters)

    def __len__(self) -> int:
        return len(self._voters)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VoterSet):
            return NotImplemented
        return self._voters == other._voters

    def __hash__(self) -> int:
        return hash(frozenset(self._voters.values()))

    def __repr__(self) -> str:
        return f"VoterSet({sorted(self._voters.values(), key=lambda v: v.id)!r})"

    # -- construction
    @classmethod
    def from_static(cls, voters: Mapping[int, tuple[str, int]], listener_name: str) -> VoterSet:
        """Kafka ``VoterSet.fromInetSocketAddresses``: no directory ids, one endpoint on
        ``listener_name``, kraft.version range 0..0."""
        return cls(
            VoterNode(vid, _ZERO, {listener_name: (h, p)}, 0, 0)
            for vid, (h, p) in sorted(voters.items())
        )

    @classmethod
    def from_record(cls, rec: Any) -> VoterSet:
        """Kafka ``VoterSet.fromVotersRecord``."""
        return cls(
            VoterNode(
                v.voter_id,
                v.voter_directory_id,
                {e.name: (e.host, e.port) for e in v.endpoints},
                v.kraft_version_feature.min_supported_version,
                v.kraft_version_feature.max_supported_version,
            )
            for v in rec.voters
        )

    def to_record(self, version: int = 0) -> Any:
        """Kafka ``VoterSet.toVotersRecord``: a VotersRecord holding every voter (by id)."""
        m = codec.module("VotersRecord")
        return m.VotersRecord(
            version=version,
            voters=tuple(
                m.Voter(
                    voter_id=v.id,
                    voter_directory_id=v.directory_id,
                    endpoints=tuple(
                        m.Endpoint(name=n, host=h, port=p) for n, (h, p) in v.endpoints.items()
                    ),
                    kraft_version_feature=m.KRaftVersionFeature(
                        min_supported_version=v.kraft_min, max_supported_version=v.kraft_max
                    ),
                )
                for v in sorted(self._voters.values(), key=lambda v: v.id)
            ),
        )

    # -- changes (each returns a new set, or None)
    def add(self, node: VoterNode) -> VoterSet | None:
        """Kafka ``addVoter``: None when the id is already a voter (whatever its directory)."""
        if node.id in self._voters:
            return None
        return VoterSet([*self._voters.values(), node])

    def remove(self, voter_id: int, directory_id: UUID) -> VoterSet | None:
        """Kafka ``removeVoter``: None unless (id, directory id) is exactly a voter's key and
        the set keeps at least one voter."""
        old = self._voters.get(voter_id)
        if old is None or old.directory_id != directory_id or len(self._voters) <= 1:
            return None
        return VoterSet(v for v in self._voters.values() if v.id != voter_id)

    def update(self, node: VoterNode) -> VoterSet | None:
        """Kafka ``updateVoter``: replace the voter whose key matches ``node``'s
        (:meth:`VoterNode.is_voter`); None when there is none."""
        old = self._voters.get(node.id)
        if old is None or not old.is_voter(node.id, node.directory_id):
            return None
        return VoterSet(node if v.id == node.id else v for v in self._voters.values())

    def update_ignoring_directory_id(self, node: VoterNode) -> VoterSet | None:
        """Kafka ``updateVoterIgnoringDirectoryId`` (the kraft.version 0 -> 1 upgrade's
        volatile voters): replace the voter with ``node``'s id whatever the directory ids."""
        if node.id not in self._voters:
            return None
        return VoterSet(node if v.id == node.id else v for v in self._voters.values())

    # -- reads
    def is_voter(self, voter_id: int, directory_id: UUID | None = None) -> bool:
        """Kafka ``VoterSet.isVoter``."""
        v = self._voters.get(voter_id)
        return v is not None and v.is_voter(voter_id, directory_id)

    def is_only_voter(self, voter_id: int, directory_id: UUID | None = None) -> bool:
        return len(self._voters) == 1 and self.is_voter(voter_id, directory_id)

    def needs_update(self, node: VoterNode) -> bool:
        """Kafka ``voterNodeNeedsUpdate``: ``node`` is a voter here with a different entry."""
        old = self._voters.get(node.id)
        return old is not None and old.is_voter(node.id, node.directory_id) and old != node

    @property
    def majority(self) -> int:
        return len(self._voters) // 2 + 1

    def keys_set(self) -> set[tuple[int, UUID]]:
        """The voter keys (id, directory id)."""
        return {(v.id, v.directory_id) for v in self._voters.values()}

    def overlapping_majority(self, other: VoterSet) -> bool:
        """Kafka ``hasOverlappingMajority``: each side has at most one key the other lacks."""
        a, b = self.keys_set(), other.keys_set()
        return len(a - b) <= 1 and len(b - a) <= 1

    def address(self, voter_id: int, listener: str) -> tuple[str, int] | None:
        v = self._voters.get(voter_id)
        return None if v is None else v.address(listener)

    def addresses(self, listener: str) -> dict[int, tuple[str, int]]:
        """id -> (host, port) on ``listener`` of the voters that have it."""
        out = {}
        for vid in sorted(self._voters):
            a = self._voters[vid].address(listener)
            if a is not None:
                out[vid] = a
        return out


# ====================================================================== histories
class _LogHistory:
    """Kafka ``TreeMapLogHistory``: values at strictly increasing offsets >= -1."""

    def __init__(self) -> None:
        self._entries: list[tuple[int, Any]] = []

    def add_at(self, offset: int, value: Any) -> None:
        if offset < -1:
            raise ValueError(f"next offset {offset} must be greater than or equal to -1")
        if self._entries and offset <= self._entries[-1][0]:
            raise ValueError(
                f"next offset {offset} must be greater than the last offset {self._entries[-1][0]}"
            )
        self._entries.append((offset, value))

    def value_at_or_before(self, offset: int) -> Any | None:
        for o, v in reversed(self._entries):
            if o <= offset:
                return v
        return None

    def last_entry(self) -> tuple[int, Any] | None:
        return self._entries[-1] if self._entries else None

    def truncate_new_entries(self, end: int) -> None:
        """Drop the entries at offsets >= ``end``."""
        self._entries = [e for e in self._entries if e[0] < end]

    def truncate_old_entries(self, start: int) -> None:
        """Keep only the last of the entries at offsets <= ``start`` (and all later ones)."""
        lesser = [e for e in self._entries if e[0] <= start]
        if len(lesser) > 1:
            self._entries = lesser[-1:] + [e for e in self._entries if e[0] > start]

    def clear(self) -> None:
        self._entries = []

    def __len__(self) -> int:
        return len(self._entries)


class VoterSetHistory(_LogHistory):
    """Kafka ``VoterSetHistory``: offset -> :class:`VoterSet`, falling back to the static set.

    A new set whose majority does not overlap the previous log-sourced one (offset >= 0) is
    logged, not refused (Kafka 4.x only logs it: a leader's record must never wedge a
    follower)."""

    def __init__(self, static: VoterSet) -> None:
        super().__init__()
        self.static = static

    def add_at(self, offset: int, value: Any) -> None:
        last = self.last_entry()
        if last is not None and last[0] >= 0 and not last[1].overlapping_majority(value):
            log.warning("voter set %r at offset %d has no majority overlapping the previous "
                        "voter set %r", value, offset, last[1])  # fmt: skip
        super().add_at(offset, value)

    def last_value(self) -> VoterSet:
        last = self.last_entry()
        return self.static if last is None else last[1]

    def last_voter_set_offset(self) -> int | None:
        last = self.last_entry()
        return None if last is None else last[0]


def decode_control_records(batch: Batch) -> list[tuple[int, Any]]:
    """The ``(type, message)`` of every record of control ``batch``; raises
    :class:`ControlRecordError` for an unknown type, a missing key or value, or a body that does
    not decode."""
    out = []
    for i, key in enumerate(batch.keys):
        value = batch.records[i] if i < len(batch.records) else None
        try:
            t = control_type(key)
        except DecodeError as e:
            raise ControlRecordError(
                f"control record at offset {batch.base_offset + i}: {e}"
            ) from e
        if t not in _KNOWN_TYPES:
            raise ControlRecordError(
                f"unknown control record type {t} at offset {batch.base_offset + i}"
            )
        if not value:
            raise ControlRecordError(f"control record at offset {batch.base_offset + i} has "
                                     "no value")  # fmt: skip
        try:
            msg = codec.decode(_MESSAGE_OF[t], 0, value)
        except DecodeError as e:
            raise ControlRecordError(
                f"control record of type {t} at offset {batch.base_offset + i} does not decode: {e}"
            ) from e
        out.append((t, msg))
    return out


class ControlRecordState:
    """Kafka ``KRaftControlRecordStateMachine``'s two histories (offset -> voter set, offset ->
    kraft.version), fed from control batches. ``next_offset``: the offset after the last batch
    read (-1 before anything)."""

    def __init__(self, static: VoterSet) -> None:
        self.voters = VoterSetHistory(static)
        self.kraft = _LogHistory()
        self.next_offset = -1

    def clear(self) -> None:
        self.voters.clear()
        self.kraft.clear()

    def update_from_batch(self, batch: Batch, override_offset: int | None = None) -> None:
        """Register the KRaftVersionRecord and VotersRecord of ``batch`` (record *i* at
        ``base_offset + i``, or every one at ``override_offset`` for a snapshot's batches;
        Kafka ``handleBatch``). A data batch only advances ``next_offset``. Raises
        :class:`ControlRecordError` (nothing registered from this batch then)."""
        if batch.is_control:
            recs = decode_control_records(batch)
            for i, (t, msg) in enumerate(recs):
                at = override_offset if override_offset is not None else batch.base_offset + i
                if t == KRAFT_VOTERS:
                    vs = VoterSet.from_record(msg)
                    log.info("latest set of voters is %r at offset %d", vs, at)
                    self.voters.add_at(at, vs)
                elif t == KRAFT_VERSION:
                    log.info("latest kraft.version is %d at offset %d", msg.kraft_version, at)
                    self.kraft.add_at(at, msg.kraft_version)
        if override_offset is None:
            self.next_offset = batch.last_offset + 1

    def truncate_new_entries(self, end: int) -> None:
        self.voters.truncate_new_entries(end)
        self.kraft.truncate_new_entries(end)
        self.next_offset = min(self.next_offset, end)

    def truncate_old_entries(self, start: int) -> None:
        self.voters.truncate_old_entries(start)
        self.kraft.truncate_old_entries(start)

    def voter_set_at(self, offset: int) -> VoterSet | None:
        """The voter set in force at ``offset`` (floor look-up; None: no VotersRecord at or
        before it)."""
        return self.voters.value_at_or_before(offset)

    def kraft_version_at(self, offset: int) -> int:
        v = self.kraft.value_at_or_before(offset)
        return 0 if v is None else v

    def last_voter_set(self) -> VoterSet:
        return self.voters.last_value()

    def last_kraft_version(self) -> int:
        last = self.kraft.last_entry()
        return 0 if last is None else last[1]

    def last_voter_set_offset(self) -> int | None:
        return self.voters.last_voter_set_offset()


# ====================================================================== encoding
def kraft_version_body(level: int) -> bytes:
    """A KRaftVersionRecord {Version 0, KRaftVersion ``level``} body."""
    m = codec.module("KRaftVersionRecord")
    return codec.encode(m.KRaftVersionRecord(version=0, kraft_version=level), 0)


def voters_body(voters: VoterSet) -> bytes:
    """A VotersRecord (Version 0) body holding ``voters``."""
    return codec.encode(voters.to_record(0), 0)


def encode_voters_control_batch(
    base_offset: int,
    epoch: int,
    voters: VoterSet | None,
    timestamp_ms: int,
    *,
    kraft_version: int | None = None,
    leader_change: bytes | None = None,
) -> Batch:
    """One control batch (magic 2, CREATE_TIME, no producer id, uncompressed): an optional
    LeaderChangeMessage body first, then KRaftVersionRecord{``kraft_version``} when given, then
    VotersRecord{``voters``} when given (Kafka ``LeaderState.appendStartOfEpochControlRecords``,
    ``appendVotersRecord``)."""
    controls: list[tuple[int, bytes]] = []
    if leader_change is not None:
        controls.append((LEADER_CHANGE, leader_change))
    if kraft_version is not None:
        controls.append((KRAFT_VERSION, kraft_version_body(kraft_version)))
    if voters is not None:
        controls.append((KRAFT_VOTERS, voters_body(voters)))
    return encode_control_batch(base_offset, epoch, controls, timestamp_ms)


def snapshot_header_batch(
    epoch: int,
    timestamp_ms: int,
    last_contained_timestamp_ms: int,
    kraft_version: int,
    voters: VoterSet | None,
) -> Batch:
    """The first batch of a snapshot at position 0 (Kafka ``RecordsSnapshotWriter.Builder
    .build``): SnapshotHeaderRecord{Version 0, LastContainedLogTimestamp}, and at kraft.version
    >= 1 KRaftVersionRecord plus, when given, VotersRecord. At kraft.version 0 a voter set is
    refused (Kafka's builder throws)."""
    head = codec.message_class("SnapshotHeaderRecord")
    controls = [
        (SNAPSHOT_HEADER,
         codec.encode(head(version=0, last_contained_log_timestamp=last_contained_timestamp_ms),
                      0)),
    ]  # fmt: skip
    if kraft_version >= 1:
        controls.append((KRAFT_VERSION, kraft_version_body(kraft_version)))
        if voters is not None:
            controls.append((KRAFT_VOTERS, voters_body(voters)))
    elif voters is not None:
        raise ValueError("a snapshot at kraft.version 0 cannot hold a voter set")
    return encode_control_batch(0, epoch, controls, timestamp_ms)


def snapshot_footer_batch(position: int, epoch: int, timestamp_ms: int) -> Batch:
    """The last batch of a snapshot: SnapshotFooterRecord{Version 0} at ``position``."""
    foot = codec.message_class("SnapshotFooterRecord")
    body = codec.encode(foot(version=0), 0)
    return encode_control_batch(position, epoch, [(SNAPSHOT_FOOTER, body)], timestamp_ms)


def bootstrap_checkpoint_bytes(voters: VoterSet | None, kraft_version: int = 1,
                               timestamp_ms: int = 0) -> bytes:  # fmt: skip
    """The voter-only bootstrap checkpoint ``00000000000000000000-0000000000.checkpoint``
    (snapshot id (0, 0)) in Kafka 4.2's layout (``Formatter.writeDynamicQuorumSnapshot``), which
    the simulator's memory logs start from; ``kafka-rpc storage format`` writes Kafka 4.4's,
    which adds the bootstrap records (``kafka_rpc.storage.bootstrap.encode_bootstrap_snapshot``,
    from the same header and footer builders). One control batch at offset 0,
    epoch 0, with SnapshotHeaderRecord{Version 0, LastContainedLogTimestamp =
    ``timestamp_ms``}, KRaftVersionRecord{0, ``kraft_version``} and VotersRecord{0,
    ``voters``}, then the footer batch at offset 3; every timestamp ``timestamp_ms`` (wall
    clock ms). ``voters`` None: no VotersRecord (the footer at offset 2), the layout
    ``--no-initial-controllers`` means (a replica that joins as an observer). Raises ValueError
    for kraft.version 0 (Kafka's builder refuses a voter set there) or an empty voter set."""
    if kraft_version < 1:
        raise ValueError("the bootstrap checkpoint needs kraft.version 1 or more")
    if voters is not None and not voters:
        raise ValueError("the bootstrap checkpoint needs at least one voter")
    head = snapshot_header_batch(0, timestamp_ms, timestamp_ms, kraft_version, voters)
    foot = snapshot_footer_batch(head.last_offset + 1, 0, timestamp_ms)
    return head.data + foot.data
