"""The history checker (``kafka_rpc.testbed.history``) checked: a valid history passes, and each
rule catches a history broken on purpose to break exactly that rule."""

from __future__ import annotations

import pytest

from kafka_rpc.testbed.history import (
    FAIL,
    INFO,
    OK,
    Entry,
    FinalPartition,
    LeaderObservation,
    Op,
    Read,
    check,
    check_leaders,
    dump_history,
    load_history,
)

TP = "t:0"
TP1 = "t:1"


class H:
    """A small history builder: commits and reads with explicit times."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def commit(self, t0, t1, entries, outcome=OK, process="w1", node=1):
        ents = [Entry(tp=tp, key=key, records=n, base_offset=b if outcome == OK else -1)
                for tp, key, n, b in entries]  # fmt: skip
        op = Op(len(self.ops), process, "commit", t0, t1, outcome, node, "leader", ents)
        self.ops.append(op)
        return op

    def read(self, t0, t1, tp, hwm, batches=(), process="r1", node=2, role="follower"):
        op = Op(len(self.ops), process, "read", t0, t1, OK, node, role,
                reads=[Read(tp, hwm, [list(b) for b in batches])])  # fmt: skip
        self.ops.append(op)
        return op


def valid() -> tuple[H, dict[str, FinalPartition]]:
    """Two writers on two partitions, an indeterminate commit present and one absent, a retried
    key, reads on a follower and the leader."""
    h = H()
    h.commit(0.0, 1.0, [(TP, "o1/0", 3, 0), (TP1, "o1/100", 2, 0)])
    h.commit(1.5, 2.0, [(TP, "o2/0", 2, 3)], process="w2")
    h.commit(2.1, 9.0, [(TP, "o3/0", 1, -1)], outcome=INFO)  # present (retried ok below)
    h.commit(9.1, 9.5, [(TP, "o3/0", 1, 5)])  # the retry: IsDuplicate, original offset
    h.commit(3.0, 4.0, [(TP1, "o4/0", 4, -1), (TP, "o4/9", 1, -1)], outcome=INFO)  # absent
    h.commit(4.0, 4.1, [(TP1, "o5/0", 1, -1)], outcome=FAIL)  # never sent, absent
    h.commit(5.0, 5.5, [(TP1, "o6/0", 1, 2)], process="w2")
    h.read(1.2, 1.3, TP, 3, [(0, 2, "o1/0")])
    h.read(2.2, 2.3, TP, 5, [(0, 2, "o1/0"), (3, 4, "o2/0")])
    h.read(9.6, 9.7, TP, 6, [(5, 5, "o3/0")], process="r2", node=1, role="leader")
    h.read(9.8, 9.9, TP1, 3)
    final = {
        TP: FinalPartition(0, 6, [[0, 2, "o1/0"], [3, 4, "o2/0"], [5, 5, "o3/0"]]),
        TP1: FinalPartition(0, 3, [[0, 1, "o1/100"], [2, 2, "o6/0"]]),
    }
    return h, final


def test_a_valid_history_passes(tmp_path):
    h, final = valid()
    result = check(h.ops, final)
    assert result.ok, result.report(h.ops)
    assert result.counts == {"commit_ok": 4, "commit_info": 2, "commit_fail": 1, "read_ok": 4}
    path = tmp_path / "history.jsonl"
    dump_history(h.ops, path)
    assert load_history(path) == h.ops


def broken(rule: str, h: H, final) -> None:
    result = check(h.ops, final)
    assert rule in result.rules_broken(), result.report(h.ops)
    assert result.rules_broken() == {rule}, result.report(h.ops)
    assert all(v.message for v in result.violations)


def test_acknowledged_entry_lost():
    h, final = valid()
    final[TP1].batches[1:] = []
    final[TP1].high_watermark = 2
    del h.ops[10]  # the read of TP1's high watermark 3 (read-not-lost would catch it too)
    broken("acknowledged-once", h, final)


def test_acknowledged_entry_at_other_offsets():
    h, final = valid()
    h.ops[1].entries[0].base_offset = 4  # acknowledged 4..5, stored 3..4
    broken("acknowledged-once", h, final)


def test_acknowledged_entry_twice():
    h, final = valid()
    final[TP1].batches.append([3, 3, "o6/0"])
    final[TP1].high_watermark = 4
    broken("acknowledged-once", h, final)


def test_gap_in_offsets():
    h, final = valid()
    final[TP].batches[2] = [6, 6, "o3/0"]  # 5 is missing; the ack said 5 too
    final[TP].high_watermark = 7
    h.ops[3].entries[0].base_offset = 6
    h.ops[9].reads[0] = Read(TP, 7, [[6, 6, "o3/0"]])
    broken("no-gaps", h, final)


def test_high_watermark_past_the_batches():
    h, final = valid()
    final[TP1].high_watermark = 4
    broken("no-gaps", h, final)


def test_phantom_batch():
    h, final = valid()
    final[TP1].batches.append([3, 3, "nobody/0"])
    final[TP1].high_watermark = 4
    broken("no-phantoms", h, final)


def test_later_commit_got_lower_offsets():
    h = H()
    h.commit(0.0, 1.0, [(TP, "a/0", 1, 1)])
    h.commit(2.0, 3.0, [(TP, "b/0", 1, 0)], process="w2")  # invoked after a's ack, offset lower
    final = {TP: FinalPartition(0, 2, [[0, 0, "b/0"], [1, 1, "a/0"]])}
    broken("realtime-order", h, final)
    # concurrent commits may be ordered either way
    h.ops[1].invoke = 0.5
    assert check(h.ops, final).ok


def test_indeterminate_commit_partly_present():
    h, final = valid()
    final[TP1].batches.append([3, 6, "o4/0"])  # o4/9 (on TP) stays absent
    final[TP1].high_watermark = 7
    broken("indeterminate-all-or-nothing", h, final)


def test_failed_commit_present():
    h, final = valid()
    final[TP1].batches.append([3, 3, "o5/0"])
    final[TP1].high_watermark = 4
    broken("failed-absent", h, final)


def test_read_saw_an_offset_later_lost():
    h, final = valid()
    h.read(9.0, 9.1, TP, 7, [(6, 6, "gone/0")], process="r3", node=3)
    broken("read-not-lost", h, final)


def test_read_saw_a_batch_that_moved():
    h, final = valid()
    h.read(9.0, 9.1, TP, 6, [(5, 5, "o2/0")], process="r3", node=3)
    broken("read-not-lost", h, final)


def test_follower_ahead_of_the_leader():
    h, final = valid()
    # at 2.15 only o1, o2 and the just-invoked o3 could be committed: hwm 6 is fine then ...
    h.read(2.12, 2.15, TP, 6, process="r3")
    assert check(h.ops, final).ok
    # ... but not before o3 (offset 5) was even invoked
    h.read(1.9, 2.05, TP, 6, process="r4")
    broken("hwm-bounded", h, final)


def test_reads_go_back():
    h, final = valid()
    h.read(3.0, 3.1, TP, 3, process="r1")  # r1 saw 5 at 2.3
    broken("monotonic-reads", h, final)
    # another client may lag behind
    h.ops[-1].process = "r9"
    assert check(h.ops, final).ok


def test_two_leaders_in_one_epoch():
    obs = [
        LeaderObservation(1.0, "__diskless-metadata", 1, 3, 1, True),
        LeaderObservation(1.1, "__diskless-metadata", 2, 3, 1, False),
        LeaderObservation(1.2, "__cluster_metadata", 2, 3, 2, True),  # other log: fine
        LeaderObservation(2.0, "__diskless-metadata", 3, 4, 3, True),
    ]
    assert check_leaders(obs).ok
    obs.append(LeaderObservation(2.1, "__diskless-metadata", 2, 4, 2, True))
    r = check_leaders(obs)
    assert r.rules_broken() == {"one-leader-per-epoch"}, r.violations


@pytest.mark.parametrize("n", [2000])
def test_a_large_valid_history_passes(n):
    """A history of the soak's kind at scale (thousands of commits by four writers, each read
    back at once) breaks no rule. How long the check takes is a benchmark's question, not a
    unit test's."""
    h = H()
    batches = []
    for i in range(n):
        h.commit(i, i + 0.5, [(TP, f"k{i}/0", 1, i)], process=f"w{i % 4}")
        h.read(i + 0.6, i + 0.7, TP, i + 1, [(i, i, f"k{i}/0")], process="r1")
        batches.append([i, i, f"k{i}/0"])
    result = check(h.ops, {TP: FinalPartition(0, n, batches)})
    assert result.ok, result.report(h.ops)
