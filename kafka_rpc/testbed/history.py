"""A Jepsen-style history of Batch Coordinator operations, and its checker.

A client of the Batch Coordinator records every operation it makes as an :class:`Op`: when it was
invoked and when it completed (``time.monotonic()`` seconds, one clock for the whole history),
which node answered, and its outcome:

* ``ok``: the operation took effect as answered (a CommitBatches entry was acknowledged with its
  offsets; a read returned);
* ``fail``: it certainly did not take effect (the request was never sent: connection refused;
  or an error that rejects the entry before anything is written);
* ``info``: indeterminate -- a timeout, a lost connection, NOT_COORDINATOR from a leader that lost
  its epoch before the record committed (it may still commit). It may or may
  not have taken effect.

A write is a CommitBatches request of one object (:class:`Entry` per batch). An entry is named by
its ``key``, the batch's identity: for an idempotent producer's batch its partition, producer id,
producer epoch and base sequence (``<tp>/<producer id>/<epoch>/<base sequence>``). A retry of an
indeterminate request carries the same batches in a new object (a known object key is rejected)
with the same sequences, so every attempt of one logical batch has the same key and several ops
may share it; the coordinator answers a retry of a committed batch IsDuplicate with its offsets.
A read is a FindDisklessBatches (or ListDisklessOffsets) answer per topic-partition
(:class:`Read`): its high watermark and the batches it returned.

After the faults heal, the final state of every partition is read on the leader
(:class:`FinalPartition`: log start offset, high watermark and every batch, in offset order), and
:func:`check` decides whether the history is one the Batch Coordinator may produce. The rules
(each a :class:`Violation` ``rule`` name):

``acknowledged-once``
    every acknowledged entry is in the final state exactly once, at the offsets it was given
    (``AssignedBaseOffset`` .. ``+ records - 1``); a key found twice is a duplicate whatever its
    ops' outcomes.
``no-gaps``
    each partition's final batches cover ``[log start offset, high watermark)`` with no gap and no
    overlap.
``no-phantoms``
    every final batch was written by some operation of the history.
``realtime-order``
    if commit A completed before commit B was invoked (same partition), A's offsets are lower
    (linearizability of the offset assignment; B may be ok or indeterminate and present).
``indeterminate-all-or-nothing``
    an ``info`` commit whose key no other op acknowledged is either wholly present (every entry of
    the request: one CommitBatches on one coordinator partition is one record) or wholly absent.
``failed-absent``
    an entry whose every op failed is absent.
``read-not-lost``
    every batch a read saw is in the final state at the same offsets, and no read's high watermark
    is above the final one.
``hwm-bounded``
    a coordinator's high watermark (a read-only one's in particular: a follower never reports more
    than the leader committed) never exceeds what could have been committed when the read
    completed: every final batch below it was invoked by then.
``monotonic-reads``
    for one client (reading one node) and one partition the high watermark never goes back.

:func:`check_leaders` checks the Raft side: at most one leader per epoch and log, from
DescribeQuorum observations (:class:`LeaderObservation`). Both return a :class:`CheckResult`.

Times are seconds (float, monotonic). ``base_offset`` and ``last_offset`` are inclusive; a
``high_watermark`` is exclusive (the next offset), as in Kafka; ``log_start_offset`` is the first
offset kept.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

__all__ = [
    "FAIL",
    "INFO",
    "OK",
    "RULES",
    "CheckResult",
    "Entry",
    "FinalPartition",
    "LeaderObservation",
    "Op",
    "Read",
    "Violation",
    "check",
    "check_leaders",
    "dump_history",
    "load_history",
]

OK, FAIL, INFO = "ok", "fail", "info"
RULES = (
    "acknowledged-once",
    "no-gaps",
    "no-phantoms",
    "realtime-order",
    "indeterminate-all-or-nothing",
    "failed-absent",
    "read-not-lost",
    "hwm-bounded",
    "monotonic-reads",
    "one-leader-per-epoch",
)


@dataclass
class Entry:
    """One batch of a CommitBatches request: ``tp`` (``<topic id>:<partition>``), ``records``
    (its record count), ``key`` (its identity, module docstring), the producer fields, and the
    answer: ``base_offset`` (AssignedBaseOffset, -1 unless acknowledged), ``error`` (its error
    code), ``duplicate`` (IsDuplicate)."""

    tp: str
    key: str
    records: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    base_offset: int = -1
    error: int = 0
    duplicate: bool = False

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.records - 1


@dataclass
class Read:
    """A read's answer for one partition: ``high_watermark`` (exclusive) and the batches
    returned, each ``[base offset, last offset, key]``."""

    tp: str
    high_watermark: int
    batches: list[list] = field(default_factory=list)


@dataclass
class Op:
    """One client operation (module docstring). ``kind`` is ``commit`` or ``read``;
    ``process`` the client that made it (one client makes one operation at a time); ``node``
    the node it was sent to; ``role`` what the client took that node for (``leader`` for the
    write coordinator found with FindCoordinator ``write:``, ``follower`` for a read-only
    coordinator); ``complete`` None while pending (then it is indeterminate)."""

    index: int
    process: str
    kind: str
    invoke: float
    complete: float | None = None
    outcome: str = INFO
    node: int | None = None
    role: str | None = None
    entries: list[Entry] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Op:
        d = json.loads(text)
        d["entries"] = [Entry(**e) for e in d.get("entries", [])]
        d["reads"] = [Read(**r) for r in d.get("reads", [])]
        return cls(**d)


@dataclass
class FinalPartition:
    """A partition's state read on the leader after the heal: ``log_start_offset``,
    ``high_watermark`` (exclusive) and every batch ``[base offset, last offset, key]`` in
    offset order."""

    log_start_offset: int
    high_watermark: int
    batches: list[list] = field(default_factory=list)


@dataclass
class LeaderObservation:
    """What a node said in one DescribeQuorum answer: ``log`` (``__cluster_metadata`` or
    ``__diskless-metadata``), ``observer`` the node asked, its ``epoch`` and the ``leader_id``
    it names (-1: none), ``is_leader`` when it answered as the leader (error 0), ``t`` the
    monotonic time of the answer."""

    t: float
    log: str
    observer: int
    epoch: int
    leader_id: int
    is_leader: bool
    high_watermark: int = -1


@dataclass
class Violation:
    rule: str
    message: str
    ops: list[int] = field(default_factory=list)


@dataclass
class CheckResult:
    """``violations`` (empty when the history is valid) and counts of the ops by kind and
    outcome (``commit_ok``, ``commit_fail``, ``commit_info``, ``read_ok``, ...)."""

    violations: list[Violation]
    counts: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations

    def rules_broken(self) -> set[str]:
        return {v.rule for v in self.violations}

    def report(self, history: Sequence[Op] = (), limit: int = 20) -> str:
        """The violations (at most ``limit``), each followed by its ops from ``history``."""
        if self.ok:
            return "history valid: " + json.dumps(self.counts, sort_keys=True)
        by_index = {op.index: op for op in history}
        lines = [f"{len(self.violations)} violation(s); ops {json.dumps(self.counts)}"]
        for v in self.violations[:limit]:
            lines.append(f"[{v.rule}] {v.message}")
            for i in v.ops[:6]:
                if i in by_index:
                    lines.append("    " + by_index[i].to_json())
        if len(self.violations) > limit:
            lines.append(f"... {len(self.violations) - limit} more")
        return "\n".join(lines)


def dump_history(ops: Iterable[Op], path) -> None:
    """Write ``ops`` as JSON lines to ``path``."""
    with open(path, "w") as f:
        for op in ops:
            f.write(op.to_json() + "\n")


def load_history(path) -> list[Op]:
    with open(path) as f:
        return [Op.from_json(line) for line in f if line.strip()]


def _counts(history: Sequence[Op]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for op in history:
        out[f"{op.kind}_{op.outcome if op.complete is not None else INFO}"] += 1
    return dict(out)


def check(history: Sequence[Op], final: Mapping[str, FinalPartition]) -> CheckResult:
    """Check ``history`` against ``final`` (partition -> its final state) by every rule of the
    module docstring. Never raises for a bad history: each broken rule is a :class:`Violation`
    naming the ops involved (their ``index``)."""
    v: list[Violation] = []
    commits = [op for op in history if op.kind == "commit"]
    reads = [op for op in history if op.kind == "read" and op.outcome == OK]

    # every op of each key; the outcomes of a key
    ops_of: dict[str, list[Op]] = defaultdict(list)
    entry_of: dict[tuple[int, str], Entry] = {}
    for op in commits:
        for e in op.entries:
            ops_of[e.key].append(op)
            entry_of[(op.index, e.key)] = e

    # final batches by key (a key twice is a duplicate)
    found: dict[str, list[tuple[str, int, int]]] = defaultdict(list)
    for tp, part in final.items():
        for base, last, key in part.batches:
            found[key].append((tp, base, last))

    # acknowledged-once
    for key, ops in ops_of.items():
        acked = [(op, entry_of[(op.index, key)]) for op in ops
                 if op.outcome == OK and entry_of[(op.index, key)].error == 0]  # fmt: skip
        where = found.get(key, [])
        if len(where) > 1:
            v.append(Violation("acknowledged-once",
                               f"{key} is in the final state {len(where)} times: {where}",
                               [op.index for op in ops]))  # fmt: skip
            continue
        for op, e in acked:
            if not where:
                v.append(Violation("acknowledged-once",
                                   f"acknowledged {key} ({e.tp} offsets {e.base_offset}.."
                                   f"{e.last_offset}) is lost", [op.index]))  # fmt: skip
                break
            tp, base, last = where[0]
            if (tp, base, last) != (e.tp, e.base_offset, e.last_offset):
                v.append(Violation("acknowledged-once",
                                   f"{key} acknowledged at {e.tp} {e.base_offset}..{e.last_offset}"
                                   f" but found at {tp} {base}..{last}", [op.index]))  # fmt: skip
                break

    # no-gaps, no-phantoms
    for tp, part in sorted(final.items()):
        expect = part.log_start_offset
        for base, last, key in part.batches:
            if base > expect:
                v.append(Violation("no-gaps", f"{tp}: offsets {expect}..{base - 1} are missing "
                                   f"(next batch {key} at {base})"))  # fmt: skip
            elif base < expect:
                v.append(Violation("no-gaps", f"{tp}: batch {key} at {base}..{last} overlaps "
                                   f"the one before it (which ends at {expect - 1})"))  # fmt: skip
            expect = max(expect, last + 1)
            if key not in ops_of:
                v.append(Violation("no-phantoms", f"{tp}: batch {key} at {base}..{last} was "
                                   "written by no operation"))  # fmt: skip
        if expect != part.high_watermark:
            v.append(Violation("no-gaps", f"{tp}: the batches end at {expect} but the high "
                               f"watermark is {part.high_watermark}"))  # fmt: skip

    # indeterminate-all-or-nothing, failed-absent
    for op in commits:
        if op.outcome == OK or not op.entries:
            continue
        keys = [e.key for e in op.entries]
        if op.outcome == FAIL:
            for key in keys:
                if key in found and all(o.outcome == FAIL for o in ops_of[key]):
                    v.append(Violation("failed-absent", f"{key} failed in every attempt but is "
                                       f"in the final state at {found[key][0]}",
                                       [o.index for o in ops_of[key]]))  # fmt: skip
            continue
        present = [k for k in keys if k in found]
        if present and len(present) != len(keys):
            missing = [k for k in keys if k not in found]
            v.append(Violation("indeterminate-all-or-nothing",
                               f"op {op.index} is partly committed: {present} present, "
                               f"{missing} absent", [op.index]))  # fmt: skip

    # realtime-order: per partition, A completed ok before B invoked => A.last < B.base
    placed: dict[str, list[tuple[float, float, int, int, int]]] = defaultdict(list)
    for key, where in found.items():
        if len(where) != 1 or key not in ops_of:
            continue
        tp, base, last = where[0]
        ops = ops_of[key]
        first_invoke = min(o.invoke for o in ops)
        acked_at = [o.complete for o in ops if o.outcome == OK and o.complete is not None]
        done = min(acked_at) if acked_at else float("inf")
        placed[tp].append((first_invoke, done, base, last, ops[0].index))
    for tp, items in placed.items():
        by_done = sorted(items, key=lambda x: x[1])
        by_invoke = sorted(items, key=lambda x: x[0])
        i, best = 0, None  # best: the completed batch with the highest last offset so far
        for inv, _done, base, _last, idx in by_invoke:
            while i < len(by_done) and by_done[i][1] < inv:
                if best is None or by_done[i][3] > best[3]:
                    best = by_done[i]
                i += 1
            if best is not None and best[3] >= base:
                v.append(Violation("realtime-order",
                                   f"{tp}: a commit completed at {best[1]:.3f} with offsets "
                                   f"{best[2]}..{best[3]} before one invoked at {inv:.3f} was "
                                   f"given the lower offset {base}", [best[4], idx]))  # fmt: skip

    # read-not-lost, hwm-bounded, monotonic-reads
    final_at: dict[str, dict[int, tuple[int, str]]] = {
        tp: {b: (last, key) for b, last, key in part.batches} for tp, part in final.items()
    }
    # per partition: batch bases in offset order and the running max of their first invoke
    bounds: dict[str, tuple[list[int], list[float]]] = {}
    for tp, part in final.items():
        bases, pmax, m = [], [], float("-inf")
        for base, _last, key in part.batches:
            key_ops = ops_of.get(key)
            first = min(o.invoke for o in key_ops) if key_ops else float("-inf")
            m = max(m, first)
            bases.append(base)
            pmax.append(m)
        bounds[tp] = (bases, pmax)
    last_hwm: dict[tuple[str, str], tuple[int, int]] = {}
    for op in sorted(reads, key=lambda o: o.invoke):
        for r in op.reads:
            fpart = final.get(r.tp)
            if fpart is None:
                continue
            for base, last, key in r.batches:
                if final_at[r.tp].get(base) != (last, key):
                    v.append(Violation("read-not-lost",
                                       f"{r.tp}: a read from node {op.node} saw {key} at "
                                       f"{base}..{last}, final state has "
                                       f"{final_at[r.tp].get(base)} there",
                                       [op.index]))  # fmt: skip
            if r.high_watermark > fpart.high_watermark:
                v.append(Violation("read-not-lost",
                                   f"{r.tp}: a read from node {op.node} saw high watermark "
                                   f"{r.high_watermark}, above the final {fpart.high_watermark}",
                                   [op.index]))  # fmt: skip
            bases, pmax = bounds[r.tp]
            i = bisect.bisect_left(bases, r.high_watermark) - 1
            if i >= 0 and op.complete is not None and pmax[i] > op.complete:
                v.append(Violation("hwm-bounded",
                                   f"{r.tp}: node {op.node} ({op.role}) reported high watermark "
                                   f"{r.high_watermark} at {op.complete:.3f}, but a batch below "
                                   f"it was first invoked at {pmax[i]:.3f}",
                                   [op.index]))  # fmt: skip
            k = (op.process, r.tp)
            prev = last_hwm.get(k)
            if prev is not None and r.high_watermark < prev[0]:
                v.append(Violation("monotonic-reads",
                                   f"{r.tp}: client {op.process} read high watermark "
                                   f"{r.high_watermark} after {prev[0]}",
                                   [prev[1], op.index]))  # fmt: skip
            if prev is None or r.high_watermark >= prev[0]:
                last_hwm[k] = (r.high_watermark, op.index)
    return CheckResult(v, _counts(history))


def check_leaders(observations: Iterable[LeaderObservation]) -> CheckResult:
    """Raft's election safety from DescribeQuorum answers: per log and epoch at most one node
    answered as the leader, and every node that named a leader for an epoch named that one
    (rule ``one-leader-per-epoch``)."""
    leaders: dict[tuple[str, int], dict[int, list[LeaderObservation]]] = defaultdict(
        lambda: defaultdict(list)
    )
    n = 0
    for o in observations:
        n += 1
        if o.leader_id >= 0 and o.epoch >= 0:
            leaders[(o.log, o.epoch)][o.leader_id].append(o)
    v = []
    for (log, epoch), by in sorted(leaders.items()):
        if len(by) > 1:
            who = {lid: sorted({o.observer for o in obs}) for lid, obs in by.items()}
            msg = f"{log} epoch {epoch}: leaders {sorted(by)} (named by {who})"
            v.append(Violation("one-leader-per-epoch", msg))
    return CheckResult(v, {"observations": n, "epochs": len(leaders)})
