"""A cluster that cannot host ``__diskless-metadata`` yet says so (three ``kafka-rpc serve``
processes, broker+controller each, ``diskless.metadata.topic.replication.factor=4``): the active
controller never creates the topic with fewer replicas (Kafka's rule for ``__consumer_offsets``),
FindCoordinator v7 BATCH keys answer COORDINATOR_NOT_AVAILABLE (15) on every node, and the
active controller logs one WARNING naming the shortfall. A lone node with a replication factor
it can never meet starts without the coordinator; a third node started late gets its replica:
the topic waits for it and is created with all three."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.uuids import uuid_text
from tests.integration.test_controller_cluster import FAST_FAILOVER, broker_port, cluster_running
from tests.waiting import until

pytestmark = [pytest.mark.integration]

FC = codec.module("FindCoordinatorRequest")
DQ = codec.module("DescribeClusterRequest")
WARNING = ("__diskless-metadata needs 4 brokers running the Batch Coordinator, 3 are registered "
           "and unfenced; it will be created when 4 are")  # fmt: skip


async def test_too_few_brokers_no_coordinator_topic_and_find_coordinator_says_not_available(
    tmp_path,
):
    async with cluster_running(
        tmp_path, budget=60.0, **FAST_FAILOVER,
        **{"diskless.metadata.topic.replication.factor": "4"},
    ) as cluster:  # fmt: skip
        nodes = cluster.nodes

        def warners() -> list[int]:
            return [i for i, n in nodes.items() if WARNING in n.stderr_text()]

        await until(warners, "the shortfall WARNING", timeout=30.0)
        async with KafkaRpcClient(nodes[1].address) as c:
            desc = await c.request(DQ.DescribeClusterRequest(endpoint_type=2))
        await until(lambda: desc.controller_id in warners(), "the active controller's WARNING",
                    timeout=10.0)  # fmt: skip
        counts = {i: n.stderr_text().count(WARNING) for i, n in nodes.items()}
        await asyncio.sleep(3.0)  # past a broker session timeout: still no topic, no new warning
        assert {i: n.stderr_text().count(WARNING) for i, n in nodes.items()} == counts
        tid = uuid_text(uuid.uuid4())
        keys = (f"write:{tid}:0", f"read:{tid}:0")
        for i in nodes:
            async with KafkaRpcClient(f"127.0.0.1:{broker_port(nodes[i])}") as c:
                r = await c.request(FC.FindCoordinatorRequest(key_type=3, coordinator_keys=keys),
                                    version=7)  # fmt: skip
            assert [k.error_code for k in r.coordinators] == [
                ErrorCode.COORDINATOR_NOT_AVAILABLE
            ] * 2, (i, r)
            assert all(k.node_id == -1 for k in r.coordinators)
            for n in nodes.values():
                assert "created __diskless-metadata" not in n.stderr_text()


async def test_a_lone_node_that_cannot_host_the_coordinator_starts_without_it(tmp_path):
    """``kafka-rpc serve`` alone with ``diskless.metadata.topic.replication.factor=3`` starts
    (as a lone Kafka broker with ``offsets.topic.replication.factor=3`` does), logs the
    shortfall, and FindCoordinator answers COORDINATOR_NOT_AVAILABLE."""
    import subprocess
    import sys

    from tests.raft.test_driver_single import free_port

    port, cport = free_port(), free_port()
    args = [sys.executable, "-m", "kafka_rpc.cli", "--log-level", "INFO", "serve",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
            "--override", f"log.dirs={tmp_path / 'data'}",
            "--override", "diskless.metadata.topic.replication.factor=3"]  # fmt: skip
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(args, stdout=o, stderr=e)
    try:
        await until(lambda: "cluster id" in out.read_text() or proc.poll() is not None,
                    "the node started", timeout=60.0)  # fmt: skip
        assert proc.poll() is None, err.read_text()[-3000:]
        await until(lambda: "needs 3 brokers running the Batch Coordinator, 1 are registered"
                    in err.read_text(), "the shortfall WARNING", timeout=30.0)  # fmt: skip
        tid = uuid_text(uuid.uuid4())
        async with KafkaRpcClient(f"127.0.0.1:{port}") as c:
            r = await c.request(FC.FindCoordinatorRequest(key_type=3,
                                                          coordinator_keys=(f"write:{tid}:0",)),
                                version=7)  # fmt: skip
        assert [k.error_code for k in r.coordinators] == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    finally:
        proc.kill()
        proc.wait(10)


async def test_a_late_third_node_gets_its_replica_and_the_topic_is_never_smaller(tmp_path):
    """Three voters, the third node started well past a broker session timeout after the first
    two: until it registers there is no ``__diskless-metadata`` (FindCoordinator answers
    COORDINATOR_NOT_AVAILABLE), then the topic is created with all three replicas, its ISR
    whole (before, it was created with two for good)."""
    from tests.integration.test_raft_cluster import Cluster

    cluster = Cluster(tmp_path, **FAST_FAILOVER)
    try:
        async with asyncio.timeout(120):
            cluster.format()
            for i in (1, 2):
                cluster.nodes[i].start()
            for i in (1, 2):
                await cluster.nodes[i].started()
            port = broker_port(cluster.nodes[1])
            tid = uuid_text(uuid.uuid4())

            async def codes():
                async with KafkaRpcClient(f"127.0.0.1:{port}") as c:
                    r = await c.request(FC.FindCoordinatorRequest(
                        key_type=3, coordinator_keys=(f"write:{tid}:0",)), version=7)  # fmt: skip
                return [k.error_code for k in r.coordinators]

            await asyncio.sleep(6.0)  # past broker.session.timeout.ms (2.5 s) twice over
            assert await codes() == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
            cluster.nodes[3].start()
            await cluster.nodes[3].started()

            async def meta():
                async with KafkaRpcClient(f"127.0.0.1:{port}") as c:
                    md = await c.request(codec.message_class("MetadataRequest")(topics=None),
                                         version=12)  # fmt: skip
                t = next((t for t in md.topics if t.name == "__diskless-metadata"), None)
                if t is None:
                    return None
                p = t.partitions[0]
                return (sorted(p.replica_nodes), sorted(p.isr_nodes))

            async def whole():
                got = await meta()
                if got is None:
                    return None
                assert got[0] == [1, 2, 3], ("created with fewer replicas", got)
                return got if got[1] == [1, 2, 3] else None

            got = await until(whole, "__diskless-metadata with 3 replicas", timeout=30.0)
            assert got == ([1, 2, 3], [1, 2, 3])
        cluster.assert_no_tracebacks()
    finally:
        await cluster.close()

