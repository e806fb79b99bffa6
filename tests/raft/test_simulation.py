"""The seeded cluster simulation (``tests/raft/simulation.py``) in CI: 300 seeds of 3 voters,
5 voters with observers, and codec-encoded messages, each through drops, delays, duplicates,
partitions and crashes that lose unflushed writes; ``bench/raft_simulation.py`` runs 10,000.

Each invariant checker is also run against a core with one rule deliberately broken, and must
catch it: a checker that cannot fail proves nothing.
"""

from __future__ import annotations

import logging

import pytest

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


def test_same_seed_same_run():
    a = run_seed(7, **SHORT)
    b = run_seed(7, **SHORT)
    key = lambda c: (c.events, c.inv.max_committed, c.appended)  # noqa: E731
    assert key(a) == key(b)


# --------------------------------------------------------------------------- broken rules


def _caught(factory, phrases, seeds=range(40), **kw) -> str:
    """Run seeds with a broken core until a checker objects; return its message."""
    for seed in seeds:
        try:
            run_seed(seed, core_factory=factory, **{**SHORT, **kw})
        except InvariantViolation as e:
            msg = str(e)
            assert any(p in msg for p in phrases), msg
            return msg
    pytest.fail(f"no checker caught the broken rule in {len(seeds)} seeds")


class VotesTwice(RaftCore):
    """Broken: grants every vote request, even a second one in the same epoch."""

    def _can_grant(self, cand, up_to_date, pre, cepoch):
        return True


def test_single_leader_checker_catches_double_votes():
    _caught(VotesTwice, ["two leaders in epoch"])


class HighWatermarkSlips(RaftCore):
    """Broken: a follower's high watermark steps back now and then."""

    calls = 0

    def poll(self, now):
        super().poll(now)
        HighWatermarkSlips.calls += 1
        if self.state != LEADER and self.high_watermark > 5 and HighWatermarkSlips.calls % 97 == 0:
            self.high_watermark -= 3


def test_monotonic_high_watermark_checker_catches_a_slip():
    _caught(HighWatermarkSlips, ["high watermark went back"])


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
    )  # fmt: skip


class StartOffPastSnapshot(RaftCore):
    """Broken: retention moves the log start offset one past the snapshot it deleted up to."""

    def _clean(self, now):
        before = self.log.start_offset
        super()._clean(now)
        if self.log.start_offset > before:
            self.log.start_offset += 1


def test_snapshot_at_log_start_checker_catches_a_start_off_the_snapshot():
    _caught(StartOffPastSnapshot, ["is not on a snapshot"])


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
    )  # fmt: skip


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
