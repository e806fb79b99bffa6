"""The seeded cluster simulation (``tests/raft/simulation.py``) in CI: 300 seeds of 3 voters,
5 voters with observers, and codec-encoded messages, each through drops, delays, duplicates,
partitions and crashes that lose unflushed writes, plus a few seeds of each Kafka scenario
(Kafka 4.4's negotiated versions on the wire, Fetch answers cut inside a batch, different
listener names, churn); ``bench/raft_simulation.py`` runs 10,000 of the mix.

Each invariant checker, and each Kafka rule of ``KafkaRules``, is also run against a core with
that rule deliberately broken (the old behaviour, where there was one), and must catch it: a
checker that cannot fail proves nothing.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest

from kafka_rpc.protocol.record_batch import decode_batches
from kafka_rpc.raft import base as raft_base
from kafka_rpc.raft import core as raft_core
from kafka_rpc.raft.api import OffsetAndEpoch
from kafka_rpc.raft.core import LEADER, RaftCore
from tests.raft.simulation import InvariantViolation, SimConfig, run_seed

SHORT = {"duration_ms": 15_000, "heal_ms": 10_000}


@pytest.fixture(autouse=True)
def _quiet():
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


@pytest.mark.parametrize("seed", range(200))
def test_three_voters(seed):
    c = run_seed(seed, **SHORT)
    assert c.inv.max_committed > 0


@pytest.mark.parametrize("seed", range(60))
def test_five_voters_two_observers(seed):
    c = run_seed(10_000 + seed, voters=5, observers=2, **SHORT)
    # observers replicate too: each one's state machine reached the leader's committed data
    leader = next(n for n in c.nodes.values() if n.core is not None and n.core.is_leader)
    assert leader.core.committed_offset > 0


@pytest.mark.parametrize("seed", range(40))
def test_wire_encoded(seed):
    run_seed(20_000 + seed, wire=True, observers=1, **SHORT)


#: Kafka-side scenarios (see ``bench/raft_simulation.py``'s mix): a Resigned or a Prospective
#: voter meets pre-votes and votes often under churn.
CHURN = {
    "voters": 5, "crash_every_ms": 1000, "down_ms": (100, 800), "drop": 0.2, "duplicate": 0.3,
    "max_delay_ms": 200,
}  # fmt: skip
SLICED = {"slice_fetch": 1.0, "followers_converge": True}
KAFKA_WIRE = {"wire": True, "kafka_versions": True, "observers": 1, "update_voter": True}


@pytest.mark.parametrize(
    "kw",
    [KAFKA_WIRE, SLICED, {"listener_names": True}, CHURN,
     {"voters": 5, "observers": 2, "slice_fetch": 0.3, "followers_converge": True},
     {"transactions": 0.3}],
    ids=["kafka-versions-wire", "sliced-fetch", "listener-names", "churn", "five-sliced",
         "transactions"],
)  # fmt: skip
@pytest.mark.parametrize("seed", range(4))
def test_kafka_scenarios(kw, seed):
    c = run_seed(30_000 + seed, **{**SHORT, **kw})
    assert c.inv.max_committed > 0


def test_same_seed_same_run():
    a = run_seed(7, **SHORT)
    b = run_seed(7, **SHORT)
    key = lambda c: (c.events, c.inv.max_committed, c.appended)  # noqa: E731
    assert key(a) == key(b)


# --------------------------------------------------------------------------- broken rules


def _caught(factory, phrases, seeds=range(40), **kw) -> str:
    """Run seeds with a broken core until the checker named by ``phrases`` objects; return its
    message. A seed where another checker objects first does not count (a broken core may
    break several invariants): the search goes on, and fails if no seed of the range shows
    the named checker objecting."""
    others = []
    for seed in seeds:
        try:
            run_seed(seed, core_factory=factory, **{**SHORT, **kw})
        except InvariantViolation as e:
            msg = str(e)
            if any(p in msg for p in phrases):
                return msg
            others.append(msg)
    pytest.fail(f"no checker caught the broken rule in {len(seeds)} seeds ({others[:3]})")


class VotesTwice(RaftCore):
    """Broken: grants every vote request, even a second one in the same epoch."""

    def _can_grant(self, cand, cand_dir, up_to_date, pre):
        return True


def test_single_leader_checker_catches_double_votes():
    _caught(VotesTwice, ["two leaders in epoch"], kafka_rules=False)


class HighWatermarkSlips(RaftCore):
    """Broken: a follower's high watermark steps back now and then."""

    calls = 0

    def poll(self, now):
        super().poll(now)
        HighWatermarkSlips.calls += 1
        if self.state != LEADER and self.high_watermark > 5 and HighWatermarkSlips.calls % 97 == 0:
            self.high_watermark -= 3


def test_monotonic_high_watermark_checker_catches_a_slip():
    _caught(HighWatermarkSlips, ["high watermark went back"], kafka_rules=False)


class CommitsAlone(RaftCore):
    """Broken: the leader takes the highest end offset, not the majority's, as committed."""

    def _update_high_watermark(self, now):
        if self.state != LEADER:
            return
        self._replicas[self.node_id].end_offset = self.log.flushed_offset
        best = max(rs.end_offset for rs in self._replicas.values())
        if best > self._epoch_start_offset and best > self.high_watermark:
            self.high_watermark = best
            self._wake_parked(now, hw_changed=True)
            self._deliver(now)


def test_consistent_committed_data_checker_catches_minority_commit():
    _caught(
        CommitsAlone,
        ["committed offset", "lacks committed offsets", "below the committed offset",
         "below an earlier epoch"],
        kafka_rules=False,
        hw_majority=False,
    )  # fmt: skip


class StartOffPastSnapshot(RaftCore):
    """Broken: retention moves the log start offset one past the snapshot it deleted up to."""

    def _clean(self, now):
        before = self.log.start_offset
        super()._clean(now)
        if self.log.start_offset > before:
            self.log.start_offset += 1


def test_snapshot_at_log_start_checker_catches_a_start_off_the_snapshot():
    _caught(StartOffPastSnapshot, ["is not on a snapshot"], kafka_rules=False)


class CountsUnflushed(RaftCore):
    """Broken: fsync is not waited for: the leader counts its unflushed end offset toward the
    high watermark and voters fetch (acknowledge) before flushing, so a crash loses data the
    cluster already called committed."""

    def _update_high_watermark(self, now):
        if self.state != LEADER:
            return
        flushed = self.log.flushed_offset
        self.log.flushed_offset = self.log.end_offset
        try:
            super()._update_high_watermark(now)
        finally:
            self.log.flushed_offset = flushed

    @property
    def needs_flush(self):
        return False


def test_committed_data_never_lost_checker_catches_acknowledged_unflushed_writes():
    _caught(
        CountsUnflushed,
        ["committed offset", "lacks committed offsets", "below the committed offset",
         "below an earlier epoch", "high watermark went back"],
        crash_every_ms=1_000,
        fsync_ms=(20, 60),
        kafka_rules=False,
        hw_majority=False,
    )  # fmt: skip


@pytest.mark.parametrize("factory", [CommitsAlone, CountsUnflushed])
def test_high_watermark_majority_checker_catches_a_minority_high_watermark(factory):
    """The high watermark recomputed from the fetch offsets the leader received: a leader
    committing alone, or counting its unflushed end, has no majority behind its high
    watermark."""
    _caught(factory, ["acknowledged by"], kafka_rules=False, fsync_ms=(20, 60))


def test_config_defaults_are_kafkas():
    cfg = SimConfig()
    assert cfg.voters == 3
    from kafka_rpc.raft.core import RaftConfig

    rc = RaftConfig(node_id=1, voters={1: ("h", 1)}, cluster_id="c")
    assert (rc.election_timeout_ms, rc.fetch_timeout_ms, rc.election_backoff_max_ms) == (
        1000, 2000, 1000,
    )  # fmt: skip
    assert (rc.request_timeout_ms, rc.retry_backoff_ms, rc.append_linger_ms) == (2000, 20, 25)


class RejectsStaleFetchAsInvalid(RaftCore):
    """Broken: a leader answers a Fetch at an older epoch with a partition-level INVALID_REQUEST
    (a Kafka follower would halt) instead of FENCED_LEADER_EPOCH."""

    def _validate_leader_only(self, epoch):
        if epoch < self.epoch:
            return 42
        return super()._validate_leader_only(epoch)


def test_partition_invalid_request_checker_catches_one():
    _caught(RejectsStaleFetchAsInvalid, ["partition-level INVALID_REQUEST"])


# --------------------------------------------------------------------------- Kafka's rules broken
# Each class below breaks one rule of Kafka 4.x that RaftCore follows (most restore what the core
# did before it followed it); the KafkaRules checker of that rule must catch it.


class RejectsPartialTail(RaftCore):
    """F2 broken: a Fetch answer ending inside a batch is refused whole."""

    def _on_fetch_response(self, now, dest, resp):
        for t in resp.responses:
            for p in t.partitions:
                if p.records:
                    decode_batches(p.records)  # CorruptRecordError on a partial tail
        return super()._on_fetch_response(now, dest, resp)


class OneBatchPerFetch(RaftCore):
    """F5 broken: the leader honours PartitionMaxBytes, which Kafka's followers send as 0."""

    def _read_size(self, max_bytes):
        return 1


class SendsLeaderEndpoints(RaftCore):
    """F6 broken: BeginQuorumEpoch names the leader's endpoint under our listener name."""

    def _begin_request(self, dest):
        r = super()._begin_request(dest)
        host, port = self.voters[self.node_id]
        ep = raft_base._BeginReq.LeaderEndpoint(name=self.config.listener_name, host=host,
                                                port=port)  # fmt: skip
        return dataclasses.replace(r, leader_endpoints=(ep,))


class CandidateStandsAgain(RaftCore):
    """F10 broken: a Candidate whose election timed out stands again at epoch + 1."""

    def _poll_candidate(self, now):
        if self._election_deadline is not None and now >= self._election_deadline:
            self._to_candidate(now)
            return
        super()._poll_candidate(now)


class PreVoteKeepsEpoch(RaftCore):
    """F11 broken: a pre-vote at a higher epoch is answered from the receiver's own epoch."""

    _pre = False

    def _to_unattached(self, now, epoch, persist=True, leader=-1):
        if not self._pre:
            super()._to_unattached(now, epoch, persist, leader)

    def _on_vote(self, now, version, req):
        self._pre = version >= 2 and req.topics[0].partitions[0].pre_vote
        try:
            return super()._on_vote(now, version, req)
        finally:
            self._pre = False


class ResignedRejectsPreVotes(RaftCore):
    """F11 broken: a Resigned voter refuses up-to-date pre-votes."""

    def _can_grant(self, cand, cand_dir, up_to_date, pre):
        if self.state == raft_core.RESIGNED:
            return False
        return super()._can_grant(cand, cand_dir, up_to_date, pre)


class ProspectiveRefusesVotes(RaftCore):
    """F11 broken: a Prospective never grants a standard vote."""

    def _can_grant(self, cand, cand_dir, up_to_date, pre):
        if self.state == raft_core.PROSPECTIVE and not pre:
            return False
        return super()._can_grant(cand, cand_dir, up_to_date, pre)


class ResignedPreVotesAtOnce(RaftCore):
    """F12 broken: a Resigned voter whose election timeout ran out asks for pre-votes in its
    own epoch instead of going Unattached at epoch + 1."""

    def _poll_resigned(self, now):
        due = self._election_deadline is not None and now >= self._election_deadline
        if due and self._shutdown_deadline is None:
            self._to_prospective(now)
            self._poll_prospective(now)
            return
        super()._poll_resigned(now)


class LostPreVoteForgetsLeader(RaftCore):
    """F12 broken: a lost pre-election goes Unattached even when a leader was known."""

    def _prospective_lost(self, now):
        self._to_unattached(now, self.epoch)


class BeginToAll(RaftCore):
    """Broken: BeginQuorumEpoch goes again to every voter, fetching or not."""

    def _needs_begin(self, now, voter):
        return True


class SlowCheckQuorum(RaftCore):
    """Broken: check quorum waits 3 x fetch.timeout.ms instead of 1.5 x."""

    def _voter_seen(self, now, replica):
        super()._voter_seen(now, replica)
        self._check_quorum_deadline = now + self.config.fetch_timeout_ms * 3


class VotesWithoutDirectory(RaftCore):
    """Broken: Vote requests carry the zero directory id instead of ours."""

    def _vote_request(self, dest, end, pre_vote):
        r = super()._vote_request(dest, end, pre_vote)
        t = r.topics[0]
        p = dataclasses.replace(t.partitions[0], replica_directory_id=raft_base._ZERO_UUID)
        return dataclasses.replace(r, topics=(dataclasses.replace(t, partitions=(p,)),))


class FetchErrorsWithoutLeader(RaftCore):
    """Broken: a Fetch error answer leaves CurrentLeader at its default (-1, -1)."""

    def _fetch_resp(self, version, top=0, code=0, **kw):
        r = super()._fetch_resp(version, top, code, **kw)
        if code:
            t = r.responses[0]
            p = dataclasses.replace(t.partitions[0],
                                    current_leader=raft_base._FetchResp.LeaderIdAndEpoch())
            r = dataclasses.replace(r, responses=(dataclasses.replace(t, partitions=(p,)),))
        return r  # fmt: skip


class DivergesLow(RaftCore):
    """Broken: the DivergingEpoch end offset is 3 below what validateOffsetAndEpoch says."""

    def _validate_offset_and_epoch(self, offset, epoch):
        kind, oe = super()._validate_offset_and_epoch(offset, epoch)
        if kind == "diverging" and oe.offset > 0:
            oe = OffsetAndEpoch(max(0, oe.offset - 3), oe.epoch)
        return kind, oe


class KeepsLeaderOnEpochBump(RaftCore):
    """Broken: going Unattached at a higher epoch keeps naming the old leader."""

    def _to_unattached(self, now, epoch, persist=True, leader=-1):
        old = self.leader_id
        super()._to_unattached(now, epoch, persist, leader if leader >= 0 else old)


class UpdateVoterInvalidRequest(RaftCore):
    """Broken: answers UpdateRaftVoter INVALID_REQUEST (a Kafka voter halts on it)."""

    def _on_update_voter(self, now, version, req):
        resp = super()._on_update_voter(now, version, req)
        return dataclasses.replace(resp, error_code=42)


class UpdateVoterNamesNoLeader(RaftCore):
    """Broken: the leader answers UpdateRaftVoter UNSUPPORTED_VERSION without naming itself as
    CurrentLeader, so a Kafka follower never stops asking."""

    def _on_update_voter(self, now, version, req):
        resp = super()._on_update_voter(now, version, req)
        cl = dataclasses.replace(resp.current_leader, leader_id=-1, leader_epoch=-1, host="",
                                 port=0)  # fmt: skip
        return dataclasses.replace(resp, current_leader=cl)


class _HidesTransaction:
    """A state machine seen without its ``in_transaction``."""

    def __init__(self, sm):
        self._sm = sm

    def __getattr__(self, name):
        if name == "in_transaction":
            raise AttributeError(name)
        return getattr(self._sm, name)


class SnapshotsInsideTransactions(RaftCore):
    """Broken: takes a snapshot at the committed offset even inside a metadata transaction."""

    def create_snapshot(self, now, background=False):
        sm, self.sm = self.sm, _HidesTransaction(self.sm)
        try:
            return super().create_snapshot(now, background)
        finally:
            self.sm = sm


@pytest.mark.parametrize(
    ("factory", "kw", "phrases"),
    [
        (RejectsPartialTail, SLICED, ["stuck at offset", "nothing was committed"]),
        (OneBatchPerFetch, {}, ["answered up to"]),
        (SendsLeaderEndpoints, {"listener_names": True}, ["FollowerState.leaderNode"]),
        (CandidateStandsAgain, {}, ["a Candidate only comes from a Prospective"]),
        (PreVoteKeepsEpoch, {}, ["Kafka's handleVoteRequest"]),
        (ResignedRejectsPreVotes, CHURN, ["Kafka's handleVoteRequest"]),
        (ProspectiveRefusesVotes, CHURN, ["Kafka's handleVoteRequest"]),
        (ResignedPreVotesAtOnce, {}, ["Kafka QuorumState"]),
        (LostPreVoteForgetsLeader, {}, ["goes back to Follower"]),
        (BeginToAll, {}, ["BeginQuorumEpoch to"]),
        (SlowCheckQuorum, {}, ["check-quorum deadline"]),
        (VotesWithoutDirectory, {}, ["Vote without its directory id"]),
        (FetchErrorsWithoutLeader, {}, ["Fetch answer names leader -1"]),
        (DivergesLow, {}, ["DivergingEpoch"]),
        (KeepsLeaderOnEpochBump, {}, ["names", "Kafka's handleVoteRequest"]),
        (SnapshotsInsideTransactions, {"transactions": 0.3}, ["inside the transaction"]),
        (UpdateVoterInvalidRequest, {"update_voter": True}, ["UpdateRaftVoter answered"]),
        (UpdateVoterNamesNoLeader, {"update_voter": True}, ["UpdateRaftVoter", "names leader -1"]),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)  # fmt: skip
def test_kafka_rule_checker_catches_the_broken_rule(factory, kw, phrases):
    _caught(factory, phrases, seeds=range(30), **kw)
