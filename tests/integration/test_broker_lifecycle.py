"""The broker lifecycle over real sockets: a node registers with the active controller (itself in
combined mode) and gets unfenced; CreateTopics / DeleteTopics on the broker listener, directly or
forwarded from a broker-only node; Metadata answered from the committed image; third-party admin
clients (kafka-python, confluent-kafka) against a `kafka-rpc serve` subprocess."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode as E
from tests.integration.conftest import TIMEOUT, start_server, wait_broker_unfenced
from tests.integration.test_cli import ServeProcess
from tests.waiting import until, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

CT = codec.module("CreateTopicsRequest")
DT = codec.module("DeleteTopicsRequest")
MD = codec.module("MetadataRequest")
ZERO = uuid.UUID(int=0)


def create_req(*names, partitions=1, validate_only=False):
    return CT.CreateTopicsRequest(
        topics=tuple(
            CT.CreatableTopic(name=n, num_partitions=partitions, replication_factor=1)
            for n in names
        ),
        timeout_ms=5000,
        validate_only=validate_only,
    )


def md_req(*names, auto=False):
    return MD.MetadataRequest(
        topics=None if not names else tuple(MD.MetadataRequestTopic(name=n) for n in names),
        allow_auto_topic_creation=auto,
    )


def user_topics(md):
    """The Metadata response's topics without the internal ones (``__diskless-metadata``, which
    the controller creates for the Batch Coordinator)."""
    return tuple(t for t in md.topics if not t.is_internal)


@pytest.fixture
async def node(tmp_path):
    running = await start_server(tmp_path)
    try:
        yield running
    finally:
        await running.stop()


async def test_registers_itself_and_creates_deletes_topics(node):
    server = node.server
    lifecycle = server.broker_lifecycle
    await asyncio.wait_for(lifecycle.unfenced.wait(), TIMEOUT)
    assert lifecycle.state == "RUNNING" and lifecycle.broker_epoch >= 0
    reg = server.controller.image.brokers[1]
    assert not reg.fenced and reg.incarnation_id == lifecycle.incarnation_id
    assert [(e.name, e.port) for e in reg.endpoints] == [("PLAINTEXT", node.port())]

    client = await KafkaRpcClient.connect(f"127.0.0.1:{node.port()}", request_timeout=TIMEOUT)
    try:
        md = await client.request(md_req())
        assert [(b.node_id, b.port) for b in md.brokers] == [(1, node.port())]
        assert md.controller_id == 1 and user_topics(md) == ()

        # validate_only: an answer, no topic
        resp = await client.request(create_req("t1", partitions=3, validate_only=True))
        assert [(t.name, t.error_code, t.num_partitions) for t in resp.topics] == [("t1", 0, 3)]
        assert user_topics(await client.request(md_req())) == ()

        resp = await client.request(create_req("t1", "t2", partitions=3))
        assert [(t.name, t.error_code) for t in resp.topics] == [("t1", 0), ("t2", 0)]
        ids = {t.name: t.topic_id for t in resp.topics}
        assert ZERO not in ids.values()
        resp = await client.request(create_req("t1", "bad name"))
        assert [(t.name, t.error_code) for t in resp.topics] == [
            ("t1", E.TOPIC_ALREADY_EXISTS),
            ("bad name", E.INVALID_TOPIC_EXCEPTION),
        ]
        assert all(t.error_message for t in resp.topics)

        md = await client.request(md_req())  # committed before CreateTopics answered
        assert [(t.name, t.topic_id) for t in user_topics(md)] == [("t1", ids["t1"]),
                                                                  ("t2", ids["t2"])]
        got = [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes)
               for p in user_topics(md)[0].partitions]  # fmt: skip
        assert got == [(i, 1, (1,), (1,)) for i in range(3)]

        # DeleteTopics by name (v5) and by id (v6)
        resp = await client.request(
            DT.DeleteTopicsRequest(topic_names=("t1", "zz"), timeout_ms=5000), version=5
        )
        assert [(r.name, r.error_code) for r in resp.responses] == [
            ("t1", 0),
            ("zz", E.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        resp = await client.request(
            DT.DeleteTopicsRequest(topics=(DT.DeleteTopicState(name=None, topic_id=ids["t2"]),),
                                   timeout_ms=5000), version=6)  # fmt: skip
        assert [(r.name, r.topic_id, r.error_code) for r in resp.responses] == [
            ("t2", ids["t2"], 0)
        ]
        md = await client.request(md_req("t1", "t2"))
        assert [(t.name, t.error_code) for t in md.topics] == [
            ("t1", E.UNKNOWN_TOPIC_OR_PARTITION),
            ("t2", E.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        # re-created under the same name: a new id
        resp = await client.request(create_req("t1"))
        assert resp.topics[0].error_code == 0 and resp.topics[0].topic_id != ids["t1"]
        md = await client.request(md_req("t1"))
        assert md.topics[0].topic_id == resp.topics[0].topic_id

        # Metadata auto-creation: LEADER_NOT_AVAILABLE now, the topic shortly after
        md = await client.request(md_req("auto1", auto=True))
        assert [(t.name, t.error_code) for t in md.topics] == [("auto1", E.LEADER_NOT_AVAILABLE)]

        async def auto_created():
            m = await client.request(md_req("auto1"))
            return m.topics[0].error_code == 0

        await until(auto_created, "auto1 to be created", timeout=TIMEOUT)
    finally:
        await client.close()

    # the controller listener answers too (this node is the active controller)
    ctl_port = node.port("CONTROLLER")
    client = await KafkaRpcClient.connect(f"127.0.0.1:{ctl_port}", request_timeout=TIMEOUT)
    try:
        resp = await client.request(create_req("via-controller"))
        assert resp.topics[0].error_code == 0
    finally:
        await client.close()

    # graceful stop: controlled shutdown fences the broker
    await node.server.broker_lifecycle.stop(TIMEOUT)
    assert node.server.controller.image.brokers[1].fenced


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_controller(tmp_path, **extra):
    """``(running, controller.quorum.voters)``: a controller-only node 1, the only voter, on a
    free port (its controller listener's address is in the voters, so it is fixed)."""
    ctl_port = _free_port()
    voters = f"1@127.0.0.1:{ctl_port}"
    controller = await start_server(
        tmp_path,
        **{"listeners": f"CONTROLLER://127.0.0.1:{ctl_port}", "process.roles": "controller",
           "controller.quorum.voters": voters, **extra},
    )  # fmt: skip
    return controller, voters


async def test_broker_only_node_forwards_to_the_controller(tmp_path):
    controller, voters = await start_controller(tmp_path / "c")
    broker = None
    try:
        cid = controller.server.cluster_id
        broker = await start_server(
            tmp_path / "b",
            **{"listeners": "PLAINTEXT://127.0.0.1:0", "process.roles": "broker",
               "node.id": "2", "controller.quorum.voters": voters, "cluster.id": cid},
        )  # fmt: skip
        await asyncio.wait_for(broker.server.broker_lifecycle.unfenced.wait(), 3 * TIMEOUT)
        assert controller.server.controller.image.unfenced_brokers() == [2]

        client = await KafkaRpcClient.connect(f"127.0.0.1:{broker.port()}", request_timeout=TIMEOUT)
        try:
            resp = await client.request(create_req("fwd", partitions=2))
            assert resp.topics[0].error_code == 0
            tid = resp.topics[0].topic_id

            async def visible():  # the broker's observer image catches up
                m = await client.request(md_req("fwd"))
                return m.topics[0].error_code == 0

            await until(visible, "the broker's image to list fwd", timeout=TIMEOUT)
            md = await client.request(md_req("fwd"))
            assert md.topics[0].topic_id == tid
            assert [b.node_id for b in md.brokers] == [2]
            assert md.controller_id == 2  # the controller (1) is no broker: a listed broker
            # CreatePartitions is forwarded the same way
            CP = codec.module("CreatePartitionsRequest")
            resp = await client.request(CP.CreatePartitionsRequest(
                topics=(CP.CreatePartitionsTopic(name="fwd", count=3, assignments=None),
                        CP.CreatePartitionsTopic(name="nope", count=3, assignments=None)),
                timeout_ms=5000, validate_only=False))  # fmt: skip
            assert [(r.name, r.error_code) for r in resp.results] == [
                ("fwd", 0), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION)]  # fmt: skip
            assert len(controller.server.controller.image.topics[tid].partitions) == 3
            resp = await client.request(
                DT.DeleteTopicsRequest(topics=(DT.DeleteTopicState(name=None, topic_id=tid),),
                                       timeout_ms=5000), version=6)  # fmt: skip
            assert [(r.name, r.error_code) for r in resp.responses] == [("fwd", 0)]
        finally:
            await client.close()
    finally:
        if broker is not None:
            await broker.stop()
        await controller.stop()


async def test_no_controller_answers_request_timed_out(tmp_path):
    """A broker-only node whose controller went away after it started (it starts only once it
    caught up with the metadata log, as Kafka's broker): forwarded admin requests answer
    REQUEST_TIMED_OUT with a message; Metadata still answers from its image."""
    controller, voters = await start_controller(tmp_path / "c")
    broker = await start_server(
        tmp_path / "b",
        **{"listeners": "PLAINTEXT://127.0.0.1:0", "process.roles": "broker", "node.id": "2",
           "controller.quorum.voters": voters, "cluster.id": controller.server.cluster_id,
           "controller.quorum.request.timeout.ms": "300"},
    )  # fmt: skip
    try:
        await controller.stop()  # nobody listens on the controller's port from now on
        client = await KafkaRpcClient.connect(f"127.0.0.1:{broker.port()}", request_timeout=TIMEOUT)
        try:
            resp = await client.request(create_req("x"))
            assert [(t.name, t.error_code) for t in resp.topics] == [("x", E.REQUEST_TIMED_OUT)]
            assert resp.topics[0].error_message
            resp = await client.request(
                DT.DeleteTopicsRequest(topic_names=("x",), timeout_ms=1000), version=5
            )
            assert [(r.name, r.error_code) for r in resp.responses] == [("x", E.REQUEST_TIMED_OUT)]
            md = await client.request(md_req())
            assert [b.node_id for b in md.brokers] == [2]
        finally:
            await client.close()
    finally:
        await broker.stop()


# ------------------------------------------------------------------ readiness
CLUSTER_ID = "q1Sh-9_ISia_zwGINzRvyQ"


async def test_broker_listener_accepts_only_once_caught_up(tmp_path):
    """Kafka's ``BrokerServer`` enables its client listeners only once the controller
    acknowledged that the broker caught up with the metadata log: a broker-only node started
    before its controller has its port bound (advertised in its registration) but refuses
    connections and is not started; once the controller runs, the broker registers, catches
    up, and only then accepts."""
    from kafka_rpc.node import Node, handlers_registry
    from tests.integration.conftest import make_config

    ctl_port = _free_port()
    voters = f"1@127.0.0.1:{ctl_port}"
    server = Node(make_config(tmp_path / "b", **{
        "listeners": "PLAINTEXT://127.0.0.1:0", "process.roles": "broker", "node.id": "2",
        "controller.quorum.voters": voters, "cluster.id": CLUSTER_ID}), handlers_registry())
    task = asyncio.create_task(server.serve())
    controller = None
    try:
        await until(lambda: "PLAINTEXT" in server.listeners, "the broker listener bound")
        port = server.bound["PLAINTEXT"][1]
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        assert not server.started.is_set() and not task.done()
        controller = await start_server(tmp_path / "c", **{
            "listeners": f"CONTROLLER://127.0.0.1:{ctl_port}", "process.roles": "controller",
            "controller.quorum.voters": voters, "cluster.id": CLUSTER_ID})  # fmt: skip
        await asyncio.wait_for(server.started.wait(), 3 * TIMEOUT)
        assert server.broker_lifecycle.caught_up.is_set()
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
    finally:
        server.should_exit.set()
        await asyncio.wait_for(task, 3 * TIMEOUT)
        if controller is not None:
            await controller.stop()


async def test_start_fails_after_server_max_startup_time_ms(tmp_path):
    """Past Kafka's ``server.max.startup.time.ms`` without its controller the start fails with
    TimeoutError naming what it waited for, and releases what it took (the directory lock: a
    second start on the same directory gets as far again)."""
    from kafka_rpc.node import Node, handlers_registry
    from tests.integration.conftest import make_config

    overrides = {"listeners": "PLAINTEXT://127.0.0.1:0", "process.roles": "broker",
                 "controller.quorum.voters": f"9@127.0.0.1:{_free_port()}",
                 "server.max.startup.time.ms": "300"}  # fmt: skip
    for _ in range(2):
        server = Node(make_config(tmp_path, **overrides), handlers_registry())
        with pytest.raises(TimeoutError, match="caught up with the metadata log"):
            await asyncio.wait_for(server.serve(), 3 * TIMEOUT)
        assert not server.started.is_set()


def test_serve_prints_no_cluster_id_when_the_start_fails(tmp_path):
    """`kafka-rpc serve` prints its ``cluster id`` line only once it serves: a start that
    gives up exits 1 saying why, with no such line."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "serve", "--override",
         "listeners=PLAINTEXT://127.0.0.1:0", "--override", "process.roles=broker",
         "--override", f"controller.quorum.voters=9@127.0.0.1:{_free_port()}",
         "--override", "server.max.startup.time.ms=500",
         "--override", f"log.dirs={tmp_path / 'data'}"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "cluster id" not in r.stdout, r.stdout
    assert "start failed: timed out" in r.stderr and "server.max.startup.time.ms" in r.stderr


# ------------------------------------------------------------------ third-party admin clients
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    srv = ServeProcess(tmp_path_factory.mktemp("lifecycle"))
    try:
        wait_broker_unfenced(srv.bootstrap)
        yield srv
    finally:
        srv.stop()




def _wait_listed(admin_list, name, present=True, timeout=TIMEOUT):
    wait_until(lambda: (name in admin_list()) == present,
               f"{name} {'' if present else 'not '}listed", timeout=timeout)  # fmt: skip


def test_kafka_python_admin_topics(served):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=served.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic("kp-a", num_partitions=2, replication_factor=1)])
        _wait_listed(admin.list_topics, "kp-a")
        (desc,) = admin.describe_topics(["kp-a"])
        assert (desc["error_code"], desc["name"]) == (0, "kp-a")
        assert desc["topic_id"] != str(ZERO)  # Metadata v10+ carries the topic id
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1]
        assert all(
            (p["leader_id"], p["replica_nodes"], p["isr_nodes"]) == (1, [1], [1])
            for p in desc["partitions"]
        )
        admin.delete_topics(["kp-a"])
        _wait_listed(admin.list_topics, "kp-a", present=False)
    finally:
        admin.close()


def test_confluent_admin_topics(served):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": served.bootstrap, "socket.timeout.ms": 5000})
    futs = admin.create_topics([NewTopic("ck-a", num_partitions=3, replication_factor=1)],
                               request_timeout=10)  # fmt: skip
    futs["ck-a"].result(timeout=10)

    def names():
        return set(admin.list_topics(timeout=10).topics)

    _wait_listed(names, "ck-a")
    md = admin.list_topics(topic="ck-a", timeout=10)
    t = md.topics["ck-a"]
    assert t.error is None and sorted(t.partitions) == [0, 1, 2]
    assert all(p.leader == 1 and p.replicas == [1] for p in t.partitions.values())
    futs = admin.delete_topics(["ck-a"], request_timeout=10)
    futs["ck-a"].result(timeout=10)
    _wait_listed(names, "ck-a", present=False)
