"""Validation: the checks every Raft request and response of
:class:`~kafka_rpc.raft.core.RaftCore` passes, in Kafka's order with Kafka's error codes.

Cluster id, the one topic partition, a voter-only request's epoch and voter set (Kafka
``validateVoterOnlyRequest`` for a static quorum), a leader-only request's epoch and role
(``validateLeaderOnlyRequest``), the voter key, leader claims that contradict this node's view
of its epoch (answered top-level UNKNOWN_SERVER_ERROR), the topic and NodeEndpoints of the
answers, and the errors shared by every response (Kafka ``maybeHandleCommonResponse``).
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from kafka_rpc.raft.base import (
    _E,
    _NONE,
    LEADER,
    RESIGNED,
    _CoreBase,
)

log = logging.getLogger("kafka_rpc.raft")


class _Validation(_CoreBase):
    """Request and response checks shared by every Raft API."""

    # -- shared validation (Kafka ``KafkaRaftClient``'s request checks)
    def _cluster_ok(self, cluster_id: str | None) -> bool:
        return cluster_id is None or cluster_id == self.config.cluster_id

    def _single_partition(self, request: Any, version: int, id_from: int | None) -> Any | None:
        """The one partition of a single-topic, single-partition request naming our log;
        ``id_from``: the version from which the topic is named by id (None: by name)."""
        topics = request.topics
        if len(topics) != 1 or len(topics[0].partitions) != 1:
            return None
        t = topics[0]
        if id_from is not None and version >= id_from:
            if t.topic_id != self.config.topic_id:
                return None
        elif t.topic_name != self.config.topic_name:
            return None
        p = t.partitions[0]
        return p if p.partition_index == self.config.partition else None

    def _validate_voter_only(self, remote_id: int, epoch: int) -> tuple[int, int] | None:
        """Kafka ``validateVoterOnlyRequest`` (plus the static voter set): None, or the error
        as ``(top-level code, partition code)``; a negative ``remote_id`` is malformed and
        answered at the top level (never a partition-level INVALID_REQUEST)."""
        if epoch < self.epoch:
            return 0, int(_E.FENCED_LEADER_EPOCH)
        if remote_id < 0:
            return int(_E.INVALID_REQUEST), 0
        if self._crs.last_kraft_version() >= 1:
            return None  # Kafka 3.9+: membership is never checked here (KIP-853)
        if not self.is_voter or remote_id not in self.voters:
            return 0, int(_E.INCONSISTENT_VOTER_SET)
        return None

    def _validate_leader_only(self, epoch: int) -> int | None:
        if epoch < self.epoch:
            return int(_E.FENCED_LEADER_EPOCH)
        if epoch > self.epoch:
            return int(_E.UNKNOWN_LEADER_EPOCH)
        if self.state != LEADER:
            return int(_E.NOT_LEADER_OR_FOLLOWER)
        if self._shutdown_deadline is not None:
            return int(_E.BROKER_NOT_AVAILABLE)
        return None

    def _topic_resp(self, mod: Any, version: int, id_from: int, partitions: tuple) -> tuple:
        if version >= id_from:
            t = mod.TopicData(topic_id=self.config.topic_id, partitions=partitions)
        else:
            t = mod.TopicData(topic_name=self.config.topic_name, partitions=partitions)
        return (t,)

    def _node_endpoints(self, mod: Any, version: int, min_version: int) -> tuple:
        if version < min_version or self.leader_id < 0:
            return ()
        addr = self.voters.get(self.leader_id)
        if addr is None:
            return ()
        return (mod.NodeEndpoint(node_id=self.leader_id, host=addr[0], port=addr[1]),)

    # -- voter keys (Vote, BeginQuorumEpoch)
    def _voter_key_ok(self, voter_id: int, voter_dir: UUID) -> bool:
        """Kafka ``isValidVoterKey``: a VoterId other than -1 must be this node's id, and a
        non-zero VoterDirectoryId this node's directory id."""
        if voter_id < 0:
            return True
        if voter_id != self.node_id:
            return False
        return voter_dir.int == 0 or voter_dir == self.config.directory_id

    # -- leader claims (BeginQuorumEpoch, EndQuorumEpoch)
    def _contradicted(self, api: str, p: Any) -> int:
        """The top-level code for a leader claim that contradicts this node's view of its own
        epoch: UNKNOWN_SERVER_ERROR, logged. Kafka's receiver throws IllegalStateException in
        ``maybeTransition`` and its sender never gets an answer; a partition-level error would
        halt a Kafka sender instead (INVALID_REQUEST) or make it throw in its own
        ``maybeTransition`` (FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER naming another
        leader), so the top level, which Kafka only logs and backs off from, is the answer."""
        log.error(
            "node %d: %s names leader %d in epoch %d, but this node is %s with leader %d in "
            "that epoch; not applied", self.node_id, api, p.leader_id, p.leader_epoch,
            self.state, self.leader_id,
        )  # fmt: skip
        return int(_E.UNKNOWN_SERVER_ERROR)

    def _leader_claim_ok(self, leader: int, epoch: int) -> bool:
        """Kafka raises IllegalStateException for these (a peer contradicting what this node
        knows); here they are answered with a top-level error (:meth:`_contradicted`) and
        change nothing."""
        if epoch != self.epoch:
            return True
        if leader == self.node_id:
            return self.state == LEADER
        if self.state in (LEADER, RESIGNED):
            return False
        return not (self.leader_id >= 0 and self.leader_id != leader)

    # -- responses
    def _common(self, now: int, code: int, leader: int, epoch: int) -> bool | None:
        """Kafka ``maybeHandleCommonResponse``: True/False = handled (success,
        backoff); None = continue with the API-specific handling."""
        if epoch < self.epoch or code == _E.UNKNOWN_LEADER_EPOCH:
            return True
        if (
            epoch > self.epoch
            or code == _E.FENCED_LEADER_EPOCH
            or code == _E.NOT_LEADER_OR_FOLLOWER
        ):
            self._maybe_transition(now, leader, epoch)
            return True
        if epoch == self.epoch and leader >= 0 and self.leader_id < 0:
            if leader == self.node_id:
                log.error("node %d: a peer names us leader of epoch %d, which we do not lead",
                          self.node_id, epoch)  # fmt: skip
                return True
            # the leader of our epoch, learnt from any answer; a NONE answer goes on to its
            # handler (an observer takes the data of the Fetch that found the leader)
            self._to_follower(now, epoch, leader)
            return None if code == _NONE else True
        if code == _E.BROKER_NOT_AVAILABLE:
            return False
        if code in (_E.INVALID_VOTER_KEY, _E.INCONSISTENT_VOTER_SET):
            return True
        if code == _E.INVALID_REQUEST:
            log.error("node %d: a peer answered INVALID_REQUEST (a bug somewhere)", self.node_id)
            return False
        return None
