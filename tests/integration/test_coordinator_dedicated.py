"""Kafka's production layout: three controller-only ``kafka-rpc serve`` nodes and three
broker-only ones, which hold the ``__diskless-metadata`` replicas (their Raft groups over the
inter-broker listener), under a continuous idempotent CommitBatches load:

* the coordinator leader (a broker) is SIGKILLed: a surviving broker takes over;
* the dead broker is replaced by a new one through a reassignment (``BenchCluster.replace``:
  AlterPartitionReassignments, as ``kafka-reassign-partitions --execute``): the new broker
  joins, the reassignment completes and the ISR is whole;
* every acknowledged batch is found at its offset exactly once, on every replica.
"""

from __future__ import annotations

import asyncio

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.testbed.bench_cluster import BenchCluster
from tests.integration.coordinator_checks import (
    assert_exactly_once,
    commit_load,
    create_diskless_topic,
)
from tests.integration.test_default_coordinator_cluster import agreed_leader, initialized
from tests.integration.test_diskless_metadata_failover import Producers, find_all
from tests.waiting import until

pytestmark = pytest.mark.integration

STEP = 30.0  # s, every wait
BUDGET = 240.0  # s, the whole test
PROPS = {
    "controller.quorum.election.timeout.ms": "400",
    "controller.quorum.fetch.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "2500",
    "diskless.metadata.topic.replication.factor": "3",
}


async def _safe(coro):
    try:
        return await coro
    except (ConnectionError, OSError, TimeoutError):
        return None


async def test_dedicated_controllers_sigkill_and_replace_a_broker(tmp_path):
    cluster = BenchCluster(tmp_path, 3, props=PROPS, layout="dedicated", log_level="INFO")
    clients: dict[int, KafkaRpcClient] = {}
    try:
        async with asyncio.timeout(BUDGET):
            await cluster.start()
            assert cluster.brokers() == [4, 5, 6]
            for i in cluster.brokers():
                clients[i] = await KafkaRpcClient.connect(
                    cluster.nodes[i].address, connect_timeout=3.0, request_timeout=5.0)

            topic = await until(lambda: create_diskless_topic(clients[4]), "the diskless topic",
                                timeout=STEP)  # fmt: skip
            leader = await until(lambda: agreed_leader(clients, topic), "one coordinator leader",
                                 timeout=STEP)  # fmt: skip
            assert leader in (4, 5, 6)
            await until(lambda: initialized(clients[leader], topic), "the topic on the leader",
                        timeout=STEP)  # fmt: skip
            prod = Producers(topic, clients)
            prod.target = leader
            pids = [4000 + k for k in range(3)]
            await asyncio.gather(*(prod.produce(pid, 5) for pid in pids))

            killed = asyncio.Event()

            async def kill_soon():
                await asyncio.sleep(0.3)
                cluster.kill(leader)
                prod.alive.discard(leader)
                killed.set()

            await asyncio.gather(kill_soon(), *(prod.produce(pid, 5, killed) for pid in pids))
            survivors = {i: c for i, c in clients.items() if i != leader}
            new_leader = await until(lambda: agreed_leader(survivors, topic),
                                     "a coordinator leader among the surviving brokers",
                                     timeout=STEP)  # fmt: skip
            assert new_leader != leader

            # the dead broker replaced by a new one, under load
            async with commit_load(prod, pids):
                new = await cluster.add_broker()
                await cluster.replace(leader, new, timeout=STEP * 3)
            clients[new] = await KafkaRpcClient.connect(
                cluster.nodes[new].address, connect_timeout=3.0, request_timeout=5.0)
            parts = await cluster._metadata_partitions()
            assert sorted(parts[0][0]) == sorted([*survivors, new])

            live = {i: c for i, c in clients.items() if i != leader}
            coord = await until(lambda: agreed_leader(live, topic), "one coordinator leader",
                                timeout=STEP)  # fmt: skip
            want = await find_all(clients[coord], topic)
            assert_exactly_once(prod, want)
            for i in live:
                await until(lambda i=i: _equal(find_all(clients[i], topic), want),
                            f"node {i} holding every batch", timeout=STEP)  # fmt: skip
    finally:
        for c in clients.values():
            await c.close()
        cluster.close()


async def _equal(coro, want) -> bool:
    return await _safe(coro) == want
