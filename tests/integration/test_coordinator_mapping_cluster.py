"""KIP-1164 on a real 3-process quorum (three ``kafka-rpc serve`` processes, broker+controller
each): the active controller creates ``__diskless-metadata`` with 3 replicas (the default
replication factor of three voters; it waits for three brokers, never placing fewer), every node's
Metadata lists it as internal; AssignPartitionToBatchCoordinator sent to a controller that is
not the active one answers NOT_CONTROLLER per entry, and ``kafka-rpc diskless assign`` pointed at
that controller finds the active one and commits the mapping; then FindCoordinator v7 BATCH
``write:`` on every node names one node, the Raft leader of the owning coordinator partition
(partition 1 for the mapped partitions, 0 for the others), and ``read:`` the node asked (every
node holds a replica)."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode
from kafka_rpc.protocol.uuids import uuid_text
from tests.integration.test_controller_cluster import FAST_FAILOVER, broker_port, cluster_running
from tests.waiting import until

pytestmark = [pytest.mark.integration]

MD = codec.module("MetadataRequest")
CT = codec.module("CreateTopicsRequest")
AQ = codec.module("AssignPartitionToBatchCoordinatorRequest")
DQ = codec.module("DescribeClusterRequest")
FC = codec.module("FindCoordinatorRequest")
META = "__diskless-metadata"


async def metadata(node):
    async with KafkaRpcClient(f"127.0.0.1:{broker_port(node)}", connect_timeout=3.0,
                              request_timeout=5.0) as c:  # fmt: skip
        return await c.request(MD.MetadataRequest(topics=None, allow_auto_topic_creation=False))


async def test_metadata_topic_on_three_nodes_and_assign_through_any_controller(tmp_path):
    async with cluster_running(
        tmp_path, budget=60.0, **FAST_FAILOVER, **{"diskless.metadata.topic.num.partitions": "2"}
    ) as cluster:
        nodes = cluster.nodes

        async def listed_everywhere() -> bool:
            for n in nodes.values():
                md = await metadata(n)
                t = next((t for t in md.topics if t.name == META), None)
                if t is None:
                    return False
            return True

        await until(listed_everywhere, f"{META} in every node's Metadata", timeout=30.0)
        md = await metadata(nodes[1])
        (meta,) = [t for t in md.topics if t.name == META]
        assert meta.is_internal
        assert sorted(p.partition_index for p in meta.partitions) == [0, 1]
        for p in meta.partitions:  # replication factor 3: all three brokers, no shortcut
            assert sorted(p.replica_nodes) == [1, 2, 3], md

        async with KafkaRpcClient(f"127.0.0.1:{broker_port(nodes[1])}") as c:
            resp = await c.request(CT.CreateTopicsRequest(
                topics=(CT.CreatableTopic(name="d", num_partitions=2, replication_factor=3),),
                timeout_ms=10_000))  # fmt: skip
        assert resp.topics[0].error_code == 0, resp
        tid = resp.topics[0].topic_id

        async with KafkaRpcClient(nodes[1].address) as c:
            desc = await c.request(DQ.DescribeClusterRequest(endpoint_type=2))
        active = desc.controller_id
        other = next(i for i in nodes if i != active)
        req = AQ.AssignPartitionToBatchCoordinatorRequest(
            topics=(AQ.AssignTopicToBatchCoordinator(topic_id=tid, partitions=tuple(
                AQ.AssignTopicPartitionToBatchCoordinator(
                    partition_index=p, batch_coordinator_partition_index=1)
                for p in (0, 1))),))  # fmt: skip
        async with KafkaRpcClient(nodes[other].address) as c:
            resp = await c.request(req)
        assert [p.error_code for t in resp.responses for p in t.partitions] == [
            ErrorCode.NOT_CONTROLLER
        ] * 2

        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kafka_rpc.cli", "diskless", "assign",
            "--bootstrap-controller", nodes[other].address,
            "--bootstrap-server", f"127.0.0.1:{broker_port(nodes[other])}",
            "--topic", "d", "--partition", "0", "--partition", "1",
            "--coordinator-partition", "1", "--timeout", "10",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KAFKA_RPC_NO_REEXEC": "1"},
        )  # fmt: skip
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, (out, err)
        assert out.decode().splitlines() == [
            "Assigned d-0 to Batch Coordinator partition 1.",
            "Assigned d-1 to Batch Coordinator partition 1.",
        ]

        # FindCoordinator follows the mapping. Every node holds a replica of both coordinator
        # partitions (replication factor 3), so read: keys name the node asked, and write: keys
        # name the Raft leader of the owning partition -- the same node whichever node is asked
        # (d-0 and d-1: partition 1; d-2, unmapped: partition 0)
        b64 = uuid_text(tid)
        keys = (f"write:{b64}:0", f"write:{b64}:1", f"write:{b64}:2", f"read:{b64}:1")

        async def answers(i):
            async with KafkaRpcClient(f"127.0.0.1:{broker_port(nodes[i])}") as c:
                r = await c.request(FC.FindCoordinatorRequest(key_type=3, coordinator_keys=keys),
                                    version=7)  # fmt: skip
            return [(k.error_code, k.node_id, k.port) for k in r.coordinators]

        async def agreed():
            got = {i: await answers(i) for i in nodes}
            writes = {tuple(a[:3]) for a in got.values()}
            if len(writes) != 1 or any(code for a in got.values() for code, _, _ in a):
                return False
            (w,) = writes
            if w[0] != w[1] or any(port != broker_port(nodes[n]) for _, n, port in w):
                return False
            return all(a[3] == (0, i, broker_port(nodes[i])) for i, a in got.items())

        await until(agreed, "every node naming the same coordinator leaders", timeout=15.0)
