"""A dead broker holding a ``__diskless-metadata`` replica replaced with Kafka's own tools.

Three controller-only and three broker-only ``kafka-rpc serve`` nodes (``BenchCluster`` layout
"dedicated"). A broker holding a coordinator replica is SIGKILLed; a new broker is started and
formatted with the cluster id; then, as an operator would:

* ``kafka-topics --describe --under-replicated-partitions`` (Kafka 4.4's tool) lists the
  partition (its ISR lost the dead broker);
* ``kafka-reassign-partitions --execute`` moves the dead broker's replica to the new one and
  ``--verify`` is polled until it says the reassignment is completed;
* ``kafka-topics --describe`` then shows the new replicas with a whole ISR, led by the node its
  Raft group says leads, and ``--under-replicated-partitions`` prints nothing;
* every commit acknowledged before the kill is found at its offset on the new replica.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.testbed.bench_cluster import BenchCluster
from tests.integration.coordinator_checks import create_diskless_topic
from tests.integration.test_default_coordinator_cluster import agreed_leader, initialized
from tests.integration.test_diskless_metadata_failover import Producers, find_all
from tests.integration.test_diskless_metadata_raft import describe
from tests.kafka import peer
from tests.waiting import until

pytestmark = pytest.mark.kafka

META = "__diskless-metadata"
STEP = 60.0  # s, every wait
TOOL_TIMEOUT = 90.0  # s, one tool run
BUDGET = 420.0  # s, the whole test
PROPS = {
    "controller.quorum.election.timeout.ms": "400",
    "controller.quorum.fetch.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "2500",
    "diskless.metadata.topic.replication.factor": "3",
}
_ROW = re.compile(r"Topic: (\S+)\s+Partition: (\d+)\s+Leader: (-?\d+)\s+Replicas: ([\d,]*)\s+"
                  r"Isr: ([\d,]*)")  # fmt: skip


def tool(version: str, name: str, *args: str, workdir=None):
    return peer.run_tool(version, name, *args, timeout=TOOL_TIMEOUT, workdir=workdir)


def rows(out: str) -> list[tuple[int, int, list[int], list[int]]]:
    """``(partition, leader, replicas, isr)`` of every ``kafka-topics --describe`` line of
    ``__diskless-metadata``."""
    out_rows = []
    for m in _ROW.finditer(out):
        if m.group(1) == META:
            ints = [int(x) for x in m.group(4).split(",") if x]
            isr = [int(x) for x in m.group(5).split(",") if x]
            out_rows.append((int(m.group(2)), int(m.group(3)), ints, isr))
    return out_rows


async def test_replace_a_dead_broker_with_kafka_reassign_partitions(kafka_newest, tmp_path):
    cluster = BenchCluster(tmp_path / "cluster", 3, props=PROPS, layout="dedicated",
                           log_level="INFO")  # fmt: skip
    clients: dict[int, KafkaRpcClient] = {}
    work = tmp_path / "tools"
    work.mkdir()

    async def run(*args: str):
        return await asyncio.to_thread(tool, kafka_newest, *args, workdir=work)

    try:
        async with asyncio.timeout(BUDGET):
            await cluster.start()
            for i in cluster.brokers():
                clients[i] = await KafkaRpcClient.connect(
                    cluster.nodes[i].address, connect_timeout=3.0, request_timeout=5.0)
            topic = await until(lambda: create_diskless_topic(clients[4]), "the diskless topic",
                                timeout=STEP)  # fmt: skip
            leader = await until(lambda: agreed_leader(clients, topic), "one coordinator leader",
                                 timeout=STEP)  # fmt: skip
            await until(lambda: initialized(clients[leader], topic), "the topic on the leader",
                        timeout=STEP)  # fmt: skip
            prod = Producers(topic, clients)
            prod.target = leader
            await asyncio.gather(*(prod.produce(5000 + k, 4) for k in range(3)))
            acked = dict(prod.acked)

            dead = next(i for i in cluster.brokers() if i != leader)  # a follower replica
            cluster.kill(dead)
            await clients.pop(dead).close()
            bootstrap = ",".join(cluster.nodes[i].address for i in clients)

            async def under_replicated():
                out = (await run("kafka-topics", "--bootstrap-server", bootstrap, "--describe",
                                 "--under-replicated-partitions")).stdout  # fmt: skip
                return [r for r in rows(out) if dead not in r[3]] or None

            await until(under_replicated, "the partition under-replicated without the dead node",
                        timeout=STEP, interval=1.0)  # fmt: skip

            new = await cluster.add_broker()
            (part, _leader, replicas, _isr), = rows(
                (await run("kafka-topics", "--bootstrap-server", bootstrap, "--describe",
                           "--topic", META)).stdout)  # fmt: skip
            target = [new if r == dead else r for r in replicas]
            plan = work / "move.json"
            plan.write_text(json.dumps({"version": 1, "partitions": [
                {"topic": META, "partition": part, "replicas": target}]}))  # fmt: skip
            out = (await run("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                             "--reassignment-json-file", str(plan), "--execute")).stdout
            assert "Successfully started partition reassignment" in out, out

            async def verified():
                out = (await run("kafka-reassign-partitions", "--bootstrap-server", bootstrap,
                                 "--reassignment-json-file", str(plan), "--verify")).stdout
                return f"Reassignment of partition {META}-{part} is completed" in out

            await until(verified, "kafka-reassign-partitions --verify: completed", timeout=STEP,
                        interval=1.0)  # fmt: skip

            clients[new] = await KafkaRpcClient.connect(
                cluster.nodes[new].address, connect_timeout=3.0, request_timeout=5.0)
            bootstrap = ",".join(cluster.nodes[i].address for i in clients)

            async def whole():
                out = (await run("kafka-topics", "--bootstrap-server", bootstrap, "--describe",
                                 "--topic", META)).stdout  # fmt: skip
                got = rows(out)
                if len(got) != 1 or sorted(got[0][2]) != sorted(target):
                    return None
                if sorted(got[0][3]) != sorted(target):
                    return None
                return got[0]

            _p, shown_leader, _r, _i = await until(whole, "the new replicas with a whole ISR",
                                                   timeout=STEP, interval=1.0)  # fmt: skip
            q = await describe(clients[shown_leader], META)
            assert q.error_code == 0 and q.leader_id == shown_leader
            assert sorted(v.replica_id for v in q.current_voters) == sorted(target)
            out = (await run("kafka-topics", "--bootstrap-server", bootstrap, "--describe",
                             "--under-replicated-partitions")).stdout  # fmt: skip
            assert not rows(out), out

            # what was acknowledged before the kill is on the new replica, at its offsets
            want = await find_all(clients[shown_leader], topic)
            await until(lambda: _equal(find_all(clients[new], topic), want),
                        "the new replica holding every batch", timeout=STEP)  # fmt: skip
            found = {}
            for batches in want.values():
                for base, _last, key, byte_offset, _pid, _seq in batches:
                    b = prod.attempts[key][byte_offset // 100]
                    found[(b.pid, b.partition, b.seq)] = base
            assert all(found.get(k) == v for k, v in acked.items()), (acked, found)
    finally:
        for c in clients.values():
            await c.close()
        cluster.close()



async def _equal(coro, want) -> bool:
    try:
        return await coro == want
    except (ConnectionError, OSError, TimeoutError):
        return False
