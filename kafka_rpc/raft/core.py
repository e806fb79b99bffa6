"""The sans-io Raft core: one replica of one partition log, as Kafka's ``KafkaRaftClient``.

Everything the replica decides happens here; nothing here touches a socket, a clock or a file
directly. The driver (``kafka_rpc.raft.driver`` in the server, the simulator in the tests) feeds
inputs, each with the current time in ms:

* :meth:`RaftCore.poll` runs the timers (call it at :meth:`RaftCore.next_deadline_ms` and after
  every other input);
* :meth:`RaftCore.handle_request` takes a Raft request (Vote, BeginQuorumEpoch, EndQuorumEpoch,
  Fetch, FetchSnapshot, DescribeQuorum) and a ``reply`` callback, called exactly once with the
  response (at once, or later for a long-polling Fetch);
* :meth:`RaftCore.handle_response` takes the response to an :class:`Outbound` request, or None
  for a failure (connection error, timeout);
* :meth:`RaftCore.append` queues records on the leader; :meth:`RaftCore.handle_flushed` says
  the log was fsynced (an append counts toward the high watermark, and a follower fetches again,
  only once it is durable).

and takes its outputs: :meth:`RaftCore.take_outbound` (requests to send), ``needs_flush``, and
calls on the :class:`~kafka_rpc.raft.api.StateMachine` (committed batches, snapshots to load,
leader changes). The log and the quorum-state store are reached through the interfaces of
``kafka_rpc.raft.api`` (files in the server, memory in the simulator); randomness through the
``random.Random`` it is given.

States (Kafka ``QuorumState``): Unattached (optionally voted), Prospective (KIP-996 pre-vote,
Vote v2+), Candidate, Leader, Follower, Resigned. A durable transition writes ``quorum-state``
before the state changes in memory. Requests are validated in Kafka's order with Kafka's error
codes (``KafkaRaftClient``'s ``handle*Request``); a peer's request never raises out of the core,
never lowers the epoch and changes nothing when it is answered with an error.

No response carries a partition-level INVALID_REQUEST: a Kafka node that receives one throws
(``KafkaRaftClient.maybeHandleCommonResponse``: "Received unexpected invalid request error")
and halts. Where Kafka's receiver answers a malformed request (a negative replica id, last
offset or fetch offset, a last epoch above the request's epoch) at the partition level, this
core answers a top-level INVALID_REQUEST, which Kafka's sender only logs and backs off from
(``handleTopLevelError``). A leader claim that contradicts this node's view of its own epoch
(Kafka's receiver throws in ``maybeTransition``) is answered with a top-level
UNKNOWN_SERVER_ERROR and changes nothing.

Static voters (``controller.quorum.voters``): a Vote, BeginQuorumEpoch or EndQuorumEpoch from a
node outside the voter set, or received by an observer, is answered INCONSISTENT_VOTER_SET with
no state change, as Kafka's ``validateVoterOnlyRequest`` did for static quorums (before
KIP-853's dynamic voters).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.record_batch import (
    CONTROL_LEADER_CHANGE,
    CONTROL_SNAPSHOT_FOOTER,
    CONTROL_SNAPSHOT_HEADER,
    Batch,
    CorruptRecordError,
    decode_batches,
    encode_batch,
    encode_control_batch,
)
from kafka_rpc.raft.api import (
    METADATA_TOPIC_ID,
    METADATA_TOPIC_NAME,
    ElectionState,
    OffsetAndEpoch,
    QuorumStateStore,
    RawSnapshotWriter,
    ReplicatedLog,
    StateMachine,
)

log = logging.getLogger("kafka_rpc.raft")

__all__ = ["NotLeaderError", "Outbound", "RaftConfig", "RaftCore"]

VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH, FETCH_SNAPSHOT, DESCRIBE_QUORUM = (
    52, 53, 54, 1, 59, 55,
)  # fmt: skip
UPDATE_RAFT_VOTER = 82
MiB = 1 << 20
_LONG_MAX = (1 << 63) - 1
#: Kafka's ``LeaderState.OBSERVER_SESSION_TIMEOUT_MS``.
OBSERVER_SESSION_TIMEOUT_MS = 300_000
#: Records per snapshot batch (Kafka ``SnapshotEmitter.DEFAULT_BATCH_SIZE``).
SNAPSHOT_BATCH_RECORDS = 1024

_E = ErrorCode
_NONE = int(_E.NONE)
_ZERO_UUID = UUID(int=0)


def _m(name: str):
    return codec.module(name)


_VoteReq, _VoteResp = _m("VoteRequest"), _m("VoteResponse")
_BeginReq, _BeginResp = _m("BeginQuorumEpochRequest"), _m("BeginQuorumEpochResponse")
_EndReq, _EndResp = _m("EndQuorumEpochRequest"), _m("EndQuorumEpochResponse")
_FetchReq, _FetchResp = _m("FetchRequest"), _m("FetchResponse")
_SnapReq, _SnapResp = _m("FetchSnapshotRequest"), _m("FetchSnapshotResponse")
_DescResp = _m("DescribeQuorumResponse")
_UpdateVoterResp = _m("UpdateRaftVoterResponse")
_LeaderChange = _m("LeaderChangeMessage")
_SnapHeader = codec.message_class("SnapshotHeaderRecord")
_SnapFooter = codec.message_class("SnapshotFooterRecord")


class NotLeaderError(Exception):
    """An append on a replica that is not the leader (Kafka ``NotLeaderException``)."""


@dataclass
class RaftConfig:
    """Settings of one replica; Kafka's ``controller.quorum.*`` and ``metadata.*`` defaults."""

    node_id: int  # -1: an observer with no id
    voters: dict[int, tuple[str, int]]  # voter id -> (host, port) of its controller listener
    cluster_id: str
    topic_name: str = METADATA_TOPIC_NAME
    topic_id: UUID = METADATA_TOPIC_ID
    partition: int = 0
    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    append_linger_ms: int = 25
    fetch_max_wait_ms: int = 500  # Kafka's MAX_FETCH_WAIT_MS
    max_fetch_bytes: int = 8 * MiB  # MAX_FETCH_SIZE_BYTES, also the FetchSnapshot MaxBytes
    max_batch_bytes: int = 8 * MiB  # MAX_BATCH_SIZE_BYTES
    snapshot_max_record_bytes: int = 20 * MiB  # metadata.log.max.record.bytes.between.snapshots
    snapshot_interval_ms: int = 3_600_000  # metadata.log.max.snapshot.interval.ms, 0 = off
    snapshot_min_records: int = 0  # controller.snapshot.minimum.records (KIP-630 seed), 0 = off
    max_retention_bytes: int = 100 * MiB  # metadata.max.retention.bytes
    max_retention_ms: int = 7 * 24 * 3_600_000  # metadata.max.retention.ms
    retention_check_interval_ms: int = 60_000  # metadata.log.retention.check.interval.ms
    max_replication_lag_ms: int = 30_000  # max.replication.lag.ms (KIP-630 seed rule)
    listener_name: str = "CONTROLLER"  # controller.listener.names[0]: NodeEndpoints, describe
    #: This replica's directory id (the ``directory.id`` of its metadata log directory's
    #: ``meta.properties``; Kafka's ``ReplicaKey`` directory): sent as ReplicaDirectoryId in
    #: Vote, Fetch and FetchSnapshot, and checked against a non-zero VoterDirectoryId in Vote and
    #: BeginQuorumEpoch (INVALID_VOTER_KEY). The zero UUID: none (tests, the simulator's default).
    directory_id: UUID = _ZERO_UUID

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1


@dataclass(frozen=True)
class Outbound:
    """A request the core wants sent to ``destination`` (a voter id, or the leader's id)."""

    destination: int
    correlation: int
    api_key: int
    request: Any  # the full generated request object


@dataclass
class _ReplicaState:
    """The leader's view of one replica (Kafka ``LeaderState.ReplicaState``)."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1


@dataclass
class _Parked:
    fetch_offset: int
    deadline_ms: int
    version: int
    request: Any
    reply: Callable[[Any], None]
    replica_id: int
    follower_hw: int


@dataclass
class _Download:
    """A snapshot being fetched from the leader (FollowerState's fetching snapshot)."""

    snapshot_id: OffsetAndEpoch
    writer: RawSnapshotWriter


@dataclass
class _InFlight:
    correlation: int
    deadline_ms: int
    api_key: int


@dataclass
class _Pending:
    """Records appended on the leader, waiting for the linger time (Kafka BatchAccumulator)."""

    first_ms: int = -1
    records: list[list[bytes]] = field(default_factory=list)
    count: int = 0
    size: int = 0


UNATTACHED, PROSPECTIVE, CANDIDATE, LEADER, FOLLOWER, RESIGNED = (
    "Unattached", "Prospective", "Candidate", "Leader", "Follower", "Resigned",
)  # fmt: skip


class RaftCore:
    """One Raft replica (see the module docstring). Not thread-safe: one driver calls it."""

    def __init__(
        self,
        config: RaftConfig,
        log_: ReplicatedLog,
        store: QuorumStateStore,
        state_machine: StateMachine,
        rng: random.Random,
        now_ms: int,
        wall_offset_ms: int = 0,
    ) -> None:
        self.config = config
        #: ``now`` (the driver's monotonic ms, for timers) + this = wall-clock ms since the
        #: epoch, which Kafka writes as record timestamps and compares in time-based retention.
        self.wall_offset_ms = wall_offset_ms
        self.log = log_
        self.store = store
        self.sm = state_machine
        self.rng = rng
        self.node_id = config.node_id
        self.voters = dict(config.voters)
        self._out: list[Outbound] = []
        self._corr = 0
        self._inflight: dict[int, _InFlight] = {}
        self._backoff_until: dict[int, int] = {}
        # election state
        self.state = UNATTACHED
        self.epoch = 0
        self.leader_id = -1
        self.voted_id = -1
        self.high_watermark = -1
        # timers (absolute ms; None = not running)
        self._election_deadline: int | None = None
        self._fetch_deadline: int | None = None
        self._check_quorum_deadline: int | None = None
        self._begin_epoch_deadline: int | None = None
        # candidate / prospective
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        # leader
        self._replicas: dict[int, _ReplicaState] = {}
        self._epoch_start_offset = -1
        self._fetched_voters: set[int] = set()
        self._parked: list[_Parked] = []
        self._pending = _Pending()
        # follower
        self._fetched_from_leader = False
        self._download: _Download | None = None
        # resigned
        self._end_epoch_unacked: set[int] = set()
        self._preferred: list[int] = []
        # shutdown
        self._shutdown_deadline: int | None = None
        # state machine delivery
        self._next_offset = -1  # next offset the state machine expects (-1: new listener)
        #: When True, committed batches are not handed to the state machine inside the call
        #: that commits them: ``delivery_due`` turns True and the driver calls
        #: :meth:`deliver_committed` once it has sent what the call emitted (Kafka hands them to
        #: the listener's own thread, off the Raft I/O path). False: delivered inline.
        self.defer_delivery = False
        #: None: a snapshot that :meth:`poll` finds due is written inline. Else it is called as
        #: ``snapshot_writer(write)``: the state machine's records were taken inline (its state
        #: at the committed offset), and ``write`` (no arguments) encodes them, writes, fsyncs
        #: and renames the file, touching nothing of the core's; the driver runs it on another
        #: thread and calls :meth:`snapshot_written` on the core's thread once it returned or
        #: raised. Only one at a time. (Kafka generates snapshots off the Raft thread too:
        #: ``SnapshotGenerator`` on the controller's event queue, ``RaftClient.createSnapshot``.)
        self.snapshot_writer: Callable[[Callable[[], None]], None] | None = None
        self._snapshot_writing: tuple[OffsetAndEpoch, Any, int] | None = None
        self._delivery_due = False
        self._delivery_due_ms = now_ms
        self._leader_change_delivered: tuple[int, int] | None = None
        # snapshots and retention
        self._bytes_since_snapshot = 0
        self._records_since_snapshot = 0
        self._last_snapshot_ms = now_ms
        self._retention_deadline = now_ms + config.retention_check_interval_ms
        self._last_delivered_epoch = 0
        self._last_delivered_ts = -1
        #: The directory id of the candidate voted for (memory only: ``quorum-state`` v0 keeps
        #: no directory); None = none sent, so any directory of ``voted_id`` matches (Kafka
        #: ``ReplicaKey`` without a directory).
        self._voted_dir: UUID | None = None
        #: Called with this core after every state transition once it is complete (state,
        #: epoch, leader and vote set); the simulator's checkers of Kafka's transition rules
        #: (``QuorumState``) listen here. None: nobody listens.
        self.on_transition: Callable[[RaftCore], None] | None = None
        self._initialize(now_ms)

    # ================================================================== start-up
    def _initialize(self, now: int) -> None:
        """Kafka ``QuorumState.initialize`` + ``KafkaRaftClient.initialize``."""
        self.log.truncate_to_latest_snapshot()
        if self.log.start_offset > 0:
            self.high_watermark = self.log.start_offset
        st = self.store.read()
        last_epoch = self.log.last_fetched_epoch()
        if st is None:
            st = ElectionState(epoch=0)
        if st.voted_id != -1 and self.node_id < 0:
            raise RuntimeError("quorum-state holds a vote but this node has no id")
        if st.epoch < last_epoch:
            self._to_unattached(now, last_epoch, persist=True)
        elif st.leader_id == self.node_id and self.node_id >= 0:
            self.epoch, self.leader_id = st.epoch, self.node_id
            self._to_resigned(now, persist=False)
        elif st.leader_id != -1 and st.leader_id in self.voters:
            # a known leader settles the epoch, whatever vote was cast in it (a candidate that
            # lost keeps its self-vote in quorum-state beside the winner's id)
            self.epoch = st.epoch
            self.voted_id = st.voted_id
            self._set_follower(now, st.leader_id)
        elif st.voted_id == self.node_id and self.node_id >= 0:
            self.epoch = st.epoch
            self.state = CANDIDATE
            self.voted_id = self.node_id
            self._granted, self._rejected = {self.node_id}, set()
            self._election_deadline = now + self._random_election_timeout()
        elif st.voted_id != -1:
            self.epoch, self.voted_id, self.state = st.epoch, st.voted_id, UNATTACHED
            self._election_deadline = now + self._random_election_timeout()
        else:
            self.epoch, self.state = st.epoch, UNATTACHED
            self._election_deadline = (
                now + self._random_election_timeout() if self.config.is_voter else None
            )
        # the state machine loads the latest snapshot before this node can lead (a leader's
        # state machine never loads one)
        self._deliver(now)
        if self.config.is_voter and len(self.voters) == 1 and self.state != LEADER:
            # Kafka ``KafkaRaftClient.initialize``: the only voter goes Prospective, which wins
            # its own pre-vote, stands and wins at once (a Candidate at start-up stands on)
            if self.state == CANDIDATE:
                self._to_leader(now)
            else:
                self._to_prospective(now)
        self._notify_leader_change()
        self._deliver(now)

    # ================================================================== public read-only
    @property
    def state_name(self) -> str:
        if self.state == UNATTACHED and self.voted_id != -1:
            return "Unattached (voted)"
        return self.state

    @property
    def is_leader(self) -> bool:
        return self.state == LEADER

    @property
    def needs_flush(self) -> bool:
        return self.log.end_offset > self.log.flushed_offset

    @property
    def shutdown_complete(self) -> bool:
        if self._shutdown_deadline is None:
            return False
        if not self.config.is_voter or len(self.voters) == 1:
            return True
        return self.leader_id not in (-1, self.node_id) and self.state == FOLLOWER

    def take_outbound(self) -> list[Outbound]:
        out, self._out = self._out, []
        return out

    def next_deadline_ms(self) -> int:
        ds = [
            d
            for d in (
                self._election_deadline,
                self._fetch_deadline,
                self._check_quorum_deadline,
                self._begin_epoch_deadline,
                self._retention_deadline,
                self._shutdown_deadline,
            )
            if d is not None
        ]
        ds.extend(f.deadline_ms for f in self._inflight.values())
        ds.extend(self._backoff_until.values())
        if self._parked:
            ds.append(min(p.deadline_ms for p in self._parked))
        if self._pending.count:
            ds.append(self._pending.first_ms + self.config.append_linger_ms)
        if self.config.snapshot_interval_ms > 0 and self._records_since_snapshot:
            ds.append(self._last_snapshot_ms + self.config.snapshot_interval_ms)
        return min(ds) if ds else _LONG_MAX

    # ================================================================== helpers
    def _wall(self, now: int) -> int:
        """Wall-clock ms for a record timestamp (``now`` is the monotonic driver clock)."""
        return now + self.wall_offset_ms

    def _majority(self) -> int:
        return len(self.voters) // 2 + 1

    def _random_election_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return t + self.rng.randrange(t) if t > 0 else 0

    def _strict_backoff(self, position: int, n: int) -> int:
        """Kafka ``strictExponentialElectionBackoffMs`` by position in the successor list (the
        list's length ``n`` when this node is not in it)."""
        mx = self.config.election_backoff_max_ms
        if position == 0:
            return 0
        return min(mx, (mx >> (n - 1)) << (position - 1))

    def _persist(self) -> None:
        self.store.write(
            ElectionState(
                epoch=self.epoch,
                leader_id=self.leader_id,
                voted_id=self.voted_id,
                voters=tuple(sorted(self.voters)),
            )
        )

    def _log_end(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.log.end_offset, self.log.last_fetched_epoch())

    def _reset_connections(self) -> None:
        self._inflight.clear()
        self._backoff_until.clear()

    def _send(self, now: int, dest: int, api_key: int, request: Any) -> None:
        self._corr += 1
        self._inflight[dest] = _InFlight(self._corr, now + self.config.request_timeout_ms, api_key)
        self._out.append(Outbound(dest, self._corr, api_key, request))

    def _can_send(self, now: int, dest: int) -> bool:
        if dest in self._inflight:
            return False
        until = self._backoff_until.get(dest)
        if until is not None:
            if now < until:
                return False
            del self._backoff_until[dest]
        return True

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
        self._pending = _Pending()
        self._replicas = {}
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
        if self.config.is_voter:
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
        self._replicas = {v: _ReplicaState() for v in self.voters}
        self._replicas[self.node_id] = _ReplicaState(end_offset=self.log.flushed_offset)
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
        batch = encode_control_batch(
            self.log.end_offset, self.epoch, [(CONTROL_LEADER_CHANGE, body)], self._wall(now)
        )
        self.log.append([batch])
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

    # ================================================================== poll
    def poll(self, now: int) -> None:
        """Run every timer that is due and emit the requests the current state sends."""
        try:
            self._poll(now)
        except Exception:
            log.exception("node %d: raft poll failed", self.node_id)
            raise

    def _poll(self, now: int) -> None:
        for dest, until in list(self._backoff_until.items()):
            if now >= until:
                del self._backoff_until[dest]
        for dest, f in list(self._inflight.items()):
            if now >= f.deadline_ms:
                del self._inflight[dest]
                self._on_failure(now, dest, f.api_key)
        st = self.state
        if st == LEADER:
            self._poll_leader(now)
        elif st == CANDIDATE:
            self._poll_candidate(now)
        elif st == PROSPECTIVE:
            self._poll_prospective(now)
        elif st == FOLLOWER:
            self._poll_follower(now)
        elif st == RESIGNED:
            self._poll_resigned(now)
        else:
            self._poll_unattached(now)
        if self._retention_deadline is not None and now >= self._retention_deadline:
            self._retention_deadline = now + self.config.retention_check_interval_ms
            self._clean(now)
        self._maybe_snapshot(now)

    def _poll_leader(self, now: int) -> None:
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
        stale = [r for r, rs in self._replicas.items() if r not in self.voters
                 and now - rs.last_fetch_ms > OBSERVER_SESSION_TIMEOUT_MS]  # fmt: skip
        for r in stale:
            del self._replicas[r]

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
            if self.config.is_voter:
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
                others = sorted(v for v in self.voters if v != self.leader_id)
                if others and not self._inflight:
                    self._send_fetch(now, self.rng.choice(others))
                    return
        self._send_fetch(now, self.leader_id)

    def _send_fetch(self, now: int, dest: int) -> None:
        if dest < 0 or not self._can_send(now, dest):
            return
        if self.config.is_voter and self.needs_flush:
            return  # a voter's fetch offset is proof of durability: flush first
        if self._download is not None:
            self._send(now, dest, FETCH_SNAPSHOT, self._fetch_snapshot_request())
        else:
            self._send(now, dest, FETCH, self._fetch_request())

    def _poll_unattached(self, now: int) -> None:
        if self.config.is_voter:
            if self._election_deadline is not None and now >= self._election_deadline:
                if self._shutdown_deadline is None:
                    self._to_prospective(now)
                    self._poll_prospective(now)
        else:
            # an observer looks for the leader by fetching from a random voter
            voters = sorted(self.voters)
            if voters and not self._inflight:
                self._send_fetch(now, self.rng.choice(voters))

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

    # ================================================================== inbound requests
    def handle_request(
        self, now: int, api_key: int, version: int, request: Any, reply: Callable[[Any], None]
    ) -> None:
        """Answer a Raft request; ``reply(response)`` is called exactly once (now, or later for
        a parked Fetch). A request that breaks a rule gets Kafka's error code and changes
        nothing."""
        try:
            if api_key == VOTE:
                reply(self._on_vote(now, version, request))
            elif api_key == BEGIN_QUORUM_EPOCH:
                reply(self._on_begin(now, version, request))
            elif api_key == END_QUORUM_EPOCH:
                reply(self._on_end(now, version, request))
            elif api_key == FETCH:
                resp = self._on_fetch(now, version, request, reply)
                if resp is not None:
                    reply(resp)
            elif api_key == FETCH_SNAPSHOT:
                reply(self._on_fetch_snapshot(now, version, request))
            elif api_key == DESCRIBE_QUORUM:
                reply(self._on_describe(now, version, request))
            elif api_key == UPDATE_RAFT_VOTER:
                reply(self._on_update_voter(now, version, request))
            else:
                raise ValueError(f"api key {api_key} is not a Raft request")
        except Exception:
            log.exception("node %d: raft request %d v%d failed", self.node_id, api_key, version)
            raise

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
        if not self.config.is_voter or remote_id not in self.voters:
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

    # -- Vote (KIP-996 pre-vote)
    def _epoch_resp(
        self, mod: Any, cls: str, id_from: int, version: int, top: int = 0, code: int = 0,
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

    def _voter_key_ok(self, voter_id: int, voter_dir: UUID) -> bool:
        """Kafka ``isValidVoterKey``: a VoterId other than -1 must be this node's id, and a
        non-zero VoterDirectoryId this node's directory id."""
        if voter_id < 0:
            return True
        if voter_id != self.node_id:
            return False
        return voter_dir.int == 0 or voter_dir == self.config.directory_id

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
        self._maybe_transition(now, p.leader_id, p.leader_epoch)
        if version >= 1 and not self._voter_key_ok(req.voter_id, p.voter_directory_id):
            return self._begin_resp(version, code=int(_E.INVALID_VOTER_KEY))
        return self._begin_resp(version)

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
        self, now: int, version: int, req: Any, replica: int, update: bool = False,
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
        if update and replica >= 0:
            self._update_replica(now, replica, p.fetch_offset)
        elif touch and replica >= 0:
            rs = self._replicas.get(replica)
            if rs is not None:
                rs.last_fetch_ms = now
                if p.fetch_offset >= self.log.end_offset:
                    rs.last_caught_up_ms = now
            if replica in self.voters:
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

    def _update_replica(self, now: int, replica: int, offset: int) -> None:
        rs = self._replicas.get(replica)
        if rs is None:
            rs = self._replicas[replica] = _ReplicaState()
        rs.end_offset = offset
        rs.last_fetch_ms = now
        if offset >= self.log.end_offset:
            rs.last_caught_up_ms = now
        if replica in self.voters:
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
        if replica in self.voters:
            self._voter_seen(now, replica)
        if replica >= 0:
            rs = self._replicas.setdefault(replica, _ReplicaState())
            rs.last_fetch_ms = now
        max_bytes = max(1, min(req.max_bytes, self.config.max_fetch_bytes))
        data = reader.read(p.position, max_bytes)
        return self._snap_resp(
            version,
            snapshot_id=_SnapResp.SnapshotId(end_offset=sid.offset, epoch=sid.epoch),
            size=reader.size,
            position=p.position,
            unaligned_records=data,
        )

    # -- UpdateRaftVoter (KIP-853; kraft.version 0)
    def _on_update_voter(self, now: int, version: int, req: Any) -> Any:
        """Kafka ``handleUpdateVoterRequest`` for a static quorum (docs/mixed-quorum.md): a
        Kafka follower voter sends it to every new leader until
        it is answered NONE or UNSUPPORTED_VERSION with that leader as CurrentLeader. The
        voter set here is static (no kraft.version upgrade), so the leader answers
        UNSUPPORTED_VERSION with CurrentLeader {this node, epoch, its controller host and
        port}; a wrong cluster id INCONSISTENT_CLUSTER_ID, a wrong epoch or a non-leader the
        leader-only errors, shutting down BROKER_NOT_AVAILABLE. Never INVALID_REQUEST (a
        Kafka voter halts on it); nothing changes."""
        if not self._cluster_ok(req.cluster_id):
            code = int(_E.INCONSISTENT_CLUSTER_ID)
        else:
            err = self._validate_leader_only(req.current_leader_epoch)
            code = err if err is not None else int(_E.UNSUPPORTED_VERSION)
        host, port = self.voters.get(self.leader_id, ("", 0))
        return _UpdateVoterResp.UpdateRaftVoterResponse(
            error_code=code,
            current_leader=_UpdateVoterResp.CurrentLeader(
                leader_id=self.leader_id, leader_epoch=self.epoch, host=host, port=port
            ),
        )

    # -- DescribeQuorum (leader only)
    def _on_describe(self, now: int, version: int, req: Any) -> Any:
        """Kafka ``handleDescribeQuorumRequest``: a request that is not exactly this log's one
        topic and partition gets UNKNOWN_TOPIC_OR_PARTITION on every partition it named
        (``DescribeQuorumRequest.getPartitionLevelErrorResponse``); a non-leader answers
        NOT_LEADER_OR_FOLLOWER in the partition."""
        m = _DescResp
        topics = req.topics
        if (
            len(topics) != 1
            or len(topics[0].partitions) != 1
            or topics[0].topic_name != self.config.topic_name
            or topics[0].partitions[0].partition_index != self.config.partition
        ):
            unknown = _E.UNKNOWN_TOPIC_OR_PARTITION
            return m.DescribeQuorumResponse(
                topics=tuple(
                    m.TopicData(
                        topic_name=t.topic_name,
                        partitions=tuple(
                            m.PartitionData(
                                partition_index=q.partition_index,
                                error_code=int(unknown),
                                error_message="This server does not host this topic-partition.",
                            )
                            for q in t.partitions
                        ),
                    )
                    for t in topics
                )
            )
        return m.DescribeQuorumResponse(
            topics=(
                m.TopicData(
                    topic_name=self.config.topic_name,
                    partitions=(self.describe_quorum_partition(now),),
                ),
            ),
            nodes=tuple(
                m.Node(
                    node_id=v,
                    listeners=(m.Listener(name=self.config.listener_name, host=h, port=pt),),
                )
                for v, (h, pt) in sorted(self.voters.items())
            )
            if version >= 2
            else (),
        )

    def describe_quorum_partition(self, now: int) -> Any:
        """DescribeQuorum's partition data: leader, epoch, high watermark and each replica's
        log end offset, last fetch and last caught-up times (wall-clock ms since the epoch, as
        Kafka reports them; -1 never); a non-leader answers NOT_LEADER_OR_FOLLOWER."""
        m = _DescResp
        if self.state != LEADER:
            return m.PartitionData(
                partition_index=self.config.partition,
                error_code=int(_E.NOT_LEADER_OR_FOLLOWER),
                leader_id=self.leader_id,
                leader_epoch=self.epoch,
                high_watermark=self.high_watermark,
            )

        def rs(rid: int) -> Any:
            s = self._replicas.get(rid, _ReplicaState())
            end, fetch, caught = s.end_offset, s.last_fetch_ms, s.last_caught_up_ms
            if rid == self.node_id:
                end, fetch, caught = self.log.end_offset, now, now
            return m.ReplicaState(
                replica_id=rid,
                log_end_offset=end,
                last_fetch_timestamp=self._wall(fetch) if fetch >= 0 else -1,
                last_caught_up_timestamp=self._wall(caught) if caught >= 0 else -1,
            )

        return m.PartitionData(
            partition_index=self.config.partition,
            leader_id=self.leader_id,
            leader_epoch=self.epoch,
            high_watermark=self.high_watermark,
            current_voters=tuple(rs(v) for v in sorted(self.voters)),
            observers=tuple(rs(r) for r in sorted(self._replicas) if r not in self.voters),
        )

    # ================================================================== responses
    def handle_response(self, now: int, destination: int, correlation: int, resp: Any) -> None:
        """The response to an Outbound (None: it failed). Responses to requests this replica no
        longer waits for (another correlation id, a role change since) are dropped."""
        f = self._inflight.get(destination)
        if f is None or f.correlation != correlation:
            return
        del self._inflight[destination]
        if resp is None:
            self._on_failure(now, destination, f.api_key)
            return
        api = f.api_key
        try:
            if api == VOTE:
                ok = self._on_vote_response(now, destination, resp)
            elif api == BEGIN_QUORUM_EPOCH:
                ok = self._on_simple_response(now, destination, resp, "begin")
            elif api == END_QUORUM_EPOCH:
                ok = self._on_simple_response(now, destination, resp, "end")
            elif api == FETCH:
                ok = self._on_fetch_response(now, destination, resp)
            elif api == FETCH_SNAPSHOT:
                ok = self._on_fetch_snapshot_response(now, destination, resp)
            else:
                ok = True
        except (CorruptRecordError, ValueError) as e:
            log.warning("node %d: bad response from %d: %s", self.node_id, destination, e)
            ok = False
        if not ok:
            self._backoff_until[destination] = now + self.config.retry_backoff_ms

    def _on_failure(self, now: int, dest: int, api_key: int) -> None:
        self._backoff_until[dest] = now + self.config.retry_backoff_ms
        if not self.config.is_voter and self.state in (UNATTACHED, FOLLOWER):
            if api_key in (FETCH, FETCH_SNAPSHOT) and self.state == FOLLOWER:
                pass  # the fetch timer decides

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
            self.log.truncate_to(max(target, self.log.start_offset))
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
                self.log.append(batches)
        if p.high_watermark >= 0:
            new_hw = min(p.high_watermark, self.log.end_offset)
            if new_hw > self.high_watermark:
                self.high_watermark = new_hw
                self._deliver(now)
        return True

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
            self.high_watermark = max(self.high_watermark, self.log.start_offset)
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
        self._wake_parked(now)

    def handle_flushed(self, now: int) -> None:
        """The log was fsynced (``log.flushed_offset`` moved): the leader counts its own end
        offset toward the high watermark; a follower may fetch again."""
        if self.state == LEADER:
            self._update_high_watermark(now)

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
        w = self.log.create_snapshot(sid)
        background = background and self.snapshot_writer is not None

        def write() -> None:
            try:
                header = codec.encode(_SnapHeader(version=0, last_contained_log_timestamp=ts), 0)
                pos = 0
                head = [(CONTROL_SNAPSHOT_HEADER, header)]
                w.append(encode_control_batch(pos, sid.epoch, head, ts).data)
                pos += 1
                for i in range(0, len(records), SNAPSHOT_BATCH_RECORDS):
                    chunk = records[i : i + SNAPSHOT_BATCH_RECORDS]
                    w.append(encode_batch(pos, sid.epoch, chunk, ts).data)
                    pos += len(chunk)
                footer = codec.encode(_SnapFooter(version=0), 0)
                foot = [(CONTROL_SNAPSHOT_FOOTER, footer)]
                w.append(encode_control_batch(pos, sid.epoch, foot, ts).data)
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
                for rid, rs in self._replicas.items():
                    if rid == self.node_id:
                        continue
                    lag = now - rs.last_fetch_ms
                    live = rs.last_fetch_ms >= 0 and lag <= c.max_replication_lag_ms
                    if live and rs.end_offset < nxt.offset and snap_age <= c.max_replication_lag_ms:
                        return
            if not self.log.delete_before_snapshot(nxt):
                return
            log.info("node %d: log start offset moved to %d", self.node_id, nxt.offset)

    # ================================================================== shutdown
    def begin_shutdown(self, now: int, timeout_ms: int) -> None:
        """Kafka ``shutdown(timeoutMs)``: a leader resigns (EndQuorumEpoch) and waits for a
        successor; ``shutdown_complete`` says when it may stop."""
        if self._shutdown_deadline is None:
            self._shutdown_deadline = now + timeout_ms
            if self.state == LEADER and len(self.voters) > 1:
                self._to_resigned(now)
                self._election_deadline = None

