"""Elections: the part of :class:`~kafka_rpc.raft.core.RaftCore` that moves the replica between
Kafka's ``QuorumState`` states and runs their timers.

The transitions (Unattached, Prospective, Candidate, Leader, Follower, Resigned; KIP-996
pre-vote), the poll of each state (election, fetch, check-quorum and BeginQuorumEpoch timers),
the Vote, BeginQuorumEpoch and EndQuorumEpoch requests this replica sends, answers and whose
answers it takes (Kafka ``KafkaRaftClient``'s ``handleVoteRequest``,
``handleBeginQuorumEpochRequest``, ``handleEndQuorumEpochRequest`` and their responses).
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from kafka_rpc.protocol import codec
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.base import (
    _E,
    _NONE,
    _ZERO_UUID,
    BEGIN_QUORUM_EPOCH,
    CANDIDATE,
    END_QUORUM_EPOCH,
    FOLLOWER,
    LEADER,
    OBSERVER_SESSION_TIMEOUT_MS,
    PROSPECTIVE,
    RESIGNED,
    UNATTACHED,
    VOTE,
    _BeginReq,
    _BeginResp,
    _CoreBase,
    _EndReq,
    _EndResp,
    _LeaderChange,
    _Pending,
    _ReplicaState,
    _VoteReq,
    _VoteResp,
)

log = logging.getLogger("kafka_rpc.raft")


class _Election(_CoreBase):
    """Vote, BeginQuorumEpoch, EndQuorumEpoch, the state transitions and the per-state timers."""

    # ================================================================== transitions
    # Kafka ``QuorumState``'s transitions (Kafka 4.x with KIP-996 pre-vote):
    # Unattached/Follower/Candidate -> Prospective (same epoch, memory only) -> Candidate
    # (epoch + 1) -> Leader -> Resigned; Unattached at the same epoch only from Prospective;
    # the epoch never goes down. Each transition ends in :meth:`_transitioned`.
    def _transitioned(self) -> None:
        if self.on_transition is not None:
            self.on_transition(self)

    def _clear_role_state(self) -> None:
        self._election_deadline = self._fetch_deadline = None
        self._check_quorum_deadline = self._begin_epoch_deadline = None
        self._granted, self._rejected = set(), set()
        self._fetched_from_leader = False
        self._end_epoch_unacked = set()
        if self._download is not None:
            self._download.writer.close()
            self._download = None
        if self.state == LEADER:
            self._leave_leader()

    def _leave_leader(self) -> None:
        self._abort_voter_op(int(_E.NOT_LEADER_OR_FOLLOWER))
        self._resign_after_removal = False
        self._pending = _Pending()
        self._replicas = {}
        self._observers = {}
        for p in self._parked:
            self._reply_fetch_error(p, int(_E.NOT_LEADER_OR_FOLLOWER))
        self._parked = []
        # uncommitted records of our epoch stay in the log: a new leader truncates them away
        # or commits them (Kafka keeps them too).

    def _vote_lost(self) -> bool:
        """The election (pre-vote or vote) can no longer be won (Kafka ``isVoteRejected``)."""
        return len(self.voters) - len(self._rejected) < self._majority()

    def _to_unattached(self, now: int, epoch: int, persist: bool = True, leader: int = -1) -> None:
        """Kafka ``transitionToUnattached``: ``epoch`` > the current one, or equal from
        Prospective (a lost pre-election); the vote is kept only in the same epoch. The
        election timer runs on from a Candidate, an Unattached, a Resigned and a Prospective
        whose election was not lost; anyone else draws a new one (observers have none)."""
        keep = None
        if self.state in (CANDIDATE, UNATTACHED, RESIGNED) or (
            self.state == PROSPECTIVE and not self._vote_lost()
        ):
            keep = self._election_deadline
        self._clear_role_state()
        if epoch > self.epoch:
            self.voted_id, self._voted_dir = -1, None
        self.epoch, self.state, self.leader_id = epoch, UNATTACHED, leader
        if self.is_voter:
            self._election_deadline = (
                keep if keep is not None else now + self._random_election_timeout()
            )
        if persist:
            self._persist()
        self._reset_connections()
        self._transitioned()
        self._notify_leader_change()

    def _vote_for(self, now: int, epoch: int, candidate: int, directory: UUID | None) -> None:
        """Kafka ``unattachedAddVotedState`` / ``prospectiveAddVotedState``: grant a standard
        vote in the current epoch (persisted before the answer); an Unattached stays
        Unattached, a Prospective stays Prospective with a fresh pre-election. Both draw a new
        election timeout."""
        prospective = self.state == PROSPECTIVE
        self.voted_id, self._voted_dir = candidate, directory
        self._election_deadline = now + self._random_election_timeout()
        if prospective:
            self._granted, self._rejected = {self.node_id}, set()
        self._persist()
        self._transitioned()

    def _set_follower(self, now: int, leader: int) -> None:
        self._clear_role_state()
        self.state, self.leader_id = FOLLOWER, leader
        self._fetch_deadline = now + self.config.fetch_timeout_ms
        self._reset_connections()

    def _to_follower(self, now: int, epoch: int, leader: int) -> None:
        """Kafka ``transitionToFollower`` (durable): a higher epoch, or the current one when
        no leader is known here or from Prospective (a lost pre-election)."""
        if epoch > self.epoch:
            self.voted_id, self._voted_dir = -1, None
        self.epoch = epoch
        self.leader_id = leader
        self._persist()
        self._set_follower(now, leader)
        self._transitioned()
        self._notify_leader_change()

    def _to_prospective(self, now: int) -> None:
        """KIP-996 (Kafka ``transitionToProspective``, from Unattached, Follower or Candidate):
        ask for pre-votes at the current epoch, keeping the known leader and the vote cast in
        it; nothing is persisted. Wins at once when this node alone is a majority."""
        self._clear_role_state()
        self.state = PROSPECTIVE
        self._granted, self._rejected = {self.node_id}, set()
        self._election_deadline = now + self._random_election_timeout()
        self._reset_connections()
        self._transitioned()
        if len(self._granted) >= self._majority():
            self._to_candidate(now)

    def _prospective_lost(self, now: int) -> None:
        """Kafka ``prospectiveTransitionAfterElectionLoss``: back to Follower of the known
        leader, else Unattached at the same epoch."""
        if self.leader_id >= 0 and self.leader_id in self.voters:
            self._to_follower(now, self.epoch, self.leader_id)
        else:
            self._to_unattached(now, self.epoch, leader=self.leader_id)

    def _to_candidate(self, now: int) -> None:
        """Kafka ``transitionToCandidate``: only a Prospective that won its pre-election (or
        the only voter) stands, at epoch + 1, voting for itself (persisted)."""
        self._clear_role_state()
        self.epoch += 1
        self.state, self.leader_id, self.voted_id = CANDIDATE, -1, self.node_id
        self._voted_dir = None
        self._granted, self._rejected = {self.node_id}, set()
        self._election_deadline = now + self._random_election_timeout()
        self._persist()
        self._reset_connections()
        self._transitioned()
        self._notify_leader_change()
        if len(self._granted) >= self._majority():
            self._to_leader(now)

    def _to_leader(self, now: int) -> None:
        granting = sorted(self._granted)
        self._clear_role_state()
        self.state, self.leader_id = LEADER, self.node_id
        self._persist()
        self._reset_connections()
        self.high_watermark = -1  # the leader starts without one (Kafka ``LeaderState``)
        self._epoch_start_offset = self.log.end_offset
        vs = self.voter_set
        self._replicas = {v: _ReplicaState(directory_id=vs[v].directory_id) for v in vs}
        self._replicas[self.node_id] = _ReplicaState(
            end_offset=self.log.flushed_offset, directory_id=self.config.directory_id
        )
        self._observers = {}
        self._fetched_voters = {self.node_id}
        # check quorum (and BeginQuorumEpoch) only mean something with other voters
        multi = len(self.voters) > 1
        self._check_quorum_deadline = now + self.config.fetch_timeout_ms * 3 // 2 if multi else None
        self._begin_epoch_deadline = now if multi else None  # send BeginQuorumEpoch at once
        body = codec.encode(
            _LeaderChange.LeaderChangeMessage(
                version=0,
                leader_id=self.node_id,
                voters=tuple(_LeaderChange.Voter(voter_id=v) for v in sorted(self.voters)),
                granting_voters=tuple(_LeaderChange.Voter(voter_id=v) for v in granting),
            ),
            0,
        )
        batch = self._start_of_epoch_batch(now, body)
        self.log.append([batch])
        self._feed_batches(now, [batch])
        log.info("node %d: leader of epoch %d from offset %d", self.node_id, self.epoch,
                 self._epoch_start_offset)  # fmt: skip
        self._transitioned()
        self._notify_leader_change()

    def _to_resigned(self, now: int, persist: bool = False) -> None:
        """Memory only (Kafka does not persist Resigned)."""
        successors = []
        if self.state == LEADER:
            others = [(rs.end_offset, v) for v, rs in self._replicas.items()
                      if v in self.voters and v != self.node_id]  # fmt: skip
            successors = [v for _, v in sorted(others, key=lambda x: -x[0])]
        else:
            successors = sorted(v for v in self.voters if v != self.node_id)
        self._clear_role_state()
        self.state = RESIGNED
        self.leader_id = self.node_id
        self._preferred = successors
        self._end_epoch_unacked = set(successors)
        self._election_deadline = now + self._random_election_timeout()
        self._reset_connections()
        self._transitioned()

    def _consistent_leader(self, leader: int, epoch: int) -> bool:
        """Kafka ``hasConsistentLeader``: a message naming this node as leader is consistent
        only while it leads; one naming another leader of our epoch only if that is the leader
        we know (or we know none)."""
        if leader >= 0 and leader == self.node_id:
            return self.state == LEADER
        return epoch != self.epoch or leader < 0 or self.leader_id < 0 or leader == self.leader_id

    def _maybe_transition(self, now: int, leader: int, epoch: int) -> None:
        """Kafka ``maybeTransition``: a higher epoch makes this node follow the named leader
        (or go Unattached without one); the current epoch makes it follow a named leader only
        when it knows none. A claim inconsistent with what this node knows (Kafka throws
        IllegalStateException) is logged and changes nothing."""
        if epoch < self.epoch:
            return
        if not self._consistent_leader(leader, epoch):
            log.error("node %d: leader %d of epoch %d contradicts our state %s (leader %d, "
                      "epoch %d); ignored", self.node_id, leader, epoch, self.state,
                      self.leader_id, self.epoch)  # fmt: skip
            return
        if epoch > self.epoch:
            if leader >= 0:
                self._to_follower(now, epoch, leader)
            else:
                self._to_unattached(now, epoch)
        elif leader >= 0 and self.leader_id < 0 and leader != self.node_id:
            self._to_follower(now, epoch, leader)

    # ================================================================== polls of each state
    def _poll_leader(self, now: int) -> None:
        self._expire_voter_op(now)
        if self._resign_after_removal:
            # Kafka ``RemoveVoterHandler.highWatermarkUpdated`` -> ``requestResign``: a leader
            # whose removal committed resigns (EndQuorumEpoch) and goes on as an observer
            self._to_resigned(now)
            self._poll_resigned(now)
            return
        if self._shutdown_deadline is not None and len(self.voters) > 1:
            self._to_resigned(now)
            self._poll_resigned(now)
            return
        if (
            self._check_quorum_deadline is not None
            and now >= self._check_quorum_deadline
            and len(self.voters) > 1
        ):
            log.warning("node %d: leader of epoch %d lost check quorum; resigning",
                        self.node_id, self.epoch)  # fmt: skip
            self._to_resigned(now)
            self._poll_resigned(now)
            return
        self._flush_pending(now, force=False)
        if self._begin_epoch_deadline is not None and now >= self._begin_epoch_deadline:
            # Kafka ``LeaderState.needToSendBeginQuorumRequests``: every fetch.timeout/2, to the
            # voters that have not fetched (validly) within that time, and only to those
            self._begin_epoch_deadline = now + self.config.fetch_timeout_ms // 2
            for v in self.voters:
                if v != self.node_id and self._needs_begin(now, v) and self._can_send(now, v):
                    self._send(now, v, BEGIN_QUORUM_EPOCH, self._begin_request(v))
        if self._parked:
            keep = []
            for p in self._parked:
                if now >= p.deadline_ms:
                    p.reply(self._fetch_response_valid(now, p.version, p.request, p.replica_id,
                                                       touch=True))  # fmt: skip
                else:
                    keep.append(p)
            self._parked = keep
        stale = [k for k, rs in self._observers.items()
                 if now - rs.last_fetch_ms > OBSERVER_SESSION_TIMEOUT_MS]  # fmt: skip
        for k in stale:
            del self._observers[k]

    def _needs_begin(self, now: int, voter: int) -> bool:
        """Whether the leader sends ``voter`` a BeginQuorumEpoch now: no valid Fetch from it
        within fetch.timeout/2 (never one counts as none)."""
        rs = self._replicas.get(voter)
        if rs is None or rs.last_fetch_ms < 0:
            return True
        return now - rs.last_fetch_ms >= self.config.fetch_timeout_ms // 2

    def _poll_candidate(self, now: int) -> None:
        """Kafka 4.x ``pollCandidate``: votes go to the voters not heard from while the
        election can still be won; when the election timer runs out (a lost election waits for
        it too) the node goes back to Prospective at the same epoch, never straight to a new
        candidacy. While shutting down it campaigns on."""
        if (
            self._shutdown_deadline is None
            and self._election_deadline is not None
            and now >= self._election_deadline
        ):
            log.info("node %d: election of epoch %d not won in time; pre-vote again",
                     self.node_id, self.epoch)  # fmt: skip
            self._to_prospective(now)
            self._poll_prospective(now)
            return
        if not self._vote_lost():
            self._send_votes(now, pre_vote=False)

    def _poll_prospective(self, now: int) -> None:
        """Kafka ``pollProspective``: pre-votes go out while the pre-election can be won; when
        its timer runs out the node returns to Follower of the leader it knew, else to
        Unattached at the same epoch (``prospectiveTransitionAfterElectionLoss``). While
        shutting down it asks on."""
        if (
            self._shutdown_deadline is None
            and self._election_deadline is not None
            and now >= self._election_deadline
        ):
            self._prospective_lost(now)
            if self.state == UNATTACHED:
                self._poll_unattached(now)
            return
        if not self._vote_lost():
            self._send_votes(now, pre_vote=True)

    def _send_votes(self, now: int, pre_vote: bool) -> None:
        end = self._log_end()
        for v in self.voters:
            if v == self.node_id or v in self._granted or v in self._rejected:
                continue
            if self._can_send(now, v):
                self._send(now, v, VOTE, self._vote_request(v, end, pre_vote))

    def _poll_follower(self, now: int) -> None:
        if self._fetch_deadline is not None and now >= self._fetch_deadline:
            if self.is_voter:
                if self._shutdown_deadline is None:
                    log.info("node %d: no fetch response from leader %d for %d ms; pre-vote",
                             self.node_id, self.leader_id,
                             self.config.fetch_timeout_ms)  # fmt: skip
                    self._to_prospective(now)
                    self._poll_prospective(now)
                    return
            else:
                # an observer stays a Follower (Kafka ``pollFollowerAsObserver``) and asks
                # another voter, whose answer names the leader if it changed
                self._fetch_deadline = now + self.config.fetch_timeout_ms
                # (Kafka ``maybeSendFetchToBestNode``: the bootstrap servers when configured)
                others = sorted(self._bootstrap_ids) or sorted(
                    v for v in self.voters if v != self.leader_id
                )
                if others and not self._inflight:
                    self._send_fetch(now, self.rng.choice(others))
                    return
        self._send_fetch(now, self.leader_id)

    def _poll_unattached(self, now: int) -> None:
        if self.is_voter:
            if self._election_deadline is not None and now >= self._election_deadline:
                if self._shutdown_deadline is None:
                    self._to_prospective(now)
                    self._poll_prospective(now)
        else:
            # an observer looks for the leader by fetching from a random bootstrap server
            # (Kafka ``pollUnattachedCommon``; synthetic ids -2, -3, ...), else a random voter
            targets = sorted(self._bootstrap_ids) or sorted(self.voters)
            if targets and not self._inflight:
                self._send_fetch(now, self.rng.choice(targets))

    def _poll_resigned(self, now: int) -> None:
        """Kafka ``pollResigned``: EndQuorumEpoch to the voters that have not acknowledged it;
        after the election timeout, Unattached at epoch + 1 (so that nobody keeps naming this
        node as the leader), unless shutting down."""
        if self._election_deadline is not None and now >= self._election_deadline:
            if self._shutdown_deadline is not None:
                self._election_deadline = None
            else:
                self._to_unattached(now, self.epoch + 1)
                self._poll_unattached(now)
                return
        for v in sorted(self._end_epoch_unacked):
            if self._can_send(now, v):
                self._send(now, v, END_QUORUM_EPOCH, self._end_request())

    # ================================================================== request builders
    def _topic_fields(self) -> dict:
        return {"topic_name": self.config.topic_name, "topic_id": self.config.topic_id}

    def _vote_request(self, dest: int, end: OffsetAndEpoch, pre_vote: bool) -> Any:
        """Kafka ``RaftUtil.singletonVoteRequest`` at kraft.version 0: VoterId = the
        destination, VoterDirectoryId zero (a static voter has none), ReplicaDirectoryId =
        this replica's directory id."""
        return _VoteReq.VoteRequest(
            cluster_id=self.config.cluster_id,
            voter_id=dest,
            topics=(
                _VoteReq.TopicData(
                    **self._topic_fields(),
                    partitions=(
                        _VoteReq.PartitionData(
                            partition_index=self.config.partition,
                            replica_epoch=self.epoch,
                            replica_id=self.node_id,
                            replica_directory_id=self.config.directory_id,
                            last_offset_epoch=end.epoch,
                            last_offset=end.offset,
                            pre_vote=pre_vote,
                        ),
                    ),
                ),
            ),
        )

    def _begin_request(self, dest: int) -> Any:
        """BeginQuorumEpoch to voter ``dest``: VoterId = ``dest``, VoterDirectoryId zero, and
        LeaderEndpoints EMPTY. A Kafka voter that gets a non-empty list follows the endpoint
        named by its own ``controller.listener.names[0]`` and halts
        (``FollowerState.leaderNode``) when the list lacks that name; an empty list makes it
        use the address of its static ``controller.quorum.voters``, whatever our listener is
        called."""
        return _BeginReq.BeginQuorumEpochRequest(
            cluster_id=self.config.cluster_id,
            voter_id=dest,
            topics=(
                _BeginReq.TopicData(
                    **self._topic_fields(),
                    partitions=(
                        _BeginReq.PartitionData(
                            partition_index=self.config.partition,
                            leader_id=self.node_id,
                            leader_epoch=self.epoch,
                        ),
                    ),
                ),
            ),
        )

    def _end_request(self) -> Any:
        """EndQuorumEpoch of a resigned leader: the successors by descending fetch offset, as
        v0 PreferredSuccessors and v1 PreferredCandidates (directory ids zero, static voters),
        and LeaderEndpoints empty (see :meth:`_begin_request`)."""
        return _EndReq.EndQuorumEpochRequest(
            cluster_id=self.config.cluster_id,
            topics=(
                _EndReq.TopicData(
                    **self._topic_fields(),
                    partitions=(
                        _EndReq.PartitionData(
                            partition_index=self.config.partition,
                            leader_id=self.node_id,
                            leader_epoch=self.epoch,
                            preferred_successors=tuple(self._preferred),
                            preferred_candidates=tuple(
                                _EndReq.ReplicaInfo(candidate_id=v) for v in self._preferred
                            ),
                        ),
                    ),
                ),
            ),
        )

    # ================================================================== inbound requests
    # -- Vote (KIP-996 pre-vote)
    def _epoch_resp(
        self,
        mod: Any,
        cls: str,
        id_from: int,
        version: int,
        top: int = 0,
        code: int = 0,
        **extra: Any,
    ) -> Any:
        """The response of Vote, BeginQuorumEpoch or EndQuorumEpoch (``mod``/``cls``; topic by
        id from ``id_from``): a top-level error alone, or one partition with ``code``, this
        replica's leader and epoch (built after any state change the request caused) and the
        leader's endpoints from v1."""
        if top:
            return getattr(mod, cls)(error_code=top)
        p = mod.PartitionData(
            partition_index=self.config.partition,
            error_code=code,
            leader_id=self.leader_id,
            leader_epoch=self.epoch,
            **extra,
        )
        return getattr(mod, cls)(
            topics=self._topic_resp(mod, version, id_from, (p,)),
            node_endpoints=self._node_endpoints(mod, version, 1),
        )

    def _vote_resp(self, version: int, top: int = 0, code: int = 0, granted: bool = False) -> Any:
        return self._epoch_resp(_VoteResp, "VoteResponse", 3, version, top, code,
                                vote_granted=granted)  # fmt: skip

    def _on_vote(self, now: int, version: int, req: Any) -> Any:
        """Kafka ``handleVoteRequest`` (KIP-996): a higher epoch is adopted
        (Unattached, persisted) for a pre-vote too, before the voter key is checked; a granted
        standard vote is persisted before the answer."""
        if not self._cluster_ok(req.cluster_id):
            return self._vote_resp(version, top=int(_E.INCONSISTENT_CLUSTER_ID))
        p = self._single_partition(req, version, 3)
        if p is None:
            return self._vote_resp(version, top=int(_E.INVALID_REQUEST))
        pre = bool(version >= 2 and p.pre_vote)
        cand, cepoch = p.replica_id, p.replica_epoch
        bad_epoch = p.last_offset_epoch > cepoch if pre else p.last_offset_epoch >= cepoch
        if p.last_offset < 0 or p.last_offset_epoch < 0 or bad_epoch:
            return self._vote_resp(version, top=int(_E.INVALID_REQUEST))
        err = self._validate_voter_only(cand, cepoch)
        if err is not None:
            return self._vote_resp(version, top=err[0], code=err[1])
        if cepoch > self.epoch:
            self._to_unattached(now, cepoch)
        if version >= 1 and not self._voter_key_ok(req.voter_id, p.voter_directory_id):
            return self._vote_resp(version, code=int(_E.INVALID_VOTER_KEY))
        end = self._log_end()
        up_to_date = (p.last_offset_epoch, p.last_offset) >= (end.epoch, end.offset)
        cand_dir = p.replica_directory_id if version >= 1 and p.replica_directory_id.int else None
        granted = self._can_grant(cand, cand_dir, up_to_date, pre)
        if granted and not pre and self.state in (UNATTACHED, PROSPECTIVE) and self.voted_id < 0:
            self._vote_for(now, cepoch, cand, cand_dir)
        return self._vote_resp(version, granted=granted)

    def _can_grant(self, cand: int, cand_dir: UUID | None, up_to_date: bool, pre: bool) -> bool:
        """Kafka's ``canGrantVote`` of each state: a Leader never grants; a Candidate and a
        Resigned grant up-to-date pre-votes only; a Follower grants an up-to-date pre-vote
        only before it has fetched from its leader, never a standard vote; an Unattached or a
        Prospective grants an up-to-date pre-vote, and a standard vote to the candidate it
        already voted for (same directory when one was recorded), or, with no vote and no
        known leader, to an up-to-date candidate."""
        st = self.state
        if st == LEADER:
            return False
        if st in (CANDIDATE, RESIGNED):
            return pre and up_to_date
        if st == FOLLOWER:
            return pre and up_to_date and not self._fetched_from_leader
        if pre:
            return up_to_date
        if self.voted_id >= 0:
            same_dir = self._voted_dir is None or self._voted_dir == cand_dir
            return self.voted_id == cand and same_dir
        if self.leader_id >= 0:
            return False
        return up_to_date

    # -- BeginQuorumEpoch (Kafka ``handleBeginQuorumEpochRequest``)
    def _begin_resp(self, version: int, top: int = 0, code: int = 0) -> Any:
        return self._epoch_resp(_BeginResp, "BeginQuorumEpochResponse", 2, version, top, code)

    def _on_begin(self, now: int, version: int, req: Any) -> Any:
        if not self._cluster_ok(req.cluster_id):
            return self._begin_resp(version, top=int(_E.INCONSISTENT_CLUSTER_ID))
        p = self._single_partition(req, version, 2)
        if p is None:
            return self._begin_resp(version, top=int(_E.INVALID_REQUEST))
        err = self._validate_voter_only(p.leader_id, p.leader_epoch)
        if err is not None:
            return self._begin_resp(version, top=err[0], code=err[1])
        if not self._leader_claim_ok(p.leader_id, p.leader_epoch):
            return self._begin_resp(version, top=self._contradicted("BeginQuorumEpoch", p))
        self._learn_leader_endpoints(p.leader_id, req, version)
        self._maybe_transition(now, p.leader_id, p.leader_epoch)
        if version >= 1 and not self._voter_key_ok(req.voter_id, p.voter_directory_id):
            return self._begin_resp(version, code=int(_E.INVALID_VOTER_KEY))
        return self._begin_resp(version)

    # -- EndQuorumEpoch (Kafka ``handleEndQuorumEpochRequest``)
    def _end_resp(self, version: int, top: int = 0, code: int = 0) -> Any:
        return self._epoch_resp(_EndResp, "EndQuorumEpochResponse", 2, version, top, code)

    def _on_end(self, now: int, version: int, req: Any) -> Any:
        if not self._cluster_ok(req.cluster_id):
            return self._end_resp(version, top=int(_E.INCONSISTENT_CLUSTER_ID))
        p = self._single_partition(req, version, 2)
        if p is None:
            return self._end_resp(version, top=int(_E.INVALID_REQUEST))
        err = self._validate_voter_only(p.leader_id, p.leader_epoch)
        if err is not None:
            return self._end_resp(version, top=err[0], code=err[1])
        if not self._leader_claim_ok(p.leader_id, p.leader_epoch):
            return self._end_resp(version, top=self._contradicted("EndQuorumEpoch", p))
        self._learn_leader_endpoints(p.leader_id, req, version)
        self._maybe_transition(now, p.leader_id, p.leader_epoch)
        if self.state == FOLLOWER and self.leader_id == p.leader_id:
            # Kafka ``endEpochElectionBackoff``: our position in the list (a candidate with a
            # directory id is us only with ours), the list's length when absent
            if version >= 1:
                succ = [(c.candidate_id, c.candidate_directory_id) for c in p.preferred_candidates]
            else:
                succ = [(c, _ZERO_UUID) for c in p.preferred_successors]
            pos = next(
                (i for i, (c, d) in enumerate(succ)
                 if c == self.node_id and (d.int == 0 or d == self.config.directory_id)),
                len(succ),
            )  # fmt: skip
            self._fetch_deadline = now + self._strict_backoff(pos, len(succ))
        return self._end_resp(version)

    def _learn_leader_endpoints(self, leader: int, req: Any, version: int) -> None:
        """Kafka: the leader's endpoints come from the request's LeaderEndpoints (v1) when
        present, else from the voter set; the one on ``listener_name`` is kept."""
        if version < 1 or leader < 0:
            return
        for ep in getattr(req, "leader_endpoints", None) or ():
            if ep.name == self.config.listener_name:
                self._seen_endpoints[leader] = (ep.host, ep.port)

    # ================================================================== responses
    def _on_vote_response(self, now: int, dest: int, resp: Any) -> bool:
        """Kafka ``handleVoteResponse``: a grant counts toward the pre-election (Prospective ->
        Candidate) or the election (Candidate -> Leader); a rejection that makes the
        pre-election unwinnable ends it (``prospectiveTransitionAfterElectionLoss``), while a
        Candidate waits for its election timer. A Prospective whose pre-vote the peer cannot
        take (top-level UNSUPPORTED_VERSION: Vote below v2) stands at once."""
        if resp.error_code:
            if resp.error_code == _E.UNSUPPORTED_VERSION and self.state == PROSPECTIVE:
                log.info("node %d: voter %d takes no pre-votes; standing at once",
                         self.node_id, dest)  # fmt: skip
                self._to_candidate(now)
                return True
            return False
        if not resp.topics or not resp.topics[0].partitions:
            return False
        p = resp.topics[0].partitions[0]
        r = self._common(now, p.error_code, p.leader_id, p.leader_epoch)
        if r is not None and p.error_code != _E.INCONSISTENT_VOTER_SET:
            return r
        if self.state not in (CANDIDATE, PROSPECTIVE):
            return True
        if p.error_code not in (_NONE, _E.INCONSISTENT_VOTER_SET):
            return False
        if p.error_code == _NONE and p.vote_granted:
            self._rejected.discard(dest)
            self._granted.add(dest)
            if len(self._granted) >= self._majority():
                if self.state == PROSPECTIVE:
                    self._to_candidate(now)
                else:
                    self._to_leader(now)
        else:
            self._granted.discard(dest)
            self._rejected.add(dest)
            if self.state == PROSPECTIVE and self._vote_lost():
                self._prospective_lost(now)
        return True

    def _on_simple_response(self, now: int, dest: int, resp: Any, kind: str) -> bool:
        if resp.error_code:
            return False
        if not resp.topics or not resp.topics[0].partitions:
            return False
        p = resp.topics[0].partitions[0]
        r = self._common(now, p.error_code, p.leader_id, p.leader_epoch)
        if r is not None:
            return r
        if p.error_code == _NONE and kind == "end" and self.state == RESIGNED:
            self._end_epoch_unacked.discard(dest)
        return True
