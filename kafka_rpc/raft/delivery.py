"""Delivery: the part of :class:`~kafka_rpc.raft.core.RaftCore` that hands the state machine what
was committed.

Committed batches (whole batches below the high watermark), the latest snapshot to load first
when the state machine is new or behind the log start offset, and leader changes (a new leader
is announced only once the state machine has read past its epoch start offset), inline or
deferred to :meth:`~kafka_rpc.raft.core.RaftCore.deliver_committed` (Kafka hands them to the
listener off the Raft I/O path).
"""

from __future__ import annotations

import logging

from kafka_rpc.raft.base import (
    LEADER,
    _CoreBase,
)

log = logging.getLogger("kafka_rpc.raft")


class _Delivery(_CoreBase):
    """Committed batches, snapshots to load and leader changes, to the state machine."""

    # ================================================================== state machine delivery
    def _notify_leader_change(self) -> None:
        # the state machine sees what was committed before it hears of a new leader
        self.deliver_committed(self._delivery_due_ms)
        key = (self.leader_id, self.epoch)
        if self.leader_id == self.node_id and self.node_id >= 0:
            return  # delivered once the state machine has read past the epoch start offset
        if self._leader_change_delivered != key:
            self._leader_change_delivered = key
            self.sm.handle_leader_change(self.leader_id, self.epoch)

    @property
    def delivery_due(self) -> bool:
        """Committed batches (or a snapshot) wait for :meth:`deliver_committed` (only with
        ``defer_delivery``)."""
        return self._delivery_due

    def deliver_committed(self, now: int) -> None:
        """Hand the state machine what was committed since the last delivery (with
        ``defer_delivery``; a no-op when nothing is due)."""
        if self._delivery_due:
            self._delivery_due = False
            self._deliver_now(now)

    def _deliver(self, now: int) -> None:
        if self.defer_delivery:
            if not self._delivery_due:
                self._delivery_due, self._delivery_due_ms = True, now
            return
        self._deliver_now(now)

    def _deliver_now(self, now: int) -> None:
        """Hand committed batches (below the high watermark) to the state machine, loading the
        latest snapshot first when it is new or behind the log start offset."""
        latest = self.log.latest_snapshot_id()
        if (self._next_offset < 0 or self._next_offset < self.log.start_offset) and (
            latest is not None and latest.offset > 0
        ):
            if self.state == LEADER:
                log.error("node %d: the leader's state machine is behind the log start",
                          self.node_id)  # fmt: skip
            reader = self.log.read_snapshot(latest)
            if reader is not None:
                self.sm.handle_load_snapshot(reader)
                self._next_offset = latest.offset
                self._last_delivered_epoch = latest.epoch
                self._bytes_since_snapshot = self._records_since_snapshot = 0
                self._last_snapshot_ms = now
        if self._next_offset < 0:
            self._next_offset = self.log.start_offset
        hw = self.high_watermark
        if hw > self._next_offset:
            batches = list(self.log.batches(self._next_offset, hw))
            # only whole batches below the high watermark
            batches = [b for b in batches if b.last_offset < hw and
                       b.base_offset >= self._next_offset]  # fmt: skip
            if batches:
                self.sm.handle_commit(batches)
                self._next_offset = batches[-1].last_offset + 1
                self._last_delivered_epoch = batches[-1].epoch
                self._last_delivered_ts = batches[-1].max_timestamp
                for b in batches:
                    if not b.is_control:
                        self._bytes_since_snapshot += b.size
                        self._records_since_snapshot += b.record_count
        if (
            self.state == LEADER
            and self._next_offset > self._epoch_start_offset
            and self._leader_change_delivered != (self.node_id, self.epoch)
        ):
            self._leader_change_delivered = (self.node_id, self.epoch)
            self.sm.handle_leader_change(self.node_id, self.epoch)

    @property
    def next_offset(self) -> int:
        """The offset the next :meth:`append` on the leader will start at: the log end offset
        plus the records still waiting for the linger."""
        return self.log.end_offset + self._pending.count

    @property
    def committed_offset(self) -> int:
        """The next offset the state machine expects (everything below it was delivered)."""
        return self._next_offset
