"""A minimal state machine on the metadata log, until the controller exists (DESIGN.md 7).

:class:`MetadataLogState` implements :class:`~kafka_rpc.raft.api.StateMachine`. Its *image*, the
part a snapshot carries, is small and exact:

* ``features``: feature name -> level, from the last ``FeatureLevelRecord`` of each name
  (a level of 0 removes the feature, as Kafka's ``FeaturesDelta`` does);
* ``noop_seen``: whether any ``NoOpRecord`` was replayed (the record has no fields; the active
  node writes one every ``metadata.max.idle.interval.ms``, so this says "the log carried data").

:meth:`~MetadataLogState.snapshot_records` returns one ``FeatureLevelRecord`` per feature and one
``NoOpRecord`` if ``noop_seen``: replaying them (:meth:`~MetadataLogState.handle_load_snapshot`)
rebuilds an equal image. Beside the image the state keeps bookkeeping that a snapshot does NOT
restore, and does not pretend to: ``record_counts`` (records applied per type since start-up or
since the last snapshot load; after a load they count the snapshot's records), and the provenance
``committed_offset`` / ``committed_epoch`` (last applied offset and its batch's epoch; after a load
the snapshot id's ``offset - 1`` and epoch).

:class:`ActiveWriter` is the writing side on the active node (the leader once
``handle_leader_change`` names this node, i.e. after it has replayed everything committed before
its epoch): on an empty image it appends the bootstrap ``FeatureLevelRecord``
``metadata.version`` = :data:`BOOTSTRAP_METADATA_VERSION` (25, Kafka 4.0's ``4.0-IV3``; Kafka's
``kafka-storage format`` puts it in a bootstrap checkpoint, we append it instead), then a
``NoOpRecord`` every ``metadata.max.idle.interval.ms``. Records are framed with
``codec.encode_record`` (Kafka's ``MetadataRecordSerde`` frame).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import DecodeError
from kafka_rpc.raft.api import Batch, RawSnapshotReader

__all__ = [
    "BOOTSTRAP_METADATA_VERSION",
    "BOOTSTRAP_METADATA_VERSION_NAME",
    "ActiveWriter",
    "MetadataLogState",
]

log = logging.getLogger("kafka_rpc.raft.metadata_state")

#: ``MetadataVersion.IBP_4_0_IV3``: feature level 25 (3.9-IV0 is 21, 4.0-IV0 22).
BOOTSTRAP_METADATA_VERSION = 25
BOOTSTRAP_METADATA_VERSION_NAME = "4.0-IV3"
METADATA_VERSION = "metadata.version"

FeatureLevelRecord = codec.message_class("FeatureLevelRecord")
NoOpRecord = codec.message_class("NoOpRecord")


class MetadataLogState:
    """The committed metadata image (features, NoOp seen) plus bookkeeping; see the module
    docstring. Called on the driver's thread (the event loop) only."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.features: dict[str, int] = {}
        self.noop_seen = False
        self.last_feature_level: Any = None  # the last FeatureLevelRecord applied
        self.last_noop: Any = None  # the last NoOpRecord applied
        self.record_counts: Counter[str] = Counter()  # record type name -> records applied
        self.committed_offset = -1  # last offset applied (inclusive)
        self.committed_epoch = 0  # epoch of the batch holding it
        self.leader_id = -1
        self.leader_epoch = -1
        self.undecodable = 0  # records that failed to decode (logged, skipped)
        #: set on every leader change; :class:`ActiveWriter` waits on it
        self.changed = asyncio.Event()

    # ------------------------------------------------------------------ StateMachine
    def handle_commit(self, batches: Sequence[Batch]) -> None:
        for batch in batches:
            if batch.last_offset <= self.committed_offset:
                continue  # already applied (a redelivery)
            if not batch.is_control:
                for value in batch.records:
                    self._apply(value)
            self.committed_offset = batch.last_offset
            self.committed_epoch = batch.epoch

    def handle_load_snapshot(self, reader: RawSnapshotReader) -> None:
        self.features = {}
        self.noop_seen = False
        self.last_feature_level = self.last_noop = None
        self.record_counts = Counter()
        for batch in reader.batches():
            if batch.is_control:  # SnapshotHeader / SnapshotFooter
                continue
            for value in batch.records:
                self._apply(value)
        sid = reader.snapshot_id
        self.committed_offset = sid.offset - 1
        self.committed_epoch = sid.epoch

    def snapshot_records(self) -> list[bytes]:
        out = [
            codec.encode_record(FeatureLevelRecord(name=name, feature_level=level))
            for name, level in sorted(self.features.items())
        ]
        if self.noop_seen:
            out.append(codec.encode_record(NoOpRecord()))
        return out

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader_id = leader_id
        self.leader_epoch = epoch
        self.changed.set()

    # ------------------------------------------------------------------ queries
    @property
    def is_active(self) -> bool:
        """This node leads the epoch it was last told about (and has replayed up to it)."""
        return self.leader_id == self.node_id

    def image(self) -> tuple[dict[str, int], bool]:
        """What a snapshot preserves: ``(features, noop_seen)``."""
        return dict(self.features), self.noop_seen

    # ------------------------------------------------------------------ replay
    def _apply(self, value: bytes | None) -> None:
        if value is None:
            self.undecodable += 1
            return
        try:
            record, _version = codec.decode_record(value)
        except DecodeError as e:
            self.undecodable += 1
            log.warning("metadata log: skipping an undecodable record: %s", e)
            return
        name = type(record).__spec_name__
        self.record_counts[name] += 1
        if name == "FeatureLevelRecord":
            self.last_feature_level = record
            if record.feature_level == 0:
                self.features.pop(record.name, None)
            else:
                self.features[record.name] = record.feature_level
        elif name == "NoOpRecord":
            self.last_noop = record
            self.noop_seen = True


class ActiveWriter:
    """Writes on the active node: the bootstrap ``metadata.version`` on an empty image, then a
    ``NoOpRecord`` every ``idle_interval_ms`` (0: no NoOps). ``driver`` needs ``append(records)
    -> int`` raising when not the leader (:class:`kafka_rpc.raft.driver.RaftDriver`)."""

    def __init__(self, driver: Any, state: MetadataLogState, idle_interval_ms: int) -> None:
        self.driver = driver
        self.state = state
        self.idle_interval_ms = idle_interval_ms
        self._task: asyncio.Task | None = None
        self._bootstrapped_epoch = -1  # epoch in which we appended the bootstrap record

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def tick(self) -> bool:
        """One step: append what the active node owes now; returns whether it appended."""
        st = self.state
        if not st.is_active:
            return False
        bootstrap = (
            METADATA_VERSION not in st.features and self._bootstrapped_epoch != st.leader_epoch
        )
        if bootstrap:
            record = FeatureLevelRecord(
                name=METADATA_VERSION, feature_level=BOOTSTRAP_METADATA_VERSION
            )
        elif self.idle_interval_ms > 0:
            record = NoOpRecord()
        else:
            return False
        try:
            self.driver.append([codec.encode_record(record)])
        except Exception as e:  # noqa: BLE001 - lost leadership between the check and append
            log.debug("metadata writer: append refused: %s", e)
            return False
        if bootstrap:
            self._bootstrapped_epoch = st.leader_epoch
        return True

    async def _run(self) -> None:
        interval = (self.idle_interval_ms or 1000) / 1000
        while True:
            self.state.changed.clear()
            try:
                self.tick()
            except Exception:
                log.exception("metadata writer: tick failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.state.changed.wait(), interval)
