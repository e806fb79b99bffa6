"""``kafka-rpc topics`` (Kafka's kafka-topics.sh): argument checks and output with a fake
client, and end to end against a single-node ``kafka-rpc serve``."""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import uuid

import pytest

from kafka_rpc.protocol import codec
from kafka_rpc.protocol.errors import ErrorCode, KafkaError
from kafka_rpc.tools.topics import add_arguments, run

CT = codec.module("CreateTopicsResponse")
DT = codec.module("DeleteTopicsResponse")
MD = codec.module("MetadataResponse")
TID = uuid.UUID("6f0e8e2f-6bb4-4c57-9b5e-2f1a3c1f9a10")
TID_TEXT = "bw6OL2u0TFebXi8aPB-aEA"


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--bootstrap-server", "h:1", *argv])


class FakeClient:
    def __init__(self, *responses, delete_version=6, describe_configs=False):
        self.responses = list(responses)
        self.requests = []
        self.delete_version = delete_version
        self.describe_configs = describe_configs
        self.closed = False
        self.bootstrap = None

    def version_for(self, key):
        if key == 32 and not self.describe_configs:  # as a server without DescribeConfigs
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "not served")
        return self.delete_version if key == 20 else 99

    async def request(self, msg, timeout=None):
        self.requests.append(msg)
        return self.responses.pop(0)

    async def close(self):
        self.closed = True


async def go(client, *argv):
    out, err = io.StringIO(), io.StringIO()

    async def connect(bootstrap, **kw):
        client.bootstrap = bootstrap
        return client

    rc = await run(parse(*argv), connect=connect, out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def created(name="t1", code=0, message=None):
    return CT.MESSAGE(topics=(CT.CreatableTopicResult(name=name, error_code=code,
                                                      error_message=message),))  # fmt: skip


def partition(i, leader=1, replicas=(1,), isr=(1,), offline=()):
    return MD.MetadataResponsePartition(
        partition_index=i, leader_id=leader, replica_nodes=replicas, isr_nodes=isr,
        offline_replicas=offline,
    )  # fmt: skip


def metadata(*topics):
    return MD.MESSAGE(topics=tuple(topics))


def mtopic(name, parts=(), code=0, tid=TID):
    return MD.MetadataResponseTopic(name=name, topic_id=tid, partitions=tuple(parts),
                                    error_code=code)  # fmt: skip


# ----------------------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    "argv, message",
    [
        ((), "Command must include exactly one action"),
        (("--list", "--describe"), "Command must include exactly one action"),
        (("--create",), 'Missing required argument "[topic]"'),
        (("--delete",), 'Missing required argument "[topic]"'),
        (("--list", "--partitions", "3"), '"--partitions" can only be used with "--create"'),
        (("--describe", "--config", "a=b"), '"--config" can only be used with "--create"'),
        (("--alter", "--partitions", "3"), 'Missing required argument "[topic]"'),
        (("--alter", "--topic", "t"), 'Missing required argument "[partitions]"'),
        (("--alter", "--topic", "t", "--partitions", "3", "--config", "a=b"),
         'Option "[config]" can\'t be used with option "[alter]"'),
        (("--list", "--replica-assignment", "1:2"),
         '"--replica-assignment" can only be used with "--create"'),
    ],
)
async def test_usage_errors_exit_1_without_connecting(argv, message):
    client = FakeClient()
    rc, out, err = await go(client, *argv)
    assert rc == 1 and out == ""
    assert message in err
    assert client.bootstrap is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--partitions", "0"), "The partitions must be greater than 0"),
        (("--replication-factor", "0"), "The replication factor must be between 1 and 32767"),
        (("--config", "novalue"), "Invalid topic config: all configs to be added must be"),
    ],
)
async def test_create_argument_values(argv, message):
    client = FakeClient()
    rc, out, _ = await go(client, "--create", "--topic", "t1", *argv)
    assert rc == 1
    assert out.startswith(f"Error while executing topic command : {message}")
    assert client.requests == [] and client.closed


# ----------------------------------------------------------------------------- alter
CP = codec.module("CreatePartitionsResponse")


def grown(name="t1", code=0, message=None):
    return CP.MESSAGE(results=(CP.CreatePartitionsTopicResult(name=name, error_code=code,
                                                              error_message=message),))  # fmt: skip


async def test_alter_sends_create_partitions_with_the_new_partitions_assignments():
    client = FakeClient(metadata(mtopic("t1", [partition(0), partition(1)])), grown())
    rc, out, err = await go(client, "--alter", "--topic", "t1", "--partitions", "4",
                            "--replica-assignment", "1:2,2:3,3:1,1:3")  # fmt: skip
    assert (rc, out, err) == (0, "", "")
    md, req = client.requests
    assert [t.name for t in md.topics] == ["t1"]
    assert type(req).__spec_name__ == "CreatePartitionsRequest" and not req.validate_only
    (t,) = req.topics
    assert (t.name, t.count) == ("t1", 4)
    assert [a.broker_ids for a in t.assignments] == [(3, 1), (1, 3)]  # the existing two skipped


async def test_alter_errors_as_kafka_prints_them():
    client = FakeClient(metadata(mtopic("t1", [partition(0)])),
                        grown(code=ErrorCode.INVALID_PARTITIONS, message="Topic already has 1 "
                              "partition(s)."))  # fmt: skip
    rc, out, _ = await go(client, "--alter", "--topic", "t1", "--partitions", "1")
    assert (rc, out) == (1, "Error while executing topic command : Topic already has 1 "
                            "partition(s).\n")  # fmt: skip
    client = FakeClient(metadata(mtopic("nope", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
    rc, out, _ = await go(client, "--alter", "--topic", "nope", "--partitions", "2")
    assert (rc, out) == (1, "Error while executing topic command : Topic 'nope' does not exist "
                            "as expected\n")  # fmt: skip
    client = FakeClient(metadata(mtopic("nope", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
    rc, out, _ = await go(client, "--alter", "--topic", "nope", "--partitions", "2", "--if-exists")
    assert (rc, out) == (0, "") and len(client.requests) == 1
    client = FakeClient(metadata(mtopic("t1", [partition(0)])))
    rc, out, _ = await go(client, "--alter", "--topic", "t1", "--partitions", "3",
                          "--replica-assignment", "1:1,2")  # fmt: skip
    assert (rc, out) == (1, "Error while executing topic command : Partition replica lists may "
                            "not contain duplicate entries: 1, 1\n")  # fmt: skip


# ----------------------------------------------------------------------------- create
async def test_create_sends_create_topics_and_prints_created():
    client = FakeClient(created())
    rc, out, _ = await go(client, "--create", "--topic", "t1", "--partitions", "3",
                          "--replication-factor", "1", "--config", "retention.ms=1000",
                          "--config", "cleanup.policy=compact")  # fmt: skip
    assert (rc, out) == (0, "Created topic t1.\n")
    (req,) = client.requests
    assert type(req).__spec_name__ == "CreateTopicsRequest"
    (t,) = req.topics
    assert (t.name, t.num_partitions, t.replication_factor) == ("t1", 3, 1)
    assert [(c.name, c.value) for c in t.configs] == [
        ("retention.ms", "1000"),
        ("cleanup.policy", "compact"),
    ]
    assert client.bootstrap == "h:1" and client.closed


async def test_create_defaults_to_the_brokers_defaults():
    client = FakeClient(created())
    await go(client, "--create", "--topic", "t1")
    (t,) = client.requests[0].topics
    assert (t.num_partitions, t.replication_factor) == (-1, -1)


async def test_create_warns_about_collision_chars():
    client = FakeClient(created("a.b"))
    rc, out, _ = await go(client, "--create", "--topic", "a.b")
    assert rc == 0
    assert out.splitlines() == [
        "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore "
        "('_') could collide. To avoid issues it is best to use either, but not both.",
        "Created topic a.b.",
    ]


async def test_create_existing_topic():
    msg = "Topic 't1' already exists."
    rc, out, _ = await go(FakeClient(created(code=36, message=msg)), "--create", "--topic", "t1")
    assert (rc, out) == (1, f"Error while executing topic command : {msg}\n")
    rc, out, _ = await go(FakeClient(created(code=36)), "--create", "--topic", "t1")
    assert out == "Error while executing topic command : Topic with this name already exists.\n"
    rc, out, _ = await go(
        FakeClient(created(code=36)), "--create", "--topic", "t1", "--if-not-exists"
    )
    assert (rc, out) == (0, "")


async def test_connection_failure():
    async def connect(bootstrap, **kw):
        raise ConnectionError("cannot connect to h:1")

    out = io.StringIO()
    rc = await run(parse("--list"), connect=connect, out=out, err=io.StringIO())
    assert rc == 1
    assert out.getvalue() == "Error while executing topic command : cannot connect to h:1\n"


# ----------------------------------------------------------------------------- delete
async def test_delete_by_name_at_v6_and_by_topic_names_below():
    ok = DT.MESSAGE(responses=(DT.DeletableTopicResult(name="t1", error_code=0),))
    client = FakeClient(ok)
    assert await go(client, "--delete", "--topic", "t1") == (0, "", "")
    assert [s.name for s in client.requests[0].topics] == ["t1"]
    client = FakeClient(ok, delete_version=5)
    assert (await go(client, "--delete", "--topic", "t1"))[0] == 0
    assert client.requests[0].topic_names == ("t1",)


async def test_delete_unknown_topic():
    unknown = DT.MESSAGE(responses=(DT.DeletableTopicResult(name="t1", error_code=3),))
    rc, out, _ = await go(FakeClient(unknown), "--delete", "--topic", "t1")
    assert (rc, out) == (1, "Error while executing topic command : Topic 't1' does not exist "
                            "as expected\n")  # fmt: skip
    rc, out, _ = await go(FakeClient(unknown), "--delete", "--topic", "t1", "--if-exists")
    assert (rc, out) == (0, "")


# ----------------------------------------------------------------------------- list, describe
async def test_list_sorted_one_per_line():
    client = FakeClient(metadata(mtopic("b"), mtopic("a"), mtopic("_c")))
    rc, out, _ = await go(client, "--list")
    assert (rc, out) == (0, "_c\na\nb\n")
    assert client.requests[0].topics is None  # all topics
    assert client.requests[0].allow_auto_topic_creation is False


async def test_exclude_internal_leaves_out_internal_topics():
    internal = MD.MetadataResponseTopic(name="__diskless-metadata", topic_id=TID, is_internal=True)
    rc, out, _ = await go(FakeClient(metadata(mtopic("b"), internal)), "--list")
    assert (rc, out) == (0, "__diskless-metadata\nb\n")
    rc, out, _ = await go(FakeClient(metadata(mtopic("b"), internal)), "--list",
                          "--exclude-internal")  # fmt: skip
    assert (rc, out) == (0, "b\n")
    rc, out, _ = await go(FakeClient(metadata(internal)), "--describe", "--exclude-internal")
    assert (rc, out) == (0, "")


async def test_describe_layout():
    t = mtopic("t1", [partition(1, leader=2, replicas=(2, 1), isr=(2,)),
                      partition(0, replicas=(1, 2), isr=(1, 2)),
                      partition(2, leader=-1, replicas=(3, 1), isr=(), offline=(3,))])  # fmt: skip
    client = FakeClient(metadata(t))
    rc, out, _ = await go(client, "--describe", "--topic", "t1")
    assert rc == 0
    assert out.split("\n") == [
        f"Topic: t1\tTopicId: {TID_TEXT}\tPartitionCount: 3\tReplicationFactor: 2\tConfigs: ",
        "\tTopic: t1\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1,2",
        "\tTopic: t1\tPartition: 1\tLeader: 2\tReplicas: 2,1\tIsr: 2",
        "\tTopic: t1\tPartition: 2\tLeader: none\tReplicas: 3,1\tIsr: \tOffline: 3",
        "",
    ]
    assert [x.name for x in client.requests[0].topics] == ["t1"]


async def test_describe_shows_the_non_default_configs_from_describe_configs():
    DC = codec.module("DescribeConfigsResponse")

    def entry(name, value, source):
        return DC.DescribeConfigsResourceResult(name=name, value=value, config_source=source)

    entries = (
        entry("segment.ms", "604800000", 5),
        entry("retention.ms", "1000", 1),
        entry("cleanup.policy", "compact", 1),
        entry("retention.bytes", "-1", 4),
    )
    configs = DC.DescribeConfigsResponse(results=(DC.DescribeConfigsResult(
        resource_type=2, resource_name="t1", configs=entries),))  # fmt: skip
    client = FakeClient(metadata(mtopic("t1", [partition(0)])), configs, describe_configs=True)
    rc, out, _ = await go(client, "--describe", "--topic", "t1")
    assert rc == 0
    assert out.splitlines()[0].endswith(
        "\tConfigs: cleanup.policy=compact,retention.bytes=-1,retention.ms=1000"
    )
    (res,) = client.requests[1].resources
    assert (res.resource_type, res.resource_name, res.configuration_keys) == (2, "t1", None)
    # an error for the topic's configs is the command's error, as Kafka's TopicCommand
    err = DC.DescribeConfigsResponse(results=(DC.DescribeConfigsResult(
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, error_message="Topic authorization "
        "failed.", resource_type=2, resource_name="t1"),))  # fmt: skip
    client = FakeClient(metadata(mtopic("t1", [partition(0)])), err, describe_configs=True)
    rc, out, _ = await go(client, "--describe", "--topic", "t1")
    assert rc == 1 and "Topic authorization failed." in out


async def test_describe_shows_chunks():
    chunk = MD.MetadataResponseChunk(start_offset=0, stop_offset=100, end_offset=100,
                                     replica_nodes=(2, 3), isr_nodes=(2,))  # fmt: skip
    p = MD.MetadataResponsePartition(partition_index=0, leader_id=1, replica_nodes=(1,),
                                     isr_nodes=(1,), start_offset=100, chunks=(chunk,))  # fmt: skip
    rc, out, _ = await go(FakeClient(metadata(mtopic("t1", [p]))), "--describe")
    assert rc == 0
    assert out.splitlines()[1:] == [
        "\tTopic: t1\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\tStartOffset: 100",
        "\t\tChunk: StartOffset: 0\tStopOffset: 100\tEndOffset: 100\tReplicas: 2,3\tIsr: 2",
    ]


async def test_describe_all_topics_sorted():
    client = FakeClient(metadata(mtopic("b", [partition(0)]), mtopic("a", [partition(0)])))
    rc, out, _ = await go(client, "--describe")
    assert rc == 0
    assert [ln.split("\t")[0] for ln in out.splitlines() if ln.startswith("Topic")] == [
        "Topic: a",
        "Topic: b",
    ]


async def test_describe_unknown_topic():
    client = FakeClient(metadata(mtopic("nope", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)))
    rc, out, _ = await go(client, "--describe", "--topic", "nope")
    assert (rc, out) == (1, "Error while executing topic command : Topic 'nope' does not exist "
                            "as expected\n")  # fmt: skip


# ----------------------------------------------------------------------------- end to end
def topics(bootstrap, *argv):
    return subprocess.run(
        [sys.executable, "-m", "kafka_rpc.cli", "topics", "--bootstrap-server", bootstrap,
         "--timeout", "10", *argv],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.integration
def test_end_to_end_against_a_single_node_server(tmp_path):
    from tests.integration.conftest import wait_broker_unfenced
    from tests.integration.test_cli import ServeProcess

    srv = ServeProcess(tmp_path)
    try:
        wait_broker_unfenced(srv.bootstrap)
        r = topics(srv.bootstrap, "--create", "--topic", "orders", "--partitions", "3",
                   "--replication-factor", "1")  # fmt: skip
        assert (r.returncode, r.stdout) == (0, "Created topic orders.\n"), r.stderr
        r = topics(srv.bootstrap, "--create", "--topic", "audit")
        assert r.returncode == 0, r.stdout + r.stderr
        r = topics(srv.bootstrap, "--create", "--topic", "orders")
        assert r.returncode == 1
        assert r.stdout.startswith("Error while executing topic command : ")
        assert topics(srv.bootstrap, "--create", "--topic", "orders", "--if-not-exists"
                      ).returncode == 0  # fmt: skip
        r = topics(srv.bootstrap, "--list")
        assert r.returncode == 0
        assert [n for n in r.stdout.splitlines() if not n.startswith("__")] == ["audit", "orders"]
        # the controller's internal __diskless-metadata (once created) only without the option
        r = topics(srv.bootstrap, "--list", "--exclude-internal")
        assert (r.returncode, r.stdout) == (0, "audit\norders\n"), r.stderr
        r = topics(srv.bootstrap, "--describe", "--topic", "orders")
        assert r.returncode == 0, r.stdout + r.stderr
        lines = r.stdout.splitlines()
        m = re.fullmatch(r"Topic: orders\tTopicId: ([A-Za-z0-9_-]{22})\tPartitionCount: 3\t"
                         r"ReplicationFactor: 1\tConfigs: ", lines[0])  # fmt: skip
        assert m, lines
        assert m.group(1) != "AAAAAAAAAAAAAAAAAAAAAA"
        assert lines[1:] == [
            f"\tTopic: orders\tPartition: {i}\tLeader: 1\tReplicas: 1\tIsr: 1" for i in range(3)
        ]
        r = topics(srv.bootstrap, "--delete", "--topic", "orders")
        assert (r.returncode, r.stdout) == (0, ""), r.stderr
        r = topics(srv.bootstrap, "--list")
        assert "orders" not in r.stdout.splitlines()
        r = topics(srv.bootstrap, "--describe", "--topic", "orders")
        assert r.returncode == 1
        assert "Topic 'orders' does not exist as expected" in r.stdout
        r = topics(srv.bootstrap, "--delete", "--topic", "orders")
        assert r.returncode == 1
        assert topics(srv.bootstrap, "--delete", "--topic", "orders", "--if-exists"
                      ).returncode == 0  # fmt: skip
    finally:
        srv.stop()
