"""What the parts of :class:`~kafka_rpc.raft.core.RaftCore` share.

The replica's settings (:class:`RaftConfig`), the requests it emits (:class:`Outbound`), the
error of an append on a non-leader (:class:`NotLeaderError`), the Raft API keys and message
classes, the leader's and follower's small records, the state names (Kafka ``QuorumState``), and
:class:`_CoreBase`: the attributes every part reads and writes (set in ``RaftCore.__init__``),
declared once, the helpers every part calls, and, for the type checker only, the methods one
part calls on another.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
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
from kafka_rpc.raft.voters import ControlRecordState, VoterNode, VoterSet

VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH, FETCH_SNAPSHOT, DESCRIBE_QUORUM = (
    52, 53, 54, 1, 59, 55,
)  # fmt: skip
UPDATE_RAFT_VOTER = 82
#: the replication RPCs a controller listener serves and a Kafka broker's does not list: what a
#: coordinator partition's group still sends to kafka-rpc brokers' inter-broker listeners
#: (``RaftDriver(unadvertised_raft_rpcs=True)``, ``kafka_rpc.handlers.raft``)
CONTROLLER_ONLY_REPLICATION_RPCS = frozenset({VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH,
                                              FETCH_SNAPSHOT})  # fmt: skip
ADD_RAFT_VOTER, REMOVE_RAFT_VOTER, API_VERSIONS = 80, 81, 18
MiB = 1 << 20
_LONG_MAX = (1 << 63) - 1
#: Kafka's ``LeaderState.OBSERVER_SESSION_TIMEOUT_MS``.
OBSERVER_SESSION_TIMEOUT_MS = 300_000
#: The AddRaftVoter ApiVersions probes go to destinations -1048577, -1048578, ...
_PROBE_BASE = -(1 << 20)
#: Kafka ``LeaderState.isReplicaCaughtUp``: a new voter must have fetched within an hour.
_CAUGHT_UP_FETCH_MS = 3_600_000
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
_UpdateVoterReq, _UpdateVoterResp = _m("UpdateRaftVoterRequest"), _m("UpdateRaftVoterResponse")
_AddVoterReq, _AddVoterResp = _m("AddRaftVoterRequest"), _m("AddRaftVoterResponse")
_RemoveVoterReq, _RemoveVoterResp = _m("RemoveRaftVoterRequest"), _m("RemoveRaftVoterResponse")
_LeaderChange = _m("LeaderChangeMessage")
_ApiVersionsReq = _m("ApiVersionsRequest")


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
    #: ``controller.quorum.bootstrap.servers`` as (host, port) pairs: where a replica that does
    #: not know the leader (an observer, or a voter of a dynamic quorum before it has read its
    #: voter set) sends Fetch; the core names them with Kafka's synthetic ids -2, -3, ... Empty:
    #: the static ``voters`` are the request targets (KIP-853, Kafka ``QuorumConfig``).
    bootstrap_servers: tuple[tuple[str, int], ...] = ()
    #: This replica's own endpoints, listener name -> (host, port), for VotersRecord entries
    #: (the start-of-epoch records, UpdateRaftVoter, auto-join's AddRaftVoter). Empty: the
    #: static ``voters`` entry of ``node_id`` on ``listener_name``.
    local_listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: The kraft.version levels this replica can run (Kafka ``KRaftVersion`` 0..1).
    kraft_version_supported: tuple[int, int] = (0, 1)
    #: True when the node has the controller role (Kafka ``canBecomeVoter``): only such a
    #: replica may be counted as a voter, fsyncs as an observer, and may auto-join.
    can_become_voter: bool = True
    #: ``controller.quorum.auto.join.enable`` (Kafka 4.2+): an observer controller that knows
    #: the leader adds itself with AddRaftVoter, first removing its id under an old directory id.
    auto_join: bool = False

    @property
    def is_voter(self) -> bool:
        """Whether ``node_id`` is in the STATIC ``voters`` (the core's own answer, from the
        latest voter set of the log, is ``RaftCore.is_voter``)."""
        return self.node_id in self.voters


@dataclass(frozen=True)
class Outbound:
    """A request the core wants sent to ``destination`` (a voter id, or the leader's id)."""

    destination: int
    correlation: int
    api_key: int
    request: Any  # the full generated request object


@dataclass
class _ReplicaState:
    """The leader's view of one replica (Kafka ``LeaderState.ReplicaState``); ``directory_id``
    is the one its last Fetch or FetchSnapshot carried (zero: none)."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    directory_id: UUID = _ZERO_UUID


@dataclass
class _VoterOp:
    """The one AddRaftVoter or RemoveRaftVoter in progress on the leader (Kafka
    ``AddVoterHandlerState``/``RemoveVoterHandlerState``): ``last_offset`` is its VotersRecord's
    offset once appended, ``probe`` the ApiVersions destination of an add; ``reply`` is called
    once (``finish``)."""

    kind: str  # "add" | "remove"
    voter_id: int
    directory_id: UUID
    endpoints: dict[str, tuple[str, int]]
    deadline_ms: int
    reply: Callable[[int, str | None], None]
    probe: int | None = None
    ack_when_committed: bool = True
    last_offset: int | None = None
    replied: bool = False

    def finish(self, code: int, message: str | None) -> None:
        if not self.replied:
            self.replied = True
            self.reply(code, message)


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


class _CoreBase:
    """The state of one replica, as every part of :class:`~kafka_rpc.raft.core.RaftCore` sees it
    (what each attribute means: ``RaftCore.__init__``), and the helpers they share."""

    config: RaftConfig
    wall_offset_ms: int
    log: ReplicatedLog
    store: QuorumStateStore
    sm: StateMachine
    rng: random.Random
    node_id: int
    voters: dict[int, tuple[str, int]]
    _out: list[Outbound]
    _corr: int
    _inflight: dict[int, _InFlight]
    _backoff_until: dict[int, int]
    # election state
    state: str
    epoch: int
    leader_id: int
    voted_id: int
    high_watermark: int
    # timers (absolute ms; None = not running)
    _election_deadline: int | None
    _fetch_deadline: int | None
    _check_quorum_deadline: int | None
    _begin_epoch_deadline: int | None
    # candidate / prospective
    _granted: set[int]
    _rejected: set[int]
    # voters (KIP-853)
    _crs: ControlRecordState
    _voter: bool
    _bootstrap_ids: dict[int, tuple[str, int]]
    _extra_addresses: dict[int, tuple[str, int]]
    _seen_endpoints: dict[int, tuple[str, int]]
    _voter_op: _VoterOp | None
    _probe_seq: int
    _resign_after_removal: bool
    _update_voter_deadline: int | None
    _volatile_voters: VoterSet | None
    _update_voter_due: bool
    _updated_leader: bool
    # leader
    _replicas: dict[int, _ReplicaState]
    _observers: dict[tuple[int, UUID], _ReplicaState]
    _epoch_start_offset: int
    _fetched_voters: set[int]
    _parked: list[_Parked]
    _pending: _Pending
    # follower
    _fetched_from_leader: bool
    _download: _Download | None
    # resigned
    _end_epoch_unacked: set[int]
    _preferred: list[int]
    # shutdown
    _shutdown_deadline: int | None
    # state machine delivery
    _next_offset: int
    defer_delivery: bool
    snapshot_writer: Callable[[Callable[[], None]], None] | None
    _snapshot_writing: tuple[OffsetAndEpoch, Any, int] | None
    _delivery_due: bool
    _delivery_due_ms: int
    _leader_change_delivered: tuple[int, int] | None
    # snapshots and retention
    _bytes_since_snapshot: int
    _records_since_snapshot: int
    _last_snapshot_ms: int
    _retention_deadline: int | None
    _last_delivered_epoch: int
    _last_delivered_ts: int
    _voted_dir: UUID | None
    on_transition: Callable[[Any], None] | None  # called with the RaftCore

    # ================================================================== helpers
    def _wall(self, now: int) -> int:
        """Wall-clock ms for a record timestamp (``now`` is the monotonic driver clock)."""
        return now + self.wall_offset_ms

    def _majority(self) -> int:
        return len(self.voters) // 2 + 1

    @property
    def voter_set(self) -> VoterSet:
        """The latest voter set, possibly uncommitted (Kafka ``lastVoterSet``): the newest
        VotersRecord of the snapshot and log, else the static ``controller.quorum.voters``."""
        return self._crs.last_voter_set()

    @property
    def is_voter(self) -> bool:
        """Whether this replica (id and directory id) is in :attr:`voter_set` (Kafka
        ``QuorumState.isVoter``)."""
        return self._voter

    @property
    def kraft_version(self) -> int:
        """The latest kraft.version of the log (Kafka ``RaftClient.kraftVersion``): the newest
        KRaftVersionRecord, 0 without one."""
        return self._crs.last_kraft_version()

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
                voted_directory_id=self._voted_dir,
                data_version=1 if self._crs.last_kraft_version() >= 1 else 0,
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

    # The methods one part calls on another, each defined in the module named above it: declared
    # for the type checker only, so that at run time RaftCore takes the part's own definition.
    if TYPE_CHECKING:
        # core.py
        @property
        def needs_flush(self) -> bool: ...

        # election.py
        def _to_follower(self, now: int, epoch: int, leader: int) -> None: ...
        def _maybe_transition(self, now: int, leader: int, epoch: int) -> None: ...

        # validation.py
        def _cluster_ok(self, cluster_id: str | None) -> bool: ...
        def _single_partition(
            self, request: Any, version: int, id_from: int | None
        ) -> Any | None: ...
        def _validate_voter_only(self, remote_id: int, epoch: int) -> tuple[int, int] | None: ...
        def _validate_leader_only(self, epoch: int) -> int | None: ...
        def _topic_resp(self, mod: Any, version: int, id_from: int, partitions: tuple) -> tuple: ...
        def _node_endpoints(self, mod: Any, version: int, min_version: int) -> tuple: ...
        def _voter_key_ok(self, voter_id: int, voter_dir: UUID) -> bool: ...
        def _contradicted(self, api: str, p: Any) -> int: ...
        def _leader_claim_ok(self, leader: int, epoch: int) -> bool: ...
        def _common(self, now: int, code: int, leader: int, epoch: int) -> bool | None: ...

        # replication.py
        def _send_fetch(self, now: int, dest: int) -> None: ...
        def _fetch_response_valid(
            self,
            now: int,
            version: int,
            req: Any,
            replica: int,
            update: bool = False,
            touch: bool = False,
        ) -> Any: ...
        def _voter_seen(self, now: int, replica: int) -> None: ...
        def _reply_fetch_error(self, p: _Parked, code: int) -> None: ...
        def _flush_pending(self, now: int, force: bool) -> None: ...

        def _update_high_watermark(self, now: int) -> None: ...
        def _wake_parked(self, now: int, hw_changed: bool = False) -> None: ...

        # snapshots.py
        def _fetch_snapshot_request(self) -> Any: ...

        # reconfig.py
        def _replay_control_records(self, now: int) -> None: ...
        def _feed_batches(self, now: int, batches: Any, notify: bool = True) -> None: ...
        @staticmethod
        def _check_control_batches(batches: Any) -> None: ...
        def _truncate_voters(self, now: int, end: int) -> None: ...
        def _trim_voters(self, snapshot_offset: int) -> None: ...
        def _voters_changed(self, now: int) -> None: ...
        def _replica_state(self, replica: int, directory: UUID) -> tuple[_ReplicaState, bool]: ...
        def _local_voter_node(self) -> VoterNode: ...
        def _start_of_epoch_batch(self, now: int, leader_change: bytes) -> Any: ...
        def _expire_voter_op(self, now: int) -> None: ...
        def _voter_op_committed(self, now: int) -> None: ...
        def _abort_voter_op(self, code: int) -> None: ...
        def _to_resigned(self, now: int, persist: bool = False) -> None: ...
        def _poll_resigned(self, now: int) -> None: ...
        def _maybe_send_voter_update(self, now: int) -> bool: ...

        # delivery.py
        def _notify_leader_change(self) -> None: ...
        def _deliver(self, now: int) -> None: ...
