"""Kafka's ``kafka-log-dirs`` and ``kafka-reassign-partitions`` (Apache Kafka's jars)
against a kafka-rpc node: both read DescribeLogDirs (35) from our broker listener.

``kafka-log-dirs --describe`` (4.4.0 and 4.0.2) prints the JSON it built from our answer: the
node's log directories with the ``__diskless-metadata`` Raft partition held on disk.
``kafka-reassign-partitions --execute`` (4.4.0) asks every replica's broker for its directory
(``getReplicaToLogDir``, DescribeLogDirs) before it sends AlterPartitionReassignments, and
``--verify`` asks again for the replicas the file names a directory for; a reassignment of a
classic topic's partition on a one-node cluster goes through both, and on three nodes a move to
another broker starts, stays in progress (our brokers do not replicate classic partitions) and is
cancelled. ``docs/kafka-tools.md`` is the user's side of it.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from tests.kafka import peer
from tests.kafka.test_kafka_tools import create_topic, wait_for_topic
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka

TIMEOUT = 60.0
META = "__diskless-metadata"
TOPIC = "moved"


def tool(version: str, name: str, *args: str, **kw):
    return peer.run_tool(version, name, *args, timeout=TIMEOUT, **kw)


def describe_log_dirs(bootstrap: str, version: int = 5):
    """Our own client's DescribeLogDirs of every partition."""

    async def run():
        async with KafkaRpcClient(bootstrap, request_timeout=TIMEOUT) as c:
            req = codec.message_class("DescribeLogDirsRequest")(topics=None)
            return await c.request(req, version=version, timeout=TIMEOUT)

    return asyncio.run(run())


@pytest.fixture(scope="module")
def node(kafka_newest, tmp_path_factory, request):
    work = tmp_path_factory.mktemp("ours")
    bport, cport = peer.free_port(), peer.free_port()
    data, second = work / "data", work / "second"
    props = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "listeners": f"PLAINTEXT://127.0.0.1:{bport},CONTROLLER://127.0.0.1:{cport}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "log.dirs": f"{data},{second}",
    }
    rpc = peer.RpcNode("ours", work, props)
    failed_before = request.session.testsfailed
    try:
        rpc.format(peer.random_cluster_id())
        rpc.start()
        rpc.wait_started(TIMEOUT)
        broker = f"127.0.0.1:{bport}"
        create_topic(broker, TOPIC, 1, {})
        wait_for_topic(broker, META)
        yield broker, data, second
    finally:
        if request.session.testsfailed > failed_before:
            print(f"\n----- {rpc.name} log tail -----\n{rpc.tail()}", file=sys.stderr)
        rpc.kill()


def _json_line(out: str) -> dict:
    return json.loads(next(line for line in out.splitlines() if line.startswith("{")))


@pytest.mark.parametrize("release", ["newest", "oldest"])
def test_log_dirs_describe_parses_our_answer(node, release, request):
    """4.4.0's tool asks v5, 4.0.2's v4."""
    kafka = request.getfixturevalue(f"kafka_{release}")
    broker, data, second = node
    out = tool(kafka, "kafka-log-dirs", "--describe", "--bootstrap-server", broker).stdout
    assert "Received log directory information from brokers 1" in out, out
    (b,) = _json_line(out)["brokers"]
    assert b["broker"] == 1
    dirs = {d["logDir"]: d for d in b["logDirs"]}
    assert set(dirs) == {str(data), str(second)}
    assert dirs[str(data)]["error"] is None and dirs[str(second)]["partitions"] == []
    (p,) = dirs[str(data)]["partitions"]
    assert p["partition"] == f"{META}-0"
    assert p["offsetLag"] == 0 and p["isFuture"] is False
    ours = describe_log_dirs(broker).results[0].topics[0].partitions[0]
    # the segment grows between the two requests only by records written meanwhile
    assert ours.partition_size > 0 and p["size"] <= ours.partition_size
    # --topic-list: the classic topic has no replica on disk, so it is listed nowhere
    out = tool(kafka, "kafka-log-dirs", "--describe", "--bootstrap-server", broker,
               "--topic-list", TOPIC).stdout  # fmt: skip
    (b,) = _json_line(out)["brokers"]
    assert [d["partitions"] for d in b["logDirs"]] == [[], []]


def test_reassign_partitions_execute_and_verify(node, kafka_newest, tmp_path):
    broker, _data, _second = node
    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [1], "log_dirs": ["any"]},
    ]}))  # fmt: skip
    out = tool(kafka_newest, "kafka-reassign-partitions", "--bootstrap-server", broker,
               "--execute", "--reassignment-json-file", str(plan)).stdout  # fmt: skip
    assert "Current partition replica assignment" in out, out
    # the current assignment the tool printed for rollback: the replica has no directory on
    # our broker (DescribeLogDirs lists no such partition), so "any"
    current = _json_line(out)
    assert current["partitions"] == [
        {"topic": TOPIC, "partition": 0, "replicas": [1], "log_dirs": ["any"]}
    ]
    assert f"Successfully started partition reassignment for {TOPIC}-0" in out, out
    out = tool(kafka_newest, "kafka-reassign-partitions", "--bootstrap-server", broker,
               "--verify", "--reassignment-json-file", str(plan)).stdout  # fmt: skip
    assert f"Reassignment of partition {TOPIC}-0 is completed" in out, out


def test_reassign_partitions_verify_with_a_log_dir(node, kafka_newest, tmp_path):
    """A file that names a directory makes ``--verify`` ask DescribeLogDirs for that replica:
    our broker holds none of it, which the tool reports as a missing replica."""
    broker, data, _second = node
    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [1], "log_dirs": [str(data)]},
    ]}))  # fmt: skip
    out = tool(kafka_newest, "kafka-reassign-partitions", "--bootstrap-server", broker,
               "--verify", "--reassignment-json-file", str(plan), check=False)  # fmt: skip
    text = out.stdout + out.stderr
    assert "DESCRIBE_LOG_DIRS" not in text, text
    assert f"Partition {TOPIC}-0 is not found in any live log dir on broker 1" in text, text


# ------------------------------------------------------------------ three nodes
def _metadata(bootstrap: str, topics: list[str] | None):
    async def run():
        async with KafkaRpcClient(bootstrap, request_timeout=TIMEOUT) as c:
            m = codec.module("MetadataRequest")
            names = None if topics is None else tuple(m.MetadataRequestTopic(name=t)
                                                      for t in topics)  # fmt: skip
            return await c.request(m.MetadataRequest(topics=names), version=12, timeout=TIMEOUT)

    return asyncio.run(run())


@pytest.fixture(scope="module")
def three(kafka_newest, tmp_path_factory, request):
    """Three combined kafka-rpc nodes (node ids 1-3), every broker registered."""
    work = tmp_path_factory.mktemp("three")
    ids = (1, 2, 3)
    bports = {i: peer.free_port() for i in ids}
    cports = {i: peer.free_port() for i in ids}
    voters = ",".join(f"{i}@127.0.0.1:{cports[i]}" for i in ids)

    def props(i: int) -> dict:
        return {
            "process.roles": "broker,controller",
            "node.id": i,
            "listeners": f"PLAINTEXT://127.0.0.1:{bports[i]},CONTROLLER://127.0.0.1:{cports[i]}",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.voters": voters,
            "log.dirs": work / f"n{i}" / "data",
        }

    nodes = {i: peer.RpcNode(f"ours{i}", work / f"n{i}", props(i)) for i in ids}
    failed_before = request.session.testsfailed
    cluster_id = peer.random_cluster_id()
    try:
        for n in nodes.values():
            n.format(cluster_id)
        for n in nodes.values():
            n.start()
        for n in nodes.values():
            n.wait_started(2 * TIMEOUT)
        brokers = {i: f"127.0.0.1:{bports[i]}" for i in ids}
        wait_until(lambda: len(_metadata(brokers[1], []).brokers) == 3, "three brokers",
                   timeout=TIMEOUT, interval=0.2)  # fmt: skip
        create_topic(brokers[1], TOPIC, 1, {})
        wait_for_topic(brokers[1], META)
        yield brokers, {i: work / f"n{i}" / "data" for i in ids}
    finally:
        if request.session.testsfailed > failed_before:
            for n in nodes.values():
                print(f"\n----- {n.name} log tail -----\n{n.tail()}", file=sys.stderr)
        for n in nodes.values():
            n.kill()


def test_three_nodes_log_dirs_and_a_move_to_another_broker(three, kafka_newest, tmp_path):
    brokers, data = three
    bootstrap = ",".join(brokers.values())
    out = tool(kafka_newest, "kafka-log-dirs", "--describe", "--bootstrap-server", bootstrap,
               "--broker-list", "1,2,3").stdout  # fmt: skip
    listed = {b["broker"]: b["logDirs"] for b in _json_line(out)["brokers"]}
    assert set(listed) == {1, 2, 3}
    for i, dirs in listed.items():
        (d,) = dirs
        assert d["logDir"] == str(data[i]) and d["error"] is None
        on_disk = sorted(p.name for p in data[i].iterdir() if p.name.startswith(f"{META}-"))
        assert sorted(p["partition"] for p in d["partitions"]) == on_disk, (i, d)
    # a replica of the classic topic moved to another broker: --execute asks the current
    # replica's broker for its directory, then starts the move
    (t,) = _metadata(brokers[1], [TOPIC]).topics
    (p,) = t.partitions
    (current,) = p.replica_nodes
    target = next(i for i in brokers if i != current)
    plan = tmp_path / "move.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": 0, "replicas": [target], "log_dirs": ["any"]},
    ]}))  # fmt: skip
    out = tool(kafka_newest, "kafka-reassign-partitions", "--bootstrap-server", bootstrap,
               "--execute", "--reassignment-json-file", str(plan)).stdout  # fmt: skip
    assert _json_line(out)["partitions"] == [
        {"topic": TOPIC, "partition": 0, "replicas": [current], "log_dirs": ["any"]}
    ]
    assert f"Successfully started partition reassignment for {TOPIC}-0" in out, out
    out = tool(kafka_newest, "kafka-reassign-partitions", "--bootstrap-server", bootstrap,
               "--verify", "--reassignment-json-file", str(plan), check=False)  # fmt: skip
    assert "DESCRIBE_LOG_DIRS" not in out.stdout + out.stderr, out
    # the move never completes: a kafka-rpc broker does not replicate classic partitions, so no
    # AlterPartition grows the ISR over the target
    assert f"Reassignment of partition {TOPIC}-0 is still in progress." in out.stdout, out
    out = tool(kafka_newest, "kafka-reassign-partitions", "--bootstrap-server", bootstrap,
               "--cancel", "--reassignment-json-file", str(plan)).stdout  # fmt: skip
    assert f"Successfully cancelled partition reassignment for: {TOPIC}-0" in out, out
