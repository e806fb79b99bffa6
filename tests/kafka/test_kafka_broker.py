"""An unmodified Apache Kafka broker (``process.roles=broker``) on a kafka-rpc controller
(``process.roles=controller``), with real clients (docs/kafka-brokers.md:
one broker with RF=1 topics, and admin operations through the broker).

One kafka-rpc controller and one Kafka 4.4.0 broker for the whole module, started once (a
Kafka JVM start is expensive). Each test creates the topics and records it needs, under names
of its own, so the tests run in any order and any subset; each asserts, on our controller's
request metrics before and after (:func:`_answered`), the RPCs it causes itself:

- the broker registers with our controller and is unfenced; nothing fails in its log;
- ``kafka-topics --bootstrap-server <the Kafka broker>`` creates a topic through Envelope;
  the broker hosts it under our topic id (``partition.metadata``);
- the cluster, formatted ``--kafka-compatible``, refuses CreateChunks and
  AssignPartitionToBatchCoordinator naming our feature, and ``kafka-features upgrade`` of our
  feature while the Kafka broker is registered;
- confluent-kafka and kafka-python produce with ``acks=all`` and idempotence (the broker's
  producer ids come from our AllocateProducerIds) and a consumer group reads everything
  (``__consumer_offsets`` is created through our CreateTopics);
- a transactional producer commits one transaction and aborts another; a ``read_committed``
  consumer sees only the committed one (``__transaction_state`` through us);
- ``kafka-configs --alter`` on a topic and on the cluster-wide broker default take effect on
  the broker (its DescribeConfigs answers from its own metadata image); an unknown topic
  config is refused with INVALID_CONFIG; DescribeConfigs of the topic (with synonyms, a dynamic
  default of every broker set) answers alike on the broker and on our controller;
- SCRAM credentials and a client quota set for a user show in the broker's
  DescribeUserScramCredentials / DescribeClientQuotas;
- topic deletion removes the broker's partition directories;
- ElectLeaders is answered per partition through the broker;
- the broker, restarted with an empty metadata log after our controller snapshotted and
  deleted the log's head, loads our snapshot through FetchSnapshot and serves the same topics
  under the same ids with the same data (and runs on for the other tests);
- the RPCs the broker sent are read from our controller's request metrics (printed, for the
  record; the life cycle ones checked), and Kafka's ``kafka-dump-log`` reads a copy of our
  controller's metadata log and snapshot byte for byte as ``kafka-rpc dump-log`` does."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import shutil
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafka_rpc.protocol import codec
from tests.kafka import peer
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka

STEP = 60.0  # s: the bound of every wait
BROKER_ID = 2
RETENTION_MS = 86_400_000  # log.retention.ms of both nodes (DescribeConfigs compares them)


class Cluster:
    def __init__(self, root: Path, version: str) -> None:
        self.root = root
        self.version = version
        self.ctrl_port = peer.free_port()
        self.broker_port = peer.free_port()
        self.metrics_port = peer.free_port()
        self.cluster_id = peer.random_cluster_id()
        self.bootstrap = f"127.0.0.1:{self.broker_port}"
        self.ctrl = peer.RpcNode("ctrl", root / "ctrl", {
            "process.roles": "controller", "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{self.ctrl_port}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"CONTROLLER://127.0.0.1:{self.ctrl_port}",
            "log.dirs": root / "ctrl" / "data",
            "metrics.port": self.metrics_port,
            # small segments and frequent snapshots, so the log's head can go (the restart test)
            "metadata.log.segment.bytes": 16384,
            "metadata.log.max.record.bytes.between.snapshots": 4096,
            "metadata.max.retention.bytes": 0,
            "metadata.log.retention.check.interval.ms": 500,
            "max.replication.lag.ms": 2000,
            "log.retention.ms": RETENTION_MS,  # a broker synonym of retention.ms, static
        })  # fmt: skip
        self.data = root / "broker" / "data"
        self.broker = peer.KafkaNode("broker", version, root / "broker", {
            "process.roles": "broker", "node.id": BROKER_ID,
            "controller.quorum.voters": f"1@127.0.0.1:{self.ctrl_port}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://{self.bootstrap}",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": self.data,
            "offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 3,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.num.partitions": 3, "transaction.state.log.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            "log.retention.check.interval.ms": 1000, "log.segment.delete.delay.ms": 1000,
            "log.retention.ms": RETENTION_MS,  # the same static synonym as our controller's
        })  # fmt: skip

    def metrics_by_version(self) -> dict[tuple[str, int], float]:
        """Our controller's ``kafka_rpc_requests_total`` on its CONTROLLER listener:
        ``{(api, request version): requests answered}``."""
        text = urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ).read().decode()
        out = {}
        for m in re.finditer(
            r'^kafka_rpc_requests_total\{api="(\w+)",listener="CONTROLLER",version="(\d+)"\} '
            r"([0-9.e+]+)$", text, re.M,
        ):  # fmt: skip
            out[m.group(1), int(m.group(2))] = float(m.group(3))
        return out

    def metrics(self) -> dict[str, float]:
        """Our controller's requests answered per API on its CONTROLLER listener (every
        version)."""
        out: dict[str, float] = {}
        for (api, _), n in self.metrics_by_version().items():
            out[api] = out.get(api, 0.0) + n
        return out

    def tool(self, name: str, *args: str, check: bool = True):
        return peer.run_tool(self.version, name, "--bootstrap-server", self.bootstrap, *args,
                             timeout=STEP, check=check)  # fmt: skip

    def topic_id(self, topic: str) -> str:
        out = self.tool("kafka-topics", "--describe", "--topic", topic).stdout
        return re.search(r"TopicId:\s*(\S+)", out).group(1)


@contextlib.contextmanager
def running_cluster(root: Path, version: str, bring_up: Callable[[Cluster], None] | None = None):
    """Our controller and a Kafka broker of ``version`` started and running; both killed on
    exit, with their log tails printed when the body or the start fails. ``bring_up(c)``
    formats and starts both (default: our controller formatted ``--kafka-compatible``, so the
    Kafka broker may register, and the broker running)."""
    c = Cluster(root, version)
    try:
        if bring_up is not None:
            bring_up(c)
        else:
            c.ctrl.format(c.cluster_id, "--kafka-compatible")
            c.ctrl.start()
            c.ctrl.wait_started(STEP)
            c.broker.format(c.cluster_id)
            c.broker.start()
            c.broker.wait_for_log(r"Transitioning from RECOVERY to RUNNING", STEP)
            c.broker.wait_for_log(r"Kafka Server started", STEP)
        yield c
    except BaseException:
        print(f"\n----- broker -----\n{c.broker.tail(60)}\n----- ctrl -----\n{c.ctrl.tail(40)}")
        raise
    finally:
        c.broker.kill()
        c.ctrl.kill()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, kafka_newest):
    with running_cluster(tmp_path_factory.mktemp("kafka-broker"), kafka_newest) as c:
        yield c


def _admin(c: Cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": c.bootstrap})


@contextlib.contextmanager
def _answered(c: Cluster, *apis: str) -> Iterator[None]:
    """The body makes our controller answer each of ``apis`` at least once more (its request
    metrics before and after the body: what this test caused, whatever ran before it)."""
    before = c.metrics()
    yield
    after = c.metrics()
    grew = {api: after.get(api, 0) - before.get(api, 0) for api in apis}
    assert all(n > 0 for n in grew.values()), (grew, after)


def _create_topics(c: Cluster, names: list[str], partitions: int = 1,
                   config: dict[str, str] | None = None) -> None:  # fmt: skip
    """CreateTopics through the broker (confluent-kafka's admin; the broker forwards it to our
    controller in an Envelope), then until the broker's metadata lists every one of them."""
    from confluent_kafka.admin import NewTopic

    admin = _admin(c)  # kept alive until the answer is in (its futures die with it)
    new = [NewTopic(n, partitions, 1, config=dict(config or {})) for n in names]
    for fut in admin.create_topics(new, request_timeout=STEP).values():
        fut.result(timeout=STEP)
    wait_until(lambda: set(names) <= set(admin.list_topics(timeout=10).topics),
               f"{names[0]}.. on the broker", timeout=STEP)  # fmt: skip


def _write_metadata_until(c: Cluster, done: Callable[[], object], what: str, prefix: str) -> None:
    """Records on our controller's metadata log - one-partition topics ``<prefix>-<n>``, 20 to a
    CreateTopics (a TopicRecord and a PartitionRecord each) - until ``done()`` holds: the
    controller snapshots every 4096 bytes of records and rolls its log every 16384 bytes, so a
    test that needs a snapshot or a deleted log head writes its own records for it."""
    made = 0

    def more() -> bool:
        nonlocal made
        if done():
            return True
        _create_topics(c, [f"{prefix}-{made + i}" for i in range(20)])
        made += 20
        return False

    wait_until(more, what, timeout=STEP, interval=0.5)
    print(f"{made} topics created for {what}")


def _produce_idempotently(c: Cluster, topic: str, values: list[str]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    for i, v in enumerate(values):
        p.produce(topic, key=str(i % 3).encode(), value=v.encode())
    assert p.flush(STEP) == 0


def _read(p: Path) -> str | None:
    return p.read_text() if p.exists() else None


def test_registered_and_unfenced(cluster):
    log = cluster.broker.log_text()
    assert "The broker has been unfenced" in log
    # no endless retries of anything we do not serve (AssignReplicasToDirs, Envelope...)
    assert "UnsupportedVersionException" not in log, cluster.broker.tail(40)
    md = _admin(cluster).list_topics(timeout=10)
    assert list(md.brokers) == [BROKER_ID]


def test_create_topic_through_envelope(cluster):
    topic = "created-through-envelope"
    # kafka-topics --describe (topic_id) lists the partitions' reassignments: forwarded too
    with _answered(cluster, "Envelope", "CreateTopics", "ListPartitionReassignments"):
        out = cluster.tool("kafka-topics", "--create", "--topic", topic, "--partitions", "3",
                           "--replication-factor", "1", "--config",
                           "retention.ms=3600000").stdout  # fmt: skip
        assert f"Created topic {topic}" in out, out
        tid = cluster.topic_id(topic)
    for p in range(3):
        meta = wait_until(lambda p=p: _read(cluster.data / f"{topic}-{p}" / "partition.metadata"),
                          f"{topic}-{p} on the broker's disk", timeout=STEP)  # fmt: skip
        assert f"topic_id: {tid}" in meta
    # an existing topic again: TOPIC_ALREADY_EXISTS from our controller, through the broker
    with _answered(cluster, "Envelope", "CreateTopics"):
        res = cluster.tool("kafka-topics", "--create", "--topic", topic, "--partitions", "1",
                           check=False)  # fmt: skip
    assert res.returncode != 0 and "already exists" in res.stdout + res.stderr


def test_kafka_compatible_refuses_our_commands(cluster):
    """Formatted --kafka-compatible, our features are 0: CreateChunks and
    AssignPartitionToBatchCoordinator answer UNSUPPORTED_VERSION naming the feature (CreateChunks
    in its ErrorMessage, the mapping command, which has no message field, in our log), and
    finalizing our feature is refused while the Kafka broker, which does not list it, is
    registered (FeatureControlManager's broker check), through Kafka's own kafka-features."""
    from kafka_rpc.client import KafkaRpcClient
    from kafka_rpc.protocol.errors import ErrorCode
    from kafka_rpc.protocol.uuids import parse_uuid_text

    topic = "refused-chunks"
    _create_topics(cluster, [topic])
    R = codec.message_class
    CC = codec.module("CreateChunksRequest")
    AP = codec.module("AssignPartitionToBatchCoordinatorRequest")
    tid = parse_uuid_text(cluster.topic_id(topic))

    async def ask():
        client = await KafkaRpcClient.connect(f"127.0.0.1:{cluster.ctrl_port}")
        try:
            chunks = await client.request(R("CreateChunksRequest")(topic_partitions=(
                CC.CreateChunksTopicPartition(topic_name=topic, partition_id=0,
                                              broker_ids=(BROKER_ID,), start_offset=10,
                                              prev_stop_offset=9, start_timestamp=-1),)))
            assign = await client.request(R("AssignPartitionToBatchCoordinatorRequest")(topics=(
                AP.AssignTopicToBatchCoordinator(topic_id=tid, partitions=(
                    AP.AssignTopicPartitionToBatchCoordinator(
                        partition_index=0, batch_coordinator_partition_index=0),)),)))
            return chunks, assign
        finally:
            await client.close()

    with _answered(cluster, "CreateChunks", "AssignPartitionToBatchCoordinator"):
        chunks, assign = asyncio.run(ask())  # fmt: skip
    r = chunks.results[0]
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION, r
    assert "kafka_rpc.chunks.version" in r.error_message, r.error_message
    assert [p.error_code for t in assign.responses for p in t.partitions] == [
        ErrorCode.UNSUPPORTED_VERSION]
    assert re.search(r"AssignPartitionToBatchCoordinator refused: it needs the feature "
                     r"kafka_rpc\.diskless\.version", cluster.ctrl.log_text())  # fmt: skip
    with _answered(cluster, "UpdateFeatures"):
        up = peer.run_tool(cluster.version, "kafka-features", "--bootstrap-controller",
                           f"127.0.0.1:{cluster.ctrl_port}", "upgrade", "--feature",
                           "kafka_rpc.chunks.version=1", timeout=STEP, check=False)  # fmt: skip
    assert up.returncode != 0, up
    assert f"Broker {BROKER_ID} does not support this feature" in up.stdout + up.stderr, up


def test_idempotent_producers_and_a_consumer_group(cluster):
    from confluent_kafka import Consumer
    from kafka import KafkaProducer

    topic = "idempotent"
    with _answered(cluster, "Envelope", "CreateTopics"):
        _create_topics(cluster, [topic], partitions=3)
    _produce_idempotently(cluster, topic, [f"ck-{i}" for i in range(30)])
    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=True)
    try:
        for i in range(20):
            kp.send(topic, key=str(i % 3).encode(), value=f"kp-{i}".encode())
        kp.flush(timeout=STEP)
    finally:
        kp.close(timeout=10)
    # the broker asks our controller for a block of producer ids the first time it needs one
    # (1000 ids; again once they run out or after its restart): whichever test produced first
    # made it ask, so what holds in any order is that our controller allocated the ids these
    # producers got - a KRaft broker has no other source of them
    assert cluster.metrics().get("AllocateProducerIds", 0) > 0
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    try:
        c.subscribe([topic])
        seen: list[str] = []
        deadline = time.monotonic() + STEP
        while len(seen) < 50 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen.append(m.value().decode())
        assert sorted(seen) == sorted([f"ck-{i}" for i in range(30)] +
                                      [f"kp-{i}" for i in range(20)])  # fmt: skip
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert (cluster.data / "__consumer_offsets-0").is_dir()


def test_transactions_commit_and_abort(cluster):
    from confluent_kafka import Consumer, Producer

    with _answered(cluster, "Envelope", "CreateTopics"):
        cluster.tool("kafka-topics", "--create", "--topic", "tx", "--partitions", "1")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tx-1"})
    p.init_transactions(STEP)
    p.begin_transaction()
    for i in range(5):
        p.produce("tx", value=f"committed-{i}".encode())
    p.commit_transaction(STEP)
    p.begin_transaction()
    for i in range(5):
        p.produce("tx", value=f"aborted-{i}".encode())
    p.flush(STEP)
    p.abort_transaction(STEP)
    p.begin_transaction()
    p.produce("tx", value=b"last")
    p.commit_transaction(STEP)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-tx",
                  "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})  # fmt: skip
    try:
        c.subscribe(["tx"])
        seen: list[str] = []
        deadline = time.monotonic() + STEP
        while "last" not in seen and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen.append(m.value().decode())
    finally:
        c.close()
    assert seen == [f"committed-{i}" for i in range(5)] + ["last"]
    assert (cluster.data / "__transaction_state-0").is_dir()
    assert cluster.metrics().get("AllocateProducerIds", 0) > 0  # as for the idempotent ones


def _describe(cluster: Cluster, kind: str, name: str) -> dict[str, str]:
    out = cluster.tool("kafka-configs", "--describe", "--entity-type", kind,
                       "--entity-name", name).stdout  # fmt: skip
    return dict(re.findall(r"(\S+)=(\S*) sensitive", out))


def _call(bootstrap: str, msg, version: int | None = None):
    """One request with our own client on a fresh connection."""
    from kafka_rpc.client import KafkaRpcClient

    async def run():
        async with KafkaRpcClient(bootstrap, request_timeout=STEP) as c:
            return await c.request(msg, version=version, timeout=STEP)

    return asyncio.run(run())


def _configs(bootstrap: str, topic: str) -> dict:
    """DescribeConfigs v4 of ``topic`` with synonyms: name -> (value, read only, source,
    sensitive, type, synonyms)."""
    m = codec.module("DescribeConfigsRequest")
    resource = m.DescribeConfigsResource(resource_type=2, resource_name=topic)
    req = m.DescribeConfigsRequest(resources=(resource,), include_synonyms=True)
    (res,) = _call(bootstrap, req, version=4).results
    assert res.error_code == 0, res
    return {
        c.name: (c.value, c.read_only, c.config_source, c.is_sensitive, c.config_type,
                 [(s.name, s.value, s.source) for s in c.synonyms])
        for c in res.configs
    }  # fmt: skip


def _broker_default(bootstrap: str, name: str, value: str) -> None:
    """IncrementalAlterConfigs SET of every broker's dynamic default ``name``."""
    m = codec.module("IncrementalAlterConfigsRequest")
    op = m.AlterableConfig(name=name, config_operation=0, value=value)
    resource = m.AlterConfigsResource(resource_type=4, resource_name="", configs=(op,))
    (res,) = _call(bootstrap, m.IncrementalAlterConfigsRequest(resources=(resource,))).responses
    assert res.error_code == 0, res


def test_configs_take_effect_on_the_broker(cluster):
    topic = "configured"
    _create_topics(cluster, [topic], partitions=3, config={"retention.ms": "3600000"})
    with _answered(cluster, "Envelope", "IncrementalAlterConfigs"):
        cluster.tool("kafka-configs", "--alter", "--entity-type", "topics", "--entity-name",
                     topic, "--add-config", "retention.ms=86400123,cleanup.policy=compact")
    wait_until(lambda: _describe(cluster, "topics", topic).get("retention.ms") == "86400123",
               "the topic config on the broker", timeout=STEP)  # fmt: skip
    assert _describe(cluster, "topics", topic)["cleanup.policy"] == "compact"
    cluster.tool("kafka-configs", "--alter", "--entity-type", "topics", "--entity-name",
                 topic, "--delete-config", "cleanup.policy")
    wait_until(lambda: "cleanup.policy" not in _describe(cluster, "topics", topic),
               "the deleted topic config gone on the broker", timeout=STEP)  # fmt: skip
    # the cluster-wide broker default: the broker reconfigures its log cleaner
    since = len(cluster.broker.log_text())
    with _answered(cluster, "Envelope", "IncrementalAlterConfigs"):
        cluster.tool("kafka-configs", "--alter", "--entity-type", "brokers", "--entity-default",
                     "--add-config", "log.cleaner.threads=2")
    cluster.broker.wait_for_log(r"Updating cluster configuration : log\.cleaner\.threads -> 2",
                                STEP, since=since)  # fmt: skip
    cluster.broker.wait_for_log(r"Shutting down the log cleaner", STEP, since=since)
    out = cluster.tool("kafka-configs", "--describe", "--entity-type", "brokers",
                       "--entity-default").stdout  # fmt: skip
    assert "log.cleaner.threads=2" in out, out
    # DescribeConfigs of the topic (v4, with synonyms): the Kafka broker answers from its image,
    # our controller from ours - alike config by config, once a broker synonym is a dynamic
    # default of every broker too (DYNAMIC_DEFAULT_BROKER_CONFIG ahead of DEFAULT_CONFIG)
    _broker_default(cluster.bootstrap, "message.max.bytes", "2000000")
    wait_until(lambda: _configs(cluster.bootstrap, topic)["max.message.bytes"][0] == "2000000",
               "the dynamic default on the broker", timeout=STEP)  # fmt: skip
    ctrl = f"127.0.0.1:{cluster.ctrl_port}"
    with _answered(cluster, "DescribeConfigs"):  # asked of our controller directly
        theirs, mine = _configs(cluster.bootstrap, topic), _configs(ctrl, topic)
    assert mine.pop("diskless.enable")[0] == "false"  # Inkless's topic config: ours only
    # the broker's log.segment.delete.delay.ms (a static synonym of file.delete.delay.ms) has no
    # counterpart on our controller, which takes only log.retention.ms / .bytes of them
    assert theirs.pop("file.delete.delay.ms")[:3] == ("1000", False, 4)
    assert mine.pop("file.delete.delay.ms")[:3] == ("60000", False, 5)
    assert theirs == mine
    assert mine["retention.ms"][2] == 1 and mine["max.message.bytes"][2] == 3
    # synonym sources: TOPIC_CONFIG (1), STATIC_BROKER_CONFIG (4: log.retention.ms of both
    # nodes' properties), DEFAULT_CONFIG (5); DYNAMIC_DEFAULT_BROKER_CONFIG (3)
    assert [s[2] for s in mine["retention.ms"][5]] == [1, 4, 5]
    assert [s[2] for s in mine["max.message.bytes"][5]] == [3, 5]
    # refused: an unknown topic config (our controller's INVALID_CONFIG, through the broker)
    with _answered(cluster, "Envelope", "IncrementalAlterConfigs"):
        res = cluster.tool("kafka-configs", "--alter", "--entity-type", "topics",
                           "--entity-name", topic, "--add-config", "no.such.config=1",
                           check=False)  # fmt: skip
    assert res.returncode != 0
    assert "no.such.config" in res.stdout + res.stderr


def test_scram_credentials_and_quotas(cluster):
    """kafka-configs on users: AlterUserScramCredentials and AlterClientQuotas through the
    broker; the broker's own Describe* (from its metadata image) show what our records say."""

    def described() -> str:
        return cluster.tool("kafka-configs", "--describe", "--entity-type", "users",
                            "--entity-name", "alice").stdout  # fmt: skip

    with _answered(cluster, "Envelope", "AlterUserScramCredentials"):
        cluster.tool("kafka-configs", "--alter", "--entity-type", "users", "--entity-name",
                     "alice", "--add-config",
                     "SCRAM-SHA-256=[iterations=8192,password=alice-secret]")  # fmt: skip
    wait_until(lambda: "SCRAM-SHA-256=iterations=8192" in described(), "alice's credential",
               timeout=STEP)  # fmt: skip
    cluster.tool("kafka-configs", "--alter", "--entity-type", "users", "--entity-name", "alice",
                 "--delete-config", "SCRAM-SHA-256")
    wait_until(lambda: "SCRAM-SHA-256" not in described(), "alice's credential deleted",
               timeout=STEP)  # fmt: skip
    # a client quota (AlterClientQuotas); the broker's DescribeClientQuotas answers from its image
    with _answered(cluster, "Envelope", "AlterClientQuotas"):
        cluster.tool("kafka-configs", "--alter", "--entity-type", "users", "--entity-name",
                     "alice", "--add-config", "producer_byte_rate=1048576")
    wait_until(lambda: "producer_byte_rate=1048576" in described(), "alice's quota",
               timeout=STEP)  # fmt: skip
    res = cluster.tool("kafka-configs", "--alter", "--entity-type", "users", "--entity-name",
                       "alice", "--add-config", "producer_byte_rate=1.5", check=False)
    assert res.returncode != 0 and "fractional" in res.stdout + res.stderr


def test_delete_topic_removes_partition_directories(cluster):
    _create_topics(cluster, ["spared"])
    cluster.tool("kafka-topics", "--create", "--topic", "doomed", "--partitions", "2")
    wait_until(lambda: (cluster.data / "doomed-1").is_dir(), "doomed-1 on disk", timeout=STEP)
    with _answered(cluster, "Envelope", "DeleteTopics"):
        cluster.tool("kafka-topics", "--delete", "--topic", "doomed")
    wait_until(lambda: not any(d.name.startswith("doomed-") for d in cluster.data.iterdir()),
               "doomed's partition directories removed", timeout=STEP)  # fmt: skip
    out = cluster.tool("kafka-topics", "--list").stdout.split()
    assert "doomed" not in out and "spared" in out


def test_elect_leaders(cluster):
    """ElectLeaders through the broker (confluent-kafka's admin): our controller answers per
    partition; with one broker every partition already has its preferred leader."""
    from confluent_kafka import ElectionType, KafkaError, TopicPartition

    _create_topics(cluster, ["elected"], partitions=3)
    admin = _admin(cluster)  # kept: a collected client cancels its futures
    with _answered(cluster, "Envelope", "ElectLeaders"):
        fut = admin.elect_leaders(ElectionType.PREFERRED,
                                  [TopicPartition("elected", 0), TopicPartition("elected", 9)])
        res = fut.result(timeout=STEP)
    codes = {tp.partition: (err.code() if err is not None else 0) for tp, err in res.items()}
    assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 9: KafkaError.UNKNOWN_TOPIC_OR_PART}


def test_restart_from_our_snapshot(cluster):
    from confluent_kafka import Consumer

    topics = ("restarted", "restarted-empty")
    _create_topics(cluster, list(topics), partitions=3)
    _produce_idempotently(cluster, "restarted", [f"r-{i}" for i in range(50)])
    ids = {t: cluster.topic_id(t) for t in topics}
    ctrl_log = cluster.root / "ctrl" / "data" / "__cluster_metadata-0"

    def head_gone():
        segs = sorted(int(p.stem) for p in ctrl_log.glob("*.log"))
        snaps = list(ctrl_log.glob("*.checkpoint"))
        return snaps and segs and segs[0] > 0

    _write_metadata_until(cluster, head_gone, "a snapshot and the metadata log's head deleted "
                          "on our controller", prefix="restart-filler")  # fmt: skip
    cluster.broker.stop()
    # the broker forgets its metadata log: it can only catch up through FetchSnapshot
    shutil.rmtree(cluster.data / "__cluster_metadata-0")
    since = len(cluster.broker.log_text())
    with _answered(cluster, "FetchSnapshot", "BrokerRegistration"):
        cluster.broker.start()
        cluster.broker.wait_for_log(r"Transitioning from RECOVERY to RUNNING", STEP, since=since)
    cluster.broker.wait_for_log(r"Kafka Server started", STEP, since=since)  # for the others
    assert {t: cluster.topic_id(t) for t in ids} == ids
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest"})  # fmt: skip
    try:
        c.subscribe(["restarted"])
        n = 0
        deadline = time.monotonic() + STEP
        while n < 50 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                n += 1
        assert n == 50
    finally:
        c.close()


def test_what_the_broker_sent(cluster, tmp_path):
    """The RPCs our controller answered (its request metrics): the life cycle, Raft, forwarded
    admin requests (counted under their own names) and producer ids. The whole table is printed
    (whatever ran before); asserted are the life cycle RPCs the broker's start caused and what
    this test causes."""
    meta = cluster.root / "ctrl" / "data" / "__cluster_metadata-0"
    # the records kafka-dump-log is to read: a topic (TOPIC, PARTITION), with a config (CONFIG),
    # an idempotent producer (PRODUCER_IDS, however old), and a snapshot
    with _answered(cluster, "Envelope", "CreateTopics"):
        _create_topics(cluster, ["dumped"], partitions=2, config={"retention.ms": "3600000"})
    _produce_idempotently(cluster, "dumped", [f"d-{i}" for i in range(10)])
    _write_metadata_until(cluster, lambda: any(meta.glob("*.checkpoint")),
                          "a snapshot on our controller", prefix="dump-filler")  # fmt: skip
    by_version = cluster.metrics_by_version()
    seen_rpcs = ", ".join(f"{k} v{v}={int(n)}" for (k, v), n in sorted(by_version.items()) if n)
    print("\nrequests answered on our CONTROLLER listener (api version=count):", seen_rpcs)
    m = cluster.metrics()
    for api in ("ApiVersions", "BrokerRegistration", "BrokerHeartbeat", "Fetch",
                "AllocateProducerIds"):  # fmt: skip
        assert m.get(api, 0) > 0, (api, m)
    # every forwarded request was one we serve (else the broker closes its client's connection)
    assert "controller responded unsupported version" not in cluster.broker.log_text()
    # what the broker read: our metadata log's records and snapshot (copies: the log grows),
    # decoded by Kafka's own kafka-dump-log (its MetadataRecordSerde) - every record type and
    # version it parses - byte for byte as our `kafka-rpc dump-log` prints them
    from kafka_rpc.tools.dump_log import dump_files

    copy = tmp_path / "__cluster_metadata-0"

    def copied() -> list[str] | None:
        shutil.rmtree(copy, ignore_errors=True)
        copy.mkdir()
        files = []
        try:
            for p in sorted(meta.iterdir()):
                if p.suffix in (".log", ".checkpoint"):
                    shutil.copy(p, copy / p.name)
                    files.append(str(copy / p.name))
        except FileNotFoundError:  # a segment or snapshot deleted meanwhile: copy them again
            return None
        return files

    files = wait_until(copied, "a copy of our controller's metadata log", timeout=STEP)
    out = peer.run_tool(cluster.version, "kafka-dump-log", "--cluster-metadata-decoder",
                        "--files", ",".join(files), timeout=STEP).stdout  # fmt: skip
    seen = Counter(re.findall(r'"type":"(\w+)","version":(\d+)', out))
    print("metadata records (type, version) Kafka decoded:",
          ", ".join(f"{t} v{v}={n}" for (t, v), n in sorted(seen.items())))  # fmt: skip
    types = {t for t, _ in seen}
    for t in ("FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD", "TOPIC_RECORD",
              "PARTITION_RECORD", "CONFIG_RECORD", "PRODUCER_IDS_RECORD"):  # fmt: skip
        assert t in types, (t, seen)
    assert "Error" not in out and "Exception" not in out, out[-2000:]
    assert any(f.endswith(".checkpoint") for f in files) and "Snapshot end offset: " in out
    mine = io.StringIO()
    assert dump_files(files, metadata_decoder=True, out=mine) == 0
    assert out == mine.getvalue()
