"""The sans-io Raft core: one replica of one partition log, as Kafka's ``KafkaRaftClient``.

Everything the replica decides happens here; nothing here touches a socket, a clock or a file
directly. The driver (``kafka_rpc.raft.driver`` in the server, the simulator in the tests) feeds
inputs, each with the current time in ms:

* :meth:`RaftCore.poll` runs the timers (call it at :meth:`RaftCore.next_deadline_ms` and after
  every other input);
* :meth:`RaftCore.handle_request` takes a Raft request (Vote, BeginQuorumEpoch, EndQuorumEpoch,
  Fetch, FetchSnapshot, DescribeQuorum, UpdateRaftVoter, AddRaftVoter, RemoveRaftVoter) and a
  ``reply`` callback, called exactly once with the response (at once, or later for a
  long-polling Fetch or a voter change that waits for its commit);
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

Voters (KIP-853, ``kafka_rpc.raft.voters`` and the ``reconfig`` part): the voter set in force
is the newest VotersRecord of the latest snapshot and the log, uncommitted included (Kafka
``KRaftControlRecordStateMachine``), else the static ``controller.quorum.voters``; it decides
majorities, the high watermark, elections and :attr:`RaftCore.is_voter` (an id with another
directory id is not the voter) from its append. A leader of a kraft.version 1 log writes the
bootstrap voters into its first batch, takes AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter
(:meth:`RaftCore.handle_request`; one change at a time). A leader of a kraft.version 0 log
(a static quorum) keeps the voters' UpdateRaftVoter entries in memory and writes them when
:meth:`RaftCore.upgrade_kraft_version` takes the log to kraft.version 1. A Follower voter
sends UpdateRaftVoter to its leader (once per leader at kraft.version 0; when its entry
differs at 1), and an observer controller with ``auto_join`` adds itself (Kafka 4.2). Replicas
outside the voter set (observers) find the leader through
``controller.quorum.bootstrap.servers`` (destinations -2, -3, ...) and the endpoints peers
send; :meth:`RaftCore.address_of` names every destination for the driver.

INCONSISTENT_VOTER_SET is never sent: membership is not checked on Vote, BeginQuorumEpoch and
EndQuorumEpoch at any kraft.version (Kafka 3.9+ ``validateVoterOnlyRequest`` checks only the
epoch and the sender id), so a replica outside the voter set answers a Vote like any other
(and may grant it) and follows the leader a BeginQuorumEpoch or EndQuorumEpoch names; only
voters ever become Prospective or Candidate. An INCONSISTENT_VOTER_SET from a 3.x peer is
still taken (a rejected vote; otherwise logged, no retry).

:class:`RaftCore` is this module's start-up, public reads, input dispatch (poll, requests,
responses), DescribeQuorum and shutdown, combined with one part per job, each a
mixin over ``kafka_rpc.raft.base._CoreBase`` (the shared attributes, types and helpers):
``election`` (state transitions, timers, Vote, BeginQuorumEpoch, EndQuorumEpoch),
``replication`` (Fetch on both sides, the high watermark, appends), ``reconfig`` (the voter
set of the log, voter changes, addresses), ``snapshots``
(FetchSnapshot, generation, retention), ``delivery`` (committed batches, snapshots and leader
changes to the state machine) and ``validation`` (the checks shared by every request and
response).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any
from uuid import UUID

from kafka_rpc.protocol.record_batch import CorruptRecordError
from kafka_rpc.raft.api import (
    ElectionState,
    OffsetAndEpoch,
    QuorumStateStore,
    ReplicatedLog,
    StateMachine,
)
from kafka_rpc.raft.base import (
    _E,
    _LONG_MAX,
    ADD_RAFT_VOTER,
    API_VERSIONS,
    BEGIN_QUORUM_EPOCH,
    CANDIDATE,
    DESCRIBE_QUORUM,
    END_QUORUM_EPOCH,
    FETCH,
    FETCH_SNAPSHOT,
    FOLLOWER,
    LEADER,
    PROSPECTIVE,
    REMOVE_RAFT_VOTER,
    RESIGNED,
    UNATTACHED,
    UPDATE_RAFT_VOTER,
    VOTE,
    NotLeaderError,
    Outbound,
    RaftConfig,
    _DescResp,
    _Download,
    _InFlight,
    _Parked,
    _Pending,
    _ReplicaState,
    _VoterOp,
)
from kafka_rpc.raft.delivery import _Delivery
from kafka_rpc.raft.election import _Election
from kafka_rpc.raft.reconfig import _Reconfig
from kafka_rpc.raft.replication import _Replication
from kafka_rpc.raft.snapshots import _Snapshots
from kafka_rpc.raft.validation import _Validation
from kafka_rpc.raft.voters import ControlRecordState, VoterSet

log = logging.getLogger("kafka_rpc.raft")

__all__ = ["NotLeaderError", "Outbound", "RaftConfig", "RaftCore"]


class RaftCore(_Election, _Replication, _Snapshots, _Delivery, _Validation, _Reconfig):
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
        #: The control records' histories (offset -> voter set, offset -> kraft.version;
        #: Kafka ``KRaftControlRecordStateMachine``), the static voters as the fallback.
        self._crs = ControlRecordState(VoterSet.from_static(config.voters, config.listener_name))
        #: voter id -> (host, port) on ``listener_name`` of :attr:`voter_set` (derived from it
        #: on every change; a voter without that listener maps to its first endpoint, or
        #: ("", 0) without one)
        self.voters: dict[int, tuple[str, int]] = dict(config.voters)
        self._voter = config.is_voter
        #: Kafka's synthetic ids -2, -3, ... of ``controller.quorum.bootstrap.servers``
        self._bootstrap_ids = {-2 - i: hp for i, hp in enumerate(config.bootstrap_servers)}
        #: other destinations the driver may be asked to reach (an AddRaftVoter probe's node,
        #: a leader known only by the NodeEndpoints of a response)
        self._extra_addresses: dict[int, tuple[str, int]] = {}
        #: node id -> endpoint on ``listener_name`` learnt from the NodeEndpoints of responses
        #: and the LeaderEndpoints of requests (how a replica reaches a leader that is not in
        #: its voter set)
        self._seen_endpoints: dict[int, tuple[str, int]] = {}
        #: the AddRaftVoter/RemoveRaftVoter in progress (leader only), the probes sent so far,
        #: and whether this leader removed itself and must resign
        self._voter_op: _VoterOp | None = None
        self._probe_seq = 0
        self._resign_after_removal = False
        #: the leader's volatile voters at kraft.version 0 (Kafka 4.1+ ``LeaderState``): the
        #: static set with this leader's entry and those UpdateRaftVoter sent replaced
        self._volatile_voters: VoterSet | None = None
        #: Kafka ``FollowerState``'s update-voter timer (fetch.timeout.ms from becoming a
        #: Follower): when it runs out a voter sends UpdateRaftVoter, an auto-joining observer
        #: AddRaftVoter/RemoveRaftVoter; and whether this Follower has updated its leader
        #: (``hasUpdatedLeader``); ``_update_voter_due``: the timer ran out (the deadline is
        #: then None, so that it is not reported as a deadline while the request waits)
        self._update_voter_deadline: int | None = None
        self._update_voter_due = False
        self._updated_leader = False
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
        # leader: the voters' states (and the leader's own) by id, the observers' by
        # (id, directory id) (Kafka ``LeaderState.voterStates``/``observerStates``)
        self._replicas: dict[int, _ReplicaState] = {}
        self._observers: dict[tuple[int, UUID], _ReplicaState] = {}
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
        """Kafka ``QuorumState.initialize`` + ``KafkaRaftClient.initialize``: the control
        records of the latest snapshot and the whole log are read first (raising
        :class:`~kafka_rpc.raft.voters.ControlRecordError` for one this replica cannot read)."""
        self.log.truncate_to_latest_snapshot()
        self._replay_control_records(now)
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
            self.voted_id, self._voted_dir = st.voted_id, st.voted_directory_id
            self._set_follower(now, st.leader_id)
        elif st.voted_id == self.node_id and self.node_id >= 0:
            self.epoch = st.epoch
            self.state = CANDIDATE
            self.voted_id = self.node_id
            self._granted, self._rejected = {self.node_id}, set()
            self._election_deadline = now + self._random_election_timeout()
        elif st.voted_id != -1:
            self.epoch, self.voted_id, self.state = st.epoch, st.voted_id, UNATTACHED
            self._voted_dir = st.voted_directory_id
            self._election_deadline = now + self._random_election_timeout()
        else:
            self.epoch, self.state = st.epoch, UNATTACHED
            self._election_deadline = (
                now + self._random_election_timeout() if self.is_voter else None
            )
        # the state machine loads the latest snapshot before this node can lead (a leader's
        # state machine never loads one)
        self._deliver(now)
        if self.is_voter and len(self.voters) == 1 and self.state != LEADER:
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
        if not self.is_voter or len(self.voters) == 1:
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
                self._update_voter_deadline,
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
        if self._voter_op is not None:
            ds.append(self._voter_op.deadline_ms)
        if self.config.snapshot_interval_ms > 0 and self._records_since_snapshot:
            ds.append(self._last_snapshot_ms + self.config.snapshot_interval_ms)
        return min(ds) if ds else _LONG_MAX

    # ================================================================== poll
    def poll(self, now: int) -> None:
        """Run every timer that is due and emit the requests the current state sends."""
        try:
            self._poll(now)
        except Exception:
            log.exception("node %d: raft poll failed", self.node_id)
            raise

    def _poll(self, now: int) -> None:
        if self._update_voter_deadline is not None and now >= self._update_voter_deadline:
            self._update_voter_deadline, self._update_voter_due = None, True
        for dest, until in list(self._backoff_until.items()):
            if now >= until:
                del self._backoff_until[dest]
        for dest, f in list(self._inflight.items()):
            if now >= f.deadline_ms:
                del self._inflight[dest]
                self._on_failure(now, dest, f.api_key)
                if f.api_key == API_VERSIONS:
                    self._on_api_versions_response(now, dest, None)
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
            elif api_key == ADD_RAFT_VOTER:
                self._on_add_voter(now, version, request, reply)
            elif api_key == REMOVE_RAFT_VOTER:
                self._on_remove_voter(now, version, request, reply)
            else:
                raise ValueError(f"api key {api_key} is not a Raft request")
        except Exception:
            log.exception("node %d: raft request %d v%d failed", self.node_id, api_key, version)
            raise

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
                    node_id=v.id,
                    listeners=tuple(
                        m.Listener(name=name, host=h, port=pt)
                        for name, (h, pt) in v.endpoints.items()
                    ),
                )
                for v in (self.voter_set[i] for i in sorted(self.voter_set))
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

        def rs(rid: int, st: _ReplicaState | None, directory: UUID) -> Any:
            st = st if st is not None else _ReplicaState()
            end, fetch, caught = st.end_offset, st.last_fetch_ms, st.last_caught_up_ms
            if rid == self.node_id:
                end, fetch, caught = self.log.end_offset, now, now
            return m.ReplicaState(
                replica_id=rid,
                replica_directory_id=directory,
                log_end_offset=end,
                last_fetch_timestamp=self._wall(fetch) if fetch >= 0 else -1,
                last_caught_up_timestamp=self._wall(caught) if caught >= 0 else -1,
            )

        vs = self.voter_set
        voters = [rs(v, self._replicas.get(v), vs[v].directory_id) for v in sorted(vs)]
        observers = [
            rs(k[0], st, k[1])
            for k, st in sorted(self._observers.items(), key=lambda kv: (kv[0][0], kv[0][1].int))
        ]
        if self.node_id not in vs:
            # a leader that removed itself lists itself as an observer (Kafka)
            observers.insert(0, rs(self.node_id, None, self.config.directory_id))
        return m.PartitionData(
            partition_index=self.config.partition,
            leader_id=self.leader_id,
            leader_epoch=self.epoch,
            high_watermark=self.high_watermark,
            current_voters=tuple(voters),
            observers=tuple(observers),
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
            if f.api_key == API_VERSIONS:
                self._on_api_versions_response(now, destination, None)
            return
        api = f.api_key
        for ep in getattr(resp, "node_endpoints", None) or ():
            self._seen_endpoints[ep.node_id] = (ep.host, ep.port)
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
            elif api == API_VERSIONS:
                ok = self._on_api_versions_response(now, destination, resp)
            elif api in (ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, UPDATE_RAFT_VOTER):
                ok = self._on_voter_change_response(now, destination, api, resp)
            else:
                ok = True
        except (CorruptRecordError, ValueError) as e:
            log.warning("node %d: bad response from %d: %s", self.node_id, destination, e)
            ok = False
        if not ok:
            self._backoff_until[destination] = now + self.config.retry_backoff_ms

    def _on_failure(self, now: int, dest: int, api_key: int) -> None:
        self._backoff_until[dest] = now + self.config.retry_backoff_ms

    # ================================================================== resignation
    def resign(self, now: int, epoch: int) -> bool:
        """Kafka ``KafkaRaftClient.resign(epoch)``: the leader of ``epoch`` steps down
        (Resigned: EndQuorumEpoch to the other voters, which elect a successor; a voter alone
        elects itself again at a higher epoch once the election timeout passes), as the state
        machine asks when it can no longer trust its own state (the active controller's
        ``renounce``). Returns whether it resigned; an older epoch, or an epoch this node does
        not lead (any more), is ignored, as Kafka ignores a smaller epoch and a leadership
        already given up. Raises ValueError for an epoch above the current one (Kafka's
        IllegalArgumentException)."""
        if epoch > self.epoch:
            raise ValueError(f"Attempt to resign from epoch {epoch} which is larger than the "
                             f"current epoch {self.epoch}")  # fmt: skip
        if epoch < self.epoch or self.state != LEADER:
            log.debug("node %d: not resigning from epoch %d (epoch %d, %s)", self.node_id, epoch,
                      self.epoch, self.state)  # fmt: skip
            return False
        log.info("node %d: resigning the leadership of epoch %d", self.node_id, epoch)
        self._to_resigned(now)
        self._poll_resigned(now)
        return True

    # ================================================================== shutdown
    def begin_shutdown(self, now: int, timeout_ms: int) -> None:
        """Kafka ``shutdown(timeoutMs)``: a leader resigns (EndQuorumEpoch) and waits for a
        successor; ``shutdown_complete`` says when it may stop."""
        if self._shutdown_deadline is None:
            self._shutdown_deadline = now + timeout_ms
            if self.state == LEADER and len(self.voters) > 1:
                self._to_resigned(now)
                self._election_deadline = None
