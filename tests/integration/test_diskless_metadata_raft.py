"""Three replicas of one ``__diskless-metadata`` partition (docs/batch-coordinator.md), each a
ReplicatedBatchCoordinator whose Raft RPCs reach it through a real server's controller listener
(routed by topic id, ``kafka_rpc.raft.routing.RaftPartitions``), all on loopback in this
process: the leader's acknowledged commits are found on every follower, followers answer reads
and refuse writes with NOT_COORDINATOR, hypothesis-generated writes leave the leader's and the
followers' SQLite states equal row by row (a leader stopped midway included), and a follower
that was down catches up from a snapshot fetched with FetchSnapshot."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.coordinator.api import (
    CreateTopicAndPartitionsRequest,
    FindBatchRequest,
    TopicIdPartition,
)
from kafka_rpc.coordinator.errors import NOT_COORDINATOR
from kafka_rpc.coordinator.replicated import DISKLESS_METADATA_TOPIC_NAME
from kafka_rpc.protocol import codec
from kafka_rpc.raft.api import METADATA_TOPIC_NAME
from kafka_rpc.raft.driver import monotonic_ms
from tests.contract.conftest import batch, chain
from tests.contract.test_differential import TOPICS, apply, op_st
from tests.replicated_cluster import TIMEOUT, cluster
from tests.waiting import until

pytestmark = pytest.mark.integration

async def test_commits_on_the_leader_are_found_on_every_follower(tmp_path):
    async with cluster(tmp_path) as cl:
        lead = await cl.leader()
        followers = [c for c in cl.coords.values() if c is not lead]
        t = uuid.uuid4()
        req = [CreateTopicAndPartitionsRequest(t, "t", 2)]
        assert await lead.create_topic_and_partitions(req) == [0]
        tp = TopicIdPartition(t, 0)
        acked = []
        for i in range(5):
            out = await lead.commit_file(f"obj{i}", 1, 300, chain(tp, 3))
            assert [r.error for r in out] == [0, 0, 0]
            acked.extend(r.assigned_base_offset for r in out)
        assert acked == list(range(15))
        # a follower refuses writes per entry and answers reads from its own state
        f = followers[0]
        out = await f.commit_file("nope", 1, 100, [batch(tp)])
        assert [r.error for r in out] == [NOT_COORDINATOR]
        assert await f.create_topic_and_partitions(req) == [NOT_COORDINATOR]
        await cl.caught_up()
        want = await lead.find_batches([FindBatchRequest(tp, 0, 1 << 20)], 1 << 20)
        assert [b.base_offset for b in want[0].batches] == acked
        for c in followers:
            got = await c.find_batches([FindBatchRequest(tp, 0, 1 << 20)], 1 << 20)
            assert got == want
            assert c.state_rows() == lead.state_rows()
        # DescribeQuorum on the servers' controller listeners, by name: the coordinator
        # partition's quorum (the leader's server describes it, a follower's names the leader);
        # the metadata log's stays each server's own single-voter quorum
        lead_id = next(i for i, c in cl.coords.items() if c is lead)
        follower_id = next(i for i in cl.coords if i != lead_id)
        for node in (lead_id, follower_id):
            address = f"127.0.0.1:{cl.voters[node][1]}"
            client = await KafkaRpcClient.connect(address, connect_timeout=5)
            try:
                p = await describe(client, DISKLESS_METADATA_TOPIC_NAME)
                assert p.leader_id == lead_id, p
                if node == lead_id:
                    assert p.error_code == 0, p
                    assert sorted(v.replica_id for v in p.current_voters) == [1, 2, 3]
                else:
                    assert p.error_code == 6, p  # NOT_LEADER_OR_FOLLOWER, as Kafka answers
                p = await describe(client, METADATA_TOPIC_NAME)
                assert p.error_code == 0 and [v.replica_id for v in p.current_voters] == [1], p
            finally:
                await client.close()


async def describe(client: KafkaRpcClient, topic_name: str):
    m = codec.module("DescribeQuorumRequest")
    req = m.DescribeQuorumRequest(
        topics=(m.TopicData(topic_name=topic_name, partitions=(m.PartitionData(),)),)
    )
    resp = await client.request(req, timeout=5)
    assert resp.error_code == 0, resp
    (part,) = resp.topics[0].partitions
    return part


async def test_a_replica_that_was_down_catches_up_from_a_snapshot(tmp_path):
    # the leader keeps only its latest snapshot and the log after it (retention 0 bytes), so a
    # replica that was away past it must fetch the snapshot (FetchSnapshot) and load its image
    opts = {
        "max_retention_bytes": 0,
        "retention_check_interval_ms": 50,
        "max_replication_lag_ms": 0,
    }
    async with cluster(tmp_path, **opts) as cl:
        lead = await cl.leader()
        t = uuid.uuid4()
        assert await lead.create_topic_and_partitions(
            [CreateTopicAndPartitionsRequest(t, "t", 1)]
        ) == [0]
        tp = TopicIdPartition(t, 0)
        await cl.caught_up()
        down = next(i for i, c in cl.coords.items() if c is not lead)
        await cl.stop_replica(down)
        for i in range(6):
            await lead.commit_file(f"a{i}", 1, 200, chain(tp, 2))
            cl.clock.advance(5)
        for c in cl.coords.values():
            c.core.create_snapshot(monotonic_ms())
        for i in range(3):
            await lead.commit_file(f"b{i}", 1, 200, chain(tp, 2))
        for c in cl.coords.values():
            c.core.create_snapshot(monotonic_ms())
        await until(lambda: lead.core.log.start_offset > 0, "the leader's log start to move",
                    timeout=TIMEOUT)  # fmt: skip
        back = await cl.start_replica(down)
        await cl.caught_up()
        assert back.snapshots_loaded == 1
        assert back.state_rows() == lead.state_rows()
        got = await back.find_batches([FindBatchRequest(tp, 0, 1 << 20)], 1 << 20)
        assert [b.base_offset for b in got[0].batches] == list(range(18))


async def _differential(ops, switch_at: int, root: Path) -> None:
    """Replay ``ops`` (writes on the leader, reads on every replica); at step ``switch_at`` the
    leader is stopped and the rest goes to its successor; it comes back at the end. Then the
    three SQLite states must be equal row by row."""
    async with cluster(root) as cl:
        lead = await cl.leader()
        assert await lead.create_topic_and_partitions(
            [CreateTopicAndPartitionsRequest(t, f"t{i}", 2) for i, t in enumerate(TOPICS)]
        ) == [0, 0]
        stopped = None
        for step, op in enumerate(ops):
            if step == switch_at:
                stopped = next(i for i, c in cl.coords.items() if c is lead)
                await cl.stop_replica(stopped)
                lead = await cl.leader()
            if op[0] == "advance":
                cl.clock.advance(op[1])
                continue
            if op[0] in ("find", "list"):
                await cl.caught_up()  # a follower's answer equals the leader's once caught up
                answers = [await apply(c, op, step) for c in cl.coords.values()]
                assert all(a == answers[0] for a in answers), (step, op)
            else:
                await apply(lead, op, step)
        if stopped is not None:
            await cl.start_replica(stopped)
        await cl.caught_up()
        rows = [c.state_rows() for c in cl.coords.values()]
        assert len(rows) == 3 and rows[0] == rows[1] == rows[2]
        assert rows[0]["raft_applied"][0][1] == lead.applied_offset


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(op_st, min_size=5, max_size=25), st.integers(0, 30))
def test_replicas_states_are_equal_row_by_row(ops, switch_at):
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(_differential(ops, switch_at, Path(d)))
