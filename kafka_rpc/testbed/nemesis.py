"""Runs of the replicated Batch Coordinator under network faults: the driver of the netns
scenarios (``tests/netns``) and of the soak (``bench/nemesis.py``); ``docs/network-faults.md``.

A :class:`Run` owns a three-node :class:`~kafka_rpc.testbed.netns_cluster.NetnsCluster` on a
:class:`~kafka_rpc.testbed.netns.NetBed` and the workload of
``kafka_rpc.testbed.coordinator_workload`` (writers and a reader on every node, run from the
client namespace), and a :class:`QuorumWatch`: DescribeQuorum polled from inside every node's
namespace, on the node's own local listener, so the node's view is seen whatever the faults.
A scenario (or the soak's random schedule, :func:`random_schedule`) calls :meth:`Run.fault` /
:meth:`Run.heal`; :meth:`Run.finish` heals, waits for one coordinator leader, stops the load,
waits until every replica's SQLite state is the same row by row, reads the final state on the
leader and checks:

* the history (``kafka_rpc.testbed.history.check``);
* one leader per epoch, for the metadata log and the coordinator partition, from every node's
  DescribeQuorum answers (``check_leaders``);
* committed entries never lost: every batch below the highest high watermark a leader reported
  is, after the heal, on every node, the same bytes (:func:`compare_logs`);
* every replica's state equal row by row.

:meth:`Run.report` prints what a failure needs: the fault schedule, the tail of every node's log
and the offending operations. :func:`unavailability` measures, per fault kind, the longest time
without an acknowledged commit while a fault of that kind was on (until the first acknowledged
commit after it healed).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import itertools
import json
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from kafka_rpc.coordinator.replicated import DISKLESS_METADATA_TOPIC_NAME
from kafka_rpc.raft.api import METADATA_TOPIC_NAME
from kafka_rpc.testbed.coordinator_workload import (
    Clients,
    QuorumPoller,
    Reader,
    Recorder,
    Writer,
    coordinator_of,
    final_state,
    init_topic,
    last_leader,
    max_high_watermark,
)
from kafka_rpc.testbed.history import (
    OK,
    CheckResult,
    LeaderObservation,
    check,
    check_leaders,
    dump_history,
)
from kafka_rpc.testbed.netns import NetBed, enter_netns, partition_pairs
from kafka_rpc.testbed.netns_cluster import LOCAL_CONTROLLER_PORT, NetnsCluster, log_batches

__all__ = [
    "FAULT_KINDS",
    "Fault",
    "Outcome",
    "Run",
    "compare_logs",
    "random_schedule",
    "unavailability",
]

COORD = DISKLESS_METADATA_TOPIC_NAME
META = METADATA_TOPIC_NAME
#: what :func:`random_schedule` draws from
FAULT_KINDS = ("isolate-leader", "isolate-node", "one-way-leader", "bridge", "loss", "delay",
               "link-down")  # fmt: skip


@dataclass
class Fault:
    kind: str
    start: float
    end: float | None = None
    detail: str = ""


@dataclass
class Outcome:
    """What :meth:`Run.finish` found."""

    history: CheckResult
    leaders: CheckResult
    log_problems: list[str]
    state_problems: list[str]
    final_leader: int
    final: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (self.history.ok and self.leaders.ok and not self.log_problems
                and not self.state_problems)  # fmt: skip


def compare_logs(dirs: dict[int, Path], committed_end: int) -> list[str]:
    """Problems with the batches below ``committed_end`` (exclusive) of one Raft log on the
    nodes ``dirs`` (node -> log directory): a batch whose bytes differ between two nodes, or a
    batch one node lacks although its log reaches below it."""
    logs = {n: log_batches(d) for n, d in dirs.items()}
    problems = []
    bases = sorted({b for lg in logs.values() for b, (last, _e, _d) in lg.items()
                    if last < committed_end})  # fmt: skip
    for base in bases:
        seen = {n: lg[base] for n, lg in logs.items() if base in lg}
        if len({(last, data) for last, _e, data in seen.values()}) > 1:
            problems.append(f"batch at offset {base} differs between nodes: "
                            f"{ {n: (last, e) for n, (last, e, _d) in seen.items()} }")  # fmt: skip
        for n, lg in logs.items():
            if base not in lg and lg and min(lg) <= base:
                problems.append(f"node {n} lacks the committed batch at offset {base}")
    return problems


def unavailability(ops, faults: list[Fault], end: float) -> dict[str, float]:
    """Per fault kind, the longest time (s) without an acknowledged commit from a fault's start
    until the first acknowledged commit after its end (or ``end``)."""
    done = sorted(
        op.complete
        for op in ops
        if op.kind == "commit" and op.outcome == OK and op.complete is not None
    )
    out: dict[str, float] = defaultdict(float)
    for f in faults:
        stop = f.end if f.end is not None else end
        j = bisect.bisect_right(done, stop)
        until = done[j] if j < len(done) else end
        points = [f.start] + [t for t in done if f.start < t < until] + [until]
        gap = max(b - a for a, b in itertools.pairwise(points))
        out[f.kind] = max(out[f.kind], gap)
    return dict(out)


class QuorumWatch:
    """A :class:`~kafka_rpc.testbed.coordinator_workload.QuorumPoller` per node, each on a thread
    inside that node's namespace (``netns.enter_netns``) asking the node's local controller
    listener (its own replica answers there; the broker listener forwards DescribeQuorum of
    the metadata log to the active controller, as Kafka's). :attr:`observations`: every answer
    of every node, in time order."""

    def __init__(self, bed: NetBed, nodes: list[int]) -> None:
        self.bed = bed
        self.stop = threading.Event()
        self.pollers = {i: QuorumPoller({i: f"127.0.0.1:{LOCAL_CONTROLLER_PORT}"}) for i in nodes}
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def start(self) -> None:
        for i, p in self.pollers.items():
            t = threading.Thread(target=self._run, args=(i, p), name=f"quorum-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def _run(self, node: int, poller: QuorumPoller) -> None:
        try:
            enter_netns(self.bed.ns(node))
            asyncio.run(poller.run(self.stop))
        except Exception as exc:  # noqa: BLE001 - reported by Run.report
            self.errors.append(f"poller of node {node}: {type(exc).__name__}: {exc}")

    def close(self, timeout: float = 5.0) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout)

    @property
    def observations(self) -> list[LeaderObservation]:
        return sorted((o for p in self.pollers.values() for o in list(p.observations)),
                      key=lambda o: o.t)  # fmt: skip

    def leader(self, log: str, since: float = 0.0) -> int | None:
        return last_leader(self.observations, log, since)

    def max_high_watermark(self, log: str) -> int:
        return max_high_watermark(self.observations, log)


class Run:
    """One cluster, its workload and its faults (module docstring). Call :meth:`start`,
    faults, then :meth:`finish`, from the client namespace (``netns.run_in_netns``)."""

    def __init__(self, bed: NetBed, root: Path, seed: int = 0, writers: int = 3,
                 partitions: int = 3, module: str = "kafka_rpc.cli",
                 props: dict[str, str] | None = None) -> None:  # fmt: skip
        self.bed = bed
        self.root = Path(root)
        self.seed = seed
        self.rng = random.Random(seed)
        self.cluster = NetnsCluster(bed, self.root, props=props, module=module)
        self.addresses = {i: n.bootstrap for i, n in self.cluster.nodes.items()}
        self.topic_id = uuid.UUID(int=self.rng.getrandbits(128))
        self.partitions = partitions
        self.rec = Recorder()
        self.stop = asyncio.Event()
        self.poller = QuorumWatch(bed, list(self.addresses))
        self.writers = [
            Writer(f"w{k}", self.rec, self.addresses, self.topic_id, partitions,
                   random.Random(f"{seed}/w{k}"), producer_id_base=(k + 1) * 1_000_000)
            for k in range(writers)
        ]  # fmt: skip
        self.readers = [Reader(f"r{i}", self.rec, i, a, self.topic_id, partitions)
                        for i, a in self.addresses.items()]  # fmt: skip
        self.tasks: list[asyncio.Task] = []
        self.faults: list[Fault] = []
        self.t0 = time.monotonic()
        self.outcome: Outcome | None = None
        self.notes: list[str] = []

    # ------------------------------------------------------------------ life
    async def start(self, load: bool = True) -> None:
        """The cluster, the topic (InitDisklessTopics), then the workload."""
        self.t0 = time.monotonic()
        await self.cluster.start()
        await init_topic(self.addresses, self.topic_id, self.partitions)
        self.bed.note("topic initialized; load starts")
        self.poller.start()
        if load:
            for w in self.writers:
                self.tasks.append(asyncio.create_task(w.run(self.stop)))
            for r in self.readers:
                self.tasks.append(asyncio.create_task(r.run(self.stop)))

    async def coordinator_leader(self, timeout: float = 20.0, among=None,
                                 exclude: int | None = None) -> int:  # fmt: skip
        """The node that the nodes ``among`` (default: all) all name as the write coordinator
        (FindCoordinator ``write:``), other than ``exclude``; AssertionError after
        ``timeout`` s."""
        among = list(self.addresses) if among is None else among
        clients = Clients("netns-leader", 1.0)
        deadline = time.monotonic() + timeout
        try:
            while True:
                named = {await coordinator_of(clients, self.addresses[i], self.topic_id)
                         for i in among}  # fmt: skip
                if len(named) == 1:
                    (leader,) = named
                    if leader is not None and leader != exclude:
                        return leader
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"nodes {among} named no one coordinator leader (other than "
                        f"{exclude}) in {timeout:g} s: {named}"
                    )
                await asyncio.sleep(0.1)
        finally:
            await clients.close()

    def acked_commits(self, since: float, node: int | None = None) -> int:
        return sum(1 for op in self.rec.ops if op.kind == "commit" and op.outcome == OK
                   and op.complete is not None and op.complete >= since
                   and (node is None or op.node == node))  # fmt: skip

    async def wait_commits(self, since: float, n: int = 1, timeout: float = 20.0,
                           node: int | None = None) -> float:  # fmt: skip
        """Wait until ``n`` commits were acknowledged after ``since`` (by ``node`` if given);
        returns the time it took from ``since``. AssertionError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.acked_commits(since, node) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"fewer than {n} commits acknowledged"
                                     f"{'' if node is None else f' by node {node}'} in "
                                     f"{timeout:g} s")  # fmt: skip
            await asyncio.sleep(0.05)
        return time.monotonic() - since

    # ------------------------------------------------------------------ faults
    def _open(self, kind: str, detail: str) -> Fault:
        f = Fault(kind, time.monotonic(), detail=detail)
        self.faults.append(f)
        return f

    def _close_faults(self) -> None:
        now = time.monotonic()
        for f in self.faults:
            if f.end is None:
                f.end = now

    async def fault(self, kind: str, node: int | None = None) -> str:
        """Start one fault of ``kind`` (one of :data:`FAULT_KINDS`, or ``isolate-node`` with
        ``node``); returns what it did. A fault replaces the one before (heal first)."""
        nodes = list(self.addresses)
        self.bed.heal()
        self._close_faults()
        if kind in ("isolate-leader", "one-way-leader"):
            node = self.poller.leader(COORD, since=time.monotonic() - 1.5)
            if node is None:
                node = self.rng.choice(nodes)
        elif node is None:
            node = self.rng.choice(nodes)
        others = [n for n in nodes if n != node]
        if kind in ("isolate-leader", "isolate-node"):
            self.bed.set_drops(partition_pairs([[node], others]), f"{kind} {node}")
            what = f"node {node} isolated from {others}"
        elif kind == "one-way-leader":
            self.bed.set_drops({(o, node) for o in others}, f"{kind} {node}")
            what = f"node {node} receives nothing from {others} (it still sends)"
        elif kind == "bridge":
            a, b = others
            self.bed.set_drops(partition_pairs([[a], [b]]), f"bridge {node}")
            what = f"nodes {a} and {b} cut, node {node} sees both"
        elif kind == "loss":
            self.bed.set_loss(5)
            what = "5% loss"
        elif kind == "delay":
            self.bed.set_delay(100, 50)
            what = "100 ms +- 50 ms"
        elif kind == "link-down":
            self.bed.set_link(node, False)
            what = f"link of node {node} down"
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        self._open(kind, what)
        return what

    def heal(self) -> None:
        self.bed.heal()
        self._close_faults()

    # ------------------------------------------------------------------ end
    async def stop_load(self) -> None:
        self.stop.set()
        await asyncio.to_thread(self.poller.close)
        if self.tasks:
            done, pending = await asyncio.wait(self.tasks, timeout=15.0)
            for t in pending:
                t.cancel()
            for t in done:
                if not t.cancelled() and (exc := t.exception()) is not None:
                    raise exc

    async def abort(self) -> None:
        """Stop the workload whatever state it is in (for a ``finally``): the stop flag first,
        so a task that missed a cancellation still ends at its next step, then cancellation
        of what is left after 10 s; the pollers' threads (bounded joins)."""
        self.stop.set()
        await asyncio.to_thread(self.poller.close)
        for w in self.writers:
            w.aborted = True
        pending: Collection[asyncio.Task] = [t for t in self.tasks if not t.done()]
        if pending:
            _done, pending = await asyncio.wait(pending, timeout=10.0)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5.0)

    async def wait_states_equal(self, timeout: float = 30.0) -> list[str]:
        """Poll every node's SQLite state until all are equal row by row; the differences
        left after ``timeout`` s (empty: equal)."""
        deadline = time.monotonic() + timeout
        while True:
            states = {i: n.state_rows() for i, n in self.cluster.nodes.items()}
            ref_node = min(states)
            ref = states[ref_node]
            diffs = []
            for i, s in states.items():
                if s is None or ref is None:
                    diffs.append(f"node {i} has no coordinator state")
                    continue
                for table in sorted(set(ref) | set(s)):
                    a, b = ref.get(table), s.get(table)
                    if a != b:
                        first = _first_diff(a or [], b or [])
                        diffs.append(
                            f"table {table}: node {i} has {len(b or [])} rows, node {ref_node} "
                            f"{len(a or [])} (first differing: {first})"
                        )
            if not diffs or time.monotonic() > deadline:
                return diffs
            await asyncio.sleep(0.25)

    async def finish(self) -> Outcome:
        """Heal, let the load run on a little, stop it, wait for convergence, read the final
        state and check everything (module docstring)."""
        self.heal()
        self.bed.note("finish: healed")
        leader = await self.coordinator_leader(timeout=30.0)
        with contextlib.suppress(AssertionError):
            await self.wait_commits(time.monotonic(), 3, timeout=10.0)
        await self.stop_load()
        self.bed.note("load stopped")
        leader = await self.coordinator_leader(timeout=30.0)
        state_problems = await self.wait_states_equal()
        final = await final_state(self.addresses[leader], self.topic_id,
                                  list(range(self.partitions)))  # fmt: skip
        dump_history(self.rec.ops, self.root / "history.jsonl")
        with (self.root / "quorum.jsonl").open("w") as f:
            for o in self.poller.observations:
                f.write(json.dumps(dataclasses.asdict(o)) + "\n")
        history = check(self.rec.ops, final)
        leaders = check_leaders(self.poller.observations)
        log_problems: list[str] = []
        deadline = time.monotonic() + 15.0
        while True:
            log_problems = []
            for log in (META, COORD):
                end = self.poller.max_high_watermark(log)
                dirs = {i: n.log_dir(log) for i, n in self.cluster.nodes.items()}
                log_problems += [f"{log}: {p}" for p in compare_logs(dirs, end)]
            if not log_problems or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        self.outcome = Outcome(history, leaders, log_problems, state_problems, leader, final)
        return self.outcome

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for op in self.rec.ops:
            out[f"{op.kind}_{op.outcome}"] += 1
        return dict(out)

    def report(self) -> str:
        """The fault schedule, the outcome's problems with their operations, and every node's
        log tail."""
        parts = ["== fault schedule (seconds since the run started) ==",
                 self.bed.schedule_text(self.t0)]  # fmt: skip
        parts += [
            f"   fault {f.kind}: {f.detail} from +{f.start - self.t0:.3f}s"
            + (f" to +{f.end - self.t0:.3f}s" if f.end else "")
            for f in self.faults
        ]
        parts += self.notes + self.poller.errors
        parts.append(f"== operations: {self.counts()} ==")
        o = self.outcome
        if o is not None:
            parts.append(o.history.report(self.rec.ops))
            if not o.leaders.ok:
                parts.append(o.leaders.report())
            parts += [f"raft log: {p}" for p in o.log_problems[:20]]
            parts += [f"state: {p}" for p in o.state_problems[:20]]
        parts.append("== node logs ==")
        parts.append(self.cluster.tails())
        return "\n".join(parts)


def _first_diff(a: list, b: list):
    for x, y in zip(a, b, strict=False):
        if x != y:
            return (x, y)
    return (a[len(b) : len(b) + 1], b[len(a) : len(a) + 1])


def random_schedule(rng: random.Random, seconds: float, kinds=FAULT_KINDS,
                    fault_s=(2.0, 8.0), calm_s=(2.0, 5.0)) -> list[tuple[float, str]]:  # fmt: skip
    """A fault schedule for ``seconds``: ``(offset s, kind)`` steps, each fault lasting
    ``fault_s`` (uniform) and followed by ``calm_s`` of healed network (``kind`` ``heal``)."""
    out, t = [], rng.uniform(*calm_s)
    while t < seconds:
        out.append((t, rng.choice(kinds)))
        t += rng.uniform(*fault_s)
        out.append((min(t, seconds), "heal"))
        t += rng.uniform(*calm_s)
    return out
