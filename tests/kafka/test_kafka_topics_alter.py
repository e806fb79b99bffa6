"""Apache Kafka's own ``kafka-topics --alter`` against a ``kafka-rpc serve`` node with no
coordinator setting: CreatePartitions (37) on our broker listener, forwarded to our controller,
adds ``__diskless-metadata`` partitions (KIP-1164: one more Batch Coordinator each), and
Kafka's tool prints our controller's errors as Kafka's do; ``kafka-topics --delete`` of the topic
gets our refusal (POLICY_VIOLATION with its message) and the topic stays."""

from __future__ import annotations

import re

import pytest

from tests.kafka import peer

pytestmark = pytest.mark.kafka

META = "__diskless-metadata"


def test_kafka_topics_alter_adds_batch_coordinators(kafka_newest, tmp_path, procs):
    bport, cport = peer.free_port(), peer.free_port()
    node = peer.RpcNode("rpc", tmp_path, {
        "node.id": 1,
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://127.0.0.1:{bport},CONTROLLER://127.0.0.1:{cport}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "log.dirs": tmp_path / "data",
    })  # fmt: skip
    procs.append(node)
    node.start()
    node.wait_started(90)  # a node alone prints it once its coordinator runs
    addr = f"127.0.0.1:{bport}"

    def topics(*args: str, check: bool = True):
        return peer.run_tool(kafka_newest, "kafka-topics", "--bootstrap-server", addr, *args,
                             check=check, timeout=90)  # fmt: skip

    topics("--alter", "--topic", META, "--partitions", "3")
    node.wait_for_log(rf"{META}-2: starting the replica of node 1", 30)
    # ours describes it (Kafka's --describe asks DescribeConfigs too)
    out = node.cli("topics", "--bootstrap-server", addr, "--describe", "--topic", META).stdout
    assert re.search(rf"Topic: {META}\tTopicId: \S+\tPartitionCount: 3\t", out), out

    r = topics("--alter", "--topic", META, "--partitions", "2", check=False)
    assert r.returncode == 1
    assert ("Error while executing topic command : The topic __diskless-metadata currently has "
            "3 partition(s); 2 would not be an increase.") in r.stdout  # fmt: skip
    r = topics("--alter", "--topic", META, "--partitions", "4", "--replica-assignment",
               "1,1,1,7", check=False)  # fmt: skip
    assert r.returncode == 1
    assert ("The manual partition assignment includes broker 7, but no such broker is "
            "registered.") in r.stdout  # fmt: skip
    r = topics("--delete", "--topic", META, check=False)
    assert r.returncode == 1
    assert (f"Topic {META} holds the state of every Batch Coordinator; deleting it would lose "
            "every diskless partition's offsets, so it cannot be deleted") in r.stdout, r.stdout
    out = node.cli("topics", "--bootstrap-server", addr, "--describe", "--topic", META).stdout
    assert re.search(rf"Topic: {META}\tTopicId: \S+\tPartitionCount: 3\t", out), out
