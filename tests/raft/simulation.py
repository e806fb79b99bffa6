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
plus our ``CommittedDataNeverLost``, checked at the end after the network heals). A checker
raises :class:`InvariantViolation` naming the seed.
"""

from __future__ import annotations

import functools
import heapq
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka_rpc.protocol import codec
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.core import LEADER, NotLeaderError, RaftConfig, RaftCore
from kafka_rpc.raft.memory import MemoryLog, MemoryQuorumStateStore
from kafka_rpc.raft.wire import for_version
from tests.raft.conftest import partition_invalid_requests

#: Versions two of our nodes negotiate (the newest of each spec).
VERSIONS = {52: 3, 53: 2, 54: 2, 1: 18, 59: 1, 55: 2}


class InvariantViolation(AssertionError):
    pass


class RecordingStateMachine:
    """Keeps every committed data record as ``(offset, value)``; snapshots carry the offsets
    (``b"<offset>=<value>"``) so a node that loaded one can still be compared offset by offset."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, bytes]] = []
        self.leader: tuple[int, int] = (-1, 0)
        self.loads = 0

    def handle_commit(self, batches: Sequence[Any]) -> None:
        for b in batches:
            if b.is_control:
                continue
            for i, v in enumerate(b.records):
                self.applied.append((b.base_offset + i, v))

    def handle_load_snapshot(self, reader: Any) -> None:
        self.loads += 1
        self.applied = []
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
            self.nodes[i] = Node(i, MemoryLog(), MemoryQuorumStateStore())
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
        self.appended = 0
        self.events = 0
        for n in self.nodes.values():
            self._start(n)

    # ------------------------------------------------------------------ scheduling
    def at(self, t: int, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._q, (t, self._seq, fn))

    def _raft_config(self, node_id: int) -> RaftConfig:
        c = self.cfg
        return RaftConfig(
            node_id=node_id,
            voters=self.voters,
            cluster_id="sim-cluster",
            snapshot_min_records=c.snapshot_min_records,
            snapshot_interval_ms=0,
            max_retention_bytes=c.retention_bytes,
            retention_check_interval_ms=c.retention_check_ms,
            max_replication_lag_ms=c.replication_lag_ms,
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

    def _send_request(self, src: int, ob: Any) -> None:
        if not self._deliverable(src, ob.destination):
            return  # a partition: silence, the sender times out
        if self.rng.random() < self.cfg.drop:
            self._reset(src, ob)
            return
        version = VERSIONS[ob.api_key]
        req = for_version(ob.api_key, version, ob.request)
        req = self._wire(codec.REQUESTS_BY_KEY[ob.api_key], version, req)
        copies = 2 if self.rng.random() < self.cfg.duplicate else 1
        for _ in range(copies):
            delay = self.rng.randint(1, self.cfg.max_delay_ms)
            self.at(self.now + delay, lambda r=req: self._recv_request(src, ob, version, r))

    def _recv_request(self, src: int, ob: Any, version: int, req: Any) -> None:
        dst = self.nodes[ob.destination]
        if dst.core is None or not self._deliverable(src, ob.destination):
            return
        src_inc = self.nodes[src].incarnation

        def reply(resp: Any) -> None:
            self._send_response(ob.destination, src, src_inc, ob, version, resp)

        dst.core.handle_request(self.now, ob.api_key, version, req, reply)
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

    def _send_response(self, src, dst, dst_inc, ob, version, resp) -> None:
        self.inv.check_response(src, resp)
        if not self._deliverable(src, dst):
            return
        if self.rng.random() < self.cfg.drop:
            self._reset(dst, ob)
            return
        resp = self._wire(codec.RESPONSES_BY_KEY[ob.api_key], version, resp)
        delay = self.rng.randint(1, self.cfg.max_delay_ms)
        self.at(self.now + delay, lambda: self._recv_response(src, dst, dst_inc, ob, resp))

    def _recv_response(self, src, dst, dst_inc, ob, resp) -> None:
        n = self.nodes[dst]
        if n.core is None or n.incarnation != dst_inc or not self._deliverable(src, dst):
            return
        n.core.handle_response(self.now, src, ob.correlation, resp)
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
        return (
            len(leaders) == 1
            and leaders[0].core.high_watermark >= max(self.inv.max_committed, 1)
            and leaders[0].core.committed_offset >= self.inv.max_committed
        )

    def _heal(self) -> None:
        self.blocked = set()
        for n in self.nodes.values():
            if n.core is None:
                self._start(n)


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

    def fail(self, what: str) -> None:
        raise InvariantViolation(f"seed {self.c.seed} at {self.c.now} ms: {what}")

    def on_restart(self, n: Node) -> None:
        self.checked[n.node_id] = 0

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
        self.checked[n.node_id] = hw

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


def run_seed(seed: int, **kw: Any) -> Cluster:
    return Cluster(seed, SimConfig(**kw)).run()


__all__ = ["Cluster", "InvariantViolation", "Invariants", "OffsetAndEpoch", "SimConfig", "run_seed"]
