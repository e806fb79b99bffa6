"""Snapshots: the part of :class:`~kafka_rpc.raft.core.RaftCore` that writes, serves, downloads
and retires snapshots (KIP-630).

FetchSnapshot as the follower sends it and takes its answer (the download into a
``RawSnapshotWriter``, then the log truncated to it), FetchSnapshot as the leader answers it,
the generation triggers and the writing of ``%020d-%010d.checkpoint`` (Kafka
``SnapshotGenerator``, ``RecordsSnapshotWriter``), and retention (``KafkaMetadataLog.maybeClean``).
"""

from __future__ import annotations

import logging
from typing import Any

from kafka_rpc.protocol.record_batch import (
    CorruptRecordError,
    decode_batches,
    encode_batch,
)
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.base import (
    _E,
    _NONE,
    _ZERO_UUID,
    FOLLOWER,
    LEADER,
    SNAPSHOT_BATCH_RECORDS,
    _CoreBase,
    _SnapReq,
    _SnapResp,
)
from kafka_rpc.raft.voters import snapshot_footer_batch, snapshot_header_batch

log = logging.getLogger("kafka_rpc.raft")


class _Snapshots(_CoreBase):
    """FetchSnapshot as follower and leader, snapshot generation and retention."""

    # ================================================================== FetchSnapshot
    def _fetch_snapshot_request(self) -> Any:
        d = self._download
        assert d is not None
        return _SnapReq.FetchSnapshotRequest(
            cluster_id=self.config.cluster_id,
            replica_id=self.node_id,
            max_bytes=self.config.max_fetch_bytes,
            topics=(
                _SnapReq.TopicSnapshot(
                    name=self.config.topic_name,
                    partitions=(
                        _SnapReq.PartitionSnapshot(
                            partition=self.config.partition,
                            current_leader_epoch=self.epoch,
                            snapshot_id=_SnapReq.SnapshotId(
                                end_offset=d.snapshot_id.offset, epoch=d.snapshot_id.epoch
                            ),
                            position=d.writer.size,
                            replica_directory_id=self.config.directory_id,
                        ),
                    ),
                ),
            ),
        )

    # -- FetchSnapshot, leader side (Kafka ``handleFetchSnapshotRequest``)
    def _snap_resp(self, version: int, top: int = 0, code: int = 0, **kw: Any) -> Any:
        m = _SnapResp
        if top:
            return m.FetchSnapshotResponse(error_code=top)
        p = m.PartitionSnapshot(
            index=self.config.partition,
            error_code=code,
            current_leader=m.LeaderIdAndEpoch(leader_id=self.leader_id, leader_epoch=self.epoch),
            **kw,
        )
        return m.FetchSnapshotResponse(
            topics=(m.TopicSnapshot(name=self.config.topic_name, partitions=(p,)),),
            node_endpoints=self._node_endpoints(m, version, 1),
        )

    def _on_fetch_snapshot(self, now: int, version: int, req: Any) -> Any:
        if not self._cluster_ok(req.cluster_id):
            return self._snap_resp(version, top=int(_E.INCONSISTENT_CLUSTER_ID))
        if len(req.topics) != 1 or len(req.topics[0].partitions) != 1:
            return self._snap_resp(version, top=int(_E.INVALID_REQUEST))
        t = req.topics[0]
        p = t.partitions[0]
        if t.name != self.config.topic_name or p.partition != self.config.partition:
            m = _SnapResp
            return m.FetchSnapshotResponse(
                topics=(
                    m.TopicSnapshot(
                        name=t.name,
                        partitions=(
                            m.PartitionSnapshot(
                                index=p.partition,
                                error_code=int(_E.UNKNOWN_TOPIC_OR_PARTITION),
                            ),
                        ),
                    ),
                )
            )
        err = self._validate_leader_only(p.current_leader_epoch)
        if err is not None:
            return self._snap_resp(version, code=err)
        sid = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        reader = None if sid == OffsetAndEpoch(0, 0) else self.log.read_snapshot(sid)
        if reader is None:
            return self._snap_resp(version, code=int(_E.SNAPSHOT_NOT_FOUND))
        if p.position < 0 or p.position >= reader.size:
            return self._snap_resp(version, code=int(_E.POSITION_OUT_OF_RANGE))
        replica = req.replica_id
        if replica >= 0:
            directory = p.replica_directory_id if version >= 1 else _ZERO_UUID
            rs, voter = self._replica_state(replica, directory)
            rs.last_fetch_ms = now
            if voter:
                self._voter_seen(now, replica)
        max_bytes = max(1, min(req.max_bytes, self.config.max_fetch_bytes))
        data = reader.read(p.position, max_bytes)
        return self._snap_resp(
            version,
            snapshot_id=_SnapResp.SnapshotId(end_offset=sid.offset, epoch=sid.epoch),
            size=reader.size,
            position=p.position,
            unaligned_records=data,
        )

    # -- FetchSnapshot, follower side (Kafka ``handleFetchSnapshotResponse``)
    def _on_fetch_snapshot_response(self, now: int, dest: int, resp: Any) -> bool:
        if resp.error_code:
            return False
        if len(resp.topics) != 1 or len(resp.topics[0].partitions) != 1:
            return False
        p = resp.topics[0].partitions[0]
        r = self._common(now, p.error_code, p.current_leader.leader_id,
                         p.current_leader.leader_epoch)  # fmt: skip
        if r is not None:
            return r
        d = self._download
        if self.state != FOLLOWER or d is None:
            return True
        self._fetched_from_leader = True
        sid = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        if p.error_code != _NONE or sid != d.snapshot_id or p.position != d.writer.size:
            # SNAPSHOT_NOT_FOUND, POSITION_OUT_OF_RANGE or anything unexpected: abandon the
            # download and go back to Fetch (Kafka would crash on some of these)
            d.writer.close()
            self._download = None
            self._fetch_deadline = now + self.config.fetch_timeout_ms
            return p.error_code in (_NONE, _E.SNAPSHOT_NOT_FOUND)
        self._fetch_deadline = now + self.config.fetch_timeout_ms
        data = p.unaligned_records or b""
        if d.writer.size + len(data) > p.size:
            d.writer.close()
            self._download = None
            return False
        d.writer.append(data)
        if d.writer.size == p.size:
            d.writer.freeze()
            self._download = None
            log.info("node %d: snapshot %s fetched from %d (%d bytes)", self.node_id,
                     d.snapshot_id, dest, p.size)  # fmt: skip
            self.log.truncate_to_latest_snapshot()
            self._replay_control_records(now)
            self.high_watermark = max(self.high_watermark, self.log.start_offset)
            self._deliver(now)
        return True

    # ================================================================== snapshots
    def _maybe_snapshot(self, now: int) -> None:
        """Kafka's ``SnapshotGenerator`` triggers (committed record bytes since the last
        snapshot reach ``metadata.log.max.record.bytes.between.snapshots``, or the time since it
        ``metadata.log.max.snapshot.interval.ms``) plus the KIP-630 seed's
        ``controller.snapshot.minimum.records``."""
        if (self._records_since_snapshot == 0 or self._next_offset <= 0
                or self._snapshot_writing is not None):  # fmt: skip
            return
        c = self.config
        due = self._bytes_since_snapshot >= c.snapshot_max_record_bytes
        if c.snapshot_min_records > 0 and self._records_since_snapshot >= c.snapshot_min_records:
            due = True
        if c.snapshot_interval_ms > 0 and now - self._last_snapshot_ms >= c.snapshot_interval_ms:
            due = True
        if due:
            self.create_snapshot(now, background=self.snapshot_writer is not None)

    def create_snapshot(self, now: int, background: bool = False) -> OffsetAndEpoch | None:
        """Write the state machine's committed state as snapshot ``(committed offset, epoch of
        its last batch)`` (``%020d-%010d.checkpoint``): a SnapshotHeader control batch, the
        records in batches of 1,024, a SnapshotFooter (Kafka ``RecordsSnapshotWriter``). Returns
        the id, or None when there is nothing new (the id exists, or is below the log start).
        ``background``: the file work goes to :attr:`snapshot_writer`, and the snapshot exists
        once :meth:`snapshot_written` says so. None too (and the snapshot stays due) while the
        state machine's ``in_transaction`` is true: the committed offset is inside a metadata
        transaction, not a stable one."""
        if getattr(self.sm, "in_transaction", False):
            return None
        sid = OffsetAndEpoch(self._next_offset, self._last_delivered_epoch)
        self._bytes_since_snapshot = self._records_since_snapshot = 0
        self._last_snapshot_ms = now
        if sid.offset <= self.log.start_offset and sid.offset != 0:
            return None
        if sid in self.log.snapshot_ids() or sid.offset > max(self.high_watermark, 0):
            return None
        records = self.sm.snapshot_records()
        ts = self._last_delivered_ts if self._last_delivered_ts >= 0 else self._wall(now)
        # Kafka ``createSnapshot``: the kraft.version and voter set as of the last contained
        # offset go into the header batch (at kraft.version 1 only)
        kv = self._crs.kraft_version_at(sid.offset - 1)
        voters = self._crs.voter_set_at(sid.offset - 1) if kv >= 1 else None
        head = snapshot_header_batch(sid.epoch, ts, ts, kv, voters)
        w = self.log.create_snapshot(sid)
        background = background and self.snapshot_writer is not None

        def write() -> None:
            try:
                w.append(head.data)
                pos = head.last_offset + 1
                for i in range(0, len(records), SNAPSHOT_BATCH_RECORDS):
                    chunk = records[i : i + SNAPSHOT_BATCH_RECORDS]
                    w.append(encode_batch(pos, sid.epoch, chunk, ts).data)
                    pos += len(chunk)
                w.append(snapshot_footer_batch(pos, sid.epoch, ts).data)
                w.freeze(notify=not background)
            except BaseException:
                w.close()
                raise

        if background:
            assert self.snapshot_writer is not None
            self._snapshot_writing = (sid, w, len(records))
            try:
                self.snapshot_writer(write)
            except BaseException:
                self._snapshot_writing = None
                w.close()
                raise
            return sid
        write()
        self._trim_voters(sid.offset)
        log.info("node %d: snapshot %s written (%d records)", self.node_id, sid, len(records))
        return sid

    def snapshot_written(self, error: BaseException | None) -> None:
        """The background write of :meth:`create_snapshot` ended: the snapshot now exists for
        the log, or ``error`` (logged; the part file was removed, the next trigger tries
        again)."""
        if self._snapshot_writing is None:
            return
        (sid, w, n), self._snapshot_writing = self._snapshot_writing, None
        if error is None:
            w.notify_frozen()
            self._trim_voters(sid.offset)
            log.info("node %d: snapshot %s written (%d records, in the background)",
                     self.node_id, sid, n)  # fmt: skip
        else:
            log.error("node %d: writing snapshot %s failed: %r", self.node_id, sid, error)

    def _snapshot_timestamp(self, sid: OffsetAndEpoch) -> int:
        r = self.log.read_snapshot(sid)
        if r is None:
            return -1
        head = r.read(0, 4096)
        try:
            b = decode_batches(head, allow_partial_tail=True)
        except CorruptRecordError:
            return -1
        return b[0].max_timestamp if b else -1

    def _clean(self, now: int) -> None:
        """Kafka's snapshot retention (``KafkaMetadataLog.maybeClean``) plus the KIP-630 seed's
        rule: the leader keeps the log start at or below the fetch offset of every replica that
        fetched within ``max.replication.lag.ms``, unless the snapshot is older than that."""
        c = self.config
        while True:
            ids = self.log.snapshot_ids()
            if len(ids) < 2:
                return
            oldest, nxt = ids[0], ids[1]
            total = self.log.size_in_bytes() + sum(
                (r.size if (r := self.log.read_snapshot(s)) is not None else 0) for s in ids
            )
            ts = self._snapshot_timestamp(oldest)
            over_size = c.max_retention_bytes >= 0 and total > c.max_retention_bytes
            over_age = c.max_retention_ms >= 0 and 0 <= ts < self._wall(now) - c.max_retention_ms
            if not (over_size or over_age):
                return
            if nxt.offset > self.high_watermark:
                return
            if self.state == LEADER:
                snap_age = self._wall(now) - self._snapshot_timestamp(nxt)
                states = [*self._replicas.items(), *((k[0], r) for k, r in self._observers.items())]
                for rid, rs in states:
                    if rid == self.node_id:
                        continue
                    lag = now - rs.last_fetch_ms
                    live = rs.last_fetch_ms >= 0 and lag <= c.max_replication_lag_ms
                    if live and rs.end_offset < nxt.offset and snap_age <= c.max_replication_lag_ms:
                        return
            if not self.log.delete_before_snapshot(nxt):
                return
            log.info("node %d: log start offset moved to %d", self.node_id, nxt.offset)
