"""Three ``kafka-rpc serve`` processes with NO coordinator setting at all: the default is the
topic-based Batch Coordinator (KIP-1164's reference implementation) on a three-replica
``__diskless-metadata`` the controller creates, so the nodes agree on one coordinator.

* FindCoordinator ``write:`` on every node names the same node (the Raft leader), ``read:`` the
  node asked;
* InitDisklessTopics and a commit sent to a follower (a read-only coordinator) answer
  NOT_COORDINATOR; the leader takes them;
* idempotent commits through the leader are found on every follower, batch for batch;
* SIGKILL of the coordinator leader under three idempotent producers: a survivor takes over,
  every acknowledged batch is in the log exactly once at the offset it was given, and a re-sent
  acknowledged commit is IsDuplicate at its original offsets.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.coordinator_mapping import DISKLESS_METADATA_TOPIC
from kafka_rpc.protocol import codec
from kafka_rpc.testbed.bench_cluster import batch_key
from tests.integration.test_controller_cluster import FAST_FAILOVER, broker_port, cluster_running
from tests.integration.test_crash import Batch, commit_request
from tests.integration.test_diskless_e2e import M, _first_elem, mod
from tests.integration.test_diskless_metadata_failover import PARTITIONS, Producers, find_all
from tests.waiting import until

pytestmark = pytest.mark.integration

NOT_COORDINATOR = 16
STEP = 20.0  # s, every wait
CT = codec.module("CreateTopicsRequest")
FC = codec.module("FindCoordinatorRequest")
LO = mod("ListDisklessOffsetsRequest")
_I_TOPIC = _first_elem(mod("InitDisklessTopicsRequest"), "topics")


async def coordinators(client: KafkaRpcClient, topic: uuid.UUID) -> list[tuple[int, int]]:
    """``(error, node)`` of ``write:`` for every partition of ``topic`` then ``read:`` of 0."""
    keys = [batch_key("write", topic, p) for p in range(PARTITIONS)]
    keys.append(batch_key("read", topic, 0))
    r = await client.request(FC.FindCoordinatorRequest(key_type=3, coordinator_keys=tuple(keys)),
                             version=7)  # fmt: skip
    return [(k.error_code, k.node_id) for k in r.coordinators]


async def agreed_leader(clients: dict[int, KafkaRpcClient], topic: uuid.UUID) -> int | None:
    """The one node every client's FindCoordinator ``write:`` names for every partition (and
    ``read:`` naming the node asked), else None."""
    named = set()
    for i, c in clients.items():
        try:
            got = await coordinators(c, topic)
        except (ConnectionError, OSError, TimeoutError):
            return None
        if any(code for code, _ in got) or got[-1][1] != i:
            return None
        named |= {node for _, node in got[:-1]}
    return named.pop() if len(named) == 1 and named <= set(clients) else None


async def initialized(client: KafkaRpcClient, topic: uuid.UUID) -> bool:
    """Every partition of ``topic`` is known to the coordinator ``client`` reaches."""
    topics = (LO.ListDisklessOffsetsTopic(topic_id=topic, partitions=tuple(
        LO.ListDisklessOffsetsTopicPartition(partition_index=p, timestamp=-1)
        for p in range(PARTITIONS))),)  # fmt: skip
    resp = await client.request(M("ListDisklessOffsetsRequest")(topics=topics))
    return all(p.error_code == 0 for t in resp.responses for p in t.partitions)


async def test_three_nodes_with_no_coordinator_setting(tmp_path):
    clients: dict[int, KafkaRpcClient] = {}
    async with cluster_running(tmp_path, budget=120.0, **FAST_FAILOVER) as cluster:
        try:
            for n in cluster.nodes.values():
                assert "diskless.coordinator" not in n.config.read_text()
            for i, n in cluster.nodes.items():
                clients[i] = await KafkaRpcClient.connect(
                    f"127.0.0.1:{broker_port(n)}", connect_timeout=3.0, request_timeout=5.0)

            async def created():
                resp = await clients[1].request(CT.CreateTopicsRequest(
                    topics=(CT.CreatableTopic(name="d", num_partitions=PARTITIONS,
                            replication_factor=3, configs=(CT.CreatableTopicConfig(
                                name="diskless.enable", value="true"),)),),
                    timeout_ms=10_000))  # fmt: skip
                r = resp.topics[0]
                if r.error_code == 0:
                    return r.topic_id
                assert r.error_code in (7, 38), resp  # no controller yet / brokers fenced
                return None

            topic = await until(created, "the diskless topic", timeout=STEP)
            leader = await until(lambda: agreed_leader(clients, topic), "one coordinator leader",
                                 timeout=STEP)  # fmt: skip
            md = await clients[leader].request(codec.message_class("MetadataRequest")(topics=None),
                                               version=12)  # fmt: skip
            (meta,) = [t for t in md.topics if t.name == DISKLESS_METADATA_TOPIC]
            assert meta.is_internal and sorted(meta.partitions[0].replica_nodes) == [1, 2, 3]
            await until(lambda: initialized(clients[leader], topic), "the topic on the leader",
                        timeout=STEP)  # fmt: skip

            # a follower is a read-only coordinator: writes answer NOT_COORDINATOR
            follower = next(i for i in clients if i != leader)
            init = M("InitDisklessTopicsRequest")(
                topics=(_I_TOPIC(topic_id=topic, num_partitions=PARTITIONS),))  # fmt: skip
            resp = await clients[follower].request(init)
            assert [r.error_code for r in resp.responses] == [NOT_COORDINATOR]
            resp = await clients[leader].request(init)
            assert [r.error_code for r in resp.responses] == [0]
            resp = await clients[follower].request(
                commit_request(topic, "to-a-follower", [Batch(0, 1)]))  # fmt: skip
            assert [p.error_code for p in resp.topics[0].partitions] == [NOT_COORDINATOR]

            # idempotent commits through the leader, found on every follower
            prod = Producers(topic, clients)
            prod.target = leader
            pids = [2000 + k for k in range(3)]
            await asyncio.gather(*(prod.produce(pid, 8) for pid in pids))
            want = await find_all(clients[leader], topic)
            assert sum(len(b) for b in want.values()) == len(prod.acked)
            for i in clients:
                if i != leader:
                    await until(lambda i=i: _same(find_all(clients[i], topic), want),
                                f"node {i} finding every batch", timeout=STEP)  # fmt: skip

            # SIGKILL of the coordinator leader under load
            killed = asyncio.Event()

            async def kill_soon():
                await asyncio.sleep(0.3)
                cluster.kill(leader)
                prod.alive.discard(leader)
                killed.set()

            await asyncio.gather(kill_soon(), *(prod.produce(pid, 6, killed) for pid in pids))
            survivors = {i: c for i, c in clients.items() if i != leader}
            new_leader = await until(lambda: agreed_leader(survivors, topic),
                                     "one coordinator leader among the survivors",
                                     timeout=STEP)  # fmt: skip
            assert new_leader != leader
            prod.target = new_leader
            for pid in pids:  # an acknowledged commit re-sent: duplicates at the same offsets
                batches, offsets = prod.last[pid]
                parts = await prod.send(batches, resend=True)
                assert [p.is_duplicate for p in parts] == [True] * len(batches), (pid, parts)
                assert [p.assigned_base_offset for p in parts] == offsets, pid

            want = await find_all(clients[new_leader], topic)
            other = next(i for i in survivors if i != new_leader)
            await until(lambda: _same(find_all(clients[other], topic), want),
                        "the other survivor catching up", timeout=STEP)  # fmt: skip
            seen: dict[tuple[int, int, int], int] = {}
            for partition, batches in want.items():
                expect = 0
                for base, last, key, byte_offset, pid, seq in batches:
                    assert base == expect, (partition, batches)  # gap-free from 0
                    expect = last + 1
                    b = prod.attempts[key][byte_offset // 100]
                    ident = (b.pid, b.partition, b.seq)
                    assert (b.partition, b.pid, b.seq) == (partition, pid, seq)
                    assert ident not in seen, ("duplicated", ident)
                    seen[ident] = base
            lost = {k: v for k, v in prod.acked.items() if seen.get(k) != v}
            assert not lost, ("lost or moved", lost)
        finally:
            for c in clients.values():
                await c.close()


async def _same(coro, want) -> bool:
    try:
        return await coro == want
    except (ConnectionError, OSError, TimeoutError):
        return False
