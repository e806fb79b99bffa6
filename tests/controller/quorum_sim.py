"""A 3-voter metadata quorum in the seeded Raft simulator, every node's state machine a real
:class:`~kafka_rpc.controller.quorum_controller.QuorumController`, driven by a script of controller
commands and faults, with checks that every node's image is the replay of the committed log.

* :class:`ControllerCluster` is ``tests/raft/simulation.Cluster`` (real RaftCores on MemoryLogs,
  seeded message delays, drops and duplicates, fsync latency) with a QuorumController per node
  (clock = the simulated clock, ``tick()`` every ``TICK_MS``), no random client appends and no
  random faults: the script's faults only (:class:`IsolateLeader`, :class:`IsolateFollower`,
  :class:`RestartFollower`, :class:`CrashLeader`). Commands go to a node whose controller is
  active (any node answers NOT_CONTROLLER when none is) as asyncio tasks on the running loop, as
  the server's handlers call the controller; the simulator yields to the loop whenever a task may
  have progressed. A NOT_CONTROLLER answer is retried after ``RETRY_BACKOFF_MS`` (at most
  ``MAX_RETRIES`` times).
* :class:`Ledger` keeps every committed offset of the metadata log (as the Raft invariants see
  it, whichever node had it below its high watermark) with the image that replaying the log up to
  and including that offset gives (``replay`` from the empty image, each record at its offset and
  its batch's epoch).
* :class:`ControllerInvariants` adds, after every simulator event, to the Raft invariants of
  ``simulation.Invariants``: each node's committed image equals the ledger's image at that node's
  committed offset (so followers, a restarted node and a node that loaded a snapshot are compared
  offset by offset), and every speculative image of an active controller is recorded, to be
  compared with the ledger once its last record is committed.
* :func:`check_final` (after :meth:`ControllerCluster.run_script` has converged) compares the
  leader's image, each follower's, the replay of the whole log, a snapshot of the image at a few
  mid offsets loaded and the tail replayed, and every snapshot the cores wrote loaded into a fresh
  controller plus the tail; and checks every successful answer against the committed log (answers
  are also checked the moment they arrive: their records must be committed by then).

Times are simulated ms. Any failure raises :class:`~tests.raft.simulation.InvariantViolation`
naming the seed and the simulated time.
"""

from __future__ import annotations

import asyncio
import heapq
import random
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from pyrsistent import PMap

from kafka_rpc.controller import snapshot
from kafka_rpc.controller.image import EMPTY, MetadataImage
from kafka_rpc.controller.quorum_controller import QuorumController
from kafka_rpc.controller.replay import ReplayError, replay
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.controller.harness import broker_features
from tests.raft.simulation import Cluster, Invariants, SimConfig

R = codec.message_class
BR = codec.module("BrokerRegistrationRequest")
CT = codec.module("CreateTopicsRequest")
DT = codec.module("DeleteTopicsRequest")
CLUSTER = "test-cluster-id"
TICK_MS = 50
#: a command answered NOT_CONTROLLER is sent again (re-resolved against the then active
#: controller) after this backoff, at most MAX_RETRIES times, as a broker's controller channel
#: retries (Kafka's ``NodeToControllerChannelManager``)
RETRY_BACKOFF_MS = 200
MAX_RETRIES = 20
NOT_CONTROLLER = ErrorCode.NOT_CONTROLLER
ZERO_ID = uuid.UUID(int=0)
UNKNOWN_ID = uuid.UUID("5ca1ab1e-0000-4000-8000-00000000dead")


# ================================================================== the script
@dataclass(frozen=True)
class Register:
    """BrokerRegistration of ``broker`` with incarnation number ``incarnation`` (the same number is
    the same incarnation); ``cluster_ok`` False sends another cluster id; ``mv_ok`` False claims a
    ``metadata.version`` range that excludes the finalized level."""

    broker: int
    incarnation: int = 0
    cluster_ok: bool = True
    mv_ok: bool = True


@dataclass(frozen=True)
class Heartbeat:
    """BrokerHeartbeat; ``epoch`` "current" / "stale" (current - 1) / "unknown" (current + 1000),
    resolved on the target controller's uncommitted image; ``caught_up`` reports the target's
    committed offset, else the broker epoch - 1."""

    broker: int
    epoch: str = "current"
    caught_up: bool = True
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass(frozen=True)
class TopicSpec:
    """One CreatableTopic; ``assignment`` (replica lists of partitions 0..) makes it manual."""

    name: str
    partitions: int = 1
    rf: int = 1
    configs: tuple[tuple[str, str | None], ...] = ()
    assignment: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Create:
    topics: tuple[TopicSpec, ...]
    validate_only: bool = False


@dataclass(frozen=True)
class Delete:
    """DeleteTopics v6 entries: ``("name", n)``; ``("id", n)`` the id topic ``n`` has on the
    target (an unknown id if none); ``("old_id", n)`` an id ``n`` had before (unknown if none);
    ``("unknown_id", "")``."""

    refs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Allocate:
    broker: int
    epoch: str = "current"


@dataclass(frozen=True)
class Wait:
    """Let ``ms`` pass (the controllers' timers run: sessions expire, NoOps are written)."""

    ms: int


@dataclass(frozen=True)
class IsolateLeader:
    """Cut the Raft leader off from both other voters for ``ms``: it keeps taking writes it can
    never commit; the others elect a new leader; on healing its uncommitted tail is truncated."""

    ms: int


@dataclass(frozen=True)
class IsolateFollower:
    """Cut one follower (the lowest id that is not the leader) off for ``ms``; with a small
    snapshot trigger and retention the leader's log start passes it and it needs FetchSnapshot."""

    ms: int


@dataclass(frozen=True)
class RestartFollower:
    """Crash a follower whose controller is not active (unflushed writes lost) and restart it
    after ``down_ms``: a new controller that loads the latest snapshot, then the log. Skipped
    while a node is down."""

    down_ms: int


@dataclass(frozen=True)
class CrashLeader:
    """Crash the Raft leader (unflushed writes lost; the requests waiting on its controller get
    no answer, as over a broken connection) and restart it after ``down_ms``. Skipped while a
    node is down or there is no leader."""

    down_ms: int


@dataclass(frozen=True)
class CreateChunk:
    """CreateChunks for one partition, offsets as the partition leader fills them in."""

    topic: str
    partition: int
    brokers: tuple[int, ...]
    start: int
    prev_stop: int


@dataclass(frozen=True)
class AlterChunk:
    """AlterChunkAssignments for the chunk at ``start`` (no epoch check); () removes it."""

    topic: str
    partition: int
    start: int
    brokers: tuple[int, ...]


@dataclass(frozen=True)
class Assign:
    """AssignPartitionToBatchCoordinator (KIP-1164) of one partition of topic ``topic`` (its
    current id; an unknown name sends an unknown id) to coordinator partition ``coordinator``."""

    topic: str
    partition: int
    coordinator: int


COMMANDS = (Register, Heartbeat, Create, Delete, Allocate, CreateChunk, AlterChunk, Assign)


@dataclass
class Answer:
    """Attempt ``attempt`` (0 = first) of a command, sent to ``node``'s controller at
    ``sent_ms``; ``response`` once answered."""

    op: Any
    request: Any
    node: int
    sent_ms: int
    task: asyncio.Task
    attempt: int = 0
    response: Any = None
    answered_ms: int = -1


# ================================================================== ledger
class Ledger:
    """Every committed offset: ``entries[offset] = (epoch, framed record | None for a control
    record)``; for the contiguous prefix also the decoded record and the replayed image."""

    def __init__(self, fail: Callable[[str], None]) -> None:
        self.fail = fail
        self.entries: dict[int, tuple[int, bytes | None]] = {}
        self.records: list[Any] = []  # offset -> decoded record, None for control
        self.images: list[MetadataImage] = []  # offset -> image after that offset
        self.by_type: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        self._image = EMPTY

    @property
    def end(self) -> int:
        """Offsets [0, end) are known and replayed."""
        return len(self.images)

    def add(self, offset: int, epoch: int, value: bytes | None) -> None:
        prev = self.entries.get(offset)
        if prev is not None:
            if prev != (epoch, value):
                self.fail(f"committed offset {offset} is {(epoch, value)!r}, elsewhere {prev!r}")
            return
        self.entries[offset] = (epoch, value)
        while self.end in self.entries:
            off = self.end
            ep, val = self.entries[off]
            rec = None
            if val is None:  # Kafka: every batch, control ones too, moves the provenance
                self._image = replace(self._image, last_offset=off, last_epoch=ep)
            if val is not None:
                rec, _version = codec.decode_record(val)
                try:
                    self._image = replay(self._image, rec, off, ep)
                except (ReplayError, TypeError) as e:
                    self.fail(f"the committed log does not replay at {off}: {e}")
                self.by_type[type(rec).__spec_name__].append((off, rec))
            self.records.append(rec)
            self.images.append(self._image)

    def image_at(self, offset: int) -> MetadataImage | None:
        """The image after replaying offsets <= ``offset`` (EMPTY for -1), None if unknown."""
        if offset < 0:
            return EMPTY
        return self.images[offset] if offset < self.end else None

    def mismatch(self, img: MetadataImage, offset: int) -> str | None:
        """Why ``img`` is not the log's image at ``offset`` (inclusive), or None when it is.

        Exact equality, provenance (``last_offset`` / ``last_epoch``) included: every batch,
        control ones too, moves it, as Kafka's ``MetadataBatchLoader`` does.
        """
        want = self.image_at(offset)
        if want is None:
            return f"offset {offset} is beyond the committed log known ({self.end})"
        return None if img == want else image_diff(img, want)

    def find(self, type_name: str, pred: Callable[[Any], bool], after: int = -1):
        """(offset, record) of the first ``type_name`` record after ``after`` matching ``pred``."""
        for off, rec in self.by_type.get(type_name, ()):
            if off > after and pred(rec):
                return off, rec
        return None

    def replay_tail(self, img: MetadataImage, start: int) -> MetadataImage:
        """``img`` with the data records at offsets [start, end) replayed."""
        for off in range(start, self.end):
            rec, ep = self.records[off], self.entries[off][0]
            if rec is not None:
                img = replay(img, rec, off, ep)
            else:
                img = replace(img, last_offset=off, last_epoch=ep)
        return img


def image_diff(a: MetadataImage, b: MetadataImage, limit: int = 600) -> str:
    """The fields (and for maps the keys) where two images differ, for failure messages."""
    out = []
    for f in fields(MetadataImage):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if va == vb:
            continue
        if isinstance(va, PMap) and isinstance(vb, PMap):
            for k in sorted(set(va) | set(vb), key=repr):
                if va.get(k) != vb.get(k):
                    out.append(f"{f.name}[{k!r}]: {va.get(k)!r} != {vb.get(k)!r}")
        else:
            out.append(f"{f.name}: {va!r} != {vb!r}")
    text = "; ".join(out)
    return text if len(text) <= limit else text[:limit] + "..."


# ================================================================== invariants
class ControllerInvariants(Invariants):
    """The simulator's Raft invariants, plus the ledger and the image checks (module docstring).
    ``check_images`` False leaves the per-event image comparison to :func:`check_final`."""

    def __init__(self, cluster: ControllerCluster, check_images: bool = True) -> None:
        super().__init__(cluster)
        self.ledger = Ledger(self.fail)
        self.check_images = check_images
        self._ledger_checked: dict[int, int] = {}
        self._seen: dict[int, tuple[Any, MetadataImage, int]] = {}
        #: (node, speculative image) of active controllers, compared once committed
        self.speculative: list[tuple[int, MetadataImage]] = []
        self._last_spec: dict[int, MetadataImage] = {}
        self.images_checked = 0
        self.speculative_compared = 0
        self.speculative_dropped = 0
        self.speculative_types: Counter[str] = Counter()
        self._spec_upto: dict[tuple[int, int], int] = {}

    def on_restart(self, n) -> None:
        super().on_restart(n)
        self._ledger_checked[n.node_id] = 0

    def on_crash(self, n) -> None:
        super().on_crash(n)
        self._ledger_checked[n.node_id] = 0

    def check_committed(self, n) -> None:
        hw = n.core.high_watermark
        start = max(self._ledger_checked.get(n.node_id, 0), n.log.start_offset)
        if hw > start:
            for b in n.log.batches(start, hw):
                for i, v in enumerate(b.records):
                    off = b.base_offset + i
                    if start <= off < hw:
                        self.ledger.add(off, b.epoch, None if b.is_control else v)
            self._ledger_checked[n.node_id] = hw
        super().check_committed(n)

    def check_state_machine(self, n) -> None:
        qc: QuorumController = n.sm
        if qc.is_active:
            self.sample(n.node_id, qc)
        if not self.check_images:
            return
        seen = self._seen.get(n.node_id)
        if seen is not None and seen[0] is qc and seen[1] is qc.image:
            return
        self._seen[n.node_id] = (qc, qc.image, qc.committed_offset)
        self.check_node_image(n.node_id, qc)

    def check_node_image(self, node_id: int, qc: QuorumController) -> None:
        self.images_checked += 1
        why = self.ledger.mismatch(qc.image, qc.committed_offset)
        if why is not None:
            self.fail(f"node {node_id}: the image at committed offset {qc.committed_offset} is "
                      f"not the log's replay: {why}")  # fmt: skip

    def sample(self, node_id: int, qc: QuorumController) -> None:
        """Remember the active controller's speculative image (once per distinct image)."""
        u = qc.uncommitted_image
        if u.last_offset < 0 or self._last_spec.get(node_id) is u:
            return
        self._last_spec[node_id] = u
        self.speculative.append((node_id, u))

    def check_speculative(self, final: bool = False) -> None:
        """Compare every recorded speculative image whose last record is committed in its epoch
        with the ledger, counting ``speculative_compared``, ``speculative_dropped`` (its offset
        committed in another epoch: a deposed leader's write) and, in ``speculative_types``, the
        types of the records the compared images newly cover (written in that epoch).
        ``final``: those past the log end are dropped too."""
        compared = dropped = 0
        keep = []
        for node_id, u in self.speculative:
            entry = self.ledger.entries.get(u.last_offset)
            if entry is None or u.last_offset >= self.ledger.end:
                if final:
                    dropped += 1  # never committed: a deposed leader's tail beyond the log end
                else:
                    keep.append((node_id, u))
                continue
            if entry[0] != u.last_epoch:
                dropped += 1  # another leader's record took the offset
                continue
            why = self.ledger.mismatch(u, u.last_offset)
            if why is not None:
                self.fail(f"node {node_id}: the active controller's image after writing offset "
                          f"{u.last_offset} is not the log's replay: {why}")  # fmt: skip
            compared += 1
            key = (node_id, u.last_epoch)
            for off in range(self._spec_upto.get(key, -1) + 1, u.last_offset + 1):
                rec = self.ledger.records[off]
                if rec is not None and self.ledger.entries[off][0] == u.last_epoch:
                    self.speculative_types[type(rec).__spec_name__] += 1
            self._spec_upto[key] = max(self._spec_upto.get(key, -1), u.last_offset)
        self.speculative = keep
        self.speculative_compared += compared
        self.speculative_dropped += dropped


# ================================================================== the cluster
class SimDriver:
    """What QuorumController needs of RaftDriver: ``core`` and ``append`` (which also lets the
    simulator schedule the linger, flush and sends, as the driver's loop would)."""

    def __init__(self, cluster: ControllerCluster, node) -> None:
        self.cluster, self.node = cluster, node

    @property
    def core(self):
        return self.node.core

    def append(self, records: list[bytes]) -> int:
        c, n = self.cluster, self.node
        c.inv.sample(n.node_id, n.sm)  # the image after the previous write
        last = n.core.append(c.now, records)
        c._after(n)
        return last


def sim_config(**kw: Any) -> SimConfig:
    """Defaults for the controller runs: no random faults or client, small snapshot trigger and
    retention so the log start moves and a lagging follower needs FetchSnapshot."""
    base: dict[str, Any] = {
        "drop": 0.02,
        "duplicate": 0.01,
        "crash_every_ms": 0,
        "partition_every_ms": 0,
        "snapshot_min_records": 10,
        "retention_bytes": 1_000,
        "retention_check_ms": 200,
        "replication_lag_ms": 1_000,
        "wire": True,
    }
    base.update(kw)
    return SimConfig(**base)


CONTROLLER_DEFAULTS: dict[str, Any] = {
    "session_timeout_ms": 4_000,
    "fence_check_interval_ms": 500,
    "idle_interval_ms": 250,
    # KIP-1164: the active controller creates __diskless-metadata (2 partitions, replication
    # factor 3) once 3 brokers running the Batch Coordinator are unfenced, never with fewer
    "diskless_metadata_partitions": 2,
    "diskless_metadata_replication_factor": 3,
}


class ControllerCluster(Cluster):
    """See the module docstring. ``on_controller(node_id, qc)`` runs for every controller created
    (start and restart), before its core: the hook for deliberately broken nodes."""

    def __init__(
        self,
        seed: int,
        cfg: SimConfig | None = None,
        *,
        controller_kw: dict[str, Any] | None = None,
        on_controller: Callable[[int, QuorumController], None] | None = None,
        check_images: bool = True,
        max_events: int = 400_000,
    ) -> None:
        self.controller_kw = {**CONTROLLER_DEFAULTS, **(controller_kw or {})}
        self.on_controller = on_controller
        self.controllers: list[tuple[int, QuorumController]] = []
        self.snapshot_loads: Counter[str] = Counter()  # "start" / "fetched" -> loads
        self.cuts: Counter[tuple[int, int]] = Counter()
        self.ticking = True
        self.answers: list[Answer] = []
        #: (node id, epoch) of every resignation a controller asked for (a renounce on a fault)
        self.resignations: list[tuple[int, int]] = []
        self.topic_ids_seen: dict[str, list[uuid.UUID]] = defaultdict(list)
        self.faults: Counter[str] = Counter()
        self.max_events = max_events
        self._starting = False
        self._retries_due = 0
        self._dirty = False
        self._sig: tuple = ()
        super().__init__(seed, cfg or sim_config())
        # the base class made plain Invariants before starting the nodes; nothing was checked yet
        self.inv = ControllerInvariants(self, check_images)
        for n in self.nodes.values():
            self.inv.on_restart(n)

    # ------------------------------------------------------------------ nodes
    def _start(self, n) -> None:
        n.incarnation += 1
        n.flushing = False
        qc = QuorumController(
            n.node_id,
            CLUSTER,
            clock_ms=lambda: self.now,
            rng=random.Random(self.rng.random()),
            **self.controller_kw,
        )
        orig = qc.handle_load_snapshot

        def counted(reader: Any) -> None:
            self.snapshot_loads["start" if self._starting else "fetched"] += 1
            orig(reader)

        qc.handle_load_snapshot = counted  # instrumentation only: counts, then the real load
        if qc.resign is None:  # as the node wires it: the metadata replica's resign
            qc.resign = lambda epoch, n=n: self._resign(n, epoch)
        if self.on_controller is not None:
            self.on_controller(n.node_id, qc)
        self.controllers.append((n.node_id, qc))
        n.sm = qc
        self._starting = True
        try:
            n.core = self.cfg.core_factory(
                self._raft_config(n.node_id),
                n.log,
                n.store,
                qc,
                random.Random(self.rng.random()),
                self.now,
            )
        finally:
            self._starting = False
        qc.attach(SimDriver(self, n))
        self.inv.on_restart(n)
        self._after(n)
        inc = n.incarnation
        self.at(self.now + TICK_MS, lambda: self._tick(n, inc))

    def _resign(self, n, epoch: int) -> None:
        """``RaftDriver.resign``: the core steps down, then what the driver does after input."""
        self.resignations.append((n.node_id, epoch))
        if n.core is not None:
            n.core.resign(self.now, epoch)
            self._after(n)

    def _tick(self, n, inc: int) -> None:
        """The controller's timer task: bootstrap record, session check, NoOp when idle."""
        if n.core is None or n.incarnation != inc:
            return
        if self.ticking:
            n.sm.tick()
            self._after(n)
        self.at(self.now + TICK_MS, lambda: self._tick(n, inc))

    def _client_tick(self) -> None:  # no random appends: the script is the only client
        return

    def _deliverable(self, src: int, dst: int) -> bool:
        return self.cuts[(src, dst)] == 0

    def up(self):
        return [n for n in self.nodes.values() if n.core is not None]

    def leader(self):
        ls = [n for n in self.up() if n.core.is_leader]
        return ls[0] if len(ls) == 1 else None

    # ------------------------------------------------------------------ event loop
    async def _run_until(self, t_end: int, stop: Callable[[], bool] | None = None) -> bool:
        """Process events up to ``t_end`` (ms); stop early once ``stop()`` holds."""
        while self._q and self._q[0][0] <= t_end:
            t, _, fn = heapq.heappop(self._q)
            self.now = t
            fn()
            self.events += 1
            if self.events > self.max_events:
                self.inv.fail(f"more than {self.max_events} events")
            self.inv.check()
            await self._let_tasks_run()
            if self.events % 1000 == 0:
                self.inv.check_speculative()
            if stop is not None and stop():
                return True
        self.now = max(self.now, t_end)
        return stop is not None and stop()

    async def _let_tasks_run(self) -> None:
        """Yield to the loop when a command task may progress: one was just sent, or a
        controller committed more or changed role (its futures completed)."""
        sig = tuple(
            (n.sm.committed_offset, n.sm.is_active) if n.core is not None else None
            for n in self.nodes.values()
        )
        if not self._dirty and sig == self._sig:
            return
        self._sig, self._dirty = sig, False
        if all(a.task.done() and a.answered_ms >= 0 for a in self.answers):
            return
        for _ in range(3):
            await asyncio.sleep(0)
        for n in self.up():
            if n.sm.is_active:
                self.inv.sample(n.node_id, n.sm)
        for a in self.answers:
            if a.answered_ms < 0 and a.task.done():
                a.response = a.task.result()
                a.answered_ms = self.now
                check_answer(self, a, final=False)
                if _code(a.response) == NOT_CONTROLLER and a.attempt < MAX_RETRIES:
                    self._retries_due += 1
                    self.at(self.now + RETRY_BACKOFF_MS, lambda a=a: self._retry(a))

    # ------------------------------------------------------------------ the script
    async def run_script(self, steps, settle_ms: int = 1_500, converge_ms: int = 60_000):
        """Start the quorum, run ``steps`` ((gap ms, op) pairs: the op happens ``gap`` ms after
        the previous one), let the timers run ``settle_ms`` more, then stop them and run until
        every fault healed and every node committed the leader's whole log (at most
        ``converge_ms``). Returns self."""
        ready = await self._run_until(
            self.now + 20_000,
            lambda: any(
                n.sm.is_active and "metadata.version" in n.sm.image.features for n in self.up()
            ),
        )
        if not ready:
            self.inv.fail("no active controller with metadata.version within 20 s")
        for gap, op in steps:
            await self._run_until(self.now + gap)
            if isinstance(op, Wait):
                await self._run_until(self.now + op.ms)
                continue
            self.do(op)
            await self._let_tasks_run()
        await self._run_until(self.now + settle_ms)
        self.ticking = False
        if not await self._run_until(self.now + converge_ms, self.converged):
            self.inv.fail(f"not converged: {self.describe()}")
        return self

    def converged(self) -> bool:
        if sum(self.cuts.values()) or len(self.up()) != len(self.nodes):
            return False
        lead = self.leader()
        if lead is None or not lead.sm.is_active or lead.core.next_offset != lead.log.end_offset:
            return False
        end = lead.log.end_offset
        if lead.core.high_watermark != end:
            return False
        if any(n.sm.committed_offset != end - 1 for n in self.nodes.values()):
            return False
        return self._retries_due == 0 and all(a.answered_ms >= 0 for a in self.answers)

    def describe(self) -> str:
        parts = []
        for n in self.nodes.values():
            if n.core is None:
                parts.append(f"{n.node_id}: down")
                continue
            parts.append(
                f"{n.node_id}: {n.core.state_name} e{n.core.epoch} end={n.log.end_offset} "
                f"hw={n.core.high_watermark} committed={n.sm.committed_offset} "
                f"active={n.sm.is_active}"
            )
        pending = sum(a.answered_ms < 0 for a in self.answers)
        return "; ".join(parts) + f"; cuts={sum(self.cuts.values())}; unanswered={pending}"

    def do(self, op: Any) -> None:
        """Run one script op (not Wait: :meth:`run_script` waits) now."""
        if isinstance(op, IsolateLeader):
            lead = self.leader()
            if lead is not None:
                self.faults["isolate_leader"] += 1
                self._cut(lead.node_id, op.ms)
            return
        if isinstance(op, IsolateFollower):
            lead = self.leader()
            others = [i for i in sorted(self.nodes) if lead is None or i != lead.node_id]
            self.faults["isolate_follower"] += 1
            self._cut(others[0], op.ms)
            return
        whole = len(self.up()) == len(self.nodes)  # one crashed node at a time
        if isinstance(op, RestartFollower):
            cands = [n for n in self.up() if not n.core.is_leader and not n.sm.is_active]
            if cands and whole:
                self.faults["restart"] += 1
                self._crash_for(cands[0], op.down_ms)
            return
        if isinstance(op, CrashLeader):
            lead = self.leader()
            if lead is not None and whole:
                self.faults["crash_leader"] += 1
                for a in self.answers:
                    if a.node == lead.node_id and a.answered_ms < 0:
                        a.task.cancel()  # the connection broke: no answer
                        a.answered_ms = self.now
                self._crash_for(lead, op.down_ms)
            return
        self._send(op)

    def _crash_for(self, n, down_ms: int) -> None:
        n.core = None
        n.log.crash()
        self.inv.on_crash(n)
        self.at(self.now + down_ms, lambda: self._restart(n))

    def _cut(self, node_id: int, ms: int) -> None:
        pairs = [(a, b) for a in self.nodes for b in self.nodes
                 if a != b and node_id in (a, b)]  # fmt: skip
        for p in pairs:
            self.cuts[p] += 1

        def heal() -> None:
            for p in pairs:
                self.cuts[p] -= 1

        self.at(self.now + ms, heal)

    # ------------------------------------------------------------------ commands
    def _retry(self, a: Answer) -> None:
        self._retries_due -= 1
        self._send(a.op, a.attempt + 1)

    def _command_target(self):
        active = [n for n in self.up() if n.sm.is_active]
        if active:
            return self.rng.choice(active)
        return self.leader() or self.up()[0]

    def _send(self, op: Any, attempt: int = 0) -> None:
        n = self._command_target()
        qc: QuorumController = n.sm
        img = qc.uncommitted_image
        for t in img.topics.values():
            if t.topic_id not in self.topic_ids_seen[t.name]:
                self.topic_ids_seen[t.name].append(t.topic_id)
        req, call = build_request(op, img, qc, self.topic_ids_seen)
        task = asyncio.ensure_future(call(req))
        self.answers.append(Answer(op, req, n.node_id, self.now, task, attempt))
        self._dirty = True


def _epoch(img: MetadataImage, broker: int, kind: str) -> int:
    reg = img.brokers.get(broker)
    cur = reg.epoch if reg is not None else 0
    return {"current": cur, "stale": cur - 1, "unknown": cur + 1000}[kind]


def incarnation_id(broker: int, n: int) -> uuid.UUID:
    return uuid.UUID(int=(broker + 1) << 16 | (n + 1), version=4)


def build_request(
    op: Any, img: MetadataImage, qc: QuorumController, seen_ids: dict[str, list[uuid.UUID]]
):
    """(request, a coroutine function sending it to ``qc``) for a command op, resolved against
    the target controller's uncommitted image; ``seen_ids``: name -> every id it was seen with."""
    if isinstance(op, Register):
        # every supported range; mv_ok False: a metadata.version range below the finalized one
        features = broker_features(**({} if op.mv_ok else {"metadata__version": (1, 7)}))
        req = R("BrokerRegistrationRequest")(
            broker_id=op.broker,
            cluster_id=CLUSTER if op.cluster_ok else "another-cluster",
            incarnation_id=incarnation_id(op.broker, op.incarnation),
            log_dirs=(uuid.UUID(int=(op.broker + 1) << 64),),
            listeners=(
                BR.Listener(name="PLAINTEXT", host=f"b{op.broker}", port=9092, security_protocol=0),
            ),
            features=features,
            rack=None,
        )
        return req, lambda r: qc.register_broker(r, 4)
    if isinstance(op, Heartbeat):
        epoch = _epoch(img, op.broker, op.epoch)
        offset = max(qc.committed_offset, 0) if op.caught_up else epoch - 1
        req = R("BrokerHeartbeatRequest")(
            broker_id=op.broker,
            broker_epoch=epoch,
            current_metadata_offset=offset,
            want_fence=op.want_fence,
            want_shut_down=op.want_shut_down,
        )
        return req, lambda r: qc.broker_heartbeat(r, 1)
    if isinstance(op, Allocate):
        req = R("AllocateProducerIdsRequest")(
            broker_id=op.broker, broker_epoch=_epoch(img, op.broker, op.epoch)
        )
        return req, lambda r: qc.allocate_producer_ids(r, 0)
    if isinstance(op, Create):
        topics = tuple(
            CT.CreatableTopic(
                name=t.name,
                num_partitions=-1 if t.assignment else t.partitions,
                replication_factor=-1 if t.assignment else t.rf,
                assignments=tuple(
                    CT.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                    for i, b in enumerate(t.assignment)
                ),
                configs=tuple(CT.CreatableTopicConfig(name=k, value=v) for k, v in t.configs),
            )
            for t in op.topics
        )
        req = R("CreateTopicsRequest")(topics=topics, validate_only=op.validate_only)
        return req, lambda r: qc.create_topics(r, 7)
    if isinstance(op, Delete):
        states = []
        for kind, name in op.refs:
            if kind == "name":
                states.append(DT.DeleteTopicState(name=name))
                continue
            tid = UNKNOWN_ID
            if kind == "id":
                tid = img.topics_by_name.get(name, UNKNOWN_ID)
            elif kind == "old_id":
                t = img.topics_by_name.get(name)
                old = [i for i in seen_ids.get(name, ()) if i != t]
                tid = old[0] if old else UNKNOWN_ID
            states.append(DT.DeleteTopicState(name=None, topic_id=tid))
        req = R("DeleteTopicsRequest")(topics=tuple(states))
        return req, lambda r: qc.delete_topics(r, 6)
    if isinstance(op, CreateChunk):
        mod = codec.module("CreateChunksRequest")
        req = mod.CreateChunksRequest(
            topic_partitions=(
                mod.CreateChunksTopicPartition(
                    topic_name=op.topic,
                    partition_id=op.partition,
                    broker_ids=op.brokers,
                    start_offset=op.start,
                    start_timestamp=op.start * 10,
                    prev_stop_offset=op.prev_stop,
                ),
            )
        )
        return req, lambda r: qc.create_chunks(r, 0)
    if isinstance(op, AlterChunk):
        mod = codec.module("AlterChunkAssignmentsRequest")
        req = mod.AlterChunkAssignmentsRequest(
            chunks=(
                mod.AlterChunkAssignment(
                    topic_name=op.topic,
                    partition_id=op.partition,
                    start_offset=op.start,
                    broker_ids=op.brokers,
                ),
            )
        )
        return req, lambda r: qc.alter_chunk_assignments(r, 0)
    if isinstance(op, Assign):
        mod = codec.module("AssignPartitionToBatchCoordinatorRequest")
        req = mod.AssignPartitionToBatchCoordinatorRequest(
            topics=(
                mod.AssignTopicToBatchCoordinator(
                    topic_id=img.topics_by_name.get(op.topic, UNKNOWN_ID),
                    partitions=(
                        mod.AssignTopicPartitionToBatchCoordinator(
                            partition_index=op.partition,
                            batch_coordinator_partition_index=op.coordinator,
                        ),
                    ),
                ),
            )
        )
        return req, lambda r: qc.assign_partition_to_batch_coordinator(r, 0)
    raise TypeError(f"not a command: {op!r}")


# ================================================================== answers
def check_answer(c: ControllerCluster, a: Answer, final: bool) -> None:
    """A successful answer's records are in the committed log (already when the answer
    arrives); ``final``: and their effect is in the final image unless a later committed record
    undid it. Error answers are not checked here (NOT_CONTROLLER's outcome is unknown, as in
    Kafka: the records may still commit)."""
    led = c.inv.ledger
    fail = c.inv.fail
    img = led.image_at(led.end - 1) if final else None
    op, req, resp = a.op, a.request, a.response
    if resp is None:
        return  # lost with a crashed controller: the outcome is unknown
    what = f"{type(op).__name__} sent at {a.sent_ms} ms to node {a.node}"
    if isinstance(op, Register):
        if resp.error_code != 0:
            return
        e = resp.broker_epoch
        rec = led.records[e] if e < led.end else None
        if rec is None or type(rec).__spec_name__ != "RegisterBrokerRecord" or (
            rec.broker_id, rec.incarnation_id) != (req.broker_id, req.incarnation_id):  # fmt: skip
            fail(f"{what}: answered broker epoch {e} but the committed log has {rec!r} there")
        if final and img.brokers.get(req.broker_id) is None:
            fail(f"{what}: broker {req.broker_id} is not in the final image")
        if final and img.brokers[req.broker_id].epoch < e:
            fail(f"{what}: the final image has broker {req.broker_id} at an older epoch")
    elif isinstance(op, Heartbeat):
        if resp.error_code != 0:
            return
        e = req.broker_epoch
        rec = led.records[e] if 0 <= e < led.end else None
        if rec is None or type(rec).__spec_name__ != "RegisterBrokerRecord" or (
            rec.broker_id != req.broker_id):  # fmt: skip
            fail(f"{what}: accepted epoch {e}, no committed registration of the broker there")
    elif isinstance(op, Allocate):
        if resp.error_code != 0:
            return
        nxt = resp.producer_id_start + resp.producer_id_len
        hit = led.find("ProducerIdsRecord", lambda r: r.next_producer_id == nxt)
        if hit is None or (hit[1].broker_id, hit[1].broker_epoch) != (
            req.broker_id, req.broker_epoch):  # fmt: skip
            fail(f"{what}: block at {resp.producer_id_start} has no committed record ({hit})")
        if final and img.producer_ids.next_producer_id < nxt:
            fail(f"{what}: the final image's next producer id is below the block's end")
    elif isinstance(op, Create):
        for r in resp.topics:
            if r.error_code != 0:
                continue
            if req.validate_only:
                if r.topic_id != ZERO_ID:
                    fail(f"{what}: validateOnly answered topic id {r.topic_id}")
                continue
            hit = led.find("TopicRecord", lambda t, r=r: t.topic_id == r.topic_id)
            if hit is None or hit[1].name != r.name:
                fail(f"{what}: created {r.name} {r.topic_id} is not committed ({hit})")
            parts = [p for _, p in led.by_type.get("PartitionRecord", ())
                     if p.topic_id == r.topic_id]  # fmt: skip
            if len(parts) != r.num_partitions or any(
                len(p.replicas) != r.replication_factor for p in parts
            ):
                fail(f"{what}: {r.name} committed with {len(parts)} partitions, answered "
                     f"{r.num_partitions} x {r.replication_factor}")  # fmt: skip
            if final and r.topic_id not in img.topics:
                gone = led.find("RemoveTopicRecord", lambda x, r=r: x.topic_id == r.topic_id)
                if gone is None:
                    fail(f"{what}: {r.name} {r.topic_id} is neither in the final image nor "
                         f"deleted")  # fmt: skip
    elif isinstance(op, CreateChunk):
        if resp.results[0].error_code != 0:
            return
        hit = led.find(
            "ChunkRecord", lambda x: (x.partition_id, x.end_offset) == (op.partition, op.start - 1)
        )
        if hit is None or hit[1].stop_offset != op.prev_stop:
            fail(f"{what}: answered a new chunk but no matching ChunkRecord committed ({hit})")
    elif isinstance(op, Assign):
        t = req.topics[0]
        if resp.responses[0].partitions[0].error_code != 0:
            return
        want = (t.topic_id, op.partition, op.coordinator)
        hit = led.find(
            "TopicPartitionToBatchCoordinatorMapping",
            lambda x: (x.topic_id, x.partition_index, x.batch_coordinator_partition_index) == want,
        )
        if hit is None:
            fail(f"{what}: answered an assignment but no matching mapping record committed")
    elif isinstance(op, Delete):
        for r in resp.responses:
            if r.error_code != 0:
                continue
            hit = led.find("RemoveTopicRecord", lambda x, r=r: x.topic_id == r.topic_id)
            if hit is None:
                fail(f"{what}: deleted {r.name} {r.topic_id} but no RemoveTopicRecord committed")
            if final and r.topic_id in img.topics:
                fail(f"{what}: deleted {r.topic_id} is in the final image")


# ================================================================== the final comparison
@dataclass
class Report:
    """What a run exercised (for the deterministic tests' assertions and hypothesis events)."""

    log_end: int = 0
    record_types: Counter = field(default_factory=Counter)
    answers: Counter = field(default_factory=Counter)
    speculative_compared: int = 0
    speculative_dropped: int = 0
    speculative_types: Counter = field(default_factory=Counter)
    snapshots_checked: int = 0
    snapshot_loads: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    leader_epochs: int = 0
    images_checked: int = 0


def check_final(c: ControllerCluster, mid_fractions=(0.25, 0.5, 0.75)) -> Report:
    """After :meth:`ControllerCluster.run_script`: every equality of the module docstring."""
    inv, led = c.inv, c.inv.ledger
    fail = inv.fail
    lead = c.leader()
    end = lead.log.end_offset
    if led.end != end or len(led.entries) != end:
        fail(f"the ledger holds offsets [0, {led.end}) of {len(led.entries)}, log end {end}")
    full = led.image_at(end - 1)
    # the active controller, each follower
    for n in c.nodes.values():
        why = led.mismatch(n.sm.image, end - 1)
        if why is not None:
            fail(f"node {n.node_id}: final image is not the whole log's replay: {why}")
        if n.sm.uncommitted_image != n.sm.image:
            fail(f"node {n.node_id}: the uncommitted image differs at rest: "
                 f"{image_diff(n.sm.uncommitted_image, n.sm.image)}")  # fmt: skip
    for node_id, qc in c.controllers:
        if qc.skipped_records:
            fail(f"a controller of node {node_id} skipped {qc.skipped_records} records")
    # a snapshot of the image at mid offsets, loaded, plus the tail
    for frac in mid_fractions:
        k = int(end * frac)
        mid = led.image_at(k - 1)
        loaded = snapshot.load(snapshot.image_records(mid), mid.last_offset, mid.last_epoch)
        if loaded != mid:
            fail(f"the image at {k - 1} does not round-trip as a snapshot: "
                 f"{image_diff(loaded, mid)}")  # fmt: skip
        back = led.replay_tail(loaded, k)
        if back != full:
            fail(f"snapshot at {k} + tail != whole log: {image_diff(back, full)}")
    # every snapshot the cores wrote, loaded into a fresh controller, plus the tail
    checked = 0
    for n in c.nodes.values():
        for sid in n.log.snapshot_ids():
            fresh = QuorumController(99, CLUSTER)
            fresh.handle_load_snapshot(n.log.read_snapshot(sid))
            why = led.mismatch(fresh.image, sid.offset - 1)
            if why is not None:
                fail(f"node {n.node_id}: snapshot {sid} does not load the log's image: {why}")
            why = led.mismatch(led.replay_tail(fresh.image, sid.offset), end - 1)
            if why is not None:
                fail(f"node {n.node_id}: snapshot {sid} + tail != whole log: {why}")
            checked += 1
    # speculative images; answers
    inv.check_speculative(final=True)
    starts = []
    for a in c.answers:
        check_answer(c, a, final=True)
        if isinstance(a.op, Allocate) and _code(a.response) == 0:
            starts.append(a.response.producer_id_start)
    if len(starts) != len(set(starts)):
        fail(f"a producer-id block was handed out twice: {sorted(starts)}")
    rep = Report(
        log_end=end,
        record_types=Counter({k: len(v) for k, v in led.by_type.items()}),
        answers=Counter((type(a.op).__name__, _code(a.response)) for a in c.answers),
        speculative_compared=inv.speculative_compared,
        speculative_dropped=inv.speculative_dropped,
        speculative_types=Counter(inv.speculative_types),
        snapshots_checked=checked,
        snapshot_loads=Counter(c.snapshot_loads),
        faults=Counter(c.faults),
        leader_epochs=len(inv.leaders),
        images_checked=inv.images_checked,
    )
    return rep


def _code(resp: Any) -> int | str:
    """The response's error (the first non-zero entry's for per-topic responses); "lost"."""
    if resp is None:
        return "lost"
    for attr in ("topics", "responses", "results"):
        entries = getattr(resp, attr, None)
        if entries is not None:
            if entries and hasattr(entries[0], "partitions"):  # per topic, then per partition
                entries = [p for e in entries for p in e.partitions]
            return next((e.error_code for e in entries if e.error_code), 0)
    return resp.error_code
