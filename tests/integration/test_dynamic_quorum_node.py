"""One combined ``kafka-rpc serve`` node on a dynamic quorum (KIP-853): formatted ``--standalone``
with ``controller.quorum.bootstrap.servers`` and no ``controller.quorum.voters``. It elects itself
from the voter set of its bootstrap checkpoint, reports kraft.version 1 and its directory id, and
runs the default (topic-based) Batch Coordinator, whose Raft group takes the node's address from
its broker registration. A dynamic quorum's ``diskless.metadata.topic.replication.factor``
defaults to 3 (the voters are not known from the configuration), so a lone node sets 1, as a
lone Kafka broker sets ``offsets.topic.replication.factor=1``."""

from __future__ import annotations

import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.uuids import parse_uuid_text
from tests.integration.test_diskless_e2e import M, _commit, _first_elem, mod
from tests.kafka import peer
from tests.waiting import until

pytestmark = pytest.mark.integration

DQ = codec.module("DescribeQuorumRequest")
AV = codec.module("ApiVersionsRequest")


async def test_a_standalone_combined_node_runs_the_default_coordinator(tmp_path):
    broker, controller = peer.free_port(), peer.free_port()
    node = peer.RpcNode("ours1", tmp_path, {
        "process.roles": "broker,controller", "node.id": 1,
        "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller}",
        "log.dirs": tmp_path / "data",
        "diskless.metadata.topic.replication.factor": 1,
    })  # fmt: skip
    node.format(peer.random_cluster_id(), "--standalone")
    directory = next(line.split("=", 1)[1] for line in
                     (tmp_path / "data" / "meta.properties").read_text().splitlines()
                     if line.startswith("directory.id="))  # fmt: skip
    with node:
        node.wait_started(timeout=90)
        async with KafkaRpcClient(f"127.0.0.1:{controller}") as c:
            dq = await c.request(DQ.DescribeQuorumRequest(topics=(DQ.TopicData(
                topic_name="__cluster_metadata",
                partitions=(DQ.PartitionData(partition_index=0),)),)), version=2)  # fmt: skip
            p = dq.topics[0].partitions[0]
            assert (p.error_code, p.leader_id) == (0, 1)
            assert [(v.replica_id, v.replica_directory_id) for v in p.current_voters] == [
                (1, parse_uuid_text(directory))
            ]
            av = await c.request(
                AV.ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                version=4,
            )
            finalized = {f.name: f.max_version_level for f in av.finalized_features}
            assert finalized.get("kraft.version") == 1
        async with KafkaRpcClient(f"127.0.0.1:{broker}", client_id="broker-1") as c:
            topic = uuid.uuid4()
            init_topic = _first_elem(mod("InitDisklessTopicsRequest"), "topics")(
                topic_id=topic, num_partitions=1
            )

            async def initialized():
                r = await c.request(M("InitDisklessTopicsRequest")(topics=(init_topic,)))
                return [x.error_code for x in r.responses] == [0]

            await until(
                initialized, "the coordinator takes InitDisklessTopics", timeout=60, interval=0.5
            )
            r = await c.request(_commit(topic, "obj-1", [(0, 10, 100, 0)]))
            got = [(q.error_code, q.assigned_base_offset) for t in r.topics for q in t.partitions]
            assert got == [(0, 0)]
