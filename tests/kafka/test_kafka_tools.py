"""Apache Kafka's own command-line tools against a kafka-rpc node and its files.

One node of ours (combined broker and controller, the StandardAuthorizer on with ``User:ANONYMOUS``
as super user, a snapshot after each burst of writes, no NoOpRecords so that the log holds still
between two tools) serves the whole module. Each test runs one of Kafka's tools from the
pinned release's jars and checks what it printed against what our node says through its own
API (DescribeQuorum, Metadata, DescribeAcls) or our own tools (``kafka-rpc topics``,
``kafka-rpc acls``). ``docs/kafka-tools.md`` is the user's side of it.

Kafka's tools run elsewhere too, where a module already has the process they need:
``kafka-dump-log`` on our controller's log and snapshot (byte-equal to ``kafka-rpc dump-log``)
and ``kafka-configs`` with DescribeConfigs compared to a Kafka broker's in
``test_kafka_broker.py``; ``kafka-storage format`` (4.4) / ``info`` with the other side's node
starting on the directory in ``test_storage_interop.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.protocol.record_batch import decode_batches
from kafka_rpc.raft.api import METADATA_TOPIC_NAME
from tests.kafka import peer
from tests.waiting import wait_until

pytestmark = pytest.mark.kafka

TIMEOUT = 60.0
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SNAP_TOPIC = "snap-topic"
_SNAPSHOT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


@dataclass
class Ours:
    node: peer.RpcNode
    cluster_id: str
    broker: str  # host:port of the broker listener
    controller: str  # host:port of the controller listener
    data: Path

    @property
    def metadata_dir(self) -> Path:
        return self.data / f"{METADATA_TOPIC_NAME}-0"


def call(bootstrap: str, msg, version: int | None = None):
    """One request to ``bootstrap`` with our own client (a fresh connection)."""

    async def run():
        async with KafkaRpcClient(bootstrap, request_timeout=TIMEOUT) as c:
            return await c.request(msg, version=version, timeout=TIMEOUT)

    return asyncio.run(run())


def describe_quorum(controller: str):
    m = codec.module("DescribeQuorumRequest")
    topic = m.TopicData(topic_name=METADATA_TOPIC_NAME, partitions=(m.PartitionData(),))
    req = m.DescribeQuorumRequest(topics=(topic,))
    resp = call(controller, req, version=2)
    (p,) = resp.topics[0].partitions
    assert p.error_code == 0, resp
    return resp, p


def create_topic(bootstrap: str, name: str, partitions: int, configs: dict[str, str]) -> None:
    """CreateTopics with our client, retried while the node's broker is not yet unfenced
    (INVALID_REPLICATION_FACTOR); bounded by TIMEOUT."""
    m = codec.module("CreateTopicsRequest")
    topic = m.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1,
        configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
    )  # fmt: skip

    def created() -> bool:
        resp = call(bootstrap, m.CreateTopicsRequest(topics=(topic,), timeout_ms=30_000))
        code = resp.topics[0].error_code
        assert code in (0, 38), resp  # 38: no unfenced broker yet
        return code == 0

    wait_until(created, f"topic {name} created", timeout=TIMEOUT, interval=0.1)


def tool(version: str, name: str, *args: str, **kw):
    return peer.run_tool(version, name, *args, timeout=TIMEOUT, **kw)


@pytest.fixture(scope="module")
def ours(kafka_newest, tmp_path_factory, request):
    work = tmp_path_factory.mktemp("ours")
    bport, cport = peer.free_port(), peer.free_port()
    data = work / "data"
    props = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "listeners": f"PLAINTEXT://127.0.0.1:{bport},CONTROLLER://127.0.0.1:{cport}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "log.dirs": data,
        "authorizer.class.name": AUTHORIZER,
        "super.users": "User:ANONYMOUS",
        "metadata.max.idle.interval.ms": 0,  # no NoOpRecords: the log holds still
        "metadata.log.max.snapshot.interval.ms": 300,  # a snapshot after each burst of writes
    }
    node = peer.RpcNode("ours", work, props)
    failed_before = request.session.testsfailed
    cluster_id = peer.random_cluster_id()
    try:
        # Kafka-compatible at 4.0-IV3: 4.0.2's kafka-metadata-shell (test below) reads only the
        # metadata.version levels, record types and versions 4.0 has (no PartitionRecord v3)
        node.format(cluster_id, "--kafka-compatible", "--release-version", "4.0-IV3")
        node.start()
        node.wait_started(TIMEOUT)
        broker, controller = f"127.0.0.1:{bport}", f"127.0.0.1:{cport}"
        create_topic(broker, SNAP_TOPIC, 3, {"retention.ms": "3600000"})
        wait_for_topic(broker, "__diskless-metadata")  # the controller creates it on its own
        _, p = describe_quorum(controller)
        wait_for_snapshot(data / f"{METADATA_TOPIC_NAME}-0", p.high_watermark)
        yield Ours(node, cluster_id, broker, controller, data)
    finally:
        if request.session.testsfailed > failed_before:
            print(f"\n----- {node.name} log tail -----\n{node.tail()}", file=sys.stderr)
        node.kill()


def wait_for_topic(bootstrap: str, name: str) -> None:
    m = codec.module("MetadataRequest")

    def listed() -> bool:
        return name in {t.name for t in call(bootstrap, m.MetadataRequest(topics=None)).topics}

    wait_until(listed, f"topic {name} in Metadata", timeout=TIMEOUT, interval=0.1)


def snapshots(directory: Path) -> list[tuple[int, int, Path]]:
    out = []
    for f in directory.iterdir():
        m = _SNAPSHOT.match(f.name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), f))
    return sorted(out)


def wait_for_snapshot(directory: Path, end_offset: int) -> Path:
    done = wait_until(lambda: [f for off, _, f in snapshots(directory) if off >= end_offset],
                      f"a snapshot up to {end_offset} in {directory}", timeout=TIMEOUT,
                      interval=0.05)  # fmt: skip
    return done[-1]


# ----------------------------------------------------------------------- kafka-metadata-quorum
def _status(out: str) -> dict[str, str]:
    return dict(re.match(r"(\w+):\s+(.*)$", line).groups() for line in out.splitlines() if line)


def _table(out: str) -> list[dict[str, str]]:
    lines = [line.split("\t") for line in out.splitlines() if line.strip()]
    head = [h.strip() for h in lines[0]]
    return [dict(zip(head, (c.strip() for c in row), strict=False)) for row in lines[1:]]


def test_metadata_quorum_describe_status_and_replication(ours, kafka_newest):
    before_resp, before = describe_quorum(ours.controller)
    status = _status(tool(kafka_newest, "kafka-metadata-quorum", "--bootstrap-controller",
                          ours.controller, "describe", "--status").stdout)  # fmt: skip
    rows = _table(tool(kafka_newest, "kafka-metadata-quorum", "--bootstrap-controller",
                       ours.controller, "describe", "--replication").stdout)  # fmt: skip
    after_resp, after = describe_quorum(ours.controller)
    # no NoOpRecords: nothing was written meanwhile, so the tool saw exactly our numbers
    assert (before.leader_epoch, before.high_watermark) == (
        after.leader_epoch, after.high_watermark)  # fmt: skip
    assert status["ClusterId"] == ours.cluster_id
    assert int(status["LeaderId"]) == before.leader_id == 1
    assert int(status["LeaderEpoch"]) == before.leader_epoch
    assert int(status["HighWatermark"]) == before.high_watermark
    assert (status["MaxFollowerLag"], status["MaxFollowerLagTimeMs"]) == ("0", "0")
    (node,) = before_resp.nodes
    (listener,) = node.listeners
    assert json.loads(status["CurrentVoters"]) == [{
        "id": node.node_id,
        "endpoints": [f"{listener.name}://{listener.host}:{listener.port}"],
    }]  # fmt: skip
    assert f"{listener.host}:{listener.port}" == ours.controller
    assert json.loads(status["CurrentObservers"]) == []
    (row,) = rows
    (voter,) = before.current_voters
    assert row["NodeId"] == str(voter.replica_id)
    assert row["DirectoryId"] == "AAAAAAAAAAAAAAAAAAAAAA"  # kraft.version 0: no directory ids
    assert int(row["LogEndOffset"]) == voter.log_end_offset
    assert voter.log_end_offset == after.current_voters[0].log_end_offset
    assert (row["Lag"], row["Status"]) == ("0", "Leader")
    # the leader reports "now" for itself: between our two answers
    lo, hi = voter.last_fetch_timestamp, after.current_voters[0].last_fetch_timestamp
    assert lo <= int(row["LastFetchTimestamp"]) <= hi
    assert lo <= int(row["LastCaughtUpTimestamp"]) <= hi


# ---------------------------------------------------- kafka-broker-api-versions, kafka-cluster
_API_LINE = re.compile(
    r"^\t(\w+)\((\d+)\): (?:UNSUPPORTED|(\d+)(?: to (\d+))? \[usable: \d+\]|(\d+))"
)


def test_broker_api_versions_lists_what_our_broker_listener_serves(ours, kafka_newest):
    from kafka_rpc.node import handlers_registry

    out = tool(kafka_newest, "kafka-broker-api-versions", "--bootstrap-server", ours.broker).stdout
    assert out.startswith(f"{ours.broker} (id: 1 rack: null isFenced: false) -> (")
    served = {}
    for line in out.splitlines():
        m = _API_LINE.match(line)
        if m and (m.group(3) or m.group(5)):
            lo = int(m.group(3) or m.group(5))
            served[int(m.group(2))] = (lo, int(m.group(4) or lo))
    ours_table = {k: (lo, hi) for k, lo, hi in handlers_registry().api_versions("broker")}
    assert served == ours_table
    # Kafka 4.4's client asks ApiVersions v5 first; our v0-format UNSUPPORTED_VERSION answer
    # makes it retry at v4, and it uses the newest versions both sides have
    assert "\tApiVersions(18): 0 to 4 [usable: 4]," in out
    assert "\tDescribeConfigs(32): 1 to 4 [usable: 4]," in out
    assert "\tDescribeTopicPartitions(75): 0 [usable: 0]," in out


def test_cluster_id(ours, kafka_newest):
    out = tool(kafka_newest, "kafka-cluster", "cluster-id", "--bootstrap-server", ours.broker)
    assert out.stdout.strip() == f"Cluster ID: {ours.cluster_id}"


# ------------------------------------------------------------------------------- kafka-topics
def _describe_fields(out: str) -> dict:
    """Kafka's (and our) ``--describe`` text as {topic: (id, count, rf, configs, partitions)}."""
    topics: dict = {}
    for line in out.splitlines():
        f = dict(kv.split(": ", 1) for kv in line.strip().split("\t") if ": " in kv)
        if line.startswith("Topic:"):
            topics[f["Topic"]] = [f["TopicId"], f["PartitionCount"], f["ReplicationFactor"],
                                  line.split("Configs: ", 1)[1], []]  # fmt: skip
        elif line.startswith("\tTopic:"):
            topics[f["Topic"]][4].append((f["Partition"], f["Leader"], f["Replicas"], f["Isr"]))
    return topics


def test_topics_and_configs_create_describe_alter_delete_list(ours, kafka_newest):
    name = "tools-topic"
    out = tool(kafka_newest, "kafka-topics", "--bootstrap-server", ours.broker, "--create",
               "--topic", name, "--partitions", "3", "--replication-factor", "1", "--config",
               "retention.ms=1000", "--config", "cleanup.policy=compact").stdout  # fmt: skip
    assert out.strip() == f"Created topic {name}."
    kafka = tool(kafka_newest, "kafka-topics", "--bootstrap-server", ours.broker, "--describe",
                 "--topic", name).stdout  # fmt: skip
    mine = ours.node.cli("topics", "--bootstrap-server", ours.broker, "--describe", "--topic",
                         name).stdout  # fmt: skip
    theirs, ours_view = _describe_fields(kafka), _describe_fields(mine)
    assert theirs == ours_view, (kafka, mine)
    tid, count, rf, configs, parts = theirs[name]
    assert (count, rf, configs) == ("3", "1", "cleanup.policy=compact,retention.ms=1000")
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", tid) and tid != "AAAAAAAAAAAAAAAAAAAAAA"
    assert parts == [(str(i), "1", "1", "1") for i in range(3)]
    # Kafka 4.x described it through DescribeTopicPartitions: empty ELR lists ("N/A" when it
    # falls back to Metadata, which has none)
    assert kafka.splitlines()[1].endswith("\tElr: \tLastKnownElr: ")
    # kafka-configs: --alter through IncrementalAlterConfigs, --describe prints the topic's
    # dynamic configs with their synonyms from our DescribeConfigs
    tool(kafka_newest, "kafka-configs", "--bootstrap-server", ours.broker, "--alter",
         "--entity-type", "topics", "--entity-name", name, "--add-config", "retention.ms=2000",
         "--delete-config", "cleanup.policy")  # fmt: skip
    described = tool(kafka_newest, "kafka-configs", "--bootstrap-server", ours.broker,
                     "--describe", "--entity-type", "topics", "--entity-name", name).stdout
    assert described.splitlines() == [
        f"Dynamic configs for topic {name} are:",
        "  retention.ms=2000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=2000}",
    ]  # fmt: skip
    tool(kafka_newest, "kafka-topics", "--bootstrap-server", ours.broker, "--delete", "--topic",
         name)  # fmt: skip
    m = codec.module("MetadataRequest")
    left = call(ours.broker, m.MetadataRequest(topics=None)).topics
    assert name not in {t.name for t in left}
    listed = tool(kafka_newest, "kafka-topics", "--bootstrap-server", ours.broker, "--list")
    assert set(listed.stdout.split()) == {t.name for t in left} >= {SNAP_TOPIC,
                                                                   "__diskless-metadata"}


# --------------------------------------------------------------------------------- kafka-acls
def test_acls_add_list_remove(ours, kafka_newest):
    topic = "acl-topic"
    common = ("--bootstrap-server", ours.broker)
    added = tool(kafka_newest, "kafka-acls", *common, "--add", "--allow-principal",
                 "User:alice", "--operation", "Read", "--operation", "Write", "--topic",
                 topic).stdout  # fmt: skip
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    assert f"Adding ACLs for resource `{pattern}`" in added
    listed = tool(kafka_newest, "kafka-acls", *common, "--list", "--topic", topic).stdout
    mine = ours.node.cli("acls", *common, "--list", "--topic", topic).stdout

    def entries(text):
        return sorted(line.strip() for line in text.splitlines() if line.startswith("\t"))

    assert entries(listed) == entries(mine) == [
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)",
    ]
    tool(kafka_newest, "kafka-acls", *common, "--remove", "--force", "--allow-principal",
         "User:alice", "--operation", "Read", "--topic", topic)  # fmt: skip
    m = codec.module("DescribeAclsRequest")
    left = call(ours.broker, m.DescribeAclsRequest(
        resource_type_filter=2, resource_name_filter=topic, pattern_type_filter=3,
        principal_filter=None, host_filter=None, operation=1, permission_type=1))  # fmt: skip
    assert [(a.principal, a.operation) for r in left.resources for a in r.acls] == [
        ("User:alice", 4)]  # WRITE  # fmt: skip


def _copy(files: list[Path], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for f in files:
        shutil.copy(f, dest / f.name)
        out.append(dest / f.name)
    return out


# ---------------------------------------------------------------------- kafka-metadata-shell
def _shell(version: str, snapshot: Path, *command: str, loaded: str) -> str:
    """kafka-metadata-shell ``command`` on ``snapshot``, run again (at most twice more, 30 s
    each) while its output lacks ``loaded`` or it does not exit. Kafka's shell races with
    itself: ``SnapshotFileReader`` exposes its high watermark only in its shutdown event, after
    the last batch, and ``MetadataLoader`` publishes an image only at a commit it handles once
    that high watermark is known; the command runs after ``waitUntilCaughtUp`` (an applied
    offset > 0). A commit handled first never publishes and the shell waits forever. On this
    loaded machine about one run in five printed no image or never exited, on a file another
    run read fully (a Kafka-written snapshot of one records batch has the same layout)."""
    out = ""
    for _ in range(3):
        try:
            out = peer.run_tool(version, "kafka-metadata-shell", "--snapshot", str(snapshot),
                                *command, timeout=30).stdout  # fmt: skip
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            continue
        if loaded in out:
            break
    return out


def test_metadata_shell_reads_a_copy_of_our_snapshot(ours, kafka_oldest, tmp_path):
    # kafka-shell is not published for 4.4.0 and 4.3.1's shell does not start on 4.4.0's jars
    # (NoClassDefFoundError kafka/tools/TerseFailure): the oldest pinned release's shell runs
    (_, _, latest) = snapshots(ours.metadata_dir)[-1]
    # on the live directory it refuses: our node holds <log dir>/.lock as Kafka does
    locked = tool(kafka_oldest, "kafka-metadata-shell", "--snapshot", str(latest), "ls", "/",
                  check=False)  # fmt: skip
    assert locked.returncode != 0
    assert f"Unable to lock {ours.data}" in locked.stdout + locked.stderr
    (copy,) = _copy([latest], tmp_path / f"{METADATA_TOPIC_NAME}-0")
    names = _shell(kafka_oldest, copy, "ls", "/image/topics/byName", loaded=SNAP_TOPIC).split()
    # our image at the snapshot: read back from the same file with our reader
    image_topics, partitions = {}, {}
    for b in decode_batches(copy.read_bytes()):
        if b.is_control:
            continue
        for value in b.records:
            msg, _ = codec.decode_record(value)
            kind = type(msg).__spec_name__
            if kind == "TopicRecord":
                image_topics[msg.topic_id] = msg.name
            elif kind == "PartitionRecord":
                partitions[(image_topics[msg.topic_id], msg.partition_id)] = msg
    assert sorted(names) == sorted(image_topics.values())
    assert SNAP_TOPIC in names
    tree = _shell(kafka_oldest, copy, "tree", f"/image/topics/byName/{SNAP_TOPIC}",
                  loaded="PartitionRegistration(")  # fmt: skip
    shown = dict(re.findall(r"^(\d+):\n\s+PartitionRegistration\((.*)\)$", tree, re.M))
    assert sorted(shown) == ["0", "1", "2"], tree
    for index, text in shown.items():
        p = partitions[(SNAP_TOPIC, int(index))]
        fields = dict(re.findall(r"(\w+)=(\[[^\]]*\]|[^,]+)", text))
        assert fields["replicas"] == str(list(p.replicas)).replace(" ", "")
        assert fields["isr"] == str(list(p.isr)).replace(" ", "")
        assert int(fields["leader"]) == p.leader
        assert int(fields["leaderEpoch"]) == p.leader_epoch
        assert int(fields["partitionEpoch"]) == p.partition_epoch


# ------------------------------------------------------------------------------ kafka-storage
def _props(work: Path, bport: int, cport: int) -> dict:
    return {
        "process.roles": "broker,controller",
        "node.id": 1,
        "listeners": f"PLAINTEXT://127.0.0.1:{bport},CONTROLLER://127.0.0.1:{cport}",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "log.dirs": work / "data",
    }


def _meta(data: Path) -> dict[str, str]:
    lines = (data / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_our_node_starts_on_a_directory_kafka_4_0_storage_formatted(kafka_oldest, tmp_path,
                                                                     procs):  # fmt: skip
    # 4.0 writes the bootstrap metadata as bootstrap.checkpoint in the directory root (4.4 as
    # the snapshot 0-0 in __cluster_metadata-0: tests/kafka/test_storage_interop.py starts our
    # node on that): our node starts on it, as it is
    bport, cport = peer.free_port(), peer.free_port()
    node = peer.RpcNode("ours", tmp_path, _props(tmp_path, bport, cport))
    cid = peer.random_cluster_id()
    tool(kafka_oldest, "kafka-storage", "format", "-t", cid, "-c", str(node.properties_path))
    data = tmp_path / "data"
    assert (data / "bootstrap.checkpoint").is_file()
    meta = _meta(data)
    assert (meta["version"], meta["cluster.id"], meta["node.id"]) == ("1", cid, "1")
    procs.append(node)
    node.start()
    node.wait_started(TIMEOUT)
    assert f"cluster id {cid}, node id 1," in node.log_text()
    assert _meta(data) == meta  # Kafka's directory.id kept as it is
    _, p = describe_quorum(f"127.0.0.1:{cport}")
    assert p.leader_id == 1
