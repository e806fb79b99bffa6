"""Dynamic quorums (KIP-853) in the simulator. First its checkers on hand-made histories: the
voter set at an offset agrees between replicas (:func:`check_voter_sets_agree`, from each
replica's log and snapshots), and a leader appends a VotersRecord only once the previous one is
committed (:func:`check_one_voter_change`, from the appends :class:`RecordingLog` records).

Each checker is shown a correct history (no problem) and the histories a broken rule leaves
behind (a problem naming the offset), so that neither can pass by never objecting. Then seeded
runs of voter changes (grow 1 -> 3, shrink 3 -> 2, replace a voter's disk, remove the leader,
churn) under drops, delays, partitions and crashes, and a core with each rule broken (two
changes in flight, a removed voter counted in the majority, a snapshot with the wrong voter set,
voter sets kept after a truncation), which the named checker must catch.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import encode_batch, encode_control_batch
from kafka_rpc.raft import core as raft_core
from kafka_rpc.raft.api import OffsetAndEpoch
from tests.raft.simulation import (
    KAFKA_RULE_GAPS,
    KRAFT_VERSION_TYPE,
    KRAFT_VOTERS_TYPE,
    LEADER_CHANGE_TYPE,
    PROSPECTIVE_LOSS,
    InvariantViolation,
    RecordingLog,
    VoterAppend,
    check_one_voter_change,
    check_voter_sets_agree,
    run_seed,
    voter_appends,
    voter_members,
    voter_view,
)

Voters = codec.module("VotersRecord")
KRaft = codec.message_class("KRaftVersionRecord")
LeaderChange = codec.module("LeaderChangeMessage")
SnapHeader = codec.message_class("SnapshotHeaderRecord")
SnapFooter = codec.message_class("SnapshotFooterRecord")
SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 3, 4


def dir_of(i: int, gen: int = 0) -> uuid.UUID:
    return uuid.UUID(int=(1 << 100) | (gen << 32) | i)


def voters_body(*ids: int, dirs: dict[int, uuid.UUID] | None = None, port: int = 9000) -> bytes:
    dirs = dirs or {}
    rec = Voters.VotersRecord(version=0, voters=tuple(
        Voters.Voter(voter_id=i, voter_directory_id=dirs.get(i, dir_of(i)),
                     endpoints=(Voters.Endpoint(name="CONTROLLER", host="127.0.0.1",
                                                port=port + i),),
                     kraft_version_feature=Voters.KRaftVersionFeature(
                         min_supported_version=0, max_supported_version=1))
        for i in ids))  # fmt: skip
    return codec.encode(rec, 0)


def kraft_body(level: int = 1) -> bytes:
    return codec.encode(KRaft(version=0, kraft_version=level), 0)


def leader_change_body(leader: int) -> bytes:
    return codec.encode(LeaderChange.LeaderChangeMessage(version=0, leader_id=leader), 0)


def data(log, epoch: int, n: int = 1) -> None:
    log.append([encode_batch(log.end_offset, epoch, [b"x"] * n, 0)])


def voters_batch(log, epoch: int, *ids: int, **kw) -> int:
    """Append a batch holding one VotersRecord; returns its offset."""
    off = log.end_offset
    log.append([encode_control_batch(off, epoch, [(KRAFT_VOTERS_TYPE, voters_body(*ids, **kw))],
                                     0)])  # fmt: skip
    return off


def start_of_epoch(log, epoch: int, leader: int, *ids: int, **kw) -> int:
    """The batch a new leader of a dynamic quorum opens its epoch with: LeaderChange,
    KRaftVersionRecord 1, VotersRecord; returns the VotersRecord's offset."""
    off = log.end_offset
    log.append([encode_control_batch(off, epoch, [
        (LEADER_CHANGE_TYPE, leader_change_body(leader)), (KRAFT_VERSION_TYPE, kraft_body()),
        (KRAFT_VOTERS_TYPE, voters_body(*ids, **kw))], 0)])  # fmt: skip
    return off + 2


def snapshot(log, offset: int, epoch: int, *ids: int, kraft: int = 1, **kw) -> None:
    """Freeze snapshot ``(offset, epoch)`` whose header batch holds the given voter set (as
    Kafka's ``RecordsSnapshotWriter`` writes it), then a data record and the footer."""
    w = log.create_snapshot(OffsetAndEpoch(offset, epoch))
    head = [(SNAPSHOT_HEADER, codec.encode(SnapHeader(version=0), 0)),
            (KRAFT_VERSION_TYPE, kraft_body(kraft)),
            (KRAFT_VOTERS_TYPE, voters_body(*ids, **kw))]  # fmt: skip
    w.append(encode_control_batch(0, epoch, head, 0).data)
    w.append(encode_batch(3, epoch, [b"state"], 0).data)
    w.append(encode_control_batch(4, epoch, [(SNAPSHOT_FOOTER, codec.encode(SnapFooter(), 0))],
                                  0).data)  # fmt: skip
    w.freeze()


def bootstrapped(*ids: int, **kw) -> RecordingLog:
    """A log formatted with ``--initial-controllers``: the 0-0 bootstrap checkpoint."""
    log = RecordingLog()
    snapshot(log, 0, 0, *ids, **kw)
    return log


def history(log, epoch: int = 1, leader: int = 1) -> RecordingLog:
    """A 3-voter dynamic quorum's log: start of epoch 1, data, add voter 4 at epoch 1, data."""
    start_of_epoch(log, epoch, leader, 1, 2, 3)  # offsets 0-2
    data(log, epoch, 3)  # 3-5
    voters_batch(log, epoch, 1, 2, 3, 4)  # 6
    data(log, epoch, 3)  # 7-9
    return log


def views(**logs):
    return [voter_view(log, name) for name, log in logs.items()]


# --------------------------------------------------------------------------- the voter view


def test_view_registers_records_at_their_offsets_and_snapshots_at_their_last_offset():
    log = history(bootstrapped(1, 2, 3))
    v = voter_view(log, "n1")
    assert sorted(v.voters) == [-1, 2, 6]
    assert voter_members(v.voters_at(-1)) == voter_members(v.voters_at(5))
    assert {i for i, _ in voter_members(v.voters_at(6))} == {1, 2, 3, 4}
    assert v.kraft_at(-1) == 1 and v.kraft_at(9) == 1
    assert (v.low, v.end) == (-1, 10)
    assert v.epoch_at(-1) == 0 and v.epoch_at(6) == 1 and v.epoch_at(10) is None
    assert v.latest()[0] == 6
    assert v.problems == []


def test_view_of_a_log_past_its_snapshot_starts_at_the_snapshot():
    log = history(bootstrapped(1, 2, 3))
    snapshot(log, 8, 1, 1, 2, 3, 4)
    assert log.delete_before_snapshot(OffsetAndEpoch(8, 1))
    v = voter_view(log, "n1")
    assert (v.low, sorted(v.voters)) == (7, [7])
    assert v.epoch_at(7) == 1 and v.epoch_at(6) is None
    assert v.problems == []


# --------------------------------------------------------------------------- (d) voter sets agree


def test_identical_logs_agree():
    assert check_voter_sets_agree(views(a=history(bootstrapped(1, 2, 3)),
                                        b=history(bootstrapped(1, 2, 3)))) == []  # fmt: skip


def test_an_observer_without_the_bootstrap_checkpoint_agrees_once_it_replicated():
    voter = history(bootstrapped(1, 2, 3))
    observer = history(RecordingLog())  # formatted with --no-initial-controllers
    assert check_voter_sets_agree(views(voter=voter, observer=observer)) == []


def test_uncommitted_divergent_changes_in_different_epochs_agree():
    """Leader 1 of epoch 1 appended an add that never committed; leader 2 of epoch 2 wrote data
    at that offset instead: the logs differ there in epoch, so nothing is compared."""
    a = bootstrapped(1, 2, 3)
    start_of_epoch(a, 1, 1, 1, 2, 3)
    data(a, 1, 3)
    b = bootstrapped(1, 2, 3)
    b.append(list(a.batches(0, a.end_offset)))
    voters_batch(a, 1, 1, 2, 3, 4)  # offset 6, epoch 1, uncommitted
    start_of_epoch(b, 2, 2, 1, 2, 3)  # offsets 6-8, epoch 2
    voters_batch(b, 2, 1, 2, 3, 5)  # offset 9: a different change, epoch 2
    assert check_voter_sets_agree(views(a=a, b=b)) == []


def test_same_epoch_different_voters_is_caught():
    """Log matching broken on purpose: the same epoch at offset 6, different voters."""
    a = history(bootstrapped(1, 2, 3))
    b = bootstrapped(1, 2, 3)
    start_of_epoch(b, 1, 1, 1, 2, 3)
    data(b, 1, 3)
    voters_batch(b, 1, 1, 2, 3, 5)
    data(b, 1, 3)
    problems = check_voter_sets_agree(views(a=a, b=b))
    assert len(problems) == 1 and problems[0].startswith("offset 6 (epoch 1)")


def test_differently_formatted_bootstrap_checkpoints_are_caught():
    """Broken: the nodes were formatted with different --initial-controllers."""
    problems = check_voter_sets_agree(views(a=history(bootstrapped(1, 2, 3)),
                                            b=history(bootstrapped(1, 2, 4))))  # fmt: skip
    assert problems and problems[0].startswith("offset -1 (epoch 0)")


def test_a_snapshot_holding_the_latest_voter_set_instead_of_the_one_at_its_offset_is_caught():
    """Broken rule: the snapshot at 6 (last contained offset 5) was written with the newest
    voter set (the add at 6, appended before the snapshot was taken) instead of the set at
    offset 5 (Kafka ``KafkaRaftClient.createSnapshot`` takes ``voterSetAtOffset``): a replica
    that loads it disagrees with one that replicated the log."""
    a = history(bootstrapped(1, 2, 3))
    b = RecordingLog()
    snapshot(b, 6, 1, 1, 2, 3, 4)  # wrong: {1, 2, 3} was in force at 5
    b.truncate_to_latest_snapshot()
    b.append(list(a.batches(6, a.end_offset)))
    problems = check_voter_sets_agree(views(a=a, b=b))
    assert problems and problems[0].startswith("offset 5 (epoch 1): a has voters")
    # the right snapshot agrees
    c = RecordingLog()
    snapshot(c, 6, 1, 1, 2, 3)
    c.truncate_to_latest_snapshot()
    c.append(list(a.batches(6, a.end_offset)))
    assert check_voter_sets_agree(views(a=a, c=c)) == []


def test_a_snapshot_disagreeing_with_its_own_log_is_caught():
    log = history(bootstrapped(1, 2, 3))
    snapshot(log, 6, 1, 1, 2, 3, 4)  # the log still holds offset 5: {1, 2, 3} there
    v = voter_view(log, "n1")
    assert len(v.problems) == 1 and "its log says" in v.problems[0]
    assert check_voter_sets_agree([v]) == v.problems


def test_a_kraft_version_disagreement_is_caught():
    a = history(bootstrapped(1, 2, 3))
    b = bootstrapped(1, 2, 3, kraft=0)
    problems = check_voter_sets_agree(views(a=a, b=history(b)))
    assert problems and "kraft.version" in problems[0]


# ------------------------------------------------------------------- (c) one change at a time


class Leader:
    """What the recorder reads of a leader: its epoch and high watermark."""

    def __init__(self, log: RecordingLog, epoch: int = 1, node: int = 1) -> None:
        self.epoch, self.node, self.hwm = epoch, node, -1
        self.appends: list[VoterAppend] = []
        log.on_append = self._record

    def _record(self, log, before, batches):
        self.appends += voter_appends(self.node, self.epoch, self.hwm, before, batches)


def test_changes_each_committed_before_the_next_pass():
    log = bootstrapped(1, 2, 3)
    leader = Leader(log)
    start_of_epoch(log, 1, 1, 1, 2, 3)  # prev: the bootstrap checkpoint, committed
    data(log, 1)
    leader.hwm = 4
    voters_batch(log, 1, 1, 2, 3, 4)  # 4: prev at 2 < hwm
    leader.hwm = 5
    voters_batch(log, 1, 1, 2, 3)  # 5: prev at 4 < hwm
    a = leader.appends
    assert [(x.offset, x.prev_offset, x.hwm) for x in a] == [(2, -1, -1), (4, 2, 4), (5, 4, 5)]
    assert a[0].start_of_epoch and a[0].prev_committed and not a[1].start_of_epoch
    assert check_one_voter_change(a) == []


def test_two_changes_in_flight_are_caught():
    """Broken rule: the second add is appended while the first is not below the high watermark
    (Kafka's pending-operation check removed)."""
    log = bootstrapped(1, 2, 3)
    leader = Leader(log)
    start_of_epoch(log, 1, 1, 1, 2, 3)
    data(log, 1)
    leader.hwm = 4
    voters_batch(log, 1, 1, 2, 3, 4)  # 4
    voters_batch(log, 1, 1, 2, 3, 4, 5)  # 5: the one at 4 is not committed (hwm 4)
    problems = check_one_voter_change(leader.appends)
    assert len(problems) == 1
    assert "VotersRecord at 5" in problems[0] and "the one at 4" in problems[0]


def test_two_voters_records_in_one_batch_are_caught():
    log = bootstrapped(1, 2, 3)
    leader = Leader(log)
    start_of_epoch(log, 1, 1, 1, 2, 3)
    leader.hwm = 3
    log.append([encode_control_batch(3, 1, [(KRAFT_VOTERS_TYPE, voters_body(1, 2, 3, 4)),
                                            (KRAFT_VOTERS_TYPE, voters_body(1, 2, 3, 4, 5))],
                                     0)])  # fmt: skip
    problems = check_one_voter_change(leader.appends)
    assert len(problems) == 1 and "VotersRecord at 4" in problems[0]


def test_a_start_of_epoch_restatement_over_an_uncommitted_change_passes_only_unchanged():
    """A new leader finds an uncommitted add from the last epoch and restates the set (its own
    endpoint changed): allowed, the membership is the same; one that also changes the
    membership is a second change in flight."""
    log = bootstrapped(1, 2, 3)
    old = Leader(log)
    start_of_epoch(log, 1, 1, 1, 2, 3)
    old.hwm = 3
    voters_batch(log, 1, 1, 2, 3, 4)  # 3, never committed in epoch 1
    new = Leader(log, epoch=2, node=2)
    start_of_epoch(log, 2, 2, 1, 2, 3, 4, port=7000)  # 6: new endpoints, same members
    assert check_one_voter_change(old.appends + new.appends) == []
    start_of_epoch(log, 3, 3, 1, 2, 3, port=7000)  # 9: epoch 3 drops voter 4 at once
    newer = new.appends[-1]
    assert newer.offset == 9 and newer.start_of_epoch
    problems = check_one_voter_change(new.appends)
    assert len(problems) == 1 and "VotersRecord at 9" in problems[0]


def test_a_change_after_a_snapshot_needs_no_high_watermark():
    """The set in force at a snapshot's last contained offset is committed."""
    log = RecordingLog()
    snapshot(log, 6, 1, 1, 2, 3)
    log.truncate_to_latest_snapshot()
    leader = Leader(log, epoch=2)
    voters_batch(log, 2, 1, 2, 3, 4)
    assert leader.appends[0].prev_committed
    assert check_one_voter_change(leader.appends) == []


def test_recording_skips_logs_without_voters_records():
    log = RecordingLog()
    seen = []
    log.on_append = lambda *a: seen.append(a)
    data(log, 1, 3)
    log.append([encode_control_batch(3, 1, [(LEADER_CHANGE_TYPE, leader_change_body(1))], 0)])
    assert seen == [] and log.end_offset == 4


# ============================================================================ seeded runs
# Dynamic quorums in the simulator (``SimConfig.dynamic``): voter changes under the fault mix
# of ``tests/raft/test_simulation.py`` (drops, delays, duplicates, partitions, crashes that lose
# unflushed writes), with every invariant checked after every event and at the end.

DYN = {"duration_ms": 12_000, "heal_ms": 10_000, "dynamic": True, "kafka_skip": KAFKA_RULE_GAPS}
SCENARIOS = {
    # 1 -> 3: two observers added at once (the second waits for the first: one change at a time)
    "grow": {"voters": 1, "observers": 2, "reconfig": ((2_000, "add", 2), (2_000, "add", 3))},
    "shrink": {"voters": 3, "reconfig": ((3_000, "remove", 3),)},
    # node 2 loses its disk, is formatted anew, its old directory is removed, the new added
    "replace": {"voters": 3,
                "reconfig": ((2_000, "wipe", 2), (2_500, "remove", 2, 0), (3_000, "add", 2))},
    "remove-leader": {"voters": 3, "reconfig": ((3_000, "remove_leader", 0),)},
    # add and remove a fourth node back and forth, the leader removed on the way, small
    # snapshots so the voter sets go through snapshots too
    "churn": {"voters": 3, "observers": 1, "snapshot_min_records": 10,
              "reconfig": ((2_000, "add", 4), (4_000, "remove", 4), (6_000, "add", 4),
                           (8_000, "remove_leader", 0), (10_000, "remove", 4))},
}  # fmt: skip


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def expected_voters(c, name):
    d = c.dir_gens
    if name == "grow":
        return [(i, d[i][0]) for i in (1, 2, 3)]
    if name == "shrink":
        return [(i, d[i][0]) for i in (1, 2)]
    if name == "replace":
        return [(1, d[1][0]), (2, d[2][1]), (3, d[3][0])]
    removed = c.changes[0].node
    return [(i, d[i][0]) for i in (1, 2, 3) if i != removed]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("name", ["grow", "shrink", "replace", "remove-leader"])
def test_voter_changes(name, seed):
    c = run_seed(40_000 + seed, **DYN, **SCENARIOS[name])
    assert all(op.done for op in c.changes), [(op.kind, op.node, op.answers) for op in c.changes]
    assert c.final_voters() == expected_voters(c, name)
    assert c.inv.voter_appends  # the checker of one change at a time saw them
    assert c.inv.max_committed > 0


@pytest.mark.parametrize("seed", range(8))
def test_voter_churn(seed):
    """Safety only: with the leader removed mid-way, liveness waits on a core fix
    (:func:`test_removed_leader_keeps_its_followers`)."""
    c = run_seed(41_000 + seed, **{**DYN, **SCENARIOS["churn"]})
    assert c.inv.max_committed > 0 and len(c.inv.voter_appends) >= 2


def test_dynamic_runs_replay():
    a = run_seed(40_003, **DYN, **SCENARIOS["replace"])
    b = run_seed(40_003, **DYN, **SCENARIOS["replace"])
    key = lambda c: (c.events, c.inv.max_committed, [op.answers for op in c.changes])  # noqa: E731
    assert key(a) == key(b)


@pytest.mark.xfail(strict=True, reason="core: a Prospective that loses its pre-election goes "
                   "Unattached when the leader it knew is no longer in its voter set, and never "
                   "fetches from that (removed, still leading) leader again")  # fmt: skip
def test_removed_leader_keeps_its_followers():
    """Kafka ``QuorumState.prospectiveTransitionAfterElectionLoss`` goes back to Follower of a
    leader whose endpoints it knows, so a voter left behind catches up and the removal of the
    leader commits; checked with that rule on and the churn seed where it shows."""
    c = run_seed(4, **{**DYN, "kafka_skip": KAFKA_RULE_GAPS - {PROSPECTIVE_LOSS}},
                 **SCENARIOS["churn"])  # fmt: skip
    assert all(op.done for op in c.changes)


@pytest.mark.xfail(strict=True, raises=InvariantViolation,
                   reason="core: the Kafka-rule gaps of KAFKA_RULE_GAPS")  # fmt: skip
def test_kafka_rule_gaps_are_still_open():
    """The gaps ``KAFKA_RULE_GAPS`` names show on these seeds with the checks on; when this
    test starts passing, shrink the set (and drop ``kafka_skip``)."""
    for seed in range(8):
        for name in ("shrink", "replace", "remove-leader"):
            run_seed(40_000 + seed, **{**DYN, "kafka_skip": frozenset()}, **SCENARIOS[name])


# --------------------------------------------------------------------------- broken rules


def _caught(factory, phrases, scenario, seeds=range(30), **kw) -> str:
    """Run dynamic seeds of ``scenario`` with a broken core until the checker named by
    ``phrases`` objects (see ``tests/raft/test_simulation.py``'s ``_caught``)."""
    others = []
    for seed in seeds:
        try:
            run_seed(seed, core_factory=factory, **{**DYN, **SCENARIOS[scenario], **kw})
        except InvariantViolation as e:
            msg = str(e)
            if any(p in msg for p in phrases):
                return msg
            others.append(msg)
    pytest.fail(f"no checker caught the broken rule in {len(seeds)} seeds ({others[:3]})")


class TwoChangesInFlight(raft_core.RaftCore):
    """Broken: Kafka's pending-operation check (``LeaderState.isOperationPending``) is gone: an
    AddRaftVoter is accepted while another waits for its ApiVersions answer, and each appends
    its VotersRecord when its answer comes."""

    def __init__(self, *a, **kw):
        self._more_ops = []
        super().__init__(*a, **kw)

    def _on_add_voter(self, now, version, req, reply):
        held, self._voter_op = self._voter_op, None
        try:
            return super()._on_add_voter(now, version, req, reply)
        finally:
            if held is not None:
                if self._voter_op is None:
                    self._voter_op = held
                else:
                    self._more_ops.append(held)

    def _on_api_versions_response(self, now, dest, resp):
        for op in self._more_ops:
            if op.probe == dest:
                self._more_ops.remove(op)
                cur, self._voter_op = self._voter_op, op
                try:
                    return super()._on_api_versions_response(now, dest, resp)
                finally:
                    self._voter_op = cur
        return super()._on_api_versions_response(now, dest, resp)


class CountsRemovedVoter(raft_core.RaftCore):
    """Broken: the high watermark is the majority of every voter this leader has had in its
    epoch, a removed voter's fetch offset counting as before."""

    def _update_high_watermark(self, now):
        if self.state != raft_core.LEADER:
            return
        ever = self.__dict__.setdefault("_ever", set())
        ever |= set(self.voters)
        self._replicas[self.node_id].end_offset = self.log.flushed_offset

        def end(v):
            rs = self._replicas.get(v)
            if rs is None:
                rs = next((r for (i, _d), r in self._observers.items() if i == v), None)
            return rs.end_offset if rs is not None else -1

        ends = sorted((end(v) for v in ever), reverse=True)
        candidate = ends[len(ever) // 2]
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            self._wake_parked(now, hw_changed=True)
            self._voter_op_committed(now)
            self._deliver(now)


class SnapshotsLatestVoters(raft_core.RaftCore):
    """Broken: a snapshot holds the newest voter set instead of the one in force at its last
    contained offset (Kafka ``createSnapshot`` takes ``voterSetAtOffset``)."""

    def create_snapshot(self, now, background=False):
        crs = self._crs
        crs.voter_set_at = lambda offset: crs.last_voter_set()
        try:
            return super().create_snapshot(now, background)
        finally:
            del crs.voter_set_at


class KeepsVotersOnTruncation(raft_core.RaftCore):
    """Broken: a follower truncating its log on a DivergingEpoch keeps the voter sets of the
    truncated records (Kafka ``truncateNewEntries`` is not called)."""

    def _truncate_voters(self, now, end):
        pass


def test_one_change_checker_catches_two_changes_in_flight():
    # both observers asked for again and again at the same moments, so that two adds meet
    ops = tuple((t, "add", i) for t in range(5_000, 12_000, 300) for i in (2, 3))
    msg = _caught(TwoChangesInFlight, ["was uncommitted"], "grow", reconfig=ops)
    assert "appended a VotersRecord" in msg


def test_high_watermark_checker_catches_a_removed_voter_counted():
    _caught(CountsRemovedVoter, ["acknowledged by", "committed entries are in the logs of"],
            "shrink")  # fmt: skip


def test_voter_set_checker_catches_a_snapshot_of_the_latest_voters():
    _caught(SnapshotsLatestVoters, ["its log says", "has voters", "works with voters"], "churn",
            snapshot_min_records=3)  # fmt: skip


def test_voter_set_checker_catches_voters_kept_after_truncation():
    _caught(KeepsVotersOnTruncation, ["works with voters", "has voters"], "churn",
            seeds=range(60))  # fmt: skip
