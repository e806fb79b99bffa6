"""Replication: the part of :class:`~kafka_rpc.raft.core.RaftCore` that moves the log from the
leader to the other replicas.

Fetch as the follower sends it and takes its answer (records, DivergingEpoch truncation, a
SnapshotId to download, the leader's high watermark), Fetch as the leader answers it (Kafka
``validateOffsetAndEpoch``, parked long-polls, each replica's fetch state, check quorum and the
high watermark: ``LeaderState.maybeUpdateHighWatermark``), and the leader's appends (Kafka
``BatchAccumulator``: linger, batch size).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from kafka_rpc.protocol.record_batch import (
    Batch,
    decode_batches,
    encode_batch,
)
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.base import (
    _E,
    _LONG_MAX,
    _NONE,
    _ZERO_UUID,
    FETCH,
    FETCH_SNAPSHOT,
    FOLLOWER,
    LEADER,
    NotLeaderError,
    _CoreBase,
    _Download,
    _FetchReq,
    _FetchResp,
    _Parked,
    _Pending,
)
from kafka_rpc.raft.voters import ControlRecordError

log = logging.getLogger("kafka_rpc.raft")


class _Replication(_CoreBase):
    """Fetch as follower and leader, the high watermark and the leader's appends."""

    # ================================================================== Fetch
    def _send_fetch(self, now: int, dest: int) -> None:
        if dest == -1 or not self._can_send(now, dest):
            return
        if (self.is_voter or self.config.can_become_voter) and self.needs_flush:
            # a voter's fetch offset is proof of durability: flush first; so does a replica
            # with the controller role, which counts as a voter from the append of a
            # VotersRecord naming it (Kafka ``appendAsFollower``'s ``canBecomeVoter``)
            return
        if self._download is not None:
            self._send(now, dest, FETCH_SNAPSHOT, self._fetch_snapshot_request())
        else:
            self._send(now, dest, FETCH, self._fetch_request())

    def _fetch_request(self) -> Any:
        """Kafka ``KafkaRaftClient.buildFetchRequest``: MaxBytes ``max_fetch_bytes``,
        PartitionMaxBytes 0 (Kafka's followers leave it unset; leaders ignore it), MaxWaitMs
        500, this replica's id (v15+ in ReplicaState) and directory id, its high watermark."""
        return _FetchReq.FetchRequest(
            cluster_id=self.config.cluster_id,
            replica_id=self.node_id,
            replica_state=_FetchReq.ReplicaState(replica_id=self.node_id),
            max_wait_ms=self.config.fetch_max_wait_ms,
            min_bytes=0,
            max_bytes=self.config.max_fetch_bytes,
            topics=(
                _FetchReq.FetchTopic(
                    topic=self.config.topic_name,
                    topic_id=self.config.topic_id,
                    partitions=(
                        _FetchReq.FetchPartition(
                            partition=self.config.partition,
                            current_leader_epoch=self.epoch,
                            fetch_offset=self.log.end_offset,
                            last_fetched_epoch=self.log.last_fetched_epoch(),
                            partition_max_bytes=0,
                            # KIP-1166: -1 when unknown (INT64_MAX means "not supported")
                            high_watermark=self.high_watermark,
                            replica_directory_id=self.config.directory_id,
                        ),
                    ),
                ),
            ),
        )

    # -- Fetch, leader side (Kafka ``handleFetchRequest``)
    def _fetch_resp(
        self,
        version: int,
        top: int = 0,
        code: int = 0,
        hw: int = -1,
        records: bytes | None = None,
        diverging: OffsetAndEpoch | None = None,
        snapshot: OffsetAndEpoch | None = None,
    ) -> Any:
        m = _FetchResp
        if top:
            return m.FetchResponse(error_code=top)
        kw: dict[str, Any] = {}
        if diverging is not None:
            kw["diverging_epoch"] = m.EpochEndOffset(
                epoch=diverging.epoch, end_offset=diverging.offset
            )
        if snapshot is not None:
            kw["snapshot_id"] = m.SnapshotId(end_offset=snapshot.offset, epoch=snapshot.epoch)
        p = m.PartitionData(
            partition_index=self.config.partition,
            error_code=code,
            high_watermark=hw,
            log_start_offset=self.log.start_offset,
            current_leader=m.LeaderIdAndEpoch(leader_id=self.leader_id, leader_epoch=self.epoch),
            records=records,
            **kw,
        )
        topic = m.FetchableTopicResponse(topic_id=self.config.topic_id, partitions=(p,))
        if version < 13:
            topic = m.FetchableTopicResponse(topic=self.config.topic_name, partitions=(p,))
        return m.FetchResponse(
            responses=(topic,), node_endpoints=self._node_endpoints(m, version, 16)
        )

    @staticmethod
    def _fetch_replica_id(version: int, req: Any) -> int:
        if version >= 15:
            return req.replica_state.replica_id if req.replica_state is not None else -1
        return req.replica_id

    def _on_fetch(self, now: int, version: int, req: Any, reply: Callable) -> Any | None:
        if not self._cluster_ok(req.cluster_id):
            return self._fetch_resp(version, top=int(_E.INCONSISTENT_CLUSTER_ID))
        topics = req.topics
        if (
            len(topics) != 1
            or len(topics[0].partitions) != 1
            or version < 13
            or topics[0].topic_id != self.config.topic_id
            or topics[0].partitions[0].partition != self.config.partition
        ):
            return self._fetch_resp(version, top=int(_E.INVALID_REQUEST))
        p = topics[0].partitions[0]
        if (
            req.max_wait_ms < 0
            or p.fetch_offset < 0
            or p.last_fetched_epoch < 0
            or p.last_fetched_epoch > p.current_leader_epoch
        ):
            return self._fetch_resp(version, top=int(_E.INVALID_REQUEST))
        err = self._validate_leader_only(p.current_leader_epoch)
        if err is not None:
            return self._fetch_resp(version, code=err)
        replica = self._fetch_replica_id(version, req)
        resp = self._fetch_response_valid(now, version, req, replica, update=True)
        part = resp.responses[0].partitions[0]
        follower_hw = p.high_watermark if version >= 18 else _LONG_MAX
        if (
            part.error_code
            or part.records
            or req.max_wait_ms == 0
            or part.diverging_epoch.epoch >= 0
            or part.snapshot_id.epoch >= 0
            or (self.high_watermark >= 0 and follower_hw < self.high_watermark)
        ):
            return resp
        self._parked.append(
            _Parked(
                p.fetch_offset, now + req.max_wait_ms, version, req, reply, replica, follower_hw
            )
        )
        return None

    def _validate_offset_and_epoch(self, offset: int, epoch: int):
        """Kafka ``ReplicatedLog.validateOffsetAndEpoch`` (+ the empty-follower rule):
        ('valid'|'snapshot'|'diverging', OffsetAndEpoch|None)."""
        latest = self.log.latest_snapshot_id()
        if offset == 0 and latest is not None and latest != OffsetAndEpoch(0, 0):
            return "snapshot", latest
        earliest = self.log.earliest_snapshot_id()
        start = self.log.start_offset
        if start == 0 and offset == 0:
            return "valid", None
        if earliest is not None and (
            offset < start
            or (offset == start and epoch != earliest.epoch)
            or epoch < earliest.epoch
        ):
            return "snapshot", latest
        e = self.log.end_offset_for_epoch(epoch)
        if e.epoch != epoch or e.offset < offset:
            return "diverging", e
        return "valid", None

    def _fetch_response_valid(
        self,
        now: int,
        version: int,
        req: Any,
        replica: int,
        update: bool = False,
        touch: bool = False,
    ) -> Any:
        """The answer to a Fetch the leader validated: a SnapshotId, a DivergingEpoch, or the
        records from the fetch offset. ``update``: the replica's fetch offset counts (end
        offset, high watermark, check quorum, last fetch time); ``touch`` (a parked Fetch
        answered later, as Kafka's purgatory completion calls ``updateReplicaState`` again):
        only its last fetch time and check quorum."""
        if self.state != LEADER:
            return self._fetch_resp(version, code=int(_E.NOT_LEADER_OR_FOLLOWER))
        p = req.topics[0].partitions[0]
        kind, oe = self._validate_offset_and_epoch(p.fetch_offset, p.last_fetched_epoch)
        if kind == "snapshot":
            return self._fetch_resp(version, hw=self.high_watermark, snapshot=oe)
        if kind == "diverging":
            return self._fetch_resp(version, hw=self.high_watermark, diverging=oe)
        directory = p.replica_directory_id if version >= 17 else _ZERO_UUID
        if update and replica >= 0:
            self._update_replica(now, replica, directory, p.fetch_offset)
        elif touch and replica >= 0:
            rs, voter = self._replica_state(replica, directory)
            rs.last_fetch_ms = now
            if p.fetch_offset >= self.log.end_offset:
                rs.last_caught_up_ms = now
            if voter:
                self._voter_seen(now, replica)
        data = self.log.read(p.fetch_offset, self._read_size(req.max_bytes))
        return self._fetch_resp(version, hw=self.high_watermark, records=data)

    def _read_size(self, max_bytes: int) -> int:
        """Bytes a Raft Fetch reads from the log (whole batches, at least one): the request's
        MaxBytes, at most ``max_fetch_bytes`` (8 MiB). PartitionMaxBytes is ignored, as Kafka's
        leaders do (its followers send 0): Kafka 4.0 reads
        ``internal.metadata.max.fetch.size.in.bytes`` (8 MiB, what its followers ask as
        MaxBytes), Kafka 4.3+ reads the request's MaxBytes (``controller.quorum.fetch.max.bytes``,
        1 MiB by default); a MaxBytes of 0 or less reads the cap."""
        cap = self.config.max_fetch_bytes
        return min(max_bytes, cap) if max_bytes > 0 else cap

    def _update_replica(self, now: int, replica: int, directory: UUID, offset: int) -> None:
        """A Fetch from ``replica`` (with ``directory``, zero when none) at ``offset``: its
        state as a voter, or as an observer when (id, directory) is not a voter's key."""
        rs, voter = self._replica_state(replica, directory)
        rs.end_offset = offset
        rs.last_fetch_ms = now
        if offset >= self.log.end_offset:
            rs.last_caught_up_ms = now
        if voter:
            self._voter_seen(now, replica)
            self._update_high_watermark(now)

    def _voter_seen(self, now: int, replica: int) -> None:
        self._fetched_voters.add(replica)
        self._end_epoch_unacked.discard(replica)
        if len(self._fetched_voters) >= self._majority():
            self._fetched_voters = {self.node_id}
            self._check_quorum_deadline = now + self.config.fetch_timeout_ms * 3 // 2

    def _update_high_watermark(self, now: int) -> None:
        """Kafka ``LeaderState.maybeUpdateHighWatermark``."""
        if self.state != LEADER:
            return
        self._replicas[self.node_id].end_offset = self.log.flushed_offset
        ends = sorted(
            (self._replicas[v].end_offset if v in self._replicas else -1 for v in self.voters),
            reverse=True,
        )
        candidate = ends[len(self.voters) // 2]
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            self._wake_parked(now, hw_changed=True)
            self._voter_op_committed(now)
            self._deliver(now)

    def _wake_parked(self, now: int, hw_changed: bool = False) -> None:
        if not self._parked:
            return
        leo = self.log.end_offset
        keep = []
        for pk in self._parked:
            if leo > pk.fetch_offset or (hw_changed and pk.follower_hw < self.high_watermark):
                pk.reply(self._fetch_response_valid(now, pk.version, pk.request, pk.replica_id,
                                                    touch=True))  # fmt: skip
            else:
                keep.append(pk)
        self._parked = keep

    def _reply_fetch_error(self, p: _Parked, code: int) -> None:
        p.reply(self._fetch_resp(p.version, code=code))

    # -- Fetch, follower side (Kafka ``handleFetchResponse``)
    def _on_fetch_response(self, now: int, dest: int, resp: Any) -> bool:
        if resp.error_code:
            return False
        if len(resp.responses) != 1 or len(resp.responses[0].partitions) != 1:
            return False
        p = resp.responses[0].partitions[0]
        leader, epoch = p.current_leader.leader_id, p.current_leader.leader_epoch
        r = self._common(now, p.error_code, leader, epoch)
        if r is not None:
            return r
        if p.error_code != _NONE:
            return False
        if self.state != FOLLOWER or self.leader_id != dest:
            return True
        self._fetched_from_leader = True
        self._fetch_deadline = now + self.config.fetch_timeout_ms
        if p.diverging_epoch.epoch >= 0:
            d = p.diverging_epoch
            local = self.log.end_offset_for_epoch(d.epoch)
            target = min(local.offset, d.end_offset)
            if target < self.high_watermark:
                log.error("node %d: refusing to truncate to %d below the high watermark %d",
                          self.node_id, target, self.high_watermark)  # fmt: skip
                return False
            end = max(target, self.log.start_offset)
            self.log.truncate_to(end)
            self._truncate_voters(now, end)
            return True
        if p.snapshot_id.epoch >= 0 or p.snapshot_id.end_offset >= 0:
            sid = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
            if sid.offset < 0 or sid.epoch < 0:
                return False
            if sid in self.log.snapshot_ids():
                return True
            self._download = _Download(sid, self.log.create_snapshot(sid))
            return True
        if p.records:
            # whole batches; a partial batch at the end (Kafka's leader slices its log by bytes)
            # is dropped and fetched again (Kafka ``UnifiedLog.trimInvalidBytes``)
            batches = decode_batches(p.records, allow_partial_tail=True)
            batches = [b for b in batches if b.base_offset >= self.log.end_offset]
            if batches and batches[0].base_offset != self.log.end_offset:
                log.warning("node %d: fetched batches start at %d, log ends at %d",
                            self.node_id, batches[0].base_offset, self.log.end_offset)  # fmt: skip
                return False
            if batches:
                try:
                    self._check_control_batches(batches)
                except ControlRecordError as e:
                    log.error("node %d: refusing batches from %d: %s", self.node_id, dest, e)
                    return False
                self.log.append(batches)
                self._feed_batches(now, batches)
        if p.high_watermark >= 0:
            new_hw = min(p.high_watermark, self.log.end_offset)
            if new_hw > self.high_watermark:
                self.high_watermark = new_hw
                self._deliver(now)
        return True

    # ================================================================== appends
    def append(self, now: int, records: list[bytes]) -> int:
        """Queue ``records`` (framed metadata records) on the leader as one atomic unit; they
        go into one batch with the other appends of the next ``append.linger.ms`` (0: of this
        poll), written by :meth:`poll` (at once when the queue reaches half of
        ``max_batch_bytes``). Returns the offset of the last record.
        Raises NotLeaderError when this replica is not the leader (or is shutting down) and
        ValueError for an empty list or more than ``max_batch_bytes``."""
        if self.state != LEADER or self._shutdown_deadline is not None:
            raise NotLeaderError(f"node {self.node_id} is not the leader")
        if not records:
            raise ValueError("nothing to append")
        size = sum(len(r) for r in records) + 32 * len(records)
        if size > self.config.max_batch_bytes:
            raise ValueError(f"records of {size} bytes exceed the batch limit")
        pend = self._pending
        if pend.count == 0:
            pend.first_ms = now
        pend.records.append(list(records))
        pend.count += len(records)
        pend.size += size
        last = self.log.end_offset + pend.count - 1
        if pend.size >= self.config.max_batch_bytes // 2:
            self._flush_pending(now, force=True)
        # else the next poll writes it (at once with append.linger.ms 0: every append made
        # before that poll goes into one batch, as Kafka's BatchAccumulator drains on poll)
        return last

    def _flush_pending(self, now: int, force: bool) -> None:
        pend = self._pending
        if not pend.count:
            return
        if not force and now < pend.first_ms + self.config.append_linger_ms:
            return
        self._pending = _Pending()
        ts = self._wall(now)
        batches: list[Batch] = []
        cur: list[bytes] = []
        cur_size = 0
        base = self.log.end_offset
        for unit in pend.records:
            usize = sum(len(r) + 32 for r in unit)
            if cur and cur_size + usize > self.config.max_batch_bytes:
                batches.append(encode_batch(base, self.epoch, cur, ts))
                base += len(cur)
                cur, cur_size = [], 0
            cur.extend(unit)
            cur_size += usize
        if cur:
            batches.append(encode_batch(base, self.epoch, cur, ts))
        self.log.append(batches)
        self._crs.next_offset = batches[-1].last_offset + 1
        self._wake_parked(now)

    def handle_flushed(self, now: int) -> None:
        """The log was fsynced (``log.flushed_offset`` moved): the leader counts its own end
        offset toward the high watermark; a follower may fetch again."""
        if self.state == LEADER:
            self._update_high_watermark(now)
