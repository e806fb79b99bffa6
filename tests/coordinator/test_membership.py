"""The rules of kafka_rpc.coordinator.membership: how a new replica's directory starts, the
leader's next voter change and the ISR it reports."""

from __future__ import annotations

import uuid
from types import SimpleNamespace as NS

import pytest

from kafka_rpc.coordinator.api import CreateTopicAndPartitionsRequest
from kafka_rpc.coordinator.membership import (
    MEMBERSHIP_MARKER,
    Change,
    Membership,
    bootstrap_voters,
    in_sync_replicas,
    next_change,
    prepare_directory,
)
from kafka_rpc.coordinator.replicated import ReplicatedBatchCoordinator
from kafka_rpc.raft.file_log import FileLog

D1, D2, D3, D4 = (uuid.UUID(int=1000 + i) for i in range(4))
ADDR = {1: ("h1", 1), 2: ("h2", 2), 3: ("h3", 3), 4: ("h4", 4)}
NOW = 1_000_000
LAG = 30_000


def test_an_initial_replica_bootstraps_the_initial_voters():
    vs = bootstrap_voters([1, 2, 3], [D1, D2, D3], [], ADDR, "L", 2, D2)
    assert vs is not None
    assert sorted(vs) == [1, 2, 3]
    assert vs[3].directory_id == D3 and vs[3].endpoints == {"L": ("h3", 3)}
    assert (vs[1].kraft_min, vs[1].kraft_max) == (0, 1)


def test_an_adding_replica_or_a_replaced_disk_joins_as_an_observer():
    # a reassignment's adding replica: the voters are the others
    assert bootstrap_voters([1, 2, 4], [D1, D2, D4], [4], ADDR, "L", 4, D4) is None
    vs = bootstrap_voters([1, 2, 4], [D1, D2, D4], [4], ADDR, "L", 1, D1)
    assert vs is not None and sorted(vs) == [1, 2]
    # node 3's disk was replaced: its directory id is not the record's
    assert bootstrap_voters([1, 2, 3], [D1, D2, D3], [], ADDR, "L", 3, D4) is None
    # not a replica, or an unknown address or directory: no bootstrap
    assert bootstrap_voters([1, 2], [D1, D2], [], ADDR, "L", 3, D3) is None
    assert bootstrap_voters([1, 2], [D1, D2], [], {1: ("h1", 1)}, "L", 1, D1) is None
    assert bootstrap_voters([1, 2], [D1, uuid.UUID(int=0)], [], ADDR, "L", 1, D1) is None


def _q(voters, observers=()):
    def rs(r, d, caught):
        return NS(replica_id=r, replica_directory_id=d, last_caught_up_timestamp=caught)

    return NS(current_voters=[rs(*v) for v in voters], observers=[rs(*o) for o in observers])


def test_next_change_adds_a_caught_up_replica_then_removes_the_old_one():
    fresh, stale = NOW - 10, NOW - LAG - 1
    # during a reassignment 3 -> 4: replicas = target + removing
    q = _q([(1, D1, fresh), (2, D2, fresh), (3, D3, fresh)], [(4, D4, stale)])
    assert next_change(q, (1, 2, 4, 3), NOW, LAG) is None  # 4 not caught up yet
    q = _q([(1, D1, fresh), (2, D2, fresh), (3, D3, fresh)], [(4, D4, fresh)])
    assert next_change(q, (1, 2, 4, 3), NOW, LAG) == Change("add", 4, D4)
    # completed: 3 is no replica any more
    q = _q([(1, D1, fresh), (2, D2, fresh), (3, D3, fresh), (4, D4, fresh)])
    assert next_change(q, (1, 2, 4), NOW, LAG) == Change("remove", 3, D3)
    assert next_change(q, (1, 2, 3, 4), NOW, LAG) is None


def test_next_change_replaces_a_voter_whose_disk_was_replaced():
    fresh = NOW - 10
    q = _q([(1, D1, fresh), (2, D2, fresh), (3, D3, -1)], [(3, D4, fresh)])
    assert next_change(q, (1, 2, 3), NOW, LAG) == Change("remove", 3, D3)
    q = _q([(1, D1, fresh), (2, D2, fresh)], [(3, D4, fresh)])
    assert next_change(q, (1, 2, 3), NOW, LAG) == Change("add", 3, D4)


def test_the_isr_is_the_leader_and_the_caught_up_voters_that_are_replicas():
    fresh, stale = NOW - 10, NOW - LAG - 1
    q = _q([(1, D1, fresh), (2, D2, stale), (3, D3, fresh), (5, D4, fresh)])
    assert in_sync_replicas(q, (3, 2, 1), 1, NOW, LAG) == (3, 1)
    assert in_sync_replicas(q, (3, 2, 1), 2, NOW, LAG) == (3, 2, 1)


def test_prepare_directory_writes_the_bootstrap_once_and_leaves_old_directories(tmp_path):
    vs = bootstrap_voters([1, 2], [D1, D2], [], ADDR, "L", 1, D1)
    new = tmp_path / "new"
    new.mkdir()
    assert prepare_directory(new, Membership(D1, "L", vs), 5)
    assert (new / MEMBERSHIP_MARKER).exists()
    assert (new / "00000000000000000000-0000000000.checkpoint").exists()
    before = (new / "00000000000000000000-0000000000.checkpoint").read_bytes()
    assert prepare_directory(new, Membership(D1, "L", None), 6)  # marked: unchanged
    assert (new / "00000000000000000000-0000000000.checkpoint").read_bytes() == before
    old = tmp_path / "old"  # a directory of an earlier version: a log, no marker
    old.mkdir()
    log = FileLog(old)
    log.close()
    (old / "00000000000000000000.log").write_bytes(b"x" * 10)
    assert not prepare_directory(old, Membership(D1, "L", vs), 5)
    assert not (old / MEMBERSHIP_MARKER).exists()


@pytest.mark.asyncio
async def test_a_dynamic_single_voter_group_leads_commits_and_restarts(tmp_path):
    vs = bootstrap_voters([1], [D1], [], ADDR, "L", 1, D1)
    opts = {"election_timeout_ms": 200, "fetch_timeout_ms": 400, "listener_name": "L"}
    topic = uuid.uuid4()
    for run in range(2):
        c = ReplicatedBatchCoordinator(tmp_path, node_id=1, membership=Membership(D1, "L", vs),
                                       raft_options=opts)  # fmt: skip
        await c.start()
        try:
            assert c.dynamic and c.core.kraft_version == 1
            assert sorted(c.core.voter_set) == [1]
            assert c.core.voter_set[1].directory_id == D1
            if run == 0:
                codes = await c.create_topic_and_partitions(
                    [CreateTopicAndPartitionsRequest(topic, "t", 2)])  # fmt: skip
                assert codes == [0]
            else:
                assert len(await c.list_partitions()) == 2
        finally:
            await c.close()
