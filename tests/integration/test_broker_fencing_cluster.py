"""On a real cluster: a broker that stops heartbeating is fenced by the active controller
after ``broker.session.timeout.ms`` and disappears from Metadata, also across a controller
failover (Kafka's ``BrokerHeartbeatManager`` / ``ReplicationControlManager.fenceStaleBroker``).

Three ``kafka-rpc serve`` voters (broker+controller) and a fourth, broker-only process
(``process.roles=broker``, node 4): an observer of the metadata log that registers with the active
controller over the controller listener and heartbeats every ``broker.heartbeat.interval.ms``.
It is frozen with SIGSTOP, so its connections stay open and only the missing heartbeats can tell
the controller anything. A topic with its one replica on broker 4 shows what fencing does to
its partition.

1. All four nodes' Metadata lists brokers 1-4; the topic's partition is led by 4.
2. SIGSTOP node 4: not earlier than a session timeout later (less the time since its last
   heartbeat, at most about one interval), the controller fences it (a
   BrokerRegistrationChangeRecord Fenced=1, as Kafka 4.x) and every
   voter's Metadata (each answers from its own committed image) stops listing broker 4; the
   partition has no leader (LEADER_NOT_AVAILABLE) and names 4 offline. SIGCONT: broker 4
   heartbeats with the same broker epoch, is unfenced, leads its partition again and is listed
   everywhere.
3. SIGSTOP node 4 again and SIGKILL the active controller right after: the new active
   controller knows no heartbeat times (they live in the old one's memory) and starts every
   registered broker's session at its activation (``ClusterControlManager.activate``), so broker
   4 is fenced not earlier than a session timeout after the kill, and it is fenced (within the
   step timeout). SIGCONT brings it back once more; the killed voter restarts and its broker
   registers again.
4. The committed metadata log (read back with observer Fetches) holds exactly two
   fencing and two unfencing BrokerRegistrationChangeRecords for broker 4 after its first
   unfencing, all with the epoch of its one registration.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafka_rpc.client import KafkaConnectionError, KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from tests.integration.test_controller_cluster import (
    CommittedLog,
    broker_port,
    cluster_running,
    new_leader,
    on_active_controller,
)
from tests.integration.test_raft_cluster import (
    BASE_PROPS,
    CLI_TIMEOUT,
    ENV,
    START_TIMEOUT,
    STEP_TIMEOUT,
    VOTERS,
    Node,
)
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEST_BUDGET = 120.0  # the whole test; about 20 s on an idle 2-core runner
HEARTBEAT_MS = 300
SESSION_MS = 3000
PROPS = {
    "controller.quorum.election.timeout.ms": "400",
    "controller.quorum.fetch.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "broker.session.timeout.ms": str(SESSION_MS),
}
B4 = 4  # the broker-only node
TOPIC = "on-broker-4"
MD = codec.module("MetadataRequest")
CT = codec.module("CreateTopicsRequest")


class BrokerOnlyNode(Node):
    """A ``kafka-rpc serve`` process with ``process.roles=broker``: no controller listener, an
    observer of the voters' metadata log; same files and signals as :class:`Node`."""

    def __init__(self, root: Path, node_id: int, voters: str, props: dict) -> None:
        self.node_id = node_id
        self.ctrl_port = None
        self.home = root / f"node{node_id}"
        self.home.mkdir()
        self.data = self.home / "data"
        self.config = self.home / "server.properties"
        all_props = {
            **BASE_PROPS,
            **props,
            "process.roles": "broker",
            "node.id": str(node_id),
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "controller.quorum.voters": voters,
            "log.dirs": str(self.data),
        }
        self.config.write_text("".join(f"{k}={v}\n" for k, v in all_props.items()))
        self.proc = None
        self.runs = 0

    def format(self, cluster_id: str) -> None:
        r = subprocess.run(
            [sys.executable, "-m", "kafka_rpc.cli", "storage", "format",
             "--cluster-id", cluster_id, "--config", str(self.config)],
            capture_output=True, text=True, timeout=CLI_TIMEOUT, env=ENV,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert f"cluster.id={cluster_id}" in (self.data / "meta.properties").read_text()

    async def started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            text = self.out_path().read_text(errors="replace")
            if "cluster id" in text:
                assert re.search(r"listening PLAINTEXT \(broker\)", text), text
                assert "CONTROLLER" not in text, text
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"node {self.node_id} did not start (exit "
                                     f"{self.proc.poll()}): {text}\n"
                                     f"{self.stderr_text()[-4000:]}")  # fmt: skip
            await asyncio.sleep(0.05)


async def metadata(node):
    """``node``'s Metadata (all topics) on its broker listener; None if it cannot answer."""
    req = MD.MetadataRequest(topics=None, allow_auto_topic_creation=False)
    try:
        async with KafkaRpcClient(f"127.0.0.1:{broker_port(node)}",
                                  connect_timeout=2.0, request_timeout=3.0) as c:  # fmt: skip
            return await c.request(req)
    except (OSError, TimeoutError, KafkaConnectionError):
        return None


def partition_of(md):
    """The topic's one partition in a Metadata response; None while the node's image lacks it."""
    found = [t for t in md.topics if t.name == TOPIC]
    if not found:
        return None
    (p,) = found[0].partitions
    return p


async def listed_everywhere(nodes, brokers: set[int], leader: int):
    """True once every node of ``nodes`` answers Metadata listing exactly ``brokers`` and the
    topic's partition with ``leader`` (-1: none, with broker 4 offline)."""
    for n in nodes:
        md = await metadata(n)
        if md is None or {b.node_id for b in md.brokers} != brokers:
            return False
        p = partition_of(md)
        if p is None or p.leader_id != leader:
            return False
        if leader == -1:
            assert p.error_code == ErrorCode.LEADER_NOT_AVAILABLE, p
            assert tuple(p.offline_replicas) == (B4,) and tuple(p.replica_nodes) == (B4,), p
            assert tuple(p.isr_nodes) == (B4,), p  # the last ISR member stays in the ISR
        else:
            assert p.error_code == 0 and tuple(p.offline_replicas) == (), p
    return True


@contextlib.contextmanager
def stopped(node):
    """SIGSTOP ``node`` for the block (SIGCONT on the way out, also on failure)."""
    os.kill(node.proc.pid, signal.SIGSTOP)
    try:
        yield time.monotonic()
    finally:
        if node.alive:
            os.kill(node.proc.pid, signal.SIGCONT)


async def test_a_broker_that_stops_heartbeating_is_fenced_and_leaves_metadata(tmp_path):
    b4 = None
    async with cluster_running(tmp_path, budget=TEST_BUDGET, **PROPS) as cluster:
        try:
            voters = ",".join(f"{i}@{cluster.nodes[i].address}" for i in VOTERS)
            b4 = BrokerOnlyNode(tmp_path, B4, voters, PROPS)
            b4.format(cluster.cluster_id)
            b4.start()
            await b4.started()
            voter_nodes = [cluster.nodes[i] for i in VOTERS]
            everyone = {*VOTERS, B4}

            # (1) broker 4 registered and unfenced; a partition on it alone
            async def all_listed():
                md = [await metadata(n) for n in (*voter_nodes, b4)]
                return all(m is not None and {b.node_id for b in m.brokers} == everyone
                           for m in md)  # fmt: skip

            await until(all_listed, "every node's Metadata to list brokers 1-4",
                        timeout=STEP_TIMEOUT)  # fmt: skip
            create = CT.CreateTopicsRequest(
                topics=(CT.CreatableTopic(
                    name=TOPIC, num_partitions=-1, replication_factor=-1,
                    assignments=(CT.CreatableReplicaAssignment(partition_index=0,
                                                               broker_ids=(B4,)),)),),
                timeout_ms=5000,
            )  # fmt: skip
            r = await on_active_controller(cluster, create, lambda r: r.topics[0].error_code)
            assert r.topics[0].error_code == 0, r
            await until(lambda: listed_everywhere([*voter_nodes, b4], everyone, B4),
                        "every node's Metadata to show the partition led by 4",
                        timeout=STEP_TIMEOUT)  # fmt: skip
            log = CommittedLog(cluster)
            assert await until(log.catch_up, "the committed log", timeout=STEP_TIMEOUT)
            (epoch4,) = [r.broker_epoch for _, r in log.of("RegisterBrokerRecord")
                         if r.broker_id == B4]  # fmt: skip
            first_fence = len(log.records)  # records before any fencing of broker 4

            # (2) frozen: fenced after the session timeout, gone from every voter's Metadata
            with stopped(b4) as stop_at:
                await until(lambda: listed_everywhere(voter_nodes, set(VOTERS), -1),
                            "broker 4 to be fenced and leave every voter's Metadata",
                            timeout=STEP_TIMEOUT)  # fmt: skip
                gone_after = time.monotonic() - stop_at
            # not before its session ran out: its last heartbeat went at most one interval
            # before the stop (up to a second on a loaded runner, whose loop can stall)
            assert gone_after >= (SESSION_MS - 1000) / 1000, gone_after
            await until(lambda: listed_everywhere([*voter_nodes, b4], everyone, B4),
                        "broker 4 to be unfenced and lead its partition again",
                        timeout=STEP_TIMEOUT)  # fmt: skip

            # (3) frozen again, and the active controller killed: the new one fences it too
            lead = await until(cluster.agreed_leader, "a leader before the kill",
                               timeout=STEP_TIMEOUT)  # fmt: skip
            victim = lead.leader_id
            with stopped(b4):
                await asyncio.sleep(0.3)
                cluster.kill(victim)
                killed_at = time.monotonic()
                await cluster.drop_client(victim)
                survivors = [cluster.nodes[i] for i in VOTERS if i != victim]
                await until(lambda: new_leader(cluster, victim, lead.leader_epoch),
                            "a new leader after the SIGKILL", timeout=STEP_TIMEOUT)  # fmt: skip
                elected_after = time.monotonic() - killed_at

                async def fenced_on_survivors():
                    for n in survivors:
                        md = await metadata(n)
                        if md is None or {b.node_id for b in md.brokers} & {B4, victim}:
                            return False
                        p = partition_of(md)
                        assert p is not None, md  # created before: never gone again
                        if p.leader_id != -1:
                            return False
                    return True

                await until(fenced_on_survivors, "broker 4 fenced by the new controller",
                            timeout=STEP_TIMEOUT)  # fmt: skip
                fenced_after = time.monotonic() - killed_at
            # the new controller started broker 4's session at its activation, after the kill
            assert fenced_after >= SESSION_MS / 1000, (fenced_after, elected_after)
            await cluster.restart(victim)
            await until(lambda: listed_everywhere([*voter_nodes, b4], everyone, B4),
                        "broker 4 back and the killed voter's broker registered again",
                        timeout=STEP_TIMEOUT)  # fmt: skip

            # (4) the log: broker 4 fenced twice and unfenced twice, always in its one epoch
            final = await until(cluster.agreed_leader, "a leader at the end", timeout=STEP_TIMEOUT)
            assert await until(lambda: log.catch_up(final.high_watermark), "the whole log",
                               timeout=STEP_TIMEOUT)  # fmt: skip
            mine = [(r.fenced, r.broker_epoch) for _, r in log.records[first_fence:]
                    if type(r).__spec_name__ == "BrokerRegistrationChangeRecord"
                    and r.broker_id == B4 and r.fenced != 0]  # fmt: skip
            assert mine == [(1, epoch4), (-1, epoch4)] * 2  # fence, unfence (Kafka 4.x records)
            regs = [r.broker_epoch for _, r in log.of("RegisterBrokerRecord") if r.broker_id == B4]
            assert regs == [epoch4], regs  # never registered again: SIGSTOP is no restart
            print(f"\nbroker 4 left Metadata {gone_after:.2f} s after SIGSTOP (session "
                  f"{SESSION_MS} ms); with a failover: elected {elected_after:.2f} s, fenced "
                  f"{fenced_after:.2f} s after the SIGKILL")  # fmt: skip
        finally:
            if b4 is not None:
                b4.kill()
    if b4 is not None:
        for run in range(1, b4.runs + 1):
            assert "Traceback" not in b4.stderr_text(run), b4.stderr_text(run)[-6000:]
