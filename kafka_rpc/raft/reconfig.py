"""Dynamic voters (KIP-853): the part of :class:`~kafka_rpc.raft.core.RaftCore` that keeps the
voter set of the log and changes it.

* Replay (Kafka ``KRaftControlRecordStateMachine.updateState``): the KRaftVersionRecord and
  VotersRecord control records of the latest snapshot (registered at its last contained offset;
  the bootstrap checkpoint ``0-0`` at -1) and of the whole log, uncommitted included, read at
  start-up, after every append as leader and follower and after a snapshot download; a
  truncation on a DivergingEpoch rolls them back, a frozen snapshot trims the old ones. The
  newest voter set is in force at once, for majorities, the high watermark, elections and
  :attr:`is_voter` (a change counts from its append, not its commit).
* Addresses (:meth:`address_of`): what the driver connects to for an ``Outbound.destination``.
* The follower side (:meth:`_maybe_send_voter_update`, Kafka ``pollFollowerAsVoter`` and
  ``pollFollowerAsObserver``): when a Follower's update-voter timer (fetch.timeout.ms) runs
  out, a voter sends UpdateRaftVoter to the leader, and an auto-joining controller observer
  AddRaftVoter (after a RemoveRaftVoter of its id under an old directory id).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from kafka_rpc.protocol.record_batch import Batch, decode_batches
from kafka_rpc.protocol.uuids import uuid_text
from kafka_rpc.raft.api import RawSnapshotReader
from kafka_rpc.raft.base import (
    _CAUGHT_UP_FETCH_MS,
    _E,
    _NONE,
    _PROBE_BASE,
    ADD_RAFT_VOTER,
    API_VERSIONS,
    FOLLOWER,
    LEADER,
    REMOVE_RAFT_VOTER,
    UNATTACHED,
    UPDATE_RAFT_VOTER,
    _AddVoterReq,
    _AddVoterResp,
    _ApiVersionsReq,
    _CoreBase,
    _RemoveVoterReq,
    _RemoveVoterResp,
    _ReplicaState,
    _UpdateVoterReq,
    _UpdateVoterResp,
    _VoterOp,
)
from kafka_rpc.raft.voters import (
    VoterNode,
    VoterSet,
    decode_control_records,
    encode_voters_control_batch,
)

log = logging.getLogger("kafka_rpc.raft")

_HEADER_PROBE = 64 * 1024


def _first_batch(reader: RawSnapshotReader) -> Batch | None:
    """The first (header) batch of a snapshot, read without decoding the rest."""
    head = reader.read(0, 12)
    if len(head) < 12:
        return None
    size = int.from_bytes(head[8:12], "big", signed=True) + 12
    data = reader.read(0, max(size, 0))
    batches = decode_batches(data, allow_partial_tail=True)
    return batches[0] if batches else None


def _replica_key(voter_id: int, directory_id: UUID) -> str:
    """Kafka's ``ReplicaKey.toString``: ``ReplicaKey(id=2, directoryId=<base64>)``."""
    return f"ReplicaKey(id={voter_id}, directoryId={uuid_text(directory_id)})"


def _replica_keys(voters: VoterSet) -> str:
    """The voter set's keys as Kafka prints a ``Set<ReplicaKey>``: ``[key, key]`` (ascending id;
    Kafka's order is its HashSet's)."""
    return "[" + ", ".join(_replica_key(v.id, v.directory_id) for v in voters.values()) + "]"


def _duplicate_message(voter_id: int, directory_id: UUID, voters: VoterSet) -> str:
    """Kafka ``AddVoterHandler``'s DUPLICATE_VOTER message."""
    return (f"The voter id for {_replica_key(voter_id, directory_id)} is already part of the "
            f"set of voters {_replica_keys(voters)}.")  # fmt: skip


class _Reconfig(_CoreBase):
    """The voter set of the log: replay, replica states by voter key, addresses."""

    # ================================================================== replay
    def _replay_control_records(self, now: int) -> None:
        """Kafka ``updateState``: load the latest snapshot's control records when nothing was
        read yet or the log start moved past what was read, then every batch of the log from
        where the last read stopped. Raises ControlRecordError for an unreadable record."""
        crs = self._crs
        latest = self.log.latest_snapshot_id()
        if (crs.next_offset == -1 or crs.next_offset < self.log.start_offset) and (
            latest is not None
        ):
            reader = self.log.read_snapshot(latest)
            crs.clear()
            if reader is not None:
                # Kafka's snapshots hold the KRaft control records in their header batch only
                head = _first_batch(reader)
                if head is not None and head.is_control:
                    crs.update_from_batch(head, override_offset=latest.offset - 1)
            crs.next_offset = latest.offset
        elif crs.next_offset == -1:
            crs.next_offset = self.log.start_offset
        if self.log.end_offset > crs.next_offset:
            self._feed_batches(now, self.log.batches(crs.next_offset, self.log.end_offset),
                               notify=False)  # fmt: skip
        self._voters_changed(now)

    def _feed_batches(self, now: int, batches: Iterable[Batch], notify: bool = True) -> None:
        """Register the control records of batches just appended to the log (in order, from
        the history's next offset on)."""
        crs = self._crs
        before = (len(crs.voters), len(crs.kraft))
        for b in batches:
            if b.last_offset < crs.next_offset:
                continue
            if b.is_control:
                crs.update_from_batch(b)
            else:
                crs.next_offset = b.last_offset + 1
        if notify and (len(crs.voters), len(crs.kraft)) != before:
            self._voters_changed(now)

    @staticmethod
    def _check_control_batches(batches: Iterable[Batch]) -> None:
        """Raise ControlRecordError when a control batch holds a record this replica cannot
        read (checked before a follower appends, so such a record never enters the log)."""
        for b in batches:
            if b.is_control:
                decode_control_records(b)

    def _truncate_voters(self, now: int, end: int) -> None:
        """The log was truncated to ``end`` (Kafka ``truncateNewEntries``)."""
        self._crs.truncate_new_entries(end)
        self._voters_changed(now)

    def _trim_voters(self, snapshot_offset: int) -> None:
        """A snapshot ending at ``snapshot_offset`` was frozen (Kafka
        ``truncateOldEntries(offset - 1)``)."""
        self._crs.truncate_old_entries(snapshot_offset - 1)

    def _voters_changed(self, now: int) -> None:
        """Derive :attr:`voters` and :attr:`is_voter` from the latest voter set; on the leader,
        move replica states between voters and observers and recompute the high watermark
        (Kafka ``LeaderState.updateVoterAndObserverStates``)."""
        vs = self.voter_set
        lst = self.config.listener_name
        voters: dict[int, tuple[str, int]] = {}
        for vid in sorted(vs):
            node = vs[vid]
            addr = node.address(lst)
            if addr is None:
                addr = next(iter(node.endpoints.values()), ("", 0))
            voters[vid] = addr
        self.voters = voters
        was = self._voter
        self._voter = self.node_id >= 0 and vs.is_voter(self.node_id, self.config.directory_id)
        if was != self._voter:
            log.info("node %d: %s", self.node_id,
                     "now a voter" if self._voter else "no longer a voter")  # fmt: skip
            if self._voter and self.state == UNATTACHED and self._election_deadline is None:
                self._election_deadline = now + self._random_election_timeout()
        if self.state == LEADER:
            self._rebalance_replica_states()
            self._update_high_watermark(now)

    def _rebalance_replica_states(self) -> None:
        vs = self.voter_set
        new: dict[int, _ReplicaState] = {}
        for vid in vs:
            node = vs[vid]
            rs = self._replicas.get(vid)
            if rs is not None and (vid == self.node_id or node.is_voter(vid, rs.directory_id)
                                   or rs.directory_id.int == 0):  # fmt: skip
                new[vid] = rs
                continue
            if rs is not None:
                self._observers[(vid, rs.directory_id)] = rs
            found = None
            for key in list(self._observers):
                if node.is_voter(*key):
                    found = self._observers.pop(key)
                    break
            new[vid] = found if found is not None else _ReplicaState(directory_id=node.directory_id)
        for vid, rs in self._replicas.items():
            if vid in new:
                continue
            if vid == self.node_id:
                new[vid] = rs
            else:
                self._observers[(vid, rs.directory_id)] = rs
        self._replicas = new

    def _replica_state(self, replica: int, directory: UUID) -> tuple[_ReplicaState, bool]:
        """The leader's state of a fetching replica and whether it counts as a voter (Kafka
        ``LeaderState.getOrCreateReplicaState``: a voter id with another directory id is an
        observer)."""
        if self.voter_set.is_voter(replica, directory):
            rs = self._replicas.get(replica)
            if rs is None:
                rs = self._replicas[replica] = _ReplicaState()
            rs.directory_id = directory
            return rs, True
        key = (replica, directory)
        rs = self._observers.get(key)
        if rs is None:
            rs = self._observers[key] = _ReplicaState(directory_id=directory)
        return rs, False

    # ================================================================== local node
    def _local_voter_node(self) -> VoterNode:
        """This replica as a voter entry: its directory id, its listeners (``local_listeners``,
        else its entry's endpoints in the latest voter set) and its kraft.version range."""
        c = self.config
        endpoints = dict(c.local_listeners)
        if not endpoints:
            cur = self.voter_set.get(self.node_id)
            if cur is not None:
                endpoints = dict(cur.endpoints)
            elif self.node_id in c.voters:
                endpoints = {c.listener_name: c.voters[self.node_id]}
        lo, hi = c.kraft_version_supported
        return VoterNode(self.node_id, c.directory_id, endpoints, lo, hi)

    # ================================================================== addresses
    def address_of(self, destination: int) -> tuple[str, int] | None:
        """The (host, port) the driver connects to for an ``Outbound`` to ``destination``: a
        voter of the latest set (its ``listener_name`` endpoint), a bootstrap server (Kafka's
        synthetic ids -2, -3, ...), the leader from the endpoints a response or request named,
        or the node an AddRaftVoter probes; None when unknown (the driver fails the request as
        BROKER_NOT_AVAILABLE)."""
        extra = self._extra_addresses.get(destination)
        if extra is not None:
            return extra
        if destination <= -2:
            return self._bootstrap_ids.get(destination)
        node = self.voter_set.get(destination)
        if node is not None:
            addr = node.address(self.config.listener_name)
            if addr is not None:
                return addr
        return self._seen_endpoints.get(destination)

    # ================================================================== follower side
    def _maybe_send_voter_update(self, now: int) -> bool:
        """A Follower whose update-voter timer ran out (Kafka ``pollFollowerAsVoter``,
        ``shouldSendUpdateVoteRequest``; ``pollFollowerAsObserver``,
        ``shouldSendAddOrRemoveVoterRequest``). A voter sends UpdateRaftVoter{its directory id,
        listeners, kraft.version range} when, at kraft.version >= 1, its entry in the latest
        voter set differs from that, or, at kraft.version 0, it has not yet updated this
        leader (the 0 -> 1 upgrade's voter information, once per leader). An observer with the
        controller role and ``auto_join`` at kraft.version >= 1 sends RemoveRaftVoter{its id,
        the old directory id} when its id is a voter under another directory id, else
        AddRaftVoter{its id and directory id, its listeners, TimeoutMs = the request timeout,
        AckWhenCommitted false}. Sending restarts the timer, so a leader that keeps refusing
        is asked once per fetch.timeout.ms while the Fetches go on. A voter without a directory
        id or listeners sends nothing. True: the poll sends no Fetch now (one request at a
        time to the leader, as Kafka's ``RequestManager``)."""
        c = self.config
        if not self._update_voter_due or self.state != FOLLOWER or self.leader_id < 0:
            return False
        if self.node_id < 0:
            return False
        kv = self._crs.last_kraft_version()
        vs = self.voter_set
        leader = self.leader_id
        if self.is_voter:
            local = self._local_voter_node()
            if c.directory_id.int == 0 or not local.endpoints:
                return False  # nothing a leader could take (it answers INVALID_REQUEST)
            if kv >= 1:
                if not vs.needs_update(local):
                    return False
            elif self._updated_leader:
                return False
            if self._can_send(now, leader):
                self._restart_update_voter_timer(now)
                self._send(now, leader, UPDATE_RAFT_VOTER, self._update_voter_request(local))
            return True
        if kv < 1 or not c.can_become_voter or not c.auto_join:
            return False
        if self._can_send(now, leader):
            self._restart_update_voter_timer(now)
            old = vs.get(self.node_id)
            if old is not None:
                log.info("node %d: removing our id's old directory id %s from the voters",
                         self.node_id, old.directory_id)  # fmt: skip
                self._send(now, leader, REMOVE_RAFT_VOTER, _RemoveVoterReq.RemoveRaftVoterRequest(
                    cluster_id=c.cluster_id, voter_id=self.node_id,
                    voter_directory_id=old.directory_id))  # fmt: skip
            else:
                local = self._local_voter_node()
                log.info("node %d: auto-joining the voters", self.node_id)
                m = _AddVoterReq
                self._send(now, leader, ADD_RAFT_VOTER, m.AddRaftVoterRequest(
                    cluster_id=c.cluster_id,
                    timeout_ms=c.request_timeout_ms,
                    voter_id=self.node_id,
                    voter_directory_id=c.directory_id,
                    listeners=tuple(m.Listener(name=n, host=h, port=p)
                                    for n, (h, p) in local.endpoints.items()),
                    ack_when_committed=False,
                ))  # fmt: skip
        return True

    def _restart_update_voter_timer(self, now: int) -> None:
        """Kafka ``FollowerState.resetUpdateVoterSetPeriod``."""
        self._update_voter_deadline = now + self.config.fetch_timeout_ms
        self._update_voter_due = False

    def _update_voter_request(self, local: VoterNode) -> Any:
        """Kafka ``RaftUtil.updateVoterRequest``: this voter's key, listeners and range, for
        the leader's epoch."""
        m = _UpdateVoterReq
        return m.UpdateRaftVoterRequest(
            cluster_id=self.config.cluster_id,
            current_leader_epoch=self.epoch,
            voter_id=self.node_id,
            voter_directory_id=self.config.directory_id,
            listeners=tuple(
                m.Listener(name=n, host=h, port=p) for n, (h, p) in local.endpoints.items()
            ),
            kraft_version_feature=m.KRaftVersionFeature(
                min_supported_version=local.kraft_min, max_supported_version=local.kraft_max
            ),
        )

    def _on_voter_change_response(self, now: int, dest: int, api: int, resp: Any) -> bool:
        """Kafka ``handleAddVoterResponse``/``handleRemoveVoterResponse``: NONE,
        REQUEST_TIMED_OUT and DUPLICATE_VOTER (add) or VOTER_NOT_FOUND (remove) restart the
        update-voter timer; ``handleUpdateVoterResponse``: NONE or UNSUPPORTED_VERSION mark
        the leader as updated and restart it (the UpdateRaftVoterResponse's CurrentLeader goes
        through the common checks first). Any other code is logged and backed off from; the
        request goes again when the timer runs out."""
        code = resp.error_code
        if api == UPDATE_RAFT_VOTER:
            cl = resp.current_leader
            if cl.leader_epoch >= 0 and code != _E.UNSUPPORTED_VERSION:
                r = self._common(now, code, cl.leader_id, cl.leader_epoch)
                if r is not None:
                    return r
            done = code in (_NONE, _E.UNSUPPORTED_VERSION)
        elif api == ADD_RAFT_VOTER:
            done = code in (_NONE, _E.REQUEST_TIMED_OUT, _E.DUPLICATE_VOTER)
        else:
            done = code in (_NONE, _E.REQUEST_TIMED_OUT, _E.VOTER_NOT_FOUND)
        if not done:
            log.warning("node %d: voter request %d to %d failed: %s %s", self.node_id, api,
                        dest, _E.for_code(code).name,
                        getattr(resp, "error_message", None) or "")  # fmt: skip
            return False
        if self.state == FOLLOWER and dest == self.leader_id:
            self._restart_update_voter_timer(now)
            if api == UPDATE_RAFT_VOTER:
                self._updated_leader = True
        return True

    # ================================================================== leader records
    def _start_of_epoch_batch(self, now: int, leader_change: bytes) -> Batch:
        """The first batch of a leader's epoch (Kafka
        ``LeaderState.appendStartOfEpochControlRecords``): the LeaderChangeMessage, and at
        kraft.version >= 1, when the voter set came from the bootstrap checkpoint (offset -1)
        or this leader's own entry differs from its listeners and range, KRaftVersionRecord
        and VotersRecord (the set with this leader's entry replaced) in the same batch."""
        crs = self._crs
        kv = crs.last_kraft_version()
        voters = None
        if kv >= 1:
            off = crs.last_voter_set_offset()
            vs = self.voter_set
            local = self._local_voter_node()
            if off is not None and (off == -1 or vs.needs_update(local)):
                voters = vs.update(local) or vs
        return encode_voters_control_batch(
            self.log.end_offset,
            self.epoch,
            voters,
            self._wall(now),
            kraft_version=kv if voters is not None else None,
            leader_change=leader_change,
        )

    def _append_voters_record(self, now: int, voters: VoterSet) -> int:
        """Append one control batch holding VotersRecord{``voters``} (Kafka
        ``LeaderState.appendVotersRecord``), after the records still lingering; returns its
        offset. The new set is in force at once."""
        self._flush_pending(now, force=True)
        batch = encode_voters_control_batch(self.log.end_offset, self.epoch, voters,
                                            self._wall(now))  # fmt: skip
        self.log.append([batch])
        self._feed_batches(now, [batch])
        self._wake_parked(now)
        return batch.base_offset

    # ================================================================== the pending change
    def _expire_voter_op(self, now: int) -> None:
        """Kafka ``LeaderState.maybeExpirePendingOperation``: a change not done within its
        timer is answered REQUEST_TIMED_OUT (if not answered yet) and dropped."""
        op = self._voter_op
        if op is not None and now >= op.deadline_ms:
            self._voter_op = None
            op.finish(int(_E.REQUEST_TIMED_OUT), "the voter change timed out")

    def _voter_op_committed(self, now: int) -> None:
        """Kafka ``AddVoterHandler``/``RemoveVoterHandler.highWatermarkUpdated``: the change is
        done once the high watermark passes its record; a leader that removed itself resigns."""
        op = self._voter_op
        if op is None or op.last_offset is None or self.high_watermark <= op.last_offset:
            return
        self._voter_op = None
        op.finish(_NONE, None)
        if op.kind == "remove" and op.voter_id == self.node_id and self.state == LEADER:
            log.info("node %d: removed from the voters, resigning", self.node_id)
            self._resign_after_removal = True

    def _abort_voter_op(self, code: int) -> None:
        op, self._voter_op = self._voter_op, None
        if op is not None:
            op.finish(code, "leadership lost" if code == _E.NOT_LEADER_OR_FOLLOWER else None)

    # ================================================================== AddRaftVoter
    def _leader_only_error(self, cluster_id: str | None) -> int | None:
        if not self._cluster_ok(cluster_id):
            return int(_E.INCONSISTENT_CLUSTER_ID)
        return self._validate_leader_only(self.epoch)

    def _voters_record_uncommitted(self) -> bool:
        off = self._crs.last_voter_set_offset()
        return off is None or off >= self.high_watermark

    def _on_add_voter(self, now: int, version: int, req: Any, reply: Callable) -> None:
        """Kafka ``handleAddVoterRequest`` + ``AddVoterHandler``, checks in Kafka's order (see
        the module docstring); ``reply`` is called now or once the change is done."""

        def answer(code: int, msg: str | None = None) -> None:
            reply(_AddVoterResp.AddRaftVoterResponse(error_code=code, error_message=msg))

        err = self._leader_only_error(req.cluster_id)
        if err is not None:
            return answer(err)
        if req.voter_id < 0 or req.voter_directory_id.int == 0:
            return answer(int(_E.INVALID_REQUEST), "invalid voter key")
        endpoints = {lst.name: (lst.host, lst.port) for lst in req.listeners}
        addr = endpoints.get(self.config.listener_name)
        if addr is None:
            return answer(int(_E.INVALID_REQUEST),
                          f"no endpoint for the listener {self.config.listener_name}")  # fmt: skip
        refused = self._voter_change_refused(now, "add")
        if refused is not None:
            return answer(*refused)
        if req.voter_id in self.voter_set:
            return answer(int(_E.DUPLICATE_VOTER),
                          _duplicate_message(req.voter_id, req.voter_directory_id,
                                             self.voter_set))  # fmt: skip
        self._probe_seq += 1
        dest = _PROBE_BASE - self._probe_seq
        self._extra_addresses[dest] = addr
        ack = bool(req.ack_when_committed) if version >= 1 else True
        self._voter_op = _VoterOp(
            kind="add",
            voter_id=req.voter_id,
            directory_id=req.voter_directory_id,
            endpoints=endpoints,
            deadline_ms=now + self.config.request_timeout_ms,
            reply=answer,
            probe=dest,
            ack_when_committed=ack,
        )
        self._send(now, dest, API_VERSIONS, _ApiVersionsReq.ApiVersionsRequest(
            client_software_name="kafka-rpc", client_software_version="1.0"))  # fmt: skip
        return None

    def _on_api_versions_response(self, now: int, dest: int, resp: Any) -> bool:
        """Kafka ``AddVoterHandler.handleApiVersionsResponse`` (``resp`` None: it failed)."""
        self._extra_addresses.pop(dest, None)
        op = self._voter_op
        if op is None or op.probe != dest or op.last_offset is not None:
            return True
        if resp is None or resp.error_code:
            self._voter_op = None
            op.finish(int(_E.REQUEST_TIMED_OUT), "ApiVersions of the new voter failed")
            return resp is not None
        level = self._crs.last_kraft_version()
        feat = next((f for f in resp.supported_features if f.name == "kraft.version"), None)
        if feat is None or not feat.min_version <= level <= feat.max_version:
            self._voter_op = None
            op.finish(int(_E.INVALID_REQUEST),
                      f"the new voter does not support kraft.version {level}")  # fmt: skip
            return True
        if not self._caught_up(now, op.voter_id, op.directory_id):
            self._voter_op = None
            op.finish(int(_E.REQUEST_TIMED_OUT), "the new voter is lagging behind")
            return True
        node = VoterNode(op.voter_id, op.directory_id, op.endpoints, feat.min_version,
                         feat.max_version)  # fmt: skip
        new = self.voter_set.add(node)
        if new is None:
            self._voter_op = None
            op.finish(
                int(_E.DUPLICATE_VOTER),
                _duplicate_message(op.voter_id, op.directory_id, self.voter_set),
            )
            return True
        op.last_offset = self._append_voters_record(now, new)
        if not op.ack_when_committed:
            op.finish(_NONE, None)
        self._voter_op_committed(now)
        return True

    def _voter_change_refused(self, now: int, verb: str) -> tuple[int, str] | None:
        """The checks AddRaftVoter and RemoveRaftVoter share, in Kafka's order (after the key
        checks; ``AddVoterHandler`` / ``RemoveVoterHandler``): a change in flight or no high
        watermark in this epoch or an uncommitted VotersRecord -> REQUEST_TIMED_OUT,
        kraft.version 0 -> UNSUPPORTED_VERSION; None when the change may go on. ``verb``:
        "add" or "remove", for the message."""
        self._expire_voter_op(now)
        if self._voter_op is not None:
            return int(_E.REQUEST_TIMED_OUT), "a voter change is already in progress"
        if self.high_watermark < 0:
            return int(_E.REQUEST_TIMED_OUT), "the leader has no high watermark yet"
        if self._crs.last_kraft_version() < 1:
            return int(_E.UNSUPPORTED_VERSION), f"kraft.version 0 cannot {verb} voters"
        if self._voters_record_uncommitted():
            return int(_E.REQUEST_TIMED_OUT), "the latest voter change is not committed"
        return None

    def _caught_up(self, now: int, voter_id: int, directory: UUID) -> bool:
        """Kafka ``LeaderState.isReplicaCaughtUp``: an observer of exactly (id, directory id)
        that reached the leader's log end offset once and fetched within the last hour."""
        rs = self._observers.get((voter_id, directory))
        if rs is None or rs.last_caught_up_ms < 0 or rs.last_fetch_ms < 0:
            return False
        return now - rs.last_fetch_ms <= _CAUGHT_UP_FETCH_MS

    # ================================================================== RemoveRaftVoter
    def _on_remove_voter(self, now: int, version: int, req: Any, reply: Callable) -> None:
        """Kafka ``handleRemoveVoterRequest`` + ``RemoveVoterHandler``."""

        def answer(code: int, msg: str | None = None) -> None:
            reply(_RemoveVoterResp.RemoveRaftVoterResponse(error_code=code, error_message=msg))

        err = self._leader_only_error(req.cluster_id)
        if err is not None:
            return answer(err)
        if req.voter_id < 0 or req.voter_directory_id.int == 0:
            return answer(int(_E.INVALID_REQUEST), "invalid voter key")
        refused = self._voter_change_refused(now, "remove")
        if refused is not None:
            return answer(*refused)
        new = self.voter_set.remove(req.voter_id, req.voter_directory_id)
        if new is None:
            return answer(
                int(_E.VOTER_NOT_FOUND),
                f"Cannot remove voter {_replica_key(req.voter_id, req.voter_directory_id)}"
                f" from the set of voters {_replica_keys(self.voter_set)}",
            )
        op = _VoterOp(
            kind="remove",
            voter_id=req.voter_id,
            directory_id=req.voter_directory_id,
            endpoints={},
            deadline_ms=now + self.config.request_timeout_ms,
            reply=answer,
        )
        self._voter_op = op
        op.last_offset = self._append_voters_record(now, new)
        self._voter_op_committed(now)
        return None

    # ================================================================== UpdateRaftVoter
    def _update_voter_resp(self, code: int, listener: str | None = None) -> Any:
        m = _UpdateVoterResp
        host, port = "", 0
        if self.leader_id >= 0:
            addr = self.voter_set.address(self.leader_id, listener or self.config.listener_name)
            if addr is None:
                addr = self.voters.get(self.leader_id)
            if addr is not None:
                host, port = addr
        return m.UpdateRaftVoterResponse(
            error_code=code,
            current_leader=m.CurrentLeader(
                leader_id=self.leader_id, leader_epoch=self.epoch, host=host, port=port
            ),
        )

    def _on_update_voter(self, now: int, version: int, req: Any) -> Any:
        """Kafka ``handleUpdateVoterRequest`` + ``UpdateVoterHandler``, the checks in Kafka's
        order (cluster id, epoch, leadership, a malformed voter: INVALID_REQUEST, a change in
        progress or no high watermark: REQUEST_TIMED_OUT, then by level, a range without the
        current level: INVALID_REQUEST, an unknown voter: VOTER_NOT_FOUND). At kraft.version
        1 an uncommitted VotersRecord is REQUEST_TIMED_OUT, the voter is matched by id and
        directory id, and a VotersRecord with its new entry is appended and NONE answered at
        once (no wait for the commit). At kraft.version 0 (Kafka 4.1+) the voter is matched by
        id only and its entry replaced in the leader's volatile voters (memory only, lost with
        the leadership), which the 0 -> 1 upgrade writes (:meth:`upgrade_kraft_version`).
        Every answer carries CurrentLeader."""
        if not self._cluster_ok(req.cluster_id):
            return self._update_voter_resp(int(_E.INCONSISTENT_CLUSTER_ID))
        err = self._validate_leader_only(req.current_leader_epoch)
        if err is not None:
            return self._update_voter_resp(err)
        level = self._crs.last_kraft_version()
        endpoints = {lst.name: (lst.host, lst.port) for lst in req.listeners}
        feat = req.kraft_version_feature
        lo, hi = feat.min_supported_version, feat.max_supported_version
        if (
            req.voter_id < 0
            or req.voter_directory_id.int == 0
            or self.config.listener_name not in endpoints
            or lo < 0
            or hi < 0
            or hi < lo
        ):
            return self._update_voter_resp(int(_E.INVALID_REQUEST))  # fmt: skip
        self._expire_voter_op(now)
        if self._voter_op is not None or self.high_watermark < 0:
            return self._update_voter_resp(int(_E.REQUEST_TIMED_OUT))
        if level >= 1 and self._voters_record_uncommitted():
            return self._update_voter_resp(int(_E.REQUEST_TIMED_OUT))
        if level < 1 and self._volatile_voters is None:
            return self._update_voter_resp(int(_E.REQUEST_TIMED_OUT))
        if not lo <= level <= hi:
            return self._update_voter_resp(int(_E.INVALID_REQUEST))
        node = VoterNode(req.voter_id, req.voter_directory_id, endpoints, lo, hi)
        if level < 1:
            assert self._volatile_voters is not None
            patched = self._volatile_voters.update_ignoring_directory_id(node)
            if patched is None:
                return self._update_voter_resp(int(_E.VOTER_NOT_FOUND))
            # (check quorum is left to the voter's Fetches here: Kafka's UpdateVoterHandler
            # also counts this answer, which the simulator's check-quorum model does not)
            self._volatile_voters = patched
            return self._update_voter_resp(_NONE)
        new = self.voter_set.update(node)
        if new is None:
            return self._update_voter_resp(int(_E.VOTER_NOT_FOUND))
        if new != self.voter_set:
            self._append_voters_record(now, new)
        self._voter_seen(now, req.voter_id)
        return self._update_voter_resp(_NONE)

    # ================================================================== kraft.version
    def upgrade_kraft_version(
        self, now: int, epoch: int, level: int, validate_only: bool
    ) -> tuple[int, str | None]:
        """The controller's UpdateFeatures of kraft.version (Kafka
        ``RaftClient.upgradeKRaftVersion`` -> ``LeaderState.maybeAppendUpgradedKRaftVersion``):
        ``(error code, message)``. NOT_LEADER_OR_FOLLOWER when this node does not lead
        ``epoch``; NONE without a change for the current level; INVALID_UPDATE_VERSION for a
        lower level (there is no downgrade), a level outside this node's range, a voter whose
        range excludes it ("Not all of the voters support it."), or a voter without a
        directory id. The voters are the leader's volatile voters at kraft.version 0: the
        static set with the leader's own entry and every entry an UpdateRaftVoter of this
        epoch sent (Kafka 4.1+ ``KRaftVersionUpgrade.Voters``), so a static quorum can be
        upgraded once each voter has told this leader its directory id and range. Otherwise,
        unless ``validate_only``, one control batch with KRaftVersionRecord{``level``} and
        VotersRecord{the voters} is appended and NONE returned (the change is in force from its
        append)."""
        if self.state != LEADER or epoch != self.epoch or self._shutdown_deadline is not None:
            return int(_E.NOT_LEADER_OR_FOLLOWER), f"node {self.node_id} does not lead {epoch}"
        current = self._crs.last_kraft_version()
        if level == current:
            return _NONE, None
        if level < current:
            return int(_E.INVALID_UPDATE_VERSION), "kraft.version cannot be downgraded"
        lo, hi = self.config.kraft_version_supported
        if not lo <= level <= hi:
            return int(_E.INVALID_UPDATE_VERSION), f"kraft.version {level} is not supported"
        vs = self._volatile_voters if self._volatile_voters is not None else self.voter_set
        upgraded = vs.update_ignoring_directory_id(self._local_voter_node()) or vs
        prefix = f"Invalid update version {level} for feature kraft.version."
        if any(not upgraded[v].supports(level) for v in upgraded):
            return int(_E.INVALID_UPDATE_VERSION), f"{prefix} Not all of the voters support it."
        missing = sorted(v for v in upgraded if upgraded[v].directory_id.int == 0)
        if missing:
            return int(_E.INVALID_UPDATE_VERSION), (
                f"{prefix} The voters {missing} have no known directory id."
            )
        if validate_only:
            return _NONE, None
        self._flush_pending(now, force=True)
        batch = encode_voters_control_batch(self.log.end_offset, self.epoch, upgraded,
                                            self._wall(now), kraft_version=level)  # fmt: skip
        self._volatile_voters = None
        self.log.append([batch])
        self._feed_batches(now, [batch])
        self._wake_parked(now)
        return _NONE, None
