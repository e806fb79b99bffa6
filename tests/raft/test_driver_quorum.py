"""Three voters and a broker-only observer, each a server on loopback: one leader, everyone
replicates the active node's records, and a stopped leader is replaced."""

import asyncio

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.controller.features import BOOTSTRAP_METADATA_VERSION
from tests.integration.conftest import start_server
from tests.raft.test_driver_single import CLUSTER_ID, describe, free_port
from tests.waiting import until

pytestmark = pytest.mark.integration

TIMEOUT = 30.0  # a bound; an election takes well under 1 s alone


async def start_node(tmp_path, node_id, ports, roles="broker,controller"):
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    d = tmp_path / f"n{node_id}"
    d.mkdir()
    listeners = "PLAINTEXT://127.0.0.1:0"
    if "controller" in roles:
        listeners += f",CONTROLLER://127.0.0.1:{ports[node_id]}"
    return await start_server(
        d,
        **{
            "node.id": str(node_id),
            "process.roles": roles,
            "listeners": listeners,
            "controller.quorum.voters": voters,
            "cluster.id": CLUSTER_ID,
            "metadata.max.idle.interval.ms": "100",
            "controller.quorum.election.timeout.ms": "300",
            "controller.quorum.fetch.timeout.ms": "600",
            "shutdown.timeout.ms": "2000",
        },
    )


async def test_three_voters_and_an_observer(tmp_path):
    ports = {i: free_port() for i in (1, 2, 3)}
    nodes = {}
    clients = []
    try:
        # together: a combined node serves only once a leader (a majority) acknowledged it
        started = await asyncio.gather(*(start_node(tmp_path, i, ports) for i in ports),
                                       return_exceptions=True)  # fmt: skip
        for i, running in zip(ports, started):
            if not isinstance(running, BaseException):
                nodes[i] = running
        for running in started:
            if isinstance(running, BaseException):
                raise running
        nodes[4] = await start_node(tmp_path, 4, ports, roles="broker")
        for i, p in ports.items():
            clients.append(await KafkaRpcClient.connect(f"127.0.0.1:{p}", connect_timeout=5))

        async def leader():
            for c in clients:
                p = await describe(c)
                if p.error_code == 0 and p.high_watermark > 3:
                    return p
            return None

        p = await until(leader, "a leader with a high watermark", timeout=TIMEOUT)
        assert sorted(r.replica_id for r in p.current_voters) == [1, 2, 3]
        lead = p.leader_id

        async def replicated():
            states = [n.server.controller for n in nodes.values()]
            return all(
                s.image.features.get("metadata.version") == BOOTSTRAP_METADATA_VERSION
                and s.record_counts["NoOpRecord"] >= 2
                for s in states
            )

        await until(replicated, "every node, the observer too, to replay the records",
                    timeout=TIMEOUT)  # fmt: skip
        assert [n.server.controller.is_active for n in nodes.values()].count(True) == 1
        # a leader with followers fsyncs off the loop, an observer inline (RaftDriver._start_flush)
        assert nodes[lead].server.raft.thread_flushes > 0
        assert nodes[4].server.raft.thread_flushes == 0

        async def observer_seen():
            p = await describe(clients[lead - 1])
            return [r.replica_id for r in p.observers] == [4]

        await until(observer_seen, "the observer in DescribeQuorum", timeout=TIMEOUT)

        # stop the leader: the two others elect a new one in a later epoch
        await nodes.pop(lead).stop()
        rest = [c for i, c in zip(ports, clients, strict=True) if i != lead]

        async def new_leader():
            for c in rest:
                try:
                    q = await describe(c)
                except Exception:  # noqa: BLE001
                    continue
                if q.error_code == 0 and q.leader_id not in (-1, lead):
                    return q
            return None

        q = await until(new_leader, "a new leader", timeout=TIMEOUT)
        assert q.leader_epoch > p.leader_epoch
        hw = q.high_watermark

        async def advances():
            for c in rest:
                r = await describe(c)
                if r.error_code == 0 and r.high_watermark > hw + 2:
                    return True
            return False

        await until(advances, "the new leader to commit", timeout=TIMEOUT)
    finally:
        for c in clients:
            await c.close()
        await asyncio.gather(*(n.stop() for n in nodes.values()), return_exceptions=True)
