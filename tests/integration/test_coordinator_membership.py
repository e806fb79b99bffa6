"""A ``__diskless-metadata`` partition's replicas follow its assignment, on three
``kafka-rpc serve`` processes (the README's cluster, no coordinator setting), under a
continuous idempotent CommitBatches load:

* the partitions' Raft groups are dynamic (kraft.version 1, the ``raft-membership`` marker) and
  their voters are the assigned replicas;
* the image's leader is the Raft leader and its ISR is whole (the Raft leader's AlterPartition);
* a rolling restart of three replicas (SIGTERM, start again, one node at a time; commits go on):
  after each node the ISR is whole again, and a replaced disk rejoins under its new directory
  id;
* with two replicas of three nodes, a reassignment (AlterPartitionReassignments, as
  ``kafka-reassign-partitions --execute`` sends it) of a replica to the node that had none: the
  new node joins as an observer, becomes a voter, the reassignment completes and the removed
  node leaves the voters and stops its replica;
* a reassignment to a node that is down stays in progress, and cancelling it restores the
  replicas (ISR whole, voters unchanged);
* at the end every acknowledged batch is found at its offset exactly once on every replica.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.coordinator_mapping import DISKLESS_METADATA_TOPIC
from kafka_rpc.coordinator.membership import MEMBERSHIP_MARKER
from kafka_rpc.protocol import codec
from tests.integration.coordinator_checks import (
    assert_exactly_once,
    commit_load,
    create_diskless_topic,
)
from tests.integration.test_controller_cluster import FAST_FAILOVER, broker_port, cluster_running
from tests.integration.test_default_coordinator_cluster import (
    agreed_leader,
    coordinators,
    initialized,
)
from tests.integration.test_diskless_metadata_failover import Producers, find_all
from tests.integration.test_diskless_metadata_raft import describe
from tests.waiting import until

pytestmark = pytest.mark.integration

STEP = 30.0  # s, every wait
APR = codec.module("AlterPartitionReassignmentsRequest")
LPR = codec.module("ListPartitionReassignmentsRequest")


async def meta_partition(client: KafkaRpcClient, p: int = 0):
    """``__diskless-metadata``-``p`` in the node's Metadata answer (v12)."""
    md = await client.request(codec.message_class("MetadataRequest")(topics=None), version=12)
    (t,) = [t for t in md.topics if t.name == DISKLESS_METADATA_TOPIC]
    return next(x for x in t.partitions if x.partition_index == p), t.topic_id


async def connect(cluster, i: int) -> KafkaRpcClient:
    return await KafkaRpcClient.connect(f"127.0.0.1:{broker_port(cluster.nodes[i])}",
                                        connect_timeout=3.0, request_timeout=5.0)  # fmt: skip


async def _safe(coro):
    """``coro``'s value, or None for a lost connection, a timeout, or an error answer that
    ``describe`` asserts against (a node whose replica is not running forwards DescribeQuorum
    to the metadata controller)."""
    try:
        return await coro
    except (ConnectionError, OSError, TimeoutError, AssertionError):
        return None


async def whole(clients, replicas: list[int]) -> bool:
    """Every client's Metadata has ``__diskless-metadata``-0 with these replicas, the ISR equal
    to them, and as leader the node the partition's Raft group says leads."""
    for c in clients.values():
        got = await _safe(meta_partition(c))
        if got is None:
            return False
        part, _ = got
        if sorted(part.replica_nodes) != replicas or sorted(part.isr_nodes) != replicas:
            return False
        q = await _safe(describe(c, DISKLESS_METADATA_TOPIC))
        if q is None or q.leader_id != part.leader_id:
            return False
    return True


async def leader_quorum(clients):
    """DescribeQuorum of ``__diskless-metadata``-0 from its Raft leader among ``clients``."""
    for c in clients.values():
        q = await _safe(describe(c, DISKLESS_METADATA_TOPIC))
        if q is not None and not q.error_code:
            return q
    return None


async def voters_of(clients) -> list[int] | None:
    """The voters of ``__diskless-metadata``-0 as its Raft leader (among ``clients``) says."""
    for c in clients.values():
        q = await _safe(describe(c, DISKLESS_METADATA_TOPIC))
        if q is not None and not q.error_code:
            return sorted(v.replica_id for v in q.current_voters)
    return None


async def test_a_reassignment_moves_the_voters_and_a_cancel_restores_them(tmp_path):
    props = dict(FAST_FAILOVER)
    props["diskless.metadata.topic.replication.factor"] = "2"
    props["diskless.metadata.topic.num.partitions"] = "1"
    clients: dict[int, KafkaRpcClient] = {}
    async with cluster_running(tmp_path, budget=240.0, **props) as cluster:
        try:
            for i in cluster.nodes:
                clients[i] = await connect(cluster, i)

            topic = await until(lambda: create_diskless_topic(clients[1]), "the diskless topic",
                                timeout=STEP)  # fmt: skip
            part, _ = await until(lambda: _safe(meta_partition(clients[1])),
                                        "__diskless-metadata", timeout=STEP)  # fmt: skip
            replicas = sorted(part.replica_nodes)
            assert len(replicas) == 2
            spare = next(i for i in cluster.nodes if i not in replicas)
            hosts = {i: clients[i] for i in replicas}
            await until(lambda: whole(hosts, replicas), "the ISR whole, led by the Raft leader",
                        timeout=STEP)  # fmt: skip
            for i in replicas:  # dynamic groups, voters = the replicas
                d = cluster.nodes[i].data / f"{DISKLESS_METADATA_TOPIC}-0"
                assert (d / MEMBERSHIP_MARKER).exists(), i
            assert await voters_of(hosts) == replicas
            assert not (cluster.nodes[spare].data / f"{DISKLESS_METADATA_TOPIC}-0").exists()

            leader = await until(lambda: agreed_leader(hosts, topic), "one coordinator leader",
                                 timeout=STEP)  # fmt: skip
            await until(lambda: initialized(clients[leader], topic), "the topic on the leader",
                        timeout=STEP)  # fmt: skip
            prod = Producers(topic, clients)
            prod.target = leader
            pids = [3000 + k for k in range(3)]
            async with commit_load(prod, pids):
                # move one replica to the spare node, as kafka-reassign-partitions --execute
                target = [replicas[0], spare]
                moved = replicas[1]
                req = APR.AlterPartitionReassignmentsRequest(timeout_ms=10_000, topics=(
                    APR.ReassignableTopic(name=DISKLESS_METADATA_TOPIC, partitions=(
                        APR.ReassignablePartition(partition_index=0, replicas=tuple(target)),
                    )),))  # fmt: skip

                async def reassigned():
                    r = await _safe(clients[spare].request(req))
                    if r is None or r.error_code in (7, 41):
                        return None
                    assert r.error_code == 0, r
                    assert r.responses[0].partitions[0].error_code == 0, r
                    return True

                await until(reassigned, "the reassignment accepted", timeout=STEP)
                hosts = {r: clients[r] for r in target}
                await until(lambda: whole(hosts, sorted(target)),
                            "the reassignment completed, ISR whole", timeout=STEP)  # fmt: skip
                await until(lambda: _has(voters_of(clients), sorted(target)),
                            "the voters following the new assignment", timeout=STEP)  # fmt: skip
                lst = await clients[spare].request(LPR.ListPartitionReassignmentsRequest(
                    timeout_ms=5000, topics=None))  # fmt: skip
                assert lst.error_code == 0 and not lst.topics, lst
                # the removed replica stops its group
                await until(lambda: _gone(clients[moved], moved, topic),
                            f"node {moved} stopping its replica", timeout=STEP)  # fmt: skip

                # a reassignment that cannot complete (its new replica's node is down) stays in
                # progress; cancelling it restores the replicas, and the voters never changed
                prod.alive.discard(moved)
                await clients[moved].close()
                cluster.kill(moved)
                grow = APR.AlterPartitionReassignmentsRequest(timeout_ms=10_000, topics=(
                    APR.ReassignableTopic(name=DISKLESS_METADATA_TOPIC, partitions=(
                        APR.ReassignablePartition(partition_index=0,
                                                  replicas=(*target, moved)),)),))  # fmt: skip
                resp = await clients[spare].request(grow)
                assert resp.error_code == 0 and resp.responses[0].partitions[0].error_code == 0
                await asyncio.sleep(2.0)
                lst = await clients[spare].request(LPR.ListPartitionReassignmentsRequest(
                    timeout_ms=5000, topics=None))  # fmt: skip
                (p0,) = lst.topics[0].partitions
                assert list(p0.adding_replicas) == [moved], lst
                cancel = APR.AlterPartitionReassignmentsRequest(timeout_ms=10_000, topics=(
                    APR.ReassignableTopic(name=DISKLESS_METADATA_TOPIC, partitions=(
                        APR.ReassignablePartition(partition_index=0, replicas=None),)),))
                resp = await clients[spare].request(cancel)
                assert resp.error_code == 0 and resp.responses[0].partitions[0].error_code == 0
                hosts = {r: clients[r] for r in target}
                await until(lambda: whole(hosts, sorted(target)),
                            "the replicas restored by the cancel, ISR whole", timeout=STEP)
                assert await voters_of(hosts) == sorted(target)

            # every acknowledged batch exactly once at its offset, on both replicas
            hosts = {r: clients[r] for r in target}
            leader = await until(lambda: agreed_leader(hosts, topic), "one coordinator leader",
                                 timeout=STEP)  # fmt: skip
            want = await find_all(clients[leader], topic)
            assert_exactly_once(prod, want)
            for i in target:
                await until(lambda i=i: _equal(find_all(clients[i], topic), want),
                            f"node {i} holding every batch", timeout=STEP)  # fmt: skip
        finally:
            for c in clients.values():
                await c.close()


async def _has(coro, want) -> bool:
    return await coro == want


async def _equal(coro, want) -> bool:
    return await _safe(coro) == want


async def _gone(client: KafkaRpcClient, node: int, topic) -> bool:
    """FindCoordinator ``read:`` on ``node`` no longer names ``node`` (it holds no replica)."""
    got = await _safe(coordinators(client, topic))
    return got is not None and got[-1][0] == 0 and got[-1][1] != node


async def test_a_rolling_restart_then_a_replaced_disk(tmp_path):
    """Three replicas under a commit load. A rolling restart (SIGTERM, start again, one node at
    a time; commits go on, two of three voters up): the ISR is whole again after each node.
    Then a replica whose disk is lost (SIGKILL, its data directory wiped, formatted again: a
    new ``directory.id``) comes back as an observer; the leader removes the voter of its old
    directory id and adds the new one, and the ISR is whole again, with every batch exactly
    once."""
    props = dict(FAST_FAILOVER)
    props["diskless.metadata.topic.num.partitions"] = "1"
    clients: dict[int, KafkaRpcClient] = {}
    async with cluster_running(tmp_path, budget=180.0, **props) as cluster:
        try:
            for i in cluster.nodes:
                clients[i] = await connect(cluster, i)
            topic = await until(lambda: create_diskless_topic(clients[1]), "the diskless topic",
                                timeout=STEP)  # fmt: skip
            replicas = [1, 2, 3]
            await until(lambda: whole(clients, replicas), "the ISR whole", timeout=STEP)
            leader = await until(lambda: agreed_leader(clients, topic), "one coordinator leader",
                                 timeout=STEP)  # fmt: skip
            await until(lambda: initialized(clients[leader], topic), "the topic on the leader",
                        timeout=STEP)  # fmt: skip
            prod = Producers(topic, clients)
            prod.target = leader
            pids = [6000 + k for k in range(3)]
            await asyncio.gather(*(prod.produce(pid, 4) for pid in pids))
            async with commit_load(prod, pids):
                # a rolling restart, one node at a time: the ISR whole again after each
                for i in sorted(cluster.nodes):
                    prod.alive.discard(i)  # the producers fail over from a closed client
                    await clients[i].close()
                    cluster.nodes[i].signal(signal.SIGTERM)
                    cluster.nodes[i].proc.wait(30)
                    cluster.begin_restart(i)
                    await cluster.finish_restart(i)
                    clients[i] = await connect(cluster, i)
                    prod.alive.add(i)
                    await until(lambda: whole(clients, replicas),
                                f"the ISR whole again after restarting node {i}",
                                timeout=STEP)  # fmt: skip
            leader = await until(lambda: agreed_leader(clients, topic), "one coordinator leader",
                                 timeout=STEP)  # fmt: skip
            q = await until(lambda: leader_quorum(clients), "the group's leader", timeout=STEP)
            old = {v.replica_id: v.replica_directory_id for v in q.current_voters}
            victim = next(i for i in replicas if i != leader)
            prod.alive.discard(victim)
            await clients[victim].close()
            cluster.kill(victim)
            node = cluster.nodes[victim]
            shutil.rmtree(node.data)
            r = subprocess.run([sys.executable, "-m", "kafka_rpc.cli", "storage", "format",
                                "--cluster-id", cluster.cluster_id, "--config", str(node.config)],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
            assert r.returncode == 0, r.stderr
            cluster.begin_restart(victim)
            await cluster.finish_restart(victim)
            clients[victim] = await connect(cluster, victim)

            async def rejoined():
                q = await leader_quorum(clients)
                if q is None:
                    return False
                dirs = {v.replica_id: v.replica_directory_id for v in q.current_voters}
                return sorted(dirs) == replicas and dirs[victim] != old[victim]

            await until(rejoined, "the new directory id among the voters", timeout=STEP)
            await until(lambda: whole(clients, replicas), "the ISR whole again", timeout=STEP)
            want = await find_all(clients[leader], topic)
            await until(lambda: _equal(find_all(clients[victim], topic), want),
                        "the replaced replica holding every batch", timeout=STEP)  # fmt: skip
            assert_exactly_once(prod, want)
        finally:
            for c in clients.values():
                await c.close()

