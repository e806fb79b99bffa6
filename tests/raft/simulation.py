"""A deterministic, seeded simulation of a Raft cluster (Kafka's ``RaftEventSimulationTest``).

Every node is a real :class:`~kafka_rpc.raft.core.RaftCore` on a
:class:`~kafka_rpc.raft.memory.MemoryLog`; the network, the clock, fsync and crashes are
simulated by one event queue driven by ``random.Random(seed)``, so a seed replays exactly:

* messages are delayed (1 to ``max_delay_ms``), dropped, duplicated, and blocked by partitions;
* with ``wire=True`` every message is encoded and decoded at its negotiated version through the
  generated codec (``raft.wire.for_version``), as on a socket;
* an fsync completes ``fsync_ms`` after it starts; a crash loses every write not flushed yet
  (``MemoryLog.crash``) and the node restarts later from its log and quorum-state only;
* a client appends records on whichever node is leader.

After every event the invariant checkers of :class:`Invariants` run (Kafka's
``MonotonicHighWatermark``, ``SingleLeader``, ``ConsistentCommittedData``, ``SnapshotAtLogStart``
plus our ``CommittedDataNeverLost``, checked at the end after the network heals). Beside them,
:class:`KafkaRules` checks every transition, message and vote against what Apache Kafka 4.x's
``KafkaRaftClient`` does or tolerates, as a Kafka voter in the quorum would see them: the legal
transitions of ``QuorumState``, ``canGrantVote`` of each state, leader claims a Kafka receiver
would halt on, what a leader's Fetch answer holds, BeginQuorumEpoch only to voters that do not
fetch, check quorum, LeaderEndpoints and directory ids. A checker raises
:class:`InvariantViolation` naming the seed.

Scenario knobs make some of Kafka's ways happen on every message: ``slice_fetch`` cuts a
leader's Fetch answer inside a batch as Kafka's byte-sliced log reads do; ``listener_names``
gives the voters different controller listener names; ``kafka_versions`` negotiates Kafka
4.4's Raft versions (Vote 2, BeginQuorumEpoch 1, EndQuorumEpoch 1) instead of ours;
``followers_converge`` also requires every replica to apply everything committed by the end.

Dynamic quorums (KIP-853, ``dynamic=True``): the initial voters start from the bootstrap
checkpoint, the other nodes as observers that find the leader through the bootstrap servers;
``reconfig`` schedules AddRaftVoter / RemoveRaftVoter requests (and disk wipes) sent to the
leader and retried until done; the simulator answers the leader's ApiVersions probe on the new
voter's behalf. Their checkers (voter sets agree at every offset, one uncommitted voter change
at a time, the high watermark backed by a majority of the voter set in force, committed entries
on a majority of the final voters) run beside the others; ``KAFKA_RULE_GAPS`` names the checks
the core does not pass yet in such runs.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.record_batch import control_type, decode_batches
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.core import (
    CANDIDATE,
    FOLLOWER,
    LEADER,
    PROSPECTIVE,
    RESIGNED,
    UNATTACHED,
    NotLeaderError,
    RaftConfig,
    RaftCore,
)
from kafka_rpc.raft.memory import MemoryLog, MemoryQuorumStateStore
from kafka_rpc.raft.voters import VoterNode, VoterSet, bootstrap_checkpoint_bytes
from kafka_rpc.raft.wire import for_version
from tests.raft.conftest import partition_invalid_requests

#: Versions two of our nodes negotiate (the newest of each spec).
VERSIONS = {52: 3, 53: 2, 54: 2, 1: 18, 59: 1, 55: 2, 80: 1, 81: 0, 82: 0}
#: Versions one of our nodes and an Apache Kafka 4.4 voter negotiate (Kafka's maxima).
KAFKA_VERSIONS = {52: 2, 53: 1, 54: 1, 1: 18, 59: 1, 55: 2, 80: 1, 81: 0, 82: 0}


class InvariantViolation(AssertionError):
    pass


#: :class:`KafkaRules` checks the core does not pass yet in dynamic quorums (``kafka_skip``):
#: a Prospective whose pre-election failed while it knew a leader that is no longer in its voter
#: set (a removed leader, still leading until the removal commits) goes Unattached, where Kafka
#: goes back to Follower since it has that leader's endpoints (Kafka
#: ``QuorumState.prospectiveTransitionAfterElectionLoss``); a leader that removed itself counts
#: itself toward check quorum, where Kafka counts only the remaining voters (Kafka
#: ``LeaderState.updateCheckQuorumForFollowingVoter``).
#: And a node of a dynamic quorum that has read no KRaftVersionRecord yet (formatted with
#: ``--no-initial-controllers``) answers Vote INCONSISTENT_VOTER_SET as a kraft.version 0 one,
#: where Kafka 4.x answers the vote (no 4.x code path returns that error).
PROSPECTIVE_LOSS, CHECK_QUORUM_REMOVED = "prospective-loss-removed-leader", "check-quorum-removed"
UNFORMATTED_94 = "unformatted-inconsistent-voter-set"
#: And (an invariant, not a Kafka rule) a follower whose downloaded snapshot replaced a log that
#: went past it keeps the voter history it had read of the replaced log (its ``next_offset``
#: is above the new log end, so nothing is read again): it works with a voter set its log no
#: longer holds.
SNAPSHOT_STALE = "snapshot-download-stale-voters"
KAFKA_RULE_GAPS = frozenset({PROSPECTIVE_LOSS, CHECK_QUORUM_REMOVED, UNFORMATTED_94,
                             SNAPSHOT_STALE})  # fmt: skip

_ApiResp = codec.module("ApiVersionsResponse")
_AddReq = codec.module("AddRaftVoterRequest")
_RemoveReq = codec.module("RemoveRaftVoterRequest")


@dataclass
class VoterChange:
    """One voter change an operator makes (``kafka-metadata-quorum add-controller`` /
    ``remove-controller``), from ``start_ms`` on, retried until done:

    * ``add``: AddRaftVoter of ``node`` under its directory id of generation ``gen`` (None:
      its current one) with its listener, to the node the simulator sees leading;
    * ``remove``: RemoveRaftVoter of ``node`` under its directory id of generation ``gen``
      (None: its current one);
    * ``remove_leader``: RemoveRaftVoter of whichever node leads when it is first sent;
    * ``wipe``: the node loses its disk: it stops, is formatted again with
      ``--no-initial-controllers`` (an empty log, no quorum-state, a new directory id) and
      restarts as an observer.

    ``answers`` are ``(ms, node asked, error code)``; a change is done on NONE, or on
    DUPLICATE_VOTER / VOTER_NOT_FOUND when the asked leader's voter set already is what the
    change wants."""

    start_ms: int
    kind: str
    node: int
    gen: int | None = None
    directory_id: uuid.UUID | None = None  # fixed at the first send
    done: bool = False
    token: int = 0
    answers: list[tuple[int, int, int]] = field(default_factory=list)


#: a committed record starting with one of these opens / closes a metadata transaction
#: (``SimConfig.transactions``; KIP-868's Begin/EndTransactionRecord in miniature)
TXN_BEGIN, TXN_END = b"txn-begin", b"txn-end"


class RecordingStateMachine:
    """Keeps every committed data record as ``(offset, value)``; snapshots carry the offsets
    (``b"<offset>=<value>"``) so a node that loaded one can still be compared offset by offset.
    ``in_transaction`` while the committed records end inside a transaction (a
    :data:`TXN_BEGIN` record not yet followed by a :data:`TXN_END`): the core takes no snapshot
    then, as a Kafka controller snapshots only at its last stable offset."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []
        self.leader: tuple[int, int] = (-1, 0)
        self.loads = 0
        self.txn_start = -1  # offset of the open transaction's begin record, -1: none

    @property
    def in_transaction(self) -> bool:
        return self.txn_start >= 0

    def handle_commit(self, batches: Sequence[Any]) -> None:
        for b in batches:
            if b.is_control:
                continue
            for i, v in enumerate(b.records):
                self.applied.append((b.base_offset + i, v))
                if v is not None and v.startswith(TXN_BEGIN) and self.txn_start < 0:
                    self.txn_start = b.base_offset + i
                elif v is not None and v.startswith(TXN_END):
                    self.txn_start = -1

    def handle_load_snapshot(self, reader: Any) -> None:
        self.loads += 1
        self.applied = []
        self.txn_start = -1  # a snapshot is never taken inside a transaction
        for b in reader.batches():
            if b.is_control:
                continue
            for v in b.records:
                off, _, val = v.partition(b"=")
                self.applied.append((int(off), val))

    def snapshot_records(self) -> list[bytes]:
        return [b"%d=%s" % (o, v) for o, v in self.applied]

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader = (leader_id, epoch)


@dataclass
class SimConfig:
    voters: int = 3
    observers: int = 0
    duration_ms: int = 30_000
    heal_ms: int = 15_000  # after the faults, time for the cluster to converge
    max_delay_ms: int = 10
    drop: float = 0.05
    duplicate: float = 0.02
    partition_every_ms: int = 4_000  # mean time between partition changes (0 = never)
    crash_every_ms: int = 5_000  # mean time between crashes (0 = never)
    down_ms: tuple[int, int] = (200, 3_000)
    fsync_ms: tuple[int, int] = (0, 4)
    append_every_ms: int = 20
    records_per_append: tuple[int, int] = (1, 4)
    wire: bool = False
    snapshot_min_records: int = 60
    retention_bytes: int = 2_000  # small, so the log start offset moves during a run
    retention_check_ms: int = 500
    replication_lag_ms: int = 1_000
    core_factory: Callable[..., RaftCore] = RaftCore
    check_every_event: bool = True
    kafka_versions: bool = False  # negotiate KAFKA_VERSIONS instead of VERSIONS
    listener_names: bool = False  # even voters name their controller listener CTRL, odd CONTROLLER
    slice_fetch: float = 0.0  # chance a leader's Fetch answer of 2+ batches ends inside a batch
    followers_converge: bool = False  # at the end every running replica applied all committed
    kafka_rules: bool = True  # False: only Kafka's RaftEventSimulationTest invariants are checked
    transactions: float = 0.0  # chance per client tick that a leader opens / closes a transaction
    update_voter: bool = False  # follower voters send UpdateRaftVoter as Kafka 4.1+ voters do
    voter_check_every: int = 20  # events between two voter-set agreement checks (dynamic runs)
    hw_majority: bool = True  # False: Invariants.check_hw_majority is off (to test the others)
    #: a dynamic quorum (kraft.version 1): the ``voters`` first nodes are formatted with the
    #: bootstrap checkpoint of their set (``--initial-controllers``), the ``observers`` others
    #: with none (``--no-initial-controllers``); every node finds the leader through
    #: ``controller.quorum.bootstrap.servers`` (the initial voters)
    dynamic: bool = False
    #: voter changes, each ``(start ms, kind, node)`` or ``(start ms, kind, node, generation)``
    #: (see :class:`VoterChange`), retried until done
    reconfig: tuple[tuple[Any, ...], ...] = ()
    probe_drop: float = 0.0  # extra chance an ApiVersions probe of a new voter is lost
    #: names of :class:`KafkaRules` checks not run (:data:`KAFKA_RULE_GAPS`: known divergences
    #: of the core from Kafka that a test pins until they are fixed)
    kafka_skip: frozenset[str] = frozenset()


@dataclass
class Node:
    node_id: int
    log: MemoryLog
    store: MemoryQuorumStateStore
    core: RaftCore | None = None
    sm: RecordingStateMachine = field(default_factory=RecordingStateMachine)
    incarnation: int = 0
    flushing: bool = False
    poll_at: int = -1
    delivering: bool = False  # a deferred delivery is scheduled (RaftDriver._deliver_committed)


class Cluster:
    def __init__(self, seed: int, cfg: SimConfig | None = None) -> None:
        self.seed = seed
        self.cfg = cfg = cfg or SimConfig()
        self.rng = random.Random(seed)
        self.now = 0
        self._q: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        ids = list(range(1, cfg.voters + 1))
        self.voter_ids = ids
        self.voters = {i: ("127.0.0.1", 9000 + i) for i in ids}
        self.nodes: dict[int, Node] = {}
        for i in range(1, cfg.voters + cfg.observers + 1):
            self.nodes[i] = Node(i, RecordingLog(f"node {i}"), MemoryQuorumStateStore())
        self.addr_nodes = {("127.0.0.1", 9000 + i): i for i in self.nodes}
        self.blocked: set[tuple[int, int]] = set()
        # which incarnations hand committed batches over later, as the real driver does
        # (RaftCore.defer_delivery), and how late: a stream of its own, so the main one's draws
        # (and the runs of earlier seeds) stay as they were
        self.defer_rng = random.Random(f"defer-{seed}")
        # which incarnations write due snapshots in the background (RaftCore.snapshot_writer, as
        # RaftDriver(background_snapshots=True) does) and how late each one ends: a stream of
        # its own too
        self.snap_rng = random.Random(f"snapshot-{seed}")
        self.inv = Invariants(self)
        for n in self.nodes.values():
            n.log.on_append = functools.partial(self.inv.on_voters_append, n)
        self.kafka = KafkaRules(self) if cfg.kafka_rules else _NoRules()
        # each node's directory id (a stream of its own, so the other draws stay as they were)
        dir_rng = random.Random(f"dirs-{seed}")
        self.dirs = {i: uuid.UUID(int=dir_rng.getrandbits(128) | (1 << 100)) for i in self.nodes}
        self.versions = KAFKA_VERSIONS if cfg.kafka_versions else VERSIONS
        self.txn_rng = random.Random(f"txn-{seed}")  # a stream of its own, as above
        self.uv_rng = random.Random(f"update-voter-{seed}")  # and one for UpdateRaftVoter
        self.uv_done: dict[int, tuple[int, int]] = {}  # voter -> (leader, epoch) acknowledged
        self.uv_next: dict[int, int] = {}  # voter -> earliest ms of its next UpdateRaftVoter
        self.appended = 0
        self.events = 0
        # dynamic quorums: every directory id a node had, oldest first (a wipe adds one)
        self.dir_gens = {i: [d] for i, d in self.dirs.items()}
        self.wiped_epoch: dict[int, int] = {}  # node -> the highest epoch known when wiped
        self.changes = [VoterChange(*op) for op in cfg.reconfig]
        self.op_rng = random.Random(f"reconfig-{seed}")  # a stream of its own, as above
        if cfg.dynamic:
            boot = self._bootstrap_checkpoint()
            for i in self.voter_ids:
                w = self.nodes[i].log.create_snapshot(OffsetAndEpoch(0, 0))
                w.append(boot)
                w.freeze()
        for n in self.nodes.values():
            self._start(n)

    # ------------------------------------------------------------------ scheduling
    def at(self, t: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn))

    def _bootstrap_checkpoint(self) -> bytes:
        """The 0-0 checkpoint ``kafka-storage format --initial-controllers`` writes for the
        initial voters (kraft.version 1, each voter with its directory id, its listener and
        kraft.version 0..1)."""
        vs = VoterSet(VoterNode(i, self.dirs[i], {"CONTROLLER": self.voters[i]}, 0, 1)
                      for i in self.voter_ids)  # fmt: skip
        return bootstrap_checkpoint_bytes(vs, 1, 0)

    def _raft_config(self, node_id: int) -> RaftConfig:
        c = self.cfg
        if c.dynamic:
            addr = ("127.0.0.1", 9000 + node_id)
            return RaftConfig(
                node_id=node_id,
                voters={},
                cluster_id="sim-cluster",
                snapshot_min_records=c.snapshot_min_records,
                snapshot_interval_ms=0,
                max_retention_bytes=c.retention_bytes,
                retention_check_interval_ms=c.retention_check_ms,
                max_replication_lag_ms=c.replication_lag_ms,
                directory_id=self.dirs[node_id],
                bootstrap_servers=tuple(self.voters[i] for i in self.voter_ids),
                local_listeners={"CONTROLLER": addr},
            )
        return RaftConfig(
            node_id=node_id,
            voters=self.voters,
            cluster_id="sim-cluster",
            snapshot_min_records=c.snapshot_min_records,
            snapshot_interval_ms=0,
            max_retention_bytes=c.retention_bytes,
            retention_check_interval_ms=c.retention_check_ms,
            max_replication_lag_ms=c.replication_lag_ms,
            directory_id=self.dirs[node_id],
            listener_name="CTRL" if c.listener_names and node_id % 2 == 0 else "CONTROLLER",
        )

    def _start(self, n: Node) -> None:
        n.incarnation += 1
        n.sm = RecordingStateMachine()
        n.flushing = False
        n.core = self.cfg.core_factory(
            self._raft_config(n.node_id),
            n.log,
            n.store,
            n.sm,
            random.Random(self.rng.random()),
            self.now,
        )
        n.core.defer_delivery = self.defer_rng.random() < 0.5
        if self.snap_rng.random() < 0.5:
            n.core.snapshot_writer = functools.partial(self._background_snapshot, n, n.incarnation)
        n.delivering = False
        n.poll_at = -1  # a poll the last incarnation scheduled is void (_poll checks it)
        n.core.on_transition = functools.partial(self.kafka.on_transition, n)
        self.kafka.on_start(n)
        self.inv.on_restart(n)
        self._after(n)

    def _after(self, n: Node) -> None:
        """What a driver does after any input: flush if needed, send, hand over committed
        batches later (deferred delivery), schedule the next poll."""
        core = n.core
        if core is None:
            return
        if core.needs_flush and not n.flushing:
            n.flushing = True
            inc = n.incarnation
            self.at(self.now + self.rng.randint(*self.cfg.fsync_ms), lambda: self._flushed(n, inc))
        for ob in core.take_outbound():
            self._send_request(n.node_id, ob)
        if self.cfg.update_voter:
            self._maybe_update_voter(n)
        if core.delivery_due and not n.delivering:
            n.delivering = True
            inc = n.incarnation
            self.at(self.now + self.defer_rng.randint(0, 3), lambda: self._deliver(n, inc))
        d = core.next_deadline_ms()
        if d < (1 << 62) and (n.poll_at < self.now or d < n.poll_at):
            n.poll_at = max(d, self.now)
            inc = n.incarnation
            self.at(n.poll_at, lambda: self._poll(n, inc))

    def _poll(self, n: Node, inc: int) -> None:
        if n.core is None or n.incarnation != inc:
            return
        if n.poll_at > self.now:
            return
        n.poll_at = -1
        n.core.poll(self.now)
        if n.core.next_deadline_ms() <= self.now:
            # a driver would spin: every deadline due now must have been handled by poll
            self.inv.fail(f"node {n.node_id}: next deadline {n.core.next_deadline_ms()} is not "
                          f"after the poll at {self.now}")  # fmt: skip
        self._after(n)

    def _deliver(self, n: Node, inc: int) -> None:
        if n.core is None or n.incarnation != inc:
            return
        n.delivering = False
        n.core.deliver_committed(self.now)
        self._after(n)

    def _background_snapshot(self, n: Node, inc: int, write: Callable[[], None]) -> None:
        end = self.now + self.snap_rng.randint(0, 40)
        self.at(end, lambda: self._snapshot_written(n, inc, write))

    def _snapshot_written(self, n: Node, inc: int, write: Callable[[], None]) -> None:
        """A background snapshot's file work ends (a crash meanwhile lost it with the node)."""
        if n.core is None or n.incarnation != inc:
            return
        error = None
        try:
            write()
        except Exception as exc:  # noqa: BLE001 - handed to the core, as the driver does
            error = exc
        n.core.snapshot_written(error)
        self._after(n)

    def _flushed(self, n: Node, inc: int) -> None:
        if n.core is None or n.incarnation != inc:
            return
        n.log.flush()
        n.flushing = False
        n.core.handle_flushed(self.now)
        n.core.poll(self.now)
        self._after(n)

    # ------------------------------------------------------------------ network
    def _deliverable(self, src: int, dst: int) -> bool:
        return (src, dst) not in self.blocked

    def _wire(self, name: str, version: int, msg: Any) -> Any:
        if not self.cfg.wire:
            return msg
        data = codec.encode(msg, version)
        return codec.decode(name, version, data)

    def _target(self, src: int, ob: Any) -> int | None:
        """The node an Outbound goes to: its destination in a static quorum; in a dynamic one
        the node listening at ``core.address_of(destination)`` (a voter, a bootstrap server
        -2, -3, ..., the leader from received endpoints, an AddRaftVoter probe), None when the
        core knows no address or nobody listens there."""
        if not self.cfg.dynamic:
            return ob.destination
        return self.addr_nodes.get(self.nodes[src].core.address_of(ob.destination))

    def _send_request(self, src: int, ob: Any) -> None:
        self.kafka.on_request_sent(self.nodes[src], ob)
        dst = self._target(src, ob)
        if dst is None:
            self._reset(src, ob)  # no address: the driver fails it (BROKER_NOT_AVAILABLE)
            return
        if not self._deliverable(src, dst):
            return  # a partition: silence, the sender times out
        if self.rng.random() < self.cfg.drop:
            self._reset(src, ob)
            return
        if ob.api_key == 18:
            self._probe(src, dst, ob)
            return
        version = self.versions[ob.api_key]
        req = for_version(ob.api_key, version, ob.request)
        req = self._wire(codec.REQUESTS_BY_KEY[ob.api_key], version, req)
        copies = 2 if self.rng.random() < self.cfg.duplicate else 1
        for _ in range(copies):
            delay = self.rng.randint(1, self.cfg.max_delay_ms)
            self.at(self.now + delay,
                    lambda r=req: self._recv_request(src, ob, version, r, dst))  # fmt: skip

    def _probe(self, src: int, dst: int, ob: Any) -> None:
        """The ApiVersions (v4) an AddRaftVoter leader sends the new voter (Kafka
        ``AddVoterHandler``), answered here on the target's behalf as its network layer would:
        SupportedFeatures with its kraft.version range; a down target refuses the connection,
        a lost probe (``probe_drop``) is a broken connection."""
        src_inc = self.nodes[src].incarnation
        if self.op_rng.random() < self.cfg.probe_drop:
            self._reset(src, ob)
            return

        def arrive() -> None:
            target = self.nodes[dst]
            if target.core is None:
                self._reset(src, ob)  # connection refused
                return
            lo, hi = target.core.config.kraft_version_supported
            resp = _ApiResp.ApiVersionsResponse(
                error_code=0,
                api_keys=(),
                supported_features=(
                    _ApiResp.SupportedFeatureKey(name="kraft.version", min_version=lo,
                                                 max_version=hi),
                ),
            )  # fmt: skip
            resp = self._wire("ApiVersionsResponse", 4, resp)
            if not self._deliverable(dst, src):
                return
            delay = self.rng.randint(1, self.cfg.max_delay_ms)
            self.at(self.now + delay, lambda: self._recv_response(dst, src, src_inc, ob, resp))

        self.at(self.now + self.rng.randint(1, self.cfg.max_delay_ms), arrive)

    def _recv_request(self, src: int, ob: Any, version: int, req: Any,
                      to: int | None = None) -> None:  # fmt: skip
        to = ob.destination if to is None else to
        dst = self.nodes[to]
        if dst.core is None or not self._deliverable(src, to):
            return
        src_inc = self.nodes[src].incarnation
        self.kafka.on_request_received(dst, src, ob.api_key, version, req)
        expected = None
        if ob.api_key == 52:
            expected = self.kafka.expect_vote(dst.core, version, req)
        kind = None
        if ob.api_key == 1:
            self.inv.on_fetch(dst, version, req)
        if ob.api_key in (1, 59):
            kind = self.kafka.on_fetch_arrival(dst, src, ob.api_key, version, req)
        arriving = [True]

        def reply(resp: Any) -> None:
            if expected is not None:
                self.kafka.check_vote(dst, expected, req, version, resp)
            if kind is not None:
                self.kafka.on_fetch_answered(dst, src, ob.api_key, kind, arriving[0], resp)
            self._send_response(to, src, src_inc, ob, version, resp, req)

        dst.core.handle_request(self.now, ob.api_key, version, req, reply)
        arriving[0] = False
        self._after(dst)
        self.inv.check()

    def _reset(self, src: int, ob: Any) -> None:
        """A lost message on TCP is a broken connection: the sender's client sees the failure
        (after a short delay) instead of waiting for the request timeout."""
        n = self.nodes[src]
        inc = n.incarnation

        def fail() -> None:
            if n.core is not None and n.incarnation == inc:
                n.core.handle_response(self.now, ob.destination, ob.correlation, None)
                self._after(n)

        self.at(self.now + self.rng.randint(1, self.cfg.max_delay_ms), fail)

    def _send_response(self, src, dst, dst_inc, ob, version, resp, req=None) -> None:
        self.inv.check_response(src, resp)
        responder = self.nodes[src]
        if responder.core is not None:
            self.kafka.on_response_sent(responder, ob.api_key, req, resp)
            if ob.api_key == 1 and self.cfg.slice_fetch and responder.core.state == LEADER:
                resp = self._slice(resp)
        if not self._deliverable(src, dst):
            return
        if self.rng.random() < self.cfg.drop:
            self._reset(dst, ob)
            return
        resp = self._wire(codec.RESPONSES_BY_KEY[ob.api_key], version, resp)
        delay = self.rng.randint(1, self.cfg.max_delay_ms)
        self.at(self.now + delay, lambda: self._recv_response(src, dst, dst_inc, ob, resp))

    # ------------------------------------------------------------------ UpdateRaftVoter
    def _maybe_update_voter(self, n: Node) -> None:
        """A Kafka 4.1+ follower voter at kraft.version 0 sends UpdateRaftVoter (82 v0) to each
        new leader, every fetch timeout, until an answer NONE or UNSUPPORTED_VERSION names that
        leader and epoch (``KafkaRaftClient.shouldSendUpdateVoteRequest``,
        ``FollowerState.hasUpdatedLeader``). The
        simulator sends it for our cores (which never do) so that the leaders' answers are
        checked (:meth:`KafkaRules.check_update_voter`)."""
        core = n.core
        me = n.node_id
        if core.state != FOLLOWER or me not in self.voters or core.leader_id < 0:
            return
        target = (core.leader_id, core.epoch)
        if self.uv_done.get(me) == target or self.now < self.uv_next.get(me, 0):
            return
        self.uv_next[me] = self.now + core.config.fetch_timeout_ms
        m = codec.module("UpdateRaftVoterRequest")
        host, port = self.voters[me]
        req = m.UpdateRaftVoterRequest(
            cluster_id="sim-cluster", current_leader_epoch=core.epoch, voter_id=me,
            voter_directory_id=self.dirs[me],
            listeners=(m.Listener(name=core.config.listener_name, host=host, port=port),),
            kraft_version_feature=m.KRaftVersionFeature(min_supported_version=0,
                                                        max_supported_version=1),
        )  # fmt: skip
        req = self._wire("UpdateRaftVoterRequest", 0, req)
        dst, inc = target[0], n.incarnation
        if not self._deliverable(me, dst) or self.uv_rng.random() < self.cfg.drop:
            return
        delay = self.uv_rng.randint(1, self.cfg.max_delay_ms)
        self.at(self.now + delay, lambda: self._recv_update_voter(me, inc, dst, target, req))

    def _recv_update_voter(self, src: int, src_inc: int, dst: int, target, req) -> None:
        d = self.nodes[dst]
        if d.core is None or not self._deliverable(src, dst):
            return

        def reply(resp: Any) -> None:
            self.kafka.check_update_voter(d, req, resp)
            resp = self._wire("UpdateRaftVoterResponse", 0, resp)
            if not self._deliverable(dst, src) or self.uv_rng.random() < self.cfg.drop:
                return
            delay = self.uv_rng.randint(1, self.cfg.max_delay_ms)
            self.at(self.now + delay, lambda: self._update_voter_answered(src, src_inc, resp))

        d.core.handle_request(self.now, 82, 0, req, reply)
        self._after(d)

    def _update_voter_answered(self, src: int, src_inc: int, resp: Any) -> None:
        n = self.nodes[src]
        if n.core is None or n.incarnation != src_inc:
            return
        cl = resp.current_leader
        named = (cl.leader_id, cl.leader_epoch)
        if resp.error_code in (0, _E.UNSUPPORTED_VERSION) and named == (n.core.leader_id,
                                                                         n.core.epoch):
            self.uv_done[src] = named

    def _slice(self, resp: Any) -> Any:
        """With probability ``slice_fetch``, cut a Fetch answer holding two or more batches
        inside one of its batches after the first, as Kafka's leader reads its log by bytes
        (``LogSegment.read`` slices at MaxBytes)."""
        p = resp.responses[0].partitions[0]
        data = p.records
        if not data or self.rng.random() >= self.cfg.slice_fetch:
            return resp
        bounds = []
        pos = 0
        while pos + 12 <= len(data):
            size = 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
            bounds.append((pos, size))
            pos += size
        if len(bounds) < 2:
            return resp
        start, size = bounds[self.rng.randrange(1, len(bounds))]
        cut = start + self.rng.randint(1, size - 1)
        t = resp.responses[0]
        p = dataclasses.replace(p, records=data[:cut])
        return dataclasses.replace(
            resp, responses=(dataclasses.replace(t, partitions=(p,)),) + resp.responses[1:]
        )

    def _recv_response(self, src, dst, dst_inc, ob, resp) -> None:
        n = self.nodes[dst]
        if n.core is None or n.incarnation != dst_inc or not self._deliverable(src, dst):
            return
        f = n.core._inflight.get(ob.destination)
        if f is not None and f.correlation == ob.correlation and ob.api_key != 18:
            self.kafka.on_response_received(n, src, ob.api_key, resp)
            if ob.api_key == 59:
                self.inv.downloaded.add((n.node_id, n.incarnation))
        n.core.handle_response(self.now, ob.destination, ob.correlation, resp)
        self._after(n)
        self.inv.check()

    # ------------------------------------------------------------------ faults and load
    def _crash(self, n: Node) -> None:
        if n.core is None:
            return
        n.core = None
        n.log.crash()
        self.inv.on_crash(n)
        down = self.rng.randint(*self.cfg.down_ms)
        self.at(self.now + down, lambda: self._restart(n))

    def _restart(self, n: Node) -> None:
        if n.core is None:
            self._start(n)
            self.inv.check()

    def _fault_tick(self) -> None:
        if self.now >= self.cfg.duration_ms:
            return
        c = self.cfg
        if c.crash_every_ms and self.rng.random() < 100 / c.crash_every_ms:
            up = [n for n in self.nodes.values() if n.core is not None]
            down = len(self.nodes) - len(up)
            if up and down < (c.voters - 1) // 2 + 1:
                self._crash(self.rng.choice(up))
        if c.partition_every_ms and self.rng.random() < 100 / c.partition_every_ms:
            self._repartition()
        self.at(self.now + 100, self._fault_tick)

    def _repartition(self) -> None:
        ids = list(self.nodes)
        self.blocked = set()
        kind = self.rng.random()
        if kind < 0.3:
            return  # healed
        if kind < 0.7:
            # split into two sides
            side = set(self.rng.sample(ids, self.rng.randint(1, len(ids) // 2)))
            for a in ids:
                for b in ids:
                    if (a in side) != (b in side):
                        self.blocked.add((a, b))
        else:
            # cut random one-way links
            for a in ids:
                for b in ids:
                    if a != b and self.rng.random() < 0.2:
                        self.blocked.add((a, b))

    def _client_tick(self) -> None:
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.is_leader]
        for n in leaders:
            k = self.rng.randint(*self.cfg.records_per_append)
            recs = []
            if self.cfg.transactions and self.txn_rng.random() < self.cfg.transactions:
                # close the transaction the committed log is inside (a new leader closes one
                # its predecessor left open), or open one
                recs.append(TXN_END if n.sm.in_transaction else TXN_BEGIN)
            for _ in range(k):
                self.appended += 1
                recs.append(b"s%d-r%d" % (self.seed, self.appended))
            try:
                n.core.append(self.now, recs)
            except NotLeaderError:
                pass
            self._after(n)
        end = self.cfg.duration_ms + self.cfg.heal_ms
        if self.now < end:
            self.at(self.now + self.cfg.append_every_ms, self._client_tick)

    # ------------------------------------------------------------------ run
    def run(self) -> Cluster:
        cfg = self.cfg
        self.at(100, self._fault_tick)
        self.at(cfg.append_every_ms, self._client_tick)
        heal_at = cfg.duration_ms
        self.at(heal_at, self._heal)
        for op in self.changes:
            self.at(op.start_ms, functools.partial(self._change_step, op))
        end = cfg.duration_ms + cfg.heal_ms
        # after the faults and the healing time, run on (at most another heal_ms) until the
        # cluster has converged: one leader that has committed everything ever committed
        limit = end + cfg.heal_ms
        while self._q:
            t, _, fn = heapq.heappop(self._q)
            if t > end and (t > limit or self._converged()):
                break
            self.now = t
            fn()
            self.events += 1
            if cfg.check_every_event:
                self.inv.check()
        self.inv.check()
        self.inv.final_check()
        return self

    def _converged(self) -> bool:
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.is_leader]
        done = (
            len(leaders) == 1
            and leaders[0].core.high_watermark >= max(self.inv.max_committed, 1)
            and leaders[0].core.committed_offset >= self.inv.max_committed
        )
        if done and self.cfg.update_voter:
            done = not self.kafka.update_voter_pending(leaders[0])
        if done and self.changes:
            done = all(op.done for op in self.changes)
        if done and self.cfg.followers_converge:
            target = leaders[0].core.committed_offset
            done = all(n.core is None or n.core.committed_offset >= target
                       for n in self.nodes.values())  # fmt: skip
        return done

    def _heal(self) -> None:
        self.blocked = set()
        for n in self.nodes.values():
            if n.core is None:
                self._start(n)

    # ------------------------------------------------------------------ voter changes
    def _change_step(self, op: VoterChange) -> None:
        """Send ``op`` (again) to the node that leads with the highest epoch (now and then to
        any running node, which answers NOT_LEADER_OR_FOLLOWER), over a network that loses
        requests and answers; a lost answer is retried after 3 s, an error after 200-600 ms."""
        if op.done:
            return
        if op.kind == "wipe":
            op.done = True
            self._wipe(self.nodes[op.node])
            return
        up = [n for n in self.nodes.values() if n.core is not None]
        leaders = sorted((n for n in up if n.core.is_leader), key=lambda n: -n.core.epoch)
        if not up:
            self.at(self.now + 200, lambda: self._change_step(op))
            return
        target = leaders[0] if leaders and self.op_rng.random() < 0.9 else self.op_rng.choice(up)
        if op.kind == "remove_leader":
            if not target.core.is_leader:
                self.at(self.now + 200, lambda: self._change_step(op))
                return
            op.kind, op.node = "remove", target.node_id
        if op.directory_id is None:
            gens = self.dir_gens[op.node]
            op.directory_id = gens[-1] if op.gen is None else gens[op.gen]
        op.token += 1
        token = op.token
        host, port = self.voters.get(op.node, ("127.0.0.1", 9000 + op.node))
        if op.kind == "add":
            api, version = 80, 1
            req = _AddReq.AddRaftVoterRequest(
                cluster_id="sim-cluster", timeout_ms=30_000, voter_id=op.node,
                voter_directory_id=op.directory_id,
                listeners=(_AddReq.Listener(name="CONTROLLER", host=host, port=port),),
                ack_when_committed=True,
            )  # fmt: skip
        else:
            api, version = 81, 0
            req = _RemoveReq.RemoveRaftVoterRequest(
                cluster_id="sim-cluster", voter_id=op.node, voter_directory_id=op.directory_id
            )
        req = self._wire(codec.REQUESTS_BY_KEY[api], version, req)
        self.at(self.now + 3_000, lambda: self._change_lost(op, token))
        if self.op_rng.random() < self.cfg.drop:
            return
        dst, inc = target.node_id, target.incarnation
        delay = self.op_rng.randint(1, self.cfg.max_delay_ms)
        self.at(self.now + delay, lambda: self._change_arrives(op, token, dst, inc, api, version,
                                                               req))  # fmt: skip

    def _change_arrives(self, op, token, dst, inc, api, version, req) -> None:
        n = self.nodes[dst]
        if n.core is None or n.incarnation != inc:
            return  # the connection broke: the client's timeout retries

        def reply(resp: Any) -> None:
            resp = self._wire(codec.RESPONSES_BY_KEY[api], version, resp)
            if self.op_rng.random() < self.cfg.drop:
                return
            delay = self.op_rng.randint(1, self.cfg.max_delay_ms)
            self.at(self.now + delay, lambda: self._change_answered(op, token, n, resp))

        n.core.handle_request(self.now, api, version, req, reply)
        self._after(n)
        self.inv.check()

    def _change_answered(self, op: VoterChange, token: int, n: Node, resp: Any) -> None:
        if op.token != token or op.done:
            return
        code = resp.error_code
        op.answers.append((self.now, n.node_id, code))
        done = code == 0
        if code in (_E.DUPLICATE_VOTER, _E.VOTER_NOT_FOUND) and n.core is not None:
            member = n.core.voter_set.is_voter(op.node, op.directory_id)
            done = member if op.kind == "add" else not member
        if done:
            op.done = True
            return
        op.token += 1
        self.at(self.now + self.op_rng.randint(200, 600), lambda: self._change_step(op))

    def _change_lost(self, op: VoterChange, token: int) -> None:
        if op.token == token and not op.done:
            self._change_step(op)

    def _wipe(self, n: Node) -> None:
        """``n`` loses its disk and comes back formatted anew (see :class:`VoterChange`)."""
        if n.core is not None:
            n.core = None
            self.inv.on_crash(n)
        gen = len(self.dir_gens[n.node_id])
        self.wiped_epoch[n.node_id] = max(self.inv.leaders, default=0)
        new = uuid.UUID(int=random.Random(f"dir-{self.seed}-{n.node_id}-{gen}").getrandbits(128)
                        | (1 << 100))  # fmt: skip
        self.dirs[n.node_id] = new
        self.dir_gens[n.node_id].append(new)
        n.log = RecordingLog(f"node {n.node_id}")
        n.log.on_append = functools.partial(self.inv.on_voters_append, n)
        n.store = MemoryQuorumStateStore()
        self.at(self.now + self.rng.randint(*self.cfg.down_ms), lambda: self._restart(n))

    def final_voters(self) -> list[tuple[int, uuid.UUID]] | None:
        """The (id, directory id) pairs of the one leader's latest voter set, None without one
        leader."""
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.is_leader]
        if len(leaders) != 1:
            return None
        vs = leaders[0].core.voter_set
        return sorted((v, vs[v].directory_id) for v in vs)


class Invariants:
    """The checks of Kafka's RaftEventSimulationTest, run after every event."""

    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.leaders: dict[int, int] = {}  # epoch -> leader id
        self.hw: dict[tuple[int, int], int] = {}  # (node, incarnation) -> last high watermark
        self.committed: dict[int, bytes] = {}  # offset -> batch bytes (record by record)
        self.max_committed = 0  # max high watermark ever seen on any node
        self.leader_hw: dict[int, int] = {}  # epoch -> highest leader high watermark
        self.checked: dict[int, int] = {}  # node -> offset checked up to
        self.stable_checked: set = set()  # snapshot ids found outside any transaction
        self.committed_epochs: dict[int, int] = {}  # offset -> epoch of the committed entry
        # dynamic quorums (KIP-853)
        self.dynamic = False  # a VotersRecord was appended somewhere: the voter-set checks run
        self.voter_appends: list[VoterAppend] = []  # every leader's VotersRecord appends
        self._unrecorded: dict[int, list[tuple[VoterView, Sequence[Any]]]] = {}
        # (leader, incarnation, epoch) -> (replica id, directory id) -> highest valid fetch offset
        self.acks: dict[tuple[int, int, int], dict[tuple[int, uuid.UUID], int]] = {}
        self.hw_checked: dict[tuple[int, int, int], int] = {}  # leader term -> its HWM checked
        self.hw_voters: dict[tuple[int, int, int], list[tuple[int, uuid.UUID]]] = {}
        self.downloaded: set[tuple[int, int]] = set()  # (node, incarnation) that got a snapshot
        self.events_since_voter_check = 0

    def fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.c.seed} at {self.c.now} ms: {what}")

    def on_restart(self, n: Node) -> None:
        self.checked[n.node_id] = 0
        for before, batches in self._unrecorded.pop(n.node_id, ()):
            self._record_voters(n, before, batches)

    def on_crash(self, n: Node) -> None:
        self.checked[n.node_id] = 0

    def check(self) -> None:
        for n in self.c.nodes.values():
            core = n.core
            if core is None:
                continue
            self.check_single_leader(n)
            self.check_monotonic_hw(n)
            self.check_committed(n)
            self.check_log_start(n)
            self.check_state_machine(n)
            if self.c.cfg.transactions:
                self.check_snapshots_stable(n)
            if self.c.cfg.hw_majority:
                self.check_hw_majority(n)
        if self.dynamic:
            self.events_since_voter_check += 1
            if self.events_since_voter_check >= self.c.cfg.voter_check_every:
                self.check_voter_sets()
        self.c.kafka.check()

    # -------------------------------------------------------------- dynamic quorums (KIP-853)
    def on_voters_append(
        self, n: Node, log: Any, before: VoterView, batches: Sequence[Any]
    ) -> None:
        """A VotersRecord was appended to ``n``'s log (:class:`RecordingLog`): record it when the
        node leads (during a restart, once the core exists)."""
        self.dynamic = True
        if n.core is None:
            self._unrecorded.setdefault(n.node_id, []).append((before, batches))
            return
        self._record_voters(n, before, batches)

    def _record_voters(self, n: Node, before: VoterView, batches: Sequence[Any]) -> None:
        """At most one uncommitted voter change (:func:`check_one_voter_change`), checked at
        each leader append of a VotersRecord with the leader's high watermark then."""
        core = n.core
        if core is None or core.state != LEADER:
            return
        mine = [b for b in batches if b.epoch == core.epoch]
        appends = voter_appends(n.node_id, core.epoch, core.high_watermark, before, mine,
                                self.c.now)  # fmt: skip
        self.voter_appends += appends
        problems = check_one_voter_change(appends)
        if problems:
            self.fail(problems[0])

    def check_voter_sets(self) -> None:
        """The voter set at an offset is the same on every replica, crashed ones included
        (:func:`check_voter_sets_agree` over every node's log and snapshots)."""
        self.events_since_voter_check = 0
        views = [voter_view(n.log, f"node {n.node_id}") for n in self.c.nodes.values()]
        problems = check_voter_sets_agree(views)
        if problems:
            self.fail(problems[0])
        # and the set each running core works with is the newest one of its log
        for n, view in zip(self.c.nodes.values(), views, strict=True):
            latest = view.latest()
            if n.core is None or latest is None:
                continue
            if (
                SNAPSHOT_STALE in self.c.cfg.kafka_skip
                and (n.node_id, n.incarnation) in self.downloaded
            ):
                continue
            mine = voters_key(n.core.voter_set.to_record())
            if mine != latest[1]:
                self.fail(f"node {n.node_id} works with voters {sorted(voter_members(mine))}, "
                          f"its log's newest VotersRecord (offset {latest[0]}) says "
                          f"{sorted(voter_members(latest[1]))}")  # fmt: skip

    def voters_of(self, n: Node) -> list[tuple[int, uuid.UUID]]:
        """The voter set in force at the end of ``n``'s log (its newest VotersRecord; the static
        voters, with unknown directory ids, when it has none) as (id, directory id) pairs."""
        latest = latest_voters(n.log) if self.dynamic else None
        if latest is None:
            return [(i, _ZERO_DIR) for i in sorted(self.c.voters)]
        return sorted(voter_members(latest))

    def on_fetch(self, leader: Node, version: int, req: Any) -> None:
        """Before a node handles a Fetch: when it leads the request's epoch and the fetch
        position is valid in its log (Kafka ``ReplicatedLog.validateOffsetAndEpoch``), the
        replica (id, directory id) has acknowledged the offsets below its fetch offset."""
        core = leader.core
        if core is None or core.state != LEADER or len(req.topics) != 1:
            return
        parts = req.topics[0].partitions
        if len(parts) != 1 or parts[0].current_leader_epoch != core.epoch:
            return
        p = parts[0]
        if version >= 15:
            rid = req.replica_state.replica_id if req.replica_state is not None else -1
        else:
            rid = req.replica_id
        if rid < 0 or not fetch_position_valid(core.log, p.fetch_offset, p.last_fetched_epoch):
            return
        rdir = p.replica_directory_id if version >= 17 else _ZERO_DIR
        acks = self.acks.setdefault((leader.node_id, leader.incarnation, core.epoch), {})
        if p.fetch_offset > acks.get((rid, rdir), -1):
            acks[(rid, rdir)] = p.fetch_offset

    def check_hw_majority(self, n: Node) -> None:
        """A leader's high watermark is acknowledged by a majority of the voter set in force at
        its log end (a VotersRecord counts from its append: Kafka
        ``LeaderState.maybeUpdateHighWatermark`` over ``voterStates``): each time it rises to
        ``h``, more than half of those voters have a valid fetch offset of at least ``h`` in
        this epoch (the leader: its flushed log end), a voter's fetch counting only under its
        own directory id (an unknown one in the set matches any). The set of the last check
        is accepted too, for a change appended in the same event."""
        core = n.core
        hw = core.high_watermark
        if core.state != LEADER or hw < 0:
            return
        key = (n.node_id, n.incarnation, core.epoch)
        if self.hw_checked.get(key, -1) >= hw:
            return
        self.hw_checked[key] = hw
        now_set = self.voters_of(n)
        acks = self.acks.get(key, {})
        me, mydir = n.node_id, core.config.directory_id

        def position(vid: int, vdir: uuid.UUID) -> int:
            if vid == me and (vdir.int == 0 or vdir == mydir):
                return n.log.flushed_offset
            return max((o for (rid, rdir), o in acks.items()
                        if rid == vid and (vdir.int == 0 or rdir == vdir)), default=-1)  # fmt: skip

        def acked(members: list[tuple[int, uuid.UUID]]) -> list[int]:
            return [vid for vid, vdir in members if position(vid, vdir) >= hw]

        last = self.hw_voters.get(key, now_set)
        self.hw_voters[key] = now_set
        for members in (now_set, last):
            if len(acked(members)) * 2 > len(members):
                return
        self.fail(f"leader {me} of epoch {core.epoch}: high watermark {hw} acknowledged by "
                  f"{acked(now_set)} only, of the voters {[v for v, _ in now_set]} (fetch "
                  f"offsets {sorted(acks.items())})")  # fmt: skip

    def check_committed_on_majority(self, leader: Node) -> None:
        """Every committed entry is in the final logs (or, below a log start, the snapshot) of a
        majority of the final voter set, at the same offset with the same epoch."""
        members = self.voters_of(leader)
        holders, missing = [], {}
        for vid, vdir in members:
            n = self.c.nodes.get(vid)
            if n is None or (vdir.int and self.c.dirs[vid] != vdir):
                continue
            gap = self._first_lost(n)
            if gap is None:
                holders.append(vid)
            else:
                missing[vid] = gap
        if len(holders) * 2 <= len(members):
            self.fail(f"committed entries are in the logs of {holders} only, of the final "
                      f"voters {[v for v, _ in members]}; missing {missing}")  # fmt: skip

    def _first_lost(self, n: Node) -> str | None:
        """The first committed entry ``n``'s log and latest snapshot lack, None if none."""
        log = n.log
        start = log.start_offset
        ends = [o for o in self.committed if o >= start]
        if ends and max(ends) >= log.end_offset:
            return f"offset {max(ends)} past its log end {log.end_offset}"
        for b in log.batches(start, log.end_offset):
            for i, v in enumerate(b.records):
                off = b.base_offset + i
                want = self.committed.get(off)
                if want is None:
                    continue
                val = (b.keys[i] or b"") + b"|" + (v or b"") if b.is_control else (v or b"")
                if val != want or self.committed_epochs.get(off, b.epoch) != b.epoch:
                    return f"offset {off}: {val!r} epoch {b.epoch}"
        below = [
            o for o, v in self.committed.items() if o < start and not v.startswith(b"\x00\x00")
        ]
        if below:
            sid = log.latest_snapshot_id()
            r = None if sid is None else log.read_snapshot(sid)
            held = {} if r is None else _snapshot_data(r.read(0, r.size))
            for o in sorted(below):
                if held.get(o) != self.committed[o]:
                    return f"offset {o} below its log start {start}, not in snapshot {sid}"
        return None

    def check_response(self, src: int, resp: Any) -> None:
        """No response carries a partition-level INVALID_REQUEST (a Kafka node halts on one:
        ``KafkaRaftClient.maybeHandleCommonResponse``)."""
        bad = partition_invalid_requests(resp)
        if bad:
            self.fail(f"node {src} answered a partition-level INVALID_REQUEST: {resp}")

    def check_single_leader(self, n: Node) -> None:
        core = n.core
        if core.state == LEADER:
            prev = self.leaders.setdefault(core.epoch, n.node_id)
            if prev != n.node_id:
                self.fail(f"two leaders in epoch {core.epoch}: {prev} and {n.node_id}")

    def check_monotonic_hw(self, n: Node) -> None:
        """MonotonicHighWatermark: a known high watermark (a new leader has none until it
        commits in its epoch, -1) never goes back on a node, nor on the leaders in turn."""
        hw = n.core.high_watermark
        if hw < 0:
            return
        key = (n.node_id, n.incarnation)
        prev = self.hw.get(key, -1)
        if hw < prev:
            self.fail(f"node {n.node_id}: high watermark went back from {prev} to {hw}")
        self.hw[key] = hw
        if n.core.state == LEADER:
            e = n.core.epoch
            earlier = max((v for ep, v in self.leader_hw.items() if ep < e), default=-1)
            if hw < earlier:
                self.fail(f"leader {n.node_id} of epoch {e}: high watermark {hw} below an "
                          f"earlier epoch's leader's {earlier}")  # fmt: skip
            self.leader_hw[e] = max(self.leader_hw.get(e, -1), hw)

    def check_committed(self, n: Node) -> None:
        """ConsistentCommittedData: every record below a node's high watermark is the same on
        every node that has it."""
        hw = n.core.high_watermark
        if hw > self.max_committed:
            self.max_committed = hw
        start = max(self.checked.get(n.node_id, 0), n.log.start_offset)
        if hw <= start:
            return
        for b in n.log.batches(start, hw):
            for i, v in enumerate(b.records):
                off = b.base_offset + i
                if off < start or off >= hw:
                    continue
                val = (b.keys[i] or b"") + b"|" + (v or b"") if b.is_control else (v or b"")
                prev = self.committed.setdefault(off, val)
                if prev != val:
                    self.fail(f"node {n.node_id}: committed offset {off} is {val!r}, "
                              f"elsewhere {prev!r}")  # fmt: skip
                if self.committed_epochs.setdefault(off, b.epoch) != b.epoch:
                    self.fail(f"node {n.node_id}: committed offset {off} has epoch {b.epoch}, "
                              f"elsewhere {self.committed_epochs[off]}")  # fmt: skip
        self.checked[n.node_id] = hw

    def check_snapshots_stable(self, n: Node) -> None:
        """A snapshot is never taken inside a transaction (``SimConfig.transactions``; Kafka's
        controller snapshots at its last stable offset): the committed records below a
        snapshot id's offset do not end with an open :data:`TXN_BEGIN`."""
        for sid in n.log.snapshot_ids():
            if sid in self.stable_checked:
                continue
            inside = None
            for off in range(sid.offset - 1, -1, -1):
                v = self.committed.get(off)
                if v is None:
                    return  # not all known yet: checked again later
                if v.startswith(TXN_END):
                    inside = False
                elif v.startswith(TXN_BEGIN):
                    inside = True
                if inside is not None:
                    break
            if inside:
                self.fail(f"node {n.node_id}: snapshot {sid} inside the transaction begun "
                          f"at {off}")  # fmt: skip
            self.stable_checked.add(sid)

    def check_log_start(self, n: Node) -> None:
        """SnapshotAtLogStart: the log start offset is 0 or the id of a snapshot it has."""
        start = n.log.start_offset
        if start == 0:
            return
        ids = n.log.snapshot_ids()
        if not ids or ids[0].offset != start:
            self.fail(f"node {n.node_id}: log start offset {start} is not on a snapshot "
                      f"({ids})")  # fmt: skip

    def check_state_machine(self, n: Node) -> None:
        """What the state machine applied is committed data, in order."""
        applied = n.sm.applied
        if not applied:
            return
        # check only the tail (the rest was checked on earlier events)
        for off, val in applied[-8:]:
            prev = self.committed.get(off)
            if prev is not None and prev != val:
                self.fail(f"node {n.node_id}: state machine applied {val!r} at {off}, "
                          f"committed was {prev!r}")  # fmt: skip

    def final_check(self) -> None:
        """After healing: one leader, and no committed offset lost (CommittedDataNeverLost);
        the cluster made progress after the faults."""
        leaders = [n for n in self.c.nodes.values() if n.core is not None and n.core.is_leader]
        if len(leaders) != 1:
            self.fail(f"{len(leaders)} leaders after healing")
        leader = leaders[0]
        if leader.core.high_watermark < self.max_committed:
            self.fail(f"leader {leader.node_id} high watermark {leader.core.high_watermark} is "
                      f"below the committed offset {self.max_committed}")  # fmt: skip
        have = {o for o, _ in leader.sm.applied}
        missing = [
            o for o, v in self.committed.items()
            if not v.startswith(b"\x00\x00") and o < leader.core.committed_offset and o not in have
        ]  # fmt: skip
        if missing:
            self.fail(f"leader's state machine lacks committed offsets {missing[:5]}")
        if leader.core.committed_offset <= 0:
            self.fail("nothing was committed")
        self.check_committed_on_majority(leader)
        if self.dynamic:
            self.check_voter_sets()
            problems = check_one_voter_change(self.voter_appends)
            if problems:
                self.fail(problems[0])
        if self.c.cfg.update_voter and self.c.cfg.kafka_rules:
            pending = self.c.kafka.update_voter_pending(leader)
            if pending:
                self.fail(f"followers {pending} never had their UpdateRaftVoter acknowledged by "
                          f"leader {leader.node_id}")  # fmt: skip
        if self.c.cfg.followers_converge:
            for n in self.c.nodes.values():
                if n.core is not None and n.core.committed_offset < leader.core.committed_offset:
                    self.fail(f"node {n.node_id} stuck at offset {n.core.committed_offset}, the "
                              f"leader committed {leader.core.committed_offset}")  # fmt: skip


# ------------------------------------------------------------------------------ Kafka's rules

_E = ErrorCode
_MiB8 = 8 << 20
_VOTE, _BEGIN, _END, _FETCH, _SNAP = 52, 53, 54, 1, 59


def _leader_claim(api_key: int, msg: Any, response: bool) -> tuple[int, int, int] | None:
    """(error code, leader id, epoch) a Raft message states, None when it states none (a
    request other than Begin/EndQuorumEpoch, a top-level error, no partition)."""
    if response:
        if msg.error_code or api_key in (80, 81, 82):  # the voter changes name no partition
            return None
        if api_key == _FETCH:
            parts = msg.responses[0].partitions if msg.responses else ()
        else:
            parts = msg.topics[0].partitions if msg.topics else ()
        if not parts:
            return None
        p = parts[0]
        if api_key in (_FETCH, _SNAP):
            return p.error_code, p.current_leader.leader_id, p.current_leader.leader_epoch
        return p.error_code, p.leader_id, p.leader_epoch
    if api_key in (_BEGIN, _END) and msg.topics and msg.topics[0].partitions:
        p = msg.topics[0].partitions[0]
        return 0, p.leader_id, p.leader_epoch
    return None


class _NoRules:
    """:class:`KafkaRules` switched off (``SimConfig.kafka_rules=False``): every hook does
    nothing, so the base invariants can be tested alone."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *a, **k: None


@dataclass
class _LeaderTerm:
    """What :class:`KafkaRules` saw of one node's leadership of one epoch."""

    epoch: int
    start_ms: int
    check_deadline_ms: int
    fetched: set[int] = field(default_factory=set)
    last_fetch_ms: dict[int, int] = field(default_factory=dict)


class KafkaRules:
    """Apache Kafka 4.x's rules, checked on our cores as a Kafka voter beside them would see
    them (docs/mixed-quorum.md, 'The Raft rules we follow as Kafka 4.x does'). Each check names
    the Kafka class or method it reproduces; a breach raises through :meth:`Invariants.fail`."""

    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.prev: dict[int, tuple[str, int, int, int]] = {}
        self.terms: dict[int, _LeaderTerm] = {}  # node -> its current leadership

    def fail(self, what: str) -> None:
        self.c.inv.fail(what)

    def _voters(self, n: Node) -> Any:
        """The voter ids ``n`` works with: the static voters, or in a dynamic quorum its own
        latest voter set (Kafka applies a VotersRecord from its append)."""
        return n.core.voters if self.c.cfg.dynamic else self.c.voters

    def _leader_known(self, n: Node, leader: int) -> bool:
        """Whether a Kafka replica knows ``leader``'s endpoints (Kafka ``ProspectiveState``
        keeps the ones of the Follower state it came from): a static voter, or in a dynamic
        quorum any node whose address the core has."""
        if not self.c.cfg.dynamic:
            return leader in self.c.voters
        return n.core.address_of(leader) is not None

    @staticmethod
    def _snap(core: RaftCore) -> tuple[str, int, int, int]:
        return (core.state, core.epoch, core.leader_id, core.voted_id)

    # -------------------------------------------------------------- transitions (QuorumState)
    def on_start(self, n: Node) -> None:
        core = n.core
        self.prev[n.node_id] = self._snap(core)
        self.terms.pop(n.node_id, None)
        if core.state == LEADER:
            self._new_term(n)

    def _new_term(self, n: Node) -> None:
        core = n.core
        prev = self.c.inv.leaders.setdefault(core.epoch, n.node_id)
        if prev != n.node_id:
            self.fail(f"two leaders in epoch {core.epoch}: {prev} and {n.node_id}")
        f = core.config.fetch_timeout_ms
        self.terms[n.node_id] = _LeaderTerm(core.epoch, self.c.now, self.c.now + f * 3 // 2)

    def on_transition(self, n: Node, core: RaftCore) -> None:
        """Kafka ``QuorumState``'s legal transitions (it throws IllegalStateException on any
        other): Candidate only from a Prospective, at epoch + 1; Leader only from Candidate;
        Prospective from Unattached, Follower or Candidate at the same epoch (or a Prospective
        adding its vote); Unattached at the same epoch only from a Prospective (a lost
        pre-election without a known leader) or to add a vote; Follower at the same epoch only
        when no leader was known or from a Prospective back to its leader; Resigned only from
        Leader, and left only for a higher epoch; never a lower epoch."""
        old = self.prev.get(n.node_id)
        new = self._snap(core)
        self.prev[n.node_id] = new
        if new[0] == LEADER:
            self._new_term(n)
        elif self.terms.get(n.node_id) is not None and new[0] != LEADER:
            self.terms.pop(n.node_id, None)
        if old is None:
            return
        os_, oe, ol, ov = old
        ns, ne, nl, nv = new
        me = n.node_id
        why = None
        same = ne == oe
        if ne < oe:
            why = "the epoch went down"
        elif ns == CANDIDATE:
            if os_ != PROSPECTIVE or ne != oe + 1 or nv != me:
                why = "a Candidate only comes from a Prospective, at epoch + 1"
        elif ns == LEADER:
            if os_ != CANDIDATE or not same:
                why = "a Leader only comes from a Candidate of its epoch"
        elif ns == PROSPECTIVE:
            if os_ == PROSPECTIVE:
                if not (same and ov < 0 <= nv and nl == ol):
                    why = "a Prospective only changes by adding its vote"
            elif os_ not in (UNATTACHED, FOLLOWER, CANDIDATE) or not same:
                why = "a Prospective comes from Unattached, Follower or Candidate, same epoch"
            elif nl != ol or nv != ov:
                why = "a Prospective keeps the leader and vote it had"
        elif ns == RESIGNED:
            if os_ != LEADER or not same:
                why = "Resigned only comes from Leader"
        elif ns == UNATTACHED and same:
            if os_ == PROSPECTIVE:
                if (
                    ol >= 0
                    and self._leader_known(n, ol)
                    and not (PROSPECTIVE_LOSS in self.c.cfg.kafka_skip and ol not in n.core.voters)
                ):
                    why = "a lost pre-election with a known leader goes back to Follower"
                elif nv != ov:
                    why = "Unattached from Prospective keeps the vote"
            elif not (os_ == UNATTACHED and ov < 0 <= nv and nl == ol):
                why = "Unattached at the same epoch only from Prospective or to add a vote"
        elif ns == FOLLOWER:
            if nl < 0 or nl == me:
                why = f"following leader {nl}"
            elif same and not (
                (ol < 0 and os_ not in (LEADER, FOLLOWER, RESIGNED))
                or (os_ == PROSPECTIVE and nl == ol)
            ):
                why = "Follower in the same epoch only when no leader was known"
        if why is None and os_ == RESIGNED and same:
            why = "Resigned is left only for a higher epoch"
        if why is not None:
            self.fail(f"node {me}: transition {old} -> {new}: {why} (Kafka QuorumState)")

    # -------------------------------------------------------------- votes (canGrantVote)
    def expect_vote(self, core: RaftCore, version: int, req: Any) -> tuple:
        """Kafka ``handleVoteRequest`` on ``core``'s state before it: (top-level code, error
        code, granted, response epoch, response leader). A malformed request (Kafka answers
        partition-level INVALID_REQUEST, on which a Kafka sender halts) is answered at the top
        level here, as our core does."""
        p = req.topics[0].partitions[0]
        pre = version >= 2 and p.pre_vote
        cand, cepoch = p.replica_id, p.replica_epoch
        st, epoch, leader, voted = core.state, core.epoch, core.leader_id, core.voted_id
        vdir, fetched = core._voted_dir, core._fetched_from_leader
        illegal = p.last_offset_epoch > cepoch if pre else p.last_offset_epoch >= cepoch
        if p.last_offset < 0 or p.last_offset_epoch < 0 or illegal:
            return int(_E.INVALID_REQUEST), 0, False, epoch, leader
        if cepoch < epoch:
            return 0, int(_E.FENCED_LEADER_EPOCH), False, epoch, leader
        if cand < 0:
            return int(_E.INVALID_REQUEST), 0, False, epoch, leader
        if cepoch > epoch:
            st, epoch, leader, voted, vdir = UNATTACHED, cepoch, -1, -1, None
        me, mydir = core.node_id, core.config.directory_id
        if version >= 1 and req.voter_id >= 0 and (
            req.voter_id != me or (p.voter_directory_id.int and p.voter_directory_id != mydir)
        ):
            return 0, int(_E.INVALID_VOTER_KEY), False, epoch, leader
        up = (p.last_offset_epoch, p.last_offset) >= (
            core.log.last_fetched_epoch(), core.log.end_offset)  # fmt: skip
        cdir = p.replica_directory_id if version >= 1 and p.replica_directory_id.int else None
        if st == LEADER:
            g = False
        elif st in (CANDIDATE, RESIGNED):
            g = pre and up
        elif st == FOLLOWER:
            g = pre and up and not fetched
        elif pre:
            g = up
        elif voted >= 0:
            g = voted == cand and (vdir is None or vdir == cdir)
        elif leader >= 0:
            g = False
        else:
            g = up
        return 0, 0, g, epoch, leader

    def check_vote(self, n: Node, expected: tuple, req: Any, version: int, resp: Any) -> None:
        top, code, granted, epoch, leader = expected
        rp = req.topics[0].partitions[0]
        if UNFORMATTED_94 in self.c.cfg.kafka_skip and n.core.kraft_version == 0 and (
            resp.error_code == _E.INCONSISTENT_VOTER_SET
            or (resp.topics and resp.topics[0].partitions[0].error_code
                == _E.INCONSISTENT_VOTER_SET)
        ):  # fmt: skip
            return
        if top or resp.error_code:
            if resp.error_code != top:
                self.fail(f"node {n.node_id}: Vote from {rp.replica_id} answered top-level "
                          f"{resp.error_code}, expected {top}")  # fmt: skip
            return
        p = resp.topics[0].partitions[0]
        got = (p.error_code, p.vote_granted, p.leader_epoch, p.leader_id)
        if got != (code, granted, epoch, leader):
            self.fail(
                f"node {n.node_id} ({self.prev.get(n.node_id)}): Vote from {rp.replica_id} "
                f"(epoch {rp.replica_epoch}, pre-vote {version >= 2 and rp.pre_vote}, last "
                f"{rp.last_offset_epoch}/{rp.last_offset}) answered (code, granted, epoch, "
                f"leader) {got}, Kafka's handleVoteRequest: {(code, granted, epoch, leader)}"
            )
        pre = version >= 2 and rp.pre_vote
        if granted and not pre and n.core.voted_id != rp.replica_id:
            self.fail(f"node {n.node_id}: granted a vote it did not record")

    # -------------------------------------------------------------- what is sent
    def on_request_sent(self, src: Node, ob: Any) -> None:
        core = src.core
        req = ob.request
        mydir = core.config.directory_id
        if ob.api_key == _VOTE:
            p = req.topics[0].partitions[0]
            dest_node = core.voter_set.get(ob.destination)
            dest_dir = dest_node.directory_id if dest_node is not None else None
            if req.voter_id != ob.destination or (
                dest_dir is not None and p.voter_directory_id != dest_dir
            ):  # the destination's directory id in the sender's voter set (zero: unknown)
                self.fail(f"node {src.node_id}: Vote to {ob.destination} with VoterId "
                          f"{req.voter_id} / VoterDirectoryId {p.voter_directory_id}")  # fmt: skip
            if p.replica_directory_id != mydir:
                self.fail(f"node {src.node_id}: Vote without its directory id")
        elif ob.api_key == _FETCH:
            if req.topics[0].partitions[0].replica_directory_id != mydir:
                self.fail(f"node {src.node_id}: Fetch without its directory id")
        elif ob.api_key == _SNAP:
            if req.topics[0].partitions[0].replica_directory_id != mydir:
                self.fail(f"node {src.node_id}: FetchSnapshot without its directory id")
        elif ob.api_key == _BEGIN and core.state == LEADER:
            # Kafka LeaderState.needToSendBeginQuorumRequests
            term = self.terms.get(src.node_id)
            last = term.last_fetch_ms.get(ob.destination) if term is not None else None
            half = core.config.fetch_timeout_ms // 2
            if last is not None and self.c.now - last < half:
                self.fail(f"leader {src.node_id}: BeginQuorumEpoch to {ob.destination}, which "
                          f"fetched {self.c.now - last} ms ago (< {half})")  # fmt: skip
        claim = _leader_claim(ob.api_key, req, response=False)
        if claim is not None:
            self._claim_known(src.node_id, claim[1], claim[2], "request")

    def _claim_known(self, who: int, leader: int, epoch: int, what: str) -> None:
        """Never a leader inconsistent with the epoch: a message naming leader L of epoch E
        means L led E."""
        if leader < 0:
            return
        actual = self.c.inv.leaders.get(epoch)
        if actual != leader:
            self.fail(f"node {who}: a {what} names {leader} leader of epoch {epoch}, "
                      f"which {'nobody' if actual is None else actual} led")  # fmt: skip

    def on_request_received(self, dst: Node, src: int, api_key: int, version: int,
                            req: Any) -> None:  # fmt: skip
        """A Begin/EndQuorumEpoch that gets past the voter checks makes a Kafka receiver run
        ``maybeTransition``, which halts it on a leader claim inconsistent with its state; a
        non-empty LeaderEndpoints without its own listener name halts it later
        (``FollowerState.leaderNode``)."""
        if api_key not in (_BEGIN, _END):
            return
        core = dst.core
        if req.leader_endpoints:
            names = {e.name.upper() for e in req.leader_endpoints}
            if core.config.listener_name.upper() not in names:
                self.fail(f"node {src} sent {dst.node_id} LeaderEndpoints {sorted(names)} "
                          f"without its listener {core.config.listener_name}: a Kafka voter "
                          f"halts (FollowerState.leaderNode)")  # fmt: skip
        p = req.topics[0].partitions[0]
        if p.leader_epoch >= core.epoch and p.leader_id >= 0:
            self._consistent(dst, p.leader_id, p.leader_epoch, f"request {api_key} from {src}")

    def _consistent(self, n: Node, leader: int, epoch: int, what: str) -> None:
        core = n.core
        if leader >= 0 and leader == core.node_id:
            # a node formatted anew (a wipe) hears of the epochs its old disk led: a Kafka node
            # halts there too, so the scenario, not the core, is at fault
            ok = core.state == LEADER or epoch <= self.c.wiped_epoch.get(n.node_id, -1)
        else:
            ok = epoch != core.epoch or leader < 0 or core.leader_id < 0 or leader == core.leader_id
        if not ok:
            self.fail(f"node {n.node_id} ({core.state}, leader {core.leader_id}, epoch "
                      f"{core.epoch}): {what} names leader {leader} of epoch {epoch}: a Kafka "
                      f"node halts (KafkaRaftClient.hasConsistentLeader)")  # fmt: skip

    def _fetch_kind(self, core: RaftCore, version: int, req: Any) -> tuple[str, Any]:
        """Kafka's leader on a Fetch (``handleFetchRequest`` validation, then
        ``tryCompleteFetchRequest`` with ``ReplicatedLog.validateOffsetAndEpoch``): ('error',
        None), ('snapshot', latest snapshot id), ('diverging', (epoch, end offset)) or
        ('valid', None)."""
        t = req.topics[0]
        p = t.partitions[0]
        if (
            core.state != LEADER
            or core._shutdown_deadline is not None
            or req.max_wait_ms < 0
            or p.fetch_offset < 0
            or not 0 <= p.last_fetched_epoch <= p.current_leader_epoch
            or p.current_leader_epoch != core.epoch
        ):
            return "error", None
        log, offset, epoch = core.log, p.fetch_offset, p.last_fetched_epoch
        latest = log.latest_snapshot_id()
        if offset == 0 and latest is not None and (latest.offset, latest.epoch) != (0, 0):
            return "snapshot", latest
        earliest, start = log.earliest_snapshot_id(), log.start_offset
        if start == 0 and offset == 0:
            return "valid", None
        if earliest is not None and (
            offset < start or (offset == start and epoch != earliest.epoch)
            or epoch < earliest.epoch
        ):  # fmt: skip
            return "snapshot", latest
        e = log.end_offset_for_epoch(epoch)
        if e.epoch != epoch or e.offset < offset:
            return "diverging", (e.epoch, e.offset)
        return "valid", None

    def _count_fetch(self, leader: Node, src: int, api_key: int, rdir: Any = None) -> None:
        """A voter's valid Fetch or FetchSnapshot, in the order the leader handles them: check
        quorum (Kafka ``updateCheckQuorumForFollowingVoter``) and, for a Fetch, its last
        fetch time (``updateReplicaState``, BeginQuorumEpoch)."""
        core = leader.core
        term = self.terms.get(leader.node_id)
        voters = self._voters(leader)
        if core.state != LEADER or term is None or src not in voters:
            return
        if self.c.cfg.dynamic and not core.voter_set.is_voter(src, rdir):
            return  # a voter's id under another directory id is an observer
        term.fetched.add(src)
        if api_key == _FETCH:
            term.last_fetch_ms[src] = self.c.now
        # a majority, counting the leader while it is a voter (it may have removed itself)
        need = len(voters) // 2 + 1 - (leader.node_id in voters)
        if len(term.fetched) >= need:
            term.fetched = set()
            term.check_deadline_ms = self.c.now + core.config.fetch_timeout_ms * 3 // 2

    def on_fetch_arrival(self, leader: Node, src: int, api_key: int, version: int,
                         req: Any) -> Any:  # fmt: skip
        """Before the leader handles a Fetch or FetchSnapshot: what Kafka would make of it
        (counted at once when valid); the token :meth:`on_fetch_answered` checks the answer
        against."""
        core = leader.core
        if api_key == _FETCH:
            kind = self._fetch_kind(core, version, req)
        else:
            p = req.topics[0].partitions[0]
            sid = (p.snapshot_id.end_offset, p.snapshot_id.epoch)
            r = None if sid == (0, 0) else core.log.read_snapshot(
                OffsetAndEpoch(sid[0], sid[1]))  # fmt: skip
            ok = (core.state == LEADER and core._shutdown_deadline is None
                  and p.current_leader_epoch == core.epoch and r is not None
                  and 0 <= p.position < r.size)  # fmt: skip
            kind = ("valid", None) if ok else ("error", None)
        rdir = req.topics[0].partitions[0].replica_directory_id
        if kind[0] == "valid":
            self._count_fetch(leader, src, api_key, rdir)
        return (*kind, rdir)

    def on_fetch_answered(self, leader: Node, src: int, api_key: int, kind: Any, arriving: bool,
                          resp: Any) -> None:  # fmt: skip
        """The leader's answer to a Fetch: at arrival it must be what Kafka's validation says
        (a SnapshotId naming the latest snapshot, a DivergingEpoch from
        ``validateOffsetAndEpoch``, or records); a parked Fetch answered later counts again
        (Kafka's purgatory completion calls ``updateReplicaState``)."""
        if resp.error_code or api_key != _FETCH:
            return
        p = resp.responses[0].partitions[0]
        if arriving:
            k, v = kind[:2]
            if k == "valid" and (p.error_code or p.diverging_epoch.epoch >= 0
                                 or p.snapshot_id.epoch >= 0):  # fmt: skip
                self.fail(f"leader {leader.node_id}: a valid Fetch from {src} answered {p}")
            if k == "diverging" and (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) != v:
                self.fail(f"leader {leader.node_id}: Fetch from {src} answered DivergingEpoch "
                          f"{p.diverging_epoch}, Kafka's validateOffsetAndEpoch {v}")  # fmt: skip
            if k == "snapshot" and (p.snapshot_id.end_offset, p.snapshot_id.epoch) != (
                v.offset, v.epoch
            ):
                self.fail(f"leader {leader.node_id}: Fetch from {src} answered SnapshotId "
                          f"{p.snapshot_id}, the latest snapshot is {v}")  # fmt: skip
            return
        if not (p.error_code or p.diverging_epoch.epoch >= 0 or p.snapshot_id.epoch >= 0):
            self._count_fetch(leader, src, api_key, kind[2])

    def on_response_sent(self, src: Node, api_key: int, req: Any, resp: Any) -> None:
        """What a response may state (a partition-level INVALID_REQUEST is
        :meth:`Invariants.check_response`'s): a Fetch answer names the responder's leader and
        epoch (the CurrentLeader tag); a leader's Fetch answer starts at the batch holding the
        fetch offset and reads on to its log end, unless MaxBytes stops it (Kafka
        ``tryCompleteFetchRequest``)."""
        core = src.core
        claim = _leader_claim(api_key, resp, response=True)
        if claim is None:
            return
        code, leader, epoch = claim
        self._claim_known(src.node_id, leader, epoch, f"{api_key} answer")
        if api_key != _FETCH:
            return
        if (leader, epoch) != (core.leader_id, core.epoch):
            self.fail(f"node {src.node_id}: Fetch answer names leader {leader} epoch {epoch}, "
                      f"its state is {core.leader_id} / {core.epoch}")  # fmt: skip
        p = resp.responses[0].partitions[0]
        if core.state != LEADER or not p.records:
            return
        fp = req.topics[0].partitions[0]
        batches = decode_batches(p.records, allow_partial_tail=True)
        if not batches or not batches[0].base_offset <= fp.fetch_offset <= batches[0].last_offset:
            self.fail(f"leader {src.node_id}: Fetch at {fp.fetch_offset} answered from "
                      f"{batches[0].base_offset if batches else None}")  # fmt: skip
        end = batches[-1].last_offset + 1
        if end < core.log.end_offset:
            cap = min(req.max_bytes, _MiB8) if req.max_bytes > 0 else _MiB8
            nxt = len(core.log.read(end, 1))
            if len(p.records) + nxt <= cap:
                self.fail(f"leader {src.node_id}: Fetch at {fp.fetch_offset} answered up to "
                          f"{end}, its log ends at {core.log.end_offset} ({len(p.records)} "
                          f"bytes, MaxBytes {req.max_bytes})")  # fmt: skip

    def on_response_received(self, n: Node, src: int, api_key: int, resp: Any) -> None:
        """Kafka ``maybeHandleCommonResponse``: an answer with a higher epoch, or
        FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER, runs ``maybeTransition`` (which halts on
        an inconsistent leader); a DivergingEpoch below the follower's high watermark halts it
        (``handleFetchResponse``)."""
        core = n.core
        claim = _leader_claim(api_key, resp, response=True)
        if claim is None:
            return
        code, leader, epoch = claim
        if epoch > core.epoch or code in (_E.FENCED_LEADER_EPOCH, _E.NOT_LEADER_OR_FOLLOWER):
            if epoch >= core.epoch:
                self._consistent(n, leader, epoch, f"{api_key} answer from {src}")
            return
        if api_key == _FETCH and epoch == core.epoch and code == 0 and core.state == FOLLOWER:
            d = resp.responses[0].partitions[0].diverging_epoch
            if d.epoch >= 0 and core.leader_id == src:
                target = min(core.log.end_offset_for_epoch(d.epoch).offset, d.end_offset)
                if target < core.high_watermark:
                    self.fail(f"node {n.node_id}: DivergingEpoch {d} from {src} truncates to "
                              f"{target}, below its high watermark {core.high_watermark}: a "
                              f"Kafka follower halts")  # fmt: skip

    # -------------------------------------------------------------- UpdateRaftVoter
    def check_update_voter(self, src: Node, req: Any, resp: Any) -> None:
        """UpdateRaftVoter as Kafka 4.1+ voters send it: no INVALID_REQUEST (a Kafka voter halts);
        CurrentLeader is the responder's leader and epoch; the leader of the request's epoch
        answers UNSUPPORTED_VERSION (or NONE) with itself and its controller endpoint, which a
        Kafka follower needs to stop asking (``handleUpdateVoterResponse``)."""
        core = src.core
        cl = resp.current_leader
        if resp.error_code == _E.INVALID_REQUEST:
            self.fail(f"node {src.node_id}: UpdateRaftVoter answered INVALID_REQUEST")
        self._claim_known(src.node_id, cl.leader_id, cl.leader_epoch, "UpdateRaftVoter answer")
        if (cl.leader_id, cl.leader_epoch) != (core.leader_id, core.epoch):
            self.fail(f"node {src.node_id}: UpdateRaftVoter answer names leader {cl.leader_id} "
                      f"epoch {cl.leader_epoch}, its state is {core.leader_id} / "
                      f"{core.epoch}")  # fmt: skip
        if core.state == LEADER and req.current_leader_epoch == core.epoch:
            host, port = self.c.voters[src.node_id]
            ok = (0, _E.UNSUPPORTED_VERSION)
            if core.high_watermark < 0:
                ok += (_E.REQUEST_TIMED_OUT,)  # Kafka 4.1+ without a high watermark yet
            if resp.error_code not in ok or (cl.host, cl.port) != (host, port):
                self.fail(f"leader {src.node_id}: UpdateRaftVoter in its epoch answered "
                          f"{resp.error_code} naming {cl.host}:{cl.port}")  # fmt: skip

    def update_voter_pending(self, leader: Node) -> list[int]:
        """Running follower voters of ``leader`` whose UpdateRaftVoter it has not yet
        acknowledged in its epoch (a Kafka follower would go on asking)."""
        target = (leader.node_id, leader.core.epoch)
        return [n.node_id for n in self.c.nodes.values()
                if n.node_id in self.c.voters and n.core is not None
                and n.core.state == FOLLOWER and (n.core.leader_id, n.core.epoch) == target
                and self.c.uv_done.get(n.node_id) != target]  # fmt: skip

    # -------------------------------------------------------------- timers
    def check(self) -> None:
        """Check quorum (Kafka ``LeaderState.timeUntilCheckQuorumExpires``): a leader of
        several voters that heard no Fetch/FetchSnapshot from a majority (counting itself) for
        1.5 x fetch.timeout.ms resigns."""
        for nid, term in self.terms.items():
            core = self.c.nodes[nid].core
            if core is None or core.state != LEADER or core.epoch != term.epoch:
                continue
            voters = self._voters(self.c.nodes[nid])
            if len(voters) < 2 and nid in voters:
                # the only voter never resigns, and the timer starts over only once a majority
                # fetched after the set grew (Kafka ``timeUntilCheckQuorumExpires`` resets it to
                # forever)
                term.check_deadline_ms = 1 << 62
                continue
            removed = nid not in self._voters(self.c.nodes[nid])
            if removed and CHECK_QUORUM_REMOVED in self.c.cfg.kafka_skip:
                continue
            if self.c.now > term.check_deadline_ms and core._shutdown_deadline is None:
                self.fail(f"leader {nid} of epoch {term.epoch} still leads at {self.c.now} "
                          f"ms, past its check-quorum deadline {term.check_deadline_ms} "
                          "ms")  # fmt: skip


# ---------------------------------------------------------------------- voter sets (KIP-853)
# The checkers of dynamic quorums, from log contents: what each replica's log and snapshots say
# the voter set is at each offset (Kafka ``KRaftControlRecordStateMachine`` / ``VoterSetHistory``)
# must agree between replicas, and a leader appends a VotersRecord only once the previous one is
# committed (Kafka ``AddVoterHandler`` / ``RemoveVoterHandler`` / ``UpdateVoterHandler``: one
# change in flight). They are plain functions of logs and recorded appends, so that hand-made
# histories test them (tests/raft/test_simulation_membership.py).

#: Control record types (Kafka ``ControlRecordType``).
LEADER_CHANGE_TYPE, KRAFT_VERSION_TYPE, KRAFT_VOTERS_TYPE = 2, 5, 6

#: A VotersRecord's voters in a canonical, hashable form: sorted by id, each
#: ``(id, directory id, ((listener, host, port), ...) sorted by listener, (kraft min, kraft max))``.
VotersKey = tuple[tuple[int, uuid.UUID, tuple[tuple[str, str, int], ...], tuple[int, int]], ...]


def voters_key(rec: Any) -> VotersKey:
    """The canonical form (:data:`VotersKey`) of a decoded ``VotersRecord``."""
    return tuple(sorted(
        (v.voter_id, v.voter_directory_id,
         tuple(sorted((e.name, e.host, e.port) for e in v.endpoints)),
         (v.kraft_version_feature.min_supported_version,
          v.kraft_version_feature.max_supported_version))
        for v in rec.voters
    ))  # fmt: skip


def voter_members(key: VotersKey | None) -> frozenset[tuple[int, uuid.UUID]]:
    """The (id, directory id) pairs of a voter set (empty for None)."""
    return frozenset((v[0], v[1]) for v in key or ())


def is_voter_in(key: VotersKey, node_id: int, directory_id: uuid.UUID) -> bool:
    """Kafka ``VoterSet.VoterNode.isVoter``: the ids are equal and the stored directory id is
    unknown (zero) or equal."""
    return any(v[0] == node_id and (v[1].int == 0 or v[1] == directory_id) for v in key)


def control_records(batch: Any) -> list[tuple[int, int, bytes]]:
    """``(offset, control type, body)`` of each record of a control batch (``[]`` for a data
    batch); the key is Kafka's int16 version (0) + int16 type."""
    if not batch.is_control:
        return []
    return [(batch.base_offset + i, control_type(k), v or b"")
            for i, (k, v) in enumerate(zip(batch.keys, batch.records, strict=True))]  # fmt: skip


def _kraft_entries(batch: Any) -> tuple[list[tuple[int, VotersKey]], list[tuple[int, int]]]:
    """The VotersRecords and KRaftVersionRecords of a batch, at their offsets."""
    voters, kraft = [], []
    for off, t, body in control_records(batch):
        if t == KRAFT_VOTERS_TYPE:
            voters.append((off, voters_key(codec.decode("VotersRecord", 0, body))))
        elif t == KRAFT_VERSION_TYPE:
            kraft.append((off, codec.decode("KRaftVersionRecord", 0, body).kraft_version))
    return voters, kraft


def has_voters_record(batch: Any) -> bool:
    """Whether a batch holds a VotersRecord (by the keys only: no body is decoded)."""
    return batch.is_control and any(k is not None and len(k) >= 4 and k[2:4] == b"\x00\x06"
                                    for k in batch.keys)  # fmt: skip


@functools.lru_cache(maxsize=1024)
def _snapshot_entries(data: bytes) -> tuple[VotersKey | None, int | None]:
    """The last VotersRecord and KRaftVersionRecord of a snapshot's bytes (None: none)."""
    voters: VotersKey | None = None
    kraft: int | None = None
    for b in decode_batches(data):
        vs, ks = _kraft_entries(b)
        if vs:
            voters = vs[-1][1]
        if ks:
            kraft = ks[-1][1]
    return voters, kraft


@dataclass
class VoterView:
    """What one replica's log and snapshots say of the voter set and kraft.version at each
    offset, as Kafka's ``KRaftControlRecordStateMachine`` registers them: a log record at its
    own offset, a snapshot's records at its last contained offset (snapshot id offset - 1, so
    the bootstrap checkpoint 0-0 at -1). ``voters`` / ``kraft`` map offset -> value; ``low`` is
    the lowest offset the view is complete from (the log start - 1 when the log starts on a
    snapshot, else the log start); ``end`` the log end offset; ``problems`` the replica's
    disagreements with itself (two sources at one offset, or a snapshot whose voter set is not
    its log's at the snapshot's last contained offset)."""

    name: str
    log: Any
    voters: dict[int, VotersKey] = field(default_factory=dict)
    kraft: dict[int, int] = field(default_factory=dict)
    snapshot_epochs: dict[int, int] = field(default_factory=dict)  # last contained offset -> epoch
    low: int = 0
    end: int = 0
    problems: list[str] = field(default_factory=list)

    @staticmethod
    def _floor(entries: dict[int, Any], offset: int) -> tuple[int, Any] | None:
        best = None
        for o in entries:
            if o <= offset and (best is None or o > best):
                best = o
        return None if best is None else (best, entries[best])

    def voters_at(self, offset: int) -> VotersKey | None:
        """The voter set in force at ``offset`` (Kafka ``voterSetAtOffset``), None if no
        VotersRecord is at or below it."""
        f = self._floor(self.voters, offset)
        return None if f is None else f[1]

    def kraft_at(self, offset: int) -> int | None:
        """The kraft.version in force at ``offset`` (Kafka ``kraftVersionAtOffset``), None if no
        KRaftVersionRecord is at or below it."""
        f = self._floor(self.kraft, offset)
        return None if f is None else f[1]

    def latest(self) -> tuple[int, VotersKey] | None:
        """The newest VotersRecord ``(offset, voters)`` (Kafka ``lastVoterSet``), None if none."""
        return self._floor(self.voters, 1 << 62)

    def epoch_at(self, offset: int) -> int | None:
        """The epoch of the entry at ``offset`` as this replica holds it (in its log, or as the
        last contained offset of one of its snapshots), None if it holds none."""
        log = self.log
        if log.start_offset <= offset < log.end_offset:
            for b in log.batches(offset, offset + 1):
                return b.epoch
        return self.snapshot_epochs.get(offset)


_ZERO_DIR = uuid.UUID(int=0)


def latest_voters(log: Any) -> VotersKey | None:
    """The newest voter set of a log (Kafka ``lastVoterSet``): its last VotersRecord, else its
    newest snapshot's; None when it has neither."""
    for b in reversed(list(log.batches(log.start_offset, log.end_offset))):
        if has_voters_record(b):
            return _kraft_entries(b)[0][-1][1]
    for sid in reversed(log.snapshot_ids()):
        r = log.read_snapshot(sid)
        vs = None if r is None else _snapshot_entries(r.read(0, r.size))[0]
        if vs is not None:
            return vs
    return None


def fetch_position_valid(log: Any, offset: int, epoch: int) -> bool:
    """Whether a leader counts a Fetch at ``(offset, last fetched epoch)`` as its replica's
    position: Kafka ``ReplicatedLog.validateOffsetAndEpoch`` answers neither a snapshot id nor a
    diverging epoch."""
    latest = log.latest_snapshot_id()
    if offset == 0 and latest is not None and (latest.offset, latest.epoch) != (0, 0):
        return False
    earliest, start = log.earliest_snapshot_id(), log.start_offset
    if start == 0 and offset == 0:
        return True
    if earliest is not None and (
        offset < start or (offset == start and epoch != earliest.epoch) or epoch < earliest.epoch
    ):
        return False
    e = log.end_offset_for_epoch(epoch)
    return e.epoch == epoch and e.offset >= offset


@functools.lru_cache(maxsize=256)
def _snapshot_data(data: bytes) -> dict[int, bytes]:
    """The data records of a snapshot :class:`RecordingStateMachine` wrote, offset -> value."""
    out = {}
    for b in decode_batches(data):
        if not b.is_control:
            for v in b.records:
                off, _, val = (v or b"").partition(b"=")
                out[int(off)] = val
    return out


def voter_view(log: Any, name: str = "") -> VoterView:
    """Read a replica's voter-set history from its log (every batch, committed or not) and its
    frozen snapshots; see :class:`VoterView`."""
    view = VoterView(name=name, log=log, end=log.end_offset)
    start = log.start_offset
    snap: dict[int, tuple[VotersKey | None, int | None, Any]] = {}
    for sid in log.snapshot_ids():
        r = log.read_snapshot(sid)
        if r is None:
            continue
        vs, k = _snapshot_entries(r.read(0, r.size))
        snap[sid.offset - 1] = (vs, k, sid)
        view.snapshot_epochs[sid.offset - 1] = sid.epoch
    view.low = start - 1 if (start - 1) in snap else start
    logged_v: dict[int, VotersKey] = {}
    logged_k: dict[int, int] = {}
    for b in log.batches(start, log.end_offset):
        if b.is_control:
            vs, ks = _kraft_entries(b)
            logged_v.update(vs)
            logged_k.update(ks)
    view.voters.update(logged_v)
    view.kraft.update(logged_k)
    for at, (vs, k, sid) in sorted(snap.items()):
        if vs is not None:
            if at in logged_v and logged_v[at] != vs:
                view.problems.append(f"{name}: snapshot {sid} holds voters {vs}, its log's "
                                     f"VotersRecord at {at} is {logged_v[at]}")  # fmt: skip
            view.voters.setdefault(at, vs)
        if k is not None:
            view.kraft.setdefault(at, k)
    # a snapshot's voter set is its log's at the snapshot's last contained offset, when the log
    # holds that offset: the latest log VotersRecord in [start, at], else the set the log starts
    # with (the snapshot at the log start, or the bootstrap checkpoint)
    base = snap.get(start - 1)
    for at, (vs, _k, sid) in sorted(snap.items()):
        if vs is None or not start <= at < log.end_offset:
            continue
        inside = [o for o in logged_v if start <= o <= at]
        expect = logged_v[max(inside)] if inside else (base[0] if base is not None else None)
        if expect is not None and expect != vs:
            view.problems.append(f"{name}: snapshot {sid} holds voters {vs}, its log says "
                                 f"{expect} at offset {at}")  # fmt: skip
    return view


def check_voter_sets_agree(views: Sequence[VoterView]) -> list[str]:
    """The voter set at an offset is the same on every replica: for every two replicas and every
    offset both hold with the same epoch (so, by Raft's log matching, the same history up to
    it), the latest VotersRecord at or below it is identical, and so is the kraft.version.
    Offsets where either replica knows no VotersRecord at or below are skipped (an observer
    formatted without the bootstrap checkpoint knows none until it has replicated one). Returns
    the problems (each replica's own first), empty when all agree."""
    problems = [p for v in views for p in v.problems]
    for i, a in enumerate(views):
        for b in views[i + 1 :]:
            lo = max(a.low, b.low)
            hi = min(a.end, b.end)
            points = {o for o in (*a.voters, *b.voters, *a.kraft, *b.kraft) if lo <= o < hi}
            if lo < hi:
                points.add(lo)
            for o in sorted(points):
                ea = a.epoch_at(o)
                if ea is None or ea != b.epoch_at(o):
                    continue
                va, vb = a.voters_at(o), b.voters_at(o)
                if va is not None and vb is not None and va != vb:
                    problems.append(f"offset {o} (epoch {ea}): {a.name} has voters {va}, "
                                    f"{b.name} has {vb}")  # fmt: skip
                    break
                ka, kb = a.kraft_at(o), b.kraft_at(o)
                if ka is not None and kb is not None and ka != kb:
                    problems.append(f"offset {o} (epoch {ea}): {a.name} has kraft.version {ka}, "
                                    f"{b.name} has {kb}")  # fmt: skip
                    break
    return problems


@dataclass(frozen=True)
class VoterAppend:
    """A leader's append of a VotersRecord, as recorded at the append: its ``offset``, the
    leader's ``hwm`` then (-1: none yet), the previous VotersRecord of its log or snapshots
    (``prev_offset`` None: there was none; ``prev_committed``: it came from a snapshot or the
    bootstrap checkpoint, which hold only committed data), both voter sets, and whether the
    record is in the batch that opens the epoch (with the LeaderChange: Kafka
    ``LeaderState.appendStartOfEpochControlRecords``)."""

    node: int
    epoch: int
    offset: int
    hwm: int
    prev_offset: int | None
    prev_committed: bool
    prev: VotersKey | None
    voters: VotersKey
    start_of_epoch: bool
    time_ms: int = 0


def voter_appends(node: int, epoch: int, hwm: int, before: VoterView, batches: Sequence[Any],
                  time_ms: int = 0) -> list[VoterAppend]:  # fmt: skip
    """The :class:`VoterAppend` of each VotersRecord in ``batches``, which a leader of ``epoch``
    with high watermark ``hwm`` appends to the log ``before`` describes (its view read just
    before the append)."""
    out = []
    latest = before.latest()
    snapshot_offsets = set(before.snapshot_epochs)
    prev_off = None if latest is None else latest[0]
    prev = None if latest is None else latest[1]
    # a snapshot holds committed data only: the set in force at its last contained offset is
    prev_snap = prev_off is not None and prev_off in snapshot_offsets
    for b in batches:
        recs = control_records(b)
        leader_change = any(t == LEADER_CHANGE_TYPE for _, t, _ in recs)
        for off, vs in _kraft_entries(b)[0]:
            out.append(VoterAppend(node, epoch, off, hwm, prev_off, prev_snap, prev, vs,
                                   leader_change, time_ms))  # fmt: skip
            prev_off, prev, prev_snap = off, vs, False
    return out


def check_one_voter_change(appends: Sequence[VoterAppend]) -> list[str]:
    """At most one uncommitted voter change at a time (Kafka's add/remove/update handlers answer
    REQUEST_TIMED_OUT while an operation is pending or the newest VotersRecord is not below the
    high watermark): a leader appends a VotersRecord only when the previous one is committed
    (below its high watermark, or in a snapshot or the bootstrap checkpoint). The one exception
    is the start-of-epoch restatement, which a new leader appends before it has a high
    watermark; it may only restate the membership ((id, directory id) pairs) it found. Returns
    the problems."""
    problems = []
    for a in appends:
        if a.prev_offset is None or a.prev_committed or a.prev_offset < a.hwm:
            continue
        if a.start_of_epoch and voter_members(a.voters) == voter_members(a.prev):
            continue
        problems.append(
            f"leader {a.node} of epoch {a.epoch} at {a.time_ms} ms appended a VotersRecord at "
            f"{a.offset} ({sorted(voter_members(a.voters))}) while the one at {a.prev_offset} "
            f"({sorted(voter_members(a.prev))}) was uncommitted (high watermark {a.hwm})"
        )
    return problems


class RecordingLog(MemoryLog):
    """A :class:`MemoryLog` that shows every append holding a VotersRecord to ``on_append(log,
    before, batches)`` once appended, with ``before`` the log's :func:`voter_view` just before
    (the simulator records leaders' voter changes with it)."""

    def __init__(self, name: str = "") -> None:
        super().__init__()
        self.name = name
        self.on_append: Callable[[RecordingLog, VoterView, Sequence[Any]], None] | None = None

    def append(self, batches: Sequence[Any]) -> None:
        hook = self.on_append
        if hook is None or not any(has_voters_record(b) for b in batches):
            super().append(batches)
            return
        before = voter_view(self, self.name)
        super().append(batches)
        hook(self, before, batches)


def run_seed(seed: int, **kw: Any) -> Cluster:
    return Cluster(seed, SimConfig(**kw)).run()


__all__ = [
    "Cluster", "InvariantViolation", "Invariants", "KafkaRules", "OffsetAndEpoch", "SimConfig",
    "run_seed",
]  # fmt: skip
